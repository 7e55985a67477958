"""Nested rolled loops (polybench / npbench triangular BLAS kernels) with NumPy scalar
arguments.  A value the inner loop only reads must stay unchanged for the outer loop: before,
the inner while's output replaced it, the outer loop counted it as written, and a NumPy
scalar argument (``alpha = np.float64(1.5)``) failed as "assignment destination is
read-only (alpha)" (an unwritten array argument was written back).

Trip counts on both sides of the unroll threshold (``--unroll_max``, 4) for both loops.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.frontend_util import check, check_or_same_error, jit, quiet

RNG = np.random.default_rng(28)


def syrk(alpha, beta, C, A):
    for i in range(A.shape[0]):
        C[i, :i + 1] *= beta
        for k in range(A.shape[1]):
            C[i, :i + 1] += alpha * A[i, k] * A[:i + 1, k]


def syr2k(alpha, beta, C, A, B):
    for i in range(A.shape[0]):
        C[i, :i + 1] *= beta
        for k in range(A.shape[1]):
            C[i, :i + 1] += A[:i + 1, k] * alpha * B[i, k] + B[:i + 1, k] * alpha * A[i, k]


def symm(alpha, beta, C, A, B):
    temp2 = np.empty((C.shape[1],), dtype=C.dtype)
    C *= beta
    for i in range(C.shape[0]):
        for j in range(C.shape[1]):
            C[:i, j] += alpha * B[i, j] * A[i, :i]
            temp2[j] = B[:i, j] @ A[i, :i]
        C[i, :] += alpha * B[i, :] * A[i, i] + alpha * temp2


def symm_scalar(alpha, beta, C, A, B):
    """polybench's element loop: ``temp2`` a scalar accumulated in the innermost loop."""
    for i in range(C.shape[0]):
        for j in range(C.shape[1]):
            temp2 = 0.0
            for k in range(i):
                C[k, j] += alpha * B[i, j] * A[i, k]
                temp2 += B[k, j] * A[i, k]
            C[i, j] = beta * C[i, j] + alpha * B[i, j] * A[i, i] + alpha * temp2


SCALARS = [pytest.param(np.float64(1.5), np.float64(1.2), id="float64"),
           pytest.param(np.float32(1.5), np.float32(1.2), id="float32"),
           pytest.param(1.5, 1.2, id="python")]


@pytest.mark.parametrize("alpha,beta", SCALARS)
@pytest.mark.parametrize("n,m", [(0, 6), (1, 6), (4, 4), (5, 5), (12, 9)])
def test_rank_k_updates(alpha, beta, n, m):
    C = RNG.random((n, n))
    check(syrk, alpha, beta, C, RNG.random((n, m)))
    check(syr2k, alpha, beta, C, RNG.random((n, m)), RNG.random((n, m)))


@pytest.mark.parametrize("alpha,beta", SCALARS)
@pytest.mark.parametrize("m,n", [(1, 3), (4, 4), (5, 5), (9, 7)])
def test_symm(alpha, beta, m, n):
    args = RNG.random((m, n)), RNG.random((m, m)), RNG.random((m, n))
    check(symm, alpha, beta, *args)
    check(symm_scalar, alpha, beta, *args)


def test_arrays_only_read_in_nested_loops_are_not_written_back():
    """A read-only array argument read by a nested loop is no write destination."""
    A = RNG.random((6, 5))
    A.flags.writeable = False
    C = RNG.random((6, 6))
    want = C.copy()
    syrk(np.float64(1.5), np.float64(1.2), want, A)
    with quiet():
        jit(syrk)(np.float64(1.5), np.float64(1.2), C, A)
    np.testing.assert_allclose(C, want, rtol=1e-12)


# ---- a name only a traced branch binds, inside loops run more than once -----------------------

def gated_products(G, idx, S):
    """``if k - w >= 0: prod = ...`` on a rolled loop's index: ``prod`` is bound in one branch
    only.  The inner rolled loop runs once per step of the unrolled ``w`` loop; on the second
    run ``prod`` already holds the first run's one-branch value (npbench's scattering
    self-energies: the loops around it were unrolled for that, a 9 s first call)."""
    for k in range(G.shape[0]):
        for w in range(2):
            for a in range(idx.shape[0]):
                if k - w >= 0:
                    prod = G[k - w, idx[a]] @ G[k, a]
                    S[k, a] += prod
    return S


def reads_branch_name_after(G, idx, S):
    for k in range(G.shape[0]):
        for w in range(2):
            for a in range(idx.shape[0]):
                if k - w >= 0:
                    prod = G[k - w, idx[a]] @ G[k, a]
                    S[k, a] += prod
    return S + prod


@pytest.mark.parametrize("n_k,n_a", [(3, 5), (2, 6)])
def test_name_bound_in_one_branch_inside_repeated_loops(n_k, n_a):
    G = RNG.random((n_k, n_a, 3, 3))
    idx = RNG.integers(0, n_a, n_a).astype(np.int32)
    S = np.zeros((n_k, n_a, 3, 3))
    check(gated_products, G, idx, S)
    f = jit(gated_products)
    with quiet():
        f(G, idx, S.copy())
    decisions = f.last_compilation.loop_decisions
    lines = {line: how for line, how, _ in decisions}
    import inspect
    source, first = inspect.getsourcelines(gated_products)
    inner = first + next(k for k, line in enumerate(source) if "for a in" in line)
    assert lines[inner] == "rolled", decisions


def test_name_bound_in_one_branch_read_after_the_loops():
    # (the last value the branch bound, as in NumPy, or a clear refusal: never a wrong value)
    G = RNG.random((2, 4, 3, 3))
    idx = np.arange(4, dtype=np.int32)
    check_or_same_error(reads_branch_name_after, G, idx, np.zeros((2, 4, 3, 3)))


# ---- loop variables reused by later loops (code written loop by loop: i, j, k every time) -----

def two_products(A, B, C):
    """3mm's form: the second nest's inner ``for k`` rebinds the ``k`` the first left an int.
    Its value on entry is never read, so the nest rolls (before: "the body changes `k`, a
    Python value", unrolled, and past the unroll budget refused)."""
    n, m = A.shape
    E = np.zeros((n, n))
    G = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            for k in range(m):
                E[i, j] += A[i, k] * B[k, j]
    for i in range(n):
        for j in range(n):
            for k in range(n):
                G[i, j] += E[i, k] * C[k, j]
    return G, k + j           # (the last values, as in Python)


def reads_previous_k(A):
    """``k`` read before the inner loop binds it: its value on entry is live (the last step's
    inner index), not dead."""
    k = 0
    acc = np.zeros(A.shape[0])
    for i in range(A.shape[0]):
        acc[i] = A[i, k]
        for k in range(A.shape[1] - i % 2):
            acc[i] += A[i, k]
    return acc


def reads_k_in_else(A):
    k = 1
    acc = np.zeros(A.shape[0])
    for i in range(A.shape[0]):
        for k in range(i % 3):
            acc[i] += A[i, k]
        else:
            acc[i] += k
    return acc


@pytest.mark.parametrize("n,m", [(3, 2), (12, 9)])
def test_reused_inner_loop_variable_rolls(n, m):
    A, B, C = RNG.random((n, m)), RNG.random((m, n)), RNG.random((n, n))
    check(two_products, A, B, C)
    if n <= 4:          # (short loops unroll by choice)
        return
    f = jit(two_products)
    with quiet():
        f(A, B, C)
    import inspect
    source, first = inspect.getsourcelines(two_products)
    second_i = first + [k for k, line in enumerate(source) if "for i in" in line][1]
    second_j = first + [k for k, line in enumerate(source) if "for j in" in line][1]
    decisions = f.last_compilation.loop_decisions
    # (before: the first step of the second i loop was run in Python, its j loop unrolled)
    assert {how for line, how, _ in decisions if line in (second_i, second_j)} == {"rolled"}, decisions


@pytest.mark.parametrize("n", [3, 7])
def test_inner_loop_variable_read_before_it_is_bound(n):
    A = RNG.random((n, 6))
    check_or_same_error(reads_previous_k, A)
    check_or_same_error(reads_k_in_else, A)
