"""Kernel-style NumPy programs of the kind people write in notebooks, under ``nbxla.jit``,
against the same code run eagerly by NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import nbxla
from nbxla.examples import (black_scholes, layernorm, logsumexp, lstm_cell, mlp_forward, mlp_train_step,
                            softmax)
from tests.frontend_util import UNROLL_FLAGS, check, jit, use_flags

RNG = np.random.default_rng(1234)


def rand(*shape, dtype=np.float64):
    return RNG.standard_normal(shape).astype(dtype)


# ---- classic ML building blocks ----------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_logsumexp_layernorm(dtype):
    x = rand(4, 7, dtype=dtype) * 5
    check(softmax, x, transcendental=True)
    check(logsumexp, x, transcendental=True)
    check(lambda a: logsumexp(a, axis=0), x, transcendental=True)
    check(layernorm, x, rand(7, dtype=dtype), rand(7, dtype=dtype), transcendental=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_mlp_forward_and_backward(dtype):
    x = rand(8, 5, dtype=dtype)
    W1, b1, W2, b2 = rand(5, 6, dtype=dtype), rand(6, dtype=dtype), rand(6, 3, dtype=dtype), rand(3, dtype=dtype)
    labels = np.arange(8) % 3
    y = (labels[:, None] == np.arange(3)).astype(dtype)
    check(mlp_forward, x, W1, b1, W2, b2, transcendental=True)
    check(mlp_train_step, x, y, W1, b1, W2, b2, 0.1, transcendental=True)


def test_lstm_cell():
    B, D, H = 3, 4, 5
    check(lstm_cell, rand(B, D), rand(B, H), rand(B, H), rand(D, 4 * H), rand(H, 4 * H), rand(4 * H),
          transcendental=True)
    check(lstm_cell, *(a.astype(np.float32) for a in
                       (rand(B, D), rand(B, H), rand(B, H), rand(D, 4 * H), rand(H, 4 * H), rand(4 * H))),
          transcendental=True)


def attention(q, k, v):
    scores = np.einsum("bqd,bkd->bqk", q, k) / np.sqrt(q.shape[-1])
    return np.einsum("bqk,bkd->bqd", softmax(scores), v)


def test_attention():
    check(attention, rand(2, 3, 4), rand(2, 5, 4), rand(2, 5, 4), transcendental=True)


# ---- stencils ----------------------------------------------------------------------------------

def jacobi_step(u):
    new = u.copy()
    new[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
    return new


def heat_in_place(u, alpha, steps):
    for _ in range(steps):
        u[1:-1] += alpha * (u[:-2] - 2 * u[1:-1] + u[2:])


def gray_scott(U, V, Du=0.16, Dv=0.08, F=0.035, k=0.065, steps=3):
    for _ in range(steps):
        u, v = U[1:-1, 1:-1], V[1:-1, 1:-1]
        Lu = U[:-2, 1:-1] + U[2:, 1:-1] + U[1:-1, :-2] + U[1:-1, 2:] - 4 * u
        Lv = V[:-2, 1:-1] + V[2:, 1:-1] + V[1:-1, :-2] + V[1:-1, 2:] - 4 * v
        uvv = u * v * v
        u += Du * Lu - uvv + F * (1 - u)        # writes through the views into U and V
        v += Dv * Lv + uvv - (F + k) * v
    return U.sum(), V.sum()


def periodic_laplacian(u):
    return (np.roll(u, 1, 0) + np.roll(u, -1, 0) + np.roll(u, 1, 1) + np.roll(u, -1, 1) - 4 * u)


@pytest.mark.parametrize("flags", UNROLL_FLAGS)      # (their time loops are short: unrolled by default)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_stencils(dtype, flags, monkeypatch):
    use_flags(monkeypatch, flags)
    u = rand(6, 7, dtype=dtype)
    check(jacobi_step, u)
    check(heat_in_place, rand(10, dtype=dtype), 0.1, 4)
    U = np.ones((8, 8), dtype)
    V = np.zeros((8, 8), dtype)
    V[3:5, 3:5] = 0.5
    check(gray_scott, U, V)
    check(periodic_laplacian, u)
    check(lambda a: np.pad(a, 1, mode="wrap")[1:-1, 1:-1] - a, u)


# ---- numerics ----------------------------------------------------------------------------------

def pairwise_distances(X, Y):
    sq = (X ** 2).sum(axis=1)[:, None] + (Y ** 2).sum(axis=1)[None, :] - 2 * X @ Y.T
    return np.sqrt(np.maximum(sq, 0.0))


def pairwise_distances_broadcast(X, Y):
    return np.sqrt(((X[:, None, :] - Y[None, :, :]) ** 2).sum(-1))


def test_pairwise_distances():
    X, Y = rand(5, 3), rand(4, 3)
    check(pairwise_distances, X, Y, rtol=1e-9)
    check(pairwise_distances_broadcast, X, Y)
    check(lambda a: np.linalg.norm(a[:, None] - a[None], axis=-1), X, transcendental=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_black_scholes(dtype):
    n = 16
    S = (RNG.uniform(10, 100, n)).astype(dtype)
    K = (RNG.uniform(10, 100, n)).astype(dtype)
    T = (RNG.uniform(0.1, 2, n)).astype(dtype)
    call, put = check(black_scholes, S, K, T, 0.02, 0.3, transcendental=True)
    assert call.dtype == put.dtype == dtype


def kmeans_step(X, centers):
    d = ((X[:, None, :] - centers[None, :, :]) ** 2).sum(-1)
    assign = np.argmin(d, axis=1)
    onehot = (assign[:, None] == np.arange(centers.shape[0])[None, :]).astype(X.dtype)
    counts = onehot.sum(axis=0)
    new_centers = (onehot.T @ X) / np.maximum(counts, 1)[:, None]
    inertia = np.take_along_axis(d, assign[:, None], axis=1).sum()
    return assign, new_centers, inertia


def test_kmeans_step():
    X = np.concatenate([rand(6, 2) + 5, rand(6, 2) - 5, rand(4, 2)])
    check(kmeans_step, X, X[[0, 6, 12]].copy())
    check(kmeans_step, X.astype(np.float32), X[[0, 6, 12]].astype(np.float32))


def cumulative_stats(x):
    c = np.cumsum(x, axis=0)
    running_mean = c / np.arange(1, x.shape[0] + 1)[:, None]
    return c, running_mean, np.cumprod(1 + 0.01 * x, axis=1), np.diff(c, axis=0), x.cumsum()


def test_cumulative_sums():
    check(cumulative_stats, rand(6, 3))
    check(cumulative_stats, np.arange(12, dtype=np.int32).reshape(6, 2))


def test_polynomial_and_rounding_kernel():
    def f(x, coeffs):
        acc = np.zeros_like(x)
        for c in coeffs:                   # Horner with Python-constant coefficients
            acc = acc * x + c
        return np.round(acc, 2), np.clip(acc, -1, 1), np.sort(acc)[::-1]
    check(f, rand(9), (0.5, -1.0, 2.0, 0.25))


def test_normalize_rows_in_place():
    def f(A):
        A /= np.linalg.norm(A, axis=1, keepdims=True)
        A[np.isnan(A)] = 0.0            # a traced mask, one value for all: a select

    def g(A):                           # the same with np.where
        A /= np.linalg.norm(A, axis=1, keepdims=True)
        A[:] = np.where(np.isfinite(A), A, 0.0)
    for fn in (f, g):
        check(fn, np.vstack([rand(3, 4), np.zeros((1, 4))]), transcendental=True)


# ---- kernels that need unsupported features fail with the documented error ------------------------

def dedupe_mean(x):
    return np.unique(x).mean()


def positive_mean(x):
    return x[x > 0].mean()


def data_dependent_loop(x):
    while x.max() > 1:
        x = x / 2
    return x


def test_unsupported_kernels_fail_clearly():
    with pytest.raises(nbxla.NotCompilableError, match="np.unique cannot be compiled"):
        jit(dedupe_mean)(rand(5))
    check(positive_mean, rand(5) - 0.5)               # a selection reduced: compiles
    with pytest.raises(nbxla.NotCompilableError, match="boolean-mask indexing"):
        jit(lambda x: x[x > 0][:2].mean())(rand(5))
    check(data_dependent_loop, rand(5) * 10)          # a while on array values compiles
    # ...and the fixed-shape rewrites the messages suggest compile fine:
    check(lambda x: np.where(x > 0, x, 0).sum() / np.maximum((x > 0).sum(), 1), rand(5))


def test_random_draws_inside_a_jit_function_are_refused():
    """A generator call would run once, at trace time, and be frozen into the program."""
    import nbxla

    def noisy(x):
        return x + np.random.rand(*x.shape)

    with pytest.raises(nbxla.NotCompilableError, match="np.random has hidden state") as info:
        nbxla.jit(noisy)(np.ones(3))
    assert "pass them in as arguments" in str(info.value)
    assert "np.random.rand(*x.shape)" in str(info.value)


RANDOM_INPUTS = np.random.default_rng(7)


def test_random_generators_in_a_decorator_are_not_draws():
    """Decorators and defaults run once, at definition: only the body is checked."""
    def register(make_inputs):
        return lambda fn: fn

    @register(lambda: RANDOM_INPUTS.random(3))
    def f(x, scale=RANDOM_INPUTS.random()):
        return x * 2
    check(f, rand(3))
