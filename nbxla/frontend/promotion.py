"""NumPy arrays made inside compiled code, and the one Tracer each becomes.

``np.zeros(n)`` inside a traced function is a NumPy array until a traced value is written into
it; then it becomes traced (create-then-fill).  NumPy semantics need that for *every* reference
to the array, not just the name written through: a helper's parameter and its caller's name,
a list item, a view.  ``promote_owned`` records the Tracer by the array's identity (in the
trace context), and converted code reads names through ``ld``, which hands out that Tracer --
or, for a view taken with ``x[slices]``/``reshape``/``transpose`` (``remember_view``), the same
view of it.  A branch or loop body that promotes an array from before it gives the promotion
back (``drop_promotions``); ``control``/``loops`` then promote it before the branch or loop.
"""

from __future__ import annotations

import numpy as np

from ..errors import NbxlaError
from .context import TraceContext
from .tracer import WRITE_INTO_NUMPY, WRITE_INTO_NUMPY_HINT, Tracer


class OneBranch:
    """The value of a name only one branch of a traced ``if`` bound: reading it is refused
    (``error``), since whether it exists depends on the data."""

    def __init__(self, error: NbxlaError):
        self.error = error

    def __repr__(self):
        return "<bound in one branch>"


def ld(value):
    """A name's value as converted code reads it: a NumPy array that became traced (through
    any reference to it) reads as its Tracer, and a view of one as the same view of it."""
    if type(value) is OneBranch:
        raise value.error
    if type(value) is np.ndarray:
        ctx = active_context()
        if ctx is not None and ctx.promoted:
            found = ctx.promoted.get(id(value))
            if found is not None:
                return found[1]
            if value.base is not None:
                return _view_of_promoted(ctx, value)
    return value


def _view_of_promoted(ctx, view: np.ndarray):
    """``view`` read after its base became traced: the Tracer view made the same way."""
    made = ctx.views.get(id(view))
    if made is not None:
        base = ld(made[1])
        if isinstance(base, Tracer):
            value = made[2](base)
            ctx.promoted[id(view)] = (view, value)
            return value
    owner = view.base
    if isinstance(owner, np.ndarray) and ctx.promoted.get(id(owner), (None,))[0] is owner:
        raise ctx.not_compilable(
            "reading a view of a NumPy array that became traced, made in a way nbxla does not "
            "follow (only x[slices] and x.reshape/transpose/swapaxes/squeeze are followed)",
            "take the view with basic indexing (x[1:-1, ::2]), or after the array's first write")
    return view


def remember_view(ctx, view, base, how) -> None:
    """``view`` is a NumPy view of ``base``: ``how(tracer of base)`` makes the same view of it,
    should ``base`` (or ``view``) become traced."""
    if type(view) is np.ndarray and view.base is not None and type(base) is np.ndarray:
        ctx.views[id(view)] = (view, base, how)


def resolved_state(values: tuple) -> tuple:
    """Values handed around as loop or branch state (not read: a one-branch name passes)."""
    return tuple(v if type(v) is OneBranch else ld(v) for v in values)


def active_context() -> TraceContext | None:
    return TraceContext.active.get()


def has_tracer(value) -> bool:
    if isinstance(value, Tracer):
        return True
    if isinstance(value, (list, tuple)):
        return any(has_tracer(v) for v in value)
    if isinstance(value, dict):
        return any(has_tracer(v) for v in value.values())
    return False


def promote(ctx, arr: np.ndarray) -> Tracer:
    """A traced array with ``arr``'s values (a broadcast constant when they are all equal)."""
    from .rules import full, asarray
    flat = arr.reshape(-1)
    if flat.size and (flat == flat[0]).all() and arr.dtype.kind != "c" or flat.size == 0:
        value = full(ctx, arr.shape, flat[0] if flat.size else 0, arr.dtype)
    else:
        value = asarray(ctx, arr)
    return Tracer(ctx, value.instr)


def promotable(x, *values) -> bool:
    return isinstance(x, np.ndarray) and active_context() is not None and has_tracer(values)


def _owned(x: np.ndarray):
    """A view of another NumPy array cannot become traced (its base would not see writes)."""
    if x.base is not None and not (isinstance(x.base, bytes)):
        ctx = active_context()
        raise ctx.not_compilable(WRITE_INTO_NUMPY, WRITE_INTO_NUMPY_HINT)


def promote_owned(x: np.ndarray) -> Tracer:
    """The Tracer that stands for ``x`` from now on, in every scope that holds ``x``."""
    ctx = active_context()
    found = ctx.promoted.get(id(x))
    if found is not None:
        return found[1]
    made = ctx.views.get(id(x))
    if made is not None:        # a view: its base becomes traced, and this is its view
        value = made[2](promote_owned(made[1]))
    else:
        _owned(x)
        value = promote(ctx, x)
    ctx.promoted[id(x)] = (x, value)
    return value


def basic_key(key) -> bool:
    parts = key if isinstance(key, tuple) else (key,)
    return all(k is None or k is Ellipsis or isinstance(k, (slice, int, np.integer)) for k in parts)


def drop_promotions(ctx, before: dict) -> list[np.ndarray]:
    """The arrays promoted since ``before`` (a copy of ``ctx.promoted``), forgotten again: a
    branch or loop body promotes in its own computation, whose values do not live outside."""
    made = [arr for key, (arr, _) in ctx.promoted.items() if key not in before]
    if made:
        ctx.promoted = dict(before)
    return made


def reaches(values, arr) -> bool:
    """Is ``arr`` one of ``values`` or inside one of their lists, tuples or dicts?"""
    for v in values:
        if v is arr or isinstance(v, (list, tuple)) and reaches(v, arr) \
                or isinstance(v, dict) and reaches(v.values(), arr):
            return True
    return False
