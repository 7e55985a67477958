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

from dataclasses import dataclass

import math

from ..hlo.ir import Instruction
from .elemental import const_i64
from .toolkit import reducer_opcode

# compare directions of ``iota OP bound``: which end of the range the bound gives, and the
# offset that turns it into a half-open [lo, hi) (``iota > b`` is ``iota >= b + 1``).
_LOWER = {"GE": 0, "GT": 1}
_UPPER = {"LT": 0, "LE": 1}
_FLIPPED = {"GE": "LE", "GT": "LT", "LE": "GE", "LT": "GT"}
_PASS_THROUGH = ("reshape", "bitcast", "copy", "broadcast", "convert")


@dataclass(frozen=True)
class Bound:
    """``value + offset`` (``value``: a scalar integer instruction of the computation)."""
    value: Instruction
    offset: int


@dataclass(frozen=True)
class MaskedRange:
    """Elements outside ``[max(lower), min(upper))`` equal the identity; an empty list of
    lower (upper) bounds means 0 (the length)."""
    lower: tuple[Bound, ...]
    upper: tuple[Bound, ...]


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


def iota_bounds(predicate: Instruction) -> tuple[int, MaskedRange] | None:
    """``predicate`` as lo <= iota < hi along one dimension (returned with the range): a
    compare of an iota with a broadcast scalar, or an ``and`` of such compares along the same
    dimension; None otherwise, or when nothing bounds it."""
    terms = predicate.operands if predicate.opcode == "and" else (predicate,)
    lower, upper, dims = [], [], set()
    for term in terms:
        found = _compare_bound(term)
        if found is None:
            return None
        dim, side, bound = found
        dims.add(dim)
        (lower if side == "lower" else upper).append(bound)
    if len(dims) != 1 or not (lower or upper):
        return None
    return dims.pop(), MaskedRange(tuple(lower), tuple(upper))


def _compare_bound(term: Instruction):
    if term.opcode != "compare":
        return None
    direction = term.attrs.get("direction")
    a, b = term.operands
    if _is_iota(b):
        a, b, direction = b, a, _FLIPPED.get(direction)
    if not _is_iota(a) or direction is None or b.opcode != "broadcast" or b.operands[0].shape.rank != 0:
        return None
    scalar = b.operands[0]
    if scalar.shape.element_type[0] not in "su" or scalar.shape.element_type == "u64":
        return None     # (the bounds are clamped as signed 64-bit values)
    dim = a.attrs["iota_dimension"]
    if direction in _LOWER:
        return dim, "lower", Bound(scalar, _LOWER[direction])
    if direction in _UPPER:
        return dim, "upper", Bound(scalar, _UPPER[direction])
    return None


def _is_iota(v: Instruction) -> bool:
    return v.opcode == "iota" and v.shape.element_type[0] in "su"


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
