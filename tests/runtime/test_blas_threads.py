"""How many OpenBLAS threads a BLAS call gets: with NBXLA_BLAS_ONE_THREAD=1 calls OpenBLAS
would thread run on one OpenBLAS thread (restoring the count after) and large ones are split
into row, column or batch blocks over nbxla's pool; by default small products and products
made while other work keeps the cores busy do so, others keep OpenBLAS's threads; with =0
OpenBLAS's count is never touched.  Every form agrees with NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import nbxla
from nbxla.runtime import blas_threads, cpu_kernels, native_dots
from nbxla.runtime.cpu_kernels import DotThunk, worker_count

found = blas_threads.controls()
needs_openblas = pytest.mark.skipif(found is None, reason="NumPy's BLAS is not an OpenBLAS we can find")

CASES = {                                   # name: (function, shapes, limited, split axis)
    "tiny_gemm": (lambda a, b: a @ b, [(4, 5), (5, 6)], False, None),
    "tiny_gemv": (lambda a, x: a @ x, [(60, 150), (150,)], False, None),       # 9000 < 9216
    "small_gemv": (lambda a, x: a @ x, [(190, 210), (210,)], True, None),
    "mid_gemm": (lambda a, b: a @ b, [(80, 60), (60, 70)], True, None),
    "large_gemm": (lambda a, b: a @ b, [(300, 200), (200, 100)], True, "rows"),
    "wide_gemm": (lambda a, b: a @ b, [(100, 200), (200, 300)], True, "columns"),   # (longer side)
    "large_matvec": (lambda a, x: a @ x, [(1200, 1000), (1000,)], True, "rows"),
    "large_vecmat": (lambda y, a: y @ a, [(1200,), (1200, 1000)], True, "columns"),
    "large_batched": (lambda a, b: a @ b, [(12, 100, 100), (12, 100, 90)], True, "batch"),
    "transposed_gemm": (lambda a, b: a.T @ b, [(200, 300), (200, 100)], True, "rows"),
}


@needs_openblas
@pytest.mark.parametrize("name", sorted(CASES))
def test_blas_calls_are_limited_or_split_as_their_size_says_and_agree(name, monkeypatch):
    monkeypatch.setattr(cpu_kernels, "SPLIT_PRODUCT", 1_000_000)     # (test-sized arrays)
    monkeypatch.setenv("NBXLA_BLAS_ONE_THREAD", "1")                  # (off by default)
    monkeypatch.setattr(native_dots, "MIN_PRODUCT", 1 << 62)          # (BLAS's calls, not nbxla's kernel)
    fn, shapes, limited, axis = CASES[name]
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s) for s in shapes]
    get, set_ = found
    before = get()
    set_(2)
    try:
        f = nbxla.jit(fn)
        for _ in range(2):
            np.testing.assert_allclose(f(*args), fn(*args), rtol=1e-10, atol=1e-10)
            assert get() == 2                         # restored after every call
        dots = [s[0] for s in f.last_compilation.executable.native._plan[2] if isinstance(s[0], DotThunk)]
        assert len(dots) == 1
        assert (dots[0].controls is not None) == limited
        threads, split = dots[0].call_plan()
        assert threads == (1 if limited else 0)
        assert (split[0] if split else None) == (axis if worker_count() > 1 else None)
    finally:
        set_(before)


BATCHED = {                 # name: (shapes, split over the batch by default)
    # 4 heads of 128x64 @ 64x128: 4M multiply-adds (~70 us), each product one OpenBLAS would
    # thread and two threads pay for (1M >= TWO_THREADS_PAY): not split; one BLAS thread on
    # busy cores, OpenBLAS's on idle ones
    "attention_heads": ([(4, 128, 64), (4, 64, 128)], False),
    # 16 products OpenBLAS would thread (64x80x64 > OPENBLAS_THREADED) but two threads do not
    # pay for (< TWO_THREADS_PAY), 5M in all: one BLAS thread whatever the load
    "small_heads": ([(16, 64, 80), (16, 80, 64)], False),
    # 16 of the attention heads: 16M multiply-adds, at SPLIT_PRODUCT (lowered by the test):
    # split over the batch on one BLAS thread whatever the load
    "many_heads": ([(16, 128, 64), (16, 64, 128)], True),
    # many tiny products: none OpenBLAS would thread, whatever the total
    "tiny_products": ([(4096, 8, 8), (4096, 8, 16)], False),
}
TEST_SPLIT_PRODUCT = 16 * 128 * 64 * 128


@needs_openblas
@pytest.mark.parametrize("name", sorted(BATCHED))
@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("free", [2.0, 0.3])
def test_batched_products_threads_by_load_and_large_batches_split(name, workers, free, monkeypatch):
    """Without NBXLA_BLAS_ONE_THREAD, a batch of products that OpenBLAS would each thread runs
    on one OpenBLAS thread while other work keeps the cores busy (free = 0.3; the count
    restored after the call) and on OpenBLAS's threads when they are idle (free = 2), where
    each product is large enough for two threads to pay (judged per product: both sides of
    TWO_THREADS_PAY here); split over the batch across the pool, on one thread, only when it
    reaches SPLIT_PRODUCT multiply-adds and there is more than one core (both sides of that
    threshold here); the result is NumPy's either way."""
    monkeypatch.delenv("NBXLA_BLAS_ONE_THREAD", raising=False)
    monkeypatch.setattr(cpu_kernels, "worker_count", lambda: workers)
    monkeypatch.setattr(cpu_kernels, "SPLIT_PRODUCT", TEST_SPLIT_PRODUCT)
    monkeypatch.setattr(blas_threads.machine_load, "free_cores", lambda: free)
    # (products nbxla's own GEMM kernel would take stay with BLAS here: the test is of BLAS's threads)
    monkeypatch.setattr(native_dots, "MIN_PRODUCT", 1 << 62)
    shapes, split = BATCHED[name]
    (batch, m, k), (_, _, n) = shapes
    assert (m * k * n < blas_threads.TWO_THREADS_PAY) == (name in ("small_heads", "tiny_products"))
    rng = np.random.default_rng(1)
    args = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    get, set_ = found
    before = get()
    set_(2)
    try:
        f = nbxla.jit(lambda a, b: a @ b)
        for _ in range(2):
            np.testing.assert_allclose(f(*args), args[0] @ args[1], rtol=1e-5, atol=1e-5)
            assert get() == 2
        dots = [s[0] for s in f.last_compilation.executable.native._plan[2] if isinstance(s[0], DotThunk)]
        assert len(dots) == 1
        split_here = split and workers > 1
        idle_threads = free >= 1.5 and name in ("attention_heads", "many_heads")
        threads = 0 if name == "tiny_products" else 2 if idle_threads and not split_here else 1
        expected = ("batch", batch, batch) if split_here else None
        assert dots[0].call_plan() == (threads, expected)
        # (the execution stage says which: on one thread always, or only while the cores are busy)
        text = f.compiled_inputs(*args)[0].stage("execution")
        load_dependent = name in ("attention_heads", "many_heads") and not split_here
        assert ("one BLAS thread while the cores are busy" in text) == load_dependent
        assert ("one BLAS thread" in text) == (name != "tiny_products")
    finally:
        set_(before)
