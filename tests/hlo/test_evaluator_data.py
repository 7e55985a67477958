"""Data movement rules: broadcast, reshape, transpose, slices, pad, concatenate, iota, gather,
rng-bit-generator; checked against NumPy and against naive per-element loops."""

import itertools

import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st
from hypothesis.extra import numpy as hnp

from nbxla.hlo import Builder, Shape, TupleShape, shape_of
from nbxla.hlo.attributes import PadDim, SliceDim
from nbxla.hlo.evaluator import evaluate

from tests.evaluator_util import run_op

F32 = np.float32


def test_broadcast():
    x = np.array([1, 2, 3], np.int32)
    assert np.array_equal(run_op("broadcast", x, shape=Shape("s32", (2, 3)), dimensions=(1,)), np.tile(x, (2, 1)))
    assert np.array_equal(run_op("broadcast", x, shape=Shape("s32", (3, 2)), dimensions=(0,)), np.tile(x[:, None], (1, 2)))
    s = run_op("broadcast", np.float32(7), shape=Shape("f32", (2, 0, 2)), dimensions=())
    assert s.shape == (2, 0, 2)
    # Size-1 operand dimensions stretch; an unsorted mapping transposes.
    y = np.arange(6, dtype=F32).reshape(2, 1, 3)
    got = run_op("broadcast", y, shape=Shape("f32", (3, 4, 2)), dimensions=(2, 1, 0))
    want = np.broadcast_to(np.transpose(y, (2, 1, 0)), (3, 4, 2))
    assert np.array_equal(got, want)


def test_reshape_transpose_reverse_concatenate():
    x = np.arange(24, dtype=np.int16).reshape(2, 3, 4)
    assert np.array_equal(run_op("reshape", x, shape=Shape("s16", (4, 6))), x.reshape(4, 6))
    assert np.array_equal(run_op("reshape", np.zeros((0, 3), F32), shape=Shape("f32", (3, 0))), np.zeros((3, 0)))
    assert np.array_equal(run_op("transpose", x, dimensions=(2, 0, 1)), np.transpose(x, (2, 0, 1)))
    assert np.array_equal(run_op("reverse", x, dimensions=(0, 2)), x[::-1, :, ::-1])
    assert np.array_equal(run_op("reverse", x, dimensions=()), x)
    y = np.ones((2, 5, 4), np.int16)
    assert np.array_equal(run_op("concatenate", x, y, np.zeros((2, 0, 4), np.int16), dimensions=(1,)),
                          np.concatenate([x, y], 1))


def test_slice():
    x = np.arange(30).reshape(5, 6)
    got = run_op("slice", x, slice=(SliceDim(1, 5, 2), SliceDim(0, 6, 4)))
    assert np.array_equal(got, x[1:5:2, 0:6:4])
    assert run_op("slice", x, slice=(SliceDim(2, 2), SliceDim(0, 6))).shape == (0, 6)


def naive_pad(x, value, padding):
    out_shape = [p.low + p.high + n + max(n - 1, 0) * p.interior for n, p in zip(x.shape, padding)]
    out = np.full(out_shape, value, x.dtype)
    for idx in np.ndindex(*x.shape):
        pos = [p.low + i * (p.interior + 1) for i, p in zip(idx, padding)]
        if all(0 <= q < m for q, m in zip(pos, out_shape)):
            out[tuple(pos)] = x[idx]
    return out


@st.composite
def pad_cases(draw):
    x = draw(hnp.arrays(np.int32, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)))
    padding = []
    for n in x.shape:
        interior = draw(st.integers(0, 2))
        full = n + max(n - 1, 0) * interior
        low = draw(st.integers(-full - 1, 3))
        high = draw(st.integers(max(-full - low, -full - 1), 3))
        padding.append(PadDim(low, high, interior))
    assume(all(p.low + p.high + n + max(n - 1, 0) * p.interior >= 0 for n, p in zip(x.shape, padding)))
    return x, tuple(padding)


@given(pad_cases())
@settings(max_examples=150, deadline=None)
def test_pad_matches_naive_loop(case):
    x, padding = case
    got = run_op("pad", x, np.int32(-9), padding=padding)
    assert np.array_equal(got, naive_pad(x, -9, padding))


def test_pad_hand_checked():
    x = np.array([1, 2, 3], F32)
    pad = lambda *p: run_op("pad", x, np.float32(0), padding=(PadDim(*p),)).tolist()
    assert pad(1, 2, 1) == [0, 1, 0, 2, 0, 3, 0, 0]
    assert pad(-1, 0, 1) == [0, 2, 0, 3]
    assert pad(-2, -1, 1) == [2, 0]
    assert pad(0, -3, 0) == []


def dynamic_slice(x, starts, sizes, vector_form=False):
    b = Builder("ds")
    p = b.parameter(shape_of(x))
    if vector_form:
        idx = [b.parameter(shape_of(np.asarray(starts)))]
        args = [x, np.asarray(starts)]
    else:
        idx = [b.parameter(shape_of(s)) for s in starts]
        args = [x, *starts]
    b.op("dynamic-slice", p, *idx, dynamic_slice_sizes=tuple(sizes))
    return evaluate(b.build(), args)


@pytest.mark.parametrize("starts, want_starts", [((1, 2), (1, 2)), ((-5, 9), (0, 3)), ((3, 3), (2, 3))])
def test_dynamic_slice_clamps_starts(starts, want_starts):
    x = np.arange(30, dtype=F32).reshape(5, 6)
    got = dynamic_slice(x, [np.int32(s) for s in starts], (3, 3))
    r, c = want_starts
    assert np.array_equal(got, x[r:r + 3, c:c + 3])


def test_dynamic_slice_vector_form_and_unsigned_indices():
    x = np.arange(30, dtype=F32).reshape(5, 6)
    assert np.array_equal(dynamic_slice(x, np.array([4, 1], np.int64), (2, 2), vector_form=True), x[3:5, 1:3])
    got = dynamic_slice(x, [np.uint64(2 ** 64 - 1), np.uint8(1)], (2, 2))
    assert np.array_equal(got, x[3:5, 1:3])


def test_dynamic_update_slice_clamps_and_does_not_modify_input():
    x = np.zeros((4, 4), np.int32)
    upd = np.ones((2, 3), np.int32)
    b = Builder("dus")
    p, u = b.parameter(shape_of(x)), b.parameter(shape_of(upd))
    i, j = b.parameter(Shape("s32")), b.parameter(Shape("s32"))
    b.op("dynamic-update-slice", p, u, i, j)
    got = evaluate(b.build(), [x, upd, np.int32(3), np.int32(-2)])
    want = np.zeros((4, 4), np.int32)
    want[2:4, 0:3] = 1
    assert np.array_equal(got, want) and not x.any()


@pytest.mark.parametrize("element_type, dtype", [("s32", np.int32), ("u8", np.uint8), ("f32", F32),
                                                 ("f16", np.float16), ("pred", np.bool_), ("c64", np.complex64)])
def test_iota(element_type, dtype):
    b = Builder("iota")
    b.iota(Shape(element_type, (3, 4)), 1)
    got = evaluate(b.build(), [])
    assert got.dtype == dtype and np.array_equal(got, np.tile(np.arange(4), (3, 1)).astype(dtype))


# --- gather ----------------------------------------------------------------------------------

def gather(x, indices, **attrs):
    b = Builder("gather")
    p, i = b.parameter(shape_of(x)), b.parameter(shape_of(indices))
    b.op("gather", p, i, **attrs)
    comp = b.build()
    return evaluate(comp, [x, indices]), comp.root.shape


def naive_gather(x, indices, out_dims, offset_dims, collapsed_slice_dims, start_index_map, index_vector_dim,
                 slice_sizes, operand_batching_dims=(), start_indices_batching_dims=()):
    """XLA's gather, straight from the operation semantics, one output element at a time."""
    out = np.zeros(out_dims, x.dtype)
    batch_out = [d for d in range(len(out_dims)) if d not in offset_dims]
    idx_batch = [d for d in range(indices.ndim) if d != index_vector_dim]
    offset_operand = [d for d in range(x.ndim) if d not in collapsed_slice_dims and d not in operand_batching_dims]
    for o in np.ndindex(*out_dims):
        g = [o[d] for d in batch_out]
        if index_vector_dim == indices.ndim:
            vec = [indices[tuple(g)]]
        else:
            vec = [indices[tuple(g[:index_vector_dim]) + (k,) + tuple(g[index_vector_dim:])]
                   for k in range(indices.shape[index_vector_dim])]
        start = [0] * x.ndim
        for k, d in enumerate(start_index_map):
            start[d] = int(vec[k])
        for od, sd in zip(operand_batching_dims, start_indices_batching_dims):
            start[od] = g[idx_batch.index(sd)]
        start = [min(max(s, 0), n - z) for s, n, z in zip(start, x.shape, slice_sizes)]
        full = list(start)
        for k, d in enumerate(offset_operand):
            full[d] += o[offset_dims[k]]
        out[o] = x[tuple(full)]
    return out


@st.composite
def gather_cases(draw):
    rank = draw(st.integers(1, 3))
    dims = draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank))
    x = np.arange(int(np.prod(dims)), dtype=np.int32).reshape(dims) * 3 + 1
    start_map = draw(st.permutations(range(rank)).map(lambda p: p[:draw(st.integers(1, rank))]))
    collapsed = tuple(sorted(draw(st.sets(st.sampled_from(range(rank))))))
    sizes = tuple(1 if d in collapsed else draw(st.integers(0, dims[d])) for d in range(rank))
    batch = draw(st.lists(st.integers(0, 3), max_size=2))
    k = len(start_map)
    ivd = draw(st.integers(0, len(batch)))
    implicit = ivd == len(batch) and k == 1 and draw(st.booleans())
    idx_shape = list(batch) if implicit else batch[:ivd] + [k] + batch[ivd:]
    indices = draw(hnp.arrays(st.sampled_from([np.int32, np.int64, np.uint8]), idx_shape,
                              elements=st.integers(0, 6)))
    if indices.dtype.kind == "i":
        indices = indices - 2  # exercise clamping on both sides
    n_offset = rank - len(collapsed)
    out_rank = len(batch) + n_offset
    offset_dims = tuple(sorted(draw(st.permutations(range(out_rank)))[:n_offset]))
    attrs = dict(offset_dims=offset_dims, collapsed_slice_dims=collapsed, start_index_map=tuple(start_map),
                 index_vector_dim=ivd, slice_sizes=sizes)
    return x, indices, attrs


@given(gather_cases())
@settings(max_examples=150, deadline=None)
def test_gather_matches_naive_loop(case):
    x, indices, attrs = case
    got, shape = gather(x, indices, **attrs)
    assert got.shape == shape.dims
    assert np.array_equal(got, naive_gather(x, indices, shape.dims, **attrs))


def test_gather_take_rows_like_jax():
    # jnp.take(x, idx, axis=0): the corpus' gather_label_pick form.
    x = np.arange(12, dtype=F32).reshape(4, 3)
    idx = np.array([[3], [0], [7]], np.int64)  # 7 is clamped to 3
    got, _ = gather(x, idx, offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,),
                    index_vector_dim=1, slice_sizes=(1, 3))
    assert np.array_equal(got, x[[3, 0, 3]])


def test_gather_with_batching_dims():
    # Per batch b: out[b, j] = x[b, idx[b, j]] (operand dim 0 batched with indices dim 0).
    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    idx = np.array([[0, 3], [1, 1], [2, 9]], np.int32)
    attrs = dict(offset_dims=(), collapsed_slice_dims=(1,), start_index_map=(1,), index_vector_dim=2,
                 slice_sizes=(1, 1), operand_batching_dims=(0,), start_indices_batching_dims=(0,))
    got, shape = gather(x, idx, **attrs)
    assert np.array_equal(got, np.array([[0, 3], [5, 5], [10, 11]]))
    assert np.array_equal(got, naive_gather(x, idx, shape.dims, **attrs))


# --- rng-bit-generator --------------------------------------------------------------------------

def rng(state, out_shape, algorithm="rng_default"):
    b = Builder("rng")
    s = b.parameter(shape_of(state))
    b.op("rng-bit-generator", s, shape=TupleShape((shape_of(state), out_shape)), algorithm=algorithm)
    return evaluate(b.build(), [state])


def test_rng_bit_generator_is_deterministic_and_advances_state():
    state = np.array([1, 2], np.uint64)
    s1, bits1 = rng(state, Shape("u32", (4, 5)))
    s1b, bits1b = rng(state, Shape("u32", (4, 5)))
    assert np.array_equal(bits1, bits1b) and np.array_equal(s1, s1b)
    assert bits1.dtype == np.uint32 and bits1.shape == (4, 5)
    assert not np.array_equal(s1, state)
    _, bits2 = rng(s1, Shape("u32", (4, 5)))
    assert not np.array_equal(bits1, bits2)
    assert len(np.unique(bits1)) > 15  # looks random
    s3, bits3 = rng(np.array([1, 2, 3], np.uint64), Shape("u8", (7,)), "rng_philox")
    assert s3.shape == (3,) and bits3.dtype == np.uint8 and bits3.shape == (7,)


def test_rng_bit_generator_gives_xla_bits():
    # Recorded from JAX 0.10.2 on XLA:CPU, lax.rng_bit_generator with key u32[4] (7, 0, 0, 0).
    state = np.array([7, 0], np.uint64)
    new, bits = rng(state, Shape("u32", (4,)), "rng_three_fry")
    assert bits.tolist() == [3901892970, 3158004665, 2964889903, 1334547408] and new.tolist() == [7, 2]
    # A 32-bit ThreeFry result splits its first even axis: block words go to the two halves.
    _, bits = rng(state, Shape("u32", (2, 1, 3)), "rng_three_fry")
    assert bits.reshape(-1).tolist() == [3901892970, 2964889903, 407867057, 3158004665, 1334547408, 314635895]
    new, bits = rng(state, Shape("u32", (6,)), "rng_philox")
    assert bits.tolist() == [2065998352, 3620038622, 1304461075, 3457000136, 3480380019, 1020443737]
    assert new.tolist() == [7, 2]
    _, bits = rng(state, Shape("u64", (3,)), "rng_default")           # Philox on the CPU
    assert bits.tolist() == [15547947493812904464, 14847702527692013331, 4382772481303405171]
    _, low = rng(state, Shape("u8", (4,)), "rng_three_fry")           # the low byte of each word
    assert low.tolist() == [v & 0xFF for v in [3901892970, 3158004665, 2964889903, 1334547408]]
