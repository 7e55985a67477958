"""Where a first call's time goes, stage by stage: tracing, the passes, LLVM IR emission, LLVM's
optimizer, machine code, runtime setup, the run.

The stages say ``with stage("llvm-optimize"):``; nothing is measured unless a caller records
(``with recording() as times:``, e.g. ``benchmarks/compile_time.py --breakdown``), so the
stages cost one attribute lookup otherwise.  Time is exclusive: entering a nested stage pauses
the enclosing one, so the stages' times add up to the recorded span (the rest is ``other``).
Both wall-clock and CPU seconds are kept: on a loaded machine the wall clock mostly measures
the wait for a core, the CPU time the work.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager

_local = threading.local()


class StageTimes(dict):
    """stage name -> [wall seconds, CPU seconds], exclusive of nested stages."""

    def add(self, name: str, wall: float, cpu: float) -> None:
        slot = self.setdefault(name, [0.0, 0.0])
        slot[0] += wall
        slot[1] += cpu

    def to_text(self) -> str:
        total_wall = sum(w for w, _ in self.values()) or 1.0
        total_cpu = sum(c for _, c in self.values()) or 1.0
        rows = [f"  {name:<22}{w * 1e3:9.1f} ms wall {100 * w / total_wall:5.1f}%  {c * 1e3:9.1f} ms cpu "
                f"{100 * c / total_cpu:5.1f}%" for name, (w, c) in sorted(self.items(), key=lambda kv: -kv[1][1])]
        return "\n".join(rows)


def _now() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


@contextmanager
def recording():
    """Record the stages run by this thread inside the ``with`` block; yields the StageTimes
    (filled when the block ends).  Time outside any named stage is ``other``."""
    times = StageTimes()
    previous = getattr(_local, "stack", None)
    _local.stack = [["other", *_now()]]
    _local.times = times
    try:
        yield times
    finally:
        name, wall, cpu = _local.stack[0]
        now_wall, now_cpu = _now()
        times.add(name, now_wall - wall, now_cpu - cpu)
        _local.stack = previous


def recording_stages() -> bool:
    """Is a recording on in this thread?  (Callers on a per-call path skip ``stage``'s
    context manager when not: entering and leaving it costs about a microsecond.)"""
    return getattr(_local, "stack", None) is not None


@contextmanager
def stage(name: str):
    """Charge the time inside the block to ``name`` (while a recording is on)."""
    stack = getattr(_local, "stack", None)
    if stack is None:
        yield
        return
    times = _local.times
    now_wall, now_cpu = _now()
    outer = stack[-1]
    times.add(outer[0], now_wall - outer[1], now_cpu - outer[2])
    stack.append([name, now_wall, now_cpu])
    try:
        yield
    finally:
        now_wall, now_cpu = _now()
        inner = stack.pop()
        times.add(name, now_wall - inner[1], now_cpu - inner[2])
        outer[1], outer[2] = now_wall, now_cpu
