"""exp, expm1, log, log1p, tanh, logistic, erf and pow as branch-free LLVM IR (the accuracy
table and the method are in ``transcendentals.py``): Cody-Waite reduction by ln 2, Taylor or
near-minimax polynomials, ``2**n`` built with integer bit operations."""

from __future__ import annotations

from llvmlite import ir

from .vecmath import VecMath, dispatch, scalar_type, widen

# ln 2 split so that n * hi is exact for every n the reductions produce (|n| < 2**8 for f32,
# 2**11 for f64): hi has 15 (f32) / 40 (f64) significant bits; lo is the rest.
_LN2 = {32: (float.fromhex("0x1.62e4p-1"), float.fromhex("0x1.7f7d1cf79abcap-20")),
        64: (float.fromhex("0x1.62e42fefa2p-1"), float.fromhex("0x1.9ef35793c7673p-41"))}
_LOG2E = 1.4426950408889634

def _taylor_exp(degree: int) -> list[float]:
    """1/k! for k = 0..degree (exact rationals rounded once)."""
    from fractions import Fraction
    from math import factorial
    return [float(Fraction(1, factorial(k))) for k in range(degree + 1)]


def _atanh_series(terms: int) -> list[float]:
    """2/(2k+1) for k = 1..terms: log(1+f) = 2s + s*R(s*s), R(z) = sum 2/(2k+1) z**k."""
    from fractions import Fraction
    return [float(Fraction(2, 2 * k + 1)) for k in range(1, terms + 1)]


_EXP_POLY = {32: _taylor_exp(7), 64: _taylor_exp(13)}          # |r| <= ln2/2
_LOG_POLY = {32: _atanh_series(4), 64: _atanh_series(10)}      # |s| <= 0.1716
# log / log1p (f64): eight coefficients of a near-minimax fit of R(z) = sum 2/(2k+1) z**(k-1)
# on z <= 0.1721**2 (Chebyshev nodes, 60 digits, mpmath.chebyfit) where the series needs ten:
# fit error 2e-18 absolute on R, which enters the result times s*z <= 0.0051.  (pow keeps
# the series: its double-double log needs the tail to more than double precision.)
_LOG_FIT_64 = [0.6666666666666666, 0.4000000000000092, 0.2857142857077975, 0.2222222239710733,
               0.1818179506558485, 0.1538627085753131, 0.1326794134760937, 0.13095298275721326]

# erf(x)/x - 1 = P(x*x) on |x| < 1 (erf = x + x*P: the final rounding dominates).
_ERF_SMALL = {
    32: [0.12837916612625122, -0.3761262595653534, 0.11283594369888306,
         -0.02685421146452427, 0.005189087241888046, -0.000801686430349946,
         7.875874871388078e-05],
    64: [0.12837916709551256, -0.37612638903183543, 0.11283791670945006,
         -0.02686617064323777, 0.0052239776071164225, -0.0008548325975389692,
         0.00012055294904839707, -1.492473690741966e-05, 1.6447424703317362e-06,
         -1.6208483801871705e-07, 1.3720064546777686e-08, -7.795898827002142e-10],
}
# erfc(x) * exp(x*x) = P(x - mid) on [lo, hi]: (lo, mid, coefficients) per piece.
_ERF_LARGE = {
    32: [(1.0, 2.5, [0.21080636978149414, -0.07434733957052231, 0.02493799477815628,
                     -0.008001693524420261, 0.002467065816745162, -0.0007331529632210732,
                     0.00021091796224936843, -5.952315768809058e-05,
                     1.611410698387772e-05, -3.7472736948984675e-06,
                     9.763901971382438e-07, -4.264734343450982e-07,
                     1.0301513242438887e-07])],
    64: [(1.0, 1.5, [0.3215854164543175, -0.16362291773256007, 0.07615103985548055,
                     -0.03293090529956347, 0.013377340952802835, -0.005145957547915988,
                     0.0018861348854630824, -0.0006619300686179933,
                     0.00022330981211640024, -7.265888759557882e-05,
                     2.286543658874603e-05, -6.975285854904505e-06,
                     2.061689065129881e-06, -5.946998373950516e-07,
                     1.8038197652346406e-07, -4.93284420200026e-08]),
         (2.0, 2.75, [0.19366209627906866, -0.06323763756063483, 0.01975859298732897,
                      -0.005934337896999284, 0.001719581885061462,
                      -0.0004821950849322654, 0.0001311818037632169,
                      -3.4698610270387155e-05, 8.940133543917338e-06,
                      -2.247368610883161e-06, 5.520607070345556e-07,
                      -1.3264363071840677e-07, 3.103266553704028e-08,
                      -7.162110554563578e-09, 1.819371994210045e-09,
                      -4.0299892437854223e-10]),
         (3.5, 4.75, [0.11630270721024713, -0.023503448598163123, 0.0046613263689870375,
                      -0.0009080988970320573, 0.00017392830384343463,
                      -3.277578110287109e-05, 6.081115557021995e-06,
                      -1.1115678822071087e-06, 2.002894521341176e-07,
                      -3.559534170211966e-08, 6.24584245950732e-09,
                      -1.0813100185433638e-09, 1.8226396585714537e-10,
                      -3.0813178819658213e-11, 6.183166565869695e-12,
                      -1.0171709689071705e-12])],
}
_ERF_CLAMP = {32: 4.0, 64: 6.0}


# ---- exp / expm1 ------------------------------------------------------------------------------

_EXP_LIMITS = {32: (-104.0, 88.8), 64: (-745.2, 709.8)}
_SHIFT = {32: 1.5 * 2.0 ** 23, 64: 1.5 * 2.0 ** 52}


def _reduce_ln2(m: VecMath, x, extra_lo=None):
    """x = n*ln2 + r, |r| <= ln2/2 (+ rounding).  x must be clamped (|x| < 2**20)."""
    hi, lo = _LN2[m.width]
    shift = m.c(_SHIFT[m.width])
    kf = m.muladd(x, m.c(_LOG2E), shift)
    n = m.b.sub(m.bits(kf), m.bits(shift))           # the integer n in two's complement
    nf = m.sub(kf, shift)
    r = m.muladd(nf, m.c(-hi), x)                      # exact: n*hi has few bits, Sterbenz
    r = m.muladd(nf, m.c(-lo), r)
    if extra_lo is not None:
        r = m.add(r, extra_lo)
    return n, r


def _exp_scaled(m: VecMath, n, p):
    """p * 2**n for n in [-1076, 1025] without intermediate overflow/underflow."""
    n1 = m.b.ashr(n, m.ci(1))
    n2 = m.b.sub(n, n1)
    return m.mul(m.mul(p, m.pow2(n1)), m.pow2(n2))


def _exp_core(m: VecMath, x, extra_lo=None):
    lo, hi = _EXP_LIMITS[m.width]
    xc = m.min_c(m.max_c(x, lo), hi)                   # NaN passes through, and stays NaN
    n, r = _reduce_ln2(m, xc, extra_lo)
    p = m.poly(r, _EXP_POLY[m.width])
    return _exp_scaled(m, n, p)


def emit_exp(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """e**x."""
    return dispatch(b, x, _exp_core, _exp_core)


_EXPM1_LIMITS = {32: (-20.0, 88.8), 64: (-40.0, 709.8)}
_TINY = {32: 2.0 ** -25, 64: 2.0 ** -54}


def _expm1_core(m: VecMath, x):
    lo, hi = _EXPM1_LIMITS[m.width]
    xc = m.min_c(m.max_c(x, lo), hi)
    n, r = _reduce_ln2(m, xc)
    q = m.poly(r, _EXP_POLY[m.width][2:])              # expm1(r) = r + r*r*q(r)
    em = m.muladd(m.mul(r, r), q, r)
    # expm1(x) = 2**n * (em + 1) - 1 = 2 * (s*em + (s - 1/2)), s = 2**(n-1)
    s = m.pow2(m.b.sub(n, m.ci(1)))
    big = m.mul(m.c(2.0), m.muladd(s, em, m.sub(s, m.c(0.5))))
    res = m.sel(m.b.icmp_signed("==", n, m.ci(0)), em, big)
    return m.sel(m.lt(m.abs(x), m.c(_TINY[m.width])), x, res)   # +-0, denormals: exact


def emit_expm1(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """e**x - 1, accurate near 0."""
    return dispatch(b, x, _expm1_core, _expm1_core)


# ---- log / log1p ------------------------------------------------------------------------------

_SQRT_HALF_BITS = {32: 0x3F3504F3, 64: 0x3FE6A09E667F3BCD}
_MIN_NORMAL = {32: 2.0 ** -126, 64: 2.0 ** -1022}


def _log_parts(m: VecMath, u, k_adjust=None):
    """u = 2**k * (1 + f) with 1 + f in [sqrt(1/2), sqrt(2)); returns (k as float, f)."""
    iu = m.bits(u)
    t = m.b.sub(iu, m.ci(_SQRT_HALF_BITS[m.width]))
    k = m.b.ashr(t, m.ci(m.mant))
    mi = m.b.sub(iu, m.b.shl(k, m.ci(m.mant)))
    if k_adjust is not None:
        k = m.b.add(k, k_adjust)
    f = m.sub(m.from_bits(mi), m.c(1.0))              # exact (Sterbenz)
    return m.int_to_float(k), f


def _log_from_parts(m: VecMath, kf, f, c=None):
    """k*ln2 + log(1+f) (+ c, a small correction), fdlibm-style arrangement."""
    hi, lo = _LN2[m.width]
    s = m.div(f, m.add(m.c(2.0), f))
    z = m.mul(s, s)
    R = m.mul(z, m.poly(z, _LOG_FIT_64 if m.width == 64 else _LOG_POLY[32]))
    hfsq = m.mul(m.c(0.5), m.mul(f, f))
    tail = m.mul(kf, m.c(lo))
    if c is not None:
        tail = m.add(tail, c)
    inner = m.muladd(s, m.add(hfsq, R), tail)
    return m.muladd(kf, m.c(hi), m.sub(f, m.sub(hfsq, inner)))


def _log_core(m: VecMath, x):
    # denormals: scale into the normal range first
    scale = 2.0 ** (m.mant + 1)
    den = m.lt(x, m.c(_MIN_NORMAL[m.width]))
    u = m.sel(den, m.mul(x, m.c(scale)), x)
    kadj = m.b.select(den, m.ci(-(m.mant + 1)), m.ci(0))
    kf, f = _log_parts(m, u, kadj)
    res = _log_from_parts(m, kf, f)
    ok = m.b.and_(m.gt(x, m.c(0.0)), m.lt(x, m.c(float("inf"))))
    special = m.sel(m.lt(x, m.c(0.0)), m.c(float("nan")), x)       # NaN, +inf stay
    special = m.sel(m.eq(x, m.c(0.0)), m.c(float("-inf")), special)
    return m.sel(ok, res, special)


def emit_log(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """Natural logarithm."""
    return dispatch(b, x, _log_core, _log_core)


def _log1p_core(m: VecMath, x):
    one = m.c(1.0)
    u = m.add(one, x)
    # c = (1 + x) - u exactly (two cases keep the subtractions exact)
    c_small = m.sub(x, m.sub(u, one))
    c_big = m.sub(one, m.sub(u, x))
    c = m.sel(m.lt(u, m.c(2.0)), c_small, c_big)
    ok = m.b.and_(m.gt(x, m.c(-1.0)), m.lt(x, m.c(float("inf"))))
    u = m.sel(ok, u, one)                               # keep the bit tricks on sane values
    kf, f = _log_parts(m, u)
    res = _log_from_parts(m, kf, f, m.div(c, u))
    special = m.sel(m.lt(x, m.c(-1.0)), m.c(float("nan")), x)
    special = m.sel(m.eq(x, m.c(-1.0)), m.c(float("-inf")), special)
    res = m.sel(ok, res, special)
    tiny = {32: 2.0 ** -24, 64: 2.0 ** -53}[m.width]
    return m.sel(m.lt(m.abs(x), m.c(tiny)), x, res)


def emit_log1p(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """log(1 + x), accurate near 0."""
    return dispatch(b, x, _log1p_core, _log1p_core)


# ---- tanh / logistic --------------------------------------------------------------------------

_TANH_SAT = {32: 9.5, 64: 20.0}


def _tanh_core(m: VecMath, x):
    a = m.min_c(m.abs(x), _TANH_SAT[m.width])          # tanh(a) rounds to 1 from here on
    em = _expm1_core(m, m.mul(m.c(2.0), a))
    t = m.div(em, m.add(em, m.c(2.0)))
    return m.copysign(t, x)


def emit_tanh(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """Hyperbolic tangent."""
    return dispatch(b, x, _tanh_core, _tanh_core)


def _logistic_core(m: VecMath, x):
    e = _exp_core(m, m.neg(m.abs(x)))                 # e**-|x| never overflows
    num = m.sel(m.lt(x, m.c(0.0)), e, m.c(1.0))
    return m.div(num, m.add(m.c(1.0), e))


def emit_logistic(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """1 / (1 + e**-x)."""
    return dispatch(b, x, _logistic_core, _logistic_core)


# ---- erf --------------------------------------------------------------------------------------

def _erf_core(m: VecMath, x):
    a = m.abs(x)
    z = m.mul(a, a)
    small = m.muladd(a, m.poly(z, _ERF_SMALL[m.width]), a)
    ac = m.min_c(a, _ERF_CLAMP[m.width])
    pieces = _ERF_LARGE[m.width]
    # per-lane piece selection: choose each coefficient (and the centre) with selects
    conds = [m.lt(ac, m.c(lo)) for lo, _, _ in pieces[1:]]
    degree = max(len(cs) for _, _, cs in pieces)

    def pick(values):
        v = m.c(values[-1])
        for cond, val in zip(reversed(conds), reversed(values[:-1])):
            v = m.sel(cond, m.c(val), v)
        return v
    # conds[i] is "ac < lo of piece i+1", so walking from the last piece back picks the first
    # piece whose upper end is above ac.
    mid = pick([mid for _, mid, _ in pieces])
    coeffs = [pick([(cs[k] if k < len(cs) else 0.0) for _, _, cs in pieces]) for k in range(degree)]
    g = m.poly_v(m.sub(ac, mid), coeffs)
    erfc = m.mul(_exp_core(m, m.neg(m.mul(ac, ac))), g)
    large = m.sub(m.c(1.0), erfc)
    r = m.sel(m.lt(a, m.c(1.0)), small, large)
    return m.copysign(r, x)


def emit_erf(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """The error function."""
    return dispatch(b, x, _erf_core, _erf_core)


# ---- pow --------------------------------------------------------------------------------------

def _log_dd(m: VecMath, a):
    """log(a) as a double-double (hi, lo) for positive finite a (double)."""
    den = m.lt(a, m.c(_MIN_NORMAL[64]))
    u = m.sel(den, m.mul(a, m.c(2.0 ** 54)), a)
    kadj = m.b.select(den, m.ci(-54), m.ci(0))
    kf, f = _log_parts(m, u, kadj)
    hi, lo = _LN2[64]
    two = m.c(2.0)
    d = m.add(two, f)
    d_lo = m.sub(f, m.sub(d, two))                     # exact rounding error of 2 + f
    s = m.div(f, d)
    p = m.mul(s, d)
    pe = m.fma(s, d, m.neg(p))
    s_lo = m.div(m.sub(m.sub(m.sub(f, p), pe), m.mul(s, d_lo)), d)
    z = m.mul(s, s)
    tail = m.mul(m.mul(s, z), m.poly(z, _LOG_POLY[64]))   # 2s^3/3 + 2s^5/5 + ...
    a1 = m.mul(kf, m.c(hi))                            # exact
    a2 = m.mul(two, s)
    h = m.add(a1, a2)                                  # TwoSum(a1, a2)
    bb = m.sub(h, a1)
    e1 = m.add(m.sub(a1, m.sub(h, bb)), m.sub(a2, bb))
    low = m.add(e1, m.add(m.muladd(kf, m.c(lo), m.mul(two, s_lo)), tail))
    L = m.add(h, low)
    Llo = m.sub(low, m.sub(L, h))
    return L, Llo


def _pow_magnitude_f64(m: VecMath, ax, y):
    """|x|**y for double |x| > 0 finite, y finite; overflow -> inf, underflow -> 0."""
    L, Llo = _log_dd(m, ax)
    p = m.mul(y, L)
    pe = m.fma(y, L, m.neg(p))
    plo = m.muladd(y, Llo, pe)
    plo = m.sel(m.lt(m.abs(p), m.c(1e4)), plo, m.c(0.0))
    return _exp_core(m, p, plo)


def _pow_magnitude_f32(m: VecMath, ax, y):
    """f32 |x|**y computed in double: log in double, the product and exp in double."""
    b = m.b
    md = VecMath(b, widen(b, ax, 64).type)
    axd, yd = widen(b, ax, 64), widen(b, y, 64)
    L = _log_core(md, axd)
    return b.fptrunc(_exp_core(md, md.mul(yd, L)), ax.type)


def _pow_core(m: VecMath, x, y, magnitude):
    one, zero = m.c(1.0), m.c(0.0)
    inf = m.c(float("inf"))
    ax = m.abs(x)
    ay = m.abs(y)
    # |x|**y for finite nonzero |x| and finite y; zeros and infinities by rule below
    finite_x = m.b.and_(m.gt(ax, zero), m.lt(ax, inf))
    finite_y = m.lt(ay, inf)
    safe_x = m.sel(finite_x, ax, one)
    safe_y = m.sel(finite_y, y, one)
    mag = magnitude(m, safe_x, safe_y)
    # zero / infinite x: 0**y = 0 (y > 0) or inf (y < 0); inf**y = inf (y > 0) or 0 (y < 0)
    y_pos = m.gt(y, zero)
    mag_zero = m.sel(y_pos, zero, inf)
    mag_inf = m.sel(y_pos, inf, zero)
    mag = m.sel(m.eq(ax, zero), mag_zero, mag)
    mag = m.sel(m.eq(ax, inf), mag_inf, mag)
    # infinite y: |x| < 1 -> 0 for +inf, inf for -inf; |x| > 1 the reverse; |x| == 1 -> 1
    big_x = m.gt(ax, one)
    yinf = m.sel(big_x, mag_inf, mag_zero)
    yinf = m.sel(m.eq(ax, one), one, yinf)
    mag = m.sel(finite_y, mag, yinf)
    # the sign: negative x (sign bit set) with an odd integer y gives a negative result
    y_int = m.eq(m.trunc(y), y)                         # true for +-inf too
    half = m.mul(y, m.c(0.5))
    y_odd = m.b.and_(y_int, m.ne_u(m.trunc(half), half))
    x_neg = m.b.icmp_signed("<", m.bits(x), m.ci(0))
    res = m.sel(m.b.and_(x_neg, y_odd), m.neg(mag), mag)
    # negative finite x with a finite non-integer y: NaN
    bad = m.b.and_(m.b.and_(m.lt(x, zero), m.gt(x, m.neg(inf))),
                   m.b.and_(finite_y, m.b.not_(y_int)))
    res = m.sel(bad, m.c(float("nan")), res)
    nan_in = m.b.or_(m.isnan(x), m.isnan(y))
    res = m.sel(nan_in, m.add(x, y), res)
    # pow(x, +-0) = 1 and pow(1, y) = 1, even for NaN
    return m.sel(m.b.or_(m.eq(y, zero), m.eq(x, one)), one, res)


def emit_pow(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """x**y with C99 special cases."""
    st = str(scalar_type(x.type))
    if st == "half":
        x32, y32 = widen(b, x, 32), widen(b, y, 32)
        r = _pow_core(VecMath(b, x32.type), x32, y32, _pow_magnitude_f32)
        return b.fptrunc(r, x.type)
    if st == "float":
        return _pow_core(VecMath(b, x.type), x, y, _pow_magnitude_f32)
    if st == "double":
        return _pow_core(VecMath(b, x.type), x, y, _pow_magnitude_f64)
    raise TypeError(f"no pow for {x.type}")
