"""Whether a kernel is split across threads weighs its work per element, not only its size:
a 40K-element kernel of a long formula with transcendentals is split, a 40K-element add is
not (handing work to the pool costs more than it saves there).  Results agree either way."""

from __future__ import annotations

import numpy as np

import nbxla
from nbxla.runtime.cpu_kernels import KernelThunk, worker_count


def _kernels(f):
    return [s[0] for s in f.last_compilation.executable.native._plan[2] if isinstance(s[0], KernelThunk)]


def _step(t, x, y):
    return np.tanh(t * y + 0.1) + x


def heavy(x, y):           # (written out: a Python loop would stay a loop)
    t = _step(x, x, y)
    t = _step(_step(_step(t, x, y), x, y), x, y)
    t = _step(_step(_step(t, x, y), x, y), x, y)
    return _step(_step(_step(t, x, y), x, y), x, y)


def test_heavy_kernels_are_split_and_cheap_ones_are_not():
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((200, 200)), rng.standard_normal((200, 200))
    cheap = nbxla.jit(lambda x, y: x + y)
    np.testing.assert_array_equal(cheap(x, y), x + y)
    assert not any(k.parallel for k in _kernels(cheap))
    f = nbxla.jit(heavy)
    np.testing.assert_allclose(f(x, y), heavy(x, y), rtol=1e-12, atol=1e-12)
    assert len(_kernels(f)) == 1
    assert _kernels(f)[0].parallel == (worker_count() > 1)
