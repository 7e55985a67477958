"""``nbxla.random``: explicit keys, the same numbers eagerly and in compiled code."""

from __future__ import annotations

import numpy as np
import pytest

import nbxla
from nbxla import random as nr


def test_same_key_same_numbers_eagerly_and_compiled():
    k = nr.key(7)

    @nbxla.jit
    def draw(key):
        return nr.uniform(key, (3, 5)), nr.normal(key, (4,), np.float64), nr.bernoulli(key, 0.3, (6,))
    compiled = draw(k)
    eager = (nr.uniform(k, (3, 5)), nr.normal(k, (4,), np.float64), nr.bernoulli(k, 0.3, (6,)))
    for a, b in zip(compiled, eager):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(nr.uniform(k, (3, 5)), eager[0])        # a key is reusable


def test_split_gives_distinct_keys_and_different_numbers():
    keys = nr.split(nr.key(0), 4)
    assert keys.shape == (4, 2) and keys.dtype == np.uint64
    assert len({tuple(k) for k in keys}) == 4
    draws = [nr.uniform(k, (16,)) for k in keys]
    assert all(not np.array_equal(draws[0], d) for d in draws[1:])
    assert not np.array_equal(nr.uniform(nr.key(1), (16,)), nr.uniform(nr.key(2), (16,)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_distributions(dtype):
    k1, k2, k3 = nr.split(nr.key(3), 3)
    u = nr.uniform(k1, (200_000,), dtype)
    assert u.dtype == dtype and u.min() >= 0 and u.max() < 1
    u = u.astype(np.float64)
    assert abs(float(u.mean()) - 0.5) < 0.005 and abs(float(u.var()) - 1 / 12) < 0.002
    v = nr.uniform(k1, (1000,), dtype, low=-2.0, high=3.0)
    assert v.min() >= -2 and v.max() < 3
    n = nr.normal(k2, (200_000,), dtype).astype(np.float64)
    assert abs(n.mean()) < 0.01 and abs(n.std() - 1) < 0.01
    assert abs(np.mean(np.abs(n) < 1) - 0.6827) < 0.005                  # the normal's shape
    b = nr.bernoulli(k3, 0.2, (200_000,))
    assert b.dtype == np.bool_ and abs(b.mean() - 0.2) < 0.005


def test_dropout_inside_a_compiled_step_changes_with_the_key():
    @nbxla.jit
    def dropout(x, key):
        return np.where(nr.bernoulli(key, 0.75, x.shape), x / 0.75, 0)
    x = np.ones((64, 64), np.float32)
    a, b = nr.split(nr.key(0))
    da, db = dropout(x, a), dropout(x, b)
    assert not np.array_equal(da, db)
    assert abs(np.mean(da != 0) - 0.75) < 0.03
    np.testing.assert_array_equal(da, dropout(x, a))


def test_bad_keys_and_dtypes_are_refused():
    with pytest.raises(TypeError, match="uint64 array of shape \\(2,\\)"):
        nr.uniform(np.array([1, 2]), (3,))
    with pytest.raises(TypeError, match="float16, float32 or float64"):
        nr.uniform(nr.key(0), (3,), np.int32)


def test_np_random_in_compiled_code_points_to_nbxla_random():
    @nbxla.jit
    def f(x):
        return x + np.random.rand(3)
    with pytest.raises(nbxla.NotCompilableError, match="np.random has hidden state") as info:
        f(np.ones(3))
    assert "nbxla.random" in str(info.value)
