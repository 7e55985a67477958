"""Sorts and ``TopK`` on the CPU backend through NumPy's sorts (a library call of
``cpu_library.library_thunk``).

**sort.**  A comparator that orders by keys (recognized by ``hlo/sort_keys.py``, the analysis
the native loops' typed sorts share) is replaced by ``np.argsort(kind="stable")`` (``np.lexsort``
for several keys) plus ``np.take_along_axis`` for every operand; the key expressions are
evaluated on whole arrays.  A plain (non-total-order) float comparison is no strict weak order
when NaNs occur, so the evaluator's answer then depends on its algorithm: such a sort checks its
keys for NaN on each call and hands calls with NaNs to the evaluator's rule.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..hlo.evaluator import RULES, Interpreter
from ..hlo.evaluator_common import signed_of, unsigned_of
from ..hlo.evaluator_elementwise import total_order_key
from ..hlo.ir import Instruction, post_order
from ..hlo.sort_keys import KeyOrderNotRecognized, SCALAR_VIEWS, SortKey, comparator_keys, ordered_keys

__all__ = ["TopKOpThunk", "sort_has_library_call", "sort_may_defer", "sort_thunk", "top_k_thunk"]


def sort_has_library_call(instr: Instruction) -> bool:
    """Does NumPy's sort take this sort (its comparator a recognized order of keys)?  The
    others run in the native sort kernel (codegen/sort_kernel.py)."""
    return sort_thunk(instr, None)[0] is not None


def sort_may_defer(instr: Instruction) -> bool:
    """Does NumPy's sort of this sort hand calls with NaN keys to its fallback (a key of floats
    under a plain comparison, which is no strict weak order with NaNs)?"""
    try:
        keys = ordered_keys(instr.attrs["to_apply"].root)
    except KeyOrderNotRecognized:
        return False
    return any(k.nan_sensitive for k in keys)


def sort_thunk(instr: Instruction, fallback: Callable):
    keys, refusal = _recognized_keys(instr.attrs["to_apply"], "sort")
    return (None, refusal) if keys is None else (_SortThunk(instr, keys, fallback), None)


def _recognized_keys(comparator, what: str) -> tuple[list | None, str | None]:
    """(the comparator's keys, None), or (None, why it is no key order this module knows)."""
    try:
        keys = comparator_keys(comparator)
    except KeyOrderNotRecognized as e:
        return None, f"{what} comparator %{comparator.name} is not a recognized key order ({e}); " \
                     "it runs through the evaluator's merge sort"
    return keys, None


class _SortThunk:
    """A stable sort by recognized keys: one permutation, applied to every operand."""

    def __init__(self, instr: Instruction, keys: list[SortKey], fallback: Callable):
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


def _sortable_columns(keys: list[SortKey], operands, interpreter) -> list[np.ndarray] | None:
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

    def __init__(self, instr: Instruction, keys: list[SortKey], fallback: Callable):
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
        elif op in SCALAR_VIEWS:
            value = values[id(node.operands[0])]
            value = value.view(dtype) if value.dtype != dtype else value
        else:
            value = np.asarray(RULES[op](node, [values[id(o)] for o in node.operands], interp))
        values[id(node)] = value if value.dtype == dtype else value.astype(dtype)
    return values[id(expr)]


def _ascending_columns(values: np.ndarray, key: SortKey) -> list[np.ndarray] | None:
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
