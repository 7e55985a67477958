"""NumPy's array creators (``np.zeros``, ``np.ones``, ``np.empty``, ``np.full``) as pending
values of auto-clustering.

``np.zeros(shape)`` takes no array, so NumPy never hands it to us: it makes a plain NumPy
array, and a pending value written into it (``out[:, :, 1:-1] = x``) must be computed first
(a graph break), after which the work on ``out`` runs as plain NumPy, unseen.  Calls made in
rewritten code (``rewrite.callee``) to these creators, for arrays of at least the session's
``min_work`` elements, give a stand-in instead (``Session.created``) that enters the pending
graph as a constant broadcast to the shape where it is first used: writes into it and the
math after stay in the cluster (and the allocation fuses away), and one made before a graph
break but first used after it is no output of the cluster before the break.  The
``*_like`` creators of stand-ins (``np.zeros_like(x)``, which NumPy does hand to us) are made
the same way.  ``np.empty``'s values are unspecified; zeros are as good as any.
"""

from __future__ import annotations

import operator

import numpy as np

from ..frontend.context import TraceContext
from ..frontend.rules import full
from ..hlo import from_numpy_dtype


# Created arrays down to this fraction of the session's ``min_work`` are stand-ins too: one
# below ``min_work`` enters a graph only if its first use has a pending operand (a pending
# value written into it: pyhpc TKE's ``tke_surf_corr = np.zeros(shape[:2])`` then
# ``tke_surf_corr[2:-2, 2:-2] = where(...)``, which as a NumPy array was a graph break and
# a flush of everything alive); otherwise it is made at that first use, as NumPy's.
SMALL_CREATED = 32


def filled(shape: tuple, value: np.generic):
    """An array of ``shape`` filled with ``value`` (of its dtype): a Tracer while an
    operation is being recorded, else NumPy's array (the eager replay of a cluster)."""
    ctx = TraceContext.active.get()
    if ctx is None:
        return np.full(shape, value, value.dtype)
    return full(ctx, shape, value, value.dtype)


filled.__name__ = filled.__qualname__ = "full"
filled.__module__ = "numpy"          # (reports name the operation np.full)


def _shape_dtype(shape, dtype, order, like):
    if like is not None or order != "C":
        return None
    try:
        shape = (operator.index(shape),) if not isinstance(shape, (tuple, list)) else \
            tuple(operator.index(s) for s in shape)
    except TypeError:
        return None
    if any(s < 0 for s in shape):
        return None                   # (NumPy's own error)
    return shape, dtype


def _zeros_args(shape, dtype=float, order="C", *, like=None):
    return _shape_dtype(shape, float if dtype is None else dtype, order, like), None


def _full_args(shape, fill_value, dtype=None, order="C", *, like=None):
    return _shape_dtype(shape, dtype, order, like), fill_value


_FILL = {"zeros": 0, "empty": 0, "ones": 1, "zeros_like": 0, "empty_like": 0, "ones_like": 1}


def _like_args(a, dtype=None, order="K", subok=True, shape=None, *, device=None):
    return a, dtype, order, shape, device, None


def _full_like_args(a, fill_value, dtype=None, order="K", subok=True, shape=None, *,
                    device=None):
    return a, dtype, order, shape, device, fill_value


LIKE = {np.zeros_like: "zeros_like", np.ones_like: "ones_like", np.empty_like: "empty_like",
        np.full_like: "full_like"}


def create_like(session, fn, args: tuple, kwargs: dict):
    """``np.zeros_like(a)``... of a C-ordered stand-in or NumPy array as a created array of
    ``session`` (see ``create``), or None where NumPy's own rule runs."""
    name = LIKE[fn]
    try:
        a, dtype, order, shape, device, fill = \
            (_full_like_args if name == "full_like" else _like_args)(*args, **kwargs)
    except TypeError:
        return None
    value = a.state.value if getattr(type(a), "nbxla_stand_in", False) else \
        a if type(a) is np.ndarray else False
    if value is False or device is not None or order not in ("K", "A", "C") or \
            (value is not None and not value.flags.c_contiguous):
        return None
    if shape is None:
        shape = a.shape
    return create(session, "full" if name == "full_like" else name[:-5],
                  (shape,) + ((fill,) if name == "full_like" else ()),
                  {"dtype": a.dtype if dtype is None else dtype})


def create(session, name: str, args: tuple, kwargs: dict):
    """``np.<name>(*args, **kwargs)`` as a pending stand-in of ``session``, or None where it
    runs as NumPy's (small, not C order, a dtype or fill value we do not model...)."""
    try:
        parsed, fill = (_full_args if name == "full" else _zeros_args)(*args, **kwargs)
    except TypeError:
        return None
    if parsed is None:
        return None
    shape, dtype = parsed
    size = 1
    for s in shape:
        size *= s
    if size < session.min_work // SMALL_CREATED:
        return None
    if name == "full":
        if not isinstance(fill, (bool, int, float, complex, np.bool_, np.number)):
            return None               # (an array, a stand-in, an object: NumPy's own)
        fill_value = fill
    else:
        fill_value = _FILL[name]
    try:
        value = np.full((), fill_value, dtype)[()]     # (NumPy's casting and its errors)
        from_numpy_dtype(value.dtype)
    except Exception:
        return None
    if not isinstance(value, np.generic):
        return None
    return session.created(shape, value)


def creator(numpy_fn, active):
    """``numpy_fn`` as called from rewritten code: pending where it can be (in the session
    ``active`` holds)."""
    name = numpy_fn.__name__

    def make(*args, **kwargs):
        session = active.get()
        if session is not None and not session.closed:
            made = create(session, name, args, kwargs)
            if made is not None:
                return made
        return numpy_fn(*args, **kwargs)
    make.__name__ = make.__qualname__ = name
    make.__wrapped__ = numpy_fn
    return make


CREATED = (np.zeros, np.ones, np.empty, np.full)
