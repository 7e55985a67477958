"""Build computations in Python, with shapes inferred and checked at every step.

    b = Builder("main")
    x = b.parameter(Shape("f32", (16, 32)), "x")
    y = b.op("multiply", x, x)
    s = b.reduce(y, b.constant(0, "f32"), dimensions=(0, 1), reducer=scalar_computation("add", "f32"))
    module = Module("example", b.build(s))
"""

from __future__ import annotations

import itertools

import numpy as np

from ..errors import HloShapeError
from .ir import Computation, Instruction, SourceLocation, check_operand_count
from .shape_inference import infer_shape
from .shapes import AnyShape, Shape, from_numpy_dtype, to_numpy_dtype

_ids = itertools.count(1)


def unique_name(prefix: str) -> str:
    return f"{prefix}.{next(_ids)}"


class Builder:
    """Appends instructions to a new computation; ``build`` returns it."""

    def __init__(self, name: str):
        self.name = name
        self.instructions: list[Instruction] = []
        self._parameter_count = 0
        self.location: SourceLocation | None = None  # stamped on every new instruction

    @classmethod
    def extending(cls, computation: Computation, name: str) -> "Builder":
        """A builder that starts with ``computation``'s instructions (its parameters included);
        parameters added later number after its own."""
        b = cls(name)
        b.instructions = list(computation.instructions)
        b._parameter_count = len(computation.parameters)
        return b

    def op(self, opcode: str, *operands: Instruction, shape: AnyShape | None = None,
           name: str | None = None, **attrs) -> Instruction:
        """Add ``opcode(operands)`` with ``attrs``; ``shape`` is needed only for declared-shape ops."""
        inferred = infer_shape(opcode, [o.shape for o in operands], attrs, declared=shape)
        instr = Instruction(opcode, inferred, operands, attrs, name or unique_name(_short(opcode)),
                            location=self.location)
        check_operand_count(instr)
        self.instructions.append(instr)
        return instr

    def parameter(self, shape: AnyShape, name: str | None = None) -> Instruction:
        number = self._parameter_count
        self._parameter_count += 1
        return self.op("parameter", shape=shape, name=name or unique_name("param"),
                       parameter_number=number)

    def constant(self, value, element_type: str | None = None) -> Instruction:
        """A constant from a Python/NumPy value; ``element_type`` (e.g. 'f32') casts it."""
        arr = np.asarray(value)
        if element_type is not None:
            arr = arr.astype(to_numpy_dtype(element_type))
        shape = Shape(from_numpy_dtype(arr.dtype), arr.shape)
        return self.op("constant", shape=shape, literal=arr)

    def broadcast(self, x: Instruction, dims: tuple[int, ...], dimensions=()) -> Instruction:
        """Broadcast ``x`` to ``dims``; ``dimensions`` maps x's dims into the result."""
        return self.op("broadcast", x, shape=Shape(x.shape.element_type, dims),
                       dimensions=tuple(dimensions))

    def reshape(self, x: Instruction, dims) -> Instruction:
        return self.op("reshape", x, shape=Shape(x.shape.element_type, tuple(dims)))

    def convert(self, x: Instruction, element_type: str) -> Instruction:
        if x.shape.element_type == element_type:
            return x
        return self.op("convert", x, shape=x.shape.with_type(element_type))

    def compare(self, a: Instruction, b: Instruction, direction: str, type: str | None = None):
        attrs = {"direction": direction}
        if type is not None:
            attrs["type"] = type
        return self.op("compare", a, b, **attrs)

    def iota(self, shape: Shape, dimension: int) -> Instruction:
        return self.op("iota", shape=shape, iota_dimension=dimension)

    def reduce(self, x, init, dimensions, reducer: Computation) -> Instruction:
        return self.op("reduce", x, init, dimensions=tuple(dimensions), to_apply=reducer)

    def build(self, root: Instruction | None = None) -> Computation:
        if not self.instructions:
            raise HloShapeError(f"computation {self.name} is empty")
        return Computation(self.name, self.instructions, root or self.instructions[-1])


def _short(opcode: str) -> str:
    return opcode.replace("-", "_")


def scalar_computation(opcode: str, element_type: str, name: str | None = None) -> Computation:
    """``(a, b) -> opcode(a, b)`` on scalars: the reducer of a reduce or reduce-window."""
    b = Builder(name or unique_name(f"{_short(opcode)}_{element_type}"))
    s = Shape(element_type)
    x, y = b.parameter(s, "lhs"), b.parameter(s, "rhs")
    return b.build(b.op(opcode, x, y))
