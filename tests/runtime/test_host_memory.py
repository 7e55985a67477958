"""Recycled large host buffers (runtime/host_memory.py): memory is reused only after every
array using it is gone, and kernels writing into recycled memory give the same results."""

import numpy as np

import nbxla
from nbxla.runtime import host_memory
from nbxla.runtime.host_memory import memory_owner
from nbxla.runtime.cache import CompilationCache

BIG = (1024, 512)                     # 2 MiB of float32: pooled


def test_small_requests_are_plain_arrays():
    a = host_memory.empty((4, 4), np.float64)
    assert a.base is None and a.shape == (4, 4) and a.dtype == np.float64


def test_pooled_arrays_are_aligned_writable_contiguous():
    a = host_memory.empty(BIG, np.float32)
    assert isinstance(a.base, host_memory.PooledBlock)
    assert a.shape == BIG and a.dtype == np.float32 and a.flags.c_contiguous and a.flags.writeable
    assert a.ctypes.data % host_memory.ALIGNMENT == 0
    a[...] = 3.0
    assert float(a.sum()) == 3.0 * a.size


def test_pooled_arrays_keep_ml_dtypes_types():
    # (NumPy cannot read ml_dtypes' own typestrs back: f8e5m2 calls itself '<f1'; they are
    # made as raw bytes of their size, and the dtype must come back)
    import ml_dtypes
    for dtype in (ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2):
        for a in (host_memory.empty(BIG, dtype), host_memory.allocator(BIG, dtype)()):
            assert a.dtype == np.dtype(dtype) and a.shape == BIG
            assert isinstance(memory_owner(a), host_memory.PooledBlock)
            a[...] = 1.5
            assert float(a.astype(np.float32).sum()) == 1.5 * a.size


def test_memory_is_reused_only_after_the_last_view_dies():
    host_memory.release()
    a = host_memory.empty(BIG, np.float32)
    address = a.ctypes.data
    view = a[::2]
    flat = a.reshape(-1)
    del a
    assert host_memory.free_bytes() == 0            # views keep the block in use
    b = host_memory.empty(BIG, np.float32)
    assert b.ctypes.data != address and not np.shares_memory(b, view)
    del view, flat
    assert host_memory.free_bytes() >= BIG[0] * BIG[1] * 4
    c = host_memory.empty(BIG, np.float32)
    assert c.ctypes.data == address                 # the freed block came back
    del b, c
    assert host_memory.release() > 0 and host_memory.free_bytes() == 0


def test_free_memory_is_bounded(monkeypatch):
    host_memory.release()
    monkeypatch.setattr(host_memory, "MAX_FREE_BYTES", 3 << 20)
    arrays = [host_memory.empty(BIG, np.float32) for _ in range(4)]     # 4 x 2 MiB
    del arrays
    assert host_memory.free_bytes() <= 3 << 20
    host_memory.release()


def test_kernel_results_in_recycled_memory_are_right_and_distinct():
    f = nbxla.jit(lambda x: (np.exp(x) * 2, x + 1), cache=CompilationCache())
    x = np.random.default_rng(0).standard_normal(BIG).astype(np.float32)
    kept = []
    for _ in range(6):                    # results dropped and kept in turn
        e, p = f(x)
        np.testing.assert_allclose(e, np.exp(x) * 2, rtol=1e-6)
        np.testing.assert_array_equal(p, x + 1)
        assert isinstance(e.base, host_memory.PooledBlock)
        kept.append(p)
    assert not any(np.shares_memory(a, b) for i, a in enumerate(kept) for b in kept[i + 1:])
    for p in kept:
        np.testing.assert_array_equal(p, x + 1)


def test_several_mid_sized_outputs_of_one_kernel_are_recycled():
    """A kernel's six outputs of 320 KiB each: below 1 MiB glibc trims the heap when they are
    freed together and the next call faults every page in again, so they are pooled too,
    all six of one size."""
    host_memory.release()
    shape = (40, 1024)                                   # 320 KiB of float64
    arrays = [host_memory.empty(shape, np.float64) for _ in range(6)]
    assert all(isinstance(a.base, host_memory.PooledBlock) for a in arrays)
    addresses = {a.ctypes.data for a in arrays}
    del arrays
    assert host_memory.free_bytes() >= 6 * 40 * 1024 * 8
    again = [host_memory.empty(shape, np.float64) for _ in range(6)]
    assert {a.ctypes.data for a in again} == addresses
    del again
    f = nbxla.jit(lambda x, y: (x + y, x - y, x * y, x / y, np.sqrt(x), np.exp(y)), cache=CompilationCache())
    rng = np.random.default_rng(1)
    x, y = rng.uniform(1, 2, shape), rng.uniform(1, 2, shape)
    for _ in range(3):                                   # outputs dropped between calls
        got = f(x, y)
        assert len({id(memory_owner(g)) for g in got}) == 6
        for g, want in zip(got, (x + y, x - y, x * y, x / y, np.sqrt(x), np.exp(y))):
            np.testing.assert_allclose(g, want, rtol=1e-14)
    host_memory.release()


def test_a_pooled_f8e5m2_result_of_a_jit():
    # (a 256 KiB f8e5m2 output is pooled: it raised "data type '<f1' not understood")
    import ml_dtypes
    x = np.random.default_rng(0).standard_normal((512, 512)).astype(np.float32)
    got = nbxla.jit(lambda x: (x * 2).astype(ml_dtypes.float8_e5m2))(x)
    want = (x * 2).astype(ml_dtypes.float8_e5m2)
    assert got.dtype == want.dtype and np.array_equal(got.view(np.uint8), want.view(np.uint8))
