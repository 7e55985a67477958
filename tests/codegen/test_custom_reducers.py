"""Variadic (argmax-style) and custom reducers in native row kernels, against NumPy and the
reference evaluator (which applies the reducer element by element in row-major order)."""

import numpy as np
import pytest

import nbxla
from nbxla.compiler import compile_module
from nbxla.hlo.parser import parse_hlo
from nbxla.runtime.cache import CompilationCache


def _native(f):
    ex = f.last_compilation.executable
    assert ex.native.interpreted == {}, ex.native.interpreted
    return ex


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.uint8, np.int64])
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
@pytest.mark.parametrize("which", [np.argmax, np.argmin])
def test_argmax_argmin_match_numpy(dtype, axis, which):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 5, (37, 53)).astype(dtype)       # many ties: the first index wins
    if np.dtype(dtype).kind == "f":
        x[3, 7] = np.nan
        x[10, :] = np.nan
        x[:, 20] = -np.inf
    f = nbxla.jit(lambda a: which(a, axis=axis), cache=CompilationCache())
    got = f(x)
    np.testing.assert_array_equal(got, which(x, axis=axis))
    _native(f)


def test_argmax_of_a_fused_expression_with_keepdims():
    x = np.random.default_rng(1).standard_normal((64, 100)).astype(np.float32)
    f = nbxla.jit(lambda a: np.argmax(np.exp(a) * 2 - a, axis=1, keepdims=True), cache=CompilationCache())
    np.testing.assert_array_equal(f(x), np.argmax(np.exp(x) * 2 - x, axis=1, keepdims=True))
    _native(f)


def test_max_and_argmax_together():
    x = np.random.default_rng(2).standard_normal((300, 17))
    f = nbxla.jit(lambda a: (np.max(a, axis=0), np.argmax(a, axis=0)), cache=CompilationCache())
    m, i = f(x)
    np.testing.assert_array_equal(m, x.max(axis=0))
    np.testing.assert_array_equal(i, x.argmax(axis=0))


# A reducer that is neither associative nor commutative: acc * 0.5 + x.  Only the exact
# row-major order of combination gives the evaluator's result.
_CUSTOM = """
HloModule custom_reduce

halve_and_add {
  acc = f64[] parameter(0)
  x = f64[] parameter(1)
  half = f64[] constant(0.5)
  scaled = f64[] multiply(acc, half)
  ROOT sum = f64[] add(scaled, x)
}

ENTRY main {
  p = f64[DIMS] parameter(0)
  e = f64[DIMS] exponential(p)
  init = f64[] constant(1)
  ROOT r = f64[OUT] reduce(e, init), dimensions={RED}, to_apply=halve_and_add
}
"""


@pytest.mark.parametrize("dims,red,out", [
    ((6, 50), (1,), (6,)), ((6, 50), (0,), (50,)), ((4, 5, 6), (0, 2), (5,)),
    ((4, 5, 6), (0, 1, 2), ()), ((3, 0), (1,), (3,)),
])
def test_custom_reducer_matches_the_evaluator_exactly(dims, red, out):
    text = (_CUSTOM.replace("DIMS", ",".join(map(str, dims))).replace("OUT", ",".join(map(str, out)))
            .replace("RED", ",".join(map(str, red))))
    x = np.random.default_rng(3).standard_normal(dims)
    cpu = compile_module(parse_hlo(text), "cpu")
    ref = compile_module(parse_hlo(text), "evaluator")
    assert cpu.executable.native.interpreted == {}
    (got,), (want,) = cpu.executable.run([x]), ref.executable.run([x])
    np.testing.assert_allclose(got, want, rtol=1e-13)
    assert got.shape == out
    if red == (0,):               # down columns: the column kernel, reducer applied row by row
        assert '"ci.head"' in cpu.executable.native.kernels.llvm_ir


_ARGMIN = """
HloModule argmin_rows
pick {
  a = f32[] parameter(0)
  ai = s32[] parameter(1)
  b = f32[] parameter(2)
  bi = s32[] parameter(3)
  le = pred[] compare(a, b), direction=LE
  v = f32[] select(le, a, b)
  i = s32[] select(le, ai, bi)
  ROOT t = (f32[], s32[]) tuple(v, i)
}
ENTRY main {
  x = f32[9,33] parameter(0)
  sq = f32[9,33] multiply(x, x)
  idx = s32[9,33] iota(), iota_dimension=1
  inf = f32[] constant(inf)
  zero = s32[] constant(0)
  ROOT r = (f32[9], s32[9]) reduce(sq, idx, inf, zero), dimensions={1}, to_apply=pick
}
"""


def test_variadic_reduce_as_the_fusion_root():
    text = _ARGMIN
    x = np.random.default_rng(4).standard_normal((9, 33)).astype(np.float32)
    cpu = compile_module(parse_hlo(text), "cpu")
    assert cpu.executable.native.interpreted == {}
    got = cpu.executable.run([x])
    want = compile_module(parse_hlo(text), "evaluator").executable.run([x])
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    np.testing.assert_array_equal(got[1], np.argmin(x * x, axis=1))


def test_pred_add_reduction_is_or():
    text = """HloModule t
add_pred {
  a = pred[] parameter(0)
  b = pred[] parameter(1)
  ROOT s = pred[] add(a, b)
}
ENTRY main {
  x = pred[4,6] parameter(0)
  f = pred[] constant(false)
  ROOT r = pred[4] reduce(x, f), dimensions={1}, to_apply=add_pred
}"""
    x = np.zeros((4, 6), bool)
    x[0, :2] = x[1, 0] = x[3, :] = True          # even counts of True: xor would give False
    cpu = compile_module(parse_hlo(text), "cpu")
    assert cpu.executable.native.interpreted == {}
    np.testing.assert_array_equal(cpu.executable.run([x])[0], [True, True, False, True])


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int16, np.uint32])
@pytest.mark.parametrize("which", [np.argmax, np.argmin])
def test_row_argmax_runs_in_two_vectorizable_passes(dtype, which):
    from nbxla.codegen import arg_reductions, toolkit
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((300, 257)) * 3).astype(dtype)
    if np.dtype(dtype).kind == "f":
        x[5, 100], x[5, 7] = np.nan, -np.nan       # the first NaN wins, whatever its sign
        x[6, :] = -np.inf
        x[7, 3], x[7, 200] = -0.0, 0.0             # signed zeros tie: the first one wins
        x[7] = np.where(np.arange(257) % 2 == 0, x[7], -1e30)
    f = nbxla.jit(lambda a: which(a, axis=-1), cache=CompilationCache())
    np.testing.assert_array_equal(f(x), which(x, axis=-1))
    fusion = next(i for i in f.last_compilation.optimized.entry.instructions if i.opcode == "fusion")
    comp = fusion.attrs["calls"]
    reduce = next(i for i in comp.instructions if i.opcode == "reduce")
    assert arg_reductions.arg_reduction_kind(reduce, toolkit.ReductionPlan(comp)) == \
        ("max" if which is np.argmax else "min")


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8, np.int32, np.uint16])
@pytest.mark.parametrize("which", [np.argmax, np.argmin])
@pytest.mark.parametrize("case", ["random", "ties", "nan_late", "nan_first", "rising", "falling",
                                  "signed_zeros", "extreme_last"])
@pytest.mark.parametrize("search_block", [128, 5])
def test_long_rows_are_searched_chunk_by_chunk(dtype, which, case, search_block, monkeypatch):
    """Rows longer than a chunk: the best pair must be the first best position of the whole
    row, whichever chunk holds it (ties across chunks keep the earlier one).  Within a chunk
    the position is searched block by block (5: many ragged blocks per chunk)."""
    from nbxla.codegen import arg_reductions
    monkeypatch.setattr(arg_reductions, "CHUNK", 64)           # many chunks, a ragged last one
    monkeypatch.setattr(arg_reductions, "SEARCH_BLOCK", search_block)
    rng = np.random.default_rng(hash(case) % 1000)
    n = 64 * 7 + 13
    is_float = np.dtype(dtype).kind == "f"
    x = (rng.standard_normal((3, n)) * 20).astype(dtype) if is_float else \
        rng.integers(0, 50, (3, n)).astype(dtype)
    if case == "ties":
        x = (x % 3).astype(dtype)                              # the extreme repeats in every chunk
    elif case == "nan_late" and is_float:
        x[0, 400], x[1, 65], x[1, 300] = np.nan, np.nan, np.nan
    elif case == "nan_first" and is_float:
        x[:, 0] = np.nan
    elif case == "rising":
        x = np.sort(x, axis=1)                                 # the best moves in every chunk
    elif case == "falling":
        x = np.sort(x, axis=1)[:, ::-1].copy()
    elif case == "signed_zeros" and is_float:
        x[:] = -1.0
        x[0, 100], x[0, 300] = -0.0, 0.0
        x[1, 5], x[1, 200] = 0.0, -0.0
    elif case == "extreme_last":
        x[:, -1] = np.iinfo(dtype).max if not is_float else np.inf
        x[:, -2] = np.iinfo(dtype).min if not is_float else -np.inf
    f = nbxla.jit(lambda a: (which(a, axis=1), which(a.reshape(-1))), cache=CompilationCache())
    rows, flat = f(x)
    np.testing.assert_array_equal(rows, which(x, axis=1))
    assert flat == which(x.reshape(-1))
    _native(f)


def test_reducers_that_only_look_like_argmax_are_not_taken_for_it():
    from nbxla.codegen import arg_reductions, toolkit
    # last index on ties (<= instead of <): not argmax's order
    text = _ARGMIN.replace("direction=LE", "direction=LT")
    comp = parse_hlo(text).entry
    plan = toolkit.ReductionPlan(comp)
    assert arg_reductions.arg_reduction_kind(comp.root, plan) is None


def _column_kernel(f) -> bool:
    """Was a reduction emitted as the column kernel (its row-group loop is in the IR)?"""
    return '"cr.head"' in f.last_compilation.executable.native.kernels.llvm_ir


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8, np.uint16, np.int64])
@pytest.mark.parametrize("which", [np.argmax, np.argmin])
@pytest.mark.parametrize("shape,axis,column_kernel", [
    ((203, 37), 0, True), ((5, 70, 24), 1, True), ((9, 2), 0, True),
    ((3, 17, 40), 0, False),                     # two kept axes: the row kernel's general path
])
@pytest.mark.parametrize("threads", [1, 3])
def test_argmax_down_columns_runs_in_the_column_kernel(dtype, which, shape, axis, column_kernel, threads,
                                                       monkeypatch):
    # (value, index) pairs accumulate row by row in the output buffers, vectorized across
    # columns; ties keep the first row, NaN beats every number and the first NaN wins.
    from nbxla.runtime import cpu_kernels
    monkeypatch.setattr(cpu_kernels, "worker_count", lambda: threads)
    monkeypatch.setattr(cpu_kernels, "PARALLEL_THRESHOLD", 64)
    rng = np.random.default_rng(shape[0])
    x = rng.integers(0, 4, shape).astype(dtype)           # many ties
    if np.dtype(dtype).kind == "f":
        x.reshape(-1)[::97] = np.nan
        x.reshape(-1)[5::31] = -np.inf
    f = nbxla.jit(lambda a: which(a, axis=axis), cache=CompilationCache())
    np.testing.assert_array_equal(f(x), which(x, axis=axis))
    _native(f)
    assert _column_kernel(f) == column_kernel
