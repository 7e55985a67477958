"""Sorts and ``TopK`` on the CPU backend through NumPy's sorts (a library call of
``cpu_library.library_thunk``).

**sort.**  The evaluator runs a stable merge sort driven by the comparator computation.  A
comparator that orders by keys is recognized here and replaced by ``np.argsort(kind="stable")``
(``np.lexsort`` for several keys) plus ``np.take_along_axis`` for every operand.  A key is any
elementwise expression of the lhs parameters, compared (LT ascending, GT descending) with the
same expression of the rhs parameters: the plain parameter, JAX's NaN/zero canonicalization
(``select(x != x, nan, select(x == 0, 0, x))``), XLA's integer total-order key of the float
bits, ...  The expression is evaluated on whole arrays.  Recognized shapes of comparator:

* ``compare(K(lhs), K(rhs)), direction=LT|GT`` (any ``type``: TOTALORDER, SIGNED, UNSIGNED);
* nbxla's NaN-last form ``or(lt(l, r), and(isnan(r), not(isnan(l))))`` (and NaN-first);
* nbxla's pred form ``and(not(l), r)`` (false before true);
* JAX's lexicographic form ``or(lt(k0), and(eq(k0), <the same for k1, ...>))``.

A plain (non-total-order) float comparison is no strict weak order when NaNs occur, so the
evaluator's answer then depends on its algorithm: such a sort checks its keys for NaN on
each call and hands calls with NaNs to the evaluator's rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..hlo.evaluator import RULES, Interpreter
from ..hlo.evaluator_common import signed_of, unsigned_of
from ..hlo.evaluator_elementwise import total_order_key
from ..hlo.ir import Instruction, post_order
from ..hlo.low_precision import involves_low_precision

__all__ = ["TopKOpThunk", "sort_has_library_call", "sort_may_defer", "sort_thunk", "top_k_thunk"]


class _NotRecognized(Exception):
    """The comparator is not a key order this module knows (the message says why)."""


@dataclass(frozen=True)
class _Key:
    """One sort key: ``expr`` over the comparator's lhs parameters, compared with ``kind``."""
    expr: Instruction
    descending: bool
    kind: str               # the compare's type attribute ("" for the default)
    nans: str = ""          # "last" / "first" for the NaN-clause form, else ""


# Ops a key expression may use: evaluated on whole arrays, they act elementwise.
_SCALAR_VIEWS = {"bitcast", "bitcast-convert", "copy", "reshape", "broadcast"}


def sort_has_library_call(instr: Instruction) -> bool:
    """Does NumPy's sort take this sort (its comparator a recognized order of keys)?  The
    others run in the native sort kernel (codegen/sort_kernel.py)."""
    return sort_thunk(instr, None)[0] is not None


def sort_may_defer(instr: Instruction) -> bool:
    """Does NumPy's sort of this sort hand calls with NaN keys to its fallback (a key of floats
    under a plain comparison, which is no strict weak order with NaNs)?"""
    try:
        keys = _ordered_keys(instr.attrs["to_apply"].root)
    except _NotRecognized:
        return False
    return any(k.expr.shape.element_type in ("f16", "f32", "f64") and k.kind != "TOTALORDER" and not k.nans
               for k in keys)


def sort_thunk(instr: Instruction, fallback: Callable):
    keys, refusal = _recognized_keys(instr.attrs["to_apply"], "sort")
    return (None, refusal) if keys is None else (_SortThunk(instr, keys, fallback), None)


def _recognized_keys(comparator, what: str) -> tuple[list | None, str | None]:
    """(the comparator's keys, None), or (None, why it is no key order this module knows)."""
    try:
        keys = _ordered_keys(comparator.root)
        for key in keys:
            _check_key_expression(key.expr)
    except _NotRecognized as e:
        return None, f"{what} comparator %{comparator.name} is not a recognized key order ({e}); " \
                     "it runs through the evaluator's merge sort"
    return keys, None


def _ordered_keys(node: Instruction) -> list[_Key]:
    """The keys, most significant first, of a comparator returning ``node``."""
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
                    return [key] + _ordered_keys(tail)
    raise _NotRecognized(f"%{node.name} ({node.opcode}) is neither a comparison of mirrored keys "
                         "nor a lexicographic or(less, and(equal, ...))")


def _pairs(operands):
    """Both orders of a commutative op's two operands."""
    a, b = operands
    return ((a, b), (b, a))


def _strict_order(node: Instruction) -> _Key | None:
    """The key of a comparator that orders by one key, or None."""
    if node.opcode == "compare" and node.attrs["direction"] in ("LT", "GT"):
        oriented = _oriented(*node.operands)
        if oriented is not None:
            expr, swapped = oriented
            return _Key(expr, (node.attrs["direction"] == "GT") != swapped, node.attrs.get("type", ""))
    if node.opcode == "and" and all(o.shape.element_type == "pred" for o in node.operands):
        for negated, plain in _pairs(node.operands):     # and(not(l), r): false before true
            if negated.opcode == "not":
                oriented = _oriented(negated.operands[0], plain)
                if oriented is not None:
                    return _Key(oriented[0], oriented[1], "")
    if node.opcode == "or":
        for less, nan_clause in _pairs(node.operands):
            key = _strict_order(less)
            if key is not None and key.kind in ("", "FLOAT") and less.opcode == "compare":
                placement = _nan_placement(nan_clause, key.expr)
                if placement:
                    return _Key(key.expr, key.descending, key.kind, placement)
    return None


def _oriented(a: Instruction, b: Instruction):
    """(lhs-side expression, whether a is the rhs side) when a and b are one key expression
    on mirrored parameters, else None."""
    if _mirrored(a, b):
        return a, False
    if _mirrored(b, a):
        return b, True
    return None


def _is_equality(node: Instruction, key: _Key) -> bool:
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
            raise _NotRecognized(f"key operation %{node.name} is not on scalars")
        if op in ("parameter", "constant") or op in _SCALAR_VIEWS or node.is_elementwise:
            if op in ("bitcast", "bitcast-convert") and \
                    node.shape.dtype.itemsize != node.operands[0].shape.dtype.itemsize:
                raise _NotRecognized(f"%{node.name} changes the element width")
            continue
        raise _NotRecognized(f"key operation %{node.name} ({op}) is not elementwise")
    if expr.shape.element_type in ("c64", "c128") or involves_low_precision(expr.shape):
        raise _NotRecognized(f"keys of type {expr.shape.element_type} are not ordered here")


class _SortThunk:
    """A stable sort by recognized keys: one permutation, applied to every operand."""

    def __init__(self, instr: Instruction, keys: list[_Key], fallback: Callable):
        self.keys, self.fallback = keys, fallback
        self.axis = instr.attrs["dimensions"][0]
        self.tuple_result = instr.shape.is_tuple
        self.interpreter = Interpreter()

    def __call__(self, operands: list[np.ndarray]):
        if operands[0].ndim == 0:
            result = [o.copy() for o in operands]
        else:
            with np.errstate(all="ignore"):
                columns = _sortable_columns(self.keys, operands, self.interpreter)
            if columns is None:             # NaNs under a plain float comparison
                return self.fallback(operands)
            if len(columns) > 1:
                perm = np.lexsort(columns[::-1], axis=self.axis)   # lexsort: last key first
            else:
                (column,) = columns
                # NumPy's default sort (vectorized quicksort) is ~10x faster than its stable
                # one; it gives the same result where no two elements tie on the key but
                # differ otherwise.
                kind = "stable" if self._tie_order_matters(operands, column) else "quicksort"
                if len(operands) == 1 and _same_array(column, operands[0]):
                    result = [np.sort(operands[0], axis=self.axis, kind=kind)]
                    return tuple(result) if self.tuple_result else result[0]
                perm = np.argsort(column, axis=self.axis, kind=kind)
            result = [np.take_along_axis(o, perm, self.axis) for o in operands]
        return tuple(result) if self.tuple_result else result[0]

    @staticmethod
    def _tie_order_matters(operands, column: np.ndarray) -> bool:
        """Could a stable sort differ from an unstable one here?  Not when the one operand is
        sorted by a key that equal values share: integer keys (a bijection of the value),
        float keys without zeros (-0 == +0) or NaNs (all tie).  (Sorts that need not be
        stable are sorted stably all the same: the results then match the evaluator's.)"""
        if len(operands) > 1:
            return True
        return column.dtype.kind == "f" and column.size > 0 and not np.min(np.abs(column)) > 0  # NaN: not > 0


def _sortable_columns(keys: list[_Key], operands, interpreter) -> list[np.ndarray] | None:
    """Arrays whose stable ascending lexicographic order is the comparator's order (None: NaN
    keys under a plain float comparison, which only the evaluator's merge sort orders)."""
    columns = []
    for key in keys:
        values = np.broadcast_to(_evaluate_key(key.expr, operands, interpreter), operands[0].shape)
        ascending = _ascending_columns(values, key)
        if ascending is None:
            return None
        columns += ascending
    return columns


def top_k_thunk(instr: Instruction, fallback: Callable):
    keys, refusal = _recognized_keys(instr.attrs["called_computations"][0], "TopK")
    return (None, refusal) if keys is None else (_TopKThunk(instr, keys, fallback), None)


class _TopKThunk:
    """XLA:CPU's ``TopK`` custom call: the rows stably sorted by the comparator's recognized
    keys (as ``_SortThunk``), the first k kept with their positions.  NaN keys under a plain
    float comparison go to the evaluator's rule, as a sort's do."""
    how = "NumPy's stable argsort by the TopK comparator's keys, first k kept"

    def __init__(self, instr: Instruction, keys: list[_Key], fallback: Callable):
        self.keys, self.fallback = keys, fallback
        self.k = instr.shape.elements[0].dims[-1]
        self.interpreter = Interpreter()

    def __call__(self, operands: list[np.ndarray]):
        (x,) = operands
        with np.errstate(all="ignore"):
            columns = _sortable_columns(self.keys, [x], self.interpreter)
        if columns is None:
            return self.fallback(operands)
        perm = np.lexsort(columns[::-1], axis=-1) if len(columns) > 1 else \
            np.argsort(columns[0], axis=-1, kind="stable")
        perm = np.ascontiguousarray(perm[..., :self.k])
        return np.take_along_axis(x, perm, -1), perm.astype(np.int32)


class TopKOpThunk:
    """The ``topk`` op: its reference rule, which is already whole-array NumPy (total-order
    keys, one stable argsort per call): nothing to gain from a second copy."""
    how = "NumPy's stable argsort on total-order keys, first k kept"

    def __init__(self, instr: Instruction):
        self.instr, self.interpreter = instr, Interpreter()

    def __call__(self, operands):
        values, positions = RULES["topk"](self.instr, operands, self.interpreter)
        return np.ascontiguousarray(values), np.ascontiguousarray(positions)


def _same_array(a: np.ndarray, b: np.ndarray) -> bool:
    """Are ``a`` and ``b`` the same elements of the same memory (the key is the operand)?"""
    return a.dtype == b.dtype and a.shape == b.shape and a.strides == b.strides and \
        a.__array_interface__["data"][0] == b.__array_interface__["data"][0]


def _evaluate_key(expr: Instruction, operands, interp) -> np.ndarray:
    """The key expression on whole arrays (parameter 2k is operand k)."""
    values: dict[int, np.ndarray] = {}
    for node in post_order(expr):
        op, dtype = node.opcode, node.shape.dtype
        if op == "parameter":
            value = operands[node.parameter_number // 2]
        elif op == "constant":
            value = np.asarray(node.literal, dtype).reshape(())
        elif op in _SCALAR_VIEWS:
            value = values[id(node.operands[0])]
            value = value.view(dtype) if value.dtype != dtype else value
        else:
            value = np.asarray(RULES[op](node, [values[id(o)] for o in node.operands], interp))
        values[id(node)] = value if value.dtype == dtype else value.astype(dtype)
    return values[id(expr)]


def _ascending_columns(values: np.ndarray, key: _Key) -> list[np.ndarray] | None:
    """Columns sorting ascending (stable, lexicographic) like the key's comparison."""
    if values.dtype.kind == "f":
        if key.kind == "TOTALORDER":
            column = total_order_key(values)     # -NaN < -inf < ... < -0 < +0 < ... < +NaN
            return [~column if key.descending else column]
        if key.nans == "last" and not key.descending:
            return [values]                      # NumPy's own float order: NaNs last
        nan = np.isnan(values)
        if key.nans:
            # NaNs all equal, placed apart; the rest compare as floats (-0 == +0).
            rest = np.where(nan, 0, values)
            flag = nan if key.nans == "last" else ~nan
            return [flag, -rest if key.descending else rest]
        if nan.any():
            return None
        return [-values if key.descending else values]
    if key.kind == "UNSIGNED" and values.dtype.kind == "i":
        values = values.view(unsigned_of(values.dtype))
    elif key.kind == "SIGNED" and values.dtype.kind == "u":
        values = values.view(signed_of(values.dtype))
    return [~values if key.descending else values]     # ~ reverses ints and bools exactly
