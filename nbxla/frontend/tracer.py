"""``Tracer``: an array stand-in that records HLO while ordinary NumPy code runs on it.

NumPy hands every ufunc and array function applied to a Tracer back to us through
``__array_ufunc__`` and ``__array_function__``; Python operators and array methods are
spelled in terms of those, so there is one lowering path (``rules.py``) for all of them.

In-place writes (``a += b``, ``a[1:] = v``, ``np.add(a, b, out=a)``) rebind the Tracer to a new
value: the computation stays pure, and the caller's array is updated afterwards.  A Tracer
made by basic indexing, ``.T``, ``transpose`` or ``reshape`` is a *view*: it remembers its
base and how to map values between the two, so writes through it reach the base and reads
from it see later writes to the base, as with NumPy views.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..errors import ConcretizationError, NotCompilableError, TraceError
from ..hlo.ir import Instruction
from .observed_sizes import observed_shape
from .context import TraceContext
from .registry import ENTRY_POINTS


# A write of a traced value into an array that is not traced (made by np.zeros inside the
# compiled code, or a global): NumPy's own __setitem__ / out= would need the value now.
WRITE_INTO_NUMPY = ("writing a traced value into a NumPy array that is not traced (one made "
                    "inside the compiled code by np.zeros/np.empty/np.ones/np.eye..., or a "
                    "global array): NumPy would need the value now")
WRITE_INTO_NUMPY_HINT = ("Make the array from a traced one so that it is traced too: "
                         "np.zeros_like(x, shape=(m, n)) or np.empty_like(x, shape=...) instead of "
                         "np.zeros((m, n)), np.zeros_like(x, shape=(n, n)) + np.eye(n, dtype=x.dtype) "
                         "instead of np.eye(n); a global "
                         "array: pass it in as an argument (or read it from the cell's namespace).")


class View:
    """How a view Tracer relates to its base: ``forward(base) -> view``, ``backward(base, view) -> base``.

    ``strides`` (in elements, as NumPy would have them) tell whether the view is contiguous,
    which decides, as in NumPy, whether a reshape of it is again a view or a copy.
    ``backward`` is None for a copy that NumPy might have made a view: writing to it is an error.
    """

    __slots__ = ("base", "forward", "backward", "base_version", "strides", "key")

    def __init__(self, base: "Tracer", forward: Callable, backward: Callable | None,
                 strides: tuple[int, ...], key: tuple | None = None):
        self.base, self.forward, self.backward = base, forward, backward
        self.base_version = chain_versions(base)
        self.strides = strides
        # For basic indexing, the NumPy index giving this view of the base (``base[key]``):
        # a returned view of an argument is then made of the caller's array (trace.py).
        self.key = key


def chain_versions(t: "Tracer") -> tuple[int, ...]:
    """The versions of ``t`` and of every base above it: a view's value is stale exactly when
    one of them changed (a view of a view must see writes to the outermost base too)."""
    versions = [t.version]
    while t.view is not None:
        t = t.view.base
        versions.append(t.version)
    return tuple(versions)


def c_strides(shape) -> tuple[int, ...]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


class Tracer:
    __array_priority__ = 1000
    weak = False            # True: type promotion sees a Python int (a rolled loop's index)
    __slots__ = ("ctx", "_instr", "version", "view", "__weakref__")

    def __init__(self, ctx: TraceContext, instr: Instruction, view: View | None = None):
        self.ctx, self._instr, self.version, self.view = ctx, instr, 0, view

    # ---- value, views and in-place writes ------------------------------------------------------

    @property
    def instr(self) -> Instruction:
        v = self.view
        if v is not None and v.base_version != chain_versions(v.base):
            fresh = v.forward(v.base)        # the base changed since we were derived: re-derive
            if fresh._instr is not self._instr:
                self._instr = fresh._instr
            v.base_version = chain_versions(v.base)
        return self._instr

    @property
    def stored_instr(self) -> Instruction:
        """The instruction this Tracer holds now, without re-deriving a view from its base:
        what a snapshot saves, and what a loop reads where re-deriving would build the view's
        slice in the wrong computation."""
        return self._instr

    def rebind(self, instr: Instruction, version: int | None = None) -> None:
        """Hold ``instr`` from now on (a loop's or branch's parameter or result, a snapshot's
        saved value), with ``version`` when given: control flow re-points a Tracer at the
        value that stands for it in another computation, which is not a write of new data."""
        self._instr = instr
        if version is not None:
            self.version = version

    def assign(self, value: "Tracer") -> None:
        """Replace this array's contents (same shape and dtype), as an in-place write does."""
        if self.ctx.ambiguous and id(self) in self.ctx.ambiguous:
            _, what, hint = self.ctx.ambiguous[id(self)]
            raise NotCompilableError(what, self.ctx.user_location(), hint)
        value = ENTRY_POINTS["convert"](ENTRY_POINTS["broadcast_to"](value, self.shape), self.dtype)
        if self.view is not None:
            if self.view.backward is None:
                raise NotCompilableError(
                    "writing into a reshaped copy of a non-contiguous view: NumPy may or may "
                    "not write through to the original array here", self.ctx.user_location(),
                    "assign through the original array (e.g. a[...] = ...) or make the copy "
                    "explicit with .copy()")
            base = self.view.base
            base.assign(self.view.backward(base, value))
            self.view.base_version = chain_versions(base)
        self._instr = value.instr
        self.version += 1

    # ---- array attributes -----------------------------------------------------------------------

    @property
    def shape(self) -> tuple[int, ...]:
        log = self.ctx.size_observations
        if log is None:
            return self.instr.shape.dims
        return observed_shape(self.instr.shape.dims, log)

    @property
    def dtype(self) -> np.dtype:
        return self.instr.shape.dtype

    @property
    def strides(self) -> tuple[int, ...]:
        """Element strides NumPy would give this array (views are not always contiguous)."""
        return self.view.strides if self.view is not None else c_strides(self.shape)

    @property
    def contiguous(self) -> bool:
        expected = 1
        for n, s in zip(reversed(self.shape), reversed(self.strides)):
            if n == 0:
                return True
            if n != 1 and s != expected:
                return False
            expected *= n
        return True

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        size = int(np.prod(self.instr.shape.dims, dtype=np.int64))
        log = self.ctx.size_observations
        return size if log is None else observed_shape((size,), log)[0]

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.size * self.itemsize

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d array")
        return (self[i] for i in range(self.shape[0]))

    def __repr__(self) -> str:
        return f"Tracer({self.instr.shape.to_text(with_layout=False)})"

    # ---- NumPy protocols ------------------------------------------------------------------------

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return ENTRY_POINTS["apply_ufunc"](ufunc, method, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        return ENTRY_POINTS["apply_function"](func, args, kwargs)

    def __array__(self, dtype=None, copy=None):
        raise self._concrete(
            "NumPy asked for the concrete values of a traced array",
            "np.asarray/np.array, or a function nbxla cannot trace, converted it",
            "Inside compiled code a traced value already is an array: drop np.asarray(x), "
            "write x.astype(dtype) to convert, build an array from traced values with "
            "np.stack([a, b]) instead of np.array([a, b]), or move this call outside the "
            "compiled cell.")

    def _concrete(self, what: str, why: str = "", hint: str | None = None) -> TraceError:
        if self.ctx.user_is_storing_item():
            return self.ctx.not_compilable(WRITE_INTO_NUMPY, WRITE_INTO_NUMPY_HINT)
        return ConcretizationError(
            f"{what}{' (' + why + ')' if why else ''}: inside %%xla / @nbxla.jit arrays have no "
            f"values yet, only a shape and dtype ({self.instr.shape.to_text(with_layout=False)})",
            self.ctx.user_location(),
            hint or "Compute both branches and choose with np.where(cond, a, b), keep the value "
            "as an array, or move this code outside the compiled cell.")

    def __bool__(self):
        raise self._concrete(
            "the truth value of a traced array was needed", "if/while/and/or/min()/max() on an array",
            "Compute both branches and choose with np.where(cond, a, b) (Python's min()/max(): "
            "np.minimum/np.maximum), keep the value as an array, or move this code outside the "
            "compiled cell.")

    def __float__(self):
        raise self._concrete(
            "float() of a traced array", "float(x), or a math.* function",
            "Keep the value as an array: x.astype(float) converts, np.sqrt/np.exp/... replace "
            "math.sqrt/math.exp/..., np.where(cond, a, b) replaces if/else on it; or move this "
            "code outside the compiled cell.")

    def __int__(self):
        raise self._concrete("int() of a traced array")

    def __format__(self, spec: str):
        raise self._concrete(
            "a traced array was formatted (an f-string, format() or str.format)",
            hint="Its value exists only when the compiled code runs: return the value and "
            "format it outside the compiled code (print(x) inside shows its shape and dtype).")

    def __complex__(self):
        raise self._concrete("complex() of a traced array")

    def __index__(self):
        raise self._concrete("a traced array was used as a Python index")

    def item(self, *args):
        raise self._concrete(".item() of a traced array")

    def tolist(self):
        raise self._concrete(".tolist() of a traced array")

    def __hash__(self):
        return id(self)

    # ---- indexing -------------------------------------------------------------------------------

    def __getitem__(self, key):
        return ENTRY_POINTS["getitem"](self, key)

    def __setitem__(self, key, value):
        ENTRY_POINTS["setitem"](self, key, value)


# Python operators are NumPy ufuncs, so they share the one lowering path.
def _binary(ufunc):
    return (lambda self, other: ufunc(self, other),
            lambda self, other: ufunc(other, self),
            lambda self, other: _inplace(self, ufunc(self, other)))


def _inplace(self: Tracer, result: Tracer) -> Tracer:
    if np.result_type(result.dtype, self.dtype) != self.dtype and \
            not np.can_cast(result.dtype, self.dtype, casting="same_kind"):
        raise TypeError(f"Cannot cast ufunc output from dtype('{result.dtype}') to "
                        f"dtype('{self.dtype}') with casting rule 'same_kind'")
    self.assign(result)
    return self


_BINARY_OPERATORS = [("add", np.add), ("sub", np.subtract), ("mul", np.multiply),
                     ("truediv", np.true_divide), ("floordiv", np.floor_divide),
                     ("mod", np.remainder), ("pow", np.power), ("matmul", np.matmul),
                     ("and", np.bitwise_and), ("or", np.bitwise_or), ("xor", np.bitwise_xor),
                     ("lshift", np.left_shift), ("rshift", np.right_shift)]
_COMPARISONS = [("lt", np.less), ("le", np.less_equal), ("gt", np.greater),
                ("ge", np.greater_equal), ("eq", np.equal), ("ne", np.not_equal)]


def install_operators(cls, binary) -> None:
    """Python's operators on ``cls`` as the NumPy ufuncs they stand for; ``binary(ufunc)`` gives
    the (forward, reflected, in-place) methods.  Shared with auto-clustering's stand-in arrays."""
    for name, ufunc in _BINARY_OPERATORS:
        forward, reflected, in_place = binary(ufunc)
        setattr(cls, f"__{name}__", forward)
        setattr(cls, f"__r{name}__", reflected)
        setattr(cls, f"__i{name}__", in_place)
    for name, ufunc in _COMPARISONS:
        setattr(cls, f"__{name}__", (lambda u: lambda self, other: u(self, other))(ufunc))
    cls.__neg__ = lambda self: np.negative(self)
    cls.__pos__ = lambda self: np.positive(self)
    cls.__abs__ = lambda self: np.absolute(self)
    cls.__invert__ = lambda self: np.invert(self)
    cls.__divmod__ = lambda self, other: np.divmod(self, other)
    cls.__rdivmod__ = lambda self, other: np.divmod(other, self)


install_operators(Tracer, _binary)


class ScalarTracer(Tracer):
    """A traced NumPy scalar (``np.float32(2)``): immutable, so ``s += 1`` makes a new value and
    another name bound to ``s`` keeps the old one, as in NumPy."""
    __slots__ = ()


for _name in ["add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or",
              "xor", "lshift", "rshift"]:
    setattr(ScalarTracer, f"__i{_name}__", getattr(Tracer, f"__{_name}__"))
