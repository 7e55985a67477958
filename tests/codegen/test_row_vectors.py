"""Rows kernels vectorize within a row (``codegen/row_access.py``): a row whose operands are read
contiguously along it, or not at all, of at least ``ROW_MIN_BYTES`` bytes and
``ROW_MIN_ELEMENTS`` elements, has its loop kept whole until LLVM's vectorizer has seen it, so
that the loop over rows is not vectorized across rows (gathers, shuffles: ``relu(y + b)`` with
16 f32 columns ran 6x slower so).  Both sides of both thresholds; a static kernel too large to
be light and a symbolic one (neither is light: their loops are unrolled); rows read with a
stride (a transpose, a strided slice) keep LLVM's own choice.  Results against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import nbxla
from nbxla.codegen.cpu import LIGHT_KERNEL_ELEMENTS
from nbxla.codegen.row_access import ROW_MIN_BYTES, ROW_MIN_ELEMENTS, vectorize_within_rows
from nbxla.hlo.parser import parse_hlo
from nbxla.runtime.cache import CompilationCache


def bias_relu(y, b):
    return np.maximum(y + b, 0)


def _kernel_ir(f) -> str:
    """The optimized LLVM IR of the one kernel of ``f``'s last compilation."""
    text = f.last_compilation.stage("llvm_ir_optimized")
    (kernel,) = [k for k in text.split("define ")[1:] if not k.split("(")[0].endswith("_objects")]
    return kernel


def _compiled(dtype, columns, rows, symbolic):
    rng = np.random.default_rng(columns)
    y = rng.standard_normal((rows, columns)).astype(dtype)
    b = rng.standard_normal(columns).astype(dtype)
    f = nbxla.jit(bias_relu, cache=CompilationCache(), dynamic={"y": (0,)} if symbolic else False)
    if symbolic:
        np.testing.assert_array_equal(f(y[:3], b), bias_relu(y[:3], b))
    np.testing.assert_array_equal(f(y, b), bias_relu(y, b))
    assert ("symbolic" in f.last_compilation.explanation) == symbolic
    return f


def _long_enough(dtype, columns) -> bool:
    return columns >= ROW_MIN_ELEMENTS and columns * np.dtype(dtype).itemsize >= ROW_MIN_BYTES


# (f32: 3 columns are 12 bytes, 4 are 16; f64: 2 columns are 16 bytes but 2 elements, 3 are enough)
CASES = [(np.float32, 2), (np.float32, 3), (np.float32, 4), (np.float32, 6), (np.float32, 16),
         (np.float32, 100), (np.float64, 2), (np.float64, 3), (np.float64, 6), (np.float64, 16)]


@pytest.mark.parametrize("symbolic", [False, True])
@pytest.mark.parametrize("dtype,columns", CASES)
def test_rows_vectorize_within_the_row_from_the_threshold_on(dtype, columns, symbolic):
    rows = LIGHT_KERNEL_ELEMENTS // columns + 1          # (static: too large to be light)
    f = _compiled(dtype, columns, rows, symbolic)
    kernel = _kernel_ir(f)
    within = _long_enough(dtype, columns)
    assert ("llvm.loop.vectorize.followup_all" in f.last_compilation.stage("llvm_ir")) == within
    if within:          # (across rows, a row's elements are a row apart: gathers or shuffles)
        assert "gather" not in kernel and "shufflevector" not in kernel, kernel[:400]


@pytest.mark.parametrize("dtype,columns", CASES)
@pytest.mark.parametrize("rows", [1, 2, 7, 1000, 4097])
def test_one_symbolic_kernel_against_numpy(dtype, columns, rows):
    rng = np.random.default_rng(rows)
    b = rng.standard_normal(columns).astype(dtype)
    f = nbxla.jit(bias_relu, cache=CompilationCache(), dynamic={"y": (0,)})
    f(rng.standard_normal((3, columns)).astype(dtype), b)
    y = rng.standard_normal((rows, columns)).astype(dtype)
    y[0, 0] = np.nan                     # (maximum propagates NaN, in every lane)
    np.testing.assert_array_equal(f(y, b), bias_relu(y, b))


@pytest.mark.parametrize("fn,shapes", [
    (lambda x, b: x.T + b, ((8, 5000), (8,))),                   # a transpose: strided along the row
    (lambda x, b: x[:, ::2] * b, ((5000, 16), (8,))),            # a strided slice
    (lambda x, c: np.tanh(x) * c[:, None], ((5000, 8), (5000,))),  # constant along the row
    (lambda x, b: x[:, 1:9] - b, ((5000, 12), (8,))),            # a contiguous slice
])
def test_other_reads_along_a_row_against_numpy(fn, shapes):
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    for dynamic in (False, True):
        got = nbxla.jit(fn, cache=CompilationCache(), dynamic=dynamic)(*args)
        np.testing.assert_allclose(got, fn(*args), rtol=1e-6, atol=1e-6)


def _fusion(body: str, result: str, params: str):
    text = f"""HloModule m
%fused (p0: f32[6], p1: f32[9,8], p2: f32[8,9], p3: f32[9,16], p4: f32[9]) -> {result} {{
  %p0 = f32[6]{{0}} parameter(0)
  %p1 = f32[9,8]{{1,0}} parameter(1)
  %p2 = f32[8,9]{{1,0}} parameter(2)
  %p3 = f32[9,16]{{1,0}} parameter(3)
  %p4 = f32[9]{{0}} parameter(4)
{body}
}}
ENTRY %e ({params}) -> {result} {{
  %a0 = f32[6]{{0}} parameter(0)
  %a1 = f32[9,8]{{1,0}} parameter(1)
  %a2 = f32[8,9]{{1,0}} parameter(2)
  %a3 = f32[9,16]{{1,0}} parameter(3)
  %a4 = f32[9]{{0}} parameter(4)
  ROOT %f = {result} fusion(%a0, %a1, %a2, %a3, %a4), kind=kLoop, calls=%fused
}}
"""
    comp = parse_hlo(text).computations[0]
    return comp, [comp.root]


PARAMS = "a0: f32[6], a1: f32[9,8], a2: f32[8,9], a3: f32[9,16], a4: f32[9]"


@pytest.mark.parametrize("body,within", [
    ("  %b = f32[9,8]{1,0} broadcast(%p4), dimensions={0}\n  ROOT %r = f32[9,8]{1,0} add(%p1, %b)", True),
    ("  %t = f32[9,8]{1,0} transpose(%p2), dimensions={1,0}\n  ROOT %r = f32[9,8]{1,0} add(%p1, %t)", False),
    ("  %s = f32[9,8]{1,0} slice(%p3), slice={[0:9], [0:16:2]}\n  ROOT %r = f32[9,8]{1,0} add(%p1, %s)", False),
    ("  %s = f32[9,8]{1,0} slice(%p3), slice={[0:9], [4:12]}\n  ROOT %r = f32[9,8]{1,0} add(%p1, %s)", True),
    ("  %r1 = f32[8,9]{1,0} reshape(%p1)\n  %t = f32[9,8]{1,0} transpose(%r1), dimensions={1,0}\n"
     "  ROOT %r = f32[9,8]{1,0} add(%p1, %t)", False),
])
def test_which_reads_count_as_along_the_row(body, within):
    comp, outputs = _fusion(body, "f32[9,8]", PARAMS)
    assert vectorize_within_rows(comp, outputs, 8) == within
    assert not vectorize_within_rows(comp, outputs, 3)          # (too short: 12 bytes)
