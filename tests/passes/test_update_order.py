"""Readers of an array scheduled before the kernel that updates it in place
(passes/update_order.py).

A loop step that writes ``cp[i]`` and then reads the old ``cp`` in an independent kernel
(Thomas's tridiagonal sweep) made the update copy the whole array every step: 0.23x NumPy at
20 000 points.  The structural assertion: every window update of the loop body writes into its
operand's buffer (``BufferPlan.operand_buffers``).  Oracle: eager NumPy (``check`` on the
evaluator, and the CPU backend's results and written arguments).
"""

from __future__ import annotations

import numpy as np
import pytest

import nbxla
from nbxla.passes.update_order import updated_operand
from nbxla.runtime.cache import CompilationCache
from tests.frontend_util import check, quiet, use_flags

RNG = np.random.default_rng(35)


@pytest.fixture(autouse=True)
def _loops_stay_loops(monkeypatch):
    use_flags(monkeypatch, "--unroll_budget=0")


def forward_sweep(a, b, c, d):
    """Thomas's algorithm: the forward sweep updates ``cp`` and then reads ``cp[i - 1]`` again
    (in ``dp``'s kernel, which recomputes ``m``)."""
    n = d.shape[0]
    cp = np.empty(n)
    dp = np.empty(n)
    cp[0] = c[0] / b[0]
    dp[0] = d[0] / b[0]
    for i in range(1, n):
        m = b[i] - a[i] * cp[i - 1]
        cp[i] = c[i] / m
        dp[i] = (d[i] - a[i] * dp[i - 1]) / m
    x = np.empty(n)
    x[n - 1] = dp[n - 1]
    for i in range(n - 2, -1, -1):
        x[i] = dp[i] - cp[i] * x[i + 1]
    return x


def crossed_sweep(x, y):
    """Each update reads the other's old array (a tuple assignment): only one order can be in
    place; the other update copies, and the results stay right."""
    for i in range(1, x.shape[0]):
        x[i], y[i] = x[i - 1] + y[i - 1], x[i - 1] * y[i - 1] * 0.5
    return x, y


def reads_after_update(x, y):
    """The reader needs the update (it reads the new ``x``): it must stay after it."""
    for i in range(1, x.shape[0]):
        x[i] = x[i - 1] * 0.5 + 1.0
        y[i] = x[i] + x[i - 1] + y[i - 1]
    return x, y


def _tridiagonal(n):
    return RNG.random(n), RNG.random(n) + 4.0, RNG.random(n), RNG.random(n)


def _loop_body_updates(compilation):
    """(loop body's window updates, those written into their operand's buffer)."""
    plan = compilation.pipeline.facts["buffer-assignment"]
    updates, in_place = [], []
    for comp in compilation.optimized.computations:
        for loop in comp.instructions:
            if loop.opcode != "while":
                continue
            body = loop.attrs["body"]
            nested = plan.nested[body.name]
            for instr in body.instructions:
                if updated_operand(instr) is not None:
                    updates.append(instr.name)
                    if instr.name in nested.operand_buffers:
                        in_place.append(instr.name)
    return updates, in_place


@pytest.mark.parametrize("n", [2, 6, 40])
def test_forward_sweep_matches_numpy(n):
    check(forward_sweep, *_tridiagonal(n))
    check(crossed_sweep, RNG.random(n), RNG.random(n))
    check(reads_after_update, RNG.random(n), RNG.random(n))


@pytest.mark.parametrize("n", [6, 300])
def test_forward_sweep_updates_in_place_on_cpu(n):
    args = _tridiagonal(n)
    want = forward_sweep(*args)
    f = nbxla.jit(forward_sweep, cache=CompilationCache())
    with quiet():
        got = f(*args)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    updates, in_place = _loop_body_updates(f.last_compilation)
    assert len(updates) == 3 and in_place == updates, (updates, in_place)


@pytest.mark.parametrize("fn", [crossed_sweep, reads_after_update])
def test_orders_it_cannot_change_stay_right_on_cpu(fn):
    x, y = RNG.random(50), RNG.random(50)
    want = fn(x.copy(), y.copy())
    f = nbxla.jit(fn, cache=CompilationCache())
    x2, y2 = x.copy(), y.copy()
    with quiet():
        got = f(x2, y2)
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, rtol=1e-12)
    np.testing.assert_allclose(x2, want[0], rtol=1e-12)
    updates, in_place = _loop_body_updates(f.last_compilation)
    assert updates and in_place, (updates, in_place)     # (at least one order is in place)

