"""HLO modules with convolutions in the shapes TensorFlow and JAX emit for real models
(``tests/hlo/convolution/*.hlo``, written for these tests): MobileNet blocks (NHWC, f32 and
bf16), JAX's NCHW depthwise, narrow and wide groups, a channel multiplier, atrous and
transposed (lhs-dilated) depthwise, negative padding, dense layouts.  Each must compile for
the CPU with nothing left on the evaluator and match the evaluator, the oracle."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from nbxla.codegen.convolution import native_convolution_refusal
from nbxla.compiler import compile_module
from nbxla.hlo.evaluator import evaluate, flatten
from nbxla.hlo.parser import parse_hlo
from nbxla.testing import compare_arrays
from nbxla.runtime.conv_epilogue import runs_as_library

HERE = Path(__file__).resolve().parent / "convolution"
MODULES = sorted(p.name for p in HERE.glob("*.hlo"))


def random_inputs(module, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(p.shape.dims).astype(p.shape.dtype) for p in module.entry.parameters]


def test_the_corpus_is_there():
    assert len(MODULES) >= 6


@pytest.mark.parametrize("name", MODULES)
def test_module_runs_natively_and_matches_the_evaluator(name):
    text = (HERE / name).read_text()
    module = parse_hlo(text, name)
    inputs = random_inputs(module)
    want = flatten(evaluate(module, inputs))
    executable = compile_module(parse_hlo(text, name), "cpu").executable
    got = executable.run(inputs)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        ok, detail = compare_arrays(g, w)
        assert ok, f"{name} output {k}: {detail}"
    native = executable.native
    assert native.interpreted == {} and native.interpreted_ops == {}
    standalone = [i for i in executable.module.entry.instructions if i.opcode == "convolution"]
    for conv in standalone:
        # depthwise / narrow groups: the native kernel; the rest: BLAS
        expect_kernel = native_convolution_refusal(conv) is None
        assert (conv.name not in native.library_calls) == expect_kernel, conv.name
        assert conv.name in native.kernel_symbols or not expect_kernel
    # Convolutions moved into the fusion consuming them (bias, relu6) run in its kernel.
    fused = [f for f in executable.module.entry.instructions if f.opcode == "fusion" and
             any(i.opcode == "convolution" for i in f.attrs["calls"].instructions)]
    assert sorted(f.name for f in fused) == sorted(native.convolution_epilogues)
    assert all(f.name in native.kernel_symbols for f in fused if not runs_as_library(f))
    dense = [f for f in fused if runs_as_library(f)]
    assert (len(fused), len(dense)) == EPILOGUES.get(name, (0, 0)), [f.name for f in fused]
    lines = native.describe().splitlines()
    assert all(any(f"%{f.name}:" in l and "applied in its kernel" in l for l in lines) for f in dense)
    assert all(f.name in native.library_calls for f in dense)


# Modules whose depthwise convolution feeds an elementwise fusion (bias, clamp): folded; and
# dense_layouts' 3x3 NHWC convolution with its bias and relu (nbxla's patch-GEMM kernel,
# runtime/conv_bias_act.py).
# (the pointwise 1x1 of mobilenet_block_nhwc and of two_blocks' second block likewise; a bf16 one
# is not taken).  Name -> (folded, of which dense).
EPILOGUES = {"mobilenet_block_nhwc.hlo": (2, 1), "mobilenet_block_stride2_bf16.hlo": (1, 0),
             "mobilenet_two_blocks.hlo": (3, 1), "dense_layouts.hlo": (1, 1), "first_layer_7x7_s2.hlo": (2, 2),
             "ssd_head_bf16.hlo": (2, 2)}


def test_folds_inside_the_arena_plan():
    from nbxla.runtime.cpu_executable import SMALL_ARENA
    text = (HERE / "mobilenet_two_blocks.hlo").read_text()
    native = compile_module(parse_hlo(text), "cpu").executable.native
    assert native.plan.arena_bytes >= SMALL_ARENA            # (the kernels write into the arena)
    # (the two depthwise ones, and the pointwise p1 with its bias and relu6: conv_bias_act)
    assert len(native.convolution_epilogues) == 3
