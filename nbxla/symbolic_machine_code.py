"""Machine code an automatic-mode symbolic compile takes from the static compile before it.

In the automatic mode (``nbxla.jit(dynamic=None)``) a function's second size compiles it for
every size, right after a static compile of the first size.  The symbolic program's first
probe takes the static compile's instruction names, so its kernels are the same LLVM IR text
as the static compile's wherever they are the same code; such a kernel's machine code is the
static compile's, and LLVM need not run for it again (LLVM is most of a small program's
compile time).  Kernels whose code differs -- a column reduction reads its row count at run
time, a size-1 dimension other than the leading one is dropped from the static compile's index
arithmetic (the leading one is not: ``codegen.elemental.leading_unit_dims``) -- are compiled,
alone.

Why kernel by kernel, not the whole module or nothing: in an MLP training step one column
reduction (the bias gradient) differed at size 1 and the five elementwise kernels did not;
all or nothing compiled all six again, and the sweep over 40 sizes took 3.1-3.4x one static
compile (``benchmarks/dynamic_shapes.py``).
"""

from __future__ import annotations

import re
from dataclasses import replace

from .codegen.cpu import CompiledKernels, EmittedKernels, compile_kernels
from .runtime.cpu_executable import ARRAY_DATA_OFFSET, kernel_computations

_DATALAYOUT = re.compile(r'^target datalayout = .*$', re.M)
_DEFINED = re.compile(r'^define\b[^@]*@"?([^"(\s]+)"?\(')


def without_datalayout(text: str) -> str:
    return _DATALAYOUT.sub("", text)


def split_functions(text: str) -> tuple[list[str], dict[str, str]]:
    """(the module's lines outside function definitions, each defined function's text by name).
    Why the other lines too: a kernel taken from another module uses that module's globals and
    declarations, which must be this one's."""
    outside: list[str] = []
    functions: dict[str, str] = {}
    current: list[str] | None = None
    name = ""
    for line in without_datalayout(text).splitlines():
        if current is None:
            found = _DEFINED.match(line)
            if found is None:
                outside.append(line)
                continue
            name, current = found.group(1), []
        current.append(line)
        if line == "}":
            functions[name] = "\n".join(current)
            current = None
    if current is not None:                 # (not text as llvmlite prints it: compare nothing)
        raise ValueError("unterminated function definition")
    return outside, functions


def _group(spec, name: str) -> list[str]:
    """The functions one kernel is: its body, its array-object entry, its finishing step."""
    return [name] + [extra for extra in (spec.object_entry, spec.finish_name) if extra]


def earlier_light(earlier) -> frozenset:
    """The kernels the earlier compile compiled light (``codegen.cpu.light_kernel``): the
    symbolic program's first probe, which takes the earlier compile's names, emits these light
    too.  Why: its kernels are then the very IR the earlier compile compiled wherever they are
    the same code (their machine code serves), and are emitted once, not a second time to be
    compared; a kernel that differs (a column sum that reads its row count at run time) is
    compiled light as well -- its loops are not unrolled, which LLVM's time on the symbolic
    compile (the second size's) is most of, and which buys nothing at the sizes seen so far."""
    native = getattr(earlier.executable, "native", None)
    kernels = getattr(native, "kernels", None)
    return frozenset(getattr(kernels, "light", ()) or ())


def earlier_machine_code(emitted: EmittedKernels, earlier, probe_module):
    """(``CompiledKernels`` for ``emitted``'s kernels, the kernel symbol of each instruction)
    reusing the earlier compile's machine code for every kernel whose functions are the very
    LLVM IR it compiled, compiling the others alone; None when nothing can be reused (no
    earlier kernels, loops compiled natively there, refusals, other globals or declarations).
    ``emitted``: the symbolic program's first probe's kernels (``probe_module``), emitted as
    the earlier compile emitted them (its light kernels light: ``earlier_light``)."""
    native = getattr(earlier.executable, "native", None)
    kernels = getattr(native, "kernels", None)
    if kernels is None or emitted.unsupported or kernels.unsupported or native.loops:
        return None
    if without_datalayout(emitted.text) == without_datalayout(kernels.llvm_ir):
        return replace(kernels, specs=dict(emitted.specs)), dict(native.kernel_symbols)
    try:
        outside_now, now = split_functions(emitted.text)
        outside_then, then = split_functions(kernels.llvm_ir)
    except ValueError:
        return None
    if outside_now != outside_then:
        return None
    same, other = [], []
    for name, spec in emitted.specs.items():
        group = _group(spec, name)
        reusable = name in kernels.addresses and all(
            f in now and now[f] == then.get(f) and f in kernels.addresses for f in group)
        (same if reusable else other).append(name)
    if not same:
        return None
    distinct, compiled = kernel_computations(probe_module)
    symbols = {i.name: symbol for symbol, i in compiled}
    if not other:
        return replace(kernels, specs=dict(emitted.specs)), symbols
    fresh = _compile_alone(probe_module.name, emitted, now, outside_now, other, distinct)
    if fresh is None:
        return None
    addresses = {}
    for name in same:
        for f in _group(emitted.specs[name], name):
            addresses[f] = kernels.addresses[f]
    addresses.update(fresh.addresses)
    merged = CompiledKernels(dict(emitted.specs), addresses, emitted.text,
                             fresh.llvm_ir_optimized, {}, fresh.engine)
    # (both engines' code stays alive as long as the kernels do)
    merged.engines = [kernels.engine, *kernels.engines, fresh.engine]
    merged.light = frozenset(kernels.light) & frozenset(same)
    return merged, symbols


def _compile_alone(name: str, emitted: EmittedKernels, functions: dict[str, str], outside: list[str],
                   kernels: list[str], distinct) -> CompiledKernels | None:
    """Machine code of ``kernels`` alone (a module of their functions and the module's globals
    and declarations), or None when LLVM refuses it (a function that calls one left out)."""
    keep = [f for k in kernels for f in _group(emitted.specs[k], k)]
    if any(f not in functions for f in keep):
        return None
    text = "\n".join(outside + [functions[f] for f in keep]) + "\n"
    specs = {k: emitted.specs[k] for k in kernels}
    fusions = [(symbol, comp) for symbol, comp in distinct if symbol in specs]
    try:
        fresh = compile_kernels(name, fusions, None, None, ARRAY_DATA_OFFSET, EmittedKernels(text, specs, {}))
    except Exception:       # (the whole module is compiled instead: never a wrong kernel)
        return None
    if fresh.unsupported or any(k not in fresh.addresses for k in keep):
        return None
    return fresh
