"""IR invariants checked between passes: a pass that breaks one is a bug, named in the error."""

from __future__ import annotations

from ..errors import HloShapeError, HloVerificationError
from ..hlo import Module
from ..hlo.ir import check_operand_count
from ..hlo.shape_inference import infer_shape


def verify_module(module: Module, after: str | None = None) -> None:
    where = f" after pass {after}" if after else ""
    names: set[str] = set()
    for comp in module.computations_post_order():
        members = {id(i) for i in comp.instructions}
        if comp.root is None or id(comp.root) not in members:
            raise HloVerificationError(f"%{comp.name}: root is not one of its instructions{where}")
        seen: set[int] = set()
        numbers = sorted(p.parameter_number for p in comp.parameters)
        if numbers != list(range(len(numbers))):
            raise HloVerificationError(f"%{comp.name}: parameter numbers {numbers} are not 0..n-1{where}")
        for instr in comp.instructions:
            if instr.name in names:
                raise HloVerificationError(f"name %{instr.name} is used twice{where}")
            names.add(instr.name)
            for op in instr.operands:
                if id(op) not in members:
                    raise HloVerificationError(f"%{instr.name} uses %{op.name}, which is not in "
                                               f"%{comp.name}{where}")
                if id(op) not in seen:
                    raise HloVerificationError(f"%{instr.name} uses %{op.name} before it is defined{where}")
            check_operand_count(instr)
            try:
                inferred = infer_shape(instr.opcode, [o.shape for o in instr.operands], instr.attrs,
                                       declared=instr.shape)
            except HloShapeError as e:
                raise HloVerificationError(f"%{instr.name}: {e}{where}") from None
            if not inferred.compatible(instr.shape):
                raise HloVerificationError(f"%{instr.name} has shape {instr.shape} but its operands "
                                           f"give {inferred}{where}")
            seen.add(id(instr))
