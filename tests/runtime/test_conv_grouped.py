"""Grouped convolutions in nbxla's patch-GEMM kernel (``conv_blocks.takes_grouped``,
``codegen/patch_gemm.py``'s group loop): layouts, strides, padding, dilation, reversal,
batches, f32 / f64 / bf16 against the reference evaluator; both sides of each limit of the
rule (the narrowest group, powers of two or panels, the depth); and the whole compile path."""

from __future__ import annotations

import numpy as np
import pytest

from nbxla.codegen.patch_gemm import PatchGemm
from nbxla.compiler import compile_module
from nbxla.hlo.attributes import Window, WindowDim
from nbxla.hlo.evaluator import evaluate, flatten
from nbxla.runtime import conv_blocks
from nbxla.runtime.small_gemm import PatchGemmKernel
from nbxla.testing import compare_arrays

from .test_conv_blocks import BLOCKED, check
from .test_conv_gemm import conv_module, square

NATIVE = BLOCKED + ", by nbxla"
GROUP_MIN = conv_blocks.GROUP_MIN_BYTES // 4            # narrowest group the kernel takes (f32)
PANEL = conv_blocks.NATIVE_GEMM_BYTES // 4              # widest group in one panel (f32)

CASES = [
    # labels, input, kernel (HWIO / OIHW: the input features of one group), window, groups
    ("b01f_01io->b01f", (1, 9, 8, 32), (3, 3, 16, 2 * GROUP_MIN), square(3, pad_low=1, pad_high=1), 2),
    ("bf01_oi01->bf01", (2, 24, 9, 8), (4 * GROUP_MIN, 6, 3, 3), square(3, pad_low=1, pad_high=1), 4),
    ("b01f_01io->b01f", (2, 13, 12, 48), (3, 3, 16, 3 * PANEL), square(3, stride=2, pad_low=1, pad_high=0), 3),
    ("b01f_01io->b01f", (1, 11, 11, 20), (3, 3, 5, 4 * GROUP_MIN), square(3, window_dilation=2, pad_low=2,
                                                                          pad_high=2), 4),
    ("b01f_01io->b01f", (1, 9, 9, 18), (3, 3, 9, 2 * GROUP_MIN), square(3, pad_low=1, pad_high=0, reversal=True), 2),
    ("b01f_01io->b01f", (1, 7, 7, 64), (1, 1, 8, 8 * GROUP_MIN), square(1), 8),            # pointwise, grouped
    ("f01b_i01o->01bf", (12, 6, 5, 2), (4, 3, 2, 3 * 2 * PANEL), Window((WindowDim(3, stride=2),
                                                                         WindowDim(2, pad_low=1))), 3),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1]}-g{c[4]}")
@pytest.mark.parametrize("t", ["f32", "f64", "bf16"])
def test_grouped_convolutions_match_the_evaluator(case, t):
    labels, x, k, window, groups = case
    module = conv_module(x, k, t, labels, window, groups)
    # (bf16: the library call widens it to the f32 convolution the kernel computes)
    check(module, NATIVE)


@pytest.mark.parametrize("features,taken", [(GROUP_MIN, True), (GROUP_MIN // 2, False), (GROUP_MIN + 4, False),
                                            (2 * PANEL, True), (PANEL + PANEL // 2, True), (PANEL + 4, False)])
def test_group_width_rule_both_sides(features, taken):
    # one group's features: a power of two from GROUP_MIN_BYTES up to a panel, or whole panels;
    # the rest (narrow, or not filling whole vectors) stays with the im2col / per-tap paths
    module = conv_module((1, 7, 6, 24), (3, 3, 12, 2 * features), "f32", "b01f_01io->b01f",
                         square(3, pad_low=1, pad_high=1), 2)
    conv = module.entry.root
    assert conv_blocks.takes_grouped(conv) == taken
    assert (conv_blocks.blocked_refusal(conv) is None) == taken
    check(module, NATIVE if taken else "")


@pytest.mark.parametrize("inside", [True, False])
def test_group_depth_rule_both_sides(monkeypatch, inside):
    depth = 9 * 12
    monkeypatch.setattr(conv_blocks, "NATIVE_PANEL_DEPTH", depth if inside else depth - 1)
    module = conv_module((1, 7, 6, 24), (3, 3, 12, 2 * GROUP_MIN), "f32", "b01f_01io->b01f",
                         square(3, pad_low=1, pad_high=1), 2)
    assert conv_blocks.takes_grouped(module.entry.root) == inside
    check(module, NATIVE if inside else "")


def test_grouped_geometry_refuses_an_epilogue():
    geometry = PatchGemm("f32", 1, 6, 6, 16, 3, 3, 4, 4, 16, (1, 1), (1, 1), bias=True, groups=2)
    with pytest.raises(ValueError, match="grouped"):
        PatchGemmKernel(geometry)


@pytest.mark.parametrize("labels", ["b01f_01io->b01f", "bf01_oi01->bf01"])
def test_compiled_module_runs_grouped_convolution_in_the_kernel(labels):
    # the run-hlo path: the convolution is a library call of nbxla's kernel, result as the evaluator's
    x, k = ((1, 10, 10, 64), (3, 3, 16, 64)) if labels[1] == "0" else ((1, 64, 10, 10), (64, 16, 3, 3))
    module = conv_module(x, k, "f32", labels, square(3, pad_low=1, pad_high=1), 4)
    ex = compile_module(module, "cpu").executable
    assert "by nbxla" in ex.native.describe()
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal(p.shape.dims).astype(np.float32) for p in module.entry.parameters]
    (want,) = flatten(evaluate(module, inputs))
    ok, detail = compare_arrays(np.asarray(ex.run(inputs)[0]), want)
    assert ok, detail
