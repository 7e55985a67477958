"""Run-time checks (NumPy's IndexError / ValueError decided by values) made inside loops and
branches: a rolled loop carries each as state (folded over the iterations), a conditional's
branch leaves the if to its select form.  Before, the check named a value of the loop body's
computation as a program output: an internal ``KeyError`` with an id in ``clone_module``.

Trip counts on both sides of the unroll threshold (``--unroll_max``, 4): 0, 1, 4, 5 and more.
"""

from __future__ import annotations

import numpy as np
import pytest

from nbxla.errors import IndexCheckError, ValueCheckError
from tests.frontend_util import check, eager_error, jit, quiet

TRIPS = [0, 1, 4, 5, 40]


def stockham_fft(N, R, K, x, y):
    """npbench's radix-R Stockham FFT: reshapes and transposes of ``y`` in a loop of K steps,
    twiddles with ``R ** i`` (an integer power of the traced loop index: a run-time check)."""
    i_coord, j_coord = np.mgrid[0:R, 0:R]
    dft_mat = np.exp(-2.0j * np.pi * i_coord * j_coord / R)
    y[:] = x[:]
    ii_coord, jj_coord = np.mgrid[0:R, 0:R**K]
    for i in range(K):
        yv = np.reshape(y, (R**i, R, R**(K - i - 1)))
        tmp_perm = np.transpose(yv, axes=(1, 0, 2))
        D = np.empty((R, R**i, R**(K - i - 1)), dtype=np.complex128)
        tmp = np.exp(-2.0j * np.pi * ii_coord[:, :R**i] * jj_coord[:, :R**i] / R**(i + 1))
        D[:] = np.repeat(np.reshape(tmp, (R, R**i, 1)), R**(K - i - 1), axis=2)
        tmp_twid = np.reshape(tmp_perm, (N,)) * np.reshape(D, (N,))
        y[:] = np.reshape(dft_mat @ np.reshape(tmp_twid, (R, R**(K - 1))), (N,))


@pytest.mark.parametrize("R,K", [(2, 1), (2, 4), (2, 5), (2, 7), (3, 5), (4, 3)])
def test_stockham_fft(R, K):
    rng = np.random.default_rng(K)
    N = R**K
    x = rng.random(N) + 1j * rng.random(N)
    y = np.zeros(N, np.complex128)
    check(stockham_fft, N, R, K, x, y, transcendental=True)
    got = y.copy()
    with quiet():
        jit(stockham_fft)(N, R, K, x, got)
    np.testing.assert_allclose(got, np.fft.fft(x), rtol=1e-9, atol=1e-9)


def scale_by_powers(x, p, n):
    for i in range(n):
        x[i] = x[i] * 2 ** p[i]
    return x


def gather_pairs(x, idx, n):
    s = np.zeros(2)
    for i in range(n):
        s += x[idx[i:i + 2]]
    return s


def nested_powers(x, p, n):
    for i in range(n):
        for j in range(6):
            x[i, j] = x[i, j] * 2 ** p[i, j]
    return x


@pytest.mark.parametrize("n", TRIPS)
def test_checks_in_loops_pass(n):
    check(scale_by_powers, np.arange(45.0), np.arange(45) % 7, n)
    check(gather_pairs, np.arange(5.0), np.arange(46) % 5, n)
    check(nested_powers, np.ones((45, 6)), np.arange(45 * 6).reshape(45, 6) % 5, n)


@pytest.mark.parametrize("n", TRIPS)
def test_checks_in_loops_raise_numpys_error(n):
    """An iteration that NumPy raises in makes the compiled call raise the same error type;
    a loop that stops before it does not."""
    p = np.arange(45) % 7
    p[3] = -1
    idx = np.arange(46) % 5
    idx[4] = 5
    pp = np.arange(45 * 6).reshape(45, 6) % 5
    pp[2, 5] = -2
    for fn, args, error in ((scale_by_powers, (np.arange(45.0), p, n), ValueCheckError),
                            (gather_pairs, (np.arange(5.0), idx, n), IndexCheckError),
                            (nested_powers, (np.ones((45, 6)), pp, n), ValueCheckError)):
        numpy_error = eager_error(fn, *args)
        if numpy_error is None:
            check(fn, *args)
            continue
        with quiet(), pytest.raises(error) as info:
            jit(fn)(*args)
        assert isinstance(info.value, numpy_error), info.value
        assert __file__ in str(info.value), str(info.value)      # the line of the write


def powers_in_expensive_branch(x, p):
    if x[0, 0] > 0.5:
        y = x * 2 ** p[0]               # branches this large become a conditional
    else:
        y = x + 1.0
    return y


@pytest.mark.parametrize("first", [0.9, 0.1])
def test_check_in_a_branch(first):
    x = np.full((200, 200), 0.25)
    x[0, 0] = first
    check(powers_in_expensive_branch, x, np.array([3, 1]))
