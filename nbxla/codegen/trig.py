"""sin, cos, tan (one polynomial pair after the reductions of ``trig_reduction.py``) and atan2
as branch-free LLVM IR (the accuracy table and the method are in ``transcendentals.py``)."""

from __future__ import annotations

import math

from llvmlite import ir

from .trig_reduction import PIO4, cody_waite_f32, cody_waite_f64, payne_hanek_f32, payne_hanek_f64
from .vecmath import VecMath, dispatch, intrinsic, scalar_type, widen

def _sin_series(terms: int) -> list[float]:
    """(-1)^k / (2k+1)! for k = 1..terms (sin r = r + r^3 * P(r^2))."""
    from fractions import Fraction
    from math import factorial
    return [float(Fraction((-1) ** k, factorial(2 * k + 1))) for k in range(1, terms + 1)]


def _cos_series(terms: int) -> list[float]:
    """(-1)^k / (2k)! for k = 2..terms+1 (cos r = 1 - r^2/2 + r^4 * Q(r^2))."""
    from fractions import Fraction
    from math import factorial
    return [float(Fraction((-1) ** k, factorial(2 * k))) for k in range(2, terms + 2)]


_SIN_POLY = {"f32d": _sin_series(5)}                           # |r| <= pi/4
_COS_POLY = {"f32d": _cos_series(5)}
# f64: seven (sin) and six (cos) coefficients where the Taylor series needs eight (fused
# multiply-adds less; both polynomials run for every sin or cos): near-minimax fits on
# |r| <= pi/4 + 0.001 of (sin r - r) / r**3 and (cos r - 1 + r*r/2) / r**4 as polynomials in
# r*r, by interpolation at Chebyshev nodes in 60-digit arithmetic (mpmath.chebyfit).  Fit
# error 1.2e-20 (sin) and 1.3e-18 (cos) absolute, times r**2 <= 0.62 against a result of
# relative rounding 1.1e-16 (six sin coefficients, 2.1e-17, raised sin's worst case from
# 0.77 to 0.82 ulp; seven kept it).
_SIN_POLY[64] = [-0.16666666666666666, 0.008333333333333331, -0.00019841269841265003,
                 2.7557319219291695e-06, -2.5052106215978872e-08, 1.6058529011960858e-10,
                 -7.586543634101903e-13]
_COS_POLY[64] = [0.041666666666666664, -0.0013888888888887378, 2.4801587298736863e-05,
                 -2.755731725679604e-07, 2.087614315990944e-09, -1.1382408754153254e-11]



# ---- sin / cos / tan --------------------------------------------------------------------------

def _sincos_poly(m: VecMath, r, rlo, key):
    """(sin(r + rlo), cos(r + rlo)) for |r| <= pi/4 (+ rounding)."""
    z = m.mul(r, r)
    sp = m.poly(z, _SIN_POLY[key])
    cp = m.poly(z, _COS_POLY[key])
    hz = m.mul(m.c(0.5), z)
    # sin: r + r^3*P(z) + rlo*cos(r) ~ r + (r*z*P + rlo*(1 - z/2))
    s = m.add(r, m.muladd(m.mul(r, z), sp, m.mul(rlo, m.sub(m.c(1.0), hz))))
    # cos: 1 - z/2 + z^2*Q(z) - r*rlo, with the rounding error of 1 - z/2 added back
    w = m.sub(m.c(1.0), hz)
    corr = m.sub(m.sub(m.c(1.0), w), hz)
    c = m.add(w, m.add(m.muladd(m.mul(z, z), cp, m.neg(m.mul(r, rlo))), corr))
    return s, c


def _sin_from(m: VecMath, q, s, c):
    odd = m.b.icmp_unsigned("!=", m.b.and_(q, m.ci(1)), m.ci(0))
    neg = m.b.icmp_unsigned("!=", m.b.and_(q, m.ci(2)), m.ci(0))
    v = m.sel(odd, c, s)
    return m.sel(neg, m.neg(v), v)


def _cos_from(m: VecMath, q, s, c):
    odd = m.b.icmp_unsigned("!=", m.b.and_(q, m.ci(1)), m.ci(0))
    q1 = m.b.add(q, m.ci(1))
    neg = m.b.icmp_unsigned("!=", m.b.and_(q1, m.ci(2)), m.ci(0))
    v = m.sel(odd, s, c)
    return m.sel(neg, m.neg(v), v)


def _tan_from(m: VecMath, q, s, c):
    odd = m.b.icmp_unsigned("!=", m.b.and_(q, m.ci(1)), m.ci(0))
    return m.sel(odd, m.neg(m.div(c, s)), m.div(s, c))


def _full_parts_f64(m: VecMath, x):
    """(quadrant, sin and cos polynomials) of the full form for a double x."""
    q, r, rlo = payne_hanek_f64(m, x)
    small = m.lt(m.abs(x), m.c(PIO4))                  # |x| < pi/4: no reduction
    q = m.b.select(small, m.ci(0), q)
    r = m.sel(small, x, r)
    rlo = m.sel(small, m.c(0.0), rlo)
    return (q, *_sincos_poly(m, r, rlo, 64))


def _full_parts_f32(m: VecMath, x, xd):
    """The same for a float x, in double (``m``, ``xd``: x widened)."""
    q, r, rlo = payne_hanek_f32(m, x)
    small = m.lt(m.abs(xd), m.c(PIO4))                 # |x| < pi/4: no reduction
    q = m.b.select(small, m.ci(0), q)
    r = m.sel(small, xd, m.add(r, m.sub(xd, xd)))     # +-inf, NaN -> NaN
    return (q, *_sincos_poly(m, r, rlo, "f32d"))


def _from_parts_f64(m: VecMath, x, q, s, c, outputs):
    values = []
    for which, tiny_identity in outputs:
        v = which(m, q, s, c)
        if tiny_identity:
            v = m.sel(m.lt(m.abs(x), m.c(2.0 ** -27)), x, v)
        values.append(v)
    return values


def _from_parts_f32(m: VecMath, m32: VecMath, x, q, s, c, outputs):
    values = []
    for which, tiny_identity in outputs:
        v = m.b.fptrunc(which(m, q, s, c), x.type)
        if tiny_identity:
            v = m32.sel(m32.lt(m32.abs(x), m32.c(2.0 ** -13)), x, v)
        values.append(v)
    return values


def _trig(*outputs, bounded: bool = False):
    """f32 and f64 implementations of the functions ``outputs`` ((from_quadrant,
    tiny_identity) pairs) sharing one argument reduction; one value, or a tuple for several.
    ``bounded``: only for |x| < BOUNDED_TRIG_LIMIT (Cody-Waite; see above)."""
    def finish(values):
        return values[0] if len(values) == 1 else tuple(values)

    def f64(m: VecMath, x):
        if bounded:
            q, r, rlo = cody_waite_f64(m, x)                   # (q = 0, r = x for |x| < pi/4)
            q, s, c = (q, *_sincos_poly(m, r, rlo, 64))
        else:
            q, s, c = _full_parts_f64(m, x)
        return finish(_from_parts_f64(m, x, q, s, c, outputs))

    def f32(m32: VecMath, x):
        b = m32.b
        xd = widen(b, x, 64)
        m = VecMath(b, xd.type)
        if bounded:
            q, r, rlo = cody_waite_f32(m, xd)
            q, s, c = (q, *_sincos_poly(m, r, rlo, "f32d"))
        else:
            q, s, c = _full_parts_f32(m, x, xd)
        return finish(_from_parts_f32(m, m32, x, q, s, c, outputs))
    return f32, f64


_FROM = {"sin": (_sin_from, True), "cos": (_cos_from, False), "tan": (_tan_from, True)}


def emit_trig_parts(b: ir.IRBuilder, x: ir.Value):
    """The work sin, cos and tan of a float or double x share in their full form: (quadrant
    as an integer, sin and cos polynomials as doubles), for ``emit_trig_from_parts``."""
    if str(scalar_type(x.type)) == "double":
        return _full_parts_f64(VecMath(b, x.type), x)
    xd = widen(b, x, 64)
    return _full_parts_f32(VecMath(b, xd.type), x, xd)


def emit_trig_from_parts(b: ir.IRBuilder, name: str, x: ir.Value, q, s, c) -> ir.Value:
    """``name`` ("sin", "cos", "tan") of x from ``emit_trig_parts``' values: bit for bit
    emit_sin's, emit_cos's, emit_tan's full form."""
    m = VecMath(b, s.type)
    if str(scalar_type(x.type)) == "double":
        return _from_parts_f64(m, x, q, s, c, [_FROM[name]])[0]
    return _from_parts_f32(m, VecMath(b, x.type), x, q, s, c, [_FROM[name]])[0]


_SIN = _trig((_sin_from, True))
_COS = _trig((_cos_from, False))
_TAN = _trig((_tan_from, True))
_SINCOS = _trig((_sin_from, True), (_cos_from, False))
_BOUNDED = {"sin": _trig((_sin_from, True), bounded=True), "cos": _trig((_cos_from, False), bounded=True),
            "tan": _trig((_tan_from, True), bounded=True)}


def emit_sin(b: ir.IRBuilder, x: ir.Value, bounded: bool = False) -> ir.Value:
    """sin x; ``bounded``: valid only for |x| < BOUNDED_TRIG_LIMIT (the caller checked)."""
    return dispatch(b, x, *(_BOUNDED["sin"] if bounded else _SIN))


def emit_cos(b: ir.IRBuilder, x: ir.Value, bounded: bool = False) -> ir.Value:
    return dispatch(b, x, *(_BOUNDED["cos"] if bounded else _COS))


def emit_tan(b: ir.IRBuilder, x: ir.Value, bounded: bool = False) -> ir.Value:
    return dispatch(b, x, *(_BOUNDED["tan"] if bounded else _TAN))


def emit_sincos(b: ir.IRBuilder, x: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(sin x, cos x) from one argument reduction."""
    st = str(scalar_type(x.type))
    if st == "half":
        s, c = emit_sincos(b, widen(b, x, 32))
        return b.fptrunc(s, x.type), b.fptrunc(c, x.type)
    f32, f64 = _SINCOS
    return f32(VecMath(b, x.type), x) if st == "float" else f64(VecMath(b, x.type), x)


# ---- atan2 ------------------------------------------------------------------------------------
# atan2(y, x) from a = atan(n / d) with n = min(|y|, |x|), d = max(|y|, |x|) (0 <= n/d <= 1):
# a, pi/2 - a (|y| > |x|), pi - a (x negative or -0) or pi/2 + a (both), with y's sign.  atan on
# [0, 1] with one division: t = n/d below tan(pi/8), else atan(n/d) = pi/4 + atan(t) with
# t = (n - d) / (n + d) (chosen before dividing), so |t| <= tan(pi/8) and atan(t) = t + t s P(s),
# s = t*t, P a near-minimax fit on [0, tan(pi/8)**2] (Chebyshev nodes, 60 digits,
# mpmath.chebyfit; error below 0.03 ulp with 12 coefficients for f64, 2**-43 with 8 for f32
# computed in double: 2**-33 with 6 moved float results rounded once across midpoints).  A division costs 16 cycles of the one divider per 8 doubles; the k/4
# centres this replaces needed a second one for t (and an arc distance spent half of its
# divider time in atan2).  n + d is formed as (n/2 + d/2) * 2 where d > 1 (no overflow).
# f32 and f16 compute in double and round once.  Special cases come out of the same formula
# (inf/inf is replaced by 1/1, d = 0 by the smallest denormal first): atan2(+-0, +0) = +-0,
# atan2(+-0, -0) = +-pi, atan2(+-inf, -inf) = +-3pi/4, NaN in, NaN out.

_ATAN_FIT = {
    64: [-0.3333333333333333, 0.199999999999998, -0.14285714285659326, 0.11111111105106705,
         -0.09090908751076636, 0.0769229630497447, -0.06666423628069258, 0.058789145444006215,
         -0.052303478730160745, 0.04551108126325172, -0.034558092551413795, 0.01627194475162406],
    "f32d": [-0.33333333333265697, 0.1999999994953061, -0.14285708076608974, 0.11110818413358031,
             -0.09084078141663537, 0.07604579486852303, -0.06026298394701879, 0.03293875797470985],
}
_TAN_PI_8 = 0.41421356237309503
_PI = (math.pi, 1.2246467991473532e-16)             # pi as a double-double
_PI_2 = (math.pi / 2, 6.123233995736766e-17)
_PI_4 = (math.pi / 4, 3.061616997868383e-17)


def _atan_unit(m: VecMath, n, d, key):
    """atan(n / d) for 0 <= n <= d, d > 0 (inf only with a finite n)."""
    one = m.c(1.0)
    big = m.gt(n, m.mul(d, m.c(_TAN_PI_8)))
    h = m.sel(m.gt(d, one), m.c(0.5), one)                  # n + d would overflow near the top
    dh = m.mul(d, h)
    num = m.sel(big, m.fma(n, h, m.neg(dh)), n)
    den = m.sel(big, m.fma(n, h, dh), d)
    t = m.div(num, den)
    s = m.mul(t, t)
    series = m.muladd(m.mul(t, s), m.poly(s, _ATAN_FIT[key]), t)
    hi = m.sel(big, m.c(_PI_4[0]), m.c(0.0))
    lo = m.sel(big, m.c(_PI_4[1]), m.c(0.0))
    return m.add(hi, m.add(lo, series))


def _atan2_core(m: VecMath, y, x, key):
    ay, ax = m.abs(y), m.abs(x)
    steep = m.gt(ay, ax)
    n, d = m.sel(steep, ax, ay), m.sel(steep, ay, ax)
    zero, one = m.c(0.0), m.c(1.0)
    both_inf = m.eq(n, m.c(float("inf")))                   # (then d is too): pi/4
    n, d = m.sel(both_inf, one, n), m.sel(both_inf, one, d)
    d = m.b.call(intrinsic(m.module, "llvm.maxnum", m.ty, 2), [d, m.c(5e-324)])   # 0/0 -> 0
    a = _atan_unit(m, n, d, key)
    # |result| = hi + (lo +- a): a; pi/2 - a (steep); pi - a (x < 0); pi/2 + a (both)
    x_neg = m.b.icmp_signed("<", m.bits(x), m.ci(0))
    hi = m.sel(steep, m.c(_PI_2[0]), m.sel(x_neg, m.c(_PI[0]), zero))
    lo = m.sel(steep, m.c(_PI_2[1]), m.sel(x_neg, m.c(_PI[1]), zero))
    a = m.add(hi, m.sel(m.b.xor(steep, x_neg), m.sub(lo, a), m.add(lo, a)))
    a = m.copysign(a, y)
    return m.sel(m.b.or_(m.isnan(x), m.isnan(y)), m.add(x, y), a)


def emit_atan2(b: ir.IRBuilder, y: ir.Value, x: ir.Value) -> ir.Value:
    """atan2(y, x) (C99 special cases), vectorizable; f32 and f16 through double."""
    st = str(scalar_type(y.type))
    if st == "double":
        return _atan2_core(VecMath(b, y.type), y, x, 64)
    if st == "half":                # (through float: half <-> double would be libcalls)
        r = emit_atan2(b, widen(b, y, 32), widen(b, x, 32))
        return b.fptrunc(r, y.type)
    if st == "float":
        yd, xd = widen(b, y, 64), widen(b, x, 64)
        return b.fptrunc(_atan2_core(VecMath(b, yd.type), yd, xd, "f32d"), y.type)
    raise TypeError(f"no atan2 for {y.type}")
