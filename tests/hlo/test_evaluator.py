"""The reference evaluator: public API, errors, structure and control flow, layouts."""

import warnings

import numpy as np
import pytest

from nbxla.errors import EvaluationError, NbxlaError
from nbxla.hlo import (Builder, Module, Shape, SourceLocation, TupleShape, from_numpy_dtype,
                       scalar_computation)
from nbxla.hlo.evaluator import CUSTOM_CALL_TARGETS, RULES, evaluate, flatten
from nbxla.hlo.opcodes import OPCODES
from nbxla.hlo.shape_inference import SHAPE_RULE_OPCODES

from tests.evaluator_util import run_op

F32 = np.float32


def test_rules_cover_every_opcode():
    assert set(RULES) == set(OPCODES)
    assert set(RULES) == set(SHAPE_RULE_OPCODES)


def seed_module():
    """mean(3*x**2 + y), the project's seed example."""
    b = Builder("main")
    x = b.parameter(Shape("f32", (16, 32)), "x")
    y = b.parameter(Shape("f32", (16, 32)), "y")
    three = b.broadcast(b.constant(3, "f32"), (16, 32))
    t = b.op("add", b.op("multiply", three, b.op("multiply", x, x)), y)
    s = b.reduce(t, b.constant(0, "f32"), (0, 1), scalar_computation("add", "f32"))
    mean = b.op("divide", s, b.constant(512, "f32"))
    return Module("seed", b.build(mean))


def test_seed_example_matches_numpy():
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((2, 16, 32)).astype(F32)
    got = evaluate(seed_module(), [x, y])
    assert isinstance(got, np.ndarray) and got.shape == () and got.dtype == F32
    np.testing.assert_allclose(got, np.mean(3 * x ** 2 + y), rtol=1e-5)


def test_argument_mismatch_names_parameter_and_shapes():
    x = np.zeros((16, 32), np.float64)
    with pytest.raises(EvaluationError, match=r"parameter 0 .*f32\[16,32\].*f64\[16,32\]"):
        evaluate(seed_module(), [x, x.astype(F32)])
    with pytest.raises(EvaluationError, match=r"parameter 1 .*f32\[16,32\].*f32\[32,16\]"):
        evaluate(seed_module(), [x.astype(F32), np.zeros((32, 16), F32)])
    with pytest.raises(EvaluationError, match="takes 2 argument"):
        evaluate(seed_module(), [x.astype(F32)])
    with pytest.raises(EvaluationError, match="Python float"):
        evaluate(seed_module(), [x.astype(F32), 1.0])


def test_numpy_scalars_are_accepted_for_scalar_parameters():
    got = run_op("add", np.float32(1.5), np.float32(2))
    assert type(got) is np.ndarray and got.shape == () and got == 3.5


def test_results_are_fresh_and_do_not_alias_inputs():
    b = Builder("ident")
    p = b.parameter(Shape("f32", (3,)))
    comp = b.build(b.op("tuple", p, p))
    x = np.ones(3, F32)
    r0, r1 = evaluate(comp, [x])
    r0[0] = 5
    assert x[0] == 1 and r1[0] == 1 and r0.flags.writeable


def test_tuple_parameter_and_flatten():
    b = Builder("tup")
    t = b.parameter(TupleShape((Shape("s32"), TupleShape((Shape("f32", (2,)), Shape("pred"))))))
    inner = b.op("get-tuple-element", t, index=1)
    f = b.op("get-tuple-element", inner, index=0)
    n = b.op("get-tuple-element", t, index=0)
    comp = b.build(b.op("tuple", f, b.op("tuple", n, b.op("get-tuple-element", inner, index=1))))
    arg = (np.int32(4), (np.array([1, 2], F32), np.bool_(True)))
    out = evaluate(comp, [arg])
    leaves = flatten(out)
    assert [l.dtype for l in leaves] == [F32, np.int32, np.bool_]
    assert leaves[0].tolist() == [1, 2] and leaves[1] == 4 and leaves[2]
    with pytest.raises(EvaluationError, match=r"parameter 0 \(%\S+\) element 1 element 0 expects f32\[2\] but got s32\[2\]"):
        evaluate(comp, [(np.int32(4), (np.array([1, 2], np.int32), np.bool_(True)))])
    with pytest.raises(EvaluationError, match="expects a tuple"):
        evaluate(comp, [np.int32(4)])


def test_call_fusion_and_constant():
    callee = Builder("callee")
    a = callee.parameter(Shape("s32", (3,)))
    k = callee.constant(np.array([10, 20, 30], np.int32))
    callee_comp = callee.build(callee.op("multiply", a, k))
    b = Builder("main")
    x = b.parameter(Shape("s32", (3,)))
    c = b.op("call", x, to_apply=callee_comp)
    f = b.op("fusion", c, calls=callee_comp, kind="kLoop")
    module = Module("m", b.build(f))
    assert evaluate(module, [np.array([1, 2, 3], np.int32)]).tolist() == [100, 800, 2700]


def test_constant_is_cast_to_declared_type():
    b = Builder("c")
    b.op("constant", shape=Shape("f32", (2,)), literal=np.array([0.1, 0.2]))  # f64 literal
    got = evaluate(b.build(), [])
    assert got.dtype == F32 and got.tolist() == [F32(0.1), F32(0.2)]


def while_module():
    """i, acc = 0, 1; while i < n: acc *= 2; i += 1."""
    s = TupleShape((Shape("s32"), Shape("s32"), Shape("s64")))
    cb = Builder("cond")
    st = cb.parameter(s)
    cond = cb.build(cb.compare(cb.op("get-tuple-element", st, index=0),
                               cb.op("get-tuple-element", st, index=1), "LT"))
    bb = Builder("body")
    st = bb.parameter(s)
    i = bb.op("get-tuple-element", st, index=0)
    acc = bb.op("get-tuple-element", st, index=2)
    body = bb.build(bb.op("tuple", bb.op("add", i, bb.constant(1, "s32")), bb.op("get-tuple-element", st, index=1),
                          bb.op("multiply", acc, bb.constant(2, "s64"))))
    b = Builder("main")
    n = b.parameter(Shape("s32"))
    init = b.op("tuple", b.constant(0, "s32"), n, b.constant(1, "s64"))
    w = b.op("while", init, condition=cond, body=body)
    return b.build(b.op("get-tuple-element", w, index=2))


@pytest.mark.parametrize("n, want", [(0, 1), (1, 2), (10, 1024), (-3, 1)])
def test_while(n, want):
    assert evaluate(while_module(), [np.int32(n)]) == want


def branch(name, op, t="f32"):
    b = Builder(name)
    x = b.parameter(Shape(t, (2,)))
    return b.build(b.op(op, x, x))


@pytest.mark.parametrize("index, want", [(0, [2, 4]), (1, [1, 4]), (2, [0, 0]), (7, [0, 0]), (-1, [0, 0])])
def test_conditional_index_out_of_range_runs_last_branch(index, want):
    b = Builder("main")
    i = b.parameter(Shape("s32"))
    x = b.parameter(Shape("f32", (2,)))
    c = b.op("conditional", i, x, x, x,
             branch_computations=[branch("add", "add"), branch("mul", "multiply"), branch("sub", "subtract")])
    got = evaluate(b.build(c), [np.int32(index), np.array([1, 2], F32)])
    assert got.tolist() == want


@pytest.mark.parametrize("pred, want", [(True, [2, 4]), (False, [1, 4])])
def test_conditional_pred(pred, want):
    b = Builder("main")
    p = b.parameter(Shape("pred"))
    x = b.parameter(Shape("f32", (2,)))
    y = b.parameter(Shape("f32", (2,)))
    c = b.op("conditional", p, x, y, true_computation=branch("t", "add"), false_computation=branch("f", "multiply"))
    assert evaluate(b.build(c), [np.bool_(pred), np.array([1, 2], F32), np.array([1, 2], F32)]).tolist() == want


def test_unknown_custom_call_names_target_and_instruction():
    b = Builder("main")
    x = b.parameter(Shape("f32", (2,)))
    b.op("custom-call", x, shape=Shape("f32", (2,)), name="mystery", custom_call_target="foo")
    with pytest.raises(EvaluationError) as info:
        evaluate(b.build(), [np.zeros(2, F32)])
    msg = str(info.value)
    assert "'foo'" in msg and "%mystery" in msg and "lapack_spotrf_ffi" in msg


def test_dead_unsupported_custom_call_is_not_evaluated():
    b = Builder("main")
    x = b.parameter(Shape("f32", (2,)))
    b.op("custom-call", x, shape=Shape("f32", (2,)), custom_call_target="foo")
    root = b.op("negate", x)
    assert evaluate(b.build(root), [np.ones(2, F32)]).tolist() == [-1, -1]


def test_errors_name_instruction_and_location():
    b = Builder("main")
    b.location = SourceLocation("cell[3]", 7)
    x = b.parameter(Shape("c64", (2,)))
    b.op("floor", x, name="flr")
    with pytest.raises(EvaluationError, match=r"%flr \(floor\) at cell\[3\]:7: floor of complex"):
        evaluate(b.build(), [np.ones(2, np.complex64)])


@pytest.fixture
def custom_target():
    """Register a temporary custom-call target; yields a function that builds a call to it."""
    added = []

    def register(fn, shape=Shape("f32", (2,))):
        CUSTOM_CALL_TARGETS["test_target"] = fn
        added.append("test_target")
        b = Builder("main")
        x = b.parameter(Shape("f32", (2,)))
        b.op("custom-call", x, shape=shape, name="cc", custom_call_target="test_target")
        return b.build()

    yield register
    for name in added:
        CUSTOM_CALL_TARGETS.pop(name, None)


def test_unexpected_exceptions_are_wrapped_with_instruction(custom_target):
    def broken(instr, args, interp):
        return 1 // 0

    comp = custom_target(broken)
    with pytest.raises(EvaluationError, match=r"while evaluating %cc \(custom-call\): ZeroDivisionError"):
        evaluate(comp, [np.ones(2, F32)])


def test_results_are_cast_to_the_declared_type_and_wrong_dims_are_reported(custom_target):
    comp = custom_target(lambda instr, args, interp: np.array([1.5, 2.5]))  # float64
    got = evaluate(comp, [np.ones(2, F32)])
    assert got.dtype == F32 and got.tolist() == [1.5, 2.5]
    comp = custom_target(lambda instr, args, interp: np.zeros(3, F32))
    with pytest.raises(EvaluationError, match=r"internal error: %cc .*dimensions \[3\], expected f32\[2\]"):
        evaluate(comp, [np.ones(2, F32)])


def test_evaluation_emits_no_numpy_warnings():
    b = Builder("main")
    x = b.parameter(Shape("f32", (3,)))
    i = b.parameter(Shape("s8", (3,)))
    zero = b.broadcast(b.constant(0, "f32"), (3,))
    outs = [b.op("divide", x, zero), b.op("sqrt", b.op("negate", x)), b.op("log", zero),
            b.op("multiply", i, i), b.op("divide", i, b.broadcast(b.constant(0, "s8"), (3,))),
            b.convert(b.op("divide", x, zero), "s32")]
    comp = b.build(b.op("tuple", *outs))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = evaluate(comp, [np.array([1, 2, 3], F32), np.array([100, -128, 3], np.int8)])
    assert out[3].tolist() == [16, 0, 9] and out[4].tolist() == [-1, -1, -1]
    assert out[5].tolist() == [2 ** 31 - 1] * 3


def test_nbxla_errors_pass_through_unwrapped(custom_target):
    def boom(instr, args, interp):
        raise EvaluationError("boom from target")

    with pytest.raises(EvaluationError) as info:
        evaluate(custom_target(boom), [np.ones(2, F32)])
    assert str(info.value) == "boom from target"


def test_bf16_parameter_needs_a_bf16_argument():
    b = Builder("main")
    b.parameter(Shape("bf16", (2,)))
    with pytest.raises(EvaluationError, match=r"expects bf16\[2\] but got f32\[2\]"):
        evaluate(b.build(), [np.ones(2, F32)])


def test_module_without_entry():
    with pytest.raises(EvaluationError, match="no entry"):
        evaluate(Module("empty"), [])


# --- layouts: copy is a logical identity, bitcast reinterprets the physical buffer ----------

def test_copy_is_logical_identity_across_layouts():
    x = np.arange(6, dtype=F32).reshape(2, 3)
    b = Builder("main")
    p = b.parameter(Shape("f32", (2, 3)))
    b.op("copy", p)
    comp = b.build()
    comp.root.shape = Shape("f32", (2, 3), (0, 1))
    assert np.array_equal(evaluate(comp, [x]), x)


def bitcast(x, src_layout, out_shape):
    b = Builder("main")
    p = b.parameter(Shape(from_numpy_dtype(x.dtype), x.shape, src_layout))
    b.op("bitcast", p, shape=out_shape)
    return evaluate(b.build(), [x])


def test_bitcast_row_major_is_reshape():
    x = np.arange(6, dtype=F32).reshape(2, 3)
    assert np.array_equal(bitcast(x, None, Shape("f32", (3, 2))), x.reshape(3, 2))


def test_bitcast_transposing_layout():
    # f32[2,3]{0,1} holds x column-major; reading it as f32[3,2]{1,0} gives x.T.
    x = np.arange(6, dtype=F32).reshape(2, 3)
    assert np.array_equal(bitcast(x, (0, 1), Shape("f32", (3, 2))), x.T)
    # ... and as f32[3,2]{0,1} (column-major again) it is the column-major reshape.
    got = bitcast(x, (0, 1), Shape("f32", (3, 2), (0, 1)))
    assert np.array_equal(got, np.reshape(x, (3, 2), order="F"))


def test_bitcast_changes_element_type():
    x = np.array([1.0, -2.0], F32)
    got = bitcast(x, None, Shape("s32", (2,)))
    assert got.dtype == np.int32 and np.array_equal(got, x.view(np.int32))
