"""Loops over a minor axis carry their arrays with that axis first (passes/loop_layouts.py).

Programs of npbench vadv's and deriche's shape: each step of a rolled loop reads and writes
one position of the last (or middle) axis, with recurrences between steps, reads at k - 1 and
k + 1, slices shifted in the other dims, steps left unrolled at the loop's edges, a carried
array read after the loop.  Oracles: eager NumPy for every program, and the reference
evaluator on the traced module before and after the pipeline up to the pass.  Both sides of
the cost decision are here: a long loop moves its state, a short one over a large array keeps
its layout (and still agrees with NumPy).
"""

from __future__ import annotations

import copy
import re

import numpy as np
import pytest

import nbxla
from nbxla.hlo.evaluator import evaluate, flatten
from nbxla.hlo.ir import clone_module
from nbxla.passes import (AlgebraicSimplifier, CommonSubexpressionElimination, DeadCodeElimination,
                          LoopLayouts, Pipeline, WhileStateElimination)
from tests.frontend_util import quiet

RNG = np.random.default_rng(3031)


def _compiled(fn, *args, rtol):
    jitted = nbxla.jit(fn)
    with quiet():
        got = jitted(*copy.deepcopy(args))
    want = fn(*copy.deepcopy(args))
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        assert np.asarray(g).dtype == np.asarray(w).dtype
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol)
    return jitted.last_compilation


def _pass_agrees_with_evaluator(compilation, args) -> bool:
    """The traced module before and after the pass evaluate alike; returns whether it moved any
    loop state."""
    before = clone_module(compilation.hlo)
    result = Pipeline([AlgebraicSimplifier(), CommonSubexpressionElimination(), WhileStateElimination(),
                       LoopLayouts(), DeadCodeElimination()]).run(before)
    want = flatten(evaluate(before, [copy.deepcopy(a) for a in args]))
    got = flatten(evaluate(result.module, [copy.deepcopy(a) for a in args]))
    for w, g in zip(want, got):
        tol = 1e-4 if np.asarray(w).dtype == np.float32 else 1e-10    # (sums in another order)
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)
    return any(r.changed for r in result.history if r.name == "loop-layouts")


def _while_states(compilation) -> list[str]:
    text = compilation.stage("optimized_hlo")
    return re.findall(r"%while[.\w]* = \(([^)]*)\) while", text)


def _moved(compilation, dims) -> bool:
    """Does a while of the optimized module carry an array of ``dims`` (the moved order)?"""
    want = "[" + ",".join(map(str, dims)) + "]"
    return any(want in state for state in _while_states(compilation))


# ---- the programs -----------------------------------------------------------------------------

def last_axis_recurrence(a, b, c):
    """c[:, :, k] from c[:, :, k - 1], a read at k + 1 and at k shifted by one row."""
    K = a.shape[2]
    for k in range(1, K - 1):
        c[:, :, k] = (a[1:, :, k + 1] + a[:-1, :, k]) * 0.5 + c[:, :, k - 1] * b[:, :, k]
    return c


def last_axis_with_edges(a, b, c):
    """Edge steps outside the loop (k = 0 and k = K - 1), a backward sweep, a carried array
    (``d``) also read whole after the loop."""
    K = a.shape[2]
    d = np.empty_like(c)
    d[:, :, 0] = a[1:, :, 0] * b[:, :, 0]
    c[:, :, 0] = b[:, :, 0]
    for k in range(1, K):
        d[:, :, k] = d[:, :, k - 1] * 0.5 + a[:-1, :, k] - c[:, :, k - 1] * b[:, :, k]
        c[:, :, k] = c[:, :, k - 1] + d[:, :, k]
    c[:, :, K - 1] = c[:, :, K - 2] * 2
    for k in range(K - 2, -1, -1):
        c[:, :, k] = c[:, :, k] - d[:, :, k] * c[:, :, k + 1]
    return c, d.sum(axis=2)


def middle_axis_recurrence(x, y):
    """deriche's columns: y[:, j] from y[:, j - 1] and y[:, j - 2], rows shifted."""
    J = x.shape[1]
    for j in range(2, J):
        y[1:, j] = 0.3 * x[1:, j] + 0.2 * x[:-1, j - 1] + 0.4 * y[1:, j - 1] - 0.1 * y[1:, j - 2]
    return y


def middle_of_three(x, y):
    """The middle axis of a 3-D array, read at j + 1 (a minor axis of 2: each row's run of the
    slice is a fraction of a cache line)."""
    J = x.shape[1]
    for j in range(1, J - 1):
        y[:, j, :] = y[:, j - 1, :] * 0.9 + x[:, j + 1, :]
    return y


@pytest.mark.parametrize("fn, shapes, moved, dtype", [
    # (states above the pass's CACHED_STATE_BYTES, 1 MiB: smaller loops keep their layout)
    (last_axis_recurrence, [(41, 40, 60), (40, 40, 60), (40, 40, 60)], (60, 40, 40), np.float64),
    (last_axis_recurrence, [(57, 56, 60), (56, 56, 60), (56, 56, 60)], (60, 56, 56), np.float32),
    (last_axis_with_edges, [(41, 40, 50), (40, 40, 50), (40, 40, 50)], (50, 40, 40), np.float64),
    (last_axis_with_edges, [(57, 56, 50), (56, 56, 50), (56, 56, 50)], (50, 56, 56), np.float32),
    (middle_axis_recurrence, [(200, 400), (200, 400)], (400, 200), np.float64),
    (middle_of_three, [(400, 200, 2), (400, 200, 2)], (200, 400, 2), np.float32),
])
def test_loops_over_a_minor_axis_carry_it_first(fn, shapes, moved, dtype):
    args = [RNG.random(s).astype(dtype) for s in shapes]
    rtol = 1e-4 if dtype == np.float32 else 1e-10
    compilation = _compiled(fn, *args, rtol=rtol)
    assert _moved(compilation, moved), _while_states(compilation)
    assert _pass_agrees_with_evaluator(compilation, args)


def short_loop_over_long_axis(a, c):
    """Six steps over an axis of 400: the transposes would move far more than the steps save."""
    for k in range(1, 7):
        c[:, :, k] = c[:, :, k - 1] * 0.5 + a[:, :, k]
    return c


def test_a_short_loop_keeps_its_layout():
    a, c = RNG.random((16, 16, 400)), RNG.random((16, 16, 400))
    compilation = _compiled(short_loop_over_long_axis, a, c, rtol=1e-10)
    states = _while_states(compilation)
    assert states and not _moved(compilation, (400, 16, 16)), states
    assert not _pass_agrees_with_evaluator(compilation, (a, c))


def long_loop_over_long_axis(a, c):
    for k in range(1, a.shape[2]):
        c[:, :, k] = c[:, :, k - 1] * 0.5 + a[:, :, k]
    return c


def test_the_same_loop_over_the_whole_axis_moves():
    a, c = RNG.random((16, 16, 400)), RNG.random((16, 16, 400))
    compilation = _compiled(long_loop_over_long_axis, a, c, rtol=1e-10)
    assert _moved(compilation, (400, 16, 16)), _while_states(compilation)


def whole_array_in_the_body(a, c):
    """The body also reads the whole of ``a`` (a sum): ``a`` keeps its layout (``c`` moves)."""
    for k in range(1, a.shape[2]):
        c[:, :, k] = c[:, :, k - 1] * 0.5 + a[1:, :, k] + a.sum()
    return c


def test_an_array_read_whole_in_the_body_keeps_its_layout():
    a, c = RNG.random((41, 40, 60)), RNG.random((40, 40, 60))
    compilation = _compiled(whole_array_in_the_body, a, c, rtol=1e-10)
    states = _while_states(compilation)
    assert _moved(compilation, (60, 40, 40)) and not _moved(compilation, (60, 41, 40)), states


def test_slices_in_long_runs_keep_their_layout():
    """The middle axis again, but a minor axis of 16 floats: each slice's rows are runs of 64
    bytes already, and moving saves less than the transposes cost."""
    x, y = RNG.random((120, 100, 16)).astype(np.float32), RNG.random((120, 100, 16)).astype(np.float32)
    compilation = _compiled(middle_of_three, x, y, rtol=1e-4)
    assert _while_states(compilation) and not _moved(compilation, (100, 120, 16)), _while_states(compilation)


def test_a_loop_whose_state_fits_in_cache_keeps_its_layout():
    """The same program as a moved one, with a state of 0.85 MiB (three arrays of 0.28 MiB): its
    strided slices are read from the cache."""
    args = [RNG.random(s) for s in [(31, 30, 40), (30, 30, 40), (30, 30, 40)]]
    compilation = _compiled(last_axis_recurrence, *args, rtol=1e-10)
    assert _while_states(compilation) and not _moved(compilation, (40, 30, 30)), _while_states(compilation)
    assert not _pass_agrees_with_evaluator(compilation, args)
