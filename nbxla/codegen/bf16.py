"""bf16 in native code: 16 bits in memory, an f32 in registers, rounded once per op.

XLA:CPU computes bf16 arithmetic in f32 and rounds each op's result back to bf16 (see
``hlo/low_precision.py``); so does the reference evaluator.  The kernels do the same without
a bf16 type in LLVM: a bf16 value in a register is an f32 that bf16 can hold exactly.

* load:  the 16 bits are the high half of the f32 (bf16 is f32 with 16 mantissa bits cut
  off), so shift them up and bitcast: exact.
* op:    the ordinary f32 code, then ``round_to_bf16`` on the result (round to nearest even
  on the bits; a NaN stays a NaN of its sign), unless the op only moves values.
* store: round (a no-op on an already rounded value) and keep the high 16 bits.

Sums, products and extremes of a ``reduce`` accumulate in f32 and round once at the end,
as XLA's f32 reducer does (``kernels.check_narrow_floats`` sends the rest to the evaluator).
The f8 types have no native path yet.
"""

from __future__ import annotations

import weakref

from llvmlite import ir

_I16, _I32, _F32 = ir.IntType(16), ir.IntType(32), ir.FloatType()
# The f32 values (LLVM values of the kernel being emitted) known to hold a bf16 exactly: what
# ``round_to_bf16`` and ``from_bits`` return.  Storing one needs no second rounding: LLVM
# folds the rounding's integer part away but not its NaN test (3 of the 17 instructions a
# vector of a f32 -> bf16 convert kernel's loop took).
_EXACT: "weakref.WeakSet[ir.Value]" = weakref.WeakSet()


def from_bits(b: ir.IRBuilder, bits):
    """bf16 bits (i16) -> the f32 of the same value."""
    value = b.bitcast(b.shl(b.zext(bits, _I32), ir.Constant(_I32, 16)), _F32)
    _EXACT.add(value)
    return value


def round_to_bf16(b: ir.IRBuilder, v):
    """f32 -> the nearest bf16 value (ties to even), still an f32.  Adding 0x7fff plus the
    lowest kept bit carries into the kept half exactly when the cut-off half is above one
    half ulp, or equal to it with an odd kept half; past the largest finite bf16 the carry
    reaches the exponent and gives inf, as rounding should.  A NaN would carry into the sign
    or become inf, so it becomes the quiet NaN of its sign (as ml_dtypes and so the evaluator
    give it)."""
    bits = b.bitcast(v, _I32)
    odd = b.and_(b.lshr(bits, ir.Constant(_I32, 16)), ir.Constant(_I32, 1))
    high = ir.Constant(_I32, 0xFFFF0000)
    rounded = b.and_(b.add(b.add(bits, ir.Constant(_I32, 0x7FFF)), odd), high)
    quiet_nan = b.or_(b.and_(bits, ir.Constant(_I32, 0x80000000)), ir.Constant(_I32, 0x7FC00000))
    is_nan = b.fcmp_unordered("uno", v, v)
    value = b.bitcast(b.select(is_nan, quiet_nan, rounded), _F32)
    _EXACT.add(value)
    return value


def to_bits(b: ir.IRBuilder, v):
    """f32 -> bf16 bits (i16), rounded to nearest even (unless it is a bf16 already)."""
    bits = b.bitcast(v if v in _EXACT else round_to_bf16(b, v), _I32)
    return b.trunc(b.lshr(bits, ir.Constant(_I32, 16)), _I16)

