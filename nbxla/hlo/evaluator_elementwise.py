"""Reference rules for the elementwise opcodes.

Where XLA's semantics differ from NumPy's they are spelled out here: integer division
truncates and defines x/0, shifts by the bit width or more are defined, float->int
conversion saturates, ``compare`` has a total order for floats, ``power`` on integers
follows XLA's HloEvaluator.  Integer arithmetic wraps (NumPy arrays already do).

Every rule is written with NumPy broadcasting so that the same code runs a reducer on
whole arrays at once (see ``Interpreter.map``).
"""

from __future__ import annotations

import math

import numpy as np

from . import shapes as S
from .evaluator_common import fail, operand_type, signed_of, unsigned_of


# --- conversions ------------------------------------------------------------------------------

def convert_array(x: np.ndarray, src: str, dst: str) -> np.ndarray:
    """XLA ``convert`` from element type ``src`` to ``dst``."""
    dtype = S.to_numpy_dtype(dst)
    if src == dst:
        return x
    if S.is_complex(src) and not S.is_complex(dst):
        x, src = np.real(x), S.complex_component(src)  # complex -> real keeps the real part
    if dst == "pred":
        return x != 0                                    # NaN -> true, like C's (bool)
    if S.is_float(src) and S.is_integral(dst):
        return _float_to_int(x, dtype)
    return np.asarray(x).astype(dtype)                   # int->int wraps, rounding to nearest


def _float_to_int(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Truncate toward zero, saturate out-of-range values, NaN -> 0 (XLA's fptosi.sat)."""
    info = np.iinfo(dtype)
    wide = np.asarray(x, np.float64)          # exact for f16/f32/f64
    lo, hi = float(info.min), float(info.max) + 1.0  # both powers of two, exactly representable
    inside = (wide >= lo) & (wide < hi)       # False for NaN
    out = np.trunc(np.where(inside, wide, 0.0)).astype(dtype)
    out = np.where(wide >= hi, dtype.type(info.max), out)
    return np.where(wide < lo, dtype.type(info.min), out)


def _convert(instr, args, interp):
    return convert_array(args[0], operand_type(instr), instr.shape.element_type)


def _bitcast_convert(instr, args, interp):
    """Reinterpret bits; between widths a minor dimension of the width ratio appears/vanishes."""
    x = np.asarray(args[0])
    if not x.flags.c_contiguous:     # (not ascontiguousarray: it turns 0-d into shape (1,))
        x = x.copy()
    out = x.view(instr.shape.dtype)
    if out.shape == x.shape:
        return out  # same width: keep any batch dimensions (see Interpreter.map)
    return out.reshape(instr.shape.dims)


# --- unary -----------------------------------------------------------------------------------

def _numpy_unary(fn):
    return lambda instr, args, interp: fn(args[0])


def _float_only_unary(fn, what):
    def rule(instr, args, interp):
        if S.is_complex(operand_type(instr)):
            raise fail(instr, f"{what} of complex numbers is not supported")
        return fn(args[0])
    return rule


def _rsqrt(x):
    return np.reciprocal(np.sqrt(x))


def _logistic(x):
    one = x.dtype.type(1)
    return one / (one + np.exp(-x))


_erf_f64 = np.vectorize(math.erf, otypes=[np.float64])


def _erf(x):
    return _erf_f64(np.asarray(x, np.float64)).astype(x.dtype)


def _round_afz(x):
    """Round half away from zero; ``x - trunc(x)`` is exact, so no double rounding."""
    t = np.trunc(x)
    frac = x - t
    return np.where(np.abs(frac) >= 0.5, t + np.copysign(np.ones_like(x), x), t)


def _sign(instr, args, interp):
    (x,) = args
    t = operand_type(instr)
    if S.is_complex(t):
        mag = np.abs(x)
        return np.where(mag == 0, x, x / np.where(mag == 0, 1, mag))
    if S.is_float(t):
        # Zeros keep their sign and NaN stays NaN, as in XLA.
        return np.where((x == 0) | np.isnan(x), x, np.copysign(np.ones_like(x), x))
    return np.sign(x)


def _abs(instr, args, interp):
    return np.abs(args[0])  # INT_MIN stays INT_MIN (wraps); complex -> magnitude


def _not(instr, args, interp):
    x = args[0]
    return np.logical_not(x) if x.dtype == np.bool_ else np.invert(x)


def _popcnt(instr, args, interp):
    x = np.asarray(args[0])
    return np.bitwise_count(x.view(unsigned_of(x.dtype)))


def _count_leading_zeros(instr, args, interp):
    x = np.asarray(args[0])
    u = np.asarray(x.view(unsigned_of(x.dtype)))
    width = 8 * x.dtype.itemsize
    # Bit length by binary search on shifts; avoids float log2 rounding for 64-bit values.
    length = np.zeros(u.shape, np.int64)
    step = width // 2
    while step:
        big = u >= (u.dtype.type(1) << u.dtype.type(step))
        length += np.where(big, step, 0)
        u = np.where(big, u >> u.dtype.type(step), u)
        step //= 2
    length += (u > 0)
    return width - length


def _real(instr, args, interp):
    return np.real(args[0])


def _imag(instr, args, interp):
    x = args[0]
    return np.imag(x) if np.iscomplexobj(x) else np.zeros_like(x)


def _copy(instr, args, interp):
    return args[0]


def _reduce_precision(instr, args, interp):
    (x,) = args
    if S.is_complex(operand_type(instr)):
        raise fail(instr, "reduce-precision of complex numbers is not supported")
    ebits, mbits = instr.attrs.get("exponent_bits"), instr.attrs.get("mantissa_bits")
    if ebits is None or mbits is None or ebits < 1 or mbits < 0:
        raise fail(instr, f"needs exponent_bits >= 1 and mantissa_bits >= 0 (got {ebits}, {mbits})")
    return reduce_precision(np.asarray(x), ebits, mbits)


def reduce_precision(x: np.ndarray, exponent_bits: int, mantissa_bits: int) -> np.ndarray:
    """Round to a float format with fewer bits, on the bit pattern, as XLA's emitter does:
    mantissa rounded to nearest even, exponent overflow -> inf, underflow (incl. the target's
    subnormals) -> signed zero; NaN stays NaN unless no mantissa bits remain."""
    finfo = np.finfo(x.dtype)
    src_m, src_e = finfo.nmant, finfo.nexp
    width = 8 * x.dtype.itemsize
    u = unsigned_of(x.dtype)
    c = u.type
    bits = x.view(u)
    if mantissa_bits < src_m:
        shift = src_m - mantissa_bits
        last = 1 << shift
        bias = ((bits & c(last)) >> c(shift)) + c((last >> 1) - 1)
        keep = ((1 << width) - 1) ^ (last - 1)
        bits = (bits + bias) & c(keep)
    if exponent_bits < src_e:
        sign_mask = c(1 << (width - 1))
        exp_mask = ((1 << src_e) - 1) << src_m
        bias, reduced_bias = (1 << (src_e - 1)) - 1, (1 << (exponent_bits - 1)) - 1
        exponent = bits & c(exp_mask)
        overflow = exponent > c((bias + reduced_bias) << src_m)
        underflow = exponent <= c((bias - reduced_bias) << src_m)
        signed_zero = bits & sign_mask
        bits = np.where(overflow, signed_zero | c(exp_mask), np.where(underflow, signed_zero, bits))
    out = np.asarray(bits).view(x.dtype)
    if mantissa_bits > 0:
        out = np.where(np.isnan(x), x, out)
    return out


# --- binary ---------------------------------------------------------------------------------

def _arith(fn):
    def rule(instr, args, interp):
        return fn(*args)
    return rule


def _divide(instr, args, interp):
    a, b = args
    if S.is_integral(operand_type(instr)):
        return _int_divide(a, b, want_remainder=False)
    return np.divide(a, b)


def _remainder(instr, args, interp):
    a, b = args
    t = operand_type(instr)
    if S.is_integral(t):
        return _int_divide(a, b, want_remainder=True)
    if S.is_complex(t):
        raise fail(instr, "remainder of complex numbers is not supported")
    return np.fmod(a, b)  # the result has the dividend's sign, like C's fmod


def _int_divide(a, b, want_remainder: bool):
    """C-style truncating division with XLA's definitions for the cases C leaves undefined:
    x/0 = -1 (all bits set; the max value for unsigned), x%0 = x, INT_MIN/-1 = INT_MIN,
    INT_MIN%-1 = 0."""
    dtype = np.result_type(a, b)
    zero = b == 0
    bad = zero
    if dtype.kind == "i":
        bad = zero | ((a == np.iinfo(dtype).min) & (b == -1))
    safe = np.where(bad, dtype.type(1), b)
    rem = np.fmod(a, safe)  # NumPy's integer fmod is C's truncating %
    if want_remainder:
        return np.where(zero, a, rem)
    quot = (a - rem) // safe  # exact division, so floor == trunc
    all_ones = dtype.type(-1) if dtype.kind == "i" else dtype.type(np.iinfo(dtype).max)
    return np.where(zero, all_ones, quot)


def _power(instr, args, interp):
    a, b = args
    t = operand_type(instr)
    if S.is_integral(t):
        return _int_power(a, b)
    # x**0 = 1 and 1**x = 1 even for NaN/complex (Kahan; XLA's HloEvaluator case 0).
    one = np.ones((), a.dtype)
    return np.where((a == 1) | (b == 0), one, np.power(a, b))


def _int_power(a, b):
    """Exponentiation by squaring with wraparound; a negative exponent gives 0 unless the
    base is 1 (XLA's HloEvaluator)."""
    dtype = np.result_type(a, b)
    u = unsigned_of(dtype)
    base = np.asarray(a, dtype)
    exponent = np.asarray(np.asarray(b, dtype).view(u))
    acc = np.ones(np.broadcast_shapes(base.shape, exponent.shape), dtype)
    while np.any(exponent):
        acc = np.where(exponent & u.type(1), acc * base, acc)
        base = base * base
        exponent = exponent >> u.type(1)
    if dtype.kind == "i":
        acc = np.where(b < 0, np.where(a == 1, dtype.type(1), dtype.type(0)), acc)
    return acc


def _max_min(fn, what):
    def rule(instr, args, interp):
        if S.is_complex(operand_type(instr)):
            raise fail(instr, f"{what} of complex numbers is not supported (complex numbers have no order)")
        return fn(*args)  # NaN propagates, as in XLA
    return rule


def _complex(instr, args, interp):
    re, im = np.broadcast_arrays(*args)
    out = np.empty(re.shape, instr.shape.dtype)
    out.real, out.imag = re, im  # not re + 1j*im: that turns (inf, 0) into (inf, nan)
    return out


def _shift(kind):
    """Shift amounts are unsigned; amounts >= the bit width give 0 (left, logical) or the
    sign fill (arithmetic).  Works on same-width unsigned/signed views: no C undefined
    behaviour, and arithmetic shift of an unsigned type shifts its bit pattern."""
    def rule(instr, args, interp):
        a, s = (np.asarray(v) for v in args)
        width = 8 * a.dtype.itemsize
        u, i = unsigned_of(a.dtype), signed_of(a.dtype)
        amount = s.view(u)
        big = amount >= width
        if kind == "arithmetic":
            clamped = np.where(big, width - 1, amount).astype(i)
            return np.right_shift(a.view(i), clamped).view(a.dtype)
        amount = np.where(big, 0, amount).astype(u)
        shifted = (np.left_shift if kind == "left" else np.right_shift)(a.view(u), amount)
        return np.where(big, u.type(0), shifted).view(a.dtype)
    return rule


_COMPARISONS = {"EQ": np.equal, "NE": np.not_equal, "LT": np.less, "LE": np.less_equal,
                "GT": np.greater, "GE": np.greater_equal}


def _compare(instr, args, interp):
    a, b = (np.asarray(v) for v in args)
    t = operand_type(instr)
    direction = instr.attrs["direction"]
    kind = instr.attrs.get("type")
    if S.is_complex(t) and direction not in ("EQ", "NE"):
        raise fail(instr, f"compare direction {direction} is not defined for complex numbers (only EQ, NE)")
    if kind == "TOTALORDER" and S.is_float(t):
        a, b = total_order_key(a), total_order_key(b)
    elif kind == "UNSIGNED" and S.is_integral(t):
        a, b = a.view(unsigned_of(a.dtype)), b.view(unsigned_of(b.dtype))
    elif kind == "SIGNED" and S.is_integral(t):
        a, b = a.view(signed_of(a.dtype)), b.view(signed_of(b.dtype))
    return _COMPARISONS[direction](a, b)


def total_order_key(x: np.ndarray) -> np.ndarray:
    """Signed integers ordered like IEEE totalOrder: -NaN < -inf < ... < -0 < +0 < ... < NaN.

    Floats are sign-magnitude; flipping the magnitude bits of negative values turns that
    into two's complement order.
    """
    i = signed_of(x.dtype)
    bits = np.asarray(x).view(i)
    magnitude_mask = i.type(np.iinfo(i).max)
    return bits ^ (np.right_shift(bits, i.type(8 * i.itemsize - 1)) & magnitude_mask)


def _logical(fn):
    return lambda instr, args, interp: fn(*args)  # bitwise on ints is logical on pred


def _atan2(instr, args, interp):
    if S.is_complex(operand_type(instr)):
        raise fail(instr, "atan2 of complex numbers is not supported")
    return np.arctan2(*args)


# --- ternary --------------------------------------------------------------------------------

def _select(instr, args, interp):
    pred, on_true, on_false = args
    if isinstance(on_true, tuple):
        return on_true if bool(pred) else on_false
    return np.where(pred, on_true, on_false)


def _clamp(instr, args, interp):
    lo, x, hi = args
    if S.is_complex(operand_type(instr, 1)):
        raise fail(instr, "clamp of complex numbers is not supported (complex numbers have no order)")
    return np.minimum(np.maximum(x, lo), hi)


ELEMENTWISE_RULES = {
    "abs": _abs,
    "negate": _numpy_unary(np.negative),  # wraps for integers
    "exponential": _numpy_unary(np.exp),
    "exponential-minus-one": _numpy_unary(np.expm1),
    "log": _numpy_unary(np.log),
    "log-plus-one": _numpy_unary(np.log1p),
    "sqrt": _numpy_unary(np.sqrt),
    "rsqrt": _numpy_unary(_rsqrt),
    "cbrt": _float_only_unary(np.cbrt, "cbrt"),
    "tanh": _numpy_unary(np.tanh),
    "logistic": _numpy_unary(_logistic),
    "sine": _numpy_unary(np.sin),
    "cosine": _numpy_unary(np.cos),
    "tan": _numpy_unary(np.tan),
    "erf": _float_only_unary(_erf, "erf"),
    "floor": _float_only_unary(np.floor, "floor"),
    "ceil": _float_only_unary(np.ceil, "ceil"),
    "round-nearest-even": _float_only_unary(np.rint, "round-nearest-even"),
    "round-nearest-afz": _float_only_unary(_round_afz, "round-nearest-afz"),
    "sign": _sign,
    "not": _not,
    "is-finite": _numpy_unary(np.isfinite),
    "popcnt": _popcnt,
    "count-leading-zeros": _count_leading_zeros,
    "real": _real,
    "imag": _imag,
    "convert": _convert,
    "bitcast-convert": _bitcast_convert,
    "reduce-precision": _reduce_precision,
    "copy": _copy,  # a logical identity: only the layout may change
    "add": _arith(np.add),            # on pred: or
    "subtract": _arith(np.subtract),
    "multiply": _arith(np.multiply),  # on pred: and
    "divide": _divide,
    "remainder": _remainder,
    "power": _power,
    "maximum": _max_min(np.maximum, "maximum"),
    "minimum": _max_min(np.minimum, "minimum"),
    "and": _logical(np.bitwise_and),
    "or": _logical(np.bitwise_or),
    "xor": _logical(np.bitwise_xor),
    "atan2": _atan2,
    "complex": _complex,
    "shift-left": _shift("left"),
    "shift-right-arithmetic": _shift("arithmetic"),
    "shift-right-logical": _shift("logical"),
    "compare": _compare,
    "select": _select,
    "clamp": _clamp,
}
