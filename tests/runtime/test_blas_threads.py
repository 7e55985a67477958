"""Small GEMMs run on one OpenBLAS thread and leave the thread count as they found it."""

from __future__ import annotations

import numpy as np
import pytest

import nbxla
from nbxla.runtime import blas_threads
from nbxla.runtime.cpu_kernels import DotThunk

found = blas_threads.controls()
needs_openblas = pytest.mark.skipif(found is None, reason="NumPy's BLAS is not an OpenBLAS we can find")


@needs_openblas
def test_single_threaded_runs_on_one_thread_and_restores_the_count():
    get, set_ = found
    before = get()
    set_(2)
    try:
        assert blas_threads.single_threaded(get) == 1
        assert get() == 2
    finally:
        set_(before)


@needs_openblas
def test_only_mid_size_gemms_are_limited_and_results_agree():
    rng = np.random.default_rng(0)
    cases = {(100, 120, 110): True, (4, 5, 6): False, (190, 210, 1): False, (400, 400, 400): False}
    for (m, k, n), limited in cases.items():
        a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
        f = nbxla.jit(lambda a, b: a @ b)
        np.testing.assert_allclose(f(a, b), a @ b, rtol=1e-12, atol=1e-12)
        dots = [s[0] for s in f.last_compilation.executable.native._plan[2] if isinstance(s[0], DotThunk)]
        assert len(dots) == 1 and (dots[0].one_thread is not None) == limited, (m, k, n)
