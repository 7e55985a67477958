"""NumPy's scalar types called on traced values (``np.uint32(data[i])``, ``np.float32(x)``):
they cast as ``astype`` does, inside loops and out.  Before, NumPy asked the tracer for its
value (ConcretizationError) -- an FNV-1a hash loop written numba-style could not compile.
Oracle: eager NumPy, values and dtypes; loops on both sides of the unroll threshold.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.frontend_util import UNROLL_FLAGS, check, use_flags

RNG = np.random.default_rng(35)


def fnv1a(data):
    h = np.uint32(2166136261)
    for i in range(data.shape[0]):
        h = h ^ np.uint32(data[i])
        h = h * np.uint32(16777619)
    return h


def casts(x, k):
    return (np.float32(x), np.int64(x[0] * 3.7), np.uint8(k), np.float64(np.float32(x[1])),
            np.complex128(x[2]), np.int32(x) + 1)


@pytest.mark.parametrize("flags", UNROLL_FLAGS)
@pytest.mark.parametrize("n", [1, 3, 40])
def test_hash_loop(monkeypatch, flags, n):
    use_flags(monkeypatch, flags)
    with np.errstate(over="ignore"):
        check(fnv1a, RNG.integers(0, 256, n).astype(np.uint8))


def test_scalar_type_casts():
    check(casts, RNG.random(4) * 10, np.int64(300))
