"""The elementwise lowering rules: one per NumPy ufunc, registered in ``UFUNCS``.

``rules.apply_ufunc`` has already chosen NumPy's loop (``ufunc.resolve_dtypes``, NEP 50) and
cast and broadcast the operands; a rule here computes NumPy's answer for them in HLO,
including where HLO's own op differs (floor division and remainder follow the divisor's sign,
fmax ignores NaN, integer powers refuse negative exponents at run time, ...) and where the
textbook formula loses accuracy or overflows (sinh near 0, cosh and arcsinh of large values,
logaddexp of large or equal arguments).
"""

from __future__ import annotations

import numpy as np

from ..hlo import Shape, from_numpy_dtype
from .registry import UFUNCS
from .rules import binop, compare, convert, emit, isnan, like, like_bool, reshape, select
from .tracer import Tracer


def _unary(opcode):
    return lambda ctx, x: emit(ctx, opcode, x)


def _binary(opcode):
    return lambda ctx, a, b: binop(opcode, a, b)


def _is_bool(x):
    return x.dtype == np.bool_


def _is_int(x):
    return x.dtype.kind in "iu"


def _add(ctx, a, b):
    return binop("or" if _is_bool(a) else "add", a, b)


def _multiply(ctx, a, b):
    return binop("and" if _is_bool(a) else "multiply", a, b)


def _maximum(ctx, a, b):
    return binop("or" if _is_bool(a) else "maximum", a, b)


def _minimum(ctx, a, b):
    return binop("and" if _is_bool(a) else "minimum", a, b)


def _isinf(ctx, x):
    if x.dtype.kind not in "fc":
        return like_bool(x, False)
    if x.dtype.kind == "c":
        return binop("or", _isinf(ctx, emit(ctx, "real", x)), _isinf(ctx, emit(ctx, "imag", x)))
    return compare(emit(ctx, "abs", x), like(x, np.inf), "EQ")


def _isfinite(ctx, x):
    if x.dtype.kind not in "fc":
        return like_bool(x, True)
    if x.dtype.kind == "c":
        return binop("and", _isfinite(ctx, emit(ctx, "real", x)), _isfinite(ctx, emit(ctx, "imag", x)))
    return emit(ctx, "is-finite", x)


def _fmax_fmin(opcode):
    def rule(ctx, a, b):
        if a.dtype.kind not in "fc":
            return binop(opcode, a, b) if not _is_bool(a) else binop("or" if opcode == "maximum" else "and", a, b)
        m = binop(opcode, a, b)
        return select(isnan(a), b, select(isnan(b), a, m))
    return rule


def _floor_divide(ctx, a, b):
    if _is_bool(a):
        a, b = convert(a, np.int8), convert(b, np.int8)
        return convert(_floor_divide(ctx, a, b), bool)
    if _is_int(a):
        zero = like(a, 0)
        q = binop("divide", a, b)                   # truncates toward zero
        r = binop("remainder", a, b)
        adjust = binop("and", compare(r, zero, "NE"),
                       compare(compare(r, zero, "LT"), compare(b, zero, "LT"), "NE"))
        q = select(adjust, binop("subtract", q, like(q, 1)), q)
        return select(compare(b, zero, "EQ"), zero, q)  # NumPy: x // 0 == 0 for integers
    return _float_divmod(ctx, a, b)[0]


def _remainder(ctx, a, b):
    if _is_int(a) or _is_bool(a):
        zero = like(a, 0)
        r = binop("remainder", a, b)
        adjust = binop("and", compare(r, zero, "NE"),
                       compare(compare(r, zero, "LT"), compare(b, zero, "LT"), "NE"))
        r = select(adjust, binop("add", r, b), r)
        return select(compare(b, zero, "EQ"), zero, r)  # NumPy: x % 0 == 0 for integers
    return _float_divmod(ctx, a, b)[1]


def _float_divmod(ctx, a, b):
    """NumPy's npy_divmod for floats: floor division and a modulo with the divisor's sign."""
    zero = like(a, 0)
    mod = binop("remainder", a, b)                  # fmod
    div = binop("divide", binop("subtract", a, mod), b)
    fix = binop("and", compare(mod, zero, "NE"),
                compare(compare(b, zero, "LT"), compare(mod, zero, "LT"), "NE"))
    mod = select(fix, binop("add", mod, b), mod)
    div = select(fix, binop("subtract", div, like(a, 1)), div)
    mod = select(compare(mod, zero, "EQ"), _copysign(ctx, zero, b), mod)
    floordiv = emit(ctx, "floor", div)
    floordiv = select(compare(binop("subtract", div, floordiv), like(a, 0.5), "GT"),
                      binop("add", floordiv, like(a, 1)), floordiv)
    floordiv = select(compare(div, zero, "EQ"), _copysign(ctx, zero, binop("divide", a, b)), floordiv)
    b_zero = compare(b, zero, "EQ")
    return (select(b_zero, binop("divide", a, b), floordiv),
            select(b_zero, binop("remainder", a, b), mod))


def _divmod(ctx, a, b):
    return _floor_divide(ctx, a, b), _remainder(ctx, a, b)


def _fmod(ctx, a, b):
    if _is_int(a):
        zero = like(a, 0)
        return select(compare(b, zero, "EQ"), zero, binop("remainder", a, b))
    return binop("remainder", a, b)


def _signbit_of(ctx, x):
    bits = {2: np.int16, 4: np.int32, 8: np.int64}[x.dtype.itemsize]
    as_int = emit(ctx, "bitcast-convert", x, shape=Shape(from_numpy_dtype(bits), x.shape))
    return compare(as_int, like(as_int, 0), "LT")


def _copysign(ctx, a, b):
    mag = emit(ctx, "abs", a)
    return select(_signbit_of(ctx, b), emit(ctx, "negate", mag), mag)


NEGATIVE_POWER = "Integers to negative integer powers are not allowed."


def _power(ctx, a, b):
    if _is_bool(a):
        raise TypeError("ufunc 'power' not supported for bool inputs")
    if _is_int(a) and b.dtype.kind == "i" and b.size:
        _check_non_negative(ctx, b)
    return binop("power", a, b)


def constant_value(x: Tracer):
    """The NumPy value of a Tracer that is a constant (or a broadcast one), else None."""
    instr = x.instr
    if instr.opcode == "broadcast":
        instr = instr.operands[0]
    return np.asarray(instr.attrs["literal"]) if instr.opcode == "constant" else None


def _check_non_negative(ctx, b: Tracer) -> None:
    """NumPy's ValueError for an integer power with a negative exponent: now when the
    exponent is a constant, else after the run (the program computes the least exponent)."""
    from ..errors import ValueCheckError
    location = ctx.user_location()
    known = constant_value(b)
    if known is not None:
        if known.size and known.min() < 0:
            raise ValueCheckError(NEGATIVE_POWER, location, "use a float base (x.astype(float) ** n)")
        return
    least = reshape(np.min(b), (1,))

    def fail(value):
        return ValueCheckError(NEGATIVE_POWER, location, "use a float base (x.astype(float) ** n)") \
            if value.size and value.min() < 0 else None
    ctx.add_check(least.instr, fail, ("min",))


def _true_divide(ctx, a, b):
    return binop("divide", a, b)


def _reciprocal(ctx, x):
    if _is_int(x):
        return _int_reciprocal(ctx, x)
    return binop("divide", like(x, 1), x)


def _int_reciprocal(ctx, x):
    # NumPy's integer reciprocal is C division 1 / x (0 for |x| > 1).  1/0 warns and gives
    # what x86-64 gives for it: the most negative value for 32- and 64-bit signed ints, else 0.
    one, zero = like(x, 1), like(x, 0)
    at_zero = like(x, np.iinfo(x.dtype).min) if x.dtype in (np.int32, np.int64) else zero
    return select(compare(x, zero, "EQ"), at_zero, binop("divide", one, x))


def _square(ctx, x):
    return _multiply(ctx, x, x)


def _sign(ctx, x):
    if _is_bool(x):
        raise TypeError("ufunc 'sign' did not contain a loop with signature matching types bool")
    if x.dtype.kind == "f":             # NumPy: sign(-0.0) is +0.0 (HLO's sign keeps the sign)
        zero = like(x, 0)
        return select(compare(x, zero, "EQ"), zero, emit(ctx, "sign", x))
    if x.dtype.kind == "c":             # NumPy: z/|z|, and a unit along the one infinite part
        re, im = emit(ctx, "real", x), emit(ctx, "imag", x)
        re_inf, im_inf = _isinf(ctx, re), _isinf(ctx, im)
        zero = like(re, 0)
        along_re = binop("complex", _sign(ctx, re), zero)
        along_im = binop("complex", zero, _sign(ctx, im))
        one_inf = binop("xor", re_inf, im_inf)
        return select(one_inf, select(re_inf, along_re, along_im), emit(ctx, "sign", x))
    return emit(ctx, "sign", x)


def _absolute(ctx, x):
    return x if _is_bool(x) or x.dtype.kind == "u" else emit(ctx, "abs", x)


def _negative(ctx, x):
    if _is_bool(x):
        raise TypeError("The numpy boolean negative, the `-` operator, is not supported, "
                        "use the `~` operator or the logical_not function instead.")
    return emit(ctx, "negate", x)


def _conjugate(ctx, x):
    if x.dtype.kind != "c":
        return x
    return binop("complex", emit(ctx, "real", x), emit(ctx, "negate", emit(ctx, "imag", x)))


def _to_bool(x):
    return x if _is_bool(x) else compare(x, like(x, 0), "NE")


def _logical(opcode):
    return lambda ctx, a, b: binop(opcode, _to_bool(a), _to_bool(b))


def _logical_not(ctx, x):
    return emit(ctx, "not", _to_bool(x))


def _right_shift(ctx, a, b):
    return binop("shift-right-arithmetic" if a.dtype.kind == "i" else "shift-right-logical", a, b)


def _compare(direction):
    return lambda ctx, a, b: compare(a, b, direction)


def _trunc(ctx, x):
    if x.dtype.kind != "f":
        return x
    return select(compare(x, like(x, 0), "LT"), emit(ctx, "ceil", x), emit(ctx, "floor", x))


def _exact_float(opcode):
    """floor/ceil/rint on ints are the identity in NumPy (same dtype)."""
    return lambda ctx, x: x if x.dtype.kind in "iub" else emit(ctx, opcode, x)


def _log_base(base):
    def rule(ctx, x):
        r = binop("divide", emit(ctx, "log", x), like(x, np.log(base)))
        # log(1000)/log(10) is 2.9999999999999996: return exact powers of the base exactly,
        # as NumPy's log10/log2 do (floor(log10(x)) is a common idiom).
        k = emit(ctx, "round-nearest-even", r)
        exact = compare(binop("power", like(x, base), k), x, "EQ")
        return select(exact, k, r)
    return rule


def _large(x):
    """|x| beyond which 1 + x**2 == x**2 in x's precision: asinh/acosh/sinh/cosh switch formulas."""
    return like(x, 1 / np.sqrt(np.finfo(x.dtype).eps))


def _exp2(ctx, x):
    return binop("power", like(x, 2), x)


def _arctan(ctx, x):
    return binop("atan2", x, like(x, 1))


def _arcsin(ctx, x):
    # asin(x) = atan2(x, sqrt(1 - x^2))
    return binop("atan2", x, emit(ctx, "sqrt", binop("subtract", like(x, 1), binop("multiply", x, x))))


def _arccos(ctx, x):
    return binop("atan2", emit(ctx, "sqrt", binop("subtract", like(x, 1), binop("multiply", x, x))), x)


def _half_exp_abs(ctx, x):
    """e^|x| / 2 without overflowing early: exp(|x| - log 2)."""
    return emit(ctx, "exponential", binop("subtract", emit(ctx, "abs", x), like(x, np.log(2))))


def _exp_dominates(x):
    # e^-|x| is below x's precision relative to e^|x| past this point
    return compare(emit(x.ctx, "abs", x), like(x, -np.log(np.finfo(x.dtype).eps) / 2 + 1), "GT")


def _sinh(ctx, x):
    # (e^x - e^-x)/2, accurate near 0 through expm1: sinh = (expm1(x) - expm1(-x)) / 2
    e1 = emit(ctx, "exponential-minus-one", x)
    e2 = emit(ctx, "exponential-minus-one", emit(ctx, "negate", x))
    small = binop("multiply", binop("subtract", e1, e2), like(x, 0.5))
    big = _half_exp_abs(ctx, x)
    big = select(compare(x, like(x, 0), "LT"), emit(ctx, "negate", big), big)
    return select(_exp_dominates(x), big, small)


def _cosh(ctx, x):
    e1 = emit(ctx, "exponential", x)
    e2 = emit(ctx, "exponential", emit(ctx, "negate", x))
    small = binop("multiply", binop("add", e1, e2), like(x, 0.5))
    return select(_exp_dominates(x), _half_exp_abs(ctx, x), small)


def _arcsinh(ctx, x):
    # sign(x) * log1p(|x| + x^2 / (1 + sqrt(1 + x^2)))
    a = emit(ctx, "abs", x)
    x2 = binop("multiply", x, x)
    t = binop("add", a, binop("divide", x2, binop("add", like(x, 1),
                                                    emit(ctx, "sqrt", binop("add", like(x, 1), x2)))))
    r = emit(ctx, "log-plus-one", t)
    r = select(compare(a, _large(x), "GT"), _log_2x(ctx, a), r)      # x**2 would overflow
    return select(compare(x, like(x, 0), "LT"), emit(ctx, "negate", r), r)


def _log_2x(ctx, a):
    return binop("add", emit(ctx, "log", a), like(a, np.log(2)))


def _arccosh(ctx, x):
    # log(x + sqrt(x - 1) * sqrt(x + 1)); log(2x) once x + x would overflow
    one = like(x, 1)
    r = emit(ctx, "log", binop("add", x, binop("multiply", emit(ctx, "sqrt", binop("subtract", x, one)),
                                                emit(ctx, "sqrt", binop("add", x, one)))))
    return select(compare(x, _large(x), "GT"), _log_2x(ctx, x), r)


def _arctanh(ctx, x):
    # 0.5 * log1p(2x / (1 - x))
    one = like(x, 1)
    return binop("multiply", like(x, 0.5),
                 emit(ctx, "log-plus-one", binop("divide", binop("add", x, x), binop("subtract", one, x))))


def _hypot(ctx, a, b):
    a, b = emit(ctx, "abs", a), emit(ctx, "abs", b)
    hi, lo = binop("maximum", a, b), binop("minimum", a, b)
    safe_hi = select(compare(hi, like(hi, 0), "EQ"), like(hi, 1), hi)
    r = binop("divide", lo, safe_hi)
    out = binop("multiply", hi, emit(ctx, "sqrt", binop("add", like(r, 1), binop("multiply", r, r))))
    inf = binop("or", _isinf(ctx, a), _isinf(ctx, b))
    return select(inf, like(out, np.inf), out)


def _logaddexp(ctx, a, b):
    hi = binop("maximum", a, b)
    d = emit(ctx, "negate", emit(ctx, "abs", binop("subtract", a, b)))
    out = binop("add", hi, emit(ctx, "log-plus-one", emit(ctx, "exponential", d)))
    return select(compare(a, b, "EQ"), binop("add", a, like(a, np.log(2))), out)  # also a == b == inf


def _logaddexp2(ctx, a, b):
    """log2(2**a + 2**b) as max + log2(1 + 2**-|a-b|), so large inputs do not overflow."""
    hi = binop("maximum", a, b)
    d = binop("multiply", emit(ctx, "negate", emit(ctx, "abs", binop("subtract", a, b))), like(a, np.log(2)))
    tail = binop("multiply", emit(ctx, "log-plus-one", emit(ctx, "exponential", d)), like(a, 1 / np.log(2)))
    return select(compare(a, b, "EQ"), binop("add", a, like(a, 1)), binop("add", hi, tail))  # also a == b == inf


def _heaviside(ctx, x, h0):
    """0 below zero, h0 at zero, 1 above; NaN stays NaN (it fails every comparison)."""
    above = select(compare(x, like(x, 0), "GT"), like(x, 1), x)
    return select(compare(x, like(x, 0), "LT"), like(x, 0), select(compare(x, like(x, 0), "EQ"), h0, above))


def _deg2rad(ctx, x):
    return binop("multiply", x, like(x, np.pi / 180))


def _rad2deg(ctx, x):
    return binop("multiply", x, like(x, 180 / np.pi))


def _signbit(ctx, x):
    return _signbit_of(ctx, x) if x.dtype.kind == "f" else compare(x, like(x, 0), "LT")


UFUNCS.update({
    np.add: _add, np.subtract: _binary("subtract"), np.multiply: _multiply,
    np.true_divide: _true_divide, np.floor_divide: _floor_divide, np.remainder: _remainder,
    np.divmod: _divmod, np.fmod: _fmod, np.power: _power, np.float_power: _power,
    np.maximum: _maximum, np.minimum: _minimum,
    np.fmax: _fmax_fmin("maximum"), np.fmin: _fmax_fmin("minimum"),
    np.negative: _negative, np.positive: lambda ctx, x: x, np.absolute: _absolute,
    np.fabs: _unary("abs"), np.sign: _sign, np.conjugate: _conjugate,
    np.exp: _unary("exponential"), np.exp2: _exp2, np.expm1: _unary("exponential-minus-one"),
    np.log: _unary("log"), np.log2: _log_base(2), np.log10: _log_base(10),
    np.log1p: _unary("log-plus-one"), np.sqrt: _unary("sqrt"), np.cbrt: _unary("cbrt"),
    np.square: _square, np.reciprocal: _reciprocal,
    np.sin: _unary("sine"), np.cos: _unary("cosine"), np.tan: _unary("tan"),
    np.arcsin: _arcsin, np.arccos: _arccos, np.arctan: _arctan, np.arctan2: _binary("atan2"),
    np.sinh: _sinh, np.cosh: _cosh, np.tanh: _unary("tanh"),
    np.arcsinh: _arcsinh, np.arccosh: _arccosh, np.arctanh: _arctanh,
    np.hypot: _hypot, np.logaddexp: _logaddexp, np.logaddexp2: _logaddexp2, np.heaviside: _heaviside,
    np.deg2rad: _deg2rad, np.rad2deg: _rad2deg,
    np.floor: _exact_float("floor"), np.ceil: _exact_float("ceil"),
    np.rint: _exact_float("round-nearest-even"), np.trunc: _trunc,
    np.isnan: lambda ctx, x: isnan(x), np.isinf: _isinf, np.isfinite: _isfinite,
    np.signbit: _signbit, np.copysign: _copysign,
    np.equal: _compare("EQ"), np.not_equal: _compare("NE"), np.less: _compare("LT"),
    np.less_equal: _compare("LE"), np.greater: _compare("GT"), np.greater_equal: _compare("GE"),
    np.logical_and: _logical("and"), np.logical_or: _logical("or"),
    np.logical_xor: _logical("xor"), np.logical_not: _logical_not,
    np.bitwise_and: _binary("and"), np.bitwise_or: _binary("or"), np.bitwise_xor: _binary("xor"),
    np.invert: _unary("not"), np.left_shift: _binary("shift-left"), np.right_shift: _right_shift,
})
