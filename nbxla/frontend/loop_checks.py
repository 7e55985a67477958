"""Run-time checks (``TraceContext.add_check``) made inside a rolled loop's body.

A check's value is computed by the body, in the body's computation, so it cannot be an
output of the program as it is.  The loop carries it instead: one state slot per check,
starting at a value that passes (the identity of the check's fold) and folded with the
body's value in every iteration (``min`` of the least exponent, ``max`` of the highest
index, ...).  The fold fails whenever one iteration's value would have, so the program's
check after the loop raises NumPy's error exactly when some iteration would have raised it.
"""

from __future__ import annotations

import numpy as np

from .context import Check, TraceContext
from .tracer import Tracer


def carry(ctx: TraceContext, check: Check) -> Tracer:
    """The loop state slot of ``check``, before the loop: its fold's identity (in the outer
    computation: call it between traces of the body)."""
    shape = check.value.shape
    dtype = shape.dtype
    start = [_identity(f, dtype) for f in check.fold]
    literal = np.array(start if shape.dims else start[0], dtype=dtype).reshape(shape.dims)
    return Tracer(ctx, ctx.constant(literal))


def fold(ctx: TraceContext, slots: list[tuple[Tracer, Check]], made: list[Check]) -> None:
    """Inside the body: fold the checks it made (in the order it made them, the same in every
    trace) into their slots."""
    for (slot, check), new in zip(slots, made):
        value = Tracer(ctx, new.value)
        low, high = np.minimum(slot, value), np.maximum(slot, value)
        if set(check.fold) == {"min"}:
            slot.assign(low)
        elif set(check.fold) == {"max"}:
            slot.assign(high)
        else:
            is_min = np.array([f == "min" for f in check.fold])
            slot.assign(np.where(is_min, low, high))


def same(slots: list[tuple[Tracer, Check]], made: list[Check]) -> bool:
    """Do the checks a trace made start with checks of the slots' kinds (shape, dtype, fold)?
    A trace may make fewer (a slot it does not fold keeps its identity: it passes)."""
    return all(old.value.shape == new.value.shape and tuple(old.fold) == tuple(new.fold)
               for (_, old), new in zip(slots, made))


def _identity(fold: str, dtype: np.dtype):
    """The value that the fold ``fold`` ("min" or "max") never prefers: it passes any check."""
    if dtype.kind == "f":
        return np.inf if fold == "min" else -np.inf
    info = np.iinfo(dtype)
    return info.max if fold == "min" else info.min
