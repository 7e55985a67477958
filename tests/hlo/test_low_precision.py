"""bf16 and f8 in the HLO layer: spelling, literals, header-less text, and the evaluator's
XLA:CPU semantics (each arithmetic op in f32, rounded once; reducers and dots in f32)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from nbxla.hlo.evaluator import evaluate, flatten
from nbxla.hlo.parser import parse_hlo
from nbxla.hlo.printer import print_module

BF16, F32 = ml_dtypes.bfloat16, np.float32
TYPES = {"bf16": BF16, "f8e4m3fn": ml_dtypes.float8_e4m3fn, "f8e5m2": ml_dtypes.float8_e5m2}


def constant_module(t: str, values: np.ndarray) -> str:
    body = ", ".join(str(float(v)) for v in values.astype(np.float64))
    return (f"HloModule c\nENTRY %main () -> {t}[{values.size}] {{\n"
            f"  ROOT %c = {t}[{values.size}]{{0}} constant({{{body}}})\n}}\n")


@pytest.mark.parametrize("t", ["bf16", "f8e4m3fn", "f8e5m2"])
def test_every_value_prints_and_parses_back_exactly(t):
    """Bit patterns but NaNs (all for f8; for bf16 every 7th, and the edges of each binade):
    printed with the fewest digits, read back to the same bits."""
    dtype = np.dtype(TYPES[t])
    bits = np.arange(2 ** (8 * dtype.itemsize), dtype=f"u{dtype.itemsize}")
    if t == "bf16":
        edges = (bits & 0x7F == 0) | (bits & 0x7F == 0x7F) | (bits & 0x7F == 1)
        bits = bits[(bits % 7 == 0) | edges]
    values = bits.view(dtype)
    values = values[~np.isnan(values.astype(F32))]
    module = parse_hlo(constant_module(t, values))
    text = print_module(module)
    again = parse_hlo(text).entry.root.literal
    assert again.dtype == dtype
    assert np.array_equal(again.view(bits.dtype), values.view(bits.dtype))
    assert print_module(parse_hlo(text)) == text


def test_short_spellings_and_shapes():
    text = """HloModule m
ENTRY %main (x: bf16[2,3], y: f8e4m3fn[4], z: f8e5m2[]) -> (bf16[2,3], f8e4m3fn[4], f8e5m2[], bf16[]) {
  %x = bf16[2,3]{0,1} parameter(0)
  %y = f8e4m3fn[4]{0} parameter(1)
  %z = f8e5m2[] parameter(2)
  %c = bf16[] constant(1.5)
  ROOT %t = (bf16[2,3]{0,1}, f8e4m3fn[4]{0}, f8e5m2[], bf16[]) tuple(%x, %y, %z, %c)
}
"""
    printed = print_module(parse_hlo(text))
    assert "bf16[2,3]{0,1} parameter(0)" in printed
    assert "%c = bf16[] constant(1.5)" in printed
    assert "(bf16[2,3]{0,1}, f8e4m3fn[4]{0}, f8e5m2[], bf16[])" in printed
    assert "constant(0.1)" in print_module(parse_hlo(text.replace("constant(1.5)", "constant(0.1)")))


HEADERLESS = """
%fused (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  ROOT %n = f32[4]{0} negate(%p)
}

ENTRY %main.7 (x: f32[4]) -> f32[4] {
  %x = f32[4]{0} parameter(0)
  ROOT %f = f32[4]{0} fusion(%x), kind=kLoop, calls=%fused
}
"""


def test_text_without_header_parses_and_is_named_after_its_entry():
    module = parse_hlo(HEADERLESS)
    assert module.name == "main.7" and module.entry.name == "main.7"
    assert print_module(module).startswith("HloModule main.7,")
    x = np.arange(4, dtype=F32)
    assert np.array_equal(evaluate(module, [x]), -x)


def _run(text, *args):
    return flatten(evaluate(parse_hlo(text), list(args)))


ADD_CHAIN = """HloModule m
ENTRY %main (x: bf16[64], y: bf16[64]) -> bf16[64] {
  %x = bf16[64]{0} parameter(0)
  %y = bf16[64]{0} parameter(1)
  %a = bf16[64]{0} add(%x, %y)
  ROOT %m = bf16[64]{0} multiply(%a, %y)
}"""


def test_each_op_rounds_to_bf16():
    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal(64).astype(BF16) for _ in range(2))
    (got,) = _run(ADD_CHAIN, x, y)
    once = ((x.astype(F32) + y.astype(F32)) * y.astype(F32)).astype(BF16)     # no rounding between
    assert got.dtype == BF16
    assert np.array_equal(got.view(np.uint16), ((x + y) * y).view(np.uint16))
    assert not np.array_equal(got.view(np.uint16), once.view(np.uint16))


REDUCE_AND_DOT = """HloModule m
%add (a: bf16[], b: bf16[]) -> bf16[] {
  %a = bf16[] parameter(0)
  %b = bf16[] parameter(1)
  ROOT %s = bf16[] add(%a, %b)
}
ENTRY %main (x: bf16[1000], w: bf16[1000,2]) -> (bf16[], f32[2], bf16[2]) {
  %x = bf16[1000]{0} parameter(0)
  %w = bf16[1000,2]{1,0} parameter(1)
  %zero = bf16[] constant(0)
  %sum = bf16[] reduce(%x, %zero), dimensions={0}, to_apply=%add
  %d32 = f32[2]{0} dot(%x, %w), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  %d16 = bf16[2]{0} dot(%x, %w), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  ROOT %t = (bf16[], f32[2], bf16[2]) tuple(%sum, %d32, %d16)
}"""


def test_reducers_and_dots_accumulate_in_f32():
    """Summing 1000 ones one bf16 addition at a time stalls at 256; XLA's f32 reducer gives
    1000.  A dot with an f32 result (preferred_element_type) is not rounded to bf16."""
    x = np.ones(1000, BF16)
    w = np.full((1000, 2), 1.0078125, F32).astype(BF16)         # 1 + 2**-7: exact in bf16
    total, d32, d16 = _run(REDUCE_AND_DOT, x, w)
    assert float(total) == 1000
    assert np.array_equal(d32, np.full(2, 1007.8125, F32))
    assert d16.dtype == BF16 and np.array_equal(d16, np.full(2, 1007.8125, F32).astype(BF16))


CONV = """HloModule m
ENTRY %main (x: bf16[1,8,8,3], k: bf16[3,3,3,4]) -> bf16[1,6,6,4] {
  %x = bf16[1,8,8,3]{3,2,1,0} parameter(0)
  %k = bf16[3,3,3,4]{3,2,1,0} parameter(1)
  ROOT %c = bf16[1,6,6,4]{3,2,1,0} convolution(%x, %k), window={size=3x3}, dim_labels=b01f_01io->b01f
}"""


def test_bf16_convolution_against_numpy():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 8, 8, 3)).astype(BF16)
    k = rng.standard_normal((3, 3, 3, 4)).astype(BF16)
    (got,) = _run(CONV, x, k)
    xf, kf = x.astype(F32), k.astype(F32)
    want = np.zeros((1, 6, 6, 4), F32)
    for i in range(6):
        for j in range(6):
            want[0, i, j] = np.einsum("abc,abcd->d", xf[0, i:i + 3, j:j + 3], kf)
    assert got.dtype == BF16
    assert np.abs(got.astype(F32) - want).max() <= 2 ** -8 * np.abs(want).max()


def test_f8_arithmetic_matches_ml_dtypes():
    text = ADD_CHAIN.replace("bf16", "f8e4m3fn")
    rng = np.random.default_rng(2)
    x, y = (rng.standard_normal(64).astype(ml_dtypes.float8_e4m3fn) for _ in range(2))
    (got,) = _run(text, x, y)
    assert np.array_equal(got.view(np.uint8), ((x + y) * y).view(np.uint8))
