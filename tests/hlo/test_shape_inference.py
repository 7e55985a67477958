"""The builder infers shapes and rejects inconsistent operands with messages a person can act on."""

import ml_dtypes
import numpy as np
import pytest

from nbxla.errors import HloShapeError, NbxlaError
from nbxla.hlo import Builder, Module, Shape, TupleShape, scalar_computation
from nbxla.hlo.attributes import ConvDimensionNumbers, PadDim, SliceDim, Window, WindowDim
from nbxla.hlo.shapes import bit_width, from_numpy_dtype, shape_of, to_numpy_dtype

F = lambda *dims: Shape("f32", dims)  # noqa: E731


@pytest.fixture
def b():
    return Builder("main")


def test_elementwise_shapes(b):
    x, y = b.parameter(F(2, 3)), b.parameter(F(2, 3))
    assert b.op("add", x, y).shape == F(2, 3)
    assert b.compare(x, y, "LT").shape == Shape("pred", (2, 3))
    assert b.op("is-finite", x).shape == Shape("pred", (2, 3))
    assert b.op("complex", x, y).shape == Shape("c64", (2, 3))
    c = b.op("complex", x, y)
    assert b.op("real", c).shape == F(2, 3) and b.op("abs", c).shape == F(2, 3)
    p = b.parameter(Shape("pred"))
    assert b.op("select", p, x, y).shape == F(2, 3)       # scalar predicate allowed
    lo = b.constant(0, "f32")
    assert b.op("clamp", lo, x, lo).shape == F(2, 3)


@pytest.mark.parametrize("opcode,shapes,message", [
    ("add", [F(2, 3), F(3, 2)], "no implicit broadcasting"),
    ("add", [F(2), Shape("s32", (2,))], "insert a convert"),
    ("and", [F(2), F(2)], "pred or integral"),
    ("shift-left", [F(2), F(2)], "integral"),
    ("exponential", [Shape("s32", (2,))], "floating point"),
    ("popcnt", [F(2)], "integral"),
    ("not", [F(2)], "pred or integral"),
])
def test_elementwise_rejections(b, opcode, shapes, message):
    ops = [b.parameter(s) for s in shapes]
    with pytest.raises(HloShapeError, match=message) as info:
        b.op(opcode, *ops)
    assert opcode in str(info.value)          # the message names the op and its operand shapes
    assert isinstance(info.value, NbxlaError)


def test_data_movement_shapes(b):
    x = b.parameter(F(4, 6))
    assert b.op("transpose", x, dimensions=(1, 0)).shape == F(6, 4)
    assert b.op("slice", x, slice=(SliceDim(1, 4), SliceDim(0, 6, 4))).shape == F(3, 2)
    zero = b.constant(0, "f32")
    assert b.op("pad", x, zero, padding=(PadDim(1, 2), PadDim(-1, 0, 2))).shape == F(7, 15)
    assert b.op("concatenate", x, x, dimensions=(1,)).shape == F(4, 12)
    i = b.constant(1, "s32")
    assert b.op("dynamic-slice", x, i, i, dynamic_slice_sizes=(2, 2)).shape == F(2, 2)
    u = b.parameter(F(2, 2))
    assert b.op("dynamic-update-slice", x, u, i, i).shape == F(4, 6)
    assert b.broadcast(x, (3, 4, 6), (1, 2)).shape == F(3, 4, 6)
    assert b.reshape(x, (24,)).shape == F(24)
    assert b.op("bitcast", x, shape=Shape("s32", (6, 4))).shape == Shape("s32", (6, 4))
    assert b.op("bitcast-convert", x, shape=Shape("u8", (4, 6, 4))).shape == Shape("u8", (4, 6, 4))


@pytest.mark.parametrize("build,message", [
    (lambda b, x: b.op("transpose", x, dimensions=(0, 0)), "not a permutation"),
    (lambda b, x: b.op("slice", x, slice=(SliceDim(0, 5), SliceDim(0, 6))), "out of bounds"),
    (lambda b, x: b.broadcast(x, (4, 5), (0, 1)), "cannot map"),
    (lambda b, x: b.reshape(x, (25,)), "element count"),
    (lambda b, x: b.op("concatenate", x, b.parameter(F(5, 6)), dimensions=(1,)), "agree except"),
    (lambda b, x: b.op("dynamic-slice", x, b.constant(0, "s32"), dynamic_slice_sizes=(1, 1)),
     "2 scalar start indices"),
    (lambda b, x: b.op("get-tuple-element", x, index=0), "tuple operand"),
    (lambda b, x: b.op("iota", shape=F(3), iota_dimension=1), "iota_dimension"),
    (lambda b, x: b.op("bitcast", x, shape=F(5)), "byte size"),
])
def test_data_movement_rejections(b, build, message):
    x = b.parameter(F(4, 6))
    with pytest.raises(HloShapeError, match=message):
        build(b, x)


def test_reduce_shapes(b):
    x = b.parameter(F(4, 6))
    zero = b.constant(0, "f32")
    add = scalar_computation("add", "f32")
    assert b.reduce(x, zero, (1,), add).shape == F(4)
    with pytest.raises(HloShapeError, match="reducer"):
        b.reduce(x, zero, (1,), scalar_computation("add", "f64"))
    with pytest.raises(HloShapeError, match="distinct dimensions"):
        b.reduce(x, zero, (2,), add)
    win = Window((WindowDim(2, 2), WindowDim(3, 1, 2, 0)))
    assert b.op("reduce-window", x, zero, window=win, to_apply=add).shape == F(2, 6)


def test_variadic_reduce_is_a_tuple(b):
    x = b.parameter(F(4, 6))
    idx = b.parameter(Shape("s32", (4, 6)))
    rb = Builder("argmax")
    a, ai, c, ci = (rb.parameter(s) for s in (F(), Shape("s32"), F(), Shape("s32")))
    reducer = rb.build(rb.op("tuple", rb.op("maximum", a, c), rb.op("minimum", ai, ci)))
    # the reducer of a 2-input reduce takes (acc0, acc1, x0, x1): f32, s32, f32, s32
    r = b.op("reduce", x, idx, b.constant(0, "f32"), b.constant(0, "s32"), dimensions=(0,),
             to_apply=reducer)
    assert r.shape == TupleShape((F(6), Shape("s32", (6,))))


def test_dot_and_convolution(b):
    x, y = b.parameter(F(5, 2, 3)), b.parameter(F(5, 3, 7))
    d = b.op("dot", x, y, lhs_batch_dims=(0,), rhs_batch_dims=(0,), lhs_contracting_dims=(2,),
             rhs_contracting_dims=(1,))
    assert d.shape == F(5, 2, 7)
    with pytest.raises(HloShapeError, match="must exist and match"):
        b.op("dot", x, y, lhs_contracting_dims=(1,), rhs_contracting_dims=(1,))
    img, k = b.parameter(F(2, 10, 10, 3)), b.parameter(F(3, 3, 3, 4))
    dn = ConvDimensionNumbers.from_text("b01f_01io->b01f")
    assert b.op("convolution", img, k, dim_labels=dn).shape == F(2, 8, 8, 4)
    strided = Window((WindowDim(3, 2, 1, 1), WindowDim(3, 2, 1, 1)))
    assert b.op("convolution", img, k, dim_labels=dn, window=strided).shape == F(2, 5, 5, 4)
    with pytest.raises(ValueError):
        ConvDimensionNumbers.from_text("b01f_01xo->b01f")


def test_gather_scatter_shapes(b):
    x = b.parameter(F(8, 10))
    idx = b.parameter(Shape("s32", (5, 1)))
    g = b.op("gather", x, idx, offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,),
             index_vector_dim=1, slice_sizes=(1, 10))
    assert g.shape == F(5, 10)
    upd = b.parameter(F(5, 10))
    s = b.op("scatter", x, idx, upd, update_window_dims=(1,), inserted_window_dims=(0,),
             scatter_dims_to_operand_dims=(0,), index_vector_dim=1,
             to_apply=scalar_computation("add", "f32"))
    assert s.shape == F(8, 10)
    with pytest.raises(HloShapeError, match="offset_dims"):
        b.op("gather", x, idx, offset_dims=(), collapsed_slice_dims=(0,), start_index_map=(0,),
             index_vector_dim=1, slice_sizes=(1, 10))


def test_control_flow_shapes(b):
    cb = Builder("cond")
    cp = cb.parameter(Shape("s32"))
    cond = cb.build(cb.compare(cp, cb.constant(10, "s32"), "LT"))
    bb = Builder("body")
    bp = bb.parameter(Shape("s32"))
    body = bb.build(bb.op("add", bp, bb.constant(1, "s32")))
    init = b.constant(0, "s32")
    assert b.op("while", init, condition=cond, body=body).shape == Shape("s32")
    with pytest.raises(HloShapeError, match="must take one parameter"):
        b.op("while", b.constant(0.0, "f32"), condition=cond, body=body)
    call = b.op("call", init, to_apply=body)
    assert call.shape == Shape("s32")
    k = b.constant(1, "s32")
    assert b.op("conditional", k, init, init, branch_computations=(body, body)).shape == Shape("s32")
    with pytest.raises(HloShapeError, match="branches need"):
        b.op("conditional", k, init, branch_computations=(body, body))


def test_module_collects_called_computations():
    b = Builder("main")
    x = b.parameter(F(3))
    add = scalar_computation("add", "f32")
    r = b.reduce(x, b.constant(0, "f32"), (0,), add)
    m = Module("m", b.build(r))
    assert [c.name for c in m.computations] == [add.name, "main"]
    assert m.computations_post_order()[-1] is m.entry


def test_dtype_mapping():
    for t in ("pred", "s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64", "f16", "f32", "f64",
              "c64", "c128", "bf16", "f8e4m3fn", "f8e5m2"):
        assert from_numpy_dtype(to_numpy_dtype(t)) == t
    assert to_numpy_dtype("bf16") == np.dtype(ml_dtypes.bfloat16)
    assert to_numpy_dtype("f8e4m3fn").itemsize == 1 and bit_width("f8e5m2") == 8
    with pytest.raises(HloShapeError, match="unknown element type 'f8e4m3'"):
        to_numpy_dtype("f8e4m3")
    with pytest.raises(HloShapeError, match="no HLO element type"):
        from_numpy_dtype(np.dtype("U3"))
    assert shape_of((np.zeros((2, 3), np.float32), np.int64(1))) == \
        TupleShape((F(2, 3), Shape("s64")))
    assert Shape("bf16", (2,)).to_text() == "bf16[2]{0}"
