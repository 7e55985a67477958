"""The compilation cache and compiled functions may be used from several threads at once."""

from concurrent.futures import ThreadPoolExecutor

import numpy as np

import nbxla
from nbxla.runtime.cache import CompilationCache


def test_concurrent_calls_compile_once_and_agree():
    cache = CompilationCache()
    # (dynamic=False: one compilation per shape, the thing checked here; the symbolic path
    # under threads is tests/test_dynamic_dims.py's)
    f = nbxla.jit(lambda x, y: np.tanh(x) * y + x.sum(axis=-1, keepdims=True), cache=cache, dynamic=False)
    rng = np.random.default_rng(0)
    inputs = [(rng.random((n, 16), dtype=np.float32), rng.random((n, 16), dtype=np.float32))
              for n in (3, 5, 3, 7, 5, 3, 7, 3) * 4]
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda args: f(*args), inputs))
    for (x, y), got in zip(inputs, results):
        np.testing.assert_allclose(got, np.tanh(x) * y + x.sum(axis=-1, keepdims=True), rtol=1e-5)
    # one compilation per distinct shape, however the threads interleaved
    assert cache.misses == 3 and cache.hits == len(inputs) - 3
    assert len(cache.entries()) == 3


def test_concurrent_runs_of_one_executable_do_not_share_buffers():
    f = nbxla.jit(lambda x: (x * 2 + 1, (x * x).sum()))
    xs = [np.full((300, 300), float(k), np.float32) for k in range(16)]
    f(xs[0])
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(f, xs))
    for k, (a, s) in enumerate(results):
        assert np.all(a == 2 * k + 1) and s == np.float32(k * k * 300 * 300)
