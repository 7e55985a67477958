"""Thin GEMMs on nbxla's streaming kernel (runtime/thin_gemm.py, codegen/thin_gemm.py): a few
rows against a large row-major matrix.  Every part of the kernel's blocking (row groups, the
panel tail, the contraction's rest, the column strip past the last whole vector), both lhs
orders, the chunked and the single-chunk runs -- each against the evaluator -- and the
limits of the path on both sides."""

from __future__ import annotations

import numpy as np
import pytest

import nbxla
from nbxla.hlo import Builder, Module, Shape
from nbxla.hlo.evaluator import evaluate
from nbxla.runtime import thin_gemm
from nbxla.runtime.cpu_kernels import DotThunk
from nbxla.runtime.executable import build_executable
from nbxla.runtime.thin_gemm import MIN_DEPTH, MIN_MATRIX_ELEMENTS, THIN_ROWS, ThinGemmDot

pytestmark = pytest.mark.skipif(not thin_gemm.AVX512, reason="the thin-GEMM kernel needs AVX-512")


def dot_module(t: str, a_dims, b_dims, lhs_c=(1,), rhs_c=(0,)) -> Module:
    b = Builder("f")
    x, y = b.parameter(Shape(t, a_dims), "x"), b.parameter(Shape(t, b_dims), "y")
    d = b.op("dot", x, y, lhs_batch_dims=(), rhs_batch_dims=(), lhs_contracting_dims=lhs_c,
             rhs_contracting_dims=rhs_c)
    return Module("f", b.build(d))


def run_and_check(module: Module, thin: bool, seed: int = 0):
    rng = np.random.default_rng(seed)
    args = [rng.uniform(-1, 1, p.shape.dims).astype(p.shape.dtype) for p in module.entry.parameters]
    exe = build_executable(module, "cpu")
    got = exe.run(args)[0]
    want = evaluate(module, args)
    assert got.dtype == want.dtype
    tol = 1e-4 if got.dtype == np.float32 else 1e-10
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * float(np.max(np.abs(want))))
    thunks = [s[0] for s in exe.native._plan[2] if isinstance(s[0], DotThunk)]
    assert len(thunks) == 1
    assert isinstance(thunks[0], ThinGemmDot) == thin, thunks[0].how
    if thin:
        assert "thin-GEMM kernel" in exe.stages["execution"]
    return thunks[0]


CASES = {
    # name: (type, lhs dims, rhs dims, lhs contracting dim)
    "mlp_rows": ("f64", (8, 1024), (1024, 2048), 1),
    "two_rows": ("f64", (2, 1024), (1024, 1024), 1),
    "two_row_groups": ("f64", (11, 600), (600, 1800), 1),      # rows 8 + 3
    "most_rows": ("f32", (THIN_ROWS, 512), (512, 2048), 1),
    "panel_tail": ("f64", (8, 700), (700, 1504), 1),             # 188 vectors: 62 panels + 2
    "column_strip": ("f64", (5, 777), (777, 1350), 1),          # 1350 = 168 vectors + 6 columns
    "f32_strip": ("f32", (8, 1030), (1030, 1030), 1),            # 64 vectors + 6, rest of 6 rows
    "lhs_transposed": ("f64", (900, 8), (900, 1200), 0),         # x.T @ w
    "lhs_transposed_strip": ("f64", (900, 5), (900, 1203), 0),   # and 3 columns past the vectors
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("workers", [1, 2])
def test_thin_gemm_matches_the_evaluator(name, workers, monkeypatch):
    """On one core (one chunk, written straight into the output) and on two (chunks of the
    contraction, partial sums added in order)."""
    monkeypatch.setattr(thin_gemm, "worker_count", lambda: workers)
    t, a, b, lc = CASES[name]
    thunk = run_and_check(dot_module(t, a, b, (lc,)), thin=True)
    k = b[0]
    assert thunk.chunks == (1 if workers == 1 else min(k // thin_gemm.CHUNK_DEPTH, 2 * thin_gemm.CHUNKS_PER_WORKER))


@pytest.mark.parametrize("a,b,lc,rc,thin", [
    ((THIN_ROWS, 512), (512, 2048), 1, 0, True),
    ((THIN_ROWS + 1, 512), (512, 2048), 1, 0, False),         # (too many rows)
    ((2, 512), (512, 2048), 1, 0, True),
    ((1, 512), (512, 2048), 1, 0, False),                      # (a GEMV: BLAS streams too)
    ((8, MIN_DEPTH), (MIN_DEPTH, 4096), 1, 0, True),
    ((8, MIN_DEPTH - 1), (MIN_DEPTH - 1, 4120), 1, 0, False),  # (too shallow)
    ((8, 512), (512, MIN_MATRIX_ELEMENTS // 512), 1, 0, True),
    ((8, 512), (512, MIN_MATRIX_ELEMENTS // 512 - 8), 1, 0, False),  # (a small matrix)
    ((8, 512), (2048, 512), 1, 1, False),                      # (x @ w.T: the matrix transposed)
])
def test_limits(a, b, lc, rc, thin):
    run_and_check(dot_module("f64", a, b, (lc,), (rc,)), thin=thin)


def mlp_layer(x, w, b):
    return np.maximum(x @ w + b, 0)


def scaled_update(alpha, beta, c, x, w):
    return alpha * x @ w + beta * c


def test_jit_mlp_layer_and_gemm_form_against_numpy():
    """Through jit: a layer with its bias and relu, and ``alpha * x @ w + beta * C`` (the
    GEMM epilogue fold leaves a thin product to the kernel)."""
    rng = np.random.default_rng(3)
    x, w, bias = rng.uniform(-1, 1, (8, 1024)), rng.uniform(-1, 1, (1024, 2000)), rng.uniform(-1, 1, 2000)
    f = nbxla.jit(mlp_layer)
    np.testing.assert_allclose(f(x, w, bias), mlp_layer(x, w, bias), rtol=1e-10, atol=1e-10)
    assert "thin-GEMM kernel" in f.compiled_inputs(x, w, bias)[0].stage("execution")
    c = rng.uniform(-1, 1, (8, 2000))
    g = nbxla.jit(scaled_update)
    np.testing.assert_allclose(g(1.5, 1.2, c, x, w), scaled_update(1.5, 1.2, c, x, w), rtol=1e-10, atol=1e-10)
    assert "thin-GEMM kernel" in g.compiled_inputs(1.5, 1.2, c, x, w)[0].stage("execution")


def test_strided_output_gets_the_product():
    """A planned output that is not contiguous (the kernel writes by pointer) is written by a copy."""
    instr = dot_module("f64", (8, 512), (512, 2048)).entry.root
    thunk = ThinGemmDot(instr)
    rng = np.random.default_rng(5)
    x, w = rng.uniform(-1, 1, (8, 512)), rng.uniform(-1, 1, (512, 2048))
    out = np.zeros((8, 4096))[:, ::2]
    assert thunk([x, w], [out]) is out
    np.testing.assert_allclose(out, x @ w, rtol=1e-10, atol=1e-10)
