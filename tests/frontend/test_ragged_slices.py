"""Slices whose bounds are read from the data (compressed-sparse-row loops), reduced at their
true length (frontend/ragged.py); eager NumPy is the oracle."""

import warnings

import numpy as np
import pytest

import nbxla
from nbxla.errors import NotCompilableError
from nbxla.examples import spmv        # (npbench's form)


def csr(rows, cols, seed=0, density=0.05, dtype=np.float64, index=np.uint32, empty_rows=True):
    rng = np.random.default_rng(seed)
    dense = rng.random((rows, cols)) * (rng.random((rows, cols)) < density)
    if empty_rows and rows > 2:
        dense[1] = 0
        dense[-1] = 0
    indptr = np.concatenate([[0], np.cumsum((dense != 0).sum(axis=1))]).astype(index)
    indices = np.nonzero(dense)[1].astype(index)
    data = dense[dense != 0].astype(dtype)
    x = rng.standard_normal(cols).astype(dtype)
    return indptr, indices, data, x


def spmv_sum(A_row, A_col, A_val, x):
    y = np.zeros(A_row.size - 1, A_val.dtype)
    for i in range(A_row.size - 1):
        lo, hi = A_row[i], A_row[i + 1]
        y[i] = np.sum(A_val[lo:hi] * x[A_col[lo:hi]])
    return y


def spmv_dot(A_row, A_col, A_val, x):
    y = np.zeros(A_row.size - 1, A_val.dtype)
    for i in range(A_row.size - 1):
        lo, hi = A_row[i], A_row[i + 1]
        y[i] = np.dot(A_val[lo:hi], x[A_col[lo:hi]]) + A_val[lo:hi].dot(x[A_col[lo:hi]])
    return y


def row_stats(A_row, A_col, A_val, x):
    s = np.zeros(A_row.size - 1, A_val.dtype)
    c = np.zeros(A_row.size - 1, np.int64)
    for i in range(A_row.size - 1):
        vals = A_val[A_row[i]:A_row[i + 1]]
        s[i] = (np.abs(vals) * 2.0 + 1.0).sum() - (x[A_col[A_row[i]:A_row[i + 1]]] ** 2).sum()
        c[i] = A_col[A_row[i]:A_row[i + 1]].sum()
    return s, c


@pytest.mark.parametrize("fn", [spmv, spmv_sum, spmv_dot, row_stats], ids=lambda f: f.__name__)
@pytest.mark.parametrize("rows", [0, 1, 3, 40, 300])     # (0 steps; unrolled; rolled)
def test_csr_loops_equal_numpy(fn, rows):
    args = csr(rows, 37, seed=rows)
    want = fn(*args)
    got = nbxla.jit(fn)(*args)
    for w, g in zip(want if isinstance(want, tuple) else (want,), got if isinstance(got, tuple) else (got,)):
        assert g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
@pytest.mark.parametrize("index", [np.uint32, np.int32, np.int64])
def test_csr_dtypes(dtype, index):
    args = csr(60, 50, seed=3, density=0.2, dtype=dtype, index=index)
    np.testing.assert_allclose(nbxla.jit(spmv)(*args), spmv(*args), rtol=1e-5 if dtype == np.float32 else 1e-12)


def test_bounds_follow_numpy_slicing():
    """Negative bounds count from the end, bounds past the end are clipped, stop <= start is
    empty: as NumPy slices them."""
    def f(starts, stops, v):
        out = np.zeros(starts.size)
        for i in range(starts.size):
            out[i] = v[starts[i]:stops[i]].sum()
        return out
    v = np.arange(1.0, 11.0)
    starts = np.array([0, -3, 2, 8, 5, -20, 4, 0], np.int64)
    stops = np.array([3, 10, 2, 40, 1, -15, -1, -8], np.int64)
    np.testing.assert_array_equal(nbxla.jit(f)(starts, stops, v), f(starts, stops, v))


def test_negative_indices_wrap():
    args = list(csr(30, 20, seed=5, index=np.int64))
    args[1] = args[1] - 20          # every column index negative: NumPy counts from the end
    np.testing.assert_allclose(nbxla.jit(spmv)(*args), spmv(*args), rtol=1e-12)


@pytest.mark.parametrize("bad", [37, -38])
def test_out_of_range_index_raises_like_numpy(bad):
    args = list(csr(30, 37, seed=7, density=0.3, index=np.int64))
    args[1] = args[1].copy()
    args[1][len(args[1]) // 2] = bad
    with pytest.raises(IndexError):
        spmv(*args)
    with pytest.raises(IndexError, match="out of bounds"):
        nbxla.jit(spmv)(*args)


def test_what_cannot_be_compiled_is_refused_with_the_line():
    def length(A_row, v):
        out = np.zeros(A_row.size - 1)
        for i in range(A_row.size - 1):
            out[i] = len(v[A_row[i]:A_row[i + 1]])
        return out

    def other_bounds(A_row, v):
        out = np.zeros(A_row.size - 1)
        for i in range(A_row.size - 1):
            out[i] = v[A_row[i]:A_row[i + 1]] @ v[A_row[i]:A_row[i + 1] + 1]
        return out

    def returned(A_row, v):
        return v[A_row[1]:A_row[2]]

    def stored(A_row, v):
        out = np.zeros(3)
        out[:] = v[A_row[1]:A_row[2]]
        return out

    A_row = np.array([0, 2, 3, 3, 6, 8], np.int64)
    v = np.arange(9.0)
    for fn in (length, other_bounds, returned, stored):
        with pytest.raises(NotCompilableError, match="bounds are read from the data|test_ragged_slices"):
            nbxla.jit(fn)(A_row, v)


def test_mean_and_casts():
    def f(A_row, v):
        out = np.zeros(A_row.size - 1, np.float32)
        for i in range(A_row.size - 1):
            a = v[A_row[i]:A_row[i + 1]].astype(np.float32).mean()
            b = np.mean(v[A_row[i]:A_row[i + 1]])
            assert (a.dtype, b.dtype) == (np.float32, np.float64)
            out[i] = a + b
        return out
    A_row = np.array([0, 2, 3, 6, 6, 9, 12, 12, 15, 17], np.int32)     # (with empty rows: nan, as NumPy)
    v = np.arange(17, dtype=np.int16) * 3 - 20
    with np.errstate(all="ignore"), pytest.warns(RuntimeWarning):
        want = f(A_row, v)
    got = nbxla.jit(f)(A_row, v)
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-6)


# ---- items that are rows: a sparse matrix times a dense one, sums of row segments ----

def spmm(A_row, A_col, A_val, X):
    Y = np.zeros((A_row.size - 1, X.shape[1]), X.dtype)
    for i in range(A_row.size - 1):
        lo, hi = A_row[i], A_row[i + 1]
        Y[i] = A_val[lo:hi] @ X[A_col[lo:hi]]
    return Y


def neighbour_means(A_row, A_col, A_val, X):
    """A graph layer over CSR neighbours: the mean of each node's neighbours' features, their
    weighted sum through a weight matrix, and a scaled segment sum of X's own rows."""
    W = X[:3].T                                   # (features, 3)
    M = np.zeros((A_row.size - 1, X.shape[1]), X.dtype)
    S = np.zeros((A_row.size - 1, 3), X.dtype)
    T = np.zeros(A_row.size - 1, X.dtype)
    for i in range(A_row.size - 1):
        lo, hi = A_row[i], A_row[i + 1]
        M[i] = X[A_col[lo:hi]].mean(axis=0)
        S[i] = np.sum((X[A_col[lo:hi]] * 0.5 + X[0]) @ W, axis=0)
        T[i] = np.abs(X[lo:hi, :]).sum()
    return M, S, T


@pytest.mark.parametrize("fn", [spmm, neighbour_means], ids=lambda f: f.__name__)
@pytest.mark.parametrize("rows", [1, 3, 40, 200])
def test_row_items_equal_numpy(fn, rows):
    indptr, indices, data, _ = csr(rows, 30, seed=rows, density=0.1)
    X = np.random.default_rng(rows).standard_normal((30, 5))
    indptr = np.minimum(indptr, 30).astype(indptr.dtype)    # (neighbour_means slices X's rows too)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")           # (the mean of an empty row: nan, with a warning)
        want = fn(indptr, indices, data, X)
    got = nbxla.jit(fn)(indptr, indices, data, X)
    for w, g in zip(want if isinstance(want, tuple) else (want,), got if isinstance(got, tuple) else (got,)):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
