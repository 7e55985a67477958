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
