"""Helpers for the evaluator tests: build a one-instruction computation and run it."""

from nbxla.hlo import Builder, Shape, shape_of
from nbxla.hlo.evaluator import evaluate


def run_op(opcode, *args, shape=None, **attrs):
    """Evaluate ``opcode(*args)`` where each arg becomes a parameter of its own shape."""
    b = Builder(f"test_{opcode}")
    params = [b.parameter(shape_of(a)) for a in args]
    b.op(opcode, *params, shape=shape, **attrs)
    return evaluate(b.build(), list(args))


def scalar_fn(build, *types):
    """A computation on scalars: ``build(builder, *params)`` returns its root."""
    b = Builder("scalar_fn")
    params = [b.parameter(Shape(t)) for t in types]
    return b.build(build(b, *params))
