"""An entry that is only one native loop (parameters and constants in, one array it computes
out) is called straight from the jit fast path (``native_loops.native_entry_runner``): the
general run cost 3x a kernel call per call.  Oracle: eager NumPy, on the fast path and on its
fallback (arguments it cannot hand to C as they are)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

import nbxla

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler: loops stay host-driven")


def scaled_sum(x, n):
    total = np.zeros_like(x)
    for i in range(n):                   # a traced trip count: always an HLO while
        total = total + x * (i + 1)
    return total


def last_value(x, n):
    s = x[0]
    for i in range(n):
        s = s * 0.5 + x[i % 3]
    return s


def test_single_native_loop_entry_takes_the_fast_runner_and_agrees_with_numpy():
    x = np.random.default_rng(3).random((6, 4))
    n = np.array(7)
    jitted = nbxla.jit(scaled_sum)
    for _ in range(3):                            # (the first call compiles, later ones are fast)
        np.testing.assert_allclose(jitted(x, n), scaled_sum(x, n), rtol=1e-12)
    executable = jitted.last_compilation.executable
    assert executable.native.loops and all(v.startswith("native") for v in executable.native.loops.values())
    assert executable.run_single is not None
    # a strided view: the runner falls back to the general path, same answer
    wide = np.random.default_rng(4).random((6, 8))
    np.testing.assert_allclose(jitted(wide[:, ::2], n), scaled_sum(wide[:, ::2], n), rtol=1e-12)
    np.testing.assert_allclose(jitted(x, np.array(0)), scaled_sum(x, np.array(0)))


def test_a_zero_d_result_is_a_numpy_scalar_as_eager():
    x = np.array([0.5, 1.5, 2.5])
    jitted = nbxla.jit(last_value)
    for n in (np.array(5), np.array(5), np.array(0)):
        got, want = jitted(x, n), last_value(x, n)
        assert type(got) is type(want) and np.isclose(got, want)
