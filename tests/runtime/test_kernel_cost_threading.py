"""Whether a kernel is split across threads weighs its work per element, not only its size:
a 40K-element kernel of a long formula with transcendentals is split, a 40K-element add is
not (handing work to the pool costs more than it saves there).  Results agree either way."""

from __future__ import annotations

import numpy as np
import pytest

import nbxla
from nbxla.runtime import cpu_kernels
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


def _softmax_rows(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def test_cost_of_a_kernel_counts_its_memory_pass_and_its_ops():
    """One unit for the pass, a sixteenth per cheap op, one per f32 transcendental, four per
    f64 one: the threshold in units is the same whatever the kernel does."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((64, 128)).astype(np.float32)
    add = nbxla.jit(lambda x: x + 1)
    add(x)
    (kernel,) = _fusions(add)
    assert cpu_kernels.element_cost(kernel) == 1 + cpu_kernels.CHEAP_OP_COST
    tanh32, tanh64 = nbxla.jit(lambda x: np.tanh(x)), nbxla.jit(lambda x: np.tanh(x))
    tanh32(x), tanh64(x.astype(np.float64))
    assert cpu_kernels.element_cost(_fusions(tanh32)[0]) == 1 + cpu_kernels.TRANSCENDENTAL_COST
    assert cpu_kernels.element_cost(_fusions(tanh64)[0]) == 1 + cpu_kernels.WIDE_TRANSCENDENTAL_COST


def _fusions(f):
    return [i for i in f.last_compilation.executable.native.module.entry.instructions if i.opcode == "fusion"]


@pytest.mark.parametrize("rows", [1024, 8192])
def test_softmax_rows_split_only_above_the_threshold(rows):
    """A softmax over 1024 rows of 128 f32 (~40-60 us on one core) runs on the calling thread;
    over 8192 rows (1M elements, ~0.5 ms) it is split.
    Both agree with NumPy."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((rows, 128)).astype(np.float32)
    f = nbxla.jit(_softmax_rows)
    np.testing.assert_allclose(f(x), _softmax_rows(x), rtol=1e-5, atol=1e-6)
    work = [k for k in _kernels(f) if k.extent == rows]
    assert len(work) == 1, [k.extent for k in kernels]
    assert work[0].parallel == (rows == 8192)
