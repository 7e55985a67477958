"""f16 row reductions accumulate in f32 and round once (nbxla/testing.py explains the f16
tolerance): each sum is within one f16 rounding (plus f32's own error) of the exact sum, where
an f16 accumulator (XLA:CPU's) drifts by several roundings on long rows."""

from __future__ import annotations

import numpy as np

from nbxla.compiler import compile_module
from nbxla.hlo.evaluator import evaluate, flatten
from nbxla.hlo.parser import parse_hlo
from nbxla.testing import compare_arrays

ROW_SUM = """HloModule f16_rows
%add (a: f16[], b: f16[]) -> f16[] {
  %a = f16[] parameter(0)
  %b = f16[] parameter(1)
  ROOT %s = f16[] add(%a, %b)
}
ENTRY %main (x: f16[2048,512]) -> f16[2048] {
  %x = f16[2048,512] parameter(0)
  %zero = f16[] constant(0)
  ROOT %r = f16[2048] reduce(%x, %zero), dimensions={1}, to_apply=%add
}
"""


def test_f16_row_sums_are_one_rounding_from_exact():
    x = np.random.default_rng(1).standard_normal((2048, 512)).astype(np.float16)
    comp = compile_module(parse_hlo(ROW_SUM), "cpu")
    assert not comp.executable.native.interpreted
    got = comp.executable.run([x])[0]
    exact = x.astype(np.float64).sum(axis=1)
    # one f16 rounding of the result (half an ulp: 2**-11 relative) plus f32's sum error
    bound = np.abs(exact) * 2.0 ** -11 + 512 * 2.0 ** -24 * np.abs(x.astype(np.float64)).sum(axis=1)
    assert np.all(np.abs(got.astype(np.float64) - exact) <= bound)
    ok, detail = compare_arrays(got, flatten(evaluate(parse_hlo(ROW_SUM), [x]))[0])
    assert ok, detail
