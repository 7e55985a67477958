"""A jit function called with lists/tuples of arrays (a training step's parameters) takes the
fast path on cache hits, and stays right: shapes recompile, writes into arguments still land."""

from __future__ import annotations

import numpy as np

import nbxla
from nbxla.runtime.cache import CompilationCache


def test_lists_of_arrays_hit_the_fast_path_with_the_same_results():
    f = nbxla.jit(lambda ps, x: ([p * 2 for p in ps], (ps[0] @ x).sum()), cache=CompilationCache())
    rng = np.random.default_rng(0)
    ps, x = [rng.standard_normal((3, 4)), rng.standard_normal(4)], rng.standard_normal((4, 2))
    first = f(ps, x)
    assert len(f._fast) == 1
    second = f(ps, x)                       # through the fast path
    for a, b in zip([*first[0], first[1]], [*second[0], second[1]]):
        np.testing.assert_array_equal(a, b)
    assert f.cache.hits == 1
    np.testing.assert_allclose(second[1], (ps[0] @ x).sum())
    qs = [rng.standard_normal((5, 4)), rng.standard_normal(4)]
    np.testing.assert_allclose(f(qs, x)[1], (qs[0] @ x).sum())          # new shape: recompiles
    assert f.cache.misses == 2
    np.testing.assert_allclose(f((ps[0], ps[1]), x)[1], (ps[0] @ x).sum())   # a tuple is another key
    assert f.cache.misses == 3


def test_a_step_that_writes_into_list_elements_keeps_writing():
    def bump(ps):
        ps[0] += 1
        return ps[0].sum()
    f = nbxla.jit(bump, cache=CompilationCache())
    ps = [np.zeros(3), np.ones(2)]
    f(ps)
    f(ps)
    np.testing.assert_array_equal(ps[0], [2, 2, 2])
    assert not f._fast


def test_static_leaves_in_lists_take_the_full_path():
    f = nbxla.jit(lambda ps: ps[0] * ps[1], cache=CompilationCache())
    x = np.arange(3.0)
    np.testing.assert_array_equal(f([x, 2.0]), x * 2)
    np.testing.assert_array_equal(f([x, 3.0]), x * 3)          # a new constant: a new entry
    assert f.cache.misses == 2 and not f._fast


def test_results_in_a_tuple_are_freed_when_dropped():
    # (no reference cycle keeps them until the garbage collector runs: their buffers are reused)
    import gc
    import weakref
    f = nbxla.jit(lambda x: (x + 1, x * 2), cache=CompilationCache())
    x = np.arange(4.0)
    f(x)
    gc.disable()
    try:
        a, b = f(x)
        ref = weakref.ref(a)
        del a, b
        assert ref() is None
    finally:
        gc.enable()
