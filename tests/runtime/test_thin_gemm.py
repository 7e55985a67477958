"""Thin GEMMs (a small output over a deep contraction: an MLP's few rows against a large
weight) that nbxla's thin-GEMM kernel leaves to BLAS (here: all, the kernel switched off) run
on one BLAS thread, split over nbxla's pool along their longer side (``cpu_kernels.THIN_SIDE``,
``THIN_OUTPUT``): results against eager NumPy on both sides of the output limit and of the
split's size, split by rows and by columns, transposed.  (The GEMM epilogue fold
splitting its accumulation the same way: ``test_gemm_epilogue``.)"""

import numpy as np
import pytest

import nbxla
from nbxla.runtime.blas_threads import SPLIT_PRODUCT
from nbxla.runtime.cpu_kernels import THIN_OUTPUT, THIN_SIDE, DotThunk, worker_count


@pytest.fixture(autouse=True)
def busy_cores(monkeypatch):
    """Thin products split over the pool while the cores are busy (on idle ones OpenBLAS's
    threads run them): pinned busy here, so the split is what runs whatever the machine's load."""
    from nbxla.runtime import blas_threads
    monkeypatch.setattr(blas_threads.machine_load, "free_cores", lambda: 0.3)


@pytest.fixture(autouse=True)
def blas_runs_thin_products(monkeypatch):
    """nbxla's thin-GEMM kernel (test_thin_gemm_kernel) off: these are OpenBLAS's thin products."""
    from nbxla.runtime import cpu_executable, gemm_epilogue
    for module in (cpu_executable, gemm_epilogue):
        monkeypatch.setattr(module, "thin_gemm_refusal", lambda instr: "off in this test")


def _rand(shape, seed, dtype=np.float64):
    return np.random.default_rng(seed).uniform(-1, 1, size=shape).astype(dtype)


def _execution(f, *args):
    return f.compiled_inputs(*args)[0].stage("execution")


def _close(got, want):
    assert got.dtype == want.dtype
    tol = 1e-4 if got.dtype == np.float32 else 1e-10
    assert float(np.max(np.abs(got - want))) <= tol * max(float(np.max(np.abs(want))), 1.0)


def product(x, w):
    return x @ w


def product_t(x, w):
    return x @ w.T


@pytest.mark.parametrize("m,k,n,thin", [
    (8, 4, THIN_OUTPUT // 8, True),                 # (at the output limit)
    (8, 4, THIN_OUTPUT // 8 + 1, False),            # (just over it: the default policy)
    (THIN_SIDE, 8, 7000, True),                     # (at the side limit)
    (THIN_SIDE + 1, 8, 7000, False),                # (just over it)
    (8, 20, 1200, False),                           # (too little work for OpenBLAS to thread)
])
def test_output_limit(m, k, n, thin):
    """Which BLAS products count as thin (``DotThunk.thin``), on both sides of each limit."""
    x, w = _rand((m, k), 0), _rand((k, n), 1)
    f = nbxla.jit(product)
    _close(f(x, w), x @ w)
    dots = [i for c in f.last_compilation.optimized.computations for i in c.instructions if i.opcode == "dot"]
    assert len(dots) == 1
    if not all(isinstance(d, int) for o in (dots[0], *dots[0].operands) for d in o.shape.dims):
        pytest.skip("the symbolic rerun: a dot of unknown size is planned per size at run time")
    assert DotThunk(dots[0]).thin == thin


@pytest.mark.skipif(worker_count() < 2, reason="the split needs two cores")
@pytest.mark.parametrize("m,k,n,split", [
    (8, SPLIT_PRODUCT // 8000, 1000, "columns"),        # (at the split's size)
    (8, SPLIT_PRODUCT // 8000, 999, None),              # (just under it)
    (1000, SPLIT_PRODUCT // 8000, 8, "rows"),
])
@pytest.mark.parametrize("fn", [product, product_t])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_split_along_the_longer_side(m, k, n, split, fn, dtype):
    x = _rand((m, k), 0, dtype)
    w = _rand((k, n) if fn is product else (n, k), 1, dtype)
    f = nbxla.jit(fn)
    _close(f(x, w), fn(x, w))
    text = _execution(f, x, w)
    assert "one BLAS thread" in text
    assert (f"{split} split over the pool" in text) if split else ("split over the pool" not in text)
