"""Complex functions for the elemental emitter: straight-line code on the two parts of a value.

Complex values are ``{re, im}`` structs in the emitter; ``ComplexMath`` works on the parts as
separate float/double values and builds every function from the branch-free real functions
of ``transcendentals`` (exp, expm1, log, log1p, sin/cos), ``select`` choosing special cases,
so loops stay vectorizable and the NVPTX target needs no library.  The one remaining libm
call is ``atan2`` (the argument of log, log1p and pow), which the GPU backend replaces by a
device body (``gpu_math``).

NumPy is the oracle.  It calls glibc's ``cexp``, ``clog``, ``csqrt``, ``csin``, ``ccos``
(= ``ccosh(iz)``), ``ctan``, ``ctanh`` and ``cpow`` (``cexp(b * clog(a))``, the product with
C's Annex G recovery of infinities, after NumPy's own cases: ``b == 0``, ``a == 0`` and
repeated multiplication for integer ``b`` in (-100, 100)); ``log1p``, ``expm1``, ``rsqrt``
(reciprocal of sqrt) and ``logistic`` (``1 / (1 + exp(-z))``) are NumPy formulas.  The
special values (infinite and NaN parts, signed zeros) follow those definitions case by case;
the finite results are computed as accurately as cheaply possible:

* c64 functions compute in double and round once (so they are more accurate than NumPy's
  float computations), except ``exp`` (glibc's float order of operations: products of
  correctly rounded float sin/cos/exp), the integer-exponent path of ``pow`` (NumPy's float
  multiplications, bit for bit), and logistic and pow where NumPy's float intermediates
  overflow (there they follow NumPy's float computation, so infinities and NaNs appear
  where NumPy's do).
* c128 functions scale by powers of two where x*x + y*y could overflow or underflow (abs,
  log, sqrt, log1p) and evaluate the exponential of large arguments as glibc does
  (``e**t`` multiplied into sin/cos first, so results stay finite when only e**x overflows).
* log near the unit circle and log1p everywhere compute ``x*x + y*y - 1`` and
  ``2x + x*x + y*y`` exactly (products split with fma, sums with TwoSum) and round once, so
  their real parts stay accurate where they cancel (NumPy's log1p loses all digits there).

Measured accuracy (tests/codegen/test_elemental_gaps.py measures the same way and asserts a
little above these): max error in ulps of the part type over 10**5 random arguments per
function (parts spread over many binades, plus uniform ones, points near |z| = 1 for log,
near |1 + z| = 1 for log1p, near the poles for logistic) against complex long double
(80-bit) references, with log1p's and expm1's argument sums exact.  "part" is each part's
error in ulps of that part; "|f|" is each part's error in ulps of |f(z)| divided by
1 + the condition number of f at z (pow: |b| + |b log a|; logistic: |z (1 - f)|; expm1:
|z e**z / f|), for the functions that are ill-conditioned (or, for expm1's real part,
cancel) somewhere:

=========  =======  ===========  ===========================================================
function   c64      c128         notes (errors per part, "|f|": relative to |f| and conditioning)
=========  =======  ===========  ===========================================================
exp        1.9      2.0          glibc's float order of operations for c64
log        0.5      1.5 / 0.5    (re / im)
sqrt       0.5      2.0
rsqrt      0.5      5.4          NumPy's reciprocal of the square root
log1p      0.5      1.8
expm1      0.5      2.1 |f|      the real part expm1(x) cos y - 2 sin(y/2)**2 cancels near
                                 e**x cos y = 1 (NumPy's formula); the imaginary part 2.1
sin, cos   0.5      3.3
tan, tanh  0.5      5.6
logistic   0.5      3.2 |f|      c64 in double while |x| <= 80, else NumPy's float path
pow        0.5      1.7 |f|      c128: w = b log a rounded to double, as glibc; c64 in
                                 double while -104 <= Re w <= 80, else NumPy's float path
=========  =======  ===========  ===========================================================

Known differences from NumPy (tests/codegen/test_elemental_gaps.py checks each one):

* log1p where NumPy's hypot(1 + x, y) overflows (|z| near the largest value): NumPy gives
  inf, this gives the finite log.  log1p of tiny z: NumPy's real part is 0, this the value.
* pow where w = b log a has an imaginary part so large that its rounding moves the phase by
  more than a radian: the signs of infinite or zero parts are noise (NumPy's depend on
  glibc's last-bit rounding of clog); c64 reproduces NumPy's float w there, so they mostly
  agree.
* c64 functions computed in double round once, so their results (and signs of zeros that
  underflow) are those of the exact value where NumPy's float intermediates round, overflow
  or underflow first; expm1 copies NumPy's float overflow of e**x (inf * 0 = NaN included).

Kept whole (over the 700-line rule on purpose): ``ComplexMath`` is one class whose functions
are built from each other (pow from log and the Annex G product, tan from tanh and tanh from
sincos, cos from ccosh), and the table above states NumPy's definitions for all of them
together; a split would cut the class, not a seam.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
from llvmlite import ir

from . import transcendentals as T

F32, F64 = ir.FloatType(), ir.DoubleType()
_INF, _NAN = float("inf"), float("nan")


def _finfo(ty: ir.Type):
    return np.finfo(np.float32 if ty == F32 else np.float64)


def _exp_limits(ty: ir.Type, divisor: int = 1) -> tuple[float, float]:
    """(t, e**t) with t = int((MAX_EXP - 1) ln 2 / divisor), e**t rounded to ``ty`` (glibc's
    threshold above which exponentials are scaled)."""
    t = float(int((_finfo(ty).maxexp - 1) * math.log(2) / divisor))
    dtype = np.float32 if ty == F32 else np.float64
    return t, float(dtype(np.exp(np.float64(t))))


class ComplexMath:
    """Complex functions on (re, im) pairs of scalar float or double values."""

    def __init__(self, builder: ir.IRBuilder, libm: Callable):
        self.b = builder
        self.module = builder.module
        self.libm = libm              # libm(name, type, args): a scalar libm call

    # ---- real helpers -------------------------------------------------------------------------

    @staticmethod
    def c(like: ir.Value, v: float) -> ir.Constant:
        return ir.Constant(like.type, v)

    def call(self, name: str, *args: ir.Value) -> ir.Value:
        ty = args[0].type
        fn = self.module.declare_intrinsic(name, [ty], ir.FunctionType(ty, [ty] * len(args)))
        return self.b.call(fn, list(args))

    def fabs(self, v):
        return self.call("llvm.fabs", v)

    def copysign(self, mag, sign):
        return self.call("llvm.copysign", mag, sign)

    def isnan(self, v):
        return self.b.fcmp_unordered("uno", v, v)

    def isinf(self, v):
        return self.b.fcmp_ordered("==", self.fabs(v), self.c(v, _INF))

    def isfinite(self, v):
        return self.b.fcmp_ordered("<", self.fabs(v), self.c(v, _INF))

    def is_zero(self, v):
        return self.b.fcmp_ordered("==", v, self.c(v, 0.0))

    def signbit(self, v):
        ity = ir.IntType(32 if v.type == F32 else 64)
        return self.b.icmp_signed("<", self.b.bitcast(v, ity), ir.Constant(ity, 0))

    def sel(self, cond, a, b):
        return self.b.select(cond, a, b)

    def sel2(self, cond, a: tuple, b: tuple) -> tuple:
        return self.sel(cond, a[0], b[0]), self.sel(cond, a[1], b[1])

    def nan(self, like):
        return self.c(like, _NAN)

    def widen(self, v):
        return self.b.fpext(v, F64) if v.type == F32 else v

    def narrow(self, v, ty):
        return self.b.fptrunc(v, ty) if v.type != ty else v

    def atan2(self, y, x):
        return self.libm("atan2", y.type, [y, x])

    def two_sum(self, a, b):
        """a + b = s + e exactly (Knuth's TwoSum: any order of magnitudes)."""
        B = self.b
        s = B.fadd(a, b)
        bb = B.fsub(s, a)
        return s, B.fadd(B.fsub(a, B.fsub(s, bb)), B.fsub(b, bb))

    def two_square(self, a):
        """a * a = p + e exactly (fma)."""
        p = self.b.fmul(a, a)
        return p, self.call("llvm.fma", a, a, self.b.fneg(p))

    def exact_sum(self, terms: list) -> ir.Value:
        """The sum of ``terms`` rounded about once: a TwoSum chain, errors added at the end."""
        B = self.b
        s, err = terms[0], None
        for t in terms[1:]:
            s, e = self.two_sum(s, t)
            err = e if err is None else B.fadd(err, e)
        return B.fadd(s, err)

    def cosh_pos(self, a):
        """cosh a for 0 <= a <= t (no overflow): (e**a + e**-a) / 2."""
        e = T.emit_exp(self.b, a)
        return self.b.fadd(self.b.fmul(e, self.c(a, 0.5)), self.b.fdiv(self.c(a, 0.5), e))

    def sinh_pos(self, a):
        """sinh a for 0 <= a <= t: from expm1 below 1 (no cancellation), from exp above."""
        B = self.b
        em = T.emit_expm1(B, a)
        small = B.fmul(self.c(a, 0.5), B.fadd(em, B.fdiv(em, B.fadd(em, self.c(a, 1.0)))))
        e = T.emit_exp(B, a)
        large = B.fsub(B.fmul(e, self.c(a, 0.5)), B.fdiv(self.c(a, 0.5), e))
        return self.sel(B.fcmp_ordered("<", a, self.c(a, 1.0)), small, large)

    def exp_times(self, x, factors: list) -> list:
        """e**x * f for each factor, in glibc's order: above t = int((MAX_EXP - 1) ln 2),
        e**t is multiplied into the factors first (once or twice; beyond that the largest
        finite value stands in for e**x), so a product stays finite when only e**x
        overflows.  float values compute exp in double and round it (correctly rounded, as
        glibc's expf)."""
        B = self.b
        ty = x.type
        t, exp_t = _exp_limits(ty)
        for _ in range(2):
            big = B.fcmp_ordered(">", x, self.c(x, t))
            x = self.sel(big, B.fsub(x, self.c(x, t)), x)
            factors = [self.sel(big, B.fmul(f, self.c(f, exp_t)), f) for f in factors]
        big = B.fcmp_ordered(">", x, self.c(x, t))
        e = self.narrow(T.emit_exp(B, self.widen(x)), ty)
        huge = self.c(x, float(_finfo(ty).max))
        return [self.sel(big, B.fmul(huge, f), B.fmul(e, f)) for f in factors]

    def sincos(self, v):
        """(sin v, cos v); float values in double, rounded (correctly rounded, as glibc's)."""
        if v.type == F32:
            s, c = T.emit_sincos(self.b, self.widen(v))
            return self.narrow(s, F32), self.narrow(c, F32)
        return T.emit_sincos(self.b, v)

    # ---- arithmetic ---------------------------------------------------------------------------

    def multiply(self, a, b, c, d):
        """(a + ib)(c + id) as NumPy's multiply loop: on a host with FMA its SIMD code
        computes ``fma(a, c, -(b*d))`` and ``fma(a, d, b*c)``."""
        B = self.b
        if not host_has_fma():
            return self.plain_multiply(a, b, c, d)
        return (self.call("llvm.fma", a, c, B.fneg(B.fmul(b, d))),
                self.call("llvm.fma", a, d, B.fmul(b, c)))

    def plain_multiply(self, a, b, c, d):
        """(ac - bd, ad + bc), two roundings a part (NumPy's scalar ``cmul``)."""
        B = self.b
        return B.fsub(B.fmul(a, c), B.fmul(b, d)), B.fadd(B.fmul(a, d), B.fmul(b, c))

    def annex_g_multiply(self, a, b, c, d):
        """C's complex multiplication (C11 G.5.1): a NaN + NaN i product of an infinite
        operand is recomputed with the infinities boxed to +-1 and NaNs to +-0."""
        B = self.b
        x, y = self.plain_multiply(a, b, c, d)
        one, zero = self.c(a, 1.0), self.c(a, 0.0)

        def box(v):
            return self.copysign(self.sel(self.isinf(v), one, zero), v)

        def nan_to_zero(v):
            return self.sel(self.isnan(v), self.copysign(zero, v), v)
        z_inf = B.or_(self.isinf(a), self.isinf(b))
        w_inf = B.or_(self.isinf(c), self.isinf(d))
        a, b, c, d = (self.sel(z_inf, box(a), a), self.sel(z_inf, box(b), b),
                      self.sel(z_inf, nan_to_zero(c), c), self.sel(z_inf, nan_to_zero(d), d))
        a, b, c, d = (self.sel(w_inf, nan_to_zero(a), a), self.sel(w_inf, nan_to_zero(b), b),
                      self.sel(w_inf, box(c), c), self.sel(w_inf, box(d), d))
        products = [B.fmul(a, c), B.fmul(b, d), B.fmul(a, d), B.fmul(b, c)]
        overflow = self.isinf(products[0])
        for p in products[1:]:
            overflow = B.or_(overflow, self.isinf(p))
        only_overflow = B.and_(B.not_(B.or_(z_inf, w_inf)), overflow)
        a, b, c, d = (self.sel(only_overflow, nan_to_zero(v), v) for v in (a, b, c, d))
        rx, ry = self.plain_multiply(a, b, c, d)
        inf = self.c(a, _INF)
        redo = B.and_(B.and_(self.isnan(x), self.isnan(y)), B.or_(B.or_(z_inf, w_inf), overflow))
        return self.sel(redo, B.fmul(inf, rx), x), self.sel(redo, B.fmul(inf, ry), y)

    def divide(self, a, b, c, d):
        """(a + ib) / (c + id) by Smith's algorithm, exactly as NumPy's complex divide loop."""
        B = self.b
        one, zero = self.c(a, 1.0), self.c(a, 0.0)
        ac, ad = self.fabs(c), self.fabs(d)
        real_big = B.fcmp_ordered(">=", ac, ad)
        both_zero = B.and_(B.fcmp_ordered("==", ac, zero), B.fcmp_ordered("==", ad, zero))
        # |c| >= |d|
        rat = B.fdiv(d, c)
        scl = B.fdiv(one, B.fadd(c, B.fmul(d, rat)))
        re1 = B.fmul(B.fadd(a, B.fmul(b, rat)), scl)
        im1 = B.fmul(B.fsub(b, B.fmul(a, rat)), scl)
        # division by zero: a complex inf or NaN
        re0, im0 = B.fdiv(a, ac), B.fdiv(b, ac)
        # |c| < |d| (or NaN)
        rat2 = B.fdiv(c, d)
        scl2 = B.fdiv(one, B.fadd(d, B.fmul(c, rat2)))
        re2 = B.fmul(B.fadd(B.fmul(a, rat2), b), scl2)
        im2 = B.fmul(B.fsub(B.fmul(b, rat2), a), scl2)
        re = self.sel(real_big, self.sel(both_zero, re0, re1), re2)
        im = self.sel(real_big, self.sel(both_zero, im0, im1), im2)
        return re, im

    def reciprocal(self, x, y):
        """1 / (x + iy) as NumPy's reciprocal loop (not Smith's division: 1/0 is NaN + NaN i)."""
        B = self.b
        one = self.c(x, 1.0)
        real_big = B.fcmp_ordered("<=", self.fabs(y), self.fabs(x))
        r1 = B.fdiv(y, x)
        d1 = B.fadd(x, B.fmul(y, r1))
        r2 = B.fdiv(x, y)
        d2 = B.fadd(B.fmul(x, r2), y)
        return (self.sel(real_big, B.fdiv(one, d1), B.fdiv(r2, d2)),
                self.sel(real_big, B.fdiv(B.fneg(r1), d1), B.fdiv(B.fneg(one), d2)))

    # ---- magnitude ----------------------------------------------------------------------------

    def hypot(self, x, y):
        """|x + iy| without undue overflow/underflow; inf if either part is infinite."""
        B = self.b
        ty = x.type
        if ty == F32:
            dx, dy = self.widen(x), self.widen(y)
            h = self.narrow(self.call("llvm.sqrt", B.fadd(B.fmul(dx, dx), B.fmul(dy, dy))), ty)
        else:
            h, _, unscale = self.scaled_hypot(x, y)
            h = B.fmul(h, unscale)
        inf = B.or_(self.isinf(x), self.isinf(y))
        return self.sel(inf, self.c(x, _INF), h)

    def magnitude_scale(self, x, y):
        """(2**k, -k ln 2, 2**-k) for double parts: k = 600 when max(|x|, |y|) < 2**-500,
        -600 when it is > 2**500, else 0, so the scaled parts' squares neither overflow nor
        underflow."""
        B = self.b
        ax, ay = self.fabs(x), self.fabs(y)
        m = self.sel(B.fcmp_ordered(">", ax, ay), ax, ay)
        big = B.fcmp_ordered(">", m, self.c(x, 2.0 ** 500))
        small = B.fcmp_ordered("<", m, self.c(x, 2.0 ** -500))

        def pick(if_big, if_small, otherwise):
            return self.sel(big, self.c(x, if_big), self.sel(small, self.c(x, if_small), self.c(x, otherwise)))
        ln2 = math.log(2.0)
        return (pick(2.0 ** -600, 2.0 ** 600, 1.0), pick(600 * ln2, -600 * ln2, 0.0),
                pick(2.0 ** 600, 2.0 ** -600, 1.0))

    def scaled_hypot(self, x, y):
        """(|x + iy| * 2**k, -k ln 2, 2**-k) for double parts (k from ``magnitude_scale``)."""
        B = self.b
        scale, log_unscale, unscale = self.magnitude_scale(x, y)
        xs, ys = B.fmul(self.fabs(x), scale), B.fmul(self.fabs(y), scale)
        s = B.fadd(B.fmul(xs, xs), B.fmul(ys, ys))
        return self.call("llvm.sqrt", s), log_unscale, unscale

    def sign(self, a, b):
        """z / |z| (0 for 0), as the evaluator: a complex division by (|z|, 0)."""
        mag = self.hypot(a, b)
        re, im = self.divide(a, b, mag, self.c(mag, 0.0))
        zero = self.is_zero(mag)
        return self.sel(zero, a, re), self.sel(zero, b, im)

    # ---- exp and log --------------------------------------------------------------------------

    def exp(self, x, y):
        """e**x (cos y + i sin y) as glibc's cexp: large x through ``exp_times``; C99's
        special cases: y = 0 gives (e**x, y); x = -inf with y inf or NaN gives +-0; x = +inf
        with y inf or NaN gives (inf, NaN)."""
        B = self.b
        zero, inf = self.c(x, 0.0), self.c(x, _INF)
        s, c = self.sincos(y)
        re, im = self.exp_times(x, [c, s])
        im = self.sel(self.is_zero(y), y, im)
        y_bad = B.not_(self.isfinite(y))
        minus_inf = B.and_(y_bad, B.fcmp_ordered("==", x, self.c(x, -_INF)))
        plus_inf = B.and_(y_bad, B.fcmp_ordered("==", x, inf))
        re = self.sel(minus_inf, zero, self.sel(plus_inf, inf, re))
        im = self.sel(minus_inf, self.copysign(zero, y), self.sel(plus_inf, B.fsub(y, y), im))
        return re, im

    def sum_of_squares_minus_one(self, x, y, two_x=False):
        """x*x + y*y - 1 (or + 2x instead of - 1), rounded about once (double parts)."""
        px, ex = self.two_square(x)
        py, ey = self.two_square(y)
        first = self.b.fadd(x, x) if two_x else self.c(x, -1.0)
        return self.exact_sum([first, px, py, ex, ey])

    def log_abs(self, x, y):
        """log|x + iy| for double parts, about 1 ulp: x*x + y*y as a double-double (exact
        products and sums, scaled by 2**-+600 at the ends of the range), then
        log(hi) + lo/hi; near the unit circle log1p(x*x + y*y - 1) / 2, the sum exact."""
        B = self.b
        half = self.c(x, 0.5)
        scale, log_unscale, _ = self.magnitude_scale(x, y)
        xs, ys = B.fmul(self.fabs(x), scale), B.fmul(self.fabs(y), scale)
        px, ex = self.two_square(xs)
        py, ey = self.two_square(ys)
        s, e = self.two_sum(px, py)
        lo = B.fadd(e, B.fadd(ex, ey))
        lo_over_s = self.sel(self.is_zero(s), self.c(s, 0.0), B.fdiv(lo, s))
        far = B.fadd(B.fmul(B.fadd(T.emit_log(B, s), lo_over_s), half), log_unscale)
        near = B.and_(B.and_(B.fcmp_ordered(">=", s, half), B.fcmp_ordered("<=", s, self.c(s, 2.0))),
                      B.fcmp_ordered("==", log_unscale, self.c(x, 0.0)))
        u = self.exact_sum([self.c(x, -1.0), px, py, ex, ey])
        re = self.sel(near, B.fmul(T.emit_log1p(B, u), half), far)
        return self.sel(B.or_(self.isinf(x), self.isinf(y)), self.c(x, _INF), re)

    def log(self, x, y):
        """log|z| + i atan2(y, x) for double parts; C99 special values (those of hypot, log
        and atan2)."""
        return self.log_abs(x, y), self.atan2(y, x)

    def log1p(self, x, y):
        """NumPy's log(1 + z) = log|1 + z| + i atan2(y, 1 + x) for double parts, the real
        part as log1p(2x + x*x + y*y) / 2 with the sum exact; where |1 + z| < 1/2 (log1p
        is ill-conditioned near -1, and 1 + x is exact there) or |z| > 2**500, as
        log|1 + z|.  Special values as NumPy's formula (log of hypot)."""
        B = self.b
        one = self.c(x, 1.0)
        u = self.sum_of_squares_minus_one(x, y, two_x=True)
        near = B.fmul(T.emit_log1p(B, u), self.c(u, 0.5))
        far = self.log_abs(B.fadd(x, one), y)
        m = self.sel(B.fcmp_ordered(">", self.fabs(x), self.fabs(y)), self.fabs(x), self.fabs(y))
        use_far = B.or_(B.fcmp_ordered(">", m, self.c(m, 2.0 ** 500)), B.fcmp_ordered("<", u, self.c(u, -0.75)))
        re = self.sel(use_far, far, near)
        re = self.sel(B.or_(self.isinf(x), self.isinf(y)), self.c(x, _INF), re)
        re = B.fadd(re, self.c(re, 0.0))           # -0 -> +0: a log is never -0
        return re, self.atan2(y, B.fadd(x, one))

    def expm1(self, x, y, result_type):
        """NumPy's exp(z) - 1 = (expm1(x) cos y - 2 sin(y/2)**2) + i e**x sin y (double
        parts).  For a float result, e**x and expm1(x) are inf where float's overflow (at
        x > 88.72, as NumPy's expf), so inf * 0 makes the same NaN."""
        B = self.b
        e, em1 = T.emit_exp(B, x), T.emit_expm1(B, x)
        if result_type == F32:
            overflow = self.isinf(B.fptrunc(e, F32))
            e = self.sel(overflow, self.c(e, _INF), e)
            em1 = self.sel(overflow, self.c(e, _INF), em1)
        s, c = self.sincos(y)
        a = T.emit_sin(B, B.fmul(y, self.c(y, 0.5)))
        re = B.fsub(B.fmul(em1, c), B.fmul(B.fmul(self.c(a, 2.0), a), a))
        return re, B.fmul(e, s)

    def logistic(self, x, y):
        """1 / (1 + e**-z) as NumPy evaluates it: cexp, a complex add of (1, 0) and the
        complex divide loop.  Float parts compute in double where NumPy's float e**-z cannot
        overflow (|x| <= 80), and in float elsewhere, so that its infinities (and the NaN of
        dividing by them) come out where NumPy's do."""
        if x.type != F32:
            return self._logistic(x, y)
        wide = [self.narrow(v, F32) for v in self._logistic(self.widen(x), self.widen(y))]
        safe = self.b.fcmp_ordered("<=", self.fabs(x), self.c(x, 80.0))
        return self.sel2(safe, tuple(wide), self._logistic(x, y))

    def _logistic(self, x, y):
        B = self.b
        er, ei = self.exp(B.fneg(x), B.fneg(y))
        return self.divide(self.c(x, 1.0), self.c(x, 0.0), B.fadd(self.c(x, 1.0), er), B.fadd(self.c(x, 0.0), ei))

    # ---- sqrt ---------------------------------------------------------------------------------

    def sqrt(self, x0, y0):
        """Principal square root (double parts): t = sqrt((|x| + |z|) / 2); x >= 0: (t, y/2t),
        else (|y|/2t, copysign(t, y)); scaled by powers of 4 near the ends of the range;
        special values as C99 (csqrt)."""
        B = self.b
        zero, inf, nan = self.c(x0, 0.0), self.c(x0, _INF), self.nan(x0)
        ax0, ay0 = self.fabs(x0), self.fabs(y0)
        m = self.sel(B.fcmp_ordered(">", ax0, ay0), ax0, ay0)
        big = B.fcmp_ordered(">=", m, self.c(m, 2.0 ** 1021))
        small = B.fcmp_ordered("<", m, self.c(m, 2.0 ** -1000))
        scale = self.sel(big, self.c(m, 0.25), self.sel(small, self.c(m, 2.0 ** 108), self.c(m, 1.0)))
        unscale = self.sel(big, self.c(m, 2.0), self.sel(small, self.c(m, 2.0 ** -54), self.c(m, 1.0)))
        x, y = B.fmul(x0, scale), B.fmul(y0, scale)
        ax, ay = self.fabs(x), self.fabs(y)
        t = self.call("llvm.sqrt", B.fmul(B.fadd(ax, self.hypot(x, y)), self.c(x, 0.5)))
        q = B.fdiv(ay, B.fadd(t, t))                     # |y| / 2t
        nonneg = B.fcmp_ordered(">=", x, zero)
        re = self.sel(nonneg, t, q)
        im = self.sel(nonneg, self.copysign(q, y), self.copysign(t, y))
        re, im = B.fmul(re, unscale), B.fmul(im, unscale)
        x, y = x0, y0
        is_zero = B.and_(self.is_zero(x), self.is_zero(y))
        re, im = self.sel(is_zero, zero, re), self.sel(is_zero, y, im)
        any_nan = B.or_(self.isnan(x), self.isnan(y))
        re, im = self.sel(any_nan, nan, re), self.sel(any_nan, nan, im)
        y_nan = self.isnan(y)
        x_pinf = B.fcmp_ordered("==", x, inf)
        re = self.sel(x_pinf, inf, re)
        im = self.sel(x_pinf, self.sel(y_nan, nan, self.copysign(zero, y)), im)
        x_ninf = B.fcmp_ordered("==", x, self.c(x, -_INF))
        re = self.sel(x_ninf, self.sel(y_nan, nan, zero), re)
        im = self.sel(x_ninf, self.copysign(inf, y), im)
        y_inf = self.isinf(y)
        return self.sel(y_inf, inf, re), self.sel(y_inf, y, im)

    def rsqrt(self, x, y):
        """NumPy's 1 / sqrt(z): its reciprocal loop applied to csqrt."""
        return self.reciprocal(*self.sqrt(x, y))

    # ---- trigonometric and hyperbolic ---------------------------------------------------------

    def cosh_sinh_times(self, h, fc, fs):
        """(cosh(h) * fc, sinh(h) * fs) as glibc's csin/ccosh compute them: for |h| > t the
        factors are multiplied by e**t / 2 (and e**t) first, so a product with a small factor
        (or 0) stays finite where cosh h overflows."""
        B = self.b
        t, exp_t = _exp_limits(h.type)
        ah = self.fabs(h)
        fs = self.sel(self.signbit(h), B.fneg(fs), fs)
        ah_direct = self.sel(B.fcmp_ordered(">", ah, self.c(ah, t)), self.c(ah, t), ah)
        direct = (B.fmul(self.cosh_pos(ah_direct), fc), B.fmul(self.sinh_pos(ah_direct), fs))
        half = self.c(fc, exp_t / 2)
        scaled = self.exp_times(B.fsub(ah, self.c(ah, t)), [B.fmul(fc, half), B.fmul(fs, half)])
        big = B.fcmp_ordered(">", ah, self.c(ah, t))
        return self.sel2(big, tuple(scaled), direct)

    def sin(self, x, y):
        """sin(x + iy) = sin x cosh y + i cos x sinh y (double parts); glibc's csin special
        values."""
        B = self.b
        nan, inf = self.nan(x), self.c(x, _INF)
        ax = self.fabs(x)
        s0, c0 = self.sincos(ax)
        s = self.sel(self.signbit(x), B.fneg(s0), s0)
        re, im = self.cosh_sinh_times(y, s, c0)
        x_fin, y_fin, x_zero = self.isfinite(x), self.isfinite(y), self.is_zero(x)
        # x inf or NaN, y finite: (NaN, y) for y = 0, else NaN
        bad_x = B.and_(B.not_(x_fin), y_fin)
        re = self.sel(bad_x, nan, re)
        im = self.sel(bad_x, self.sel(self.is_zero(y), y, nan), im)
        # y infinite: (x, y) for x = 0; infinities signed like sin x, cos x sign(y) for
        # finite x; (NaN, +inf) otherwise
        c_signed = self.sel(self.signbit(y), B.fneg(c0), c0)
        re_inf = self.sel(x_zero, x, self.sel(x_fin, self.copysign(inf, s), nan))
        im_inf = self.sel(x_zero, y, self.sel(x_fin, self.copysign(inf, c_signed), inf))
        y_inf = self.isinf(y)
        re, im = self.sel(y_inf, re_inf, re), self.sel(y_inf, im_inf, im)
        # y NaN: (x, NaN) for x = 0, else NaN
        y_nan = self.isnan(y)
        return self.sel(y_nan, self.sel(x_zero, x, nan), re), self.sel(y_nan, nan, im)

    def ccosh(self, x, y):
        """cosh(x + iy) = cosh x cos y + i sinh x sin y (double parts); glibc's ccosh special
        values."""
        B = self.b
        nan, inf, zero = self.nan(x), self.c(x, _INF), self.c(x, 0.0)
        s, c = self.sincos(y)
        re, im = self.cosh_sinh_times(x, c, s)
        x_fin, y_fin, y_zero = self.isfinite(x), self.isfinite(y), self.is_zero(y)
        # finite x, y inf or NaN: (NaN, 0 for x = 0 else NaN)
        bad_y = B.and_(x_fin, B.not_(y_fin))
        re = self.sel(bad_y, nan, re)
        im = self.sel(bad_y, self.sel(self.is_zero(x), zero, nan), im)
        # x infinite: y finite nonzero -> infinities signed like cos y, sin y sign(x);
        # y = 0 -> (inf, y sign(x)); otherwise (inf, NaN)
        sign_x = self.copysign(self.c(x, 1.0), x)
        finite_nonzero = B.and_(y_fin, B.not_(y_zero))
        re_inf = self.sel(finite_nonzero, self.copysign(inf, c), inf)
        im_inf = self.sel(finite_nonzero, B.fmul(self.copysign(inf, s), sign_x),
                          self.sel(y_zero, B.fmul(y, sign_x), nan))
        x_inf = self.isinf(x)
        re, im = self.sel(x_inf, re_inf, re), self.sel(x_inf, im_inf, im)
        # x NaN: (NaN, y for y = 0 else NaN)
        x_nan = self.isnan(x)
        return self.sel(x_nan, nan, re), self.sel(x_nan, self.sel(y_zero, y, nan), im)

    def cos(self, x, y):
        """cos z = cosh(iz) = ccosh(-y + ix), as glibc."""
        return self.ccosh(self.b.fneg(y), x)

    def tanh(self, x, y):
        """tanh(x + iy) = (sinh x cosh x + i sin y cos y) / (sinh**2 x + cos**2 y) (double
        parts); beyond t = int((MAX_EXP - 1) ln 2 / 2): (+-1, 4 sin y cos y / e**2|x|) without
        intermediate overflow; glibc's ctanh special values."""
        B = self.b
        nan, one = self.nan(x), self.c(x, 1.0)
        t, _ = _exp_limits(x.type, divisor=2)
        exp_2t = float(np.exp(np.float64(2 * t)))
        s, c = self.sincos(y)
        ax = self.fabs(x)
        big = B.fcmp_ordered(">", ax, self.c(ax, t))
        # |x| > t
        rest = B.fsub(ax, self.c(ax, t))
        im_big = B.fdiv(B.fmul(B.fmul(self.c(s, 4.0), s), c), self.c(s, exp_2t))
        rest_exp = T.emit_exp(B, B.fmul(self.c(rest, 2.0), rest))
        im_big = B.fdiv(im_big, self.sel(B.fcmp_ordered(">", rest, self.c(rest, t)), self.c(s, exp_2t), rest_exp))
        # |x| <= t
        ax_c = self.sel(big, self.c(ax, t), ax)
        sh = self.copysign(self.sinh_pos(ax_c), x)
        ch = self.cosh_pos(ax_c)
        eps = float(np.finfo(np.float64).eps)
        c2 = B.fmul(c, c)
        den = self.sel(B.fcmp_ordered(">", self.fabs(sh), B.fmul(self.fabs(c), self.c(c, eps))),
                       B.fadd(B.fmul(sh, sh), c2), c2)
        re = self.sel(big, self.copysign(one, x), B.fdiv(B.fmul(sh, ch), den))
        im = self.sel(big, im_big, B.fdiv(B.fmul(s, c), den))
        # special values
        x_inf, y_fin = self.isinf(x), self.isfinite(y)
        zero = self.c(x, 0.0)
        im_xinf = self.sel(B.and_(y_fin, B.fcmp_ordered(">", self.fabs(y), one)),
                           self.copysign(zero, B.fmul(s, c)), self.copysign(zero, y))
        other = B.not_(B.and_(self.isfinite(x), y_fin))
        other = B.and_(other, B.not_(x_inf))
        y_zero = self.is_zero(y)
        re_other = self.sel(y_zero, x, self.sel(self.is_zero(x), x, nan))
        im_other = self.sel(y_zero, y, nan)
        re = self.sel(x_inf, self.copysign(one, x), self.sel(other, re_other, re))
        im = self.sel(x_inf, im_xinf, self.sel(other, im_other, im))
        return re, im

    def tan(self, x, y):
        """tan(x + iy): glibc's ctan is ctanh with the parts swapped (formulas and special
        values alike)."""
        re, im = self.tanh(y, x)
        return im, re

    # ---- power --------------------------------------------------------------------------------

    def pow_general(self, ar, ai, br, bi):
        """glibc's cpow, cexp(b * clog(a)) with C's complex product, computed in double.  For
        float parts where the result overflows or underflows (Re w > 80 or < -104, or w is
        not finite), NumPy's float exponent is reproduced instead (``clog_float_as_glibc``,
        float products): the phase of such a w is mostly rounding noise, and this way the
        infinities and zeros get NumPy's signs."""
        B = self.b
        part = ar.type
        wide = [self.widen(v) for v in (ar, ai, br, bi)]
        wr, wi = self.annex_g_multiply(*wide[2:], *self.log(*wide[:2]))
        if part == F32:
            fr, fi = self.annex_g_multiply(br, bi, *self.clog_float_as_glibc(ar, ai))
            accurate = B.and_(B.and_(self.isfinite(fr), self.isfinite(fi)),
                              B.and_(B.fcmp_ordered("<=", fr, self.c(fr, 80.0)),
                                     B.fcmp_ordered(">=", fr, self.c(fr, -104.0))))
            wr, wi = self.sel2(accurate, (wr, wi), (self.widen(fr), self.widen(fi)))
        re, im = self.exp(wr, wi)
        return self.narrow(re, part), self.narrow(im, part)

    def clog_float_as_glibc(self, x, y):
        """glibc's clogf step by step (its case split and float roundings; logf, log1pf and
        hypotf correctly rounded, atan2f the libm call), for float parts."""
        B = self.b
        f = lambda v: self.c(x, v)                     # noqa: E731 (a float constant)
        info = _finfo(F32)
        ax0, ay0 = self.fabs(x), self.fabs(y)
        swap = B.fcmp_ordered("<", ax0, ay0)
        ax, ay = self.sel(swap, ay0, ax0), self.sel(swap, ax0, ay0)
        huge = B.fcmp_ordered(">", ax, f(float(info.max) / 2))
        tiny = B.and_(B.fcmp_ordered("<", ax, f(float(info.tiny))), B.fcmp_ordered("<", ay, f(float(info.tiny))))
        ay_half = self.sel(B.fcmp_ordered(">=", ay, f(2 * float(info.tiny))), B.fmul(ay, f(0.5)), f(0.0))
        ax = self.sel(huge, B.fmul(ax, f(0.5)), self.sel(tiny, B.fmul(ax, f(2.0 ** 24)), ax))
        ay = self.sel(huge, ay_half, self.sel(tiny, B.fmul(ay, f(2.0 ** 24)), ay))
        unscaled = B.not_(B.or_(huge, tiny))

        def log1p_half(d):
            return B.fmul(self.narrow(T.emit_log1p(B, self.widen(d)), F32), f(0.5))
        d2m1 = B.fmul(B.fsub(ax, f(1.0)), B.fadd(ax, f(1.0)))
        ay2 = B.fmul(ay, ay)
        eps = float(info.eps)
        in_1_2 = B.fadd(d2m1, self.sel(B.fcmp_ordered(">=", ay, f(eps)), ay2, f(0.0)))
        exact = self.narrow(self.sum_of_squares_minus_one(self.widen(ax), self.widen(ay)), F32)
        ln2 = np.float32(math.log(2.0))                 # - scale * (float) ln 2, in float
        scale_log = self.sel(huge, f(float(ln2)), self.sel(tiny, f(float(np.float32(-24) * ln2)), f(0.0)))
        far = B.fadd(self.narrow(T.emit_log(B, self.widen(self.hypot(ax, ay))), F32), scale_log)
        below_1 = B.and_(B.and_(B.fcmp_ordered("<", ax, f(1.0)), B.fcmp_ordered(">=", ax, f(0.5))), unscaled)
        cases = [  # (condition, log1p argument), the first that holds
            (B.and_(B.fcmp_ordered("==", ax, f(1.0)), unscaled), ay2),
            (B.and_(B.and_(B.fcmp_ordered(">", ax, f(1.0)), B.fcmp_ordered("<", ax, f(2.0))),
                    B.and_(B.fcmp_ordered("<", ay, f(1.0)), unscaled)), in_1_2),
            (B.and_(below_1, B.fcmp_ordered("<", ay, f(eps / 2))), d2m1),
            (B.and_(below_1, B.fcmp_ordered(">=", B.fadd(B.fmul(ax, ax), ay2), f(0.5))), exact),
        ]
        re = far
        for cond, d in reversed(cases):
            re = self.sel(cond, log1p_half(d), re)
        # a NaN part: +inf if the other is infinite, else NaN (before any scaling, as glibc)
        any_nan = B.or_(self.isnan(x), self.isnan(y))
        special = self.sel(B.or_(self.isinf(x), self.isinf(y)), f(_INF), self.nan(x))
        return self.sel(any_nan, special, re), self.atan2(y, x)

    def pow_small_integer(self, ar, ai, br, bi):
        """NumPy's cpow for b an integer n in (-100, 100): a, a*a, a*(a*a) for n = 1, 2, 3,
        else binary powering of a**|n| with scalar ``cmul`` (and 1 / that for n < 0), in the
        part type.  Returns (applies, re, im)."""
        B = self.b
        i32 = ir.IntType(32)
        n_ok = B.and_(B.and_(self.is_zero(bi), B.fcmp_ordered(">", br, self.c(br, -100.0))),
                      B.and_(B.fcmp_ordered("<", br, self.c(br, 100.0)),
                             B.fcmp_ordered("==", self.call("llvm.trunc", br), br)))
        n = B.fptoui(self.fabs(self.sel(n_ok, br, self.c(br, 0.0))), i32)
        acc = (self.c(ar, 1.0), self.c(ar, 0.0))
        power = (ar, ai)
        for k in range(7):                                    # |n| < 128
            bit = B.icmp_unsigned("!=", B.and_(n, ir.Constant(i32, 1 << k)), ir.Constant(i32, 0))
            acc = self.sel2(bit, self.plain_multiply(*acc, *power), acc)
            if k < 6:
                power = self.plain_multiply(*power, *power)
        negative = B.fcmp_ordered("<", br, self.c(br, 0.0))
        acc = self.sel2(negative, self.divide(self.c(ar, 1.0), self.c(ar, 0.0), *acc), acc)
        square = self.plain_multiply(ar, ai, ar, ai)
        cube = self.plain_multiply(ar, ai, *square)
        for value, result in ((3.0, cube), (2.0, square), (1.0, (ar, ai))):
            acc = self.sel2(B.fcmp_ordered("==", br, self.c(br, value)), result, acc)
        return n_ok, acc[0], acc[1]

    def pow_special_cases(self, ar, ai, br, bi, re, im):
        """The evaluator's and NumPy's cases before cpow: b = 0 or a = 1 gives 1; a = 0
        gives 0 for Re b > 0, else NaN."""
        B = self.b
        one, zero, nan = self.c(ar, 1.0), self.c(ar, 0.0), self.nan(ar)
        a_zero = B.and_(self.is_zero(ar), self.is_zero(ai))
        positive = B.fcmp_ordered(">", br, zero)
        re, im = self.sel2(a_zero, (self.sel(positive, zero, nan), self.sel(positive, zero, nan)), (re, im))
        unit = B.or_(B.and_(self.is_zero(br), self.is_zero(bi)),
                     B.and_(B.fcmp_ordered("==", ar, one), self.is_zero(ai)))
        return self.sel2(unit, (one, zero), (re, im))


_HAS_FMA: list[bool] = []


def host_has_fma() -> bool:
    if not _HAS_FMA:
        try:
            import llvmlite.binding as llvm
            features = llvm.get_host_cpu_features()
            _HAS_FMA.append(bool(features.get("fma", False)) or llvm.get_process_triple().startswith("aarch64"))
        except Exception:            # noqa: BLE001 (no host information: plain arithmetic)
            _HAS_FMA.append(False)
    return _HAS_FMA[0]
