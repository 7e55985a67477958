"""What a loop step did to its state's values, read by ``loops._Loop`` when it decides how each
name is carried: a value's stored type, whether a value is a Python number, whether a name is
rebound to the same static value or a redefined helper, and the seeds a step run in Python
gives the rolled loop (``step_seeds``)."""

from __future__ import annotations

import types

import numpy as np

from .control import UNDEFINED
from .tracer import Tracer


def stored_type(t: Tracer) -> tuple:
    """(shape, dtype) of a value the body gave, read without re-deriving a view: outside the
    body's trace that would build the view's slice in the outer computation from the body's
    values (a view bound in the body, its base written after)."""
    return t.stored_instr.shape.dims, t.stored_instr.shape.dtype


def is_number(v) -> bool:
    return isinstance(v, (int, float, complex)) and not isinstance(v, bool)


def redefined_function(old, new) -> bool:
    """``def``/``lambda`` run again by the loop body: a new function object of the same code."""
    return isinstance(old, types.FunctionType) and isinstance(new, types.FunctionType) \
        and old.__code__ is new.__code__


def same_static(old, new) -> bool:
    if type(old) is not type(new):
        return False
    try:
        return bool(old == new) if not isinstance(old, np.ndarray) else np.array_equal(old, new)
    except Exception:
        return False


def step_seeds(before: tuple, after: tuple) -> list[tuple]:
    """(slot, value before, shape, dtype, weak, a Python number) of each name a loop step changed from a
    Python number, or first bound, to a traced value, or to another number of its type: the
    types the loop's first trace would find and ask for (``_Loop._trace``'s requests), known
    from the step run in Python, so that the body is not traced once more only to learn them.
    (Names that held traced values are left to the trace: it checks how they were written.)"""
    seeds = []
    for k, (old, new) in enumerate(zip(before, after)):
        if not (is_number(old) or old is UNDEFINED and isinstance(new, Tracer)):
            continue
        if isinstance(new, Tracer):
            seeds.append((k, old, *stored_type(new), bool(getattr(new, "weak", False)), False))
        elif is_number(new) and type(new) is type(old) and new != old:
            seeds.append((k, old, (), np.asarray(new).dtype, True, True))     # (weak, a number)
    return seeds
