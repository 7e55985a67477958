"""Issue 31's own check, as written: 40 batch sizes (1..40, the first one 1) compile once with
``dynamic=True`` and at most twice automatically, for elementwise, reduction and dot programs
and a training step that has all three (dots, and reductions over the batch: the weight and
bias gradients), with results equal to NumPy's at every size."""

import numpy as np
import pytest

import nbxla
from nbxla.runtime.cache import CompilationCache
from tests.test_dynamic_dims import PROGRAMS, rows

RNG = np.random.default_rng(3140)
W1 = RNG.random((64, 16), dtype=np.float32) / 64
W2 = RNG.random((16, 4), dtype=np.float32) / 16


def mlp_step(x, y, w1, w2):
    h = np.tanh(x @ w1)
    g = h @ w2 - y
    gh = (g @ w2.T) * (1 - h * h)
    return w1 - 0.01 * (x.T @ gh), w2 - 0.01 * (h.T @ g), gh.sum(axis=0)


ALL = {**PROGRAMS, "mlp_step": (mlp_step, lambda n: (rows(n), RNG.random((n, 4), dtype=np.float32), W1, W2))}


def _forty(f, fn, make):
    for n in range(1, 41):
        args = make(n)
        got, expected = f(*args), fn(*args)
        for g, e in zip(got if isinstance(got, tuple) else (got,),
                        expected if isinstance(expected, tuple) else (expected,)):
            np.testing.assert_allclose(g, e, rtol=2e-5, atol=1e-5, err_msg=f"size {n}")


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("dynamic, most", [(True, 1), (None, 2)])
def test_forty_sizes_from_size_one(name, dynamic, most):
    fn, make = ALL[name]
    cache = CompilationCache()
    f = nbxla.jit(fn, cache=cache, dynamic=dynamic)
    _forty(f, fn, make)
    assert cache.misses == most
    symbolic = [e for e in cache.entries() if "symbolic" in e.explanation]
    assert len(symbolic) == 1 and symbolic[0].hits >= 40 - most
