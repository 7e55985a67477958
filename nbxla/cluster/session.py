"""One auto-clustered run of a function or cell: the pending graph, flushes, clusters, breaks.

Operations on stand-in arrays (``LazyArray``) come to ``Session.dispatch``, which either

* **records** them: the frontend's lowering rules run on Tracers of the session's pending
  graph (an HLO computation being built), and the operation is also logged as the NumPy call
  it was, so the graph can be replayed eagerly; or
* **runs them eagerly** with NumPy, when the frontend cannot lower them (a graph break) or
  when nothing is pending and the arrays are too small to be worth compiling; or
* **replays them** from the tape of earlier calls (tape.py): a known operation only makes its
  result stand-ins, and the flush runs the cluster compiled then; anything unknown
  *materializes* the replayed operations (records them) and recording goes on.

A *flush* turns the pending graph into a cluster: the values still alive become its outputs,
it is compiled (cached by its structure, shapes and dtypes) and run on the concrete inputs
(its first run in the process checked against its eager replay: one that differs runs
eagerly from then on, and the report says so),
or, when its work is below the cost model's threshold, the compiler refuses it, or it was
measured faster so (choice.py), replayed eagerly with NumPy.  Either way every alive
stand-in ends up concrete, writes into concrete arrays land in them (in program order), and
views stay views.
"""

from __future__ import annotations

import dis
import linecache
import math
import operator
import os
import sys
import sysconfig
import time
import warnings
import weakref
from dataclasses import dataclass, field

import numpy as np

from ..compiler import compile_module
from ..errors import NbxlaError, TraceError
from ..frontend.context import TraceContext
from ..frontend.selection import Selection
from ..frontend.tracer import Tracer
from ..hlo import Module, Shape, SourceLocation, from_numpy_dtype
from ..hlo.ir import Computation
from ..runtime.cache import DEFAULT_CACHE, CacheKey
from ..runtime.host_memory import memory_owner
from ..testing import SharedCopies, differences
from .choice import ClusterTiming
from .create import LIKE, create_like, filled
from .lazy import LazyArray
from .tape import FlushEntry, NoKey, Tape, key_of

# Cost model: an operation on concrete arrays starts a cluster only when it touches at least
# this many elements; a cluster whose work (elements read or written by its NumPy-level
# operations, summed) is below this, or that is one operation, runs eagerly.  Recording
# costs tens of microseconds per operation in Python and a compiled run about as much per
# cluster; at about a nanosecond per element and operation for NumPy, smaller clusters
# cannot win back what recording them cost.
MIN_CLUSTER_WORK = 1 << 17
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
_WRITING_FUNCTIONS = frozenset({np.copyto, np.put, np.place, np.putmask, np.fill_diagonal,
                                np.put_along_axis})
# Views cost nothing in NumPy: on concrete arrays they run eagerly (and stay views).
_VIEW_FUNCTIONS = frozenset({np.reshape, np.transpose, np.swapaxes, np.moveaxis, np.squeeze,
                             np.expand_dims, np.ravel, np.broadcast_to, np.atleast_1d,
                             np.atleast_2d, np.atleast_3d, np.real, np.imag})
_VIEW_METHODS = frozenset({"T", "mT", "real", "imag", "reshape", "transpose", "swapaxes",
                           "squeeze", "ravel", "diagonal"})
# Products are BLAS calls either way, with nothing to fuse into them: on concrete arrays they
# run eagerly (NumPy's own broadcasting of batched products is also better than ours).
_PRODUCTS = frozenset({np.matmul, np.dot, np.einsum, np.tensordot, np.inner, np.outer,
                       np.vdot, np.kron})


class _OpContext(TraceContext):
    """A trace context whose instructions take the source line of the operation being
    recorded (found once per operation, not once per emitted instruction)."""

    op_location = None

    def user_location(self):
        return self.op_location if self.op_location is not None else super().user_location()


class _Unsupported(Exception):
    """The frontend cannot record this operation; ``reason`` says why."""


class _Slot:
    """Stands for one pending value in the log of NumPy calls (the eager replay fills it)."""
    __slots__ = ()


@dataclass
class Op:
    """One recorded NumPy-level operation, replayable eagerly."""
    fn: object
    args: tuple                     # LazyArrays replaced: pending -> _Slot, concrete -> its array
    kwargs: dict
    outs: list                      # per result leaf: the _Slot it fills, or None
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


def _library_caller() -> str | None:
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


def _storing_item() -> bool:
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


def _same_line(a: SourceLocation | None, b: SourceLocation | None) -> bool:
    return a is not None and b is not None and (a.file, a.line) == (b.file, b.line)


def _jumps_back(previous: SourceLocation | None, current: SourceLocation | None) -> bool:
    """Does ``current`` come before ``previous`` in the same file (a loop's next iteration,
    or a call to a helper defined above)?"""
    return previous is not None and current is not None and previous.file == current.file \
        and current.line < previous.line


def flatten(tree, leaves):
    """Leaves of nested tuples/lists/dicts (the shapes NumPy arguments come in)."""
    if isinstance(tree, (tuple, list)):
        for item in tree:
            flatten(item, leaves)
    elif isinstance(tree, dict):
        for item in tree.values():
            flatten(item, leaves)
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


def _size(x) -> int:
    shape = getattr(x, "shape", None)
    return math.prod(shape) if shape is not None else 1


def _ufunc_name(ufunc: np.ufunc) -> str:
    """``np.add``, or ``scipy.special.erf`` for a ufunc from outside NumPy."""
    if getattr(np, ufunc.__name__, None) is ufunc:
        return f"np.{ufunc.__name__}"
    special = sys.modules.get("scipy.special")
    if special is not None and getattr(special, ufunc.__name__, None) is ufunc:
        return f"scipy.special.{ufunc.__name__}"
    return f"ufunc {ufunc.__name__}"


def op_label(fn) -> str:
    if isinstance(fn, np.ufunc):
        return _ufunc_name(fn)
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, np.ufunc):
        return f"{_ufunc_name(owner)}.{fn.__name__}"
    name = getattr(fn, "__name__", repr(fn))
    module = getattr(fn, "__module__", "") or ""
    if module.startswith("numpy"):
        return f"np.{name}"
    if name in ("getitem", "setitem"):
        return {"getitem": "x[...]", "setitem": "x[...] = v"}[name]
    return f"{module}.{name}" if module and not name.startswith("ndarray.") else name


class Session:
    """The pending graph of one auto-clustered run and its log."""

    def __init__(self, name: str, device: str = "cpu", cache=None, filename_display=None,
                 line_offsets=None, min_work: int = MIN_CLUSTER_WORK, measure: bool = True,
                 tape: Tape | None = None):
        self.name, self.device = name, device
        self.tape = tape                 # earlier calls' recordings: replay them (tape.py)
        self.measure = measure           # time clusters both ways and run the faster (choice.py)
        self.cache = cache or DEFAULT_CACHE
        self.filename_display, self.line_offsets = filename_display, line_offsets or {}
        self.min_work = min_work
        self.log = SessionLog(name)
        self.epoch = 0
        # Set when the run has ended: stand-ins that escaped it (in a global, an object's
        # attribute) then compute eagerly, so nothing stays pending with no flush to come.
        self.closed = False
        self.owners = None               # id(array) -> the stand-in holding it (weak), once needed
        self._reset()

    def _reset(self):
        self.ctx: TraceContext | None = None
        self.members: list = []          # weakrefs to LazyArrays with a node in this epoch's graph
        self.held: list = []             # the concrete ones among them, held until the flush
        self.params: list = []           # entry parameter i <- this array
        self.plain: dict[int, Tracer] = {}   # id(plain array) -> its parameter (same array, same node)
        self.keep: list = []             # the plain arrays above, kept alive so ids stay unique
        self.ops: list[Op] = []
        self.work = 0
        # The tape (tape.py): the trie node this epoch's keyed operations reached (None: not
        # keyed), whether the epoch is still replayed from it, and the epoch's numbering.
        self.node = self.tape.root if self.tape is not None else None
        self.replaying = self.node is not None
        self.numbered: dict = {}         # number -> concrete stand-in numbered this epoch
        self.next_number = 0
        self.param_owners: list = []     # per parameter: the stand-in it holds, or None
        self.replayed: list = []         # while replaying: (op, keyed args, kwargs, out numbers, weakrefs)
        self.plain_params: dict = {}     # id(plain array) -> _PlainParam (its snapshot, numbered)
        # While replaying, what Tracer versions tell when recording: per root array (by id),
        # how many writes the graph has made into it, and per concrete stand-in that entered
        # the graph, that count when it entered (it is pending once they differ).
        self.root_writes: dict = {}
        self.joined: dict = {}

    def location(self) -> SourceLocation | None:
        return user_location(self.filename_display, self.line_offsets)

    # ---- stand-ins ------------------------------------------------------------------------------

    def wrap(self, array: np.ndarray) -> LazyArray:
        x = LazyArray(self, array)
        self._own(x, array)
        return x

    def _own(self, x: LazyArray, array: np.ndarray) -> None:
        if self.owners is None:
            self.owners = weakref.WeakValueDictionary()
        self.owners[id(array)] = x

    def adopt(self, array: np.ndarray):
        """A NumPy array that came back from a call: the stand-in already holding it, a new
        stand-in when it is large, else the array itself."""
        owner = self.owners.get(id(array)) if self.owners is not None else None
        if owner is not None and owner._value is array:
            return owner
        return self.wrap(array) if array.size >= self.min_work else array

    def pending(self, x: LazyArray) -> bool:
        """Does ``x``'s value depend on graph work not yet run?"""
        if x._epoch != self.epoch:
            return False
        if x._tracer is not None:
            return x._value is None or x._entry[0].version != x._entry[1]
        return self.replaying and (x._value is None or self.joined.get(id(x)) !=
                                   self.root_writes.get(id(_root_of(x)), 0))

    def in_graph(self, x: LazyArray) -> bool:
        """Does the pending graph read ``x`` (so that writing into it must wait)?"""
        return x._epoch == self.epoch and (x._tracer is not None or self.replaying)

    def _context(self) -> TraceContext:
        if self.ctx is None:
            self.ctx = _OpContext(f"{_ident(self.name)}_cluster", self.filename_display)
            self.ctx.line_offsets = self.line_offsets
        return self.ctx

    def _join(self, x: LazyArray, tracer: Tracer) -> Tracer:
        root = tracer                     # writes to x or to any base above it show here
        while root.view is not None:
            root = root.view.base
        x._tracer, x._entry, x._epoch = tracer, (root, root.version), self.epoch
        self.members.append(weakref.ref(x))
        if x._value is not None:
            # A concrete array written in the graph must get its new values even when no
            # Python name holds its stand-in any more (its memory may be the caller's).
            self.held.append(x)
        return tracer

    def tracer_of(self, x: LazyArray) -> Tracer:
        """``x``'s node in the pending graph (a concrete array enters as a parameter; a view
        enters as the same view of its base's node, so writes through it reach the base)."""
        if x._epoch == self.epoch and x._tracer is not None:
            return x._tracer
        if x._root is not None:
            base, recipe = x._root
            view = recipe(self.tracer_of(base))
            if isinstance(view, Tracer):
                return self._join(x, view)
        return self._join(x, self._parameter(x._value, "p", x))

    def _parameter(self, array: np.ndarray, name: str, owner=None) -> Tracer:
        ctx = self._context()
        self.params.append(array)
        self.param_owners.append(owner)
        shape = Shape(from_numpy_dtype(array.dtype), array.shape)
        return Tracer(ctx, ctx.parameter(shape, f"{name}{len(self.params) - 1}"))

    def _plain(self, array: np.ndarray) -> Tracer:
        tracer = self.plain.get(id(array))
        if tracer is None:
            self.keep.append(array)
            param = self.plain_params.get(id(array)) or _PlainParam(array)
            tracer = self.plain[id(array)] = self._parameter(param._value, "c", param)
        return tracer

    def _number_plain(self, array: np.ndarray) -> int:
        """A plain NumPy array's number in this epoch: it enters the graph as a parameter
        holding a snapshot of its values (taken now: the program may write it later)."""
        param = self.plain_params.get(id(array))
        if param is None:
            param = self.plain_params[id(array)] = _PlainParam(array)
            param._num, param._num_epoch = self.next_number, self.epoch
            self.next_number += 1
            self.numbered[param._num] = param
            self._entries.append(("plain", array.shape, array.dtype.str))
        return param._num

    # ---- dispatch ---------------------------------------------------------------------------

    def created(self, shape: tuple, value: np.generic) -> LazyArray:
        """An array of ``shape`` filled with ``value`` (``np.zeros``...: create.py), made
        when first used: it enters the pending graph of that moment (so that one made before
        a graph break and used after it is no output of the cluster before)."""
        x = LazyArray(self)
        x._spec, x._fill = _Meta(shape, value.dtype), (shape, value)
        return x

    def _enter(self, x: LazyArray) -> None:
        """A created array's first use: record its making (or, the run over, make it)."""
        shape, value = x._fill
        x._fill = None
        if self.closed:
            x._value = filled(shape, value)
            return
        made = self.dispatch(filled, (shape, value), {}, kind="create", target=x)
        if made is not x:                # (recording refused: made eagerly)
            x._value = made._value if isinstance(made, LazyArray) else made

    def dispatch(self, fn, args, kwargs, kind: str, ufunc_method: str = "__call__",
                 target: LazyArray | None = None):
        leaves = flatten((args, kwargs), [])
        lazies = [x for x in leaves if isinstance(x, LazyArray)]
        for x in lazies:
            if x._fill is not None:
                x._session._enter(x)
        foreign = [x for x in lazies if x._session is not self]
        if foreign:      # a stand-in of another (enclosing) session: make it concrete here
            args, kwargs = tree_map((args, kwargs),
                                    lambda x: np.asarray(x) if any(x is f for f in foreign) else x)
            return fn(*args, **kwargs)
        writes = kind in ("setitem", "write") or "out" in kwargs or fn in _WRITING_FUNCTIONS \
            or ufunc_method == "at"
        if self.closed:
            return self._eager(fn, args, kwargs, lazies, writes, None)
        if kind == "function" and fn in LIKE:      # (np.zeros_like...: made where first used)
            made = create_like(self, fn, args, kwargs)
            if made is not None:
                return made
        if kind != "create" and not any(self.pending(x) for x in lazies):
            if kind in ("getitem", "setitem") or fn in _VIEW_FUNCTIONS or fn in _PRODUCTS or \
                    getattr(fn, "name", None) in _VIEW_METHODS or \
                    getattr(fn, "name", None) == "dot" or \
                    self._estimate(leaves, kind, ufunc_method) < self.min_work:
                return self._eager(fn, args, kwargs, lazies, writes, None)
        location = self.location()
        self._size_cap(location)         # (before numbering: a flush starts a new epoch)
        key = None
        if self.node is not None:
            try:
                key = self._op_key(fn, args, kwargs, kind, ufunc_method)
            except NoKey:
                pass
            if self.replaying:
                taped = self.node.children.get(key) if key is not None else None
                if taped is not None:
                    return self._replay_op(taped, fn, args, kwargs, lazies, kind, ufunc_method,
                                           writes, location, target)
                refused = self.node.refused.get(key) if key is not None else None
                if refused is not None:              # a break here before: the same break
                    return self._eager(fn, args, kwargs, lazies, writes, refused)
                self._materialize()
        try:
            result, outs, _ = self._record(fn, args, kwargs, lazies, writes, ufunc_method,
                                           location, None if target is None else [target])
            if target is not None:
                self._new_number(target)
        except _Unsupported as e:
            if key is not None and self.node is not None:
                self.node.refused[key] = str(e)
            return self._eager(fn, args, kwargs, lazies, writes, str(e))
        if self.node is not None:
            self.node = None if key is None or outs is None else \
                self.tape.child(self.node, key, *outs)
        return result

    def _estimate(self, leaves, kind, ufunc_method) -> int:
        """Elements an operation on concrete arrays touches (its output's, for a ufunc)."""
        shapes = [tuple(x.shape) for x in leaves if isinstance(x, (LazyArray, np.ndarray))]
        if kind == "ufunc" and ufunc_method == "__call__":
            try:
                return math.prod(np.broadcast_shapes(*shapes))
            except ValueError:
                return 0          # NumPy will raise its own error, eagerly
        return max((math.prod(s) for s in shapes), default=0)

    # ---- the tape: keyed operations, replayed without recording (tape.py) ---------------------

    def _number(self, x: LazyArray) -> int:
        """``x``'s number in this epoch (a concrete array gets one when first seen; a view,
        after its base).  Raises NoKey for what cannot be numbered."""
        if x._num_epoch == self.epoch:
            return x._num
        if x._value is None:
            raise NoKey                  # (pending, from before this epoch was keyed)
        if x._root is not None:
            base = self._number(x._root[0])
            if x._view_key is None:
                raise NoKey
            entry = ("view", base, x._view_key)
        else:
            entry = ("array", x._value.shape, x._value.dtype.str)
        x._num, x._num_epoch = self.next_number, self.epoch
        self.next_number += 1
        self.numbered[x._num] = x
        self._entries.append(entry)
        return x._num

    def _op_key(self, fn, args, kwargs, kind, ufunc_method):
        self._entries = []               # (arrays first numbered by this operation)
        plain = self._number_plain if fn is not _GETITEM else None     # (as _record does)
        return (fn, kind, ufunc_method, key_of(args, self._number, plain=plain),
                key_of(kwargs, self._number, plain=plain) if kwargs else None,
                tuple(self._entries))

    def _new_number(self, x: LazyArray) -> None:
        x._num, x._num_epoch = self.next_number, self.epoch
        self.next_number += 1

    def _view_key(self, fn, args, kwargs, base):
        try:
            return (fn, key_of(tuple(args), None, base), key_of(kwargs, None, base))
        except NoKey:
            return None

    def _size_cap(self, location) -> bool:
        """Has the pending graph reached its size cap (``SOFT_MAX_OPS``...)?  Then flush."""
        n = len(self.ops)
        if n >= SOFT_MAX_OPS and (n >= HARD_MAX_OPS or (
                _same_line(self.ops[0].location, location) and       # (its first operation)
                not _same_line(self.ops[-1].location, location)) or (
                n >= 2 * SOFT_MAX_OPS and _jumps_back(self.ops[-1].location, location))):
            self.flush()                     # a size cap, not a graph break
            return True
        return False

    def _replay_op(self, taped, fn, args, kwargs, lazies, kind, ufunc_method, writes, location,
                   target=None):
        """An operation the tape knows: its result stand-ins (``target``, when given, is the
        one to use for its result), with no recording."""
        results, new, refs = [], [], []
        for out in taped.outs:
            if out[0] == "new":
                x = LazyArray(self) if target is None else target
                x._spec, x._slot, x._epoch = _Meta(out[1], out[2]), _Slot(), self.epoch
                self._new_number(x)
                if out[3]:
                    base = lazies[0]
                    x._root, x._view_key = (base, _recipe(fn, args, kwargs, base)), out[4]
                self.members.append(weakref.ref(x))
                results.append(x)
                new.append(x)
                refs.append(weakref.ref(x))
            elif out[0] == "owner":
                results.append(lazies[out[1]])
            else:
                results.append(out[1])
        for x in lazies:                 # (they enter the graph, views with their bases)
            while x is not None and x._value is not None and x._epoch != self.epoch:
                x._epoch = self.epoch
                self.joined[id(x)] = self.root_writes.get(id(_root_of(x)), 0)
                x = x._root[0] if x._root is not None else None
        if writes:
            for x in _write_targets(fn, args, kwargs, kind, ufunc_method):
                root = id(_root_of(x))
                self.root_writes[root] = self.root_writes.get(root, 0) + 1

        def template(x):
            if isinstance(x, LazyArray):
                return x._slot if x._value is None else x._value
            if type(x) is np.ndarray and id(x) in self.plain_params:
                return self.plain_params[id(x)]._value
            return x
        slots = iter([x._slot for x in new])
        outs = [next(slots) if out[0] == "new" else None for out in taped.outs]
        self.ops.append(Op(fn, tree_map(tuple(args), template), tree_map(kwargs, template), outs,
                           location, taped.work))
        self.work += taped.work

        def keyed(x):                    # (replayed values by slot: the op holds no stand-in)
            return x._slot if isinstance(x, LazyArray) and x._value is None else x
        self.replayed.append((fn, tree_map((tuple(args), kwargs), keyed), ufunc_method, writes,
                              location, [x._num for x in new], [x._slot for x in new], refs))
        self.node = taped.node
        return results[0] if taped.structure is None else taped.structure(results)

    def _materialize(self) -> None:
        """Stop replaying: record the operations replayed so far for real, in order, with the
        same stand-ins (or, for ones no longer alive, temporary ones)."""
        self.replaying = False
        replayed, self.replayed = self.replayed, []
        self.root_writes, self.joined = {}, {}
        if not replayed:
            return
        self.ops, self.work = [], 0
        by_slot = {}                     # id(replayed slot) -> the stand-in now recorded

        def real(x):
            return by_slot[id(x)] if type(x) is _Slot else x
        for fn, keyed, ufunc_method, writes, location, numbers, slots, refs in replayed:
            args, kwargs = tree_map(keyed, real)
            lazies = [x for x in flatten((args, kwargs), []) if isinstance(x, LazyArray)]
            _, _, made = self._record(fn, args, kwargs, lazies, writes, ufunc_method, location,
                                      targets=[r() for r in refs])
            for x, number, slot in zip(made, numbers, slots):
                x._num, x._num_epoch = number, self.epoch
                by_slot[id(slot)] = x

    def _record(self, fn, args, kwargs, lazies, writes, ufunc_method, location, targets=None):
        """Record one operation into the pending graph.  Returns its result, what the tape
        keeps of it (``(outs, structure, work)``, or None) and the new stand-ins made (in
        order; ``targets``, when given, are stand-ins to reuse for them, or None)."""
        ufunc = fn if isinstance(fn, np.ufunc) else getattr(fn, "__self__", None)
        if isinstance(ufunc, np.ufunc) and not op_label(ufunc).startswith("np."):
            raise _Unsupported(f"{op_label(ufunc)} is not a NumPy ufunc: nbxla has no lowering "
                               "for it")
        ctx = self._context()
        inputs = {id(x): self.tracer_of(x) for x in lazies}
        in_tracers = {id(t): x for x, t in ((x, inputs[id(x)]) for x in lazies)}

        def to_tracer(x):
            if isinstance(x, LazyArray):
                return inputs[id(x)]
            if type(x) is np.ndarray and x.size > MAX_CONSTANT_ELEMENTS and fn is not _GETITEM:
                return self._plain(x)
            return x
        targs, tkwargs = tree_map((tuple(args), kwargs), to_tracer)
        active = TraceContext.active.set(ctx)
        ctx.op_location = location
        try:
            result = fn(*targs, **tkwargs)
        except TraceError as e:        # (what it emitted is dead code: DCE removes it)
            raise _Unsupported(e.bare_message) from None
        except Exception as e:         # NumPy's own error (or one we do not model): run eagerly
            raise _Unsupported(f"{type(e).__name__}: {e}") from None
        finally:
            ctx.op_location = None
            TraceContext.active.reset(active)
        if any(isinstance(r, Selection) for r in (result if isinstance(result, (tuple, list)) else (result,))):
            # (x[mask] keeps its data-dependent length only inside one traced program; recorded
            # op by op, it is a break: the mask's values decide the shape)
            raise _Unsupported("boolean-mask indexing with a traced mask: the result's shape depends on the data")

        outs, work = [], max([_size(x) for x in lazies], default=0)
        taped, made = [], []             # (per result leaf: what the tape keeps; new stand-ins)
        targets_given, targets = targets, iter(targets or ())

        def wrap(r):
            nonlocal work
            if not isinstance(r, Tracer):
                outs.append(None)
                taped.append(("value", r) if type(r) in _TAPE_VALUES else None)
                return r
            owner = in_tracers.get(id(r))
            if owner is not None and writes:        # an in-place operation: the same array
                outs.append(None)
                taped.append(("owner", next(i for i, x in enumerate(lazies) if x is owner)))
                return owner
            if owner is not None:                   # np.positive(x) and the like: a new array
                r = Tracer(ctx, r.instr)
            work = max(work, math.prod(r.shape))
            out = next(targets, None)
            if out is None:
                out = LazyArray(self)
            out._spec = None
            out._slot = _Slot()
            outs.append(out._slot)
            self._join(out, r)
            out._root = self._view_root(fn, args, kwargs, lazies, inputs, r)
            if out._root is not None:
                out._view_key = self._view_key(fn, args, kwargs, lazies[0])
            else:
                out._view_key = None
            if targets_given is None:        # (materializing: the replay numbered them)
                self._new_number(out)
            made.append(out)
            taped.append(("new", tuple(r.shape), r.dtype, out._root is not None, out._view_key))
            return out
        structure = type(result) if type(result) in (tuple, list) else None
        nested = structure is not None and any(isinstance(r, (tuple, list)) for r in result)
        if isinstance(result, (tuple, list)):
            wrapped = tree_map(result, wrap)
        else:
            wrapped = wrap(result)

        def template(x):
            if isinstance(x, LazyArray):
                return x._slot if x._value is None else x._value
            if type(x) is np.ndarray and id(x) in self.plain:
                return self.params[self.plain[id(x)].instr.parameter_number]
            return x
        self.ops.append(Op(fn, tree_map(tuple(args), template), tree_map(kwargs, template), outs,
                           location, work))
        self.work += work
        tape = None if nested or any(t is None for t in taped) or (structure is None and isinstance(
            result, (tuple, list))) else (taped, structure, work)
        return wrapped, tape, made

    def _view_root(self, fn, args, kwargs, lazies, inputs, result: Tracer):
        """For a result that is a view of one input (``x[1:]``, ``x.T``): that input, and how
        to make the same view of its value (a NumPy array or a Tracer)."""
        if result.view is None or len(lazies) != 1 or result.view.base is not inputs[id(lazies[0])]:
            return None
        base = lazies[0]
        return base, _recipe(fn, args, kwargs, base)

    def _eager(self, fn, args, kwargs, lazies, writes, reason):
        location = self.location() if reason else None
        if any(self.pending(x) for x in lazies) or (writes and any(self.in_graph(x) for x in lazies)):
            self.flush(reason or f"{op_label(fn)} writes into an array the pending graph reads",
                       location or self.location(), eager_op=op_label(fn))
        elif reason:
            self.log.breaks.append(Break(reason, location, False, op_label(fn)))
        concrete = {id(x): x._value for x in lazies}
        cargs, ckwargs = tree_map((tuple(args), kwargs),
                              lambda x: concrete[id(x)] if isinstance(x, LazyArray) else x)
        result = fn(*cargs, **ckwargs)
        arrays = [r for r in flatten(result, []) if isinstance(r, np.ndarray)]
        if not arrays or any(r.base is None for r in arrays):     # (views cost no work)
            self.log.eager_work += max([_size(x) for x in lazies], default=0)
        owners = {id(x._value): x for x in lazies}

        def wrap(r):
            if type(r) is not np.ndarray:
                return r
            owner = owners.get(id(r))
            if owner is not None:
                return owner
            if r.base is not None and len(lazies) == 1 and \
                    (r.base is lazies[0]._value or r.base is lazies[0]._value.base):
                out = LazyArray(self, r)         # a view: writes through it reach its base
                base = lazies[0]
                out._root = (base, _recipe(fn, args, kwargs, base))
                if self.node is not None:
                    out._view_key = self._view_key(fn, args, kwargs, base)
                return out
            return LazyArray(self, r) if r.size >= self.min_work else r
        return tree_map(result, wrap) if isinstance(result, (tuple, list)) else wrap(result)

    # ---- concrete values ------------------------------------------------------------------------

    def concrete(self, x: LazyArray, reason: str, caller: bool = False, writes: bool = False):
        """``x``'s NumPy array, running the pending graph first when ``x`` depends on it (or,
        for ``writes``, when the graph reads ``x``)."""
        if x._fill is not None:          # (a created array not used yet: made now)
            shape, value = x._fill
            x._fill, x._value = None, filled(shape, value)
        if self.pending(x) or (writes and self.in_graph(x)):
            library = _library_caller() if caller else None
            if library:
                reason = f"{library} needs NumPy arrays (native code)"
            elif caller and _storing_item():
                reason = ("a pending value is written into a NumPy array (one no stand-in "
                          "holds: small, or made where auto mode does not see it)")
            self.flush(reason, self.location())
        return x._value

    # ---- flush: compile (or replay) the pending graph -----------------------------------------

    def flush(self, reason: str | None = None, location=None, eager_op: str | None = None) -> None:
        if reason is not None:
            self.log.breaks.append(Break(reason, location, True, eager_op))
        if self.replaying and self.ops:
            return self._flush_replayed()
        if self.ctx is None:
            return
        members = [x for x in (r() for r in self.members) if x is not None and x._epoch == self.epoch]
        roots = [x for x in members if x._root is None and (x._value is None or self.pending(x))]
        views = [x for x in members if x._root is not None and x._value is None]
        run = None
        if roots and self.ops:
            run = self._run_cluster(roots)
            if self.node is not None and all(x is not None for x in self.param_owners) and \
                    all(x._num_epoch == self.epoch for x in roots + self.param_owners):
                self.tape.remember_flush(self.node, FlushEntry(
                    run.key, run.compilation, [x._num for x in self.param_owners],
                    [x._num for x in roots]))
        self._end_epoch(members, roots, views, run)

    def _flush_replayed(self) -> None:
        """Flush a replayed graph: the tape's cluster for this point runs on the numbered
        arrays (if the values alive now are among its outputs; else record it for real)."""
        members = [x for x in (r() for r in self.members) if x is not None and x._epoch == self.epoch]
        pending = [x for x in members if x._value is None]
        needed = {x._num for x in pending if x._root is None}
        needed.update(x._num for x in self.numbered.values()
                      if type(x) is LazyArray and x._root is None and self.pending(x))
        if not needed:                   # (nothing alive depends on the graph: as flush())
            return self._end_epoch(members, [], [x for x in pending if x._root is not None], None)
        entry = next((e for e in self.node.flushes if needed <= e.root_set), None)
        if entry is None:
            self._materialize()
            return self.flush()
        by_number = dict(self.numbered)
        by_number.update((x._num, x) for x in pending)
        roots = [by_number.get(n) for n in entry.roots]
        self.params = [by_number[n]._value for n in entry.params]
        run = self._run_cluster(roots, entry)
        views = [x for x in pending if x._root is not None]
        roots = [x for x in roots if x is not None]
        self._end_epoch(members, roots, views, run)

    def _end_epoch(self, members, roots, views, run) -> None:
        for x in views:                      # created after their bases: bases are done
            x._value = x._root[1](x._root[0]._value)
        for x in roots + views:
            self._own(x, x._value)
        for x in members:
            x._tracer = x._entry = x._slot = x._spec = None
        self.epoch += 1
        self._reset()
        if run is not None:
            self.log.clusters.append(run)

    def _run_cluster(self, roots, entry: FlushEntry | None = None) -> ClusterRun:
        """Run the pending graph's cluster for ``roots`` (compiled, or replayed eagerly);
        with a tape ``entry`` (roots None where no longer alive), its cluster as compiled
        before, with no module built."""
        ops, work = self.ops, self.work
        lines = [op.location for op in ops if op.location is not None]
        if work < self.min_work or len(ops) < 2:
            why = (f"work {work} < {self.min_work} elements" if work < self.min_work else
                   "one operation, nothing to fuse") + " (cost model)"
            run = ClusterRun(None, len(ops), work, lines, False, why)
            self._replay(roots, run)
            return run
        if entry is None:
            module = self._module(roots)
            key = CacheKey("nbxla.cluster", fingerprint(module.entry), self.device)
        else:
            key = entry.key
        run = ClusterRun(key, len(ops), work, lines, True)
        refused = _REFUSED.get(key)
        if refused is None and entry is not None and entry.compilation is not None:
            compilation, compile_ms = entry.compilation, 0.0
        elif refused is None:
            if entry is not None:        # (not compiled when it was recorded: cannot be now)
                raise RuntimeError("nbxla: a replayed cluster has no compilation")
            try:
                compilation, compile_ms = self._compile(key, module)
            except NbxlaError as e:
                refused = _REFUSED[key] = f"the compiler refused it: {e}"
            except Exception as e:      # a compiler bug must not stop a program NumPy runs
                refused = _REFUSED[key] = f"the compiler failed ({type(e).__name__}: {e})"
        if refused is None:
            run.compilation, run.compile_ms = compilation, compile_ms
            facts = _FACTS.get(key)
            if facts is None:       # (the fusion report walks the module: once per cluster)
                if entry is not None:
                    module = compilation.hlo
                facts = _FACTS[key] = (_reachable(module.entry.root),
                                       compilation.fusion_report.kernels_after)
            run.hlo_instructions, run.kernels = facts
            timing = _TIMINGS.get(key) if self.measure else None
            if timing is not None and timing.run_eagerly():
                run.compiled, run.why_eager = False, "measured faster eagerly (cost model)"
                self._replay(roots, run)
                timing.ran(False, run.run_ms)
                run.measured = timing.describe()
                return run                  # (no gain: it runs eagerly)
            try:                        # (it only reads the inputs: on failure, replay)
                outputs, run.run_ms = self._execute(compilation)
                eager_ms = None
                if key not in _CHECKED:     # (nothing unchecked is handed back)
                    differs, eager_ms = self._check(roots, outputs)
                    _CHECKED.add(key)
                    if differs:
                        refused = _REFUSED[key] = (
                            f"its compiled result differed from NumPy's ({differs}): a bug in "
                            "nbxla (please report it); it runs eagerly from now on")
                if refused is None and self.measure and timing is None:
                    timing = self._time_both_ways(key, compilation, eager_ms)
                elif timing is not None:
                    timing.ran(True, run.run_ms)
            except Exception as e:
                refused = _REFUSED[key] = f"running it failed ({type(e).__name__}: {e})"
        if refused is not None:
            run.compiled, run.why_eager = False, refused
            self._replay(roots, run)
            return run
        if timing is not None:
            run.measured, run.gain_ms = timing.describe(), timing.gain_ms()
        for x, value in zip(roots, outputs):
            if x is None:
                continue                 # (replayed: an output no longer alive)
            if x._value is None:
                x._value = value
            else:
                np.copyto(x._value, value)
        return run

    def _execute(self, compilation):
        """Run the compiled cluster on its parameters: (outputs, milliseconds)."""
        start = time.perf_counter()
        outputs = [o if isinstance(o, np.ndarray) else o.get() if hasattr(o, "get")
                   else np.asarray(o)                                       # (CUDA: CuPy)
                   for o in compilation.executable.run(list(self.params))]
        return outputs, (time.perf_counter() - start) * 1e3

    def _check(self, roots, outputs) -> tuple[str, float]:
        """The first run of a cluster in this process against its eager replay on copies of
        its arrays (so the replay writes nothing the program sees): (how its outputs differ,
        "" where they do not; the replay's milliseconds, the first eager timing)."""
        copies = SharedCopies()
        start = time.perf_counter()
        try:
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")     # (the program's own run warns, if at all)
                values = self._eager_ops([id(x._slot) for x in roots
                                          if x is not None and x._value is None], copies)
        except Exception as e:           # NumPy refuses what the graph did: not NumPy's result
            return f"NumPy raises {type(e).__name__}: {e}", math.inf
        eager_ms = (time.perf_counter() - start) * 1e3
        pairs = [(f"output {k} ({got.dtype}{list(got.shape)})", got,
                  values[id(x._slot)] if x._value is None else copies(x._value))
                 for k, (x, got) in enumerate(zip(roots, outputs)) if x is not None]
        differ = differences(pairs)[1]
        # Each output is an array of its own, as NumPy's are: a write into one (after the
        # flush) must not show in another.
        owners: dict = {}
        for k, got in enumerate(outputs):
            first = owners.setdefault(id(memory_owner(got)), k)
            if first != k:
                differ.append(f"outputs {first} and {k} are one array where NumPy makes two")
        return "; ".join(differ), eager_ms

    def _time_both_ways(self, key, compilation, eager_ms: float | None) -> ClusterTiming:
        """The first run of a cluster in this process: time two more compiled runs (the first
        was cold) and, unless its check did, an eager replay on copies of its arrays, and
        remember both: later runs take the faster way."""
        compiled_ms = [self._execute(compilation)[1] for _ in range(2)]
        if eager_ms is None:
            start = time.perf_counter()
            try:
                with np.errstate(all="ignore"):      # (the program's own run warns, if at all)
                    self._eager_ops((), SharedCopies())
                eager_ms = (time.perf_counter() - start) * 1e3
            except Exception:                        # NumPy refuses what the graph did: compile
                eager_ms = math.inf
        timing = _TIMINGS[key] = ClusterTiming(compiled_ms, [eager_ms])
        return timing

    def _module(self, roots) -> Module:
        b = self.ctx.builder
        b.location = None
        seen, outputs = set(), []
        for x in roots:
            instr = x._tracer.instr
            if instr.opcode == "parameter" or id(instr) in seen:     # outputs are new arrays
                instr = b.op("copy", instr)
            seen.add(id(instr))
            outputs.append(instr)
        module = Module(f"{_ident(self.name)}_cluster", b.build(b.op("tuple", *outputs)))
        module.make_names_unique()
        return module

    def _compile(self, key, module):
        signature = tuple(("array", p.shape, p.dtype.str) for p in self.params)
        start = time.perf_counter()
        entry, hit = self.cache.get_or_compile(
            key, ("nbxla.cluster", self.name), f"{self.name} (auto cluster)", signature,
            lambda: [f"p{i}" for i in range(len(self.params))], self.device,
            lambda: compile_module(module, self.device))
        return entry.value, (0.0 if hit else (time.perf_counter() - start) * 1e3)

    def _replay(self, roots, run: ClusterRun) -> None:
        """Run the logged NumPy calls eagerly, in order: exactly what eager NumPy would do."""
        start = time.perf_counter()
        values = self._eager_ops([id(x._slot) for x in roots if x is not None and x._value is None])
        for x in roots:
            if x is not None and x._value is None:
                x._value = values[id(x._slot)]
        run.run_ms = (time.perf_counter() - start) * 1e3
        self.log.eager_work += run.work

    def _eager_ops(self, keep=(), copies: dict | None = None) -> dict:
        """The logged NumPy calls run eagerly; id(slot) -> the value of each slot in ``keep``
        (ids).  A value is dropped after its last use, as eager NumPy drops temporaries:
        holding them all would keep the allocator from reusing their memory (fresh pages
        for every temporary cost more than the arithmetic).  With ``copies`` (a
        ``SharedCopies``), the calls see copies of the arrays instead of the arrays."""
        last_use = {}
        for i, op in enumerate(self.ops):
            for leaf in flatten((op.args, op.kwargs), []):
                if type(leaf) is _Slot:
                    last_use[id(leaf)] = i
        keep = set(keep)
        values = {}

        def value(x):
            if type(x) is _Slot:
                return values[id(x)]
            if copies is not None and type(x) is np.ndarray:
                return copies(x)
            return x
        for i, op in enumerate(self.ops):
            args, kwargs = tree_map((op.args, op.kwargs), value)
            result = op.fn(*args, **kwargs)
            del args, kwargs
            leaves = flatten(result, []) if isinstance(result, (tuple, list)) else [result]
            for slot, leaf in zip(op.outs, leaves):
                if slot is not None and (id(slot) in keep or id(slot) in last_use):
                    values[id(slot)] = leaf
            del result, leaves
            for leaf in flatten((op.args, op.kwargs), []):
                if type(leaf) is _Slot and last_use.get(id(leaf)) == i and id(leaf) not in keep:
                    values.pop(id(leaf), None)
        return values

    # ---- the end of the run -----------------------------------------------------------------

    def unwrap(self, tree):
        """The run's result with stand-ins replaced by NumPy arrays (0-d: NumPy scalars)."""
        def concrete(x):
            if isinstance(x, LazyArray) and x._session is self:
                value = self.concrete(x, "the run's result")
                return value[()] if value.ndim == 0 else value
            return x
        return tree_map(tree, concrete)


_REFUSED: dict = {}          # cluster key -> why the compiler refused it (not tried again)
_CHECKED: set = set()        # cluster keys whose first compiled run was checked against NumPy's
_TIMINGS: dict = {}          # cluster key -> ClusterTiming (choice.py)
_FACTS: dict = {}            # cluster key -> (HLO instructions, kernels after fusion)


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
_GETITEM = operator.getitem
# Python values an operation's lowering may return beside arrays, kept by the tape as they are.
_TAPE_VALUES = (bool, int, float, complex, str, type(None))


def _root_of(x: LazyArray) -> LazyArray:
    """The array ``x`` is a view of (itself when it is no view)."""
    while x._root is not None:
        x = x._root[0]
    return x


class _PlainParam:
    """A plain NumPy array as a parameter of the pending graph: the array (kept, so that its
    id stays unique) and the snapshot of its values the graph reads."""
    __slots__ = ("array", "_value", "_num", "_num_epoch", "_root")

    def __init__(self, array: np.ndarray):
        self.array, self._root, self._num_epoch = array, None, -1
        self._value = array.copy() if array.flags.writeable else array


class _Meta:
    """Shape and dtype of a replayed value (tape.py), before it is computed."""
    __slots__ = ("shape", "dtype")

    def __init__(self, shape, dtype):
        self.shape, self.dtype = shape, dtype


def _recipe(fn, args, kwargs, base):
    """How to make the view ``fn(*args, **kwargs)`` of ``base`` from another value of it (a
    NumPy array or a Tracer)."""
    def recipe(value):
        sub = tree_map((tuple(args), kwargs), lambda x: value if x is base else x)
        return fn(*sub[0], **sub[1])
    return recipe


def _write_targets(fn, args, kwargs, kind, ufunc_method) -> list:
    """The stand-ins an operation writes into."""
    targets = []
    if kind in ("setitem", "write") or fn in _WRITING_FUNCTIONS or ufunc_method == "at":
        targets.append(args[0])
    if "out" in kwargs:
        targets.extend(flatten(kwargs["out"], []))
    return [x for x in targets if isinstance(x, LazyArray)]


def _reachable(root) -> int:
    seen, stack = set(), [root]
    while stack:
        instr = stack.pop()
        if id(instr) not in seen:
            seen.add(id(instr))
            stack.extend(instr.operands)
    return len(seen) - 1          # (not the output tuple)


def _ident(name: str) -> str:
    cleaned = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return cleaned if cleaned and not cleaned[0].isdigit() else f"f_{cleaned}"
