"""Short loops found cheap to unroll are remembered while one program is traced
(frontend/cheap_loops.py): a loop reached again with the same body, range and kinds of values
is unrolled at once instead of being traced rolled again to count its kernels; reached with
other kinds (another shape), it is counted again.  Results against NumPy on both sides."""

from __future__ import annotations

import numpy as np
import pytest

import nbxla
from nbxla.frontend import cheap_loops, loops
from nbxla.frontend.control import UNDEFINED


def partial_squares(x):
    s = x[0] * 0
    for j in range(3):                   # (short: unrolled, once counted cheap)
        s = s + x[j] * x[j]
    return s


def twice(a, b):
    return partial_squares(a) + partial_squares(b)


@pytest.fixture
def rolled_traces(monkeypatch):
    """The rolled traces of loop bodies made while the test runs (one per attempt)."""
    made = []
    trace = loops._Loop._trace
    monkeypatch.setattr(loops._Loop, "_trace", lambda self: (made.append(self.lineno), trace(self))[1])
    return made


def test_a_loop_reached_again_with_the_same_kinds_is_unrolled_without_counting(rolled_traces, monkeypatch):
    monkeypatch.setenv("NBXLA_CACHE_DIR", "off")
    rng = np.random.default_rng(5)
    a, b = rng.random((4, 3)), rng.random((4, 3))
    np.testing.assert_allclose(nbxla.jit(partial_squares)(a), partial_squares(a), rtol=1e-12)
    once = len(rolled_traces)
    assert once >= 1
    rolled_traces.clear()
    f = nbxla.jit(twice)
    np.testing.assert_allclose(f(a, b), twice(a, b), rtol=1e-12)
    assert len(rolled_traces) == once                 # (the second helper call: counted already)
    assert [d[1] for d in f.last_compilation.loop_decisions] == ["unrolled", "unrolled"]


def test_a_loop_reached_with_other_shapes_is_counted_again(rolled_traces, monkeypatch):
    monkeypatch.setenv("NBXLA_CACHE_DIR", "off")
    rng = np.random.default_rng(6)
    a = rng.random((4, 3))
    nbxla.jit(partial_squares)(a)
    once = len(rolled_traces)
    rolled_traces.clear()
    b = rng.random((5, 2, 3))
    f = nbxla.jit(twice)
    np.testing.assert_allclose(f(a, b), twice(a, b), rtol=1e-12)
    assert len(rolled_traces) == 2 * once


def _body_reading(value):
    def body(j, state):
        return value, state
    return body


def test_keys_name_the_kinds_of_the_values_the_body_sees():
    r = range(3)
    key = cheap_loops.key
    assert key(_body_reading(2), 7, r, (1.5,)) == key(_body_reading(2), 7, r, (1.5,))
    assert key(_body_reading(2), 7, r, (1.5,)) != key(_body_reading(3), 7, r, (1.5,))    # (a Python int)
    assert key(_body_reading(2), 7, r, (1.5,)) != key(_body_reading(2), 8, r, (1.5,))
    assert key(_body_reading(2), 7, r, (1.5,)) != key(_body_reading(2), 7, range(4), (1.5,))
    x = np.ones(3)
    assert key(_body_reading(x), 7, r, (UNDEFINED,)) == key(_body_reading(x), 7, r, (UNDEFINED,))
    assert key(_body_reading(x), 7, r, ()) != key(_body_reading(np.ones(3)), 7, r, ())   # (another array)
    assert key(_body_reading(object()), 7, r, ()) is None        # (no kind to compare: counted again)
