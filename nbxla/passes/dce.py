"""Dead code elimination: drop instructions the root does not need, and unused computations."""

from __future__ import annotations

from ..hlo import Module
from .pipeline import Pass


class DeadCodeElimination(Pass):
    name = "dce"

    def run(self, module: Module) -> bool:
        changed = False
        for comp in module.computations_post_order():
            live = {id(i) for i in comp.post_order()}
            kept = [i for i in comp.instructions if id(i) in live]
            if len(kept) != len(comp.instructions):
                comp.instructions = kept
                changed = True
        reachable = module.computations_post_order()
        if len(reachable) != len(module.computations):
            module.computations = reachable
            changed = True
        return changed
