"""``x[mask]`` with a traced boolean mask of ``x``'s shape, kept at full size.

Its shape depends on the data, so it cannot be an array of the program; but most programs use
it in ways that do not need that shape, and those compile:

* elementwise arithmetic and ufuncs with scalars and with other selections by the same mask
  (``Z[I] ** 2 + C[I]``) -- computed on every element, only the selected ones count;
* reductions over all of it (``data[m].mean()``, ``.sum()``, ``max``, ``min``, ``prod``,
  ``any``, ``all``, ``np.count_nonzero``, ``.size``) -- ``where`` with the reduction's
  identity, the count from the mask; ``max``/``min`` of an empty selection raise NumPy's
  ValueError after the run;
* writing it back under the same mask (``Z[I] = Z[I] ** 2 + C[I]``, ``k[k > 2] += 1``) -- a
  ``select``.

"The same mask" is the same traced value or one computed the same way from the same inputs
(``a[a > 0] = a[a > 0] ** 2`` computes the mask twice).  Anything else -- its shape, indexing
it, combining it with an array, another mask -- raises the boolean-mask error at its line.
"""

from __future__ import annotations

import numpy as np

from ..errors import NbxlaError, NotCompilableError
from ..hlo.ir import Instruction
from .rules import broadcast_to, convert, like, select
from .tracer import Tracer

_WHAT = "boolean-mask indexing with a traced mask"
_HINT = ("use np.where(mask, x, fill) to keep the shape, or index outside the compiled code; "
         "x[mask] compiles when it is only combined elementwise with scalars and other x[mask] "
         "selections, reduced (sum, mean, max, min...), or written back under the same mask")
_REDUCTIONS = {"sum", "mean", "max", "min", "amax", "amin", "prod", "any", "all", "count_nonzero"}


class DataLengthValue:
    """What a value whose length depends on the data refuses, each with its ``refusal(what)``
    (the subclass's error): a selection here, a ragged slice (ragged.py)."""

    def __len__(self):
        raise self.refusal("len()")

    def __iter__(self):
        raise self.refusal("iterating over it")

    def __getitem__(self, key):
        raise self.refusal("indexing it")

    def __setitem__(self, key, value):
        raise self.refusal("writing into it")

    def __bool__(self):
        raise self.refusal("its truth value")

    def __array__(self, *args, **kwargs):
        raise self.refusal("making a NumPy array of it (storing it, returning it)")


class Selection(DataLengthValue):
    """``values[mask]``: ``values`` computed on every element, ``mask`` (same shape) saying
    which ones are selected."""

    __array_priority__ = 1000

    def __init__(self, values: Tracer, mask: Tracer):
        self.values, self.mask = values, mask
        self.ctx = values.ctx

    # ---- refusals -----------------------------------------------------------------------------

    def refusal(self, what: str) -> NbxlaError:
        return self.ctx.not_compilable(f"{_WHAT} cannot be compiled here: {what} needs the number of "
                                       "selected elements, which depends on the data", _HINT)

    @property
    def shape(self):
        raise self.refusal("its shape")

    @property
    def ndim(self):
        return 1

    @property
    def dtype(self):
        return self.values.dtype

    def reshape(self, *args, **kwargs):
        raise self.refusal("reshape")

    def __getattr__(self, name):
        # (any other array attribute or method: a clear refusal, not an AttributeError;
        # protocol names NumPy probes for stay missing)
        if name.startswith("__") or name in ("values", "mask", "ctx"):
            raise AttributeError(name)
        raise self.refusal(f".{name}")

    # ---- elementwise --------------------------------------------------------------------------

    def _operand(self, v):
        if isinstance(v, Selection):
            if not same_value(v.mask.instr, self.mask.instr):
                raise self.refusal("combining selections by different masks")
            return v.values
        if isinstance(v, Tracer) and v.ndim:
            raise self.refusal("combining it with an array")
        if isinstance(v, (np.ndarray, list, tuple)) and np.ndim(v):
            raise self.refusal("combining it with an array")
        return v

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method != "__call__" or kwargs.get("out") is not None or kwargs.get("where", True) is not True:
            if method == "reduce" and len(inputs) == 1 and ufunc in _UFUNC_REDUCTIONS:
                return getattr(self, _UFUNC_REDUCTIONS[ufunc])(**kwargs)
            raise self.refusal(f"np.{ufunc.__name__}.{method}")
        result = ufunc(*[self._operand(v) for v in inputs], **kwargs)
        if isinstance(result, tuple):
            return tuple(Selection(r, self.mask) for r in result)
        return Selection(result, self.mask)

    def __array_function__(self, func, types, args, kwargs):
        name = func.__name__
        if name in _REDUCTIONS and args and args[0] is self:
            method = {"amax": "max", "amin": "min", "count_nonzero": "_count_nonzero"}.get(name, name)
            return getattr(self, method)(*args[1:], **kwargs)
        if name in ("size", "shape", "ndim") and args and args[0] is self:
            return getattr(self, name)
        raise self.refusal(f"np.{name}")

    def astype(self, dtype, *args, **kwargs):
        return Selection(convert(self.values, np.dtype(dtype)), self.mask)

    @property
    def real(self):
        return Selection(np.real(self.values), self.mask)

    @property
    def imag(self):
        return Selection(np.imag(self.values), self.mask)

    def conj(self):
        return Selection(np.conj(self.values), self.mask)

    # ---- reductions over the selected elements -------------------------------------------------

    @property
    def size(self) -> Tracer:
        return np.sum(self.mask, dtype=np.int64)

    def _count_nonzero(self, axis=None):
        self._whole(axis)
        return np.sum(np.logical_and(self.mask, self.values != 0), dtype=np.int64)

    def _whole(self, axis):
        if axis not in (None, 0, -1):
            raise self.refusal(f"a reduction along axis {axis}")

    def _filled(self, value) -> Tracer:
        return select(self.mask, self.values, like(self.values, value))

    def sum(self, axis=None, dtype=None, **kwargs):
        self._whole(axis)
        return np.sum(self._filled(0), dtype=dtype, **kwargs)

    def prod(self, axis=None, dtype=None, **kwargs):
        self._whole(axis)
        return np.prod(self._filled(1), dtype=dtype, **kwargs)

    def mean(self, axis=None, dtype=None, **kwargs):
        self._whole(axis)
        total = np.sum(self._filled(0), dtype=dtype if dtype is not None else
                       (np.float64 if self.dtype.kind in "biu" else None))
        return total / np.sum(self.mask, dtype=np.int64)

    def any(self, axis=None, **kwargs):
        self._whole(axis)
        return np.any(np.logical_and(self.mask, self.values != 0))

    def all(self, axis=None, **kwargs):
        self._whole(axis)
        return np.all(np.logical_or(np.logical_not(self.mask), self.values != 0))

    def max(self, axis=None, **kwargs):
        return self._extreme(axis, np.max, "maximum", low=True)

    def min(self, axis=None, **kwargs):
        return self._extreme(axis, np.min, "minimum", low=False)

    def _extreme(self, axis, reduce, name: str, low: bool):
        self._whole(axis)
        dtype = self.dtype
        if dtype.kind == "f":
            fill = -np.inf if low else np.inf
        elif dtype.kind == "b":
            fill = not low
        elif dtype.kind in "iu":
            info = np.iinfo(dtype)
            fill = info.min if low else info.max
        else:
            raise self.refusal(f"{name} of {dtype} values")
        count = np.sum(self.mask, dtype=np.int64)
        location = self.ctx.user_location()

        def fail(value: np.ndarray):
            if int(value) == 0:
                return ValueError(f"zero-size array to reduction operation {name} which has no identity "
                                  f"({location})")
            return None
        self.ctx.add_check(count.instr, fail, ("min",))
        return reduce(self._filled(fill))

    # ---- operators ----------------------------------------------------------------------------

    def __neg__(self):
        return np.negative(self)

    def __pos__(self):
        return self

    def __abs__(self):
        return np.absolute(self)

    def __invert__(self):
        return np.invert(self)


def _binary(ufunc, reflected=False):
    if reflected:
        return lambda self, other: ufunc(other, self)
    return lambda self, other: ufunc(self, other)


for _name, _ufunc in {"add": np.add, "sub": np.subtract, "mul": np.multiply, "truediv": np.true_divide,
                      "floordiv": np.floor_divide, "mod": np.remainder, "pow": np.power,
                      "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor,
                      "lshift": np.left_shift, "rshift": np.right_shift}.items():
    setattr(Selection, f"__{_name}__", _binary(_ufunc))
    setattr(Selection, f"__r{_name}__", _binary(_ufunc, reflected=True))
for _name, _ufunc in {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
                      "eq": np.equal, "ne": np.not_equal}.items():
    setattr(Selection, f"__{_name}__", _binary(_ufunc))
Selection.__hash__ = None

_UFUNC_REDUCTIONS = {np.add: "sum", np.multiply: "prod", np.maximum: "max", np.minimum: "min",
                     np.logical_and: "all", np.logical_or: "any"}


def write_selection(x: Tracer, mask: Tracer, value: Selection) -> Tracer:
    """``x[mask] = value`` for a selection by the same mask: the new values of ``x``."""
    if not same_value(mask.instr, value.mask.instr):
        raise value.refusal("assigning a selection by another mask")
    new = convert(broadcast_to(value.values, x.shape), x.dtype) if value.values.shape != x.shape \
        else convert(value.values, x.dtype)
    return select(mask, new, x)


def select_from(x: Tracer, mask: Tracer) -> Selection:
    """``x[mask]`` (``mask`` of ``x``'s shape): a snapshot of ``x``'s values (later writes into
    ``x`` do not change it, as with NumPy's copy)."""
    return Selection(Tracer(x.ctx, x.instr), mask)


def same_value(a: Instruction, b: Instruction, depth: int = 64) -> bool:
    """Whether two instructions compute the same value: the same instruction, or the same
    operation with the same attributes on operands that compute the same values."""
    if a is b:
        return True
    if depth == 0 or a.opcode != b.opcode or a.shape != b.shape or len(a.operands) != len(b.operands) \
            or a.opcode == "parameter":
        return False
    if a.opcode == "constant":
        return np.array_equal(np.asarray(a.literal), np.asarray(b.literal))
    if a.attrs.keys() != b.attrs.keys() or any(
            a.attrs[k] is not b.attrs[k] and a.attrs[k] != b.attrs[k] for k in a.attrs):
        return False
    return all(same_value(x, y, depth - 1) for x, y in zip(a.operands, b.operands))


class SelectionAfterLoop:
    """What a name bound to ``x[mask]`` in each step of a rolled loop holds after it: using it
    is refused with a clear error (the last step's selection, of data-dependent length, was
    not kept)."""

    def __init__(self, name: str, where, what: str = "x[mask]"):
        self._name, self._where, self._what = name, where, what

    def refuse(self, *args, **kwargs):
        raise NotCompilableError(
            f"`{self._name}` holds {self._what} from the last step of a loop compiled as one HLO "
            "while, which does not keep it (its length depends on the data)", self._where,
            "use it inside the loop only, or keep what you need of it in an array the loop "
            "writes (res[i] = values.mean())")

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        self.refuse()

    __array__ = __array_ufunc__ = __array_function__ = __len__ = __iter__ = __getitem__ = refuse
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = refuse
    __rtruediv__ = __pow__ = __neg__ = __lt__ = __le__ = __gt__ = __ge__ = __bool__ = refuse
