"""Arrays made by ``np.zeros``/``np.ones``/``np.empty``/``np.full`` — in the function or in a
helper it calls — stay in the pending graph (``cluster/create.py``, ``rewrite.callee``): a
pending value written into one is no graph break, and results equal NumPy's, call after call
(the later calls replay the tape)."""

import functools

import numpy as np
import pytest

from nbxla.cluster import AutoFunction, LazyArray
from nbxla.runtime.cache import CompilationCache


def auto(fn, **kw):
    kw.setdefault("min_work", 1)
    kw.setdefault("whole", False)
    kw.setdefault("measure", False)
    return AutoFunction(fn, cache=CompilationCache(), **kw)


def pad_z(arr):
    shape = list(arr.shape)
    shape[2] += 2
    out = np.zeros(shape, arr.dtype)
    out[:, :, 1:-1] = arr
    return out


def padded_stencil(x, y):
    p = pad_z(x * 2.0 + y)            # a pending value written into a helper's np.zeros
    return p[:, :, 2:] - p[:, :, :-2] + p[:, :, 1:-1] * y


def check_calls(f, fn, make, calls=3):
    for k in range(calls):
        args = make(k)
        got, want = f(*[a.copy() for a in args]), fn(*args)
        for g, w in zip(got if isinstance(got, tuple) else (got,),
                        want if isinstance(want, tuple) else (want,)):
            assert type(g) is np.ndarray and g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


def test_np_zeros_in_a_helper_is_no_graph_break():
    rng = np.random.default_rng(0)
    f = auto(padded_stencil)
    check_calls(f, padded_stencil, lambda k: (rng.random((4, 5, 6)), rng.random((4, 5, 6))))
    report = f.last_report
    assert not report.breaks, report.to_text()
    assert len(report.compiled_clusters) == 1


def creators(x):
    n = x.shape
    a = np.zeros(n)                       # float64 by default
    b = np.ones(n, np.float32)
    c = np.full(n, 3)                     # int64: the fill value's type
    d = np.full(n, 2.5, dtype=np.int32)   # cast as NumPy does: 2
    e = np.empty(n)
    e[...] = x                            # (every element written)
    f = np.zeros(list(n), dtype=None)     # a list shape; dtype=None is float64
    a[1:] = x[:-1]
    b += x.astype(np.float32)
    return a, b, c + 1, d * 2, e - x, f + x, np.full(n, True) & (x > 0.5)


def test_each_creator_gives_numpys_dtype_and_values():
    rng = np.random.default_rng(1)
    f = auto(creators)
    check_calls(f, creators, lambda k: (rng.random((6, 7)),))
    assert not f.last_report.breaks


def made_now(a) -> bool:
    """Was ``a`` made as NumPy makes it (a NumPy array, or a stand-in holding one), not
    left pending?"""
    return type(a) is np.ndarray or (isinstance(a, LazyArray) and a.state.value is not None)


@pytest.mark.parametrize("min_work", [1, 10 ** 6])
def test_small_or_unusual_creations_are_numpys(min_work):
    """Below min_work, in Fortran order, of object dtype or with an array as fill value:
    made by NumPy itself (and its own error for a negative dimension)."""
    seen = {}

    def program(x):
        seen["small"] = made_now(np.zeros(x.shape))
        fortran = np.zeros(x.shape, order="F")
        seen["fortran"] = made_now(fortran)
        seen["object"] = made_now(np.full(x.shape, None, dtype=object))
        seen["array fill"] = made_now(np.full(x.shape, np.arange(x.shape[-1])))
        with pytest.raises(ValueError):
            np.zeros((-1, 3))
        fortran += x
        return fortran

    x = np.random.default_rng(2).random((5, 4))
    got = auto(program, min_work=min_work)(x)
    np.testing.assert_array_equal(got, x)
    assert got.flags.f_contiguous
    assert seen["fortran"] and seen["object"] and seen["array fill"]
    assert seen["small"] is (min_work != 1)


def counted(fn):
    @functools.wraps(fn)
    def wrapper(*args):
        wrapper.calls += 1
        return fn(*args)
    wrapper.calls = 0
    return wrapper


@counted
def decorated_helper(x):
    return x + 1


def generator_helper(x):
    yield x * 2
    yield x * 3


def test_decorated_and_generator_helpers_run_as_written():
    """A decorator's wrapper is not replaced by the function it wraps (its side effects
    stay), and generators run unchanged."""
    def program(x):
        a, b = generator_helper(x)
        return decorated_helper(x) + a - b

    x = np.random.default_rng(3).random((3, 4))
    f = auto(program)
    for _ in range(3):
        np.testing.assert_allclose(f(x), program(x))
    assert decorated_helper.calls == 6


def writes_through_native_code(x):
    from scipy import ndimage
    out = np.zeros(x.shape)
    ndimage.uniform_filter(x * 2.0, size=3, output=out)     # native code writes into out
    return out + 1.0


def test_a_created_array_native_code_writes_into_gets_the_writes():
    pytest.importorskip("scipy.ndimage", reason="SciPy is an optional test dependency")
    x = np.random.default_rng(4).random((8, 9))
    f = auto(writes_through_native_code)
    for _ in range(3):
        np.testing.assert_allclose(f(x), writes_through_native_code(x), rtol=1e-12)


def test_helpers_made_inside_the_function_and_recursion():
    def program(x, depth):
        def inner(y):
            z = np.zeros(y.shape)
            z[1:] = y[:-1]
            return z
        def rec(y, k):
            return y if k == 0 else rec(inner(y) + y, k - 1)
        return rec(x, depth)

    rng = np.random.default_rng(5)
    f = auto(program)
    for depth in (0, 3, 3, 2):
        x = rng.random((6, 3))
        np.testing.assert_allclose(f(x, depth), program(x, depth), rtol=1e-12)


def made_before_a_break(x):
    out = np.zeros_like(x)
    flux = np.full(x.shape, 0.5)
    y = x * 2 + 1
    s = float(y.sum())                            # a graph break
    out[1:] = y[:-1] * s + flux[1:]
    return out, np.ones(x.shape, np.int32)        # (one never used: made for the result)


def test_an_array_made_before_a_break_and_used_after_it_is_made_after_it():
    """``np.zeros_like``/``np.full`` made before a graph break, first used after it: made in
    the cluster after the break (not computed and handed over by the one before)."""
    rng = np.random.default_rng(6)
    f = auto(made_before_a_break)
    check_calls(f, made_before_a_break, lambda k: (rng.random((5, 6)),), calls=4)
    report = f.last_report
    first = report.clusters[0]
    made_at = [line_of(made_before_a_break, "np.zeros_like"),
               line_of(made_before_a_break, "np.full")]
    assert not set(first.lines) & set(made_at), report.to_text()
    assert line_of(made_before_a_break, "out[1:] =") in report.clusters[-1].lines


def line_of(fn, text: str) -> int:
    import inspect
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, ln in enumerate(lines) if text in ln)


def test_a_made_array_that_escapes_the_run_is_made_when_used():
    kept = []

    def program(x):
        kept.append(np.ones(x.shape))             # never used in the run
        return x + 1

    x = np.random.default_rng(7).random((4, 4))
    np.testing.assert_array_equal(auto(program)(x), x + 1)
    np.testing.assert_array_equal(np.asarray(kept[0] + x), 1 + x)


def test_zeros_like_of_a_fortran_array_gives_numpys_values():
    def program(x, y):
        z = np.zeros_like(y)                      # y: a NumPy array in Fortran order
        z += x
        return z

    x = np.random.default_rng(8).random((4, 5))
    got = auto(program)(x, np.asfortranarray(x))
    np.testing.assert_array_equal(got, x)
