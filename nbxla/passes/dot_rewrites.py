"""Dot rewrites that let BLAS do the work: a batched dot of a broadcast matrix becomes one
plain dot (one GEMM), and a scalar factor on an operand moves after the dot (an epilogue).

``x @ W`` with a 3-D or 4-D ``x`` and a 2-D ``W`` is traced as NumPy defines it: ``W`` broadcast
along the batch dims, then a batched ``dot``.  Run as written, that materializes the broadcast
(``batch`` copies of ``W``) and makes ``batch`` small matrix products.  When the broadcast only
adds the leading batch dims, the batch dims of ``x`` are ordinary rows: the same result, in the
same dim order, is one ``dot`` of ``x`` with ``W`` itself, contracting the same dim -- a single
GEMM of ``(batch * m) x k`` by ``k x n``.

``(alpha * A) @ B`` scales all of ``A`` (a pass over an ``m x k`` operand) before the GEMM;
``alpha * (A @ B)`` scales the ``m x n`` result, which the elementwise work after the dot
(``+ beta * C``) fuses with: one GEMM and one kernel, as BLAS's own ``alpha``/``beta`` do.  The
two differ only in rounding (integers: not at all).
"""

from __future__ import annotations

from ..hlo import Module
from ..hlo.builder import unique_name
from ..hlo.ir import Instruction
from .pipeline import Pass, instruction_ids, rename_new_instructions


class DotRewrites(Pass):
    name = "dot-rewrites"

    def run(self, module: Module) -> bool:
        before, changed = instruction_ids(module), False
        for comp in module.computations:
            users = comp.users()
            for instr in list(comp.instructions):
                if instr.opcode == "dot":
                    changed |= _unbatch(instr)
                    changed |= _scale_after(comp, instr, users)
        rename_new_instructions(module, before)
        return changed


def _scalar_factor(x: Instruction):
    """(the other operand, the scalar) when ``x`` is ``y * broadcast(scalar)`` (either order)."""
    if x.opcode != "multiply":
        return None
    for k in (0, 1):
        b = x.operands[k]
        if b.opcode == "broadcast" and b.operands[0].shape.rank == 0:
            return x.operands[1 - k], b.operands[0]
    return None


def _scale_after(comp, dot: Instruction, users) -> bool:
    for k in (0, 1):
        operand = dot.operands[k]
        found = _scalar_factor(operand)
        if found is None or users[operand] != [dot] or operand.shape.element_type != dot.shape.element_type:
            continue
        other, scalar = found
        # The dot now reads the unscaled operand; its readers read the scaled result.
        readers = users[dot]
        dot.operands = [other if j == k else o for j, o in enumerate(dot.operands)]
        factor = Instruction("broadcast", dot.shape, [scalar], {"dimensions": ()}, unique_name("broadcast"),
                             operand.location)
        scaled = Instruction("multiply", dot.shape, [dot, factor], {}, unique_name("multiply"), dot.location)
        for r in readers:
            r.operands = [scaled if o is dot else o for o in r.operands]
        if comp.root is dot:
            comp.root = scaled
        position = comp.instructions.index(dot) + 1
        for new in (factor, scaled):
            new.parent = comp
        comp.instructions[position:position] = [factor, scaled]
        users[scaled], users[factor] = list(readers), [scaled]
        users[dot] = [scaled]
        return True
    return False


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
