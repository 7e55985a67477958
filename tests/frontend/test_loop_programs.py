"""Whole programs: loops that stay loops, create-then-fill, control flow on array values.

Each kernel (polybench / npbench style) runs eagerly with NumPy (the oracle) and through
``@nbxla.jit``: the result, its dtype and the arguments afterwards (writes into them are
visible to the caller) must agree.  Kernels marked ``rolled`` must keep their loop as an HLO
``while`` in the optimized module; ``test_trip_count_does_not_grow_the_program`` checks that
a 1000-step loop traces to the same program size as a 10-step one.  A few run as ``%%xla``
cells too.

Every kernel with a loop runs twice, with the default flags and with ``--unroll_max=0`` (every
loop rolled), and, where its trip count is the caller's to choose, at trip counts around the
unroll threshold (``TRIPS``): short test loops are unrolled, and a wrong answer on the rolled
path alone went unnoticed (issue 28).  Where NumPy raises (index 0 of an empty array), the
compiled function must raise the same type.
"""

from __future__ import annotations

import copy
import inspect
import re
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest

import nbxla
from nbxla import examples
from nbxla.errors import RuntimeCheckError
from nbxla.testing import compare_arrays
from tests.frontend_util import DEVICE, UNROLL_OFF, quiet, use_flags, with_unroll_flags
from tests.ipython_util import run, shell  # noqa: F401  (fixture)

RNG = np.random.default_rng(18)


def rand(*shape, dtype=np.float64):
    return RNG.random(shape).astype(dtype)


def spd(n):
    a = rand(n, n)
    return a @ a.T + n * np.eye(n)


@dataclass
class Case:
    fn: Callable
    # make_args(n) (with a default n): the arguments with which the kernel's main loop runs n
    # times; make_args() alone where the trip count is not the caller's to choose
    make_args: Callable[..., tuple]
    rolled: bool                  # the optimized HLO keeps a while (at the default size)
    rtol: float | None

    @property
    def sized(self) -> bool:
        return bool(inspect.signature(self.make_args).parameters)


CASES: dict[str, Case] = {}


def kernel(make_args, *, rolled=True, rtol=None, name=None):
    def register(fn):
        CASES[name or fn.__name__] = Case(fn, make_args, rolled, rtol)
        return fn
    return register


# ---- linear algebra with triangular loops (dynamic-length slices, masked) --------------------

kernel(lambda n=24: (spd(n),), rtol=1e-10)(examples.cholesky)


kernel(lambda n=20: (spd(n),), rtol=1e-9)(examples.lu)


@kernel(lambda n=17: (spd(n + 1),), rtol=1e-9)
def lu_outer(A):
    """Right-looking LU: a rank-1 update of the trailing block (masked on both axes)."""
    n = A.shape[0]
    for k in range(n - 1):
        A[k + 1:, k] /= A[k, k]
        A[k + 1:, k + 1:] -= np.outer(A[k + 1:, k], A[k, k + 1:])


@kernel(lambda n=16: (spd(n), rand(n)), rtol=1e-9)
def ludcmp(A, b):
    n = A.shape[0]
    x = np.zeros_like(b)
    y = np.zeros_like(b)
    for i in range(n):
        for j in range(i):
            w = A[i, j]
            w -= A[i, :j] @ A[:j, j]
            A[i, j] = w / A[j, j]
        for j in range(i, n):
            w = A[i, j]
            w -= A[i, :i] @ A[:i, j]
            A[i, j] = w
    for i in range(n):
        y[i] = b[i] - A[i, :i] @ y[:i]
    for i in range(n - 1, -1, -1):
        x[i] = (y[i] - A[i, i + 1:] @ x[i + 1:]) / A[i, i]
    return x, y


kernel(lambda n=30: (np.tril(rand(n, n)) + n * np.eye(n), rand(n)), rtol=1e-10)(examples.trisolv)


kernel(lambda n=23: (rand(n + 1) * 0.1,), rtol=1e-9)(examples.durbin)


kernel(lambda n=10: (rand(n + 2, n),), rtol=1e-9)(examples.gramschmidt)


@kernel(lambda n=12: (1.5, rand(n, n), rand(n, 10)), rtol=1e-10)
def trmm(alpha, A, B):
    for i in range(B.shape[0]):
        for j in range(B.shape[1]):
            B[i, j] += np.dot(A[i + 1:, i], B[i + 1:, j])
    B *= alpha


@kernel(lambda n=14: (1.5, 1.2, rand(n, n), rand(n, 9)), rtol=1e-10)
def syrk(alpha, beta, C, A):
    for i in range(A.shape[0]):
        C[i, :i + 1] *= beta
        for k in range(A.shape[1]):
            C[i, :i + 1] += alpha * A[i, k] * A[:i + 1, k]


@kernel(lambda n=16: (rand(n, n) * 10,))
def floyd_warshall(path):
    for k in range(path.shape[0]):
        path[:] = np.minimum(path[:], np.add.outer(path[:, k], path[k, :]))


@kernel(lambda n=40: (rand(20, 20), rand(20), n), rtol=1e-8)
def power_iteration(A, v, steps):
    for _ in range(steps):
        v = A @ v
        v = v / np.sqrt(v @ v)
    return v


# ---- npbench's loop shapes of issue 30 (dynamic-length slices feeding dots run at their true
# lengths, nbxla_masked_dot; a loop index's slices feeding one fused kernel per step) -----------

kernel(lambda n=12: (n + 1, float(n + 4), rand(n + 4, n + 1)), rtol=1e-9)(examples.correlation)


kernel(lambda n=12: (n, float(n + 3), rand(n + 3, n)), rtol=1e-9)(examples.covariance)


kernel(lambda n=10: (rand(n + 3, n),), rtol=1e-9)(examples.gramschmidt_outer)


kernel(lambda n=16: ((rand(n, n) * 20).astype(np.int32),), name="floyd_warshall_int32")(examples.floyd_warshall)


def _contour_args(points):
    ham = rand(3, 5, 5) + 1j * rand(3, 5, 5) + 4 * np.eye(5)
    pts = np.exp(1j * np.linspace(0, 2 * np.pi, points)) * np.linspace(0.7, 1.3, points)
    return 5, 7, 2, ham, pts, rand(5, 7) + 1j * rand(5, 7)


kernel(lambda n=6: _contour_args(n), rtol=1e-9)(examples.contour_integral)


kernel(lambda n=9: (1.5, 1.2, rand(n, 7), rand(n, n), rand(n, 7)), rtol=1e-9)(examples.symm)


kernel(lambda n=9: (1.5, 1.2, rand(n, n), rand(n, 6), rand(n, 6)), rtol=1e-9)(examples.syr2k)


kernel(lambda n=12: (rand(n, n),), rtol=1e-12)(examples.go_fast)


kernel(lambda n=9: (1.5, rand(n, n), rand(n, 5)), rtol=1e-9)(examples.trmm)


kernel(lambda n=20: ((rand(n) * 256).astype(np.uint8),))(examples.crc16)


# ---- recursions along time or an axis ------------------------------------------------------

kernel(lambda n=499: (rand(n + 1), 0.2, 0.3, 0.5), rtol=1e-10)(examples.iir_filter)


@kernel(lambda n=40: (rand(8, n, dtype=np.float32), 0.25, 0.5), rtol=1e-5)
def deriche_rows(img, a1, b1):
    """A causal recursive filter along the columns of every row (Deriche style)."""
    h, w = img.shape
    y = np.empty_like(img)
    ym1 = np.zeros_like(img[:, 0])
    for j in range(w):
        y[:, j] = a1 * img[:, j] + b1 * ym1
        ym1 = y[:, j]
    return y


@kernel(lambda n=49: (rand(6, n + 1),), rtol=1e-10)
def running_sum_columns(x):
    out = np.empty_like(x)
    out[:, 0] = x[:, 0]
    for j in range(1, x.shape[1]):
        out[:, j] = out[:, j - 1] + x[:, j]
    return out


@kernel(lambda n=9: (rand(n), rand(64)), rtol=1e-10)
def horner(coeffs, x):
    y = np.zeros_like(x)
    for k in range(coeffs.shape[0]):
        y = y * x + coeffs[k]
    return y


# ---- time-stepping stencils --------------------------------------------------------------------

@kernel(lambda n=19: (n + 1, rand(40), rand(40)), rtol=1e-10)
def jacobi_1d(TSTEPS, A, B):
    for t in range(1, TSTEPS):
        B[1:-1] = 0.33333 * (A[:-2] + A[1:-1] + A[2:])
        A[1:-1] = 0.33333 * (B[:-2] + B[1:-1] + B[2:])


kernel(lambda n=9: (n + 1, rand(16, 16), rand(16, 16)), rtol=1e-10)(examples.jacobi_2d)


kernel(lambda n=3: (n + 1, rand(12, 12)), rtol=1e-10)(examples.seidel_2d)


@kernel(lambda n=6: (n, rand(10, 12), rand(10, 12), rand(10, 12), rand(n)), rtol=1e-10)
def fdtd_2d(TMAX, ex, ey, hz, _fict_):
    for t in range(TMAX):
        ey[0, :] = _fict_[t]
        ey[1:, :] -= 0.5 * (hz[1:, :] - hz[:-1, :])
        ex[:, 1:] -= 0.5 * (hz[:, 1:] - hz[:, :-1])
        hz[:-1, :-1] -= 0.7 * (ex[:-1, 1:] - ex[:-1, :-1] + ey[1:, :-1] - ey[:-1, :-1])


@kernel(lambda n=200: (rand(64), 0.1, n), rtol=1e-9)
def heat_1d(u, c, steps):
    for _ in range(steps):
        u[1:-1] = u[1:-1] + c * (u[2:] - 2 * u[1:-1] + u[:-2])
    return u.sum()


@kernel(lambda n=12: ((rand(16, 16) < 0.35).astype(np.int64), n))
def game_of_life(X, steps):
    for _ in range(steps):
        nbrs = np.zeros_like(X)
        nbrs[1:-1, 1:-1] = (X[:-2, :-2] + X[:-2, 1:-1] + X[:-2, 2:] + X[1:-1, :-2] + X[1:-1, 2:]
                            + X[2:, :-2] + X[2:, 1:-1] + X[2:, 2:])
        X = ((nbrs == 3) | ((X == 1) & (nbrs == 2))).astype(X.dtype)
    return X


@kernel(lambda n=3: (n, 10, rand(10, 10)), rtol=1e-9)
def adi(TSTEPS, N, u):
    """polybench ADI (np.zeros for v, whose border NumPy's np.empty leaves unwritten):
    NumPy arrays made inside, filled inside nested rolled loops, one of them running down."""
    v = np.zeros(u.shape, dtype=u.dtype)
    p = np.empty(u.shape, dtype=u.dtype)
    q = np.empty(u.shape, dtype=u.dtype)
    a, b, c, d, f = -0.5, 1.5, -0.5, -0.25, -0.25
    for t in range(1, TSTEPS + 1):
        v[0, 1:N - 1] = 1.0
        p[1:N - 1, 0] = 0.0
        q[1:N - 1, 0] = v[0, 1:N - 1]
        for j in range(1, N - 1):
            p[1:N - 1, j] = -c / (a * p[1:N - 1, j - 1] + b)
            q[1:N - 1, j] = (-d * u[j, 0:N - 2] + (1.0 + 2.0 * d) * u[j, 1:N - 1] - f * u[j, 2:N]
                             - a * q[1:N - 1, j - 1]) / (a * p[1:N - 1, j - 1] + b)
        v[N - 1, 1:N - 1] = 1.0
        for j in range(N - 2, 0, -1):
            v[j, 1:N - 1] = p[1:N - 1, j] * v[j + 1, 1:N - 1] + q[1:N - 1, j]
    return v


@kernel(lambda n=10: (n, RNG.integers(0, 4, n).astype(np.int32)))
def nussinov(N, seq):
    """npbench nussinov: max() of traced scalars, int() of a traced comparison, Python ifs on
    the indices inside rolled loops."""
    table = np.zeros((N, N), np.int32)
    for i in range(N - 1, -1, -1):
        for j in range(i + 1, N):
            if j - 1 >= 0:
                table[i, j] = max(table[i, j], table[i, j - 1])
            if i + 1 < N:
                table[i, j] = max(table[i, j], table[i + 1, j])
            if j - 1 >= 0 and i + 1 < N:
                if i < j - 1:
                    table[i, j] = max(table[i, j], table[i + 1, j - 1] + int(seq[i] + seq[j] == 3))
                else:
                    table[i, j] = max(table[i, j], table[i + 1, j - 1])
            for k in range(i + 1, j):
                table[i, j] = max(table[i, j], table[i, k] + table[k + 1, j])
    return table


# ---- while on array values -------------------------------------------------------------------

# (The while kernels' trip counts are their convergence's, not an argument's: one size each.)
kernel(lambda: (rand(32) + 0.5,), rtol=1e-12)(examples.newton_sqrt)


# (zeros, as npbench starts it: about 300 steps at this size until the flow settles)
kernel(lambda: (3, np.zeros((17, 19)), np.zeros((17, 19)), .01, 2 / 18, 2 / 16, np.zeros((17, 19)), 1.0, .1, 1.0),
       rtol=1e-9)(examples.channel_flow)


@kernel(lambda n=12: (rand(8), n), rtol=1e-12)
def helper_defined_in_the_loop(x, n):
    """A ``def`` (and a lambda) run again by every step: the same code, a new function object."""
    for i in range(n):
        def relax(y):
            return 0.5 * y + i * x[:1]
        scale = lambda y: y * 0.9  # noqa: E731
        x = scale(relax(x))
    return x


@kernel(lambda: (rand(8),), rtol=1e-12)
def helper_defined_in_a_while(x):
    """The first step runs in Python (its condition is a Python float) and binds the helper; the
    traced steps define it again."""
    change = 1.0
    while change > 1e-9:
        def relax(y):
            return 0.5 * y + 0.1
        new = relax(x)
        change = np.abs(new - x).max()
        x = new
    return x


@kernel(lambda: (np.array([1.0, 0.0, -2.0]),), rtol=1e-12)
def bisection(p):
    """Root of x**2 - 2 on [0, 2]: the interval's ends start as Python floats."""
    lo, hi = 0.0, 2.0
    while hi - lo > 1e-10:
        mid = 0.5 * (lo + hi)
        if p[0] * mid * mid + p[1] * mid + p[2] > 0:
            hi = mid
        else:
            lo = mid
    return lo


@kernel(lambda: (rand(10, 10) * 0.1, rand(10)), rtol=1e-9)
def fixed_point_iterations(M, b):
    x = np.zeros_like(b)
    it = 0
    while np.abs(M @ x + b - x).max() > 1e-11 and it < 500:
        x = M @ x + b
        it += 1
    return x, it


# ---- branches, min/max, conditional expressions, and/or -------------------------------------

@kernel(lambda n=60: (RNG.standard_normal(n),), rtol=1e-12)
def running_max_if(x):
    best = x[0]
    out = np.empty_like(x)
    for i in range(x.shape[0]):
        if x[i] > best:
            best = x[i]
        out[i] = best
    return out


@kernel(lambda n=50: (RNG.standard_normal(n), -0.5, 0.5), rtol=1e-12)
def clamp_builtin_minmax(x, lo, hi):
    y = np.empty_like(x)
    for i in range(x.shape[0]):
        y[i] = max(min(x[i], hi), lo)
    return y


@kernel(lambda n=40: (RNG.standard_normal(n),), rtol=1e-12)
def abs_sum_ifexp(x):
    s = 0.0
    for i in range(x.shape[0]):
        s = s + (x[i] if x[i] > 0 else -x[i])
    return s


@kernel(lambda n=40: (RNG.standard_normal(n), RNG.standard_normal(n)))
def count_both_positive(x, y):
    count = 0
    for i in range(x.shape[0]):
        if x[i] > 0 and not y[i] < 0:
            count += 1
    return count


@kernel(lambda n=30: (RNG.standard_normal(n),), rtol=1e-12)
def piecewise_elif(x):
    y = np.zeros_like(x)
    for i in range(x.shape[0]):
        if x[i] < -1:
            y[i] = -1.0
        elif x[i] < 1:
            y[i] = x[i] ** 3
        else:
            y[i] = 1.0 + abs(x[i] - 1)
    return y


@kernel(lambda n=19: (rand(n + 1),), rtol=1e-12)
def one_bubble_pass(x):
    for i in range(x.shape[0] - 1):
        if x[i] > x[i + 1]:
            x[i], x[i + 1] = x[i + 1], x[i]


# ---- create-then-fill -------------------------------------------------------------------------
# (Kernels without a loop take no trip count.)

kernel(lambda n=200: (RNG.integers(0, 10, n), 10))(examples.histogram_fill)


@kernel(lambda n=6: (rand(n), 5), rtol=1e-12)
def nested_create_then_fill(x, m):
    out = np.zeros((x.shape[0], m))
    for i in range(x.shape[0]):
        row = np.zeros(m)
        for j in range(m):
            row[j] = x[i] * j
        out[i] = row
    return out


@kernel(lambda: (rand(3, 8),), rolled=False, rtol=1e-12)
def fill_by_slices(a):
    u = np.empty_like(a[0])
    u[0] = a[0, 0]
    u[1:] = a[1, 1:] + a[2, :-1]
    v = np.full((2, 8), 7.0)
    v[1] = u
    v[0, ::2] = -u[::2]
    return v


@kernel(lambda: (RNG.standard_normal(12),), rolled=False, rtol=1e-12)
def fill_mask_and_fancy(x):
    out = np.zeros(12)
    out[x > 0] = 1.0
    out[[0, 3, 5]] = x[[1, 2, 4]]
    out[2:4] -= x[:2]
    return out


@kernel(lambda: (rand(5, 3),), rolled=False, rtol=1e-12)
def array_of_traced_scalars(pos):
    com = np.array([pos[:, 0].mean(), pos[:, 1].mean(), pos[:, 2].mean()])
    return pos - com


@kernel(lambda n=30: (rand(n, 4), rand(4)), rtol=1e-12)
def scale_rows_in_place(A, s):
    for i in range(A.shape[0]):
        A[i] *= s * i


@kernel(lambda n=30: (rand(n, 8),), rtol=1e-12)
def sum_over_rows(A):
    s = np.zeros(A.shape[1])
    for row in A:                       # iterating a traced array: rolled over its first axis
        s += row * row
    return s


@kernel(lambda n=25: (rand(n, 6),), rtol=1e-12)
def enumerate_rows(A):
    out = np.empty_like(A)
    for i, row in enumerate(A, 1):
        out[i - 1] = row / i
    return out, row                     # the loop variable keeps its last value


@kernel(lambda n=40: (RNG.integers(0, 256, n).astype(np.uint8),))
def crc16_bits(data):
    crc = 0xFFFF
    for b in data:
        cur = 0xFF & b
        for _ in range(8):
            if (crc & 0x0001) ^ (cur & 0x0001):
                crc = (crc >> 1) ^ 0x8408
            else:
                crc >>= 1
            cur >>= 1
    crc = ~crc & 0xFFFF
    return (crc << 8) | ((crc >> 8) & 0xFF)


@kernel(lambda: (rand(6, 4),), rolled=False, rtol=1e-12)     # (the loop is over a Python list)
def python_list_items(A):
    out = A
    for w, shift in [(0.5, 1), (2.0, -1)]:      # a Python list: iterated in Python
        out = out * w + np.roll(out, shift, axis=0)
    return out


@kernel(lambda n=10: (np.linspace(0.0, 0.9e-3 * 2.0 ** n, 10),), rtol=1e-12)
def halve_until_small(x):
    """(n halvings bring the largest element, the last, below 1e-3; at least one runs.)"""
    i = 0
    while True:
        x = x * 0.5
        i += 1
        if np.max(x) < 1e-3:
            break
    return x, i


@kernel(lambda: (rand(5) + 1, 1e-10), rtol=1e-12)     # (trips: where the break comes)
def newton_with_break(x, tol):
    for it in range(1000):
        x = 0.5 * (x + 2.0 / x)
        if np.abs(x * x - 2.0).max() < tol:
            break
    return x, it                        # the index at the break, as in Python


@kernel(lambda n=30: (rand(n, 4),), rtol=1e-12)
def skip_small_rows(x):
    s = np.zeros_like(x[0])
    for i in range(x.shape[0]):
        if x[i].sum() < 2.0:
            continue
        s += x[i]
    return s


@kernel(lambda n=12: (rand(n, 9), 0.95))
def first_above_per_row(A, v):
    first = np.full(A.shape[0], -1)
    for i in range(A.shape[0]):
        for j in range(A.shape[1]):
            if A[i, j] > v:
                first[i] = j
                break
    return first


@kernel(lambda: (RNG.standard_normal((200, 200)), rand(200, 30)), rolled=False, rtol=1e-10)   # (no loop)
def expensive_branches(x, y):
    if x.sum() > 0:                     # large branches: an HLO conditional runs only one
        z = np.exp(x) @ y + np.sin(x).sum()
    else:
        z = np.log1p(np.abs(x)) @ y
    return z


@kernel(lambda: (rand(150, 150),), rolled=False, rtol=1e-12)     # (no loop)
def write_in_expensive_branch(A):
    if A.mean() > 0.5:
        A[:, :] = np.tanh(A) * 2
    else:
        A[0] = np.cos(A[0])
    return A.sum()


@kernel(lambda n=10: (rand(120, 120), n), rtol=1e-12)
def conditional_in_loop(A, steps):
    for i in range(steps):
        if A[i, 0] > 0.5:
            A = np.sqrt(A) + 1
        else:
            A = A * 0.5
    return A


@kernel(lambda n=7: (rand(n, 4),), rtol=1e-12)
def view_bound_then_base_written(A):
    for i in range(A.shape[0]):
        row = A[i]                      # a view of A, bound in the body...
        A[0] += row * 0.5               # ...then A written: the view is re-derived
    return A


@kernel(lambda n=7: (rand(n, 4),), rtol=1e-12)
def iterate_rows_while_writing(A):
    for row in A:
        A[0] += row * 0.5
    return A


# ---- loop programs of the loop benchmark's last additions (benchmarks/loop_programs.py) ----------

def _square_pulse(n):
    u = np.zeros((n, n))
    u[n // 3:2 * n // 3, n // 3:2 * n // 3] = 1.0
    return u


kernel(lambda n=12: (rand(n, 4),), rtol=1e-10)(examples.pairwise_distances)
kernel(lambda n=10: (rand(n, n),))(examples.widest_path)
kernel(lambda n=10: (rand(n + 6, n),), rtol=1e-9)(examples.gramschmidt_left)    # (more rows: full rank)
kernel(lambda n=10: (rand(n, n),), rtol=1e-9)(examples.lu_pivot)
kernel(lambda n=12: (np.linspace(-2, 1, 9)[None, :] + 1j * np.linspace(-1.2, 1.2, 7)[:, None], n),
       rtol=1e-12)(examples.mandelbrot)
kernel(lambda n=6: (n, _square_pulse(12), 0.2), rtol=1e-12)(examples.wave_2d)
kernel(lambda: (rand(300),), rolled=True, rtol=0)(examples.kahan_sum)
kernel(lambda n=10: (n, RNG.integers(0, 4, n).astype(np.int32)), name="nussinov_npbench")(examples.nussinov)
kernel(lambda n=8: (np.full((6, 1), 20.0 / 6), rand(6, 3), rand(6, 3), 6, n, 0.01, 1.0, 0.1),
       rtol=1e-10)(examples.nbody)


def _csr(rows, cols=9):
    """Row offsets with empty rows, uint32 as npbench makes them."""
    counts = RNG.integers(0, 4, rows)
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.uint32)
    return indptr, RNG.integers(0, cols, indptr[-1]).astype(np.uint32), rand(int(indptr[-1])), rand(cols)


kernel(lambda n=10: _csr(n), rtol=1e-12)(examples.spmv)

# (found by hunting, issue 30: loop variables reused by every nest, a sweep reading an array it
# updated, NumPy scalar types on array items, a float clock, an argsort per step)
kernel(lambda n=6: (rand(n, n + 1), rand(n + 1, n + 2), rand(n + 2, n), rand(n, n + 3)),
       rtol=1e-10)(examples.k3mm_loops)
kernel(lambda n=10: (rand(n), rand(n) + 4, rand(n), rand(n)), rtol=1e-12)(examples.thomas)
kernel(lambda n=10: (RNG.integers(0, 256, n).astype(np.uint8),))(examples.fnv1a)
kernel(lambda n=10: (rand(30), 1.0, 1.0 / 30, (n - 0.5) * 0.5 / 30), rtol=1e-12)(examples.advect_until)
kernel(lambda n=10: (rand(n), rand(n), 3), rtol=1e-12)(examples.knn_smooth)
# (sorts inside loops, native: windows of both sides of the typed sort's insertion-sort limit
# (64); ties under a stable argsort; NaNs and signed zeros in sorted rows)
kernel(lambda: (rand(100), rand(100), 3), rtol=1e-12, name="knn_smooth_long")(examples.knn_smooth)  # (selection)
kernel(lambda n=10: (rand(n + 69), 70), rtol=1e-12)(examples.rolling_median)
kernel(lambda n=10: (rand(n + 4), 5), rtol=1e-12, name="rolling_median_short")(examples.rolling_median)
kernel(lambda n=10: (RNG.integers(0, 5, (n, 80)).astype(np.float64), 4))(examples.top_k_rows)
kernel(lambda n=10: (np.where(rand(n, 70) < 0.1, np.nan, np.where(rand(n, 70) < 0.1, -0.0, rand(n, 70) - 0.5)),))(
    examples.sort_rows)
kernel(lambda n=10: (RNG.integers(-3, 3, (n, 90)).astype(np.int32), rand(n, 90)), rtol=1e-12)(examples.stable_ranks)


# ---- the runs --------------------------------------------------------------------------------

def _same(label, want, got, rtol):
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want), label
        for k, (w, g) in enumerate(zip(want, got)):
            _same(f"{label}[{k}]", w, g, rtol)
        return
    if want is None:
        assert got is None, label
        return
    if type(want) in (int, float):          # a Python number computed from traced values
        want = np.asarray(want)
    ok, detail = compare_arrays(np.asarray(got), np.asarray(want), rtol=rtol)
    assert ok, f"{label}: {detail}"


def test_there_are_enough_kernels():
    assert len(CASES) >= 30


def _run(case, args, device="cpu"):
    """The kernel on copies of ``args``, eagerly and compiled: the same result and arguments
    afterwards, or, where NumPy raises, an exception of the same type.  Returns the jit
    function (None where NumPy raised)."""
    eager, compiled = copy.deepcopy(args), copy.deepcopy(args)
    jitted = nbxla.jit(case.fn, device=device)
    with quiet():
        try:
            want = case.fn(*eager)
        except Exception as e:  # noqa: BLE001 - nbxla must raise the same type
            with pytest.raises(type(e)) as info:
                jitted(*compiled)
            # (a subclass is fine -- nbxla's IndexCheckError is an IndexError -- but not one
            # of the compiler's internal errors that happens to derive from the same type)
            assert not isinstance(info.value, nbxla.NbxlaError) or \
                isinstance(info.value, RuntimeCheckError), repr(info.value)
            return None
        got = jitted(*compiled)
    _same("result", want, got, case.rtol)
    for k, (w, g) in enumerate(zip(eager, compiled)):
        if isinstance(w, np.ndarray):
            _same(f"argument {k}", w, g, case.rtol)
    return jitted


@pytest.mark.parametrize("name, flags", with_unroll_flags(CASES))
def test_kernel_matches_numpy(name, flags, monkeypatch):
    # (``rolled`` is about the step count: the cost rule, which unrolls cheap bodies of more
    # steps, is off here and checked by test_cheap_loops_unroll_by_cost)
    use_flags(monkeypatch, f"{flags} --unroll_budget=0")
    case = CASES[name]
    jitted = _run(case, case.make_args())
    text = jitted.last_compilation.stage("optimized_hlo")
    assert (" while(" in text) == case.rolled, text[:2000]


# Trip counts of each kernel's main loop: none, one, the most that are unrolled by default
# (--unroll_max=4) and the fewest that are rolled, and a longer loop.  Run with the default
# flags (0, 1, 4 unrolled; 5, 16 rolled) and with --unroll_max=0 (all but 0 rolled).
TRIPS = (0, 1, 4, 5, 16)


@pytest.mark.parametrize("n", TRIPS)
@pytest.mark.parametrize("name, flags", with_unroll_flags({k: c for k, c in CASES.items() if c.sized}))
def test_kernel_trip_counts(name, flags, n, monkeypatch):
    """(On the reference evaluator, as the frontend's tests run: whether a loop is rolled is
    the frontend's choice, and this checks what it traces; test_kernel_matches_numpy runs
    each kernel compiled for the CPU.)"""
    use_flags(monkeypatch, flags)
    case = CASES[name]
    _run(case, case.make_args(n), DEVICE)


def _instruction_count(fn, *args) -> int:
    with quiet():
        jitted = nbxla.jit(fn)
        jitted(*args)
    return sum(1 for _ in jitted.last_compilation.hlo.instructions())


def test_cheap_loops_unroll_by_cost(monkeypatch):
    """Past --unroll_max steps, a loop whose steps times body size fit --unroll_budget is
    unrolled (its steps fuse into one kernel); one that does not fit stays a while."""
    def chain(x):
        for i in range(10):
            x = x * 1.01 + 0.5
        return x
    x = rand(128)
    for budget, rolled in (("", False), ("--unroll_budget=40", True), ("--unroll_budget=0", True)):
        monkeypatch.setenv("NBXLA_FLAGS", budget)
        with quiet():
            jitted = nbxla.jit(chain)
            _same("chain", chain(x), jitted(x), 1e-12)
        text = jitted.last_compilation.stage("optimized_hlo")
        assert (" while(" in text) == rolled, (budget, text[:1500])
        if not rolled:
            assert text.count(" fusion(") == 1, text
    monkeypatch.setenv("NBXLA_FLAGS", "")
    with quiet():
        jitted = nbxla.jit(heat_1d)
        u = rand(64)
        _same("heat_1d", heat_1d(u.copy(), 0.1, 200), jitted(u.copy(), 0.1, 200), 1e-9)
    assert " while(" in jitted.last_compilation.stage("optimized_hlo")      # 200 steps: too many


def test_trip_count_does_not_grow_the_program(monkeypatch):
    monkeypatch.setenv("NBXLA_FLAGS", "--unroll_budget=0")
    small = _instruction_count(examples.iir_filter, rand(10), 0.2, 0.3, 0.5)
    large = _instruction_count(examples.iir_filter, rand(1000), 0.2, 0.3, 0.5)
    assert small == large
    assert _instruction_count(heat_1d, rand(16), 0.1, 10) == _instruction_count(heat_1d, rand(16), 0.1, 1000)


def test_expensive_branches_become_a_conditional_cheap_ones_a_select():
    def cheap(x):
        if x[0] > 0:
            y = x * 2
        else:
            y = x - 1
        return y
    with quiet():
        for fn, args, want in ((expensive_branches, (rand(200, 200) - 0.5, rand(200, 30)), 1),
                               (cheap, (rand(8) - 0.5,), 0)):
            jitted = nbxla.jit(fn)
            np.testing.assert_allclose(jitted(*args), fn(*args), rtol=1e-10)
            assert jitted.last_compilation.stage("optimized_hlo").count(" conditional(") == want


@pytest.mark.parametrize("flags, rolled", [("--unroll_max=4", False), (UNROLL_OFF, True)])
def test_short_loops_unroll(flags, rolled, monkeypatch):
    """(And --unroll_max=0, with which the loop tests run a second time, rolls them.)"""
    use_flags(monkeypatch, flags)
    def three_steps(x):
        for i in range(3):
            x = x * 2 + i
        return x
    with quiet():
        jitted = nbxla.jit(three_steps)
        got = jitted(np.arange(4.0))
    np.testing.assert_array_equal(got, three_steps(np.arange(4.0)))
    assert (" while(" in jitted.last_compilation.stage("optimized_hlo")) == rolled


def test_loop_index_is_a_python_int_in_promotion():
    def scaled(x):
        out = np.zeros_like(x)
        for i in range(x.shape[0]):
            out[i] = x[i] * i + 0.5 * i
        return out
    x = rand(20, dtype=np.float32)
    with quiet():
        got = nbxla.jit(scaled)(x)
    want = scaled(x)
    assert got.dtype == want.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_a_name_bound_only_in_a_loop_that_ran_no_times_is_unbound():
    """As in Python: reading it raises UnboundLocalError (it read as ``<undefined>``, a
    sentinel object, and was returned as the result)."""
    def last_row(A):
        for i in range(A.shape[0]):
            row = A[i]
        return row

    def last_item(A):
        for item in A:
            pass
        return item

    def chosen(x, flag):
        if flag:                            # a Python value: only this branch runs
            y = x * 2
        return y
    for fn, args in ((last_row, (rand(0, 3),)), (last_item, (rand(0, 3),)), (chosen, (rand(3), False))):
        with quiet(), pytest.raises(UnboundLocalError, match="'(row|item|y)'"):
            nbxla.jit(fn)(*args)
    np.testing.assert_array_equal(nbxla.jit(last_row)(np.eye(3)), np.eye(3)[2])


label = "a global of this module"        # (test_a_local_never_reads_the_global_of_its_name)


def test_a_local_never_reads_the_global_of_its_name():
    """A function's local not bound yet entered a loop or branch as the module's global of the
    same name (a cell's namespace lookup), and came out as the result."""
    def last(x):
        for i in range(x.shape[0]):
            label = x[i]
        return label

    def chosen(x, flag):
        if flag:
            label = x * 2
        return label
    for fn, args in ((last, (rand(0),)), (chosen, (rand(3), False))):
        with quiet(), pytest.raises(UnboundLocalError, match="'label'"):
            nbxla.jit(fn)(*args)


def test_cell_name_bound_only_in_a_loop_that_ran_no_times_is_undefined(shell):
    shell.user_ns["x"] = rand(0)
    with quiet():
        result, out = run(shell, "%%xla\nfor i in range(x.shape[0]):\n    y = x[i] * 2\nz = y + 1\n")
    assert isinstance(result.error_in_exec, NameError), out
    assert "z" not in shell.user_ns


def test_break_in_a_loop_over_a_python_list_names_the_line():
    """(Exits of while and range loops become flags; a loop over another iterable stays a
    Python loop, where an exit on a traced value cannot be decided.)"""
    def first_above(x, limits):
        found = 0.0
        for v in limits:
            if x.max() > v:
                found = v
                break
        return found
    with quiet(), pytest.raises(nbxla.NotCompilableError) as info:
        nbxla.jit(first_above)(RNG.standard_normal(10), [3.0, 2.0, 1.0])
    message = str(info.value)
    assert "break/continue/return" in message and "if x.max() > v:" in message, message
    assert info.value.hint


def test_return_inside_traced_if_compiles_and_one_inside_a_loop_names_the_line():
    def sign_of_sum(x):
        if x.sum() > 0:
            return 1.0
        return -1.0

    def first_positive(x):
        for i in range(x.shape[0]):
            if x[i] > 0:
                return i
        return -1
    for x in (rand(4), -rand(4)):
        with quiet():
            assert nbxla.jit(sign_of_sum)(x) == sign_of_sum(x)
    with quiet(), pytest.raises(nbxla.NotCompilableError) as info:
        nbxla.jit(first_positive)(rand(4))
    assert "if x[i] > 0:" in str(info.value)


def test_branches_with_different_dtypes_are_refused():
    def mixed(x):
        if x[0] > 0.5:
            y = x.astype(np.float32)
        else:
            y = x
        return y
    with quiet(), pytest.raises(nbxla.NotCompilableError, match="different dtypes"):
        nbxla.jit(mixed)(rand(4))


def into_view(x):
    out = np.zeros((3, 4))
    row = out[1]
    row[0] = x[0]
    return out


def reaction_diffusion(n, x):
    """Views of arrays the function made, written through (the base sees every write)."""
    U = np.zeros((x.shape[0] + 2, x.shape[1] + 2))
    V = np.ones_like(U)
    u = U[1:-1, 1:-1]
    v = V[1:-1, 1:-1]
    u[:] = 1.0
    u += x * 0.1
    for i in range(n):
        Lu = U[:-2, 1:-1] + U[2:, 1:-1] + U[1:-1, :-2] + U[1:-1, 2:] - 4 * u
        uvv = u * v * v
        u += 0.1 * Lu - uvv
        v += 0.05 * uvv
        U[0, :] = U[-2, :]
    return U, V, u


def view_taken_before_the_base_is_written(x):
    U = np.zeros((4, 4))
    u = U[1:, 1:]
    w = U.reshape(2, 8)
    U[0] = x[0]
    return u * 2 + U[0, 0], w


def transposed_view_read_after_the_base_is_written(x):
    U = np.zeros((4, 4))
    t = U.T
    U[0] = x
    return t


@pytest.mark.parametrize("n", [0, 1, 4, 5, 23])
def test_views_of_arrays_made_inside_are_written_through(n):
    x = rand(5, 6)
    with quiet():
        _same("reaction_diffusion", reaction_diffusion(n, x), nbxla.jit(reaction_diffusion)(n, x), 1e-12)
        _same("into_view", into_view(x[0]), nbxla.jit(into_view)(x[0]), 1e-12)
        _same("view_taken_before", view_taken_before_the_base_is_written(x[0]),
              nbxla.jit(view_taken_before_the_base_is_written)(x[0]), 1e-12)


def test_a_view_nbxla_cannot_follow_is_refused_not_stale():
    with quiet(), pytest.raises(nbxla.NotCompilableError, match="view of a NumPy array that became traced"):
        nbxla.jit(transposed_view_read_after_the_base_is_written)(rand(4))


# ---- the same in cells ---------------------------------------------------------------------------

CELL = """\
y = np.zeros_like(x)
y[0] = x[0]
for n in range(1, x.shape[0]):
    y[n] = 0.5 * x[n] + 0.5 * y[n - 1]
k = 0.0
while np.abs(y).max() > 1e-3:
    y = y / 2
    k = k + 1
"""


def test_cell_with_loops(shell):
    x = rand(300)
    want = {"x": x.copy()}
    exec(CELL, {"np": np}, want)
    shell.user_ns["x"] = x
    with quiet():
        result, out = run(shell, "%%xla\n" + CELL)
    assert result.success, out
    for key in ("y", "k", "n"):
        _same(key, want[key], shell.user_ns[key], 1e-12)
    with quiet():
        result, out = run(shell, "%xla_ir stage=hlo")
    assert re.search(r"\bwhile\(", out), out


# ---- a name only one branch of a traced `if` binds ----------------------------------------------

def temporary_in_one_branch(n, x):
    for i in range(n):
        if x[i % 3] > 0.5:
            t = np.sin(x)               # a temporary of this branch, not read after the if
            x = x + t
        else:
            x = x * 0.5
    return x


def read_after_one_branch(x):
    if x[0] > 0.5:
        t = x * 2
    return t


@pytest.mark.parametrize("n", [0, 1, 4, 5, 20])
def test_a_temporary_of_one_branch_compiles(n):
    for first in (0.2, 0.9):
        x = np.array([first, 0.3, 0.7])
        with quiet():
            _same("result", temporary_in_one_branch(n, x), nbxla.jit(temporary_in_one_branch)(n, x), 1e-12)


def test_reading_a_name_one_branch_bound_is_refused(shell):
    with quiet(), pytest.raises(nbxla.NotCompilableError, match="bound in only one branch") as info:
        nbxla.jit(read_after_one_branch)(np.array([0.9, 0.1]))
    assert "if x[0] > 0.5:" in str(info.value)
    shell.user_ns["x"] = np.array([0.9, 0.1])
    with quiet():
        result, out = run(shell, "%%xla\nif x[0] > 0.5:\n    t = x * 2\n")
    assert not result.success and "bound in only one branch" in out, out
