"""Turn a Python function (or a cell, see ``cell.py``) into an HLO module.

Arguments are flattened into leaves: arrays (and NumPy scalars) become entry parameters,
everything else is a compile-time constant.  The function runs on Tracers; traced leaves of
its result become the entry's outputs, and so does the final value of every argument the
function wrote into (``a += b``, ``C[:] = ...``), which the runtime copies back into the
caller's arrays afterwards, so the caller sees NumPy's in-place semantics.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..errors import NotCompilableError, TraceError
from ..hlo import Module, Shape, from_numpy_dtype
from .context import TraceContext
from .tracer import ScalarTracer, Tracer

# ---- pytrees: nested tuples / lists / dicts of leaves -------------------------------------------


@dataclass(frozen=True)
class TreeDef:
    kind: str                  # "leaf", "tuple", "list", "dict"
    children: tuple = ()
    keys: tuple = ()


LEAF = TreeDef("leaf")


def tree_flatten(tree) -> tuple[list, TreeDef]:
    if isinstance(tree, (tuple, list)) and not hasattr(tree, "_fields"):
        flat, defs = [], []
        for item in tree:
            f, d = tree_flatten(item)
            flat += f
            defs.append(d)
        return flat, TreeDef(type(tree).__name__, tuple(defs))
    if isinstance(tree, dict):
        flat, defs = [], []
        for key in tree:
            f, d = tree_flatten(tree[key])
            flat += f
            defs.append(d)
        return flat, TreeDef("dict", tuple(defs), tuple(tree))
    return [tree], LEAF


def tree_unflatten(treedef: TreeDef, leaves) -> Any:
    it = iter(leaves)

    def build(d: TreeDef):
        if d.kind == "leaf":
            return next(it)
        items = [build(c) for c in d.children]
        if d.kind == "dict":
            return dict(zip(d.keys, items))
        return tuple(items) if d.kind == "tuple" else items
    return build(treedef)


def is_array_leaf(x) -> bool:
    return isinstance(x, (np.ndarray, np.generic)) and not isinstance(x, (str, bytes))


# ---- the traced program -----------------------------------------------------------------------


@dataclass
class TracedProgram:
    """What tracing produced, and how to map values in and out of the compiled module."""
    module: Module
    param_leaves: list[int]           # entry parameter i <- flat argument leaf param_leaves[i]
    out_treedef: TreeDef              # structure of the function's result
    out_slots: list                   # per result leaf: ("out", k) for output k or ("static", value)
    writebacks: list[tuple[int, int]] = field(default_factory=list)  # (arg leaf, output k)
    # (line, "rolled" | "unrolled", why) per Python loop over traced values (control.py)
    loop_decisions: list[tuple[int, str, str]] = field(default_factory=list)


def leaf_signature(x) -> tuple:
    """What a compiled program depends on about an argument leaf."""
    if is_array_leaf(x):
        arr = np.asarray(x)
        return ("array", arr.shape, arr.dtype.str)
    try:
        hash(x)
    except TypeError:
        raise NotCompilableError(
            f"an argument of type {type(x).__name__} is neither an array nor a hashable "
            "constant", hint="pass arrays, scalars, or tuples/lists/dicts of them") from None
    return ("static", type(x).__name__, x)


def alias_pattern(leaves: list) -> tuple[int, ...]:
    """Which array leaves are the same object: a trace passes each array once, so a program
    traced for ``f(x, x)`` must not be reused for ``f(x, y)``."""
    first: dict[int, int] = {}
    return tuple(first.setdefault(id(leaf), i) for i, leaf in enumerate(leaves) if is_array_leaf(leaf))


def trace(fn: Callable, arg_leaves: list, arg_treedef: TreeDef, *, name: str,
          leaf_names: list[str] | None = None,
          filename_display: Callable[[str], str | None] | None = None) -> TracedProgram:
    """Trace ``fn(*args, **kwargs)``; ``arg_leaves``/``arg_treedef`` flatten ``(args, kwargs)``."""
    ctx = TraceContext(name, filename_display)
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
    outputs, out_slots = [], []
    for leaf in out_leaves:
        if isinstance(leaf, Tracer):
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
    return TracedProgram(module, param_leaves, out_treedef, out_slots, writebacks, ctx.loop_decisions)


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
