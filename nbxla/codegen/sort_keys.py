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

from ..hlo.ir import Computation
from ..hlo.sort_keys import KeyOrderNotRecognized, SortKey, comparator_keys

__all__ = ["sort_may_meet_nans", "typed_sort_keys"]

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
