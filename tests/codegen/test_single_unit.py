"""Kernels whose outputs are one element each run without their range loop (toolkit.single_unit):
``NAME`` calls ``NAME__one`` at [0, 1) when its range is not empty; other kernels forward their
range.  Both sides of the rule, run as machine code and compared with the evaluator."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from nbxla.codegen.cpu import compile_kernels
from nbxla.hlo.evaluator import evaluate
from nbxla.hlo.parser import parse_hlo

SCALAR = """HloModule scalar
ENTRY e {
  a = f64[] parameter(0)
  b = f64[] parameter(1)
  ROOT r = f64[] add(a, b)
}
"""

VECTOR = """HloModule vector
ENTRY e {
  a = f64[2] parameter(0)
  b = f64[2] parameter(1)
  ROOT r = f64[2] add(a, b)
}
"""


FULL_SUM = """HloModule full
add {
  x = f64[] parameter(0)
  y = f64[] parameter(1)
  ROOT s = f64[] add(x, y)
}
ENTRY e {
  a = f64[100000] parameter(0)
  z = f64[] constant(0)
  ROOT r = f64[] reduce(a, z), dimensions={0}, to_apply=add
}
"""


def _run(text: str, begin: int, end: int):
    module = parse_hlo(text)
    comp = module.entry
    kernels = compile_kernels("t", [("k", comp)])
    spec = kernels.specs["k"]
    dims = comp.root.shape.dims
    a, b = np.full(dims, 1.5), np.full(dims, 2.25)
    out = np.full(dims, -7.0)
    ptrs = (ctypes.c_void_p * 3)(a.ctypes.data, b.ctypes.data, out.ctypes.data)
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)(kernels.addresses["k"])
    fn(ctypes.addressof(ptrs), begin, end)
    return spec, out, evaluate(module, [a, b]), kernels.llvm_ir


@pytest.mark.parametrize("text", [SCALAR, VECTOR], ids=["one_element", "two_elements"])
def test_kernels_compute_their_range_and_nothing_for_an_empty_one(text):
    spec, out, want, ir_text = _run(text, 0, 1 if text is SCALAR else 2)
    np.testing.assert_array_equal(out, want)
    spec, out, _, _ = _run(text, 0, 0)
    assert (out == -7.0).all()                  # (an empty range writes nothing)
    assert ("k__one" in ir_text) == (text is SCALAR)     # (the wrapper: one element only)


def test_only_one_element_kernels_lose_their_loop():
    *_, scalar_ir = _run(SCALAR, 0, 1)
    *_, vector_ir = _run(VECTOR, 0, 2)
    # The wrapper of the one-element kernel calls it at the constant range [0, 1).
    assert "i64 0, i64 1)" in scalar_ir and "i64 0, i64 1)" not in vector_ir


def test_a_full_reduction_to_one_element_keeps_its_range_and_finish():
    """One output element but two phases (partial sums over [begin, end), then the finish):
    NAME forwards its range to NAME__one."""
    module = parse_hlo(FULL_SUM)
    kernels = compile_kernels("t", [("k", module.entry)])
    spec = kernels.specs["k"]
    assert spec.finish_name and spec.parallel_extent > 1
    assert 'call void @"k__one"(i8** %"buffers", i64 %"begin", i64 %"end")' in kernels.llvm_ir
