"""A reduction over leading axes writes one array: with several outputs the column kernel
walks the input column by column (the bias gradient's column sum beside the activation
gradient, two column sums, an optimizer update beside the sum).  Row reductions keep their
extra outputs."""

from __future__ import annotations

import numpy as np

import nbxla
from nbxla.runtime.cache import CompilationCache


def _report(fn, *args):
    f = nbxla.jit(fn, device="cpu", cache=CompilationCache())
    out = f(*args)
    return f.last_compilation.fusion_report, out


def test_column_sum_beside_its_input_space_producer_is_two_kernels():
    a = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
    report, (da, db) = _report(lambda a, g: ((a > 0) * g, ((a > 0) * g).sum(axis=0)), a, a)
    np.testing.assert_allclose(db, ((a > 0) * a).sum(axis=0), rtol=1e-5)
    np.testing.assert_array_equal(da, (a > 0) * a)
    # (the cheap elementwise producer is computed again inside the reduction kernel)
    assert report.kernels_after == 2
    assert sorted(k.kind for k in report.kernels) == ["kInput", "kLoop"]


def test_row_sum_keeps_the_extra_output():
    a = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
    report, _ = _report(lambda a, g: ((a > 0) * g, ((a > 0) * g).sum(axis=1)), a, a)
    assert report.kernels_after == 1


def test_two_column_sums_are_two_kernels():
    g = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
    report, (s, q) = _report(lambda g: (g.sum(axis=0), (g * g).sum(axis=0)), g)
    np.testing.assert_allclose(s, g.sum(axis=0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(q, (g * g).sum(axis=0), rtol=1e-5)
    assert report.kernels_after == 2


def test_two_row_sums_stay_one_kernel():
    g = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
    report, _ = _report(lambda g: (g.sum(axis=1), (g * g).sum(axis=1)), g)
    assert report.kernels_after == 1
