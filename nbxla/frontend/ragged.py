"""Slices whose bounds are read from the data, reduced at their true length.

A compressed-sparse-row loop reads each row's entries between two offsets from an array::

    for i in range(n):
        cols = A_col[A_row[i]:A_row[i + 1]]
        vals = A_val[A_row[i]:A_row[i + 1]]
        y[i] = vals @ x[cols]

The slices' length depends on the data, so they have no shape to trace.  Masked to the full
axis (as ``dynamic.py`` does for slices whose length depends on a loop index) every row would
cost the whole array.  Here such a slice of a 1-D array is a ``RaggedSlice``: a recipe for its
element at a position ``k`` (a one-element dynamic-slice), which elementwise ufuncs with
scalars or with slices of the same bounds, and gathers through it (``x[cols]``), extend.
Nothing is computed until it is reduced -- ``sum``, ``@`` / ``np.dot`` of two of them, ``mean``
-- which emits one ``while`` loop over ``k`` from the start to the stop, accumulating a scalar.
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
from .rules import asarray, compare, convert, emit, reshape, scalar, select
from .tracer import ScalarTracer, Tracer


def ragged_bound_key(x: Tracer, key: tuple):
    """``(start, stop)`` when ``x[key]`` is a step-1 slice of a 1-D array with a bound read from
    the data (no known range), else None."""
    from .index_tracer import value_range
    if x.ndim != 1 or len(key) != 1 or not isinstance(key[0], slice) or key[0].step not in (None, 1):
        return None
    k = key[0]
    bounds = [k.start, k.stop]
    if not any(isinstance(b, Tracer) and value_range(b) is None for b in bounds):
        return None
    if any(isinstance(b, Tracer) and (b.ndim or b.dtype.kind not in "iu") for b in bounds):
        return None
    return tuple(bounds)


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


class RaggedSlice:
    """A value of data-dependent length, held as how to compute its element ``k`` (see the
    module doc).  ``leaves``: the traced arrays and scalars the element reads; ``element(env,
    k, checks)``: the element as a scalar Tracer, given ``env`` (leaf id -> its value inside
    the loop body) and the traced position ``k`` (int64); gathers add their index to
    ``checks`` (axis length, index)."""

    ndim = 1

    def __init__(self, extent: _Extent, dtype, leaves: dict, element, checked: tuple = ()):
        self.extent, self.dtype, self.leaves, self.element = extent, np.dtype(dtype), leaves, element
        self.checked = checked          # (the axis length of each gather's index, in element order)

    @classmethod
    def of(cls, x: Tracer, bounds) -> "RaggedSlice":
        extent = _Extent(x.ctx, *bounds, x.shape[0])
        return cls(extent, x.dtype, {id(x): x}, lambda env, k, checks: _element_at(env[id(x)], k))

    # -- what is refused --
    def _refuse(self, what: str) -> NotCompilableError:
        return NotCompilableError(
            f"{what} on a slice whose bounds are read from the data is not supported (it can be "
            "reduced -- sum, mean, @ / np.dot with a slice of the same bounds --, combined "
            "elementwise, or used to index a 1-D array)", self.extent.ctx.user_location(),
            "run this part eagerly (mode=\"auto\")")

    @property
    def shape(self):
        raise self._refuse("its shape")

    @property
    def size(self):
        raise self._refuse("its size")

    def __len__(self):
        raise self._refuse("len()")

    def __iter__(self):
        raise self._refuse("iteration")

    def __getitem__(self, key):
        raise self._refuse("indexing it")

    def __setitem__(self, key, value):
        raise self._refuse("writing into it")

    def __bool__(self):
        raise self._refuse("its truth value")

    def astype(self, dtype, copy=True):
        return self._map(lambda v: convert(v, dtype), np.dtype(dtype))

    def _map(self, fn, dtype):
        inner = self.element
        return RaggedSlice(self.extent, dtype, self.leaves, lambda env, k, checks: fn(inner(env, k, checks)),
                           self.checked)

    # -- elementwise --
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method != "__call__" or kwargs or ufunc.nout != 1:
            if ufunc is np.add and method == "reduce" and not kwargs:
                return self.sum()
            raise self._refuse(f"np.{ufunc.__name__}.{method}" + (" with keywords" if kwargs else ""))
        if ufunc is np.matmul:
            return _dot(*inputs)
        leaves, parts, samples, checked = dict(self.leaves), [], [], ()
        for v in inputs:
            if isinstance(v, RaggedSlice):
                if not v.extent.same(self.extent):
                    raise self._refuse("combining it with a slice of other bounds")
                leaves.update(v.leaves)
                checked += v.checked
                parts.append(("ragged", v.element))
                samples.append(np.zeros((), v.dtype))
            elif isinstance(v, Tracer):
                if v.ndim:
                    raise self._refuse("combining it with an array")
                leaves[id(v)] = v
                parts.append(("leaf", id(v)))
                samples.append(v.dtype.type(0) if not getattr(v, "weak", False) else _python_zero(v.dtype))
            elif np.ndim(v) == 0:
                parts.append(("const", v))
                samples.append(v)
            else:
                raise self._refuse("combining it with an array")
        with np.errstate(all="ignore"):
            dtype = np.asarray(ufunc(*samples)).dtype

        def element(env, k, checks):
            args = [p[1](env, k, checks) if p[0] == "ragged" else env[p[1]] if p[0] == "leaf" else p[1]
                    for p in parts]
            return ufunc(*args)
        return RaggedSlice(self.extent, dtype, leaves, element, checked)

    def __array_function__(self, func, types, args, kwargs):
        if func in (np.sum, np.mean, np.dot, np.vdot, np.inner, np.matmul):
            if func is np.sum:
                return args[0].sum(*args[1:], **kwargs)
            if func is np.mean:
                return args[0].mean(*args[1:], **kwargs)
            if kwargs or len(args) != 2:
                raise self._refuse(f"np.{func.__name__} with these arguments")
            a, b = args
            if func is np.vdot and isinstance(a, RaggedSlice) and a.dtype.kind == "c":
                a = np.conjugate(a)
            return _dot(a, b)
        raise self._refuse(f"np.{getattr(func, '__name__', func)}")

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
        if kw or keepdims or axis not in (None, 0, -1, (0,)):
            raise self._refuse("np.sum with these arguments")
        acc = np.dtype(dtype) if dtype is not None else np.sum(np.zeros(1, self.dtype)).dtype
        return _accumulate(self, acc)

    def mean(self, axis=None, dtype=None, keepdims=False, **kw):
        # (NumPy: integers averaged in float64, floats in their own type)
        result = np.dtype(dtype) if dtype is not None else \
            np.dtype(np.float64) if self.dtype.kind in "biu" else self.dtype
        total = self.sum(axis=axis, dtype=result, keepdims=keepdims, **kw)
        start, stop = self.extent.positions()
        count = convert(emit(self.extent.ctx, "subtract", stop, start), result)
        return ScalarTracer(count.ctx, emit(count.ctx, "divide", total, count).instr)   # (empty: 0/0 = nan, as NumPy)


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
    if x.shape[0] == 0:                 # (never read: every slice of it is empty)
        return ScalarTracer(x.ctx, scalar(x.ctx, 0, x.dtype).instr)
    v = emit(x.ctx, "dynamic-slice", x, k, dynamic_slice_sizes=(1,))
    return ScalarTracer(x.ctx, reshape(v, ()).instr)


def ragged_take(x: Tracer, index: RaggedSlice) -> RaggedSlice:
    """``x[index]`` of a 1-D array at a ragged integer slice, as a ragged slice."""
    if x.ndim != 1 or index.dtype.kind not in "iu":
        raise index._refuse(f"indexing a {x.ndim}-D array with it" if x.ndim != 1 else
                            f"indexing with its {index.dtype} values")
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
    return RaggedSlice(index.extent, x.dtype, leaves, element, index.checked + (n,))


def _dot(a, b):
    if not (isinstance(a, RaggedSlice) and isinstance(b, RaggedSlice)):
        r = a if isinstance(a, RaggedSlice) else b
        raise r._refuse("a product with an array of fixed length")
    return np.multiply(a, b).sum()


def _accumulate(r: RaggedSlice, acc_dtype) -> Tracer:
    """The sum of ``r``'s elements: ``while k < stop: acc += element(k)``, with each gather's
    index extremes carried for NumPy's bounds check after the run."""
    ctx = r.extent.ctx
    start, stop = r.extent.positions()
    leaves = list(r.leaves.values())
    ngathers = len(r.checked)
    zero = scalar(ctx, 0, acc_dtype)
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
        value = r.element(env, k, checks)
        acc = emit(ctx, "add", acc, convert(value, acc_dtype))
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
    return ScalarTracer(ctx, part(2).instr)
