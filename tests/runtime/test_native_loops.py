"""Native loops: an entry ``while`` compiled whole into one C function (runtime/native_loops.py)
with its state updated in place (codegen/updates.py).

Oracles: the evaluator for HLO modules, eager NumPy for traced programs.  The window updates
below read the array they write at overlapping places, so an update made element by element
in place (without the temporary) gives a different answer than NumPy's.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

import nbxla
from nbxla.compiler import compile_module
from nbxla.hlo.parser import parse_hlo
from nbxla.runtime.cache import CompilationCache
from nbxla.runtime.executable import build_executable
from nbxla.testing import compare_arrays
from tests.runtime.test_cpu_control_flow import ARENA_LOOP, COUNTED_LOOP, NESTED_LOOPS, check
from tests.frontend_util import use_flags


@pytest.fixture(autouse=True)
def _loops_stay_loops(monkeypatch):
    """These programs' loops are short on purpose: here they must stay HLO whiles (what runs
    them is the subject), not be unrolled by the cost rule."""
    use_flags(monkeypatch, "--unroll_budget=0")

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler: loops stay host-driven")

RNG = np.random.default_rng(7)


def loops_of(compilation) -> dict[str, str]:
    return compilation.executable.native.loops


@pytest.mark.parametrize("text", [COUNTED_LOOP % 0, COUNTED_LOOP % 1, COUNTED_LOOP % 100, ARENA_LOOP % 0,
                                  ARENA_LOOP % 3, NESTED_LOOPS], ids=["count0", "count1", "count100",
                                                                      "arena0", "arena3", "nested"])
def test_hlo_loops_run_natively_and_agree_with_the_evaluator(text):
    module = parse_hlo(text)
    compilation = compile_module(parse_hlo(text), "cpu")
    loops = loops_of(compilation)
    assert loops and all(how.startswith("native") for how in loops.values()), loops
    inputs = [np.linspace(0.1, 1, p.shape.dims[0]).astype(p.shape.dtype) for p in module.entry.parameters]
    kept = [x.copy() for x in inputs]
    results = check(compilation.executable, module, inputs)
    for x, k in zip(inputs, kept):
        np.testing.assert_array_equal(x, k)          # the caller's arrays are not written
        assert not any(np.shares_memory(r, x) for r in results)


def shift_rows(A):
    for i in range(1, A.shape[0]):
        A[i, 1:] = A[i, :-1] * 0.5 + A[i - 1, 1:]
    return A


def flip_prefix(y):
    for k in range(1, y.shape[0]):
        y[:k] += 0.5 * np.flip(y[:k])
    return y


def same_place(A):
    for i in range(A.shape[0]):
        A[i, :] = A[i, :] * 2 + 1
    return A


def columns(A):
    for j in range(1, A.shape[1]):
        A[:, j] = A[:, j - 1] + np.sqrt(A[:, j])
    return A


def jacobi_in_place(A):
    for _ in range(6):
        A[1:-1, 1:-1] = 0.25 * (A[:-2, 1:-1] + A[2:, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:])
    return A


def scatter_counts(values, weights):
    counts = np.zeros(16)
    for i in range(values.shape[0]):
        counts[values[i]] += weights[i]
    return counts


@pytest.mark.parametrize("fn, make", [
    (shift_rows, lambda: (RNG.random((9, 7)),)),
    (flip_prefix, lambda: (RNG.random(12),)),
    (same_place, lambda: (RNG.random((5, 6)),)),
    (columns, lambda: (RNG.random((6, 8)),)),
    (jacobi_in_place, lambda: (RNG.random((10, 9)),)),
    (scatter_counts, lambda: (RNG.integers(0, 16, 40), RNG.random(40))),
], ids=lambda v: getattr(v, "__name__", ""))
def test_window_updates_in_native_loops_agree_with_numpy(fn, make):
    args = make()
    want_args = [a.copy() for a in args]
    want = fn(*want_args)
    jitted = nbxla.jit(fn, cache=CompilationCache())
    got_args = [a.copy() for a in args]
    got = jitted(*got_args)
    ok, detail = compare_arrays(np.asarray(got), want, rtol=1e-12)
    assert ok, detail
    for g, w in zip(got_args, want_args):          # writes into arguments, as NumPy's
        ok, detail = compare_arrays(g, w, rtol=1e-12)
        assert ok, detail
    loops = loops_of(jitted.last_compilation)
    assert loops and all(how.startswith("native") for how in loops.values()), loops


def test_a_large_dot_keeps_the_loop_host_driven():
    def power(A, x):
        for _ in range(40):           # (long enough to stay a loop)
            x = A @ x
            x = x / np.abs(x).max()
        return x
    A, x = RNG.random((700, 700)), RNG.random(700)
    jitted = nbxla.jit(power, cache=CompilationCache())
    got = jitted(A, x)
    np.testing.assert_allclose(got, power(A, x), rtol=1e-10)
    (how,) = loops_of(jitted.last_compilation).values()
    assert how.startswith("host-driven") and "large dot" in how, how


def test_without_a_c_compiler_loops_are_host_driven_and_still_right(monkeypatch, tmp_path):
    """A loop with a step of the driver's C (a dot of more than SMALL_DOT_WORK multiply-adds:
    the support code's GEMM) needs the C compiler; a loop of kernels only does not (it is made
    in LLVM, codegen/aot_loops.py), nor one whose dots are small (the dot kernel)."""
    from nbxla.passes.fused_dots import SMALL_DOT_WORK
    from tests.runtime.test_native_loop_runtime import DOT_LOOP
    monkeypatch.setenv("PATH", str(tmp_path))                 # no cc there
    monkeypatch.setenv("NBXLA_CACHE_DIR", "off")
    large = DOT_LOOP.replace("f64[4,4]", "f64[40,40]").replace("f64[4]", "f64[40,24]")
    assert 40 * 40 * 24 > SMALL_DOT_WORK
    module = parse_hlo(large)
    compilation = compile_module(parse_hlo(large), "cpu")
    (how,) = loops_of(compilation).values()
    assert how.startswith("host-driven") and "`cc`" in how, how
    assert "host loop over compiled program(s) %cond, %body (host-driven" in compilation.stage("execution")
    check(compilation.executable, module, [np.eye(40) * 0.02 + 0.001, RNG.random((40, 24))])
    module = parse_hlo(DOT_LOOP)
    compilation = compile_module(parse_hlo(DOT_LOOP), "cpu")
    (how,) = loops_of(compilation).values()
    assert how.startswith("native"), how
    check(compilation.executable, module, [np.eye(4) * 0.5 + 0.1, np.linspace(0, 1, 4)])
    module = parse_hlo(COUNTED_LOOP % 7)
    compilation = compile_module(parse_hlo(COUNTED_LOOP % 7), "cpu")
    (how,) = loops_of(compilation).values()
    assert how.startswith("native"), how
    check(compilation.executable, module, [np.ones(16, np.float32), np.zeros(16, np.float32)])


def test_the_library_is_kept_in_the_persistent_cache(monkeypatch, tmp_path):
    cache_dir = tmp_path / "cache"
    monkeypatch.setenv("NBXLA_CACHE_DIR", str(cache_dir))
    module = parse_hlo(NESTED_LOOPS)
    optimized = compile_module(parse_hlo(NESTED_LOOPS), "cpu").optimized
    first = build_executable(optimized, "cpu")
    assert all(how.startswith("native") for how in first.native.loops.values())
    assert any(p.suffix == ".json" for p in cache_dir.iterdir())
    # Without a C compiler now, the loop still runs natively: the library comes from the cache
    # (as in a restarted kernel, which traces and optimizes to the same module).
    monkeypatch.setenv("PATH", str(tmp_path))
    second = build_executable(optimized, "cpu")
    assert all(how.startswith("native") for how in second.native.loops.values()), second.native.loops
    check(second, module, [np.arange(8, dtype=np.float32)])


def test_the_fusion_report_says_how_each_loop_was_compiled_and_runs():
    def program(A, x):
        for _ in range(2):                  # short: unrolled
            x = x * 0.5
        for i in range(1, A.shape[0]):      # rolled into a while, run natively
            A[i] = A[i - 1] * 0.5 + A[i]
        return A.sum() + x.sum()
    jitted = nbxla.jit(program, cache=CompilationCache())
    A, x = RNG.random((30, 4)), RNG.random(4)
    want = program(A.copy(), x)
    np.testing.assert_allclose(jitted(A.copy(), x), want, rtol=1e-12)
    text = jitted.last_compilation.stage("fusion_report")
    loops = text[text.index("loops:"):].splitlines()
    assert any("unrolled (2 steps" in line for line in loops), loops
    assert any("rolled (a while loop" in line for line in loops), loops
    assert any(line.strip().startswith("%while") and "native" in line for line in loops), loops


def test_state_the_body_passes_on_is_read_where_it_is():
    """The matrix of a triangular solve is loop state the body never changes: the loop reads
    the caller's array (no copy in or out) and the results are NumPy's."""
    from nbxla import examples
    from nbxla.runtime.native_loops import NativeLoopThunk
    L = np.tril(RNG.random((40, 40))) + 40 * np.eye(40)
    b = RNG.random(40)
    jitted = nbxla.jit(examples.trisolv, cache=CompilationCache())
    np.testing.assert_allclose(jitted(L, b), examples.trisolv(L, b), rtol=1e-12)
    np.testing.assert_allclose(jitted(L * 2, b), examples.trisolv(L * 2, b), rtol=1e-12)
    native = jitted.last_compilation.executable.native
    (thunk,) = native._native.values()
    assert isinstance(thunk, NativeLoopThunk) and thunk.fixed


# ---- window updates reading their own window: one pass, split over threads -------------------

def leapfrog(E, H):
    """FDTD-style: each field's window is updated from itself at the same place (one pass is
    right) and from the other field shifted; then a shifted self-read (two passes needed)."""
    for _ in range(6):
        E[1:, :] = E[1:, :] - 0.5 * (H[1:, :] - H[:-1, :])
        H[:-1, :-1] = H[:-1, :-1] - 0.7 * (E[1:, :-1] - E[:-1, :-1] + E[:-1, 1:])
        E[1:, 1:] = E[:-1, :-1] + 0.25 * E[1:, 1:]
    return E, H


WINDOW_UPDATE = """
HloModule window
%%update (p0: f64[6,5], p1: f64[6,5]) -> f64[6,5] {
  %%p0 = f64[6,5] parameter(0)
  %%p1 = f64[6,5] parameter(1)
  %%read = f64[5,5] slice(f64[6,5] %%p0), slice={[%s], [0:5]}
  %%other = f64[5,5] slice(f64[6,5] %%p1), slice={[0:5], [0:5]}
  %%sum = f64[5,5] add(f64[5,5] %%read, f64[5,5] %%other)
  %%one = s64[] constant(1)
  %%zero = s64[] constant(0)
  ROOT %%dus = f64[6,5] dynamic-update-slice(f64[6,5] %%p0, f64[5,5] %%sum, s64[] %%one, s64[] %%zero)
}
ENTRY %%main (a: f64[6,5], b: f64[6,5]) -> f64[6,5] {
  %%a = f64[6,5] parameter(0)
  %%b = f64[6,5] parameter(1)
  ROOT %%f = f64[6,5] fusion(f64[6,5] %%a, f64[6,5] %%b), kind=kLoop, calls=%%update
}
"""


@pytest.mark.parametrize("window, rows", [("1:6", 5), ("0:5", 1)], ids=["same-place", "shifted"])
def test_a_slice_of_the_window_itself_is_updated_in_one_pass_by_rows(window, rows):
    """Reading exactly the window (``E[1:] = E[1:] - ...``): one pass, a range of window rows
    the caller may split; a shifted read of the target needs the temporary (one call)."""
    from llvmlite import ir
    from nbxla.codegen.updates import emit_in_place_update
    fusion = parse_hlo(WINDOW_UPDATE % window).entry.root
    spec = emit_in_place_update(ir.Module(), "k", fusion.attrs["calls"])
    assert (spec.parallel_extent, spec.work_per_unit) == ((5, 5) if rows == 5 else (1, 25))


def test_a_window_update_reads_its_target_through_the_output_pointer():
    """The caller passes one buffer as the target and the output; the kernel reads the target
    through the output's pointer.  Why: with two pointers to one buffer, the vectorized loop's
    overlap check always failed and only the scalar loop ever ran.  Seen here by passing two
    different buffers, which the driver never does: the values read are the output's."""
    import ctypes
    import llvmlite.binding as llvm
    from llvmlite import ir
    from nbxla.codegen.cpu import jit_engine
    from nbxla.codegen.updates import emit_in_place_update
    fusion = parse_hlo(WINDOW_UPDATE % "1:6").entry.root
    module = ir.Module()
    module.triple = llvm.get_process_triple()
    spec = emit_in_place_update(module, "k", fusion.attrs["calls"])
    engine = jit_engine(llvm.parse_assembly(str(module)))
    kernel = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)(
        engine.get_function_address("k"))
    target, other, out = np.zeros((6, 5)), np.ones((6, 5)), np.full((6, 5), 2.0)
    buffers = (ctypes.c_void_p * 3)(target.ctypes.data, other.ctypes.data, out.ctypes.data)
    kernel(buffers, 0, spec.parallel_extent)
    np.testing.assert_array_equal(out, np.vstack([np.full((1, 5), 2.0), np.full((5, 5), 3.0)]))


@pytest.mark.parametrize("threshold", [None, 64], ids=["one-thread", "split"])
def test_leapfrog_updates_in_native_loops_agree_with_numpy(monkeypatch, threshold):
    from nbxla.runtime import native_loops
    monkeypatch.setenv("NBXLA_CACHE_DIR", "off")
    if threshold is not None:                          # every in-place update split over threads
        monkeypatch.setattr(native_loops, "PARALLEL_THRESHOLD", threshold)
    E, H = RNG.random((40, 30)), RNG.random((40, 30))
    want = leapfrog(E.copy(), H.copy())
    jitted = nbxla.jit(leapfrog, cache=CompilationCache())
    got = jitted(E.copy(), H.copy())
    for g, w in zip(got, want):
        ok, detail = compare_arrays(g, w, rtol=1e-12)
        assert ok, detail
    loops = loops_of(jitted.last_compilation)
    assert loops and all(how.startswith("native") for how in loops.values()), loops


# ---- linear solves inside native loops (NumPy's LAPACKE ?gesv) ---------------------------------

def solves_per_point(A, points, B):
    """The contour integral's shape: one solve per loop step, results accumulated."""
    out = np.zeros_like(B)
    for z in points:
        out += np.linalg.solve(A + z * np.eye(A.shape[0], dtype=A.dtype), B)
    return out


def batched_solves(A, b, steps):
    x = np.zeros_like(b)
    for k in range(steps):
        x = x + np.linalg.solve(A * (k + 1), b)
    return x


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128, np.complex64])
def test_solves_run_in_native_loops_and_match_numpy(dtype, monkeypatch):
    from nbxla.runtime.blas_threads import gesv_addresses
    if gesv_addresses() is None:
        pytest.skip("NumPy's BLAS is not an OpenBLAS with 64-bit LAPACKE: solves keep loops host-driven")
    use_flags(monkeypatch, "--unroll_budget=0 --unroll_max=0")
    rtol = 1e-4 if dtype in (np.float32, np.complex64) else 1e-10
    A = (RNG.random((6, 6)) + 6 * np.eye(6)).astype(dtype)
    B = RNG.random((6, 4)).astype(dtype)
    for fn, args in ((solves_per_point, (A, np.linspace(0.5, 2, 7).astype(dtype), B)),
                     (batched_solves, (np.stack([A, A.T]), RNG.random((2, 6, 3)).astype(dtype), 5))):
        jitted = nbxla.jit(fn)
        got = jitted(*args)
        ok, detail = compare_arrays(got, fn(*args), rtol=rtol)
        assert ok, detail
        loops = loops_of(jitted.last_compilation)
        assert loops and all(how.startswith("native") for how in loops.values()), loops


def test_a_singular_solve_in_a_native_loop_raises_numpys_error(monkeypatch):
    use_flags(monkeypatch, "--unroll_budget=0 --unroll_max=0")
    A = np.ones((4, 4))                 # singular
    with pytest.raises(np.linalg.LinAlgError):
        batched_solves(A, np.ones(4), 3)
    with pytest.raises(np.linalg.LinAlgError):
        nbxla.jit(batched_solves)(A, np.ones(4), 3)


def complex_products(A, B, steps):
    x = B
    for k in range(steps):
        x = A @ x * 0.5 + B
    return x


@pytest.mark.parametrize("dtype", [np.complex128, np.complex64])
@pytest.mark.parametrize("n, cols", [(7, 5), (12, 16), (41, 21), (48, 32)])
def test_complex_products_in_native_loops_match_numpy(dtype, n, cols, monkeypatch):
    # (small products: the dot kernel in LLVM (codegen/aot_library.small_dot_kernel); past
    # SMALL_DOT_WORK (41 * 41 * 21, 48 * 48 * 32): the support code's complex GEMMs, compiled at
    # -O2 inside an -O3 object: aot_runtime.c; sizes past and short of its 4-row and
    # register-panel blocks)
    use_flags(monkeypatch, "--unroll_budget=0 --unroll_max=0")
    A = ((RNG.random((n, n)) + 1j * RNG.random((n, n))) / n).astype(dtype)
    B = (RNG.random((n, cols)) + 1j * RNG.random((n, cols))).astype(dtype)
    jitted = nbxla.jit(complex_products)
    got = jitted(A, B, 6)
    ok, detail = compare_arrays(got, complex_products(A, B, 6), rtol=1e-4 if dtype == np.complex64 else 1e-10)
    assert ok, detail
    loops = loops_of(jitted.last_compilation)
    assert loops and all(how.startswith("native") for how in loops.values()), loops


@pytest.mark.parametrize("dtype", [np.complex128, np.complex64, np.float64])
def test_small_products_in_native_loops_need_no_c_compiler(dtype, monkeypatch):
    """A loop whose dots are small (at most SMALL_DOT_WORK multiply-adds a product) runs them
    as LLVM dot kernels: every step is LLVM's, so no C compiler runs (its support code for a
    complex GEMM alone cost ~0.1 s of gcc).  Past the threshold the C GEMM runs (gcc)."""
    from nbxla.compile_clock import recording
    from nbxla.passes.fused_dots import SMALL_DOT_WORK
    use_flags(monkeypatch, "--unroll_budget=0 --unroll_max=0")
    monkeypatch.setenv("NBXLA_CACHE_DIR", "off")
    for n, cols, c_compiled in ((6, 3, False), (40, 24, True)):
        assert (n * n * cols > SMALL_DOT_WORK) == c_compiled
        A = ((RNG.random((n, n)) + 1j * RNG.random((n, n))) / n).astype(dtype) if dtype != np.float64 \
            else RNG.random((n, n)) / n
        B = RNG.random((n, cols)).astype(dtype)
        jitted = nbxla.jit(complex_products)
        with recording() as stages:
            got = jitted(A, B, 5)
        ok, detail = compare_arrays(got, complex_products(A, B, 5), rtol=1e-4 if dtype == np.complex64 else 1e-10)
        assert ok, detail
        loops = loops_of(jitted.last_compilation)
        assert loops and all(how.startswith("native") for how in loops.values()), loops
        assert ("c-compiler" in stages) == c_compiled, (n, cols, dict(stages))
