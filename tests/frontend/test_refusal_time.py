"""A program that cannot be compiled is refused at once, whatever its trip counts.

A loop that cannot be traced once into an HLO ``while`` is unrolled (traced step by step);
before, a long one traced every step and then optimized a program that grew with the trip
count (an azimuthal integration over 1000 bins: more than a minute) before anything
happened.  Now one of more than ``UNROLL_LIMIT`` steps is refused before its first step, and
any unrolled loop (a ``while`` on a Python condition too) is refused as soon as its steps
add ``UNROLL_BUDGET`` instructions.  Both sides of each threshold are tested.

The times asserted are loose (a loaded CI machine); the messages print the measured ones.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

import nbxla
from nbxla.frontend import loops
from tests.frontend_util import check, jit, quiet

RNG = np.random.default_rng(3)


def azimint(data, radius, npt):
    """npbench's azimuthal integration: a mean over each radius bin (x[mask] kept per bin, so
    the loop cannot be traced once: it is unrolled)."""
    rmax = radius.max()
    res = np.zeros(npt, dtype=np.float64)
    for i in range(npt):
        r1 = rmax * i / npt
        r2 = rmax * (i + 1) / npt
        mask_r12 = np.logical_and((r1 <= radius), (radius < r2))
        values_r12 = data[mask_r12]
        res[i] = values_r12.mean()
    return res


def count_above(x, n):
    """Each step needs the number of selected elements as a Python int: never compilable."""
    total = 0
    for i in range(n):
        total += int(np.count_nonzero(x > i)) + len(x[x > x[i % 7]])
    return total


def python_while(x, n):
    k = 0
    while k < n:                        # a Python condition: rolled, k traced (past --unroll_max steps)
        x = x * 0.5 + np.sin(x)
        k += 1
    return x


def python_while_needs_k(x, n):
    k = 0
    while k < n:                        # k needed as a Python int (a shape): traced step by step
        x = x * 0.5 + np.sin(x) + np.ones(k % 2 + 1).sum()
        k += 1
    return x


def _refused(fn, *args):
    start = time.perf_counter()
    with quiet(), pytest.raises(nbxla.NbxlaError) as info:
        jit(fn)(*args)
    return info.value, time.perf_counter() - start


def test_a_million_uncompilable_steps_are_refused_at_once():
    error, seconds = _refused(count_above, RNG.random(16), 10**6)
    assert isinstance(error, nbxla.NotCompilableError), error
    assert seconds < 10, f"refused after {seconds:.2f} s"
    print(f"10**6 steps refused in {seconds * 1e3:.0f} ms")


def test_long_selection_loops_roll():
    # (azimint's selection is used inside each step only: the loop rolls, whatever its length)
    check(azimint, RNG.random(50), RNG.random(50), loops.UNROLL_LIMIT + 1)


def test_unrolled_loops_stop_at_the_instruction_budget():
    # a while on a Python condition that cannot roll is traced step by step; its steps add up
    # to the budget
    error, seconds = _refused(python_while_needs_k, RNG.random(8), loops.UNROLL_LIMIT)
    assert "too long to unroll" in str(error), str(error)
    assert seconds < 10, f"refused after {seconds:.2f} s"


@pytest.mark.parametrize("npt", [0, 1, 4, 5, 12])
def test_short_unrolled_loops_compile(npt):
    check(azimint, RNG.random(50), RNG.random(50), npt)


def test_python_while_loops():
    check(python_while, RNG.random(8), 30)
    check(python_while, RNG.random(8), loops.UNROLL_LIMIT + 1)         # (rolled: not refused)
    check(python_while_needs_k, RNG.random(8), 30)
    error, seconds = _refused(python_while_needs_k, RNG.random(8), 10**6)
    assert "too long to unroll" in str(error) and "while k < n:" in str(error), str(error)
    assert seconds < 10, f"refused after {seconds:.2f} s"
