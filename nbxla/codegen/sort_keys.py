"""The keys of a native typed sort (``nbxla_sort_keys`` in ``aot_runtime.c``) for a ``sort``
whose comparator orders by keys (``hlo/sort_keys.py``, the analysis NumPy's sorts in the jit
runtime share).

Why: a native loop's sort called its comparator kernel through a pointer for every comparison
(a 500-element argsort took ~45 us, NumPy's 8); a typed sort maps each key to an unsigned
integer of its order and radix-sorts the positions (500 f64: ~7 us).  The typed sort takes
keys that are one operand's values (the comparator compares the parameters themselves, as
nbxla's own ``np.sort`` / ``np.argsort`` comparators and JAX's lexicographic ones on plain
operands do) of f32, f64 or integer (pred) type; other keys (computed expressions, f16) keep
the comparator's merge sort.
"""

from __future__ import annotations

from ..hlo.ir import Computation, Instruction
from ..hlo.sort_keys import KeyOrderNotRecognized, SortKey, comparator_keys

__all__ = ["leading_elements_read", "sort_may_meet_nans", "typed_sort_keys"]

# The type codes of ``enum { NBXLA_KEY_F32, ... }`` and the flags of ``aot_runtime.c``.
_TYPE_CODES = {"f32": 0, "f64": 1, "s8": 2, "s16": 3, "s32": 4, "s64": 5,
               "u8": 6, "u16": 7, "u32": 8, "u64": 9, "pred": 6}
_SIGNED_OF = {"u8": "s8", "u16": "s16", "u32": "s32", "u64": "s64"}
_UNSIGNED_OF = {s: u for u, s in _SIGNED_OF.items()}
DESCENDING, NANS_LAST, NANS_FIRST, TOTAL_ORDER = 1, 2, 4, 8


def typed_sort_keys(comparator: Computation) -> list[tuple[int, int, int]] | None:
    """(operand, type code, flags) of each key, most significant first, or None where the typed
    sort cannot follow the comparator."""
    try:
        keys = comparator_keys(comparator)
    except KeyOrderNotRecognized:
        return None
    typed = [_typed_key(key) for key in keys]
    return None if any(t is None for t in typed) else typed


def sort_may_meet_nans(comparator: Computation) -> bool:
    """Does the typed sort of this comparator hand calls with NaN keys back (a float key under
    a plain comparison), so that the comparator's merge sort must be there too?"""
    return any(key.nan_sensitive for key in comparator_keys(comparator))


def _typed_key(key: SortKey) -> tuple[int, int, int] | None:
    expr = key.expr
    if expr.opcode != "parameter" or expr.parameter_number % 2:
        return None                     # (a computed key: the comparator's merge sort)
    t = expr.shape.element_type
    if t not in _TYPE_CODES:
        return None
    flags = DESCENDING if key.descending else 0
    if t in ("f32", "f64"):
        if key.kind not in ("", "FLOAT", "TOTALORDER"):
            return None
        flags |= TOTAL_ORDER if key.kind == "TOTALORDER" else 0
        flags |= {"last": NANS_LAST, "first": NANS_FIRST, "": 0}[key.nans]
    elif key.kind == "UNSIGNED":
        t = _UNSIGNED_OF.get(t, t)
    elif key.kind == "SIGNED":
        t = _SIGNED_OF.get(t, t)
    elif key.kind not in ("",):
        return None
    return expr.parameter_number // 2, _TYPE_CODES[t], flags


def leading_elements_read(comp: Computation, sort: Instruction) -> int:
    """How many leading elements of each row (along the sorted axis) the users of ``sort`` in
    ``comp`` read: the bound of slices from 0 (``np.argsort(d)[:k]``), directly or as the only use
    of a fusion's parameter; the row's length where anything else reads it (a partial sort
    then only needs the first ones in order)."""
    axis = sort.attrs["dimensions"][0]
    n = sort.operands[0].shape.dims[axis]
    users = comp.users()
    values = [u for u in users[sort] if u.opcode == "get-tuple-element"] if sort.shape.is_tuple else [sort]
    if sort.shape.is_tuple and len(values) != len(users[sort]):
        return n
    read = 0
    for value in values:
        for user in users[value]:
            if user.opcode == "fusion":
                fused = user.attrs["calls"]
                inner_users = fused.users()
                params = [p for p in fused.parameters
                          if user.operands[p.parameter_number] is value]
                reads = [_slice_bound(u, axis, n) for p in params for u in inner_users[p]]
            else:
                reads = [_slice_bound(user, axis, n)]
            read = max([read] + reads)
    return read


def _slice_bound(user: Instruction, axis: int, n: int) -> int:
    """The end of a slice from 0 along ``axis`` (step 1), else ``n`` (the whole row read)."""
    if user.opcode != "slice":
        return n
    along = user.attrs["slice"][axis]
    return along.limit if along.start == 0 and along.stride == 1 else n
