"""Partial pivoting in a rolled loop (LU's ``p = i + np.argmax(np.abs(A[i:, i]))`` then a row
swap ``A[[i, p]] = A[[p, i]]``): a list index holding traced values, ``argmax``/``argmin`` of a
slice of dynamic length, and a traced index checked against its axis inside the loop (the loop
carries the check, NumPy's IndexError comes after the run).  Oracle: NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import nbxla
from nbxla.examples import lu_pivot
from nbxla.runtime.cache import CompilationCache


@pytest.mark.parametrize("n", [5, 40])        # (unrolled, rolled)
def test_lu_with_partial_pivoting(n):
    A = np.random.default_rng(n).standard_normal((n, n))
    want_A, got_A = A.copy(), A.copy()
    want = lu_pivot(want_A)
    got = nbxla.jit(lu_pivot, cache=CompilationCache())(got_A)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(got_A, want_A, rtol=1e-10, atol=1e-12)


def tail_argmax(x):
    """The position of the maximum of each tail x[i:] (relative to i)."""
    out = np.zeros(x.shape[0], dtype=np.int64)
    for i in range(x.shape[0]):
        out[i] = np.argmax(x[i:])
    return out


def tail_argmin(x):
    out = np.zeros(x.shape[0], dtype=np.int64)
    for i in range(x.shape[0]):
        out[i] = np.argmin(x[i:])
    return out


@pytest.mark.parametrize("fn", [tail_argmax, tail_argmin])
@pytest.mark.parametrize("values", [
    np.array([3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0, 5.0, 3.0] * 4),
    np.array([-np.inf] * 20 + [np.inf] * 20),                   # ties with the masked-out fill
    np.array([1.0, np.nan, 2.0, 0.5] * 10),                       # NaN: the first one wins
    np.array([7, -3, 7, 2, -3, 0, 7, -3] * 5, dtype=np.int32),
])
def test_argmax_and_argmin_of_a_tail_in_a_rolled_loop(values, fn):
    f = nbxla.jit(fn, cache=CompilationCache())
    np.testing.assert_array_equal(f(values), fn(values))
    assert " while(" in f.last_compilation.stage("optimized_hlo")


def swap_rows_at(A, rows):
    """Swap row i with row rows[i] (read from the data) for each i, in a loop."""
    for i in range(A.shape[0]):
        r = rows[i]
        A[[i, r]] = A[[r, i]]
    return A


def test_a_traced_index_in_a_rolled_loop_is_checked_after_the_run():
    A = np.arange(60.0).reshape(30, 2)
    rows = np.random.default_rng(0).integers(0, 30, 30)
    f = nbxla.jit(swap_rows_at, cache=CompilationCache())
    np.testing.assert_array_equal(f(A.copy(), rows), swap_rows_at(A.copy(), rows))
    assert " while(" in f.last_compilation.stage("optimized_hlo")
    bad = rows.copy()
    bad[17] = 30                         # one past the end, in one iteration
    with pytest.raises(IndexError, match="index 30 is out of bounds for axis 0 with size 30"):
        swap_rows_at(A.copy(), bad)
    with pytest.raises(IndexError, match="index 30 is out of bounds for axis 0 with size 30"):
        f(A.copy(), bad)
    bad[17] = -31
    with pytest.raises(IndexError):
        f(A.copy(), bad)
    ok = rows.copy()
    ok[17] = -30                         # (negative indices wrap, as in NumPy)
    np.testing.assert_array_equal(f(A.copy(), ok), swap_rows_at(A.copy(), ok))


def test_a_list_index_of_traced_values_reads_and_writes_as_numpy():
    def pick(x, i, j):
        y = x[[i, j, i]]
        x[[j, i]] = x[[i, j]] * 2
        return y, x
    x = np.arange(8.0)
    f = nbxla.jit(pick, cache=CompilationCache())
    i, j = np.int64(2), np.int64(5)
    for g, w in zip(f(x.copy(), i, j), pick(x.copy(), i, j)):
        np.testing.assert_array_equal(g, w)
