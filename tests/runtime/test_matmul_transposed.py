"""Dots that contract an operand's other minor dimension (x.T @ g, g @ w.T: what gradients of
matmuls are) run as one BLAS GEMM (np.matmul on transposed views), and agree with the evaluator."""

from __future__ import annotations

import numpy as np
import pytest

from nbxla.hlo import Builder, Module, Shape
from nbxla.hlo.evaluator import evaluate
from nbxla.runtime.executable import build_executable


@pytest.mark.parametrize("lhs_c, rhs_c, batch", [((0,), (0,), 0), ((1,), (1,), 0), ((0,), (1,), 0),
                                                 ((1,), (2,), 1), ((1,), (1,), 1)])
def test_transposed_operands_use_blas_and_match_the_evaluator(lhs_c, rhs_c, batch):
    rng = np.random.default_rng(0)
    k, m, n = 5, 3, 4
    nb = batch
    a_dims = (2,) * nb + ((k, m) if lhs_c == (nb,) else (m, k))
    b_dims = (2,) * nb + ((k, n) if rhs_c == (nb,) else (n, k))
    b = Builder("f")
    x, y = b.parameter(Shape("f32", a_dims), "x"), b.parameter(Shape("f32", b_dims), "y")
    d = b.op("dot", x, y, lhs_batch_dims=tuple(range(nb)), rhs_batch_dims=tuple(range(nb)),
             lhs_contracting_dims=lhs_c, rhs_contracting_dims=rhs_c)
    module = Module("f", b.build(d))
    args = [rng.standard_normal(a_dims).astype(np.float32), rng.standard_normal(b_dims).astype(np.float32)]
    exe = build_executable(module, "cpu")
    np.testing.assert_allclose(exe.run(args)[0], evaluate(module, args), rtol=1e-5, atol=1e-6)
    assert "(NumPy's BLAS)" in exe.stages["execution"] and "evaluator" not in exe.stages["execution"]
