"""``break``/``continue`` inside an ``if`` in a loop (dynamic-programming kernels), on traced
and on Python conditions: ``for ... else`` (the else runs when no break happened) and
``for x in traced`` with a break compile; before, both were refused ("`if` on a traced
value whose body holds break").  Trip counts on both sides of ``--unroll_max`` (4).
"""

from __future__ import annotations

import numpy as np
import pytest

import nbxla
from tests.frontend_util import check, jit, quiet

RNG = np.random.default_rng(11)
TRIPS = [0, 1, 4, 5, 30]


def prefix_below(x, t):
    s = 0.0
    for i in range(x.shape[0]):
        if x[i] > t:
            break
        s += x[i]
    return s


def prefix_or_flag(x, t):
    s = 0.0
    for i in range(x.shape[0]):
        if x[i] > t:
            break
        s += x[i]
    else:
        s = -1.0                         # no element above t
    return s, i


def first_index_else(x, t, n):
    found = -1
    for i in range(n):
        if x[i] > t:
            found = i
            break
    else:
        found = n
    return found


def python_stop(x, n):
    s = 0.0
    for i in range(x.shape[0]):
        if i == n:
            s = s * 2
            break
        elif x[i] < 0.1:
            continue
        s += x[i]
    else:
        s = s + 100.0
    return s


def else_without_break(x):
    total = 0.0
    for i in range(x.shape[0]):
        if x[i] < 0.5:
            continue
        total += x[i]
    else:
        total = total * 2
    return total


def while_else(x, t):
    i = 0
    s = 0.0
    while i < x.shape[0]:
        if x[i] > t:
            break
        s += x[i]
        i += 1
    else:
        s = -s
    return s, i


def items_until(x, t):
    s = 0.0
    for v in x:
        if v > t:
            break
        s += v
    return s


def rows_until(A, t):
    acc = np.zeros(A.shape[1])
    for row in A:
        if row.sum() > t:
            break
        acc += row
    else:
        acc -= 1.0
    return acc


def knapsack(w, v, cap):
    """0/1 knapsack over capacities, stopping once an item no longer fits (w sorted)."""
    dp = np.zeros(cap + 1)
    for i in range(w.shape[0]):
        for c in range(cap, 0, -1):
            if w[i] > c:
                break
            dp[c] = max(dp[c], dp[c - w[i]] + v[i])
    return dp


@pytest.mark.parametrize("n", [0, 2, 4, 5, 30])   # (1: test_one_step_before_a_traced_break...)
@pytest.mark.parametrize("t", [0.5, 2.0])          # a break, and none
def test_break_on_traced_conditions(n, t):
    x = RNG.random(n)
    check(prefix_below, x, t)
    check(first_index_else, RNG.random(max(n, 1)), t, n)
    check(while_else, x, t)
    check(items_until, x, t)
    check(rows_until, RNG.random((n, 3)), 1.5 * t)
    if n:
        check(prefix_or_flag, x, t)


@pytest.mark.parametrize("n", TRIPS)
def test_break_on_python_conditions(n):
    x = RNG.random(30)
    check(python_stop, x, n)
    check(else_without_break, x[:n])


def test_dynamic_programming_with_break():
    check(knapsack, np.sort(RNG.integers(1, 6, 7)), RNG.random(7), 12)


def test_break_over_a_python_list_still_names_the_line():
    def first_above(x, limits):
        found = 0.0
        for v in limits:
            if x.max() > v:
                found = v
                break
        else:
            found = -1.0
        return found
    with quiet(), pytest.raises(nbxla.NotCompilableError) as info:
        jit(first_above)(RNG.random(10), [3.0, 2.0, 0.5])
    assert "if x.max() > v:" in str(info.value)


@pytest.mark.parametrize("x", [[0.9], [0.1], [0.1, 0.9], [0.1, 0.2]])
def test_one_step_before_a_traced_break(x):
    # (was a known gap: a `for` with a traced break becomes a while over its own counter,
    # which after one Python step was traced with the counter still a Python int, here one
    # past the end: x[1] of a 1-element x.  The loop now rolls from before that step.)
    check(prefix_below, np.array(x), 0.5)
    check(prefix_or_flag, np.array(x), 0.5)
