"""A row kernel's matrix and the ``vector @ matrix`` product of it in one blocked pass
(``runtime/update_gemv.py``): gemver-shaped programs against eager NumPy, with rank-1..3
updates, f32 and f64, non-square matrices whose rows do not divide into whole blocks, in place
and not, on both sides of ``MIN_MATRIX_BYTES``; programs whose vector needs the matrix first
keep two passes."""

import numpy as np
import pytest

import nbxla
from nbxla.runtime.update_gemv import BLOCK_BYTES, MIN_MATRIX_BYTES


def update_then_products(A, U, V, y, x, w):
    A += U @ V
    x += 1.2 * y @ A
    w += 1.5 * A @ x


def fresh_update_then_product(A, u1, v1, u2, v2, y):
    B = A + np.outer(u1, v1) + np.outer(u2, v2)
    return B, y @ B


def fresh_update_then_transposed_product(A, u1, v1, u2, v2, y):
    B = A + np.outer(u1, v1) + np.outer(u2, v2)
    return B, B.T @ y


def vector_needs_the_matrix(A, u, v):
    B = A + np.outer(u, v)
    return B.sum(axis=1) @ B


def _execution(f, *args):
    return f.get_compiler_ir(*args)(stage="execution")


def _shape(rows_bytes: int, cols: int, dtype) -> tuple:
    return (max(2, rows_bytes // (cols * np.dtype(dtype).itemsize)), cols)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("big", [True, False])
def test_in_place_update_then_products(dtype, k, big):
    cols = 501
    m, n = _shape(int(MIN_MATRIX_BYTES * 1.3) if big else MIN_MATRIX_BYTES // 3, cols, dtype)
    assert (m % (BLOCK_BYTES // (n * np.dtype(dtype).itemsize))) != 0      # a last, shorter block
    g = np.random.default_rng(k)
    want = [g.uniform(-1, 1, size=s).astype(dtype) for s in ((m, n), (m, k), (k, n), (m,), (n,), (m,))]
    got = [a.copy() for a in want]
    f = nbxla.jit(update_then_products)
    f(*got)
    update_then_products(*want)
    tol = 2e-4 if dtype == np.float32 else 1e-10
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol * 10)
    assert ("block by block" in _execution(f, *[a.copy() for a in want])) == big


@pytest.mark.parametrize("program", [fresh_update_then_product, fresh_update_then_transposed_product])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_update_not_in_place(dtype, program):
    n = 650
    m = MIN_MATRIX_BYTES * 5 // 4 // (n * np.dtype(dtype).itemsize)
    g = np.random.default_rng(5)
    A = g.uniform(size=(m, n)).astype(dtype)
    vecs = [g.uniform(size=s).astype(dtype) for s in (m, n, m, n, m)]
    f = nbxla.jit(program)
    got, want = f(A, *vecs), program(A, *vecs)
    tol = 2e-4 if dtype == np.float32 else 1e-10
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)
    assert "block by block" in _execution(f, A, *vecs)


def test_a_vector_made_from_the_matrix_keeps_two_passes():
    g = np.random.default_rng(6)
    m = MIN_MATRIX_BYTES * 5 // 4 // (600 * 8)
    A, u, v = g.uniform(size=(m, 600)), g.uniform(size=m), g.uniform(size=600)
    f = nbxla.jit(vector_needs_the_matrix)
    np.testing.assert_allclose(f(A, u, v), vector_needs_the_matrix(A, u, v), rtol=1e-10)
    assert "block by block" not in _execution(f, A, u, v)
