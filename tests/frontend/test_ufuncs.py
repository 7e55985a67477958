"""Every supported ufunc and Python operator against eager NumPy (dtype exact, values within tolerance)."""

from __future__ import annotations

import operator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nbxla
from nbxla.frontend.registry import UFUNCS
from tests.frontend_util import (DTYPES, FLOATS, array_of, arrays, broadcast_pair, check,
                                 check_or_same_error, jit)

TRANSCENDENTAL = {np.exp, np.exp2, np.expm1, np.log, np.log2, np.log10, np.log1p, np.sin, np.cos,
                  np.tan, np.arcsin, np.arccos, np.arctan, np.arctan2, np.sinh, np.cosh, np.tanh,
                  np.arcsinh, np.arccosh, np.arctanh, np.hypot, np.logaddexp, np.logaddexp2, np.power,
                  np.float_power, np.cbrt, np.deg2rad, np.rad2deg}

UNARY = sorted((u for u in UFUNCS if u.nin == 1), key=lambda u: u.__name__)
BINARY = sorted((u for u in UFUNCS if u.nin == 2), key=lambda u: u.__name__)
ALL_DTYPES = DTYPES + [np.dtype(np.complex64)]

FEW = settings(max_examples=12, deadline=None)


def _complex_ok(u):
    """Ufuncs whose complex lowering we check (the rest refuse complex or differ in branch cuts)."""
    return u in (np.negative, np.positive, np.conjugate, np.square, np.isnan, np.isinf,
                 np.isfinite, np.add, np.subtract, np.multiply, np.equal, np.not_equal)


@pytest.mark.parametrize("ufunc", UNARY, ids=lambda u: u.__name__)
@FEW
@given(data=st.data())
def test_unary_ufunc(ufunc, data):
    dtypes = ALL_DTYPES if _complex_ok(ufunc) else DTYPES
    x = data.draw(array_of(dtypes, specials=True), label="x")
    check_or_same_error(lambda a: ufunc(a), x, transcendental=ufunc in TRANSCENDENTAL)


def _binary_pair(ufunc):
    dtypes = ALL_DTYPES if _complex_ok(ufunc) else DTYPES
    return broadcast_pair(dtypes, specials=True)


@pytest.mark.parametrize("ufunc", BINARY, ids=lambda u: u.__name__)
@FEW
@given(data=st.data())
def test_binary_ufunc(ufunc, data):
    a, b = data.draw(_binary_pair(ufunc), label="a, b")
    if ufunc in (np.power, np.float_power) and b.dtype.kind in "iu" and a.dtype.kind in "iub":
        b = np.abs(b)          # NumPy raises for negative integer powers of integers
    if ufunc in (np.left_shift, np.right_shift) and b.dtype.kind in "iu":
        b = np.abs(b) % 8      # shifts past the width are platform-defined in C
    check_or_same_error(lambda x, y: ufunc(x, y), a, b, transcendental=ufunc in TRANSCENDENTAL)


# ---- Python operators ---------------------------------------------------------------------------

BINARY_OPERATORS = [operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv,
                    operator.mod, operator.lt, operator.le, operator.gt, operator.ge, operator.eq,
                    operator.ne, operator.and_, operator.or_, operator.xor]


@pytest.mark.parametrize("op", BINARY_OPERATORS, ids=lambda o: o.__name__)
@FEW
@given(pair=broadcast_pair(DTYPES, specials=True))
def test_binary_operator(op, pair):
    check_or_same_error(lambda x, y: op(x, y), *pair)


@pytest.mark.parametrize("op", [operator.neg, operator.pos, operator.abs, operator.invert],
                         ids=lambda o: o.__name__)
@FEW
@given(x=array_of(DTYPES, specials=True))
def test_unary_operator(op, x):
    check_or_same_error(lambda a: op(a), x)


@FEW
@given(pair=broadcast_pair(DTYPES))
def test_matmul_operator(pair):
    a, b = pair
    if a.ndim == 0 or b.ndim == 0:
        return
    a2 = np.ones(a.shape + (3,), a.dtype)
    b2 = np.ones((3,) + b.shape[-1:], b.dtype)
    check_or_same_error(lambda x, y: x @ y, a2, b2)


@pytest.mark.parametrize("op", [operator.iadd, operator.isub, operator.imul, operator.itruediv,
                                operator.ifloordiv, operator.imod, operator.iand, operator.ior,
                                operator.ixor], ids=lambda o: o.__name__)
@FEW
@given(data=st.data())
def test_inplace_operator_on_argument(op, data):
    a = data.draw(array_of(DTYPES, min_dims=1), label="a")
    b = data.draw(arrays(data.draw(st.sampled_from(DTYPES)), a.shape[-1:]), label="b")

    def f(x, y):
        x = op(x, y)
        return x
    check_or_same_error(f, a, b)


@FEW
@given(x=array_of(FLOATS, min_dims=1), y=st.floats(-3, 3))
def test_reflected_operators_with_python_scalars(x, y):
    check(lambda a: (y - a, y / (a + 100), y * a, y ** np.abs(a), 2 ** a, a ** 2, y + a), x,
          transcendental=True)


@pytest.mark.parametrize("op", [operator.lshift, operator.rshift])
def test_shift_operators(op):
    check(lambda a, b: op(a, b), np.array([-5, 3, 7, 100], np.int32), np.array([1, 2, 3, 4], np.int32))
    check(lambda a: op(a, 2), np.array([-5, 3, 7, 100], np.int64))


def test_divmod_operator():
    a = np.array([-7, -1, 0, 5, 7], np.int32)
    b = np.array([2, -3, 0, 0, -2], np.int32)
    check(lambda x, y: divmod(x, y), a, b)
    check(lambda x, y: divmod(x, y), a.astype(np.float64), b.astype(np.float64))


# ---- NEP 50 promotion ---------------------------------------------------------------------------

@pytest.mark.parametrize("fn, x", [
    (lambda x: x * 2.0, np.ones(3, np.float32)),
    (lambda x: x + 1, np.ones(3, np.int8)),
    (lambda x: x + 1, np.ones(3, np.uint8)),
    (lambda x: x / 2, np.ones(3, np.int32)),
    (lambda x: x * 2, np.ones(3, np.float16)),
    (lambda x: x + 1.5, np.ones(3, np.int16)),
    (lambda x: x + np.float64(1), np.ones(3, np.float32)),
    (lambda x: x + np.int64(1), np.ones(3, np.int8)),
    (lambda x: x + 1j, np.ones(3, np.float32)),
    (lambda x: x > 1.5, np.ones(3, np.int32)),
    (lambda x: x + True, np.ones(3, np.int8)),
    (lambda x: x * 2, np.ones((), np.float32)),
    (lambda x: x + np.ones(3, np.float64), np.ones(3, np.float32)),
    (lambda x: x + np.ones(3, np.int64), np.ones(3, np.uint32)),
    (lambda x: x // 2, np.array([-3, 3], np.int8)),
    (lambda x: np.sqrt(x), np.arange(4, dtype=np.int8)),
    (lambda x: np.sqrt(x), np.arange(4, dtype=np.int32)),
    (lambda x: np.exp(x), np.arange(4, dtype=np.float16)),
])
def test_nep50_promotion(fn, x):
    check(fn, x, transcendental=True)


def test_python_int_out_of_range_raises_like_numpy():
    with pytest.raises(OverflowError):
        jit(lambda x: x + 300)(np.ones(3, np.int8))


# ---- integer division, NaN propagation, wrap-around ---------------------------------------------

@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint8, np.uint32])
def test_integer_floor_divide_and_mod(dtype):
    info = np.iinfo(dtype)
    vals = np.array(sorted(v for v in {-7, -6, -1, 0, 1, 6, 7, info.max, info.min}
                           if info.min <= v <= info.max), dtype)
    a, b = np.meshgrid(vals, vals)
    check(lambda x, y: (x // y, x % y, np.fmod(x, y), np.divmod(x, y)), a, b)


@pytest.mark.parametrize("dtype", FLOATS)
def test_float_floor_divide_and_mod(dtype):
    vals = np.array([-7.5, -6, -1, -0.0, 0.0, 1, 6, 7.5, np.inf, -np.inf, np.nan], dtype)
    a, b = np.meshgrid(vals, vals)
    check(lambda x, y: (x // y, x % y, np.fmod(x, y)), a, b)


def test_maximum_vs_fmax_nan_propagation():
    a = np.array([1.0, np.nan, np.nan, 3.0, -0.0], np.float32)
    b = np.array([np.nan, 2.0, np.nan, 1.0, 0.0], np.float32)
    check(lambda x, y: (np.maximum(x, y), np.minimum(x, y), np.fmax(x, y), np.fmin(x, y)), a, b)


def test_integer_wraparound():
    a = np.array([127, -128, 100], np.int8)
    check(lambda x: (x + 1, x * 3, -x, np.abs(x), x - 100), a)
    u = np.array([0, 1, 255], np.uint8)
    check(lambda x: (x - 1, x * 2, x + 250), u)


def test_ufunc_out_and_where():
    def f(a, b):
        np.add(a, b, out=a)
        np.multiply(a, 2, out=b, where=a > 2)
        return a + b
    check(f, np.arange(5.0), np.ones(5))


def test_ufunc_out_on_view_of_argument():
    def f(a):
        np.negative(a[1:3], out=a[1:3])
        return a.sum()
    check(f, np.arange(6.0).reshape(2, 3).T.copy())


def test_ufunc_dtype_argument():
    check(lambda a, b: np.add(a, b, dtype=np.float32), np.arange(3), np.arange(3))


@FEW
@given(pair=broadcast_pair([np.dtype(np.int32), np.dtype(np.float64)]))
def test_ufunc_outer(pair):
    check(lambda a, b: np.multiply.outer(a, b), *pair)


@pytest.mark.parametrize("dtype", [np.int32, np.float32, np.float64])
def test_ufunc_at_applies_every_repeated_index(dtype):
    """np.add.at is unbuffered: a histogram with a fixed number of bins compiles (a scatter)."""
    def histogram(x, nbins):
        bins = np.clip((x * nbins).astype(np.int64), 0, nbins - 1)
        counts = np.zeros_like(x, dtype=np.int64, shape=(nbins,))
        np.add.at(counts, bins, 1)
        return counts

    def updates(a, i, j, v):
        np.add.at(a, (i, j), v)                 # points
        np.maximum.at(a, i, 3)                  # rows, a scalar broadcast to each
        np.subtract.at(a, [0, 0, -1], 1)        # constant indices, negative wrap
        np.multiply.at(a, i[:2], 2)
        np.minimum.at(a, j, a[0].copy())
        return a
    check(histogram, np.random.default_rng(0).random(40).astype(np.float32), 7)
    a = (np.arange(12) % 5).astype(dtype).reshape(4, 3)
    check(updates, a, np.array([0, 1, 1, -1]), np.array([2, 0, 0, 1]), np.arange(4).astype(dtype))
    check_or_same_error(lambda x: np.add.at(x, [4], 1), a)          # NumPy's IndexError


def test_ufunc_at_refuses_what_it_cannot_do_exactly():
    with pytest.raises(nbxla.NotCompilableError, match="compute in float64") as info:
        jit(lambda a: np.multiply.at(a, [0, 0], 1.5))(np.ones(3, np.int64))
    assert "astype" in info.value.hint          # NumPy rounds after every update: refused
    with pytest.raises(nbxla.NotCompilableError, match="integer index arrays"):
        jit(lambda a: np.add.at(a, (slice(None), [0]), 1.0))(np.ones((2, 2)))
    with pytest.raises(nbxla.NotCompilableError, match="np.divide.at is not supported"):
        jit(lambda a: np.divide.at(a, [0], 2.0))(np.ones(2))


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_complex_arithmetic(dtype):
    a = np.array([1 + 2j, -3.5 + 0.5j, 0j], dtype)
    b = np.array([2 - 1j, 1j, 4 + 0j], dtype)
    check(lambda x, y: (x + y, x - y, x * y, x / (y + 1), -x, np.conj(x), x.real, x.imag,
                        np.abs(x), x == y, np.real(x), np.imag(x), np.conjugate(x)), a, b)


def test_exact_powers_in_log2_log10():
    x = np.array([1, 2, 8, 1024, 2.0 ** -10, 10, 1000, 1e15, 1e-3, 1e22])
    check(lambda a: (np.floor(np.log10(a)), np.floor(np.log2(a)), np.log10(a), np.log2(a)), x)


def test_zero_dim_bitcast_paths():
    # copysign/floor-divide on 0-d floats go through bitcast-convert of a 0-d array
    check(lambda a, b: (np.copysign(a, b), a // b, a % b, np.signbit(b)),
          np.float32(3.0) * np.ones((), np.float32), -np.zeros((), np.float32))


SPECIALS = np.array([0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 2.0, -3.5, 1e-30, 40.0, -40.0, 1e30, -1e30,
                     8.0, 1000.0, 1e-3, 1024.0, 88.5, -709.5, 3e38, 1e300,
                     np.inf, -np.inf, np.nan])


def _specials(dtype):
    with np.errstate(over="ignore"):
        return SPECIALS.astype(dtype)


@pytest.mark.parametrize("ufunc", UNARY, ids=lambda u: u.__name__)
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_unary_ufunc_special_values(ufunc, dtype):
    check_or_same_error(lambda a: ufunc(a), _specials(dtype), transcendental=ufunc in TRANSCENDENTAL)


@pytest.mark.parametrize("ufunc", BINARY, ids=lambda u: u.__name__)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_binary_ufunc_special_values(ufunc, dtype):
    a, b = np.meshgrid(_specials(dtype), _specials(dtype))
    check_or_same_error(lambda x, y: ufunc(x, y), a, b, transcendental=ufunc in TRANSCENDENTAL)


@pytest.mark.parametrize("ufunc", UNARY + BINARY, ids=lambda u: u.__name__)
@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint32, np.uint64])
def test_small_and_unsigned_integer_dtypes(ufunc, dtype):
    info = np.iinfo(dtype)
    vals = np.array(sorted(v for v in {0, 1, 2, 3, 7, -1, -7, info.max, info.min}
                           if info.min <= v <= info.max), dtype)
    args = list(np.meshgrid(vals, vals)) if ufunc.nin == 2 else [vals]
    if ufunc in (np.left_shift, np.right_shift, np.power, np.float_power):
        args[1] = args[1] % 5
    check_or_same_error(lambda *x: ufunc(*x), *args, transcendental=ufunc in TRANSCENDENTAL)
