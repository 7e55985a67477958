"""Layout normalization: make every value's layout irrelevant before anything else runs.

nbxla's values are logical arrays; the only op whose meaning depends on layouts is
``bitcast``, which reinterprets its operand's bytes in the operand's layout as the result in
the result's layout.  XLA's optimized modules use that freely (a transpose written as
``bitcast(f32[2,3,4,4]{3,2,1,0}) -> f32[4,4,2,3]{0,1,3,2}`` followed by a layout-changing
``copy``).  Every later rewrite that replaces a value by an equal one (``copy(x) -> x``,
inlining a call, CSE) may hand such a bitcast an operand with another layout and change what
it computes, and the code generator treats bitcasts as row-major reshapes.

So this pass runs first: each bitcast that reads or writes a non-row-major layout becomes the
logical ops it stands for (transpose to the operand's physical order, reshape, transpose to
the result's logical order; a bitcast-convert where the element type changes), and then
every layout is dropped.  A bitcast that also changes the element width cannot be written
that way; if one reads a non-row-major layout, layouts are kept (its meaning stays intact).
"""

from __future__ import annotations

import numpy as np

from ..hlo import Module
from ..hlo.builder import unique_name
from ..hlo.ir import Instruction
from ..hlo.shapes import AnyShape, Shape, TupleShape, bit_width
from .pipeline import Pass, instruction_ids, rename_new_instructions


def _reads_layout(bitcast: Instruction) -> bool:
    """Does the bitcast's meaning depend on a layout (not both sides row-major)?"""
    return bitcast.shape.layout is not None or bitcast.operands[0].shape.layout is not None


def _physical_order(shape: Shape) -> tuple[int, ...]:
    """The dimensions from major to minor: the order of the array's bytes."""
    return tuple(reversed(shape.minor_to_major))


def logical_bitcast(instr: Instruction) -> list[Instruction]:
    """Instructions computing a same-width ``bitcast`` without layouts, the last one
    replacing it (it keeps the bitcast's shape)."""
    x = instr.operands[0]
    src, dst = x.shape, instr.shape
    new: list[Instruction] = []

    def add(opcode, operand, shape, **attrs):
        new.append(Instruction(opcode, shape, [operand], attrs, unique_name(opcode.replace("-", "_")),
                               instr.location))
        return new[-1]

    order = _physical_order(src)
    value = x
    if order != tuple(range(src.rank)):
        value = add("transpose", value, Shape(src.element_type, [src.dims[d] for d in order]), dimensions=order)
    if src.element_type != dst.element_type:
        value = add("bitcast-convert", value, Shape(dst.element_type, value.shape.dims))
    target = _physical_order(dst)
    stored = Shape(dst.element_type, [dst.dims[d] for d in target])
    if target == tuple(range(dst.rank)):
        if new and value.shape.dims == dst.dims:
            value.shape, value.name = dst, instr.name     # the last op already gives the result
            return new
        return new + [Instruction("reshape", dst, [value], {}, instr.name, instr.location)]
    if value.shape.dims != stored.dims:
        value = add("reshape", value, stored)
    perm = tuple(int(d) for d in np.argsort(target))
    return new + [Instruction("transpose", dst, [value], {"dimensions": perm}, instr.name, instr.location)]


def _strip(shape: AnyShape) -> AnyShape:
    if shape.is_tuple:
        return TupleShape(tuple(_strip(s) for s in shape.elements))
    return Shape(shape.element_type, shape.dims)


class LayoutNormalization(Pass):
    name = "layouts"

    def run(self, module: Module) -> bool:
        before, changed, keep_layouts = instruction_ids(module), False, False
        for comp in module.computations:
            replace: dict[int, Instruction] = {}
            order: list[Instruction] = []
            for instr in comp.instructions:
                instr.operands = [replace.get(id(o), o) for o in instr.operands]
                if instr.opcode == "bitcast" and _reads_layout(instr):
                    if bit_width(instr.shape.element_type) != bit_width(instr.operands[0].shape.element_type):
                        keep_layouts = True
                    else:
                        new = logical_bitcast(instr)
                        for n in new:
                            n.parent = comp
                        order.extend(new)
                        replace[id(instr)] = new[-1]
                        changed = True
                        continue
                order.append(instr)
            comp.instructions = order
            comp.root = replace.get(id(comp.root), comp.root)
        if not keep_layouts:
            for instr in module.instructions():
                stripped = _strip(instr.shape)
                if stripped != instr.shape:
                    instr.shape, changed = stripped, True
        rename_new_instructions(module, before)
        return changed
