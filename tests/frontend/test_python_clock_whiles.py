"""``while`` loops whose condition reads only Python numbers the body changes (a float clock:
``while t < t_end: ...; t += dt``; a Python counter ``while k < n``).  Past ``--unroll_max``
steps run in Python they are rolled from before the last one, those numbers traced (same IEEE
arithmetic, same trip count); before, every step was unrolled (20 steps of an advection: 40
kernels, 0.4x NumPy) and past 1000 steps the loop was refused.  Where the body needs such a
number as a Python value, or the condition reads none, the loop stays in Python as before.
Oracle: eager NumPy, values and dtypes, trip counts on both sides of the threshold.
"""

from __future__ import annotations

import numpy as np
import pytest

import nbxla
from tests.frontend_util import UNROLL_FLAGS, check, check_or_same_error, quiet, use_flags

RNG = np.random.default_rng(35)


def advect_until(u, c, dx, t_end):
    t = 0.0
    dt = 0.5 * dx / c
    steps = 0
    while t < t_end:
        u[1:] = u[1:] - c * dt / dx * (u[1:] - u[:-1])
        u[0] = u[-1]
        t += dt
        steps += 1
    return u, steps, t


def counter(x, n):
    k = 0
    while k < n:
        x = x * 0.5 + k
        k += 1
    return x, k


def clock_as_python_value(x, t_end):
    t = 1.0
    while t < t_end:
        x = x + x[:int(t) % 3 + 1].sum()       # (a slice bound: a Python int)
        t += 0.5
    return x


def list_condition(x):
    parts = []
    while len(parts) < 7:
        parts.append(x * len(parts))
    return sum(parts)


@pytest.mark.parametrize("flags", UNROLL_FLAGS)
@pytest.mark.parametrize("t_end", [0.0, 0.02, 0.05, 0.06, 0.5, 1.3])
def test_float_clock_matches_numpy(monkeypatch, flags, t_end):
    use_flags(monkeypatch, flags)
    check(advect_until, RNG.random(100), 1.0, 0.01, t_end)


@pytest.mark.parametrize("n", [0, 3, 5, 6, 40])
def test_python_counter_matches_numpy(n):
    check(counter, RNG.random(5), n)


@pytest.mark.parametrize("t_end", [2.0, 6.0])
def test_numbers_needed_as_python_values_stay_in_python(t_end):
    check_or_same_error(clock_as_python_value, RNG.random(5), t_end)
    check(list_condition, RNG.random(3))


def test_a_long_float_clock_loop_is_one_while():
    """1301 steps (the float clock's rounding): refused before (past 1000 steps run in Python); now one HLO while."""
    f = nbxla.jit(advect_until)
    u = RNG.random(100)
    want = advect_until(u.copy(), 1.0, 0.01, 6.5)
    with quiet():
        got = f(u.copy(), 1.0, 0.01, 6.5)
    assert int(got[1]) == want[1] > 1000
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    assert "rolled" in [how for _, how, _ in f.last_compilation.loop_decisions]
    assert f.last_compilation.stage("optimized_hlo").count(" while(") == 1
