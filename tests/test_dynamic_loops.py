"""Loops over arrays with an unknown dimension under ``nbxla.jit``: one symbolic compilation
serves every size, its ``while`` run natively by a library that reads the sizes when it runs
(``runtime/symbolic_loops``), or from the host where that is turned off; results against NumPy
at sizes 1, 2 and ones that are not a multiple of the vector width."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

import nbxla
from nbxla.runtime.cache import CompilationCache
from nbxla.symbolic_compile import SymbolicProgram
from nbxla.runtime.symbolic_loops import SymbolicLoops
from tests.frontend_util import use_flags

RNG = np.random.default_rng(5)
W = (RNG.random((16, 16), np.float32) - 0.5) * 0.3
SIZES = [1, 2, 7, 33, 100, 1031]
needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="native loops need a C compiler")


@pytest.fixture(autouse=True)
def _loops_stay_loops(monkeypatch):
    """The loops here are short: they must stay HLO whiles (what runs them is the subject)."""
    use_flags(monkeypatch, "--unroll_budget=0")


def damped(x):
    s = x
    for _ in range(6):
        s = np.tanh(s) * 0.9 + x
    return s


def layers(x, w, steps):
    s = x
    t = x.sum(axis=0)
    i = 0
    while i < steps:
        s = np.tanh(s @ w) + x
        t = t + s.sum(axis=0)
        i += 1
    return s, t


def _symbolic(cache) -> SymbolicProgram:
    (found,) = [e.value for e in cache.entries() if isinstance(e.value, SymbolicProgram)]
    return found


def _close(got, want, n):
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4, err_msg=f"size {n}")


@needs_cc
def test_a_loop_compiles_once_for_every_size_and_runs_natively():
    cache = CompilationCache()
    f = nbxla.jit(damped, cache=cache, dynamic=True)
    for n in SIZES:
        x = RNG.random((n, 16), np.float32)
        _close(f(x), damped(x), n)
    assert cache.misses == 1
    program = _symbolic(cache)
    assert any(i.opcode == "while" for i in program.compilation.optimized.entry.instructions)
    assert isinstance(program.loops, SymbolicLoops)
    loops = program.instance({"b": 33}).executable.native.loops
    assert loops and all("for every size" in how for how in loops.values()), loops


@needs_cc
def test_a_loop_with_a_dot_a_reduction_and_a_traced_trip_count():
    cache = CompilationCache()
    f = nbxla.jit(layers, cache=cache, dynamic={"x": (0,)})
    for n, steps in zip(SIZES, (3, 0, 1, 5, 2, 4)):
        x = RNG.random((n, 16), np.float32)
        _close(f(x, W, np.int32(steps)), layers(x, W, steps), n)
    assert cache.misses == 1


@needs_cc
def test_automatic_mode_makes_a_loop_symbolic_at_the_second_size():
    cache = CompilationCache()
    f = nbxla.jit(damped, cache=cache)
    for n in range(1, 21):
        x = RNG.random((n, 16), np.float32)
        _close(f(x), damped(x), n)
    assert cache.misses == 2
    assert isinstance(_symbolic(cache).loops, SymbolicLoops)


def test_loops_run_from_the_host_when_native_loops_are_off(monkeypatch):
    monkeypatch.setenv("NBXLA_NATIVE_LOOPS", "0")
    cache = CompilationCache()
    f = nbxla.jit(damped, cache=cache, dynamic=True)
    for n in (1, 7, 100):
        x = RNG.random((n, 16), np.float32)
        _close(f(x), damped(x), n)
    assert cache.misses == 1
    program = _symbolic(cache)
    assert program.loops == "host-driven: NBXLA_NATIVE_LOOPS=0"
    loops = program.instance({"b": 7}).executable.native.loops
    assert loops and all(how.startswith("host-driven") for how in loops.values()), loops


def test_loops_that_cannot_run_natively_for_every_size_specialise_with_the_reason(monkeypatch):
    import nbxla.runtime.symbolic_loops as symbolic_loops
    from nbxla.errors import AotError

    def refuse(module):
        raise AotError("no C compiler (cc) found")
    monkeypatch.setattr(symbolic_loops, "build", refuse)
    cache = CompilationCache()
    f = nbxla.jit(damped, cache=cache, dynamic=True)
    for n in (1, 7, 33):
        x = RNG.random((n, 16), np.float32)
        _close(f(x), damped(x), n)
    assert cache.misses == 3
    assert "loops cannot run natively at every size (no C compiler (cc) found)" in cache.entries()[0].explanation


@needs_cc
def test_threads_calling_at_different_sizes_get_their_own_results():
    from concurrent.futures import ThreadPoolExecutor
    cache = CompilationCache()
    f = nbxla.jit(damped, cache=cache, dynamic=True)
    xs = [RNG.random((n, 16), np.float32) for n in (3, 50, 7, 1031, 2, 129) * 3]
    f(xs[0])
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(f, xs))
    for x, got in zip(xs, results):
        _close(got, damped(x), x.shape[0])
    assert cache.misses == 1


# ---- a loop whose body calls LAPACK's solve (np.linalg.solve): the sizes read when it runs -------

def power_solves(a, x):
    for _ in range(20):
        x = np.linalg.solve(a, x)
        x = x / np.abs(x).max()
    return x


def batched_solves(a, b):
    for _ in range(5):
        b = np.linalg.solve(a, b) + b
    return b


def _loop_ways(cache, values):
    loops = _symbolic(cache).instance(values).executable.native.loops
    assert loops and all("for every size" in how for how in loops.values()), loops


@needs_cc
@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-10), (np.float32, 1e-4)])
def test_a_loop_calling_lapacks_solve_compiles_once_for_every_size(dtype, tol):
    cache = CompilationCache()
    f = nbxla.jit(power_solves, cache=cache, dynamic=True)
    for n in (1, 2, 5, 33, 100):
        a = (RNG.random((n, n)) + n * np.eye(n)).astype(dtype)
        x = RNG.random(n).astype(dtype)
        got = f(a, x)
        assert got.dtype == dtype
        # (x is scaled to a largest element of 1 each step: float32's rounding is absolute there)
        np.testing.assert_allclose(got, power_solves(a, x), rtol=tol, atol=tol / 10, err_msg=f"size {n}")
    assert cache.misses == 1, cache.entries()[0].explanation
    _loop_ways(cache, {"b": 33})


@needs_cc
def test_a_batched_solve_in_a_loop_with_the_batch_unknown():
    cache = CompilationCache()
    f = nbxla.jit(batched_solves, cache=cache, dynamic={"a": (0,), "b": (0,)})
    for batch in (1, 3, 17):
        a = RNG.random((batch, 4, 4)) + 4 * np.eye(4)
        b = RNG.random((batch, 4, 3))
        np.testing.assert_allclose(f(a, b), batched_solves(a, b), rtol=1e-10, err_msg=f"batch {batch}")
    assert cache.misses == 1, cache.entries()[0].explanation


@needs_cc
def test_a_singular_matrix_in_the_symbolic_loop_raises_numpys_error():
    cache = CompilationCache()
    f = nbxla.jit(power_solves, cache=cache, dynamic=True)
    a = RNG.random((6, 6)) + 6 * np.eye(6)
    f(a, RNG.random(6))
    singular = np.ones((9, 9))
    with pytest.raises(np.linalg.LinAlgError, match="Singular matrix"):
        f(singular, np.ones(9))
    assert isinstance(_symbolic(cache).loops, SymbolicLoops)


def test_without_lapack_the_solve_loop_specialises_with_the_reason(monkeypatch):
    import nbxla.runtime.symbolic_loops as symbolic_loops
    monkeypatch.setattr(symbolic_loops, "gesv_addresses", lambda: None)
    cache = CompilationCache()
    f = nbxla.jit(power_solves, cache=cache, dynamic=True)
    for n in (3, 5):
        a, x = RNG.random((n, n)) + n * np.eye(n), RNG.random(n)
        np.testing.assert_allclose(f(a, x), power_solves(a, x), rtol=1e-10)
    assert cache.misses == 2
    assert "needs LAPACK" in cache.entries()[0].explanation


def halve_until_small(x, n):
    t = 0.0
    while (x > 0.1 / (n + 1)).any():
        x = x * 0.5
        t += 0.1
    return x * t


@needs_cc
@pytest.mark.parametrize("n", [0, 1, 4])
def test_a_straight_line_entry_runs_the_symbolic_loop_on_its_leaves(n):
    """An entry of a few steps runs as generated Python (``straight_line``), which calls a
    native loop's ``flat`` runner on the state's leaves: the symbolic loop's must be one too
    (it was a bool there: 'bool' object is not callable)."""
    cache = CompilationCache()
    f = nbxla.jit(halve_until_small, cache=cache, dynamic=True)
    for size in (4, 6, 33):
        x = np.random.default_rng(size + n).random(size).astype(np.float32)
        np.testing.assert_allclose(f(x, n), halve_until_small(x, n), rtol=1e-6, err_msg=f"size {size}")
    assert cache.misses == 1
    _loop_ways(cache, {"b": 6})
