"""f8e4m3fn / f8e5m2 in native kernels (codegen/f8.py): conversions bit for bit as ml_dtypes
(the evaluator's) on every f8 pattern, on the ties between neighbouring f8 values and just
beside them, on subnormals, overflow, infinities and NaNs; arithmetic in f32 rounded once per
op, bit for bit the evaluator's; nothing on the evaluator."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from tests.codegen.test_bf16 import run
from tests.codegen.test_cpu import assert_bitwise

TYPES = {"f8e4m3fn": ml_dtypes.float8_e4m3fn, "f8e5m2": ml_dtypes.float8_e5m2}


def hard_f32_values() -> np.ndarray:
    """Every f8 value of both formats, the midpoints between neighbours (ties), one f32 ulp on
    either side of each, specials, and random values over the whole range."""
    values = [np.float32(x) for x in (0.0, -0.0, np.inf, -np.inf, np.nan, 1e30, -1e30, 1e-30, 448, 464, 465,
                                      480, 57344, 61440, 61439, 65536, 2.0 ** -10, 2.0 ** -17, 2.0 ** -16)]
    for dtype in TYPES.values():
        finite = np.arange(256, dtype=np.uint8).view(dtype).astype(np.float32)
        finite = np.unique(finite[np.isfinite(finite)])
        mids = ((finite[:-1].astype(np.float64) + finite[1:]) / 2).astype(np.float32)
        for v in (finite, mids):
            values += list(v) + list(np.nextafter(v, np.float32(np.inf))) + list(np.nextafter(v, np.float32(-np.inf)))
    rng = np.random.default_rng(5)
    values += list((rng.standard_normal(4000) * 10.0 ** rng.uniform(-8, 6, 4000)).astype(np.float32))
    return np.array(values, np.float32)


def test_conversions_from_f32_round_as_ml_dtypes():
    x = hard_f32_values()
    n = x.size
    text = f"""
HloModule to_f8
ENTRY e {{
  x = f32[{n}] parameter(0)
  a = f8e4m3fn[{n}] convert(x)
  b = f8e5m2[{n}] convert(x)
  h = f16[{n}] convert(x)
  c = f8e5m2[{n}] convert(h)
  ROOT t = (f8e4m3fn[{n}], f8e5m2[{n}], f8e5m2[{n}]) tuple(a, b, c)
}}"""
    (a, b, c), _ = run(text, [x])
    assert_bitwise(a.view(np.uint8), x.astype(TYPES["f8e4m3fn"]).view(np.uint8), "f32 -> e4m3fn")
    assert_bitwise(b.view(np.uint8), x.astype(TYPES["f8e5m2"]).view(np.uint8), "f32 -> e5m2")


@pytest.mark.parametrize("t", sorted(TYPES))
def test_every_f8_pattern_reads_and_writes_back_exactly(t):
    bits = np.arange(256, dtype=np.uint8).view(TYPES[t])
    text = f"""
HloModule from_{t}
ENTRY e {{
  x = {t}[256] parameter(0)
  f = f32[256] convert(x)
  i = s32[256] convert(x)
  n = {t}[256] negate(x)
  ROOT r = (f32[256], s32[256], {t}[256]) tuple(f, i, n)
}}"""
    (f, i, n), _ = run(text, [bits])
    assert_bitwise(f, bits.astype(np.float32))
    # (NaN payloads are not kept: every NaN is written as ml_dtypes writes a converted NaN)
    want = -bits
    nan = np.isnan(want.astype(np.float32))
    assert np.array_equal(np.isnan(n.astype(np.float32)), nan)
    assert_bitwise(n.view(np.uint8)[~nan], want.view(np.uint8)[~nan])


@pytest.mark.parametrize("t", sorted(TYPES))
def test_arithmetic_rounds_once_per_op(t):
    """A fused chain on f8 values: each op in f32, rounded to f8 (evaluator = ml_dtypes)."""
    rng = np.random.default_rng(9)
    x = (rng.standard_normal(512) * 4).astype(np.float32).astype(TYPES[t])
    y = (rng.standard_normal(512) * 4).astype(np.float32).astype(TYPES[t])
    text = f"""
HloModule chain_{t}
ENTRY e {{
  x = {t}[512] parameter(0)
  y = {t}[512] parameter(1)
  m = {t}[512] multiply(x, y)
  s = {t}[512] add(m, x)
  e = {t}[512] exponential(y)
  d = {t}[512] divide(s, e)
  w = bf16[512] convert(d)
  q = bf16[512] multiply(w, w)
  ROOT r = ({t}[512], bf16[512]) tuple(d, q)
}}"""
    (d, q), _ = run(text, [x, y])
    with np.errstate(all="ignore"):
        want = (x * y + x) / np.exp(y)
    assert_bitwise(d.view(np.uint8), want.view(np.uint8))
