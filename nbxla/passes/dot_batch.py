"""Batched dots whose right operand is a broadcast matrix become one plain dot (one GEMM).

``x @ W`` with a 3-D or 4-D ``x`` and a 2-D ``W`` is traced as NumPy defines it: ``W`` broadcast
along the batch dims, then a batched ``dot``.  Run as written, that materializes the broadcast
(``batch`` copies of ``W``) and makes ``batch`` small matrix products.  When the broadcast only
adds the leading batch dims, the batch dims of ``x`` are ordinary rows: the same result, in the
same dim order, is one ``dot`` of ``x`` with ``W`` itself, contracting the same dim -- a single
GEMM of ``(batch * m) x k`` by ``k x n``.
"""

from __future__ import annotations

from ..hlo import Module
from .pipeline import Pass


class DotBroadcastBatch(Pass):
    name = "dot-broadcast-batch"

    def run(self, module: Module) -> bool:
        changed = False
        for instr in module.instructions():
            if instr.opcode == "dot" and _unbatch(instr):
                changed = True
        return changed


def _unbatch(dot) -> bool:
    at = dot.attrs
    lb, rb = tuple(at.get("lhs_batch_dims", ())), tuple(at.get("rhs_batch_dims", ()))
    nb = len(lb)
    rhs = dot.operands[1]
    if not nb or lb != tuple(range(nb)) or rb != tuple(range(nb)) or rhs.opcode != "broadcast":
        return False
    w = rhs.operands[0]
    if tuple(rhs.attrs["dimensions"]) != tuple(range(nb, rhs.shape.rank)) or w.shape.rank != rhs.shape.rank - nb:
        return False
    attrs = dict(at)
    attrs.pop("lhs_batch_dims", None)
    attrs.pop("rhs_batch_dims", None)
    attrs["rhs_contracting_dims"] = tuple(d - nb for d in at.get("rhs_contracting_dims", ()))
    dot.attrs = attrs
    dot.operands = [dot.operands[0], w]
    return True
