"""The compiler-rt helpers LLVM may call from a kernel (codegen/libcalls.py): present, and right."""

from __future__ import annotations

import ctypes
import subprocess
import sys

import numpy as np
import llvmlite.binding as llvm
from llvmlite import ir

from nbxla.codegen.cpu import jit_engine


def _call_truncdfhf2():
    """A JIT-compiled function that calls ``__truncdfhf2`` by name and stores the f16 bits."""
    module = ir.Module("truncdfhf2_caller")
    f64, i16 = ir.DoubleType(), ir.IntType(16)
    helper = ir.Function(module, ir.FunctionType(ir.HalfType(), [f64]), "__truncdfhf2")
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [f64, i16.as_pointer()]), "convert")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    b.store(b.bitcast(b.call(helper, [fn.args[0]]), i16), fn.args[1])
    b.ret_void()
    engine = jit_engine(llvm.parse_assembly(str(module)))
    convert = ctypes.CFUNCTYPE(None, ctypes.c_double, ctypes.POINTER(ctypes.c_uint16))(
        engine.get_function_address("convert"))
    return engine, convert


def test_truncdfhf2_rounds_as_numpy_does():
    engine, convert = _call_truncdfhf2()
    values = [0.0, -0.0, 1.0, 1 + 2**-11, 1 + 2**-11 + 2**-40, 1 + 3 * 2**-11, -(1 + 2**-11 + 2**-40),
              65504.0, 65519.99, 65520.0, 1e300, -1e300, np.inf, -np.inf, 2**-24, 2**-25, 2**-25 + 2**-60,
              3 * 2**-26, 6e-8, np.pi, -np.e, 1e-300]
    out = ctypes.c_uint16()
    for v in values:
        convert(v, ctypes.byref(out))
        with np.errstate(over="ignore"):
            expected = np.float64(v).astype(np.float16).view(np.uint16)
        assert out.value == expected, v
    convert(np.nan, ctypes.byref(out))
    assert np.isnan(np.uint16(out.value).view(np.float16))


PROGRAM = """
import numpy as np, nbxla
for n in (1, 9, 10, 17, 64):
    x = (np.arange(n) % 7 - 3).astype(np.int8)
    got = nbxla.jit(lambda a: np.arctan(a))(x)          # computed in f64, stored as f16
    assert got.dtype == np.float16 and np.allclose(got, np.arctan(x), atol=1e-3), n
print("ok")
"""


def test_f16_results_of_f64_math_in_remainder_loops_do_not_crash():
    # In a fresh process: before the helper, the scalar remainder of this kernel jumped to
    # address 0 (a segmentation fault, which would take a test worker down with it).
    run = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=300,
                         env={**__import__("os").environ, "NBXLA_CACHE_DIR": "off"})
    assert run.returncode == 0 and run.stdout.strip() == "ok", (run.returncode, run.stderr[-2000:])
