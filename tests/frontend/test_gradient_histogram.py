"""``np.gradient`` (scalar spacings) and ``np.histogram`` (a number of equal bins): the same
operations as NumPy in the same order, so the results are equal bit for bit -- values that
sit on a bin edge land in NumPy's bin."""

from __future__ import annotations

import numpy as np
import pytest

import nbxla
from tests.frontend_util import quiet

RNG = np.random.default_rng(5)


def grad(u):
    return np.gradient(u)


def grad_spaced(u):
    return np.gradient(u, 0.5, edge_order=2)


def grad_axes(u):
    return np.gradient(u, 0.1, 0.2, edge_order=2)


def grad_axis1(u):
    return np.gradient(u, axis=1)


def hist8(u):
    return np.histogram(u, 8)


def hist_range(u):
    return np.histogram(u, 7, range=(0.2, 0.7))


def hist_weights(u, w):
    return np.histogram(u, 6, weights=w)


def hist_density(u):
    return np.histogram(u, 4, density=True)


CASES = [
    (grad, (RNG.random(16),)), (grad, (RNG.random((5, 7)),)), (grad, (RNG.integers(0, 9, 12),)),
    (grad_spaced, (RNG.random(16),)), (grad_axes, (RNG.random((5, 7)),)),
    (grad_axis1, (RNG.random((4, 6)).astype(np.float32),)),
    (hist8, (RNG.random(200),)), (hist8, (RNG.integers(0, 10, 100),)),
    (hist8, (np.linspace(0, 1, 97),)),              # values on the edges
    (hist8, (np.full(10, 2.0),)),                   # one value: the range widens by 0.5
    (hist8, (RNG.random(64).astype(np.float32),)),
    (hist_range, (RNG.random(300),)), (hist_weights, (RNG.random(100), RNG.random(100))),
    (hist_density, (RNG.random(50),)),
]


@pytest.mark.parametrize("fn, args", CASES, ids=[f"{fn.__name__}{k}" for k, (fn, _) in enumerate(CASES)])
def test_equal_to_numpy_bit_for_bit(fn, args):
    want = fn(*args)
    with quiet():
        got = nbxla.jit(fn)(*args)
    want = want if isinstance(want, tuple) else (want,)
    got = got if isinstance(got, tuple) else (got,)
    for w, g in zip(want, got):
        assert np.asarray(g).dtype == w.dtype
        np.testing.assert_array_equal(g, w)


def test_histogram_of_data_with_nan_raises_numpys_error_after_the_run():
    x = RNG.random(10)
    x[3] = np.nan
    with pytest.raises(ValueError, match="autodetected range of .* is not finite"):
        np.histogram(x, 4)
    with quiet(), pytest.raises(ValueError, match="autodetected range of .* is not finite"):
        nbxla.jit(hist8)(x)


@pytest.mark.parametrize("fn, what", [
    (lambda u: np.histogram(u, [0.0, 0.5, 1.0]), "explicit bin edges"),
    (lambda u: np.gradient(u, np.linspace(0, 1, 8)), "coordinate arrays"),
])
def test_unsupported_forms_say_what_to_do(fn, what):
    with quiet(), pytest.raises(nbxla.NotCompilableError, match=what):
        nbxla.jit(fn)(RNG.random(8))


def hist_ratio(radius, data):
    """npbench's azimuthal integration: two histograms of the same values, one weighted."""
    return np.histogram(radius, 50, weights=data)[0] / np.histogram(radius, 50)[0]


def test_histogram_bins_need_no_bounds_check():
    # (the bins are clipped into range by construction: no min/max reduction of the bin index
    # checks them, which computed every index a second time; values outside a given range and
    # values on the edges still land where NumPy puts them)
    r, d = np.concatenate([RNG.random(500), np.linspace(0, 1, 51)]), RNG.random(551)
    f = nbxla.jit(hist_ratio)
    with quiet():
        got = f(r, d)
    np.testing.assert_array_equal(got, hist_ratio(r, d))
    module = f.last_compilation.hlo
    index_reductions = [i for c in module.computations for i in c.instructions
                        if i.opcode == "reduce" and i.shape.element_type == "s64"]
    assert not index_reductions
    with quiet():
        got = nbxla.jit(hist_range)(np.concatenate([r, [-1.0, 2.0, 0.7, 0.2]]))
    want = hist_range(np.concatenate([r, [-1.0, 2.0, 0.7, 0.2]]))
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
