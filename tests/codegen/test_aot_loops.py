"""Loops of small kernels compiled in LLVM (codegen/aot_loops.py) instead of the driver's C.

Oracle: eager NumPy, and the same program with ``NBXLA_LLVM_LOOPS=0`` (the C driver).  Which
path ran is read from the driver's C (``aot._build``): a loop compiled in LLVM is one call of
``PREFIX_loopN``, the C of its condition and body is not written at all.
"""

from __future__ import annotations

import re
import shutil

import numpy as np
import pytest

import nbxla
from nbxla.codegen import aot
from nbxla.codegen.aot_loops import CALLED_KERNEL_ELEMENTS, SMALL_STATE
from nbxla.compiler import compile_module
from nbxla.hlo.parser import parse_hlo
from nbxla.runtime.cache import CompilationCache
from nbxla.runtime.cpu_kernels import PARALLEL_THRESHOLD
from nbxla.testing import compare_arrays
from tests.frontend_util import use_flags
from tests.runtime.test_cpu_control_flow import COUNTED_LOOP, NESTED_LOOPS

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler: loops stay host-driven")

RNG = np.random.default_rng(3)


@pytest.fixture(autouse=True)
def _loops_stay_loops(monkeypatch):
    use_flags(monkeypatch, "--unroll_budget=0")


def _driver_c(text: str) -> str:
    module = compile_module(parse_hlo(text), "cpu").optimized
    *_, c_source, _ = aot._build({"f": module.entry}, "t", "host", PARALLEL_THRESHOLD)
    return c_source


def test_a_loop_of_kernels_is_one_llvm_function_and_its_c_is_not_written():
    c = _driver_c(COUNTED_LOOP % 100)
    assert "t_loop1(in, out, scratch);" in c
    assert "for (;;)" not in c              # (no C loop: the condition and body are in LLVM)


def test_nested_loops_are_one_llvm_function():
    c = _driver_c(NESTED_LOOPS)
    assert len(re.findall(r"t_loop\d+\(in, out, scratch\);", c)) == 1       # (the outer one)
    assert len(re.findall(r"extern void t_loop\d+", c)) == 1 and "for (;;)" not in c


def test_with_the_switch_off_the_loop_is_c(monkeypatch):
    monkeypatch.setenv("NBXLA_LLVM_LOOPS", "0")
    c = _driver_c(COUNTED_LOOP % 100)
    assert "_loop1" not in c and "for (;;)" in c


def test_a_loop_reading_a_full_reduction_is_one_llvm_function():
    jitted = nbxla.jit(relax_until_settled, cache=CompilationCache())
    u = RNG.random(64)
    jitted(u.copy(), 1e-3)
    c = _driver_c(jitted.last_compilation.stage("optimized_hlo"))
    generated = c[c.index("/* ---- generated ---- */"):]
    assert "t_loop1(in, out, scratch);" in generated
    assert "for (;;)" not in generated, generated


def power(A, x):
    for _ in range(30):
        x = A @ x
    return x


def test_a_loop_with_a_library_step_stays_c():
    from nbxla.passes.fused_dots import SMALL_DOT_WORK
    jitted = nbxla.jit(power, cache=CompilationCache())
    A, x = RNG.random((40, 40)) / 40, RNG.random((40, 24))
    assert 40 * 40 * 24 > SMALL_DOT_WORK          # (the C GEMM's; smaller: the dot kernel)
    np.testing.assert_allclose(jitted(A, x), power(A, x), rtol=1e-12)
    c = _driver_c(jitted.last_compilation.stage("optimized_hlo"))
    assert "for (;;)" in c and "_loop1" not in c


def test_a_loop_of_small_products_is_one_llvm_function():
    """A product of at most SMALL_DOT_WORK multiply-adds is the dot kernel
    (``aot_library.small_dot_kernel``): the loop is LLVM's, no C GEMM call."""
    jitted = nbxla.jit(power, cache=CompilationCache())
    A, x = RNG.random((6, 6)) / 6, RNG.random(6)
    np.testing.assert_allclose(jitted(A, x), power(A, x), rtol=1e-12)
    c = _driver_c(jitted.last_compilation.stage("optimized_hlo"))
    generated = c[c.index("/* ---- generated ---- */"):]
    assert "_loop1(in, out, scratch);" in generated and "nbxla_gemm" not in generated, generated
    assert "for (;;)" not in generated, generated


def iir(x, b0, b1, a1):
    y = np.zeros_like(x)
    y[0] = b0 * x[0]
    for n in range(1, x.shape[0]):
        y[n] = b0 * x[n] + b1 * x[n - 1] - a1 * y[n - 1]
    return y


def histogram(values, nbins):
    counts = np.zeros(nbins, dtype=np.int64)
    for i in range(values.shape[0]):
        counts[values[i]] += 1
    return counts


def running(x, width):
    """A state vector of ``width`` float64: a fresh value every iteration (not updated in place),
    kept in the loop function's own slots up to SMALL_STATE bytes, swapped above."""
    v = np.zeros(width)
    for i in range(x.shape[0]):
        v = v * 0.5 + x[i] * np.arange(width)
    return v


def nested(A):
    total = 0.0
    for i in range(A.shape[0]):
        for j in range(i):
            total = total * 0.9 + A[i, j]
    return total


def relax_until_settled(u, tol):
    """A value-dependent loop whose condition reads a full reduction of the state (the shape of
    a solver iterated until its change is small): one-chunk full reductions inside the loop."""
    u = u.copy()
    change = 1.0
    steps = 0
    while change > tol:
        old = u.copy()
        u[1:-1] = 0.5 * (old[2:] + old[:-2]) + 0.01
        change = np.abs(np.sum(u) - np.sum(old)) / np.sum(u)
        steps += 1
    return u, steps


CASES = [
    (iir, lambda: (RNG.random(300), 0.2, 0.3, 0.5)),
    (histogram, lambda: (RNG.integers(0, 16, 500), 16)),
    (running, lambda: (RNG.random(50), SMALL_STATE // 8)),        # (at the limit: slots)
    (running, lambda: (RNG.random(50), SMALL_STATE // 8 + 1)),    # (above: swapped buffers)
    (nested, lambda: (RNG.random((12, 12)),)),
    (relax_until_settled, lambda: (RNG.random(64), 1e-3)),
]


@pytest.mark.parametrize("llvm_loops", ["1", "0"])
@pytest.mark.parametrize("fn,make", CASES, ids=["iir", "histogram", "small_state", "large_state", "nested", "reduction"])
def test_loops_agree_with_numpy_either_way(fn, make, llvm_loops, monkeypatch):
    monkeypatch.setenv("NBXLA_LLVM_LOOPS", llvm_loops)
    args = make()
    want = fn(*[a.copy() if isinstance(a, np.ndarray) else a for a in args])
    jitted = nbxla.jit(fn, cache=CompilationCache())
    got = jitted(*args)
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        ok, detail = compare_arrays(np.asarray(g), np.asarray(w), rtol=1e-12)
        assert ok, detail
    loops = jitted.last_compilation.executable.native.loops
    assert loops and all(how.startswith("native") for how in loops.values()), loops
    # (second call: the state starts again from the inputs)
    got = jitted(*args)
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        ok, detail = compare_arrays(np.asarray(g), np.asarray(w), rtol=1e-12)
        assert ok, detail


def escape_counts(c, steps):
    """Mandelbrot escape counts: one complex kernel per iteration over the whole grid."""
    z = np.zeros_like(c)
    out = np.zeros(c.shape, dtype=np.int64)
    for _ in range(steps):
        live = np.abs(z) <= 2.0
        z = np.where(live, z * z + c, z)
        out += live
    return out


@pytest.mark.parametrize("elements,called", [(CALLED_KERNEL_ELEMENTS - 1, False), (CALLED_KERNEL_ELEMENTS, True)])
def test_large_kernels_are_called_from_the_loop_small_ones_inlined(elements, called):
    """At CALLED_KERNEL_ELEMENTS elements a body kernel stays a function the loop calls (inlined,
    its loop lost vectorization: 8x slower); below, it is inlined (and, being internal, gone)."""
    c = np.linspace(-2, 1, elements) + 0.3j
    jitted = nbxla.jit(escape_counts, cache=CompilationCache())
    np.testing.assert_array_equal(jitted(c, 40), escape_counts(c, 40))
    text = jitted.last_compilation.stage("optimized_hlo")
    module = compile_module(parse_hlo(text), "cpu").optimized
    _, mod, kernels, c_source, _ = aot._build({"f": module.entry}, "t", "host", PARALLEL_THRESHOLD)
    assert "t_loop1(in, out, scratch);" in c_source
    (body_kernel,) = [n for n in kernels.names if "select" in n]
    defined = [f.name for f in mod.functions if not f.is_declaration]
    assert (body_kernel in defined) == called, (body_kernel, defined)


def seidel_rows(A, steps):
    for _ in range(steps):
        for i in range(1, A.shape[0] - 1):
            A[i, 1:-1] = (A[i - 1, :-2] + A[i - 1, 1:-1] + A[i, 2:]) / 3.0
            for j in range(1, A.shape[1] - 1):
                A[i, j] = (A[i, j - 1] + A[i, j]) / 2.0
    return A


def four_deep(A, steps):
    for _ in range(steps):
        for i in range(1, A.shape[0]):
            for j in range(1, A.shape[0]):
                A[i, 1:] = 0.5 * A[i, 1:] + 0.25 * A[j - 1, :-1]
                for k in range(1, A.shape[1]):
                    A[i, k] = (A[i, k - 1] + A[i, k]) * 0.5
    return A


@pytest.mark.parametrize("fn, deep", [(seidel_rows, False), (four_deep, True)])
def test_deep_loop_nests_keep_their_programs_as_called_functions(monkeypatch, fn, deep):
    """In a nest ``DEEP_NEST`` loops deep, every program running a loop stays a function of
    its own (``noinline``: a deep nest as one function took LLVM's optimizer seconds); in a
    shallower nest everything inlines (called per step, seidel_2d's rows took 1.4x as long).
    Both sides of the depth, and the results against NumPy."""
    from nbxla.codegen import aot_loops
    seen = []
    real = aot_loops.LoopFunctions.program

    def program(self, prog):
        fn = real(self, prog)
        seen.append((aot_loops.loop_depth(prog), self.deep_nest, "noinline" in fn.attributes))
        return fn
    monkeypatch.setattr(aot_loops.LoopFunctions, "program", program)
    jitted = nbxla.jit(fn, cache=CompilationCache())
    A = RNG.random((7, 9))
    np.testing.assert_allclose(jitted(A.copy(), 3), fn(A.copy(), 3), rtol=1e-12)
    assert {d for d, _, _ in seen} >= {0, 1, 2} and {nest for _, nest, _ in seen} == {deep}, seen
    assert all(called == (deep and d > 0) for d, _, called in seen), seen
