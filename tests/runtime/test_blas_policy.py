"""The default policy for OpenBLAS's thread count (blas_threads.threads_for_call): one thread
for products under TWO_THREADS_PAY multiply-adds, and while other processes keep the cores
busy (machine_load.free_cores); OpenBLAS's own count otherwise; NBXLA_BLAS_ONE_THREAD=1 / =0
override it.  (Each case asserts the count chosen at its own sizes.)"""

from __future__ import annotations

import numpy as np
import pytest

import nbxla
from nbxla.runtime import blas_threads, cpu_kernels, native_dots
from nbxla.runtime.cpu_kernels import DotThunk, worker_count

found = blas_threads.controls()
needs_openblas = pytest.mark.skipif(found is None, reason="NumPy's BLAS is not an OpenBLAS we can find")


def _threads_seen_by_blas(monkeypatch) -> list:
    """Records OpenBLAS's thread count and the split at each product DotThunk makes."""
    seen = []
    inner = DotThunk._matmul

    def recording(lhs, rhs, out, split):
        seen.append((found[0](), split[0] if split else None))
        inner(lhs, rhs, out, split)
    monkeypatch.setattr(DotThunk, "_matmul", staticmethod(recording))
    return seen


# name: (shapes, multiply-adds), on each side of TWO_THREADS_PAY and of the lowered SPLIT_PRODUCT
POLICY_CASES = {
    "gemv_under_pay": ([(300, 400), (400,)], 120_000),            # OpenBLAS threads it (>= 9216)
    "gemm_under_pay": ([(90, 90), (90, 90)], 729_000),
    "gemm_over_pay": ([(110, 100), (100, 100)], 1_100_000),
    "gemm_over_split": ([(300, 200), (200, 100)], 6_000_000),
}
POLICY_SPLIT_PRODUCT = 4_000_000


@needs_openblas
@pytest.mark.parametrize("name", sorted(POLICY_CASES))
@pytest.mark.parametrize("free", [2.0, 0.3])
@pytest.mark.parametrize("setting", [None, "0", "1"])
def test_default_policy_threads_by_size_and_by_free_cores_and_the_env_overrides(name, free, setting, monkeypatch):
    """Default: one OpenBLAS thread under TWO_THREADS_PAY multiply-adds whatever the load;
    from there OpenBLAS's own count on idle cores (free = 2) and one thread, unsplit, when
    other processes leave less than one and a half cores (free = 0.3).
    NBXLA_BLAS_ONE_THREAD=1: one thread (split over the pool from SPLIT_PRODUCT) even on
    idle cores; =0: OpenBLAS's count, unsplit, even on busy ones.  The count inside the call
    is the planned one, restored after it, and the result NumPy's."""
    if setting is None:
        monkeypatch.delenv("NBXLA_BLAS_ONE_THREAD", raising=False)
    else:
        monkeypatch.setenv("NBXLA_BLAS_ONE_THREAD", setting)
    monkeypatch.setattr(cpu_kernels, "SPLIT_PRODUCT", POLICY_SPLIT_PRODUCT)
    monkeypatch.setattr(native_dots, "MIN_PRODUCT", 1 << 62)
    monkeypatch.setattr(blas_threads.machine_load, "free_cores", lambda: free)
    shapes, work = POLICY_CASES[name]
    assert (work < blas_threads.TWO_THREADS_PAY) == name.endswith("under_pay")
    seen = _threads_seen_by_blas(monkeypatch)
    rng = np.random.default_rng(2)
    args = [rng.standard_normal(s) for s in shapes]
    get, set_ = found
    before = get()
    set_(2)
    try:
        f = nbxla.jit(lambda a, b: a @ b)
        np.testing.assert_allclose(f(*args), args[0] @ args[1], rtol=1e-10, atol=1e-10)
        assert get() == 2
    finally:
        set_(before)
    if setting == "0":                  # (the straight-line program's own np.matmul, untouched)
        dot, = [s[0] for s in f.last_compilation.executable.native._plan[2] if isinstance(s[0], DotThunk)]
        assert seen == [] and dot.controls is None and dot.call_plan() == (0, None)
        return
    one = setting == "1" or name.endswith("under_pay") or free < 1.5
    split = "rows" if setting == "1" and work >= POLICY_SPLIT_PRODUCT and worker_count() > 1 else None
    assert seen == [(1 if one else 2, split)]


def test_threads_for_call_on_each_side_of_its_thresholds(monkeypatch):
    pay = blas_threads.TWO_THREADS_PAY
    for free, wanted in ((2.0, 2), (1.6, 2), (1.4, 1), (0.0, 1), (8.0, 8)):
        monkeypatch.setattr(blas_threads.machine_load, "free_cores", lambda: free)
        assert blas_threads.threads_for_call(pay - 1, "auto") == 1
        assert blas_threads.threads_for_call(pay, "auto") == wanted
        assert blas_threads.threads_for_call(pay, "one") == 1
        assert blas_threads.threads_for_call(pay - 1, "openblas") == 0


@pytest.mark.parametrize("value, mode", [(None, "auto"), ("", "auto"), ("1", "one"), (" 1 ", "one"),
                                         ("0", "openblas"), ("auto", "auto")])
def test_env_setting_names_the_policy(value, mode, monkeypatch):
    if value is None:
        monkeypatch.delenv("NBXLA_BLAS_ONE_THREAD", raising=False)
    else:
        monkeypatch.setenv("NBXLA_BLAS_ONE_THREAD", value)
    assert blas_threads.policy_mode() == mode


@needs_openblas
@pytest.mark.parametrize("n, free, threads", [(99, 0.3, 2),      # 9801 elements: OpenBLAS's one thread, untouched
                                              (100, 2.0, 1),     # 333K multiply-adds: one thread
                                              (200, 2.0, 2),     # 2.7M, idle cores: OpenBLAS's count
                                              (200, 0.3, 1)])    # 2.7M, busy cores: one thread
def test_jit_solve_runs_lapack_with_the_policys_thread_count(n, free, threads, monkeypatch):
    monkeypatch.delenv("NBXLA_BLAS_ONE_THREAD", raising=False)
    monkeypatch.setattr(blas_threads.machine_load, "free_cores", lambda: free)
    rng = np.random.default_rng(3)
    a = rng.standard_normal((n, n)) + n * np.eye(n)
    b = rng.standard_normal(n)
    f = nbxla.jit(lambda a, b: np.linalg.solve(a, b))
    expected = np.linalg.solve(a, b)
    np.testing.assert_allclose(f(a, b), expected, rtol=1e-9, atol=1e-9)      # (compiled: the trace's own call)
    seen, solve = [], np.linalg.solve

    def recording(*args):
        seen.append(found[0]())
        return solve(*args)
    get, set_ = found
    before = get()
    set_(2)
    try:
        monkeypatch.setattr(np.linalg, "solve", recording)
        np.testing.assert_allclose(f(a, b), expected, rtol=1e-9, atol=1e-9)
        assert get() == 2
    finally:
        set_(before)
    assert seen == [threads]


@needs_openblas
@pytest.mark.parametrize("elements, work, free, setting, threads", [
    (9_999, 10**7, 0.3, None, 2),           # a matrix OpenBLAS's LAPACK does not thread: untouched
    (10_000, 999_999, 2.0, None, 1),        # under TWO_THREADS_PAY
    (10_000, 10**7, 2.0, None, 2),
    (10_000, 10**7, 0.3, None, 1),
    (10_000, 10**7, 2.0, "1", 1),
    (10_000, 999_999, 0.3, "0", 2)])
def test_lapack_routines_run_with_the_policys_thread_count(elements, work, free, setting, threads, monkeypatch):
    from nbxla.runtime.lapack_calls import _call
    if setting is None:
        monkeypatch.delenv("NBXLA_BLAS_ONE_THREAD", raising=False)
    else:
        monkeypatch.setenv("NBXLA_BLAS_ONE_THREAD", setting)
    monkeypatch.setattr(blas_threads.machine_load, "free_cores", lambda: free)
    get, set_ = found
    before = get()
    set_(2)
    try:
        assert _call(blas_threads.PolicyCall(), elements, work, lambda x: (get(), x), 7) == (threads, 7)
        assert get() == 2
    finally:
        set_(before)
