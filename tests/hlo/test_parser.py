"""HLO text: printer/parser round trips, real JAX exports, and errors that point at the text."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nbxla.errors import HloParseError
from nbxla.hlo import Builder, Module, Shape, TupleShape, scalar_computation
from nbxla.hlo.attributes import (ConvDimensionNumbers, PadDim, RawAttr, SliceDim, Window,
                                  WindowDim)
from nbxla.hlo.ir import SourceLocation
from nbxla.hlo.parser import parse_hlo
from nbxla.hlo.printer import PrintOptions, print_module

from tests.conftest import CORPUS_HLO, corpus_files


def roundtrip(module: Module) -> Module:
    text = print_module(module)
    again = parse_hlo(text, "printed.hlo")
    assert print_module(again) == text
    return again


@pytest.mark.parametrize("path", corpus_files("*.hlo"))
def test_corpus_module_parses_and_prints_stably(path):
    module = parse_hlo(path.read_text(), str(path))
    assert module.entry is not None and module.entry.root is not None
    roundtrip(module)


@pytest.mark.parametrize("path", corpus_files("*.hlo"))
def test_corpus_module_prints_every_instruction(path):
    module = parse_hlo(path.read_text(), str(path))
    text = print_module(module)
    for instr in module.instructions():
        assert f"%{instr.name} = " in text


def test_stack_frames_give_source_locations():
    path = CORPUS_HLO / "seed_mean_3x2_plus_y.opt.hlo"
    if not path.exists():
        pytest.skip(f"corpus not found at {CORPUS_HLO}")
    module = parse_hlo(path.read_text(), str(path))
    fused = module.computation("fused_computation")
    locations = {i.name: i.location for i in fused.instructions}
    assert locations["integer_pow.0"] == SourceLocation("make_hlo.py", 57, 24, "_")
    assert locations["param_1.5"] is None


def test_text_without_sigils_or_operand_shapes():
    text = """HloModule m

    add_f32 {
      a = f32[] parameter(0)
      b = f32[] parameter(1)
      ROOT s = f32[] add(a, b)
    }

    ENTRY main {
      x = f32[2,3]{1,0} parameter(0)
      zero = f32[] constant(0)
      ROOT r = f32[3]{0} reduce(x, zero), dimensions={0}, to_apply=add_f32
    }
    """
    module = parse_hlo(text)
    r = module.entry.root
    assert r.opcode == "reduce" and r.attrs["to_apply"].name == "add_f32"
    assert r.shape == Shape("f32", (3,))
    roundtrip(module)


def test_forward_references_are_ordered():
    text = """HloModule m
    ENTRY main {
      ROOT y = f32[4] negate(x)
      x = f32[4] parameter(0)
    }"""
    module = parse_hlo(text)
    assert [i.name for i in module.entry.instructions] == ["x", "y"]
    assert module.entry.root.name == "y"


def _every_attribute_module() -> Module:
    add = scalar_computation("add", "f32", "adder")
    b = Builder("main")
    b.location = SourceLocation("cell[3]", 7)
    x = b.parameter(Shape("f32", (4, 6)), "x")
    k = b.parameter(Shape("f32", (3, 3, 6, 2)), "k")
    t = b.op("transpose", x, dimensions=(1, 0))
    s = b.op("slice", x, slice=(SliceDim(0, 4, 2), SliceDim(1, 6)))
    zero = b.constant(0, "f32")
    p = b.op("pad", x, zero, padding=(PadDim(1, -1, 0), PadDim(0, 2, 1)))
    w = b.op("reduce-window", x, zero, to_apply=add,
             window=Window((WindowDim(2, 2, 1, 0), WindowDim(3, 1, 1, 1, 1, 2))))
    img = b.reshape(x, (1, 4, 6, 1))
    img6 = b.broadcast(img, (1, 4, 6, 6), (0, 1, 2, 3))
    conv = b.op("convolution", img6, k, dim_labels=ConvDimensionNumbers.from_text("b01f_01io->b01f"),
                window=Window((WindowDim(3, 1, 1, 1), WindowDim(3, 2, 1, 1))))
    c = b.op("custom-call", x, shape=Shape("f32", (4, 6)), custom_call_target="my\"target",
             backend_config=RawAttr('{"a": [1, 2]}'))
    consts = b.constant(np.array([[np.nan, -np.inf], [-0.0, 1e-30]], np.float32))
    cplx = b.constant(np.array([1 + 2j, -0.5j], np.complex64))
    ints = b.constant(np.array([np.iinfo(np.int64).min, np.iinfo(np.int64).max]))
    preds = b.constant(np.array([True, False]))
    ge = b.compare(t, t, "GE", "TOTALORDER")
    root = b.op("tuple", t, s, p, w, conv, c, consts, cplx, ints, preds, ge)
    return Module("every_attribute", b.build(root))


def test_every_attribute_kind_roundtrips():
    module = _every_attribute_module()
    again = roundtrip(module)
    for a, b in zip(module.entry.instructions, again.entry.instructions):
        assert (a.name, a.opcode, a.shape) == (b.name, b.opcode, b.shape)
        assert a.location == b.location == SourceLocation("cell[3]", 7)
        for key, value in a.attrs.items():
            if key == "literal":
                np.testing.assert_array_equal(value, b.attrs[key])
                assert value.dtype == b.attrs[key].dtype
                assert np.array_equal(np.signbit(value.real), np.signbit(b.attrs[key].real))
            elif key == "to_apply":
                assert value.name == b.attrs[key].name
            else:
                assert value == b.attrs[key], key


def test_print_options():
    module = _every_attribute_module()
    short = print_module(module, PrintOptions(operand_shapes=False, metadata=False))
    assert "metadata=" not in short and "(%x)" in short
    assert print_module(parse_hlo(short)) == print_module(parse_hlo(print_module(parse_hlo(short))))


def test_tuple_shapes_and_layouts_roundtrip():
    b = Builder("main")
    x = b.parameter(Shape("f32", (2, 3), (0, 1)), "x")
    y = b.parameter(TupleShape((Shape("s32"), TupleShape(()))), "y")
    root = b.op("tuple", x, y)
    module = Module("m", b.build(root))
    again = roundtrip(module)
    assert again.entry.parameters[0].shape.layout == (0, 1)
    assert "f32[2,3]{0,1}" in print_module(again)


@settings(max_examples=200, deadline=None)
@given(st.floats(width=32, allow_nan=False))
def test_float32_constants_roundtrip_exactly(value):
    b = Builder("main")
    b.constant(np.float32(value), "f32")
    again = roundtrip(Module("m", b.build()))
    got = again.entry.root.literal
    assert got.dtype == np.float32 and got.tobytes() == np.float32(value).tobytes()


@settings(max_examples=100, deadline=None)
@given(st.floats(allow_nan=False))
def test_float64_constants_roundtrip_exactly(value):
    b = Builder("main")
    b.constant(np.float64(value), "f64")
    got = roundtrip(Module("m", b.build())).entry.root.literal
    assert got.tobytes() == np.float64(value).tobytes()


MALFORMED = [
    ("42 { ROOT x = f32[] parameter(0) }", 1, 1, "must start with 'HloModule <name>' or with a computation"),
    ("HloModule m\nENTRY m {\n  x = f32[4] parameter(0)\n  ROOT y = f32[4] exp(x)\n}", 4, 19,
     "did you mean exponential"),
    ("HloModule m\nENTRY m {\n  x = f32[4] parameter(0)\n  ROOT y = f32[4] add(x, z)\n}", 4, 26,
     "operand %z of %y is not defined"),
    ("HloModule m\nENTRY m {\n  x = f32[4] parameter(0)\n  ROOT y = f32[5] add(x, x)\n}", 4, 8,
     "written as f32[5]{0} but add of its operands gives f32[4]{0}"),
    ("HloModule m\nENTRY m {\n  x = f32[4] parameter(0)\n  y = s32[4] parameter(1)\n"
     "  ROOT z = f32[4] add(x, y)\n}", 5, 8, "element types differ"),
    ("HloModule m\nENTRY m {\n  x = f32[4] parameter(0)\n", 4, 1, "not closed"),
    ("HloModule m\nENTRY m {\n  x = f32[4,2] parameter(0)\n  ROOT y = f32[2,4] transpose(x), "
     "dimensions={1,a}\n}", 4, 46, "bad value for attribute dimensions"),
    ("HloModule m\nENTRY m {\n  ROOT x = f32[3] constant({1,2})\n}", 3, 28, "has 2 values"),
    ("HloModule m\nENTRY m {\n  ROOT x = f32[<=3] parameter(0)\n}", 3, 16, "dynamic dimensions"),
    ("HloModule m\nENTRY m {\n  x = f32[3] add(y, y)\n  ROOT y = f32[3] add(x,x)\n}", 3, 3, "cycle"),
    ("HloModule m\nENTRY m {\n  x = f32[3] parameter(0)\n  ROOT y = f32[3] call(x), "
     "to_apply=%nothere\n}", 4, 37, "%nothere is not defined"),
    ("HloModule m\nENTRY m {\n  ROOT x = f32[3,2]{0,0} parameter(0)\n}", 3, 12, "not a permutation"),
    ("HloModule m\nENTRY m {\n  ROOT x = s8[2] constant({1, 300})\n}", 3, 27, "out of range"),
    ("HloModule m\nENTRY m {\n  x = f32[3] parameter(0)\n  ROOT y = pred[3] compare(x, x), "
     "direction=XX\n}", 4, 45, "direction must be one of"),
    ("HloModule m\nENTRY m {\n  x = f32[3] parameter(0)\n  ROOT y = f32[3] negate(x, x)\n}", 4, 8,
     "negate takes 1 operand"),
    ("HloModule m\nENTRY m {\n  x = f32[3] parameter(0)\n  ROOT x = f32[3] negate(x)\n}", 4, 8,
     "used twice"),
    ('HloModule m\nENTRY m {\n  ROOT x = f32[3] custom-call(), custom_call_target="a\n}', 3, 53,
     "unterminated string"),
]


@pytest.mark.parametrize("text,line,column,message", MALFORMED)
def test_malformed_text_reports_file_line_column(text, line, column, message):
    with pytest.raises(HloParseError) as info:
        parse_hlo(text, "bad.hlo")
    err = info.value
    assert (err.filename, err.line, err.column) == ("bad.hlo", line, column), str(err)
    assert message in str(err)
    assert str(err).startswith(f"bad.hlo:{line}:{column}: ")
