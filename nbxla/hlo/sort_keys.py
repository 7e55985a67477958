"""Which sort comparators order by keys: the pure analysis both sort paths share.

The evaluator runs a stable merge sort driven by the comparator computation.  A comparator that
orders by keys can be replaced by a stable sort on those keys: the CPU runtime sorts with NumPy
(``runtime/sort_library.py``), the native loops with typed C sorts (``codegen/aot_library.py``).
This module finds the keys.  A key is any elementwise expression of the lhs parameters, compared
(LT ascending, GT descending) with the same expression of the rhs parameters: the plain parameter,
JAX's NaN/zero canonicalization (``select(x != x, nan, select(x == 0, 0, x))``), XLA's integer
total-order key of the float bits, ...  Recognized shapes of comparator:

* ``compare(K(lhs), K(rhs)), direction=LT|GT`` (any ``type``: TOTALORDER, SIGNED, UNSIGNED);
* nbxla's NaN-last form ``or(lt(l, r), and(isnan(r), not(isnan(l))))`` (and NaN-first);
* nbxla's pred form ``and(not(l), r)`` (false before true);
* JAX's lexicographic form ``or(lt(k0), and(eq(k0), <the same for k1, ...>))``.

A plain (non-total-order) float comparison is no strict weak order when NaNs occur, so the
evaluator's answer then depends on its algorithm: the sorts on keys hand such calls to it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .ir import Computation, Instruction, post_order
from .low_precision import involves_low_precision

__all__ = ["KeyOrderNotRecognized", "SCALAR_VIEWS", "SortKey", "comparator_keys", "ordered_keys"]

_FLOATS = ("f16", "f32", "f64")


class KeyOrderNotRecognized(Exception):
    """The comparator is not a key order this module knows (the message says why)."""


@dataclass(frozen=True)
class SortKey:
    """One sort key: ``expr`` over the comparator's lhs parameters, compared with ``kind``."""
    expr: Instruction
    descending: bool
    kind: str               # the compare's type attribute ("" for the default)
    nans: str = ""          # "last" / "first" for the NaN-clause form, else ""

    @property
    def nan_sensitive(self) -> bool:
        """A float key under a plain comparison: no strict weak order once NaNs occur."""
        return self.expr.shape.element_type in _FLOATS and self.kind != "TOTALORDER" and not self.nans


# Ops a key expression may use: evaluated on whole arrays, they act elementwise.
SCALAR_VIEWS = {"bitcast", "bitcast-convert", "copy", "reshape", "broadcast"}


def comparator_keys(comparator: Computation) -> list[SortKey]:
    """The keys, most significant first, of a comparator whose order is a lexicographic order of
    elementwise keys (raises ``KeyOrderNotRecognized`` saying why it is not)."""
    keys = ordered_keys(comparator.root)
    for key in keys:
        _check_key_expression(key.expr)
    return keys


def ordered_keys(node: Instruction) -> list[SortKey]:
    """The keys, most significant first, of a comparator returning ``node`` (their expressions
    unchecked: ``comparator_keys`` checks them too)."""
    strict = _strict_order(node)
    if strict is not None:
        return [strict]
    if node.opcode == "or":
        for first, rest in _pairs(node.operands):
            key = _strict_order(first)
            if key is None or rest.opcode != "and" or key.nans:
                continue
            for equal, tail in _pairs(rest.operands):
                if _is_equality(equal, key):
                    return [key] + ordered_keys(tail)
    raise KeyOrderNotRecognized(f"%{node.name} ({node.opcode}) is neither a comparison of mirrored keys "
                                "nor a lexicographic or(less, and(equal, ...))")


def _pairs(operands):
    """Both orders of a commutative op's two operands."""
    a, b = operands
    return ((a, b), (b, a))


def _strict_order(node: Instruction) -> SortKey | None:
    """The key of a comparator that orders by one key, or None."""
    if node.opcode == "compare" and node.attrs["direction"] in ("LT", "GT"):
        oriented = _oriented(*node.operands)
        if oriented is not None:
            expr, swapped = oriented
            return SortKey(expr, (node.attrs["direction"] == "GT") != swapped, node.attrs.get("type", ""))
    if node.opcode == "and" and all(o.shape.element_type == "pred" for o in node.operands):
        for negated, plain in _pairs(node.operands):     # and(not(l), r): false before true
            if negated.opcode == "not":
                oriented = _oriented(negated.operands[0], plain)
                if oriented is not None:
                    return SortKey(oriented[0], oriented[1], "")
    if node.opcode == "or":
        for less, nan_clause in _pairs(node.operands):
            key = _strict_order(less)
            if key is not None and key.kind in ("", "FLOAT") and less.opcode == "compare":
                placement = _nan_placement(nan_clause, key.expr)
                if placement:
                    return SortKey(key.expr, key.descending, key.kind, placement)
    return None


def _oriented(a: Instruction, b: Instruction):
    """(lhs-side expression, whether a is the rhs side) when a and b are one key expression
    on mirrored parameters, else None."""
    if _mirrored(a, b):
        return a, False
    if _mirrored(b, a):
        return b, True
    return None


def _is_equality(node: Instruction, key: SortKey) -> bool:
    return (node.opcode == "compare" and node.attrs["direction"] == "EQ"
            and node.attrs.get("type", "") == key.kind
            and any(_same(a, key.expr) and _mirrored(a, b) for a, b in _pairs(node.operands)))


def _nan_placement(clause: Instruction, expr: Instruction) -> str:
    """"last" for and(isnan(K(rhs)), not(isnan(K(lhs)))), "first" for the mirror, else ""."""
    if clause.opcode != "and":
        return ""
    for nan, other in _pairs(clause.operands):
        if other.opcode != "not" or not _is_nan_test(nan) or not _is_nan_test(other.operands[0]):
            continue
        tested, not_tested = nan.operands[0], other.operands[0].operands[0]
        if _same(not_tested, expr) and _mirrored(not_tested, tested):
            return "last"
        if _same(tested, expr) and _mirrored(tested, not_tested):
            return "first"
    return ""


def _is_nan_test(node: Instruction) -> bool:
    return (node.opcode == "compare" and node.attrs["direction"] == "NE"
            and node.operands[0] is node.operands[1] and node.attrs.get("type", "") in ("", "FLOAT"))


def _mirrored(a: Instruction, b: Instruction) -> bool:
    """Is ``b`` the expression ``a`` with every lhs parameter 2k replaced by rhs parameter 2k+1?"""
    return _structurally_equal(a, b, lambda pa, pb: pa % 2 == 0 and pb == pa + 1, {})


def _same(a: Instruction, b: Instruction) -> bool:
    return _structurally_equal(a, b, lambda pa, pb: pa == pb, {})


def _structurally_equal(a, b, params_match, memo) -> bool:
    known = memo.get((id(a), id(b)))
    if known is not None:
        return known
    if a.opcode != b.opcode or a.shape != b.shape or len(a.operands) != len(b.operands):
        result = False
    elif a.opcode == "parameter":
        result = params_match(a.parameter_number, b.parameter_number)
    elif a.opcode == "constant":
        la, lb = np.asarray(a.literal), np.asarray(b.literal)
        result = la.dtype == lb.dtype and la.shape == lb.shape and la.tobytes() == lb.tobytes()
    else:
        result = _semantic_attrs(a) == _semantic_attrs(b) and all(_structurally_equal(x, y, params_match, memo)
                                            for x, y in zip(a.operands, b.operands))
    memo[(id(a), id(b))] = result
    return result


def _semantic_attrs(instr: Instruction) -> dict:
    return {k: v for k, v in instr.attrs.items() if k != "metadata"}      # as CSE compares


def _check_key_expression(expr: Instruction) -> None:
    """Keys are computed on whole arrays: only scalar elementwise ops can be."""
    for node in post_order(expr):
        op = node.opcode
        if node.shape.is_tuple or node.shape.rank != 0:
            raise KeyOrderNotRecognized(f"key operation %{node.name} is not on scalars")
        if op in ("parameter", "constant") or op in SCALAR_VIEWS or node.is_elementwise:
            if op in ("bitcast", "bitcast-convert") and \
                    node.shape.dtype.itemsize != node.operands[0].shape.dtype.itemsize:
                raise KeyOrderNotRecognized(f"%{node.name} changes the element width")
            continue
        raise KeyOrderNotRecognized(f"key operation %{node.name} ({op}) is not elementwise")
    if expr.shape.element_type in ("c64", "c128") or involves_low_precision(expr.shape):
        raise KeyOrderNotRecognized(f"keys of type {expr.shape.element_type} are not ordered here")
