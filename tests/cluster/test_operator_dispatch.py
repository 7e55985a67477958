"""Operators on stand-ins go to the session directly (nbxla/cluster/lazy.py ``_binary``) when
the other operand is a plain type, and through NumPy's ufunc (its search for overrides) when
it is not; and a NumPy array that comes back from a call finds the stand-in holding it
(``Session.adopt``) through weak references swept as they die.  Eager NumPy is the oracle,
on the first (recorded) and later (replayed) calls."""

import operator

import numpy as np
import pytest

from nbxla.cluster import AutoFunction
from nbxla.cluster import session as session_module
from nbxla.cluster.lazy import LazyArray
from nbxla.cluster.session import Session
from nbxla.runtime.cache import CompilationCache


def auto(fn):
    return AutoFunction(fn, cache=CompilationCache(), measure=False, whole=False, min_work=1)


OPERATORS = [operator.add, operator.sub, operator.mul, operator.truediv, operator.pow,
             operator.lt, operator.ge, operator.eq]
OTHERS = [2.5, 3, True, np.float64(1.5), np.float32(0.5), np.int64(2)]


@pytest.mark.parametrize("op", OPERATORS, ids=lambda o: o.__name__)
@pytest.mark.parametrize("other", OTHERS, ids=lambda o: type(o).__name__)
def test_forward_and_reflected_operators_match_numpy(op, other):
    def program(x, y):
        a = op(x + 1.0, other)           # forward: stand-in first
        b = op(other, x * 0.5)           # reflected
        c = op(x, y)                     # two stand-ins
        d = op(x + 2.0, y.copy())        # a pending stand-in and an array
        return a, b, c, d
    fn = auto(program)
    x = np.linspace(0.5, 2.0, 40)
    y = np.linspace(1.0, 3.0, 40)
    want = program(x, y)
    for _ in range(3):                   # recorded, then replayed
        got = fn(x, y)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-12)
            assert np.asarray(g).dtype == w.dtype


def test_in_place_operators_write_the_stand_in():
    def program(x, y):
        z = x * 2.0
        z += y
        z *= np.float64(0.5)
        z -= 1
        x += z                           # into the caller's array
        return z
    fn = auto(program)
    for _ in range(3):
        x, y = np.linspace(0, 1, 50), np.linspace(1, 2, 50)
        x0, y0 = x.copy(), y.copy()
        want = program(x0, y0)
        got = fn(x, y)
        np.testing.assert_allclose(got, want, rtol=1e-12)
        np.testing.assert_allclose(x, x0, rtol=1e-12)


class Wrapped(np.ndarray):
    """An ndarray subclass with its own ``__array_ufunc__``: NumPy must ask it (the operator
    takes NumPy's ufunc path, not the session's direct one)."""
    seen = 0

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        Wrapped.seen += 1
        inputs = tuple(np.asarray(i) if isinstance(i, Wrapped) else i for i in inputs)
        return getattr(ufunc, method)(*inputs, **kwargs)


def test_operand_with_its_own_override_goes_through_numpy():
    def program(x, w):
        return (x + 1.0) * w
    fn = auto(program)
    x = np.linspace(0, 1, 30)
    w = np.linspace(2, 3, 30).view(Wrapped)
    Wrapped.seen = 0
    got = fn(x, w)
    assert Wrapped.seen >= 1             # NumPy consulted the subclass's override
    np.testing.assert_allclose(np.asarray(got), (x + 1.0) * np.asarray(w), rtol=1e-12)


def test_adopt_finds_the_owner_and_survives_the_sweep(monkeypatch):
    """Stand-ins made and dropped past the sweep threshold: live owners are still found,
    dead ones are not (a new stand-in wraps the array instead)."""
    monkeypatch.setattr(session_module, "_MIN_OWNERS_CAP", 8)
    session = Session("adopt", cache=CompilationCache(), min_work=1)
    session._owners_cap = 8
    kept = [np.arange(10.0) + k for k in range(5)]
    held = [session.wrap(a) for a in kept]
    for k in range(50):                  # dropped at once: swept as the map grows
        session.wrap(np.arange(10.0) * k)
    assert len(session.owners) < 30
    for a, x in zip(kept, held):
        assert session.adopt(a) is x
    fresh = np.arange(10.0)
    made = session.adopt(fresh)
    assert isinstance(made, LazyArray) and made.state.value is fresh
    assert session.adopt(fresh) is made
