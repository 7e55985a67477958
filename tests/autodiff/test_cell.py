"""A training step in a ``%%xla`` cell: the gradient joins the cell's one compiled program."""

from __future__ import annotations

import numpy as np
import pytest

import nbxla
from nbxla.runtime.cache import DEFAULT_CACHE

from tests.ipython_util import run, shell  # noqa: F401  (fixture)


def test_sgd_step_in_a_cell_matches_numpy_and_compiles_once(shell):
    rng = np.random.default_rng(0)
    w, x, y = rng.standard_normal((3, 1)), rng.standard_normal((8, 3)), rng.standard_normal((8, 1))
    shell.user_ns.update(w=w, x=x, y=y, nbxla=nbxla,
                         loss=lambda w, x, y: np.mean((x @ w - y) ** 2))
    cell = "%%xla\nl, g = nbxla.value_and_grad(loss)(w, x, y)\nw = w - 0.1 * g"
    result, out = run(shell, cell)
    assert result.success, out
    want = w - 0.1 * (2 / 8) * x.T @ (x @ w - y)
    np.testing.assert_allclose(shell.user_ns["w"], want, rtol=1e-12)
    assert shell.user_ns["l"] == pytest.approx(np.mean((x @ w - y) ** 2), rel=1e-13)
    result, out = run(shell, cell)                      # the second step is a cache hit
    assert result.success, out
    assert DEFAULT_CACHE.hits == 1 and len(DEFAULT_CACHE.entries()) == 1


def test_gradient_tape_and_random_keys_in_a_cell(shell):
    rng = np.random.default_rng(1)
    w, x = rng.standard_normal((3, 2)), rng.standard_normal((5, 3))
    shell.user_ns.update(w=w, x=x, nbxla=nbxla, key=nbxla.random.key(3))
    cell = ("%%xla\n"
            "mask = nbxla.random.bernoulli(key, 0.5, x.shape)\n"
            "with nbxla.GradientTape() as tape:\n"
            "    loss = np.mean((np.where(mask, x, 0) @ w) ** 2)\n"
            "g = tape.gradient(loss, w)")
    result, out = run(shell, cell)
    assert result.success, out
    mask = nbxla.random.bernoulli(nbxla.random.key(3), 0.5, x.shape)      # the same draw, eagerly
    np.testing.assert_array_equal(shell.user_ns["mask"], mask)
    xm = np.where(mask, x, 0)
    np.testing.assert_allclose(shell.user_ns["g"], 2 * xm.T @ (xm @ w) / (5 * 2), rtol=1e-12)
