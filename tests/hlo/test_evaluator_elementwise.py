"""Elementwise rules: XLA semantics, hand-checked edge cases, NumPy where they coincide."""

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

from nbxla.errors import EvaluationError
from nbxla.hlo import Builder, Shape
from nbxla.hlo.evaluator import evaluate
from nbxla.hlo.evaluator_elementwise import total_order_key

from tests.evaluator_util import run_op

# The expected values below are computed with NumPy, which warns where HLO just defines results.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

F16, F32, F64 = np.float16, np.float32, np.float64
C64, C128 = np.complex64, np.complex128
INTS = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
SIGNED = [np.int8, np.int16, np.int32, np.int64]
FLOATS = [F16, F32, F64]
SPECIAL = [0.0, -0.0, 1.0, -1.5, 2.5, np.inf, -np.inf, np.nan, 1e-3, 7.0]


def floats(dtype):
    return np.array(SPECIAL, dtype)


def same(got, want):
    """Identical dtype, shape and values (NaN == NaN, -0 distinct from +0 for floats)."""
    want = np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    if want.dtype.kind in "fc":
        assert np.array_equal(got, want, equal_nan=True), (got, want)
        if want.dtype.kind == "f":  # zeros must keep their sign (NaN's sign is unspecified)
            numbers = ~np.isnan(want)
            assert np.array_equal(np.signbit(got[numbers]), np.signbit(want[numbers])), (got, want)
    else:
        assert np.array_equal(got, want), (got, want)


# --- unary, where NumPy has the same semantics ----------------------------------------------

NUMPY_UNARY = {
    "negate": np.negative, "exponential": np.exp, "exponential-minus-one": np.expm1,
    "log": np.log, "log-plus-one": np.log1p, "sqrt": np.sqrt, "tanh": np.tanh,
    "sine": np.sin, "cosine": np.cos, "tan": np.tan, "floor": np.floor, "ceil": np.ceil,
    "round-nearest-even": np.rint, "is-finite": np.isfinite, "abs": np.abs, "cbrt": np.cbrt,
}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("opcode", sorted(NUMPY_UNARY))
def test_float_unary_matches_numpy(opcode, dtype):
    x = floats(dtype)
    same(run_op(opcode, x), NUMPY_UNARY[opcode](x))


@pytest.mark.parametrize("dtype", [C64, C128])
@pytest.mark.parametrize("opcode", ["negate", "exponential", "log", "sqrt", "tanh", "sine", "cosine", "tan",
                                    "abs", "exponential-minus-one", "log-plus-one"])
def test_complex_unary_matches_numpy(opcode, dtype):
    x = np.array([1 + 2j, -0.5 + 0.25j, 0, 3j], dtype)
    got = run_op(opcode, x)
    want = NUMPY_UNARY[opcode](x)
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_unary_on_empty_and_zero_d():
    same(run_op("exponential", np.zeros((0, 3), F32)), np.zeros((0, 3), F32))
    same(run_op("negate", np.array(5, np.int8)), np.array(-5, np.int8))


def test_rsqrt_logistic_erf():
    x = np.array([0.25, 4.0, 0.0, -1.0, np.inf], F32)
    same(run_op("rsqrt", x), np.array([2, 0.5, np.inf, np.nan, 0], F32))
    y = np.array([-1000, -1, 0, 1, 1000, np.nan], F32)
    np.testing.assert_allclose(run_op("logistic", y), 1 / (1 + np.exp(-y.astype(F64))), rtol=1e-6)
    assert run_op("logistic", y).dtype == F32
    for dtype in FLOATS:
        z = np.array([-3, -0.5, 0, 0.5, 2, np.inf, -np.inf, np.nan], dtype)
        got = run_op("erf", z)
        want = np.array([math.erf(v) for v in z.astype(F64)]).astype(dtype)
        same(got, want)


def test_round_half_away_from_zero():
    x = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 0.49999997, -0.3, np.nan, np.inf, -7.0], F32)
    same(run_op("round-nearest-afz", x), np.array([1, 2, 3, -1, -3, 0, -0.0, np.nan, np.inf, -7], F32))
    same(run_op("round-nearest-even", x), np.array([0, 2, 2, -0.0, -2, 0, -0.0, np.nan, np.inf, -7], F32))
    big = np.array([0.49999999999999994, 4503599627370497.0], F64)  # x + 0.5 would round wrongly
    same(run_op("round-nearest-afz", big), np.array([0.0, 4503599627370497.0]))


def test_sign():
    same(run_op("sign", np.array([-0.0, 0.0, -3, np.nan, 2, -np.inf], F32)),
         np.array([-0.0, 0.0, -1, np.nan, 1, -1], F32))
    same(run_op("sign", np.array([-128, 0, 7], np.int8)), np.array([-1, 0, 1], np.int8))
    same(run_op("sign", np.array([0, 9], np.uint32)), np.array([0, 1], np.uint32))
    same(run_op("sign", np.array([3 + 4j, 0], C64)), np.array([0.6 + 0.8j, 0], C64))


@pytest.mark.parametrize("dtype", SIGNED)
def test_abs_and_negate_of_int_min_wrap(dtype):
    info = np.iinfo(dtype)
    x = np.array([info.min, -1, 0, info.max], dtype)
    same(run_op("abs", x), np.array([info.min, 1, 0, info.max], dtype))
    same(run_op("negate", x), np.array([info.min, 1, 0, -info.max], dtype))


def test_abs_of_complex_is_real():
    same(run_op("abs", np.array([3 + 4j], C64)), np.array([5], F32))


def test_not_popcnt_clz():
    same(run_op("not", np.array([True, False])), np.array([False, True]))
    same(run_op("not", np.array([0, -1, 5], np.int8)), np.array([-1, 0, -6], np.int8))
    same(run_op("not", np.array([0, 255], np.uint8)), np.array([255, 0], np.uint8))
    same(run_op("popcnt", np.array([-1, 0, 7, -128], np.int8)), np.array([8, 0, 3, 1], np.int8))
    same(run_op("popcnt", np.array([2 ** 64 - 1], np.uint64)), np.array([64], np.uint64))
    same(run_op("count-leading-zeros", np.array([0, 1, -1, 255, 256, 2 ** 62], np.int64)),
         np.array([64, 63, 0, 56, 55, 1], np.int64))
    same(run_op("count-leading-zeros", np.array([0, 1, 128, 255], np.uint8)), np.array([8, 7, 0, 0], np.uint8))


@given(hnp.arrays(st.sampled_from([np.uint8, np.int16, np.uint32, np.int64]), hnp.array_shapes(max_dims=2, max_side=5)))
@settings(max_examples=40, deadline=None)
def test_clz_popcnt_against_python(x):
    width = 8 * x.dtype.itemsize
    bits = [int(v) % (1 << width) for v in x.reshape(-1)]
    same(run_op("count-leading-zeros", x), np.array([width - b.bit_length() for b in bits]).astype(x.dtype).reshape(x.shape))
    same(run_op("popcnt", x), np.array([bin(b).count("1") for b in bits]).astype(x.dtype).reshape(x.shape))


def test_real_imag_complex():
    z = np.array([1 + 2j, complex(-3.5, -0.0)], C128)
    same(run_op("real", z), np.array([1, -3.5]))
    same(run_op("imag", z), np.array([2, -0.0]))
    x = np.array([1.5, -2], F32)
    same(run_op("real", x), x)
    same(run_op("imag", x), np.zeros(2, F32))
    got = run_op("complex", np.array([np.inf, 1], F32), np.array([0, np.nan], F32))
    assert got.dtype == C64 and got[0].real == np.inf and got[0].imag == 0 and np.isnan(got[1].imag)


# --- conversions ------------------------------------------------------------------------------

def convert(x, element_type):
    return run_op("convert", x, shape=Shape(element_type, x.shape))


@pytest.mark.parametrize("src", FLOATS)
@pytest.mark.parametrize("dst, dtype", [("s8", np.int8), ("s32", np.int32), ("s64", np.int64),
                                        ("u8", np.uint8), ("u32", np.uint32), ("u64", np.uint64)])
def test_float_to_int_saturates_truncates_and_maps_nan_to_zero(src, dst, dtype):
    info = np.iinfo(dtype)
    x = np.array([np.nan, -np.inf, np.inf, -0.0, 2.9, -2.9, 60000.0, -60000.0, 100.5], src)
    want = [0, info.min, info.max, 0, 2, max(-2, info.min), min(60000, info.max), max(-60000, info.min),
            min(100, info.max)]
    same(convert(x, dst), np.array(want, dtype))


def test_float_to_int64_edges():
    x = np.array([2.0 ** 63, 2.0 ** 63 - 1024, -2.0 ** 63, -2.0 ** 64, 1e300], F64)
    same(convert(x, "s64"), np.array([2 ** 63 - 1, 2 ** 63 - 1024, -2 ** 63, -2 ** 63, 2 ** 63 - 1], np.int64))
    same(convert(np.array([2.0 ** 64, 2.0 ** 64 - 2048, -1.0], F64), "u64"),
         np.array([2 ** 64 - 1, 2 ** 64 - 2048, 0], np.uint64))


def test_other_conversions():
    same(convert(np.array([0.0, -0.0, np.nan, 0.1], F32), "pred"), np.array([False, False, True, True]))
    same(convert(np.array([300, -1], np.int32), "u8"), np.array([44, 255], np.uint8))  # wraps
    same(convert(np.array([0, 7], np.int32), "pred"), np.array([False, True]))
    same(convert(np.array([True, False]), "f16"), np.array([1, 0], F16))
    same(convert(np.array([70000], np.int32), "f16"), np.array([np.inf], F16))
    same(convert(np.array([1.5 + 2j, -3.7 + 1j], C64), "f32"), np.array([1.5, -3.7], F32))
    same(convert(np.array([1.5 + 2j, -3.7 + 1j], C64), "s32"), np.array([1, -3], np.int32))
    same(convert(np.array([1.5], F32), "c128"), np.array([1.5 + 0j]))
    same(convert(np.array([1e40], F64), "f32"), np.array([np.inf], F32))


def test_bitcast_convert_same_and_different_widths():
    x = np.array([1.0, -2.0], F32)
    same(run_op("bitcast-convert", x, shape=Shape("u32", (2,))), x.view(np.uint32))
    wide = run_op("bitcast-convert", np.array([0x0102030405060708], np.uint64), shape=Shape("u16", (1, 4)))
    same(wide, np.array([[0x0708, 0x0506, 0x0304, 0x0102]], np.uint16))
    narrow = run_op("bitcast-convert", wide, shape=Shape("s64", (1,)))
    same(narrow, np.array([0x0102030405060708], np.int64))


def test_reduce_precision_to_half_matches_numpy_rounding():
    # Normal f16 range: XLA's bit-level rounding agrees with an f32 -> f16 -> f32 cast.
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(2000) * 100).astype(F32)
    x = np.concatenate([x, np.array([1 + 2 ** -11, 1 + 3 * 2 ** -11, 65504, 65519, 65520, -1e6, np.inf,
                                     np.nan, -0.0], F32)])
    got = run_op("reduce-precision", x, exponent_bits=5, mantissa_bits=10)
    normal = (np.abs(x) >= 2 ** -14) | ~np.isfinite(x)
    same(got[normal], x[normal].astype(F16).astype(F32))


def test_reduce_precision_flushes_target_subnormals_and_keeps_nan():
    x = np.array([1e-6, -1e-6, 1e-5, np.nan, 1.0], F32)
    same(run_op("reduce-precision", x, exponent_bits=5, mantissa_bits=10), np.array([0, -0.0, 0, np.nan, 1], F32))
    # bfloat16-like: 8 exponent bits, 7 mantissa bits, round to nearest even.
    y = np.array([1 + 2 ** -8, 1 + 3 * 2 ** -8, 3.0e38], F32)
    same(run_op("reduce-precision", y, exponent_bits=8, mantissa_bits=7),
         np.array([1, 1 + 2 ** -6, _round_bf16(3.0e38)], F32))
    # f64 down to f32 format equals a cast (normal range).
    z = np.random.default_rng(2).standard_normal(500) * 1e5
    same(run_op("reduce-precision", z, exponent_bits=8, mantissa_bits=23), z.astype(F32).astype(F64))


def _round_bf16(v):
    bits = int(np.float32(v).view(np.uint32))
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return np.uint32(bits).view(F32)


# --- binary arithmetic ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", INTS + FLOATS + [C64, C128])
@pytest.mark.parametrize("opcode, fn", [("add", np.add), ("subtract", np.subtract), ("multiply", np.multiply)])
def test_add_sub_mul_match_numpy_with_wraparound(opcode, fn, dtype):
    rng = np.random.default_rng(3)
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        a = rng.integers(info.min, info.max, 50, dtype=dtype, endpoint=True)
        b = rng.integers(info.min, info.max, 50, dtype=dtype, endpoint=True)
        a[:2], b[:2] = info.max, info.min
    else:
        a, b = (rng.standard_normal((2, 50)) * 10).astype(dtype)
    with np.errstate(all="ignore"):
        same(run_op(opcode, a, b), fn(a, b))


def test_pred_add_is_or_and_multiply_is_and():
    a, b = np.array([True, True, False, False]), np.array([True, False, True, False])
    same(run_op("add", a, b), a | b)
    same(run_op("multiply", a, b), a & b)


@pytest.mark.parametrize("dtype", SIGNED)
def test_signed_division_edges(dtype):
    m = np.iinfo(dtype).min
    a = np.array([7, -7, 7, -7, m, m, 5, 0, -5], dtype)
    b = np.array([2, 2, -2, -2, -1, 0, 0, 0, 0], dtype)
    same(run_op("divide", a, b), np.array([3, -3, -3, 3, m, -1, -1, -1, -1], dtype))
    same(run_op("remainder", a, b), np.array([1, -1, 1, -1, 0, m, 5, 0, -5], dtype))


@pytest.mark.parametrize("dtype", [np.uint8, np.uint64])
def test_unsigned_division_edges(dtype):
    mx = np.iinfo(dtype).max
    a, b = np.array([7, 0, mx, 9], dtype), np.array([2, 0, 0, mx], dtype)
    same(run_op("divide", a, b), np.array([3, mx, mx, 0], dtype))
    same(run_op("remainder", a, b), np.array([1, 0, mx, 9], dtype))


@given(st.sampled_from(SIGNED), st.data())
@settings(max_examples=60, deadline=None)
def test_integer_division_matches_c_semantics(dtype, data):
    info = np.iinfo(dtype)
    ints = st.integers(int(info.min), int(info.max))
    a = data.draw(hnp.arrays(dtype, 8, elements=ints))
    b = data.draw(hnp.arrays(dtype, 8, elements=ints.filter(lambda v: v != 0)))
    q, r = run_op("divide", a, b), run_op("remainder", a, b)
    for x, y, qq, rr in zip(a.tolist(), b.tolist(), q.tolist(), r.tolist()):
        want_q = abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1)
        want_r = x - want_q * y
        wrap = lambda v: (v - int(info.min)) % (1 << (8 * np.dtype(dtype).itemsize)) + int(info.min)
        assert (qq, rr) == (wrap(want_q), want_r)


def test_float_divide_and_remainder():
    a = np.array([1, -1, 0, 5.5, -5.5, np.inf, 3], F32)
    b = np.array([0, 0, 0, 2, 2, 2, np.inf], F32)
    same(run_op("divide", a, b), a / b)
    same(run_op("remainder", a, b), np.array([np.nan, np.nan, np.nan, 1.5, -1.5, np.nan, 3], F32))


@pytest.mark.parametrize("dtype", [np.int32, np.int8, np.int64])
def test_integer_power(dtype):
    a = np.array([2, 2, -1, -1, 1, 0, 3, -2, 0, 5], dtype)
    b = np.array([10, -1, -1, 3, -5, 0, 4, 5, -2, 0], dtype)
    want = [1024, 0, 0, -1, 1, 1, 81, -32, 0, 1]
    same(run_op("power", a, b), np.array(want).astype(dtype))


def test_integer_power_wraps_like_repeated_multiplication():
    a = np.array([3, 7, -3, 2], np.int32)
    b = np.array([40, 13, 21, 32], np.int32)
    want = [(int(x) ** int(y) + 2 ** 31) % 2 ** 32 - 2 ** 31 for x, y in zip(a, b)]
    same(run_op("power", a, b), np.array(want, np.int32))
    same(run_op("power", np.array([3], np.uint8), np.array([5], np.uint8)), np.array([243], np.uint8))


def test_float_and_complex_power():
    a = np.array([2, -8, 0, np.nan, 1, 4], F32)
    b = np.array([0.5, 1 / 3, 0, 0, np.nan, -0.5], F32)
    same(run_op("power", a, b), np.array([np.sqrt(2), np.nan, 1, 1, 1, 0.5], F32))
    same(run_op("power", np.array([0j, 2j], C128), np.array([0j, 2], C128)), np.array([1, -4 + 0j]))


@pytest.mark.parametrize("dtype", FLOATS + INTS)
def test_maximum_minimum(dtype):
    if np.dtype(dtype).kind == "f":
        a = np.array([1, np.nan, -0.0, 3, np.inf], dtype)
        b = np.array([2, 0, 0.0, np.nan, 5], dtype)
    else:
        info = np.iinfo(dtype)
        a, b = np.array([info.min, 3, 9], dtype), np.array([info.max, 3, 1], dtype)
    same(run_op("maximum", a, b), np.maximum(a, b))
    same(run_op("minimum", a, b), np.minimum(a, b))


def test_complex_max_is_an_error():
    with pytest.raises(EvaluationError, match="complex"):
        run_op("maximum", np.ones(2, C64), np.ones(2, C64))


@pytest.mark.parametrize("dtype", [np.bool_] + INTS)
def test_bitwise(dtype):
    rng = np.random.default_rng(4)
    a, b = (rng.integers(0, 256, (2, 20)) if dtype is not np.bool_ else rng.integers(0, 2, (2, 20))).astype(dtype)
    same(run_op("and", a, b), a & b)
    same(run_op("or", a, b), a | b)
    same(run_op("xor", a, b), a ^ b)


def test_atan2():
    y = np.array([0.0, -0.0, 1, -1, np.inf, np.nan], F64)
    x = np.array([-1.0, -1.0, 0, 0, np.inf, 1], F64)
    same(run_op("atan2", y, x), np.arctan2(y, x))


# --- shifts -------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", INTS)
def test_shifts_against_python_bit_arithmetic(dtype):
    width = 8 * np.dtype(dtype).itemsize
    rng = np.random.default_rng(5)
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max, 64, dtype=dtype, endpoint=True)
    s = rng.integers(0, width + 3, 64).astype(dtype)
    if np.dtype(dtype).kind == "i":
        s[:4] = np.array([-1, -width, info.min, width - 1], dtype)  # negative = huge unsigned
    mask = (1 << width) - 1
    ux = [int(v) & mask for v in x]  # bit patterns
    us = [int(v) & mask for v in s]  # shift amounts are unsigned
    left = [(v << a) & mask if a < width else 0 for v, a in zip(ux, us)]
    logical = [v >> a if a < width else 0 for v, a in zip(ux, us)]
    sx = [v - (1 << width) if v >> (width - 1) else v for v in ux]  # bit pattern read as signed
    arith = [(v >> min(a, width - 1)) & mask for v, a in zip(sx, us)]
    unsigned = np.dtype(f"u{width // 8}")
    for opcode, want in [("shift-left", left), ("shift-right-logical", logical), ("shift-right-arithmetic", arith)]:
        same(run_op(opcode, x, s), np.array(want, unsigned).view(dtype))


# --- compare, select, clamp ---------------------------------------------------------------------

DIRS = {"EQ": np.equal, "NE": np.not_equal, "LT": np.less, "LE": np.less_equal, "GT": np.greater,
        "GE": np.greater_equal}


def compare(a, b, direction, type=None):
    attrs = {"direction": direction} | ({"type": type} if type else {})
    return run_op("compare", a, b, **attrs)


@pytest.mark.parametrize("direction", sorted(DIRS))
@pytest.mark.parametrize("dtype", FLOATS + INTS + [np.bool_])
def test_compare_matches_numpy(direction, dtype):
    if np.dtype(dtype).kind == "f":
        a = np.array([1, np.nan, np.nan, -0.0, 2, -np.inf], dtype)
        b = np.array([1, 1, np.nan, 0.0, 1, np.inf], dtype)
    elif dtype is np.bool_:
        a, b = np.array([True, True, False, False]), np.array([True, False, True, False])
    else:
        info = np.iinfo(dtype)
        a, b = np.array([info.min, 0, 5, info.max], dtype), np.array([info.max, 0, 4, info.max], dtype)
    same(compare(a, b, direction), DIRS[direction](a, b))


@pytest.mark.parametrize("dtype", FLOATS)
def test_compare_total_order(dtype):
    neg_nan = np.array(np.nan, dtype)
    neg_nan = -np.abs(neg_nan)
    ordered = np.array([neg_nan, -np.inf, -1, -0.0, 0.0, 1e-3, np.inf, np.nan], dtype)
    assert np.signbit(ordered[0]) and np.isnan(ordered[0])
    n = len(ordered)
    a = np.repeat(ordered, n)
    b = np.tile(ordered, n)
    ia, ib = np.repeat(np.arange(n), n), np.tile(np.arange(n), n)
    for direction, fn in DIRS.items():
        same(compare(a, b, direction, "TOTALORDER"), fn(ia, ib))
    keys = total_order_key(ordered)
    assert np.all(np.diff(keys.astype(np.int64)) > 0)


def test_compare_complex_equality_only():
    z = np.array([1 + 1j, 2j], C64)
    same(compare(z, z, "EQ"), np.array([True, True]))
    with pytest.raises(EvaluationError, match="complex"):
        compare(z, z, "LT")


def test_compare_unsigned_type_on_signed_ints():
    a, b = np.array([-1, 1], np.int32), np.array([1, 2], np.int32)
    same(compare(a, b, "GT", "UNSIGNED"), np.array([True, False]))
    same(compare(a, b, "GT", "SIGNED"), np.array([False, False]))


def test_select_and_clamp():
    p = np.array([True, False, True])
    a, b = np.array([1, 2, 3], np.int16), np.array([-1, -2, -3], np.int16)
    same(run_op("select", p, a, b), np.array([1, -2, 3], np.int16))
    same(run_op("select", np.bool_(False), a, b), b)
    x = np.array([-5, 0, 5, np.nan], F32)
    same(run_op("clamp", np.float32(-1), x, np.float32(2)), np.array([-1, 0, 2, np.nan], F32))
    same(run_op("clamp", np.array([-1, 1, 0, 0], F32), x, np.array([0, 3, 4, 1], F32)),
         np.array([-1, 1, 4, np.nan], F32))


def test_tuple_select():
    b = Builder("main")
    p = b.parameter(Shape("pred"))
    x = b.parameter(Shape("s32", (2,)))
    t1 = b.op("tuple", x, x)
    t2 = b.op("tuple", b.op("negate", x), x)
    comp = b.build(b.op("select", p, t1, t2))
    out = evaluate(comp, [np.bool_(False), np.array([1, 2], np.int32)])
    assert [o.tolist() for o in out] == [[-1, -2], [1, 2]]


# --- hypothesis: random float inputs against NumPy ----------------------------------------------

@given(hnp.arrays(st.sampled_from([F16, F32, F64]), hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)),
       st.sampled_from(["exponential", "log", "sqrt", "tanh", "floor", "ceil", "abs", "negate"]))
@settings(max_examples=60, deadline=None)
def test_unary_property_matches_numpy(x, opcode):
    with np.errstate(all="ignore"):
        same(run_op(opcode, x), NUMPY_UNARY[opcode](x))
