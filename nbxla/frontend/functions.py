"""Lowering rules for NumPy functions (shape manipulation, joining, selection, linear algebra).

Each rule has NumPy's signature and returns what NumPy would: the same dtype and shape, and a
view where NumPy returns a view (``reshape`` of a contiguous array, ``transpose``, ``.T``).
"""

from __future__ import annotations

import numpy as np

from ..hlo.shapes import LOW_PRECISION_DTYPES
from .reductions import normalize_axes, reduction_axes
from .registry import entry_point, implements
from .rules import asarray, broadcast_to, convert, emit, find_context, make_view, reshape, select
from .tracer import WRITE_INTO_NUMPY, WRITE_INTO_NUMPY_HINT, Tracer, c_strides


def _ctx_array(a):
    return asarray(find_context([a]), a)


def promote_arrays(arrays):
    """Cast arrays to their NumPy result dtype (NEP 50: Python scalars are weak)."""
    ctx = find_context(arrays)
    dtype = np.result_type(*(a.dtype if isinstance(a, Tracer) else a for a in arrays))
    return [asarray(ctx, a, dtype) if not isinstance(a, Tracer) else convert(a, dtype) for a in arrays]


# ---- shape and views ---------------------------------------------------------------------------

def _resolve_shape(size, shape):
    shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    shape = tuple(int(s) for s in shape)
    if shape.count(-1) > 1:
        raise ValueError("can only specify one unknown dimension")
    if -1 in shape:
        known = int(np.prod([s for s in shape if s != -1], dtype=np.int64))
        if known == 0 or size % known:
            raise ValueError(f"cannot reshape array of size {size} into shape {shape}")
        shape = tuple(size // known if s == -1 else s for s in shape)
    if int(np.prod(shape, dtype=np.int64)) != size:
        raise ValueError(f"cannot reshape array of size {size} into shape {shape}")
    return shape


@implements(np.reshape)
def np_reshape(a, shape=None, order="C", *, newshape=None, copy=None):
    x = _ctx_array(a)
    if order != "C":
        raise x.ctx.not_compilable(f"reshape(order={order!r}) is not supported", "use order='C'")
    shape = _resolve_shape(x.size, shape if shape is not None else newshape)
    if copy:
        return reshape(x, shape)
    backward = (lambda base, v: reshape(v, base.shape)) if x.contiguous else None
    if not x.contiguous and copy is False:
        raise ValueError("Unable to avoid creating a copy while reshaping.")
    return make_view(x, lambda base: reshape(base, shape), backward, c_strides(shape))


@implements(np.ravel, method="ravel")
def ravel(a, order="C"):
    return np_reshape(a, (-1,), order)


def transpose_value(x: Tracer, perm) -> Tracer:
    perm = tuple(perm)
    if perm == tuple(range(x.ndim)):
        return x
    return emit(x.ctx, "transpose", x, dimensions=perm)


@implements(np.transpose)
def transpose(a, axes=None):
    x = _ctx_array(a)
    perm = tuple(reversed(range(x.ndim))) if axes is None else normalize_axes(tuple(axes), x.ndim)
    if len(perm) != x.ndim:
        raise ValueError("axes don't match array")
    inverse = tuple(np.argsort(perm))
    strides = tuple(x.strides[p] for p in perm)
    return make_view(x, lambda base: transpose_value(base, perm),
                     lambda base, v: transpose_value(v, inverse), strides)


@implements(np.swapaxes, method="swapaxes")
def swapaxes(a, axis1, axis2):
    x = _ctx_array(a)
    perm = list(range(x.ndim))
    i, j = normalize_axes((axis1,), x.ndim)[0], normalize_axes((axis2,), x.ndim)[0]
    perm[i], perm[j] = perm[j], perm[i]
    return transpose(x, perm)


@implements(np.moveaxis)
def moveaxis(a, source, destination):
    x = _ctx_array(a)
    src = normalize_axes(tuple(np.atleast_1d(source)), x.ndim)
    dst = normalize_axes(tuple(np.atleast_1d(destination)), x.ndim)
    order = [d for d in range(x.ndim) if d not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return transpose(x, order)


@implements(np.expand_dims)
def expand_dims(a, axis):
    x = _ctx_array(a)
    axes = normalize_axes(axis if isinstance(axis, tuple) else (axis,), x.ndim + (len(axis) if isinstance(axis, tuple) else 1))
    shape, it = [], iter(x.shape)
    for d in range(x.ndim + len(axes)):
        shape.append(1 if d in axes else next(it))
    return np_reshape(x, shape)


@implements(np.squeeze, method="squeeze")
def squeeze(a, axis=None):
    x = _ctx_array(a)
    axes = tuple(i for i, n in enumerate(x.shape) if n == 1) if axis is None else reduction_axes(axis, x.ndim)
    for ax in axes:
        if x.shape[ax] != 1:
            raise ValueError("cannot select an axis to squeeze out which has size not equal to one")
    return np_reshape(x, [n for i, n in enumerate(x.shape) if i not in axes])


@implements(np.broadcast_to)
def np_broadcast_to(array, shape, subok=False):
    x = _ctx_array(array)
    shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    # NumPy returns a read-only view; a copy that refuses writes behaves the same.
    return make_view(x, lambda base: broadcast_to(base, shape), None,
                     (0,) * (len(shape) - x.ndim) + tuple(0 if n != m else s for n, m, s in
                                                          zip(x.shape, shape[len(shape) - x.ndim:], x.strides)))


# ---- copies and constructors -------------------------------------------------------------------

@implements(np.copy, method="copy")
def copy(a, order="K", subok=False):
    if not isinstance(order, str) or order.upper() not in ("K", "A", "C", "F"):
        raise TypeError(f"order must be one of 'K', 'A', 'C', 'F', not {order!r}")
    x = _ctx_array(a)
    return Tracer(x.ctx, x.instr)


@implements(np.copyto)
def copyto(dst, src, casting="same_kind", where=True):
    ctx = find_context([dst, src, where])
    if not isinstance(dst, Tracer):
        raise ctx.not_compilable(f"{WRITE_INTO_NUMPY} (np.copyto)", WRITE_INTO_NUMPY_HINT)
    value = asarray(ctx, src)
    # NumPy itself says whether the cast is allowed (Python scalars are weak, NEP 50).
    np.copyto(np.empty((), dst.dtype), np.empty((), value.dtype) if isinstance(src, Tracer) else src,
              casting=casting)
    value = convert(broadcast_to(value, dst.shape), dst.dtype)
    if where is not True:
        value = select(broadcast_to(asarray(ctx, where, bool), dst.shape), value, dst)
    dst.assign(value)


def astype(x: Tracer, dtype, order="K", casting="unsafe", subok=True, copy=True):
    return Tracer(x.ctx, convert(x, dtype).instr)


def _like(value):
    def rule(a, dtype=None, order="K", subok=True, shape=None, *, device=None):
        x = _ctx_array(a)
        dt = np.dtype(dtype) if dtype is not None else x.dtype
        shp = x.shape if shape is None else tuple(np.atleast_1d(shape))
        return broadcast_to(asarray(x.ctx, np.asarray(value, dt)), shp)
    return rule


implements(np.zeros_like)(_like(0))
implements(np.ones_like)(_like(1))


@implements(np.empty_like)
def empty_like(a, dtype=None, order="K", subok=True, shape=None, *, device=None):
    return _like(0)(a, dtype, order, subok, shape)


@implements(np.full_like)
def full_like(a, fill_value, dtype=None, order="K", subok=True, shape=None, *, device=None):
    x = _ctx_array(a)
    dt = np.dtype(dtype) if dtype is not None else x.dtype
    shp = x.shape if shape is None else tuple(np.atleast_1d(shape))
    fill = fill_value if isinstance(fill_value, Tracer) else asarray(x.ctx, np.asarray(fill_value).astype(dt))
    return broadcast_to(convert(fill, dt), shp)


# ---- joining -----------------------------------------------------------------------------------

@implements(np.concatenate)
def concatenate(arrays, axis=0, out=None, dtype=None, casting="same_kind"):
    ctx = find_context(arrays)
    xs = [asarray(ctx, a) for a in arrays]
    if axis is None:
        xs, axis = [reshape(x, (x.size,)) for x in xs], 0
    if not xs:
        raise ValueError("need at least one array to concatenate")
    xs = promote_arrays(xs) if dtype is None else [convert(x, dtype) for x in xs]
    if any(x.ndim == 0 for x in xs):
        raise ValueError("zero-dimensional arrays cannot be concatenated")
    axis = normalize_axes(axis, xs[0].ndim)[0]
    result = xs[0] if len(xs) == 1 else emit(ctx, "concatenate", *xs, dimensions=(axis,))
    if out is not None:
        out.assign(result)
        return out
    return result


@implements(np.stack)
def stack(arrays, axis=0, out=None, *, dtype=None, casting="same_kind"):
    if axis is None:
        raise TypeError("'NoneType' object cannot be interpreted as an integer")
    ctx = find_context(arrays)
    xs = [asarray(ctx, a) for a in arrays]
    if not xs:
        raise ValueError("need at least one array to stack")
    if len({x.shape for x in xs}) != 1:
        raise ValueError("all input arrays must have the same shape")
    axis = normalize_axes(axis, xs[0].ndim + 1)[0]
    expanded = [reshape(x, x.shape[:axis] + (1,) + x.shape[axis:]) for x in xs]
    return concatenate(expanded, axis, out, dtype)


@implements(np.hstack)
def hstack(tup, *, dtype=None, casting="same_kind"):
    ctx = find_context(tup)
    xs = [asarray(ctx, a) for a in tup]
    xs = [reshape(x, (1,)) if x.ndim == 0 else x for x in xs]
    return concatenate(xs, 0 if xs[0].ndim == 1 else 1, dtype=dtype)


@implements(np.vstack)
def vstack(tup, *, dtype=None, casting="same_kind"):
    ctx = find_context(tup)
    xs = [asarray(ctx, a) for a in tup]
    xs = [reshape(x, (1, x.size)) if x.ndim < 2 else x for x in xs]
    return concatenate(xs, 0, dtype=dtype)


# ---- selection ---------------------------------------------------------------------------------

@implements(np.where)
def where(condition, x=None, y=None):
    ctx = find_context([condition, x, y])
    if x is None and y is None:
        raise ctx.not_compilable("np.where(condition) with one argument cannot be compiled: "
                                 "its output shape depends on the data",
                                 "use the three-argument form np.where(condition, x, y)")
    if x is None or y is None:
        raise ValueError("either both or neither of x and y should be given")
    cond = asarray(ctx, condition)
    a, b = promote_arrays([x, y])
    shape = np.broadcast_shapes(cond.shape, a.shape, b.shape)
    c = cond if cond.dtype == np.bool_ else np.not_equal(cond, 0)
    return select(broadcast_to(c, shape), broadcast_to(a, shape), broadcast_to(b, shape))


def _python_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@implements(np.clip, method="clip")
def clip(a, a_min=np._NoValue, a_max=np._NoValue, out=None, *, min=np._NoValue, max=np._NoValue, **kwargs):
    lo = a_min if a_min is not np._NoValue else (None if min is np._NoValue else min)
    hi = a_max if a_max is not np._NoValue else (None if max is np._NoValue else max)
    if kwargs:                      # NumPy hands them to its ufuncs, which refuse unknown ones
        raise TypeError(f"clip() got an unexpected keyword argument {next(iter(kwargs))!r} "
                        "(nbxla's clip takes a, a_min, a_max, out)")
    if isinstance(a, Tracer) and a.dtype.kind in "iu":
        # NumPy 2 drops a Python-int bound beyond the dtype's range on the side where it
        # cannot clip anything (np.clip(u8, -5, 300)); on the other side it raises, as here.
        info = np.iinfo(a.dtype)
        if _python_int(lo) and lo < info.min:
            lo = None
        if _python_int(hi) and hi > info.max:
            hi = None
    result = a if lo is not None or hi is not None else np.positive(a)   # (bool: NumPy's TypeError)
    if lo is not None:
        result = np.maximum(result, lo)
    if hi is not None:
        result = np.minimum(result, hi)
    if out is not None:
        out.assign(result)
        return out
    return result


# ---- linear algebra ----------------------------------------------------------------------------

def dot_general(a: Tracer, b: Tracer, contract, batch=((), ())) -> Tracer:
    """An HLO dot; result dims are batch, then a's free dims, then b's free dims."""
    return emit(a.ctx, "dot", a, b, lhs_batch_dims=tuple(batch[0]), rhs_batch_dims=tuple(batch[1]),
                lhs_contracting_dims=tuple(contract[0]), rhs_contracting_dims=tuple(contract[1]))


@entry_point("matmul")
def matmul(a, b, out=None, **kwargs):
    ctx = find_context([a, b])
    a, b = promote_arrays([asarray(ctx, a), asarray(ctx, b)])
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError("matmul: Input operand does not have enough dimensions")
    if a.dtype == np.bool_:
        return np.not_equal(matmul(convert(a, np.int64), convert(b, np.int64)), 0)  # int8 could wrap to 0
    if a.dtype in LOW_PRECISION_DTYPES:
        # ml_dtypes' matmul accumulates in f32 and returns f32 (XLA: preferred_element_type=f32)
        a, b = convert(a, np.float32), convert(b, np.float32)
    a2 = reshape(a, (1,) + a.shape) if a.ndim == 1 else a
    b2 = reshape(b, b.shape + (1,)) if b.ndim == 1 else b
    if a2.shape[-1] != b2.shape[-2]:
        raise ValueError(f"matmul: Input operand 1 has a mismatch in its core dimension 0 "
                         f"(size {b2.shape[-2]} is different from {a2.shape[-1]})")
    batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    a2 = broadcast_to(a2, batch + a2.shape[-2:])
    b2 = broadcast_to(b2, batch + b2.shape[-2:])
    nb = len(batch)
    result = dot_general(a2, b2, ((nb + 1,), (nb,)), (tuple(range(nb)), tuple(range(nb))))
    shape = batch + (a.shape[-2:-1] if a.ndim > 1 else ()) + (b.shape[-1:] if b.ndim > 1 else ())
    result = reshape(result, shape)
    if out is not None:
        out.assign(result)
        return out
    return result


