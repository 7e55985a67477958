"""Entries around a native loop run through generated runners, not the general step loop:
a loop's changed leaves are arrays it made for the call (``CpuExecutable._results_are_fresh``),
so an entry with kernels before its loop (``y = zeros; y[0] = ...; for ...``) runs straight-line
(``straight_line.py``); an entry returning several of the loop's results (a result and the
extremes of its index checks) runs through the loop's fast caller
(``native_loops.native_entry_outputs_runner``).  Both against NumPy, with the other side of
each condition: a loop returning the array it passes through unchanged (the caller's input:
not fresh, the general run, and no result sharing the caller's memory)."""

from __future__ import annotations

import numpy as np
import pytest

import nbxla
from nbxla.examples import histogram_fill, iir_filter
from tests.frontend_util import use_flags


def passes_through(x, n):
    """The loop reads x and never writes it: x is a passed-through leaf, returned."""
    s = np.zeros(4)
    for i in range(n):
        s[i % 4] += x[i]
    return s, x


def _executable(jitted):
    return jitted.last_compilation.executable.native      # (the CpuExecutable)


@pytest.mark.parametrize("n", [6, 300])
def test_kernels_before_a_loop_run_straight_line(n, monkeypatch):
    use_flags(monkeypatch, "--unroll_max=0")
    x = np.random.default_rng(n).random(n)
    jitted = nbxla.jit(iir_filter)
    for _ in range(2):
        np.testing.assert_allclose(jitted(x, 0.2, 0.3, 0.5), iir_filter(x, 0.2, 0.3, 0.5), rtol=1e-13)
    ex = _executable(jitted)
    assert all(how.startswith("native") for how in ex.loops.values()) and ex.loops
    assert "loop" in ex.run.source      # (the generated straight-line runner)


def test_a_loop_with_checked_indices_runs_through_its_fast_caller(monkeypatch):
    use_flags(monkeypatch, "--unroll_max=0")
    values = np.arange(200) % 64
    jitted = nbxla.jit(histogram_fill)
    np.testing.assert_array_equal(jitted(values, 64), histogram_fill(values, 64))
    ex = _executable(jitted)
    assert "loop(" in ex.run.source
    values[3] = 64
    with pytest.raises(IndexError, match="index 64 is out of bounds"):
        jitted(values, 64)


def test_a_passed_through_input_is_returned_as_numpy_would(monkeypatch):
    use_flags(monkeypatch, "--unroll_max=0")
    x = np.random.default_rng(1).random(50)
    jitted = nbxla.jit(passes_through)
    got_s, got_x = jitted(x, 50)
    want_s, want_x = passes_through(x, 50)
    np.testing.assert_allclose(got_s, want_s, rtol=1e-13)
    np.testing.assert_array_equal(got_x, want_x)
    assert not np.shares_memory(got_s, x)
    assert got_x is x and want_x is x      # (the caller's own array, as NumPy returns it)


def test_an_entry_of_fills_and_a_loop_keeps_the_loops_own_caller(monkeypatch):
    """(trisolv: np.zeros_like filled once, not on every call by the straight-line runner)"""
    use_flags(monkeypatch, "--unroll_max=0")
    from nbxla.examples import trisolv
    rng = np.random.default_rng(3)
    L, b = np.tril(rng.random((30, 30))) + 30 * np.eye(30), rng.random(30)
    jitted = nbxla.jit(trisolv)
    np.testing.assert_allclose(jitted(L, b), trisolv(L, b), rtol=1e-12)
    np.testing.assert_allclose(jitted(L, b), trisolv(L, b), rtol=1e-12)
    assert hasattr(_executable(jitted).run_single, "constants")     # (NativeLoopThunk.entry_runner's)
