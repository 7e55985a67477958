"""jit functions returning a flat tuple of arrays: the fast path picks the outputs straight from
the executable.  Repeated calls (the fast path's) agree with NumPy, with unused arguments,
repeated outputs, outputs that are inputs, and a 0-d output (a NumPy scalar: general path)."""

from __future__ import annotations

import numpy as np
import pytest

import nbxla

CASES = {
    "two": lambda a, b: (a + 1.0, b * 2.0),
    "unused_argument": lambda a, unused, b: (a @ b, b - 1.0),
    "repeated": lambda a, b: (a * b, a * b, a),
    "scalar_among_them": lambda a, b: (a.sum(), b + 1.0),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_flat_tuple_results_agree_with_numpy_on_every_call(name):
    fn = CASES[name]
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((4, 4)) for _ in range(fn.__code__.co_argcount)]
    f = nbxla.jit(fn)
    for _ in range(3):
        got, want = f(*args), fn(*args)
        assert type(got) is tuple and len(got) == len(want)
        for g, w in zip(got, want):
            assert np.shape(g) == np.shape(w) and type(g) is type(w)
            np.testing.assert_allclose(g, w, rtol=1e-12)
        args = [a + 1.0 for a in args]        # new arrays, same signature: the fast path


@pytest.mark.parametrize("fn", [lambda a: (np.zeros_like(a), np.zeros_like(a), a * 2.0),
                                lambda a: (a * 2.0, a * 2.0),
                                lambda a: (np.zeros_like(a), np.zeros_like(a).reshape(-1))],
                         ids=["zeros_twice", "product_twice", "reshaped_twice"])
def test_equal_results_are_distinct_arrays(fn):
    """CSE merges equal values, so one kernel output stands for two results; NumPy gives two
    arrays, and a write into one must not show in the other (a TKE kernel's three
    ``np.zeros_like`` flux arrays, written one after another, came back as one array)."""
    a = np.arange(6.0).reshape(2, 3)
    f = nbxla.jit(fn)
    for _ in range(2):                          # (the second call: the fast path)
        got = f(a)
        for i, g in enumerate(got):
            for h in got[i + 1:]:
                assert not np.shares_memory(g, h)
        got[0][...] = -1.0
        np.testing.assert_array_equal(got[1], fn(a)[1])
