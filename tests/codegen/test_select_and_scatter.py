"""select-and-scatter (max pooling's gradient) as a native kernel (codegen/select_scatter.py),
bit for bit as the evaluator computes it: overlapping windows, strides, padding (never
picked), base and window dilation, ties (the first in window order wins under GE), NaNs, a
min-pool select and a scatter other than add."""

from __future__ import annotations

import numpy as np
import pytest

from nbxla.compiler import compile_module
from nbxla.hlo.evaluator import evaluate, flatten
from nbxla.hlo.parser import parse_hlo

from tests.codegen.test_cpu import assert_bitwise
from tests.codegen.test_fused_dots import assert_no_evaluator_steps

RNG = np.random.default_rng(9)


def module(operand, source, window: str, direction="GE", scatter="add") -> str:
    O, S = f"f32[{','.join(map(str, operand))}]", f"f32[{','.join(map(str, source))}]"
    return f"""HloModule sas
%select (a: f32[], b: f32[]) -> pred[] {{
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %c = pred[] compare(%a, %b), direction={direction}
}}
%scatter (a: f32[], b: f32[]) -> f32[] {{
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] {scatter}(%a, %b)
}}
ENTRY %main (x: {O}, g: {S}, i: f32[]) -> {O} {{
  %x = {O} parameter(0)
  %g = {S} parameter(1)
  %i = f32[] parameter(2)
  ROOT %r = {O} select-and-scatter(%x, %g, %i), window={{{window}}}, select=%select, scatter=%scatter
}}
"""


CASES = [
    # (operand, source, window, direction, scatter)
    ((8, 6), (4, 3), "size=2x2 stride=2x2", "GE", "add"),                       # max pool 2x2
    ((9, 7), (4, 5), "size=3x3 stride=2x1", "GE", "add"),                       # overlapping
    ((7, 5), (4, 5), "size=3x3 stride=2x1 pad=1_1x1_1", "GE", "add"),           # padding never picked
    ((2, 6, 4, 2), (2, 3, 2, 2), "size=1x2x2x1 stride=1x2x2x1", "GE", "add"),   # NHWC max pool
    ((6, 6), (3, 3), "size=2x2 stride=2x2", "LE", "add"),                       # min pool
    ((6, 6), (5, 5), "size=2x2 stride=1x1", "GE", "maximum"),                   # another scatter
    ((5, 5), (2, 2), "size=2x2 stride=2x2 rhs_dilate=2x2", "GE", "add"),        # window dilation
    ((3, 4), (5, 4), "size=2x2 stride=1x1 pad=0_1x0_1 lhs_dilate=2x1", "GE", "add"),  # base dilation
]


@pytest.mark.parametrize("operand, source, window, direction, scatter", CASES)
def test_select_and_scatter(operand, source, window, direction, scatter):
    text = module(operand, source, window, direction, scatter)
    x = RNG.integers(-3, 4, operand).astype(np.float32)          # small integers: many ties
    x.reshape(-1)[::11] = np.nan
    g = RNG.standard_normal(source).astype(np.float32)
    inputs = [x, g, np.float32(0.5)]
    comp = compile_module(parse_hlo(text), "cpu")
    assert_no_evaluator_steps(comp.executable.native)
    got = comp.executable.run(inputs)[0]
    want = flatten(evaluate(parse_hlo(text), inputs))[0]
    assert_bitwise(got, want, window)
