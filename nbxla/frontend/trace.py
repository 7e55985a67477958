"""Turn a Python function (or a cell, see ``cell.py``) into an HLO module.

Arguments are flattened into leaves: arrays (and NumPy scalars) become entry parameters,
everything else is a compile-time constant.  The function runs on Tracers; traced leaves of
its result become the entry's outputs, and so does the final value of every argument the
function wrote into (``a += b``, ``C[:] = ...``), which the runtime copies back into the
caller's arrays afterwards, so the caller sees NumPy's in-place semantics.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..errors import NotCompilableError, TraceError, UnsupportedInputError
from ..hlo import Module, Shape, from_numpy_dtype
from .context import TraceContext
from .selection import Selection, SelectionAfterLoop
from .ragged import RaggedSlice
from .index_tracer import IndexTracer
from .tracer import ScalarTracer, Tracer

# ---- pytrees: nested tuples / lists / dicts of leaves -------------------------------------------


@dataclass(frozen=True)
class TreeDef:
    kind: str                  # "leaf", "tuple", "list", "dict", "object"
    children: tuple = ()
    keys: tuple = ()           # dict keys; an object's attribute names
    cls: type | None = None    # an object's class


LEAF = TreeDef("leaf")


# Types that are always one leaf (exact types: a subclass may hold arrays): answered before
# the container and array-holder tests, which cost a dataclass check per leaf -- a function
# that reads a dict of 112 coefficients flattened them on every call at a new size.
_PLAIN_LEAVES = frozenset({float, int, bool, complex, str, bytes, type(None), np.ndarray,
                           np.float64, np.float32, np.int64, np.int32, np.bool_})


def tree_flatten(tree, _objects: int = 0) -> tuple[list, TreeDef]:
    if type(tree) in _PLAIN_LEAVES:
        return [tree], LEAF
    if isinstance(tree, (tuple, list)) and not hasattr(tree, "_fields"):
        flat, defs = [], []
        for item in tree:
            f, d = tree_flatten(item, _objects)
            flat += f
            defs.append(d)
        return flat, TreeDef(type(tree).__name__, tuple(defs))
    if isinstance(tree, dict):
        flat, defs = [], []
        for key in tree:
            f, d = tree_flatten(tree[key], _objects)
            flat += f
            defs.append(d)
        return flat, TreeDef("dict", tuple(defs), tuple(tree))
    if _objects < MAX_OBJECT_DEPTH and is_array_holder(tree, _objects):
        flat, d = tree_flatten(vars(tree), _objects + 1)
        return flat, TreeDef("object", d.children, d.keys, type(tree))
    return [tree], LEAF


def tree_paths(name: str, tree, _objects: int = 0) -> list[str]:
    """A name per leaf of ``tree_flatten(tree)``: ``x[0]``, ``d['k']``, ``self.w``."""
    if isinstance(tree, (tuple, list)) and not hasattr(tree, "_fields"):
        return [p for i, item in enumerate(tree) for p in tree_paths(f"{name}[{i}]", item, _objects)]
    if isinstance(tree, dict):
        return [p for k, item in tree.items() for p in tree_paths(f"{name}[{k!r}]", item, _objects)]
    if _objects < MAX_OBJECT_DEPTH and is_array_holder(tree, _objects):
        return [p for k, item in vars(tree).items() for p in tree_paths(f"{name}.{k}", item, _objects + 1)]
    return [name]


_LIBRARY_PREFIXES = ("numpy", "nbxla", "builtins")
MAX_OBJECT_DEPTH = 3            # objects in objects (self.layer.w) flattened; deeper ones (and
#                                 cycles: a node's parent) are constants


def is_array_holder(value, depth: int = 0) -> bool:
    """An object of the user's class holding arrays in its attributes (``self.w``): flattened
    like a dict of its attributes, so that its arrays are read afresh on every call, passed as
    parameters (a rebound ``self.w`` or one of a new shape is seen) and its other attributes
    are part of the cache key.  Only plain objects (identity equality, or a dataclass; a
    ``__dict__``) whose attributes are all arrays, hashable constants, or lists/tuples/dicts/
    such objects of them: anything else stays one constant, as before."""
    cls = type(value)
    plain = cls.__eq__ is object.__eq__ or dataclasses.is_dataclass(cls)
    if not plain or (cls.__module__ or "").startswith(_LIBRARY_PREFIXES) or \
            isinstance(value, type) or callable(value) or not isinstance(getattr(value, "__dict__", None), dict):
        return False
    leaves = tree_flatten(list(vars(value).values()), depth + 1)[0]
    arrays = [is_array_leaf(v) or isinstance(v, Tracer) for v in leaves]   # (a result: Tracers)
    return any(arrays) and all(a or hashable(v) for a, v in zip(arrays, leaves))


def hashable(value) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def tree_unflatten(treedef: TreeDef, leaves) -> Any:
    return _build(treedef, iter(leaves))


def _build(d: TreeDef, it) -> Any:
    # (A module-level function: a nested one that calls itself is a reference cycle, which
    # kept every result's arrays alive until the garbage collector ran -- no buffer reuse.)
    if d.kind == "leaf":
        return next(it)
    items = [_build(c, it) for c in d.children]
    if d.kind == "dict":
        return dict(zip(d.keys, items))
    if d.kind == "object":          # a copy of the object holding these values (Tracers)
        obj = object.__new__(d.cls)
        obj.__dict__.update(zip(d.keys, items))
        return obj
    return tuple(items) if d.kind == "tuple" else items


def is_array_leaf(x) -> bool:
    return isinstance(x, (np.ndarray, np.generic)) and not isinstance(x, (str, bytes))


# ---- the traced program -----------------------------------------------------------------------


@dataclass
class TracedProgram:
    """What tracing produced, and how to map values in and out of the compiled module."""
    module: Module
    param_leaves: list[int]           # entry parameter i <- flat argument leaf param_leaves[i]
    out_treedef: TreeDef              # structure of the function's result
    out_slots: list                   # per result leaf: ("out", k) for output k, ("static", value),
    #                                   or ("selection", k): outputs k (values) and k + 1 (mask)
    writebacks: list[tuple[int, int]] = field(default_factory=list)  # (arg leaf, output k)
    checks: list[tuple[int, Callable]] = field(default_factory=list)  # (output k, fail): see run_checks
    # (line, "rolled" | "unrolled", why) per Python loop over traced values (loops.py)
    loop_decisions: list[tuple[int, str, str]] = field(default_factory=list)
    # Outputs that NumPy gives as Python ints (a loop index, a counter: IndexTracer values)
    python_ints: frozenset[int] = frozenset()

    def run_checks(self, outputs) -> None:
        """Raise the error NumPy would have raised, from the check outputs of a run (before
        anything is written back: NumPy raises before it writes, too)."""
        for k, fail in self.checks:
            value = outputs[k]
            error = fail(value if isinstance(value, np.ndarray) else np.asarray(value.get()))
            if error is not None:
                raise error


class StaticValue:
    """A static (compile-time) argument in a cache key: equal when the values are the same
    bits, so ``0.0`` and ``-0.0`` get their own compilations (``1/(x*c)`` differs) and a
    NaN finds its own entry again (``nan != nan`` would recompile on every call)."""
    __slots__ = ("value", "_token", "_hash")

    def __init__(self, value):
        self.value = value
        self._token = _bits(value)
        self._hash = hash(self._token)          # (TypeError now for an unhashable value)

    def __eq__(self, other) -> bool:
        return isinstance(other, StaticValue) and self._token == other._token

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        if callable(self.value) and hasattr(self.value, "__qualname__"):
            return f"function {self.value.__qualname__}"
        return repr(self.value)


def _bits(value):
    if isinstance(value, float):
        return (float, value.hex())                   # -0.0 and 0.0 differ; nan == nan
    if isinstance(value, complex):
        return (complex, value.real.hex(), value.imag.hex())
    if isinstance(value, (tuple, frozenset)):
        return (type(value), tuple(_bits(v) for v in value))
    return (type(value), value)


def leaf_signature(x, name: str | None = None) -> tuple:
    """What a compiled program depends on about an argument leaf."""
    if is_array_leaf(x):
        check_array_leaf(x, name)
        arr = np.asarray(x)
        return ("array", arr.shape, arr.dtype.str)
    try:
        hash(x)
    except TypeError:
        raise NotCompilableError(
            f"an argument of type {type(x).__name__} is neither an array nor a hashable "
            "constant", hint="pass arrays, scalars, or tuples/lists/dicts of them") from None
    return ("static", type(x).__name__, StaticValue(x))


MAX_RANK = 32


def check_array_leaf(x, name: str | None = None) -> None:
    """Refuse arrays whose NumPy semantics nbxla would silently get wrong (it computes with
    plain ndarray semantics on native-endian data), saying what to pass instead."""
    label = name or "an argument"
    if isinstance(x, np.matrix):
        raise UnsupportedInputError(
            f"{label} is an np.matrix: nbxla computes with ndarray semantics, where a * b is "
            "elementwise (for np.matrix it is a matrix product) and results are never matrices",
            hint="pass np.asarray(m) and write a @ b for matrix products")
    # (through sys.modules: ``np.ma`` imports numpy.ma, 50 ms of a first call; an array
    # cannot be masked unless that module is loaded)
    masked = sys.modules.get("numpy.ma")
    if masked is not None and isinstance(x, masked.MaskedArray):
        raise UnsupportedInputError(
            f"{label} is a masked array: the compiled code would ignore its mask",
            hint="pass m.filled(value) (e.g. 0 for a sum) and the mask as a boolean array, "
            "and use np.where(mask, ...); or compute it outside nbxla")
    dtype = x.dtype
    if dtype.byteorder == (">" if np.little_endian else "<"):
        raise UnsupportedInputError(
            f"{label} has a non-native byte order ({dtype.str}): compiled code reads native-endian "
            "data", hint=f"pass x.astype({dtype.newbyteorder('=').name!r}) (a native-endian copy)")
    if np.ndim(x) > MAX_RANK:
        raise UnsupportedInputError(
            f"{label} has {np.ndim(x)} dimensions: nbxla compiles arrays of at most {MAX_RANK}",
            hint="reshape it to fewer dimensions (x.reshape(...)) before the call")


def alias_pattern(leaves: list) -> tuple[int, ...]:
    """Which array leaves are the same object: a trace passes each array once, so a program
    traced for ``f(x, x)`` must not be reused for ``f(x, y)``."""
    first: dict[int, int] = {}
    return tuple(first.setdefault(id(leaf), i) for i, leaf in enumerate(leaves) if is_array_leaf(leaf))


def trace(fn: Callable, arg_leaves: list, arg_treedef: TreeDef, *, name: str,
          leaf_names: list[str] | None = None,
          filename_display: Callable[[str], str | None] | None = None,
          memory_checked: bool = True, argument_views: bool = False,
          names_outlive: bool = False,
          size_observations: list | None = None) -> TracedProgram:
    """Trace ``fn(*args, **kwargs)``; ``arg_leaves``/``arg_treedef`` flatten ``(args, kwargs)``.
    ``memory_checked=False`` allows arrays larger than memory (for programs run in chunks).
    ``argument_views``: a result that is an argument array or a basic-indexing view of one
    (``return x``, ``return x[1:]``) becomes a ("view", (leaf, keys)) slot: the caller gets its
    own array or that view of it (after write-back), as NumPy returns the argument itself or a
    view sharing its memory.
    ``names_outlive``: every name a loop binds is an output (a cell's namespace), so a loop
    that binds one to ``x[mask]`` is unrolled (see loops.py)."""
    ctx = TraceContext(name, filename_display)
    ctx.memory_checked = memory_checked
    ctx.names_outlive = names_outlive
    ctx.size_observations = size_observations     # (a probe of unknown dimensions: observed_sizes.py)
    tracers: dict[int, Tracer] = {}        # id(array) -> Tracer: the same array, the same Tracer
    traced_leaves, param_leaves = [], []
    for i, leaf in enumerate(arg_leaves):
        if is_array_leaf(leaf):
            arr = np.asarray(leaf)
            if id(leaf) not in tracers:
                pname = leaf_names[i] if leaf_names else f"arg{i}"
                shape = Shape(from_numpy_dtype(arr.dtype), arr.shape)
                kind = ScalarTracer if isinstance(leaf, np.generic) else Tracer
                tracers[id(leaf)] = kind(ctx, ctx.parameter(shape, _hlo_name(pname)))
                param_leaves.append(i)
            traced_leaves.append(tracers[id(leaf)])
        else:
            traced_leaves.append(leaf)
    args, kwargs = tree_unflatten(arg_treedef, traced_leaves)
    active = TraceContext.active.set(ctx)
    try:
        result = fn(*args, **kwargs)
    except (ValueError, TypeError) as e:
        # NumPy turns our error from a Tracer's __float__ (``a[i] = traced`` into a NumPy
        # array) into "setting an array element with a sequence"; ours says what and where.
        if isinstance(e.__cause__, TraceError):
            raise e.__cause__ from None
        raise
    finally:
        TraceContext.active.reset(active)

    out_leaves, out_treedef = tree_flatten(result)
    outputs, out_slots, python_ints = [], [], set()
    params = {id(tracers[id(arg_leaves[i])]): i for i in param_leaves
              if isinstance(arg_leaves[i], np.ndarray)} if argument_views else {}
    for leaf in out_leaves:
        view = _argument_view(leaf, params) if params else None
        if view is not None:
            out_slots.append(("view", view))
        elif isinstance(leaf, Selection):          # x[mask]: compacted on the host after the run
            out_slots.append(("selection", len(outputs)))
            outputs += [leaf.values.instr, leaf.mask.instr]
        elif isinstance(leaf, RaggedSlice):
            raise leaf.refusal("returning it")
        elif isinstance(leaf, SelectionAfterLoop):
            leaf.refuse()
        elif isinstance(leaf, Tracer):
            if isinstance(leaf, IndexTracer):
                python_ints.add(len(outputs))
            out_slots.append(("out", len(outputs)))
            outputs.append(leaf.instr)
        else:
            out_slots.append(("static", leaf))
    writebacks = []
    for i in param_leaves:
        t = tracers[id(arg_leaves[i])]
        if t.version > 0:
            _check_writable(arg_leaves, i, param_leaves, leaf_names)
            writebacks.append((i, len(outputs)))
            outputs.append(t.instr)
    checks = []
    for check in ctx.checks:
        checks.append((len(outputs), check.fail))
        outputs.append(check.value)
    b = ctx.builder
    b.location = None
    if len(outputs) == 1:
        root = outputs[0]
        if root.opcode == "parameter":          # the root must be a new value
            root = b.op("copy", root)
    else:
        root = b.op("tuple", *outputs)
    module = Module(name, b.build(root))
    module.make_names_unique()
    return TracedProgram(module, param_leaves, out_treedef, out_slots, writebacks, checks,
                         ctx.loop_decisions, frozenset(python_ints))


def _argument_view(t, params: dict) -> tuple[int, tuple] | None:
    """(argument leaf, NumPy keys) when ``t`` is an argument array (no keys) or ``arg[k1][k2]...``
    by basic indexing of one (not of a value computed from it), else None."""
    if not isinstance(t, Tracer):
        return None
    keys = []
    while t.view is not None and t.view.key is not None:
        keys.append(t.view.key)
        t = t.view.base
    if t.view is not None or id(t) not in params:
        return None
    # (no keys: the argument array itself, after the write-back when the program wrote into it;
    # NumPy returns the caller's own object, and a copy of a large written argument cost as
    # much as the program: npbench's kernels return their in-place outputs, gemver 32 -> 3 ms)
    return params[id(t)], tuple(reversed(keys))


def _hlo_name(name: str) -> str:
    cleaned = "".join(c if c.isalnum() or c in "_.-" else "_" for c in name)
    return cleaned if cleaned and not cleaned[0].isdigit() else f"p_{cleaned}"


def _check_writable(leaves, i, param_leaves, names):
    arr = leaves[i]
    label = names[i] if names else f"argument {i}"
    if isinstance(arr, np.generic) or not arr.flags.writeable:
        raise ValueError(f"assignment destination is read-only ({label})")
    for j in param_leaves:
        other = leaves[j]
        if j != i and other is not arr and isinstance(other, np.ndarray) and np.shares_memory(arr, other):
            other_label = names[j] if names else f"argument {j}"
            raise NotCompilableError(
                f"{label} is written, and {other_label} shares its memory: the compiled cell "
                "cannot follow writes between overlapping arrays",
                hint="pass the base array once and slice it inside the cell, or .copy() one of them")
