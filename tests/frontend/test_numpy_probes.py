"""Adversarial probes where nbxla once differed from eager NumPy (issue 28): each test runs the
same function eagerly and compiled and compares, or checks NumPy's error."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import nbxla
from nbxla.testing import compare_arrays


def _same(got, want):
    ok, detail = compare_arrays(np.asarray(got), np.asarray(want))
    assert ok, detail


# ---- float16 reductions: NumPy accumulates float16 sums in float32 ------------------------------

@pytest.mark.parametrize("name", ["sum", "mean", "var", "std"])
@pytest.mark.parametrize("scale", [1.0, 10.0])     # 10: var's float16 sum of squares overflows
def test_float16_reductions_of_10000_elements(name, scale):
    x = (np.random.default_rng(0).random(10_000) * scale).astype(np.float16)
    fn = getattr(np, name)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        want = fn(x)
    got = nbxla.jit(lambda a: fn(a))(x)
    _same(got, want)
    _same(nbxla.jit(lambda a: fn(a.reshape(100, 100), axis=1))(x), fn(x.reshape(100, 100), axis=1))
