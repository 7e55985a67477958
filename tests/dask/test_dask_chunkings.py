"""Random chunkings (hypothesis) of programs whose split is the delicate part: stencils with
shifted windows, reductions across stages, transposes between two chunked axes.  Whatever the
chunks (size-1 chunks included), the computed dask result must equal NumPy's."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nbxla

dask = pytest.importorskip("dask", reason="dask is not installed (pip install nbxla[dask])")
da = pytest.importorskip("dask.array", reason="dask[array] is not installed (pip install nbxla[dask])")


def chunkings(n: int):
    """Random chunk tuples summing to ``n``."""
    return st.lists(st.integers(1, n), min_size=1, max_size=6).map(lambda cuts: _cut(n, cuts))


def _cut(n, cuts):
    points = sorted({c % n for c in cuts} - {0})
    edges = [0] + points + [n]
    return tuple(b - a for a, b in zip(edges, edges[1:]))


def stencil_and_sums(u):
    d = u[1:] - u[:-1]
    return d[2:] * np.sum(d) - d[:-2] + u[3:-1].max()


def rows_and_columns(x, y):
    z = np.tanh(x) + y.T
    return z / z.sum(axis=0), (z - z.mean(axis=1, keepdims=True)).std(axis=1)


_rng = np.random.default_rng(11)
U = _rng.random(29).astype(np.float32)
X = _rng.random((13, 9)).astype(np.float32)
Y = _rng.random((9, 13)).astype(np.float32)
F1, F2 = nbxla.jit(stencil_and_sums), nbxla.jit(rows_and_columns)


def _check(got, want):
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    computed = dask.compute(*got, scheduler="synchronous")
    for g, w in zip(computed, want):
        assert np.shape(g) == np.shape(w)
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=1e-5)


@settings(max_examples=6, deadline=None)
@given(chunkings(29))
def test_stencil_over_an_earlier_stage_any_chunks(chunks):
    _check(F1(da.from_array(U, chunks=(chunks,))), stencil_and_sums(U))


@settings(max_examples=3, deadline=None)
@given(chunkings(13), chunkings(9), chunkings(9), chunkings(13))
def test_transposed_operands_and_reductions_any_chunks(r, c, yr, yc):
    x = da.from_array(X, chunks=(r, c))
    y = da.from_array(Y, chunks=(yr, yc))
    _check(F2(x, y), rows_and_columns(X, Y))
