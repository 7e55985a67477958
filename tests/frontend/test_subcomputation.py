"""The public sub-trace and rebind APIs the control-flow helpers use (``frontend/control.py``,
``frontend/loops.py``): ``TraceContext.subcomputation`` swaps the builder and its constant
table for one block, ``Tracer.rebind`` re-points a Tracer at another instruction."""

import numpy as np
import pytest

from nbxla.frontend.context import TraceContext
from nbxla.frontend.tracer import Tracer
from nbxla.hlo import Builder, Shape


def test_subcomputation_has_its_own_builder_and_constants_and_restores_them():
    ctx = TraceContext("outer")
    outer = ctx.builder
    c1 = ctx.constant(np.float32(2))
    inner = Builder("inner")
    with ctx.subcomputation(inner) as b:
        assert b is inner and ctx.builder is inner
        c2 = ctx.constant(np.float32(2))          # the outer constant is not an operand here
        assert c2 is not c1 and c2 in inner.instructions and c2 not in outer.instructions
    assert ctx.builder is outer
    assert ctx.constant(np.float32(2)) is c1      # the outer table is back


def test_subcomputation_restores_after_an_error():
    ctx = TraceContext("outer")
    outer = ctx.builder
    c1 = ctx.constant(np.int32(7))
    with pytest.raises(ValueError):
        with ctx.subcomputation(Builder("inner")):
            ctx.constant(np.int32(7))
            raise ValueError("the body failed")
    assert ctx.builder is outer and ctx.constant(np.int32(7)) is c1


def test_rebind_points_a_tracer_elsewhere_keeping_or_setting_its_version():
    ctx = TraceContext("t")
    a = ctx.parameter(Shape("f32", (3,)), "a")
    b = ctx.parameter(Shape("f32", (3,)), "b")
    t = Tracer(ctx, a)
    t.rebind(b)
    assert t.instr is b and t.stored_instr is b and t.version == 0
    t.rebind(a, 5)
    assert t.instr is a and t.version == 5
