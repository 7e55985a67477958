"""From a compilation and its timed runs to a ``Profile``: rows, lines, decisions.

Attribution by source line.  Every HLO instruction carries the line it was traced from; a
step's measured (exclusive) time goes to the lines of the operations it holds:

* a fused kernel's time is split over its member operations by their flops (XLA's count:
  one per element of an elementwise op, one per input element of a reduction, 2*M*N*K for a
  dot); operations that do no arithmetic (broadcast, slice, transpose, concatenate) get none
  of it -- inside a kernel they are index arithmetic, the reads and writes are the kernel's --
  unless the whole kernel has no flops (a transpose, a concatenate): then the split is by the
  elements each operation produces, since moving them is all the work there is;
* a library call, a loop's own dispatch, a branch: the line of the instruction itself;
* what has no line (a copy the compiler added) is its own row, "(no source line)", and the
  time between steps (the run loop's own dispatch, argument checks) is "(dispatch between
  steps)": source lines plus these rows give the measured total.

A loop compiled whole into one C function is one step; its time is split over the body's
kernels in the proportions measured on the host-driven twin (``runtime/profiling``).
"""

from __future__ import annotations

import linecache
from collections import Counter

import numpy as np

from ..compiler import Compilation
from ..hlo.ir import Instruction
from ..hlo.opcodes import DATA_MOVEMENT, OWN_KERNEL
from ..passes.report import instruction_flops
from ..runtime.cpu_control import program_computations_of
from ..runtime.profiling import StepTime, TimedRuns
from .machine import MachineLimits, raise_limits
from .report import Decision, KernelRow, LineTime, LoopInfo, Profile, classify

NO_LINE = "(no source line)"
DISPATCH = "(dispatch between steps, arguments, results)"
# Instructions that only name or rearrange values in a program (no work of their own).
VIEWS = frozenset({"parameter", "constant", "tuple", "get-tuple-element", "bitcast", "reshape"})
LIBRARY = frozenset({"dot", "convolution", "sort", "custom-call"})
SLICING = frozenset({"slice", "dynamic-slice", "gather"})
MAX_FUSION_DECISIONS = 12
# Kernels this large run from memory, not the caches: what they reach, the machine can.
LARGE_BYTES = 64 << 20
LARGE_FLOPS = 1e7


def _elements(shape) -> int:
    return sum(_elements(s) for s in shape.elements) if shape.is_tuple else shape.size


def _bytes(shape) -> int:
    return shape.byte_size


def kernel_bytes_read(instr: Instruction) -> int:
    """Bytes a step reads: its operands, except that a fused kernel reading an operand only
    through slices (a loop body's ``a[i]``) reads just those slices."""
    if instr.opcode != "fusion":
        return sum(_bytes(o.shape) for o in dict.fromkeys(instr.operands))
    comp = instr.called_computations[0]
    users: dict[int, list[Instruction]] = {}
    for i in comp.instructions:
        for o in i.operands:
            users.setdefault(id(o), []).append(i)
    total = 0
    for param in comp.parameters:
        readers = users.get(id(param), [])
        if readers and all(u.opcode in SLICING and u.operands[0] is param for u in readers):
            total += min(_bytes(param.shape), sum(_bytes(u.shape) for u in readers))
        else:
            total += _bytes(param.shape)
    return total


def dot_kind(instr: Instruction) -> str:
    """BLAS GEMM / GEMV / DOT by the sizes of the two sides that are not contracted."""
    at = instr.attrs
    sides = []
    for k, (contract, batch) in enumerate(((at.get("lhs_contracting_dims", ()), at.get("lhs_batch_dims", ())),
                                           (at.get("rhs_contracting_dims", ()), at.get("rhs_batch_dims", ())))):
        dims = instr.operands[k].shape.dims
        free = [d for j, d in enumerate(dims) if j not in tuple(contract) + tuple(batch)]
        sides.append(int(np.prod(free, dtype=np.int64)) if free else 1)
    m, n = sides
    kind = "GEMM" if m > 1 and n > 1 else "GEMV" if m > 1 or n > 1 else "DOT"
    batched = " (batched)" if at.get("lhs_batch_dims") else ""
    shapes = " x ".join(o.shape.to_text(False) for o in instr.operands)
    return f"BLAS {kind}{batched} {shapes}"


class _Builder:
    def __init__(self, comp: Compilation, timed: TimedRuns, limits: MachineLimits):
        self.comp, self.timed, self.limits = comp, timed, limits
        self.cpu = comp.executable.native
        self.instrs: dict[tuple[str, str], Instruction] = {}
        self.by_name: dict[str, Instruction] = {}
        for module in (comp.hlo, comp.optimized):
            for c in module.computations:
                for i in c.instructions:
                    self.by_name.setdefault(i.name, i)
        for c in comp.optimized.computations:
            for i in c.instructions:
                self.instrs[(c.name, i.name)] = i
        self.rows: list[KernelRow] = []
        self.own_kernels: set[str] = set()      # standalone kernel ops (named as in native loops)
        for c in comp.optimized.computations:
            for i in c.instructions:
                if i.opcode in OWN_KERNEL:
                    self.own_kernels.add(i.name)
        self.line_time: dict[tuple[str, int], float] = {}
        self.line_kernels: dict[tuple[str, int], list[str]] = {}
        self.no_line = 0.0                # seconds of steps without a source line
        self.dispatch = 0.0               # seconds of a run outside every step
        self.source_file = ""             # the profiled function's or cell's file, when known
        self.source_lines: dict[int, str] = {}

    # ---- rows ------------------------------------------------------------------------------

    def kind_of(self, instr: Instruction, in_native_loop: bool = False) -> tuple[str, str]:
        cpu, name, op = self.cpu, instr.name, instr.opcode
        if in_native_loop and (op == "fusion" or name in self.own_kernels):
            # (compiled into the loop's C function: the main executable has no symbol for it)
            kind = instr.attrs.get("kind", "kLoop") if op == "fusion" else op
            return "kernel", f"native kernel ({kind}), called from the loop's C function"
        if op == "while":
            how = cpu.loops.get(name, "host-driven")
            if how.startswith("native:"):
                return "native-loop", "native loop: one C function runs it"
            return "loop", f"host loop: dispatch between its iterations ({how})"
        if op in ("conditional", "call"):
            return "control", f"{op}: host dispatch"
        why = cpu.interpreted.get(name) or cpu.interpreted_ops.get(name)
        if why:
            return "interpreted", f"runs on the reference evaluator ({why})"
        if op == "dot":
            return "library", dot_kind(instr)
        if name in cpu.kernel_symbols:
            kind = instr.attrs.get("kind", "kLoop") if op == "fusion" else op
            return "kernel", f"native kernel ({kind})"
        if op in LIBRARY or name in cpu.library_calls:
            return "library", {"sort": "NumPy sort", "convolution": "im2col + BLAS GEMM"}.get(op, op)
        if op in VIEWS:
            return "view", "no work"
        if op == "slice":
            return "view", "a copy of a NumPy view"
        return "interpreted", f"{op}: the evaluator's rule"

    def add_row(self, instr: Instruction, program: str, seconds: float, calls: float,
                in_native_loop: bool = False) -> KernelRow:
        kind, how = self.kind_of(instr, in_native_loop)
        flops = bytes_read = bytes_written = 0.0
        if kind in ("kernel", "library", "interpreted"):
            flops = instruction_flops(instr)[0] * calls
            bytes_read = kernel_bytes_read(instr) * calls
            bytes_written = _bytes(instr.shape) * calls
        row = KernelRow(instr.name, program, kind, how, calls, seconds, flops, bytes_read, bytes_written,
                        in_native_loop=in_native_loop)
        for (file, line), share in self.split(instr):
            if line is None:
                self.no_line += seconds * share
                continue
            self.line_time[(file, line)] = self.line_time.get((file, line), 0.0) + seconds * share
            if kind != "view":
                self.line_kernels.setdefault((file, line), [])
                if instr.name not in self.line_kernels[(file, line)]:
                    self.line_kernels[(file, line)].append(instr.name)
            row.lines.append(f"{file}:{line}")
        row.lines = list(dict.fromkeys(row.lines))
        self.rows.append(row)
        return row

    def split(self, instr: Instruction) -> list[tuple[tuple[str, int | None], float]]:
        """(where, share) of a step's time: see the module docstring."""
        if instr.opcode == "fusion":
            flops: Counter = Counter()
            moved: Counter = Counter()
            for m in instr.called_computations[0].instructions:
                if m.opcode in VIEWS:
                    continue
                where = (m.location.file, m.location.line) if m.location else ("", None)
                if m.opcode not in DATA_MOVEMENT:
                    flops[where] += instruction_flops(m)[0]
                moved[where] += _elements(m.shape)
            # (by flops; a kernel without any -- a transpose, a concatenate -- by elements made)
            weights = flops if sum(flops.values()) else moved
            total = sum(weights.values())
            if total:
                return [(where, w / total) for where, w in weights.items() if w]
        loc = instr.location
        return [((loc.file, loc.line) if loc else ("", None), 1.0)]

    def steps(self) -> None:
        timed = self.timed
        for (program, name), step in timed.steps.items():
            instr = self.instrs.get((program, name))
            if instr is None or step.calls == 0:
                continue
            if self.kind_of(instr)[0] == "native-loop" and name in timed.native_loops:
                self.native_loop(instr, program, step)
                continue
            row = self.add_row(instr, program, step.exclusive_s, step.calls)
            if row.kind == "loop":
                trips, _ = self.trips(instr)
                if trips:
                    row.how = (f"host loop: {row.seconds / (trips * row.calls) * 1e6:.2f} us of dispatch per "
                               f"iteration ({trips:g} iterations; {self.runs_as(instr)})")
        self.dispatch = max(0.0, timed.total_s - timed.steps_s)

    def native_loop(self, instr: Instruction, program: str, step: StepTime) -> None:
        """The native loop's time split over its body's steps as measured on the twin."""
        twin = self.timed.native_loops[instr.name]
        inside = {c.name for c in program_computations_of(instr)}
        # (only the work: the twin's per-iteration views and dispatch do not exist natively)
        parts = [(key, s) for key, s in twin.steps.items() if key[0] in inside and s.calls and key in self.instrs
                 and self.kind_of(self.instrs[key], True)[0] in ("kernel", "library", "interpreted")]
        measured = sum(s.exclusive_s for _, s in parts)
        loop = self.add_row(instr, program, 0.0, step.calls)
        loop.how = loop.verdict = (f"native loop: one C function, {_time_text(step.exclusive_s)} in all; "
                                   "its kernels' shares measured on the host-driven loop")
        if measured <= 0:
            loop.seconds = step.exclusive_s
            self.add_time(instr, step.exclusive_s)
            return
        scale = step.exclusive_s / measured
        for (inner_program, name), s in parts:
            inner = self.instrs.get((inner_program, name))
            if inner is not None:
                self.add_row(inner, inner_program, s.exclusive_s * scale, s.calls, in_native_loop=True)

    def add_time(self, instr: Instruction, seconds: float) -> None:
        loc = instr.location
        if loc is None:
            self.no_line += seconds
        else:
            self.line_time[(loc.file, loc.line)] = self.line_time.get((loc.file, loc.line), 0.0) + seconds

    # ---- loops and decisions -------------------------------------------------------------------

    def trips(self, instr: Instruction) -> tuple[float | None, int]:
        """(iterations per execution, kernels in the body) of a while, as measured."""
        body = instr.attrs["body"]
        timed = self.timed
        if instr.name in timed.native_loops:
            timed = timed.native_loops[instr.name]
        runs = timed.program_runs.get(body.name)
        execs = sum(s.calls for (p, n), s in timed.steps.items() if n == instr.name)
        kernels = sum(1 for i in body.instructions
                      if i.opcode == "fusion" or i.opcode in LIBRARY or i.name in self.cpu.kernel_symbols)
        return (runs / execs if runs is not None and execs else None), kernels

    def runs_as(self, instr: Instruction) -> str:
        """How a while runs, in words (the executable's record for the entry's loops)."""
        if instr.name in self.cpu.loops:
            return self.cpu.loops[instr.name]
        if instr.parent is self.comp.optimized.entry:
            return "native loops are off (NBXLA_NATIVE_LOOPS=0)"
        return "inside another loop"

    def loops(self) -> tuple[list[LoopInfo], list[Decision]]:
        whiles: dict[int, list[Instruction]] = {}
        for c in self.comp.optimized.computations:
            for i in c.instructions:
                if i.opcode == "while" and i.location is not None:
                    whiles.setdefault(i.location.line, []).append(i)
        infos, decisions = [], []
        for line, how, why in dict.fromkeys(tuple(d) for d in self.comp.loop_decisions):
            info = LoopInfo(line, how, why)
            keyword = _keyword(self.source_text(line))
            if how == "rolled" and whiles.get(line):
                instr = whiles[line].pop(0)
                info.while_name = instr.name
                info.trips, info.body_kernels = self.trips(instr)
                info.runs_as = self.runs_as(instr)
                trips = "?" if info.trips is None else f"{info.trips:g}"
                text = (f"{keyword} rolled into a while (trip count {trips}), body = "
                        f"{info.body_kernels} kernel{'s' if info.body_kernels != 1 else ''}; "
                        f"{_runs_as(info.runs_as)}")
            elif how == "rolled":
                text = f"{keyword} rolled into a while ({why})"
            else:
                text = f"{keyword} unrolled ({why})"
            infos.append(info)
            decisions.append(Decision(line, "loop", text, self.source_file_of(line)))
        return infos, decisions

    def fusion_decisions(self) -> list[Decision]:
        facts = self.comp.pipeline.facts.get("fusion")
        out, seen = [], set()
        if facts is None:
            return out
        for r in facts.refusals:
            producer = self.by_name.get(r.producer)
            line = producer.location.line if producer is not None and producer.location else None
            key = (line, r.reason)
            if key not in seen and len(out) < MAX_FUSION_DECISIONS:
                seen.add(key)
                out.append(Decision(line, "fusion", f"not fused into %{r.consumer}: {r.reason}"))
        for row in self.rows:
            if row.kind == "library" and row.lines:
                line = int(row.lines[0].rsplit(":", 1)[1])
                out.append(Decision(line, "library", row.how))
            elif row.kind == "kernel" and len(row.lines) > 1:
                first = int(row.lines[0].rsplit(":", 1)[1])
                others = ", ".join(x.rsplit(":", 1)[1] for x in row.lines[1:])
                out.append(Decision(first, "kernel", f"fused with line(s) {others} into one kernel %{row.name}"))
        return out

    def source_text(self, line: int) -> str:
        if line in self.source_lines:
            return self.source_lines[line]
        file = self.source_file_of(line)
        return linecache.getline(file, line) if file else ""

    def source_file_of(self, line: int) -> str:
        if self.source_file:
            return self.source_file
        for c in self.comp.hlo.computations:
            for i in c.instructions:
                if i.location is not None and i.location.line == line:
                    return i.location.file
        return ""


def _keyword(text: str) -> str:
    word = text.strip().split(" ", 1)[0]
    return f"`{word}`" if word in ("for", "while") else "loop"


def _runs_as(how: str) -> str:
    return "one native C function" if how.startswith("native:") else f"host-driven ({how})"


def _time_text(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.1f} us"


def build_profile(comp: Compilation, timed: TimedRuns, limits: MachineLimits, *, name: str,
                  source_file: str, source_lines: list[tuple[int, str]]) -> Profile:
    b = _Builder(comp, timed, limits)
    b.source_file, b.source_lines = source_file, dict(source_lines)
    b.steps()
    limits = _observed_limits(b.rows, limits)
    for row in b.rows:
        classify(row, limits)
    loops, loop_decisions = b.loops()
    decisions = sorted(loop_decisions + b.fusion_decisions(),
                       key=lambda d: (d.line is None, d.line or 0, d.kind))
    lines = [LineTime(file, line, t, b.source_lines.get(line, "") if file == source_file else
                      linecache.getline(file, line).rstrip("\n"),
                      b.line_kernels.get((file, line), []))
             for (file, line), t in sorted(b.line_time.items(), key=lambda kv: (kv[0][0] != source_file, kv[0]))]
    unattributed = {NO_LINE: b.no_line, DISPATCH: b.dispatch}
    rows = sorted(b.rows, key=lambda r: -r.seconds)
    return Profile(name, limits, timed.runs, timed.total_s, timed.call_s, rows, lines, unattributed,
                   loops, decisions, program_verdict(rows, timed), source_file, source_lines)


def _observed_limits(rows: list[KernelRow], limits: MachineLimits) -> MachineLimits:
    """``limits`` raised to what large kernels reached (see ``machine.raise_limits``)."""
    read = copy = peak = 0.0
    for r in rows:
        if r.seconds <= 0 or not r.calls:
            continue
        if r.kind == "kernel" and r.bytes / r.calls >= LARGE_BYTES:
            if 2 * r.bytes_written < 0.25 * r.bytes:
                read = max(read, r.gbs)
            else:
                copy = max(copy, r.gbs)
        if r.kind == "library" and r.flops / r.calls >= LARGE_FLOPS:
            peak = max(peak, r.gflops)
    return raise_limits(limits, read_gbs=read, copy_gbs=copy, peak_gflops=peak)


def program_verdict(rows: list[KernelRow], timed: TimedRuns) -> str:
    work = sum(r.seconds for r in rows if r.kind in ("kernel", "library", "interpreted"))
    busy = [r for r in rows if r.kind != "view"]
    if busy and busy[0].bound == "overhead" and busy[0].calls > 1:
        top = busy[0]
        where = f" ({', '.join(top.lines[:3])})" if top.lines else ""
        return (f"overhead bound: {top.calls:.0f} calls of {top.us_per_call:.2f} us of work each in "
                f"%{top.name}{where}; per-call costs dominate: do more work per call (vectorize the "
                "loop over whole arrays)")
    if timed.call_s < 100e-6 and (work < 0.5 * timed.call_s or (busy and busy[0].bound == "overhead")):
        calls = sum(r.calls for r in rows if r.kind in ("kernel", "library", "interpreted")) or 1
        return (f"overhead bound: a {timed.call_s * 1e6:.1f} us call of {calls:.0f} kernel call(s), "
                f"{work / calls * 1e6:.2f} us of work each; fixed per-call costs dominate: give each "
                "call more work (a batch), or leave such small arrays to NumPy")
    if not busy:
        return "no work measured"
    top = busy[0]
    share = top.seconds / timed.total_s if timed.total_s else 0.0
    where = f" ({', '.join(top.lines[:3])})" if top.lines else ""
    return f"{share:.0%} of the time in %{top.name}{where}: {top.verdict}"
