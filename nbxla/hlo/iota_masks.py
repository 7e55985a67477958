"""Masks that are boxes of indices: predicates built from ``iota OP scalar`` compares.

The frontend writes a slice whose length depends on a loop index (``A[i + 1:, i + 1:] -= ...``,
``x[:j]``) as a select over the whole axis: ``select(lo <= iota < hi, new, old)``.  Such a mask
is true exactly on a box ``[lo_d, hi_d)`` per dimension, with the bounds scalars of the
computation; the backends use that to run over the box only (``codegen/masked_ranges``,
``codegen/updates``), and ``aliasing.updated_parameter`` to let a box update write into its
operand's buffer.  Here: the recognition, shared by both.
"""

from __future__ import annotations

from dataclasses import dataclass

from .ir import Instruction

# compare directions of ``iota OP bound``: which end of the range the bound gives, and the
# offset that turns it into a half-open [lo, hi) (``iota > b`` is ``iota >= b + 1``).
_LOWER = {"GE": 0, "GT": 1}
_UPPER = {"LT": 0, "LE": 1}
_FLIPPED = {"GE": "LE", "GT": "LT", "LE": "GE", "LT": "GT"}


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


def iota_bounds(predicate: Instruction) -> tuple[int, MaskedRange] | None:
    """``predicate`` as lo <= iota < hi along one dimension (returned with the range): a
    compare of an iota with a broadcast scalar, or an ``and`` of such compares along the same
    dimension; None otherwise, or when nothing bounds it."""
    box = box_bounds(predicate)
    if box is None or len(box) != 1:
        return None
    ((dim, found),) = box.items()
    return dim, found


def box_bounds(predicate: Instruction) -> dict[int, MaskedRange] | None:
    """``predicate`` as a box: per dimension of its shape that it bounds, the range where it is
    true (it is true exactly where every dimension's index lies in its range).  It must be a
    compare of an iota with a broadcast scalar, or (nested) ``and``s of such compares; None
    otherwise."""
    terms, stack = [], [predicate]
    while stack:
        term = stack.pop()
        if term.opcode == "and" and term.shape.dims == predicate.shape.dims:
            stack.extend(term.operands)
        else:
            terms.append(term)
    lower: dict[int, list[Bound]] = {}
    upper: dict[int, list[Bound]] = {}
    for term in terms:
        found = _compare_bound(term)
        if found is None or term.shape.dims != predicate.shape.dims:
            return None
        dim, side, bound = found
        (lower if side == "lower" else upper).setdefault(dim, []).append(bound)
    dims = sorted(set(lower) | set(upper))
    if not dims:
        return None
    return {d: MaskedRange(tuple(lower.get(d, ())), tuple(upper.get(d, ()))) for d in dims}


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
