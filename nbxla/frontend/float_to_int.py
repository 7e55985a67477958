"""NumPy's float -> integer cast, which differs from HLO's ``convert`` out of range.

HLO's ``convert`` saturates (XLA's rule: NaN -> 0, 1e20 -> INT_MAX), and JAX's HLO relies on
it.  NumPy instead does a C cast, which on x86-64 is ``cvttss2si``/``cvttsd2si``: a value out of
the destination's range (NaN, +-inf, 1e20) gives the "integer indefinite" INT_MIN.  Measured on
NumPy 2 (x86-64), every float type, for each integer type:

* int32: a 32-bit conversion (out of range -> -2**31);
* int8, int16, uint8, uint16: the 32-bit conversion, then the low bits (300.7 -> int8 44,
  -1.5 -> uint8 255, 3e9 -> 0);
* int64: a 64-bit conversion (out of range -> -2**63); uint32: its low 32 bits;
* uint64: values from 2**63 up convert as ``x - 2**63`` with the top bit set again, the rest as
  int64 reinterpreted (-1.5 -> 2**64 - 1, NaN and -inf -> 2**63, inf -> 0).

(For uint32 NumPy's vectorized loop gives another answer for some out-of-range values, e.g.
NaN -> 2**31 instead of 0, depending on the element's position; the scalar rule above is the
one every position can agree on.)
"""

from __future__ import annotations

import numpy as np

from ..hlo import Shape, from_numpy_dtype
from .registry import entry_point
from .rules import binop, compare, convert, emit, like, select
from .tracer import Tracer


@entry_point("float_to_int")
def float_to_int(x: Tracer, dtype: np.dtype) -> Tracer:
    """``x.astype(dtype)`` as NumPy computes it, for a float ``x`` and an integer ``dtype``."""
    if x.dtype.itemsize < 4:            # float16: compared in float32, where 2**31 and 2**63 exist
        x = convert(x, np.float32)
    if dtype == np.uint64:
        top = like(x, 2.0 ** 63)
        high = emit(x.ctx, "compare", x, top, direction="GE")
        low_bits = convert(_x86_truncate(select(high, binop("subtract", x, top), x), 64), np.uint64)
        return select(high, binop("xor", low_bits, like(low_bits, 1 << 63)), low_bits)
    bits = 32 if dtype.itemsize <= 2 or dtype == np.int32 else 64
    return convert(_x86_truncate(x, bits), dtype)           # (integer converts keep the low bits)


def _x86_truncate(x: Tracer, bits: int) -> Tracer:
    """``cvtt*2si`` to a ``bits``-wide signed integer: truncation toward zero, and INT_MIN for
    NaN and values out of range."""
    wide = np.dtype(f"int{bits}")
    limit = 2.0 ** (bits - 1)
    inside = binop("and", compare(x, like(x, -limit), "GE"), compare(x, like(x, limit), "LT"))
    converted = emit(x.ctx, "convert", select(inside, x, like(x, 0)),       # (HLO's, in range)
                     shape=Shape(from_numpy_dtype(wide), x.shape))
    return select(inside, converted, like(converted, np.iinfo(wide).min))
