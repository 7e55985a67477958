"""Reductions, arg-reductions and scans against eager NumPy: axis, keepdims, dtype, empties, NaNs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.frontend_util import DTYPES, array_of, check, check_or_same_error

FEW = settings(max_examples=15, deadline=None)


@st.composite
def array_and_axis(draw, dtypes=DTYPES, min_side=0, specials=False):
    x = draw(array_of(dtypes, min_side=min_side, specials=specials))
    choices = [None] + list(range(-x.ndim, x.ndim))
    if x.ndim >= 2:
        choices.append((0, x.ndim - 1))
    return x, draw(st.sampled_from(choices)), draw(st.booleans())


REDUCTIONS = [np.sum, np.prod, np.max, np.min, np.amax, np.amin, np.any, np.all, np.mean,
              np.var, np.std, np.nanmax, np.nanmin]


@pytest.mark.parametrize("fn", REDUCTIONS, ids=lambda f: f.__name__)
@FEW
@given(xak=array_and_axis(specials=True))
def test_reduction(fn, xak):
    x, axis, keepdims = xak
    check_or_same_error(lambda a: fn(a, axis=axis, keepdims=keepdims), x)


@pytest.mark.parametrize("name", ["sum", "prod", "max", "min", "any", "all", "mean", "var", "std"])
@FEW
@given(xak=array_and_axis(min_side=1))
def test_reduction_method(name, xak):
    x, axis, keepdims = xak
    check_or_same_error(lambda a: getattr(a, name)(axis=axis, keepdims=keepdims), x)


@pytest.mark.parametrize("fn", [np.sum, np.prod, np.mean], ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.float32, np.float64, np.bool_])
@pytest.mark.parametrize("acc", [None, np.int64, np.float32, np.float64])
def test_reduction_dtype_argument(fn, dtype, acc):
    x = np.arange(-3, 9, dtype=np.int64).astype(dtype).reshape(3, 4)
    check_or_same_error(lambda a: (fn(a, dtype=acc), fn(a, axis=1, dtype=acc)), x)


@pytest.mark.parametrize("dtype", [np.bool_, np.int8, np.uint8, np.int32, np.int64, np.float16,
                                   np.float32, np.float64, np.complex64])
def test_mean_var_std_result_dtypes(dtype):
    x = (np.arange(12) % 5).astype(dtype).reshape(3, 4)
    check(lambda a: (np.mean(a), np.mean(a, axis=0), np.var(a, axis=1), np.std(a),
                     np.var(a, ddof=1), np.std(a, axis=0, ddof=1, keepdims=True)), x, rtol=2e-3
          if dtype == np.float16 else None)


def test_sum_of_small_ints_promotes_like_numpy():
    check(lambda a, b: (a.sum(), b.sum(), a.prod(), np.add.reduce(a)),
          np.array([100, 100, 100], np.int8), np.array([200, 200], np.uint8))


@pytest.mark.parametrize("fn", [np.argmax, np.argmin], ids=lambda f: f.__name__)
@FEW
@given(xak=array_and_axis([np.dtype(t) for t in (np.bool_, np.int32, np.float32, np.float64)],
                          specials=True))
def test_argreduction(fn, xak):
    x, axis, keepdims = xak
    if isinstance(axis, tuple):
        axis = axis[0]
    check_or_same_error(lambda a: fn(a, axis=axis, keepdims=keepdims), x)


def test_argmax_nan_and_ties():
    x = np.array([[1.0, 3.0, 3.0, np.nan, np.nan], [2, 2, 1, 1, 0], [np.nan, 0, 9, 9, 9]])
    check(lambda a: (np.argmax(a, axis=1), np.argmin(a, axis=1), a.argmax(), a.argmin(axis=0),
                     np.argmax(a[1]), np.argmin(a[1])), x)
    ints = np.array([[5, 5, 1], [0, 7, 7]], np.int32)
    check(lambda a: (np.argmax(a, axis=1), np.argmin(a, axis=1), np.argmax(a)), ints)


def test_empty_reductions():
    e = np.zeros((0, 3), np.float32)
    check(lambda a: (a.sum(), a.sum(axis=0), a.prod(axis=1), a.any(), a.all(axis=0),
                     np.max(a, axis=0, initial=-1.0)), e)
    check_or_same_error(lambda a: a.max(), e)
    check_or_same_error(lambda a: np.argmax(a), e)
    check(lambda a: (np.mean(a, axis=0), np.var(a, axis=0)), np.zeros((0, 3)))


def test_reduction_initial_and_where():
    x = np.arange(12.0).reshape(3, 4)
    mask = np.array([True, False, True, True])
    check(lambda a: (np.sum(a, initial=5), np.max(a, axis=0, initial=7.0),
                     np.sum(a, axis=1, where=mask), np.min(a, axis=1, where=mask, initial=100.0)), x)


@pytest.mark.parametrize("ufunc", [np.add, np.multiply, np.maximum, np.minimum, np.logical_and,
                                   np.logical_or, np.logical_xor, np.bitwise_and, np.bitwise_or,
                                   np.bitwise_xor, np.fmax, np.fmin], ids=lambda u: u.__name__)
@FEW
@given(xak=array_and_axis(min_side=1))
def test_ufunc_reduce(ufunc, xak):
    x, axis, keepdims = xak
    check_or_same_error(lambda a: ufunc.reduce(a, axis=axis, keepdims=keepdims), x)


@pytest.mark.parametrize("fn", [np.cumsum, np.cumprod], ids=lambda f: f.__name__)
@FEW
@given(xak=array_and_axis())
def test_cumulative(fn, xak):
    x, axis, _ = xak
    if isinstance(axis, tuple):
        axis = axis[0]
    check_or_same_error(lambda a: fn(a, axis=axis), x)


@pytest.mark.parametrize("ufunc", [np.add, np.multiply, np.maximum, np.minimum, np.logical_or],
                         ids=lambda u: u.__name__)
def test_ufunc_accumulate(ufunc):
    x = np.array([[3, -1, 4], [1, 5, -9]], np.int32)
    check(lambda a: (ufunc.accumulate(a), ufunc.accumulate(a, axis=1)), x)


def test_cumsum_dtype_and_method():
    x = np.array([[1, 2], [3, 4]], np.int8)
    check(lambda a: (a.cumsum(), a.cumsum(axis=0), np.cumsum(a, dtype=np.float32), a.cumprod(axis=1)), x)
