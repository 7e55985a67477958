"""``nbxla_masked_dot``: a dot of slices whose lengths depend on a loop index, run at their true
lengths (evaluator rule, the NumPy thunk of host-driven code, the native loops' C routine with
NumPy's OpenBLAS behind it).

Oracles: NumPy on explicitly zeroed operands for the evaluator's rule; the evaluator for HLO
modules; eager NumPy for traced programs.  Both sides of the native routine's BLAS threshold
(``NBXLA_BLAS_MIN_WORK`` multiply-adds) run, and the large side once more without BLAS.
"""

from __future__ import annotations

import copy
import shutil

import numpy as np
import pytest

import nbxla
from nbxla.compiler import compile_module
from nbxla.hlo.evaluator import evaluate
from nbxla.hlo.parser import parse_hlo
from nbxla.runtime import native_loops
from nbxla.runtime.cache import DEFAULT_CACHE
from nbxla.testing import compare_arrays
from tests.frontend_util import quiet, use_flags
from tests.runtime.test_cpu_control_flow import check

RNG = np.random.default_rng(30)

# lhs rows masked to [lo0, hi0), the contracted axis of rhs to [lo1, hi1)
ENTRY = """HloModule masked

ENTRY main {
  a = f64[6,5] parameter(0)
  b = f64[5,4] parameter(1)
  lo0 = s64[] parameter(2)
  hi0 = s64[] parameter(3)
  lo1 = s64[] parameter(4)
  hi1 = s64[] parameter(5)
  ROOT d = f64[6,4] custom-call(a, b, lo0, hi0, lo1, hi1), custom_call_target="nbxla_masked_dot", lhs_contracting_dims={1}, rhs_contracting_dims={0}, dimensions={0,2}
}
"""

# The same in a loop whose bounds run past both ends of the axes (clamped), and a masked
# column range of rhs: acc += masked_dot(a[i-2:i+2, :], b[i-1:9, i:i+2]) for i in 0..7.
LOOP = """HloModule masked_loop

body {
  p = (s64[], f64[6,5], f64[5,4], f64[6,4]) parameter(0)
  i = s64[] get-tuple-element(p), index=0
  a = f64[6,5] get-tuple-element(p), index=1
  b = f64[5,4] get-tuple-element(p), index=2
  acc = f64[6,4] get-tuple-element(p), index=3
  two = s64[] constant(2)
  one = s64[] constant(1)
  nine = s64[] constant(9)
  lo0 = s64[] subtract(i, two)
  hi0 = s64[] add(i, two)
  lo1 = s64[] subtract(i, one)
  hi2 = s64[] add(i, two)
  d = f64[6,4] custom-call(a, b, lo0, hi0, lo1, nine, i, hi2), custom_call_target="nbxla_masked_dot", lhs_contracting_dims={1}, rhs_contracting_dims={0}, dimensions={0,2,3}
  acc1 = f64[6,4] add(acc, d)
  i1 = s64[] add(i, one)
  ROOT next = (s64[], f64[6,5], f64[5,4], f64[6,4]) tuple(i1, a, b, acc1)
}

cond {
  p = (s64[], f64[6,5], f64[5,4], f64[6,4]) parameter(0)
  i = s64[] get-tuple-element(p), index=0
  n = s64[] constant(8)
  ROOT lt = pred[] compare(i, n), direction=LT
}

ENTRY main {
  a = f64[6,5] parameter(0)
  b = f64[5,4] parameter(1)
  zero = s64[] constant(0)
  z = f64[] constant(0)
  acc = f64[6,4] broadcast(z), dimensions={}
  init = (s64[], f64[6,5], f64[5,4], f64[6,4]) tuple(zero, a, b, acc)
  w = (s64[], f64[6,5], f64[5,4], f64[6,4]) while(init), condition=cond, body=body
  ROOT r = f64[6,4] get-tuple-element(w), index=3
}
"""


def _zeroed(x, axis, lo, hi):
    x = x.copy()
    index = [slice(None)] * x.ndim
    index[axis] = [k for k in range(x.shape[axis]) if not max(lo, 0) <= k < hi]
    x[tuple(index)] = 0
    return x


@pytest.mark.parametrize("bounds", [(1, 4, 0, 5), (-3, 2, 2, 99), (4, 2, 0, 5), (0, 6, 3, 3), (-5, -1, 0, 5)],
                         ids=["inside", "clamped", "empty-rows", "empty-k", "all-out"])
def test_evaluator_rule_and_cpu_thunk_match_zeroed_operands(bounds):
    a, b = RNG.random((6, 5)), RNG.random((5, 4))
    want = _zeroed(a, 0, *bounds[:2]) @ _zeroed(b, 0, *bounds[2:])
    args = [a, b] + [np.int64(v) for v in bounds]
    got = evaluate(parse_hlo(ENTRY), args)
    ok, detail = compare_arrays(got, want, rtol=1e-12)
    assert ok, detail
    compilation = compile_module(parse_hlo(ENTRY), "cpu")
    assert "BLAS on the masked sub-matrices" in compilation.executable.native.describe()
    check(compilation.executable, parse_hlo(ENTRY), args)


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler: loops stay host-driven")
def test_native_loop_clamps_bounds_like_the_evaluator(monkeypatch):
    use_flags(monkeypatch, "--unroll_budget=0 --unroll_max=0")
    compilation = compile_module(parse_hlo(LOOP), "cpu")
    loops = compilation.executable.native.loops
    assert loops and all(how.startswith("native") for how in loops.values()), loops
    check(compilation.executable, parse_hlo(LOOP), [RNG.random((6, 5)), RNG.random((5, 4))])


# ---- traced programs --------------------------------------------------------------------------

def triangle_products(data):
    """covariance's loop: the rhs's columns masked, the result written to a masked row (a third
    of the rows: too few for loop-invariant-dots to compute all of data.T @ data instead)."""
    M = data.shape[1]
    out = np.zeros((M, M), dtype=data.dtype)
    for i in range(M // 3):
        out[i, i:M] = data[:, i] @ data[:, i:M]
    return out


def prefix_dots(A, x):
    """Both operands masked on the contracted axis (trisolv / Cholesky), and a masked block of
    rows times a vector."""
    n = A.shape[0]
    y = np.zeros(n, A.dtype)
    z = np.zeros(n, A.dtype)
    for i in range(n):
        y[i] = A[i, :i] @ x[:i]
        z[i + 1:] += A[i + 1:, :] @ x
    return y, z


def block_update(A, B):
    """Matrix times matrix: the lhs's rows and the rhs's columns masked."""
    n = A.shape[0]
    C = np.zeros((n, n), A.dtype)
    for k in range(n):
        C[k:, k:] += A[k:, :] @ B[:, k:]
    return C


PROGRAMS = {"triangle_products": (triangle_products, lambda n, t: (RNG.random((n + 3, n)).astype(t),)),
            "prefix_dots": (prefix_dots, lambda n, t: (RNG.random((n, n)).astype(t), RNG.random(n).astype(t))),
            "block_update": (block_update, lambda n, t: (RNG.random((n, n)).astype(t), RNG.random((n, n)).astype(t)))}


def _jit_matches_numpy(fn, args, rtol, masked_dot=True):
    DEFAULT_CACHE.clear()
    with quiet():
        jitted = nbxla.jit(fn)
        got = jitted(*copy.deepcopy(args))
    want = fn(*copy.deepcopy(args))
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        ok, detail = compare_arrays(np.asarray(g), w, rtol=rtol)
        assert ok, detail
    assert ("nbxla_masked_dot" in jitted.last_compilation.stage("optimized_hlo")) == masked_dot
    return jitted


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler: loops stay host-driven")
@pytest.mark.parametrize("name", sorted(PROGRAMS))
@pytest.mark.parametrize("n", [6, 70], ids=["below-blas-threshold", "blas"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
def test_masked_dots_in_native_loops_match_numpy(name, n, dtype, monkeypatch):
    use_flags(monkeypatch, "--unroll_budget=0 --unroll_max=0")
    fn, make = PROGRAMS[name]
    jitted = _jit_matches_numpy(fn, make(n, dtype), 1e-4 if dtype == np.float32 else 1e-10)
    loops = jitted.last_compilation.executable.native.loops
    assert loops and all(how.startswith("native") for how in loops.values()), loops


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler: loops stay host-driven")
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_large_masked_dots_without_blas_run_in_c(name, monkeypatch):
    """No OpenBLAS found: large windows run in the C routine (a loop small enough stays native;
    nothing calls a BLAS that is not there)."""
    use_flags(monkeypatch, "--unroll_budget=0 --unroll_max=0")
    monkeypatch.setattr(native_loops, "gemm_addresses", lambda: None)
    fn, make = PROGRAMS[name]
    _jit_matches_numpy(fn, make(40, np.float64), 1e-10)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_masked_dots_in_host_driven_loops_match_numpy(name, monkeypatch):
    use_flags(monkeypatch, "--unroll_budget=0 --unroll_max=0")
    monkeypatch.setenv("NBXLA_NATIVE_LOOPS", "0")
    fn, make = PROGRAMS[name]
    _jit_matches_numpy(fn, make(30, np.float64), 1e-10)


# ---- loop-invariant-dots: a loop of row products of invariant arrays becomes one GEMM --------

def rows_of_gram(data, rows):
    """correlation's loop over ``rows`` of the triangle (the mask starting past the diagonal)."""
    M = data.shape[1]
    out = np.eye(M, dtype=data.dtype)
    for i in range(rows):
        out[i + 1:M, i] = out[i, i + 1:M] = data[:, i] @ data[:, i + 1:M]
    return out


def rows_of_cross(A, B, rows):
    """Rows of A (its first axis indexed) against columns of another invariant array."""
    out = np.zeros((A.shape[0], B.shape[1]), A.dtype)
    for i in range(rows):
        out[i, i:] = A[i] @ B[:, i:]
    return out


def rows_of_changing(data, rows):
    """The sliced array changes in the loop: each step's product must see the update."""
    M = data.shape[1]
    out = np.zeros((M, M), data.dtype)
    for i in range(rows):
        out[i, i:] = data[:, i] @ data[:, i:]
        data[:, i] *= 0.5
    return out


@pytest.mark.parametrize("rows, hoisted", [(12, True), (6, True), (5, False), (0, False)],
                         ids=["all", "half", "under-half", "none"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_loop_of_row_products_becomes_one_gemm(rows, hoisted, dtype, monkeypatch):
    """(Hoisted when the loop runs for at least half of the rows of the product: 6 of 12.)"""
    use_flags(monkeypatch, "--unroll_budget=0 --unroll_max=0")
    rtol = 1e-4 if dtype == np.float32 else 1e-10
    data = RNG.random((15, 12)).astype(dtype)
    jitted = _jit_matches_numpy(rows_of_gram, (data, rows), rtol, masked_dot=not hoisted and rows > 0)
    text = jitted.last_compilation.stage("optimized_hlo")
    entry = text[text.index("ENTRY"):]
    assert (" dot(" in entry) == hoisted, entry
    A, B = RNG.random((12, 7)).astype(dtype), RNG.random((7, 11)).astype(dtype)
    _jit_matches_numpy(rows_of_cross, (A, B, rows), rtol, masked_dot=not hoisted and rows > 0)


def test_a_loop_that_changes_the_sliced_array_keeps_its_products(monkeypatch):
    use_flags(monkeypatch, "--unroll_budget=0 --unroll_max=0")
    data = RNG.random((10, 8))
    _jit_matches_numpy(rows_of_changing, (data, 8), 1e-10, masked_dot=True)
