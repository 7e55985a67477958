"""How a rows kernel (``loops.emit_loop_kernel``: a loop over rows, the last dimension inside)
reads its operands along a row, which decides which of its loops LLVM should vectorize.

A row whose every operand is read contiguously along it (or not at all: a value that is the
same for the whole row) vectorizes within the row: plain vector loads and stores.  Left to
itself, LLVM fully unrolls a short row loop first and then vectorizes the loop over rows,
whose elements are a row apart (gathers, shuffles); ``toolkit.counted_loop``'s
``vectorize_first`` stops that.  Very short rows are the exception (``_long_enough``): there a
vector of one row is mostly empty lanes, and vectorizing across rows wins.
"""

from __future__ import annotations

from ..hlo.ir import Computation, Instruction
from ..hlo.shapes import bit_width
from .run_sizes import RunSize

# Rows shorter than this many bytes, or than ROW_MIN_ELEMENTS elements, are vectorized across
# rows.  Measured side by side in one process (``relu(y + b)`` over 4096 rows, minima of 15
# rounds, us across rows / within a row): f32 with 2 columns 3.0 / 5.1, 3 columns 3.7 / 4.1,
# 4 columns 4.4 / 3.7, 5 columns 5.5 / 4.7, 8 columns 10.6 / 6.1, 16 columns 57 / 9.3; f64
# with 2 columns 3.9 / 5.2, 3 columns 4.8 / 4.5, 4 columns 7.8 / 6.3.  Within a row, a row
# narrower than a 16-byte vector costs a vector per row all the same; across rows, the cost
# per row grows with its bytes, except pairs, which one unpack separates.
ROW_MIN_BYTES = 16
ROW_MIN_ELEMENTS = 3

# Ops whose element at an index is their operands' elements at the same index.
_SAME_INDEX = ("copy",)


def vectorize_within_rows(comp: Computation, outputs: list[Instruction], row_length) -> bool:
    """Should the row loop of ``comp``'s rows kernel (rows of ``row_length`` elements, an int)
    be vectorized before anything unrolls it?  Yes when every value the outputs read along a
    row is read contiguously or is constant along the row, and rows are not too short."""
    if not _long_enough(outputs, row_length):
        return False
    along: dict[int, bool] = {}          # id -> read along the row (True) / constant on it (False)
    pending = [(out, True) for out in outputs]
    while pending:
        instr, varies = pending.pop()
        if along.get(id(instr)) is True or (id(instr) in along and not varies):
            continue
        along[id(instr)] = varies
        if not varies:                   # (the same value for the whole row: read any way)
            pending.extend((o, False) for o in instr.operands)
            continue
        reads = _operand_reads(instr)
        if reads is None:
            return False
        pending.extend(zip(instr.operands, reads))
    return True


def _long_enough(outputs: list[Instruction], row_length) -> bool:
    # (a row whose length is read when the kernel runs, a ``RunSize``, is never unrolled whole
    # before the vectorizer: LLVM's own choice, and no comparison of a run-time size here)
    if not isinstance(row_length, int) or isinstance(row_length, RunSize) or row_length < ROW_MIN_ELEMENTS:
        return False
    narrowest = min(bit_width(o.shape.element_type) for o in outputs)
    return row_length * narrowest >= 8 * ROW_MIN_BYTES


def _operand_reads(instr: Instruction) -> list[bool] | None:
    """For an ``instr`` read along its last dimension (stride 1): whether each operand is read
    along its own last dimension (True) or at one place for the whole row (False); None where
    the reads are strided, reversed or scattered (a transpose moving the last dimension, a
    strided slice, a reshape, a concatenation...)."""
    op, rank = instr.opcode, instr.shape.rank if not instr.shape.is_tuple else -1
    if op in ("parameter", "constant", "iota"):
        return []
    if rank < 1:
        return None
    if instr.is_elementwise or op in _SAME_INDEX:
        return [True] * len(instr.operands)
    if op == "broadcast":
        x = instr.operands[0]
        dims = list(instr.attrs["dimensions"])
        if rank - 1 not in dims or x.shape.dims[dims.index(rank - 1)] == 1:
            return [False]
        return [True] if dims.index(rank - 1) == x.shape.rank - 1 else None
    if op == "transpose":
        return [True] if instr.attrs["dimensions"][-1] == rank - 1 else None
    if op == "slice":
        return [True] if instr.attrs["slice"][-1].stride == 1 else None
    return None
