"""``Emitter``: the few HLO-building helpers the VJP rules are written in.

It appends to an ordinary ``Builder``: the one of a module being transformed, or the
builder of a running trace (so that the backward pass joins the surrounding computation).
Every helper keeps the element type of its operand: cotangents have their primal's dtype.
"""

from __future__ import annotations

import numpy as np

from ..hlo import Builder, Shape, scalar_computation
from ..hlo.attributes import PadDim, SliceDim
from ..hlo.ir import Instruction


class Emitter:
    def __init__(self, builder: Builder):
        self.b = builder
        self._adders: dict[str, object] = {}

    # ---- constants ------------------------------------------------------------------------

    def scalar(self, value, element_type: str) -> Instruction:
        return self.b.constant(value, element_type)

    def full(self, shape: Shape, value) -> Instruction:
        """``shape`` filled with ``value`` (a broadcast scalar: fusion makes it free)."""
        c = self.scalar(value, shape.element_type)
        return c if not shape.dims else self.b.broadcast(c, shape.dims)

    def full_like(self, x: Instruction, value) -> Instruction:
        return self.full(x.shape, value)

    def zeros(self, shape: Shape) -> Instruction:
        return self.full(shape, 0)

    # ---- elementwise ----------------------------------------------------------------------

    def op(self, opcode: str, *operands: Instruction, **attrs) -> Instruction:
        return self.b.op(opcode, *operands, **attrs)

    def add(self, a, b):
        return self.op("add", a, b)

    def sub(self, a, b):
        return self.op("subtract", a, b)

    def mul(self, a, b):
        return self.op("multiply", a, b)

    def div(self, a, b):
        return self.op("divide", a, b)

    def neg(self, a):
        return self.op("negate", a)

    def scale(self, a, value):
        """``a * value`` for a Python number."""
        return self.mul(a, self.full_like(a, value))

    def compare(self, a, b, direction: str):
        return self.b.compare(a, b, direction)

    def select(self, pred, a, b):
        return self.op("select", pred, a, b)

    def where(self, pred, a):
        """``a`` where ``pred``, else zero."""
        return self.select(pred, a, self.full_like(a, 0))

    def convert(self, x, element_type: str):
        return self.b.convert(x, element_type)

    def indicator(self, pred, like: Instruction):
        """1 where ``pred``, else 0, in ``like``'s element type."""
        return self.where(pred, self.full_like(like, 1))

    # ---- structure ------------------------------------------------------------------------

    def reshape(self, x, dims):
        dims = tuple(dims)
        return x if x.shape.dims == dims else self.b.reshape(x, dims)

    def transpose(self, x, perm):
        perm = tuple(perm)
        if perm == tuple(range(len(perm))):
            return x
        return self.op("transpose", x, dimensions=perm)

    def broadcast(self, x, dims, dimensions):
        return self.b.broadcast(x, tuple(dims), tuple(dimensions))

    def sum(self, x, axes) -> Instruction:
        """Sum over ``axes`` (the others keep their order)."""
        axes = tuple(sorted(set(axes)))
        if not axes:
            return x
        t = x.shape.element_type
        if t not in self._adders:
            self._adders[t] = scalar_computation("add", t)
        return self.b.reduce(x, self.scalar(0, t), axes, self._adders[t])

    def adder(self, element_type: str):
        if element_type not in self._adders:
            self._adders[element_type] = scalar_computation("add", element_type)
        return self._adders[element_type]

    def pad(self, x, padding: list[PadDim]):
        if all(p == PadDim(0, 0, 0) for p in padding):
            return x
        return self.op("pad", x, self.scalar(0, x.shape.element_type), padding=tuple(padding))

    def slice(self, x, dims: list[SliceDim]):
        if all(s.start == 0 and s.limit == n and s.stride == 1 for s, n in zip(dims, x.shape.dims)):
            return x
        return self.op("slice", x, slice=tuple(dims))

    def sum_to_shape(self, g, shape: Shape):
        """Undo a broadcast from ``shape`` (same rank, size-1 dims stretched) by summing."""
        axes = [d for d, (n, m) in enumerate(zip(shape.dims, g.shape.dims)) if n != m]
        return self.reshape(self.sum(g, axes), shape.dims)


def inverse_permutation(perm) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argsort(perm))
