"""A ``while`` whose condition starts as a Python value and becomes traced after one step
(``udiff = 1.0; while udiff > tol: ...; udiff = traced``, channel flow's form): the step run in
Python is undone and the loop rolled from before it, so its body is traced, optimized and
compiled once, not twice (once peeled into the entry, once as the loop body).  Where the body
cannot roll from there, the step runs again in Python and the loop rolls after it (as
before).  And arrays made before a loop whose items the body writes by name become traced
before the loop's first trace (a trace that found the write traced the body again).  Every
case against eager NumPy: results and the arguments written in place.
"""

from __future__ import annotations

import numpy as np
import pytest

import nbxla
from tests.frontend_util import check, quiet

RNG = np.random.default_rng(31)


def relax_until_still(u, tol):
    """Smooth ``u`` in place until it changes by less than ``tol`` (a Python float first)."""
    diff, steps = 1.0, 0
    while diff > tol:
        old = u.copy()
        u[1:-1] = 0.5 * (u[:-2] + u[2:])
        diff = np.abs(u - old).max()
        steps += 1
    return steps, diff


def last_count(x):
    """A name bound from a Python counter in the body: after the loop it holds the last step's
    value (a trace that saw the counter as a Python int first must not keep that int)."""
    err, steps = x.sum(), 0
    while err > 0.1:
        last = steps
        steps += 1
        err = err / 2
    return last, steps


def starts_from_none(x):
    """The first step binds ``y`` (None before): the loop cannot roll from before it."""
    y, total = None, 0.0
    while y is None or total < 5.0:
        y = x * 2.0
        total = total + y.sum()
    return total, y


def promotes_an_array(x):
    """The step writes a traced value into a NumPy array made in the function."""
    acc = np.zeros(3)
    err = 1.0
    while err > 0.01:
        acc[0] = acc[0] + x.sum() * err
        err = err * 0.5 + x.min() * 0.0
    return acc, err


def python_all_along(x):
    """The condition never becomes traced: the loop runs in Python (unrolled)."""
    k, n = 0, 5
    while n > 1:
        x = x + n
        n //= 2
        k += 1
    return x, k


def _entry_ops(fn, *args):
    jitted = nbxla.jit(fn)
    with quiet():
        jitted(*[np.copy(a) if isinstance(a, np.ndarray) else a for a in args])
    return [i.opcode for i in jitted.last_compilation.hlo.entry.instructions]


@pytest.mark.parametrize("n,tol", [(8, 1e-3), (20, 1e-6), (3, 10.0)])
def test_relaxation_from_a_python_float(n, tol):
    check(relax_until_still, RNG.random(n), tol)


def test_body_traced_once():
    ops = _entry_ops(relax_until_still, RNG.random(12), 1e-3)
    assert ops.count("while") == 1
    # the smoothing step's reductions live in the loop body only, not peeled into the entry
    assert "reduce" not in ops


def test_name_bound_from_a_python_counter():
    check(last_count, np.array([3.0, 4.0]))
    check(last_count, np.array([0.3, 0.1]))


@pytest.mark.parametrize("scale", [0.1, 10.0])
def test_cannot_roll_from_before_the_step(scale):
    check(starts_from_none, RNG.random(4) * scale)


def test_step_that_promotes_an_array():
    check(promotes_an_array, RNG.random(5))


def test_python_condition_throughout():
    check(python_all_along, RNG.random(4))


# ---- arrays made before a loop and filled in it: traced before the first trace -------------

def fill_rows(x):
    out = np.empty((x.shape[0], 3))
    for i in range(x.shape[0]):
        out[i, :] = x[i] * np.arange(3.0)
    return out


def fill_with_aug_and_tuple(x):
    acc, hits = np.zeros(4), np.zeros(4)
    for i in range(x.shape[0]):
        acc[i % 4] += x[i]
        hits[i % 4], acc[0] = hits[i % 4] + 1.0, acc[0] * 0.5
    return acc, hits


def fill_until(x):
    out = np.zeros(x.shape[0])
    k, err = 0, 1.0
    while err > 1e-3:
        out[k % x.shape[0]] = err
        err = err * x.min()
        k += 1
    return out, k


def view_filled(x):
    buf = np.zeros((2, x.shape[0]))
    row = buf[1]                 # (a view: its base, not it, would be traced)
    for i in range(x.shape[0]):
        row[i] = x[i] * 2.0
    return buf


def _loop_traces(monkeypatch, fn, *args):
    from nbxla.frontend import loops
    traces = []
    original = loops._Loop._trace
    monkeypatch.setattr(loops._Loop, "_trace", lambda self: traces.append(self.lineno) or original(self))
    check(fn, *args)
    return traces


@pytest.mark.parametrize("n", [6, 40])
def test_filled_array_traced_once(monkeypatch, n):
    # (one trace of the body: the write into `out` no longer costs a second one)
    assert len(_loop_traces(monkeypatch, fill_rows, RNG.random(n))) == 1


def test_augmented_and_tuple_item_writes():
    check(fill_with_aug_and_tuple, RNG.random(11))


def test_filled_in_a_while_from_a_python_start():
    check(fill_until, RNG.random(5) * 0.5 + 0.2)


def test_a_view_written_by_name_stays_as_before():
    check(view_filled, RNG.random(7))


def test_rolled_from_the_start_with_the_steps_types(monkeypatch):
    # the names the undone step made traced (diff, steps, old: first bound in the body) give
    # the rolled loop its slot types up front: its body is traced once, not once per finding
    from nbxla.frontend import loops
    traces = []
    original = loops._Loop._trace
    monkeypatch.setattr(loops._Loop, "_trace",
                        lambda self: traces.append(self.counted) or original(self))
    check(relax_until_still, RNG.random(9), 1e-4)
    assert traces.count(False) == 1


# ---- steps run in Python over NumPy arrays: copies to undo a step only while they are small --

def escape_counts(c0, steps):
    """A masked escape-time loop over NumPy arrays made in the function (mandelbrot's shape):
    the condition is a Python value throughout, the arrays shrink as points escape."""
    c = np.linspace(-2.0, 0.5, c0.shape[0]) + 0.3j
    z = np.zeros(c.shape, np.complex128)
    idx = np.arange(c.shape[0])
    count = np.zeros(c.shape, np.int64)
    for i in range(steps):
        if not len(z):
            break
        z = z * z + c
        out = abs(z) > 2.0
        count[idx[out]] = i + 1
        keep = np.logical_not(out)
        z, c, idx = z[keep], c[keep], idx[keep]
    return count + c0


def traced_after_two_steps(x, n):
    """The condition turns traced after the second Python step, with a NumPy array of ``n``
    elements in the state: below the copy bound the step is undone and the loop rolled from
    before it; above, the loop is rolled after it.  Both give NumPy's answer."""
    out = np.zeros(n)
    err, k = 1.0, 0
    while err > 1e-3:
        out[k % n] = err
        k += 1
        if k >= 2:
            err = err * x.min()
    return out, k


@pytest.mark.parametrize("n,steps", [(50, 30), (400, 12)])
def test_escape_loop_over_numpy_arrays(n, steps):
    check(escape_counts, RNG.random(n), steps)


@pytest.mark.parametrize("bound", [0, 1 << 20])     # (both sides of UNDO_COPY_BYTES)
@pytest.mark.parametrize("low", [0.2, 0.7])
def test_undo_copy_bound_both_sides(monkeypatch, bound, low):
    from nbxla.frontend import step_undo
    monkeypatch.setattr(step_undo, "UNDO_COPY_BYTES", bound)
    check(traced_after_two_steps, RNG.random(4) * 0.2 + low, 64)


def test_python_steps_copy_only_small_states(monkeypatch):
    # later steps over a state whose arrays exceed the bound keep no copy (they were copied
    # at every step: mandelbrot2's first call spent most of its time there)
    from nbxla.frontend import step_undo
    made = []
    original = step_undo.StepUndo.__init__
    monkeypatch.setattr(step_undo.StepUndo, "__init__", lambda self, *a: made.append(1) or original(self, *a))
    monkeypatch.setattr(step_undo, "UNDO_COPY_BYTES", 256)
    check(escape_counts, RNG.random(64), 8)
    assert len(made) == 1            # (the first step only: 64 complex numbers exceed 256 bytes)
