"""Fusions holding a ``dot`` (HLO text from XLA or JAX): which ones stay one native kernel.

XLA's CPU backend fuses a dot with its elementwise epilogue (``kind=kOutput``: dot + bias +
activation), and JAX's exported HLO carries such fusions, as well as loop fusions holding small
batched dots.  nbxla computes a kept fusion in one kernel that accumulates a row of the dot in
registers and applies the epilogue to it (``codegen/dot_kernels.py``); that kernel beats a BLAS
call only while each matrix product is small, and it accepts one shape of fusion
(``dot_epilogue_refusal``).  The others are split (``imported_fusions.py``): the dot becomes a
library call (BLAS) and the rest is fused around it.

The threshold is on one matrix product of the batch (m * k * n multiply-adds): per product a
BLAS call costs about a microsecond of overhead, and the native kernel does about eight
multiply-adds a cycle against BLAS's several times more, so the two meet near 32**3.  Dots on
element types the BLAS path does not take (integers) stay native whatever their size.
"""

from __future__ import annotations

from ..hlo.ir import Computation, Instruction
from ..hlo.opcodes import ELEMENTWISE, FUSIBLE
from ..hlo.shapes import is_complex, SymDim

# Largest single matrix product (m * k * n multiply-adds, per batch element) a fused dot keeps
# native code for; larger ones are split into a BLAS call and an epilogue kernel.
SMALL_DOT_WORK = 32 ** 3
# Element types of dot results that a library call (runtime DotThunk / WidenedDotThunk) takes.
_BLAS_RESULT_TYPES = ("f16", "bf16", "f32", "f64", "c64", "c128")
# What may compute a dot's operands inside the kernel: the elemental emitter's index-following
# ops (no reductions: the operands are read once per multiply-add).
_OPERAND_OPS = (FUSIBLE - {"reduce"}) | {"parameter"}


def fused_dot(comp: Computation) -> Instruction | None:
    """The dot of a fused computation, or None when it has none."""
    return next((i for i in comp.instructions if i.opcode == "dot"), None)


def dot_epilogue_refusal(comp: Computation) -> str | None:
    """None when ``comp`` is a dot with an elementwise epilogue that the native dot kernel
    emits; otherwise why not.  The form: exactly one dot (complex: of operands of its type); its operands
    computed by elemental ops from the parameters; every value computed from the dot
    elementwise on the dot's dims (it reads the dot where it is itself evaluated); every
    output on the dot's dims."""
    dots = [i for i in comp.instructions if i.opcode == "dot"]
    if len(dots) != 1:
        return f"{len(dots)} dots in one fusion"
    dot = dots[0]
    t = dot.shape.element_type
    if t == "pred":
        return f"a {t} dot"
    if is_complex(t) and any(o.shape.element_type != t for o in dot.operands):
        # (the kernel converts operands between real types only)
        return f"a {t} dot of {' and '.join(o.shape.element_type for o in dot.operands)} operands"
    root = comp.root
    outputs = list(root.operands) if root.opcode == "tuple" else [root]
    if any(o.shape.is_tuple or o.shape.dims != dot.shape.dims for o in outputs):
        return "an output shaped unlike the dot"
    users = comp.users()
    after, stack = set(), [dot]
    while stack:
        for user in users[stack.pop()]:
            if id(user) in after or user is root and root.opcode == "tuple":
                continue
            if user.opcode not in ELEMENTWISE or user.shape.dims != dot.shape.dims:
                return f"the dot is read by {user.opcode} (%{user.name}), not elementwise"
            after.add(id(user))
            stack.append(user)
    for instr in comp.instructions:
        if id(instr) in after or instr is dot or instr.opcode == "tuple" and instr is root:
            continue
        if instr.opcode not in _OPERAND_OPS and instr.opcode not in ELEMENTWISE:
            return f"{instr.opcode} (%{instr.name}) beside the dot"
    return None


def dot_work(dot: Instruction) -> tuple[int, int]:
    """(batch, m * k * n): the batch count and the multiply-adds of one product."""
    a = dot.attrs
    lhs, rhs = (o.shape.dims for o in dot.operands)
    batch = _product(lhs[d] for d in a.get("lhs_batch_dims", ()))
    contracted = _product(lhs[d] for d in a.get("lhs_contracting_dims", ()))
    return batch, _product(dot.shape.dims) // max(batch, 1) * contracted


def dot_contraction(dot: Instruction) -> int | None:
    """Multiply-adds per element of ``dot``'s result, the contraction's length (None: it
    contracts an unknown size)."""
    dims = [dot.operands[0].shape.dims[d] for d in dot.attrs.get("lhs_contracting_dims", ())]
    return None if any(isinstance(d, SymDim) for d in dims) else _product(dims)


def keeps_native(comp: Computation) -> bool:
    """Is the fused computation ``comp`` (which holds a dot) best kept as one native kernel?
    Not where one product's size is unknown (``product_size_unknown``): see there."""
    dot = fused_dot(comp)
    if dot is None or dot_epilogue_refusal(comp) is not None:
        return False
    if dot.shape.element_type not in _BLAS_RESULT_TYPES:
        return True
    return not product_size_unknown(dot) and dot_work(dot)[1] <= SMALL_DOT_WORK


def product_size_unknown(dot: Instruction) -> bool:
    """Does one matrix product of ``dot`` have an unknown dimension (``f32[b,64] @ f32[64,32]``:
    m is the batch ``b``)?  Such a fused dot is split for every size -- a BLAS call and an
    epilogue kernel, as a static compile splits it from SMALL_DOT_WORK on -- because a program
    for unknown sizes decided at its probes' small sizes would run the native kernel at every
    size: at 4096 rows of 64 -> 32 it ran 0.80-0.87x the static compile's BLAS call (the native
    kernel wins by at most a BLAS call's overhead, about a microsecond, below the threshold).
    An unknown batch of small products (``dot_work``'s batch) keeps the native kernel."""
    a = dot.attrs
    lhs, rhs = (o.shape.dims for o in dot.operands)
    batch = set(a.get("lhs_batch_dims", ()))
    rhs_batch = set(a.get("rhs_batch_dims", ()))
    per_product = [d for k, d in enumerate(lhs) if k not in batch] + \
        [d for k, d in enumerate(rhs) if k not in rhs_batch and k not in a.get("rhs_contracting_dims", ())]
    return any(isinstance(d, SymDim) for d in per_product)


def _product(values) -> int:
    n = 1
    for v in values:
        n *= int(v)
    return n
