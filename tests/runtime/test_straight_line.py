"""The straight-line entry runner (runtime/straight_line.py): which entries get it, and that
what it gives equals NumPy through every way the jit and the executable call it."""

import re

import numpy as np
import pytest

import nbxla
from nbxla.runtime.cache import CompilationCache


def _native(f):
    return f.last_compilation.executable.native


def _rng():
    return np.random.default_rng(7)


def test_two_gemvs_run_written_out_and_agree():
    g = _rng()
    A, x, B = g.uniform(size=(19, 21)), g.uniform(size=21), g.uniform(size=(19, 4))
    f = nbxla.jit(lambda A, x, B: (A @ x) @ B)
    first = f(A, x, B)
    cpu = _native(f)
    assert cpu.run.source.count("matmul(") == 2 and "thunk" not in cpu.run.source
    for _ in range(3):                                   # fast path, after the first call
        np.testing.assert_allclose(f(A, x, B), (A @ x) @ B, rtol=1e-12)
    np.testing.assert_allclose(first, (A @ x) @ B, rtol=1e-12)
    np.testing.assert_allclose(cpu.run([A, x, B])[0], (A @ x) @ B, rtol=1e-12)


def test_a_tuple_of_products_comes_back_as_a_fresh_tuple():
    g = _rng()
    A, p, r = g.uniform(size=(21, 19)), g.uniform(size=19), g.uniform(size=21)
    f = nbxla.jit(lambda A, p, r: (r @ A, A @ p))
    for _ in range(3):
        s, q = f(A, p, r)
        np.testing.assert_allclose(s, r @ A, rtol=1e-12)
        np.testing.assert_allclose(q, A @ p, rtol=1e-12)
    assert f.last_compilation.executable.run_tuple is not None
    s2, q2 = f(A, p, r)
    assert not np.shares_memory(s, s2) and not np.shares_memory(q, q2)   # fresh per call


def test_kernels_and_products_mixed_with_a_scalar_result():
    g = _rng()
    A, x, y = g.uniform(size=(30, 40)), g.uniform(size=40), g.uniform(size=30)

    def prog(A, x, y):
        t = np.tanh(A @ x) + 2 * y
        return np.sum(t @ A * x)
    f = nbxla.jit(prog)
    for _ in range(3):
        got = f(A, x, y)
        assert np.ndim(got) == 0
        np.testing.assert_allclose(got, prog(A, x, y), rtol=1e-12)


def test_non_contiguous_and_subclass_arguments_are_made_contiguous():
    g = _rng()
    A, x = g.uniform(size=(40, 21)), g.uniform(size=42)
    f = nbxla.jit(lambda A, x: (A @ x) @ A)
    view_A, view_x = A[::2], x[::2]                       # strided views
    np.testing.assert_allclose(f(view_A, view_x), (view_A @ view_x) @ view_A, rtol=1e-12)
    cpu = _native(f)
    np.testing.assert_allclose(cpu.run([view_A, view_x])[0], (view_A @ view_x) @ view_A, rtol=1e-12)
    np.testing.assert_allclose(cpu.run([np.asfortranarray(view_A), view_x.tolist()])[0],
                               (view_A @ view_x) @ view_A, rtol=1e-12)


def test_a_result_that_is_an_input_keeps_the_general_runner():
    # (a reshape of an argument is a result of the executable that is its input's memory; an
    # argument returned as it is never reaches the executable: the jit hands back the
    # caller's own array, as NumPy does)
    g = _rng()
    A, x = g.uniform(size=(5, 6)), g.uniform(size=6)
    f = nbxla.jit(lambda A, x: (A @ x, x.reshape(2, 3)))
    a, b = f(A, x)
    np.testing.assert_allclose(a, A @ x, rtol=1e-12)
    assert np.array_equal(b, x.reshape(2, 3)) and not np.shares_memory(b, x)
    assert not hasattr(_native(f).run, "source")
    same = nbxla.jit(lambda A, x: (A @ x, x))
    a, b = same(A, x)
    np.testing.assert_allclose(a, A @ x, rtol=1e-12)
    assert b is x and hasattr(_native(same).run, "source")


@pytest.mark.filterwarnings("ignore::nbxla.errors.InterpretedWarning")   # (integer dots)
@pytest.mark.parametrize("n", [1, 3])
def test_one_element_tuple_roots_and_int_dots(n):
    g = _rng()
    A, x = g.integers(0, 9, size=(n, 4)), g.integers(0, 9, size=4)
    f = nbxla.jit(lambda A, x: (A @ x + 1,))
    for _ in range(2):
        (got,) = f(A, x)
        assert np.array_equal(got, A @ x + 1) and got.dtype == (A @ x).dtype


# ---- two GEMVs of one matrix in one pass (runtime/dual_gemv.py) ----------------------------

@pytest.mark.parametrize("dtype, rtol", [(np.float64, 1e-12), (np.float32, 1e-5)])
# (rows: blocks of gemv_pairs.ROWS and rows left over, blocks only, rows left over only)
@pytest.mark.parametrize("rows, cols", [(21, 19), (8, 3), (16, 9), (17, 6), (5, 1), (1, 7), (3, 3), (7, 4)])
def test_both_sides_of_one_matrix_run_as_one_pass_and_agree(dtype, rtol, rows, cols):
    g = _rng()
    A = g.uniform(-1, 1, size=(rows, cols)).astype(dtype)
    p, r = g.uniform(-1, 1, size=cols).astype(dtype), g.uniform(-1, 1, size=rows).astype(dtype)
    f = nbxla.jit(lambda A, p, r: (r @ A, A @ p))
    for _ in range(2):
        s, q = f(A, p, r)
        assert s.dtype == q.dtype == dtype
        np.testing.assert_allclose(s, r @ A, rtol=rtol, atol=rtol)
        np.testing.assert_allclose(q, A @ p, rtol=rtol, atol=rtol)
    if rows > 1 and cols > 1:   # (one row: A @ p is a vector-matrix product too, nothing to
        assert "dual(" in _native(f).run.source   # pair; one column: r @ A is an inner product,
        #                                           a fused reduction, see passes/dot_rewrites)


def test_a_product_of_a_function_of_the_other_is_not_paired():
    g = _rng()
    A, r = g.uniform(size=(12, 9)), g.uniform(size=12)
    f = nbxla.jit(lambda A, r: A @ np.tanh(r @ A))
    np.testing.assert_allclose(f(A, r), A @ np.tanh(r @ A), rtol=1e-12)
    source = _native(f).run.source
    assert "dual(" not in source and "chained(" not in source and source.count("matmul(") == 2


def test_atax_runs_chained():
    g = _rng()
    A, x = g.uniform(size=(12, 9)), g.uniform(size=9)
    f = nbxla.jit(lambda A, x: (A @ x) @ A)
    for _ in range(2):
        np.testing.assert_allclose(f(A, x), (A @ x) @ A, rtol=1e-12)
    assert "chained(" in _native(f).run.source


def test_a_third_product_of_the_same_matrix_runs_on_its_own():
    g = _rng()
    A, p, r, r2 = g.uniform(size=(10, 6)), g.uniform(size=6), g.uniform(size=10), g.uniform(size=10)
    f = nbxla.jit(lambda A, p, r, r2: (r @ A, A @ p + 1, r2 @ A))
    for got, want in zip(f(A, p, r, r2), (r @ A, A @ p + 1, r2 @ A)):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    assert _native(f).run.source.count("dual(") == 1


def test_the_execution_stage_names_the_paired_products():
    g = _rng()
    A, p, r = g.uniform(size=(6, 5)), g.uniform(size=5), g.uniform(size=6)
    f = nbxla.jit(lambda A, p, r: (r @ A, A @ p))
    f(A, p, r)
    text = f.last_compilation.stage("execution")
    assert text.count("one pass over it (dual_gemv)") == 2, text


@pytest.mark.parametrize("dtype, rtol", [(np.float64, 1e-11), (np.float32, 1e-4)])
@pytest.mark.parametrize("rows, cols", [(19, 21), (8, 3), (16, 9), (17, 6), (5, 2), (3, 3), (7, 4)])
def test_a_product_of_the_others_result_runs_chained_and_agrees(dtype, rtol, rows, cols):
    g = _rng()
    A, x = g.uniform(-1, 1, size=(rows, cols)).astype(dtype), g.uniform(-1, 1, size=cols).astype(dtype)
    f = nbxla.jit(lambda A, x: (A @ x, (A @ x) @ A))
    for _ in range(2):
        q, s = f(A, x)
        np.testing.assert_allclose(q, A @ x, rtol=rtol, atol=rtol)
        np.testing.assert_allclose(s, (A @ x) @ A, rtol=rtol, atol=rtol)
    source = _native(f).run.source
    assert "chained(" in source and "matmul(" not in source


@pytest.mark.parametrize("kind", ["dual", "chained"])
@pytest.mark.parametrize("extra", [-1, 0, 1])
def test_pair_kernels_agree_on_both_sides_of_the_row_block(kind, extra):
    """The kernels take gemv_pairs.ROWS rows a block, the rest one at a time: one row short of
    a block (no block at all), whole blocks, and blocks with one row left over."""
    from nbxla.codegen.gemv_pairs import ROWS
    rows = ROWS - 1 if extra < 0 else 3 * ROWS + extra
    g = _rng()
    A, p, r = g.uniform(-1, 1, size=(rows, 11)), g.uniform(-1, 1, size=11), g.uniform(-1, 1, size=rows)
    if kind == "dual":
        fn, want = (lambda A, p, r: (r @ A, A @ p)), (r @ A, A @ p)
    else:
        fn, want = (lambda A, p, r: ((A @ p) @ A, A @ p)), ((A @ p) @ A, A @ p)
    f = nbxla.jit(fn)
    for _ in range(2):
        for got, expected in zip(f(A, p, r), want):
            np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
    assert f"{kind}(" in _native(f).run.source


@pytest.mark.parametrize("kind", ["dual", "chained"])
def test_a_pair_compiles_only_its_own_kind_and_its_kernel_once(kind, monkeypatch):
    """A program uses one kind of pair: only that kind's module is compiled, and its kernel stays
    one function called by both entries (ctypes and fastcall), not a copy inlined into each
    (four copies of the two kernels were most of a GEMV program's first call)."""
    from nbxla.codegen import cpu
    from nbxla.runtime import dual_gemv
    monkeypatch.setattr(dual_gemv, "_compiled", {})
    optimized = []
    real = cpu.jit_engine

    def keep_text(mod):
        engine = real(mod)
        optimized.append(str(mod))
        return engine
    monkeypatch.setattr(cpu, "jit_engine", keep_text)
    g = _rng()
    A, p, r = g.uniform(-1, 1, size=(20, 11)), g.uniform(-1, 1, size=11), g.uniform(-1, 1, size=20)
    fn = (lambda A, p, r: (r @ A, A @ p)) if kind == "dual" else (lambda A, p, r: ((A @ p) @ A, A @ p))
    for got, want in zip(nbxla.jit(fn, cache=CompilationCache())(A, p, r), fn(A, p, r)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert list(dual_gemv._compiled) == [("f64", kind)]
    other = "chained" if kind == "dual" else "dual"
    (text,) = optimized
    assert f"@{other}_gemv_kernel" not in text
    assert len(re.findall(rf"define internal [^(]*@{kind}_gemv_kernel\(", text)) == 1
    assert len(re.findall(rf"call [^(]*@{kind}_gemv_kernel\(", text)) == 2


@pytest.mark.parametrize("kind", ["dual", "chained"])
@pytest.mark.parametrize("rows, cols", [(37, 29), (3, 40), (300, 1000)])
def test_large_matrices_split_the_pass_over_row_blocks_and_agree(kind, rows, cols, monkeypatch):
    """Above DUAL_MAX_BYTES the pair runs over row blocks on the pool's threads (split_pair),
    every block with its own partial of ``s``; forced low here for the small shapes, the last
    one is above the real limit.  Below it (the tests above) the single-pass kernel runs whole."""
    from nbxla.runtime import straight_line
    if rows * cols * 8 <= straight_line.DUAL_MAX_BYTES:
        monkeypatch.setattr(straight_line, "DUAL_MAX_BYTES", 64)
    monkeypatch.setattr(straight_line, "worker_count", lambda: 2)      # (on a 1-core machine too)
    g = _rng()
    A, p, r = g.uniform(-1, 1, size=(rows, cols)), g.uniform(-1, 1, size=cols), g.uniform(-1, 1, size=rows)
    if kind == "dual":
        fn, want = (lambda A, p, r: (r @ A, A @ p)), (r @ A, A @ p)
    else:
        fn, want = (lambda A, p, r: (A @ p, (A @ p) @ A)), (A @ p, (A @ p) @ A)
    f = nbxla.jit(fn, cache=CompilationCache())
    for _ in range(2):
        for got, w in zip(f(A, p, r), want):
            np.testing.assert_allclose(got, w, rtol=1e-11, atol=1e-11)
    assert f"split_pair({kind}, " in _native(f).run.source


def test_large_result_with_small_temporaries_needs_no_arena():
    """gemver's shape: a 320 KB result (planned in the arena, but a result gets memory of its
    own) and two small temporaries: no arena allocated per call, the entry runs written out,
    and the results equal NumPy's (the result is fresh memory, not shared with an input)."""
    from nbxla.runtime.cpu_executable import SMALL_ARENA
    g = _rng()
    n = 200
    A = g.uniform(size=(n, n))
    u, v, y, z = (g.uniform(size=n) for _ in range(4))

    def gemver_like(A, u, v, y, z):
        B = A + np.outer(u, v)
        x = y @ B + z
        return B, x, B @ x

    f = nbxla.jit(gemver_like)
    f(A, u, v, y, z)
    cpu = _native(f)
    assert A.nbytes >= SMALL_ARENA and cpu._arena_bytes == 0 and hasattr(cpu.run, "source")
    for _ in range(3):
        got = f(A, u, v, y, z)
        for a, b in zip(got, gemver_like(A, u, v, y, z)):
            np.testing.assert_allclose(a, b, rtol=1e-12)
    assert not np.shares_memory(got[0], A)
    big = nbxla.jit(lambda A, B: (A + B) @ (A - B) + A)          # large temporaries: the arena
    big(A, A.T.copy())
    assert _native(big)._arena_bytes > 0


def test_entries_with_arena_temporaries_run_written_out_and_agree_with_the_evaluator():
    """Temporaries the plan puts in the arena (a kernel's output, a plain GEMM's, a batched
    product's through its thunk) are written out as views of one arena made per call; every
    call gives the evaluator's answer in fresh memory."""
    from nbxla.hlo.evaluator import evaluate
    g = _rng()
    q, k, v = (g.standard_normal((4, 64, 32)).astype(np.float32) for _ in range(3))
    w = g.standard_normal((32, 32)).astype(np.float32)

    def block(q, k, v, w):
        s = np.tanh(q @ np.swapaxes(k, 1, 2) * 0.125)
        return (s @ v).reshape(256, 32) @ w + 1.0

    f = nbxla.jit(block)
    first = f(q, k, v, w)
    cpu = _native(f)
    assert cpu._arena_bytes > 0 and "arena" in cpu.run.source
    assert "kernel" in cpu.run.source and "thunk" in cpu.run.source
    expected = evaluate(cpu.module, [q, k, v, w])
    expected = expected[0] if isinstance(expected, (list, tuple)) else expected
    for got in (first, f(q, k, v, w), cpu.run([q, k, v, w])[0]):
        np.testing.assert_allclose(got, np.asarray(expected), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got, block(q, k, v, w), rtol=1e-4, atol=1e-4)
    assert not np.shares_memory(first, f(q, k, v, w))


@pytest.mark.parametrize("split", [False, True])
def test_gemv_pairs_whose_results_lie_in_the_arena_run_as_one_pass(split, monkeypatch):
    """A pair of GEMVs whose outputs the plan puts in the arena (npbench's mvt at 5500: two
    44 KB products) still runs as one pass over the matrix, into its arena views, whole or
    split over row blocks; both products agree with NumPy."""
    from nbxla.runtime import straight_line
    if split:
        monkeypatch.setattr(straight_line, "DUAL_MAX_BYTES", 64)
        monkeypatch.setattr(straight_line, "worker_count", lambda: 2)
    g = _rng()
    n = 160
    A = g.uniform(size=(n, n))
    x, y = g.uniform(size=n), g.uniform(size=n)
    C = g.uniform(size=(n, n))

    def prog(A, x, y, C):
        big = A * 2.0 + C                    # a large temporary: the entry gets an arena
        return np.tanh(big @ x) + np.tanh(y @ big)

    f = nbxla.jit(prog, cache=CompilationCache())
    for _ in range(2):
        np.testing.assert_allclose(f(A, x, y, C), prog(A, x, y, C), rtol=1e-12)
    cpu = _native(f)
    assert cpu._arena_bytes > 0 and "buffer=arena" in cpu.run.source
    assert ("split_pair(dual, " if split else "dual(") in cpu.run.source and "matmul(" not in cpu.run.source
