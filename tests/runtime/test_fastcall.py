"""Kernels called as built-in functions (runtime/fastcall.py): the same results as the ctypes
entry they replace and as NumPy, on both sides of the switch (a caller present or not),
including kernels that read run-time sizes; bad calls raise TypeError instead of crashing."""

import numpy as np
import pytest

import nbxla
from nbxla.runtime import fastcall
from nbxla.runtime.cpu_kernels import KernelThunk

pytestmark = pytest.mark.skipif(fastcall._compiled() is None,
                                reason="CPython's C API is not reachable: kernels keep ctypes")


def _kernel_thunks(fn) -> list:
    cpu = fn.last_compilation.executable.native
    return [step[0] for step in cpu._plan[2] if isinstance(step[0], KernelThunk)]


def chain(x):
    for _ in range(5):
        x = np.sqrt(np.abs(x * 0.9 + 0.1))
    return x


def test_jit_call_goes_through_the_builtin_and_matches_numpy():
    f = nbxla.jit(chain)
    x = np.random.default_rng(0).random(128).astype(np.float32)
    for _ in range(3):                      # (first call, then the fast path)
        np.testing.assert_allclose(f(x), chain(x), rtol=1e-6)
    thunk, = _kernel_thunks(f)
    assert thunk.call is not None and type(thunk.call).__name__ == "builtin_function_or_method"
    assert "kernel(a0, o0)" in f.last_compilation.executable.native.run_single.source


def test_builtin_and_ctypes_entry_write_the_same_output():
    f = nbxla.jit(lambda x, y: np.tanh(x) * y - x / (1.0 + y))
    x, y = np.random.default_rng(1).standard_normal((2, 33, 7))
    f(x, y)
    thunk, = _kernel_thunks(f)
    via_builtin, via_ctypes = np.empty_like(x), np.empty_like(x)
    thunk.call(x, y, via_builtin)
    thunk.object_fn(x, y, via_ctypes, 0, thunk.extent)
    np.testing.assert_array_equal(via_builtin, via_ctypes)
    np.testing.assert_allclose(via_builtin, np.tanh(x) * y - x / (1.0 + y), rtol=1e-13)


def test_bad_calls_raise_type_error_not_crash():
    f = nbxla.jit(lambda x: x * 2.0 + 1.0)
    x = np.ones(16)
    f(x)
    thunk, = _kernel_thunks(f)
    out = np.empty_like(x)
    with pytest.raises(TypeError, match="not a numpy.ndarray"):
        thunk.call(x)                       # too few
    with pytest.raises(TypeError, match="wrong number"):
        thunk.call(x, out, out)             # too many
    with pytest.raises(TypeError, match="not a numpy.ndarray"):
        thunk.call([1.0] * 16, out)         # a list
    with pytest.raises(TypeError, match="not a numpy.ndarray"):
        thunk.call(np.ma.masked_array(x), out)      # a subclass: its layout is not promised
    thunk.call(x, out)
    np.testing.assert_array_equal(out, x * 2.0 + 1.0)


def test_run_time_sizes_reach_the_kernel():
    # One kernel for every row count (the column sum reads it at run time: RunSizes): the
    # caller passes the sizes array after the buffers.
    f = nbxla.jit(lambda x: np.tanh(x).sum(axis=0) * 2)
    read_sizes = False
    for n in (10, 20, 31, 47):
        x = np.random.default_rng(n).random((n, 4))
        np.testing.assert_allclose(f(x), np.tanh(x).sum(axis=0) * 2, rtol=1e-12)
        np.testing.assert_allclose(f(x), np.tanh(x).sum(axis=0) * 2, rtol=1e-12)
        read_sizes |= any(t.sizes and t.call is not None for t in _kernel_thunks(f))
    assert read_sizes


def test_without_the_builtin_ctypes_gives_the_same_results(monkeypatch):
    # (the other side of the switch: where the C API is out of reach, thunks keep ctypes)
    monkeypatch.setitem(fastcall._state, "compiled", None)
    assert fastcall.kernel_caller(0, 1, 1) is None

    def chain_again(x):                     # (its own compilation, made without the builtin)
        return chain(x)
    f = nbxla.jit(chain_again)
    x = np.random.default_rng(2).random(128).astype(np.float32)
    for _ in range(3):
        np.testing.assert_allclose(f(x), chain(x), rtol=1e-6)
    thunk, = _kernel_thunks(f)
    assert thunk.call is None and thunk.object_fn is not None
    assert "kernel(a0, o0, 0, extent)" in f.last_compilation.executable.native.run_single.source


def test_too_many_buffers_keep_ctypes():
    assert fastcall.kernel_caller(1, 1, fastcall.MAX_BUFFERS + 1) is None
    assert fastcall.kernel_caller(1, 1, 0) is None
