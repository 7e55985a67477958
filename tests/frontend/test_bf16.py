"""bf16 in traced NumPy: ``x.astype(ml_dtypes.bfloat16)`` and bf16 arguments, with eager NumPy
on ml_dtypes arrays as the oracle (same dtype; values within bf16's tolerance, and exactly
where both sides round the same f32 result once)."""

from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import pytest

import nbxla
from nbxla.testing import compare_arrays

BF16 = ml_dtypes.bfloat16
RNG = np.random.default_rng(5)
X = RNG.standard_normal((4, 8)).astype(np.float32)
W = RNG.standard_normal((8, 3)).astype(BF16)

CASES = {
    "astype_and_scalars": (lambda x, w: x.astype(BF16) * 2 + 1, True),
    "relu": (lambda x, w: np.maximum(x.astype(BF16), 0), True),
    "exp_tanh": (lambda x, w: np.tanh(np.exp(x.astype(BF16))), False),
    "sqrt_abs": (lambda x, w: np.sqrt(np.abs(x.astype(BF16))), True),
    "matmul_gives_f32": (lambda x, w: x.astype(BF16) @ w, False),
    "dot_rounds_to_bf16": (lambda x, w: np.dot(x.astype(BF16), w), False),
    "row_max": (lambda x, w: x.astype(BF16).max(axis=1), True),
    "small_row_sum": (lambda x, w: x.astype(BF16).sum(axis=1), False),
    "promote_with_f32": (lambda x, w: x + x.astype(BF16), True),
    "bf16_argument": (lambda x, w: (w * w + w).astype(np.float32), True),
}


@pytest.mark.parametrize("device", ["cpu", "evaluator"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_eager_numpy_on_ml_dtypes(name, device):
    fn, exact = CASES[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # (bf16 dots run through the evaluator's rule)
        got = nbxla.jit(fn, device=device)(X, W)
    want = fn(X, W)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    if exact:
        assert np.array_equal(np.asarray(got).view(np.uint8), np.asarray(want).view(np.uint8))
    else:
        ok, detail = compare_arrays(got, want)
        assert ok, detail
