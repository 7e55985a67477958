"""BLAS calls OpenBLAS would thread run on one OpenBLAS thread (restoring the count after),
and large ones are split into row, column or batch blocks over nbxla's pool; every form agrees
with NumPy and with the evaluator's answer."""

from __future__ import annotations

import numpy as np
import pytest

import nbxla
from nbxla.runtime import blas_threads, cpu_kernels
from nbxla.runtime.cpu_kernels import DotThunk, worker_count

found = blas_threads.controls()
needs_openblas = pytest.mark.skipif(found is None, reason="NumPy's BLAS is not an OpenBLAS we can find")

CASES = {                                   # name: (function, shapes, limited, split axis)
    "tiny_gemm": (lambda a, b: a @ b, [(4, 5), (5, 6)], False, None),
    "small_gemv": (lambda a, x: a @ x, [(190, 210), (210,)], False, None),
    "mid_gemm": (lambda a, b: a @ b, [(80, 60), (60, 70)], True, None),
    "large_gemm": (lambda a, b: a @ b, [(300, 200), (200, 100)], True, "rows"),
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
        assert (dots[0].one_thread is not None) == limited
        assert (dots[0].split[0] if dots[0].split else None) == (axis if worker_count() > 1 else None)
    finally:
        set_(before)
