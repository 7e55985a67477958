"""The loop programs of tests/frontend/test_loop_programs.py (polybench/npbench shapes with
Python loops, create-then-fill, control flow on values) under auto mode: every call (the
first, checked one and the measured ones after it, each on fresh copies of the inputs) gives
NumPy's result and NumPy's writes into the arguments, and each compiles whole."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from nbxla.cluster import AutoFunction
from nbxla.runtime.cache import CompilationCache
from nbxla.testing import compare_arrays
from tests.frontend.test_loop_programs import CASES
from tests.frontend_util import quiet


def leaves(value):
    if isinstance(value, (tuple, list)):
        return [x for item in value for x in leaves(item)]
    return [value]


@pytest.mark.parametrize("name", sorted(CASES))
def test_loop_program_under_auto_mode_matches_numpy(name):
    case = CASES[name]
    base = case.make_args()
    f = AutoFunction(case.fn, cache=CompilationCache())
    for _ in range(4):
        eager_args, auto_args = copy.deepcopy(base), copy.deepcopy(base)
        with quiet():
            want, got = case.fn(*eager_args), f(*auto_args)
        for g, w in zip(leaves((got, list(auto_args))), leaves((want, list(eager_args))),
                        strict=True):
            if isinstance(w, (np.ndarray, np.generic)):
                ok, detail = compare_arrays(g, w, rtol=case.rtol)
                assert ok, detail
            else:
                assert type(g) is type(w)
                assert g == (pytest.approx(w, rel=1e-9) if isinstance(w, float) else w)
    assert f._whole, f.whole_refused
