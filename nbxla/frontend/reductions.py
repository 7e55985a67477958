"""Reductions (sum, mean, var, max, argmax, any, ...) and cumulative ops with NumPy's dtypes.

Result dtypes are asked of NumPy itself on a one-element array of the input dtype, so every
platform rule (int32 sums to int64, float16 means accumulate in float32, ...) is NumPy's.
"""

from __future__ import annotations

import numpy as np

from ..hlo import Builder, Shape, from_numpy_dtype
from ..hlo.builder import unique_name
from ..hlo.attributes import Window, WindowDim
from ..hlo.shapes import LOW_PRECISION_DTYPES
from .context import TraceContext
from .registry import implements, ufunc_method
from .rules import (asarray, binop, broadcast_to, compare, convert, emit, find_context, full, isnan,
                    reducer, reshape, scalar, select)
from .tracer import Tracer

_NO_VALUE = np._NoValue

# ufunc -> (HLO reducer opcode for numbers, for bools, identity or None)
_REDUCERS = {
    np.add: ("add", "or", 0), np.multiply: ("multiply", "and", 1),
    np.maximum: ("maximum", "or", None), np.minimum: ("minimum", "and", None),
    np.fmax: ("maximum", "or", None), np.fmin: ("minimum", "and", None),
    np.logical_and: ("and", "and", True), np.logical_or: ("or", "or", False),
    np.logical_xor: ("xor", "xor", False), np.bitwise_and: ("and", "and", -1),
    np.bitwise_or: ("or", "or", 0), np.bitwise_xor: ("xor", "xor", 0),
}


def reduction_axes(axis, ndim) -> tuple[int, ...]:
    """``normalize_axes`` for ufunc reductions, which (in NumPy) also take axis 0 or -1 on a
    0-d array: nothing to reduce."""
    if ndim == 0 and axis is not None and all(int(a) in (0, -1) for a in
                                              (axis if isinstance(axis, tuple) else (axis,))):
        return ()
    return normalize_axes(axis, ndim)


def normalize_axes(axis, ndim) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    axes = axis if isinstance(axis, tuple) else (axis,)
    out = []
    for a in axes:
        a = int(a)
        if not -ndim <= a < ndim:
            raise np.exceptions.AxisError(a, ndim)
        out.append(a % ndim)
    if len(set(out)) != len(out):
        raise ValueError("duplicate value in 'axis'")
    return tuple(out)


def _reduced_shape(shape, axes, keepdims):
    return tuple((1 if i in axes else n) for i, n in enumerate(shape) if keepdims or i not in axes)


def _extreme(dtype, maximum: bool):
    if dtype.kind == "c":
        raise TraceContext.active.get().not_compilable(
            "max/min of complex arrays (NumPy orders them by real, then imaginary part) is not "
            "supported by nbxla", "compare x.real (and x.imag) explicitly")
    if dtype.kind == "f" or dtype in LOW_PRECISION_DTYPES:     # (ml_dtypes' kind is "V")
        return -np.inf if maximum else np.inf
    if dtype.kind == "b":
        return not maximum
    info = np.iinfo(dtype)
    return info.min if maximum else info.max


def reduce(x: Tracer, ufunc, axes, keepdims=False, dtype=None, initial=_NO_VALUE, where=True):
    """``ufunc.reduce`` over ``axes`` in NumPy's result dtype."""
    ctx = x.ctx
    if ufunc not in _REDUCERS:
        raise ctx.not_compilable(f"np.{ufunc.__name__}.reduce is not supported by nbxla")
    out_dtype = ufunc.reduce(np.zeros((1,), x.dtype), dtype=dtype).dtype
    number_op, bool_op, identity = _REDUCERS[ufunc]
    opcode = bool_op if out_dtype == np.bool_ else number_op
    if ufunc in (np.logical_and, np.logical_or, np.logical_xor) and x.dtype != np.bool_:
        x = compare(x, full(ctx, x.shape, 0, x.dtype), "NE")
    x = convert(x, out_dtype)
    count = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    if identity is None:
        if initial is _NO_VALUE and count == 0:
            raise ValueError(f"zero-size array to reduction operation {ufunc.__name__} which has no identity")
        identity = _extreme(out_dtype, ufunc in (np.maximum, np.fmax))
    if where is not True:
        mask = asarray(ctx, where, bool)
        x = select(broadcast_to(mask, x.shape), x, full(ctx, x.shape, identity, out_dtype))
    if ufunc in (np.fmax, np.fmin) and out_dtype.kind in "fc":
        # NaN-ignoring: replace NaNs by the identity; all-NaN slices give NaN as NumPy does.
        nan = isnan(x)
        x = select(nan, full(ctx, x.shape, identity, out_dtype), x)
        all_nan = reduce(nan, np.logical_and, axes, keepdims)
    # NumPy's float16 add and multiply loops accumulate in float32 and round once at the end
    # (a float16 running sum of 10 000 numbers would lose digits and overflow early).
    acc = np.dtype(np.float32) if out_dtype == np.float16 and opcode in ("add", "multiply") else out_dtype
    init = scalar(ctx, identity, acc)
    result = emit(ctx, "reduce", convert(x, acc), init, dimensions=tuple(sorted(axes)),
                  to_apply=reducer(opcode, acc))
    result = convert(result, out_dtype)
    if initial is not _NO_VALUE:
        result = binop(opcode, result, full(ctx, result.shape, initial, out_dtype))
    if keepdims:
        result = reshape(result, _reduced_shape(x.shape, axes, True))
    if ufunc in (np.fmax, np.fmin) and out_dtype.kind in "fc":
        result = select(all_nan, full(ctx, result.shape, np.nan, out_dtype), result)
    return result


@ufunc_method("reduce")
def ufunc_reduce(ctx, ufunc, x, axis=0, dtype=None, out=None, keepdims=False,
                 initial=_NO_VALUE, where=True):
    x = asarray(ctx, x)
    result = reduce(x, ufunc, reduction_axes(axis, x.ndim), keepdims, dtype, initial, where)
    return _to_out(result, out)


def _to_out(result, out):
    if out is None:
        return result
    target = out[0] if isinstance(out, tuple) else out
    target.assign(result)
    return target


def _method_reduce(ufunc):
    def rule(a, axis=None, dtype=None, out=None, keepdims=False, initial=_NO_VALUE, where=True):
        ctx = find_context([a])
        x = asarray(ctx, a)
        return _to_out(reduce(x, ufunc, reduction_axes(axis, x.ndim), keepdims, dtype, initial,
                              where), out)
    return rule


implements(np.sum, method="sum")(_method_reduce(np.add))
implements(np.prod, method="prod")(_method_reduce(np.multiply))
implements(np.max, np.amax, method="max")(_method_reduce(np.maximum))
implements(np.min, np.amin, method="min")(_method_reduce(np.minimum))
implements(np.nanmax)(_method_reduce(np.fmax))
implements(np.nanmin)(_method_reduce(np.fmin))


def _bool_reduce(ufunc):
    def rule(a, axis=None, out=None, keepdims=False, *, where=True):
        x = asarray(find_context([a]), a)
        return _to_out(reduce(x, ufunc, reduction_axes(axis, x.ndim), keepdims, None, where=where), out)
    return rule


implements(np.any, method="any")(_bool_reduce(np.logical_or))
implements(np.all, method="all")(_bool_reduce(np.logical_and))


@implements(np.mean, method="mean")
def mean(a, axis=None, dtype=None, out=None, keepdims=False, *, where=True):
    x = asarray(find_context([a]), a)
    if where is not True:
        raise x.ctx.not_compilable("np.mean(where=...) is not supported", "use np.sum(x*mask)/np.sum(mask)")
    axes = normalize_axes(axis, x.ndim)
    result_dtype = np.mean(np.zeros((1,), x.dtype), dtype=dtype).dtype
    # NumPy's _mean: ints and bools sum in float64, float16 in float32 (unless a dtype is asked).
    acc = np.dtype(dtype) if dtype is not None else np.dtype(np.float64) if x.dtype.kind in "iub" \
        else np.dtype(np.float32) if x.dtype == np.float16 else x.dtype
    total = reduce(convert(x, acc), np.add, axes, keepdims)
    count = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    return _to_out(convert(_divide_by_count(total, count), result_dtype), out)


def _divide_by_count(total: Tracer, count: int) -> Tracer:
    """``total / count`` as NumPy's true_divide by an integer count does it: float16 values
    are divided in a wider type and rounded (a count such as 70 000 has no float16 value)."""
    wide = np.dtype(np.float32) if total.dtype == np.float16 else total.dtype
    t = convert(total, wide)
    return convert(binop("divide", t, full(t.ctx, t.shape, count, wide)), total.dtype)


@implements(np.var, method="var")
def var(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=True, mean=_NO_VALUE,
        correction=_NO_VALUE):
    x = asarray(find_context([a]), a)
    if where is not True or mean is not _NO_VALUE:
        raise x.ctx.not_compilable("np.var(where=..., mean=...) is not supported")
    if correction is not _NO_VALUE:
        ddof = correction
    axes = normalize_axes(axis, x.ndim)
    result_dtype = np.var(np.zeros((2,), x.dtype), dtype=dtype).dtype
    # NumPy's _var computes in the input's dtype (float64 for ints and bools): for float16 the
    # mean, the squared deviations and their sum are each rounded to float16 (and overflow to
    # inf where the sum of squares passes 65504, as NumPy's does).
    acc = np.dtype(dtype) if dtype is not None else np.dtype(np.float64) if x.dtype.kind in "iub" \
        else x.dtype
    xa = convert(x, acc)
    count = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    m = _divide_by_count(reduce(xa, np.add, axes, keepdims=True), count)
    d = binop("subtract", xa, broadcast_to(m, xa.shape))
    if acc.kind == "c":
        sq = binop("add", *(binop("multiply", p, p) for p in (emit(x.ctx, "real", d), emit(x.ctx, "imag", d))))
    else:
        sq = binop("multiply", d, d)
    total = reduce(sq, np.add, axes, keepdims)
    result = _divide_by_count(total, max(count - ddof, 0))
    return _to_out(convert(result, result_dtype), out)


@implements(np.std, method="std")
def std(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=True, mean=_NO_VALUE,
        correction=_NO_VALUE):
    v = var(a, axis, dtype, None, ddof, keepdims, where=where, mean=mean, correction=correction)
    return _to_out(emit(v.ctx, "sqrt", v), out)


def _arg_reducer(dtype, maximum: bool):
    """(value, index) x (value, index) -> the winner; NaN wins, ties go to the lower index."""
    b = Builder(unique_name(f"arg{'max' if maximum else 'min'}_{from_numpy_dtype(dtype)}"))
    vs, is_ = Shape(from_numpy_dtype(dtype)), Shape("s64")
    av, ai, bv, bi = b.parameter(vs, "a"), b.parameter(is_, "ai"), b.parameter(vs, "b"), b.parameter(is_, "bi")
    better = b.compare(av, bv, "GT" if maximum else "LT")
    tie = b.compare(av, bv, "EQ")
    if dtype.kind == "f":
        a_nan, b_nan = b.compare(av, av, "NE"), b.compare(bv, bv, "NE")
        better = b.op("or", better, b.op("and", a_nan, b.op("not", b_nan)))
        tie = b.op("or", tie, b.op("and", a_nan, b_nan))
    pick_a = b.op("or", better, b.op("and", tie, b.compare(ai, bi, "LT")))
    return b.build(b.op("tuple", b.op("select", pick_a, av, bv), b.op("select", pick_a, ai, bi)))


def _argreduce(maximum: bool):
    def rule(a, axis=None, out=None, *, keepdims=False):
        x = asarray(find_context([a]), a)
        if x.dtype.kind == "c":
            raise x.ctx.not_compilable("argmax/argmin of complex arrays is not supported")
        if axis is None or x.ndim == 0 and reduction_axes(axis, 0) == ():   # (0-d: axis 0 or -1)
            x, axis_n = reshape(x, (x.size,)), 0
        else:
            axis_n = normalize_axes(axis, x.ndim)[0]
        if x.shape[axis_n] == 0:
            raise ValueError(f"attempt to get {'argmax' if maximum else 'argmin'} of an empty sequence")
        idx = emit(x.ctx, "iota", shape=Shape("s64", x.shape), iota_dimension=axis_n)
        init_v = scalar(x.ctx, _extreme(x.dtype, maximum), x.dtype)
        init_i = scalar(x.ctx, 0, np.int64)
        pair = emit(x.ctx, "reduce", x, idx, init_v, init_i, dimensions=(axis_n,),
                    to_apply=_arg_reducer(x.dtype, maximum))
        result = emit(x.ctx, "get-tuple-element", pair, index=1)
        if keepdims:
            shape = (1,) * len(np.shape(a)) if axis is None else _reduced_shape(x.shape, (axis_n,), True)
            result = reshape(result, shape)
        return _to_out(result, out)
    return rule


implements(np.argmax, method="argmax")(_argreduce(True))
implements(np.argmin, method="argmin")(_argreduce(False))


def cumulative(x: Tracer, ufunc, axis: int, dtype=None) -> Tracer:
    """Inclusive scan along ``axis`` as a reduce-window (the form JAX emits for cumsum)."""
    out_dtype = ufunc.accumulate(np.zeros((1,), x.dtype), dtype=dtype).dtype
    number_op, bool_op, identity = _REDUCERS[ufunc]
    opcode = bool_op if out_dtype == np.bool_ else number_op
    if identity is None:
        identity = _extreme(out_dtype, ufunc in (np.maximum, np.fmax))
    x = convert(x, out_dtype)
    n = x.shape[axis]
    window = Window(tuple(WindowDim(n, 1, n - 1, 0) if d == axis else WindowDim(1)
                          for d in range(x.ndim)))
    if n == 0:
        return x
    return emit(x.ctx, "reduce-window", x, scalar(x.ctx, identity, out_dtype), window=window,
                to_apply=reducer(opcode, out_dtype))


@ufunc_method("accumulate")
def ufunc_accumulate(ctx, ufunc, x, axis=0, dtype=None, out=None):
    x = asarray(ctx, x)
    if ufunc not in _REDUCERS:
        raise ctx.not_compilable(f"np.{ufunc.__name__}.accumulate is not supported by nbxla")
    return _to_out(cumulative(x, ufunc, normalize_axes(axis, x.ndim)[0], dtype), out)


def _cum(ufunc):
    def rule(a, axis=None, dtype=None, out=None):
        x = asarray(find_context([a]), a)
        if axis is None or x.ndim == 0 and reduction_axes(axis, 0) == ():   # (0-d: axis 0 or -1)
            x, axis = reshape(x, (x.size,)), 0
        return _to_out(cumulative(x, ufunc, normalize_axes(axis, x.ndim)[0], dtype), out)
    return rule


implements(np.cumsum, method="cumsum")(_cum(np.add))
implements(np.cumprod, method="cumprod")(_cum(np.multiply))


@implements(np.cov)
def cov(m, y=None, rowvar=True, bias=False, ddof=None, fweights=None, aweights=None, *,
        dtype=None):
    """NumPy's own steps: rows are variables (columns with ``rowvar=False``), ``y`` adds
    rows, the mean of each row is subtracted and ``X @ X.conj().T`` divided by N - ddof."""
    ctx = find_context([m, y])
    if fweights is not None or aweights is not None:
        raise ctx.not_compilable("np.cov with fweights/aweights is not supported",
                                 "weight the observations yourself, or compute it outside the compiled code")
    if ddof is not None and ddof != int(ddof):
        raise ValueError("ddof must be integer")
    x = asarray(ctx, m)
    if x.ndim > 2:
        raise ValueError("m has more than 2 dimensions")
    if dtype is None:
        dtype = np.result_type(x.dtype, np.float64) if y is None else \
            np.result_type(x.dtype, asarray(ctx, y).dtype, np.float64)
    rows = _cov_rows(x, not rowvar and x.ndim != 1, dtype)
    if rows.shape[0] == 0:
        return full(ctx, (0, 0), 0, np.float64)
    if y is not None:
        other = asarray(ctx, y)
        if other.ndim > 2:
            raise ValueError("y has more than 2 dimensions")
        other = _cov_rows(other, False, dtype)
        other = other.T if not rowvar and other.shape[0] != 1 else other
        if other.shape[1] != rows.shape[1]:
            raise ValueError("all the input array dimensions except for the concatenation axis "
                             f"must match exactly, but along dimension 1, the array at index 0 has "
                             f"size {rows.shape[1]} and the array at index 1 has size {other.shape[1]}")
        rows = np.concatenate((rows, other), axis=0)
    if ddof is None:
        ddof = 0 if bias else 1
    fact = rows.shape[1] - ddof
    if fact <= 0:
        import warnings
        warnings.warn("Degrees of freedom <= 0 for slice", RuntimeWarning, stacklevel=2)
        fact = 0.0
    centered = rows - np.mean(rows, axis=1)[:, None]
    c = centered @ np.conj(centered).T
    c = convert(c * np.true_divide(1, fact), c.dtype)          # NumPy: c *= 1 / fact, in place
    return np.squeeze(c)


def _cov_rows(x: Tracer, transpose: bool, dtype) -> Tracer:
    """``np.array(x, ndmin=2, dtype=dtype)``, transposed where NumPy does."""
    x = convert(x, dtype)
    x = reshape(x, (1,) * (2 - x.ndim) + x.shape)
    return x.T if transpose else x
