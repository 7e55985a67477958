"""Indexing and item assignment on traced arrays, with NumPy's semantics.

* Basic indexing (ints, slices with any step, ``None``, ``...``) gives a *view*: one ``slice``
  (plus ``reverse`` for negative steps and a ``reshape``); writes through it become a
  ``dynamic-update-slice`` (unit steps) or a ``scatter`` into the base.
* Indexing with constant integer or boolean arrays is resolved at trace time: NumPy itself
  computes which flat positions are selected, and one ``gather`` reads them.
* One traced integer array among slices (``x[idx]``, ``x[:, idx]``) becomes a ``gather``
  along that axis (and a ``scatter`` for assignment).  Negative indices wrap as in NumPy;
  out-of-range traced indices raise NumPy's ``IndexError`` after the run (the program also
  computes the indices' extremes: ``check_bounds``), or are clamped as in XLA with
  ``NBXLA_FLAGS=--clamp_indices=true``.
* A traced boolean mask of the array's shape gives a ``Selection`` (``selection.py``): kept
  at full size, it compiles where its data-dependent length does not matter (elementwise
  with scalars and same-mask selections, reductions, writing back under the mask).  Other
  traced masks cannot be compiled.  Assigning one value to every selected element
  (``x[x < 0] = 0``) keeps the shape: that is a ``select``.
"""

from __future__ import annotations

import numpy as np

from ..errors import IndexCheckError
from ..flags import current_flags
from ..hlo import Builder, Shape, from_numpy_dtype
from ..hlo.builder import unique_name
from .dynamic import dynamic_getitem, dynamic_setitem, is_dynamic_key
from .ragged import RaggedSlice, ragged_take
from .functions import stack
from .registry import entry_point, ufunc_method
from .selection import Selection, select_from, write_selection
from .rules import (asarray, broadcast_to, compare, convert, emit, like, make_view, reducer, reshape,
                    resolve_input, select)
from .tracer import WRITE_INTO_NUMPY, WRITE_INTO_NUMPY_HINT, ScalarTracer, Tracer


def _normalize_key(key) -> tuple:
    key = key if isinstance(key, tuple) else (key,)
    return tuple(_stacked(k) if isinstance(k, list) and _holds_tracer(k) else k for k in key)


def _holds_tracer(items: list) -> bool:
    return any(isinstance(k, Tracer) or isinstance(k, list) and _holds_tracer(k) for k in items)


def _stacked(items: list) -> Tracer:
    """A list index holding traced values (``A[[i, p]] = A[[p, i]]``, a row swap at a pivot found
    by ``argmax``) as the traced integer array NumPy would make of it."""
    ctx = next(k for k in _leaves(items) if isinstance(k, Tracer)).ctx
    return stack([_stacked(k) if isinstance(k, list) else asarray(ctx, k) for k in items])


def _leaves(items: list):
    for k in items:
        yield from _leaves(k) if isinstance(k, list) else (k,)


def _is_advanced(k) -> bool:
    return isinstance(k, (list, np.ndarray, Tracer)) and not (isinstance(k, np.ndarray) and k.ndim == 0
                                                              and k.dtype.kind in "iu")


def _classify(x: Tracer, key: tuple):
    traced = [k for k in key if isinstance(k, Tracer)]
    if traced:
        return "traced"
    if any(_is_advanced(k) for k in key):
        return "constant"
    return "basic"


@entry_point("getitem")
def getitem(x: Tracer, key):
    key = _normalize_key(key)
    if len(key) == 1 and isinstance(key[0], RaggedSlice):
        return ragged_take(x, key[0])
    if is_dynamic_key(key):
        return dynamic_getitem(x, key)
    if _is_traced_mask(key) and key[0].shape == x.shape:
        return select_from(x, key[0])
    kind = _classify(x, key)
    if kind == "basic":
        plan = _BasicIndex(x.shape, key)
        if not plan.out_shape:           # NumPy: an element is a scalar copy, not a view
            return ScalarTracer(x.ctx, plan.read(x).instr)
        strides = plan.view_strides(x.strides)
        return make_view(x, plan.read, plan.write, strides, key)
    if kind == "constant":
        return _gather_positions(x, _positions(x, key))
    return _traced_take(x, key)


@entry_point("setitem")
def setitem(x: Tracer, key, value) -> None:
    key = _normalize_key(key)
    if is_dynamic_key(key):
        return dynamic_setitem(x, key, value)
    kind = _classify(x, key)
    if isinstance(value, Selection):
        if not (_is_traced_mask(key) and key[0].shape == x.shape):
            raise value.refusal("assigning it to another place than its own mask's")
        x.assign(write_selection(x, key[0], value))
        return
    value = value if isinstance(value, Tracer) else asarray(x.ctx, value)
    if kind == "basic":
        x.assign(_BasicIndex(x.shape, key).write(x, value))
    elif kind == "constant":
        x.assign(_scatter_positions(x, _positions(x, key), value))
    elif _is_traced_mask(key):
        x.assign(_masked_fill(x, key[0], value))
    else:
        x.assign(_traced_put(x, key, value))


# ---- basic indexing ----------------------------------------------------------------------------

class _BasicIndex:
    """A basic index resolved against a shape: per-dimension (start, stop, step, count)."""

    def __init__(self, shape, key):
        key = list(key)
        n_real = sum(1 for k in key if k is not None and k is not Ellipsis)
        if sum(1 for k in key if k is Ellipsis) > 1:
            raise IndexError("an index can only have a single ellipsis ('...')")
        if n_real > len(shape):
            raise IndexError(f"too many indices for array: array is {len(shape)}-dimensional, "
                             f"but {n_real} were indexed")
        if Ellipsis in key:
            i = key.index(Ellipsis)
            key[i:i + 1] = [slice(None)] * (len(shape) - n_real)
        else:
            key += [slice(None)] * (len(shape) - n_real)
        self.shape = tuple(shape)
        self.dims = []          # per input dim: (start, step, count, keep)
        self.out_shape = []     # result shape (with None dims)
        self.new_axes = []      # result positions of None
        d = 0
        for k in key:
            if k is None:
                self.new_axes.append(len(self.out_shape))
                self.out_shape.append(1)
                continue
            n = shape[d]
            if isinstance(k, slice):
                start, stop, step = k.indices(n)
                count = len(range(start, stop, step))
                self.dims.append((start, step, count, True))
                self.out_shape.append(count)
            else:
                i = int(k)
                if not -n <= i < n:
                    raise IndexError(f"index {i} is out of bounds for axis {d} with size {n}")
                self.dims.append((i % n, 1, 1, False))
            d += 1
        self.out_shape = tuple(self.out_shape)

    def view_strides(self, strides):
        out, it = [], iter(zip(self.dims, strides))
        for pos in range(len(self.out_shape)):
            if pos in self.new_axes:
                out.append(0)
                continue
            for (start, step, count, keep), s in it:
                if keep:
                    out.append(s * step)
                    break
        return out

    def _region(self):
        """The slice covering the selected elements, and the dims to reverse after slicing."""
        from ..hlo.attributes import SliceDim
        dims, reverse = [], []
        for axis, (start, step, count, keep) in enumerate(self.dims):
            if count == 0:
                dims.append(SliceDim(0, 0, 1))
            elif step > 0:
                dims.append(SliceDim(start, start + (count - 1) * step + 1, step))
            else:
                last = start + (count - 1) * step          # smallest index selected
                dims.append(SliceDim(last, start + 1, -step))
                reverse.append(axis)
        return tuple(dims), tuple(reverse)

    def read(self, x: Tracer) -> Tracer:
        sl, rev = self._region()
        y = x
        if any((s.start, s.limit, s.stride) != (0, n, 1) for s, n in zip(sl, x.shape)):
            y = emit(x.ctx, "slice", x, slice=sl)
        if rev:
            y = emit(x.ctx, "reverse", y, dimensions=rev)
        return reshape(y, self.out_shape)

    def write(self, x: Tracer, value: Tracer) -> Tracer:
        """``x`` with the selected elements replaced by ``value`` (broadcast as NumPy does)."""
        value = convert(broadcast_to(value, self.out_shape), x.dtype)
        region = tuple(count for _, _, count, _ in self.dims)
        sl, rev = self._region()
        v = reshape(value, region)       # same elements; ints become size-1 dims, None dims go
        if rev:
            v = emit(x.ctx, "reverse", v, dimensions=rev)
        if all(s.stride == 1 for s in sl):
            if region == x.shape:
                return v
            starts = [asarray(x.ctx, np.int64(s.start)) for s in sl]
            return emit(x.ctx, "dynamic-update-slice", x, v, *starts)
        positions = np.arange(x.size, dtype=np.int64).reshape(x.shape)[
            tuple(slice(s.start, s.limit, s.stride) for s in sl)]
        return _scatter_positions(x, positions, v)


# ---- constant advanced indexing: NumPy picks the flat positions ---------------------------------

def _positions(x: Tracer, key: tuple) -> np.ndarray:
    resolved = tuple(np.asarray(k) if isinstance(k, list) else k for k in key)
    return np.arange(x.size, dtype=np.int64).reshape(x.shape)[resolved]


def _flat(x: Tracer) -> Tracer:
    return reshape(x, (x.size,))


def _gather_positions(x: Tracer, positions: np.ndarray) -> Tracer:
    idx = asarray(x.ctx, positions.reshape(-1, 1))
    g = emit(x.ctx, "gather", _flat(x), idx, offset_dims=(), collapsed_slice_dims=(0,),
             start_index_map=(0,), index_vector_dim=1, slice_sizes=(1,))
    return reshape(g, positions.shape)


def _replace_computation(dtype):
    b = Builder(unique_name(f"replace_{from_numpy_dtype(dtype)}"))
    s = Shape(from_numpy_dtype(dtype))
    b.parameter(s, "old")
    new = b.parameter(s, "new")
    return b.build(new)


def _scatter_positions(x: Tracer, positions: np.ndarray, value: Tracer) -> Tracer:
    value = convert(broadcast_to(value, positions.shape), x.dtype)
    idx = asarray(x.ctx, positions.reshape(-1, 1))
    out = emit(x.ctx, "scatter", _flat(x), idx, reshape(value, (positions.size,)),
               update_window_dims=(), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,),
               index_vector_dim=1, to_apply=_replace_computation(x.dtype))
    return reshape(out, x.shape)


# ---- a traced boolean mask: x[mask] = v -----------------------------------------------------

def _is_traced_mask(key: tuple) -> bool:
    return len(key) == 1 and isinstance(key[0], Tracer) and key[0].dtype == np.bool_ \
        and key[0].ndim > 0


def _masked_fill(x: Tracer, mask: Tracer, value: Tracer) -> Tracer:
    """``x[mask] = value`` where every selected element gets the same value (a scalar, or one
    value per position of the axes after the mask's): a select, whatever the mask holds.  A
    value with one entry per selected element needs the number selected: refused."""
    rest = x.shape[mask.ndim:]
    if mask.shape != x.shape[:mask.ndim]:
        raise IndexError(f"boolean index did not match indexed array: mask shape {mask.shape}, "
                         f"array shape {x.shape}")
    shape = value.shape
    if len(shape) == len(rest) + 1 and shape[0] == 1:
        shape = shape[1:]                         # (1, *rest): one value for every selection
    try:
        fits = len(shape) <= len(rest) and np.broadcast_shapes(shape, rest) == rest
    except ValueError:
        fits = False
    if not fits:
        raise x.ctx.not_compilable(
            "boolean-mask assignment of one value per selected element cannot be compiled: "
            "how many elements the mask selects depends on the data",
            "write x[:] = np.where(mask, new_values, x) with new_values of x's shape "
            "(x[mask] = scalar compiles)")
    value = convert(broadcast_to(reshape(value, shape), x.shape), x.dtype)
    mask = broadcast_to(reshape(mask, mask.shape + (1,) * len(rest)), x.shape)
    return select(mask, value, x)


# ---- ufunc.at: np.add.at(a, idx, b) -------------------------------------------------------------

# ufunc -> the scatter combiner (old, update) -> new; repeated indices all apply, in turn.
_AT_COMBINERS = {np.add: "add", np.subtract: "subtract", np.multiply: "multiply",
                 np.maximum: "maximum", np.minimum: "minimum"}


@ufunc_method("at")
def ufunc_at(ctx, ufunc, a, indices, b=None):
    """``ufunc.at(a, indices, b)``: unbuffered, so every repeated index applies (a histogram
    is ``np.add.at(counts, bins, 1)``): one ``scatter`` whose combiner is the ufunc."""
    name = f"np.{ufunc.__name__}.at"
    if ufunc not in _AT_COMBINERS or b is None:
        raise ctx.not_compilable(f"{name} is not supported by nbxla",
                                 "np.add/subtract/multiply/maximum/minimum.at(a, indices, values) "
                                 "compile")
    if not isinstance(a, Tracer):
        raise ctx.not_compilable(f"{WRITE_INTO_NUMPY} ({name})", WRITE_INTO_NUMPY_HINT)
    loop = ufunc.resolve_dtypes((a.dtype, resolve_input(b), None))
    if not loop[0] == loop[2] == a.dtype or (a.dtype == np.bool_ and ufunc is not np.add):
        # NumPy would compute in the loop's dtype and cast back after every single update.
        raise ctx.not_compilable(
            f"{name} on a {a.dtype} array with values that make it compute in {loop[2]} "
            "is not supported", f"cast the values to the array's dtype first "
            f"(values.astype(np.{a.dtype}) changes the result where a cast rounds)")
    keys = indices if isinstance(indices, tuple) else (indices,)
    if not keys or len(keys) > a.ndim or any(isinstance(k, (slice, type(Ellipsis))) or k is None
                                                 for k in keys):
        raise ctx.not_compilable(f"{name} is supported with integer index arrays for the leading "
                                 "axes", "e.g. np.add.at(a, idx, v) or np.add.at(a, (i, j), v)")
    arrays = [asarray(ctx, k) for k in keys]
    if any(k.dtype.kind not in "iu" for k in arrays):
        raise ctx.not_compilable(f"{name} is supported with integer index arrays only",
                                 "turn a boolean mask into values: np.add(a, np.where(mask, v, 0), "
                                 "out=a)")
    for d, k in enumerate(keys):                     # constant indices: NumPy's IndexError now
        if not isinstance(k, Tracer):
            k, n = np.asarray(k), a.shape[d]
            bad = k[(k < -n) | (k >= n)]
            if bad.size:
                raise IndexError(f"index {bad.flat[0]} is out of bounds for axis with size {n}")
    shape = np.broadcast_shapes(*(k.shape for k in arrays))
    columns = [reshape(broadcast_to(_wrap_negative(convert(k, np.int64), a.shape[d], d), shape),
                       shape + (1,)) for d, k in enumerate(arrays)]
    _scatter_at(ctx, a, columns, shape, b, _AT_COMBINERS[ufunc])


def scatter_add_in_range(a: Tracer, index: Tracer, b) -> None:
    """``np.add.at(a, index, b)`` for a 1-D int64 ``index`` its maker knows to lie in
    ``[0, len(a))`` (``np.histogram``'s bins, clipped by construction): without the bounds
    check's reductions, which computed every index a second time (half the time of a
    histogram over 400 000 values)."""
    ctx = a.ctx
    _scatter_at(ctx, a, [reshape(index, index.shape + (1,))], index.shape, b, "add")


def _scatter_at(ctx, a: Tracer, columns: list, shape: tuple, b, combiner: str) -> None:
    """``a`` updated in place by one ``scatter`` of ``b`` at the index ``columns`` (each
    ``shape + (1,)``, non-negative and in bounds), combining with ``combiner``."""
    arrays = columns
    index = columns[0] if len(columns) == 1 else emit(ctx, "concatenate", *columns,
                                                      dimensions=(len(shape),))
    updates_shape = shape + a.shape[len(arrays):]
    values = convert(broadcast_to(asarray(ctx, b), updates_shape), a.dtype)
    if a.dtype == np.bool_:
        combiner = "or"
    axes = tuple(range(len(arrays)))
    result = emit(ctx, "scatter", a, index, values,
                  update_window_dims=tuple(range(len(shape), len(updates_shape))),
                  inserted_window_dims=axes, scatter_dims_to_operand_dims=axes,
                  index_vector_dim=len(shape), to_apply=reducer(combiner, a.dtype))
    a.assign(result)


# ---- one traced index array --------------------------------------------------------------------

def _traced_axis(x: Tracer, key: tuple) -> tuple[int, Tracer]:
    """The axis indexed by the single traced array (all other entries must be full slices)."""
    ctx = x.ctx
    traced = [i for i, k in enumerate(key) if isinstance(k, Tracer)]
    others_full = all(isinstance(k, slice) and k == slice(None) or k is Ellipsis
                      for i, k in enumerate(key) if i not in traced)
    if len(traced) != 1 or not others_full:
        raise ctx.not_compilable(
            "indexing with a traced array is supported for one index array among full slices "
            "(x[idx], x[:, idx], x[..., idx])",
            "index one axis at a time, e.g. x[0][idx] or np.take(x, idx, axis=...)")
    (pos,) = traced
    idx = key[pos]
    if idx.dtype == np.bool_:
        raise ctx.not_compilable(
            "boolean-mask indexing cannot be compiled: the result's shape depends on the data",
            "use np.where(mask, x, fill) to keep the shape (x[mask] op= v: x[:] = np.where(mask, "
            "x op v, x)), or index outside the compiled cell; x[mask] = scalar compiles")
    if idx.dtype.kind not in "iu":
        raise IndexError("arrays used as indices must be of integer (or boolean) type")
    if Ellipsis in key[:pos]:
        axis = x.ndim - (len(key) - pos)
    else:
        axis = pos
    return axis, _wrap_negative(idx, x.shape[axis], axis)


CLAMP_HINT = ("NumPy raises IndexError for this index. To clamp out-of-range indices into "
              "range as XLA does (and skip the check), set NBXLA_FLAGS=--clamp_indices=true.")


@entry_point("check_bounds")
def check_bounds(idx: Tracer, n: int, axis: int, scalar_shortcut: bool = True) -> None:
    """Raise NumPy's IndexError when the program runs, if a traced index is outside [-n, n):
    the program computes the indices' minimum and maximum (fused reductions over the index
    array, far smaller than the data it gathers), checked on the host after the run."""
    if current_flags().clamp_indices or idx.size == 0:
        return
    ctx = idx.ctx
    # (``a[idx[i]] += 1`` reads and writes at one index: one check)
    # (per computation being built: a check made in a loop body that is then unrolled instead
    # leaves with that body)
    key = (id(ctx.builder), id(idx.instr), n, axis)
    seen = ctx.bounds_checked.get(key)
    if seen is not None and seen[0] is ctx.builder and seen[1] is idx.instr:
        return
    ctx.bounds_checked[key] = (ctx.builder, idx.instr)
    # (in a rolled loop's body the loop carries the extremes over its iterations: loop_checks)
    flat = reshape(convert(idx, np.int64), (idx.size,))
    # (a scalar index: its own extremes, no reductions in a loop's body.  A branch's guarded
    # index keeps the reductions: counted as kernels, they keep such a loop rolled, where
    # unrolled, a step's constant index out of bounds would fail the trace itself)
    if idx.size == 1 and scalar_shortcut:
        extremes = emit(ctx, "concatenate", flat, flat, dimensions=(0,))
    else:
        extremes = emit(ctx, "concatenate", reshape(np.min(flat), (1,)), reshape(np.max(flat), (1,)),
                        dimensions=(0,))
    location = ctx.user_location()

    def fail(value: np.ndarray):
        lo, hi = int(value[0]), int(value[1])
        bad = hi if hi >= n else lo if lo < -n or idx.dtype.kind == "u" and lo < 0 else None
        if bad is None:
            return None
        if idx.dtype.kind == "u" and bad < 0:
            bad += 1 << 64                           # (a uint64 index beyond int64's range)
        return IndexCheckError(f"index {bad} is out of bounds for axis {axis} with size {n}",
                               location, CLAMP_HINT)
    ctx.add_check(extremes.instr, fail, ("min", "max"))


def _wrap_negative(idx: Tracer, n: int, axis: int = 0) -> Tracer:
    check_bounds(idx, n, axis)
    if idx.dtype.kind == "u":
        return idx
    return select(compare(idx, like(idx, 0), "LT"), emit(idx.ctx, "add", idx, like(idx, n)), idx)


@entry_point("take_along")
def take_along(x: Tracer, idx: Tracer, axis: int) -> Tracer:
    """``np.take(x, idx, axis)`` for traced ``idx`` with non-negative entries."""
    out_shape = x.shape[:axis] + idx.shape + x.shape[axis + 1:]
    offset_dims = tuple(range(axis)) + tuple(range(axis + idx.ndim, len(out_shape)))
    sizes = tuple(1 if d == axis else n for d, n in enumerate(x.shape))
    return emit(x.ctx, "gather", x, idx, offset_dims=offset_dims, collapsed_slice_dims=(axis,),
                start_index_map=(axis,), index_vector_dim=idx.ndim, slice_sizes=sizes)


def _traced_take(x: Tracer, key: tuple) -> Tracer:
    axis, idx = _traced_axis(x, key)
    return take_along(x, idx, axis)


def _traced_put(x: Tracer, key: tuple, value: Tracer) -> Tracer:
    axis, idx = _traced_axis(x, key)
    upd_shape = x.shape[:axis] + idx.shape + x.shape[axis + 1:]
    value = convert(broadcast_to(value, upd_shape), x.dtype)
    window_dims = tuple(range(axis)) + tuple(range(axis + idx.ndim, len(upd_shape)))
    return emit(x.ctx, "scatter", x, idx, value, update_window_dims=window_dims,
                inserted_window_dims=(axis,), scatter_dims_to_operand_dims=(axis,),
                index_vector_dim=idx.ndim, to_apply=_replace_computation(x.dtype))
