"""Dense convolutions as one GEMM per kernel tap on the padded input (runtime/conv_gemm.py):
both output forms (channels-last, channels-first), groups, padding (also negative), lhs and
rhs dilation, reversal, batches, 1-3 spatial dims, f32 / f64 / bf16, with and without
NumPy's cblas, split over the pool or not -- all against the reference evaluator."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nbxla.hlo import Builder, Module, Shape
from nbxla.hlo.attributes import ConvDimensionNumbers, Window, WindowDim
from nbxla.hlo.evaluator import evaluate, flatten
from nbxla.runtime import conv_blocks, conv_gemm
from nbxla.runtime.cpu_library import library_thunk
from nbxla.testing import compare_arrays


@pytest.fixture(autouse=True)
def per_tap_whenever_it_applies(monkeypatch):
    """These tests are of the per-tap GEMMs: the cost rule that sends narrow dense 2-D
    convolutions, and those with few output features, to the blocked im2col instead
    (tests/runtime/test_conv_blocks.py) is off."""
    monkeypatch.setattr(conv_blocks, "WIDE_MIN_CHANNELS", 0)
    monkeypatch.setattr(conv_blocks, "NATIVE_GEMM_BYTES", 0)
    monkeypatch.setattr(conv_blocks, "NATIVE_PANEL_DEPTH", 0)
    monkeypatch.setattr(conv_blocks, "PER_TAP_MIN_POSITIONS", {"channels-last": 0, "channels-first": 0})


def conv_module(x_shape, k_shape, t, labels, window, groups=1) -> Module:
    b = Builder("conv")
    x = b.parameter(Shape(t, x_shape), "x")
    k = b.parameter(Shape(t, k_shape), "k")
    b.op("convolution", x, k, dim_labels=ConvDimensionNumbers.from_text(labels), window=window,
         feature_group_count=groups, name="conv")
    return Module("conv", b.build())


def check(module: Module, wide: bool = True, seed: int = 0):
    """The library thunk's result against the evaluator's; ``wide``: it is the per-tap GEMM one."""
    conv = module.entry.root
    assert (conv_gemm.wide_gemm_refusal(conv) is None) == wide
    thunk, why = library_thunk(conv, None)
    assert thunk is not None, why
    assert (conv_gemm.WideGemmConvolution.how in thunk.how) == wide
    rng = np.random.default_rng(seed)
    inputs = [rng.standard_normal(p.shape.dims).astype(p.shape.dtype) for p in module.entry.parameters]
    got = thunk(inputs)
    (want,) = flatten(evaluate(module, inputs))
    ok, detail = compare_arrays(got, want)
    assert ok, detail
    return got


def square(k, **window):
    return Window((WindowDim(k, **window), WindowDim(k, **window)))


CASES = [
    # labels, input, kernel, window, groups
    ("b01f_01io->b01f", (2, 9, 8, 16), (3, 3, 16, 12), square(3, pad_low=1, pad_high=1), 1),
    ("bf01_oi01->bf01", (2, 16, 9, 8), (12, 16, 3, 3), square(3, pad_low=1, pad_high=1), 1),
    ("b01f_01io->b01f", (1, 7, 7, 40), (1, 1, 40, 24), square(1), 1),                     # pointwise
    ("bf01_oi01->bf01", (3, 40, 7, 5), (24, 40, 1, 1), square(1), 1),
    ("b01f_01io->b01f", (1, 9, 9, 32), (3, 3, 16, 10), square(3, pad_low=2, pad_high=0), 2),   # groups
    ("bf01_oi01->bf01", (1, 32, 9, 9), (10, 16, 3, 3), square(3, window_dilation=2, pad_low=2, pad_high=2), 2),
    ("b01f_01io->b01f", (1, 6, 7, 16), (3, 3, 16, 8), square(3, base_dilation=2, pad_low=2, pad_high=2), 1),
    ("b01f_01io->b01f", (1, 8, 8, 16), (3, 3, 16, 8), square(3, pad_low=-1, pad_high=1, reversal=True), 1),
    ("f01b_i01o->01bf", (16, 6, 5, 2), (16, 3, 2, 7), Window((WindowDim(3), WindowDim(2, pad_low=1))), 1),
    ("bf0_oi0->bf0", (2, 18, 17), (6, 18, 3), Window((WindowDim(3, window_dilation=2, pad_low=3, pad_high=1),)), 1),
    ("b012f_012io->b012f", (1, 4, 5, 6, 16), (2, 3, 2, 16, 5), Window(tuple(WindowDim(s, pad_low=1) for s in (2, 3, 2))), 1),
    ("bf_io->bf", (5, 20), (20, 7), Window(()), 1),                                      # no spatial dims
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1]}")
@pytest.mark.parametrize("t", ["f32", "f64"])
def test_per_tap_gemms_match_the_evaluator(case, t):
    labels, x, k, window, groups = case
    check(conv_module(x, k, t, labels, window, groups))


def test_bf16_is_computed_in_f32_and_rounded_once():
    got = check(conv_module((1, 9, 9, 16), (3, 3, 16, 8), "bf16", "b01f_01io->b01f", square(3, pad_low=1, pad_high=1)))
    assert got.dtype == Shape("bf16").dtype


@pytest.mark.parametrize("features", [conv_gemm.WIDE_MIN_FEATURES - 1, conv_gemm.WIDE_MIN_FEATURES])
def test_thin_inputs_take_im2col(features):
    module = conv_module((1, 9, 9, features), (3, 3, features, 8), "f32", "b01f_01io->b01f", square(3, pad_low=1, pad_high=1))
    check(module, wide=features >= conv_gemm.WIDE_MIN_FEATURES)


@pytest.mark.parametrize("stride", [1, 2])
def test_strided_convolutions_take_im2col(stride):
    module = conv_module((1, 9, 9, 16), (3, 3, 16, 8), "f32", "b01f_01io->b01f", square(3, stride=stride))
    check(module, wide=stride == 1)


def test_without_cblas_numpy_matmul_gives_the_same(monkeypatch):
    module = conv_module((2, 16, 9, 8), (12, 16, 3, 3), "f32", "bf01_oi01->bf01", square(3, pad_low=1, pad_high=1))
    with_cblas = check(module)
    monkeypatch.setattr(conv_gemm, "_cblas", [{}])
    np.testing.assert_allclose(check(module), with_cblas, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("labels,x,k", [("b01f_01io->b01f", (2, 20, 20, 16), (3, 3, 16, 16)),
                                        ("bf01_oi01->bf01", (2, 16, 20, 20), (16, 16, 3, 3))])
@pytest.mark.parametrize("split", [False, True])
def test_split_over_the_pool_or_not(monkeypatch, labels, x, k, split):
    # Work from SPLIT_WORK up is split into row blocks over the pool (one BLAS thread each).
    monkeypatch.setattr(conv_gemm, "MIN_BLOCK", 16)
    monkeypatch.setattr(conv_gemm, "worker_count", lambda: 4)
    monkeypatch.setattr(conv_gemm, "SPLIT_WORK", 1 if split else 1 << 40)
    calls = []
    real = conv_gemm.run_split
    monkeypatch.setattr(conv_gemm, "run_split", lambda *a: (calls.append(a[2]), real(*a)))
    check(conv_module(x, k, "f32", labels, square(3, pad_low=1, pad_high=1)))
    assert bool(calls) == (split and conv_gemm.blas_thread_controls() is not None)
    assert all(units > 2 for units in calls)


@pytest.mark.parametrize("split", [False, True])
def test_im2col_rows_split_or_not(monkeypatch, split):
    monkeypatch.setattr(conv_gemm, "SPLIT_WORK", 1 if split else 1 << 40)
    monkeypatch.setattr(conv_gemm, "MIN_BLOCK", 8)
    check(conv_module((2, 13, 13, 16), (3, 3, 16, 8), "f32", "b01f_01io->b01f", square(3, stride=2)), wide=False)


def test_gemm_takes_transposed_and_strided_views():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((30, 20)).astype(np.float32)
    b = rng.standard_normal((40, 30)).astype(np.float32)
    c = np.zeros((20, 50), np.float32)
    conv_gemm.gemm(a.T, b.T[:, ::2][:, :10], c[:, 5:15], False)     # transposed lhs, strided rhs
    conv_gemm.gemm(a.T, b.T[:, ::2][:, :10], c[:, 5:15], True)
    want = np.zeros_like(c)
    want[:, 5:15] = 2 * (a.T @ b.T[:, ::2][:, :10])
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)


@st.composite
def dense_cases(draw):
    rank = draw(st.integers(0, 2))
    groups = draw(st.sampled_from([1, 1, 2]))
    per_group = draw(st.integers(conv_gemm.WIDE_MIN_FEATURES, conv_gemm.WIDE_MIN_FEATURES + 4))
    o = groups * draw(st.integers(1, 3))
    n = draw(st.integers(1, 3))
    spatial = [draw(st.integers(1, 7)) for _ in range(rank)]
    window = Window(tuple(WindowDim(draw(st.integers(1, 3)), pad_low=draw(st.integers(-1, 2)),
                                    pad_high=draw(st.integers(-1, 2)), base_dilation=draw(st.sampled_from([1, 1, 2])),
                                    window_dilation=draw(st.integers(1, 2)), reversal=draw(st.booleans()))
                          for _ in range(rank)))
    pin, pk, pout = (draw(st.permutations(range(rank + 2))) for _ in range(3))
    dn = ConvDimensionNumbers(pin.index(0), pin.index(1), tuple(pin.index(2 + s) for s in range(rank)),
                              pk.index(1), pk.index(0), tuple(pk.index(2 + s) for s in range(rank)),
                              pout.index(0), pout.index(1), tuple(pout.index(2 + s) for s in range(rank)))
    x_canon, k_canon = (n, per_group * groups, *spatial), (o, per_group, *[w.size for w in window.dims])
    return (tuple(x_canon[p] for p in pin), tuple(k_canon[p] for p in pk), dn.to_text(), window, groups,
            draw(st.sampled_from(["f32", "f64"])), draw(st.integers(0, 1000)))


@given(dense_cases())
@settings(max_examples=80, deadline=None)
def test_random_dense_convolutions(case):
    x, k, labels, window, groups, t, seed = case
    module = conv_module(x, k, t, labels, window, groups)
    if 0 in module.entry.root.shape.dims:
        return              # cropped to nothing: the im2col path's zeros (tested there)
    check(module, seed=seed)


@pytest.mark.parametrize("rows", [5, 40])
def test_few_rows_split_by_output_features(monkeypatch, rows):
    # 1x1 convolutions with fewer rows than output features are split by feature blocks
    monkeypatch.setattr(conv_gemm, "SPLIT_WORK", 1)
    monkeypatch.setattr(conv_gemm, "MIN_BLOCK", 8)
    check(conv_module((1, rows, 1, 16), (1, 1, 16, 32), "f32", "b01f_01io->b01f", square(1)))
