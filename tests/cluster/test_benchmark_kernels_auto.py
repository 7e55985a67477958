"""The frontend's benchmark-style kernels (tests/frontend/test_benchmark_kernels.py) under
auto-clustering with every array operation recorded (``min_work=1``): three calls each (the
first records and compiles, the next two replay from the tape), results and the arguments
afterwards (in-place writes) equal to eager NumPy's.

Opt-in (``NBXLA_AUTO_SWEEP=1``): with a cold compilation cache it compiles some 200 clusters
(tens of minutes on a 2-core machine); it is the broadest check of recording and replay.
"""

from __future__ import annotations

import copy
import os
import warnings

import numpy as np
import pytest

from nbxla.cluster import AutoFunction
from nbxla.runtime.cache import CompilationCache
from tests.frontend.test_benchmark_kernels import CASES

pytestmark = pytest.mark.skipif(os.environ.get("NBXLA_AUTO_SWEEP") != "1",
                                reason="opt-in sweep: set NBXLA_AUTO_SWEEP=1 (slow to compile)")

# Recorded at min_work=1, this kernel is a chain of ~400 0-d integer operations: LLVM's
# optimizer takes minutes on it (a codegen compile-time limit, not a wrong result).
TOO_SLOW_TO_COMPILE = {"crc16_where"}


def leaves(value):
    if isinstance(value, (tuple, list)):
        return [x for v in value for x in leaves(v)]
    if isinstance(value, dict):
        return [x for v in value.values() for x in leaves(v)]
    return [value]


def assert_same(got, want, rtol):
    got, want = leaves(got), leaves(want)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if isinstance(w, (np.ndarray, np.generic)):
            g, w = np.asarray(g), np.asarray(w)
            assert g.shape == w.shape and g.dtype == w.dtype
            if w.dtype.kind in "fc":
                np.testing.assert_allclose(g, w, rtol=rtol or 1e-6, atol=1e-9)
            else:
                np.testing.assert_array_equal(g, w)
        elif isinstance(w, float):
            assert g == pytest.approx(w, rel=rtol or 1e-6, abs=1e-9, nan_ok=True)
        else:
            assert g == w


@pytest.mark.parametrize("name", [n for n in CASES if n not in TOO_SLOW_TO_COMPILE])
def test_kernel_under_auto_clustering_and_replay_matches_numpy(name):
    case = CASES[name]
    base = case.make_args()
    eager_args = copy.deepcopy(base)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = case.fn(**eager_args)
    except Exception as e:                       # NumPy itself refuses: nothing to compare
        pytest.skip(f"eager NumPy raises {type(e).__name__}")
    f = AutoFunction(case.fn, cache=CompilationCache(), min_work=1, measure=False)
    for _ in range(3):
        args = copy.deepcopy(base)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = f(**args)
        assert_same(got, want, case.rtol)
        assert_same([args[k] for k in sorted(args)], [eager_args[k] for k in sorted(eager_args)],
                    case.rtol)
