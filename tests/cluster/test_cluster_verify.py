"""Auto mode hands back no unchecked result: equal values merged by CSE stay distinct arrays
(a TKE kernel's flux arrays were one array), and each new cluster's first compiled run is
checked against its eager replay (a cluster that differs runs eagerly from then on and the
report says so)."""

import numpy as np
import pytest

from nbxla.cluster import AutoFunction
from nbxla.cluster.session import Session
from nbxla.runtime.cache import CompilationCache


def auto(fn, **kw):
    kw.setdefault("min_work", 1)
    kw.setdefault("whole", False)
    return AutoFunction(fn, cache=CompilationCache(), **kw)


def fluxes(mask, t):
    """Three zero arrays made in one cluster (CSE: one value), a graph break, then each
    written in turn, as Veros' TKE kernel fills flux_east, flux_north and flux_top."""
    east = np.zeros_like(mask)
    north = np.zeros_like(mask)
    top = np.zeros_like(mask)
    t2 = t * 2.0 + mask
    scale = float(t2.max())                  # Python needs a value: the cluster runs here
    east[1:] = t2[1:] - t2[:-1]
    north[:, 1:] = (t2[:, 1:] - t2[:, :-1]) / scale
    top[...] = t2 * 0.5
    return east, north, top


def test_zero_arrays_merged_by_cse_stay_distinct():
    rng = np.random.default_rng(0)
    mask, t = (rng.random((6, 5)) > 0.2).astype(np.float64), rng.random((6, 5))
    f = auto(fluxes, measure=False)
    want = fluxes(mask, t)
    for _ in range(3):                        # (the later calls replay the tape)
        got = f(mask, t)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)


@pytest.fixture
def fresh_clusters(monkeypatch):
    """No cluster checked, refused or timed yet (those tables are per process: cluster/flush.py)."""
    from nbxla.cluster import flush
    monkeypatch.setattr(flush, "_CHECKED", set(), raising=False)
    monkeypatch.setattr(flush, "_REFUSED", {})
    monkeypatch.setattr(flush, "_TIMINGS", {})
    return flush


def smooth(x, y):
    z = np.sin(x) * y + x                    # a cluster...
    total = float(z.sum())                   # ...run here (Python needs a value)
    return z / total, np.cos(z) + y          # ...and another


@pytest.mark.parametrize("measure", [False, True])
def test_a_cluster_compiled_wrong_gives_numpys_result_and_is_reported(fresh_clusters, monkeypatch, measure):
    real = Session._execute
    wrong = []

    def execute(self, compilation):             # every compiled run's first output off by 1
        outputs, ms = real(self, compilation)
        wrong.append(len(outputs))
        return [outputs[0] + 1.0] + outputs[1:], ms
    monkeypatch.setattr(Session, "_execute", execute)
    x, y = np.random.default_rng(1).random((2, 40, 30))
    f = auto(smooth, measure=measure)
    want = smooth(x, y)
    for _ in range(3):
        got = f(x, y)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-12)
    report = f.last_report
    assert report.clusters and not report.compiled_clusters
    text = report.to_text()
    assert "differed from NumPy's (output 0" in text and "max abs err 1" in text
    assert "runs eagerly from now on" in text
    calls = len(wrong)
    f(x, y)
    assert len(wrong) == calls                   # (not compiled again: eagerly)


def test_a_cluster_checked_right_stays_compiled(fresh_clusters):
    x, y = np.random.default_rng(1).random((2, 40, 30))
    f = auto(smooth, measure=False)
    for _ in range(2):
        got = f(x, y)
        for g, w in zip(got, smooth(x, y)):
            np.testing.assert_allclose(g, w, rtol=1e-12)
    assert len(f.last_report.compiled_clusters) == len(f.last_report.clusters) == 2
    assert len(fresh_clusters._CHECKED) == 2


def test_outputs_sharing_one_array_are_caught(fresh_clusters, monkeypatch):
    """(The check of each output's values cannot see two outputs that are one array: the
    zeros of ``fluxes`` were right when the cluster ran, and wrong after the writes.)"""
    real = Session._execute

    def execute(self, compilation):             # the runtime's old bug: equal outputs merged
        outputs, ms = real(self, compilation)
        return [outputs[0]] * len(outputs), ms
    monkeypatch.setattr(Session, "_execute", execute)
    rng = np.random.default_rng(0)
    mask, t = (rng.random((6, 5)) > 0.2).astype(np.float64), rng.random((6, 5))
    f = auto(fluxes, measure=False)
    for g, w in zip(f(mask, t), fluxes(mask, t)):
        np.testing.assert_array_equal(g, w)
    assert "are one array where NumPy makes two" in f.last_report.to_text()


def tke_dgtsv(kappa, forc, dzw, mask, tke, dtke):
    """The shape of the reported kernel (pyhpc-benchmarks' TKE, after Veros): flux arrays
    made together, tridiagonal diagonals from 4-d fields at a time level, ``a[..., 0] =
    c[..., -1] = 0`` on just-computed arrays, LAPACK's ``dgtsv`` on flattened copies (a graph
    break), then the solution and the fluxes written into the fields."""
    from scipy.linalg import lapack
    tau, taup1 = 0, 1
    flux_east = np.zeros_like(mask)
    flux_north = np.zeros_like(mask)
    flux_top = np.zeros_like(mask)
    delta = np.zeros_like(mask)
    delta[:, :, :-1] = 0.5 * (kappa[:, :, :-1] + kappa[:, :, 1:]) / dzw[1:]
    a = np.where(mask > 0, -delta / dzw, 0.0)
    c = np.where(mask > 0, -delta / dzw, 0.0)
    b = np.where(mask > 0, 1.0 + 2 * delta / dzw, 1.0)
    d = tke[:, :, :, tau] + forc
    a[..., 0] = c[..., -1] = 0
    sol = lapack.dgtsv(a.flatten()[1:], b.flatten(), c.flatten()[:-1], d.flatten())[3]
    tke[:, :, :, taup1] = np.where(mask > 0, sol.reshape(a.shape), tke[:, :, :, taup1])
    flux_east[:-1] = tke[1:, :, :, tau] - tke[:-1, :, :, tau]
    flux_north[:, :-1] = tke[:, 1:, :, tau] - tke[:, :-1, :, tau]
    flux_top[:, :, :-1] = tke[:, :, 1:, tau] - tke[:, :, :-1, tau]
    dtke[:, :, :, tau] = mask * (flux_east + flux_north + flux_top)
    tke[:, :, :, taup1] += dtke[:, :, :, tau]
    return flux_east


@pytest.mark.parametrize("measure", [False, True])
def test_tke_kernel_with_dgtsv_matches_numpy_on_every_call(measure):
    pytest.importorskip("scipy.linalg", reason="SciPy is an optional test dependency")
    rng = np.random.default_rng(3)
    shape = (9, 8, 5)
    inputs = (rng.random(shape), rng.standard_normal(shape), 1 + rng.random(5),
              (rng.random(shape) > 0.2).astype(np.float64), rng.random(shape + (3,)),
              rng.standard_normal(shape + (3,)))
    f = auto(tke_dgtsv, measure=measure)
    for _ in range(4):
        ours, eager = ([x.copy() for x in inputs] for _ in range(2))
        np.testing.assert_allclose(f(*ours), tke_dgtsv(*eager), rtol=1e-12, atol=1e-12)
        for g, w in zip(ours[-2:], eager[-2:]):       # tke and dtke, written in place
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
    assert f.last_report.breaks and f.last_report.compiled_clusters
