"""Dense convolutions with their bias and relu / relu6 computed in nbxla's patch-GEMM kernel
(runtime/conv_bias_act.py): both layouts, strides, SAME / VALID padding, window dilation,
output widths that are and are not a power of two (bias padded), panels, constant biases,
f64, NaN -- against the reference evaluator; and the epilogues and convolutions it leaves to
the separate fusion kernel (both sides of ``takes_native``)."""

from __future__ import annotations

import numpy as np
import pytest

from nbxla.compiler import compile_module
from nbxla.hlo.evaluator import evaluate, flatten
from nbxla.hlo.parser import parse_hlo
from nbxla.testing import compare_arrays

LAYOUTS = {"NHWC": "b01f_01io->b01f", "NCHW": "bf01_oi01->bf01"}


def _dims(d) -> str:
    return ",".join(str(v) for v in d)


def _literal(values: np.ndarray) -> str:
    if values.ndim == 0:
        return f"{float(values):.4g}"
    return "{" + ", ".join(_literal(v) for v in values) + "}"


def dense_module(layout="NHWC", n=1, h=9, c=3, o=16, k=3, stride=1, pad=(1, 1), dilation=1,
                 epilogue="relu", t="f32", bias="parameter", weights="parameter") -> str:
    span = (k - 1) * dilation + 1
    oh = (h + pad[0] + pad[1] - span) // stride + 1
    if layout == "NHWC":
        x, w, out, feature = (n, h, h, c), (k, k, c, o), (n, oh, oh, o), 3
    else:
        x, w, out, feature = (n, c, h, h), (o, c, k, k), (n, o, oh, oh), 1
    s = f"{t}[{_dims(out)}]"
    window = f"size={k}x{k} stride={stride}x{stride} pad={pad[0]}_{pad[1]}x{pad[0]}_{pad[1]}" + \
        (f" rhs_dilate={dilation}x{dilation}" if dilation > 1 else "")
    weights_line = f"  w = {t}[{_dims(w)}] parameter(1)" if weights == "parameter" else \
        f"  w = {t}[{_dims(w)}] constant({_literal(np.random.default_rng(1).standard_normal(w) * 0.3)})"
    bias_line = f"  b = {t}[{o}] parameter({2 if weights == 'parameter' else 1})" if bias == "parameter" else \
        f"  b = {t}[{o}] constant({{{', '.join(str(0.25 * (i % 7) - 0.5) for i in range(o))}}})"
    body = {
        "bias": "  ROOT r = {s} add(d, bb)",
        "relu": "  a = {s} add(d, bb)\n  ROOT r = {s} maximum(a, zz)",
        "relu-swapped": "  a = {s} add(bb, d)\n  ROOT r = {s} maximum(zz, a)",
        "relu-only": "  ROOT r = {s} maximum(d, zz)",
        "relu6": "  a = {s} add(d, bb)\n  ROOT r = {s} clamp(zz, a, ss)",
        "min-max": "  a = {s} add(d, bb)\n  m = {s} maximum(a, zz)\n  ROOT r = {s} minimum(m, ss)",
        "max-min": "  a = {s} add(d, bb)\n  m = {s} minimum(ss, a)\n  ROOT r = {s} maximum(m, zz)",
        # not taken: an unrecognized op, an empty clamp range, a bias along a spatial dim
        "exp": "  a = {s} add(d, bb)\n  ROOT r = {s} exponential(a)",
        "empty-clamp": "  a = {s} add(d, bb)\n  ROOT r = {s} clamp(ss, a, zz)",
    }[epilogue].format(s=s)
    return f"""HloModule dense_epilogue
ENTRY main {{
  x = {t}[{_dims(x)}] parameter(0)
{weights_line}
{bias_line}
  zero = {t}[] constant(0)
  six = {t}[] constant(6)
  d = {s} convolution(x, w), window={{{window}}}, dim_labels={LAYOUTS[layout]}
  bb = {s} broadcast(b), dimensions={{{feature}}}
  zz = {s} broadcast(zero), dimensions={{}}
  ss = {s} broadcast(six), dimensions={{}}
{body}
}}"""


def run(text: str, folded, nan: bool = False, atol=None):
    module = parse_hlo(text)
    rng = np.random.default_rng(0)
    inputs = [(rng.standard_normal(p.shape.dims) * (0.3 if p.parameter_number == 1 else 2.0)).astype(p.shape.dtype)
              for p in module.entry.parameters]
    if nan:
        inputs[0].reshape(-1)[[3, 50]] = np.nan
    (want,) = flatten(evaluate(module, inputs))
    nat = compile_module(parse_hlo(text), "cpu").executable.native
    (got,) = nat.run(inputs) if isinstance(nat.run(inputs), (list, tuple)) else (nat.run(inputs),)
    ok, detail = compare_arrays(np.asarray(got), want, atol=atol)
    assert ok, detail
    assert nat.interpreted == {} and nat.interpreted_ops == {}
    # (folded: True, in nbxla's kernel; False: the convolution and a loop kernel of its own)
    assert ("applied in its kernel" in nat.describe()) == folded, nat.describe()
    if nan:
        assert np.isnan(want).any() and np.array_equal(np.isnan(np.asarray(got)), np.isnan(want))
    return nat


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
@pytest.mark.parametrize("epilogue", ["bias", "relu", "relu-swapped", "relu-only", "relu6", "min-max", "max-min"])
def test_epilogues_in_the_kernel_match_the_evaluator(layout, epilogue):
    run(dense_module(layout, epilogue=epilogue), folded=True)


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
@pytest.mark.parametrize("geometry", [
    dict(k=7, h=23, stride=2, pad=(3, 3), c=3, o=64),          # a first layer (7x7, stride 2)
    dict(k=3, h=10, stride=2, pad=(0, 1), c=8, o=12),           # TF's SAME at stride 2, 12 features (padded to 16)
    dict(k=3, h=9, pad=(0, 0), c=5, o=24, n=2),                 # VALID, two images
    dict(k=3, h=11, pad=(2, 2), dilation=2, c=4, o=8),          # window dilation
    dict(k=1, h=6, pad=(0, 0), c=16, o=32),                     # pointwise
], ids=lambda g: "-".join(f"{k}{v}" for k, v in g.items()))
def test_geometries_match_the_evaluator(layout, geometry):
    run(dense_module(layout, **geometry), folded=True)


def test_panels_of_output_features_add_their_own_bias():
    """(96 features: panels of 64 and 32, each adding its part of the bias)"""
    run(dense_module("NHWC", k=1, h=5, c=8, o=96, pad=(0, 0), epilogue="relu6"), folded=True)


def test_a_constant_bias_and_f64():
    run(dense_module("NHWC", bias="constant", epilogue="relu6"), folded=True)
    run(dense_module("NCHW", t="f64", epilogue="relu"), folded=True)


@pytest.mark.parametrize("t", ["f32", "bf16"])
@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
@pytest.mark.parametrize("epilogue", ["relu", "exp"])
def test_constant_weights_are_prepared_once(t, layout, epilogue):
    """A frozen model's weights (a constant kernel): the kernel matrix is made when the thunk
    is (bf16 widened, rounded-up features padded), folded with the epilogue or not."""
    for o in (16, 12):
        text = dense_module(layout, t=t, epilogue=epilogue, weights="constant", o=o, c=4, h=7)
        nat = run(text, folded=epilogue == "relu")
        thunks = [step[0] for step in nat._plan[2]]
        inner = [getattr(getattr(th, "inner", th), "fixed_kernel", None) for th in thunks]
        assert any(k is not None for k in inner), nat.describe()


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
@pytest.mark.parametrize("epilogue", ["bias", "relu6", "relu-only"])
def test_bf16_rounds_the_sum_and_the_bias_sum(layout, epilogue):
    """(SSD-MobileNet's bf16 layers: the convolution rounded to bf16, the bias add rounded
    again, as the evaluator computes them)"""
    run(dense_module(layout, t="bf16", epilogue=epilogue, c=8, o=24, h=9, stride=2, pad=(0, 1)), folded=True)
    run(dense_module(layout, t="bf16", epilogue=epilogue, bias="constant", k=1, pad=(0, 0), c=16, o=32),
        folded=True)


def test_nan_stays_nan_through_the_clamp():
    run(dense_module("NHWC", epilogue="relu6"), folded=True, nan=True)
    run(dense_module("NHWC", epilogue="relu-only"), folded=True, nan=True)


@pytest.mark.parametrize("epilogue", ["exp", "empty-clamp"])
def test_other_epilogues_stay_a_separate_kernel(epilogue):
    run(dense_module("NHWC", epilogue=epilogue), folded=False)


def test_bias_along_another_dim_stays_a_separate_kernel():
    text = dense_module("NHWC", h=9, o=9, pad=(1, 1)).replace("dimensions={3}", "dimensions={2}")
    run(text, folded=False)


def test_only_the_native_kernel_folds_the_epilogue():
    """Both sides of ``conv_blocks.takes_native``: 64 output features of 3x3x128 products run
    in nbxla's kernel (folded in it); 128 features of 3x3x256 (deeper than NATIVE_PANEL_DEPTH)
    run on BLAS, channels-last or -first, or as per-tap GEMMs (``prefers_per_tap``: 16x16
    positions of 256 channels), the epilogue a loop kernel of its own (NumPy on each BLAS
    block measured no faster, see ``conv_blocks``)."""
    run(dense_module("NHWC", h=6, c=128, o=64, epilogue="relu"), folded=True)
    run(dense_module("NHWC", h=6, c=256, o=128, epilogue="relu"), folded=False)
    run(dense_module("NCHW", h=6, c=256, o=128, epilogue="relu"), folded=False)
    run(dense_module("NHWC", h=16, c=256, o=128, epilogue="relu"), folded=False)
    run(dense_module("NHWC", h=6, c=256, o=128, epilogue="relu", t="bf16"), folded=False)


BLAS_DENSE = dict(h=6, c=160, o=96, k=3)      # (depth 1440: past the native kernel's panels)
# (sums of 1440 products reach ~25 before relu6 clamps them to 6: f32 rounding of the sums,
# whatever runs the epilogue, is past the default tolerance's 1e-6 of the largest output)
DEEP_ATOL = 2e-4


@pytest.mark.parametrize("epilogue", ["bias", "relu", "relu-swapped", "relu-only", "relu6", "min-max", "max-min"])
def test_blas_epilogues_match_the_evaluator(epilogue):
    run(dense_module("NHWC", epilogue=epilogue, **BLAS_DENSE), folded=False, atol=DEEP_ATOL)


def test_blas_epilogue_constant_bias_f64_nan_and_batches():
    run(dense_module("NHWC", bias="constant", epilogue="relu6", **BLAS_DENSE), folded=False, atol=DEEP_ATOL)
    run(dense_module("NHWC", t="f64", epilogue="relu", **BLAS_DENSE), folded=False)
    run(dense_module("NHWC", epilogue="relu6", **BLAS_DENSE), folded=False, nan=True, atol=DEEP_ATOL)
    run(dense_module("NHWC", epilogue="relu", n=3, stride=2, pad=(0, 1), **BLAS_DENSE), folded=False,
        atol=DEEP_ATOL)


@pytest.mark.parametrize("rows", [True, False])
def test_blas_epilogue_on_every_split(monkeypatch, rows):
    """The BLAS convolution split over threads by runs of output rows, or -- one output row,
    fewer than the threads -- by output features, its epilogue the loop kernel after."""
    from nbxla.runtime import conv_blocks, conv_gemm
    from tests.runtime.test_conv_blocks import _count_feature_splits
    monkeypatch.setattr(conv_blocks, "worker_count", lambda: 4)
    monkeypatch.setattr(conv_gemm, "worker_count", lambda: 4)
    monkeypatch.setattr(conv_gemm, "SPLIT_WORK", 1)
    calls = _count_feature_splits(monkeypatch)
    geometry = dict(BLAS_DENSE, h=9) if rows else dict(BLAS_DENSE, h=3, pad=(0, 0))
    run(dense_module("NHWC", epilogue="relu6", **geometry), folded=False, atol=DEEP_ATOL)
    assert bool(calls) != rows


@pytest.mark.parametrize("epilogue,folded", [("relu", True), ("exp", False)])
def test_a_folded_fusion_is_not_offered_to_the_code_generator(epilogue, folded):
    """Neither the fusion that runs as the patch-GEMM call nor a convolution the native kernel
    refuses is offered to the code generator (each refusal made it emit the module's other
    kernels again); a fusion that stays a separate kernel is compiled.  The convolution's
    reason is kept where it runs."""
    nat = run(dense_module("NHWC", epilogue=epilogue), folded=folded)
    fusions = [i.name for i in nat.module.entry.instructions if i.opcode == "fusion"]
    assert nat.kernels.unsupported == {}
    assert bool(nat.kernels.specs) != folded, (fusions, list(nat.kernels.specs))
    assert nat.interpreted_ops == {}
