"""What an auto-clustered session records and the helpers its parts share: the cost-model
constants, the log records (``Op``, ``ClusterRun``, ``Break``, ``SessionLog``), where in the user's
code an operation is, and the small tree and view helpers (session.py records, flush.py compiles
and runs clusters, replay.py runs them eagerly)."""

from __future__ import annotations

import dis
import linecache
import math
import operator
import os
import sys
import sysconfig
from dataclasses import dataclass, field

import numpy as np

from ..frontend.context import TraceContext
from ..hlo import SourceLocation
from ..hlo.ir import Computation
from .lazy import LazyArray, LazyState

# Cost model: an operation on concrete arrays starts a cluster only when it touches at least
# this many elements; a cluster whose work (elements read or written by its NumPy-level
# operations, summed) is below this, or that is one operation, runs eagerly.  Recording
# costs tens of microseconds per operation in Python and a compiled run about as much per
# cluster; at about a nanosecond per element and operation for NumPy, smaller clusters
# cannot win back what recording them cost.
MIN_CLUSTER_WORK = 1 << 17
# The same threshold for a function whose repeated calls replay their clusters from the tape
# (tape.py): a replayed operation costs a few microseconds, not tens, so operations on
# arrays four times smaller already win (an operation on 32768 float64 elements costs NumPy
# 15-30 us).  The first call still records (and compiles); the measured choice (choice.py)
# keeps calls that do not win at NumPy's speed.
MIN_REPLAYED_WORK = 1 << 15
# Cluster size (like TensorFlow's --tf_xla_max_cluster_size): compile time grows with the
# graph, and a time loop without breaks would otherwise be one graph of every step.  Past
# SOFT_MAX_OPS a cluster ends where it began, at the same source line (in a loop: the
# clusters then hold whole iterations and repeat one structure, compiled once); past twice
# that, where the source jumps back (the first cluster of a loop begins before it); past
# HARD_MAX_OPS, anyway.
SOFT_MAX_OPS = 256
HARD_MAX_OPS = 1024
# Plain NumPy arrays (not stand-ins) entering a pending graph are copied first: the user may
# write into them before the graph runs.  Smaller ones become constants of the cluster.
MAX_CONSTANT_ELEMENTS = 64

_NBXLA_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
LIBRARY_DIRS = tuple({os.path.abspath(p) + os.sep for p in
                       (sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"],
                        sysconfig.get_paths()["platlib"], os.path.dirname(np.__file__))})
_STORE_SUBSCR = dis.opmap["STORE_SUBSCR"]
WRITING_FUNCTIONS = frozenset({np.copyto, np.put, np.place, np.putmask, np.fill_diagonal,
                                np.put_along_axis})
# Views cost nothing in NumPy: on concrete arrays they run eagerly (and stay views).
VIEW_FUNCTIONS = frozenset({np.reshape, np.transpose, np.swapaxes, np.moveaxis, np.squeeze,
                             np.expand_dims, np.ravel, np.broadcast_to, np.atleast_1d,
                             np.atleast_2d, np.atleast_3d, np.real, np.imag})
VIEW_METHODS = frozenset({"T", "mT", "real", "imag", "reshape", "transpose", "swapaxes",
                           "squeeze", "ravel", "diagonal"})
# Products are BLAS calls either way, with nothing to fuse into them: on concrete arrays they
# run eagerly (NumPy's own broadcasting of batched products is also better than ours).
PRODUCTS = frozenset({np.matmul, np.dot, np.einsum, np.tensordot, np.inner, np.outer,
                       np.vdot, np.kron})


class OpContext(TraceContext):
    """A trace context whose instructions take the source line of the operation being
    recorded (found once per operation, not once per emitted instruction)."""

    op_location = None

    def user_location(self):
        return self.op_location if self.op_location is not None else super().user_location()


class Unsupported(Exception):
    """The frontend cannot record this operation; ``reason`` says why."""


class Slot:
    """Stands for one pending value in the log of NumPy calls (the eager replay fills it)."""
    __slots__ = ()


@dataclass
class Op:
    """One recorded NumPy-level operation, replayable eagerly."""
    fn: object
    args: tuple                     # LazyArrays replaced: pending -> Slot, concrete -> its array
    kwargs: dict
    outs: list                      # per result leaf: the Slot it fills, or None
    location: SourceLocation | None
    work: int


@dataclass
class ClusterRun:
    """One flush: a cluster executed (compiled or replayed eagerly)."""
    key: object
    ops: int
    work: int
    lines: list                      # SourceLocations of its operations
    compiled: bool
    why_eager: str = ""
    compile_ms: float = 0.0
    run_ms: float = 0.0
    hlo_instructions: int = 0
    kernels: int = 0
    compilation: object = None
    measured: str = ""               # the measured choice: compiled vs eager times per run
    gain_ms: float = 0.0             # (measured) eager minus compiled time of one run


@dataclass
class Break:
    """A graph break: the pending graph had to run because Python needed a value, or an
    operation ran eagerly because it cannot be compiled."""
    reason: str
    location: SourceLocation | None
    flushed: bool
    eager_op: str | None = None


@dataclass
class SessionLog:
    """What one session did, in order (read by ``report.ClusterReport``)."""
    name: str
    clusters: list[ClusterRun] = field(default_factory=list)
    breaks: list[Break] = field(default_factory=list)
    eager_work: int = 0
    whole: str = ""          # whether (or why not) the function ran compiled whole (whole.py)


def user_location(filename_display=None, line_offsets=None) -> SourceLocation | None:
    """The innermost frame of the user's code: outside nbxla, NumPy and installed libraries."""
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        filename = code.co_filename
        if not filename.startswith(_NBXLA_DIR) and not filename.startswith(LIBRARY_DIRS) \
                and not filename.startswith("<frozen"):
            key = (code, frame.f_lineno, filename_display)
            location = _LOCATIONS.get(key)
            if location is None:
                shown = filename_display(filename) if filename_display else None
                location = _LOCATIONS[key] = SourceLocation(
                    shown or filename, frame.f_lineno - (line_offsets or {}).get(filename, 0),
                    None, code.co_name, linecache.getline(filename, frame.f_lineno) or None)
                if len(_LOCATIONS) > 100000:
                    _LOCATIONS.clear()
            return location
        frame = frame.f_back
    return None


# (code object, line, display) -> SourceLocation: one per source line, not one per operation.
_LOCATIONS: dict = {}


def library_caller() -> str | None:
    """The library function the user's code called, when a library asked for values:
    ``scipy.linalg._basic.solve_banded``."""
    frame, callee = sys._getframe(1), None
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename.startswith(_NBXLA_DIR) or filename.startswith("<frozen"):
            frame = frame.f_back
            continue
        if not filename.startswith(LIBRARY_DIRS):
            break
        callee = frame
        frame = frame.f_back
    if callee is None or callee.f_code.co_filename.startswith(os.path.dirname(np.__file__)):
        return None
    module = callee.f_globals.get("__name__", "?")
    return f"{module}.{callee.f_code.co_name}"


def storing_item() -> bool:
    """Is the user's code in the middle of ``a[key] = value``?  (NumPy asks the value for
    its array when ``a`` is a NumPy array.)"""
    frame = sys._getframe(1)
    while frame is not None and (frame.f_code.co_filename.startswith(_NBXLA_DIR) or
                                 frame.f_code.co_filename.startswith(LIBRARY_DIRS)):
        frame = frame.f_back
    if frame is None:
        return False
    code = frame.f_code.co_code
    return 0 <= frame.f_lasti < len(code) and code[frame.f_lasti] == _STORE_SUBSCR


def same_line(a: SourceLocation | None, b: SourceLocation | None) -> bool:
    return a is not None and b is not None and (a.file, a.line) == (b.file, b.line)


def jumps_back(previous: SourceLocation | None, current: SourceLocation | None) -> bool:
    """Does ``current`` come before ``previous`` in the same file (a loop's next iteration,
    or a call to a helper defined above)?"""
    return previous is not None and current is not None and previous.file == current.file \
        and current.line < previous.line


def flatten(tree, leaves):
    """Leaves of nested tuples/lists/dicts (the shapes NumPy arguments come in)."""
    if isinstance(tree, (tuple, list)):
        for item in tree:            # (leaves appended here: one call per container, not per leaf)
            if isinstance(item, (tuple, list, dict)):
                flatten(item, leaves)
            else:
                leaves.append(item)
    elif isinstance(tree, dict):
        for item in tree.values():
            if isinstance(item, (tuple, list, dict)):
                flatten(item, leaves)
            else:
                leaves.append(item)
    else:
        leaves.append(tree)
    return leaves


_CONTAINERS = (tuple, list, dict)


def tree_map(tree, fn):
    """``tree`` (nested tuples/lists/dicts) with ``fn`` applied to every leaf."""
    kind = type(tree)
    if kind is tuple:          # (the common case, flat arguments, without recursion)
        return tuple([tree_map(item, fn) if type(item) in _CONTAINERS else fn(item)
                      for item in tree])
    if kind is dict:
        return {k: tree_map(v, fn) if type(v) in _CONTAINERS else fn(v) for k, v in tree.items()}
    if kind is list:
        return [tree_map(item, fn) for item in tree]
    if isinstance(tree, tuple) and not hasattr(tree, "_fields"):     # tuple subclasses
        return tuple(tree_map(item, fn) for item in tree)
    if isinstance(tree, (list, dict)):
        return tree_map(dict(tree) if isinstance(tree, dict) else list(tree), fn)
    return fn(tree)


def leaf_size(x) -> int:
    shape = getattr(x, "shape", None)
    return math.prod(shape) if shape is not None else 1


def ufunc_name(ufunc: np.ufunc) -> str:
    """``np.add``, or ``scipy.special.erf`` for a ufunc from outside NumPy."""
    if getattr(np, ufunc.__name__, None) is ufunc:
        return f"np.{ufunc.__name__}"
    special = sys.modules.get("scipy.special")
    if special is not None and getattr(special, ufunc.__name__, None) is ufunc:
        return f"scipy.special.{ufunc.__name__}"
    return f"ufunc {ufunc.__name__}"


def op_label(fn) -> str:
    if isinstance(fn, np.ufunc):
        return ufunc_name(fn)
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, np.ufunc):
        return f"{ufunc_name(owner)}.{fn.__name__}"
    name = getattr(fn, "__name__", repr(fn))
    module = getattr(fn, "__module__", "") or ""
    if module.startswith("numpy"):
        return f"np.{name}"
    if name in ("getitem", "setitem"):
        return {"getitem": "x[...]", "setitem": "x[...] = v"}[name]
    return f"{module}.{name}" if module and not name.startswith("ndarray.") else name


def fingerprint(comp, memo=None) -> tuple:
    """The structure of a computation (opcodes, shapes, operand positions, attributes and
    constants; not names or source lines), as a hashable key: the same NumPy program on
    the same shapes and dtypes gives the same fingerprint, and nothing else does."""
    memo = {} if memo is None else memo
    if id(comp) in memo:
        return memo[id(comp)]
    position, parts = {}, []
    for k, instr in enumerate(comp.instructions):
        position[id(instr)] = k
        attrs = []
        for name, value in instr.attrs.items():
            if name == "metadata":
                continue
            if isinstance(value, Computation):
                value = fingerprint(value, memo)
            elif isinstance(value, tuple) and value and isinstance(value[0], Computation):
                value = tuple(fingerprint(c, memo) for c in value)
            elif isinstance(value, np.ndarray):
                value = (value.dtype.str, value.shape, value.tobytes())
            attrs.append((name, value))
        parts.append((instr.opcode, instr.shape, tuple(position[id(o)] for o in instr.operands),
                      tuple(attrs)))
    memo[id(comp)] = result = (tuple(parts), position[id(comp.root)])
    return result
GETITEM = operator.getitem
# Python values an operation's lowering may return beside arrays, kept by the tape as they are.
TAPE_VALUES = (bool, int, float, complex, str, type(None))


def root_of(x: LazyArray) -> LazyArray:
    """The array ``x`` is a view of (itself when it is no view)."""
    while x.state.root is not None:
        x = x.state.root[0]
    return x


class PlainParam:
    """A plain NumPy array as a parameter of the pending graph: the array (kept, so that its
    id stays unique) and the snapshot of its values the graph reads."""
    __slots__ = ("array", "state")

    def __init__(self, array: np.ndarray):
        self.array = array
        self.state = LazyState(None, array.copy() if array.flags.writeable else array)


class ValueMeta:
    """Shape and dtype of a replayed value (tape.py), before it is computed."""
    __slots__ = ("shape", "dtype")

    def __init__(self, shape, dtype):
        self.shape, self.dtype = shape, dtype


class ViewRecipe:
    """How to make the view ``fn(*args, **kwargs)`` of ``base`` from another value of it (a
    NumPy array or a Tracer): called with that value.  It keeps the call, so that the tape's
    key of the view (``Session._view_key``) can be made only when a graph uses the view."""
    __slots__ = ("fn", "args", "kwargs", "base")

    def __init__(self, fn, args, kwargs, base):
        self.fn, self.args, self.kwargs, self.base = fn, args, kwargs, base

    def __call__(self, value):
        base = self.base
        sub = tree_map((tuple(self.args), self.kwargs), lambda x: value if x is base else x)
        return self.fn(*sub[0], **sub[1])

# A view's tape key (LazyState.view_key) not made yet: made from its recipe when a graph
# first numbers the view (most views made eagerly, ``x[2:-2]`` of a concrete array, are).
VIEW_KEY_LATER = object()
_PLAIN_INDEX = (int, type(None), type(Ellipsis))


def keyed_later(args, kwargs) -> bool:
    """Can a view's key wait (its call's arguments cannot change meanwhile: stand-ins, ints,
    None, ..., slices of ints and tuples of these)?"""
    if kwargs:
        return False
    for a in args:
        kind = type(a)
        if kind is LazyArray or kind in _PLAIN_INDEX:
            continue
        if kind is slice:
            if type(a.start) in _PLAIN_INDEX and type(a.stop) in _PLAIN_INDEX and \
                    type(a.step) in _PLAIN_INDEX:
                continue
            return False
        if kind is tuple and keyed_later(a, None):
            continue
        return False
    return True


def write_targets(fn, args, kwargs, kind, ufunc_method) -> list:
    """The stand-ins an operation writes into."""
    targets = []
    if kind in ("setitem", "write") or fn in WRITING_FUNCTIONS or ufunc_method == "at":
        targets.append(args[0])
    if "out" in kwargs:
        targets.extend(flatten(kwargs["out"], []))
    return [x for x in targets if isinstance(x, LazyArray)]


def reachable(root) -> int:
    seen, stack = set(), [root]
    while stack:
        instr = stack.pop()
        if id(instr) not in seen:
            seen.add(id(instr))
            stack.extend(instr.operands)
    return len(seen) - 1          # (not the output tuple)


def ident(name: str) -> str:
    cleaned = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return cleaned if cleaned and not cleaned[0].isdigit() else f"f_{cleaned}"
