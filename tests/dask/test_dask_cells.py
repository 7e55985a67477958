"""``%%xla`` cells that read dask arrays: the names they bind are dask arrays computed on the
cluster, equal to eager NumPy's values."""

import numpy as np
import pytest

import nbxla.dask as nd
from tests.ipython_util import run, shell  # noqa: F401  (fixture)

da = pytest.importorskip("dask.array", reason="dask[array] is not installed (pip install nbxla[dask])")


def test_cell_with_dask_and_numpy_inputs_binds_dask_arrays(shell, client):
    rng = np.random.default_rng(5)
    xn, w = rng.random((60, 8)).astype(np.float32), rng.random(8).astype(np.float32)
    shell.user_ns.update(x=da.from_array(xn, chunks=(15, 8)), w=w)
    cell = ("%%xla\n"
            "z = np.exp(x * w - 1)\n"
            "col = z.mean(axis=0)\n"
            "total = np.sum(z)\n"
            "total")
    result, shown = run(shell, cell)
    assert result.success, shown
    ns = shell.user_ns
    for name in ("z", "col", "total"):
        assert isinstance(ns[name], da.Array), (name, type(ns[name]))
    z = np.exp(xn * w - 1)
    np.testing.assert_allclose(ns["z"].compute(), z, rtol=1e-6)
    np.testing.assert_allclose(ns["col"].compute(), z.mean(axis=0), rtol=1e-5)
    np.testing.assert_allclose(ns["total"].compute(), z.sum(), rtol=1e-5)
    assert "dask.Array" in shown or "dask.array" in shown            # the displayed value is lazy
    assert "nbxla-fused-cell_" in nd.explain() and "dask.array.reduction" in nd.explain()


def test_cell_options_that_need_numpy_results_are_refused(shell):
    shell.user_ns["x"] = da.ones(10, chunks=5)
    result, shown = run(shell, "%%xla --compare\ny = x + 1")
    assert not result.success and "not available for cells with dask inputs" in shown
