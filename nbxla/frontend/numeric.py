"""Numeric helpers written in terms of traced ufuncs and reductions: round, isclose/allclose,
real/imag/angle, select, nan_to_num, average, nansum/nanmean/nanprod, count_nonzero, ptp,
and the shape queries np.shape/np.ndim/np.size.

Each follows NumPy's own implementation (same operations, same dtypes), so it inherits the
ufunc rules' NEP 50 promotion and NaN handling.
"""

from __future__ import annotations

import numpy as np

from .reductions import normalize_axes
from .registry import implements
from .rules import asarray, broadcast_to, convert, emit, find_context, isnan, reshape, select
from .tracer import Tracer

_NO_VALUE = np._NoValue


def _array(a) -> Tracer:
    return asarray(find_context([a]), a)


def _to_out(result, out):
    if out is None:
        return result
    out.assign(result)
    return out


# ---- shape queries: answered at trace time ----------------------------------------------------

@implements(np.shape)
def shape(a):
    return _array(a).shape


@implements(np.ndim)
def ndim(a):
    return _array(a).ndim


@implements(np.size)
def size(a, axis=None):
    x = _array(a)
    return x.size if axis is None else x.shape[normalize_axes(axis, x.ndim)[0]]


# ---- rounding --------------------------------------------------------------------------------

@implements(np.round, np.around, method="round")
def round_(a, decimals=0, out=None):
    x = _array(a)
    if x.dtype.kind == "c":
        raise x.ctx.not_compilable("np.round of complex arrays is not supported",
                                   "round x.real and x.imag separately")
    if x.dtype == np.bool_:          # NumPy: float16 for decimals=0, else a casting error
        if decimals != 0:
            raise TypeError("Cannot cast ufunc 'multiply' output from dtype('float64') to "
                            "dtype('bool') with casting rule 'same_kind'")
        return _to_out(convert(x, np.float16), out)
    if x.dtype.kind in "iu" and decimals >= 0:
        return _to_out(Tracer(x.ctx, x.instr), out)
    # NumPy: multiply by 10**decimals, rint, divide back (ints go through float64).
    y = convert(x, np.float64) if x.dtype.kind in "biu" else x
    if decimals == 0:
        r = np.rint(y)
    elif decimals > 0:
        scale = 10.0 ** decimals
        r = np.true_divide(np.rint(np.multiply(y, scale)), scale)
    else:
        scale = 10.0 ** -decimals
        r = np.multiply(np.rint(np.true_divide(y, scale)), scale)
    return _to_out(convert(r, x.dtype), out)


# ---- comparisons with tolerance --------------------------------------------------------------

@implements(np.isclose)
def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    ctx = find_context([a, b, rtol, atol])
    x = a if isinstance(a, (int, float, complex)) else asarray(ctx, a)
    y = b if isinstance(b, (int, float, complex)) else asarray(ctx, b)
    if isinstance(y, Tracer):
        y = convert(y, np.result_type(y.dtype, 1.0))
    elif isinstance(y, int):
        y = float(y)
    result = np.logical_or(
        np.logical_and(np.less_equal(np.abs(np.subtract(x, y)),
                                     np.add(atol, np.multiply(rtol, np.abs(y)))),
                       np.isfinite(y)),
        np.equal(x, y))
    if equal_nan:
        result = np.logical_or(result, np.logical_and(np.isnan(x), np.isnan(y)))
    return result


@implements(np.allclose)
def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """A traced 0-d bool (NumPy returns a Python bool, which would need the values)."""
    return np.all(isclose(a, b, rtol, atol, equal_nan))


@implements(np.array_equal)
def array_equal(a1, a2, equal_nan=False):
    ctx = find_context([a1, a2])
    x, y = asarray(ctx, a1), asarray(ctx, a2)
    if x.shape != y.shape:
        return asarray(ctx, np.False_)
    eq = np.equal(x, y)
    if equal_nan:
        eq = np.logical_or(eq, np.logical_and(np.isnan(x), np.isnan(y)))
    return np.all(eq)


# ---- complex parts ---------------------------------------------------------------------------

@implements(np.real)
def real(val):
    return _array(val).real


@implements(np.imag)
def imag(val):
    return _array(val).imag


@implements(np.angle)
def angle(z, deg=False):
    x = _array(z)
    if x.dtype.kind == "c":
        r = np.arctan2(x.imag, x.real)
    else:
        r = np.arctan2(np.zeros_like(x, dtype=np.result_type(x.dtype, 1.0)), x)
    return np.multiply(r, 180 / np.pi) if deg else r


@implements(np.iscomplexobj)
def iscomplexobj(x):
    return _array(x).dtype.kind == "c"


@implements(np.isrealobj)
def isrealobj(x):
    return _array(x).dtype.kind != "c"


# ---- selection -------------------------------------------------------------------------------

@implements(np.select)
def select_(condlist, choicelist, default=0):
    ctx = find_context(list(condlist) + list(choicelist) + [default])
    if len(condlist) != len(choicelist):
        raise ValueError("list of cases must be same length as list of conditions")
    if not condlist:
        raise ValueError("select with an empty condition list is not possible")
    choices = [asarray(ctx, c) if isinstance(c, Tracer) else c for c in choicelist] + [default]
    dtype = np.result_type(*(c.dtype if isinstance(c, Tracer) else c for c in choices))
    conds = [asarray(ctx, c) for c in condlist]
    for c in conds:
        if c.dtype != np.bool_:
            raise TypeError("invalid entry in condlist: should be boolean ndarray")
    values = [asarray(ctx, c, dtype) if not isinstance(c, Tracer) else convert(c, dtype) for c in choices]
    shape = np.broadcast_shapes(*(v.shape for v in values), *(c.shape for c in conds))
    result = broadcast_to(values[-1], shape)
    for c, v in reversed(list(zip(conds, values[:-1]))):      # the first true condition wins
        result = select(broadcast_to(c, shape), broadcast_to(v, shape), result)
    return result


@implements(np.nan_to_num)
def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    t = _array(x)
    if t.dtype.kind not in "fc":
        return Tracer(t.ctx, t.instr)
    if t.dtype.kind == "c":
        parts = [nan_to_num(p, copy, nan, posinf, neginf) for p in (t.real, t.imag)]
        return emit(t.ctx, "complex", *parts)
    info = np.finfo(t.dtype)
    big = info.max if posinf is None else posinf
    small = info.min if neginf is None else neginf
    r = np.where(isnan(t), np.asarray(nan, t.dtype), t)
    r = np.where(np.logical_and(np.isinf(t), t > 0), np.asarray(big, t.dtype), r)
    return np.where(np.logical_and(np.isinf(t), t < 0), np.asarray(small, t.dtype), r)


# ---- statistics ------------------------------------------------------------------------------

@implements(np.count_nonzero)
def count_nonzero(a, axis=None, *, keepdims=False):
    x = _array(a)
    nz = x if x.dtype == np.bool_ else np.not_equal(x, 0)
    return np.sum(nz, axis=axis, dtype=np.intp, keepdims=keepdims)


@implements(np.ptp)
def ptp(a, axis=None, out=None, keepdims=False):
    x = _array(a)
    return _to_out(np.subtract(np.max(x, axis=axis, keepdims=keepdims),
                               np.min(x, axis=axis, keepdims=keepdims)), out)


def _nan_replaced(x: Tracer, value) -> Tracer:
    if x.dtype.kind not in "fc":
        return x
    return select(isnan(x), broadcast_to(asarray(x.ctx, np.asarray(value, x.dtype)), x.shape), x)


@implements(np.nansum)
def nansum(a, axis=None, dtype=None, out=None, keepdims=False, initial=_NO_VALUE, where=True):
    x = _array(a)
    return np.sum(_nan_replaced(x, 0), axis=axis, dtype=dtype, out=out, keepdims=keepdims,
                  initial=initial, where=where)


@implements(np.nanprod)
def nanprod(a, axis=None, dtype=None, out=None, keepdims=False, initial=_NO_VALUE, where=True):
    x = _array(a)
    return np.prod(_nan_replaced(x, 1), axis=axis, dtype=dtype, out=out, keepdims=keepdims,
                   initial=initial, where=where)


@implements(np.nanmean)
def nanmean(a, axis=None, dtype=None, out=None, keepdims=False, *, where=True):
    x = _array(a)
    if where is not True:
        raise x.ctx.not_compilable("np.nanmean(where=...) is not supported")
    if x.dtype.kind not in "fc":
        return np.mean(x, axis=axis, dtype=dtype, out=out, keepdims=keepdims)
    count = np.sum(np.logical_not(isnan(x)), axis=axis, dtype=np.intp, keepdims=keepdims)
    total = np.sum(_nan_replaced(x, 0), axis=axis, dtype=dtype, keepdims=keepdims)
    # NumPy divides in place into the sum's dtype (all-NaN slices give NaN).
    return _to_out(convert(np.true_divide(total, count), total.dtype), out)


@implements(np.average)
def average(a, axis=None, weights=None, returned=False, *, keepdims=False):
    ctx = find_context([a, weights])
    x = asarray(ctx, a)
    if weights is None:
        avg = np.mean(x, axis=axis, keepdims=keepdims)
        if not returned:
            return avg
        count = x.size / max(avg.size, 1)
        return avg, broadcast_to(asarray(ctx, np.asarray(count, avg.dtype)), avg.shape)
    w = asarray(ctx, weights)
    if x.dtype.kind in "biu":
        result_dtype = np.result_type(x.dtype, w.dtype, "f8")
    else:
        result_dtype = np.result_type(x.dtype, w.dtype)
    if x.shape != w.shape:
        if axis is None:
            raise TypeError("Axis must be specified when shapes of a and weights differ.")
        axes = normalize_axes(axis if isinstance(axis, tuple) else (axis,), x.ndim)
        if w.shape != tuple(x.shape[ax] for ax in axes):
            raise ValueError("Shape of weights must be consistent with shape of a along "
                             "specified axis.")
        # weights along ``axes``: move them into place for broadcasting
        order = sorted(range(len(axes)), key=lambda i: axes[i])
        w = np.transpose(w, order) if w.ndim > 1 else w
        shape = [x.shape[d] if d in axes else 1 for d in range(x.ndim)]
        w = reshape(w, shape)
    # NumPy raises ZeroDivisionError when the weights sum to 0; traced weights give inf/nan.
    scl = np.sum(w, axis=axis, dtype=result_dtype, keepdims=keepdims)
    avg = np.true_divide(np.sum(np.multiply(x, w, dtype=result_dtype), axis=axis,
                                keepdims=keepdims), scl)
    if returned:
        if scl.shape != avg.shape:
            scl = broadcast_to(scl, avg.shape)
        return avg, scl
    return avg

