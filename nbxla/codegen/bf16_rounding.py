"""A helper kernel rounding a contiguous f32 buffer to bf16 bits (``runtime/bf16_arrays.py``):
elements [begin, end) of buffer 0 into buffer 1, a loop LLVM vectorizes -- where NumPy's
``astype(bfloat16)`` (ml_dtypes' scalar loop) took ~0.8 ns an element.  The rounding is
``bf16.to_bits``: nearest even, NaN to the quiet NaN of its sign."""

from __future__ import annotations

from llvmlite import ir

from .bf16 import to_bits
from .toolkit import counted_loop, kernel_function, KernelSpec

_I64 = ir.IntType(64)


def emit_rounding_kernel(module: ir.Module, name: str) -> KernelSpec:
    fn, b = kernel_function(module, name)
    src = b.bitcast(b.load(b.gep(fn.args[0], [ir.Constant(_I64, 0)])), ir.FloatType().as_pointer())
    dst = b.bitcast(b.load(b.gep(fn.args[0], [ir.Constant(_I64, 1)])), ir.IntType(16).as_pointer())
    counted_loop(b, fn.args[1], fn.args[2], "round.i",
                 lambda i: b.store(to_bits(b, b.load(b.gep(src, [i]))), b.gep(dst, [i])))
    b.ret_void()
    return KernelSpec(name, "linear", 0, 1)
