"""Indexing at traced scalars: the loop index of a rolled loop and what is computed from it.

* ``IndexTracer`` is the index of a rolled ``for i in range(...)``: a traced int64 scalar that
  behaves like a Python int in type promotion (NEP 50: weak), and remembers its affine form
  ``coef * index + offset`` and the range of values it can take, so that ``A[i:i+2]`` has a
  known length (2) and ``A[i+1]`` is known to stay inside the array.
* Basic indexing whose ints or slice bounds are traced scalars (``A[i]``, ``A[i, j]``,
  ``A[i, 1:4]``, ``A[i:i+k]``) becomes ``dynamic-slice`` (reads, as views) and
  ``dynamic-update-slice`` (writes).
* A slice whose *length* depends on the index (``A[i, :j]``, ``x[k+1:]``) is "masked to full
  length": a ``MaskedTracer`` holding the whole axis, zero outside ``[lo, hi)``.  Elementwise
  ufuncs, sums, dot/matmul, ``np.flip`` and writes (``A[i, :j] = v``) keep NumPy's results
  that way; anything else on it raises, and the loop falls back to unrolling.
"""

from __future__ import annotations

import numpy as np

from ..errors import NotCompilableError
from ..hlo import Shape
from ..hlo.evaluator_linalg import MASKED_DOT_TARGET
from ..hlo.shapes import from_numpy_dtype
from .index_tracer import IndexTracer, affine_key, is_int, plain, value_range
from .ragged import RaggedSlice, ragged_bound_key
from .registry import ENTRY_POINTS
from .rules import asarray, broadcast_to, compare, convert, emit, like, make_view, reshape, select
from .tracer import ScalarTracer, Tracer


# ---- keys with traced scalars ---------------------------------------------------------------

def is_dynamic_key(key: tuple) -> bool:
    """Basic indexing where some int or slice bound is a traced integer scalar."""
    dynamic = False
    for k in key:
        if isinstance(k, Tracer):
            if k.ndim != 0 or k.dtype.kind not in "iu":
                return False
            dynamic = True
        elif isinstance(k, slice):
            if any(isinstance(p, Tracer) for p in (k.start, k.stop, k.step)):
                if isinstance(k.step, Tracer) or any(isinstance(p, Tracer) and (p.ndim or p.dtype.kind not in "iu")
                                                     for p in (k.start, k.stop)):
                    return False
                dynamic = True
        elif isinstance(k, (list, np.ndarray)) and not (isinstance(k, np.ndarray) and k.ndim == 0):
            return False
    return dynamic


class _Plan:
    """Per axis of the indexed array: ("int", start) | ("slice", start, length) |
    ("mask", lo, hi) with start/lo/hi Python ints or traced scalars."""

    def __init__(self, x: Tracer, key: tuple):
        key = list(key)
        if any(k is Ellipsis for k in key):
            i = next(j for j, k in enumerate(key) if k is Ellipsis)
            key[i:i + 1] = [slice(None)] * (x.ndim - (len(key) - 1))
        if len(key) > x.ndim:
            raise IndexError(f"too many indices for array: array is {x.ndim}-dimensional, "
                             f"but {len(key)} were indexed")
        key += [slice(None)] * (x.ndim - len(key))
        self.ctx, self.shape, self.dims = x.ctx, x.shape, []
        for axis, (k, n) in enumerate(zip(key, x.shape)):
            if isinstance(k, slice):
                self.dims.append(self._slice(k, n, axis))
            else:
                self.dims.append(("int", self._int(k, n, axis)))

    def _int(self, k, n, axis):
        if not isinstance(k, Tracer):
            k = int(k)
            if not -n <= k < n:
                raise IndexError(f"index {k} is out of bounds for axis {axis} with size {n}")
            return k % n
        rng = value_range(k)
        if rng is not None:
            lo, hi = rng
            if lo < -n or hi >= n:
                guard = k.ctx.branch_condition()
                if guard is None:
                    raise IndexError(f"index (from {lo} to {hi}) can be out of bounds for axis "
                                     f"{axis} with size {n}")
                # ``if i + 1 < N: t[i + 1]``: both branches are traced, NumPy runs one.  The
                # index is checked where the branch runs (0 stands in elsewhere) and clamped.
                kk = plain(k)
                ENTRY_POINTS["check_bounds"](select(guard, kk, like(kk, 0)), n, axis, scalar_shortcut=False)
                kk = select(compare(kk, like(kk, 0), "LT"), emit(k.ctx, "add", kk, like(kk, n)), kk)
                return np.clip(kk, 0, n - 1)
            if lo >= 0:
                return k
            if hi < 0:
                return k + n
        kk = plain(k)
        # A scalar read from the data (a NumPy-scalar argument, idx[j]): dynamic-slice would
        # clamp it, NumPy raises IndexError (checked after the run, as for index arrays).
        # In a rolled loop's body the loop carries the check's extremes (loop_checks.py); a
        # loop's condition cannot carry a check (its index is clamped there, as XLA does).
        if not k.ctx.loop_condition:
            ENTRY_POINTS["check_bounds"](kk, n, axis)      # (indexing.py, above this module)
        return select(compare(kk, like(kk, 0), "LT"), emit(k.ctx, "add", kk, like(kk, n)), kk)

    def _slice(self, k: slice, n, axis):
        step = 1 if k.step is None else int(k.step)
        if not any(isinstance(p, Tracer) for p in (k.start, k.stop)):
            start, stop, step = k.indices(n)
            if step != 1:
                raise NotCompilableError("a strided slice next to a traced index is not supported",
                                         self.ctx.user_location(), "slice with step 1")
            return ("slice", start, max(0, stop - start))
        if step != 1:
            raise NotCompilableError("a slice with traced bounds and a step other than 1 is not "
                                     "supported", self.ctx.user_location(), "use step 1")
        start = 0 if k.start is None else k.start
        stop = n if k.stop is None else k.stop
        for p in (start, stop):
            rng = value_range(p)
            if rng is None:
                raise NotCompilableError(
                    "a slice whose bound is a traced value read from an array: its length "
                    "depends on the data", self.ctx.user_location(),
                    "use a fixed-shape formulation (np.where with a mask over the whole axis), "
                    "or mode=\"auto\" to run this part eagerly")
            if rng[0] < 0 and not isinstance(p, int):
                # NumPy reads a negative bound from the end: only known-sign bounds compile
                raise IndexError(f"a traced slice bound on axis {axis} may be negative "
                                 "(NumPy would count it from the end)")
        ks, ke = affine_key(start), affine_key(stop)
        if isinstance(start, int) and start < 0:
            start += n
        if isinstance(stop, int) and stop < 0:
            stop += n
        if ks[0] == "a" and ke[0] == "a" and ks[1:3] == ke[1:3]:
            length = ke[3] - ks[3]
            lo, hi = value_range(start)
            if length <= 0:
                return ("slice", 0, 0)
            if lo < 0 or hi + length > n:
                raise IndexError(f"the slice on axis {axis} can reach past the array's end "
                                 f"(size {n}); NumPy would shorten it")
            return ("slice", start, length)
        for p in (start, stop):
            rng = value_range(p)
            if rng[1] > n:
                raise IndexError(f"a traced slice bound on axis {axis} can exceed the size {n}")
        return ("mask", start, stop, (ks, ke, n))

    def region(self):
        """Starts (ints or Tracers) and sizes of the dynamic slice covering the selection."""
        starts, sizes = [], []
        for d, n in zip(self.dims, self.shape):
            if d[0] == "int":
                starts.append(d[1])
                sizes.append(1)
            elif d[0] == "slice":
                starts.append(d[1])
                sizes.append(d[2])
            else:
                starts.append(0)
                sizes.append(n)
        return starts, sizes

    def out_shape(self):
        return tuple(s for d, s in zip(self.dims, self.region()[1]) if d[0] != "int")

    def masks(self):
        return tuple(d if d[0] == "mask" else None for d in self.dims if d[0] != "int")

    def _start_ops(self, starts):
        return [convert(asarray(self.ctx, s) if not isinstance(s, Tracer) else plain(s), np.int64)
                for s in starts]

    def read(self, x: Tracer) -> Tracer:
        starts, sizes = self.region()
        y = emit(x.ctx, "dynamic-slice", x, *self._start_ops(starts), dynamic_slice_sizes=tuple(sizes))
        return reshape(y, self.out_shape())

    def write(self, x: Tracer, value: Tracer) -> Tracer:
        starts, sizes = self.region()
        masks = self.masks()
        if isinstance(value, MaskedTracer):
            if tuple(None if m is None else m[3] for m in value.masks) != \
                    tuple(None if m is None else m[3] for m in masks):
                raise IndexError("a masked value does not line up with the masked target")
            value = plain(value)
        value = convert(broadcast_to(value, self.out_shape()), x.dtype)
        v = reshape(value, tuple(sizes))
        start_ops = self._start_ops(starts)
        if any(m is not None for m in masks):
            old = emit(x.ctx, "dynamic-slice", x, *start_ops, dynamic_slice_sizes=tuple(sizes))
            mask = _mask(x.ctx, tuple(sizes), [d if d[0] == "mask" else None for d in self.dims])
            v = select(mask, v, old)
        if tuple(sizes) == x.shape and all(isinstance(s, int) and s == 0 for s in starts):
            return v
        return emit(x.ctx, "dynamic-update-slice", x, v, *start_ops)


def _mask(ctx, shape, dims) -> Tracer:
    """pred[shape]: true where every masked axis's position lies in its [lo, hi)."""
    mask = None
    for axis, d in enumerate(dims):
        if d is None:
            continue
        _, lo, hi, _ = d
        iota = emit(ctx, "iota", shape=Shape("s64", shape), iota_dimension=axis)
        parts = []
        for bound, direction in ((lo, "GE"), (hi, "LT")):
            b = convert(asarray(ctx, bound) if not isinstance(bound, Tracer) else plain(bound), np.int64)
            parts.append(compare(iota, broadcast_to(b, shape), direction))
        m = emit(ctx, "and", *parts)
        mask = m if mask is None else emit(ctx, "and", mask, m)
    return mask


def _new_axes(ndim: int, key: tuple) -> tuple[tuple, list[int] | None]:
    """The key without ``None`` (np.newaxis) entries, and where the result gets its new unit
    axes (None when there are none): ``x[:, i:i+K, None]`` reads like ``x[:, i:i+K][:, :, None]``."""
    if not any(k is None for k in key):
        return key, None
    real = sum(1 for k in key if k is not None and k is not Ellipsis)
    full = []
    for k in key:
        full += [slice(None)] * (ndim - real) if k is Ellipsis else [k]
    if not any(k is Ellipsis for k in key):
        full += [slice(None)] * (ndim - real)
    positions, out_axis = [], 0
    for k in full:
        if k is None:
            positions.append(out_axis)
        if k is None or isinstance(k, slice):
            out_axis += 1
    return tuple(k for k in full if k is not None), positions


def dynamic_getitem(x: Tracer, key: tuple) -> Tracer:
    key, new_axes = _new_axes(x.ndim, key)
    if new_axes is not None:
        y = dynamic_getitem(x, key)
        if isinstance(y, MaskedTracer):
            raise NotCompilableError("np.newaxis next to a slice whose length depends on the loop "
                                     "index is not supported", x.ctx.user_location(),
                                     "slice first, then add the axis with a reshape or np.expand_dims")
        shape = list(y.shape)
        for p in new_axes:
            shape.insert(p, 1)
        return reshape(plain(y), tuple(shape))
    bounds = ragged_bound_key(x, key)
    if bounds is not None:               # x[A_row[i]:A_row[i + 1]]: see ragged.py
        return RaggedSlice.of(x, bounds)
    plan = _Plan(x, key)
    masks = plan.masks()
    if any(m is not None for m in masks):
        data = plan.read(x)
        mask = _mask(x.ctx, data.shape, list(masks))
        return MaskedTracer(x.ctx, select(mask, data, like(data, 0)).instr, masks, raw=data)
    if all(d[0] == "int" for d in plan.dims):    # an element: a scalar copy, not a view
        return ScalarTracer(x.ctx, plan.read(x).instr)
    strides = [s for d, s in zip(plan.dims, x.strides) if d[0] != "int"]
    return make_view(x, plan.read, plan.write, strides)


def dynamic_setitem(x: Tracer, key: tuple, value) -> None:
    value = value if isinstance(value, Tracer) else asarray(x.ctx, value)
    x.assign(_Plan(x, key).write(x, value))


# ---- masked (dynamic-length) slices ------------------------------------------------------------

class MaskedTracer(Tracer):
    """A slice of dynamic length held at full length, zero outside its mask (see the module doc).
    ``masks``: per axis None or ("mask", lo, hi, signature).  ``raw``: for a slice read as it
    is, the same values not zeroed outside the mask (a dot passes it whole to
    ``nbxla_masked_dot``, which reads only the mask's part); None for a computed value."""
    __slots__ = ("masks", "raw")

    def __init__(self, ctx, instr, masks, raw=None):
        super().__init__(ctx, instr)
        self.masks = tuple(masks)
        self.raw = raw

    def _sig(self):
        return tuple(None if m is None else m[3] for m in self.masks)

    def _refuse(self, what):
        return NotCompilableError(
            f"{what} on a slice whose length depends on the loop index is not supported",
            self.ctx.user_location(), "the loop is unrolled instead when its bounds are Python ints")

    def __len__(self):
        raise self._refuse("len()")

    def __getitem__(self, key):
        raise self._refuse("indexing")

    def __setitem__(self, key, value):
        raise self._refuse("writing")

    def __iter__(self):
        raise self._refuse("iteration")

    def astype(self, dtype, *args, **kwargs):
        return MaskedTracer(self.ctx, convert(plain(self), dtype).instr, self.masks,
                            raw=None if self.raw is None else convert(self.raw, dtype))

    def _masked_like(self, value: Tracer, masks) -> Tracer:
        if all(m is None for m in masks):
            return value
        mask = _mask(self.ctx, value.shape, list(masks))
        return MaskedTracer(self.ctx, select(mask, value, like(value, 0)).instr, masks)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method == "__call__" and kwargs.get("out") is None and kwargs.get("where", True) is True:
            if ufunc is np.matmul:
                return _masked_matmul(*inputs)
            masks = None
            operands = []
            for v in inputs:
                if isinstance(v, MaskedTracer):
                    if masks is None:
                        masks, shape = v.masks, v.shape
                    elif v._sig() != tuple(None if m is None else m[3] for m in masks) or v.shape != shape:
                        raise self._refuse("combining slices of different dynamic lengths")
                    operands.append(plain(v))
                else:
                    operands.append(v)
            for v in inputs:
                if not isinstance(v, MaskedTracer) and _ndim(v) > 0:
                    vshape = (1,) * (len(shape) - _ndim(v)) + tuple(_shape(v))
                    if any(m is not None and vshape[a] != 1 for a, m in enumerate(masks)):
                        raise self._refuse("combining with an array of fixed length")
            result = ufunc(*operands, **kwargs)
            return self._masked_like(result, masks)
        raise self._refuse(f"np.{ufunc.__name__}.{method}")

    def __array_function__(self, func, types, args, kwargs):
        handler = _MASKED_FUNCTIONS.get(func)
        if handler is None:
            raise self._refuse(f"np.{getattr(func, '__name__', func)}")
        return handler(*args, **kwargs)


def _masked_reduce(fill_identity):
    def reduce(a, axis=None, dtype=None, out=None, keepdims=False, **kw):
        if out is not None or kw:
            raise a._refuse("a reduction with out=/initial=/where=")
        data = plain(a)
        if fill_identity is not None:
            mask = _mask(a.ctx, a.shape, list(a.masks))
            data = select(mask, data, like(data, fill_identity(a.dtype)))
        result = fill_identity.func(data, axis=axis, dtype=dtype, keepdims=keepdims) \
            if fill_identity is not None else np.sum(data, axis=axis, dtype=dtype, keepdims=keepdims)
        axes = range(a.ndim) if axis is None else [ax % a.ndim for ax in np.atleast_1d(axis)]
        masks = [None if (i in axes) else m for i, m in enumerate(a.masks)]
        if not keepdims:
            masks = [m for i, m in enumerate(masks) if i not in axes]
        return a._masked_like(result, masks) if isinstance(result, Tracer) and result.ndim else result
    return reduce


class _Fill:
    def __init__(self, func, value):
        self.func, self.value = func, value

    def __call__(self, dtype):
        if dtype.kind == "f":
            return self.value
        info = np.iinfo(dtype) if dtype.kind in "iu" else None
        return (info.min if self.value < 0 else info.max) if info else self.value


def _masked_mean(a, axis=None, dtype=None, out=None, keepdims=False):
    if axis is not None and not all(a.masks[ax % a.ndim] is not None or True for ax in np.atleast_1d(axis)):
        raise a._refuse("np.mean")
    total = _masked_reduce(None)(a, axis=axis, keepdims=keepdims)
    axes = range(a.ndim) if axis is None else [ax % a.ndim for ax in np.atleast_1d(axis)]
    count = 1
    for ax in axes:
        m = a.masks[ax]
        count = count * (a.shape[ax] if m is None else (_plain_int(m[2]) - _plain_int(m[1])))
    return total / count


def _ndim(v) -> int:
    return v.ndim if isinstance(v, Tracer) else np.ndim(v)


def _shape(v) -> tuple:
    return v.shape if isinstance(v, Tracer) else np.shape(v)


def _plain_int(v):
    return plain(v) if isinstance(v, Tracer) else v


def _masked_matmul(a, b):
    ma = a.masks if isinstance(a, MaskedTracer) else (None,) * _ndim(a)
    mb = b.masks if isinstance(b, MaskedTracer) else (None,) * _ndim(b)
    if _ndim(a) == 0 or _ndim(b) == 0 or _ndim(a) > 2 or _ndim(b) > 2:
        raise (a if isinstance(a, MaskedTracer) else b)._refuse("matmul of these ranks")
    ka = ma[-1]
    kb = mb[0] if _ndim(b) == 1 else mb[-2]
    sig = lambda m: None if m is None else m[3]     # noqa: E731
    if sig(ka) != sig(kb):
        raise (a if isinstance(a, MaskedTracer) else b)._refuse("matmul of slices whose lengths differ")
    out_masks = list(ma[:-1]) + ([] if _ndim(b) == 1 else [mb[-1]])
    result = _masked_dot_call(a, b)
    if result is None:
        result = ENTRY_POINTS["matmul"](plain(a) if isinstance(a, Tracer) else a,
                                        plain(b) if isinstance(b, Tracer) else b)
    if any(m is not None for m in out_masks):
        return MaskedTracer(a.ctx if isinstance(a, Tracer) else b.ctx, result.instr, out_masks)
    return result


def _masked_dot_call(a, b) -> Tracer | None:
    """``a @ b`` (ranks 1-2, float or complex, not two vectors) as ``nbxla_masked_dot`` over the
    slices' raw values and mask bounds: run at the slices' true lengths, not masked to full
    length.  None where neither operand is a slice read as it is (``raw``), or otherwise."""
    raws = [isinstance(v, MaskedTracer) and v.raw is not None for v in (a, b)]
    if not any(raws) or _ndim(a) == _ndim(b) == 1:
        # (two vectors: O(n) either way, and the masked product fuses into one reduction
        # kernel with what feeds it -- faster in a Cholesky's inner loop than a call)
        return None
    dtype = np.result_type(*(v.dtype if isinstance(v, Tracer) else np.asarray(v).dtype for v in (a, b)))
    if dtype.kind not in "fc" or dtype.itemsize < 4:
        return None
    ctx = a.ctx if isinstance(a, Tracer) else b.ctx
    operands, axes, bounds = [], [], []
    for v, raw, first in ((a, raws[0], 0), (b, raws[1], _ndim(a))):
        if raw:
            operands.append(convert(v.raw, dtype))
            for axis, m in enumerate(v.masks):
                if m is not None:
                    axes.append(first + axis)
                    bounds += [convert(asarray(ctx, _plain_int(bound)), np.int64) for bound in m[1:3]]
        else:
            operands.append(convert(plain(v) if isinstance(v, Tracer) else asarray(ctx, v), dtype))
    lhs, rhs = operands
    dims = lhs.shape[:-1] + (rhs.shape[1:] if rhs.ndim == 2 else ())
    return emit(ctx, "custom-call", lhs, rhs, *bounds, shape=Shape(from_numpy_dtype(dtype), dims),
                custom_call_target=MASKED_DOT_TARGET, lhs_contracting_dims=(lhs.ndim - 1,),
                rhs_contracting_dims=(0,), dimensions=tuple(axes))


def _masked_dot(a, b, out=None):
    if out is not None:
        raise a._refuse("np.dot with out=")
    return _masked_matmul(a, b)


def _masked_flip(m, axis=None):
    if m.ndim != 1 or m.masks[0] is None:
        raise m._refuse("np.flip")
    _, lo, hi, _ = m.masks[0]
    n = m.shape[0]
    iota = emit(m.ctx, "iota", shape=Shape("s64", (n,)), iota_dimension=0)
    lo_t = convert(asarray(m.ctx, _plain_int(lo)), np.int64)
    hi_t = convert(asarray(m.ctx, _plain_int(hi)), np.int64)
    src = np.subtract(broadcast_to(np.add(lo_t, hi_t), (n,)) - 1, iota)
    src = np.clip(src, 0, n - 1)
    return m._masked_like(ENTRY_POINTS["take_along"](plain(m), src, 0), m.masks)


def _masked_outer(a, b, out=None):
    if out is not None or _ndim(a) != 1 or _ndim(b) != 1:
        raise (a if isinstance(a, MaskedTracer) else b)._refuse("np.outer")
    masks = [a.masks[0] if isinstance(a, MaskedTracer) else None,
             b.masks[0] if isinstance(b, MaskedTracer) else None]
    result = np.outer(plain(a) if isinstance(a, Tracer) else a, plain(b) if isinstance(b, Tracer) else b)
    owner = a if isinstance(a, MaskedTracer) else b
    return owner._masked_like(result, masks)


def _masked_arg(func, fill: _Fill):
    """``np.argmax`` / ``np.argmin`` of a 1-d slice of dynamic length (LU's pivot search
    ``i + np.argmax(np.abs(A[i:, i]))``): over the full length with the masked-out elements set
    to the identity (-inf for argmax), the position made relative to the slice's start.  Where
    every live element equals that identity, the first masked-out one may win: the position is
    clamped up to the start, which then is NumPy's answer (the first of equal maxima)."""
    def arg(a, axis=None, out=None, **kw):
        if out is not None or kw or a.ndim != 1 or a.masks[0] is None or axis not in (None, 0, -1):
            raise a._refuse(f"np.{func.__name__} with these arguments")
        mask = _mask(a.ctx, a.shape, list(a.masks))
        data = plain(a)
        found = convert(func(select(mask, data, like(data, fill(a.dtype)))), np.int64)
        lo = convert(asarray(a.ctx, _plain_int(a.masks[0][1])), np.int64)
        return np.maximum(found, lo) - lo
    return arg


def _masked_copy(a, *args, **kwargs):
    return MaskedTracer(a.ctx, a.instr, a.masks, raw=a.raw)


_MASKED_FUNCTIONS = {
    np.outer: _masked_outer, np.copy: _masked_copy,
    np.sum: _masked_reduce(None),
    np.max: _masked_reduce(_Fill(np.max, -np.inf)), np.amax: _masked_reduce(_Fill(np.max, -np.inf)),
    np.min: _masked_reduce(_Fill(np.min, np.inf)), np.amin: _masked_reduce(_Fill(np.min, np.inf)),
    np.mean: _masked_mean,
    np.dot: _masked_dot, np.matmul: lambda a, b, **k: _masked_matmul(a, b),
    np.vdot: lambda a, b: _masked_matmul(a, b), np.inner: lambda a, b: _masked_matmul(a, b),
    np.flip: _masked_flip,
    np.argmax: _masked_arg(np.argmax, _Fill(np.max, -np.inf)),
    np.argmin: _masked_arg(np.argmin, _Fill(np.min, np.inf)),
}
