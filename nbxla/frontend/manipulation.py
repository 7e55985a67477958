"""Array manipulation: take, take_along_axis, pad, flip, roll, repeat, tile, split, meshgrid,
diff, atleast_Nd, column_stack/dstack, tril/triu, diag.

Everything here has static output shapes: shifts, repeats, pad widths and split points are
Python values known while tracing.  Index maps that do not depend on the data (``repeat``,
``pad`` in edge/reflect/wrap modes) are computed by NumPy itself at trace time and applied
with one ``gather``, so they agree with NumPy by construction.
"""

from __future__ import annotations

import numpy as np

from ..hlo import Shape
from ..hlo.attributes import PadDim
from .functions import concatenate, np_reshape, ravel, transpose_value
from .indexing import check_bounds, scatter_add_in_range, take_along
from .reductions import normalize_axes
from .registry import implements
from .rules import (asarray, broadcast_to, compare, convert, emit, find_context, make_view, reshape,
                    scalar, select)
from .tracer import Tracer


def _array(a) -> Tracer:
    return asarray(find_context([a]), a)


def _axis(axis, ndim) -> int:
    return normalize_axes(axis, ndim)[0]


def _slice_along(x: Tracer, axis: int, start: int, stop: int) -> Tracer:
    return x[(slice(None),) * axis + (slice(start, stop),)]


def _to_out(result, out):
    if out is None:
        return result
    out.assign(result)
    return out


# ---- take ------------------------------------------------------------------------------------

def _wrap_and_clamp(idx: Tracer, n: int, mode: str, axis: int = 0) -> Tracer:
    """Traced indices into an axis of size ``n``: NumPy's mode, or clamping where NumPy raises."""
    if idx.dtype.kind not in "iub":          # (np.take casts bool indices to 0/1, as here)
        raise IndexError("arrays used as indices must be of integer (or boolean) type")
    idx = convert(idx, np.int64)
    if mode == "wrap":
        return np.remainder(idx, n) if n else idx
    if mode == "raise":     # negative indices count from the end; out of range: IndexError
        check_bounds(idx, n, axis)
        idx = select(compare(idx, scalar_like(idx, 0), "LT"), idx + n, idx)
    return np.clip(idx, 0, max(n - 1, 0))


def scalar_like(x: Tracer, value) -> Tracer:
    return broadcast_to(scalar(x.ctx, value, x.dtype), x.shape)


def _constant_indices(idx, n: int, mode: str) -> np.ndarray:
    idx = np.asarray(idx)
    if idx.dtype.kind not in "iub":
        if idx.size == 0:
            idx = idx.astype(np.int64)
        else:
            raise IndexError("arrays used as indices must be of integer (or boolean) type")
    idx = idx.astype(np.int64)
    if mode == "wrap":
        return np.mod(idx, n) if n else idx
    if mode == "clip":
        return np.clip(idx, 0, max(n - 1, 0))
    if idx.size and (idx.min() < -n or idx.max() >= n):
        bad = idx[(idx < -n) | (idx >= n)].flat[0]
        raise IndexError(f"index {bad} is out of bounds for axis with size {n}")
    return np.where(idx < 0, idx + n, idx)


def take_indices(x: Tracer, indices, axis: int, mode: str = "raise") -> Tracer:
    """``np.take(x, indices, axis)`` for constant or traced indices."""
    n = x.shape[axis]
    if isinstance(indices, Tracer):
        idx = _wrap_and_clamp(indices, n, mode, axis)
    else:
        idx = asarray(x.ctx, _constant_indices(indices, n, mode))
    if n == 0 and idx.size:
        raise IndexError("cannot do a non-empty take from an empty axes.")
    return take_along(x, idx, axis)


@implements(np.take, method="take")
def take(a, indices, axis=None, out=None, mode="raise"):
    x = asarray(find_context([a, indices]), a)
    if mode not in ("raise", "wrap", "clip"):
        raise ValueError(f"clipmode must be one of 'clip', 'raise', or 'wrap' (got {mode!r})")
    if axis is None or x.ndim == 0 and axis in (0, -1):     # (NumPy takes 0-d as 1-d)
        x, axis = reshape(x, (x.size,)), 0
    return _to_out(take_indices(x, indices, _axis(axis, x.ndim), mode), out)


@implements(np.take_along_axis)
def take_along_axis(arr, indices, axis=-1):
    ctx = find_context([arr, indices])
    x, idx = asarray(ctx, arr), asarray(ctx, indices)
    if axis is None:
        if idx.ndim != 1:
            raise ValueError("when axis=None, `indices` must have a single dimension.")
        x, axis = reshape(x, (x.size,)), 0
    axis = _axis(axis, x.ndim)
    if idx.ndim != x.ndim:
        raise ValueError("`indices` and `arr` must have the same number of dimensions")
    if idx.dtype.kind not in "iu":
        raise IndexError("`indices` must be an integer array")
    other = tuple(1 if d == axis else n for d, n in enumerate(x.shape))
    shape = list(np.broadcast_shapes(other, tuple(1 if d == axis else n for d, n in enumerate(idx.shape))))
    shape[axis] = idx.shape[axis]
    shape = tuple(shape)
    idx = broadcast_to(_wrap_and_clamp(idx, x.shape[axis], "raise", axis), shape)
    # One index vector per output element: its own position on every axis but ``axis``.
    columns = []
    for d in range(x.ndim):
        if d == axis:
            col = idx
        elif x.shape[d] == 1:
            col = broadcast_to(scalar(ctx, 0, np.int64), shape)
        else:
            col = emit(ctx, "iota", shape=Shape("s64", shape), iota_dimension=d)
        columns.append(reshape(col, shape + (1,)))
    vectors = columns[0] if len(columns) == 1 else emit(ctx, "concatenate", *columns,
                                                        dimensions=(len(shape),))
    return emit(ctx, "gather", x, vectors, offset_dims=(), collapsed_slice_dims=tuple(range(x.ndim)),
                start_index_map=tuple(range(x.ndim)), index_vector_dim=len(shape),
                slice_sizes=(1,) * x.ndim)


# ---- flip, roll ------------------------------------------------------------------------------

def _reverse(x: Tracer, axes) -> Tracer:
    return emit(x.ctx, "reverse", x, dimensions=tuple(axes)) if axes else x


@implements(np.flip)
def flip(m, axis=None):
    """A view, as in NumPy: writes through it reach ``m``."""
    x = _array(m)
    axes = tuple(sorted(normalize_axes(axis, x.ndim)))
    strides = tuple(-s if d in axes else s for d, s in enumerate(x.strides))
    return make_view(x, lambda base: _reverse(base, axes), lambda base, v: _reverse(v, axes), strides)


@implements(np.fliplr)
def fliplr(m):
    x = _array(m)
    if x.ndim < 2:
        raise ValueError("Input must be >= 2-d.")
    return flip(x, 1)


@implements(np.flipud)
def flipud(m):
    x = _array(m)
    if x.ndim < 1:
        raise ValueError("Input must be >= 1-d.")
    return flip(x, 0)


@implements(np.roll)
def roll(a, shift, axis=None):
    x = _array(a)
    if isinstance(shift, Tracer):
        raise x.ctx.not_compilable("np.roll with a traced shift is not supported",
                                   "pass the shift as a Python int (a compile-time constant)")
    if axis is None:
        return reshape(roll(reshape(x, (x.size,)), shift, 0), x.shape)
    shifts, axes = np.broadcast_arrays(np.asarray(shift), np.asarray(axis))
    total = {}
    for s, ax in zip(shifts.ravel(), axes.ravel()):
        ax = _axis(int(ax), x.ndim)
        total[ax] = total.get(ax, 0) + int(s)
    for ax, s in total.items():
        n = x.shape[ax]
        if n == 0 or s % n == 0:
            continue
        s %= n
        x = concatenate([_slice_along(x, ax, n - s, n), _slice_along(x, ax, 0, n - s)], axis=ax)
    return x if x is not a else Tracer(x.ctx, x.instr)


# ---- pad -------------------------------------------------------------------------------------

_INDEX_MODES = ("edge", "reflect", "symmetric", "wrap")


@implements(np.pad)
def pad(array, pad_width, mode="constant", **kwargs):
    x = _array(array)
    if isinstance(pad_width, Tracer):
        raise x.ctx.not_compilable("np.pad with traced pad widths is not supported",
                                   "pass pad_width as Python ints")
    widths = np.asarray(pad_width)
    if widths.dtype.kind not in "iu":
        raise TypeError("`pad_width` must be of integral type.")
    widths = np.broadcast_to(widths.astype(np.int64), (x.ndim, 2))
    if (widths < 0).any():
        raise ValueError("index can't contain negative values")
    if mode == "constant":
        values = kwargs.pop("constant_values", 0)
        if kwargs:
            raise ValueError(f"unsupported keyword arguments for mode 'constant': {set(kwargs)}")
        if isinstance(values, Tracer):
            if values.ndim != 0:
                raise x.ctx.not_compilable("np.pad with a traced non-scalar constant_values")
            return emit(x.ctx, "pad", x, convert(values, x.dtype),
                        padding=tuple(PadDim(int(lo), int(hi)) for lo, hi in widths))
        values = np.broadcast_to(np.asarray(values), (x.ndim, 2))
        if x.ndim == 0:
            return Tracer(x.ctx, x.instr)
        if (values == values.flat[0]).all():
            return _pad_constant(x, widths, [(values.flat[0], values.flat[0])] * x.ndim, all_at_once=True)
        return _pad_constant(x, widths, values, all_at_once=False)
    if mode in _INDEX_MODES:
        if kwargs.get("reflect_type", "even") != "even":
            raise x.ctx.not_compilable("np.pad(reflect_type='odd') is not supported")
        for axis, (lo, hi) in enumerate(widths):
            if lo == hi == 0:
                continue
            # NumPy itself says which source element lands at each padded position.
            index_map = np.pad(np.arange(x.shape[axis]), (int(lo), int(hi)), mode=mode)
            x = take_along(x, asarray(x.ctx, index_map), axis)
        return x if x is not array else Tracer(x.ctx, x.instr)
    raise x.ctx.not_compilable(f"np.pad(mode={mode!r}) is not supported",
                               "supported modes: constant, edge, reflect, symmetric, wrap")


def _pad_constant(x, widths, values, all_at_once):
    # NumPy pads one axis after another, so later axes own the corners; so do we.
    def const(v):
        return scalar(x.ctx, np.asarray(v).astype(x.dtype), x.dtype)
    if all_at_once:
        return emit(x.ctx, "pad", x, const(values[0][0]),
                    padding=tuple(PadDim(int(lo), int(hi)) for lo, hi in widths))
    for axis, ((lo, hi), (vlo, vhi)) in enumerate(zip(widths, values)):
        for low, high, v in ((int(lo), 0, vlo), (0, int(hi), vhi)):
            if low or high:
                padding = tuple(PadDim(low, high) if d == axis else PadDim(0, 0) for d in range(x.ndim))
                x = emit(x.ctx, "pad", x, const(v), padding=padding)
    return x


# ---- repeat, tile ----------------------------------------------------------------------------

@implements(np.repeat, method="repeat")
def repeat(a, repeats, axis=None):
    x = _array(a)
    if isinstance(repeats, Tracer):
        raise x.ctx.not_compilable("np.repeat with traced repeats cannot be compiled: the result's "
                                   "shape depends on the data", "pass repeats as Python ints")
    if axis is None:
        x, axis = reshape(x, (x.size,)), 0
    axis = _axis(axis, x.ndim)
    index_map = np.repeat(np.arange(x.shape[axis]), repeats)
    return take_along(x, asarray(x.ctx, index_map), axis)


@implements(np.tile)
def tile(A, reps):
    x = _array(A)
    reps = tuple(int(r) for r in np.atleast_1d(reps)) if not isinstance(reps, int) else (reps,)
    d = max(x.ndim, len(reps))
    shape = (1,) * (d - x.ndim) + x.shape
    reps = (1,) * (d - len(reps)) + reps
    interleaved = tuple(v for pair in zip((1,) * d, shape) for v in pair)
    target = tuple(v for pair in zip(reps, shape) for v in pair)
    y = broadcast_to(reshape(x, interleaved), target)
    return reshape(y, tuple(r * n for r, n in zip(reps, shape)))


# ---- splitting -------------------------------------------------------------------------------

@implements(np.array_split)
def array_split(ary, indices_or_sections, axis=0):
    x = _array(ary)
    axis = _axis(axis, x.ndim)
    n = x.shape[axis]
    if np.ndim(indices_or_sections) == 0:
        sections = int(indices_or_sections)
        if sections <= 0:
            raise ValueError("number sections must be larger than 0.")
        each, extra = divmod(n, sections)
        sizes = [0] + [each + 1] * extra + [each] * (sections - extra)
        points = np.cumsum(sizes).tolist()
    else:
        points = [0] + [int(i) for i in indices_or_sections] + [n]
    return [_slice_along(x, axis, start, stop) for start, stop in zip(points[:-1], points[1:])]


@implements(np.split)
def split(ary, indices_or_sections, axis=0):
    x = _array(ary)
    if np.ndim(indices_or_sections) == 0:
        n = x.shape[_axis(axis, x.ndim)]
        if n % int(indices_or_sections):
            raise ValueError("array split does not result in an equal division")
    return array_split(x, indices_or_sections, axis)


@implements(np.hsplit)
def hsplit(ary, indices_or_sections):
    x = _array(ary)
    if x.ndim == 0:
        raise ValueError("hsplit only works on arrays of 1 or more dimensions")
    return split(x, indices_or_sections, 1 if x.ndim > 1 else 0)


@implements(np.vsplit)
def vsplit(ary, indices_or_sections):
    x = _array(ary)
    if x.ndim < 2:
        raise ValueError("vsplit only works on arrays of 2 or more dimensions")
    return split(x, indices_or_sections, 0)


@implements(np.dsplit)
def dsplit(ary, indices_or_sections):
    x = _array(ary)
    if x.ndim < 3:
        raise ValueError("dsplit only works on arrays of 3 or more dimensions")
    return split(x, indices_or_sections, 2)


# ---- dimensions and stacking -----------------------------------------------------------------

def _atleast(shape_of):
    def rule(*arys):
        ctx = find_context(arys)
        out = []
        for a in arys:
            x = asarray(ctx, a)
            out.append(np_reshape(x, shape_of(x.shape)))
        return out[0] if len(out) == 1 else tuple(out)
    return rule


implements(np.atleast_1d)(_atleast(lambda s: s if len(s) >= 1 else (1,)))
implements(np.atleast_2d)(_atleast(lambda s: s if len(s) >= 2 else (1,) * (2 - len(s)) + s))
implements(np.atleast_3d)(_atleast(lambda s: s if len(s) >= 3 else
                                   {0: (1, 1, 1), 1: (1,) + s + (1,), 2: s + (1,)}[len(s)]))


@implements(np.column_stack)
def column_stack(tup):
    ctx = find_context(tup)
    xs = []
    for a in tup:
        x = asarray(ctx, a)
        xs.append(reshape(x, (x.size, 1)) if x.ndim < 2 else x)
    return concatenate(xs, axis=1)


@implements(np.dstack)
def dstack(tup):
    ctx = find_context(tup)
    return concatenate([np.atleast_3d(asarray(ctx, a)) for a in tup], axis=2)


@implements(np.meshgrid)
def meshgrid(*xi, copy=True, sparse=False, indexing="xy"):
    if indexing not in ("xy", "ij"):
        raise ValueError("Valid values for `indexing` are 'xy' and 'ij'.")
    ctx = find_context(xi)
    xs = [ravel(asarray(ctx, x)) for x in xi]
    ndim = len(xs)
    sizes = [x.size for x in xs]
    if indexing == "xy" and ndim > 1:
        sizes[0], sizes[1] = sizes[1], sizes[0]
    out = []
    for i, x in enumerate(xs):
        pos = i
        if indexing == "xy" and ndim > 1 and i < 2:
            pos = 1 - i
        shape = [1] * ndim
        shape[pos] = x.size
        y = reshape(x, shape)
        out.append(y if sparse else broadcast_to(y, tuple(sizes)))
    return tuple(Tracer(ctx, y.instr) for y in out)


# ---- differences -----------------------------------------------------------------------------

@implements(np.diff)
def diff(a, n=1, axis=-1, prepend=np._NoValue, append=np._NoValue):
    x = _array(a)
    if n == 0:
        return x
    if n < 0:
        raise ValueError(f"order must be non-negative but got {n!r}")
    if x.ndim == 0:
        raise ValueError("diff requires input that is at least one dimensional")
    axis = _axis(axis, x.ndim)
    parts = []
    for extra, where in ((prepend, 0), (append, 1)):
        if extra is np._NoValue:
            continue
        e = asarray(x.ctx, extra)
        if e.ndim == 0:
            e = broadcast_to(e, x.shape[:axis] + (1,) + x.shape[axis + 1:])
        parts.append((where, e))
    if parts:
        x = concatenate([e for w, e in parts if w == 0] + [x] + [e for w, e in parts if w == 1], axis)
    for _ in range(n):
        m = x.shape[axis]
        hi, lo = _slice_along(x, axis, 1, m), _slice_along(x, axis, 0, max(m - 1, 0))
        x = np.not_equal(hi, lo) if x.dtype == np.bool_ else np.subtract(hi, lo)
    return x


# ---- triangles and diagonals -----------------------------------------------------------------

def _tri_mask(ctx, n, m, k, lower: bool) -> Tracer:
    rows = emit(ctx, "iota", shape=Shape("s64", (n, m)), iota_dimension=0)
    cols = emit(ctx, "iota", shape=Shape("s64", (n, m)), iota_dimension=1)
    shifted = np.add(rows, k)
    return compare(cols, shifted, "LE") if lower else compare(cols, shifted, "GE")


def _tri(lower):
    def rule(m, k=0):
        x = _array(m)
        if x.ndim == 0:
            raise ValueError("input array must be at least 1-d")
        if x.ndim == 1:
            x = broadcast_to(x, (x.shape[0],) * 2)
        n, mm = x.shape[-2:]
        # tril keeps j <= i + k; triu keeps j >= i + k
        mask = broadcast_to(_tri_mask(x.ctx, n, mm, int(k), lower), x.shape)
        return select(mask, x, broadcast_to(scalar(x.ctx, 0, x.dtype), x.shape))
    return rule


implements(np.tril)(_tri(True))
implements(np.triu)(_tri(False))


@implements(np.diag)
def diag(v, k=0):
    x = _array(v)
    if x.ndim == 1:
        n = x.shape[0] + abs(k)
        rows = emit(x.ctx, "iota", shape=Shape("s64", (n, n)), iota_dimension=0)
        cols = emit(x.ctx, "iota", shape=Shape("s64", (n, n)), iota_dimension=1)
        on = compare(cols, np.add(rows, k), "EQ")
        # Above the diagonal (k >= 0) row i holds x[i]; below it column j holds x[j].
        padded = emit(x.ctx, "pad", x, scalar(x.ctx, 0, x.dtype), padding=(PadDim(0, abs(k)),))
        vals = broadcast_to(reshape(padded, (n, 1) if k >= 0 else (1, n)), (n, n))
        return select(on, vals, broadcast_to(scalar(x.ctx, 0, x.dtype), (n, n)))
    if x.ndim == 2:
        return diagonal(x, k)
    raise ValueError("Input must be 1- or 2-d.")


@implements(np.diagonal, method="diagonal")
def diagonal(a, offset=0, axis1=0, axis2=1):
    """A copy (NumPy returns a read-only view, so no write can tell the difference)."""
    x = _array(a)
    if x.ndim < 2:
        raise ValueError("diag requires an array of at least two dimensions")
    axis1, axis2 = _axis(axis1, x.ndim), _axis(axis2, x.ndim)
    if axis1 == axis2:
        raise ValueError("axis1 and axis2 cannot be the same")
    rest = [d for d in range(x.ndim) if d not in (axis1, axis2)]
    y = transpose_value(x, rest + [axis1, axis2])
    n1, n2 = y.shape[-2:]
    length = max(0, min(n1, n2 - offset) if offset >= 0 else min(n1 + offset, n2))
    rows = np.arange(length) + max(-offset, 0)
    cols = np.arange(length) + max(offset, 0)
    from .indexing import getitem
    return getitem(y, (Ellipsis, rows, cols))


@implements(np.trace, method="trace")
def trace(a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    d = diagonal(a, offset, axis1, axis2)
    return _to_out(np.sum(d, axis=-1, dtype=dtype), out)


# ---- numerical derivatives and histograms --------------------------------------------------------

@implements(np.gradient)
def gradient(f, *varargs, axis=None, edge_order=1):
    """NumPy's second-order central differences with first- or second-order edges, for scalar
    spacings (one for all axes or one per axis); the same operations in the same order."""
    x = _array(f)
    axes = tuple(range(x.ndim)) if axis is None else normalize_axes(axis, x.ndim)
    if len(varargs) > 1 and len(varargs) != len(axes):
        raise TypeError("invalid number of arguments")
    spacings = list(varargs) * len(axes) if len(varargs) == 1 else list(varargs) or [1.0] * len(axes)
    if any(np.ndim(d) for d in spacings):
        raise x.ctx.not_compilable("np.gradient with coordinate arrays is not supported by nbxla",
                                   "give scalar spacings (uniform grids)")
    if edge_order > 2:
        raise ValueError("'edge_order' greater than 2 not supported")
    if x.dtype.kind not in "fc":
        x = convert(x, np.float64)
    out = []
    for ax, dx in zip(axes, spacings):
        n = x.shape[ax]
        if n < edge_order + 1:
            raise ValueError("Shape of array too small to calculate a numerical gradient, "
                             "at least (edge_order + 1) elements are required.")

        def at(i, j=None):
            return _slice_along(x, ax, i, (i + 1) if j is None else j)
        interior = (at(2, n) - at(0, n - 2)) / (2. * dx)
        if edge_order == 1:
            first = (at(1) - at(0)) / dx
            last = (at(n - 1) - at(n - 2)) / dx
        else:
            first = -1.5 / dx * at(0) + 2. / dx * at(1) + -0.5 / dx * at(2)
            last = 0.5 / dx * at(n - 3) + -2. / dx * at(n - 2) + 1.5 / dx * at(n - 1)
        out.append(convert(concatenate([first, interior, last], ax), x.dtype))
    return out[0] if len(out) == 1 else tuple(out)


@implements(np.histogram)
def histogram(a, bins=10, range=None, density=None, weights=None):
    """``np.histogram`` with a number of equal bins: the output's size is fixed.  The edges and
    each value's bin follow NumPy's own steps (``linspace``; the index from the scaled offset,
    then corrected against the edges), so values on an edge land where NumPy puts them."""
    x = ravel(_array(a))
    ctx = x.ctx
    if not isinstance(bins, (int, np.integer)) or isinstance(bins, bool):
        raise ctx.not_compilable("np.histogram with explicit bin edges or a binning rule is not "
                                 "supported by nbxla", "give the number of bins (an int)")
    if bins < 1:
        raise ValueError("`bins` must be positive, when an integer")
    if x.dtype.kind == "c":
        raise ctx.not_compilable("np.histogram of complex values is not supported by nbxla")
    edge_type = np.result_type(x.dtype, np.float64) if x.dtype.kind in "biu" else x.dtype
    if range is not None:
        lo, hi = (float(v) for v in range)
        if lo > hi:
            raise ValueError("max must be larger than min in range parameter.")
        if not (np.isfinite(lo) and np.isfinite(hi)):
            raise ValueError(f"supplied range of [{lo}, {hi}] is not finite")
        if lo == hi:
            lo, hi = lo - 0.5, hi + 0.5
        first, last = asarray(ctx, np.asarray(lo, edge_type)), asarray(ctx, np.asarray(hi, edge_type))
    else:
        if x.size == 0:
            first, last = asarray(ctx, np.asarray(0, edge_type)), asarray(ctx, np.asarray(1, edge_type))
        else:
            first, last = convert(np.min(x), edge_type), convert(np.max(x), edge_type)
            _check_finite_range(ctx, first, last)
            equal = np.equal(first, last)
            first, last = np.where(equal, first - 0.5, first), np.where(equal, last + 0.5, last)
    # np.linspace(first, last, bins + 1): arange * step + start, the last edge exactly ``last``
    steps = convert(emit(ctx, "iota", shape=Shape("s64", (bins + 1,)), iota_dimension=0), edge_type)
    edges = steps * ((last - first) / bins) + first
    edges = np.where(compare(steps, broadcast_to(asarray(ctx, np.asarray(bins, edge_type)), (bins + 1,)), "EQ"),
                     broadcast_to(last, (bins + 1,)), edges)
    values = convert(x, edge_type)
    keep = np.logical_and(values >= first, values <= last)
    index = convert((values - first) / (last - first) * bins, np.int64)
    index = np.where(index == bins, index - 1, index)
    index = np.clip(index, 0, bins - 1)              # (only values outside the range; dropped)
    index = np.where(values < take_along(edges, index, 0), index - 1, index)
    index = np.clip(index, 0, bins - 1)
    upper = take_along(edges, np.minimum(index + 1, bins), 0)
    index = np.where(np.logical_and(values >= upper, index != bins - 1), index + 1, index)
    if weights is None:
        counts, amounts = np.zeros(bins, dtype=np.int64), np.where(keep, 1, 0)
    else:
        w = ravel(_array(weights))
        if w.shape != x.shape:
            raise ValueError("weights should have the same shape as a.")
        counts, amounts = np.zeros(bins, dtype=w.dtype), np.where(keep, w, np.zeros((), w.dtype))
    counts = asarray(ctx, counts)
    scatter_add_in_range(counts, index, amounts)     # (index: in [0, bins) by the clips above)
    if density:
        widths = _slice_along(edges, 0, 1, bins + 1) - _slice_along(edges, 0, 0, bins)
        return counts / widths / np.sum(counts), edges
    return counts, edges


def _check_finite_range(ctx, first: Tracer, last: Tracer) -> None:
    """NumPy's ValueError for data whose autodetected range is not finite (NaN or inf values)."""
    pair = concatenate([reshape(first, (1,)), reshape(last, (1,))], 0)
    location = ctx.user_location()

    def fail(value: np.ndarray):
        lo, hi = value.tolist()
        if np.isfinite(lo) and np.isfinite(hi):
            return None
        return ValueError(f"autodetected range of [{lo}, {hi}] is not finite ({location})")
    ctx.add_check(pair.instr, fail, ("min", "max"))
