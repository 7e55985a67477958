"""Divisions by a constant, run as multiplications by its reciprocal where that is close.

XLA's algebraic simplifier rewrites ``A / Const`` to ``A * (1 / Const)`` for floats.  nbxla's
simplifier only makes bit-identical rewrites (a power of two: ``passes.simplify``), so the
other constants are handled where the code is made: the elemental emitter multiplies
(``codegen.elemental``), and fusion and the cost estimates count such a division as the
multiplication it becomes (``is_expensive``).  Why it matters: a vector division takes 8-16
times a multiplication's issue slots, and stencils that divide by a grid constant
(``(p_e + p_w) / den``) ran at the divider's rate, 0.8 ns per f64 element.
"""

from __future__ import annotations

import numpy as np

from .ir import Instruction
from .opcodes import EXPENSIVE


def constant_reciprocal(divide: Instruction) -> tuple[float, float] | None:
    """``(c, 1 / c)`` when ``divide`` (f64) divides by a constant ``c`` (a scalar, or a broadcast of
    one) whose reciprocal is a normal number, else None.  Then ``x * (1 / c)`` is within about
    an ulp of ``x / c`` for every finite ``x`` whose quotient is a normal number, and equal for
    infinities, NaNs and signed zeros (a ``c`` of zero, an infinity, a NaN or one too large for
    ``1 / c`` to be normal is left dividing).  f32 keeps dividing: an ulp of f32 is a relative
    1.2e-7, which a float32 mean or variance by its count notices (``x.var(axis=0)`` is held to
    NumPy's accuracy), and a vector f32 division costs half of an f64 one per element."""
    if divide.opcode != "divide" or divide.shape.is_tuple or divide.shape.element_type != "f64":
        return None
    c = divide.operands[1]
    while c.opcode == "broadcast" and c.operands[0].shape.rank == 0:
        c = c.operands[0]
    if c.opcode != "constant" or c.literal.size != 1:
        return None
    dtype = np.dtype(divide.shape.dtype)
    with np.errstate(all="ignore"):
        inverse = dtype.type(1) / c.literal.reshape(-1)[0].astype(dtype)
    if not np.isfinite(inverse) or abs(inverse) < np.finfo(dtype).tiny:
        return None
    return float(c.literal.reshape(-1)[0]), float(inverse)


def is_expensive(instr: Instruction) -> bool:
    """``instr.opcode in EXPENSIVE``, except a division that runs as a multiplication."""
    return instr.opcode in EXPENSIVE and constant_reciprocal(instr) is None
