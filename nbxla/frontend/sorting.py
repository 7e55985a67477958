"""sort and argsort: one HLO ``sort`` with a comparator that orders like NumPy (NaNs last).

The sort is always stable, so ``argsort`` gives NumPy's ``kind='stable'`` answer whatever
``kind`` asks for (NumPy's default quicksort may order equal elements differently).
"""

from __future__ import annotations

import numpy as np

from ..hlo import Builder, Shape, from_numpy_dtype
from ..hlo.builder import unique_name
from .reductions import normalize_axes
from .registry import implements
from .rules import asarray, emit, find_context, reshape
from .tracer import Tracer


def _less_than(dtype, n_operands: int):
    """Comparator on (lhs0, rhs0, lhs1, rhs1, ...): lhs0 before rhs0, NaNs after everything."""
    et = from_numpy_dtype(dtype)
    b = Builder(unique_name(f"less_{et}"))
    lhs = b.parameter(Shape(et), "lhs")
    rhs = b.parameter(Shape(et), "rhs")
    for k in range(1, n_operands):
        b.parameter(Shape("s64"), f"lhs_index{k}")
        b.parameter(Shape("s64"), f"rhs_index{k}")
    if dtype == np.bool_:
        less = b.op("and", b.op("not", lhs), rhs)
    else:
        less = b.compare(lhs, rhs, "LT")
    if dtype.kind == "f":
        lhs_nan, rhs_nan = b.compare(lhs, lhs, "NE"), b.compare(rhs, rhs, "NE")
        less = b.op("or", less, b.op("and", rhs_nan, b.op("not", lhs_nan)))
    return b.build(less)


def _prepare(a, axis, what):
    x = asarray(find_context([a]), a)
    if x.dtype.kind == "c":
        raise x.ctx.not_compilable(f"np.{what} of complex arrays is not supported")
    if axis is None:
        x, axis = reshape(x, (x.size,)), 0
    else:
        axis = normalize_axes(axis, x.ndim)[0]
    return x, axis


def _check_kind(x, kind, order):
    if order is not None:
        raise x.ctx.not_compilable("sort(order=...) of structured arrays is not supported")
    if kind not in (None, "quicksort", "mergesort", "heapsort", "stable"):
        raise ValueError(f"sort kind must be one of 'quick', 'heap', or 'stable' (got {kind!r})")


@implements(np.sort)
def sort(a, axis=-1, kind=None, order=None, *, stable=None):
    x, axis = _prepare(a, axis, "sort")
    _check_kind(x, kind, order)
    result = emit(x.ctx, "sort", x, dimensions=(axis,), is_stable=True,
                  to_apply=_less_than(x.dtype, 1))
    return result if result is not a else Tracer(x.ctx, result.instr)


@implements(np.argsort, method="argsort")
def argsort(a, axis=-1, kind=None, order=None, *, stable=None):
    if isinstance(a, Tracer) and a.ndim == 0 and axis is not None:
        a = a.reshape(1)             # NumPy: a 0-d array argsorts as one element ([0])
    x, axis = _prepare(a, axis, "argsort")
    _check_kind(x, kind, order)
    index = emit(x.ctx, "iota", shape=Shape("s64", x.shape), iota_dimension=axis)
    pair = emit(x.ctx, "sort", x, index, dimensions=(axis,), is_stable=True,
                to_apply=_less_than(x.dtype, 2))
    return emit(x.ctx, "get-tuple-element", pair, index=1)
