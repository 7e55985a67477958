"""Vectorizable transcendental functions emitted as straight-line LLVM IR.

LLVM turns ``llvm.exp`` and friends (and libm calls) into scalar calls, which stops the loop
vectorizer.  The functions here emit branch-free code instead: range reduction (Cody-Waite,
with split constants whose products with the reduction integer are exact; Payne-Hanek for
sin/cos/tan), a polynomial, the scale by ``2**n`` built with integer bit operations, and
``select`` for special cases.  Every step is an ordinary float/int instruction, a load from a
constant table (a gather once vectorized), or a vectorizable intrinsic (``fmuladd``, ``fma``,
``fabs``, ``copysign``, ``rint``), so loops using them vectorize to the host's SIMD width.

``emit_<name>(builder, value[, value2]) -> value`` work on ``half``, ``float`` and ``double``
values (scalars or vectors); ``emit_sincos`` returns ``(sin, cos)`` from one argument
reduction (bit for bit emit_sin's and emit_cos's values; the complex functions need both).  ``half`` is computed in ``float`` and rounded once at the end.
Some ``float`` functions compute internally in ``double`` (as glibc's ``sinf``/``powf`` do):
sin/cos/tan (the polynomial after the reduction) and pow (needs ``log`` to more than 24
bits).  ``fma`` is used for exact products in double-precision ``pow`` (one instruction on
every x86-64-v3 / GPU target).

Coefficients: Taylor coefficients where the reduced range makes them good enough (exp, expm1,
pow's atanh series, f32 sin/cos/log); f64 sin, cos and log/log1p use near-minimax fits
(Chebyshev interpolation in 60-digit arithmetic: fewer terms for the same error); erf uses near-minimax fits (interpolation at Chebyshev
nodes in 90-digit decimal arithmetic) of ``erf(x)/x`` in ``x**2`` on ``|x| < 1`` and of
``erfc(x) * exp(x**2)`` on ``[1, 4]`` (f32) or ``[1, 2]``, ``[2, 3.5]``, ``[3.5, 6]`` (f64).

Measured accuracy (max error in ulps of the result type against a float64 reference for f32
and an 80-bit long double reference for f64 -- erf f64 against ``math.erf``; 2e6 (f32) / 1e6
(f64) samples spread over all binades of the domain plus uniform samples, plus raw f32 bit
patterns; tests/codegen/test_transcendentals.py measures the same way and asserts <= 4 ulp):

=========  =========  =========  ============================================================
function   f32 (ulp)  f64 (ulp)  special values
=========  =========  =========  ============================================================
exp        0.91       0.87       overflow -> inf; gradual underflow (correctly rounded
                                 denormal results, not flushed); exp(-inf) = 0
expm1      1.57       1.64       -> -1 for large negative x; expm1(+-0) = +-0, denormals exact
log        0.80       0.79       denormal inputs handled; log(+-0) = -inf, log(x<0) = NaN
log1p      0.79       0.82       log1p(-1) = -inf, log1p(x<-1) = NaN, log1p(-0) = -0
tanh       2.35       2.42       saturates to +-1; tanh(+-0) = +-0
logistic   2.17       2.28       1/(1+e^-x) for x>=0, e^x/(1+e^x) below: no early overflow,
                                 denormal results (f32: x in [-103, -87]); (+-inf) -> 1, 0
erf        0.96       1.00       erf(+-inf) = +-1, erf(+-0) = +-0
sin, cos   0.50       0.77       every finite x (no limit: Payne-Hanek reduction, exact
                                 integer products with a window of 2/pi picked by the
                                 exponent; f32: 96-bit window chosen with selects, f64:
                                 192-bit window from a table, 3 gathers); same errors up to
                                 1.7e308; sin/cos/tan(+-inf) = NaN
tan        0.50       2.10       as sin/cos
pow        0.50       2.16       f32 in double; f64 through a double-double log and an exp
                                 with a low-order correction (uses llvm.fma); C99 special
                                 cases (pow(x, +-0) = 1, pow(1, y) = 1 even for NaN, negative
                                 x with integer y, signed zeros, infinities)
=========  =========  =========  ============================================================

atan2 (C99 special cases: signed zeros, infinities) reduces atan(min/max) to |t| <= tan(pi/8)
with one division and evaluates a near-minimax polynomial; f32 in double.  Measured the same
way (3e5 argument pairs over all binades, similar magnitudes and the special values, six
seeds): f32 0.50 ulp, f64 2.21 ulp (2.30 over uniform ratios; the k/4 centres it replaced
measured 2.81 and 3.20).

NaN inputs give NaN everywhere (except the C99 ``pow`` cases above).  cbrt, and atan2 inside
the complex functions (whose special cases were matched to glibc's), are still libm calls
(scalar; half values call the float ones and round once, as NumPy's half loops do; the GPU
backend gives them device bodies).

Split by family: ``vecmath.py`` (the instruction helper and the half/float/double dispatch
every function shares), ``exp_log.py`` (exp, expm1, log, log1p, tanh, logistic, erf, pow),
``trig_reduction.py`` (Payne-Hanek and Cody-Waite) and ``trig.py`` (sin, cos, tan, sincos,
atan2).  This module is their one public face and the home of the accuracy table above.
"""

from __future__ import annotations

from .exp_log import (emit_erf, emit_exp, emit_expm1, emit_log, emit_log1p, emit_logistic,  # noqa: F401
                      emit_pow, emit_tanh)
from .trig import (emit_atan2, emit_cos, emit_sin, emit_sincos, emit_tan,  # noqa: F401
                   emit_trig_from_parts, emit_trig_parts)
from .trig_reduction import BOUNDED_TRIG_LIMIT  # noqa: F401

__all__ = ["emit_exp", "emit_expm1", "emit_log", "emit_log1p", "emit_tanh", "emit_logistic",
           "emit_erf", "emit_sin", "emit_cos", "emit_sincos", "emit_tan", "emit_pow", "emit_atan2",
           "BOUNDED_TRIG_LIMIT"]
