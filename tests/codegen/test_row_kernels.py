"""Row-reduction kernels that keep a costly per-element value (softmax's exp) in the output
buffer between phases: used exactly where it is safe, and the results match."""

import re

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
