"""Compiling once for every size of some dimensions (unknown dimensions), and running at any size.

``compile_symbolic`` takes the traced function, the call's argument leaves and the dimensions to
make unknown, and either returns a ``SymbolicProgram`` or raises ``SymbolicDimensionError``
saying why not (the caller then compiles for the concrete sizes: never a wrong answer).

How it stays safe (see ``hlo/symbolic.py``): the program is traced, and optimized, at two sizes
of every symbol, and the two results must be the same program up to dimensions that scale with
a symbol; the code generator's LLVM IR for the second probe must be *identical* to the first's,
which holds when every kernel reads its size from its ``[begin, end)`` range only (the
runtime's split of a kernel across threads already relies on that range); each kernel's range
extent must be a multiple of one symbol.  Only the first probe's kernels are compiled to machine
code.  Running at a size binds the symbols from the arguments, makes the concrete entry (a copy
with sizes filled in; the fused computations stay symbolic, their code is compiled), plans its buffers and builds its thunks over the machine code
compiled once -- a few milliseconds, memoized per size -- never LLVM again.
"""

from __future__ import annotations

import contextvars
from math import gcd
import time
from dataclasses import replace
from typing import Callable

import numpy as np

from .compile_clock import stage
from .compiler import Compilation
from .frontend.observed_sizes import compare_observations
from .frontend.trace import TracedProgram, is_array_leaf
from .hlo.shapes import SymDim, SymbolicDimensionError
from .hlo.ir import clone_module
from .hlo.symbolic import (bind_module, generalize_module, lift_size_constants, mark_unknown_axes,
                           second_probe, size_from_probes, symbols_of_module, upper_probes)
from .passes import BufferAssignment, Pipeline, default_pipeline, optimize, verify_module
from .passes.buffer_assignment import plan_buffers
from .passes.imported_fusions import split_dots_of_unknown_size
from .codegen.elemental import leading_unit_dims
from .codegen.run_sizes import smallest_sizes
from .runtime.conv_epilogue import fold_convolution_epilogues
from .runtime.cpu_executable import CpuExecutable, kernel_llvm_ir
from .runtime.symbolic_loops import loops_for
from .symbolic_machine_code import earlier_light, earlier_machine_code, without_datalayout
from .runtime.executable import cpu_executable, resolve_device
from .symbolic_program import KernelSizes, SymbolicProgram, run_symbolic

# Whether a kernel's range may be a product of unknown sizes (``f32[m,n]`` elementwise): for
# ahead-of-time objects, whose driver computes ranges in C.  The jit's instances bind them
# too, but there a product means every dimension symbolic (``dynamic=True``), whose kernels
# are most often planned differently at other sizes: refused early instead (``_check_kernel_ranges``).
_PRODUCTS = contextvars.ContextVar("nbxla_symbolic_products", default=False)


def compile_symbolic(trace_at: Callable[[list, list | None], TracedProgram], leaves: list,
                     marks: dict[tuple[int, int], str], device: str, explanation: str = "",
                     earlier: list = (), products: bool = False) -> SymbolicProgram:
    """As ``_compile_symbolic``; ``products``: kernels may range over products of unknown
    sizes (for ahead-of-time objects)."""
    token = _PRODUCTS.set(products)
    try:
        return _compile_symbolic(trace_at, leaves, marks, device, explanation, earlier)
    finally:
        _PRODUCTS.reset(token)


def _compile_symbolic(trace_at: Callable[[list, list | None], TracedProgram], leaves: list,
                      marks: dict[tuple[int, int], str], device: str, explanation: str = "",
                      earlier: list = ()) -> SymbolicProgram:
    """Compile with the dimensions ``marks`` ((leaf, dim) -> symbol) unknown.  ``trace_at(leaves,
    log)`` traces the function on argument leaves (logging size comparisons into ``log``).
    ``earlier``: (argument shapes, ``Compilation``) of static compiles of the same function
    (the automatic mode's first size): one whose sizes suit a second probe (``_earlier_probe``)
    is that probe, and its optimized module spares the second run of the passes.
    Raises ``SymbolicDimensionError`` with the reason when something needs a concrete size."""
    if resolve_device(device) != "cpu":
        raise SymbolicDimensionError(f"unknown dimensions are compiled for the CPU only (not {device})")
    hints: dict[str, int] = {}
    for (leaf, dim), name in marks.items():
        size = np.shape(leaves[leaf])[dim]
        if size < 1:
            raise SymbolicDimensionError(f"size {size} is specialised (an empty array takes other paths)")
        if hints.setdefault(name, size) != size:
            raise SymbolicDimensionError(f"{name} has sizes {hints[name]} and {size} in one call")
    if len(set(hints.values())) != len(hints):
        raise SymbolicDimensionError("two symbols with the same size in one call (they are one symbol)")
    if len(hints) > 1 and min(hints.values()) < 2:
        raise SymbolicDimensionError("size 1 is specialised where several sizes are unknown "
                                     "(broadcasting treats a 1 differently)")
    at_one = min(hints.values()) < 2
    if at_one:
        # A call at size 1 compiles at size 2 (and 5): the code generator drops a dimension of
        # size 1 from its index arithmetic, which a kernel for every size cannot.  The program
        # serves the call when the trace at 1 is the same program (``_check_extreme_sizes``).
        leaves = _probe_leaves(leaves, marks, lambda n: 2)
        hints = {name: 2 for name in hints}
    by_size = {size: name for name, size in hints.items()}
    start = time.perf_counter()
    log1: list = []
    if at_one:
        try:
            first = trace_at(leaves, log1)
        except Exception as e:          # (at size 2: the call's own trace is at 1)
            raise SymbolicDimensionError(f"the program does not trace at size 2 ({type(e).__name__})") from None
    else:
        first = trace_at(leaves, log1)
    _check_program(first)
    if len(by_size) > 1:
        # (Several unknown sizes are the likeliest to fail, at the largest probe (their product
        # too large to trace): found before the second probe is traced, which is then not
        # counted as traced yet.)
        extremes = _check_extreme_sizes(trace_at, leaves, marks, first, log1, by_size, lambda h: h)
    found = _earlier_second_probe(trace_at, leaves, marks, first, log1, by_size, earlier)
    if found is None and len(by_size) == 1:
        # No earlier compile: the second probe is at size 1, which the smallest-size check
        # traces anyway (1 is coprime with every size); its kernels are compared at 2h+1.
        at_size_one = [[tuple(1 if (k, d) in marks else n for d, n in enumerate(np.shape(leaf)))
                        if is_array_leaf(leaf) and not isinstance(leaf, np.generic) else None
                        for k, leaf in enumerate(leaves)]]
        found = _earlier_second_probe(trace_at, leaves, marks, first, log1, by_size, [(at_size_one[0], None)])
    untouched = first.module            # (pristine when an earlier compile's sizes are the probe)
    if found is not None:
        lifted_first, second, probe, reused, sizes, symbolic_hlo = found
        first = replace(first, module=lifted_first)

    def standard_second_probe():
        log2: list = []
        try:
            traced = trace_at(_probe_leaves(leaves, marks, second_probe), log2)
        except Exception as e:          # (the sizes moved apart are ones the program needs related)
            raise SymbolicDimensionError(f"the program does not trace at other sizes ({type(e).__name__}: "
                                         f"{str(e).splitlines()[0] if str(e) else ''})") from None
        why = compare_observations(log1, log2)
        if why:
            raise SymbolicDimensionError(why)
        return traced

    if found is None:
        second, probe, reused = standard_second_probe(), second_probe, None
    if len(by_size) == 1:           # (compared with the first probe before its constants are lifted)
        extremes = _check_extreme_sizes(trace_at, leaves, marks, replace(first, module=untouched), log1,
                                        by_size, probe)
    lower, bounds = extremes
    if at_one and max(lower.values()) > 1:
        raise SymbolicDimensionError("at size 1 the program is another one (it treats a 1 differently)")
    trace_ms = (time.perf_counter() - start) * 1e3
    if found is None:
        sizes = lift_size_constants(first.module, second.module, by_size, probe)
        symbolic_hlo = generalize_module(first.module, second.module, by_size, probe)

    def standard_optimized():
        """The second probe at ``second_probe`` sizes, optimized: when the earlier compile's
        sizes (often 1, which the code generator treats as special) give other kernel code."""
        traced = standard_second_probe()
        lifted = lift_size_constants(untouched, traced.module, by_size, second_probe)
        if [(str(a), b) for a, b in lifted] != [(str(a), b) for a, b in sizes]:
            raise SymbolicDimensionError("the sizes the program reads differ between probes")
        generalize_module(untouched, traced.module, by_size, second_probe)
        return _optimize_probe(traced.module).module, second_probe

    with smallest_sizes(lower), leading_unit_dims():     # (the kernels serve these sizes and more: the guard)
        compilation, extents = _compile_probes(first.module.name, symbolic_hlo, first.module, second.module,
                                               by_size, device, explanation, trace_ms, list(first.loop_decisions),
                                               probe, None if sizes or reused is None else reused,
                                               standard_optimized if probe is not second_probe else None)
    symbols: dict[str, list] = {}
    for (leaf, dim), name in sorted(marks.items()):
        symbols.setdefault(name, []).append((leaf, dim))
    program = SymbolicProgram(first, compilation, symbols, extents, sizes, bounds, lower)
    program.light = getattr(compilation, "light_kernels", frozenset())
    program.loops = _native_loops(compilation)
    if isinstance(program.loops, str) and program.loops and "NBXLA_NATIVE_LOOPS=0" not in program.loops:
        # (a static compile runs its loops natively, where host-driven ones pay a Python
        # dispatch per kernel per iteration: 10x a small loop's time -- specialising is faster)
        raise SymbolicDimensionError(f"its loops cannot run natively at every size "
                                     f"({program.loops.removeprefix('host-driven: ')})")
    program.make_instance_now(hints)
    return program


def static_compile_context(leaves: list):
    """The context a static compile of a function whose dimensions may later become unknown
    runs in: a leading dimension of size 1 of some array argument -- the automatic mode's first
    size is often 1 -- is indexed in its kernels like any other (``leading_unit_dims``), so that
    the symbolic compile at the next size takes their machine code."""
    return leading_unit_dims(any(is_array_leaf(leaf) and np.ndim(leaf) >= 1 and np.shape(leaf)[0] == 1
                                 for leaf in leaves))


def _native_loops(compilation):
    """The entry's loops compiled for every size, or why they run from the host ("": none)."""
    start = time.perf_counter()
    try:
        return loops_for(compilation.optimized)
    finally:
        compilation.timings_ms["codegen"] = compilation.timings_ms.get("codegen", 0.0) + \
            (time.perf_counter() - start) * 1e3


def _earlier_second_probe(trace_at, leaves, marks, first, log1, by_size, earlier):
    """(the first probe's module with its size constants lifted, the second probe's trace, the
    probe's sizes (first-probe size -> size), the earlier ``Compilation``, the sizes lifted, the
    symbolic module) at the sizes of an earlier static compile, or None when none suits: every
    symbol's dimensions of one size there, coprime with (and other than) its size in this call (no divisibility shortcut holds at both), the other dimensions equal;
    and the trace there the same program as the first probe's.  Why: the earlier compile has
    run the passes at those sizes already, which is most of a second probe's cost."""
    for shapes, compilation in earlier:
        at: dict[int, int] = {}
        fits = len(shapes) == len(leaves)
        for k, leaf in enumerate(leaves):
            if not fits:
                break
            if not is_array_leaf(leaf) or isinstance(leaf, np.generic):
                continue
            dims, then = np.shape(leaf), shapes[k]
            if then is None or len(then) != len(dims):
                fits = False
                break
            for d, (now, was) in enumerate(zip(dims, then)):
                if (k, d) in marks:
                    fits = fits and at.setdefault(now, was) == was
                elif now != was:
                    fits = False
        if not fits or len(at) != len(by_size) or len(set(at.values())) != len(at) or \
                any(was < 1 or was == now or gcd(now, was) != 1 or (len(at) > 1 and was < 2)
                    for now, was in at.items()):
            continue
        log2: list = []
        try:
            second = trace_at(_probe_leaves(leaves, marks, at.__getitem__), log2)
        except Exception:
            continue
        if compare_observations(log1, log2):
            continue
        reference = clone_module(first.module)
        try:            # (on a copy: the size constants are lifted in place)
            sizes = lift_size_constants(reference, second.module, by_size, at.__getitem__)
            symbolic_hlo = generalize_module(reference, second.module, by_size, at.__getitem__)
        except SymbolicDimensionError:
            continue
        return reference, second, at.__getitem__, compilation, sizes, symbolic_hlo
    return None


def _compile_probes(name: str, symbolic_hlo, module1, module2, by_size: dict[int, str], device: str,
                    explanation: str, trace_ms: float, loop_decisions: list, probe=second_probe,
                    earlier=None, fallback=None):
    """Optimize two probes of one program (``module2`` at ``probe`` of ``module1``'s sizes),
    require the same optimized program and the same kernel code, and compile the first's
    kernels: the ``Compilation`` record and each kernel's ``KernelSizes``.  ``earlier``: a static
    ``Compilation`` at ``module2``'s sizes, whose optimized module is used (a copy) in place of
    optimizing ``module2`` when it is the same program, and whose machine code is used when
    its kernels are the same code (``symbolic_machine_code``); ``fallback()``:
    (an optimized module, its probe) to compare with when neither gives the same code."""
    start = time.perf_counter()
    with stage("passes"):
        pipe1 = _optimize_first_probe(module1, earlier is not None)
    _check_kernel_ranges(pipe1.module, by_size)
    if _fold_convolutions(pipe1.module):
        pipe1.facts["buffer-assignment"] = plan_buffers(pipe1.module)
    # The second probe's optimized module, in order of cost: the earlier compile's, this
    # call's second probe's, or (when the first two are at sizes whose code differs) another.
    seconds = [("earlier", lambda: (clone_module(earlier.optimized), probe))] if earlier is not None else []
    if fallback is None or earlier is None:
        seconds.append(("fresh", lambda: (_optimize_probe(module2).module, probe)))
    if fallback is not None:
        seconds.append(("fallback", fallback))
    optimize_ms = (time.perf_counter() - start) * 1e3
    codegen_ms, emitted, machine_code, used_light = 0.0, None, None, frozenset()
    for k, (kind, make_second) in enumerate(seconds):
        start = time.perf_counter()
        other, other_probe = make_second()
        _fold_convolutions(other)
        middle = time.perf_counter()
        optimize_ms += (middle - start) * 1e3
        names = _names_of(pipe1.module) if kind == "earlier" else None
        try:
            if kind == "earlier":
                # The first probe takes the earlier compile's names: its kernels are then the
                # same text as the earlier compile's where they are the same code, and its
                # machine code serves (``symbolic_machine_code``).
                emitted = None
                symbolic_optimized = generalize_module(other, pipe1.module, {probe(h): n for h, n in by_size.items()},
                                                       {probe(h): h for h in by_size}.__getitem__)
            else:
                symbolic_optimized = generalize_module(pipe1.module, other, by_size, other_probe)
            # Kernels may read sizes along unknown axes when they run (a column sum's row
            # count): the emitters see which axes those are (``codegen/toolkit.unknown_axes``).
            mark_unknown_axes(symbolic_optimized, pipe1.module, other)
            # (Compared before compiling: a refusal costs no LLVM time.)  After a static
            # compile, both probes are emitted with its light kernels light (``earlier_light``).
            light = earlier_light(earlier) if kind == "earlier" else frozenset()
            emitted = emitted or kernel_llvm_ir(pipe1.module, light)
            if other_probe is not second_probe:
                # The kernels' code is compared at 2h+1, from the symbolic program the two
                # probes agree on (what optimizing a trace at 2h+1 gives, when the passes
                # agree at h and at s): at s = 1 the code generator drops the size-1
                # dimension from a row reduction's index arithmetic, which says nothing
                # about the other sizes.
                other = bind_module(symbolic_optimized, {n: second_probe(h) for h, n in by_size.items()})
                mark_unknown_axes(symbolic_optimized, other)
                other_probe = second_probe
            extents = _same_kernels(emitted, kernel_llvm_ir(other, light), by_size, other_probe)
            if kind == "earlier":
                machine_code = earlier_machine_code(emitted, earlier, pipe1.module)
            used_light = light
            break
        except SymbolicDimensionError:
            if names is not None:
                _restore_names(names)
                emitted = None
            if k == len(seconds) - 1:
                raise
        finally:
            codegen_ms += (time.perf_counter() - middle) * 1e3
    start = time.perf_counter()
    if machine_code is not None:
        plan = plan_buffers(pipe1.module)           # (made again: the instructions were renamed)
        pipe1.facts["buffer-assignment"] = plan
        kernels, symbols = machine_code
        executable = cpu_executable(CpuExecutable(pipe1.module, plan, kernels=kernels, symbols=symbols))
    else:
        # (loops run from the host: a native loop's C is compiled for one size; the host's
        # loop runs the kernels compiled here, whose sizes come from each instance's specs)
        executable = cpu_executable(CpuExecutable(pipe1.module, pipe1.facts.get("buffer-assignment"),
                                                  compile_loops=False, emitted=emitted))
    # (a kernel the code generator refused at both probes runs the evaluator's rule, on the
    # fusion bound to each instance's sizes: ``SymbolicProgram.has_interpreted``)
    codegen_ms += (time.perf_counter() - start) * 1e3
    compilation = Compilation(name, resolve_device(device), symbolic_hlo, symbolic_optimized,
                              executable, {"trace": trace_ms, "optimize": optimize_ms, "codegen": codegen_ms},
                              pipe1, explanation, loop_decisions)
    compilation.light_kernels = used_light     # (``SymbolicProgram.light``)
    return compilation, extents


def _fold_convolutions(module) -> bool:
    """Fold each convolution into the fusion that consumes it (the CPU runtime's epilogues,
    ``runtime/conv_epilogue``) before the buffers are planned, whether or not a plan made
    for the two steps apart would allow it: the same folds at every size, so the probes'
    programs and kernels compare, and the plan (made after, per size) is the folded
    program's own.  (A static executable folds where its plan allows, after planning.)
    True when something was folded."""
    return bool(fold_convolution_epilogues(module))


def _names_of(module) -> list:
    return [(c, c.name, [(i, i.name) for i in c.instructions]) for c in module.computations]


def _restore_names(names: list) -> None:
    for comp, name, instructions in names:
        comp.name = name
        for instr, instr_name in instructions:
            instr.name = instr_name


def _same_kernels(emitted, emitted2, by_size: dict[int, str], probe) -> dict[str, "KernelSizes"]:
    """Each kernel's ``KernelSizes``, requiring the two probes' kernels to be the same code
    planned the same way, with ranges (and sizes read) that scale with one symbol."""
    specs1, specs2 = emitted.specs, emitted2.specs
    _same_code(emitted.text, emitted2.text)
    extents = {}
    for kernel, spec in specs1.items():
        other = specs2.get(kernel)
        sized = dict(parallel_extent=0, work_per_unit=0, sizes=(), object_entry=None)
        if other is None or replace(other, **sized) != replace(spec, **sized) or \
                len(other.sizes) != len(spec.sizes):
            raise SymbolicDimensionError(f"kernel {kernel} is planned differently at different sizes")
        # (Any style: the two probes' code is the same text, so the kernel learns its size
        # only from its [begin, end) range and its run-time sizes, whatever a unit of the
        # range is -- a row, a dot's batch element, a scan's block, a sort's row.)
        extents[kernel] = KernelSizes(
            _symbolic(spec.parallel_extent, other.parallel_extent, by_size, kernel, probe),
            _symbolic(spec.work_per_unit, other.work_per_unit, by_size, kernel, probe),
            tuple(_symbolic(a, b, by_size, kernel, probe) for a, b in zip(spec.sizes, other.sizes)))
    return extents


def compile_symbolic_module(module, at: dict[str, int] | None = None, device: str = "cpu") -> SymbolicProgram:
    """One compilation of an HLO module with unknown dimensions (parsed ``f32[b,64]`` text, a
    Dask block of any size): probed at the sizes ``at`` (else 17, 19, ...) and their second
    probes, as a traced function is.  Raises ``SymbolicDimensionError``.  Run it with
    ``run_symbolic``: the symbols' values are read off the arguments."""
    names = symbols_of_module(module)
    if not names:
        raise SymbolicDimensionError(f"module {module.name} has no unknown dimensions")
    if resolve_device(device) != "cpu":
        raise SymbolicDimensionError(f"unknown dimensions are compiled for the CPU only (not {device})")
    at = dict(at or {})
    spare = iter(range(17, 1 << 20, 2))
    hints = {}
    for name in names:
        size = at.get(name)
        while size is None or size < 2 or size in hints.values():
            size = next(spare)
        hints[name] = size
    by_size = {size: name for name, size in hints.items()}
    start = time.perf_counter()
    module = clone_module(module)           # (the caller's module stays as it was given)
    split_dots_of_unknown_size(module)
    module1 = bind_module(module, hints)
    module2 = bind_module(module, {name: second_probe(size) for name, size in hints.items()})
    bind_ms = (time.perf_counter() - start) * 1e3
    with smallest_sizes({name: 2 for name in names}), leading_unit_dims():      # (run_symbolic's sizes: >= 2)
        compilation, extents = _compile_probes(module.name, module, module1, module2, by_size, device, "", bind_ms, [])
    program = SymbolicProgram(None, compilation, {}, extents)
    program.make_instance_now(hints)
    return program


def _check_kernel_ranges(module, by_size: dict[int, str]) -> None:
    """Refuse, before the second probe's passes and any code generation, a fusion whose result
    has dimensions of two symbols' sizes: its kernel's range would be their product, which
    ``_extent_symbol`` refuses after all that work (every dimension of ``f32[b,n]`` unknown,
    ``dynamic=True``: the compile then tries the leading dimensions alone).  A static dimension
    that happens to equal a symbol's size can refuse a program that would compile: it then
    compiles with fewer unknown dimensions, never wrongly."""
    if len(by_size) < 2 or _PRODUCTS.get():
        return
    for instr in module.entry.instructions:
        if instr.opcode != "fusion":
            continue
        for shape in (instr.shape.leaves() if instr.shape.is_tuple else [instr.shape]):
            found = {by_size[d] for d in shape.dims if d in by_size}
            if len(found) > 1:
                raise SymbolicDimensionError(f"kernel %{instr.name}'s range has two unknown sizes "
                                             f"({', '.join(sorted(found))}): their product")


def _optimize_first_probe(module, verified_elsewhere: bool):
    """The optimizer on the first probe (the program that runs, its pass history kept).  After
    a static compile of the same program (``verified_elsewhere``: the automatic mode's first
    size), whose passes were each verified, only the result is verified here: the modules
    between passes are that compile's at other sizes (the probes must agree), and verifying
    each was a tenth of the passes' time, which this compile pays on top of the static one."""
    if not verified_elsewhere:
        return optimize(module)
    result = Pipeline(default_pipeline().passes, verify=False).run(module)
    verify_module(result.module)
    return result


def _optimize_probe(module):
    """The optimizer on the second probe, only to compare its result with the first's: no pass
    history text, no verification between passes and no buffer plan (the first probe's run
    keeps those for the record; this one is never run or shown)."""
    pipeline = default_pipeline()
    passes = [p for p in pipeline.passes if not isinstance(p, BufferAssignment)]
    with stage("passes"):
        return Pipeline(passes, verify=False, record_text=False).run(module)


def _check_program(program: TracedProgram) -> None:
    if program.writebacks:
        raise SymbolicDimensionError("the function writes into its arguments")
    if program.checks:
        raise SymbolicDimensionError("the program checks indices or sizes when it runs")
    # (an argument returned as it is, ("view", (leaf, ())), is the caller's array at any size)
    if any(kind != "out" and not (kind == "view" and value[1] == ()) for kind, value in program.out_slots):
        raise SymbolicDimensionError("a result is a constant, a selection or a view of an argument")


def _check_extreme_sizes(trace_at, leaves, marks, first, log1, by_size, probe) -> tuple[dict, dict]:
    """Trace at the smallest sizes and at the largest (``UPPER_PROBE`` or more: ``upper_probes``)
    too, and require the same program as the first probe's, up to the symbols; returns each
    symbol's lower and upper bound.  Why: what the two probes agree on may still change between
    them and the guard's ends -- ``x[:8]`` has 8 rows at 33 and 67 but 3 at 3, ``x[:100]`` has b
    rows at 33 and 67 but 100 at 200.  Such clamps and thresholds are monotone in the size, so
    agreeing at both ends of the guarded range [lower, upper] means agreeing everywhere inside.
    The smallest sizes: 1 for a single symbol when the program is the same there (size 1 is
    special only where the program makes it so: broadcasting, ``squeeze``, a test on the size,
    each a difference in the trace), else 2; 2, 3, ... for several symbols."""
    order = sorted(by_size)
    if len(order) == 1:
        smallest = [({order[0]: 1}, 1), ({order[0]: 2}, 2)]
    else:
        smallest = [({hint: 2 + k for k, hint in enumerate(order)}, 2)]
    large = upper_probes(order)
    lower = None
    for sizes, bound in smallest:
        try:
            _same_program_at(trace_at, leaves, marks, first, log1, by_size, probe, sizes)
        except SymbolicDimensionError:
            if sizes is smallest[-1][0]:
                raise
            continue
        lower = bound
        break
    _same_program_at(trace_at, leaves, marks, first, log1, by_size, probe, large)
    return {by_size[h]: lower for h in order}, {by_size[h]: large[h] for h in order}


def _same_program_at(trace_at, leaves, marks, first, log1, by_size, probe, sizes: dict[int, int]) -> None:
    """Raise ``SymbolicDimensionError`` unless the function traced with each symbol at
    ``sizes[its first-probe size]`` is the first probe's program (up to the symbols)."""
    order = sorted(by_size)
    if all(sizes[h] in (h, probe(h)) for h in order):
        return                                  # (already traced there)
    log: list = []
    try:
        other = trace_at(_probe_leaves(leaves, marks, sizes.__getitem__), log)
    except Exception as e:
        raise SymbolicDimensionError(f"the program does not trace at size {min(sizes.values())} or "
                                     f"{max(sizes.values())} ({type(e).__name__})") from None
    why = compare_observations(log1, log)
    if why:
        raise SymbolicDimensionError(why)
    reference = clone_module(first.module)
    try:
        lift_size_constants(reference, other.module, by_size, sizes.__getitem__)
        generalize_module(reference, other.module, by_size, sizes.__getitem__)
    except SymbolicDimensionError as e:
        raise SymbolicDimensionError(f"at size {', '.join(str(sizes[h]) for h in order)}: {e}") from None


def _probe_leaves(leaves: list, marks: dict, size_of) -> list:
    """Stand-ins for the arguments with every marked dimension of size ``h`` at ``size_of(h)``
    (shape and dtype only: tracing reads no argument's values); the same array twice stays one
    stand-in."""
    out, made = [], {}
    for k, leaf in enumerate(leaves):
        if not is_array_leaf(leaf) or isinstance(leaf, np.generic):
            out.append(leaf)
            continue
        if id(leaf) not in made:
            dims = list(np.shape(leaf))
            for d in range(len(dims)):
                if (k, d) in marks:
                    dims[d] = size_of(dims[d])
            arr = np.asarray(leaf)
            made[id(leaf)] = np.lib.stride_tricks.as_strided(np.zeros(1, arr.dtype), tuple(dims),
                                                             (0,) * len(dims), writeable=False)
        out.append(made[id(leaf)])
    return out


def _same_code(text1: str, text2: str) -> None:
    """The two probes' kernels must be the same LLVM IR (sizes only through the ranges)."""
    a, b = without_datalayout(text1), without_datalayout(text2)
    if a == b:
        return
    kernel = "a kernel"
    for fa, fb in zip(a.split("\ndefine "), b.split("\ndefine ")):
        if fa != fb:
            kernel = "kernel " + fa.split("(")[0].split()[-1]
            break
    raise SymbolicDimensionError(f"the generated code of {kernel} depends on the size "
                                 "(a loop bound or stride baked in)")


def _symbolic(e1: int, e2: int, by_size: dict[int, str], kernel: str, probe=second_probe):
    return e1 if e1 == e2 else _extent_symbol(e1, e2, by_size, kernel, probe)


def _extent_symbol(e1: int, e2: int, by_size: dict[int, str], kernel: str, probe=second_probe) -> SymDim:
    for hint, name in by_size.items():
        if e1 % hint == 0 and e1 // hint * probe(hint) == e2:
            return SymDim(name, e1 // hint)
    found = size_from_probes(e1, e2, ({n: h for h, n in by_size.items()},
                                      {n: probe(h) for h, n in by_size.items()}))
    # (a power of one size -- an elementwise kernel over f32[b,b] -- serves the jit's instances
    # too: products of two sizes are refused before, ``_check_kernel_ranges``)
    if found is not None and (_PRODUCTS.get() or len(set(getattr(found, "names", ()))) == 1):
        return found
    raise SymbolicDimensionError(f"kernel {kernel}'s range ({e1}, then {e2}) is not a multiple of one size")


__all__ = ["SymbolicProgram", "compile_symbolic", "static_compile_context", "compile_symbolic_module", "run_symbolic", "SymbolicDimensionError"]
