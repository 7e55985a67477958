"""Auto mode hands back no unchecked result: equal values merged by CSE stay distinct arrays
(a TKE kernel's flux arrays were one array), and each new cluster's first compiled run is
checked against its eager replay (a cluster that differs runs eagerly from then on and the
report says so)."""

import numpy as np
import pytest

from nbxla.cluster import AutoFunction
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
    """No cluster checked, refused or timed yet (those tables are per process)."""
    from nbxla.cluster import session
    monkeypatch.setattr(session, "_CHECKED", set(), raising=False)
    monkeypatch.setattr(session, "_REFUSED", {})
    monkeypatch.setattr(session, "_TIMINGS", {})
    return session


def smooth(x, y):
    z = np.sin(x) * y + x                    # a cluster...
    total = float(z.sum())                   # ...run here (Python needs a value)
    return z / total, np.cos(z) + y          # ...and another


@pytest.mark.parametrize("measure", [False, True])
def test_a_cluster_compiled_wrong_gives_numpys_result_and_is_reported(fresh_clusters, monkeypatch, measure):
    real = fresh_clusters.Session._execute
    wrong = []

    def execute(self, compilation):             # every compiled run's first output off by 1
        outputs, ms = real(self, compilation)
        wrong.append(len(outputs))
        return [outputs[0] + 1.0] + outputs[1:], ms
    monkeypatch.setattr(fresh_clusters.Session, "_execute", execute)
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
    real = fresh_clusters.Session._execute

    def execute(self, compilation):             # the runtime's old bug: equal outputs merged
        outputs, ms = real(self, compilation)
        return [outputs[0]] * len(outputs), ms
    monkeypatch.setattr(fresh_clusters.Session, "_execute", execute)
    rng = np.random.default_rng(0)
    mask, t = (rng.random((6, 5)) > 0.2).astype(np.float64), rng.random((6, 5))
    f = auto(fluxes, measure=False)
    for g, w in zip(f(mask, t), fluxes(mask, t)):
        np.testing.assert_array_equal(g, w)
    assert "are one array where NumPy makes two" in f.last_report.to_text()
