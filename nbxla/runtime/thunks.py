"""Thunks every executable shares: the instructions that only rearrange existing values."""

from __future__ import annotations

from typing import Callable

from ..hlo.aliasing import is_byte_view
from ..hlo.ir import Instruction


def structural_thunk(instr: Instruction) -> Callable | None:
    """A thunk for tuple, get-tuple-element, opt-barrier, a row-major reshape/bitcast (a view of the
    same bytes) and a slice (a copy of a view: fusion leaves only small ones standalone), or
    None for any other instruction."""
    op = instr.opcode
    if op == "tuple":
        return lambda ops: tuple(ops)
    if op == "opt-barrier":
        # (it only keeps XLA's optimizer from moving work across it: the value passes through,
        # as the evaluator's rule passes it)
        return lambda ops: ops[0]
    if op == "get-tuple-element":
        index = instr.attrs["index"]
        return lambda ops: ops[0][index]
    if is_byte_view(instr):
        dims = instr.shape.dims
        return lambda ops: ops[0].reshape(dims)
    if op == "slice" and not instr.shape.is_tuple:
        index = tuple(slice(s.start, s.limit, s.stride) for s in instr.attrs["slice"])
        return lambda ops: ops[0][index].copy()
    return None
