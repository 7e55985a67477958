"""A native loop inside a straight-line entry is called on its state's leaves
(``NativeLoopThunk.flat_runner``), not through the general thunk (flatten, check, rebuild: ~5 us,
more than a 1000-byte CRC-16 loop).  Oracle: eager NumPy, for loops whose state passes arrays
through unchanged, changes several leaves, and is read after the loop."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

import nbxla
from nbxla.examples import crc16
from nbxla.runtime.cache import CompilationCache

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler: loops stay host-driven")


def two_sums(x, y):
    s = 0.0
    t = 1.0
    for i in range(x.shape[0]):
        s = s + x[i] * y[i]
        t = t * 0.5 + x[i]
    return s * 2 + t


def test_crc16_runs_its_loop_on_the_leaves_and_agrees_with_numpy():
    f = nbxla.jit(crc16, cache=CompilationCache())
    rng = np.random.default_rng(0)
    for n in (1, 7, 300):
        data = rng.integers(0, 256, n).astype(np.uint8)
        for _ in range(2):
            assert f(data) == crc16(data)
    runner = f.last_compilation.executable.run_single      # (300 bytes: a rolled loop)
    assert "= loop" in runner.source


def test_a_loop_changing_two_leaves_and_passing_arrays_through():
    f = nbxla.jit(two_sums, cache=CompilationCache())
    rng = np.random.default_rng(1)
    for n in (30, 50):
        x, y = rng.random(n), rng.random(n)
        for _ in range(2):
            np.testing.assert_allclose(f(x, y), two_sums(x, y), rtol=1e-12)
        assert "= loop" in f.last_compilation.executable.run_single.source
