"""Common subexpression elimination: one instruction per (opcode, operands, shape, attributes)."""

from __future__ import annotations

import numpy as np

from ..hlo import Module
from ..hlo.ir import Computation, Instruction
from ..hlo.opcodes import NEVER_CSE
from .pipeline import Pass



def _attr_key(value):
    if isinstance(value, np.ndarray):
        return (value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, Computation):
        return ("computation", id(value))
    if isinstance(value, tuple):
        return tuple(_attr_key(v) for v in value)
    return value


def instruction_key(instr: Instruction) -> tuple:
    attrs = tuple(sorted((k, _attr_key(v)) for k, v in instr.attrs.items() if k != "metadata"))
    return (instr.opcode, tuple(id(o) for o in instr.operands), instr.shape, attrs)


class CommonSubexpressionElimination(Pass):
    name = "cse"

    def run(self, module: Module) -> bool:
        changed = False
        for comp in module.computations:
            changed |= eliminate_common_subexpressions(comp)
        return changed


def eliminate_common_subexpressions(comp: Computation) -> bool:
    """Merge duplicate instructions of one computation; True if any were merged."""
    changed = False
    seen: dict[tuple, Instruction] = {}
    replace: dict[int, Instruction] = {}
    kept = []
    for instr in comp.instructions:
        instr.operands = [replace.get(id(o), o) for o in instr.operands]
        if instr.opcode in NEVER_CSE:
            kept.append(instr)
            continue
        key = instruction_key(instr)
        first = seen.get(key)
        if first is None:
            seen[key] = instr
            kept.append(instr)
        else:
            replace[id(instr)] = first
            changed = True
    comp.instructions = kept
    comp.root = replace.get(id(comp.root), comp.root)
    return changed
