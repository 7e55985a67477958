"""Results a compiled function makes without any traced value (from Python numbers only:
``np.arange(n)`` with a static ``n``, a whole program of scalar arguments folded while
tracing) are new arrays on every call, as NumPy's are: a write into one call's result must not
show in the next call's (they were the one array kept by the compilation; npbench's Mandelbrot
programs, whose arguments are all numbers, returned the first call's arrays, written by the
caller, from then on)."""

from __future__ import annotations

import numpy as np
import pytest

import nbxla


def from_numbers_only(n):
    return np.arange(n) * 2.0


def static_and_traced(x, n):
    return np.arange(n) * 2.0, x + 1.0


def escape_count(xmin, xmax, n, steps):
    """A loop over boolean masks of arrays made from numbers (no traced value at all)."""
    c = np.linspace(xmin, xmax, n)
    z = np.zeros(n, dtype=np.complex128)
    count = np.zeros(n, dtype=np.int64)
    for i in range(steps):
        inside = np.less(abs(z), 2.0)
        count[inside] = i
        z[inside] = z[inside] ** 2 + c[inside]
    return z, count


def _write_into(result):
    for leaf in (result if isinstance(result, tuple) else (result,)):
        if isinstance(leaf, np.ndarray):
            leaf[...] = -7


@pytest.mark.parametrize("fn, args", [
    (from_numbers_only, (5,)),
    (static_and_traced, (np.ones(3), 4)),
    (escape_count, (-2.0, 0.5, 40, 15)),
])
def test_a_result_made_while_tracing_is_a_new_array_per_call(fn, args):
    f = nbxla.jit(fn)
    first = f(*args)
    _write_into(first)
    second = f(*args)
    want = fn(*args)
    for w, g, old in zip(want if isinstance(want, tuple) else (want,),
                         second if isinstance(second, tuple) else (second,),
                         first if isinstance(first, tuple) else (first,)):
        np.testing.assert_array_equal(g, w)
        assert g is not old
