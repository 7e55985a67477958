"""f8 (f8e4m3fn, f8e5m2) in native code: 8 bits in memory, an f32 in registers, rounded once
per op -- bf16's scheme (``bf16.py``), as XLA:CPU computes narrow floats (in f32, each op's
result converted back).

* load:  a 256-entry table of the f32 values of every bit pattern (made by ml_dtypes, so the
  evaluator's own conversion): exact.
* op:    the ordinary f32 code, then ``round_to_f8``: to nearest even among the format's
  values, subnormals included; past the largest finite value e5m2 gives inf and e4m3fn
  (which has none) NaN, as ml_dtypes converts.
* store: the value is one of the format's, so its bits are read off the f32's: sign, the
  exponent rebiased and the top mantissa bits (a subnormal: its multiple of the smallest
  step); NaN as ml_dtypes writes it (0x7f / 0x7e, with its sign).
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np
from llvmlite import ir

_I8, _I32, _F32 = ir.IntType(8), ir.IntType(32), ir.FloatType()


@dataclass(frozen=True)
class F8Format:
    name: str
    mantissa_bits: int
    bias: int
    largest: float          # the largest finite value
    has_inf: bool
    nan_bits: int           # the positive NaN's pattern ml_dtypes writes
    dtype: type

    @property
    def smallest_normal_exponent(self) -> int:
        return 1 - self.bias

    @property
    def subnormal_scale(self) -> int:
        """log2 of 1 / the smallest subnormal step."""
        return self.bias - 1 + self.mantissa_bits


FORMATS = {
    "f8e4m3fn": F8Format("f8e4m3fn", 3, 7, 448.0, False, 0x7F, ml_dtypes.float8_e4m3fn),
    "f8e5m2": F8Format("f8e5m2", 2, 15, 57344.0, True, 0x7E, ml_dtypes.float8_e5m2),
}


def is_f8(t: str) -> bool:
    return t in FORMATS


def _f32(b, bits):
    return b.bitcast(bits, _F32)


def _c32(v: int):
    return ir.Constant(_I32, v & 0xFFFFFFFF)


def _fconst(v: float):
    return ir.Constant(_F32, v)


def _rint(b: ir.IRBuilder, v):
    module = b.block.parent.module
    fn = module.declare_intrinsic("llvm.rint", [_F32], ir.FunctionType(_F32, [_F32]))
    return b.call(fn, [v])


def round_to_f8(b: ir.IRBuilder, t: str, v):
    """f32 -> the nearest value of the f8 format ``t`` (ties to even), still an f32."""
    fmt = FORMATS[t]
    bits = b.bitcast(v, _I32)
    sign = b.and_(bits, _c32(0x80000000))
    magnitude = _f32(b, b.and_(bits, _c32(0x7FFFFFFF)))
    # normal range: drop the low mantissa bits to nearest even (a carry reaches the exponent)
    drop = 23 - fmt.mantissa_bits
    mbits = b.bitcast(magnitude, _I32)
    odd = b.and_(b.lshr(mbits, _c32(drop)), _c32(1))
    kept = b.and_(b.add(b.add(mbits, _c32((1 << (drop - 1)) - 1)), odd), _c32(~((1 << drop) - 1)))
    normal = _f32(b, kept)
    # subnormal range: a multiple of the smallest step (scaling by powers of two is exact)
    scale = float(2 ** fmt.subnormal_scale)
    sub = b.fmul(_rint(b, b.fmul(magnitude, _fconst(scale))), _fconst(1.0 / scale))
    tiny = b.fcmp_ordered("<", magnitude, _fconst(2.0 ** fmt.smallest_normal_exponent))
    rounded = b.select(tiny, sub, normal)
    too_big = _fconst(float("inf") if fmt.has_inf else float("nan"))
    rounded = b.select(b.fcmp_ordered(">", rounded, _fconst(fmt.largest)), too_big, rounded)
    is_nan = b.fcmp_unordered("uno", v, v)
    rounded = b.select(is_nan, _fconst(float("nan")), rounded)
    return _f32(b, b.or_(b.bitcast(rounded, _I32), sign))


def to_bits(b: ir.IRBuilder, t: str, v):
    """f32 -> the f8 bits (i8) of its rounded value."""
    fmt = FORMATS[t]
    v = round_to_f8(b, t, v)
    bits = b.bitcast(v, _I32)
    sign = b.trunc(b.lshr(bits, _c32(24)), _I8)
    sign = b.and_(sign, ir.Constant(_I8, 0x80))
    magnitude = _f32(b, b.and_(bits, _c32(0x7FFFFFFF)))
    mbits = b.bitcast(magnitude, _I32)
    exponent = b.sub(b.lshr(mbits, _c32(23)), _c32(127 - fmt.bias))
    mantissa = b.and_(b.lshr(mbits, _c32(23 - fmt.mantissa_bits)), _c32((1 << fmt.mantissa_bits) - 1))
    normal = b.or_(b.shl(exponent, _c32(fmt.mantissa_bits)), mantissa)
    scaled = b.fmul(magnitude, _fconst(float(2 ** fmt.subnormal_scale)))
    sub = b.fptoui(scaled, _I32)
    tiny = b.fcmp_ordered("<", magnitude, _fconst(2.0 ** fmt.smallest_normal_exponent))
    code = b.select(tiny, sub, normal)
    if fmt.has_inf:
        is_inf = b.fcmp_ordered("==", magnitude, _fconst(float("inf")))
        code = b.select(is_inf, _c32(0x7C), code)
    is_nan = b.fcmp_unordered("uno", magnitude, magnitude)
    code = b.select(is_nan, _c32(fmt.nan_bits), code)
    return b.or_(b.trunc(code, _I8), sign)


def from_bits(b: ir.IRBuilder, t: str, bits):
    """f8 bits (i8) -> the f32 of the same value, from a table of all 256."""
    module = b.block.parent.module
    name = f"nbxla_{t}_values"
    table = module.globals.get(name)
    if table is None:
        values = np.arange(256, dtype=np.uint8).view(FORMATS[t].dtype).astype(np.float32)
        ty = ir.ArrayType(_F32, 256)
        table = ir.GlobalVariable(module, ty, name)
        table.global_constant = True
        table.linkage = "private"
        table.initializer = ir.Constant(ty, [ir.Constant(_F32, float(x)) for x in values])
    index = b.zext(bits, ir.IntType(64))
    return b.load(b.gep(table, [ir.Constant(ir.IntType(64), 0), index]))
