"""How the traced HLO is split over dask chunks, checked against NumPy on many small programs.

These run on dask's synchronous scheduler (in this process: fast); the cluster tests in
``test_dask_cluster.py`` run the same machinery on worker processes.  Each case also says
what the split must look like (stages, rechunks, halos) where that is the point.
"""

import numpy as np
import pytest

import nbxla
import nbxla.dask as nd
from nbxla.dask.analysis import merge_small_chunks, reshape_dim_map
from nbxla.dask.plan import SPLIT_EVERY, combine_shapes

dask = pytest.importorskip("dask", reason="dask is not installed (pip install nbxla[dask])")
da = pytest.importorskip("dask.array", reason="dask[array] is not installed (pip install nbxla[dask])")

_rng = np.random.default_rng(7)
V23 = _rng.random(23).astype(np.float32)
M = _rng.random((30, 5)).astype(np.float32)
S = _rng.random((12, 12)).astype(np.float32)
I = _rng.integers(0, 100, (30, 4)).astype(np.int32)
A20, B9 = _rng.random(20).astype(np.float32), _rng.random(9).astype(np.float32)

CASES = {
    # name: (function, [(array, chunks) or a NumPy value], phrase the report must hold or None)
    "stencil whose last block is empty": (lambda u: u[:-3] * u[3:], [(V23, 10)], "halo"),
    "integers, sums, any": (lambda i: (i * 3 + 1, i.sum(axis=0), (i > 50).any()), [(I, (7, 4))], None),
    "boolean result": (lambda u: u > 0.5, [(V23, 10)], None),
    "argmax along the unchunked axis": (lambda x: np.argmax(x, axis=1), [(M, (7, 5))], None),
    "argmax along the chunked axis": (lambda x: np.argmax(x, axis=0), [(M, (7, 5))],
                                      "rechunked x to one block along axis 0"),
    "reshape adding an axis": (lambda x: (x.reshape(30, 5, 1) * 2).sum(axis=2), [(M, (7, 5))], None),
    "reshape merging the chunked axis": (lambda x: x.reshape(-1) * 2, [(M, (7, 5))], "rechunked x"),
    "outer product of two chunked vectors": (lambda a, b: np.outer(a, b), [(A20, 6), (B9, 4)], None),
    "transpose added to itself": (lambda x: x.T + x, [(S, (4, 4))], "two dims"),
    "the same array twice": (lambda x: x * x + 1, [(V23, 10)], None),
    "ratio of two whole reductions": (lambda u: (u * u).sum() / u.max(), [(V23, 10)], None),
    "variance with ddof": (lambda x: np.var(x, axis=0, ddof=1), [(M, (7, 5))], "dask.array.reduction"),
    "where then sum": (lambda u: np.where(u > 0.5, u, -u).sum(), [(V23, 10)], None),
    "float64 accumulation": (lambda u: np.sum(u.astype(np.float64) ** 2), [(V23, 10)], None),
    "concatenate along the chunked axis": (lambda u: np.concatenate([u, u * 2]), [(V23, 10)], "rechunked u"),
    "pad then stencil": (lambda u: np.pad(u, 1)[2:] - np.pad(u, 1)[:-2], [(V23, 10)], None),
    "product": (lambda u: np.prod(u + 0.5), [(V23, 10)], None),
    "cumulative sum down the chunks": (lambda x: np.cumsum(x, axis=0), [(M, (7, 5))], "rechunked x"),
    "x.T @ x": (lambda x: x.T @ x, [(M, (7, 5))], "dot over"),
    "arange along the chunked axis": (lambda u: u * np.arange(23, dtype=np.float32), [(V23, 10)], None),
    "stencil over a value of an earlier stage, small chunks": (
        lambda u: (u[1:] - u[:-1])[2:] * np.sum(u[1:] - u[:-1]) - (u[1:] - u[:-1])[:-2], [(V23, 3)],
        "wide enough for the halo"),
    "0-d dask argument": (lambda u, s: u * s + s,
                          [(V23, 10), (np.full((), 2.5, np.float32), ())], None),
    "sums over two chunked axes (20 x 20 blocks, two-level trees)": (
        lambda x: (x.sum(), np.max(x * 2, axis=0), x.mean(axis=1)),
        [(np.repeat(np.repeat(M, 7, axis=0), 12, axis=1)[:200, :60], (10, 3))], "a0, a1"),
    "NumPy row and NumPy scalar": (lambda x, w, s: x * w + s, [(M, (7, 5)), M[0], np.float32(3)], None),
}


@pytest.mark.parametrize("name", list(CASES))
def test_split_matches_numpy(name):
    fn, specs, phrase = CASES[name]
    args = [da.from_array(s[0], chunks=s[1]) if isinstance(s, tuple) else s for s in specs]
    f = nbxla.jit(fn)
    out = f(*args)
    outs = out if isinstance(out, tuple) else (out,)
    assert all(isinstance(o, da.Array) for o in outs)
    got = dask.compute(*outs, scheduler="synchronous")
    ref = fn(*[s[0] if isinstance(s, tuple) else s for s in specs])
    refs = ref if isinstance(ref, tuple) else (ref,)
    for g, r in zip(got, refs):
        r = np.asarray(r)
        assert np.shape(g) == r.shape and np.asarray(g).dtype == r.dtype
        np.testing.assert_allclose(g, r, rtol=2e-5, atol=1e-6)
    if phrase:
        assert phrase in nd.explain(f), nd.explain(f)


def test_a_second_call_reuses_the_plan_and_a_new_chunking_replans():
    f = nbxla.jit(lambda x: np.sin(x).sum())
    x = da.from_array(V23, chunks=10)
    f(x)
    plan = nd.last_plan(f)
    f(x * 2)
    assert nd.last_plan(f) is plan
    f(x.rechunk(5))
    assert nd.last_plan(f) is not plan and len(nd.last_plan(f).stages[0].calls) == 5


def test_keys_differ_for_different_inputs_and_repeat_for_the_same():
    f = nbxla.jit(lambda x: x + 1)
    x, y = da.from_array(V23, chunks=10), da.from_array(V23 * 2, chunks=10)
    assert f(x).name == f(x).name
    assert f(x).name != f(y).name


def test_merge_small_chunks_and_reshape_map():
    assert merge_small_chunks((10, 10, 1), 2) == (10, 11)
    assert merge_small_chunks((1, 5, 1, 1, 5), 2) == (6, 2, 5)
    assert merge_small_chunks((4, 4), 0) == (4, 4)
    assert reshape_dim_map((30, 5), (30, 5, 1)) == {0: 0, 1: 1}
    assert reshape_dim_map((30, 5), (150,)) == {}
    assert reshape_dim_map((2, 3, 4), (6, 4)) == {2: 1}


def test_combine_shapes_follow_the_tree():
    chunks = ((1,) * 40, (6,))
    assert list(combine_shapes(chunks, 1)) == [((8, 6), True), ((16, 6), True), ((3, 6), False)]
    assert SPLIT_EVERY == 16
    assert list(combine_shapes(((1,) * 3,), 1)) == [((3,), False)]


def test_a_cuda_function_is_refused_with_dask_arguments():
    with pytest.raises(nbxla.NbxlaError, match="workers' CPU backend"):
        nbxla.jit(lambda x: x + 1, device="cuda")(da.ones(4, chunks=2))


def test_unknown_chunk_sizes_are_refused_with_the_fix():
    u = da.from_array(np.arange(10.0), chunks=5)
    with pytest.raises(nbxla.NbxlaError, match=r"u has unknown chunk sizes.*compute_chunk_sizes"):
        nbxla.jit(lambda u: u * 2)(u[u > 3])
