"""Kernels in the style of public NumPy benchmark collections (npbench, polybench ports, the
Python HPC kernels), each run three ways: eagerly by NumPy (the oracle), through
``@nbxla.jit`` on the default CPU backend, and as a ``%%xla`` cell in a real IPython shell.

A kernel is a plain function.  Its cell is the function's body: the parameters are names in
the namespace (arrays are inputs, Python values compile-time constants) and a final
``return X`` becomes ``result = X``.  Results, every name the cell binds, and the arguments
afterwards (in-place writes) must agree with NumPy: same type, dtype and shape, values within
``nbxla.testing.compare_arrays``'s per-dtype tolerance (looser per kernel where it sums long).

Kernels that need what cannot be compiled (data-dependent shapes or control flow, functions
nbxla lacks) must fail with the documented error, naming the construct and the line.
"""

from __future__ import annotations

import ast
import copy
import inspect
import re
import textwrap
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest

import nbxla
from nbxla import examples
from nbxla.testing import compare_arrays
from tests.frontend_util import quiet, use_flags, with_unroll_flags

from tests.ipython_util import run

RNG = np.random.default_rng(20240611)


def rand(*shape, dtype=np.float64):
    return RNG.random(shape).astype(dtype)


def randn(*shape, dtype=np.float64):
    return RNG.standard_normal(shape).astype(dtype)


@dataclass
class Case:
    fn: Callable
    make_args: Callable[[], dict]         # fresh arguments by parameter name
    rtol: float | None = None             # None: compare_arrays's default for the dtype
    error: tuple | None = None            # (exception type, message regex, text of the failing line)
    xfail: str | None = None              # a known bug outside the frontend (strict: it must fail)
    # NumPy's Python int results come back as NumPy integers (of the same value): a Python int
    # chosen by an `if` on array values is traced, so it cannot stay a Python int
    traced_int: bool = False


CASES: dict[str, Case] = {}


def kernel(make_args, *, name=None, rtol=None, error=None, xfail=None, traced_int=False):
    def register(fn):
        CASES[name or fn.__name__] = Case(fn, make_args, rtol, error, xfail, traced_int)
        return fn
    return register


# ---- elementwise math ----------------------------------------------------------------------

def _angles(dtype):
    return lambda: {k: rand(64, dtype=dtype) for k in ("theta_1", "phi_1", "theta_2", "phi_2")}


@kernel(_angles(np.float32), name="arc_distance_f32", rtol=1e-4)
@kernel(_angles(np.float64), rtol=1e-10)
def arc_distance(theta_1, phi_1, theta_2, phi_2):
    temp = (np.sin((theta_2 - theta_1) / 2) ** 2
            + np.cos(theta_1) * np.cos(theta_2) * np.sin((phi_2 - phi_1) / 2) ** 2)
    distance_matrix = 2 * np.arctan2(np.sqrt(temp), np.sqrt(1 - temp))
    return distance_matrix


@kernel(lambda: {"a": rand(12, 12)}, rtol=1e-10)
def go_fast(a):
    trace = 0.0
    for i in range(a.shape[0]):
        trace += np.tanh(a[i, i])
    return a + trace


def erf_as(x):
    """Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7)."""
    s = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = ((((1.061405429 * t - 1.453152027) * t + 1.421413741) * t - 0.284496736) * t
            + 0.254829592) * t
    return s * (1.0 - poly * np.exp(-a * a))


def _options(dtype):
    return lambda: {"price": (RNG.uniform(10, 100, 128)).astype(dtype),
                    "strike": (RNG.uniform(10, 100, 128)).astype(dtype),
                    "t": (RNG.uniform(0.1, 2.0, 128)).astype(dtype), "rate": 0.02, "vol": 0.3}


@kernel(_options(np.float64), rtol=1e-10)
@kernel(_options(np.float32), name="black_scholes_f32", rtol=1e-4)
def black_scholes(price, strike, t, rate, vol):
    sqrt_t = np.sqrt(t)
    d1 = (np.log(price / strike) + (rate + 0.5 * vol * vol) * t) / (vol * sqrt_t)
    d2 = d1 - vol * sqrt_t
    cdf1 = 0.5 + 0.5 * erf_as(d1 / np.sqrt(2.0))       # np.sqrt(2.0) is a float64 scalar:
    cdf2 = 0.5 + 0.5 * erf_as(d2 / np.sqrt(2.0))       # float32 inputs promote, as in NumPy
    discount = np.exp(-rate * t)
    call = price * cdf1 - strike * discount * cdf2
    put = call - price + strike * discount
    return call, put


@kernel(lambda: {"array_1": RNG.integers(0, 20, (16, 16)), "array_2": RNG.integers(0, 20, (16, 16)),
                 "a": 4, "b": 3, "c": 9})
def compute(array_1, array_2, a, b, c):
    return np.clip(array_1, 2, 10) * a + array_2 * b + c


@kernel(lambda: {"x": RNG.integers(0, 2**32, 64, dtype=np.uint32)})
def popcount32(x):
    x = x - ((x >> 1) & 0x55555555)
    x = (x & 0x33333333) + ((x >> 2) & 0x33333333)
    x = (x + (x >> 4)) & 0x0F0F0F0F
    return (x * 0x01010101) >> 24            # wraps around in uint32, as in NumPy


@kernel(lambda: {"n": RNG.integers(1, 40, 32).astype(np.int64), "steps": 8})
def collatz_fixed(n, steps):
    count = np.zeros_like(n)
    for _ in range(steps):
        done = n == 1
        n = np.where(done, n, np.where(n % 2 == 0, n // 2, 3 * n + 1))
        count += ~done
    return n, count


# ---- ML building blocks --------------------------------------------------------------------

def softmax(x):
    tmp_max = np.max(x, axis=-1, keepdims=True)
    tmp_out = np.exp(x - tmp_max)
    tmp_sum = np.sum(tmp_out, axis=-1, keepdims=True)
    return tmp_out / tmp_sum


def relu(x):
    return np.maximum(x, 0)


@kernel(lambda: {"x": randn(4, 3, 16, 16, dtype=np.float32)}, name="softmax", rtol=1e-5)
def softmax_kernel(x):
    return softmax(x)


def _mlp_args():
    f32 = np.float32
    return {"inputs": randn(8, 32, dtype=f32), "w1": randn(32, 24, dtype=f32) / 6,
            "b1": randn(24, dtype=f32), "w2": randn(24, 16, dtype=f32) / 5,
            "b2": randn(16, dtype=f32), "w3": randn(16, 10, dtype=f32) / 4, "b3": randn(10, dtype=f32)}


@kernel(_mlp_args, rtol=1e-4)
def mlp(inputs, w1, b1, w2, b2, w3, b3):
    x = relu(inputs @ w1 + b1)
    x = relu(x @ w2 + b2)
    x = softmax(x @ w3 + b3)
    return x


def _conv_args():
    f32 = np.float32
    return {"image": randn(2, 10, 10, 3, dtype=f32), "weights": randn(3, 3, 3, 4, dtype=f32),
            "bias": randn(4, dtype=f32)}


@kernel(_conv_args, rtol=1e-4)
def conv2d_relu_pool(image, weights, bias):
    K = weights.shape[0]
    H = image.shape[1] - K + 1
    W = image.shape[2] - K + 1
    out = np.zeros_like(image, shape=(image.shape[0], H, W, weights.shape[3]))
    for i in range(K):
        for j in range(K):
            out += np.einsum("nhwc,cf->nhwf", image[:, i:i + H, j:j + W, :], weights[i, j])
    out = relu(out + bias)
    n, h, w, c = out.shape
    return out.reshape(n, h // 2, 2, w // 2, 2, c).max(axis=(2, 4))


@kernel(_conv_args, name="conv2d_npbench", rtol=1e-4)
def conv2d_empty(image, weights, bias):
    K = weights.shape[0]
    H_out = image.shape[1] - K + 1
    W_out = image.shape[2] - K + 1
    output = np.empty((image.shape[0], H_out, W_out, weights.shape[3]), dtype=np.float32)
    for i in range(H_out):
        for j in range(W_out):
            output[:, i, j, :] = np.sum(image[:, i:i + K, j:j + K, :, np.newaxis]
                                        * weights[np.newaxis, :, :, :], axis=(1, 2, 3))
    return output + bias


# ---- polybench linear algebra ----------------------------------------------------------------

@kernel(lambda: {"alpha": 1.5, "beta": 1.2, "C": rand(20, 24), "A": rand(20, 16), "B": rand(16, 24)})
def gemm(alpha, beta, C, A, B):
    C[:] = alpha * A @ B + beta * C


@kernel(lambda: {"alpha": 1.5, "beta": 1.2, "A": rand(16, 16), "u1": rand(16), "v1": rand(16),
                 "u2": rand(16), "v2": rand(16), "w": rand(16), "x": rand(16), "y": rand(16),
                 "z": rand(16)})
def gemver(alpha, beta, A, u1, v1, u2, v2, w, x, y, z):
    A += np.outer(u1, v1) + np.outer(u2, v2)
    x += beta * y @ A + z
    w += alpha * A @ x


@kernel(lambda: {"alpha": 1.5, "beta": 1.2, "A": rand(20, 20), "B": rand(20, 20), "x": rand(20)})
def gesummv(alpha, beta, A, B, x):
    return alpha * A @ x + beta * B @ x


@kernel(lambda: {"A": rand(18, 14), "x": rand(14)})
def atax(A, x):
    return (A @ x) @ A


@kernel(lambda: {"A": rand(18, 14), "p": rand(14), "r": rand(18)})
def bicg(A, p, r):
    return r @ A, A @ p


@kernel(lambda: {"x1": rand(16), "x2": rand(16), "y_1": rand(16), "y_2": rand(16), "A": rand(16, 16)})
def mvt(x1, x2, y_1, y_2, A):
    x1 += A @ y_1
    x2 += y_2 @ A


@kernel(lambda: {"alpha": 1.5, "beta": 1.2, "C": rand(8, 8), "A": rand(8, 6)})
def syrk(alpha, beta, C, A):
    for i in range(A.shape[0]):
        C[i, :i + 1] *= beta
        for k in range(A.shape[1]):
            C[i, :i + 1] += alpha * A[i, k] * A[:i + 1, k]


@kernel(lambda: {"alpha": 1.5, "beta": 1.2, "C": rand(8, 8), "A": rand(8, 6), "B": rand(8, 6)})
def syr2k(alpha, beta, C, A, B):
    for i in range(A.shape[0]):
        C[i, :i + 1] *= beta
        for k in range(A.shape[1]):
            C[i, :i + 1] += A[:i + 1, k] * alpha * B[i, k] + B[:i + 1, k] * alpha * A[i, k]


@kernel(lambda: {"alpha": 1.5, "beta": 1.2, "C": rand(3, 3), "A": rand(3, 3), "B": rand(3, 3)})
def symm(alpha, beta, C, A, B):
    temp2 = np.empty_like(C, shape=(C.shape[1],))
    C *= beta
    for i in range(C.shape[0]):
        for j in range(C.shape[1]):
            C[:i, j] += alpha * B[i, j] * A[i, :i]
            temp2[j] = B[:i, j] @ A[i, :i]           # empty dot product when i == 0
        C[i, :] += alpha * B[i, :] * A[i, i] + alpha * temp2


@kernel(lambda: {"alpha": 1.5, "A": rand(4, 4), "B": rand(4, 3)})
def trmm(alpha, A, B):
    for i in range(B.shape[0]):
        for j in range(B.shape[1]):
            B[i, j] += np.dot(A[i + 1:, i], B[i + 1:, j])
    B *= alpha


@kernel(lambda: {"alpha": 1.5, "beta": 1.2, "A": rand(10, 12), "B": rand(12, 9), "C": rand(9, 11),
                 "D": rand(10, 11)})
def k2mm(alpha, beta, A, B, C, D):
    D[:] = alpha * A @ B @ C + beta * D


@kernel(lambda: {"A": rand(10, 12), "B": rand(12, 9), "C": rand(9, 11), "D": rand(11, 7)})
def k3mm(A, B, C, D):
    return A @ B @ C @ D


@kernel(lambda: {"NR": 5, "NQ": 6, "NP": 7, "A": rand(5, 6, 7), "C4": rand(7, 7)})
def doitgen(NR, NQ, NP, A, C4):
    A[:] = np.reshape(np.reshape(A, (NR, NQ, 1, NP)) @ C4, (NR, NQ, NP))


@kernel(lambda: {"M": 8, "float_n": 20.0, "data": rand(20, 8)})
def covariance(M, float_n, data):
    mean = np.mean(data, axis=0)
    data -= mean
    cov = np.zeros_like(data, shape=(M, M))
    for i in range(M):
        cov[i:M, i] = cov[i, i:M] = data[:, i] @ data[:, i:M] / (float_n - 1.0)
    return cov


@kernel(lambda: {"M": 8, "float_n": 20.0, "data": rand(20, 8)})
def covariance_npbench(M, float_n, data):
    mean = np.mean(data, axis=0)
    data -= mean
    cov = np.zeros((M, M), dtype=data.dtype)
    for i in range(M):
        cov[i:M, i] = cov[i, i:M] = data[:, i] @ data[:, i:M] / (float_n - 1.0)
    return cov


def _correlation_args():
    data = rand(20, 8)
    data[:, 3] = 0.5                   # a constant column: its stddev is clamped to 1
    return {"M": 8, "float_n": 20.0, "data": data}


@kernel(_correlation_args, rtol=1e-10)
def correlation(M, float_n, data):
    mean = np.mean(data, axis=0)
    stddev = np.std(data, axis=0)
    stddev[stddev <= 0.1] = 1.0
    data -= mean
    data /= np.sqrt(float_n) * stddev
    corr = np.zeros_like(data, shape=(M, M)) + np.eye(M, dtype=data.dtype)
    for i in range(M - 1):
        corr[i + 1:M, i] = corr[i, i + 1:M] = data[:, i] @ data[:, i + 1:M]
    return corr


kernel(lambda: {"A": rand(6, 3)}, rtol=1e-10)(examples.gramschmidt)


def _spd(n):
    m = rand(n, n)
    return m @ m.T + n * np.eye(n)


@kernel(lambda: {"A": _spd(4)}, rtol=1e-10)
def cholesky(A):
    A[0, 0] = np.sqrt(A[0, 0])
    for i in range(1, A.shape[0]):
        for j in range(i):
            A[i, j] -= np.dot(A[i, :j], A[j, :j])
            A[i, j] /= A[j, j]
        A[i, i] -= np.dot(A[i, :i], A[i, :i])
        A[i, i] = np.sqrt(A[i, i])


kernel(lambda: {"A": _spd(3)}, rtol=1e-10)(examples.lu)
kernel(lambda: {"r": rand(5) / 10}, rtol=1e-10)(examples.durbin)


@kernel(lambda: {"path": RNG.integers(1, 50, (6, 6)).astype(np.int32)}, name="floyd_warshall_i32")
@kernel(lambda: {"path": rand(6, 6) * 10})
def floyd_warshall(path):
    for k in range(path.shape[0]):
        path[:] = np.minimum(path[:], np.add.outer(path[:, k], path[k, :]))


@kernel(lambda: {"A": RNG.integers(-9, 9, (6, 7)).astype(np.int32),
                 "B": RNG.integers(-9, 9, (7, 5)).astype(np.int32)})
def int_matmul(A, B):
    C = A @ B
    return C, C.sum(axis=0), np.cumsum(C, axis=1), C.T @ C


# ---- stencils ------------------------------------------------------------------------------

@kernel(lambda: {"TSTEPS": 4, "A": rand(32), "B": rand(32)})
def jacobi_1d(TSTEPS, A, B):
    for t in range(1, TSTEPS):
        B[1:-1] = 0.33333 * (A[:-2] + A[1:-1] + A[2:])
        A[1:-1] = 0.33333 * (B[:-2] + B[1:-1] + B[2:])


@kernel(lambda: {"TSTEPS": 4, "A": rand(16, 16, dtype=np.float32), "B": rand(16, 16, dtype=np.float32)},
        rtol=1e-5)
def jacobi_2d(TSTEPS, A, B):
    for t in range(1, TSTEPS):
        B[1:-1, 1:-1] = 0.2 * (A[1:-1, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:] + A[2:, 1:-1] + A[:-2, 1:-1])
        A[1:-1, 1:-1] = 0.2 * (B[1:-1, 1:-1] + B[1:-1, :-2] + B[1:-1, 2:] + B[2:, 1:-1] + B[:-2, 1:-1])


@kernel(lambda: {"TSTEPS": 2, "A": rand(8, 9, 10), "B": rand(8, 9, 10)})
def heat_3d(TSTEPS, A, B):
    for t in range(1, TSTEPS):
        B[1:-1, 1:-1, 1:-1] = (
            0.125 * (A[2:, 1:-1, 1:-1] - 2.0 * A[1:-1, 1:-1, 1:-1] + A[:-2, 1:-1, 1:-1])
            + 0.125 * (A[1:-1, 2:, 1:-1] - 2.0 * A[1:-1, 1:-1, 1:-1] + A[1:-1, :-2, 1:-1])
            + 0.125 * (A[1:-1, 1:-1, 2:] - 2.0 * A[1:-1, 1:-1, 1:-1] + A[1:-1, 1:-1, :-2])
            + A[1:-1, 1:-1, 1:-1])
        A[1:-1, 1:-1, 1:-1] = (
            0.125 * (B[2:, 1:-1, 1:-1] - 2.0 * B[1:-1, 1:-1, 1:-1] + B[:-2, 1:-1, 1:-1])
            + 0.125 * (B[1:-1, 2:, 1:-1] - 2.0 * B[1:-1, 1:-1, 1:-1] + B[1:-1, :-2, 1:-1])
            + 0.125 * (B[1:-1, 1:-1, 2:] - 2.0 * B[1:-1, 1:-1, 1:-1] + B[1:-1, 1:-1, :-2])
            + B[1:-1, 1:-1, 1:-1])


@kernel(lambda: {"TMAX": 3, "ex": rand(10, 12), "ey": rand(10, 12), "hz": rand(10, 12),
                 "_fict_": rand(3)})
def fdtd_2d(TMAX, ex, ey, hz, _fict_):
    for t in range(TMAX):
        ey[0, :] = _fict_[t]
        ey[1:, :] -= 0.5 * (hz[1:, :] - hz[:-1, :])
        ex[:, 1:] -= 0.5 * (hz[:, 1:] - hz[:, :-1])
        hz[:-1, :-1] -= 0.7 * (ex[:-1, 1:] - ex[:-1, :-1] + ey[1:, :-1] - ey[:-1, :-1])


kernel(lambda: {"TSTEPS": 2, "A": rand(6, 6)})(examples.seidel_2d)


def _hdiff_args():
    I, J, K = 8, 9, 5
    return {"in_field": rand(I + 4, J + 4, K), "out_field": rand(I, J, K), "coeff": rand(I, J, K)}


@kernel(_hdiff_args)
def hdiff(in_field, out_field, coeff):
    I, J = out_field.shape[0], out_field.shape[1]
    lap_field = 4.0 * in_field[1:I + 3, 1:J + 3, :] - (
        in_field[2:I + 4, 1:J + 3, :] + in_field[0:I + 2, 1:J + 3, :]
        + in_field[1:I + 3, 2:J + 4, :] + in_field[1:I + 3, 0:J + 2, :])
    res = lap_field[1:, 1:J + 1, :] - lap_field[:-1, 1:J + 1, :]
    flx_field = np.where((res * (in_field[2:I + 3, 2:J + 2, :] - in_field[1:I + 2, 2:J + 2, :])) > 0,
                         0, res)
    res = lap_field[1:I + 1, 1:, :] - lap_field[1:I + 1, :-1, :]
    fly_field = np.where((res * (in_field[2:I + 2, 2:J + 3, :] - in_field[2:I + 2, 1:J + 2, :])) > 0,
                         0, res)
    out_field[:, :, :] = in_field[2:I + 2, 2:J + 2, :] - coeff[:, :, :] * (
        flx_field[1:, :, :] - flx_field[:-1, :, :] + fly_field[:, 1:, :] - fly_field[:, :-1, :])


def _tridiag_args():
    n, m, k = 4, 5, 6
    return {"a": rand(n, m, k) * 0.3, "b": 2.0 + rand(n, m, k), "c": rand(n, m, k) * 0.3,
            "d": randn(n, m, k)}


@kernel(_tridiag_args, rtol=1e-10)
def vadv_thomas(a, b, c, d):
    """The vertical tridiagonal solve of vadv: a Thomas sweep along the last axis."""
    K = d.shape[2]
    cp = np.zeros_like(c)
    dp = np.zeros_like(d)
    cp[:, :, 0] = c[:, :, 0] / b[:, :, 0]
    dp[:, :, 0] = d[:, :, 0] / b[:, :, 0]
    for k in range(1, K):
        denom = b[:, :, k] - a[:, :, k] * cp[:, :, k - 1]
        cp[:, :, k] = c[:, :, k] / denom
        dp[:, :, k] = (d[:, :, k] - a[:, :, k] * dp[:, :, k - 1]) / denom
    x = np.zeros_like(d)
    x[:, :, K - 1] = dp[:, :, K - 1]
    for k in range(K - 2, -1, -1):
        x[:, :, k] = dp[:, :, k] - cp[:, :, k] * x[:, :, k + 1]
    return x


def build_up_b(rho, dt, u, v, dx, dy):
    b = np.zeros_like(u)
    b[1:-1, 1:-1] = (rho * (1 / dt * ((u[1:-1, 2:] - u[1:-1, 0:-2]) / (2 * dx)
                                      + (v[2:, 1:-1] - v[0:-2, 1:-1]) / (2 * dy))
                            - ((u[1:-1, 2:] - u[1:-1, 0:-2]) / (2 * dx)) ** 2
                            - 2 * ((u[2:, 1:-1] - u[0:-2, 1:-1]) / (2 * dy)
                                   * (v[1:-1, 2:] - v[1:-1, 0:-2]) / (2 * dx))
                            - ((v[2:, 1:-1] - v[0:-2, 1:-1]) / (2 * dy)) ** 2))
    return b


def pressure_poisson(nit, p, dx, dy, b):
    for q in range(nit):
        pn = p.copy()
        p[1:-1, 1:-1] = (((pn[1:-1, 2:] + pn[1:-1, 0:-2]) * dy ** 2
                          + (pn[2:, 1:-1] + pn[0:-2, 1:-1]) * dx ** 2) / (2 * (dx ** 2 + dy ** 2))
                         - dx ** 2 * dy ** 2 / (2 * (dx ** 2 + dy ** 2)) * b[1:-1, 1:-1])
        p[:, -1] = p[:, -2]
        p[0, :] = p[1, :]
        p[:, 0] = p[:, 1]
        p[-1, :] = 0


def _cavity_args():
    n = 12
    return {"nt": 2, "nit": 2, "u": np.zeros((n, n)), "v": np.zeros((n, n)), "dt": 0.001,
            "dx": 2 / (n - 1), "dy": 2 / (n - 1), "p": np.zeros((n, n)), "rho": 1.0, "nu": 0.1}


@kernel(_cavity_args, rtol=1e-9)
def cavity_flow(nt, nit, u, v, dt, dx, dy, p, rho, nu):
    for n in range(nt):
        un = u.copy()
        vn = v.copy()
        b = build_up_b(rho, dt, u, v, dx, dy)
        pressure_poisson(nit, p, dx, dy, b)
        u[1:-1, 1:-1] = (un[1:-1, 1:-1] - un[1:-1, 1:-1] * dt / dx * (un[1:-1, 1:-1] - un[1:-1, 0:-2])
                         - vn[1:-1, 1:-1] * dt / dy * (un[1:-1, 1:-1] - un[0:-2, 1:-1])
                         - dt / (2 * rho * dx) * (p[1:-1, 2:] - p[1:-1, 0:-2])
                         + nu * (dt / dx ** 2 * (un[1:-1, 2:] - 2 * un[1:-1, 1:-1] + un[1:-1, 0:-2])
                                 + dt / dy ** 2 * (un[2:, 1:-1] - 2 * un[1:-1, 1:-1] + un[0:-2, 1:-1])))
        v[1:-1, 1:-1] = (vn[1:-1, 1:-1] - un[1:-1, 1:-1] * dt / dx * (vn[1:-1, 1:-1] - vn[1:-1, 0:-2])
                         - vn[1:-1, 1:-1] * dt / dy * (vn[1:-1, 1:-1] - vn[0:-2, 1:-1])
                         - dt / (2 * rho * dy) * (p[2:, 1:-1] - p[0:-2, 1:-1])
                         + nu * (dt / dx ** 2 * (vn[1:-1, 2:] - 2 * vn[1:-1, 1:-1] + vn[1:-1, 0:-2])
                                 + dt / dy ** 2 * (vn[2:, 1:-1] - 2 * vn[1:-1, 1:-1] + vn[0:-2, 1:-1])))
        u[0, :] = 0
        u[:, 0] = 0
        u[:, -1] = 0
        u[-1, :] = 1           # the lid
        v[0, :] = 0
        v[-1, :] = 0
        v[:, 0] = 0
        v[:, -1] = 0


@kernel(lambda: {"u": rand(10, 12), "dt": 0.01, "dx": 0.1, "nu": 0.1, "F": 1.0, "steps": 3},
        rtol=1e-10)
def channel_flow(u, dt, dx, nu, F, steps):
    """Periodic in x, written with explicit wrap-around slices instead of np.roll."""
    for _ in range(steps):
        un = u.copy()
        east = np.concatenate([un[:, 1:], un[:, :1]], axis=1)
        west = np.concatenate([un[:, -1:], un[:, :-1]], axis=1)
        u[1:-1, :] = (un[1:-1, :] - un[1:-1, :] * dt / dx * (un[1:-1, :] - west[1:-1, :])
                      + nu * dt / dx ** 2 * (east[1:-1, :] - 2 * un[1:-1, :] + west[1:-1, :]
                                            + un[2:, :] - 2 * un[1:-1, :] + un[:-2, :])
                      + F * dt)
        u[0, :] = 0
        u[-1, :] = 0
    return np.linalg.norm(u), np.abs(u).max(axis=1)


# ---- particles, fractals, spectral, complex -------------------------------------------------

def get_acc(pos, mass, G, softening):
    x, y, z = pos[:, 0:1], pos[:, 1:2], pos[:, 2:3]
    dx, dy, dz = x.T - x, y.T - y, z.T - z
    inv_r3 = dx ** 2 + dy ** 2 + dz ** 2 + softening ** 2
    inv_r3 = np.where(inv_r3 > 0, inv_r3 ** (-1.5), inv_r3)
    ax = G * (dx * inv_r3) @ mass
    ay = G * (dy * inv_r3) @ mass
    az = G * (dz * inv_r3) @ mass
    return np.hstack((ax, ay, az))


def _nbody_args():
    return {"pos": randn(12, 3), "vel": randn(12, 3), "mass": 20.0 * np.ones((12, 1)) / 12,
            "dt": 0.01, "steps": 4, "G": 1.0, "softening": 0.1}


@kernel(_nbody_args, rtol=1e-9)
def nbody(pos, vel, mass, dt, steps, G, softening):
    vel -= np.mean(mass * vel, axis=0) / np.mean(mass)
    acc = get_acc(pos, mass, G, softening)
    for _ in range(steps):
        vel += acc * dt / 2.0
        pos += vel * dt
        acc = get_acc(pos, mass, G, softening)
        vel += acc * dt / 2.0
    KE = 0.5 * np.sum(mass * vel ** 2)
    dx = pos[:, 0:1].T - pos[:, 0:1]
    dy = pos[:, 1:2].T - pos[:, 1:2]
    dz = pos[:, 2:3].T - pos[:, 2:3]
    inv_r = np.sqrt(dx ** 2 + dy ** 2 + dz ** 2)
    inv_r = np.where(inv_r > 0, 1.0 / np.where(inv_r > 0, inv_r, 1.0), inv_r)
    PE = G * np.sum(np.sum(np.triu(-(mass * mass.T) * inv_r, 1)))
    return KE, PE


@kernel(_nbody_args, name="nbody_masked", rtol=1e-10)
def nbody_masked(pos, vel, mass, dt, steps, G, softening):
    x, y, z = pos[:, 0:1], pos[:, 1:2], pos[:, 2:3]
    dx, dy, dz = x.T - x, y.T - y, z.T - z
    inv_r3 = dx ** 2 + dy ** 2 + dz ** 2 + softening ** 2
    inv_r3[inv_r3 > 0] = inv_r3[inv_r3 > 0] ** (-1.5)
    return G * (dx * inv_r3) @ mass


def _grid():
    x = np.linspace(-2.0, 0.5, 24)
    y = np.linspace(-1.25, 1.25, 20)
    return x + y[:, None] * 1j


@kernel(lambda: {"C": _grid(), "maxiter": 12, "horizon": 2.0}, rtol=1e-9)
def mandelbrot(C, maxiter, horizon):
    N = np.zeros_like(C, dtype=np.int64)
    Z = np.zeros_like(C)
    for n in range(maxiter):
        inside = np.abs(Z) < horizon
        N = np.where(inside, n, N)
        Z = np.where(inside, Z ** 2 + C, Z)
    N = np.where(N == maxiter - 1, 0, N)
    return Z, N


@kernel(lambda: {"C": _grid(), "maxiter": 20, "horizon": 2.0}, rtol=1e-9)
def mandelbrot_masked(C, maxiter, horizon):
    N = np.zeros_like(C, dtype=np.int64)
    Z = np.zeros_like(C)
    for n in range(maxiter):
        I = np.abs(Z) < horizon
        N[I] = n
        Z[I] = Z[I] ** 2 + C[I]
    N[N == maxiter - 1] = 0
    return Z, N


@kernel(lambda: {"x": randn(32)}, rtol=1e-10)
def fft_vectorized(x):
    """Radix-2 Cooley-Tukey by reshapes and stacking (the length is a power of two)."""
    N = x.shape[0]
    N_min = min(N, 4)
    n = np.arange(N_min)
    k = n[:, None]
    M = np.exp(-2j * np.pi * n * k / N_min)
    X = np.dot(M, x.reshape((N_min, -1)))
    while X.shape[0] < N:
        X_even = X[:, :X.shape[1] // 2]
        X_odd = X[:, X.shape[1] // 2:]
        factor = np.exp(-1j * np.pi * np.arange(X.shape[0]) / X.shape[0])[:, None]
        X = np.vstack([X_even + factor * X_odd, X_even - factor * X_odd])
    return X.ravel()


@kernel(lambda: {"x": randn(4, 16), "W": randn(16, 16)}, rtol=1e-10)
def stockham_reshape(x, W):
    """Transposes and reshapes of a mixed-radix pass: (4 x 4) blocks, twiddle, recombine."""
    b = x.shape[0]
    y = x.reshape(b, 4, 4).transpose(0, 2, 1)
    y = np.einsum("bij,jk->bik", y, W[:4, :4])
    y = (y * W[4:8, 4:8]).transpose(0, 2, 1).reshape(b, 16)
    return np.swapaxes(y.reshape(b, 2, 8), 1, 2).reshape(b, 16)


def _contour_args():
    NR, NS = 4, 3
    ham = randn(NS, NR, NR) + 1j * randn(NS, NR, NR)
    return {"Ham": ham, "int_pts": np.exp(1j * np.linspace(0, 2 * np.pi, 8, endpoint=False)),
            "Y": randn(NR, 2) + 1j * randn(NR, 2)}


@kernel(_contour_args, rtol=1e-9)
def contour_sum(Ham, int_pts, Y):
    P0 = np.zeros_like(Y)
    for idx in range(int_pts.shape[0]):
        z = int_pts[idx]
        Tz = np.zeros_like(Ham[0])
        for n in range(Ham.shape[0]):
            Tz = Tz + np.power(z, Ham.shape[0] / 2 - n) * Ham[n]
        P0 += Tz @ Y * z
    return P0, np.abs(P0), P0.real.sum(), np.conj(P0).imag


@kernel(_contour_args, rtol=1e-9)
def contour_integral_solve(Ham, int_pts, Y):
    Tz = Ham[0] + int_pts[0] * Ham[1]
    X = np.linalg.solve(Tz, Y)
    return X


# ---- reductions, scans, norms, masks, in-place ------------------------------------------------

@kernel(lambda: {"x": rand(6, 9, dtype=np.float32), "y": RNG.integers(-5, 5, (6, 9)).astype(np.int32)},
        rtol=1e-5)
def scans_and_norms(x, y):
    cx = np.cumsum(x, axis=1)
    cy = np.cumsum(y)                      # int32 accumulates in int64, as in NumPy
    norms = np.linalg.norm(x, axis=0), np.linalg.norm(x), np.linalg.norm(x, ord=1, axis=1)
    return cx, cy, norms, np.cumprod(y[:, :3] % 3 + 1, axis=0)


@kernel(lambda: {"x": randn(7, 8), "lo": -0.5, "hi": 0.75})
def clip_where_masks(x, lo, hi):
    clipped = np.clip(x, lo, hi)
    pos = np.where(x > 0, x, 0.0)
    x[x < lo] = lo                         # a traced mask with a scalar keeps the shape
    x[:, 0] = 0
    x[np.abs(x) > hi] = np.float64(hi)
    n_pos = np.count_nonzero(pos)
    return clipped, pos.sum(axis=1) / np.maximum((pos > 0).sum(axis=1), 1), n_pos


@kernel(lambda: {"a": randn(5, 6), "b": randn(5, 6), "k": RNG.integers(0, 9, (5, 6))})
def in_place_ops(a, b, k):
    a += b
    k //= 2
    k[k > 2] += 1            # reads k[k > 2] first: a selection, written back under its mask
    return a, k


@kernel(lambda: {"a": randn(5, 6), "b": randn(5, 6), "k": RNG.integers(0, 9, (5, 6))})
def in_place_ops_fixed(a, b, k):
    a += b
    a[:, 0] = 0
    a[1] *= 2
    a[::2, 1:] -= b[::2, :-1]
    k //= 2
    k += k > 2
    v = a.T
    v[0] = -1.0              # writes through a view reach a
    return a, k


@kernel(lambda: {"data": rand(200), "radius": rand(200), "npt": 8}, rtol=1e-10)
def azimint_naive(data, radius, npt):
    rmax = radius.max()
    res = np.zeros_like(data, shape=(npt,))
    for i in range(npt):
        r1 = rmax * i / npt
        r2 = rmax * (i + 1) / npt
        mask_r12 = np.logical_and((r1 <= radius), (radius < r2))
        values_r12 = data[mask_r12]
        res[i] = values_r12.mean()
    return res


@kernel(lambda: {"data": rand(200), "radius": rand(200), "npt": 8}, rtol=1e-10)
def azimint_where(data, radius, npt):
    rmax = radius.max()
    res = np.zeros_like(data, shape=(npt,))
    for i in range(npt):
        r1 = rmax * i / npt
        r2 = rmax * (i + 1) / npt
        mask_r12 = np.logical_and((r1 <= radius), (radius < r2))
        res[i] = np.where(mask_r12, data, 0).sum() / mask_r12.sum()
    return res


@kernel(lambda: {"data": rand(200), "radius": rand(200), "npt": 8})
def azimint_where_npbench(data, radius, npt):
    rmax = radius.max()
    res = np.zeros(npt, dtype=np.float64)        # a NumPy array: it cannot hold traced values
    for i in range(npt):
        r1 = rmax * i / npt
        r2 = rmax * (i + 1) / npt
        mask_r12 = np.logical_and((r1 <= radius), (radius < r2))
        res[i] = np.where(mask_r12, data, 0).sum() / mask_r12.sum()
    return res


@kernel(lambda: {"data": rand(200), "radius": rand(200), "npt": 8}, rtol=1e-10)
def azimint_hist(data, radius, npt):
    histu = np.histogram(radius, npt)[0]
    histw = np.histogram(radius, npt, weights=data)[0]
    return histw / histu


@kernel(lambda: {"data": rand(200), "radius": rand(200), "npt": 8}, rtol=1e-10)
def azimint_add_at(data, radius, npt):
    """azimint_hist with a fixed number of bins: np.add.at (a scatter) instead of np.histogram."""
    rmax = radius.max()
    bins = np.minimum((radius / rmax * npt).astype(np.int64), npt - 1)
    histu = np.zeros_like(data, shape=(npt,))
    histw = np.zeros_like(data, shape=(npt,))
    np.add.at(histu, bins, 1.0)
    np.add.at(histw, bins, data)
    return histw / histu


@kernel(lambda: {"pos": randn(6, 3)})
def center_with_np_array(pos):
    com = np.array([pos[:, 0].mean(), pos[:, 1].mean(), pos[:, 2].mean()])
    return pos - com


@kernel(lambda: {"u": randn(16), "dx": 0.1}, rtol=1e-12)
def cfl_step(u, dx):
    dt = min(0.5 * dx / np.abs(u).max(), 0.1)     # min() on a traced scalar compiles
    du = np.gradient(u)
    return u - dt * du


@kernel(lambda: {"data": RNG.integers(0, 256, 16, dtype=np.uint8), "poly": 0x8408}, traced_int=True)
def crc16(data, poly):
    crc = 0xFFFF
    for b in data:
        cur_byte = 0xFF & b
        for _ in range(0, 8):
            if (crc & 0x0001) ^ (cur_byte & 0x0001):
                crc = (crc >> 1) ^ poly
            else:
                crc >>= 1
            cur_byte >>= 1
    crc = (~crc & 0xFFFF)
    crc = (crc << 8) | ((crc >> 8) & 0xFF)
    return crc & 0xFFFF


@kernel(lambda: {"data": RNG.integers(0, 256, 6, dtype=np.uint8), "poly": 0x8408})
def crc16_where(data, poly):
    crc = 0xFFFF
    for b in data:
        cur_byte = 0xFF & b
        for _ in range(0, 8):
            crc = np.where((crc & 0x0001) ^ (cur_byte & 0x0001), (crc >> 1) ^ poly, crc >> 1)
            cur_byte >>= 1
    crc = (~crc & 0xFFFF)
    crc = (crc << 8) | ((crc >> 8) & 0xFF)
    return crc & 0xFFFF


def _csr_args():
    dense = np.where(rand(8, 8) < 0.4, randn(8, 8), 0.0)
    rows, cols = np.nonzero(dense)
    return {"A_row": np.searchsorted(rows, np.arange(9)).astype(np.int64), "A_col": cols.astype(np.int64),
            "A_val": dense[rows, cols], "x": randn(8)}


@kernel(_csr_args, rtol=1e-10)            # (ragged slices, reduced at their true length: ragged.py)
def spmv(A_row, A_col, A_val, x):
    y = np.zeros_like(x, shape=(A_row.size - 1,))
    for i in range(A_row.size - 1):      # (no name left bound to a row: a cell's names are outputs)
        y[i] = A_val[A_row[i]:A_row[i + 1]] @ x[A_col[A_row[i]:A_row[i + 1]]]
    return y


@kernel(_csr_args, error=(nbxla.NotCompilableError, r"its length depends on the data",
                          "cols = A_col[A_row[i]:A_row[i + 1]]"))
def spmv_leaving_a_row(A_row, A_col, A_val, x):
    """In a cell the loop's names are outputs: a row of data-dependent length left bound to
    ``cols`` is refused with its line (a compiled function keeps it a temporary: ragged.py)."""
    y = np.zeros_like(x, shape=(A_row.size - 1,))
    for i in range(A_row.size - 1):
        cols = A_col[A_row[i]:A_row[i + 1]]
        y[i] = A_val[A_row[i]:A_row[i + 1]] @ x[cols]
    return cols


@kernel(_csr_args, rtol=1e-10)
def spmv_segment_sum(A_row, A_col, A_val, x):
    """CSR times a vector without data-dependent slicing: row ids by comparing with the row
    pointers, then a one-hot segment sum."""
    nnz = A_col.shape[0]
    row_of = (np.arange(nnz)[None, :] >= A_row[1:-1, None]).sum(axis=0)
    products = A_val * x[A_col]
    onehot = row_of[None, :] == np.arange(A_row.shape[0] - 1)[:, None]
    return onehot @ products


@kernel(lambda: {"x": randn(10) + 10})       # (the loop runs: x is rebound in NumPy too)
def halve_until_small(x):
    while np.abs(x).max() > 1:
        x = x / 2
    return x


@kernel(lambda: {"x": RNG.integers(0, 5, 20)}, error=(nbxla.NotCompilableError,
                                                      r"np\.unique cannot be compiled",
                                                      "u = np.unique(x)"))
def distinct_count(x):
    u = np.unique(x)
    return u.size


@kernel(lambda: {"x": randn(10)}, error=(nbxla.ConcretizationError, r"\.item\(\) of a traced array",
                                         "scale = x.max().item()"))
def item_of_traced(x):
    scale = x.max().item()        # (float(x.max()) compiles: the value stays traced)
    return x / scale


# ---- the three runs --------------------------------------------------------------------------

def _copy(args: dict) -> dict:
    return copy.deepcopy(args)


def _same(name, want, got, rtol, traced_int=False):
    if isinstance(want, (tuple, list)):
        assert isinstance(got, type(want)) and len(got) == len(want), f"{name}: {got!r}"
        for i, (w, g) in enumerate(zip(want, got)):
            _same(f"{name}[{i}]", w, g, rtol, traced_int)
        return
    if traced_int and type(want) is int and isinstance(got, np.integer):
        assert got == want, f"{name}: {got!r}, NumPy gives {want!r}"
        return
    if isinstance(want, (np.ndarray, np.generic)):
        assert type(got) is type(want), f"{name}: {type(got).__name__}, NumPy gives {type(want).__name__}"
        ok, detail = compare_arrays(np.asarray(got), np.asarray(want), rtol=rtol)
        assert ok, f"{name}: {detail}"
        return
    assert type(got) is type(want) and got == want, f"{name}: {got!r}, NumPy gives {want!r}"


def _body(fn) -> tuple[str, int]:
    """The function's body as cell text (``return X`` -> ``result = X``), and the file line of
    its first line."""
    lines, start = inspect.getsourcelines(fn)
    func = ast.parse(textwrap.dedent("".join(lines))).body[0]
    stmts = func.body
    if isinstance(stmts[0], ast.Expr) and isinstance(stmts[0].value, ast.Constant):
        stmts = stmts[1:]                               # the docstring
    first = stmts[0].lineno
    body = textwrap.dedent("".join(lines[first - 1:])).splitlines()
    if isinstance(stmts[-1], ast.Return):
        i = stmts[-1].lineno - first
        body[i] = re.sub(r"^return\b", "result =", body[i])
    return "\n".join(body) + "\n", start + first - 1


def _helpers(fn) -> dict:
    """Module-level functions the kernel calls (they are names in the cell's namespace)."""
    names = set(fn.__code__.co_names)
    return {n: globals()[n] for n in names if inspect.isfunction(globals().get(n))}


def _params(expect_error: bool) -> list:
    """(name, flags) of the kernels that compile (or of those that must fail): each with the
    default flags, and each with a loop once more with every loop rolled (--unroll_max=0)."""
    chosen = {n: c for n, c in CASES.items() if (c.error is not None) == expect_error}
    return [pytest.param(*p.values, id=p.id, marks=[pytest.mark.xfail(strict=True, reason=CASES[p.values[0]].xfail)]
                         if CASES[p.values[0]].xfail else [])
            for p in with_unroll_flags(chosen)]


def _error_line(fn, fragment) -> int:
    """Line number within the body (0-based) of the line holding ``fragment``."""
    body, _ = _body(fn)
    (i,) = [i for i, line in enumerate(body.splitlines()) if fragment in line]
    return i


@pytest.mark.parametrize("name, flags", _params(expect_error=False))
def test_jit_matches_numpy(name, flags, monkeypatch):
    use_flags(monkeypatch, flags)
    case = CASES[name]
    args = case.make_args()
    eager_args, jit_args, again_args = _copy(args), _copy(args), _copy(args)
    with quiet():
        want = case.fn(**eager_args)
        compiled = nbxla.jit(case.fn)
        got = compiled(*jit_args.values())
        again = compiled(*again_args.values())          # a cache hit: the fast path
    assert compiled.last_compilation is not None
    _same("result", want, got, case.rtol, case.traced_int)
    _same("result (cached call)", want, again, case.rtol, case.traced_int)
    for k in args:
        _same(f"argument {k}", eager_args[k], jit_args[k], case.rtol)
        _same(f"argument {k} (cached call)", eager_args[k], again_args[k], case.rtol)


@pytest.mark.parametrize("name, flags", _params(expect_error=False))
def test_cell_matches_numpy(shell, name, flags, monkeypatch):
    use_flags(monkeypatch, flags)
    case = CASES[name]
    args = case.make_args()
    source, _ = _body(case.fn)
    helpers = _helpers(case.fn)
    eager_args, given = _copy(args), _copy(args)
    eager_ns = {"np": np, **helpers, **eager_args}
    with quiet():
        exec(compile(source, f"<eager {name}>", "exec"), eager_ns)
    shell.user_ns.update(helpers)
    shell.user_ns.update(given)
    with quiet():
        result, out = run(shell, "%%xla\n" + source)
    assert result.success, out
    for key, want in eager_ns.items():
        if key in ("np", "__builtins__") or key in helpers:
            continue
        _same(key, want, shell.user_ns[key], case.rtol, case.traced_int)
    for key, value in given.items():      # a name the cell did not rebind is the user's array,
        if isinstance(value, np.ndarray) and eager_ns[key] is eager_args[key]:   # written in place
            assert shell.user_ns[key] is value, key


@pytest.mark.parametrize("name, flags", _params(expect_error=True))
def test_jit_fails_clearly(name, flags, monkeypatch):
    use_flags(monkeypatch, flags)
    case = CASES[name]
    error, pattern, fragment = case.error
    with quiet(), pytest.raises(error) as info:
        nbxla.jit(case.fn)(*case.make_args().values())
    message = str(info.value)
    assert re.search(pattern, message), message
    _, first_line = _body(case.fn)
    assert info.value.location.line == first_line + _error_line(case.fn, fragment), message
    assert fragment.strip() in message
    assert info.value.hint, message                      # it says what to do instead


@pytest.mark.parametrize("name, flags", _params(expect_error=True))
def test_cell_fails_clearly(shell, name, flags, monkeypatch):
    use_flags(monkeypatch, flags)
    case = CASES[name]
    error, pattern, fragment = case.error
    source, _ = _body(case.fn)
    shell.user_ns.update(_helpers(case.fn))
    shell.user_ns.update(case.make_args())
    with quiet():
        result, out = run(shell, "%%xla\n" + source)
    assert isinstance(result.error_in_exec, error), out
    assert re.search(pattern, out), out
    line = _error_line(case.fn, fragment) + 2             # line 1 is %%xla
    assert f"Cell In[{result.execution_count}], line {line}\n    {fragment.strip()}" in out, out
    assert "result" not in shell.user_ns


def test_there_are_enough_kernels():
    assert len(CASES) >= 40
