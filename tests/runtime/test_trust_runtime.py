"""Runtime robustness (issue 19): no hang after fork, a bounded fast-path table released
with the cache."""

import multiprocessing
import os
import sys

import numpy as np
import pytest

import nbxla
from nbxla.api import FAST_PATH_ENTRIES
from nbxla.runtime.cache import CompilationCache


@pytest.mark.skipif(not hasattr(os, "fork") or sys.platform == "darwin", reason="needs fork")
def test_no_hang_after_fork():
    f = nbxla.jit(lambda x: x * 2 + 1)
    x = np.ones(2 ** 22, np.float32)             # large enough to use the thread pool
    np.testing.assert_array_equal(f(x), 3)
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:
        result = pool.apply_async(_child_sum, (2 ** 22,))
        assert result.get(timeout=120) == 3 * 2 ** 22


_child_f = nbxla.jit(lambda x: (x * 2 + 1).sum())


def _child_sum(n):
    return float(_child_f(np.ones(n, np.float32)))


def test_fast_path_table_is_bounded_and_cleared_with_the_cache():
    cache = CompilationCache()
    f = nbxla.jit(lambda x: x + 1, device="evaluator", cache=cache)
    for n in range(FAST_PATH_ENTRIES + 10):
        f(np.ones(n + 1))
    assert len(f._fast) == FAST_PATH_ENTRIES
    cache.clear()
    assert len(f._fast) == 0                      # the compiled programs are released
    np.testing.assert_array_equal(f(np.ones(2)), 2)


def test_eviction_empties_the_fast_path_table():
    cache = CompilationCache(max_entries=2)
    f = nbxla.jit(lambda x: x + 1, device="evaluator", cache=cache)
    for n in range(1, 4):
        f(np.ones(n))
    assert cache.evictions == 1 and len(f._fast) <= 1
