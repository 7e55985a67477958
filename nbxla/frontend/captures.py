"""Values a compiled function reads from its closure and its globals ("captures").

NumPy code reads the *current* value of a global or closed-over name on every call, so a
compiled function must too.  Arrays it captures become implicit arguments: read at call
time, passed by pointer (no copy, nothing baked into the code, writes land in them), with
their shape and dtype in the cache key.  Captured Python constants (numbers, strings,
tuples, helper functions) become part of the cache key: a new value recompiles, and the
cache says which name changed (``w: 2.0 -> 3.0 (constant)``).  Helper functions the
function calls are followed (a few levels deep) for the same reasons.

An object of the user's class holding arrays (``cfg.w``, see ``trace.is_array_holder``) is
flattened like a dict of its attributes: its arrays are implicit arguments, its other
attributes part of the key.  What is not followed: modules (``np``), other objects, and
values that are neither arrays, numbers, strings, tuples nor functions; those are read
once, while tracing, as before.
"""

from __future__ import annotations

import functools
import hashlib
import operator
import types
from typing import Callable

import numpy as np

from .trace import hashable, is_array_holder, is_array_leaf, tree_flatten, tree_unflatten

MAX_DEPTH = 3                           # helper functions followed below the compiled one
_STATIC_TYPES = (int, float, complex, str, bytes, bool, type(None), tuple, frozenset, np.dtype)
_LIBRARY_PREFIXES = ("numpy", "nbxla", "scipy", "builtins")


@functools.lru_cache(maxsize=4096)
def global_names(code: types.CodeType) -> tuple[str, ...]:
    """Names the code (and the code of functions and comprehensions defined in it) may read
    from its globals (``co_names`` also holds attribute names: harmless extra lookups)."""
    names, stack = [], [code]
    while stack:
        c = stack.pop()
        names += c.co_names
        stack += [k for k in c.co_consts if isinstance(k, types.CodeType)]
    return tuple(dict.fromkeys(names))


def _jit_target(value):
    """The Python function an ``nbxla.jit`` object wraps (it is inlined when traced)."""
    return getattr(type(value), "_nbxla_wraps", None) and value.fn


def _user_function(value) -> types.FunctionType | None:
    value = _jit_target(value) or value
    if isinstance(value, types.FunctionType) and \
            not (value.__module__ or "").startswith(_LIBRARY_PREFIXES):
        return value
    return None


def _plain_array(value) -> bool:
    """An array nbxla passes as an argument: numeric or bool, native byte order, a plain
    ndarray or NumPy scalar.  (Others, e.g. string arrays or np.matrix, are read while
    tracing as before: the name may not even be used as an array.)"""
    return (type(value) is np.ndarray or isinstance(value, np.generic)) and \
        value.dtype.kind in "biufc" and value.dtype.isnative and value.ndim <= 32


def _relevant(value) -> bool:
    """Whether a captured value is an array, a constant in the key, or a tree of them."""
    if is_array_holder(value):
        return True
    if is_array_leaf(value):
        return _plain_array(value)
    if isinstance(value, (list, dict, tuple)):
        leaves = tree_flatten(value)[0]
        return all(_plain_array(v) if is_array_leaf(v) else isinstance(v, _STATIC_TYPES) and hashable(v)
                   for v in leaves)
    return isinstance(value, _STATIC_TYPES) and hashable(value)


_MISSING = object()


def _mutable(value) -> bool:
    """Whether a captured value can change without being rebound (a list or dict in it)."""
    if isinstance(value, (list, dict)):
        return True
    return isinstance(value, tuple) and any(_mutable(v) for v in value)


def contents_snapshot(value):
    """What ``same_contents`` compares a list, dict or tuple with later: its keys and the
    identity of every item (numbers and strings are immutable, so the same objects mean the
    same values; arrays are passed by reference), with nested lists and dicts snapshotted
    in turn."""
    if isinstance(value, dict):
        items = list(value.values())
        return list(value), items, [(k, contents_snapshot(v)) for k, v in enumerate(items) if _mutable(v)]
    items = list(value)
    return None, items, [(k, contents_snapshot(v)) for k, v in enumerate(items) if _mutable(v)]


def same_contents(value, snapshot) -> bool:
    """Whether ``value`` still holds what ``contents_snapshot`` saw (one C-level pass over its
    items: a captured dict of a hundred coefficients is checked in a few us per call)."""
    keys, items, nested = snapshot
    if keys is not None:
        if list(value) != keys:
            return False
        now = list(value.values())
    else:
        now = list(value)
    if len(now) != len(items) or not all(map(operator.is_, now, items)):
        return False
    return all(same_contents(items[k], inner) for k, inner in nested)


class CapturePlan:
    """Which names a function captures, read afresh on every call.

    Reading costs a few dict lookups per call: the last result is reused while every name
    it looked at still holds the same object (arrays are passed by reference, so their
    current contents are used anyway) and every list or dict among the values still holds
    the same items (``same_contents``)."""

    def __init__(self, fn: types.FunctionType):
        self.fn = fn
        self._last: list | None = None
        self._seen_globals: list = []       # (globals dict, name, value) looked at
        self._seen_cells: list = []         # (cell, value) looked at
        self._containers: list = []         # (captured list/dict/tuple, its contents_snapshot)

    def _items(self, fn):
        """(name, value) pairs the function can see: closure cells first, then globals."""
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
            try:
                value = cell.cell_contents
            except ValueError:                  # a cell not yet filled
                self._seen_cells.append((cell, _MISSING))
                continue
            self._seen_cells.append((cell, value))
            yield name, value
        g, free = fn.__globals__, fn.__code__.co_freevars
        for name in global_names(fn.__code__):
            value = g.get(name, _MISSING)
            self._seen_globals.append((g, name, value))
            if value is not _MISSING and name not in free:
                yield name, value

    def still_current(self) -> list | None:
        """The last ``read()``'s result while nothing it looked at changed, else None (the
        per-call fast path: no new read; one frame, it runs on every jit call)."""
        last = self._last
        if last is None:
            return None
        for g, name, value in self._seen_globals:
            if g.get(name, _MISSING) is not value:
                return None
        for cell, value in self._seen_cells:
            try:
                if cell.cell_contents is not value:
                    return None
            except ValueError:
                if value is not _MISSING:
                    return None
        for value, snapshot in self._containers:
            if not same_contents(value, snapshot):
                return None
        return last

    @property
    def last(self) -> list | None:
        """The last ``read()``'s result (None before the first)."""
        return self._last

    def read(self) -> list[tuple[str, object]]:
        """The current captured values, as (label, value): arrays, constants, trees of them,
        and helper functions (their identity) with what they capture in turn."""
        last = self.still_current()
        if last is not None:
            return last
        self._seen_globals, self._seen_cells = [], []
        out: list[tuple[str, object]] = []
        self._read(self.fn, "", 0, {id(self.fn)}, out)
        self._containers = [(v, contents_snapshot(v)) for _, v in out if _mutable(v)]
        self._last = out
        return out

    def _read(self, fn, prefix, depth, seen, out) -> None:
        for name, value in list(self._items(fn)):
            label = prefix + name
            helper = _user_function(value)
            if helper is not None:
                out.append((label, value))      # redefining a helper recompiles
                if depth < MAX_DEPTH and id(helper) not in seen:     # (per call path, as rebuild)
                    self._read(helper, label + ".", depth + 1, seen | {id(helper)}, out)
            elif _relevant(value):
                out.append((label, value))


def rebuild(fn: types.FunctionType, values: dict[str, object]) -> Callable:
    """``fn`` reading ``values`` (by label, as ``CapturePlan.read`` names them: Tracers for
    arrays) in place of its globals and closure cells, helpers rebuilt the same way."""
    return _rebuild(fn, "", values, 0, {id(fn)})


def _rebuild(fn, prefix, values, depth, seen):
    g = fn.__globals__
    new_globals = None
    for name in global_names(fn.__code__):
        label = prefix + name
        if label not in values or name not in g:
            continue
        value = values[label]
        helper = _user_function(g[name])
        if helper is not None:
            if depth >= MAX_DEPTH or id(helper) in seen:
                continue
            value = _rebuild(helper, label + ".", values, depth + 1, seen | {id(helper)})
        if new_globals is None:
            new_globals = dict(g)
        new_globals[name] = value
    cells = []
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        label = prefix + name
        if label in values:
            value = values[label]
            try:
                helper = _user_function(cell.cell_contents)
            except ValueError:
                helper = None
            if helper is not None:
                if depth >= MAX_DEPTH or id(helper) in seen:
                    cells.append(cell)
                    continue
                value = _rebuild(helper, label + ".", values, depth + 1, seen | {id(helper)})
            cell = types.CellType(value)
        cells.append(cell)
    if new_globals is None and all(a is b for a, b in zip(cells, fn.__closure__ or ())):
        return fn
    new = types.FunctionType(fn.__code__, new_globals if new_globals is not None else g,
                             fn.__name__, fn.__defaults__, tuple(cells) or None)
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__qualname__ = fn.__qualname__
    return new


class BakedArray:
    """A captured array used as a compile-time constant, keyed by its contents: the fallback
    for functions that need a captured array's values while tracing (a boolean mask, indices
    that decide a shape).  A change of contents recompiles; it is never stale."""
    __slots__ = ("array", "_key")

    def __init__(self, array):
        arr = np.ascontiguousarray(array)
        self.array = array
        self._key = (arr.shape, arr.dtype.str, hashlib.blake2b(arr.view(np.uint8).reshape(-1) if arr.size
                                                               else b"", digest_size=16).digest())

    def __eq__(self, other) -> bool:
        return isinstance(other, BakedArray) and self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    def __repr__(self) -> str:
        return f"array{list(self.array.shape)} {self.array.dtype} (its contents)"


def _map_arrays(value, fn):
    leaves, treedef = tree_flatten(value)
    return tree_unflatten(treedef, [fn(v) for v in leaves])


def bake(captured: list) -> list:
    """Captured values with their arrays as ``BakedArray`` constants."""
    return [(label, _map_arrays(v, lambda a: BakedArray(a) if is_array_leaf(a) else a))
            for label, v in captured]


def unbake(values: dict) -> dict:
    return {label: _map_arrays(v, lambda a: a.array if isinstance(a, BakedArray) else a)
            for label, v in values.items()}


def has_arrays(captured: list) -> bool:
    return any(is_array_leaf(leaf) for _, v in captured for leaf in tree_flatten(v)[0])
