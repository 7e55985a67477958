"""``%%xla --dynamic``: a cell compiled once for every batch size, against NumPy at every size."""

from __future__ import annotations

import numpy as np

from nbxla.runtime.cache import DEFAULT_CACHE

from tests.ipython_util import run

CELL = "%%xla --dynamic\ne = np.exp(x - x.max(axis=1, keepdims=True))\np = e / e.sum(axis=1, keepdims=True)"


def _softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_dynamic_cell_compiles_once_for_every_batch_size(shell):
    DEFAULT_CACHE.clear()
    shell.user_ns["np"] = np
    rng = np.random.default_rng(0)
    for n in range(2, 12):
        x = rng.random((n, 16), dtype=np.float32)
        shell.user_ns["x"] = x
        result, _ = run(shell, CELL)
        assert result.success
        np.testing.assert_allclose(shell.user_ns["p"], _softmax(x), rtol=2e-5, atol=1e-6)
    assert DEFAULT_CACHE.misses == 1
    _, table = run(shell, "%xla_cache")
    assert "x: f32[b,16]" in table and "(symbolic;" in table


def test_dynamic_cell_binding_a_size_is_specialised(shell):
    DEFAULT_CACHE.clear()
    cell = "%%xla --dynamic\nn = x.shape[0]\ny = x * 2"
    for rows in (3, 4):
        shell.user_ns["x"] = np.ones((rows, 8), np.float32)
        result, _ = run(shell, cell)
        assert result.success and shell.user_ns["n"] == rows
        np.testing.assert_array_equal(shell.user_ns["y"], np.full((rows, 8), 2, np.float32))
    assert DEFAULT_CACHE.misses == 2
    _, table = run(shell, "%xla_cache")
    assert "specialised: the cell binds a Python value" in table
