"""bf16 and f8 arithmetic as XLA's CPU backend does it: in f32, rounded once per op.

XLA:CPU has no bf16 / f8 arithmetic of its own.  Its ``FloatNormalization`` pass rewrites
every op that computes on those types into the same op on f32 (operands converted up,
which is exact) followed by one convert back to the narrow type; ops that only move values
(reshape, slice, concatenate, select, ...) keep the narrow type, as their results are the
same either way.  A reduce becomes an f32 reduce with an f32 reducer: sums accumulate in
f32 and round once at the end, not after every addition.  A dot with bf16 operands and an
f32 result (``preferred_element_type``) computes in f32 and is never rounded to bf16.

The evaluator follows this exactly: ``widened(instr)`` is the f32 form of an instruction
(its operands stand-in f32 parameters, its called computations cloned in f32), and the
result is rounded to the narrow type by the usual conversion to the instruction's dtype.
NumPy's ml_dtypes arithmetic gives the same answers op by op (it, too, computes in f32
and rounds each result), so eager NumPy on ml_dtypes arrays is the frontend's oracle.
"""

from __future__ import annotations

import numpy as np

from .attributes import ATTRIBUTE_KINDS, COMPUTATION_ATTRS
from .ir import Computation, Instruction
from .shapes import LOW_PRECISION_DTYPES, AnyShape, Shape, TupleShape, compute_type, is_low_precision

# Ops evaluated as written even on narrow types: they move or pick values without
# arithmetic (so computing them in f32 would give the same bits), run other computations
# whose own ops are normalized, or reinterpret bits (bitcast-convert must see the narrow bits).
KEEPS_NARROW_TYPES = frozenset("""
    parameter constant tuple get-tuple-element call fusion while conditional opt-barrier
    custom-call broadcast reshape bitcast transpose slice dynamic-slice dynamic-update-slice
    concatenate pad reverse copy gather select sort bitcast-convert""".split())

# Ops whose called computation runs once per step (a combiner, a comparator, a mapped
# function): a kernel applying it on bf16 would round every step, where XLA's f32 form of the
# op rounds once.  The optimizer gives them their f32 form (passes/float_normalization.py).
STEPWISE_OPS = frozenset({"reduce-window", "scatter", "select-and-scatter", "map", "sort"})


def involves_low_precision(shape: AnyShape) -> bool:
    if shape.is_tuple:
        return any(involves_low_precision(s) for s in shape.elements)
    return is_low_precision(shape.element_type)


def computes_in_f32(instr: Instruction) -> bool:
    """Is ``instr`` arithmetic on a bf16 / f8 value (operand or result)?"""
    if instr.opcode in KEEPS_NARROW_TYPES:
        return False
    return involves_low_precision(instr.shape) or any(involves_low_precision(o.shape) for o in instr.operands)


def widen_shape(shape: AnyShape) -> AnyShape:
    if shape.is_tuple:
        return TupleShape(tuple(widen_shape(s) for s in shape.elements))
    return Shape(compute_type(shape.element_type), shape.dims, shape.layout)


def widen_value(value):
    """A narrow-typed array as f32 (exact); other values unchanged."""
    if isinstance(value, tuple):
        return tuple(widen_value(v) for v in value)
    arr = np.asarray(value)
    return arr.astype(np.float32) if arr.dtype in LOW_PRECISION_DTYPES else value


class Widener:
    """The f32 forms of instructions and computations, made once each (per evaluation)."""

    def __init__(self):
        self._done: dict[int, tuple[object, object]] = {}   # id -> (original, f32 form)

    def instruction(self, instr: Instruction) -> Instruction:
        """``instr`` on f32: the same opcode and attributes over f32 stand-in parameters."""
        known = self._done.get(id(instr))
        if known is None:
            operands = [Instruction("parameter", widen_shape(o.shape), attrs={"parameter_number": k}, name=o.name)
                        for k, o in enumerate(instr.operands)]
            wide = Instruction(instr.opcode, widen_shape(instr.shape), operands, self._attrs(instr),
                               name=instr.name, location=instr.location)
            known = self._done[id(instr)] = (instr, wide)
        return known[1]

    def computation(self, comp: Computation) -> Computation:
        """A clone of ``comp`` with every narrow type replaced by f32 (a reducer, a combiner)."""
        known = self._done.get(id(comp))
        if known is None:
            clones: dict[int, Instruction] = {}
            for instr in comp.instructions:
                attrs = self._attrs(instr)
                if instr.opcode == "constant":
                    attrs["literal"] = widen_value(instr.literal)
                clones[id(instr)] = Instruction(instr.opcode, widen_shape(instr.shape),
                                                [clones[id(o)] for o in instr.operands], attrs,
                                                name=instr.name, location=instr.location)
            wide = Computation(comp.name, [clones[id(i)] for i in comp.instructions], clones[id(comp.root)])
            known = self._done[id(comp)] = (comp, wide)
        return known[1]

    def _attrs(self, instr: Instruction) -> dict:
        attrs = dict(instr.attrs)
        for key in COMPUTATION_ATTRS:
            value = attrs.get(key)
            if value is None:
                continue
            attrs[key] = [self.computation(c) for c in value] if ATTRIBUTE_KINDS[key] == "computations" \
                else self.computation(value)
        return attrs
