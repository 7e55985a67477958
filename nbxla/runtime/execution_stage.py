"""The ``execution`` stage of a CPU executable: how every instruction of every program runs
(a kernel and how it is split, a library call, a loop, a view, the evaluator and why)."""

from __future__ import annotations

from ..hlo.ir import Instruction, program_callees
from ..hlo.placement import CPU, placement
from .blas_threads import TWO_THREADS_PAY
from .cpu_kernels import DotThunk, FullReductionThunk, KernelThunk, worker_count
from .donation import describe_places
from .native_dots import NativeGemmDot
from .thin_gemm import ThinGemmDot
from .native_loops import NativeLoopThunk
from .window_updates import WindowUpdateThunk


def describe_execution(executable) -> str:
    """The ``execution`` stage of the ``CpuExecutable`` ``executable``."""
    lines = []
    for program in executable.programs.values():
        comp = program.computation
        lines.append(f"{'entry' if comp is executable.module.entry else 'program'} %{comp.name}")
        ops = [i for i in comp.instructions if i.opcode != "parameter"]
        for instr, (thunk, _, _, places) in zip(ops, program.steps):
            where = describe_places(places)
            lines.append(f"  %{instr.name}: {how_it_runs(executable, instr, thunk)}{where}")
    return "\n".join(lines)


def how_it_runs(executable, instr: Instruction, thunk) -> str:
    """How one instruction of ``executable`` runs (by ``thunk``), in words."""
    thunk = getattr(thunk, "thunk", thunk)               # (OwnedResult wraps control flow)
    symbol = executable.kernel_symbols.get(instr.name)
    if isinstance(thunk, KernelThunk):
        spec = executable.kernels.specs[symbol]
        split = f"split over {worker_count()} threads" if thunk.parallel else "on the calling thread"
        return f"native kernel {symbol} ({spec.style} over {spec.parallel_extent}, {split})"
    if isinstance(thunk, WindowUpdateThunk):
        return f"native kernel {symbol} (writes only the window, {thunk.how})"
    if isinstance(thunk, FullReductionThunk):
        return f"native kernels {symbol} + _finish ({thunk.parts} partial chunk(s) in parallel)"
    if isinstance(thunk, DotThunk) and instr.name in getattr(executable.run, "with_kernel", ()):
        return (f"native: block by block with %{instr.operands[1].name}'s kernel, each block's rows "
                f"still in cache (update_gemv; NumPy's BLAS per block)")
    if isinstance(thunk, DotThunk) and instr.name in getattr(executable.run, "paired", ()):
        return "native kernel: with the other GEMV of the same matrix, one pass over it (dual_gemv)"
    if isinstance(thunk, (NativeGemmDot, ThinGemmDot)):
        return f"native kernel: {thunk.how}"
    if isinstance(thunk, DotThunk):
        split = f", {thunk.split[0]} split over the pool" if thunk.split else ""
        # (a batch's products are judged one by one; a split batch runs on one thread always)
        work = thunk.product_work if thunk.batched else thunk.work
        threads = "" if thunk.controls is None else f", one BLAS thread{split}" if thunk.batched and thunk.split or \
            thunk.mode == "one" or work < TWO_THREADS_PAY else f", one BLAS thread while the cores are busy{split}"
        return f"library call: {thunk.how} (NumPy's BLAS{threads})"
    if instr.name in executable.library_calls:
        return {"sort": "library call: NumPy's stable argsort/lexsort",
                "convolution": f"library call: {getattr(thunk, 'how', 'BLAS GEMM')}"}.get(
            instr.opcode, f"library call: {getattr(thunk, 'how', 'LAPACK')}")
    if instr.opcode in ("while", "conditional", "call"):
        names = ", ".join(f"%{c.name}" for c in program_callees(instr))
        if isinstance(thunk, NativeLoopThunk):
            return f"native loop: one C function runs {names} (kernels called directly, state updated in place)"
        why = f" ({executable.loops[instr.name]})" if instr.name in executable.loops else ""
        return {"while": "host loop", "conditional": "host branch", "call": "runs"}[instr.opcode] + \
            f" over compiled program(s) {names}{why}"
    why = executable.interpreted.get(instr.name) or executable.interpreted_ops.get(instr.name)
    if why:
        return f"evaluator rule (interpreted: {why})"
    if instr.opcode == "constant":
        return "constant"
    return placement(CPU, instr).how          # a view, a name, a slice's copy, an evaluator rule
