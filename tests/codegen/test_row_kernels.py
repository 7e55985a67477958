"""Row-reduction kernels that keep a costly per-element value (softmax's exp) in the output
buffer between phases: used exactly where it is safe, and the results match."""

import re

import llvmlite.binding as llvm
import numpy as np
import pytest

import nbxla
from nbxla.codegen import reductions, toolkit
from nbxla.runtime.cache import CompilationCache


def _softmax(x):
    e = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return e / np.sum(e, axis=-1, keepdims=True)


def _log_softmax(x):
    m = np.max(x, axis=-1, keepdims=True)
    return x - m - np.log(np.sum(np.exp(x - m), axis=-1, keepdims=True))


def _weighted_softmax(x, w):
    e = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return e * w / np.sum(e, axis=-1, keepdims=True)


def _sum_of_exp_and_exp(x):
    e = np.exp(x)
    return e, e.sum(axis=-1)


def _reversed_cosine_scaled(x):
    c = np.cos(x)[..., ::-1]             # the output reads the costly value at another element
    return c * np.sum(c * c, axis=-1, keepdims=True)


def _kept(fn, *args):
    f = nbxla.jit(fn, cache=CompilationCache())
    f(*args)
    fusions = [i for i in f.last_compilation.optimized.entry.instructions if i.opcode == "fusion"]
    found = []
    for fusion in fusions:
        comp = fusion.attrs["calls"]
        if any(i.opcode == "reduce" for i in comp.instructions):
            plan = toolkit.ReductionPlan(comp)
            outputs = [(o, None) for o in toolkit.kernel_outputs(comp)]
            found.append(reductions._kept_row_value(comp, plan, outputs))
    return found


def test_softmax_keeps_its_exponential():
    x = np.random.default_rng(0).standard_normal((8, 33)).astype(np.float32)
    (kept,) = _kept(_softmax, x)
    assert kept is not None and kept[1].opcode == "exponential"


@pytest.mark.parametrize("fn", [_log_softmax, _weighted_softmax, _reversed_cosine_scaled])
def test_not_kept_when_the_output_pass_reads_an_array(fn):
    """(...or reads the kept value at another element than the one it writes: a reversed
    value would be read after the output pass overwrote it -- found by the native-loop tests)"""
    x = np.random.default_rng(0).standard_normal((8, 33)).astype(np.float32)
    args = (x, np.ones(33, np.float32)) if fn is _weighted_softmax else (x,)
    assert all(k is None for k in _kept(fn, *args))


@pytest.mark.parametrize("fn", [_softmax, _log_softmax, _weighted_softmax, _sum_of_exp_and_exp,
                                _reversed_cosine_scaled])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(5, 7), (300, 1000), (2, 3, 4100)])
def test_row_kernels_match_the_evaluator(fn, dtype, shape):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(shape) * 4).astype(dtype)
    args = (x, rng.random(shape[-1]).astype(dtype)) if fn is _weighted_softmax else (x,)
    cpu = nbxla.jit(fn, cache=CompilationCache())
    ref = nbxla.jit(fn, device="evaluator", cache=CompilationCache())
    got, want = cpu(*args), ref(*args)
    for g, w in zip(got if isinstance(got, tuple) else [got], want if isinstance(want, tuple) else [want]):
        np.testing.assert_allclose(g, w, rtol=2e-5 if dtype == np.float32 else 1e-12, atol=1e-30)
    assert cpu.last_compilation.executable.native.interpreted == {}


def _interleaved_loops(ir_text: str) -> int:
    """Loop branches whose loop ID carries an interleave count (a loop ID may carry other
    hints too: a light kernel's loops ask not to be unrolled, see codegen/cpu.py)."""
    nodes = dict(re.findall(r"^(!\d+) = (?:distinct )?!\{(.*)\}$", ir_text, re.M))
    counts = {n for n, body in nodes.items() if '"llvm.loop.interleave.count"' in body}
    ids = {n for n, body in nodes.items() if counts & set(re.findall(r"!\d+", body))}
    return sum(1 for loop_id in re.findall(r"!llvm\.loop (!\d+)", ir_text) if loop_id in ids)


@pytest.mark.parametrize("fn,interleaved", [
    (lambda a: a.max(axis=-1), True),                             # a long max/min chain
    (lambda a: np.log1p(np.exp(-np.abs(a))).sum(axis=-1), True),  # transcendental, no stores
    (lambda a: (a * a).sum(axis=-1), False),                      # cheap: one accumulator
    (_softmax, None),                                             # max phase only
])
def test_row_reduction_loops_ask_llvm_for_interleaving_where_it_pays(fn, interleaved):
    x = np.random.default_rng(5).standard_normal((64, 1000)).astype(np.float32)
    f = nbxla.jit(fn, cache=CompilationCache())
    np.testing.assert_allclose(f(x), fn(x), rtol=2e-5)
    ir_text = f.last_compilation.executable.native.kernels.llvm_ir
    marks = _interleaved_loops(ir_text)             # loops carrying the request
    assert ('!"llvm.loop.interleave.count"' in ir_text) == bool(marks)
    if interleaved is None:
        assert marks == 1                  # softmax: the max loop, not the exp loop that stores
    else:
        assert (marks > 0) == interleaved


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("op", [np.max, np.min])
@pytest.mark.parametrize("axis", [None, 1, (1, 2)])
def test_float_extremes_propagate_nan_wherever_it_is(dtype, op, axis):
    # Max/min reductions keep the max of the numbers and a NaN flag apart (one vector
    # instruction on the dependency chain instead of six): a NaN anywhere, in the vectorized
    # body or the scalar tail, in one lane or in all, must still give NaN.
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((9, 5, 203)) * 100).astype(dtype)
    x[1, 0, 0] = np.nan                  # first element of a row
    x[2, 4, 202] = np.nan                # last (the tail)
    x[3, 2, 77] = np.nan                 # inside the body
    x[4] = np.nan                        # a whole batch
    x[5, 1, 5] = np.inf
    x[5, 3, 9] = -np.inf
    x[6] = -np.inf                       # only infinities
    x[7, :, ::2] = -0.0                  # zeros of both signs
    x[7, :, 1::2] = 0.0
    f = nbxla.jit(lambda a: op(a, axis=axis), cache=CompilationCache())
    got, want = np.asarray(f(x)), np.asarray(op(x, axis=axis))
    np.testing.assert_array_equal(got, want)
    assert got.dtype == want.dtype
    if axis is None:                     # (many chunks: also split across threads)
        big = np.repeat(x.reshape(-1), 300)
        big[-1] = np.nan
        assert np.isnan(nbxla.jit(lambda a: op(a), cache=CompilationCache())(big))


@pytest.mark.parametrize("shapes,axis", [
    ([(5, 4), (5, 9), (5, 1)], 1),                 # along the last axis: a loop per operand
    ([(3, 6), (1, 6), (4, 6)], 0),                 # along another: the operand chosen per row
    ([(2, 3, 7), (2, 1, 7), (2, 4, 7)], 1),
    ([(2, 3, 4), (2, 3, 0), (2, 3, 5)], 2),        # an empty operand
    ([(9,), (4,)], 0),                             # 1-D: one row
])
@pytest.mark.parametrize("threads", [1, 3])
def test_concatenation_rows_operand_by_operand(shapes, axis, threads, monkeypatch):
    from nbxla.runtime import cpu_kernels
    monkeypatch.setattr(cpu_kernels, "worker_count", lambda: threads)
    monkeypatch.setattr(cpu_kernels, "PARALLEL_THRESHOLD", 8)          # split the rows
    rng = np.random.default_rng(len(shapes) + axis)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    plain = nbxla.jit(lambda *a: np.concatenate(a, axis=axis), cache=CompilationCache())
    fused = nbxla.jit(lambda *a: np.concatenate([x * (k + 2) for k, x in enumerate(a)], axis=axis),
                      cache=CompilationCache())
    np.testing.assert_array_equal(plain(*arrays), np.concatenate(arrays, axis=axis))
    np.testing.assert_array_equal(fused(*arrays), np.concatenate([x * (k + 2) for k, x in enumerate(arrays)],
                                                                 axis=axis))
    assert '"cat0.head"' in fused.last_compilation.executable.native.kernels.llvm_ir


# --- the first phase's value kept for the second (bf16 scores), and reciprocals ------------

_BF16_SOFTMAX = """
HloModule bf16_softmax
%max_f32 (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %m = f32[] maximum(%a, %b)
}
%add_f32 (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}
ENTRY %main (s: f32[ROWS,COLS]) -> f32[ROWS,COLS] {
  %s = f32[ROWS,COLS]{1,0} parameter(0)
  %s_bf16 = bf16[ROWS,COLS]{1,0} convert(%s)
  %scale = bf16[] constant(0.125)
  %scales = bf16[ROWS,COLS]{1,0} broadcast(%scale), dimensions={}
  %scaled = bf16[ROWS,COLS]{1,0} multiply(%s_bf16, %scales)
  %x = f32[ROWS,COLS]{1,0} convert(%scaled)
  %lowest = f32[] constant(-inf)
  %m = f32[ROWS]{0} reduce(%x, %lowest), dimensions={1}, to_apply=%max_f32
  %mb = f32[ROWS,COLS]{1,0} broadcast(%m), dimensions={0}
  %d = f32[ROWS,COLS]{1,0} subtract(%x, %mb)
  %e = f32[ROWS,COLS]{1,0} exponential(%d)
  %zero = f32[] constant(0)
  %sum = f32[ROWS]{0} reduce(%e, %zero), dimensions={1}, to_apply=%add_f32
  %sb = f32[ROWS,COLS]{1,0} broadcast(%sum), dimensions={0}
  %p = f32[ROWS,COLS]{1,0} divide(%e, %sb)
  %out = bf16[ROWS,COLS]{1,0} convert(%p)
  ROOT %widened = f32[ROWS,COLS]{1,0} convert(%out)
}
"""


def _reduction_fusions(compiled):
    return [i.attrs["calls"] for i in compiled.optimized.entry.instructions
            if i.opcode == "fusion" and any(j.opcode == "reduce" for j in i.attrs["calls"].instructions)]


def _first_phase_values(compiled):
    found = []
    for comp in _reduction_fusions(compiled):
        plan = toolkit.ReductionPlan(comp)
        kept = reductions._kept_row_value(comp, plan, [(o, None) for o in toolkit.kernel_outputs(comp)])
        found.append(kept and reductions._first_phase_value(plan, kept[1], kept[0]))
    return found


@pytest.mark.parametrize("rows,cols", [(3, 5), (64, 128), (7, 1000)])
def test_bf16_scores_are_kept_from_the_first_phase_and_match_the_evaluator(rows, cols):
    """Softmax over bf16-rounded scaled scores (attention's form): the first phase stores the
    rounded scores, the second reads them back under its exp (the output pass reads the exp);
    the probabilities rounded to bf16 and widened again, as a bf16 dot's operand is; rows
    with NaN, +-inf and huge values included: the evaluator's results."""
    from nbxla.compiler import compile_module
    from nbxla.hlo.evaluator import evaluate, flatten
    from nbxla.hlo.parser import parse_hlo
    from nbxla.testing import compare_arrays
    text = _BF16_SOFTMAX.replace("ROWS", str(rows)).replace("COLS", str(cols))
    s = (np.random.default_rng(rows).standard_normal((rows, cols)) * 8).astype(np.float32)
    s[0, 1] = np.nan
    s[1 % rows, 0] = np.inf
    s[2 % rows, :2] = -np.inf
    s[-1, -1] = 3e38
    compiled = compile_module(parse_hlo(text), "cpu")
    values = _first_phase_values(compiled)
    assert len(values) == 1 and values[0] is not None and values[0].opcode == "convert"
    got = compiled.executable.run([s])[0]
    want = flatten(evaluate(parse_hlo(text), [s]))[0]
    ok, detail = compare_arrays(got, want)
    assert ok, detail
    assert compiled.executable.native.interpreted == {}


def test_first_phase_value_not_kept_where_it_is_cheap():
    """f32 softmax: the first phase's operand is one multiply of a load, cheaper to compute
    again than to store and reload: nothing kept from the first phase."""
    x = np.random.default_rng(0).standard_normal((8, 33)).astype(np.float32)
    f = nbxla.jit(lambda a: _softmax(a * np.float32(0.125)), cache=CompilationCache())
    f(x)
    assert _first_phase_values(f.last_compilation) == [None]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_division_by_row_sums_by_reciprocal_only_where_it_is_normal(dtype):
    """x / sum(x) per row is computed as x * (1/sum) where 1/sum is a normal number; rows
    whose sum is below 2**-128 (1/sum overflows), huge (1/sum subnormal), zero, infinite or NaN
    keep the division or give the division's inf/NaN: every row is the evaluator's."""
    tiny = np.finfo(dtype).tiny
    big = np.finfo(dtype).max
    rows = np.array([
        [1.0, 2.0, 3.0, 4.0],                       # normal: the reciprocal
        [tiny / 64, tiny / 32, tiny / 128, tiny / 16],  # sum below 2**-128: 1/sum overflows
        [big / 2, big / 4, big / 8, big / 16],     # huge sum: 1/sum subnormal, imprecise
        [0.0, 0.0, 0.0, 0.0],                       # 0/0: NaN either way
        [0.0, 1.0, np.inf, 2.0],                    # inf sum: 0 and NaN
        [1.0, np.nan, 2.0, 3.0],                    # NaN sum
        [-1.0, 3.0, -5.0, 2.5],                     # negative sum
    ], dtype=dtype)
    fn = lambda a: a / np.sum(a, axis=-1, keepdims=True)  # noqa: E731
    cpu = nbxla.jit(fn, cache=CompilationCache())
    ref = nbxla.jit(fn, device="evaluator", cache=CompilationCache())
    with np.errstate(all="ignore"):
        got, want = cpu(rows), ref(rows)
    np.testing.assert_allclose(got, want, rtol=2e-7 if dtype == np.float32 else 1e-15, atol=0, equal_nan=True)
    assert np.isfinite(got[1]).all() and np.isfinite(got[2]).all() and np.any(got[2] > 0)
    comps = _reduction_fusions(cpu.last_compilation)
    assert [len(reductions._row_divides(c, toolkit.ReductionPlan(c))) for c in comps] == [1]


@pytest.mark.parametrize("cols,wide", [(reductions.WIDE_VECTOR_MIN_TRIP - 1, False), (reductions.WIDE_VECTOR_MIN_TRIP, True)])
def test_long_rows_ask_for_wide_vectors_on_avx512_hosts(cols, wide):
    """Row kernels over rows of at least WIDE_VECTOR_MIN_TRIP elements ask LLVM for 512-bit
    vectors (where the host has AVX-512); shorter rows keep LLVM's default; both give the
    evaluator's results."""
    x = np.random.default_rng(3).standard_normal((16, cols)).astype(np.float32)
    f = nbxla.jit(_softmax, cache=CompilationCache())
    ref = nbxla.jit(_softmax, device="evaluator", cache=CompilationCache())
    np.testing.assert_allclose(f(x), ref(x), rtol=2e-5, atol=1e-30)
    asked = '"prefer-vector-width"="512"' in f.last_compilation.executable.native.kernels.llvm_ir
    avx512 = bool(llvm.get_host_cpu_features().get("avx512f", False))
    assert asked == (wide and avx512)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_division_by_row_sums_rounds_as_numpy_divides(dtype):
    """The reciprocal is corrected to the division's rounding: with sums that are exact in any
    order (small integers), every quotient is NumPy's bit for bit, and a row with one nonzero
    element gives exactly 1 (x * (1/x) alone is 0.9999999999999999 for a third of them)."""
    rng = np.random.default_rng(5)
    ints = rng.integers(1, 1000, (500, 64)).astype(dtype)
    single = np.zeros((500, 64), dtype)
    single[:, 0] = rng.random(500).astype(dtype) + dtype(0.5)
    f = nbxla.jit(lambda a: a / np.sum(a, axis=-1, keepdims=True), cache=CompilationCache())
    for x in (ints, single):
        np.testing.assert_array_equal(f(x), x / x.sum(axis=-1, keepdims=True))
    assert [len(reductions._row_divides(c, toolkit.ReductionPlan(c))) for c in _reduction_fusions(f.last_compilation)] == [1]
