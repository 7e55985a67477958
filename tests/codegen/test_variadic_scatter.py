"""Variadic scatters (several operands and updates, a combiner over tuples) and scatters with
batching dims run natively (codegen/scatter.py), bit for bit as the evaluator computes them:
argmax-style (value, index) pairs with duplicate and out-of-bounds indices, a variadic
replace, windows, operand batching dims; and through the AOT compiler."""

from __future__ import annotations

import numpy as np

from nbxla.compiler import compile_module
from nbxla.hlo.evaluator import evaluate, flatten
from nbxla.hlo.parser import parse_hlo
from nbxla.testing import compare_arrays

from tests.aot.aot_util import build, needs_cc, run
from tests.codegen.test_cpu import assert_bitwise
from tests.codegen.test_fused_dots import MATMUL, assert_no_evaluator_steps, dot_fusion_module

RNG = np.random.default_rng(3)

ARGMAX = """
%argmax (v0: f32[], i0: s32[], v1: f32[], i1: s32[]) -> (f32[], s32[]) {
  %v0 = f32[] parameter(0)
  %i0 = s32[] parameter(1)
  %v1 = f32[] parameter(2)
  %i1 = s32[] parameter(3)
  %gt = pred[] compare(%v1, %v0), direction=GT
  %eq = pred[] compare(%v1, %v0), direction=EQ
  %lt = pred[] compare(%i1, %i0), direction=LT
  %tie = pred[] and(%eq, %lt)
  %take = pred[] or(%gt, %tie)
  %v = f32[] select(%take, %v1, %v0)
  %i = s32[] select(%take, %i1, %i0)
  ROOT %t = (f32[], s32[]) tuple(%v, %i)
}
"""


def run_native(text: str, inputs: list):
    comp = compile_module(parse_hlo(text), "cpu")
    native = comp.executable.native
    assert not native.interpreted and not native.interpreted_ops, {**native.interpreted, **native.interpreted_ops}
    assert_no_evaluator_steps(native)
    got = comp.executable.run(inputs)
    want = flatten(evaluate(parse_hlo(text), inputs))
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert_bitwise(g, w, f"output {k}")
    return got


def argmax_module(n: int, u: int) -> str:
    return f"""HloModule argmax_scatter
{ARGMAX}
ENTRY %main (values: f32[{n}], ids: s32[{n}], idx: s32[{u},1], uv: f32[{u}], ui: s32[{u}]) -> (f32[{n}], s32[{n}]) {{
  %values = f32[{n}] parameter(0)
  %ids = s32[{n}] parameter(1)
  %idx = s32[{u},1] parameter(2)
  %uv = f32[{u}] parameter(3)
  %ui = s32[{u}] parameter(4)
  ROOT %s = (f32[{n}], s32[{n}]) scatter(%values, %ids, %idx, %uv, %ui), update_window_dims={{}}, inserted_window_dims={{0}}, scatter_dims_to_operand_dims={{0}}, index_vector_dim=1, to_apply=%argmax
}}
"""


def test_argmax_scatter_with_duplicates_and_out_of_bounds_indices():
    n, u = 50, 400
    idx = RNG.integers(-3, n + 3, (u, 1)).astype(np.int32)       # some out of bounds: skipped
    uv = RNG.integers(-4, 5, u).astype(np.float32)               # many ties: the index decides
    inputs = [np.full(n, -np.inf, np.float32), np.full(n, -1, np.int32), idx, uv,
              RNG.permutation(u).astype(np.int32)]
    values, ids = run_native(argmax_module(n, u), inputs)
    # an independent check of the meaning: per target, the max value and the lowest id among ties
    for t in range(n):
        hits = [(float(v), -int(i)) for (j,), v, i in zip(idx, uv, inputs[4]) if j == t]
        if hits:
            best = max(hits)
            assert values[t] == best[0] and ids[t] == -best[1]
        else:
            assert values[t] == -np.inf and ids[t] == -1


def test_argmax_scatter_with_nan_updates():
    n, u = 8, 40
    uv = RNG.standard_normal(u).astype(np.float32)
    uv[::7] = np.nan
    inputs = [np.zeros(n, np.float32), np.zeros(n, np.int32), RNG.integers(0, n, (u, 1)).astype(np.int32),
              uv, np.arange(u, dtype=np.int32)]
    run_native(argmax_module(n, u), inputs)


def test_variadic_replace_with_windows():
    """Two operands of rows, each update a whole row (a window), the last duplicate wins."""
    text = """HloModule variadic_replace
%replace (a0: f32[], b0: s64[], a1: f32[], b1: s64[]) -> (f32[], s64[]) {
  %a0 = f32[] parameter(0)
  %b0 = s64[] parameter(1)
  %a1 = f32[] parameter(2)
  %b1 = s64[] parameter(3)
  ROOT %t = (f32[], s64[]) tuple(%a1, %b1)
}
ENTRY %main (x: f32[6,5], y: s64[6,5], idx: s32[9], ux: f32[9,5], uy: s64[9,5]) -> (f32[6,5], s64[6,5]) {
  %x = f32[6,5] parameter(0)
  %y = s64[6,5] parameter(1)
  %idx = s32[9] parameter(2)
  %ux = f32[9,5] parameter(3)
  %uy = s64[9,5] parameter(4)
  ROOT %s = (f32[6,5], s64[6,5]) scatter(%x, %y, %idx, %ux, %uy), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%replace
}
"""
    inputs = [RNG.standard_normal((6, 5)).astype(np.float32), RNG.integers(0, 9, (6, 5)),
              np.array([0, 2, 2, 5, 7, -1, 3, 0, 2], np.int32),
              RNG.standard_normal((9, 5)).astype(np.float32), RNG.integers(0, 9, (9, 5))]
    run_native(text, inputs)


def test_scatter_with_batching_dims():
    """A vmapped scatter-add (JAX's batching dims): batch b's updates land in operand row b."""
    text = """HloModule batched_scatter
%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}
ENTRY %main (x: f32[4,10], idx: s32[4,6,1], u: f32[4,6]) -> f32[4,10] {
  %x = f32[4,10] parameter(0)
  %idx = s32[4,6,1] parameter(1)
  %u = f32[4,6] parameter(2)
  ROOT %s = f32[4,10] scatter(%x, %idx, %u), update_window_dims={}, inserted_window_dims={1}, input_batching_dims={0}, scatter_indices_batching_dims={0}, scatter_dims_to_operand_dims={1}, index_vector_dim=2, to_apply=%add
}
"""
    inputs = [RNG.standard_normal((4, 10)).astype(np.float32), RNG.integers(0, 10, (4, 6, 1)).astype(np.int32),
              RNG.standard_normal((4, 6)).astype(np.float32)]
    out = run_native(text, inputs)[0]
    want = inputs[0].copy()
    for bt in range(4):
        for j in range(6):
            want[bt, inputs[1][bt, j, 0]] += inputs[2][bt, j]
    np.testing.assert_allclose(out, want, rtol=1e-6)


@needs_cc
def test_variadic_scatter_and_fused_dot_compile_ahead_of_time(tmp_path):
    """The AOT compiler takes the same kernels (it has no evaluator to fall back on): the
    argmax scatter, and a kOutput dot + bias + relu fusion."""
    n, u = 16, 64
    inputs = [np.full(n, -np.inf, np.float32), np.full(n, -1, np.int32),
              RNG.integers(0, n, (u, 1)).astype(np.int32), RNG.standard_normal(u).astype(np.float32),
              RNG.permutation(u).astype(np.int32)]
    dot_text, dot_inputs = dot_fusion_module((8, 32), (32, 16), (8, 16), MATMUL)
    for k, (text, args) in enumerate(((argmax_module(n, u), inputs), (dot_text, dot_inputs))):
        obj, exe = build(parse_hlo(text), None, tmp_path, f"m{k}")
        got = run(obj, exe, args, tmp_path)
        want = flatten(evaluate(parse_hlo(text), args))
        for g, w in zip(got, want):
            ok, detail = compare_arrays(g, np.asarray(w), atol=1e-5 if w.dtype == np.float32 else None)
            assert ok, detail
