"""Recomputation inside a kernel is a cost comparison (``fusion_model.cost_reason``): a value
read at n index maps is evaluated n times, which costs (n - 1) x its flops more; keeping it out
costs writing it and reading it back (``traffic_flops``: 2 x element bytes x FLOPS_PER_BYTE).
Both sides of that comparison, for cheap and expensive values and two element sizes, and the
stencil that motivated it (gt4py's horizontal diffusion) as one kernel."""

import numpy as np
import pytest

from nbxla.frontend.trace import trace, tree_flatten
from nbxla.hlo.evaluator import evaluate, flatten
from nbxla.passes import optimize, verify_module
from nbxla.passes.fusion_model import (EXPENSIVE_FLOPS, FLOPS_PER_BYTE, MAX_MAPS, SCALAR_RECOMPUTE_LIMIT,
                                     TRANSCENDENTAL_REUSE)
from nbxla.testing import compare_arrays


def optimized(fn, *args):
    """The optimized module, its results checked against the evaluator on the traced one."""
    leaves, treedef = tree_flatten((args, {}))
    module = trace(fn, leaves, treedef, name=fn.__name__).module
    result = optimize(module)
    verify_module(result.module)
    want, got = flatten(evaluate(module, list(args))), flatten(evaluate(result.module, list(args)))
    for g, w in zip(got, want):
        ok, detail = compare_arrays(g, w)
        assert ok, detail
    return result


def fusions(result):
    return [i for i in result.module.entry.instructions if i.opcode == "fusion"]


def shifted_sum(value_of, n):
    """``sum_k v[k : k + m]`` for ``v = value_of(x, y)``: ``v`` is read at n offsets."""
    def f(x, y):
        v = value_of(x, y)
        m = x.shape[0] - n + 1
        total = v[0:m]
        for k in range(1, n):
            total = total + v[k:k + m]
        return total
    return f


def _budget(dtype, flops):
    """The most positions a value of ``flops`` per evaluation may be read at in one kernel."""
    return FLOPS_PER_BYTE * 2 * np.dtype(dtype).itemsize // flops + 1


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_cheap_value_is_recomputed_up_to_its_traffic_and_kept_out_past_it(dtype):
    n = _budget(dtype, 1)            # a multiply: one flop per evaluation
    assert n <= MAX_MAPS
    x = np.random.default_rng(0).uniform(size=80).astype(dtype)
    y = np.random.default_rng(1).uniform(size=80).astype(dtype)
    inside = optimized(shifted_sum(lambda x, y: x * y, n), x, y)
    assert len(fusions(inside)) == 1, "at the budget the product is recomputed at every offset"
    outside = optimized(shifted_sum(lambda x, y: x * y, n + 1), x, y)
    assert len(fusions(outside)) == 2, "one offset past the budget the product is written once"
    assert any("multiply would be recomputed" in r.reason for r in outside.facts["fusion"].refusals)


def test_an_expensive_value_is_recomputed_at_few_positions_only():
    n = _budget(np.float64, EXPENSIVE_FLOPS)       # exp: 3 positions of f64
    assert n >= 2
    x = np.random.default_rng(2).uniform(size=64)
    inside = optimized(shifted_sum(lambda x, y: np.exp(x) * y, n), x, x + 1)
    outside = optimized(shifted_sum(lambda x, y: np.exp(x) * y, n + 1), x, x + 1)
    assert len(fusions(inside)) == 1
    assert len(fusions(outside)) >= 2
    assert any(r.reason.startswith("exponential would be recomputed") for r in outside.facts["fusion"].refusals)


def test_paths_to_the_same_neighbour_count_once():
    """``d[1:] - d[:-1]`` of ``d = v[1:] - v[:-1]`` reads v at offsets 0, 1, 2 (three), not at
    four paths: a budget of 3 positions for an exp is enough."""
    def second_difference(x):
        v = np.exp(x)
        d = v[1:] - v[:-1]
        return d[1:] - d[:-1]
    x = np.random.default_rng(3).uniform(size=50)
    assert _budget(np.float64, EXPENSIVE_FLOPS) >= 3
    assert len(fusions(optimized(second_difference, x))) == 1


def hdiff(in_field, coeff):
    """gt4py's horizontal diffusion (npbench's NumPy version), returning ``out_field``."""
    I, J = coeff.shape[0], coeff.shape[1]
    lap_field = 4.0 * in_field[1:I + 3, 1:J + 3, :] - (
        in_field[2:I + 4, 1:J + 3, :] + in_field[0:I + 2, 1:J + 3, :] +
        in_field[1:I + 3, 2:J + 4, :] + in_field[1:I + 3, 0:J + 2, :])
    res = lap_field[1:, 1:J + 1, :] - lap_field[:-1, 1:J + 1, :]
    flx_field = np.where((res * (in_field[2:I + 3, 2:J + 2, :] - in_field[1:I + 2, 2:J + 2, :])) > 0, 0, res)
    res = lap_field[1:I + 1, 1:, :] - lap_field[1:I + 1, :-1, :]
    fly_field = np.where((res * (in_field[2:I + 2, 2:J + 3, :] - in_field[2:I + 2, 1:J + 2, :])) > 0, 0, res)
    return in_field[2:I + 2, 2:J + 2, :] - coeff * (
        flx_field[1:, :, :] - flx_field[:-1, :, :] + fly_field[:, 1:, :] - fly_field[:, :-1, :])


def test_horizontal_diffusion_is_one_kernel():
    """The Laplacian (5 flops) is recomputed at its neighbours rather than written and read back
    (the count limit of 8 positions split it into 4 kernels, two of them copies of slices)."""
    g = np.random.default_rng(4)
    in_field, coeff = g.uniform(size=(12, 11, 5)), g.uniform(size=(8, 7, 5))
    result = optimized(hdiff, in_field, coeff)
    assert len(fusions(result)) == 1


@pytest.mark.parametrize("ratio", [TRANSCENDENTAL_REUSE, TRANSCENDENTAL_REUSE + 1])
def test_a_transcendental_broadcast_over_a_larger_kernel(ratio):
    """A power of 1-D levels broadcast over a grid joins the grid's kernel while each of its
    values is evaluated at most ``TRANSCENDENTAL_REUSE`` times; past that it is computed once,
    in its own kernel (both sides of the threshold, both against the evaluator)."""
    levels = SCALAR_RECOMPUTE_LIMIT + 6
    p = np.linspace(1000.0, 100.0, levels)
    t = np.random.default_rng(4).uniform(200, 300, (ratio, levels))

    def theta(t, p):
        return t * (1000.0 / p[None, :]) ** 0.2857
    result = optimized(theta, t, p)
    refused = [r for r in result.facts["fusion"].refusals if "broadcast over a larger kernel" in r.reason]
    if ratio <= TRANSCENDENTAL_REUSE:
        assert len(fusions(result)) == 1 and not refused
    else:
        assert len(fusions(result)) == 2 and refused


def test_a_function_of_a_reduced_value_stays_in_its_row_kernel():
    """(The rule leaves kernels with a reduction alone: log of a row sum, read across the row,
    is evaluated per row inside the row kernel.)"""
    x = np.random.default_rng(5).uniform(1, 2, (8, 200))
    result = optimized(lambda x: x - np.log(np.sum(np.exp(x), axis=1, keepdims=True)), x)
    assert not [r for r in result.facts["fusion"].refusals if "broadcast over a larger kernel" in r.reason]
