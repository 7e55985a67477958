"""The frontend's benchmark-style kernels (tests/frontend/test_benchmark_kernels.py) under
auto mode: three calls each, results and the arguments afterwards (in-place writes) equal to
eager NumPy's.

* As auto mode runs them (whole-function compilation where it applies, the rest clustered
  with every array operation recorded, ``min_work=1``): always.
* Clustered only (``whole=False``: the first call records and compiles, the next two replay
  from the tape): opt-in (``NBXLA_AUTO_SWEEP=1``), since with a cold compilation cache it
  compiles some 200 clusters (tens of minutes on a 2-core machine); it is the broadest check
  of recording and replay.
"""

from __future__ import annotations

import copy
import os
import warnings

import numpy as np
import pytest

from nbxla.cluster import AutoFunction
from nbxla.runtime.cache import CompilationCache
from nbxla.testing import compare_arrays
from tests.frontend.test_benchmark_kernels import CASES

CLUSTERED_ONLY = pytest.param(False, id="clustered", marks=pytest.mark.skipif(
    os.environ.get("NBXLA_AUTO_SWEEP") != "1",
    reason="opt-in sweep: set NBXLA_AUTO_SWEEP=1 (slow to compile)"))

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
            ok, detail = compare_arrays(g, w, rtol=rtol)      # (the per-dtype tolerances)
            assert ok, detail
        elif isinstance(w, float):
            assert g == pytest.approx(w, rel=rtol or 1e-6, abs=1e-9, nan_ok=True)
        else:
            assert g == w


@pytest.mark.parametrize("whole", [pytest.param(True, id="auto"), CLUSTERED_ONLY])
@pytest.mark.parametrize("name", [n for n in CASES if n not in TOO_SLOW_TO_COMPILE])
def test_kernel_under_auto_clustering_and_replay_matches_numpy(name, whole):
    case = CASES[name]
    base = case.make_args()
    eager_args = copy.deepcopy(base)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = case.fn(**eager_args)
    except Exception as e:                       # NumPy itself refuses: nothing to compare
        pytest.skip(f"eager NumPy raises {type(e).__name__}")
    f = AutoFunction(case.fn, cache=CompilationCache(), min_work=1, measure=False, whole=whole)
    for _ in range(3):
        args = copy.deepcopy(base)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = f(**args)
        assert_same(got, want, case.rtol)
        assert_same([args[k] for k in sorted(args)], [eager_args[k] for k in sorted(eager_args)],
                    case.rtol)
