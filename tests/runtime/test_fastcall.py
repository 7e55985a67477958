"""Kernels called as built-in functions (runtime/fastcall.py): the same results as the ctypes
entry they replace and as NumPy, on both sides of the switch (a caller present or not),
including kernels that read run-time sizes; bad calls raise TypeError instead of crashing."""

import numpy as np
import pytest

import nbxla
from nbxla.runtime import fastcall
from nbxla.runtime.cache import CompilationCache
from nbxla.runtime.cpu_kernels import RELEASE_GIL_WORK, KernelThunk

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

    f = nbxla.jit(chain, cache=CompilationCache())     # (its own compilation, made without the builtin)
    x = np.random.default_rng(2).random(128).astype(np.float32)
    for _ in range(3):
        np.testing.assert_allclose(f(x), chain(x), rtol=1e-6)
    thunk, = _kernel_thunks(f)
    assert thunk.call is None and thunk.object_fn is not None
    assert "kernel(a0, o0, 0, extent)" in f.last_compilation.executable.native.run_single.source


def test_too_many_buffers_keep_ctypes():
    assert fastcall.kernel_caller(1, 1, fastcall.MAX_BUFFERS + 1) is None
    assert fastcall.kernel_caller(1, 1, 0) is None


def rolled(x, n):
    s = x
    for _ in range(n):
        s = s * 0.5 + x
    return s


def two_results(x, n):
    a, b = x, x[::-1].copy()
    for k in range(n):
        a, b = a + b * 0.25, b - a * 0.125
    return a - b


@pytest.mark.parametrize("ctypes", [False, True])
@pytest.mark.parametrize("fn", [rolled, two_results])
def test_native_loops_match_numpy_through_either_call(fn, ctypes):
    # (trip counts traced: the loop stays a while, run by the native driver)
    jitted = nbxla.jit(fn, cache=CompilationCache())       # (its own compilation)
    x = np.random.default_rng(3).random(50)
    with fastcall.ctypes_only() if ctypes else _nothing():
        first = jitted(x, np.array(7))
    np.testing.assert_allclose(first, fn(x, 7), rtol=1e-12)
    for n in (0, 1, 9, 200):
        np.testing.assert_allclose(jitted(x, np.array(n)), fn(x, n), rtol=1e-12)
    loops = jitted.last_compilation.executable.native.loops
    assert loops and all(how.startswith("native") for how in loops.values()), loops
    thunks = [t for t in jitted.last_compilation.executable.native._native.values()]
    assert thunks and all((t.call is None) == ctypes for t in thunks)


def test_a_loops_error_code_comes_back_through_the_builtin(monkeypatch):
    from tests.frontend_util import use_flags
    from tests.runtime.test_native_loops import batched_solves
    use_flags(monkeypatch, "--unroll_budget=0 --unroll_max=0")
    jitted = nbxla.jit(batched_solves)
    A = np.eye(4) + 0.1
    np.testing.assert_allclose(jitted(A, np.ones(4), 3), batched_solves(A, np.ones(4), 3), rtol=1e-12)
    if not any(t.call is not None for t in jitted.last_compilation.executable.native._native.values()):
        pytest.skip("the solve loop is host-driven here (no LAPACK for native loops)")
    with pytest.raises(np.linalg.LinAlgError):
        jitted(np.ones((4, 4)), np.ones(4), 3)      # singular: code 2


def test_loop_caller_checks_its_arguments():
    assert fastcall.loop_caller(1, 0) is None
    assert fastcall.loop_caller(1, fastcall.MAX_LOOP_ARGS + 1) is None
    call = fastcall.loop_caller(1, 2)               # (never reaches the address: refused first)
    with pytest.raises(TypeError, match="wrong number"):
        call(np.ones(1))
    with pytest.raises(TypeError, match="not a numpy.ndarray"):
        call(np.ones(1), 3.0)


@pytest.mark.parametrize("kind", ["loop", "object"])
def test_counted_trampolines_are_compiled_per_count_when_first_needed(kind, monkeypatch):
    """A native loop's (or object entry point's) trampoline is made for its count of arrays when
    a callee of that count first needs one (compiling every count up front was most of a loop
    program's first call), and serves every later callee of the count; the counts at both ends
    of the range work, and the process-wide trampoline holds neither kind."""
    state = fastcall._compiled()
    monkeypatch.setitem(state, "methods", {k: v for k, v in state["methods"].items()
                                            if not k.startswith(f"nbxla_{kind}_call_")})
    monkeypatch.setitem(state, "engines", list(state["engines"]))
    made = []
    real = getattr(fastcall, f"{kind}_trampoline_ir")
    monkeypatch.setattr(fastcall, f"{kind}_trampoline_ir", lambda count, *a: made.append(count) or real(count, *a))
    most = fastcall.MAX_LOOP_ARGS if kind == "loop" else fastcall.MAX_OBJECT_ARGS
    for count in (3, 3, 1, most):
        # (never reaches the address: refused first)
        call = fastcall.loop_caller(1, count) if kind == "loop" else fastcall.object_caller(1, 1, count)
        with pytest.raises(TypeError, match="wrong number"):
            call(*[np.ones(1)] * (count + 1))
        with pytest.raises(TypeError, match="not a numpy.ndarray"):
            call(*[np.ones(1)] * (count - 1), 3.0)
    assert made == [3, 1, most]
    text = fastcall.trampoline_ir(fastcall.ARRAY_DATA_OFFSET, *state["addresses"])
    assert "nbxla_loop_call" not in text and "nbxla_object_call" not in text


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_loops_and_long_kernels_release_the_gil_short_kernels_keep_it():
    # (the built-in's ``self`` is its words: [address, arrays, release, ...])
    looped = nbxla.jit(rolled, cache=CompilationCache())
    x = np.ones(10)
    looped(x, np.array(3))
    loops = list(looped.last_compilation.executable.native._native.values())
    assert loops and all(t.call.__self__[2] == 1 for t in loops)
    small, large = nbxla.jit(lambda v: v * 2.0 + 1.0), nbxla.jit(lambda v: np.tanh(v) * 2.0 + 1.0)
    small(np.ones(64))
    large(np.ones(RELEASE_GIL_WORK * 2 // 8))    # (below the split threshold, above the release one)
    assert all(t.call.__self__[2] == 0 for t in _kernel_thunks(small))
    assert any(t.call is not None and t.call.__self__[2] == 1 for t in _kernel_thunks(large))


def test_threads_running_native_loops_at_once_get_their_own_results():
    import threading
    looped = nbxla.jit(rolled, cache=CompilationCache())
    xs = [np.random.default_rng(k).random(300) for k in range(4)]
    looped(xs[0], np.array(5))
    results = {}

    def work(k):
        for _ in range(20):
            results[k] = looped(xs[k], np.array(400 + k))
    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in range(4):
        np.testing.assert_allclose(results[k], rolled(xs[k], 400 + k), rtol=1e-12)


def running(x, y):
    return np.mean(3 * x**2 + y)


@pytest.mark.parametrize("ctypes", [False, True])
def test_full_reductions_through_either_call_match_numpy(ctypes):
    from nbxla.runtime.cpu_kernels import FullReductionThunk
    f = nbxla.jit(running, cache=CompilationCache())
    x, y = np.random.default_rng(4).random((2, 1000))
    with fastcall.ctypes_only() if ctypes else _nothing():
        first = f(x, y)
    assert np.isclose(first, running(x, y), rtol=1e-12)
    for _ in range(2):
        assert np.isclose(f(x, y), running(x, y), rtol=1e-12)
    cpu = f.last_compilation.executable.native
    reductions = [s[0] for s in cpu._plan[2] if isinstance(s[0], FullReductionThunk)]
    assert reductions and all((t.call is None) == ctypes for t in reductions)


def test_object_caller_checks_its_arguments():
    assert fastcall.object_caller(1, 1, 0) is None
    assert fastcall.object_caller(1, 1, fastcall.MAX_OBJECT_ARGS + 1) is None
    call = fastcall.object_caller(1, 1, 2)          # (never reaches the address: refused first)
    with pytest.raises(TypeError, match="wrong number"):
        call(np.ones(1))
    with pytest.raises(TypeError, match="not a numpy.ndarray"):
        call(np.ones(1), (1,))


def test_trampolines_are_compiled_by_the_fast_instruction_selector(monkeypatch):
    """The trampolines are glue (loads, checks, one call): their machine code comes from LLVM's
    -O0 code generator (2 ms against 6.5-8 ms at -O3, per trampoline, in every process's first
    call), and they still check and call as before."""
    from nbxla.codegen import cpu
    state = fastcall._compiled()
    monkeypatch.setitem(state, "methods", {k: v for k, v in state["methods"].items()
                                            if not k.startswith("nbxla_loop_call_")})
    monkeypatch.setitem(state, "engines", list(state["engines"]))
    levels = []
    real = cpu._new_target_machine
    monkeypatch.setattr(cpu, "_new_target_machine", lambda opt=3: levels.append(opt) or real(opt))
    call = fastcall.loop_caller(1, 2)
    assert levels == [0]
    with pytest.raises(TypeError, match="wrong number"):
        call(np.ones(1))
    with pytest.raises(TypeError, match="not a numpy.ndarray"):
        call(np.ones(1), 3.0)
    looped = nbxla.jit(rolled, cache=CompilationCache())
    x = np.arange(5.0)
    np.testing.assert_allclose(looped(x, 7), rolled(x, 7))
