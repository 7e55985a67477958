"""True-length iteration for index-dependent slices that the frontend masked to full length.

Why: inside a loop, ``A[i, :j] @ A[j, :j]`` has a length that changes per iteration, and HLO
shapes are static, so the frontend reads the whole row and selects zeros outside ``[0, j)``:
``reduce(select(lo <= iota < hi, x, 0) * select(..., y, 0), 0, add)``.  A triangular loop
(Cholesky, LU, trmm, symm) then does about twice (three times, for a triple loop) the work it
needs.  Where the masked-out elements provably equal the reduction's identity, the kernel can
run over ``[lo, hi)`` only, computed at run time from the same scalars the mask compares with:
the result is the same up to the order of the additions (the in-range terms), and elements
outside never read (so no NaN from ``0 * inf`` either way, as the zeros were exact).

``masked_range(value, identity)`` answers, for a 1-D expression inside a fused computation,
the scalar instructions bounding the range outside which ``value`` is ``identity``.
"""

from __future__ import annotations

import math

from ..hlo.iota_masks import MaskedRange, iota_bounds
from ..hlo.ir import Instruction
from .elemental import const_i64
from .toolkit import reducer_opcode

_PASS_THROUGH = ("reshape", "bitcast", "copy", "broadcast", "convert")


def masked_range(value: Instruction, identity: float) -> MaskedRange | None:
    """The range of the 1-D ``value`` outside which every element equals ``identity`` exactly
    (a select on an iota mask whose other side is the identity, possibly through products of
    such selects), or None when no mask of the expression gives one."""
    if value.shape.is_tuple or value.shape.rank != 1:
        return None
    for predicate in _predicates(value):
        found = iota_bounds(predicate)
        if found is None:
            continue
        if _outside(value, id(predicate)) == identity:
            return found[1]
    return None


def _predicates(value: Instruction) -> list[Instruction]:
    """The predicates of the selects ``value`` is built from (through elementwise ops)."""
    found, stack, seen = [], [value], set()
    while stack:
        v = stack.pop()
        if id(v) in seen or v.shape.is_tuple or v.shape.rank != 1:
            continue
        seen.add(id(v))
        if v.opcode == "select" and id(v.operands[0]) not in {id(p) for p in found}:
            found.append(v.operands[0])
        if v.is_elementwise or v.opcode in ("reshape", "bitcast", "copy"):
            stack.extend(v.operands)
    return found


def _outside(v: Instruction, mask: int):
    """The constant ``v`` takes at every element where the mask (instruction id) is false, or
    None when it is not known to be one."""
    op = v.opcode
    if op == "select":
        pred, a, c = v.operands
        if id(pred) == mask or (pred.opcode == "and" and any(id(o) == mask for o in pred.operands)):
            return _outside(c, mask)
        x = _outside(a, mask)
        return x if x is not None and x == _outside(c, mask) else None
    if op == "constant":
        literal = v.literal
        if literal.size != 1 or literal.dtype.kind not in "biuf":
            return None
        return float(literal.reshape(-1)[0])
    if op in _PASS_THROUGH:
        return _outside(v.operands[0], mask)
    if op in ("multiply", "add", "subtract"):
        x, y = _outside(v.operands[0], mask), _outside(v.operands[1], mask)
        if x is None or y is None:
            return None     # (0 * unknown is not 0: the unknown may be inf or NaN)
        return x * y if op == "multiply" else x + y if op == "add" else x - y
    if op == "negate":
        x = _outside(v.operands[0], mask)
        return None if x is None else -x
    return None


def true_range(b, em, reduce, begin, end):
    """[begin, end) narrowed to the range outside which the reduced 1-D operand is the
    reducer's identity (a slice of index-dependent length, masked to full length: see
    ``masked_ranges``); the given range where there is none."""
    found = None
    init = reduce.operands[1]
    if reducer_opcode(reduce) == "add" and init.opcode == "constant" and init.literal.size == 1 \
            and init.literal.dtype.kind in "iuf":      # (real sums: not complex, bf16 or f8)
        zero = float(init.literal.reshape(-1)[0])
        if zero == 0 and math.copysign(1.0, zero) > 0:  # (+0 start: skipped +-0 terms change nothing)
            found = masked_range(reduce.operands[0], 0.0)
    if found is None:
        return begin, end
    return clamped_range(b, em, found, begin, end)


def clamped_range(b, em, found: MaskedRange, begin, end):
    """[begin, end) (i64 values) intersected with ``found``'s range, computed at run time from
    its bound instructions (emitted with ``em``); an empty intersection gives hi = lo."""
    def clamp(bounds, value, pick):
        for bound in bounds:
            v = em.value(bound.value, [])
            if v.type.width < 64:
                v = b.zext(v, value.type) if bound.value.shape.element_type[0] == "u" else b.sext(v, value.type)
            if bound.offset:
                v = b.add(v, const_i64(bound.offset))
            value = b.select(b.icmp_signed(pick, v, value), v, value)
        return value
    lo = clamp(found.lower, begin, ">")
    hi = clamp(found.upper, end, "<")
    return lo, b.select(b.icmp_signed("<", hi, lo), lo, hi)      # (empty: hi = lo)
