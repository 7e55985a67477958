"""Per-thunk timing of a CPU executable: where one run's time goes, step by step.

The hook costs nothing when off: the executable's run loops are not touched.  While a profile
runs, every program's step list holds timed wrappers of its thunks (the list is swapped in
place and restored afterwards), nested programs count how often they run (a loop body's runs
are its trip count), and the entry runs through the general step loop (``CpuExecutable.run``
as defined on the class: the single-kernel and straight-line shortcuts skip the step list).
A step's *exclusive* time is its own time less that of the steps run inside it (a host-driven
``while`` keeps only its dispatch between iterations), so exclusive times add up to the run.

A loop compiled whole into one C function (``native_loops``) has no steps to time inside:
its time is measured as one step, and its split over the body's kernels comes from a twin
executable whose loops run host-driven (same kernels, timed per step; see ``profile_runs``).

Not thread-safe against other calls of the same executable while a profile runs (they would
be timed too): profiles run from one thread, as the notebook and the command line do.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Callable

from .cpu_executable import CpuExecutable

# A profile runs the program at least this many times, and more while they take less time
# than the budget (tiny programs need many runs for a stable per-step time).
MIN_RUNS = 3
MAX_RUNS = 2000
BUDGET_S = 0.3
# Step times kept over all timed runs at most (runs x steps): a program of many steps runs fewer times.
MAX_KEPT_TIMES = 200_000


@dataclass
class StepTime:
    """One step (an instruction of a program) over the timed runs kept (see ``TimedRuns``)."""
    program: str                      # the computation it belongs to
    instruction: str                  # its HLO instruction name
    exclusive_s: float = 0.0          # per run: its own time, without the steps run inside it
    inclusive_s: float = 0.0          # per run: with them
    calls: float = 0.0                # per run: how often it ran (a loop body's step: trips)


@dataclass
class TimedRuns:
    """What a profile measured, per run (averaged over the faster half of the timed runs)."""
    runs: int                         # timed runs made
    call_s: float                     # median time of a normal call (no hooks: the real cost)
    total_s: float                    # mean time of a timed run (hooks on), the kept runs
    steps: dict[tuple[str, str], StepTime] = field(default_factory=dict)
    program_runs: dict[str, float] = field(default_factory=dict)    # nested program -> runs per run
    # The loops that run as one C function: instruction -> (the steps of the host-driven twin's
    # loop, its programs' runs); the split of the native loop's time over the body's kernels.
    native_loops: dict[str, "TimedRuns"] = field(default_factory=dict)

    @property
    def steps_s(self) -> float:
        return sum(s.exclusive_s for s in self.steps.values())


class _Clock:
    """Shared by a run's wrappers: the time of steps run inside the current one."""
    __slots__ = ("child",)

    def __init__(self):
        self.child = 0


def _timed(thunk: Callable, record: list, clock: _Clock) -> Callable:
    """``thunk`` with its time added to ``record`` = [exclusive ns, inclusive ns, calls]."""
    now = time.perf_counter_ns

    def run(*args):
        outer = clock.child
        clock.child = 0
        start = now()
        try:
            return thunk(*args)
        finally:
            took = now() - start
            record[0] += took - clock.child
            record[1] += took
            record[2] += 1
            clock.child = outer + took
    return run


def _counted(run: Callable, counter: list) -> Callable:
    def counting(args):
        counter[0] += 1
        return run(args)
    return counting


@contextlib.contextmanager
def timing_hooks(cpu: CpuExecutable):
    """Within: every step of every program of ``cpu`` is timed into the yielded tables
    ``(steps: {(program, instruction): [excl ns, incl ns, calls]}, runs: {program: [n]})``."""
    clock = _Clock()
    records: dict[tuple[str, str], list] = {}
    runs: dict[str, list] = {}
    saved = []
    try:
        for program in cpu.programs.values():
            comp = program.computation
            ops = [i for i in comp.instructions if i.opcode != "parameter"]
            original = list(program.steps)
            saved.append((program, original))
            for k, (instr, (thunk, operands, out, places)) in enumerate(zip(ops, original)):
                record = records.setdefault((comp.name, instr.name), [0, 0, 0])
                program.steps[k] = (_timed(thunk, record, clock), operands, out, places)
            if comp is not cpu.module.entry:
                runs[comp.name] = [0]
                program.run = _counted(type(program).run.__get__(program), runs[comp.name])
        yield records, runs
    finally:
        for program, original in saved:
            program.steps[:] = original
            program.__dict__.pop("run", None)


def _median(values: list[float]) -> float:
    values = sorted(values)
    return values[len(values) // 2]


def _normal_call_s(cpu: CpuExecutable, inputs: list, runs: int) -> float:
    """Median time of ``cpu.run`` as a caller runs it (its fastest path, no hooks)."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        cpu.run(inputs)
        times.append(time.perf_counter() - start)
    return _median(times)


def profile_runs(cpu: CpuExecutable, inputs: list, *, min_runs: int = MIN_RUNS,
                 budget_s: float = BUDGET_S, twin: Callable[[], CpuExecutable] | None = None) -> TimedRuns:
    """Run ``cpu`` on ``inputs`` with per-step timing (after one warm-up run).

    Kept: the faster half of the timed runs (others on the machine slow some runs down), so
    that step times and the total come from the same runs.  ``twin`` makes the host-driven
    twin for loops compiled whole (called only when ``cpu`` has such loops)."""
    cpu.run(inputs)                                       # warm: pages, caches, thread pool
    general = type(cpu).run
    per_run: list[tuple[float, dict, dict]] = []
    spent, start_all = 0.0, time.perf_counter()
    with timing_hooks(cpu) as (records, runs):
        # (each run's step times are kept until the faster half is chosen: bounded in all)
        most = max(min_runs, min(MAX_RUNS, MAX_KEPT_TIMES // max(1, len(records))))
        while len(per_run) < most and (len(per_run) < min_runs or spent < budget_s):
            for r in records.values():
                r[0] = r[1] = r[2] = 0
            for c in runs.values():
                c[0] = 0
            start = time.perf_counter()
            general(cpu, inputs)
            took = time.perf_counter() - start
            per_run.append((took, {k: tuple(v) for k, v in records.items()},
                            {k: c[0] for k, c in runs.items()}))
            spent = time.perf_counter() - start_all
    call_s = _normal_call_s(cpu, inputs, max(min_runs, min(len(per_run), 200)))
    result = _summary(per_run, call_s)
    native = [name for name, how in cpu.loops.items() if how.startswith("native:")]
    if native and twin is not None:
        host = twin()
        inner = profile_runs(host, inputs, min_runs=min_runs, budget_s=budget_s)
        for name in native:
            result.native_loops[name] = inner
    return result


def _summary(per_run: list, call_s: float) -> TimedRuns:
    kept = sorted(per_run, key=lambda r: r[0])[:max(1, (len(per_run) + 1) // 2)]
    n = len(kept)
    out = TimedRuns(len(per_run), call_s, sum(r[0] for r in kept) / n)
    # (sums first, one division last: a step called once per run has calls == 1.0 exactly)
    sums: dict[tuple[str, str], list] = {}
    for _, records, _ in kept:
        for key, (excl, incl, calls) in records.items():
            total = sums.setdefault(key, [0, 0, 0])
            total[0], total[1], total[2] = total[0] + excl, total[1] + incl, total[2] + calls
    for (program, instr), (excl, incl, calls) in sums.items():
        out.steps[(program, instr)] = StepTime(program, instr, excl * 1e-9 / n, incl * 1e-9 / n, calls / n)
    for _, _, runs in kept:
        for program, count in runs.items():
            out.program_runs[program] = out.program_runs.get(program, 0) + count
    out.program_runs = {program: count / n for program, count in out.program_runs.items()}
    return out
