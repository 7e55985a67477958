"""Chunks of different sizes (the last, shorter chunk) share one compiled kernel: the block
modules differ only in a chunked extent, so the plan ships one module with an unknown dimension
and a worker compiles it once for every block size.  Counted in this process (the synchronous
scheduler runs the tasks here) and compared with NumPy."""

import numpy as np
import pytest

import nbxla
import nbxla.dask as nd
from nbxla.dask import worker

dask = pytest.importorskip("dask", reason="dask is not installed (pip install nbxla[dask])")
da = pytest.importorskip("dask.array", reason="dask[array] is not installed (pip install nbxla[dask])")

RNG = np.random.default_rng(5)
X = RNG.random((1000, 64)).astype(np.float32)
Y = RNG.random((1000, 64)).astype(np.float32)


def _compute(lazy):
    before = worker.compile_count()
    got = dask.compute(*(lazy if isinstance(lazy, tuple) else (lazy,)), scheduler="synchronous")
    return got, worker.compile_count() - before


def _stage_kernels():
    return [len(stage.kernels) for stage in nd._LAST_ANY[0].stages]


def test_the_last_chunk_shares_the_elementwise_kernel():
    f = nbxla.jit(lambda x, y: np.tanh(x) * 2 + y)
    (got,), compiles = _compute(f(da.from_array(X, chunks=(300, 64)), da.from_array(Y, chunks=(300, 64))))
    np.testing.assert_allclose(got, np.tanh(X) * 2 + Y, rtol=1e-6)
    assert _stage_kernels() == [1]              # blocks of 300 and 100 rows: one kernel
    assert compiles == 1
    assert "unknown dimensions" in nd.explain(f)


def test_the_last_chunk_shares_the_reduction_kernel():
    """Column sums per block (the row count read when the kernel runs), then dask's combine."""
    f = nbxla.jit(lambda x: (x * x).sum(axis=0))
    (got,), compiles = _compute(f(da.from_array(X, chunks=(300, 64))))
    np.testing.assert_allclose(got, (X * X).sum(axis=0), rtol=1e-5)
    assert _stage_kernels()[0] == 1
    per_block_stage = 1
    assert compiles <= per_block_stage + 2      # (+ the combine kernels of dask's reduction tree)


def test_equal_chunks_and_static_programs_are_unchanged():
    f = nbxla.jit(lambda x: np.exp(x) - 1)
    (got,), compiles = _compute(f(da.from_array(X, chunks=(250, 64))))
    np.testing.assert_allclose(got, np.expm1(X), rtol=1e-5, atol=1e-6)
    assert _stage_kernels() == [1] and compiles == 1
    assert "unknown dimensions" not in nd.explain(f)


def test_a_size_one_last_chunk_compiles_its_own_kernel():
    """Sizes 0 and 1 are specialised: a last chunk of one row keeps a kernel of its own."""
    f = nbxla.jit(lambda x: np.tanh(x) * 3)
    (got,), compiles = _compute(f(da.from_array(X[:601], chunks=(300, 64))))
    np.testing.assert_allclose(got, np.tanh(X[:601]) * 3, rtol=1e-6)
    assert _stage_kernels() == [2] and compiles == 2
