"""Dense 2-D convolutions as im2col GEMMs over blocks of output rows (runtime/conv_blocks.py):
both output forms (channels-last, channels-first) and any other dim_labels, strides, padding,
window dilation, reversal, batches, f32 / f64 / bf16, one block or many, split over the pool or
not, and the cost rule against the per-tap GEMMs on both sides -- all against the reference
evaluator."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nbxla.hlo.attributes import ConvDimensionNumbers, Window, WindowDim
from nbxla.codegen.patch_gemm import SHORT_LOOP
from nbxla.hlo.evaluator import evaluate, flatten
from nbxla.runtime import conv_blocks, conv_gemm, small_gemm
from nbxla.runtime.cpu_library import library_thunk
from nbxla.testing import compare_arrays

from .test_conv_gemm import conv_module, square


def check(module, how, seed=0):
    thunk, why = library_thunk(module.entry.root, None)
    assert thunk is not None, why
    assert how in thunk.how
    rng = np.random.default_rng(seed)
    inputs = [rng.standard_normal(p.shape.dims).astype(p.shape.dtype) for p in module.entry.parameters]
    got = thunk(inputs)
    (want,) = flatten(evaluate(module, inputs))
    assert got.shape == want.shape and got.dtype == want.dtype
    ok, detail = compare_arrays(got, want)
    assert ok, detail
    return got


BLOCKED, PER_TAP = conv_blocks.BlockedConvolution.how, conv_gemm.WideGemmConvolution.how

CASES = [
    # labels, input, kernel, window
    ("b01f_01io->b01f", (2, 9, 8, 3), (3, 3, 3, 12), square(3, pad_low=1, pad_high=1)),
    ("bf01_oi01->bf01", (2, 3, 9, 8), (12, 3, 3, 3), square(3, pad_low=1, pad_high=1)),
    ("b01f_01io->b01f", (1, 28, 28, 16), (5, 5, 16, 8), square(5, stride=2, pad_low=2, pad_high=1)),
    ("bf01_oi01->bf01", (1, 16, 28, 28), (8, 16, 5, 5), square(5, stride=2, pad_low=2, pad_high=1)),
    ("bf01_oi01->bf01", (1, 1, 12, 12), (7, 1, 5, 5), square(5)),                            # LeNet-like
    ("b01f_01io->b01f", (1, 13, 11, 4), (3, 3, 4, 6), square(3, window_dilation=2, pad_low=2, pad_high=2)),
    ("b01f_01io->b01f", (1, 9, 9, 5), (3, 3, 5, 6), square(3, pad_low=1, pad_high=0, reversal=True)),
    ("f01b_i01o->01bf", (6, 7, 5, 2), (6, 3, 2, 7), Window((WindowDim(3, stride=2), WindowDim(2, pad_low=1)))),
    ("b01f_01io->b01f", (1, 7, 7, 8), (1, 1, 8, 4), square(1, stride=2)),                  # strided 1x1
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1]}")
@pytest.mark.parametrize("t", ["f32", "f64"])
def test_blocked_im2col_matches_the_evaluator(case, t):
    labels, x, k, window = case
    check(conv_module(x, k, t, labels, window), BLOCKED)


@pytest.mark.parametrize("dilated", [False, True])
@pytest.mark.parametrize("products", [SHORT_LOOP, SHORT_LOOP + 1])
def test_short_window_rows_unrolled_or_looped(products, dilated):
    """nbxla's patch-GEMM kernel writes a window row's products out unrolled up to SHORT_LOOP
    of them (KW * C; C with window dilation), else loops: both sides against the evaluator."""
    if dilated:         # (the loop over one window column's channels)
        x, k, window = (1, 11, 12, products), (3, 3, products, 5), square(3, window_dilation=2)
    else:               # (a 1-channel, `products`-wide window: KW * C products per row)
        x, k, window = (2, 9, 14, 1), (3, products, 1, 5), Window((WindowDim(3), WindowDim(products)))
    got = check(conv_module(x, k, "f32", "b01f_01io->b01f", window), BLOCKED + ", by nbxla")
    assert got.shape[-1] == 5


def test_patch_gemm_kernels_are_kept_in_the_persistent_cache(monkeypatch, tmp_path):
    """A geometry compiled in one process is loaded from the persistent cache in the next (the
    process's own table emptied here), and computes the same."""
    monkeypatch.setenv("NBXLA_CACHE_DIR", str(tmp_path))
    module = conv_module((2, 10, 9, 3), (3, 3, 3, 7), "f32", "b01f_01io->b01f", square(3))
    for loaded in (False, True):
        monkeypatch.setattr(small_gemm, "_kernels", {})
        check(module, BLOCKED + ", by nbxla")
        (found,) = small_gemm._kernels.values()
        assert found[1].from_cache == loaded
        assert any(tmp_path.iterdir())


@pytest.mark.parametrize("patch_bytes", [1, 4400, 1 << 20])
@pytest.mark.parametrize("labels,x,k", [("b01f_01io->b01f", (2, 11, 10, 6), (3, 3, 6, 5)),
                                        ("bf01_oi01->bf01", (2, 6, 11, 10), (5, 6, 3, 3))])
def test_one_block_or_many(monkeypatch, patch_bytes, labels, x, k):
    # one output row per block, a few rows with a short last block, the whole image at once
    monkeypatch.setattr(conv_blocks, "PATCH_BYTES", patch_bytes)
    monkeypatch.setattr(conv_blocks, "MIN_POSITIONS", 1)
    module = conv_module(x, k, "f32", labels, square(3, pad_low=1, pad_high=1))
    check(module, BLOCKED)
    blocks = conv_blocks.BlockedConvolution(module.entry.root).blocks()
    # (first image, images, first row, rows): a row per block, two, both whole images at once
    assert blocks == {1: [(n, 1, h, 1) for n in (0, 1) for h in range(11)],
                      4400: [(n, 1, h, 2 if h < 10 else 1) for n in (0, 1) for h in range(0, 11, 2)],
                      1 << 20: [(0, 2, 0, 11)]}[patch_bytes]


@pytest.mark.parametrize("split", [False, True])
def test_split_over_the_pool_or_not(monkeypatch, split):
    # BLAS blocks (12 output features with AVX-512 would be nbxla's kernel: 96 here is BLAS)
    monkeypatch.setattr(conv_blocks, "PATCH_BYTES", 2000)
    monkeypatch.setattr(conv_blocks, "MIN_POSITIONS", 1)
    monkeypatch.setattr(conv_gemm, "worker_count", lambda: 4)
    monkeypatch.setattr(conv_gemm, "SPLIT_WORK", 1 if split else 1 << 40)
    calls = []
    real = conv_gemm.run_split
    monkeypatch.setattr(conv_gemm, "run_split", lambda *a: (calls.append(a[2]), real(*a)))
    check(conv_module((2, 12, 12, 8), (3, 3, 8, 2 * conv_blocks.NATIVE_GEMM_BYTES // 4 + 8), "f32",
                      "b01f_01io->b01f", square(3, pad_low=1, pad_high=1)), BLOCKED + ", by BLAS")
    assert bool(calls) == (split and conv_gemm.blas_thread_controls() is not None)


NATIVE_SPLIT_CASES = [
    # channels-last output written in place; few features rounded up; channels-first stored
    # a plane apart; stride 2 (the benchmark's 3x3 28x28 s2 layer, small); several images
    ("b01f_01io->b01f", (1, 12, 12, 8), (3, 3, 8, 8), square(3, pad_low=1, pad_high=1)),
    ("b01f_01io->b01f", (2, 9, 7, 5), (3, 3, 5, 6), square(3, pad_low=1, pad_high=1)),
    ("bf01_oi01->bf01", (2, 5, 9, 7), (6, 5, 3, 3), square(3, pad_low=1, pad_high=1)),
    ("b01f_01io->b01f", (1, 14, 14, 16), (3, 3, 16, 16), square(3, stride=2, pad_low=1, pad_high=1)),
    ("b01f_01io->b01f", (3, 5, 6, 4), (3, 3, 4, 8), square(3, pad_low=1, pad_high=1)),
]


@pytest.mark.parametrize("case", NATIVE_SPLIT_CASES, ids=lambda c: f"{c[0]}-{c[1]}")
@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("min_positions", [1, 7, 1000])
def test_native_kernel_split_by_runs_of_rows(monkeypatch, case, split, min_positions):
    # nbxla's kernel from SPLIT_WORK multiply-adds on: runs of output rows over the pool (one
    # row per run, several, or all in one run), each written straight into the output; below
    # the threshold, the blocks on the calling thread
    labels, x, k, window = case
    monkeypatch.setattr(conv_blocks, "worker_count", lambda: 2)
    monkeypatch.setattr(conv_gemm, "SPLIT_WORK", 1 if split else 1 << 40)
    monkeypatch.setattr(conv_blocks, "SPLIT_MIN_POSITIONS", min_positions)
    extents = []
    real = conv_blocks.run_split
    monkeypatch.setattr(conv_blocks, "run_split", lambda *a: (extents.append(a[2]), real(*a)))
    check(conv_module(x, k, "f32", labels, window), BLOCKED + ", by nbxla")
    assert bool(extents) == split
    if split:
        h, w = (x[1], x[2]) if labels[1] == "0" else (x[2], x[3])
        rows = x[0] * ((h + 2 - 3) // window.dims[0].stride + 1)
        ow = (w + 2 - 3) // window.dims[1].stride + 1
        assert extents == [max(1, min(conv_blocks.SPLIT_RUNS_PER_THREAD * 2, rows, rows * ow // min_positions))]


def test_native_split_rows_one_thread_stays_here(monkeypatch):
    # one worker: no pool, the blocks on the calling thread whatever the work
    monkeypatch.setattr(conv_blocks, "worker_count", lambda: 1)
    monkeypatch.setattr(conv_gemm, "SPLIT_WORK", 1)
    monkeypatch.setattr(conv_blocks, "run_split", lambda *a: pytest.fail("split on one worker"))
    labels, x, k, window = NATIVE_SPLIT_CASES[0]
    check(conv_module(x, k, "f32", labels, window), BLOCKED + ", by nbxla")


def _count_feature_splits(monkeypatch) -> list:
    """A list that gains an item each time a block's GEMM is split by output features."""
    calls = []
    real = conv_blocks.BlockedConvolution._split_by_features
    monkeypatch.setattr(conv_blocks.BlockedConvolution, "_split_by_features",
                        lambda self, *a: (calls.append(1), real(self, *a)))
    return calls


@pytest.mark.parametrize("labels,x,k", [("bf01_oi01->bf01", (1, 5, 6, 7), (70, 5, 3, 3)),
                                         ("bf01_oi01->bf01", (2, 5, 6, 7), (70, 5, 3, 3))])
@pytest.mark.parametrize("few_blocks", [True, False])
def test_fewer_blocks_than_threads_split_by_features(monkeypatch, labels, x, k, few_blocks):
    # BLAS with fewer blocks than threads: each block's GEMM split by output features (pieces
    # of whole vectors, the last one narrower), else the blocks over the pool as they are
    monkeypatch.setattr(conv_blocks, "worker_count", lambda: 4 if few_blocks else 1)
    monkeypatch.setattr(conv_gemm, "worker_count", lambda: 4)
    monkeypatch.setattr(conv_gemm, "SPLIT_WORK", 1)
    calls = _count_feature_splits(monkeypatch)
    check(conv_module(x, k, "f32", labels, square(3, pad_low=1, pad_high=1)), BLOCKED + ", by BLAS")
    assert bool(calls) == few_blocks


@pytest.mark.parametrize("x,threads,want", [
    ((1, 8, 7, 5), 2, [(0, 1, 0, 4), (0, 1, 4, 4)]),        # one image: runs of output rows
    ((1, 9, 7, 5), 4, [(0, 1, 0, 2), (0, 1, 2, 2), (0, 1, 4, 2), (0, 1, 6, 3)]),
    ((3, 4, 4, 5), 2, [(0, 1, 0, 4), (1, 2, 0, 4)]),        # several small images: whole ones
    ((2, 5, 4, 5), 4, [(0, 1, 0, 2), (0, 1, 2, 3), (1, 1, 0, 2), (1, 1, 2, 3)]),
])
@pytest.mark.parametrize("split", [True, False])
def test_blas_channels_last_one_block_cut_by_rows(monkeypatch, x, threads, want, split):
    # BLAS, a channels-last output in place, fewer blocks than threads: from SPLIT_WORK on,
    # the blocks are cut by images / output rows (each thread gathers its own patches and
    # writes its rows of the output); below it, one block on the calling thread
    monkeypatch.setattr(conv_blocks, "worker_count", lambda: threads)
    monkeypatch.setattr(conv_gemm, "worker_count", lambda: threads)
    monkeypatch.setattr(conv_gemm, "SPLIT_WORK", 1 if split else 1 << 40)
    monkeypatch.setattr(conv_blocks.BlockedConvolution, "_split_by_features",
                        lambda *a: pytest.fail("split by features"))
    module = conv_module(x, (3, 3, 5, 70), "f32", "b01f_01io->b01f", square(3, pad_low=1, pad_high=1))
    thunk, _ = library_thunk(module.entry.root, None)
    check(module, BLOCKED + ", by BLAS")
    thunk([np.ones(x, np.float32), np.ones((3, 3, 5, 70), np.float32)])
    assert thunk.blas_direct
    assert thunk.units == (want if split else thunk.blocks())


def test_blas_channels_last_one_output_row_split_by_features(monkeypatch):
    # fewer output rows than threads: nothing to cut by rows, the GEMM split by features
    monkeypatch.setattr(conv_blocks, "worker_count", lambda: 4)
    monkeypatch.setattr(conv_gemm, "worker_count", lambda: 4)
    monkeypatch.setattr(conv_gemm, "SPLIT_WORK", 1)
    calls = _count_feature_splits(monkeypatch)
    check(conv_module((1, 3, 9, 5), (1, 3, 5, 70), "f32", "b01f_01io->b01f",
                      Window((WindowDim(1, stride=2), WindowDim(3, pad_low=1, pad_high=1)))), BLOCKED + ", by BLAS")
    assert calls


F32_LIMIT = conv_blocks.NATIVE_GEMM_BYTES // 4      # output features nbxla's kernel takes (f32)
WIDE_O = F32_LIMIT + 1                              # the fewest it does not


@pytest.mark.parametrize("t,features", [("f32", F32_LIMIT), ("f32", F32_LIMIT + 1), ("f32", F32_LIMIT // 2 + 1),
                                        ("f32", 3), ("f64", F32_LIMIT // 2), ("f64", F32_LIMIT // 2 + 1)])
@pytest.mark.parametrize("labels", ["b01f_01io->b01f", "bf01_oi01->bf01"])
def test_gemm_kernel_rule_both_sides(t, features, labels):
    # up to NATIVE_GEMM_BYTES of output features per position (rounded up to a power of two
    # below a register, to whole registers above): nbxla's GEMM kernel; beyond, BLAS
    x, k = ((2, 7, 6, 5), (3, 3, 5, features)) if labels[1] == "0" else ((2, 5, 7, 6), (features, 5, 3, 3))
    native = features * (4 if t == "f32" else 8) <= conv_blocks.NATIVE_GEMM_BYTES
    check(conv_module(x, k, t, labels, square(3, pad_low=1, pad_high=1)), BLOCKED + (", by nbxla" if native else ", by BLAS"))


@pytest.mark.parametrize("channels", [conv_blocks.WIDE_MIN_CHANNELS - 1, conv_blocks.WIDE_MIN_CHANNELS])
@pytest.mark.parametrize("features", [4, WIDE_O])
@pytest.mark.parametrize("labels", ["b01f_01io->b01f", "bf01_oi01->bf01"])
@pytest.mark.parametrize("large", [True, False])
def test_cost_rule_both_sides(monkeypatch, channels, features, labels, large):
    # unstrided dense: blocked im2col below WIDE_MIN_CHANNELS input channels or below
    # PER_TAP_MIN_POSITIONS output positions per image, per-tap GEMMs from both -- unless the
    # output features are few enough for nbxla's own kernel (blocked)
    positions = 6 * 5
    monkeypatch.setattr(conv_blocks, "PER_TAP_MIN_POSITIONS", {"channels-last": positions + (0 if large else 1),
                                                               "channels-first": positions + (0 if large else 1)})
    o = features
    x, k = ((1, 6, 5, channels), (3, 3, channels, o)) if labels[1] == "0" else ((1, channels, 6, 5), (o, channels, 3, 3))
    per_tap = channels >= conv_blocks.WIDE_MIN_CHANNELS and features == WIDE_O and large
    check(conv_module(x, k, "f32", labels, square(3, pad_low=1, pad_high=1)), PER_TAP if per_tap else BLOCKED)


@pytest.mark.parametrize("features", [4, WIDE_O])
def test_pointwise_convolutions_are_one_gemm_unless_native(features):
    # 1x1, unpadded: the per-tap path's single GEMM on the input (no patch copy), unless nbxla's
    # own kernel takes the output features; padded, the blocked path
    module = conv_module((1, 6, 5, 16), (1, 1, 16, features), "f32", "b01f_01io->b01f", square(1))
    check(module, PER_TAP if features == WIDE_O else BLOCKED + ", by nbxla")
    padded = conv_module((1, 6, 5, 16), (1, 1, 16, WIDE_O), "f32", "b01f_01io->b01f", square(1, pad_low=1))
    check(padded, BLOCKED + ", by BLAS")


def test_strided_wide_inputs_are_blocked_too():
    c = conv_blocks.WIDE_MIN_CHANNELS
    check(conv_module((1, 7, 7, c), (3, 3, c, 4), "f32", "b01f_01io->b01f", square(3, stride=2)), BLOCKED)


def test_bf16_is_computed_in_f32_and_rounded_once():
    got = check(conv_module((1, 9, 9, 3), (3, 3, 3, 8), "bf16", "b01f_01io->b01f", square(3, pad_low=1, pad_high=1)),
                BLOCKED)
    assert got.dtype.name == "bfloat16"


@pytest.mark.parametrize("why,window", [("lhs dilation", square(3, base_dilation=2)),
                                        ("negative padding", square(3, pad_low=-1))])
def test_refusals_take_the_general_im2col(why, window):
    module = conv_module((1, 9, 9, 4), (3, 3, 4, 5), "f32", "b01f_01io->b01f", window)
    assert conv_blocks.blocked_refusal(module.entry.root) == why
    check(module, "im2col + one matmul")


@st.composite
def dense_2d_cases(draw):
    c = draw(st.integers(1, 9))
    o = draw(st.integers(1, 5) | st.integers(33, 35))     # nbxla's GEMM kernel / BLAS (f32)
    n = draw(st.integers(1, 3))
    spatial = [draw(st.integers(1, 9)) for _ in range(2)]
    window = Window(tuple(WindowDim(draw(st.integers(1, 4)), stride=draw(st.integers(1, 3)),
                                    pad_low=draw(st.integers(0, 2)), pad_high=draw(st.integers(0, 2)),
                                    window_dilation=draw(st.integers(1, 2)), reversal=draw(st.booleans()))
                          for _ in range(2)))
    pin, pk, pout = (draw(st.sampled_from([[0, 1, 2, 3], [0, 2, 3, 1]]) | st.permutations(range(4)))
                     for _ in range(3))
    dn = ConvDimensionNumbers(pin.index(0), pin.index(1), tuple(pin.index(2 + s) for s in range(2)),
                              pk.index(1), pk.index(0), tuple(pk.index(2 + s) for s in range(2)),
                              pout.index(0), pout.index(1), tuple(pout.index(2 + s) for s in range(2)))
    x_canon, k_canon = (n, c, *spatial), (o, c, *[w.size for w in window.dims])
    return (tuple(x_canon[p] for p in pin), tuple(k_canon[p] for p in pk), dn.to_text(), window,
            draw(st.sampled_from(["f32", "f64"])), draw(st.integers(0, 1000)), draw(st.sampled_from([1, 300, 1 << 20])))


@given(dense_2d_cases())
@settings(max_examples=80, deadline=None)
def test_random_dense_2d_convolutions(case):
    x, k, labels, window, t, seed, patch_bytes = case
    module = conv_module(x, k, t, labels, window)
    if 0 in module.entry.root.shape.dims:
        return              # a window larger than the padded input: the general path's zeros
    saved = conv_blocks.PATCH_BYTES, conv_blocks.MIN_POSITIONS
    conv_blocks.PATCH_BYTES, conv_blocks.MIN_POSITIONS = patch_bytes, 1
    try:
        check(module, BLOCKED, seed)
    finally:
        conv_blocks.PATCH_BYTES, conv_blocks.MIN_POSITIONS = saved


@pytest.mark.parametrize("labels,x,k", [("b01f_01io->b01f", (2, 7, 6, 3), (3, 3, 3, 4)),
                                        ("bf01_oi01->bf01", (2, 3, 7, 6), (4, 3, 3, 3))])
def test_unpadded_read_only_operands(labels, x, k):
    # (no padding: the patches are gathered from the caller's own, read-only, array)
    module = conv_module(x, k, "f32", labels, square(3))
    thunk, _ = library_thunk(module.entry.root, None)
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal(p.shape.dims).astype(np.float32) for p in module.entry.parameters]
    for a in inputs:
        a.flags.writeable = False
    (want,) = flatten(evaluate(module, inputs))
    ok, detail = compare_arrays(thunk(inputs), want)
    assert ok, detail and BLOCKED in thunk.how


LANES = 16                                          # f32 features in one 64-byte vector
PANEL = F32_LIMIT                                   # the widest panel (f32)


@pytest.mark.parametrize("o,widths", [(PANEL + LANES, (PANEL, LANES)), (3 * PANEL // 2, (PANEL, PANEL // 2)),
                                      (2 * PANEL + LANES, (PANEL, PANEL, LANES)), (2 * PANEL, (PANEL, PANEL)),
                                      (PANEL + 1, None), (PANEL + LANES // 2, None)])
def test_panel_widths(o, widths):
    from nbxla.codegen.patch_gemm import panel_widths
    assert panel_widths(o, 4) == widths


@pytest.mark.parametrize("t,o", [("f32", PANEL + LANES), ("f32", 2 * PANEL + LANES), ("f64", PANEL // 2 + LANES // 2),
                                 ("bf16", 3 * PANEL // 2)])
@pytest.mark.parametrize("labels,x,k,window", [
    ("b01f_01io->b01f", (2, 7, 13, 5), (3, 3, 5, None), square(3, pad_low=1, pad_high=1)),
    ("bf01_oi01->bf01", (1, 6, 9, 9), (None, 6, 3, 3), square(3, stride=2, pad_low=0, pad_high=1)),
    ("b01f_01io->b01f", (1, 5, 27, 16), (1, 1, 16, None), square(1)),                 # pointwise (expansion)
])
def test_wide_outputs_in_panels_match_the_evaluator(t, o, labels, x, k, window):
    # more output features than one panel: nbxla's kernel panel by panel for channels-last
    # outputs; channels-first ones stay BLAS's (written in place, not transposed per block)
    k = tuple(o if d is None else d for d in k)
    check(conv_module(x, k, t, labels, window), BLOCKED + (", by nbxla" if labels.endswith("f") else ", by BLAS"))


@pytest.mark.parametrize("limit", ["depth", "kernel bytes"])
@pytest.mark.parametrize("inside", [True, False])
def test_panel_rule_both_sides(monkeypatch, limit, inside):
    # panels while the products are at most NATIVE_PANEL_DEPTH deep and the kernel matrix is
    # below NATIVE_PANEL_KERNEL_BYTES; BLAS beyond either
    c, o = 8, PANEL + LANES
    depth = 9 * c
    if limit == "depth":
        monkeypatch.setattr(conv_blocks, "NATIVE_PANEL_DEPTH", depth if inside else depth - 1)
    else:
        monkeypatch.setattr(conv_blocks, "NATIVE_PANEL_KERNEL_BYTES", depth * o * 4 + (1 if inside else 0))
    module = conv_module((1, 6, 7, c), (3, 3, c, o), "f32", "b01f_01io->b01f", square(3, pad_low=1, pad_high=1))
    check(module, BLOCKED + (", by nbxla" if inside else ", by BLAS"))


def test_bf16_constant_kernel_is_widened_once(monkeypatch):
    # a frozen model's bf16 weights: widened to f32 when the thunk is made, not on every call
    from nbxla.compiler import compile_module
    from nbxla.hlo.parser import parse_hlo
    from nbxla.runtime import cpu_library
    rng = np.random.default_rng(0)
    w = rng.standard_normal((3, 3, 4, 8)).astype(np.float32)
    literal = "{" + ", ".join("{" + ", ".join("{" + ", ".join("{" + ", ".join(f"{v:.3f}" for v in c) + "}" for c in b)
                                              + "}" for b in a) + "}" for a in w) + "}"
    text = f"""HloModule frozen
ENTRY main {{
  x = bf16[1,9,9,4] parameter(0)
  k = bf16[3,3,4,8] constant({literal})
  ROOT c = bf16[1,9,9,8] convolution(x, k), window={{size=3x3 pad=1_1x1_1}}, dim_labels=b01f_01io->b01f
}}"""
    module = parse_hlo(text)
    widened = []
    real = cpu_library.widen_value
    monkeypatch.setattr(cpu_library, "widen_value", lambda v: (widened.append(np.shape(v)), real(v))[1])
    executable = compile_module(module, "cpu").executable
    assert widened == [(3, 3, 4, 8)]
    x = rng.standard_normal((1, 9, 9, 4)).astype(module.entry.parameters[0].shape.dtype)
    for _ in range(2):
        got = executable.run([x])[0]
    # (never the kernel again; the input is widened by the blocked path's own padding copy)
    assert widened == [(3, 3, 4, 8)]
    (want,) = flatten(evaluate(module, [x]))
    ok, detail = compare_arrays(np.asarray(got), want)
    assert ok, detail
