"""The native convolution kernel (codegen/convolution.py): depthwise and narrowly grouped
convolutions in every layout, with strides, padding (also negative), rhs and lhs dilation,
reversal, channel multipliers, f32 / f64 / bf16 -- checked against the reference evaluator,
and against XLA:CPU (``jax.lax.conv_general_dilated``) where JAX is installed.  Both sides of
each threshold (inputs per group, taps, the parallel split) are run."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nbxla.codegen import convolution as native
from nbxla.hlo import Builder, Module, Shape
from nbxla.hlo.ir import Instruction
from nbxla.hlo.attributes import ConvDimensionNumbers, Window, WindowDim
from nbxla.hlo.evaluator import evaluate, flatten
from nbxla.runtime.cpu_kernels import KernelThunk
from nbxla.runtime.executable import build_executable
from nbxla.testing import compare_arrays


def conv_module(x_shape, k_shape, t, labels, window, groups) -> Module:
    dn = ConvDimensionNumbers.from_text(labels) if isinstance(labels, str) else labels
    b = Builder("conv")
    x = b.parameter(Shape(t, x_shape), "x")
    k = b.parameter(Shape(t, k_shape), "k")
    b.op("convolution", x, k, dim_labels=dn, window=window, feature_group_count=groups, name="conv")
    return Module("conv", b.build())


def run_checked(module: Module, seed: int = 0, expect_native: bool = True):
    """Compile, run, compare with the evaluator; returns (result, the executable's native object)."""
    rng = np.random.default_rng(seed)
    inputs = [rng.standard_normal(p.shape.dims).astype(p.shape.dtype) for p in module.entry.parameters]
    executable = build_executable(module, "cpu")
    (got,) = executable.run(inputs)
    (want,) = flatten(evaluate(module, inputs))
    ok, detail = compare_arrays(got, want)
    assert ok, detail
    nat = executable.native
    assert nat.interpreted_ops == {}
    assert ("conv" not in nat.library_calls) == expect_native, nat.library_calls
    return got, nat, inputs


def nhwc(n, h, w, c, k, mult=1, t="f32", **window):
    """A depthwise NHWC / HWIO convolution (channel multiplier ``mult``)."""
    win = Window((WindowDim(k, **window), WindowDim(k, **window)))
    return conv_module((n, h, w, c), (k, k, 1, c * mult), t, "b01f_01io->b01f", win, c)


def nchw(n, c, h, w, k, t="f32", **window):
    win = Window((WindowDim(k, **window), WindowDim(k, **window)))
    return conv_module((n, c, h, w), (c, 1, k, k), t, "bf01_oi01->bf01", win, c)


WINDOWS = [dict(), dict(pad_low=1, pad_high=1), dict(stride=2, pad_low=0, pad_high=1), dict(stride=2, pad_low=1, pad_high=1),
           dict(window_dilation=2, pad_low=2, pad_high=2), dict(pad_low=-1, pad_high=2), dict(stride=3, pad_low=2, pad_high=0),
           dict(base_dilation=2, pad_low=1, pad_high=1), dict(reversal=True, pad_low=1, pad_high=0)]


@pytest.mark.parametrize("window", WINDOWS, ids=lambda w: ",".join(f"{k}={v}" for k, v in w.items()) or "valid")
@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
def test_depthwise_windows_in_both_layouts(window, layout):
    # 19 channels / width 13: vector lanes and a remainder
    module = nhwc(2, 11, 13, 19, 3, **window) if layout == "nhwc" else nchw(2, 19, 11, 13, 3, **window)
    run_checked(module)


@pytest.mark.parametrize("t", ["f32", "f64", "bf16"])
def test_element_types(t):
    got, _, _ = run_checked(nhwc(1, 9, 9, 16, 3, t=t, pad_low=1, pad_high=1))
    assert got.dtype == Shape(t).dtype


def test_bf16_operands_with_f32_result():
    b = Builder("conv")
    x = b.parameter(Shape("bf16", (1, 6, 6, 8)), "x")
    k = b.parameter(Shape("bf16", (3, 3, 1, 8)), "k")
    b.op("convolution", x, k, dim_labels=ConvDimensionNumbers.from_text("b01f_01io->b01f"),
         window=Window((WindowDim(3), WindowDim(3))), feature_group_count=8, name="conv",
         shape=Shape("f32", (1, 4, 4, 8)))
    got, _, _ = run_checked(Module("conv", b.build()))
    assert got.dtype == np.float32


def test_channel_multiplier_and_kernel_sizes():
    run_checked(nhwc(1, 8, 8, 6, 3, mult=3, stride=2, pad_low=1, pad_high=1))
    run_checked(nhwc(1, 12, 12, 10, 5, pad_low=2, pad_high=2))
    run_checked(nhwc(1, 5, 5, 4, 1))                      # a 1x1 depthwise: a per-channel scale


def test_one_and_three_spatial_dims_and_odd_label_orders():
    one = conv_module((3, 17, 12), (3, 1, 12), "f32", "b0f_0io->b0f", Window((WindowDim(3, pad_low=1, pad_high=1),)), 12)
    run_checked(one)
    three = conv_module((1, 5, 6, 7, 8), (3, 3, 3, 1, 8), "f32", "b012f_012io->b012f",
                        Window(tuple(WindowDim(3, pad_low=1, pad_high=1) for _ in range(3))), 8)
    run_checked(three)
    # features first in the input, batch minor in the output, kernel output feature first
    odd = conv_module((6, 9, 8, 2), (6, 3, 3, 1), "f32", "f01b_o01i->0bf1",
                      Window((WindowDim(3, stride=2), WindowDim(3, pad_low=1, pad_high=1))), 6)
    run_checked(odd)


@pytest.mark.parametrize("inputs_per_group", [native.MAX_GROUP_INPUTS, native.MAX_GROUP_INPUTS + 1])
def test_inputs_per_group_threshold(inputs_per_group):
    groups = 3
    # (a 2x2 window: 8 inputs per group make 32 taps, under MAX_TAPS)
    module = conv_module((1, 7, 7, groups * inputs_per_group), (2, 2, inputs_per_group, groups * 2), "f32",
                         "b01f_01io->b01f", Window((WindowDim(2), WindowDim(2))), groups)
    run_checked(module, expect_native=inputs_per_group <= native.MAX_GROUP_INPUTS)


@pytest.mark.parametrize("size", [8, 9])
def test_taps_threshold(size):
    # 8x8 = 64 taps unroll; 9x9 = 81 do not and run as BLAS GEMMs
    assert (size * size <= native.MAX_TAPS) == (size == 8)
    run_checked(nhwc(1, 12, 12, 4, size), expect_native=size == 8)


@pytest.mark.parametrize("height", [4, 200])
def test_small_runs_inline_and_large_splits_over_threads(height):
    module = nhwc(1, height, 64, 32, 3, pad_low=1, pad_high=1)
    _, nat, _ = run_checked(module)
    (thunk,) = [step[0] for step in nat.programs[module.entry.name].steps if isinstance(step[0], KernelThunk)]
    assert thunk.parallel == (height == 200)


def test_convolutions_the_kernel_refuses_say_why_and_run_as_library_calls():
    b = Builder("conv")
    x = b.parameter(Shape("s32", (1, 5, 5, 4)), "x")
    k = b.parameter(Shape("s32", (3, 3, 1, 4)), "k")
    conv = b.op("convolution", x, k, dim_labels=ConvDimensionNumbers.from_text("b01f_01io->b01f"),
                window=Window((WindowDim(3), WindowDim(3))), feature_group_count=4, name="conv")
    assert "s32" in native.native_convolution_refusal(conv)
    module = Module("conv", b.build())
    executable = build_executable(module, "cpu")
    rng = np.random.default_rng(1)
    xs = [rng.integers(-4, 4, p.shape.dims).astype(np.int32) for p in module.entry.parameters]
    assert np.array_equal(executable.run(xs)[0], flatten(evaluate(module, xs))[0])
    # (an integer depthwise convolution: im2col + NumPy's integer matmul, not the evaluator)
    assert executable.native.library_calls == {"conv": "convolution"}
    assert not executable.native.interpreted_ops


@st.composite
def depthwise_cases(draw):
    """Depthwise-style convolutions with enough channels for vector lanes and remainders."""
    rank = draw(st.integers(1, 2))
    channels = draw(st.integers(1, 40))
    mult = draw(st.sampled_from([1, 1, 2]))
    group_inputs = draw(st.sampled_from([1, 1, 2, 3]))
    n = draw(st.integers(1, 2))
    spatial = [draw(st.integers(1, 12)) for _ in range(rank)]
    window = Window(tuple(WindowDim(draw(st.integers(1, 4)), stride=draw(st.integers(1, 3)),
                                    pad_low=draw(st.integers(-1, 3)), pad_high=draw(st.integers(-1, 3)),
                                    base_dilation=draw(st.sampled_from([1, 1, 1, 2])),
                                    window_dilation=draw(st.integers(1, 2)), reversal=draw(st.booleans()))
                          for _ in range(rank)))
    channels_last = draw(st.booleans())
    labels = ("b" + "".join(map(str, range(rank))) + "f_" + "".join(map(str, range(rank))) + "io->b"
              + "".join(map(str, range(rank))) + "f") if channels_last else \
        ("bf" + "".join(map(str, range(rank))) + "_oi" + "".join(map(str, range(rank))) + "->bf"
         + "".join(map(str, range(rank))))
    c_in, c_out = channels * group_inputs, channels * mult
    sizes = [w.size for w in window.dims]
    x = (n, *spatial, c_in) if channels_last else (n, c_in, *spatial)
    k = (*sizes, group_inputs, c_out) if channels_last else (c_out, group_inputs, *sizes)
    t = draw(st.sampled_from(["f32", "f32", "f64", "bf16"]))
    return x, k, t, labels, window, channels, draw(st.integers(0, 1000))


@given(depthwise_cases())
@settings(max_examples=60, deadline=None)
def test_random_depthwise_against_the_evaluator(case):
    x, k, t, labels, window, groups, seed = case
    from nbxla.hlo.shape_inference import window_output_size
    spatial = x[1:-1] if labels.startswith("b0") else x[2:]
    if any(window_output_size(s, w) == 0 for s, w in zip(spatial, window.dims)):
        return          # an empty result: nothing for the kernel to compute
    module = conv_module(x, k, t, labels, window, groups)
    # (one channel is a dense convolution: the BLAS path)
    run_checked(module, seed, expect_native=groups > 1)
    assert (native.native_convolution_refusal(module.entry.root) is None) == (groups > 1)


# ---- XLA:CPU as a second oracle -------------------------------------------------------------

JAX_CASES = [
    # (layout, n, h, w, c, k, stride, padding, rhs dilation, multiplier)
    ("NHWC", 1, 20, 20, 32, 3, 1, (1, 1), 1, 1),
    ("NHWC", 2, 15, 16, 24, 3, 2, (0, 1), 1, 1),
    ("NCHW", 1, 14, 14, 16, 3, 1, (1, 1), 1, 1),
    ("NHWC", 1, 17, 17, 8, 3, 1, (2, 2), 2, 2),
    ("NCHW", 1, 10, 11, 8, 5, 2, (2, 2), 1, 1),
]


@pytest.mark.parametrize("case", JAX_CASES)
def test_matches_xla_cpu(case):
    jax = pytest.importorskip("jax")
    from jax import lax
    layout, n, h, w, c, k, stride, (lo, hi), dil, mult = case
    win = Window(tuple(WindowDim(k, stride=stride, pad_low=lo, pad_high=hi, window_dilation=dil) for _ in range(2)))
    if layout == "NHWC":
        module = conv_module((n, h, w, c), (k, k, 1, c * mult), "f32", "b01f_01io->b01f", win, c)
        dn = ("NHWC", "HWIO", "NHWC")
    else:
        module = conv_module((n, c, h, w), (c * mult, 1, k, k), "f32", "bf01_oi01->bf01", win, c)
        dn = ("NCHW", "OIHW", "NCHW")
    got, _, (x, kern) = run_checked(module)
    want = np.asarray(lax.conv_general_dilated(jax.device_put(x), jax.device_put(kern), (stride, stride),
                                               [(lo, hi), (lo, hi)], rhs_dilation=(dil, dil),
                                               dimension_numbers=dn, feature_group_count=c))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


# ---- epilogues: the consuming elementwise fusion computed in the convolution's kernel ---------

def run_text(text: str, folded: int, seed: int = 0):
    """Compile HLO text for the CPU, compare every output with the evaluator, check how many
    fusions took their convolution and that nothing ran on the evaluator."""
    from nbxla.compiler import compile_module
    from nbxla.hlo.parser import parse_hlo
    module = parse_hlo(text)
    rng = np.random.default_rng(seed)
    inputs = [rng.standard_normal(p.shape.dims).astype(p.shape.dtype) for p in module.entry.parameters]
    want = flatten(evaluate(module, inputs))
    executable = compile_module(parse_hlo(text), "cpu").executable
    got = executable.run(inputs)
    for g, w in zip(got, want, strict=True):
        ok, detail = compare_arrays(g, w)
        assert ok, detail
    nat = executable.native
    assert nat.interpreted == {} and nat.interpreted_ops == {}
    assert len(nat.convolution_epilogues) == folded, nat.convolution_epilogues
    return nat


def epilogue_module(t="f32", labels="b01f_01io->b01f", x="1,10,9,16", k="3,3,1,16", out="1,10,9,16",
                    bias_dim=3, tail="", root="r"):
    c = 16
    return f"""HloModule epilogue
ENTRY main {{
  x = {t}[{x}] parameter(0)
  k = {t}[{k}] parameter(1)
  b = {t}[{c}] parameter(2)
  lo = {t}[] constant(0)
  hi = {t}[] constant(6)
  d = {t}[{out}] convolution(x, k), window={{size=3x3 pad=1_1x1_1}}, dim_labels={labels}, feature_group_count={c}
  bb = {t}[{out}] broadcast(b), dimensions={{{bias_dim}}}
  a = {t}[{out}] add(d, bb)
  l = {t}[{out}] broadcast(lo), dimensions={{}}
  h = {t}[{out}] broadcast(hi), dimensions={{}}
  r = {t}[{out}] clamp(l, a, h){tail}
}}""".replace(f"  r = {t}[{out}] clamp", f"  {'ROOT ' if root == 'r' else ''}r = {t}[{out}] clamp")


@pytest.mark.parametrize("t", ["f32", "f64", "bf16"])
def test_bias_relu6_runs_in_the_convolution_kernel(t):
    run_text(epilogue_module(t), folded=1)


def test_channels_first_epilogue():
    run_text(epilogue_module(labels="bf01_oi01->bf01", x="2,16,10,9", k="16,1,3,3", out="2,16,10,9", bias_dim=1),
             folded=1)


def test_epilogue_reading_other_points_is_not_folded():
    # the relu6 result transposed: the fusion reads the convolution away from the stored point
    text = epilogue_module(root="t", tail="\n  ROOT t = f32[1,9,10,16] transpose(r), dimensions={0,2,1,3}")
    run_text(text, folded=0)


def test_convolution_with_two_users_is_not_folded():
    text = epilogue_module(root="t", tail="\n  m = f32[1,10,9,16] multiply(d, d)\n"
                           "  ROOT t = (f32[1,10,9,16], f32[1,10,9,16]) tuple(r, m)")
    run_text(text, folded=0)


def test_dense_convolution_keeps_an_epilogue_it_does_not_recognize():
    """(a relu the patch-GEMM kernel takes: tests/runtime/test_conv_bias_act.py; an exp it
    does not: the fusion stays a separate kernel)"""
    text = """HloModule dense
ENTRY main {
  x = f32[1,8,8,16] parameter(0)
  k = f32[3,3,16,8] parameter(1)
  d = f32[1,8,8,8] convolution(x, k), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  ROOT r = f32[1,8,8,8] exponential(d)
}"""
    nat = run_text(text, folded=0)
    assert nat.library_calls == {"d": "convolution"}


def test_epilogue_refusals_name_the_reason():
    from nbxla.hlo.parser import parse_hlo
    transposed = parse_hlo(epilogue_module(root="t", tail="\n  ROOT t = f32[1,9,10,16] transpose(r), dimensions={0,2,1,3}")).entry
    conv = next(i for i in transposed.instructions if i.opcode == "convolution")
    assert "convolution's shape" in native.epilogue_refusal(transposed, conv)
    text = epilogue_module(root="t", tail="\n  v = f32[1,10,9,16] reverse(r), dimensions={1}\n"
                           "  ROOT t = f32[1,10,9,16] add(v, r)")
    reversed_ = parse_hlo(text).entry
    conv = next(i for i in reversed_.instructions if i.opcode == "convolution")
    assert "reads the convolution at other points" in native.epilogue_refusal(reversed_, conv)
    run_text(text, folded=0)


def test_fold_keeps_the_convolution_operands_memory_alive():
    """The fused kernel reads the convolution's operands when the fusion runs: a value the
    plan placed over them between the two steps forbids the fold."""
    from types import SimpleNamespace as V
    from nbxla.runtime.fusion_fold import operands_survive
    x = Instruction("parameter", Shape("f32", (4,)), attrs={"parameter_number": 0}, name="x")
    e = Instruction("exponential", Shape("f32", (4,)), [x], name="e")
    k = Instruction("parameter", Shape("f32", (4,)), attrs={"parameter_number": 1}, name="k")
    conv = Instruction("convolution", Shape("f32", (4,)), [e, k], name="conv")
    fusion = Instruction("fusion", Shape("f32", (4,)), [conv], name="f")

    def plan(other_offset, other_start, donated=()):
        return V(donated=dict.fromkeys(donated, "out"), values={
            "x": V(kind="parameter", parameter=0, offset=None, size=16, start=0),
            "k": V(kind="parameter", parameter=1, offset=None, size=16, start=0),
            "e": V(kind="arena", parameter=None, offset=0, size=16, start=1, name="e"),
            "conv": V(kind="arena", parameter=None, offset=64, size=16, start=2, name="conv"),
            "other": V(kind="arena", parameter=None, offset=other_offset, size=16, start=other_start, name="other"),
            "f": V(kind="arena", parameter=None, offset=128, size=16, start=4, name="f")})
    assert operands_survive(None, conv, fusion) == "yes"
    assert operands_survive(plan(192, 3), conv, fusion) == "yes"         # placed elsewhere
    assert operands_survive(plan(8, 3), conv, fusion) is None            # over the input, before the fusion
    assert operands_survive(plan(8, 5), conv, fusion) == "yes"           # over it, but after the fusion
    on_input = plan(192, 3)
    on_input.values["f"].offset = 0                                       # the fusion's own output over it
    assert operands_survive(on_input, conv, fusion) == "own output"
    conv.operands = [x, k]                                                # parameters: never written ...
    assert operands_survive(plan(8, 3), conv, fusion) == "yes"
    assert operands_survive(plan(8, 3, donated=[0]), conv, fusion) is None   # ... unless donated


LOOP = """HloModule loop
body {
  s = (s32[], f32[1,6,6,4], f32[3,3,1,4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  x = f32[1,6,6,4] get-tuple-element(s), index=1
  k = f32[3,3,1,4] get-tuple-element(s), index=2
  one = s32[] constant(1)
  j = s32[] add(i, one)
  d = f32[1,6,6,4] convolution(x, k), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, feature_group_count=4
  lo = f32[] constant(-1)
  hi = f32[] constant(1)
  l = f32[1,6,6,4] broadcast(lo), dimensions={}
  h = f32[1,6,6,4] broadcast(hi), dimensions={}
  y = f32[1,6,6,4] clamp(l, d, h)
  ROOT t = (s32[], f32[1,6,6,4], f32[3,3,1,4]) tuple(j, y, k)
}
cond {
  s = (s32[], f32[1,6,6,4], f32[3,3,1,4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(5)
  ROOT c = pred[] compare(i, n), direction=LT
}
ENTRY main {
  x = f32[1,6,6,4] parameter(0)
  k = f32[3,3,1,4] parameter(1)
  zero = s32[] constant(0)
  t = (s32[], f32[1,6,6,4], f32[3,3,1,4]) tuple(zero, x, k)
  w = (s32[], f32[1,6,6,4], f32[3,3,1,4]) while(t), condition=cond, body=body
  ROOT y = f32[1,6,6,4] get-tuple-element(w), index=1
}"""


def test_depthwise_with_epilogue_in_a_loop_body():
    # (natively run loops go through the ahead-of-time driver: the same kernel there)
    run_text(LOOP, folded=1)


SHARED = """HloModule shared
fused {
  p0 = f32[1,5,5,4] parameter(0)
  p1 = f32[4] parameter(1)
  bb = f32[1,5,5,4] broadcast(p1), dimensions={3}
  ROOT a = f32[1,5,5,4] add(p0, bb)
}
ENTRY main {
  x = f32[1,5,5,4] parameter(0)
  k = f32[3,3,1,4] parameter(1)
  b = f32[4] parameter(2)
  d = f32[1,5,5,4] convolution(x, k), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, feature_group_count=4
  f1 = f32[1,5,5,4] fusion(d, b), kind=kLoop, calls=fused
  f2 = f32[1,5,5,4] fusion(x, b), kind=kLoop, calls=fused
  ROOT t = (f32[1,5,5,4], f32[1,5,5,4]) tuple(f1, f2)
}"""


def test_fold_into_a_computation_other_fusions_share():
    from nbxla.hlo.parser import parse_hlo
    from nbxla.hlo.printer import print_module
    from nbxla.runtime.conv_epilogue import fold_convolution_epilogues
    module = parse_hlo(SHARED)
    rng = np.random.default_rng(4)
    inputs = [rng.standard_normal(p.shape.dims).astype(np.float32) for p in module.entry.parameters]
    want = flatten(evaluate(parse_hlo(SHARED), inputs))
    assert fold_convolution_epilogues(module) == {"f1": False}
    (f1, f2) = [i for i in module.entry.instructions if i.opcode == "fusion"]
    assert f2.attrs["calls"].name == "fused" and f1.attrs["calls"] is not f2.attrs["calls"]
    names = [i.name for c in module.computations for i in c.instructions]
    assert len(names) == len(set(names))
    again = parse_hlo(print_module(module))             # (the folded module is valid HLO)
    for g, w in zip(flatten(evaluate(again, inputs)), want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    executable = build_executable(parse_hlo(SHARED), "cpu")
    for g, w in zip(executable.run(inputs), want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
