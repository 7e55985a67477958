"""Calls with Python scalars among their arguments, and calls of programs that write into their
argument arrays, take the jit fast path on cache hits (a dict lookup, not a re-flattening and a
full cache key): the scalars are keyed by value, so a new value is a new compilation, and an
aliased call of a writing program still takes the full key.  Oracle: eager NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import nbxla
from nbxla.api import fast_argument_key
from nbxla.examples import histogram_fill, iir_filter, trmm
from nbxla.runtime.cache import CompilationCache


def test_scalar_arguments_hit_the_fast_path_and_a_new_value_recompiles():
    f = nbxla.jit(iir_filter, cache=CompilationCache())
    x = np.random.default_rng(0).random(300)
    for coefficients in [(0.2, 0.3, 0.5), (0.2, 0.3, 0.5), (0.2, 0.3, -0.5), (0.2, 0.3, 0.5)]:
        np.testing.assert_allclose(f(x, *coefficients), iir_filter(x, *coefficients), rtol=1e-12)
    assert f.cache.misses == 2 and f.cache.hits == 2
    assert len(f._fast) == 2                # one entry per value, each its own program


@pytest.mark.parametrize("a, b", [(0.0, -0.0), (1, True), (1, 1.0), (2, 2 + 0j)])
def test_scalars_that_compare_equal_but_compile_differently_get_their_own_entries(a, b):
    f = nbxla.jit(lambda x, c: (x / c, np.asarray(c).dtype.kind), cache=CompilationCache())
    x = np.array([1.0, -2.0])
    for c in (a, b, a, b):
        got = f(x, c)
        with np.errstate(divide="ignore"):
            want = (x / c, np.asarray(c).dtype.kind)
        np.testing.assert_array_equal(got[0], want[0])
        assert got[0].dtype == want[0].dtype and got[1] == want[1]
    assert f.cache.misses == 2
    assert fast_argument_key((a,)) != fast_argument_key((b,))


def test_nan_scalars_share_one_entry():
    f = nbxla.jit(lambda x, c: x + c, cache=CompilationCache())
    x = np.arange(3.0)
    for _ in range(3):
        assert np.isnan(f(x, float("nan"))).all()
    assert f.cache.misses == 1 and f.cache.hits == 2


def test_an_integer_argument_that_sets_a_size_recompiles_for_each_value():
    f = nbxla.jit(histogram_fill, cache=CompilationCache())
    values = np.random.default_rng(1).integers(0, 8, 500)
    for nbins in (8, 8, 16, 8):
        np.testing.assert_array_equal(f(values, nbins), histogram_fill(values, nbins))
    assert f.cache.misses == 2


def test_a_program_writing_into_its_arguments_hits_the_fast_path_and_writes_back():
    f = nbxla.jit(trmm, cache=CompilationCache())
    rng = np.random.default_rng(2)
    A, B = rng.random((12, 12)), rng.random((12, 9))
    for alpha in (1.5, 1.5, 1.5, -2.0):
        mine, theirs = B.copy(), B.copy()
        assert f(alpha, A, mine) is None
        trmm(alpha, A, theirs)
        np.testing.assert_allclose(mine, theirs, rtol=1e-12)
    assert f.cache.hits == 2 and f.cache.misses == 2
    assert len(f._fast) == 2


def test_an_aliased_call_of_a_writing_program_does_not_reuse_the_distinct_one():
    def axpy(x, y):
        y += 2 * x
        x *= 3
    f = nbxla.jit(axpy, cache=CompilationCache())
    a, b = np.arange(4.0), np.ones(4)
    f(a, b)
    f(a, b)                                 # (fast path)
    np.testing.assert_array_equal(a, np.arange(4.0) * 9)
    np.testing.assert_array_equal(b, 1 + 2 * np.arange(4.0) + 6 * np.arange(4.0))
    c, want = np.arange(4.0), np.arange(4.0)
    f(c, c)                                 # NumPy: c += 2c (3c), then c *= 3 (9c)
    axpy(want, want)
    np.testing.assert_array_equal(c, want)
    assert f.cache.misses == 2


def test_other_arguments_still_take_the_full_key():
    with pytest.raises(TypeError):
        fast_argument_key((np.float64(1.0),))
    with pytest.raises(TypeError):
        fast_argument_key(("text",))
    f = nbxla.jit(lambda x, s: x * s, cache=CompilationCache())
    x = np.arange(3.0)
    np.testing.assert_array_equal(f(x, np.float64(2.0)), x * 2)
    np.testing.assert_array_equal(f(x, np.float64(5.0)), x * 5)     # a parameter: one program
    assert f.cache.misses == 1
