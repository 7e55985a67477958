"""Which values name memory that already exists: one answer for every planner and backend.

A *view* writes nothing: ``tuple`` and ``get-tuple-element`` name their operands' buffers, and a
``reshape`` or ``bitcast`` of a row-major array (no layout on either side) that keeps the element
type is the same bytes read with other dimensions.  The buffer plan gives views no memory of their
own (their readers keep the operand's buffer alive), the AOT driver passes the operand's pointer
on, and the JIT runtimes hand out a NumPy ``reshape`` of the operand.

A ``bitcast`` that changes the element type (same width, HLO allows it) is *not* a view here: it
is a kernel that converts bits (the elemental emitter's rule), since a NumPy ``reshape`` cannot
change a dtype and a runtime that shared the bytes would hand out an array of the wrong type.
"""

from __future__ import annotations

from .ir import Instruction

# Opcodes that never write new memory, whatever their shapes.
NAMING_OPCODES = frozenset({"tuple", "get-tuple-element"})
# Opcodes that are views under ``is_byte_view``'s conditions, and kernels otherwise.
REINTERPRETING_OPCODES = frozenset({"reshape", "bitcast"})


def is_byte_view(instr: Instruction) -> bool:
    """Is ``instr`` a ``reshape``/``bitcast`` that reads its operand's bytes unchanged?"""
    if instr.opcode not in REINTERPRETING_OPCODES or instr.shape.is_tuple:
        return False
    source = instr.operands[0].shape
    return (not source.is_tuple and instr.shape.layout is None and source.layout is None
            and instr.shape.element_type == source.element_type)


def is_view(instr: Instruction) -> bool:
    """Does ``instr`` only name existing memory (a tuple, a tuple element, a byte view)?"""
    return instr.opcode in NAMING_OPCODES or is_byte_view(instr)


def view_source(instr: Instruction, index: tuple[int, ...] = ()) -> tuple[Instruction, tuple[int, ...]]:
    """The operand and leaf index whose buffer leaf ``index`` of the view ``instr`` is."""
    if instr.opcode == "tuple":
        return instr.operands[index[0]], index[1:]
    if instr.opcode == "get-tuple-element":
        return instr.operands[0], (instr.attrs["index"],) + index
    if is_byte_view(instr):
        return instr.operands[0], index
    raise ValueError(f"%{instr.name} ({instr.opcode}) is not a view: it writes memory of its own")
