"""The tape: what an auto function's earlier calls recorded, so that a repeated call replays
its clusters without recording them again.

Recording an operation runs the frontend's lowering rule on Tracers (tens of microseconds of
Python per operation).  A function called again usually performs the same operations on
arrays of the same shapes, in the same order.  So each recorded operation is also keyed —
the function, its arguments with every stand-in replaced by its *number* in the current
pending graph (concrete arrays entering the graph are numbered with their shape and dtype,
views of them with how the view is made), constants by value — and the keys of one pending
graph form a path in a trie (``TapeNode``).  At a flush the trie node keeps the compiled
cluster, which numbers are its parameters and which its outputs (``FlushEntry``).

A later call walks the trie as its operations arrive (``Session`` in *replay* mode): an
operation whose key is a child of the current node only creates its result stand-ins, with
the shapes and dtypes the trie remembers; no Tracer, no HLO.  At the flush, the node's entry
runs on the numbered arrays.  Anything the trie does not know — a different operation, a
different constant, different values alive at the flush — first *materializes* the replayed
operations (records them for real, in order, with the same stand-ins) and continues as a
normal recording; the trie then learns the new path.  Python still runs the whole function
every call, so side effects, breaks and exceptions happen as before.
"""

from __future__ import annotations

import numpy as np

from .lazy import LazyArray
from .records import ValueMeta

# A trie that keeps growing (constants that change on every call: a loop counter used as a
# float, a time step) stops learning past this many nodes; calls then record as before.
MAX_NODES = 50000
# Small NumPy arrays become constants of a cluster (session.MAX_CONSTANT_ELEMENTS): keyed by
# value.  Larger plain arrays are parameters that must be copied: not replayed.
MAX_KEYED_ELEMENTS = 64


class NoKey(Exception):
    """An argument the tape cannot key (an object it does not know, a large plain array)."""


class TapeNode:
    """A point in a pending graph's sequence of operations."""
    __slots__ = ("children", "flushes", "refused")

    def __init__(self):
        self.children: dict = {}            # operation key -> TapeOp
        self.flushes: list = []             # FlushEntry for each set of outputs seen here
        self.refused: dict = {}             # operation key -> why it cannot be recorded (a break)


class TapeOp:
    """What one keyed operation gave: ``outs`` per result leaf, ``("new", shape, dtype,
    is_view, view_key, meta)`` (``meta``: the ``ValueMeta`` its replayed stand-ins share),
    ``("owner", i)`` (the i-th stand-in argument itself: written in place) or ``("value",
    v)``; ``structure`` is the result's tuple/list type or None; ``location`` the source line
    it was recorded at (a replayed operation is not looked up again: the same point of the
    same sequence of operations)."""
    __slots__ = ("node", "outs", "structure", "work", "location")

    def __init__(self, outs, structure, work, location):
        self.node = TapeNode()
        self.outs = [out + (ValueMeta(out[1], out[2]),) if out[0] == "new" else out
                     for out in outs]
        self.structure, self.work, self.location = structure, work, location


class FlushEntry:
    """A cluster flushed at a trie node: its cache key and compilation (None when it ran
    eagerly), the numbers of its parameters and of its outputs, in order."""
    __slots__ = ("key", "compilation", "params", "roots", "root_set")

    def __init__(self, key, compilation, params, roots):
        self.key, self.compilation = key, compilation
        self.params, self.roots = tuple(params), tuple(roots)
        self.root_set = frozenset(roots)


class Tape:
    """The trie of one auto function (shared by its calls)."""
    __slots__ = ("root", "nodes")

    def __init__(self):
        self.root = TapeNode()
        self.nodes = 1

    def child(self, node: TapeNode, key, outs, structure, work, location=None) -> TapeNode | None:
        """``node``'s child for ``key`` (made if new and the trie is not full), or None."""
        op = node.children.get(key)
        if op is None:
            if self.nodes >= MAX_NODES:
                return None
            self.nodes += 1
            op = node.children[key] = TapeOp(outs, structure, work, location)
        return op.node

    def remember_flush(self, node: TapeNode, entry: FlushEntry) -> None:
        node.flushes = [e for e in node.flushes if e.roots != entry.roots] + [entry]


_SCALARS = (bool, int, str, bytes, type(None), type(Ellipsis), type)
_INDEX = (int, type(None))


# float -> its key, for the constants a program uses again and again (not 0.0 and -0.0:
# equal as floats, different constants; not NaN: never found again).
_FLOAT_KEYS: dict = {}


def float_key(x: float) -> tuple:
    """A float constant's key: by its bits (-0.0 and 0.0 are different constants)."""
    key = _FLOAT_KEYS.get(x)
    if key is None:
        key = (float, x.hex())
        if x and x == x:
            if len(_FLOAT_KEYS) > 4096:
                _FLOAT_KEYS.clear()
            _FLOAT_KEYS[x] = key
    return key


def key_of(obj, number, base=None, plain=None):
    """A hashable key of an argument tree; stand-ins become ``number(x)`` (``base``, when
    given, becomes ``("base",)``), NumPy arrays too large to be constants ``plain(array)``
    (when given).  Raises NoKey for what it cannot key."""
    kind = type(obj)
    if kind is LazyArray:
        if obj is base:
            return ("base",)
        if base is not None:
            raise NoKey
        return ("a", number(obj))
    if kind is tuple or kind is list:
        # (every operation is keyed, most with a few stand-ins, numbers and slices of ints:
        # those inline, the rest through key_of)
        parts = []
        for x in obj:
            item = type(x)
            if item is LazyArray and base is None:
                parts.append(("a", number(x)))
            elif item in _SCALARS:
                parts.append((item, x))
            elif item is float:
                parts.append(float_key(x))
            elif item is slice and type(x.start) in _INDEX and type(x.stop) in _INDEX and \
                    type(x.step) in _INDEX:
                # (ints and None only: one flat tuple, no per-bound types to tell apart; a
                # bool bound takes key_of's typed form below, another shape of key)
                parts.append((slice, x.start, x.stop, x.step))
            else:
                parts.append(key_of(x, number, base, plain))
        return (kind, tuple(parts))
    if kind in _SCALARS:
        return (kind, obj)
    if kind is float:
        return float_key(obj)
    if kind is slice:
        if type(obj.start) in _INDEX and type(obj.stop) in _INDEX and type(obj.step) in _INDEX:
            return (slice, obj.start, obj.stop, obj.step)
        return (slice, key_of(obj.start, number, base), key_of(obj.stop, number, base),
                key_of(obj.step, number, base))
    if kind is np.ndarray:
        if obj.dtype == object:
            raise NoKey
        if obj.size > MAX_KEYED_ELEMENTS:
            if plain is None or base is not None:
                raise NoKey
            return ("plain", plain(obj))
        return (np.ndarray, obj.dtype.str, obj.shape, obj.tobytes())
    if kind is dict:
        return (dict, tuple((k, key_of(v, number, base, plain)) for k, v in sorted(obj.items())))
    if isinstance(obj, np.generic):
        return (kind, obj.tobytes())
    # (the types above are never stand-ins: only what is left is asked, an attribute lookup)
    if getattr(kind, "nbxla_stand_in", False):
        if obj is base:
            return ("base",)
        if base is not None:
            raise NoKey
        return ("a", number(obj))
    if kind is complex:
        return (complex, obj.real.hex(), obj.imag.hex())
    if isinstance(obj, np.dtype):
        return (np.dtype, obj.str)
    raise NoKey
