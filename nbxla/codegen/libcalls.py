"""Compiler-rt helpers that LLVM's x86 lowering may call but that no library in the process
defines, compiled once per process and registered with LLVM's symbol table, so that every JIT
engine made afterwards resolves them.

``__truncdfhf2`` (f64 -> f16): the elemental emitter never asks for it (``_f64_to_f16``
rounds through f32 without it), but LLVM's optimizer can fold ``fptrunc (fptrunc double to
float) to half`` in a scalar remainder loop into a direct f64 -> f16 conversion, lowered to
that call.  Unresolved, the kernel jumped to address 0: ``np.arctan`` of nine int8 values
(computed in f64, stored as f16) crashed the process.
"""

from __future__ import annotations

import threading

import llvmlite.binding as llvm
from llvmlite import ir

_lock = threading.Lock()
_engines: list = []          # the engines holding the helpers' code, alive for the process


def _truncdfhf2(module: ir.Module) -> None:
    """f64 -> f16 correctly rounded: f64 -> f32 rounded to odd (truncate toward zero, then set
    the last bit when anything was cut off), then f32 -> f16 by the hardware, to nearest even;
    with 13 more bits in f32 than in f16 the odd bit only says "above halfway", so the second
    rounding is correct (the same steps as ``elemental._f64_to_f16``)."""
    f64, f32, i32 = ir.DoubleType(), ir.FloatType(), ir.IntType(32)
    fn = ir.Function(module, ir.FunctionType(ir.HalfType(), [f64]), "__truncdfhf2")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    v = fn.args[0]
    fabs = module.declare_intrinsic("llvm.fabs", [f64])
    nearest = b.fptrunc(v, f32)
    rounded_up = b.fcmp_ordered(">", b.call(fabs, [b.fpext(nearest, f64)]), b.call(fabs, [v]))
    bits = b.bitcast(nearest, i32)
    bits = b.select(rounded_up, b.sub(bits, ir.Constant(i32, 1)), bits)
    inexact = b.fcmp_ordered("!=", b.fpext(b.bitcast(bits, f32), f64), v)   # (NaN: kept quiet)
    bits = b.select(inexact, b.or_(bits, ir.Constant(i32, 1)), bits)
    b.ret(b.fptrunc(b.bitcast(bits, f32), ir.HalfType()))


def ensure_registered(new_target_machine) -> None:
    """Compile and register the helpers once (``new_target_machine``: the CPU target's own
    factory, so the helpers are compiled for the host as the kernels are)."""
    if _engines:
        return
    with _lock:
        if _engines:
            return
        module = ir.Module("nbxla_libcalls")
        _truncdfhf2(module)
        mod = llvm.parse_assembly(str(module))
        mod.verify()
        engine = llvm.create_mcjit_compiler(mod, new_target_machine())
        engine.finalize_object()
        llvm.add_symbol("__truncdfhf2", engine.get_function_address("__truncdfhf2"))
        _engines.append(engine)
