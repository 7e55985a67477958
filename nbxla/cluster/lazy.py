"""``LazyArray``: the stand-in array of auto-clustering.

A LazyArray is either *concrete* (it holds a NumPy array) or *pending* (its value is a node
of the session's pending graph, a frontend ``Tracer``).  NumPy hands every ufunc and array
function applied to one back to us (``__array_ufunc__`` / ``__array_function__``); operators,
methods, indexing and item assignment are spelled in terms of those, so every operation
goes through one place, ``Session.dispatch``, which records it into the pending graph or runs
it eagerly.  Whatever needs a concrete value (``__array__``, ``bool()``, ``float()``,
``print``, an attribute NumPy arrays have and we do not model) flushes the pending graph
first: that is a graph break.
"""

from __future__ import annotations

import math
import operator

import numpy as np

from ..frontend.methods import ARRAY_ATTRIBUTES, array_method_names
from ..frontend.tracer import install_operators

# Array methods the frontend lowers (frontend/methods.py, from its registry); anything else goes
# to NumPy's own.  (``nonzero`` is lowered only to refuse: its shape depends on the data, so a
# stand-in hands it to NumPy at once instead of breaking the graph for it.)
TRACED_METHODS = tuple(name for name in array_method_names() if name != "nonzero")
# Methods that write into the array: run eagerly, they must see the pending writes first.
WRITING_METHODS = frozenset({"sort", "fill", "put", "itemset", "resize", "partition", "setfield",
                             "setflags", "byteswap"})


class _Method:
    """``obj.name(*args, **kwargs)`` as a callable of ``obj``: works on Tracers and arrays."""
    __slots__ = ("name", "__name__")

    def __init__(self, name: str):
        self.name = name
        self.__name__ = f"ndarray.{name}"

    def __call__(self, obj, *args, **kwargs):
        return getattr(obj, self.name)(*args, **kwargs)

    def __repr__(self) -> str:
        return f".{self.name}()"


class _Attribute(_Method):
    def __call__(self, obj):
        return getattr(obj, self.name)

    def __repr__(self) -> str:
        return f".{self.name}"


_METHODS = {name: _Method(name) for name in TRACED_METHODS}
_ATTRIBUTES = {name: _Attribute(name) for name in ARRAY_ATTRIBUTES}


class LazyState:
    """What the session knows of one LazyArray: the session reads and writes these fields (the
    array itself only asks for its value, node or spec)."""
    __slots__ = ("session", "value", "tracer", "epoch", "entry", "slot", "root", "spec", "num",
                 "num_epoch", "view_key", "fill")

    def __init__(self, session, value=None):
        self.session = session
        self.value = value             # the NumPy array, once computed
        self.tracer = None             # its node in the pending graph of epoch ``epoch``
        self.epoch = -1
        self.entry = None              # (root tracer, its version) when it entered that graph
        self.slot = None               # where the eager replay of the graph puts its value
        self.root = None               # (base LazyArray, recipe): a view, as NumPy would make it
        self.spec = None               # (shape, dtype) of a value replayed from a tape (tape.py)
        self.num = 0                   # its number among the stand-ins of epoch ``num_epoch``
        self.num_epoch = -1
        self.view_key = None           # for a view: how it is made from its base, as a key
        self.fill = None               # (shape, value): made by np.zeros... (create.py), not
                                       # yet used: it enters a graph where it is first used


class LazyArray:
    """A NumPy array whose value may not have been computed yet (see the module docstring)."""

    __array_priority__ = 1000
    nbxla_stand_in = True        # (what nbxla.jit looks for to inline a call into the graph)
    __slots__ = ("state", "__weakref__")

    def __init__(self, session, value=None):
        self.state = LazyState(session, value)

    # ---- shape and dtype: known without computing anything -----------------------------------

    def _meta(self):
        if self.state.value is not None:
            return self.state.value
        return self.state.tracer if self.state.tracer is not None else self.state.spec

    def _reshape_in_place(self, shape):
        # ``a.shape = ...`` changes this array object itself (NumPy refuses where that would need
        # a copy): done on the value, so the graph before it is computed first.
        value = self.state.session.concrete(self, "ndarray.shape was assigned (an in-place reshape)",
                                            writes=True)
        value.shape = shape

    shape = property(lambda self: tuple(self._meta().shape), _reshape_in_place)
    dtype = property(lambda self: self._meta().dtype)
    ndim = property(lambda self: len(self._meta().shape))
    size = property(lambda self: math.prod(self._meta().shape))
    itemsize = property(lambda self: self._meta().dtype.itemsize)
    nbytes = property(lambda self: self.size * self._meta().dtype.itemsize)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d array")
        return (self[i] for i in range(self.shape[0]))

    # ---- NumPy protocols: every operation goes to the session --------------------------------

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        fn = ufunc if method == "__call__" else getattr(ufunc, method)
        return self.state.session.dispatch(fn, inputs, kwargs, kind="ufunc", ufunc_method=method)

    def __array_function__(self, func, types, args, kwargs):
        return self.state.session.dispatch(func, args, kwargs, kind="function")

    def __array__(self, dtype=None, copy=None):
        value = self.state.session.concrete(self, "NumPy needed the values (np.asarray, or a call into "
                                             "native code)", caller=True)
        if dtype is not None and np.dtype(dtype) != value.dtype:
            return value.astype(dtype)
        return value.copy() if copy else value

    def __getitem__(self, key):
        return self.state.session.dispatch(operator.getitem, (self, key), {}, kind="getitem")

    def __setitem__(self, key, value):
        self.state.session.dispatch(operator.setitem, (self, key, value), {}, kind="setitem")

    def __getattr__(self, name):
        method = _METHODS.get(name)
        if method is not None:
            kind = "write" if name in WRITING_METHODS else "method"
            return lambda *a, **k: self.state.session.dispatch(method, (self,) + a, k, kind=kind)
        if name in _ATTRIBUTES:
            return self.state.session.dispatch(_ATTRIBUTES[name], (self,), {}, kind="method")
        if name.startswith("__"):
            raise AttributeError(name)
        if not hasattr(np.ndarray, name):
            raise AttributeError(f"'numpy.ndarray' object has no attribute '{name}'")
        # Anything else NumPy arrays have (tolist, item, flags, ctypes, ...): NumPy's own,
        # on the concrete value (which may write into it: the pending graph is computed first).
        value = self.state.session.concrete(self, f"ndarray.{name} needs the values", writes=True)
        return getattr(value, name)

    # ---- Python asking for values: graph breaks ----------------------------------------------

    def _scalar(self, what: str):
        return self.state.session.concrete(self, what)

    def __bool__(self):
        return bool(self._scalar("the truth value of an array was needed (if/while/and/or)"))

    def __float__(self):
        return float(self._scalar("float() of an array value"))

    def __int__(self):
        return int(self._scalar("int() of an array value"))

    def __index__(self):
        return operator.index(self._scalar("an array value was used as a Python index"))

    def __complex__(self):
        return complex(self._scalar("complex() of an array value"))

    def __repr__(self):
        return repr(self._scalar("print/repr of an array"))

    def __str__(self):
        return str(self._scalar("print/str of an array"))

    def __format__(self, spec):
        return format(self._scalar("formatting an array value"), spec)

    def __hash__(self):
        return id(self)

    def __copy__(self):
        return self.copy()

    def __deepcopy__(self, memo):
        return self.copy()

    def __reduce__(self):      # pickling: the value
        return (np.asarray, (np.asarray(self),))


# Operands with which ``ufunc(x, other)`` can only end in ``x.__array_ufunc__`` (no other
# override to consult): operators go to the session directly, without NumPy's search for
# overrides (a microsecond of the few a replayed operation costs).
_PLAIN_OPERANDS = frozenset({LazyArray, np.ndarray, float, int, bool, complex, np.float64,
                             np.float32, np.int64, np.int32, np.bool_, np.complex128})


def _binary(ufunc):
    def forward(self, other):
        if type(other) in _PLAIN_OPERANDS:
            return self.state.session.dispatch(ufunc, (self, other), {}, kind="ufunc")
        return ufunc(self, other)

    def reflected(self, other):
        if type(other) in _PLAIN_OPERANDS:
            return self.state.session.dispatch(ufunc, (other, self), {}, kind="ufunc")
        return ufunc(other, self)

    def in_place(self, other):
        if type(other) in _PLAIN_OPERANDS:
            return self.state.session.dispatch(ufunc, (self, other), {"out": (self,)},
                                               kind="ufunc")
        return ufunc(self, other, out=(self,))
    return forward, reflected, in_place


install_operators(LazyArray, _binary)
