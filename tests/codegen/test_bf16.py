"""bf16 (and f8) through the CPU backend, in the shapes real models have.

Each module runs three ways: native code, the reference evaluator (bit for bit the same: both
compute in f32 and round once per op, as XLA:CPU does), and an independent NumPy + ml_dtypes
computation (ml_dtypes also computes each op in f32 and rounds it; sums differ where NumPy
accumulates in bf16 and XLA in f32, so those references accumulate in f32 explicitly).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from nbxla.compiler import compile_module
from nbxla.hlo.evaluator import evaluate, flatten
from nbxla.hlo.parser import parse_hlo
from nbxla.testing import compare_arrays

from tests.codegen.test_cpu import assert_bitwise

BF16 = ml_dtypes.bfloat16
F32 = np.float32
RNG = np.random.default_rng(7)


def run(text: str, inputs: list, native: bool = True, bitwise: bool = True):
    """CPU results of the optimized module, checked bit for bit against the evaluator's on
    the module as written (and, if asked, that nothing ran through the evaluator: bf16 dots
    run as f32 GEMMs between converts, passes/float_normalization.py).  ``bitwise=False``
    for transcendental ops: their f32 values are not correctly rounded (nbxla's and NumPy's
    may differ by an f32 ulp), so where the f32 value lies next to a bf16 rounding boundary
    the two bf16 results may be one bf16 ulp apart; checked to be at most that."""
    executable = compile_module(parse_hlo(text), "cpu").executable
    got = executable.run(inputs)
    with np.errstate(all="ignore"):
        want = flatten(evaluate(parse_hlo(text), inputs))
    interpreted = {**executable.native.interpreted, **executable.native.interpreted_ops}
    if native:
        assert not interpreted, interpreted
    for k, (g, w) in enumerate(zip(got, want)):
        if bitwise:
            assert_bitwise(g, w, f"output {k}")
        else:
            assert _bf16_ulps_apart(g, w) <= 1, f"output {k}: more than one bf16 ulp from the evaluator"
    return got, interpreted


def _bf16_ulps_apart(got, want) -> int:
    """The largest distance in bf16 steps between ``got`` and ``want`` (NaN where both are)."""
    def ordered(a):
        bits = np.asarray(a).astype(BF16).view(np.uint16).astype(np.int32)
        return np.where(bits & 0x8000, 0x8000 - bits, bits)      # (monotone in the value)
    both_nan = np.isnan(np.asarray(got, np.float32)) & np.isnan(np.asarray(want, np.float32))
    apart = np.abs(ordered(got) - ordered(want))
    return int(np.max(np.where(both_nan, 0, apart), initial=0))


def close(got, want, rtol=None):
    ok, detail = compare_arrays(got, want, rtol=rtol)
    assert ok, detail


def bf16(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(BF16)


DENSE = """
HloModule dense
ENTRY %main (x: bf16[8,32], w: bf16[32,16], b: bf16[16]) -> bf16[8,16] {
  %x = bf16[8,32]{1,0} parameter(0)
  %w = bf16[32,16]{1,0} parameter(1)
  %b = bf16[16]{0} parameter(2)
  %acc = f32[8,16]{1,0} dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %y = bf16[8,16]{1,0} convert(%acc)
  %bb = bf16[8,16]{1,0} broadcast(%b), dimensions={1}
  %z = bf16[8,16]{1,0} add(%y, %bb)
  %k = bf16[] constant(1.702)
  %kb = bf16[8,16]{1,0} broadcast(%k), dimensions={}
  %kz = bf16[8,16]{1,0} multiply(%kb, %z)
  %sig = bf16[8,16]{1,0} logistic(%kz)
  %gelu = bf16[8,16]{1,0} multiply(%z, %sig)
  %zero = bf16[] constant(0)
  %zb = bf16[8,16]{1,0} broadcast(%zero), dimensions={}
  ROOT %relu = bf16[8,16]{1,0} maximum(%gelu, %zb)
}
"""


def test_dense_layer_with_f32_accumulation_bias_gelu_relu():
    x, w, b = bf16(8, 32), bf16(32, 16), bf16(16)
    (got,), _ = run(DENSE, [x, w, b])
    # NumPy + ml_dtypes, op by op: the dot in f32 (preferred_element_type), then bf16 ops.
    z = (x.astype(F32) @ w.astype(F32)).astype(BF16) + b
    kz = BF16(1.702) * z
    sig = (1 / (1 + np.exp(-kz.astype(F32)))).astype(BF16)
    want = np.maximum(z * sig, BF16(0))
    assert got.dtype == BF16
    close(got, want)


SOFTMAX = """
HloModule softmax
%max (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %m = f32[] maximum(%a, %b)
}
%sum (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}
ENTRY %main (logits: bf16[8,64]) -> bf16[8,64] {
  %logits = bf16[8,64]{1,0} parameter(0)
  %x = f32[8,64]{1,0} convert(%logits)
  %ninf = f32[] constant(-inf)
  %mx = f32[8]{0} reduce(%x, %ninf), dimensions={1}, to_apply=%max
  %mxb = f32[8,64]{1,0} broadcast(%mx), dimensions={0}
  %d = f32[8,64]{1,0} subtract(%x, %mxb)
  %e = f32[8,64]{1,0} exponential(%d)
  %zero = f32[] constant(0)
  %s = f32[8]{0} reduce(%e, %zero), dimensions={1}, to_apply=%sum
  %sb = f32[8,64]{1,0} broadcast(%s), dimensions={0}
  %p = f32[8,64]{1,0} divide(%e, %sb)
  ROOT %out = bf16[8,64]{1,0} convert(%p)
}
"""


def test_softmax_in_f32_with_converts_around_it():
    logits = bf16(8, 64, scale=3)
    (got,), _ = run(SOFTMAX, [logits])
    x = logits.astype(F32)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    close(got, (e / e.sum(axis=1, keepdims=True)).astype(BF16))


BF16_SUM = """
HloModule bf16_sum
%add (a: bf16[], b: bf16[]) -> bf16[] {
  %a = bf16[] parameter(0)
  %b = bf16[] parameter(1)
  ROOT %s = bf16[] add(%a, %b)
}
ENTRY %main (x: bf16[4,1000]) -> (bf16[4], bf16[]) {
  %x = bf16[4,1000]{1,0} parameter(0)
  %zero = bf16[] constant(0)
  %rows = bf16[4]{0} reduce(%x, %zero), dimensions={1}, to_apply=%add
  %all = bf16[] reduce(%x, %zero), dimensions={0,1}, to_apply=%add
  ROOT %t = (bf16[4], bf16[]) tuple(%rows, %all)
}
"""


def test_bf16_reduce_accumulates_in_f32_and_rounds_once():
    """A bf16 sum of 1000 ones is 1000 in XLA (an f32 reducer); adding in bf16 would stall at
    256, where 256 + 1 rounds back to 256."""
    ones = np.ones((4, 1000), BF16)
    (rows, total), _ = run(BF16_SUM, [ones])
    assert rows.dtype == BF16 and list(rows.astype(F32)) == [1000] * 4
    assert float(total) == 4000
    x = bf16(4, 1000)
    (rows, total), _ = run(BF16_SUM, [x])
    close(rows, x.astype(F32).sum(axis=1).astype(BF16))
    close(total, np.asarray(x.astype(F32).sum()).astype(BF16))


# Every type a bf16 converts to and from: convert(x) -> bf16 -> the type again.
CONVERT_TYPES = ["pred", "s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64", "f16", "f32", "f64"]
NUMPY = {"pred": np.bool_, "s8": np.int8, "s16": np.int16, "s32": np.int32, "s64": np.int64,
         "u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64, "f16": np.float16,
         "f32": np.float32, "f64": np.float64}


@pytest.mark.parametrize("t", CONVERT_TYPES)
def test_converts_between_bf16_and_every_type(t):
    text = f"""
HloModule convert_{t}
ENTRY %main (x: {t}[64], y: bf16[64]) -> (bf16[64], {t}[64]) {{
  %x = {t}[64]{{0}} parameter(0)
  %y = bf16[64]{{0}} parameter(1)
  %to = bf16[64]{{0}} convert(%x)
  %from = {t}[64]{{0}} convert(%y)
  ROOT %r = (bf16[64], {t}[64]) tuple(%to, %from)
}}"""
    dtype = NUMPY[t]
    if t == "pred":
        x = RNG.integers(0, 2, 64).astype(bool)
    elif np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        x = RNG.integers(info.min, info.max, 64, dtype=dtype, endpoint=True)
    else:
        x = (RNG.standard_normal(64) * 300).astype(dtype)
    # (in the target's range: XLA saturates out-of-range values, NumPy's cast wraps them)
    y = (RNG.standard_normal(64) * (20 if t in ("s8", "u8") else 100)).astype(BF16)
    if np.issubdtype(dtype, np.integer) and np.iinfo(dtype).min == 0:
        y = np.abs(y)
    (to, back), _ = run(text, [x, y])
    assert_bitwise(to, x.astype(BF16), "to bf16")
    if t != "pred":
        assert_bitwise(back, y.astype(dtype), "from bf16")


def test_rounding_ties_overflow_nan_zero_and_subnormals():
    """f32 -> bf16 on the bits: ties to even, overflow to inf, NaN kept NaN, signed zeros,
    subnormals; ml_dtypes' astype is the reference."""
    bits = np.array([0x3F808000, 0x3F818000, 0x3F808001, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F7F7FFF,
                     0x7FC00000, 0xFFC00001, 0x7F800001, 0x80000000, 0x00000000, 0x00018000,
                     0x80408000, 0x7F800000, 0xFF800000], np.uint32)
    x = np.tile(bits.view(F32), 4)
    text = """
HloModule round
ENTRY %main (x: f32[60]) -> bf16[60] {
  %x = f32[60]{0} parameter(0)
  ROOT %r = bf16[60]{0} convert(%x)
}"""
    (got,), _ = run(text, [x])
    assert_bitwise(got, x.astype(BF16))     # NaNs: the quiet NaN of their sign, as ml_dtypes
    assert list(got.view(np.uint16)[6:9]) == [0x7FC0, 0xFFC0, 0x7FC0]


def test_a_rounded_value_is_stored_without_a_second_rounding():
    """A bf16 result is rounded once, by its op: storing it takes its high half (no second
    NaN test: one ``fcmp uno`` per element in the kernel's IR), and the bits are ml_dtypes'
    (the same inputs as above, ties, overflow, NaNs and subnormals included)."""
    bits = np.array([0x3F808000, 0x3F818000, 0x7F7FFFFF, 0x7FC00000, 0xFFC00001, 0x7F800001,
                     0x80000000, 0x00018000, 0x80408000, 0xFF800000], np.uint32)
    x = np.tile(bits.view(F32), 3)
    text = """
HloModule round_once
ENTRY %main (x: f32[30]) -> bf16[30] {
  %x = f32[30]{0} parameter(0)
  ROOT %r = bf16[30]{0} convert(%x)
}"""
    executable = compile_module(parse_hlo(text), "cpu").executable
    (got,) = executable.run([x])
    assert_bitwise(got, x.astype(BF16))
    assert executable.native.kernels.llvm_ir.count("fcmp uno") == 1


@pytest.mark.parametrize("op,fn", [("add", np.add), ("subtract", np.subtract), ("multiply", np.multiply),
                                   ("divide", np.divide), ("maximum", np.maximum), ("power", np.power)])
def test_binary_ops_round_like_ml_dtypes(op, fn):
    text = f"""
HloModule {op}
ENTRY %main (x: bf16[256], y: bf16[256]) -> bf16[256] {{
  %x = bf16[256]{{0}} parameter(0)
  %y = bf16[256]{{0}} parameter(1)
  ROOT %r = bf16[256]{{0}} {op}(%x, %y)
}}"""
    x, y = bf16(256, scale=10), bf16(256, scale=2)
    if op == "power":
        x = np.abs(x)
    (got,), _ = run(text, [x, y], bitwise=op != "power")
    with np.errstate(all="ignore"):
        want = fn(x, y)
    if op in ("add", "subtract", "multiply", "divide", "maximum"):
        assert_bitwise(got, want, op)         # f32 is exact enough that one rounding is all
    else:
        close(got, want)


@pytest.mark.parametrize("op,fn", [("exponential", np.exp), ("tanh", np.tanh), ("sqrt", np.sqrt),
                                   ("log", np.log), ("sine", np.sin), ("negate", np.negative),
                                   ("abs", np.abs), ("floor", np.floor)])
def test_unary_ops_against_ml_dtypes(op, fn):
    text = f"""
HloModule {op}
ENTRY %main (x: bf16[256]) -> bf16[256] {{
  %x = bf16[256]{{0}} parameter(0)
  %a = bf16[256]{{0}} abs(%x)
  ROOT %r = bf16[256]{{0}} {op}(%a)
}}"""
    x = bf16(256, scale=4)
    (got,), _ = run(text, [x], bitwise=op in ("sqrt", "negate", "abs", "floor"))
    close(got, fn(np.abs(x)))


def test_bitcast_convert_between_bf16_and_16_bit_integers():
    text = """
HloModule bits
ENTRY %main (x: bf16[64], u: u16[64]) -> (u16[64], bf16[64]) {
  %x = bf16[64]{0} parameter(0)
  %u = u16[64]{0} parameter(1)
  %a = u16[64]{0} bitcast-convert(%x)
  %b = bf16[64]{0} bitcast-convert(%u)
  ROOT %r = (u16[64], bf16[64]) tuple(%a, %b)
}"""
    x = bf16(64)
    u = RNG.integers(0, 0x7F80, 64).astype(np.uint16)      # finite values
    (a, b), _ = run(text, [x, u])
    assert_bitwise(a, x.view(np.uint16))
    assert_bitwise(b, u.view(BF16))


def test_bf16_constants_iota_and_data_movement():
    text = """
HloModule moves
ENTRY %main (x: bf16[4,6]) -> bf16[6,5] {
  %x = bf16[4,6]{1,0} parameter(0)
  %t = bf16[6,4]{1,0} transpose(%x), dimensions={1,0}
  %c = bf16[6,1]{1,0} constant({{0.1}, {-2.5}, {300}, {1e-3}, {7}, {inf}})
  %cat = bf16[6,5]{1,0} concatenate(%t, %c), dimensions={1}
  %i = bf16[6,5]{1,0} iota(), iota_dimension=0
  ROOT %r = bf16[6,5]{1,0} add(%cat, %i)
}"""
    x = bf16(4, 6)
    (got,), _ = run(text, [x])
    c = np.array([[0.1], [-2.5], [300], [1e-3], [7], [np.inf]]).astype(BF16)
    want = np.concatenate([x.T, c], axis=1) + np.arange(6, dtype=F32)[:, None].astype(BF16)
    assert_bitwise(got, want)


def test_f8_runs_natively():
    text = """
HloModule f8
ENTRY %main (x: f8e4m3fn[16], y: f8e5m2[16]) -> (f8e4m3fn[16], f32[16]) {
  %x = f8e4m3fn[16]{0} parameter(0)
  %y = f8e5m2[16]{0} parameter(1)
  %s = f8e4m3fn[16]{0} multiply(%x, %x)
  %yf = f32[16]{0} convert(%y)
  %xf = f32[16]{0} convert(%s)
  %p = f32[16]{0} add(%xf, %yf)
  ROOT %r = (f8e4m3fn[16], f32[16]) tuple(%s, %p)
}"""
    x = bf16(16).astype(ml_dtypes.float8_e4m3fn)
    y = bf16(16).astype(ml_dtypes.float8_e5m2)
    (s, p), interpreted = run(text, [x, y])
    assert_bitwise(s, x * x)
    assert_bitwise(p, (x * x).astype(F32) + y.astype(F32))


def test_a_rounding_convert_through_f8_is_not_simplified_away():
    """s8 -> f8e4m3fn -> s8 rounds 17 to 16 (3 mantissa bits): the optimizer must keep the
    converts (ml_dtypes calls int8 -> float8 a "safe" cast; it is not exact)."""
    text = """
HloModule through_f8
ENTRY %main (x: s8[4]) -> s8[4] {
  %x = s8[4]{0} parameter(0)
  %f8 = f8e4m3fn[4]{0} convert(%x)
  ROOT %r = s8[4]{0} convert(%f8)
}"""
    x = np.array([17, -17, 100, 3], np.int8)
    (got,), _ = run(text, [x], native=False)
    assert list(got) == [16, -16, 96, 3]


def test_bf16_dots_run_as_f32_gemms():
    """bf16 x bf16 dots, with a bf16 result (rounded once) and batched, run natively: as one f32
    GEMM each, bit for bit the evaluator's result, NumPy+ml_dtypes' within bf16's tolerance."""
    text = """HloModule dots
ENTRY %main (a: bf16[6,40], b: bf16[40,5], c: bf16[3,4,8], d: bf16[3,8,2]) -> (bf16[6,5], f32[3,4,2]) {
  %a = bf16[6,40]{1,0} parameter(0)
  %b = bf16[40,5]{1,0} parameter(1)
  %c = bf16[3,4,8]{2,1,0} parameter(2)
  %d = bf16[3,8,2]{2,1,0} parameter(3)
  %ab = bf16[6,5]{1,0} dot(%a, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %cd = f32[3,4,2]{2,1,0} dot(%c, %d), lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_contracting_dims={1}
  ROOT %out = (bf16[6,5]{1,0}, f32[3,4,2]{2,1,0}) tuple(%ab, %cd)
}
"""
    a, b = RNG.standard_normal((6, 40)).astype(BF16), RNG.standard_normal((40, 5)).astype(BF16)
    c, d = RNG.standard_normal((3, 4, 8)).astype(BF16), RNG.standard_normal((3, 8, 2)).astype(BF16)
    (ab, cd), interpreted = run(text, [a, b, c, d])
    assert not interpreted
    close(ab.astype(F32), (a.astype(F32) @ b.astype(F32)).astype(BF16).astype(F32), rtol=1e-2)
    close(cd, c.astype(F32) @ d.astype(F32))


def test_bf16_ulp_distance_counts_steps_across_zero_and_nan():
    one = np.array([1.0], BF16)
    step = (one.view(np.uint16) + 1).view(BF16)
    assert _bf16_ulps_apart(one, one) == 0 and _bf16_ulps_apart(one, step) == 1
    tiny = np.array([0, 1], np.uint16).view(BF16)            # 0 and the smallest subnormal
    assert _bf16_ulps_apart(tiny[1:], -tiny[1:]) == 2 and _bf16_ulps_apart(tiny[:1], -tiny[:1]) == 0
    assert _bf16_ulps_apart(np.array([np.nan], BF16), np.array([np.nan], BF16)) == 0


def test_exp_of_many_inputs_within_one_bf16_ulp_of_the_evaluator():
    # (4096 draws: some land next to a bf16 rounding boundary, where one f32 ulp flips it)
    text = """
HloModule exponential
ENTRY %main (x: bf16[4096]) -> bf16[4096] {
  %x = bf16[4096]{0} parameter(0)
  ROOT %r = bf16[4096]{0} exponential(%x)
}"""
    run(text, [bf16(4096, scale=4)], bitwise=False)
