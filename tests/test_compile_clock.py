"""The stage clock behind ``benchmarks/compile_time.py --breakdown`` (nbxla/compile_clock.py):
exclusive times per stage that add up to the recorded span, nothing kept while not recording,
and a real first call charged to the compiler's stages."""

from __future__ import annotations

import time

import numpy as np

import nbxla
from nbxla.compile_clock import recording, stage


def _busy(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_nested_stages_are_exclusive_and_add_up():
    start = time.perf_counter()
    with recording() as times:
        with stage("outer"):
            _busy(0.02)
            with stage("inner"):
                _busy(0.03)
            with stage("inner"):            # (a stage met twice adds up)
                _busy(0.01)
        _busy(0.005)
    span = time.perf_counter() - start
    assert set(times) == {"outer", "inner", "other"}
    assert times["inner"][1] >= 0.04 - 1e-3 and times["outer"][1] >= 0.02 - 1e-3
    assert times["outer"][1] < 0.04          # (the inner stages' time is not the outer one's)
    assert sum(wall for wall, _ in times.values()) <= span
    assert "inner" in times.to_text()


def test_stages_outside_a_recording_keep_nothing():
    with stage("alone"):
        _busy(0.001)
    with recording() as times:
        pass
    assert "alone" not in times


def test_a_first_call_is_charged_to_the_compiler_stages(monkeypatch):
    monkeypatch.setenv("NBXLA_CACHE_DIR", "off")        # (compiled here, not loaded from disk)
    f = nbxla.jit(lambda x: np.sin(x) * 2 + 1)
    x = np.linspace(0, 1, 1000)
    with recording() as times:
        f(x)
    assert {"trace", "passes", "llvm-ir", "llvm-optimize", "machine-code", "run"} <= set(times)
    with recording() as again:               # (a cache hit compiles nothing)
        f(x)
    assert not {"trace", "passes", "llvm-optimize"} & set(again)
