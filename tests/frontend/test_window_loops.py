"""Loops over output positions whose body is one window reduction (passes/window_loops.py):
recognized nests become one ``convolution`` or ``reduce-window``; near misses stay loops.

Oracles: eager NumPy for every program (compiled on the CPU backend: the rewritten ops run
there), and the reference evaluator on the traced module before and after the pass alone.
Both sides of each condition of the rewrite are here: what it takes, and a program just
outside it (the loop stays a ``while`` and still agrees with NumPy).
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

import nbxla
from nbxla import examples
from nbxla.hlo.evaluator import evaluate, flatten
from nbxla.hlo.ir import clone_module
from nbxla.hlo.parser import parse_hlo
from nbxla.passes import AlgebraicSimplifier, CommonSubexpressionElimination, DeadCodeElimination, \
    Pipeline, WindowLoops
from tests.frontend_util import quiet

RNG = np.random.default_rng(3030)


def _f(dtype, *shape):
    return RNG.random(shape).astype(dtype)


def _compiled(fn, *args, rtol):
    """The function under nbxla.jit (CPU) and eager NumPy on copies of the arguments: the
    results agree; returns the compilation."""
    jitted = nbxla.jit(fn)
    with quiet():
        got = jitted(*copy.deepcopy(args))
    want = fn(*copy.deepcopy(args))
    assert np.asarray(got).dtype == np.asarray(want).dtype
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol)
    return jitted.last_compilation


def _pass_agrees_with_evaluator(compilation, args):
    """The traced module before and after simplification and the window pass evaluate alike;
    returns whether the pass changed it."""
    before = clone_module(compilation.hlo)
    pipeline = Pipeline([AlgebraicSimplifier(), CommonSubexpressionElimination(), WindowLoops(),
                         DeadCodeElimination()])
    result = pipeline.run(before)
    want = flatten(evaluate(before, list(args)))
    got = flatten(evaluate(result.module, list(args)))
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    return any(r.changed for r in result.history if r.name == "window-loops")


def _ops(compilation) -> str:
    return compilation.stage("optimized_hlo")


# ---- recognized: one convolution ---------------------------------------------------------------

def conv_stride2_weights_first(x, w):
    K = w.shape[0]
    H, W = (x.shape[1] - K) // 2 + 1, (x.shape[2] - K) // 2 + 1
    out = np.zeros((x.shape[0], H, W, w.shape[3]), x.dtype)
    for i in range(H):
        for j in range(W):
            out[:, i, j, :] = np.sum(w[None] * x[:, 2 * i:2 * i + K, 2 * j:2 * j + K, :, None], axis=(1, 2, 3))
    return out


def conv_one_image_no_channels(x, w):
    """No batch and no input-feature dimension; the output features first."""
    K = w.shape[1]
    out = np.zeros((w.shape[0], x.shape[0] - K + 1, x.shape[1] - K + 1), x.dtype)
    for i in range(x.shape[0] - K + 1):
        for j in range(x.shape[1] - K + 1):
            out[:, i, j] = np.sum(x[None, i:i + K, j:j + K] * w, axis=(1, 2))
    return out


def conv_interior_of_ones(x, w):
    """The loops cover the interior only: the border keeps np.ones' value."""
    K = w.shape[0]
    out = np.ones((x.shape[0], x.shape[1], x.shape[2], w.shape[3]), x.dtype)
    for i in range(1, x.shape[1] - K + 1):
        for j in range(x.shape[2] - K + 1):
            out[:, i, j, :] = np.sum(x[:, i - 1:i - 1 + K, j:j + K, :, None] * w[None], axis=(1, 2, 3))
    return out


@pytest.mark.parametrize("fn, x_shape, w_shape, dtype", [
    (examples.conv2d, (2, 9, 8, 3), (3, 3, 3, 5), np.float32),
    (examples.conv2d, (2, 7, 8, 2), (2, 2, 2, 3), np.float64),      # (f64 sums into np.float32 output)
    (conv_stride2_weights_first, (2, 11, 9, 2), (3, 3, 2, 4), np.float64),
    (conv_one_image_no_channels, (9, 7), (4, 3, 3), np.float64),
    (conv_interior_of_ones, (3, 8, 9, 2), (3, 3, 2, 4), np.float32),
])
def test_window_times_weights_loops_are_one_convolution(fn, x_shape, w_shape, dtype):
    x, w = _f(dtype, *x_shape), _f(dtype, *w_shape)
    rtol = 1e-4 if dtype == np.float32 or fn is examples.conv2d else 1e-10
    compilation = _compiled(fn, x, w, rtol=rtol)
    text = _ops(compilation)
    assert " while(" not in text and text.count(" convolution(") == 1, text
    assert _pass_agrees_with_evaluator(compilation, (x, w))


# ---- recognized: one reduce-window -------------------------------------------------------------

def min_pool_3x2_stride_2x1(x):
    out = np.empty((x.shape[0], (x.shape[1] - 3) // 2 + 1, x.shape[2] - 1), x.dtype)
    for i in range(out.shape[1]):
        for j in range(out.shape[2]):
            out[:, i, j] = np.min(x[:, 2 * i:2 * i + 3, j:j + 2], axis=(1, 2))
    return out


def moving_sum_1d(x):
    out = np.zeros(x.shape[0] - 4)
    for i in range(x.shape[0] - 4):
        out[i] = np.sum(x[i:i + 5])
    return out


@pytest.mark.parametrize("fn, shape", [(examples.maxpool2d, (2, 8, 6, 3)), (min_pool_3x2_stride_2x1, (2, 9, 7)),
                                       (moving_sum_1d, (23,))])
def test_window_reduction_loops_are_one_reduce_window(fn, shape):
    x = _f(np.float64, *shape)
    compilation = _compiled(fn, x, rtol=1e-12)
    text = _ops(compilation)
    assert " while(" not in text and text.count(" reduce-window(") == 1, text
    assert _pass_agrees_with_evaluator(compilation, (x,))


def test_integer_max_pool_is_a_reduce_window():
    x = RNG.integers(-50, 50, (2, 6, 8, 3)).astype(np.int32)
    compilation = _compiled(examples.maxpool2d, x, rtol=0)
    assert " reduce-window(" in _ops(compilation)


# ---- recognized: elementwise ops after the reduction (applied to the whole result) -------------

def conv_bias_relu_in_the_body(x, w, b):
    K = w.shape[0]
    out = np.zeros((x.shape[0], x.shape[1] - K + 1, w.shape[2]))
    for i in range(x.shape[1] - K + 1):
        out[:, i, :] = np.maximum(np.sum(x[:, i:i + K, :, None] * w[None], axis=(1, 2)) + b, 0.0)
    return out


def mean_pool(x):
    out = np.zeros((x.shape[0] // 2, x.shape[1] // 2))
    for i in range(x.shape[0] // 2):
        for j in range(x.shape[1] // 2):
            out[i, j] = np.mean(x[2 * i:2 * i + 2, 2 * j:2 * j + 2])
    return out


@pytest.mark.parametrize("fn, args, op", [
    (conv_bias_relu_in_the_body,
     lambda: (_f(np.float64, 2, 9, 3) - 0.5, _f(np.float64, 3, 3, 4), _f(np.float64, 4) - 0.5), " convolution("),
    (mean_pool, lambda: (_f(np.float64, 8, 10),), " reduce-window("),
])
def test_elementwise_ops_after_the_reduction_apply_to_the_whole_result(fn, args, op):
    args = args()
    compilation = _compiled(fn, *args, rtol=1e-10)
    text = _ops(compilation)
    assert " while(" not in text and text.count(op) == 1, text
    assert _pass_agrees_with_evaluator(compilation, args)


# ---- just outside: the loop stays, and agrees with NumPy ---------------------------------------

def window_sum_scaled_by_the_index(x):
    """The op after the reduction reads the counter: not the same op at every position."""
    out = np.zeros(x.shape[0] - 2)
    for i in range(x.shape[0] - 2):
        out[i] = np.sum(x[i:i + 3]) * i
    return out


def running_window_reads_out(x):
    out = np.zeros(x.shape[0] - 2)
    for i in range(1, x.shape[0] - 2):
        out[i] = out[i - 1] + np.sum(x[i:i + 3])
    return out


def window_stride_not_the_step(x):
    """The output moves by 2 per step: positions the loop skips keep their value."""
    out = np.zeros(2 * (x.shape[0] - 3))
    for i in range(x.shape[0] - 3):
        out[2 * i] = np.max(x[i:i + 3])
    return out


def integer_conv(x, w):
    K = w.shape[0]
    out = np.zeros((x.shape[0], x.shape[1] - K + 1, w.shape[2]), x.dtype)
    for i in range(x.shape[1] - K + 1):
        out[:, i, :] = np.sum(x[:, i:i + K, :, None] * w[None], axis=(1, 2))
    return out


@pytest.mark.parametrize("fn, args", [
    (window_sum_scaled_by_the_index, lambda: (_f(np.float64, 13),)),
    (running_window_reads_out, lambda: (_f(np.float64, 14),)),
    (window_stride_not_the_step, lambda: (_f(np.float64, 12),)),
    (integer_conv, lambda: (RNG.integers(-9, 9, (2, 9, 3)), RNG.integers(-9, 9, (3, 3, 4)))),
])
def test_near_misses_stay_loops_and_agree(fn, args):
    args = args()
    compilation = _compiled(fn, *args, rtol=1e-10)
    text = _ops(compilation)
    assert " while(" in text and " convolution(" not in text and " reduce-window(" not in text, text
    assert not _pass_agrees_with_evaluator(compilation, args)


# ---- HLO-level: windows that the dynamic-slice would clamp -------------------------------------

WINDOW_LOOP = """HloModule window_sums

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

cond {
  p = (s64[], f32[10], f32[TRIPS]) parameter(0)
  i = s64[] get-tuple-element(p), index=0
  n = s64[] constant(TRIPS)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  p = (s64[], f32[10], f32[TRIPS]) parameter(0)
  i = s64[] get-tuple-element(p), index=0
  x = f32[10] get-tuple-element(p), index=1
  out = f32[TRIPS] get-tuple-element(p), index=2
  window = f32[4] dynamic-slice(x, i), dynamic_slice_sizes={4}
  zero = f32[] constant(0)
  s = f32[] reduce(window, zero), dimensions={0}, to_apply=add
  u = f32[1] reshape(s)
  new = f32[TRIPS] dynamic-update-slice(out, u, i)
  one = s64[] constant(1)
  next = s64[] add(i, one)
  ROOT t = (s64[], f32[10], f32[TRIPS]) tuple(next, x, new)
}

ENTRY main {
  x = f32[10] parameter(0)
  zero = f32[] constant(0)
  out = f32[TRIPS] broadcast(zero), dimensions={}
  start = s64[] constant(0)
  init = (s64[], f32[10], f32[TRIPS]) tuple(start, x, out)
  loop = (s64[], f32[10], f32[TRIPS]) while(init), condition=cond, body=body
  ROOT r = f32[TRIPS] get-tuple-element(loop), index=2
}
"""


@pytest.mark.parametrize("trips, rewritten", [(7, True), (8, False)])
def test_a_window_the_slice_would_clamp_is_left_alone(trips, rewritten):
    """7 windows of 4 fit in 10 elements; with 8 the last start (7) is clamped to 6 by
    dynamic-slice: not a plain window, so the loop stays (both evaluate alike)."""
    module = parse_hlo(WINDOW_LOOP.replace("TRIPS", str(trips)))
    x = RNG.random(10).astype(np.float32)
    want = flatten(evaluate(module, [x]))
    result = Pipeline([WindowLoops(), DeadCodeElimination()]).run(clone_module(module))
    got = flatten(evaluate(result.module, [x]))
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    assert result.history[0].changed == rewritten
    ops = {i.opcode for i in result.module.instructions()}
    assert ("reduce-window" in ops) == rewritten and ("while" in ops) != rewritten
