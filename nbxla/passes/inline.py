"""Call inlining: replace every ``call`` by a copy of the computation it calls.

JAX wraps library functions (``jnp.where``, ``jnp.clip``, ``%``...) in ``call``s.  Left alone,
each call is a kernel boundary that fusion cannot see through; inlined, its elementwise work
fuses with its neighbours (XLA runs its CallInliner first for the same reason).
"""

from __future__ import annotations

from ..hlo import Module
from ..hlo.ir import Instruction
from .pipeline import Pass, instruction_ids, rename_new_instructions


class CallInliner(Pass):
    name = "call-inliner"

    def run(self, module: Module) -> bool:
        before, changed = instruction_ids(module), False
        # Callees first: a callee's own calls are already inlined when it is copied.
        for comp in module.computations_post_order():
            replace: dict[int, Instruction] = {}
            order: list[Instruction] = []
            for instr in comp.instructions:
                instr.operands = [replace.get(id(o), o) for o in instr.operands]
                if instr.opcode != "call":
                    order.append(instr)
                    continue
                replace[id(instr)] = inline_body(instr, instr.attrs["to_apply"], comp, order)
                changed = True
            comp.instructions = order
            comp.root = replace.get(id(comp.root), comp.root)
        if changed:
            module.computations = module.computations_post_order()   # drop inlined callees
            rename_new_instructions(module, before)                   # copies kept callee names
        return changed


def inline_body(instr: Instruction, callee, comp, order: list) -> Instruction:
    """Copy ``callee``'s instructions into ``comp`` (appended to ``order``) with its parameters
    replaced by ``instr``'s operands; returns the copy of the callee's root (what replaces
    ``instr``).  Used for calls here and for imported fusions (imported_fusions.py)."""
    mapping: dict[int, Instruction] = {}
    for inner in callee.instructions:
        if inner.opcode == "parameter":
            mapping[id(inner)] = instr.operands[inner.parameter_number]
            continue
        copy = Instruction(inner.opcode, inner.shape, [mapping[id(o)] for o in inner.operands],
                           inner.attrs, inner.name, inner.location or instr.location)
        copy.parent = comp
        order.append(copy)
        mapping[id(inner)] = copy
    return mapping[id(callee.root)]
