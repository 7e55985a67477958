"""``nbxla.aot``: compile a NumPy function ahead of time into ``NAME.o`` + ``NAME.h`` (tfcompile).

    import nbxla.aot
    nbxla.aot.compile(predict, ["f32[16,64]", "f32[64,10]", "f32[10]"], "build", "predict")

then, in C, ``#include "predict.h"`` and ``cc main.c build/predict.o -lm -lpthread``.  The
function is traced for the given argument specs (HLO's spelling, ``f32[16,784]``, ``s64[]``,
``pred[3]``; or NumPy arrays, whose shape and dtype are taken), optimized like ``jit`` does,
and compiled by ``codegen.aot`` into one self-contained object: no Python, llvmlite or nbxla
at run time.  An ``HloModule`` (or a path to HLO text) compiles its entry computation the same
way.  Python loops over traced values become HLO ``while`` loops (as under jit), and the object
runs them as C loops over the condition's and body's functions; how each opcode runs in the
object (a kernel, an ``aot_runtime.c`` routine, control, or a refusal with its reason) is the AOT
table of ``hlo/placement.py``.

Results are the function's array results, flattened in order; arguments it writes into
(``x[...] = ...``) come after them, as under jit's write-back.  Non-array results (Python
constants) are not part of the C signature.  What has no native implementation (an op that
runs through the reference evaluator under jit) is refused with an ``AotError`` naming the
instruction and its source line.
"""

from __future__ import annotations

import inspect
import re
from typing import Callable, Sequence

import numpy as np

from .codegen.aot import C_KEYWORDS, AotObject, compile_object, compile_symbolic_object
from .codegen.aot_symbolic import symbols_in
from .errors import AotError
from .frontend.autograph import convert_function
from .frontend.cell_ast import check_function_no_random
from .frontend.trace import trace, tree_flatten
from .hlo import Module
from .hlo.parser import parse_hlo
from .hlo.shapes import ELEMENT_TYPES, Shape, SymDim, SymbolicDimensionError, from_numpy_dtype, is_symbolic, \
    to_numpy_dtype
from .hlo.symbolic import bind_module, second_probe
from .symbolic_compile import compile_symbolic, mark_unknown_axes
from .passes import optimize
from .runtime.cpu_kernels import PARALLEL_THRESHOLD

__all__ = ["compile", "parse_spec", "AotObject", "AotError"]

_SPEC = re.compile(r"\s*([a-z0-9]+)\[([0-9a-zA-Z_,?\s]*)\]\s*")
# ``?`` is the unknown size ``b``; ``?name`` another one (``f32[?m,?n]``): the same name, the same size
_UNKNOWN = re.compile(r"\?([a-z][a-z0-9_]*)?")


def parse_spec(spec) -> Shape:
    """``"f32[16,784]"`` (or an array, or anything with ``shape`` and ``dtype``) as a Shape."""
    if hasattr(spec, "shape") and hasattr(spec, "dtype"):
        return Shape(from_numpy_dtype(np.dtype(spec.dtype)), tuple(spec.shape))
    m = _SPEC.fullmatch(str(spec))
    if not m or m.group(1) not in ELEMENT_TYPES:
        raise AotError(f"argument spec {spec!r} is not an array type in HLO's spelling: write an element "
                       f"type ({', '.join(ELEMENT_TYPES)}) and dimensions, e.g. f32[16,784] or s64[]")
    # (``?``: the unknown size ``b``, given when the function is called: ``f32[?,784]``;
    # ``?n``: the unknown size ``n``, ``f32[?m,?n]``)
    dims = []
    for d in (d for d in m.group(2).replace(" ", "").split(",") if d):
        unknown = _UNKNOWN.fullmatch(d)
        if unknown:
            dims.append(SymDim(unknown.group(1) or "b"))
        elif d.isdigit():
            dims.append(int(d))
        else:
            raise AotError(f"argument spec {spec!r}: the dimension {d!r} is neither a size nor an unknown "
                           "size (? for b, or ?name with a lower-case name, e.g. f32[?m,?n])")
    dims = tuple(dims)
    if to_numpy_dtype(m.group(1)) is None:
        raise AotError(f"argument spec {spec!r}: NumPy has no {m.group(1)} arrays to trace with")
    return Shape(m.group(1), dims)


def _describe(fn: Callable, specs: list[Shape], names: list[str], results: str) -> str:
    where = ""
    try:
        source = inspect.getsource(fn)
        where = f"{inspect.getsourcefile(fn)}:{inspect.getsourcelines(fn)[1]}"
    except (OSError, TypeError):
        source = ""
    lines = [f"from {getattr(fn, '__qualname__', fn)}" + (f" ({where})" if where else "")]
    source_lines = source.rstrip().splitlines()
    lines += ["    " + line for line in source_lines[:40]]
    if len(source_lines) > 40:
        lines.append(f"    ... ({len(source_lines) - 40} more lines)")
    lines += [f"arg{k} = {n}: {s.to_text(False)}" for k, (n, s) in enumerate(zip(names, specs))]
    lines.append(results)
    return "\n".join(lines)


def _trace(fn: Callable, specs: Sequence) -> tuple[Module, str]:
    shapes = [parse_spec(s) for s in specs]
    check_function_no_random(fn)
    # Zeros stand in for the arguments (only their shapes and dtypes are read; np.zeros
    # does not touch the pages of a large array).
    args = [np.zeros(s.dims, s.dtype) for s in shapes]
    leaves, treedef = tree_flatten((tuple(args), {}))
    try:
        names = list(inspect.signature(fn).parameters)[:len(args)]
    except (TypeError, ValueError):
        names = []
    names += [f"args[{k}]" for k in range(len(names), len(args))]
    name = getattr(fn, "__name__", "fn")
    # (Converted as under jit: Python loops over traced values stay HLO while loops.)
    program = trace(convert_function(fn), leaves, treedef, name=name if name.isidentifier() else "fn",
                    leaf_names=names)
    if any(kind == "selection" for kind, _ in program.out_slots):
        raise AotError(f"{name} returns x[mask] with a traced mask: its length depends on the data, and an "
                       "ahead-of-time result has a fixed size. Return np.where(mask, x, fill) (and the mask)")
    outs = [f"result{k}" for kind, k in program.out_slots if kind == "out"]
    if not outs and not program.writebacks:
        raise AotError(f"{name} returns no array computed from its arguments; there is nothing to compile")
    wrote = [f"result{k} = the new value of {names[program.param_leaves.index(i)]}"
             for i, k in program.writebacks]
    static = [repr(v) for kind, v in program.out_slots if kind == "static"]
    results = "results: " + ", ".join(outs) + (f"; written arguments: {', '.join(wrote)}" if wrote else "") + \
        (f"; constant results left out: {', '.join(static)}" if static else "")
    return program.module, _describe(fn, shapes, names, results)


def compile(fn, specs: Sequence | None = None, out_dir: str = ".", name: str | None = None, *,
            cpu: str = "host", emit_llvm: bool = False, emit_asm: bool = False,
            emit_c: bool = False) -> AotObject:
    """Compile ``fn`` for ``specs`` into ``out_dir/NAME.o`` and ``out_dir/NAME.h``.

    ``fn`` is a Python function of arrays, an ``HloModule`` or a path to an HLO text file
    (``specs`` then must be None or match its parameters).  ``cpu``: ``host`` (default) or
    a CPU name for LLVM and ``cc -march`` (``x86-64``, ``x86-64-v3``...).  Returns an
    ``AotObject`` (paths, argument and result shapes, the arena size)."""
    if isinstance(fn, str) and fn.endswith(".hlo"):
        with open(fn) as f:
            fn = parse_hlo(f.read(), filename=fn)
    if isinstance(fn, Module):
        module = fn
        params = [p.shape for p in module.entry.parameters]
        if specs is not None and [parse_spec(s) for s in specs] != params:
            raise AotError(f"specs {list(specs)} do not match the module's parameters "
                           f"({', '.join(s.to_text(False) for s in params)}); leave them out for a module")
        description = f"from HLO module {module.name}"
    else:
        if specs is None:
            raise AotError("give the argument specs, e.g. nbxla.aot.compile(f, ['f32[16,784]'], 'build', 'f')")
        shapes = [parse_spec(s) for s in specs]
        if any(is_symbolic(s) for s in shapes):
            return _compile_unknown_size(fn, shapes, out_dir, name, cpu, emit_c)
        module, description = _trace(fn, specs)
    if name is None:        # the module's name, made a C identifier
        name = re.sub(r"\W", "_", module.name)
        name = name if name and not name[0].isdigit() else f"f_{name}"
    result = optimize(module)
    return compile_object(result.module, name, out_dir, parallel_threshold=PARALLEL_THRESHOLD, cpu=cpu,
                          description=description, emit_llvm=emit_llvm, emit_asm=emit_asm, emit_c=emit_c,
                          plan=result.facts["buffer-assignment"])


# The sizes the unknown dimensions are traced and compiled at, one per symbol (the program
# serves every size): distinct, so that dimensions of different symbols stay apart.
PROBE_SIZES = (17, 19, 23, 29, 31, 37, 41, 43)
# Size names that would clash with the C the object is made of.
_TAKEN_NAMES = {"in", "out", "sz", "rc", "arena", "need", "t", "k", "p", "q", "pd", "pi", "po", "pred",
                "cur", "nxt", "region", "scratch", "sizes", "slots"}


def _compile_unknown_size(fn, shapes: list[Shape], out_dir: str, name: str | None, cpu: str,
                          emit_c: bool) -> AotObject:
    """``fn`` with ``?`` dimensions (``?`` the unknown size ``b``, ``?n`` the size ``n``):
    compiled as ``jit`` compiles unknown dimensions (``symbolic_compile``: probes, guards,
    kernels that serve every size), then written as one object whose function takes the sizes
    first (``codegen/aot_symbolic.py``)."""
    check_function_no_random(fn)
    symbols = symbols_in(shapes)
    for n in symbols:
        if n in C_KEYWORDS or n in _TAKEN_NAMES or re.fullmatch(r"(arg|result|s|size)\d+", n):
            raise AotError(f"the unknown size ?{n} has a name the object's C uses itself; choose another")
    if len(symbols) > len(PROBE_SIZES):
        raise AotError(f"{len(symbols)} unknown sizes: at most {len(PROBE_SIZES)} are supported")
    probe = dict(zip(symbols, PROBE_SIZES))
    args = [np.zeros(tuple(probe[d.name] if isinstance(d, SymDim) else d for d in s.dims), s.dtype) for s in shapes]
    leaves, treedef = tree_flatten((tuple(args), {}))
    marks = {(k, d): n.name for k, s in enumerate(shapes) for d, n in enumerate(s.dims) if isinstance(n, SymDim)}
    try:
        names = list(inspect.signature(fn).parameters)[:len(args)]
    except (TypeError, ValueError):
        names = []
    names += [f"args[{k}]" for k in range(len(names), len(args))]
    fn_name = getattr(fn, "__name__", "fn")
    fn_name = fn_name if fn_name.isidentifier() else "fn"
    converted = convert_function(fn)

    def trace_at(arg_leaves, log):
        return trace(converted, arg_leaves, treedef, name=fn_name, leaf_names=names, size_observations=log)
    try:
        program = compile_symbolic(trace_at, leaves, marks, "cpu", products=True)
    except SymbolicDimensionError as e:
        unknown = ", ".join(f"{names[k]}.shape[{d}] (?{n})" for (k, d), n in sorted(marks.items()))
        raise AotError(f"{fn_name}: its unknown dimensions {unknown} cannot stay unknown ({e}); "
                       "give them a size") from None
    symbolic = program.compilation.optimized
    sizes = (probe, {n: second_probe(h) for n, h in probe.items()})
    probes = tuple(bind_module(symbolic, at) for at in sizes)
    mark_unknown_axes(symbolic, *probes)
    description = _describe(fn, shapes, names, "results: " + ", ".join(
        s.to_text(False) for s in (symbolic.entry.root.shape.leaves() if symbolic.entry.root.shape.is_tuple
                                   else [symbolic.entry.root.shape])))
    lower = {n: program.lower.get(n, 2) for n in symbols}
    upper = {n: program.bounds.get(n, 2) for n in symbols}
    return compile_symbolic_object(symbolic, probes, sizes, program.sizes, len(shapes), lower, upper,
                                   name or fn_name, out_dir, parallel_threshold=PARALLEL_THRESHOLD, cpu=cpu,
                                   description=description, emit_c=emit_c)
