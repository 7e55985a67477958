"""Rules that run a called computation: reduce, reduce-window, select-and-scatter, sort,
top-k, scatter."""

import functools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

from nbxla.hlo import Builder, Shape, TupleShape, scalar_computation, shape_of
from nbxla.hlo.attributes import Window, WindowDim
from nbxla.hlo.evaluator import Interpreter, evaluate
from nbxla.hlo.evaluator_reduce import recognized_binary
from nbxla.hlo.parser import parse_hlo
from nbxla.hlo.shape_inference import window_output_size

from tests.evaluator_util import scalar_fn

F32 = np.float32


def reduce(xs, inits, dims, reducer):
    b = Builder("reduce")
    ps = [b.parameter(shape_of(v)) for v in list(xs) + list(inits)]
    b.op("reduce", *ps, dimensions=tuple(dims), to_apply=reducer)
    return evaluate(b.build(), list(xs) + list(inits))


def sub_then_add(t):
    """(a, b) -> (a - 0) + b: an add reducer the fast path does not recognise."""
    return scalar_fn(lambda b, x, y: b.op("add", b.op("subtract", x, b.constant(0, t)), y), t, t)


def test_reducer_recognition():
    assert recognized_binary(scalar_computation("add", "f32")) == "add"
    assert recognized_binary(scalar_fn(lambda b, x, y: b.op("maximum", y, x), "s32", "s32")) == "maximum"
    assert recognized_binary(sub_then_add("f32")) is None
    assert recognized_binary(scalar_fn(lambda b, x, y: b.op("add", x, x), "f32", "f32")) is None
    assert recognized_binary(scalar_computation("subtract", "f32")) is None


@pytest.mark.parametrize("op, fn, dtype, t", [
    ("add", np.sum, np.float64, "f64"), ("add", np.sum, np.int8, "s8"), ("multiply", np.prod, np.int32, "s32"),
    ("maximum", np.max, F32, "f32"), ("minimum", np.min, np.uint16, "u16"),
    ("and", np.bitwise_and.reduce, np.uint8, "u8"), ("or", np.bitwise_or.reduce, np.int64, "s64"),
    ("xor", np.bitwise_xor.reduce, np.int16, "s16")])
@pytest.mark.parametrize("dims", [(0,), (1, 2), (0, 2), (), (0, 1, 2)])
def test_reduce_fast_path_matches_numpy(op, fn, dtype, t, dims):
    rng = np.random.default_rng(0)
    x = rng.integers(-50, 50, (3, 4, 5)).astype(dtype)
    identity = {"add": 0, "multiply": 1, "maximum": -1000, "minimum": 1000, "and": -1, "or": 0, "xor": 0}[op]
    init = np.array(identity).astype(dtype)
    got = reduce([x], [init], dims, scalar_computation(op, t))
    ufunc = {"add": np.add, "multiply": np.multiply, "maximum": np.maximum, "minimum": np.minimum,
             "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[op]
    with np.errstate(all="ignore"):
        want = ufunc(init, np.asarray(fn(x, axis=dims) if dims else x).astype(dtype))
    assert got.dtype == dtype and np.array_equal(got, want)


def test_reduce_general_path_matches_fast_path():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((6, 7)).astype(F32)
    for dims in [(0,), (1,), (0, 1), ()]:
        fast = reduce([x], [np.float32(0)], dims, scalar_computation("add", "f32"))
        slow = reduce([x], [np.float32(0)], dims, sub_then_add("f32"))
        np.testing.assert_allclose(slow, fast, rtol=1e-5)
        assert slow.dtype == F32


def test_reduce_init_value_enters_once():
    x = np.ones((2, 3), np.int32)
    assert reduce([x], [np.int32(10)], (1,), scalar_computation("add", "s32")).tolist() == [13, 13]
    assert reduce([x], [np.int32(10)], (1,), sub_then_add("s32")).tolist() == [13, 13]


def test_empty_reduction_returns_init():
    for reducer in (scalar_computation("maximum", "f32"), sub_then_add("f32")):
        got = reduce([np.zeros((0, 3), F32)], [np.float32(-np.inf if reducer.root.opcode == "maximum" else 5)],
                     (0,), reducer)
        assert got.shape == (3,) and np.all(got == got[0])
    assert reduce([np.zeros((4, 0), F32)], [np.float32(2)], (0,), scalar_computation("add", "f32")).shape == (0,)


def test_reduce_pred_and_nan():
    p = np.array([[True, False], [False, False]])
    assert reduce([p], [np.bool_(False)], (1,), scalar_computation("or", "pred")).tolist() == [True, False]
    assert reduce([p], [np.bool_(True)], (0,), scalar_computation("and", "pred")).tolist() == [False, False]
    assert reduce([p], [np.bool_(False)], (0,), scalar_computation("add", "pred")).tolist() == [True, False]
    x = np.array([[1, np.nan], [3, 4]], F32)
    got = reduce([x], [np.float32(-np.inf)], (1,), scalar_computation("maximum", "f32"))
    assert np.isnan(got[0]) and got[1] == 4


def argmax_reducer(vt="f32", it="s32"):
    """JAX's argmax reducer: larger value wins, ties go to the smaller index."""
    b = Builder("argmax")
    v0, i0 = b.parameter(Shape(vt)), b.parameter(Shape(it))
    v1, i1 = b.parameter(Shape(vt)), b.parameter(Shape(it))
    gt = b.compare(v0, v1, "GT")
    tie = b.op("and", b.compare(v0, v1, "EQ"), b.compare(i0, i1, "LT"))
    pick = b.op("or", gt, tie)
    return b.build(b.op("tuple", b.op("select", pick, v0, v1), b.op("select", pick, i0, i1)))


@given(hnp.arrays(np.int8, hnp.array_shapes(min_dims=2, max_dims=2, min_side=1, max_side=6),
                  elements=st.integers(-3, 3)), st.integers(0, 1))
@settings(max_examples=40, deadline=None)
def test_variadic_argmax_reduce(x, axis):
    x = x.astype(F32)
    idx = np.broadcast_to(np.arange(x.shape[axis]).reshape((-1, 1) if axis == 0 else (1, -1)), x.shape)
    idx = np.ascontiguousarray(idx, np.int32)
    values, indices = reduce([x, idx], [np.float32(-np.inf), np.int32(0)], (axis,), argmax_reducer())
    assert np.array_equal(indices, np.argmax(x, axis=axis)) and np.array_equal(values, np.max(x, axis=axis))


def test_tuple_reducer_that_cannot_run_on_arrays_falls_back_to_a_loop():
    # The reshape to [1] makes the reducer non-scalar inside, so it runs element by element.
    b = Builder("argmax_reshaping")
    v0, i0 = b.parameter(Shape("f32")), b.parameter(Shape("s32"))
    v1, i1 = b.parameter(Shape("f32")), b.parameter(Shape("s32"))
    v0 = b.reshape(b.reshape(v0, (1,)), ())
    pick = b.op("or", b.compare(v0, v1, "GT"), b.op("and", b.compare(v0, v1, "EQ"), b.compare(i0, i1, "LT")))
    reducer = b.build(b.op("tuple", b.op("select", pick, v0, v1), b.op("select", pick, i0, i1)))
    x = np.array([[1, 5, 5, 2], [7, 0, 7, 1]], F32)
    idx = np.tile(np.arange(4, dtype=np.int32), (2, 1))
    values, where = reduce([x, idx], [np.float32(-np.inf), np.int32(0)], (1,), reducer)
    assert values.tolist() == [5, 7] and where.tolist() == [1, 0] and where.dtype == np.int32


@given(hnp.arrays(st.sampled_from([np.int32, F32]), hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4),
                  elements=st.integers(-20, 20)), st.data())
@settings(max_examples=60, deadline=None)
def test_reduce_sum_property(x, data):
    dims = tuple(sorted(data.draw(st.sets(st.sampled_from(range(x.ndim))) if x.ndim else st.just(set()))))
    t = "s32" if x.dtype == np.int32 else "f32"
    got = reduce([x], [x.dtype.type(0)], dims, scalar_computation("add", t))
    assert got.dtype == x.dtype and np.array_equal(got, np.sum(x, axis=dims, dtype=x.dtype))
    slow = reduce([x], [x.dtype.type(0)], dims, sub_then_add(t))
    assert np.array_equal(slow, got)


# --- reduce-window ---------------------------------------------------------------------------------

def reduce_window(x, init, window, reducer):
    b = Builder("rw")
    p, i = b.parameter(shape_of(x)), b.parameter(shape_of(init))
    b.op("reduce-window", p, i, window=window, to_apply=reducer)
    return evaluate(b.build(), [x, init])


def naive_reduce_window(x, init, window, fn):
    """Per output element, combine the window's in-bounds input elements (padding and
    base-dilation holes are skipped)."""
    out_shape = [window_output_size(n, w) for n, w in zip(x.shape, window.dims)]
    out = np.full(out_shape, init, x.dtype)
    for o in np.ndindex(*out_shape):
        acc = init
        for k in np.ndindex(*[w.size for w in window.dims]):
            src = []
            for oi, ki, w in zip(o, k, window.dims):
                pos = oi * w.stride + ki * w.window_dilation - w.pad_low
                if pos % w.base_dilation:
                    break
                src.append(pos // w.base_dilation)
            else:
                if all(0 <= s < n for s, n in zip(src, x.shape)):
                    acc = fn(acc, x[tuple(src)])
        out[o] = acc
    return out


@st.composite
def window_cases(draw):
    x = draw(hnp.arrays(np.int32, hnp.array_shapes(min_dims=1, max_dims=2, min_side=1, max_side=5),
                        elements=st.integers(-9, 9)))
    dims = []
    for n in x.shape:
        dims.append(WindowDim(size=draw(st.integers(1, 3)), stride=draw(st.integers(1, 3)),
                              pad_low=draw(st.integers(0, 2)), pad_high=draw(st.integers(0, 2)),
                              base_dilation=draw(st.integers(1, 2)), window_dilation=draw(st.integers(1, 2))))
    return x, Window(tuple(dims))


@given(window_cases(), st.sampled_from(["add", "maximum"]), st.booleans())
@settings(max_examples=100, deadline=None)
def test_reduce_window_matches_naive_loop(case, op, general):
    x, window = case
    init = np.int32(0 if op == "add" else -100)
    reducer = scalar_computation(op, "s32") if not general else \
        scalar_fn(lambda b, p, q: b.op(op, b.op("negate", b.op("negate", p)), q), "s32", "s32")
    got = reduce_window(x, init, window, reducer)
    want = naive_reduce_window(x, init, window, {"add": lambda a, b: a + b, "maximum": max}[op])
    assert got.dtype == np.int32 and np.array_equal(got, want)


def test_cumsum_like_jax():
    x = np.arange(1, 33, dtype=F32)
    got = reduce_window(x, np.float32(0), Window((WindowDim(32, pad_low=31),)), scalar_computation("add", "f32"))
    assert np.array_equal(got, np.cumsum(x))


def test_max_pool_with_stride_and_padding():
    x = np.arange(16, dtype=F32).reshape(4, 4)
    window = Window((WindowDim(2, 2), WindowDim(3, 2, 1, 1)))
    got = reduce_window(x, np.float32(-np.inf), window, scalar_computation("maximum", "f32"))
    assert np.array_equal(got, np.array([[5, 7], [13, 15]], F32))


def test_variadic_reduce_window_argmax():
    x = np.array([3, 1, 4, 1, 5, 9, 2, 6], F32)
    idx = np.arange(8, dtype=np.int32)
    b = Builder("rw")
    ps = [b.parameter(shape_of(v)) for v in (x, idx, np.float32(0), np.int32(0))]
    b.op("reduce-window", *ps, window=Window((WindowDim(3, 1),)), to_apply=argmax_reducer())
    values, where = evaluate(b.build(), [x, idx, np.float32(-np.inf), np.int32(0)])
    assert values.tolist() == [4, 4, 5, 9, 9, 9] and where.tolist() == [2, 2, 4, 5, 5, 5]


# --- select-and-scatter ----------------------------------------------------------------------------

def select_and_scatter(x, source, init, window, select, scatter_fn):
    b = Builder("sas")
    ps = [b.parameter(shape_of(v)) for v in (x, source, init)]
    b.op("select-and-scatter", *ps, window=window, select=select, scatter=scatter_fn)
    return evaluate(b.build(), [x, source, init])


def naive_select_and_scatter(x, source, init, window, select, combine):
    """Per window: the first in-bounds element that ``select(picked, candidate)`` keeps
    against every later one; its source value is combined into the result there."""
    out = np.full(x.shape, init, x.dtype)
    for o in np.ndindex(*source.shape):
        picked = None
        for k in np.ndindex(*[w.size for w in window.dims]):
            pos = [oi * w.stride + ki * w.window_dilation - w.pad_low for oi, ki, w in zip(o, k, window.dims)]
            if any(p % w.base_dilation for p, w in zip(pos, window.dims)):
                continue
            src = tuple(p // w.base_dilation for p, w in zip(pos, window.dims))
            if all(0 <= s < n for s, n in zip(src, x.shape)) and (picked is None or not select(x[picked], x[src])):
                picked = src
        if picked is not None:
            out[picked] = combine(out[picked], source[o])
    return out


@given(window_cases(), st.sampled_from(["GE", "LE"]), st.sampled_from(["add", "maximum"]))
@settings(max_examples=100, deadline=None)
def test_select_and_scatter_matches_naive_loop(case, direction, combiner):
    x, window = case
    out_shape = tuple(window_output_size(n, w) for n, w in zip(x.shape, window.dims))
    source = np.arange(1, int(np.prod(out_shape)) + 1, dtype=np.int32).reshape(out_shape)
    select = scalar_fn(lambda b, p, q: b.compare(p, q, direction), "s32", "s32")
    got = select_and_scatter(x, source, np.int32(0), window, select, scalar_computation(combiner, "s32"))
    want = naive_select_and_scatter(x, source, 0, window, {"GE": np.greater_equal, "LE": np.less_equal}[direction],
                                    {"add": lambda a, b: a + b, "maximum": max}[combiner])
    assert got.dtype == np.int32 and np.array_equal(got, want)


def test_select_and_scatter_is_the_gradient_of_a_max_pool():
    # Ties go to the first element of the window (GE keeps the one already picked).
    x = np.array([[1, 5, 5, 0], [2, 5, 3, 3]], F32)
    ge = scalar_fn(lambda b, p, q: b.compare(p, q, "GE"), "f32", "f32")
    window = Window((WindowDim(2, 2), WindowDim(2, 2)))
    got = select_and_scatter(x, np.array([[10, 20]], F32), np.float32(0), window, ge, scalar_computation("add", "f32"))
    assert got.tolist() == [[0, 10, 20, 0], [0, 0, 0, 0]]


# --- sort --------------------------------------------------------------------------------------

def less_than(t, direction="LT", total=True):
    return scalar_fn(lambda b, x, y: b.compare(x, y, direction, "TOTALORDER" if total else None), t, t)


def sort(arrays, dim, comparator, is_stable=True):
    b = Builder("sort")
    ps = [b.parameter(shape_of(a)) for a in arrays]
    b.op("sort", *ps, dimensions=(dim,), is_stable=is_stable, to_apply=comparator)
    return evaluate(b.build(), list(arrays))


def key_comparator(kt, vt):
    """Compare by operand 0 only (argsort): params (k_lhs, k_rhs, v_lhs, v_rhs)."""
    b = Builder("cmp")
    k0, k1 = b.parameter(Shape(kt)), b.parameter(Shape(kt))
    b.parameter(Shape(vt)), b.parameter(Shape(vt))
    return b.build(b.compare(k0, k1, "LT", "TOTALORDER" if kt.startswith("f") else None))


@given(hnp.arrays(st.sampled_from([np.int32, F32, np.uint8]), hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=9),
                  elements=st.integers(0, 5)), st.data())
@settings(max_examples=80, deadline=None)
def test_sort_is_stable_and_matches_numpy(x, data):
    axis = data.draw(st.integers(0, x.ndim - 1))
    t = {np.dtype(np.int32): "s32", np.dtype(F32): "f32", np.dtype(np.uint8): "u8"}[x.dtype]
    got = sort([x], axis, less_than(t, total=t == "f32"))
    assert np.array_equal(got, np.sort(x, axis=axis, kind="stable"))
    order = np.broadcast_to(np.arange(x.shape[axis]).reshape([-1 if d == axis else 1 for d in range(x.ndim)]), x.shape)
    keys, perm = sort([x, np.ascontiguousarray(order, np.int32)], axis, key_comparator(t, "s32"))
    assert np.array_equal(perm, np.argsort(x, axis=axis, kind="stable"))


def test_sort_total_order_descending_with_nan_and_signed_zero():
    x = np.array([1, np.nan, -0.0, 0.0, -np.inf, 2, -np.nan], F32)
    got = sort([x], 0, less_than("f32", "GT"))
    bits = got.view(np.uint32)
    assert np.isnan(got[0]) and not np.signbit(got[0])
    assert got[1:5].tolist() == [2, 1, 0, 0] and not np.signbit(got[3]) and np.signbit(got[4])
    assert got[5] == -np.inf and np.isnan(got[6]) and np.signbit(got[6]) and bits.shape == (7,)


def test_sort_large_is_fast_enough_and_correct():
    x = np.random.default_rng(3).integers(0, 100, (3, 5000)).astype(np.int32)
    assert np.array_equal(sort([x], 1, less_than("s32", total=False)), np.sort(x, axis=1))


def test_sort_with_bitcast_convert_comparator():
    # TensorFlow / older JAX spell a float total order with bitcast-convert to integers.
    b = Builder("cmp")
    keys = []
    for p in (b.parameter(Shape("f32")), b.parameter(Shape("f32"))):
        i = b.op("bitcast-convert", p, shape=Shape("s32"))
        flipped = b.op("xor", i, b.constant(0x7FFFFFFF, "s32"))
        keys.append(b.op("select", b.compare(i, b.constant(0, "s32"), "LT"), flipped, i))
    comparator = b.build(b.compare(keys[0], keys[1], "LT"))
    assert Interpreter()._is_vectorizable(comparator)  # runs on whole arrays, not per element
    x = np.array([3, -0.0, np.nan, -np.inf, 0.0, -2], F32)
    got = sort([x], 0, comparator)
    assert got[:5].tolist() == [-np.inf, -2, 0, 0, 3] and np.signbit(got[2]) and np.isnan(got[5])


def test_sort_with_non_vectorizable_comparator_falls_back():
    # A comparator containing a conditional cannot run on whole arrays; the evaluator loops.
    bt, bf = Builder("t"), Builder("f")
    bt.parameter(Shape("s32"))
    bt.constant(True)
    bf.parameter(Shape("s32"))
    bf.constant(False)
    b = Builder("cmp")
    x, y = b.parameter(Shape("s32")), b.parameter(Shape("s32"))
    lt = b.compare(x, y, "LT")
    root = b.op("conditional", lt, x, y, true_computation=bt.build(), false_computation=bf.build())
    x = np.array([5, 3, 9, 1, 3], np.int32)
    assert sort([x], 0, b.build(root)).tolist() == [1, 3, 3, 5, 9]


def test_sort_scalar_and_empty():
    assert sort([np.zeros((0, 4), F32)], 1, less_than("f32")).shape == (0, 4)
    assert sort([np.zeros((3, 0), F32)], 1, less_than("f32")).shape == (3, 0)


def test_topk_orders_like_total_order_with_ties_by_position():
    x = np.array([[1.0, np.nan, 3.0, 3.0, -0.0, 0.0, -np.inf]], F32)
    b = Builder("topk")
    b.op("topk", b.parameter(shape_of(x)), k=5, largest=True)
    values, where = evaluate(b.build(), [x])
    assert np.array_equal(values, [[np.nan, 3, 3, 1, 0]], equal_nan=True)
    assert where.dtype == np.int32 and where.tolist() == [[1, 2, 3, 0, 5]]
    b = Builder("bottomk")
    b.op("topk", b.parameter(shape_of(x)), k=2, largest=False)
    values, where = evaluate(b.build(), [x])
    assert where.tolist() == [[6, 4]] and np.signbit(values[0, 1])


def test_xla_cpu_topk_custom_call_sorts_with_its_comparator():
    module = parse_hlo("""
HloModule topk
%greater (a: s32[], b: s32[], i: s32[], j: s32[]) -> pred[] {
  %a = s32[] parameter(0)
  %b = s32[] parameter(1)
  %i = s32[] parameter(2)
  %j = s32[] parameter(3)
  ROOT %gt = pred[] compare(%a, %b), direction=GT
}
ENTRY %main (x: s32[2,5]) -> (s32[2,2], s32[2,2]) {
  %x = s32[2,5]{1,0} parameter(0)
  ROOT %top = (s32[2,2]{1,0}, s32[2,2]{1,0}) custom-call(%x), custom_call_target="TopK", called_computations={%greater}
}""")
    values, where = evaluate(module, [np.array([[4, 9, 1, 9, 0], [-3, -1, -2, -5, -4]], np.int32)])
    assert values.tolist() == [[9, 9], [-1, -2]] and where.tolist() == [[1, 3], [1, 2]]


# --- scatter --------------------------------------------------------------------------------------

def scatter(operands, indices, updates, combiner, **attrs):
    b = Builder("scatter")
    ps = [b.parameter(shape_of(v)) for v in list(operands) + [indices] + list(updates)]
    b.op("scatter", *ps, to_apply=combiner, **attrs)
    return evaluate(b.build(), list(operands) + [indices] + list(updates))


def naive_scatter(operand, indices, updates, fn, update_window_dims, inserted_window_dims,
                  scatter_dims_to_operand_dims, index_vector_dim, input_batching_dims=(),
                  scatter_indices_batching_dims=()):
    """XLA's scatter, from the operation semantics, one update element at a time."""
    out = operand.copy()
    scatter_dims = [d for d in range(updates.ndim) if d not in update_window_dims]
    idx_batch = [d for d in range(indices.ndim) if d != index_vector_dim]
    window_operand = [d for d in range(operand.ndim) if d not in inserted_window_dims and d not in input_batching_dims]
    extent = [1] * operand.ndim
    for k, d in enumerate(window_operand):
        extent[d] = updates.shape[update_window_dims[k]]
    for u in np.ndindex(*updates.shape):
        g = [u[d] for d in scatter_dims]
        if index_vector_dim == indices.ndim:
            vec = [indices[tuple(g)]]
        else:
            vec = [indices[tuple(g[:index_vector_dim]) + (k,) + tuple(g[index_vector_dim:])]
                   for k in range(indices.shape[index_vector_dim])]
        start = [0] * operand.ndim
        for k, d in enumerate(scatter_dims_to_operand_dims):
            start[d] = int(vec[k])
        for od, sd in zip(input_batching_dims, scatter_indices_batching_dims):
            start[od] = g[idx_batch.index(sd)]
        if not all(0 <= s <= n - e for s, n, e in zip(start, operand.shape, extent)):
            continue
        full = list(start)
        for k, d in enumerate(window_operand):
            full[d] += u[update_window_dims[k]]
        out[tuple(full)] = fn(out[tuple(full)], updates[u])
    return out


def replace_combiner(t):
    return scalar_fn(lambda b, x, y: y, t, t)


@st.composite
def scatter_cases(draw):
    rank = draw(st.integers(1, 3))
    dims = draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank))
    operand = np.arange(int(np.prod(dims)), dtype=np.int32).reshape(dims)
    inserted = tuple(sorted(draw(st.sets(st.sampled_from(range(rank))))))
    to_operand = draw(st.permutations(range(rank)).map(lambda p: tuple(p[:draw(st.integers(1, rank))])))
    window_operand = [d for d in range(rank) if d not in inserted]
    window = [draw(st.integers(0, dims[d])) for d in window_operand]
    batch = draw(st.lists(st.integers(0, 3), max_size=2))
    k = len(to_operand)
    ivd = draw(st.integers(0, len(batch)))
    implicit = ivd == len(batch) and k == 1 and draw(st.booleans())
    idx_shape = list(batch) if implicit else batch[:ivd] + [k] + batch[ivd:]
    indices = draw(hnp.arrays(np.int64, idx_shape, elements=st.integers(-1, 4)))
    upd_rank = len(batch) + len(window)
    window_dims = tuple(sorted(draw(st.permutations(range(upd_rank)))[:len(window)]))
    upd_shape, bi, wi = [], iter(batch), iter(window)
    for d in range(upd_rank):
        upd_shape.append(next(wi) if d in window_dims else next(bi))
    updates = draw(hnp.arrays(np.int32, upd_shape, elements=st.integers(-5, 5)))
    attrs = dict(update_window_dims=window_dims, inserted_window_dims=inserted,
                 scatter_dims_to_operand_dims=to_operand, index_vector_dim=ivd)
    return operand, indices, updates, attrs


COMBINERS = {
    "add": (lambda: scalar_computation("add", "s32"), lambda a, b: a + b),
    "replace": (lambda: replace_combiner("s32"), lambda a, b: b),
    "sub": (lambda: scalar_computation("subtract", "s32"), lambda a, b: a - b),  # order matters
    "max": (lambda: scalar_computation("maximum", "s32"), max),
}


@given(scatter_cases(), st.sampled_from(sorted(COMBINERS)))
@settings(max_examples=150, deadline=None)
def test_scatter_matches_naive_loop(case, combiner):
    operand, indices, updates, attrs = case
    make, fn = COMBINERS[combiner]
    got = scatter([operand], indices, [updates], make(), **attrs)
    assert np.array_equal(got, naive_scatter(operand, indices, updates, fn, **attrs))


def test_scatter_add_duplicates_and_out_of_bounds_rows():
    # x.at[idx].add(v) on rows; index 10 and -1 are out of bounds: skipped, not clamped.
    x = np.zeros((4, 2), F32)
    idx = np.array([[1], [1], [10], [-1], [3]], np.int32)
    v = np.arange(10, dtype=F32).reshape(5, 2)
    got = scatter([x], idx, [v], scalar_computation("add", "f32"), update_window_dims=(1,),
                  inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,), index_vector_dim=1)
    assert got.tolist() == [[0, 0], [2, 4], [0, 0], [8, 9]]


def test_scatter_partially_out_of_bounds_window_is_skipped():
    x = np.zeros(5, np.int32)
    upd = np.ones((2, 3), np.int32)
    idx = np.array([[3], [1]], np.int32)  # window [3, 6) does not fit: skipped entirely
    got = scatter([x], idx, [upd], replace_combiner("s32"), update_window_dims=(1,), inserted_window_dims=(),
                  scatter_dims_to_operand_dims=(0,), index_vector_dim=1)
    assert got.tolist() == [0, 1, 1, 1, 0]


def test_variadic_scatter():
    # Two operands updated together: keep the (value, index) pair with the larger value.
    vals, ids = np.zeros(3, F32), np.full(3, -1, np.int32)
    idx = np.array([0, 2, 0], np.int32)
    uv, ui = np.array([5, 1, 7], F32), np.array([10, 11, 12], np.int32)
    b = Builder("comb")
    v0, i0, v1, i1 = (b.parameter(Shape(t)) for t in ("f32", "s32", "f32", "s32"))
    pick = b.compare(v1, v0, "GT")
    comb = b.build(b.op("tuple", b.op("select", pick, v1, v0), b.op("select", pick, i1, i0)))
    out_v, out_i = scatter([vals, ids], idx, [uv, ui], comb, update_window_dims=(), inserted_window_dims=(0,),
                           scatter_dims_to_operand_dims=(0,), index_vector_dim=1)
    assert out_v.tolist() == [7, 0, 1] and out_i.tolist() == [12, -1, 11]


def test_scatter_with_batching_dims():
    x = np.zeros((2, 3), np.int32)
    idx = np.array([[2, 2], [0, 5]], np.int32)  # per batch row; 5 is out of bounds
    upd = np.array([[1, 2], [3, 4]], np.int32)
    attrs = dict(update_window_dims=(), inserted_window_dims=(1,), scatter_dims_to_operand_dims=(1,),
                 index_vector_dim=2, input_batching_dims=(0,), scatter_indices_batching_dims=(0,))
    got = scatter([x], idx, [upd], scalar_computation("add", "s32"), **attrs)
    assert got.tolist() == [[0, 0, 3], [3, 0, 0]]
    assert np.array_equal(got, naive_scatter(x, idx, upd, lambda a, b: a + b, **attrs))
