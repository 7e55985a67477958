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

This file records; ``flush.py`` compiles and runs clusters, ``replay.py`` replays (``Session``
mixes both in), and ``records.py`` holds the log records and helpers the three share.
"""

from __future__ import annotations

import math
import weakref

import numpy as np

from ..errors import TraceError
from ..frontend.context import TraceContext
from ..frontend.selection import Selection
from ..frontend.tracer import Tracer
from ..hlo import Shape, SourceLocation, from_numpy_dtype
from ..runtime.cache import DEFAULT_CACHE
from .create import LIKE, create_like, filled
from .flush import Flushing
from .lazy import LazyArray
from .records import (Break, GETITEM, HARD_MAX_OPS, MAX_CONSTANT_ELEMENTS, MIN_CLUSTER_WORK, Op,
                      OpContext, PRODUCTS, PlainParam, SOFT_MAX_OPS, SessionLog, Slot,
                      TAPE_VALUES, Unsupported, VIEW_FUNCTIONS, VIEW_KEY_LATER, VIEW_METHODS,
                      ValueMeta, WRITING_FUNCTIONS, flatten, ident, jumps_back, keyed_later,
                      leaf_size, library_caller, op_label, root_of, same_line, storing_item,
                      tree_map, user_location, ViewRecipe)
from .replay import Replaying
from .tape import NoKey, Tape, float_key, key_of

_CONTAINERS = (tuple, list, dict)
_PLAIN_INDEX = (slice, int, type(None), type(Ellipsis))


def _plain_index(index: tuple) -> bool:
    """An index tuple of slices, ints, None and ``...`` (``x[2:-2, :, 0]``): no stand-in in
    it, nothing mutable; a leaf as it is for the operation's bookkeeping (no walk)."""
    for item in index:
        if type(item) not in _PLAIN_INDEX:
            return False
    return True


# ``Session.owners`` is swept of dead entries when it reaches this size (then twice its live size).
_MIN_OWNERS_CAP = 4096


class Session(Flushing, Replaying):
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
        self._owners_cap = _MIN_OWNERS_CAP
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
        self.plain_params: dict = {}     # id(plain array) -> PlainParam (its snapshot, numbered)
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
        # (A plain dict of weak references without callbacks: a WeakValueDictionary ran a
        # Python callback for every stand-in that died, a tenth of a replayed TKE call.  A
        # dead or stale entry is harmless, ``adopt`` checks that the stand-in still holds
        # the array; dead ones are dropped as the dict grows.)
        owners = self.owners
        if owners is None:
            owners = self.owners = {}
        elif len(owners) >= self._owners_cap:
            for key in [k for k, ref in owners.items() if ref() is None]:
                del owners[key]
            self._owners_cap = max(_MIN_OWNERS_CAP, 2 * len(owners))
        owners[id(array)] = weakref.ref(x)

    def adopt(self, array: np.ndarray):
        """A NumPy array that came back from a call: the stand-in already holding it, a new
        stand-in when it is large, else the array itself."""
        ref = self.owners.get(id(array)) if self.owners is not None else None
        owner = ref() if ref is not None else None
        if owner is not None and owner.state.value is array:
            return owner
        return self.wrap(array) if array.size >= self.min_work else array

    def pending(self, x: LazyArray) -> bool:
        """Does ``x``'s value depend on graph work not yet run?"""
        if x.state.epoch != self.epoch:
            return False
        if x.state.tracer is not None:
            return x.state.value is None or x.state.entry[0].version != x.state.entry[1]
        return self.replaying and (x.state.value is None or self.joined.get(id(x)) !=
                                   self.root_writes.get(id(root_of(x)), 0))

    def in_graph(self, x: LazyArray) -> bool:
        """Does the pending graph read ``x`` (so that writing into it must wait)?"""
        return x.state.epoch == self.epoch and (x.state.tracer is not None or self.replaying)

    def _context(self) -> TraceContext:
        if self.ctx is None:
            self.ctx = OpContext(f"{ident(self.name)}_cluster", self.filename_display)
            self.ctx.line_offsets = self.line_offsets
        return self.ctx

    def _join(self, x: LazyArray, tracer: Tracer) -> Tracer:
        root = tracer                     # writes to x or to any base above it show here
        while root.view is not None:
            root = root.view.base
        x.state.tracer, x.state.entry, x.state.epoch = tracer, (root, root.version), self.epoch
        self.members.append(weakref.ref(x))
        if x.state.value is not None:
            # A concrete array written in the graph must get its new values even when no
            # Python name holds its stand-in any more (its memory may be the caller's).
            self.held.append(x)
        return tracer

    def tracer_of(self, x: LazyArray) -> Tracer:
        """``x``'s node in the pending graph (a concrete array enters as a parameter; a view
        enters as the same view of its base's node, so writes through it reach the base)."""
        if x.state.epoch == self.epoch and x.state.tracer is not None:
            return x.state.tracer
        if x.state.root is not None:
            base, recipe = x.state.root
            view = recipe(self.tracer_of(base))
            if isinstance(view, Tracer):
                return self._join(x, view)
        return self._join(x, self._parameter(x.state.value, "p", x))

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
            param = self.plain_params.get(id(array)) or PlainParam(array)
            tracer = self.plain[id(array)] = self._parameter(param.state.value, "c", param)
        return tracer

    def _number_plain(self, array: np.ndarray) -> int:
        """A plain NumPy array's number in this epoch: it enters the graph as a parameter
        holding a snapshot of its values (taken now: the program may write it later)."""
        param = self.plain_params.get(id(array))
        if param is None:
            param = self.plain_params[id(array)] = PlainParam(array)
            param.state.num, param.state.num_epoch = self.next_number, self.epoch
            self.next_number += 1
            self.numbered[param.state.num] = param
            self._entries.append(("plain", array.shape, array.dtype.str))
        return param.state.num

    # ---- dispatch ---------------------------------------------------------------------------

    def created(self, shape: tuple, value: np.generic) -> LazyArray:
        """An array of ``shape`` filled with ``value`` (``np.zeros``...: create.py), made
        when first used: it enters the pending graph of that moment (so that one made before
        a graph break and used after it is no output of the cluster before)."""
        x = LazyArray(self)
        x.state.spec, x.state.fill = ValueMeta(shape, value.dtype), (shape, value)
        return x

    def _enter(self, x: LazyArray, operands=()) -> None:
        """A created array's first use, with ``operands`` (stand-ins): record its making (or,
        the run over, or small and no operand pending, make it)."""
        shape, value = x.state.fill
        x.state.fill = None
        if self.closed or (math.prod(shape) < self.min_work and not any(
                y is not x and y.state.fill is None and y.state.session is self and
                self.pending(y) for y in operands)):
            x.state.value = filled(shape, value)
            self._own(x, x.state.value)
            return
        made = self.dispatch(filled, (shape, value), {}, kind="create", target=x)
        if made is not x:                # (recording refused: made eagerly)
            x.state.value = made.state.value if isinstance(made, LazyArray) else made

    def dispatch(self, fn, args, kwargs, kind: str, ufunc_method: str = "__call__",
                 target: LazyArray | None = None):
        # (Every NumPy call on a stand-in comes here: the common case, flat positional
        # arguments of this session's stand-ins, is checked without building lists twice.)
        leaves = args
        if kwargs:
            leaves = flatten((args, kwargs), [])
        else:
            for a in args:
                if isinstance(a, _CONTAINERS) and not (type(a) is tuple and _plain_index(a)):
                    leaves = flatten(args, [])
                    break
        lazies = [x for x in leaves if isinstance(x, LazyArray)]
        foreign = None
        for x in lazies:
            state = x.state
            if state.fill is not None:
                state.session._enter(x, lazies)
            if state.session is not self:
                foreign = [x for x in lazies if x.state.session is not self]
        if foreign:      # a stand-in of another (enclosing) session: make it concrete here
            args, kwargs = tree_map((args, kwargs),
                                    lambda x: np.asarray(x) if any(x is f for f in foreign) else x)
            return fn(*args, **kwargs)
        writes = kind in ("setitem", "write") or "out" in kwargs or fn in WRITING_FUNCTIONS \
            or ufunc_method == "at"
        if self.closed:
            return self._eager(fn, args, kwargs, lazies, writes, None)
        if kind == "function" and fn in LIKE:      # (np.zeros_like...: made where first used)
            made = create_like(self, fn, args, kwargs)
            if made is not None:
                return made
        pending = False
        if kind != "create":             # (``pending`` inlined: every operation asks)
            epoch = self.epoch
            for x in lazies:
                state = x.state
                if state.epoch != epoch:
                    continue
                if state.tracer is not None:
                    pending = state.value is None or state.entry[0].version != state.entry[1]
                else:
                    pending = self.replaying and (state.value is None or self.joined.get(id(x))
                                                  != self.root_writes.get(id(root_of(x)), 0))
                if pending:
                    break
        if not pending and kind != "create":
            if kind in ("getitem", "setitem") or fn in VIEW_FUNCTIONS or fn in PRODUCTS or \
                    getattr(fn, "name", None) in VIEW_METHODS or \
                    getattr(fn, "name", None) == "dot" or \
                    self._estimate(leaves, kind, ufunc_method) < self.min_work:
                return self._eager(fn, args, kwargs, lazies, writes, None)
        # (before numbering: a flush starts a new epoch; the line is looked up only when
        # the cap is near, or when the operation is recorded)
        if (len(self.replayed) if self.replaying else len(self.ops)) >= SOFT_MAX_OPS:
            self._size_cap()
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
                                           writes, target, leaves is args and not kwargs)
                refused = self.node.refused.get(key) if key is not None else None
                if refused is not None:              # a break here before: the same break
                    return self._eager(fn, args, kwargs, lazies, writes, refused)
                self._materialize()
        location = self.location()
        try:
            result, outs, _ = self._record(fn, args, kwargs, lazies, writes, ufunc_method,
                                           location, None if target is None else [target])
            if target is not None:
                self._new_number(target)
        except Unsupported as e:
            if key is not None and self.node is not None:
                self.node.refused[key] = str(e)
            return self._eager(fn, args, kwargs, lazies, writes, str(e))
        if self.node is not None:
            self.node = None if key is None or outs is None else \
                self.tape.child(self.node, key, *outs, location)
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
        if x.state.num_epoch == self.epoch:
            return x.state.num
        if x.state.value is None:
            raise NoKey                  # (pending, from before this epoch was keyed)
        if x.state.root is not None:
            base = self._number(x.state.root[0])
            if x.state.view_key is VIEW_KEY_LATER:
                recipe = x.state.root[1]
                x.state.view_key = self._view_key(recipe.fn, recipe.args, recipe.kwargs,
                                                  recipe.base)
            if x.state.view_key is None:
                raise NoKey
            entry = ("view", base, x.state.view_key)
        else:
            entry = ("array", x.state.value.shape, x.state.value.dtype.str)
        x.state.num, x.state.num_epoch = self.next_number, self.epoch
        self.next_number += 1
        self.numbered[x.state.num] = x
        self._entries.append(entry)
        return x.state.num

    def _op_key(self, fn, args, kwargs, kind, ufunc_method):
        """The operation's key in the tape: one flat tuple -- the function, its kind, the
        ufunc method, the arguments' container type, one part per argument, the keyword
        arguments' key and the arrays first numbered by it.  A stand-in's part is its number
        (a bare int: every other part is a tuple, ``key_of``'s); a float's is cached; the
        rest is ``key_of``'s.  Every operation is keyed, and the tape's dict hashes and
        compares the key once per operation: flat, that is one pass over a few items."""
        entries = self._entries = []     # (arrays first numbered by this operation)
        plain = self._number_plain if fn is not GETITEM else None     # (as _record does)
        epoch, parts = self.epoch, [fn, kind, ufunc_method, type(args)]
        for a in args:
            item = type(a)
            if item is LazyArray:
                parts.append(a.state.num if a.state.num_epoch == epoch else self._number(a))
            elif item is float:
                parts.append(float_key(a))
            elif item is int or item is bool:
                parts.append((item, a))
            elif item is np.float64:     # (a scalar read from an array: key_of's key of it)
                parts.append((item, a.tobytes()))
            else:
                parts.append(key_of(a, self._number, plain=plain))
        parts.append(key_of(kwargs, self._number, plain=plain) if kwargs else None)
        parts.append(tuple(entries) if entries else ())
        return tuple(parts)

    def _new_number(self, x: LazyArray) -> None:
        x.state.num, x.state.num_epoch = self.next_number, self.epoch
        self.next_number += 1

    def _view_key(self, fn, args, kwargs, base):
        try:
            return (fn, key_of(tuple(args), None, base), key_of(kwargs, None, base))
        except NoKey:
            return None

    def _size_cap(self) -> bool:
        """Has the pending graph reached its size cap (``SOFT_MAX_OPS``...) at the operation
        coming now?  Then flush."""
        n = self._op_count()
        if n < SOFT_MAX_OPS:
            return False
        location = self.location()
        first, last = self._op_location(0), self._op_location(-1)
        if n >= HARD_MAX_OPS or (
                same_line(first, location) and not same_line(last, location)) or (
                n >= 2 * SOFT_MAX_OPS and jumps_back(last, location)):
            self.flush()                     # a size cap, not a graph break
            return True
        return False

    def _record(self, fn, args, kwargs, lazies, writes, ufunc_method, location, targets=None):
        """Record one operation into the pending graph.  Returns its result, what the tape
        keeps of it (``(outs, structure, work)``, or None) and the new stand-ins made (in
        order; ``targets``, when given, are stand-ins to reuse for them, or None)."""
        ufunc = fn if isinstance(fn, np.ufunc) else getattr(fn, "__self__", None)
        if isinstance(ufunc, np.ufunc) and not op_label(ufunc).startswith("np."):
            raise Unsupported(f"{op_label(ufunc)} is not a NumPy ufunc: nbxla has no lowering "
                               "for it")
        ctx = self._context()
        inputs = {id(x): self.tracer_of(x) for x in lazies}
        in_tracers = {id(t): x for x, t in ((x, inputs[id(x)]) for x in lazies)}

        def to_tracer(x):
            if isinstance(x, LazyArray):
                return inputs[id(x)]
            if type(x) is np.ndarray and x.size > MAX_CONSTANT_ELEMENTS and fn is not GETITEM:
                return self._plain(x)
            return x
        targs, tkwargs = tree_map((tuple(args), kwargs), to_tracer)
        active = TraceContext.active.set(ctx)
        ctx.op_location = location
        try:
            result = fn(*targs, **tkwargs)
        except TraceError as e:        # (what it emitted is dead code: DCE removes it)
            raise Unsupported(e.bare_message) from None
        except Exception as e:         # NumPy's own error (or one we do not model): run eagerly
            raise Unsupported(f"{type(e).__name__}: {e}") from None
        finally:
            ctx.op_location = None
            TraceContext.active.reset(active)
        if any(isinstance(r, Selection) for r in (result if isinstance(result, (tuple, list)) else (result,))):
            # (x[mask] keeps its data-dependent length only inside one traced program; recorded
            # op by op, it is a break: the mask's values decide the shape)
            raise Unsupported("boolean-mask indexing with a traced mask: the result's shape depends on the data")

        outs, work = [], max([leaf_size(x) for x in lazies], default=0)
        taped, made = [], []             # (per result leaf: what the tape keeps; new stand-ins)
        targets_given, targets = targets, iter(targets or ())

        def wrap(r):
            nonlocal work
            if not isinstance(r, Tracer):
                outs.append(None)
                taped.append(("value", r) if type(r) in TAPE_VALUES else None)
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
            out.state.spec = None
            out.state.slot = Slot()
            outs.append(out.state.slot)
            self._join(out, r)
            out.state.root = self._view_root(fn, args, kwargs, lazies, inputs, r)
            if out.state.root is not None:
                out.state.view_key = self._view_key(fn, args, kwargs, lazies[0])
            else:
                out.state.view_key = None
            if targets_given is None:        # (materializing: the replay numbered them)
                self._new_number(out)
            made.append(out)
            taped.append(("new", tuple(r.shape), r.dtype, out.state.root is not None, out.state.view_key))
            return out
        structure = type(result) if type(result) in (tuple, list) else None
        nested = structure is not None and any(isinstance(r, (tuple, list)) for r in result)
        if isinstance(result, (tuple, list)):
            wrapped = tree_map(result, wrap)
        else:
            wrapped = wrap(result)

        def template(x):
            if isinstance(x, LazyArray):
                return x.state.slot if x.state.value is None else x.state.value
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
        return base, ViewRecipe(fn, args, kwargs, base)

    def _eager(self, fn, args, kwargs, lazies, writes, reason):
        location = self.location() if reason else None
        if any(self.pending(x) for x in lazies) or (writes and any(self.in_graph(x) for x in lazies)):
            self.flush(reason or f"{op_label(fn)} writes into an array the pending graph reads",
                       location or self.location(), eager_op=op_label(fn))
        elif reason:
            self.log.breaks.append(Break(reason, location, False, op_label(fn)))
        if len(lazies) == 1 and args and args[0] is lazies[0]:
            # (the common eager call, x[...] of a concrete stand-in: no other argument holds
            # a stand-in, nothing to walk)
            result = fn(lazies[0].state.value, *args[1:], **kwargs)
        else:
            concrete = {id(x): x.state.value for x in lazies}
            cargs, ckwargs = tree_map((tuple(args), kwargs),
                                      lambda x: concrete[id(x)] if isinstance(x, LazyArray) else x)
            result = fn(*cargs, **ckwargs)
        if type(result) is np.ndarray:
            if result.base is None:                                # (views cost no work)
                self.log.eager_work += max([leaf_size(x) for x in lazies], default=0)
        else:
            arrays = [r for r in flatten(result, []) if isinstance(r, np.ndarray)]
            if not arrays or any(r.base is None for r in arrays):
                self.log.eager_work += max([leaf_size(x) for x in lazies], default=0)
        owners = {id(x.state.value): x for x in lazies}

        def wrap(r):
            if type(r) is not np.ndarray:
                return r
            owner = owners.get(id(r))
            if owner is not None:
                return owner
            if r.base is not None and len(lazies) == 1 and \
                    (r.base is lazies[0].state.value or r.base is lazies[0].state.value.base):
                out = LazyArray(self, r)         # a view: writes through it reach its base
                base = lazies[0]
                out.state.root = (base, ViewRecipe(fn, args, kwargs, base))
                if self.node is not None:
                    out.state.view_key = VIEW_KEY_LATER if keyed_later(args, kwargs) else \
                        self._view_key(fn, args, kwargs, base)
                return out
            return LazyArray(self, r) if r.size >= self.min_work else r
        return tree_map(result, wrap) if isinstance(result, (tuple, list)) else wrap(result)

    # ---- concrete values ------------------------------------------------------------------------

    def concrete(self, x: LazyArray, reason: str, caller: bool = False, writes: bool = False):
        """``x``'s NumPy array, running the pending graph first when ``x`` depends on it (or,
        for ``writes``, when the graph reads ``x``)."""
        if x.state.fill is not None:          # (a created array not used yet: made now)
            shape, value = x.state.fill
            x.state.fill, x.state.value = None, filled(shape, value)
        if self.pending(x) or (writes and self.in_graph(x)):
            library = library_caller() if caller else None
            if library:
                reason = f"{library} needs NumPy arrays (native code)"
            elif caller and storing_item():
                reason = ("a pending value is written into a NumPy array (one no stand-in "
                          "holds: small, or made where auto mode does not see it)")
            self.flush(reason, self.location())
        return x.state.value

    # ---- flush: compile (or replay) the pending graph -----------------------------------------

    def unwrap(self, tree):
        """The run's result with stand-ins replaced by NumPy arrays (0-d: NumPy scalars)."""
        def concrete(x):
            if isinstance(x, LazyArray) and x.state.session is self:
                value = self.concrete(x, "the run's result")
                return value[()] if value.ndim == 0 else value
            return x
        return tree_map(tree, concrete)
