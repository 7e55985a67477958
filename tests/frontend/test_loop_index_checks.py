"""Indices read from the data inside a rolled loop (``counts[values[i]] += 1``, a scatter
loop) are bounds-checked as NumPy checks them: the loop carries their extremes
(``frontend/loop_checks.py``) and the program raises NumPy's IndexError after the run, naming
the index, where they were clamped silently before.  Both sides of the bound, negative
indices (wrapped, as NumPy does), a read and a write at one index checked once, and a loop's
condition (which cannot carry a check: clamped there, as before)."""

from __future__ import annotations

import numpy as np
import pytest

import nbxla
from nbxla.examples import histogram_fill
from tests.frontend_util import use_flags


def gather_loop(table, idx):
    out = np.zeros(idx.shape[0])
    for i in range(idx.shape[0]):
        out[i] = table[idx[i]] * 2.0
    return out


def first_zero(a, starts):
    """A while loop whose condition reads at a data index (clamped there, not checked)."""
    i = starts[0]
    n = 0
    while a[i] != 0.0 and n < a.shape[0]:
        i = (i + 1) % a.shape[0]
        n += 1
    return n


def _values(n, bad=None):
    v = np.arange(n) % 64
    if bad is not None:
        v[n // 2] = bad
    return v


@pytest.mark.parametrize("rolled", [False, True])
@pytest.mark.parametrize("bad", [None, 63, -64, -1, 64, 100, -65])
def test_histogram_indices_are_checked(bad, rolled, monkeypatch):
    if rolled:
        use_flags(monkeypatch, "--unroll_max=0")
    values = _values(40, bad)
    try:
        want = histogram_fill(values.copy(), 64)
    except IndexError as e:
        with pytest.raises(IndexError, match=str(e).split(" is out")[0]):
            nbxla.jit(histogram_fill)(values.copy(), 64)
        return
    np.testing.assert_array_equal(nbxla.jit(histogram_fill)(values.copy(), 64), want)


@pytest.mark.parametrize("bad", [None, 9, -10, 10])
def test_a_gather_loop_checks_its_indices(bad, monkeypatch):
    use_flags(monkeypatch, "--unroll_max=0")
    table = np.arange(10.0)
    idx = np.arange(30) % 10
    if bad is not None:
        idx[7] = bad
    try:
        want = gather_loop(table, idx)
    except IndexError:
        with pytest.raises(IndexError, match=f"index {bad} is out of bounds"):
            nbxla.jit(gather_loop)(table, idx)
        return
    np.testing.assert_array_equal(nbxla.jit(gather_loop)(table, idx), want)


def test_a_read_and_write_at_one_index_make_one_check(monkeypatch):
    use_flags(monkeypatch, "--unroll_max=0")
    jitted = nbxla.jit(histogram_fill)
    jitted(_values(40), 64)
    (loop,) = [i for i in jitted.last_compilation.optimized.entry.instructions if i.opcode == "while"]
    # (the counter, the values, the counts and one carried [min, max] pair)
    assert len(loop.shape.elements) == 4


def test_a_loop_condition_keeps_its_clamped_index(monkeypatch):
    use_flags(monkeypatch, "--unroll_max=0")
    a = np.array([3.0, 2.0, 0.0, 5.0, 1.0])
    starts = np.array([3])
    assert nbxla.jit(first_zero)(a, starts) == first_zero(a, starts)


def cyclic(x, n):
    s = np.zeros(4)
    for i in range(-3, n):
        s[i % 4] += x[(i + 3) % x.shape[0]]
    return s


@pytest.mark.parametrize("n", [2, 30])
def test_an_index_modulo_a_positive_int_needs_no_check(n, monkeypatch):
    """(``i % m`` lies in [0, m) for any i: no check, so no state slot; negative i included)"""
    use_flags(monkeypatch, "--unroll_max=0")
    x = np.arange(7.0)
    jitted = nbxla.jit(cyclic)
    np.testing.assert_array_equal(jitted(x, n), cyclic(x, n))
    (loop,) = [i for i in jitted.last_compilation.optimized.entry.instructions if i.opcode == "while"]
    assert not any(e.dims == (2,) for e in loop.shape.elements)     # (no carried [min, max])
