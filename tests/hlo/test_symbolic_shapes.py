"""Unknown dimensions in the IR: SymDim, the text spelling (``f32[b,64]``, ``64*b``), the evaluator
binding sizes from its arguments, and generalizing two probes into one symbolic module."""

import numpy as np
import pytest

from nbxla.errors import HloParseError, HloShapeError
from nbxla.hlo import Shape
from nbxla.hlo.evaluator import evaluate
from nbxla.hlo.parser import parse_hlo
from nbxla.hlo.printer import print_module
from nbxla.hlo.shapes import SymDim, SymbolicDimensionError, bind_shape, is_symbolic
from nbxla.hlo.symbolic import bind_module, bind_symbols, generalize_module, lift_size_constants, second_probe

LAYER = """HloModule layer
ENTRY %main (x: f32[b,64], w: f32[64,32]) -> f32[b,32] {
  %x = f32[b,64]{1,0} parameter(0)
  %w = f32[64,32]{1,0} parameter(1)
  %d = f32[b,32]{1,0} dot(f32[b,64]{1,0} %x, f32[64,32]{1,0} %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %r = f32[32,b]{0,1} reshape(f32[b,32]{1,0} %d)
  %flat = f32[32*b]{0} reshape(f32[b,32]{1,0} %d)
  ROOT %t = f32[32*b]{0} tanh(f32[32*b]{0} %flat)
}
"""


def test_symbolic_shapes_print_and_parse_back():
    module = parse_hlo(LAYER)
    text = print_module(module)
    assert "f32[b,64]{1,0} parameter(0)" in text and "f32[32*b]{0}" in text
    assert print_module(parse_hlo(text)) == text
    shape = module.entry.root.shape
    assert is_symbolic(shape) and shape.dims == (SymDim("b", 32),)
    assert bind_shape(shape, {"b": 5}) == Shape("f32", (160,))


def test_evaluator_binds_symbols_from_arguments():
    module = parse_hlo(LAYER)
    w = np.random.default_rng(0).random((64, 32), dtype=np.float32)
    for n in (2, 3, 17):
        x = np.random.default_rng(n).random((n, 64), dtype=np.float32)
        np.testing.assert_allclose(evaluate(module, [x, w]), np.tanh(x @ w).reshape(-1), rtol=1e-5)


def test_evaluator_names_arguments_whose_sizes_disagree():
    text = """HloModule two
ENTRY %main (x: f32[b], y: f32[b]) -> f32[b] {
  %x = f32[b]{0} parameter(0)
  %y = f32[b]{0} parameter(1)
  ROOT %a = f32[b]{0} add(f32[b]{0} %x, f32[b]{0} %y)
}
"""
    module = parse_hlo(text)
    np.testing.assert_array_equal(evaluate(module, [np.ones(3, np.float32), np.ones(3, np.float32)]), 2)
    with pytest.raises(HloShapeError, match="parameter %y: b = 4 here but 3"):
        bind_symbols(module, [np.ones(3, np.float32), np.ones(4, np.float32)])


def test_bounded_dynamic_spelling_is_refused_with_the_supported_one():
    with pytest.raises(HloParseError, match=r"f32\[b,64\]"):
        parse_hlo(LAYER.replace("f32[b,64]{1,0} parameter(0)", "f32[<=8,64]{1,0} parameter(0)"))


def test_symdim_answers_only_what_sizes_two_and_up_decide():
    b = SymDim("b")
    assert not (b < 0) and b >= 2 and b != 1 and b * 4 == SymDim("b", 4) and 4 * b == SymDim("b", 4)
    assert SymDim("b", 64) // 8 == SymDim("b", 8)
    for undecided in (lambda: b < 10, lambda: b > 5, lambda: int(b), lambda: b * b, lambda: SymDim("b", 3) // 2):
        with pytest.raises(SymbolicDimensionError):
            undecided()


def _probe(n, text):
    return parse_hlo(text.replace("NN", str(n)).replace("TT", str(32 * n)))


PROBE = """HloModule p
ENTRY %main (x: f32[NN,32]) -> f32[TT] {
  %x = f32[NN,32]{1,0} parameter(0)
  %c = f32[] constant(TT)
  %bc = f32[NN,32]{1,0} broadcast(f32[] %c), dimensions={}
  %d = f32[NN,32]{1,0} divide(f32[NN,32]{1,0} %x, f32[NN,32]{1,0} %bc)
  ROOT %r = f32[TT]{0} reshape(f32[NN,32]{1,0} %d)
}
"""


def test_generalize_finds_scaled_symbols_and_refuses_size_constants():
    h = 5
    m1, m2 = _probe(h, PROBE), _probe(second_probe(h), PROBE)
    with pytest.raises(SymbolicDimensionError, match="constant computed from a size"):
        generalize_module(m1, m2, {h: "b"})
    m1, m2 = _probe(h, PROBE), _probe(second_probe(h), PROBE)
    lifted = lift_size_constants(m1, m2, {h: "b"})
    assert lifted == [(SymDim("b", 32), np.dtype(np.float32))]
    symbolic = generalize_module(m1, m2, {h: "b"})
    assert symbolic.entry.root.shape.dims == (SymDim("b", 32),)
    x = np.arange(7 * 32, dtype=np.float32).reshape(7, 32)
    got = evaluate(bind_module(symbolic, {"b": 7}), [x, np.float32(7 * 32)])
    np.testing.assert_allclose(got, (x / (7 * 32)).reshape(-1))


def test_generalize_refuses_dimensions_that_do_not_scale_with_the_symbol():
    text = """HloModule q
ENTRY %main (x: f32[NN], y: f32[MM]) -> f32[NN] {
  %x = f32[NN]{0} parameter(0)
  %y = f32[MM]{0} parameter(1)
  ROOT %n = f32[NN]{0} negate(f32[NN]{0} %x)
}
"""
    h = 5
    m1 = parse_hlo(text.replace("NN", str(h)).replace("MM", str(h + 3)))
    m2 = parse_hlo(text.replace("NN", str(second_probe(h))).replace("MM", str(second_probe(h) + 3)))
    with pytest.raises(SymbolicDimensionError, match="not a multiple of one unknown size"):
        generalize_module(m1, m2, {h: "b"})


def test_generalize_names_the_instruction_only_when_it_refuses(monkeypatch):
    """The instruction's name and line are formatted for an error, not for every instruction
    compared (a fifth of the comparison, which a symbolic compile makes three times); the
    errors still name it."""
    import nbxla.hlo.symbolic as symbolic
    named = []
    real = symbolic._where
    monkeypatch.setattr(symbolic, "_where", lambda instr: named.append(instr.name) or real(instr))
    h = 5
    m1, m2 = _probe(h, PROBE), _probe(second_probe(h), PROBE)
    lift_size_constants(m1, m2, {h: "b"})
    symbolic_module = generalize_module(m1, m2, {h: "b"})
    assert named == []
    # (each pair of probe shapes is generalized once, its result shared, as clone_module
    # shares shapes; scaled dimensions are symbolic)
    assert symbolic_module.entry.root.shape.dims == (SymDim("b", 32),)
    by_name = {i.name: i for i in symbolic_module.entry.instructions}
    assert by_name["bc"].shape is by_name["d"].shape and by_name["d"].shape.dims == (SymDim("b", 1), 32)
    m1, m2 = _probe(h, PROBE), _probe(second_probe(h), PROBE)
    with pytest.raises(SymbolicDimensionError, match=r"constant computed from a size \(%"):
        generalize_module(m1, m2, {h: "b"})
    assert len(named) == 1
