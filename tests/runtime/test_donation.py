"""jit's in-place argument updates written straight into the caller's array (donation,
``runtime/donation.py``): gemver-shaped programs -- a rank-k update of an argument, then
products with the updated matrix -- against eager NumPy, on both sides of the size threshold,
with the caller's arrays overlapping, and under the profiler (which must not touch them)."""

import numpy as np
import pytest

import nbxla
from nbxla.api import DONATE_MIN_BYTES


def rank_k_then_products(A, U, V, y, x, w):
    A += U @ V                      # a rank-k update, in place
    x += 1.2 * y @ A                # a vector-matrix product of the updated matrix
    w += 1.5 * A @ x


def outer_pair_update(A, u1, v1, u2, v2, y):
    A += np.outer(u1, v1) + np.outer(u2, v2)
    return y @ A.T                  # a transposed use of the updated matrix


def _inputs(m, n, k, dtype, seed=0):
    g = np.random.default_rng(seed)
    return [g.uniform(-1, 1, size=s).astype(dtype) for s in ((m, n), (m, k), (k, n), (m,), (n,), (m,))]


def _donated(f, args):
    return f._lookup(tuple(args), {})[0].donated


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("m,n,k", [(300, 257, 1), (257, 300, 3), (190, 211, 2), (16, 24, 2)])
def test_rank_k_update_in_place_matches_numpy(dtype, m, n, k):
    big = m * n * np.dtype(dtype).itemsize >= DONATE_MIN_BYTES
    f = nbxla.jit(rank_k_then_products)
    want = _inputs(m, n, k, dtype)
    got = [a.copy() for a in want]
    A_before = got[0]
    rank_k_then_products(*want)
    assert f(*got) is None
    tol = 1e-4 if dtype == np.float32 else 1e-10
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol * 100)
    assert got[0] is A_before
    # (both sides of the threshold: large updates are written into A itself)
    assert _donated(f, [a.copy() for a in want]) == ((0,) if big else ())


def test_overlapping_arguments_get_the_eager_result():
    # u1 is a row of A: the update must read all of u1 before any of A is overwritten.
    g = np.random.default_rng(1)
    n = 256
    A = g.uniform(size=(n, n))
    v1, u2, v2, y = (g.uniform(size=n) for _ in range(4))
    f = nbxla.jit(outer_pair_update)
    assert _donated(f, [A.copy(), A[1].copy(), v1, u2, v2, y]) == (0,)
    want_A = A.copy()
    want = outer_pair_update(want_A, want_A[1], v1, u2, v2, y)
    got = f(A, A[1], v1, u2, v2, y)
    np.testing.assert_allclose(A, want_A, rtol=1e-12)
    np.testing.assert_allclose(got, want, rtol=1e-10)


def test_update_not_in_place_is_unchanged():
    def gemver(A, u1, v1, u2, v2, y):
        B = A + np.outer(u1, v1) + np.outer(u2, v2)
        return B, y @ B
    g = np.random.default_rng(2)
    A = g.uniform(size=(300, 280))
    vecs = [g.uniform(size=s) for s in (300, 280, 300, 280, 300)]
    A0 = A.copy()
    got = nbxla.jit(gemver)(A, *vecs)
    want = gemver(A0, *vecs)
    np.testing.assert_array_equal(A, A0)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-10)


def test_profile_leaves_the_callers_arrays_alone():
    f = nbxla.jit(rank_k_then_products)
    args = _inputs(300, 256, 2, np.float64)
    f(*[a.copy() for a in args])
    before = [a.copy() for a in args]
    nbxla.profile(f)(*args)
    for a, b in zip(args, before):
        np.testing.assert_array_equal(a, b)


def gemv_into_an_argument_read_before(A, r, v):
    s = r @ A                   # a GEMV reading A ...
    t = r.sum() * 2             # ... r read again ...
    r[:] = A @ v                # ... and the other GEMV of A, written into r (donated)
    return s, t


def test_a_gemv_pair_does_not_write_a_donated_argument_early():
    # The two GEMVs of A would run as one pass at the first one's step (dual_gemv): writing
    # r's new value there would change what r.sum() reads.
    m, n = 40000, 8
    g = np.random.default_rng(3)
    A, r, v = g.uniform(size=(m, n)), g.uniform(size=m), g.uniform(size=n)
    f = nbxla.jit(gemv_into_an_argument_read_before)
    assert _donated(f, [A, r.copy(), v]) == (1,)
    want_r = r.copy()
    want = gemv_into_an_argument_read_before(A, want_r, v)
    got = f(A, r, v)
    np.testing.assert_allclose(r, want_r, rtol=1e-12)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-10)


def test_a_non_contiguous_argument_still_gets_its_update():
    # (the run writes into its contiguous copy of A; the write-back copies it into A)
    f = nbxla.jit(rank_k_then_products)
    want = _inputs(300, 256, 2, np.float64)
    got = [np.asfortranarray(a) for a in want]
    got[0] = np.asfortranarray(got[0])
    A_before = got[0]
    f(*got)
    rank_k_then_products(*want)
    assert got[0] is A_before and not A_before.flags.c_contiguous
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-9)


def update_and_return_it(A, u, v):
    B = A + np.outer(u, v)
    A[:] = B
    return B


def test_a_returned_update_is_not_the_argument_itself():
    # NumPy returns B, an array of its own: writing into it later must not change A.
    g = np.random.default_rng(4)
    A, u, v = g.uniform(size=(300, 256)), g.uniform(size=300), g.uniform(size=256)
    want_A = A.copy()
    want = update_and_return_it(want_A, u, v)
    f = nbxla.jit(update_and_return_it)
    got = f(A, u, v)
    assert not np.shares_memory(got, A)
    assert _donated(f, [A.copy(), u, v]) == ()      # (it would only be copied out again)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    np.testing.assert_allclose(A, want_A, rtol=1e-12)
