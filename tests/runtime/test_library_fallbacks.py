"""Ops that ran on the reference evaluator and now run as library calls or kernels of the CPU
runtime: integer and f16 convolutions (dense, strided, grouped, depthwise), FFTs, LAPACK
custom calls, random bits, variadic and custom reduce-windows.  Each runs with nothing on the
evaluator and gives the evaluator's results (integers bit for bit, floats within their type's
tolerance)."""

from __future__ import annotations

import numpy as np
import pytest

from nbxla.compiler import compile_module
from nbxla.hlo.evaluator import evaluate, flatten
from nbxla.hlo.parser import parse_hlo
from nbxla.testing import compare_arrays

RNG = np.random.default_rng(3)


def run_natively(text: str, inputs: list) -> list:
    """CPU results, checked against the evaluator's, with no instruction on the evaluator."""
    executable = compile_module(parse_hlo(text), "cpu").executable
    interpreted = {**executable.native.interpreted, **executable.native.interpreted_ops}
    assert not interpreted, interpreted
    got = executable.run(inputs)
    with np.errstate(all="ignore"):
        want = flatten(evaluate(parse_hlo(text), inputs))
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, (k, g.dtype, w.dtype, g.shape, w.shape)
        if w.dtype.kind in "iub":
            assert np.array_equal(g, w), f"output {k}"
        else:
            ok, detail = compare_arrays(g, w)
            assert ok, f"output {k}: {detail}"
    return got


def random_inputs(text: str, high: int = 8) -> list:
    out = []
    for p in parse_hlo(text).entry.parameters:
        dt = p.shape.dtype
        if dt.kind in "iu":
            lo = -high if dt.kind == "i" else 0
            out.append(RNG.integers(lo, high, p.shape.dims).astype(dt))
        elif dt.kind == "c":
            out.append((RNG.standard_normal(p.shape.dims) + 1j * RNG.standard_normal(p.shape.dims)).astype(dt))
        else:
            out.append(RNG.standard_normal(p.shape.dims).astype(dt))
    return out


CONVOLUTIONS = """
HloModule convolutions
ENTRY e {{
  x = {t}[2,9,9,6] parameter(0)
  w = {t}[3,3,6,8] parameter(1)
  d = {t}[3,3,1,6] parameter(2)
  g = {t}[3,3,2,6] parameter(3)
  dense = {r}[2,5,5,8] convolution(x, w), window={{size=3x3 stride=2x2 pad=1_1x1_1}}, dim_labels=b01f_01io->b01f
  depthwise = {r}[2,9,9,6] convolution(x, d), window={{size=3x3 pad=1_1x1_1}}, dim_labels=b01f_01io->b01f, feature_group_count=6
  grouped = {r}[2,7,7,6] convolution(x, g), window={{size=3x3}}, dim_labels=b01f_01io->b01f, feature_group_count=3
  ROOT t = ({r}[2,5,5,8], {r}[2,9,9,6], {r}[2,7,7,6]) tuple(dense, depthwise, grouped)
}}
"""


@pytest.mark.parametrize("t, r", [("s32", "s32"), ("s8", "s8"), ("s8", "s32"), ("u8", "u16"), ("s64", "s64"),
                                  ("f16", "f16"), ("f16", "f32")])
def test_integer_and_f16_convolutions(t, r):
    text = CONVOLUTIONS.format(t=t, r=r)
    # (s8 sums of 54 products of numbers up to 100 wrap: wrapping must match too)
    run_natively(text, random_inputs(text, high=100 if t == "s8" else 8))


def test_f16_convolution_is_computed_in_f32_and_rounded_once():
    text = CONVOLUTIONS.format(t="f16", r="f16")
    ins = random_inputs(text)
    got = run_natively(text, ins)
    wide = [x.astype(np.float32) for x in ins]
    exact = flatten(evaluate(parse_hlo(CONVOLUTIONS.format(t="f32", r="f32")), wide))
    for g, e in zip(got, exact):
        assert np.array_equal(g, e.astype(np.float16))
