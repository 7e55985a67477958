"""Fusions that arrive in the HLO text (XLA's optimized modules, JAX's exports): put back.

XLA's fusion decisions are made for XLA's emitters: a multi-output loop fusion with outputs
of different shapes, a reduction fusion exporting values outside the reduced and input spaces,
a reduce-window or a scatter fused with its producers, a dot with its epilogue.  nbxla's code
generator is built for nbxla's fusion pass, so every imported fusion's instructions go back into
the calling computation, before the optimizer, and nbxla's fusion pass fuses them again as it
fuses traced code (XLA runs its own fusion passes over unfused HLO the same way).  The one
exception is a fusion holding a small dot in the form the native dot kernel takes
(``fused_dots.keeps_native``): kept, it is one kernel; split, it would be a BLAS call and an
epilogue kernel (see ``fused_dots.py``).
"""

from __future__ import annotations

from ..hlo import Module
from ..hlo.ir import Computation, Instruction
from .fused_dots import fused_dot, keeps_native, product_size_unknown
from .inline import inline_body
from .pipeline import Pass, instruction_ids, rename_new_instructions


class ImportedFusions(Pass):
    """Put the instructions of every fusion back into its caller, except a dot fusion kept as
    a native dot kernel (``fused_dots.keeps_native``)."""
    name = "imported-fusions"

    def __init__(self):
        self.report: dict[str, str] = {}       # fusion name -> "kept native" / "split"

    def run(self, module: Module) -> bool:
        return self._split(module, lambda fused: fused_dot(fused) is not None and keeps_native(fused))

    def _split(self, module: Module, keep) -> bool:
        before, changed = instruction_ids(module), False
        self.report = {}
        for comp in module.computations_post_order():
            changed |= self._split_in(comp, keep)
        if changed:
            module.computations = module.computations_post_order()   # drop split fusions' bodies
            rename_new_instructions(module, before)
        return changed

    def _split_in(self, comp: Computation, keep) -> bool:
        replace: dict[int, Instruction] = {}
        order: list[Instruction] = []
        changed = False
        for instr in comp.instructions:
            instr.operands = [replace.get(id(o), o) for o in instr.operands]
            fused = instr.attrs.get("calls") if instr.opcode == "fusion" else None
            if fused is None:
                order.append(instr)
                continue
            if keep(fused):
                self.report[instr.name] = "kept: one native dot kernel with its epilogue"
                order.append(instr)
                continue
            self.report[instr.name] = "split: the dot a library call, the rest fused around it" \
                if fused_dot(fused) is not None else "split: fused again by nbxla's fusion pass"
            replace[id(instr)] = inline_body(instr, fused, comp, order)
            changed = True
        comp.instructions = order
        comp.root = replace.get(id(comp.root), comp.root)
        return changed


def split_dots_of_unknown_size(module: Module) -> bool:
    """Split, in a module with unknown dimensions before its probes are bound, every fused dot
    whose one product has an unknown size (``fused_dots.product_size_unknown``); the rest is
    left to the optimizer.  Why before: the probes bind the unknown sizes to small numbers, at
    which the pass would keep the native kernel for every size."""
    def keep(fused):
        dot = fused_dot(fused)
        return dot is None or not product_size_unknown(dot)
    return ImportedFusions()._split(module, keep)
