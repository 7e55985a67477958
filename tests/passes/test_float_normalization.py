"""bf16 ops that apply a called computation step by step (reduce-window, scatter,
select-and-scatter, sort, custom and variadic reduces) get their f32 form before fusion
(passes/float_normalization.py), as XLA:CPU's FloatNormalization gives them: they then run in
the f32 kernels and library calls, nothing on the evaluator, bit for bit the evaluator's
results (which compute the narrow op as that very f32 form)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from nbxla.hlo.parser import parse_hlo
from nbxla.passes import optimize
from nbxla.passes.float_normalization import FloatNormalization, needs_f32_form

from tests.codegen.test_bf16 import run

BF16 = ml_dtypes.bfloat16
RNG = np.random.default_rng(11)

REDUCERS = """
add {{ a = {t}[] parameter(0)  b = {t}[] parameter(1)  ROOT s = {t}[] add(a, b) }}
max {{ a = {t}[] parameter(0)  b = {t}[] parameter(1)  ROOT s = {t}[] maximum(a, b) }}
ge {{ a = {t}[] parameter(0)  b = {t}[] parameter(1)  ROOT c = pred[] compare(a, b), direction=GE }}
lt {{ a = {t}[] parameter(0)  b = {t}[] parameter(1)  c = s32[] parameter(2)  d = s32[] parameter(3)
      ROOT r = pred[] compare(a, b), direction=LT }}
"""

POOLS = """
HloModule pools
{reducers}
ENTRY e {{
  x = {t}[2,8,8,4] parameter(0)
  z = {t}[] constant(0)
  ninf = {t}[] constant(-inf)
  s = {t}[2,4,4,4] reduce-window(x, z), window={{size=1x2x2x1 stride=1x2x2x1}}, to_apply=add
  m = {t}[2,4,4,4] reduce-window(x, ninf), window={{size=1x3x3x1 stride=1x2x2x1 pad=0_0x1_1x1_1x0_0}}, to_apply=max
  c = {t}[2,8,8,4] reduce-window(x, z), window={{size=1x8x1x1 pad=0_0x7_0x0_0x0_0}}, to_apply=add
  ROOT t = ({t}[2,4,4,4], {t}[2,4,4,4], {t}[2,8,8,4]) tuple(s, m, c)
}}
"""

SCATTER = """
HloModule segment_sum
{reducers}
ENTRY e {{
  x = {t}[16,8] parameter(0)
  i = s32[40,1] parameter(1)
  u = {t}[40,8] parameter(2)
  ROOT s = {t}[16,8] scatter(x, i, u), update_window_dims={{1}}, inserted_window_dims={{0}},
      scatter_dims_to_operand_dims={{0}}, index_vector_dim=1, to_apply=add
}}
"""

SORT = """
HloModule argsort
{reducers}
ENTRY e {{
  x = {t}[4,32] parameter(0)
  i = s32[4,32] iota(), iota_dimension=1
  ROOT s = ({t}[4,32], s32[4,32]) sort(x, i), dimensions={{1}}, is_stable=true, to_apply=lt
}}
"""

MAXPOOL_GRAD = """
HloModule maxpool_grad
{reducers}
ENTRY e {{
  x = {t}[2,8,8,3] parameter(0)
  g = {t}[2,4,4,3] parameter(1)
  z = {t}[] constant(0)
  ROOT s = {t}[2,8,8,3] select-and-scatter(x, g, z), window={{size=1x2x2x1 stride=1x2x2x1}}, select=ge, scatter=add
}}
"""

ARGMAX = """
HloModule argmax
am {{
  a = {t}[] parameter(0)  ai = s32[] parameter(1)  b = {t}[] parameter(2)  bi = s32[] parameter(3)
  gt = pred[] compare(a, b), direction=GT
  eq = pred[] compare(a, b), direction=EQ
  lt = pred[] compare(ai, bi), direction=LT
  tie = pred[] and(eq, lt)
  pick = pred[] or(gt, tie)
  v = {t}[] select(pick, a, b)
  k = s32[] select(pick, ai, bi)
  ROOT r = ({t}[], s32[]) tuple(v, k)
}}
ENTRY e {{
  x = {t}[6,33] parameter(0)
  i = s32[6,33] iota(), iota_dimension=1
  ninf = {t}[] constant(-inf)
  z = s32[] constant(0)
  r = ({t}[6], s32[6]) reduce(x, i, ninf, z), dimensions={{1}}, to_apply=am
  v = {t}[6] get-tuple-element(r), index=0
  k = s32[6] get-tuple-element(r), index=1
  ROOT t = ({t}[6], s32[6]) tuple(v, k)
}}
"""


def module_text(template: str, t: str) -> str:
    return template.format(reducers=REDUCERS.format(t=t), t=t)


def inputs_for(text: str) -> list:
    out = []
    for p in parse_hlo(text).entry.parameters:
        dt = p.shape.dtype
        if dt.kind == "i":
            out.append(RNG.integers(0, 16, p.shape.dims).astype(dt))
        else:
            out.append(RNG.standard_normal(p.shape.dims).astype(np.float32).astype(dt))
    return out


@pytest.mark.parametrize("template", [POOLS, SCATTER, SORT, MAXPOOL_GRAD, ARGMAX],
                         ids=["pools", "scatter", "sort", "maxpool_grad", "argmax"])
@pytest.mark.parametrize("t", ["bf16", "f16"])
def test_stepwise_narrow_ops_run_natively(template, t):
    text = module_text(template, t)
    run(text, inputs_for(text), native=True)


def test_the_f32_form_replaces_the_bf16_op():
    text = module_text(POOLS, "bf16")
    module = parse_hlo(text)
    windows = [i for i in module.entry.instructions if i.opcode == "reduce-window"]
    assert all(needs_f32_form(i) for i in windows)
    assert FloatNormalization().run(module)
    windows = [i for i in module.entry.instructions if i.opcode == "reduce-window"]
    assert windows and all(i.shape.element_type == "f32" for i in windows)
    assert all(i.attrs["to_apply"].root.shape.element_type == "f32" for i in windows)
    assert all(i.operands[0].opcode == "convert" for i in windows)
    # (the result keeps its type and name: users and the root see it unchanged)
    assert module.entry.root.shape == parse_hlo(text).entry.root.shape
    assert not FloatNormalization().run(module)         # nothing left to rewrite
    optimize(module)                                     # and the optimizer takes it


def test_f16_and_f32_ops_are_left_alone():
    for t in ("f16", "f32"):
        module = parse_hlo(module_text(SCATTER, t))
        assert not FloatNormalization().run(module)


LOOP = """
HloModule loop_of_bf16_scatters
add {
  a = bf16[] parameter(0)
  b = bf16[] parameter(1)
  ROOT s = bf16[] add(a, b)
}
cond {
  p = (s32[], bf16[8,4], s32[6,1], bf16[6,4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  p = (s32[], bf16[8,4], s32[6,1], bf16[6,4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  acc = bf16[8,4] get-tuple-element(p), index=1
  idx = s32[6,1] get-tuple-element(p), index=2
  upd = bf16[6,4] get-tuple-element(p), index=3
  one = s32[] constant(1)
  next = s32[] add(i, one)
  sum = bf16[8,4] scatter(acc, idx, upd), update_window_dims={1}, inserted_window_dims={0},
      scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add
  ROOT t = (s32[], bf16[8,4], s32[6,1], bf16[6,4]) tuple(next, sum, idx, upd)
}
ENTRY e {
  x = bf16[8,4] parameter(0)
  idx = s32[6,1] parameter(1)
  upd = bf16[6,4] parameter(2)
  zero = s32[] constant(0)
  init = (s32[], bf16[8,4], s32[6,1], bf16[6,4]) tuple(zero, x, idx, upd)
  w = (s32[], bf16[8,4], s32[6,1], bf16[6,4]) while(init), condition=cond, body=body
  ROOT r = bf16[8,4] get-tuple-element(w), index=1
}
"""


def test_ops_inside_loop_bodies_get_their_f32_form():
    """(a bf16 scatter in a while body: each iteration rounds once, as the evaluator does)"""
    module = parse_hlo(LOOP)
    assert FloatNormalization().run(module)
    body = next(c for c in module.computations if c.name == "body")
    assert [i.shape.element_type for i in body.instructions if i.opcode == "scatter"] == ["f32"]
    run(LOOP, inputs_for(LOOP), native=True)


# ---- dots on bf16 / f8: an f32 dot between converts ------------------------------------------

DOTS = {
    "bf16": """
HloModule bf16_dot
ENTRY e {
  x = bf16[24,40] parameter(0)
  w = bf16[40,16] parameter(1)
  ROOT d = bf16[24,16] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
""",
    "bf16_to_f32": """
HloModule bf16_dot_f32_result
ENTRY e {
  x = bf16[3,24,40] parameter(0)
  w = bf16[3,16,40] parameter(1)
  ROOT d = f32[3,24,16] dot(x, w), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={2}
}
""",
    "f8": """
HloModule f8_dot
ENTRY e {
  x = f8e4m3fn[24,40] parameter(0)
  w = f8e4m3fn[40,16] parameter(1)
  ROOT d = f32[24,16] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
""",
    "epilogue": """
HloModule bf16_dense_gelu
fused (p0: bf16[24,40], p1: bf16[40,16], p2: bf16[16]) -> bf16[24,16] {
  p0 = bf16[24,40] parameter(0)
  p1 = bf16[40,16] parameter(1)
  dot = bf16[24,16] dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  p2 = bf16[16] parameter(2)
  bias = bf16[24,16] broadcast(p2), dimensions={1}
  add = bf16[24,16] add(dot, bias)
  ROOT t = bf16[24,16] tanh(add)
}
ENTRY e {
  x = bf16[24,40] parameter(0)
  w = bf16[40,16] parameter(1)
  b = bf16[16] parameter(2)
  ROOT f = bf16[24,16] fusion(x, w, b), kind=kOutput, calls=fused
}
""",
}


@pytest.mark.parametrize("name", sorted(DOTS))
def test_narrow_dots_compute_as_f32_dots_between_converts(name):
    """Every dot after the rewrite is on f32 operands with an f32 result, its narrow operands
    converted up and its narrow result converted down (the evaluator's own form of the
    narrow dot), and the compiled module gives the evaluator's bits."""
    text = DOTS[name]
    module = parse_hlo(text)
    assert all(needs_f32_form(i) for c in module.computations for i in c.instructions if i.opcode == "dot")
    assert FloatNormalization().run(module)
    dots = [i for c in module.computations for i in c.instructions if i.opcode == "dot"]
    assert dots
    for dot in dots:
        assert dot.shape.element_type == "f32"
        assert [o.shape.element_type for o in dot.operands] == ["f32", "f32"]
    assert not FloatNormalization().run(module)
    run(text, inputs_for(text), native=True)


def test_f32_and_f16_dots_are_left_alone():
    for t in ("f32", "f16"):
        module = parse_hlo(DOTS["bf16"].replace("bf16", t))
        assert not FloatNormalization().run(module)


def test_one_convert_of_an_operand_read_by_several_dots():
    """q, k and v projections of the same bf16 tokens read one f32 copy of them."""
    text = """
HloModule qkv
ENTRY e {
  x = bf16[16,32] parameter(0)
  wq = bf16[32,8] parameter(1)
  wk = bf16[32,8] parameter(2)
  q = bf16[16,8] dot(x, wq), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  k = bf16[16,8] dot(x, wk), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT t = (bf16[16,8], bf16[16,8]) tuple(q, k)
}
"""
    module = parse_hlo(text)
    assert FloatNormalization().run(module)
    converts_of_x = [i for i in module.entry.instructions
                     if i.opcode == "convert" and i.operands[0].name == "x"]
    assert len(converts_of_x) == 1
    dots = [i for i in module.entry.instructions if i.opcode == "dot"]
    assert len(dots) == 2 and all(d.operands[0] is converts_of_x[0] for d in dots)
    run(text, inputs_for(text), native=True)
