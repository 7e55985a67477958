"""Adversarial probes where nbxla once differed from eager NumPy (issue 28): each test runs the
same function eagerly and compiled and compares, or checks NumPy's error."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest

import nbxla
from nbxla.testing import compare_arrays


def _same(got, want):
    ok, detail = compare_arrays(np.asarray(got), np.asarray(want))
    assert ok, detail


# ---- float16 reductions: NumPy accumulates float16 sums in float32 ------------------------------

@pytest.mark.parametrize("name", ["sum", "mean", "var", "std"])
@pytest.mark.parametrize("scale", [1.0, 10.0])     # 10: var's float16 sum of squares overflows
def test_float16_reductions_of_10000_elements(name, scale):
    x = (np.random.default_rng(0).random(10_000) * scale).astype(np.float16)
    fn = getattr(np, name)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        want = fn(x)
    got = nbxla.jit(lambda a: fn(a))(x)
    _same(got, want)
    _same(nbxla.jit(lambda a: fn(a.reshape(100, 100), axis=1))(x), fn(x.reshape(100, 100), axis=1))


# ---- float -> int casts out of range: NumPy's x86 C cast, not HLO's saturating convert ------------

_SPECIALS = [np.nan, np.inf, -np.inf, 1e20, -1e20, 3e9, -3e9, 300.7, -300.7, 70000.0, -1.5, 255.9,
             128.5, -129.5, 65535.9, 2.0 ** 31, 2.0 ** 32, 2.0 ** 63, 2.0 ** 64, -2.0 ** 63, 0.0, -0.0]
_INTS = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]


@pytest.mark.parametrize("device", ["cpu", "evaluator"])
@pytest.mark.parametrize("src", [np.float16, np.float32, np.float64], ids=lambda t: np.dtype(t).name)
def test_float_to_int_casts_out_of_range(src, device):
    x = np.array(_SPECIALS, src)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        # NumPy's element-at-a-time answer (its vectorized float->uint32 loop gives 2**31 for
        # NaN in long arrays: position-dependent, see frontend/float_to_int.py).
        want = {t: np.array([np.array([v], src).astype(t)[0] for v in x], t) for t in _INTS}
    got = nbxla.jit(lambda a: tuple(a.astype(t) for t in _INTS), device=device)(x)
    for t, g in zip(_INTS, got):
        assert g.dtype == want[t].dtype
        assert g.tolist() == want[t].tolist(), (np.dtype(t).name, x.tolist())


# ---- a traced NumPy-scalar index out of bounds: NumPy's IndexError, not a clamped read ------------

@pytest.mark.parametrize("i", [np.int64(10), np.int64(-6), np.int32(5), np.array(7)], ids=repr)
def test_numpy_scalar_index_out_of_bounds_raises_index_error(i):
    x = np.arange(5.0)
    with pytest.raises(IndexError):
        x[i]
    with pytest.raises(nbxla.errors.IndexCheckError, match="out of bounds for axis 0 with size 5"):
        nbxla.jit(lambda a, k: a[k])(x, i)

    def write(a, k):
        a[k, 1] = 7.0
        return a
    y = np.zeros((5, 3))
    with pytest.raises(nbxla.errors.IndexCheckError):
        nbxla.jit(write)(y, i)
    assert not y.any()                      # NumPy raises before it writes
    assert nbxla.jit(lambda a, k: a[k])(x, np.int64(-5)) == x[-5]


def test_index_array_bounds_checked_in_a_long_loop():
    """An index array inside a loop long enough to roll: its bounds check cannot leave a body
    traced once (it was a KeyError), so the loop is unrolled and checked."""
    def f(x, idx):
        s = np.zeros(2)
        for j in range(idx.shape[0]):
            s = s + x[idx[j]]
        return s
    x, idx = np.arange(5.0), np.array([[1, 2]] * 60)
    _same(nbxla.jit(f)(x, idx), f(x, idx))
    with pytest.raises(IndexError):
        nbxla.jit(f)(x, idx + 3)


# ---- an array NumPy could not allocate: MemoryError at trace time, naming the line ----------------

@pytest.mark.parametrize("body", [lambda x: np.zeros_like(x, shape=(10 ** 6, 10 ** 6)).sum(),
                                  lambda x: (np.zeros_like(x, shape=(10 ** 6, 10 ** 6)) + x[0]).sum()])
def test_array_larger_than_memory_raises_memory_error(body):
    with pytest.raises(MemoryError):
        body(np.ones(3))                    # NumPy
    with pytest.raises(nbxla.errors.ResourceError, match=r"f64\[1000000,1000000\].*GiB at .*test_numpy_probes.py:\d+.*MemoryError"):
        nbxla.jit(body)(np.ones(3))


# ---- arrays held by an object (self.w): read afresh on every call ---------------------------------

class _Model:
    def __init__(self):
        self.w = np.ones(3)
        self.scale = 2.0

    @nbxla.jit
    def f(self, x):
        return x * self.w * self.scale

    def g(self, x):
        return x * self.w * self.scale


@pytest.mark.parametrize("how", ["decorated method", "jit of a bound method", "argument", "global"])
def test_object_arrays_are_read_on_every_call(how):
    m, x = _Model(), np.arange(3.0)
    global _captured
    _captured = m
    call = {"decorated method": lambda: m.f(x), "jit of a bound method": nbxla.jit(m.g),
            "argument": (lambda h: lambda: h(m, x))(nbxla.jit(lambda o, a: o.g(a))),
            "global": (lambda h: lambda: h(x))(nbxla.jit(lambda a: a * _captured.w * _captured.scale))}[how]
    if how == "jit of a bound method":
        call = (lambda h: lambda: h(x))(call)
    _same(call(), m.g(x))
    m.w = np.full(3, 2.0)                       # rebound: a new array
    _same(call(), m.g(x))
    m.w[:] = 5.0                                # written in place
    _same(call(), m.g(x))
    m.w = np.arange(6, dtype=np.int32).reshape(2, 3)      # another shape and dtype
    _same(call(), m.g(x))
    m.scale = 3.0                               # a constant attribute
    _same(call(), m.g(x))


def test_object_results_and_writes_through_self():
    class State:
        def __init__(self, v):
            self.v = v

    def bump(s, d):
        s.v[0] += d
        return State(s.v * 2)
    s, t = State(np.zeros(3)), State(np.zeros(3))
    want, got = bump(s, 1.0), nbxla.jit(bump)(t, 1.0)
    assert isinstance(got, State)
    _same(got.v, want.v)
    _same(t.v, s.v)


# ---- a returned view of an argument is a view of the caller's array --------------------------------

def _view_of_argument(x):
    return x[1:]


def _write_then_view(x):
    x[0] = 5
    return x[1:]


def _view_then_write(x):
    r = x[1:, ::2]
    x[1, 0] = 9                 # after the view was taken: NumPy's view sees it
    return r, x.sum()


def _view_of_view(x):
    return x[::2][1:], (x * 2)[1:]          # (the second is a new array in NumPy too)


@pytest.mark.parametrize("fn", [_view_of_argument, _write_then_view, _view_then_write, _view_of_view])
def test_returned_view_of_an_argument_shares_its_memory(fn):
    a, b = np.arange(24.0).reshape(6, 4), np.arange(24.0).reshape(6, 4)
    want, got = fn(a), nbxla.jit(fn)(b)
    want, got = (want, got) if isinstance(want, tuple) else ((want,), (got,))
    for w, g in zip(want, got):
        _same(g, w)
        assert np.shares_memory(g, b) == np.shares_memory(w, a)
    _same(b, a)
    got[0][...] = -1                        # writes to the result show in the argument
    want[0][...] = -1
    _same(b, a)


def _relax_and_return(steps, a, b, c):
    """npbench's style: update the arguments in place, return them (and the step count)."""
    for _ in range(steps):
        a[1:] += 0.5 * b[:-1]
        b[:-1] -= 0.25 * a[1:]
    return steps, a, b, c


def test_returned_arguments_are_the_callers_arrays_after_the_writes():
    """An argument returned as it is comes back as the caller's own object (NumPy returns it),
    written or not: no copy of it is made."""
    rng = np.random.default_rng(3)
    args = (4, rng.random(50), rng.random(50), rng.random(7))
    want_args, got_args = [a.copy() if isinstance(a, np.ndarray) else a for a in args], \
        [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    f = nbxla.jit(_relax_and_return)
    for _ in range(2):                          # (the first call compiles, the second hits)
        want, got = _relax_and_return(*want_args), f(*got_args)
        assert got[0] == want[0] and type(got[0]) is int
        for k in (1, 2, 3):
            assert got[k] is got_args[k] and want[k] is want_args[k]
            _same(got[k], want[k])


def test_dataclass_of_arrays_as_an_argument():
    @dataclasses.dataclass
    class Params:
        w: np.ndarray
        b: float = 1.0

    p, f = Params(np.ones(3)), nbxla.jit(lambda p, x: p.w * x + p.b)
    _same(f(p, 2.0), p.w * 2.0 + p.b)
    p.w, p.b = np.arange(3.0), 5.0
    _same(f(p, 2.0), p.w * 2.0 + p.b)
