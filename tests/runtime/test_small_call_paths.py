"""The per-call shortcuts of small programs (issue 30), each checked against NumPy on both
sides of its switch: GEMV pairs through the built-in caller (GIL kept / released at
``RELEASE_PAIR_BYTES``, split over the pool beyond ``DUAL_MAX_BYTES``), potrf's one-matrix
path against its batch loop, and the fast runner of a one-result program with checks."""

import numpy as np
import pytest

import nbxla
from nbxla.runtime import straight_line
from nbxla.runtime.dual_gemv import available, pair_caller
from nbxla.runtime.lapack_calls import _routine


def atax(A, x):
    return (A @ x) @ A


def bicg(A, p, r):
    return r @ A, A @ p


@pytest.mark.skipif(not available("f64") or pair_caller("f64", True) is None, reason="no fast calls here")
@pytest.mark.parametrize("rows, cols", [(19, 21), (190, 210), (200, 200)])
def test_gemv_pairs_through_the_built_in_caller_match_numpy(rows, cols):
    rng = np.random.default_rng(0)
    A, x, r = rng.random((rows, cols)), rng.random(cols), rng.random(rows)
    small = A.nbytes < straight_line.RELEASE_PAIR_BYTES
    assert small == (rows * cols < 32768)         # (both sides of the GIL switch are covered)
    f, g = nbxla.jit(atax), nbxla.jit(bicg)
    np.testing.assert_allclose(f(A, x), atax(A, x), rtol=1e-12)
    for got, want in zip(g(A, x, r), bicg(A, x, r)):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    source = f.compiled_inputs(A, x)[0].executable.run.source
    assert f"pair_f64_{int(not small)}_chained(" in source and "    chained(" not in source


def test_the_built_in_pair_caller_refuses_what_is_not_an_array():
    if pair_caller("f64", True) is None:
        pytest.skip("no fast calls here")
    call = pair_caller("f64", True)
    A = np.ones((4, 4))
    with pytest.raises(TypeError):
        call(A, [1.0] * 4, np.empty(4), np.empty(4), np.array([4, 4], np.int64))


def test_gemv_pairs_above_the_split_size_still_split(monkeypatch):
    monkeypatch.setattr(straight_line, "DUAL_MAX_BYTES", 1000)
    monkeypatch.setattr("nbxla.runtime.straight_line.worker_count", lambda: 2)
    rng = np.random.default_rng(1)
    A, x = rng.random((40, 30)), rng.random(30)
    f = nbxla.jit(lambda A, x: (A @ x) @ A)
    np.testing.assert_allclose(f(A, x), atax(A, x), rtol=1e-12)
    assert "split_pair" in f.compiled_inputs(A, x)[0].executable.run.source


def _spd(dims, seed=0):
    m = np.random.default_rng(seed).standard_normal(dims)
    return m @ np.swapaxes(m, -1, -2) + dims[-1] * np.eye(dims[-1])


@pytest.mark.skipif(_routine("LAPACKE_dpotrf") is None, reason="NumPy's BLAS has no 64-bit LAPACKE potrf")
@pytest.mark.parametrize("dims", [(50, 50), (3, 6, 6)])         # one matrix / the batch loop
def test_cholesky_one_matrix_and_batches_match_numpy_and_raise_as_numpy(dims):
    f = nbxla.jit(lambda a: np.linalg.cholesky(a))
    a = _spd(dims)
    for _ in range(2):                                  # (the second call: the fast runner)
        np.testing.assert_allclose(f(a), np.linalg.cholesky(a), rtol=1e-12, atol=1e-12)
    bad = a.copy()
    bad[..., 2, 2] = -1.0
    with pytest.raises(np.linalg.LinAlgError, match="positive definite"):
        f(bad)
    np.testing.assert_allclose(f(a), np.linalg.cholesky(a), rtol=1e-12, atol=1e-12)


def test_cholesky_writing_into_its_argument_matches_numpy():
    def cholesky2(A):
        A[:] = np.linalg.cholesky(A) + np.triu(A, k=1)
    a = _spd((20, 20))
    want, got = a.copy(), a.copy()
    cholesky2(want)
    f = nbxla.jit(cholesky2)
    f(got)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    got = a.copy()
    f(got)
    np.testing.assert_allclose(got, want, rtol=1e-12)
