"""One reducer recognizer (``hlo/reducers.py``) for the code generator, the evaluator, autodiff and
the Dask planner, and the identities it hands out."""

from __future__ import annotations

import numpy as np
import pytest

from nbxla.hlo import Builder, Shape, scalar_computation
from nbxla.hlo.reducers import IDEMPOTENT, REDUCER_OPS, identity, is_identity, reducer_op, returns_second
from nbxla.hlo.shapes import to_numpy_dtype


def _reducer(body, t="f32"):
    b = Builder("r")
    x, y = b.parameter(Shape(t)), b.parameter(Shape(t))
    return b.build(body(b, x, y))


def _reduce_of(comp, t="f32"):
    b = Builder("main")
    x = b.parameter(Shape(t, (8,)))
    init = b.constant(identity(reducer_op(comp) or "add", t), t)
    return b.op("reduce", x, init, dimensions=(0,), to_apply=comp)


@pytest.mark.parametrize("op", sorted(REDUCER_OPS))
def test_a_binary_op_on_the_two_parameters_is_recognized_in_either_order(op):
    t = "s32" if op in ("and", "or", "xor") else "f32"
    assert reducer_op(scalar_computation(op, t)) == op
    assert reducer_op(_reducer(lambda b, x, y: b.op(op, y, x), t)) == op


def test_custom_reducers_are_not_recognized():
    assert reducer_op(_reducer(lambda b, x, y: b.op("add", x, x))) is None
    assert reducer_op(_reducer(lambda b, x, y: b.op("subtract", x, y))) is None
    assert reducer_op(_reducer(lambda b, x, y: b.op("add", x, b.op("multiply", y, y)))) is None
    assert reducer_op(_reducer(lambda b, x, y: y)) is None and returns_second(_reducer(lambda b, x, y: y))


def test_every_user_asks_the_one_recognizer():
    """The four places that used to keep their own op sets now agree on what is custom."""
    from nbxla.autodiff.rules import reducer_kind
    from nbxla.codegen.toolkit import reducer_opcode
    from nbxla.dask.analysis import _tree_reducible
    from nbxla.hlo.evaluator_reduce import recognized_binary
    custom = _reducer(lambda b, x, y: b.op("add", x, b.op("multiply", y, y)))
    plain = scalar_computation("add", "f32")
    for comp, want in ((custom, None), (plain, "add")):
        r = _reduce_of(comp)
        assert reducer_opcode(r) == want and recognized_binary(comp) == want
        assert reducer_kind(comp) == want and _tree_reducible(r) == (want is not None)
    # xor: recognized, but no native accumulator and no autodiff rule
    x = scalar_computation("xor", "s32")
    assert reducer_op(x) == "xor" and recognized_binary(x) == "xor"
    assert reducer_opcode(_reduce_of(x, "s32")) is None and reducer_kind(x) is None


TYPES = ["pred", "s8", "s32", "u8", "u32", "f16", "bf16", "f32", "f64", "c64"]


@pytest.mark.parametrize("t", TYPES)
@pytest.mark.parametrize("op", sorted(REDUCER_OPS))
def test_identity_leaves_every_value_unchanged(op, t):
    dtype = to_numpy_dtype(t)
    kinds_ok = {"and": lambda: t == "pred" or dtype.kind in "iu", "xor": lambda: t == "pred" or dtype.kind in "iu",
                "or": lambda: t == "pred" or dtype.kind in "iu"}
    if (op in ("maximum", "minimum") and t == "c64") or not kinds_ok.get(op, lambda: True)():
        with pytest.raises(ValueError, match="no identity"):
            identity(op, t)
        return
    rng = np.random.default_rng(0)
    if t == "pred":
        y = np.array([True, False])
    elif dtype.kind in "iu":
        info = np.iinfo(dtype)
        y = np.array([info.min, info.max, 0, 1, *rng.integers(info.min, info.max, 8, endpoint=True)], dtype)
    else:
        y = np.array([0.0, -1.5, 2.0, np.inf, -np.inf], dtype=np.float32).astype(dtype)
        if dtype.kind == "c":       # (complex (1+0j) * inf gives a NaN imaginary part)
            y = y[np.isfinite(y)] + 1j * y[np.isfinite(y)].astype(dtype)
    e = identity(op, t)
    ufunc = {"add": np.add, "multiply": np.multiply, "maximum": np.maximum, "minimum": np.minimum,
             "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[op]
    if t == "pred":
        ufunc = {"add": np.logical_or, "multiply": np.logical_and, "maximum": np.logical_or,
                 "minimum": np.logical_and}.get(op, ufunc)
    got = ufunc(np.full_like(y, e), y)
    np.testing.assert_array_equal(got.astype(dtype), y)
    assert is_identity(op, np.full((3,), e, dtype), t)
    assert op not in IDEMPOTENT or np.array_equal(ufunc(y, y).astype(dtype), y)
