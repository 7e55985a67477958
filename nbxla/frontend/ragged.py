"""Slices whose bounds are read from the data, reduced at their true length.

A compressed-sparse-row loop reads each row's entries between two offsets from an array::

    for i in range(n):
        cols = A_col[A_row[i]:A_row[i + 1]]
        vals = A_val[A_row[i]:A_row[i + 1]]
        y[i] = vals @ x[cols]

The slices' length depends on the data, so they have no shape to trace.  Masked to the full
axis (as ``dynamic.py`` does for slices whose length depends on a loop index) every row would
cost the whole array.  Here such a slice along the first axis is a ``RaggedSlice``: a recipe
for its item at a position ``k`` (a one-row dynamic-slice: a scalar of a 1-D array, a row of a
2-D one), which elementwise ufuncs with scalars, with arrays of the item's shape or with slices
of the same bounds, products with a fixed matrix (``X[cols] @ W``) and gathers through it
(``x[cols]``, ``X[cols]``) extend.  Nothing is computed until it is reduced -- ``sum`` (over
everything or over the ragged axis), ``mean``, ``@`` / ``np.dot`` of a 1-D one with another
(``vals @ X[cols]``: a sparse row times a dense matrix) -- which emits one ``while`` loop over
``k`` from the start to the stop, accumulating a scalar or a row.
A gather's indices are checked as NumPy would (``IndexError`` after the run), through their
minimum and maximum carried by the loop.  Anything else on a ragged slice (its ``len``, storing
it, other functions) is refused with the line, as before.
"""

from __future__ import annotations

import numpy as np

from ..errors import NotCompilableError
from ..hlo import Builder, Shape, TupleShape
from ..hlo.builder import unique_name
from ..hlo.shapes import from_numpy_dtype
from .registry import ENTRY_POINTS
from .selection import DataLengthValue
from .rules import asarray, compare, convert, emit, full, reshape, scalar, select
from .tracer import ScalarTracer, Tracer


def ragged_bound_key(x: Tracer, key: tuple):
    """``(start, stop)`` when ``x[key]`` is a step-1 slice of the first axis (the others whole)
    with a bound read from the data (no known range), else None."""
    from .index_tracer import value_range
    if x.ndim < 1 or not key or not isinstance(key[0], slice) or key[0].step not in (None, 1) or \
            any(not _whole(k) for k in key[1:]):
        return None
    k = key[0]
    bounds = [k.start, k.stop]
    if not any(isinstance(b, Tracer) and value_range(b) is None and _read_from_an_array(b.instr) for b in bounds):
        return None     # (a traced Python number or loop bound: the loop machinery decides, dynamic.py)
    if any(isinstance(b, Tracer) and (b.ndim or b.dtype.kind not in "iu") for b in bounds):
        return None
    return tuple(bounds)


def _whole(k) -> bool:
    """``:`` or ``...`` (compared by parts: ``==`` on a slice holding a Tracer would trace a compare)."""
    return k is Ellipsis or isinstance(k, slice) and k.start is None and k.stop is None and k.step is None


def _read_from_an_array(instr, depth: int = 8) -> bool:
    """Whether a scalar is computed from an array's elements (``A_row[i]``, ``idx.sum()``), not
    only from scalars (a traced Python number, a loop index)."""
    if depth == 0:
        return False
    return any(not o.shape.is_tuple and o.shape.rank >= 1 or _read_from_an_array(o, depth - 1)
               for o in instr.operands)


def _same_value(a, b, depth: int = 6) -> bool:
    """Whether two bounds are the same value: the same instruction, or the same operation on
    the same operands (``A_row[i]`` read twice gives two instructions)."""
    if isinstance(a, Tracer) and isinstance(b, Tracer):
        a, b = a.instr, b.instr
    elif isinstance(a, Tracer) or isinstance(b, Tracer):
        return False
    else:
        return a == b
    return _same_instr(a, b, depth)


def _same_instr(a, b, depth) -> bool:
    if a is b:
        return True
    if depth == 0 or a.opcode != b.opcode or a.shape != b.shape or a.opcode in ("parameter", "rng"):
        return False
    if a.opcode == "constant":
        return np.array_equal(a.literal, b.literal) and a.literal.dtype == b.literal.dtype
    if a.attrs != b.attrs or len(a.operands) != len(b.operands):
        return False
    return all(_same_instr(p, q, depth - 1) for p, q in zip(a.operands, b.operands))


class _Extent:
    """The positions ``[start, stop)`` of a ragged slice of an axis of length ``n``."""

    def __init__(self, ctx, start, stop, n: int):
        self.ctx, self.raw, self.n = ctx, (start, stop), n
        self.where = ctx.user_location()      # (the slicing line: what a refusal after it names)

    def same(self, other: "_Extent") -> bool:
        return self.n == other.n and all(_same_value(p, q) for p, q in zip(self.raw, other.raw))

    def positions(self):
        """NumPy's slice semantics: a negative bound counts from the end, then both are clipped
        to ``[0, n]``; an empty slice when stop <= start."""
        out = []
        for bound, default in zip(self.raw, (0, self.n)):
            b = default if bound is None else bound
            b = convert(asarray(self.ctx, b), np.int64)
            if np.dtype(getattr(bound, "dtype", np.int64)).kind == "i" or not isinstance(bound, Tracer):
                b = select(compare(b, scalar(self.ctx, 0, np.int64), "LT"),
                           emit(self.ctx, "add", b, scalar(self.ctx, self.n, np.int64)), b)
            b = np.clip(b, 0, self.n)
            out.append(b)
        start, stop = out
        return start, np.maximum(start, stop)


class RaggedSlice(DataLengthValue):
    """A value of data-dependent length, held as how to compute its element ``k`` (see the
    module doc).  ``item``: the shape of one item (``()`` for a 1-D slice); ``leaves``: the
    traced values the item reads; ``element(env, k, checks)``: the item as a Tracer, given
    ``env`` (leaf id -> its value inside the loop body) and the traced position ``k`` (int64);
    gathers add their index to ``checks``."""

    def __init__(self, extent: _Extent, dtype, leaves: dict, element, checked: tuple = (), item: tuple = ()):
        self.extent, self.dtype, self.leaves, self.element = extent, np.dtype(dtype), leaves, element
        self.checked = checked          # (the axis length of each gather's index, in element order)
        self.item = tuple(item)
        self.where = extent.where

    @property
    def ndim(self):
        return 1 + len(self.item)

    @classmethod
    def of(cls, x: Tracer, bounds) -> "RaggedSlice":
        extent = _Extent(x.ctx, *bounds, x.shape[0])
        return cls(extent, x.dtype, {id(x): x}, lambda env, k, checks: _element_at(env[id(x)], k),
                   item=x.shape[1:])

    def _like(self, dtype, leaves, element, checked, item=None) -> "RaggedSlice":
        return RaggedSlice(self.extent, dtype, leaves, element, checked, self.item if item is None else item)

    # -- what is refused --
    def refusal(self, what: str) -> NotCompilableError:
        return NotCompilableError(
            f"{what} on a slice whose bounds are read from the data (its length depends on the "
            "data) is not supported (it can be "
            "reduced -- sum, mean, @ / np.dot with a slice of the same bounds --, combined "
            "elementwise, multiplied by a matrix, or used to index an array's first axis)",
            self.extent.ctx.user_location() or self.where,
            "run this part eagerly (mode=\"auto\")")

    @property
    def shape(self):
        raise self.refusal("its shape")

    @property
    def size(self):
        raise self.refusal("its size")

    def astype(self, dtype, copy=True):
        return self._map(lambda v: convert(v, dtype), np.dtype(dtype))

    def _map(self, fn, dtype):
        inner = self.element
        return self._like(dtype, self.leaves, lambda env, k, checks: fn(inner(env, k, checks)), self.checked)

    # -- elementwise --
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method != "__call__" or kwargs or ufunc.nout != 1:
            if ufunc is np.add and method == "reduce" and not kwargs:
                return self.sum()
            raise self.refusal(f"np.{ufunc.__name__}.{method}" + (" with keywords" if kwargs else ""))
        if ufunc is np.matmul:
            return _dot(*inputs)
        raggeds = [v for v in inputs if isinstance(v, RaggedSlice)]
        if any(v.ndim != self.ndim for v in raggeds):
            raise self.refusal("combining slices of different ranks (the ragged axis would meet an item axis)")
        leaves, parts, samples, checked, shapes = dict(self.leaves), [], [], (), []
        for v in inputs:
            if isinstance(v, RaggedSlice):
                if not v.extent.same(self.extent):
                    raise self.refusal("combining it with a slice of other bounds")
                leaves.update(v.leaves)
                checked += v.checked
                parts.append(("ragged", v.element))
                samples.append(np.zeros((), v.dtype))
                shapes.append(v.item)
                continue
            shape = tuple(v.shape) if isinstance(v, Tracer) else np.shape(v)
            if len(shape) > len(self.item):
                raise self.refusal(f"combining it with an array of shape {shape} (it would meet the ragged axis)")
            shapes.append(shape)
            if isinstance(v, Tracer):
                leaves[id(v)] = v
                parts.append(("leaf", id(v)))
                samples.append(np.zeros((), v.dtype) if not getattr(v, "weak", False) else _python_zero(v.dtype))
            else:
                parts.append(("const", v))
                samples.append(v if np.ndim(v) == 0 else np.zeros((), np.asarray(v).dtype))
        try:
            item = np.broadcast_shapes(*shapes)
        except ValueError:
            raise self.refusal(f"combining items of shapes {shapes}") from None
        with np.errstate(all="ignore"):
            dtype = np.asarray(ufunc(*samples)).dtype

        def element(env, k, checks):
            args = [p[1](env, k, checks) if p[0] == "ragged" else env[p[1]] if p[0] == "leaf" else p[1]
                    for p in parts]
            return ufunc(*args)
        return self._like(dtype, leaves, element, checked, item)

    def __array_function__(self, func, types, args, kwargs):
        if func in (np.sum, np.mean, np.dot, np.vdot, np.inner, np.matmul):
            if func is np.sum:
                return args[0].sum(*args[1:], **kwargs)
            if func is np.mean:
                return args[0].mean(*args[1:], **kwargs)
            if kwargs or len(args) != 2:
                raise self.refusal(f"np.{func.__name__} with these arguments")
            a, b = args
            if func is np.vdot and isinstance(a, RaggedSlice) and a.dtype.kind == "c":
                a = np.conjugate(a)
            return _dot(a, b)
        raise self.refusal(f"np.{getattr(func, '__name__', func)}")

    def __neg__(self):
        return self.__array_ufunc__(np.negative, "__call__", self)

    def __abs__(self):
        return self.__array_ufunc__(np.absolute, "__call__", self)

    def __matmul__(self, other):
        return _dot(self, other)

    def __rmatmul__(self, other):
        return _dot(other, self)

    def dot(self, other):
        return _dot(self, other)

    # -- reductions: one while loop --
    def sum(self, axis=None, dtype=None, keepdims=False, **kw):
        """Over everything (``axis=None``) or over the ragged axis (``axis=0``: an item)."""
        axis = axis[0] if isinstance(axis, tuple) and len(axis) == 1 else axis
        if kw or keepdims or axis not in (None, 0, -self.ndim):
            raise self.refusal("np.sum with these arguments")
        acc = np.dtype(dtype) if dtype is not None else np.sum(np.zeros(1, self.dtype)).dtype
        return _accumulate(self, acc, whole=axis is None)

    def mean(self, axis=None, dtype=None, keepdims=False, **kw):
        # (NumPy: integers averaged in float64, floats in their own type)
        result = np.dtype(dtype) if dtype is not None else \
            np.dtype(np.float64) if self.dtype.kind in "biu" else self.dtype
        total = self.sum(axis=axis, dtype=result, keepdims=keepdims, **kw)
        start, stop = self.extent.positions()
        count = convert(emit(self.extent.ctx, "subtract", stop, start), result)
        if axis is None:
            count = count * int(np.prod(self.item))
        else:
            count = np.broadcast_to(count, total.shape)
        mean = emit(count.ctx, "divide", total, count)         # (empty: 0/0 = nan, as NumPy)
        return ScalarTracer(count.ctx, mean.instr) if not mean.ndim else mean


def _operator(ufunc, reflected=False):
    def op(self, other):
        return self.__array_ufunc__(ufunc, "__call__", *((other, self) if reflected else (self, other)))
    return op


for _name, _ufunc in [("add", np.add), ("sub", np.subtract), ("mul", np.multiply), ("truediv", np.true_divide),
                      ("floordiv", np.floor_divide), ("mod", np.remainder), ("pow", np.power)]:
    setattr(RaggedSlice, f"__{_name}__", _operator(_ufunc))
    setattr(RaggedSlice, f"__r{_name}__", _operator(_ufunc, reflected=True))


def _python_zero(dtype):
    return {"i": 0, "u": 0, "b": False, "f": 0.0, "c": 0j}[np.dtype(dtype).kind]


def _element_at(x: Tracer, k: Tracer) -> Tracer:
    """``x[k]``: a scalar of a 1-D array, a row (a copy) of a 2-D one."""
    item = x.shape[1:]
    if x.shape[0] == 0:                 # (never read: every slice of it is empty)
        v = full(x.ctx, item, 0, x.dtype)
    else:
        zeros = [scalar(x.ctx, 0, np.int64)] * len(item)
        v = reshape(emit(x.ctx, "dynamic-slice", x, k, *zeros, dynamic_slice_sizes=(1,) + item), item)
    return ScalarTracer(x.ctx, v.instr) if not item else v


def ragged_take(x: Tracer, index: RaggedSlice) -> RaggedSlice:
    """``x[index]`` (rows of ``x`` at a 1-D ragged integer slice), as a ragged slice."""
    if index.item or x.ndim == 0 or index.dtype.kind not in "iu":
        raise index.refusal(f"indexing with its {index.dtype} values" if index.dtype.kind not in "iu"
                            else "indexing with it (as an index it must be 1-D)" if index.item
                            else "indexing a 0-d value")
    n = x.shape[0]
    inner = index.element
    leaves = dict(index.leaves)
    leaves[id(x)] = x

    def element(env, k, checks):
        i = convert(inner(env, k, checks), np.int64)
        checks.append(i)
        if index.dtype.kind == "i":
            i = select(compare(i, scalar(x.ctx, 0, np.int64), "LT"),
                       emit(x.ctx, "add", i, scalar(x.ctx, n, np.int64)), i)
        i = np.clip(i, 0, max(n - 1, 0))    # (out-of-range indices fail the check after the run)
        return _element_at(env[id(x)], i)
    return RaggedSlice(index.extent, x.dtype, leaves, element, index.checked + (n,), x.shape[1:])


def _dot(a, b):
    """``a @ b``: two 1-D ragged slices (a scalar), a 1-D one and a 2-D one of the same bounds
    (``vals @ X[cols]``: a row), or a 2-D one and a fixed matrix (``X[cols] @ W``: ragged)."""
    r = a if isinstance(a, RaggedSlice) else b
    if isinstance(a, RaggedSlice) and isinstance(b, RaggedSlice):
        if a.ndim != 1 or b.ndim not in (1, 2):
            raise r.refusal("a product of these ranks")
        if not a.extent.same(b.extent):
            raise r.refusal("a product of slices of other bounds")
        ea, eb = a.element, b.element
        dtype = np.result_type(a.dtype, b.dtype)
        product = a._like(dtype, {**a.leaves, **b.leaves}, lambda env, k, checks: ea(env, k, checks) * eb(env, k, checks),
                          a.checked + b.checked, b.item)
        return product.sum(axis=0)
    if isinstance(a, RaggedSlice) and isinstance(b, Tracer) and a.ndim == 2 and b.ndim in (1, 2):
        if b.shape[0] != a.item[0]:
            raise ValueError(f"matmul: the ragged rows have {a.item[0]} columns, the matrix {b.shape[0]} rows")
        ea = a.element
        item = b.shape[1:]
        dtype = np.result_type(a.dtype, b.dtype)
        return a._like(dtype, {**a.leaves, id(b): b}, lambda env, k, checks: ea(env, k, checks) @ env[id(b)],
                       a.checked, item)
    raise r.refusal("a product with an array of fixed length")


def _accumulate(r: RaggedSlice, acc_dtype, whole: bool) -> Tracer:
    """The sum of ``r``'s items (``whole``: of every element): ``while k < stop: acc +=
    item(k)``, with each gather's index extremes carried for NumPy's bounds check after the run."""
    ctx = r.extent.ctx
    start, stop = r.extent.positions()
    leaves = list(r.leaves.values())
    ngathers = len(r.checked)
    zero = full(ctx, () if whole else r.item, 0, acc_dtype)
    # (each gather's running minimum and maximum index start at 0 and -1: valid for any axis
    # length when no index is read, and no bound on what is)
    init = [start, stop, zero] + [scalar(ctx, v, np.int64) for _ in range(ngathers) for v in (0, -1)] + leaves
    shapes = [t.instr.shape for t in init]
    state_shape = TupleShape(tuple(shapes))

    with ctx.subcomputation(Builder(unique_name("ragged_cond"))) as builder:
        p = builder.parameter(state_shape, "state")
        k = builder.op("get-tuple-element", p, index=0)
        end = builder.op("get-tuple-element", p, index=1)
        cond = builder.build(builder.op("compare", k, end, direction="LT"))

    with ctx.subcomputation(Builder(unique_name("ragged_body"))) as builder:
        p = builder.parameter(state_shape, "state")
        vals = [Tracer(ctx, builder.op("get-tuple-element", p, index=j)) for j in range(len(init))]
        k, end, acc = vals[:3]
        extremes = vals[3:3 + 2 * ngathers]
        env = {id(t): v for t, v in zip(leaves, vals[3 + 2 * ngathers:])}
        checks: list = []
        value = convert(r.element(env, k, checks), acc_dtype)
        if whole and r.item:
            value = np.sum(value, dtype=acc_dtype)
        acc = emit(ctx, "add", acc, np.broadcast_to(value, acc.shape) if value.shape != acc.shape else value)
        new_extremes = []
        for j, i in enumerate(checks):
            lo, hi = extremes[2 * j], extremes[2 * j + 1]
            new_extremes += [np.minimum(lo, i), np.maximum(hi, i)]
        nxt = emit(ctx, "add", k, scalar(ctx, 1, np.int64))
        outs = [nxt, end, acc] + new_extremes + vals[3 + 2 * ngathers:]
        builder.location = None
        body = builder.build(builder.op("tuple", *[o.instr for o in outs]))
    loop = ctx.emit("while", ctx.emit("tuple", *[t.instr for t in init]), condition=cond, body=body)
    part = lambda j: Tracer(ctx, ctx.emit("get-tuple-element", loop, index=j))     # noqa: E731
    for j, n in enumerate(r.checked):
        ENTRY_POINTS["check_bounds"](emit(ctx, "concatenate", reshape(part(3 + 2 * j), (1,)),
                                          reshape(part(4 + 2 * j), (1,)), dimensions=(0,)), n, 0)
    total = part(2)
    return ScalarTracer(ctx, total.instr) if not total.ndim else total
