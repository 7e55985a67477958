"""Compute-bound loop kernels: 512-bit vectors and fused multiply-adds, on both sides of the
work thresholds (codegen/compute_bound.py), with results checked against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import nbxla
from nbxla.codegen import compute_bound
from nbxla.hlo import Builder, Shape

_WIDE = '"prefer-vector-width"="512"'


def _horner(terms: int):
    """x -> a Horner polynomial of ``terms`` coefficients (2 * (terms - 1) multiplies and adds)."""
    coeffs = [1.0 / (k + 1) for k in range(terms)]

    def poly(x):
        r = coeffs[-1] + 0.0 * x
        for c in reversed(coeffs[:-1]):
            r = r * x + c
        return r
    return poly


def _computation(terms: int):
    b = Builder("horner")
    x = b.parameter(Shape("f64", (16,)), "x")
    r = x
    for _ in range(terms):
        r = b.op("add", b.op("multiply", r, x), x)
    return b.build(r)


def test_element_work_counts_the_thresholds():
    below = _computation((compute_bound.CONTRACT_WORK - 1) // 2)
    above = _computation(compute_bound.CONTRACT_WORK // 2)
    assert compute_bound.element_work(below) < compute_bound.CONTRACT_WORK <= compute_bound.element_work(above)
    assert compute_bound.contraction_flags(below) == ()
    assert compute_bound.contraction_flags(above) == ("contract",)


def test_a_cheap_kernel_stays_bit_exact_and_narrow():
    """Below both thresholds: separately rounded multiplies and adds, NumPy's bits, and the
    target's default vector width."""
    rng = np.random.default_rng(0)
    a, c, d = (rng.standard_normal(10_001) for _ in range(3))
    f = nbxla.jit(lambda a, c, d: a * c + d)
    np.testing.assert_array_equal(f(a, c, d), a * c + d)
    ir_text = f.last_compilation.stage("llvm_ir")
    assert "contract" not in ir_text and _WIDE not in ir_text


def test_a_wide_formula_contracts_and_stays_accurate():
    """Above the work threshold: multiplies fuse into adds (one rounding instead of two) and
    the values stay within a few ulps of NumPy's over a 40-step Horner chain."""
    poly = _horner(40)
    x = np.random.default_rng(1).uniform(-0.9, 0.9, 20_003)
    f = nbxla.jit(poly)
    got, want = f(x), poly(x)
    ir_text = f.last_compilation.stage("llvm_ir")
    assert "fmul contract" in ir_text and "fadd contract" in ir_text
    np.testing.assert_allclose(got, want, rtol=16 * np.finfo(np.float64).eps)


def test_transcendental_kernels_contract_and_f32_too():
    x = np.random.default_rng(2).uniform(0, 3, 5_000).astype(np.float32)
    f = nbxla.jit(lambda x: np.sin(x) * x + 1.0)
    np.testing.assert_allclose(f(x), np.sin(x) * x + 1.0, rtol=4 * np.finfo(np.float32).eps)
    assert "fmul contract" in f.last_compilation.stage("llvm_ir")


def test_half_precision_is_never_contracted():
    """f16 computes in f32 and rounds after every operation: no fused multiply-add, even in a
    kernel with a transcendental."""
    x = np.random.default_rng(3).uniform(0, 3, 4_000).astype(np.float16)
    f = nbxla.jit(lambda x: np.sin(x) * x + x)
    got = f(x)
    assert "contract" not in f.last_compilation.stage("llvm_ir")
    want = (np.sin(x) * x + x)
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=4e-3)


@pytest.mark.parametrize("avx512", [True, False])
def test_wide_vectors_by_host_and_work(avx512):
    heavy = Builder("heavy")
    x = heavy.parameter(Shape("f64", (8,)), "x")
    heavy_comp = heavy.build(heavy.op("sine", x))
    from llvmlite import ir
    module = ir.Module("m")

    def fn(name):
        return ir.Function(module, ir.FunctionType(ir.VoidType(), []), name)
    assert compute_bound.prefer_wide_vectors(fn("a"), heavy_comp, host_avx512=avx512) == avx512
    assert not compute_bound.prefer_wide_vectors(fn("b"), _computation(2), host_avx512=avx512)
    text = str(module)
    assert (_WIDE in text) == avx512


def test_wide_vector_kernels_give_numpy_values():
    """The 512-bit form (on AVX-512 hosts) computes what NumPy computes, every remainder
    length after the vector loop included."""
    for n in (1, 7, 8, 9, 15, 16, 17, 1000, 1003):
        x = np.linspace(-3, 3, n)
        f = nbxla.jit(lambda x: np.exp(x) * np.cos(x))
        np.testing.assert_allclose(f(x), np.exp(x) * np.cos(x), rtol=8 * np.finfo(np.float64).eps, atol=1e-300)


def _interleave_metadata(ir_text: str) -> list[int]:
    import re
    return [int(c) for c in re.findall(r'"llvm\.loop\.interleave\.count", i32 (\d+)', ir_text)]


def test_interleave_count_by_transcendental_and_extent():
    """Kernels with an approximated transcendental keep INTERLEAVE vector iterations in flight
    where the loop is long enough; others, and short rows, keep one."""
    b = Builder("exp")
    x = b.parameter(Shape("f64", (8,)), "x")
    with_exp = b.build(b.op("exponential", x))
    b = Builder("sqrt")
    x = b.parameter(Shape("f64", (8,)), "x")
    with_sqrt = b.build(b.op("sqrt", x))
    limit = compute_bound.INTERLEAVE_MIN_EXTENT
    assert compute_bound.interleave_count(with_exp) == compute_bound.INTERLEAVE > 1
    assert compute_bound.interleave_count(with_exp, limit) == compute_bound.INTERLEAVE
    assert compute_bound.interleave_count(with_exp, limit - 1) == 1
    assert compute_bound.interleave_count(with_sqrt) == 1
    assert compute_bound.interleave_count(_computation(40)) == 1


@pytest.mark.parametrize("n", [1, 7, 31, 32, 33, 63, 255, 256, 257, 1000, 4099])
def test_interleaved_flat_kernels_give_numpy_values(n):
    """The interleaved vector loop, its vector epilogue and the scalar remainder all compute
    NumPy's values (lengths around multiples of 4 vectors of 8 and 16)."""
    rng = np.random.default_rng(n)
    s, k, t = rng.uniform(5, 30, n), rng.uniform(1, 100, n), rng.uniform(0.25, 10, n)
    f = nbxla.jit(lambda s, k, t: np.log(s / k) * np.exp(-0.02 * t) / np.sqrt(t))
    want = np.log(s / k) * np.exp(-0.02 * t) / np.sqrt(t)
    np.testing.assert_allclose(f(s, k, t), want, rtol=8 * np.finfo(np.float64).eps, atol=1e-300)
    assert compute_bound.INTERLEAVE in _interleave_metadata(f.last_compilation.stage("llvm_ir"))
    f32 = nbxla.jit(lambda x: np.exp(x) * np.cos(x))
    x = np.linspace(-3, 3, n).astype(np.float32)
    np.testing.assert_allclose(f32(x), np.exp(x) * np.cos(x), rtol=8 * np.finfo(np.float32).eps, atol=1e-30)


@pytest.mark.parametrize("cols", [compute_bound.INTERLEAVE_MIN_EXTENT - 1, compute_bound.INTERLEAVE_MIN_EXTENT])
def test_row_kernels_interleave_only_long_rows(cols):
    """A row kernel (a row vector broadcast down the rows) interleaves its loop over columns
    from INTERLEAVE_MIN_EXTENT columns on, and is right on both sides."""
    rng = np.random.default_rng(cols)
    a, row = rng.uniform(0.5, 2, (5, cols)), rng.uniform(0.5, 2, cols)
    f = nbxla.jit(lambda a, row: np.log(a * row[None, :] + 1.0))
    np.testing.assert_allclose(f(a, row), np.log(a * row[None, :] + 1.0), rtol=8 * np.finfo(np.float64).eps)
    counts = _interleave_metadata(f.last_compilation.stage("llvm_ir"))
    assert (compute_bound.INTERLEAVE in counts) == (cols >= compute_bound.INTERLEAVE_MIN_EXTENT)
