"""Argument reductions of sin/cos/tan to |r| <= pi/4: Payne-Hanek for every finite argument
(``payne_hanek_f64``, ``payne_hanek_f32``) and Cody-Waite below ``BOUNDED_TRIG_LIMIT`` (``cody_waite_f64``,
``cody_waite_f32``); each returns (quadrant, r_hi, r_lo)."""

from __future__ import annotations

from llvmlite import ir

from .vecmath import VecMath

# ---- Payne-Hanek reduction for large arguments ------------------------------------------------
#
# x = m * 2**e (m the integer significand).  x * 2/pi mod 4 only depends on the bits of 2/pi at
# positions e-1, e, ... (bit i has weight 2**-i; earlier bits contribute multiples of 4), so a
# window of those bits, picked by the exponent (constant table or selects), times m in exact
# integer arithmetic (32 x 32 -> 64-bit products: ``vpmuludq``) gives the quadrant and the
# fraction as a fixed-point number; the fraction is centred on [-1/2, 1/2) in the integer
# domain (exact), converted to double(-double) and multiplied by pi/2.  Used for every
# |x| >= pi/4 (smaller x need no reduction): computing a Cody-Waite reduction as well and
# selecting would only add work, since a branch-free kernel pays for both paths anyway.

def _pi_fixed(prec: int) -> int:
    """pi * 2**prec by Machin's formula in integer arithmetic, off by < 2**10 units (truncations)."""
    one = 1 << prec

    def atan_inv(k):                                   # atan(1/k) * 2**prec
        total, term, n, sign = 0, one // k, 1, 1
        while term:
            total += sign * (term // n)
            term //= k * k
            n += 2
            sign = -sign
        return total
    return 16 * atan_inv(5) - 4 * atan_inv(239)


def _two_over_pi_bits(nbits: int) -> int:
    """floor(2/pi * 2**nbits) (64 guard bits)."""
    prec = nbits + 64
    return (1 << (prec + nbits + 1)) // _pi_fixed(prec)


# Bits at positions 1 .. _PH_NBITS: enough for the largest f64 exponent (e = 972 for inf/NaN)
# plus the 192-bit window.
_PH_NBITS = 1200
_TWO_OVER_PI_INT = _two_over_pi_bits(_PH_NBITS)


def _window(first: int, nbits: int) -> int:
    """The bits of 2/pi at positions first .. first+nbits-1 as an integer (zeros before 1)."""
    last = first + nbits - 1
    return (_TWO_OVER_PI_INT >> (_PH_NBITS - last)) & ((1 << nbits) - 1) if last >= 0 else 0


# f64 (x = m * 2**e, e = biased - 1075): the 192 bits from position e-1 for every biased
# exponent from 1013 (x ~ 2**-10; the table is only used from 2**27 on) to 2047, pre-shifted,
# as three 64-bit words (three gathers, no shifts).
_PH_F64_FIRST = 1013
_PH_F64 = [_window(b - 1075 - 1, 192) for b in range(_PH_F64_FIRST, 2048)]


# f32 (x = m * 2**e, e = biased - 150): the window starts at position e-1 = biased - 151, in
# the first 200 bits of 2/pi for every biased exponent >= 120.  Words of 32 bits from
# position -31 on (word 0 is zeros); the window is picked with selects (no gathers).
_PH_F32_FIRST = 120
_PH_F32_W32 = [_window(32 * k - 31, 32) for k in range(8)]
_PH_F32_W64 = [(_PH_F32_W32[k] << 32) | _PH_F32_W32[k + 1] for k in range(7)]


# pi/2 * 2**-62 as a double-double (the fixed-point fraction has 62 bits after the point)
_PIO2_SCALED = (float.fromhex("0x1.921fb54442d18p-62"), float.fromhex("0x1.1a62633145c07p-116"))

_I32, _I64 = ir.IntType(32), ir.IntType(64)


def _table(module: ir.Module, name: str, elem: ir.IntType, values: list[int]) -> ir.GlobalVariable:
    gv = module.globals.get(name)
    if gv is None:
        arr = ir.ArrayType(elem, len(values))
        gv = ir.GlobalVariable(module, arr, name)
        gv.global_constant = True
        gv.linkage = "internal"
        gv.initializer = ir.FormattedConstant(arr, _table_text(name, elem, values))
        gv.align = 16
    return gv


_TABLE_TEXTS: dict[str, str] = {}


def _table_text(name: str, elem: ir.IntType, values: list[int]) -> str:
    """The table's initializer as IR text, formatted once per process (llvmlite formats an
    ``ir.Constant`` array element by element, each time a module is printed: the three f64
    tables took ~10 ms a module)."""
    text = _TABLE_TEXTS.get(name)
    if text is None:
        text = _TABLE_TEXTS[name] = "[" + ", ".join(f"{elem} {v}" for v in values) + "]"
    return text


def _lookup(b: ir.IRBuilder, gv: ir.GlobalVariable, idx: ir.Value) -> ir.Value:
    """gv[idx] for an i64 index, scalar or vector (per-lane loads; the loop vectorizer turns
    the scalar form into a gather)."""
    zero = ir.Constant(_I32, 0)
    if not isinstance(idx.type, ir.VectorType):
        return b.load(b.gep(gv, [zero, idx], inbounds=True))
    n = idx.type.count
    out = ir.Constant(ir.VectorType(gv.type.pointee.element, n), None)
    for lane in range(n):
        k = b.extract_element(idx, ir.Constant(_I32, lane))
        out = b.insert_element(out, b.load(b.gep(gv, [zero, k], inbounds=True)), ir.Constant(_I32, lane))
    return out


class _Int:
    """i64 helpers with scalar/vector constants (the lanes of an VecMath for doubles)."""

    def __init__(self, m: VecMath):
        self.b, self.m = m.b, m

    def c(self, v: int):
        return self.m.ci(v)

    def lo(self, v): return self.b.and_(v, self.c(0xFFFFFFFF))
    def hi(self, v): return self.b.lshr(v, self.c(32))
    def add(self, a, c): return self.b.add(a, c)
    def mul(self, a, c): return self.b.mul(a, c)
    def shl(self, a, k): return self.b.shl(a, self.c(k) if isinstance(k, int) else k)


def _u64_to_f64(m: VecMath, v):
    """An integer 0 <= v < 2**52 (i64) as a double, exactly, without a (scalarized) i64
    conversion instruction: the bits 0x433 | v are 2**52 + v."""
    return m.sub(m.from_bits(m.b.or_(v, m.ci(0x4330000000000000))), m.c(2.0 ** 52))


def _ph_finish(m: VecMath, q, F, L, xneg):
    """Quadrant q and the centred fraction (F + L * 2**-64) * 2**-62 (F signed, |F| <= 2**61,
    L unsigned) of |x| * 2/pi; returns (q, r_hi, r_lo) for x (sign xneg)."""
    b, I = m.b, _Int(m)
    zero = m.ci(0)
    neg = b.icmp_signed("<", F, zero)
    # |F + L 2**-64| in two's complement (exact): -(F:L) = ~F + (L == 0) : -L
    Ln = b.select(neg, b.sub(zero, L), L)
    Fn = b.select(neg, b.add(b.not_(F), b.zext(b.icmp_unsigned("==", L, zero), m.ity)), F)
    # four exact non-negative pieces in decreasing magnitude, summed with Fast2Sum errors
    A = m.mul(_u64_to_f64(m, I.hi(Fn)), m.c(2.0 ** 32))
    B = _u64_to_f64(m, I.lo(Fn))
    C = m.mul(_u64_to_f64(m, I.hi(Ln)), m.c(2.0 ** -32))
    D = m.mul(_u64_to_f64(m, I.lo(Ln)), m.c(2.0 ** -64))
    s = m.add(A, B)
    err = m.sub(B, m.sub(s, A))
    t = m.add(s, C)
    err = m.add(err, m.sub(C, m.sub(t, s)))
    u = m.add(t, D)
    err = m.add(err, m.sub(D, m.sub(u, t)))
    hi = m.add(u, err)
    lo = m.sub(err, m.sub(hi, u))
    # times pi/2 * 2**-62 (double-double)
    ph, pl = _PIO2_SCALED
    rh = m.mul(hi, m.c(ph))
    rl = m.add(m.fma(hi, m.c(ph), m.neg(rh)), m.muladd(hi, m.c(pl), m.mul(lo, m.c(ph))))
    r = m.add(rh, rl)
    rlo = m.sub(rl, m.sub(r, rh))
    flip = b.xor(neg, xneg)
    r = m.sel(flip, m.neg(r), r)
    rlo = m.sel(flip, m.neg(rlo), rlo)
    q = b.select(xneg, b.sub(zero, q), q)
    return q, r, rlo


def _centre(m: VecMath, H):
    """H = x*2/pi mod 4 in 2.62 fixed point -> (nearest quadrant, signed fraction F)."""
    b = m.b
    H = b.add(H, m.ci(1 << 61))
    q = b.lshr(H, m.ci(62))
    F = b.sub(b.and_(H, m.ci((1 << 62) - 1)), m.ci(1 << 61))
    return q, F


def payne_hanek_f64(m: VecMath, x):
    """Payne-Hanek reduction of a double x, |x| >= 2**-10 finite (x * 2/pi mod 4 is known to
    ~2**-124 absolute; the closest double to a multiple of pi/2 is ~2**-61 away from it, so
    r is accurate to ~2**-60 relative at worst).  Returns (q, r_hi, r_lo); NaN for +-inf."""
    b, I = m.b, _Int(m)
    bits = m.bits(x)
    xneg = b.icmp_signed("<", bits, m.ci(0))
    bexp = b.and_(b.lshr(bits, m.ci(52)), m.ci(0x7FF))
    mant = b.or_(b.and_(bits, m.ci((1 << 52) - 1)), m.ci(1 << 52))
    idx = b.sub(b.select(b.icmp_signed("<", bexp, m.ci(_PH_F64_FIRST)), m.ci(_PH_F64_FIRST), bexp),
                m.ci(_PH_F64_FIRST))
    W = []
    for j in range(3):
        tab = _table(m.module, f"nbxla_two_over_pi_f64_{j}", _I64,
                     [(w >> (128 - 64 * j)) & 0xFFFFFFFFFFFFFFFF for w in _PH_F64])
        w = _lookup(b, tab, idx)
        W += [I.hi(w), I.lo(w)]
    ml, mh = I.lo(mant), I.hi(mant)
    pl = [I.mul(ml, w) for w in W]
    ph = [I.mul(mh, w) for w in W]
    # m * W = sum of 32-bit columns; column 6 and up are multiples of 4 (dropped), column 0
    # only feeds a carry below 2**-124 (dropped)
    cols = {c: [] for c in range(1, 6)}
    for j in range(6):
        base = 5 - j                                     # column of the low half of ml*W[j]
        for prod, off in ((pl[j], 0), (ph[j], 1)):
            if 1 <= base + off <= 5:
                cols[base + off].append(I.lo(prod))
            if 1 <= base + off + 1 <= 5:
                cols[base + off + 1].append(I.hi(prod))
    acc = {}
    carry = None
    for c in range(1, 6):
        v = cols[c][0]
        for t in cols[c][1:]:
            v = I.add(v, t)
        if carry is not None:
            v = I.add(v, carry)
        carry = I.hi(v)
        acc[c] = v
    H = b.or_(I.shl(acc[5], 32), I.lo(acc[4]))
    L = b.or_(I.shl(acc[3], 32), I.lo(acc[2]))
    q, F = _centre(m, H)
    q, r, rlo = _ph_finish(m, q, F, L, xneg)
    return q, m.add(r, m.sub(x, x)), rlo                  # +-inf -> NaN


def _i64_to_f64(m: VecMath, v):
    """A signed integer |v| < 2**62 (i64) as a double (one rounding): exact halves summed."""
    b = m.b
    hi = b.ashr(v, m.ci(32))                               # |hi| < 2**30: 1.5*2**52 + hi exact
    hd = m.sub(m.from_bits(b.add(hi, m.ci(0x4338000000000000))), m.c(1.5 * 2.0 ** 52))
    lo = _u64_to_f64(m, b.and_(v, m.ci(0xFFFFFFFF)))
    return m.muladd(hd, m.c(2.0 ** 32), lo)


def payne_hanek_f32(m: VecMath, x32):
    """Payne-Hanek reduction of a float argument |x| >= 2**-7 (computed with doubles/i64 in
    m): 24-bit significand times a 96-bit window of 2/pi (chosen with selects).  The fraction is
    known to 2**-62 (quadrant units); the closest f32 to a multiple of pi/2 is ~2**-30 away
    from it, so r is accurate to ~2**-32 relative at worst, far below the f32 rounding."""
    b, I = m.b, _Int(m)
    ity32 = ir.VectorType(_I32, m.lanes) if m.lanes else _I32
    bits = b.zext(b.bitcast(x32, ity32), m.ity)
    xneg = b.icmp_unsigned(">=", bits, m.ci(1 << 31))
    bexp = b.and_(b.lshr(bits, m.ci(23)), m.ci(0xFF))
    mant = b.or_(b.and_(bits, m.ci((1 << 23) - 1)), m.ci(1 << 23))
    o = b.sub(b.select(b.icmp_unsigned("<", bexp, m.ci(_PH_F32_FIRST)), m.ci(_PH_F32_FIRST), bexp),
              m.ci(_PH_F32_FIRST))                     # bit offset of position e-1, 0 .. 134
    k, sh = b.lshr(o, m.ci(5)), b.and_(o, m.ci(31))
    is_k = [b.icmp_unsigned("==", k, m.ci(v)) for v in range(1, 5)]

    def word(j):                                       # W64[k + j] << sh >> 32
        v = m.ci(_PH_F32_W64[j])
        for kk in range(1, 5):
            v = b.select(is_k[kk - 1], m.ci(_PH_F32_W64[kk + j]), v)
        return b.lshr(b.shl(v, sh), m.ci(32))
    W = [word(j) for j in range(3)]
    # bits 32..95 of mant * W (mod 2**96): 2 integer bits (mod 4) and 62 fraction bits
    H = I.add(I.add(I.shl(I.mul(mant, W[0]), 32), I.mul(mant, W[1])), I.hi(I.mul(mant, W[2])))
    H = b.select(xneg, b.sub(m.ci(0), H), H)               # x * 2/pi for negative x
    q, F = _centre(m, H)
    r = m.mul(_i64_to_f64(m, F), m.c(_PIO2_SCALED[0]))
    return q, r, m.c(0.0)


PIO4 = 0.7853981633974483


# ---- Cody-Waite reduction below a bound (kernels that checked their arguments) ---------------
#
# Payne-Hanek costs ~100 vector instructions and three gathers per value; for |x| below
# BOUNDED_TRIG_LIMIT (glibc's and fdlibm's "medium" range) a Cody-Waite reduction with pi/2 as
# a sum of three doubles costs ~25 flops.  A branch-free kernel would pay for both, so the
# bounded form is only emitted where the kernel has checked, a block of elements at a time,
# that every argument of the block is below the limit (codegen/trig_guard.py); blocks with a
# larger argument (or inf/NaN) run the full form.
BOUNDED_TRIG_LIMIT = 2.0 ** 20


def _pio2_parts() -> tuple[float, float, float]:
    """pi/2 = P1 + P2 + P3 (+ ~2**-160), each the double nearest to what is left."""
    from fractions import Fraction
    prec = 256
    rest = Fraction(_pi_fixed(prec), 2 << prec)
    parts = []
    for _ in range(3):
        parts.append(float(rest))
        rest -= Fraction(parts[-1])
    return tuple(parts)


_PIO2_PARTS = _pio2_parts()
_TWO_OVER_PI = 0.6366197723675814
_TOINT = 1.5 * 2.0 ** 52            # (t + _TOINT) - _TOINT rounds t to an integer (|t| < 2**51)


def _two_sum(m: VecMath, a, c):
    """(s, e) with s + e == a + c exactly (Knuth's TwoSum, any magnitudes)."""
    s = m.add(a, c)
    cc = m.sub(s, a)
    return s, m.add(m.sub(a, m.sub(s, cc)), m.sub(c, cc))


def _cw_quadrant(m: VecMath, x):
    """(q as a double, q mod 4 as an integer) for q = rint(x * 2/pi), |x| < 2**51: one
    fma rounds the product straight to an integer (no scalarized float-to-i64 conversion)."""
    t = m.fma(x, m.c(_TWO_OVER_PI), m.c(_TOINT))
    return m.sub(t, m.c(_TOINT)), m.b.and_(m.bits(t), m.ci(3))


def cody_waite_f64(m: VecMath, x):
    """(q, r_hi, r_lo) for a double |x| < BOUNDED_TRIG_LIMIT.  a = x - q*P1 by one fma is
    exact: |q| < 2**20 and P1 ~ 1.57, so q*P1 and x are multiples of 2**-53 (x >= 0.5 where
    q != 0) and |a| < 1 fits in 53 bits.  q*P2 is an exact product (h + hl), a - h a TwoSum
    (s + e, any magnitudes), and q*P3 with the small terms is rounded once, at ~2**-106
    relative: r is known far below the closest double to a multiple of pi/2 (~2**-61).
    17 operations where two exact products and two TwoSums took 27."""
    qf, q = _cw_quadrant(m, x)
    p1, p2, p3 = (m.c(v) for v in _PIO2_PARTS)
    nq = m.neg(qf)
    a = m.fma(nq, p1, x)
    h = m.mul(qf, p2)
    hl = m.fma(qf, p2, m.neg(h))
    s, e = _two_sum(m, a, m.neg(h))
    lo = m.fma(nq, p3, m.sub(e, hl))
    r = m.add(s, lo)
    return q, r, m.sub(lo, m.sub(r, s))


def cody_waite_f32(m: VecMath, xd):
    """(q, r, 0) for a float |x| < BOUNDED_TRIG_LIMIT computed in double: two fmas with pi/2
    as two doubles; r is accurate to ~2**-50 relative even ~2**-30 from a multiple of pi/2
    (the closest any float comes), far below the float rounding."""
    qf, q = _cw_quadrant(m, xd)
    p1, p2, _ = _PIO2_PARTS
    nq = m.neg(qf)
    r = m.fma(nq, m.c(p2), m.fma(nq, m.c(p1), xd))
    return q, r, m.c(0.0)
