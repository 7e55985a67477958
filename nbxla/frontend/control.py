"""The runtime of converted code (``autograph.py``): loops, branches and writes on Tracers.

On Python values every helper does exactly what the Python statement would.  On traced ones:

* ``for_range`` traces the loop body once, with the index a traced scalar, into an HLO
  ``while`` whose state is every traced value the body can reach (one slot per array object,
  so writes into arrays and their views stay visible, plus one per name the body rebinds).
  When that is not valid -- the body needs the index as a Python int, changes Python state,
  changes a value's shape -- it runs the Python loop instead (the trace is unrolled).  Loops
  of at most ``NBXLA_FLAGS=--unroll_max`` steps (4) are unrolled: a rolled loop costs a host
  round trip per step.
* ``for_items`` does the same for ``for x in traced`` and ``enumerate(traced)`` (over the
  first axis, the item ``traced[i]``).
* ``while_loop`` runs in Python while its condition is a Python value, then as an HLO
  ``while`` once the condition is traced.
* ``if_stmt`` / ``if_exp`` / ``and_`` / ``or_`` / ``not_`` trace both branches and choose with
  ``select`` (traced operations are pure, so computing both is only a cost); an ``if`` whose
  branches compute ``CONDITIONAL_MIN_WORK`` elements or more becomes an HLO ``conditional``
  instead, so that only the chosen branch runs.
* ``setitem`` turns a NumPy array made inside the compiled code into a traced one on its
  first traced write (``out = np.zeros(n); out[i] = traced``).
"""

from __future__ import annotations

import builtins
import operator
import os
import sys
import sysconfig

import numpy as np

from ..errors import NbxlaError, NotCompilableError
from ..flags import current_flags
from ..hlo import Builder, Shape, TupleShape
from ..hlo.builder import unique_name
from . import loop_checks
from .context import TraceContext
from .registry import ENTRY_POINTS
from .selection import Selection
from .tracer import WRITE_INTO_NUMPY, WRITE_INTO_NUMPY_HINT, Tracer

# A loop that cannot be traced once is unrolled (traced step by step) only while that stays
# small: longer ones are refused at once, not after minutes of tracing and optimizing.
UNROLL_LIMIT = 1000
UNROLL_BUDGET = 2000
# An ``if`` on a traced value whose branches compute at least this many elements becomes an HLO
# ``conditional`` (only the chosen branch runs); cheaper ones select between both branches.
CONDITIONAL_MIN_WORK = 1 << 15
_ATTEMPTS = 4


class _Undefined:
    """The value of a name a loop or branch has not bound (yet)."""

    def __repr__(self):
        return "<undefined>"


UNDEFINED = _Undefined()


class OneBranch:
    """The value of a name only one branch of a traced ``if`` bound: reading it is refused
    (``error``), since whether it exists depends on the data."""

    def __init__(self, error: NbxlaError):
        self.error = error

    def __repr__(self):
        return "<bound in one branch>"


class CannotRoll(Exception):
    """Tracing the loop body once is not valid; the reason says why."""


class _Cheap(Exception):
    """The loop is cheaper unrolled (its steps times its body's size are within budget)."""


def _size(comp) -> int:
    """Instructions of a computation and of those it calls."""
    return sum(1 + sum(_size(c) for c in i.called_computations) for i in comp.instructions)


def get_state(loc: dict, glob: dict | None, names: tuple) -> tuple:
    """The values of ``names`` before a loop or branch.  In a cell, a name looks up as Python
    looks it up there (namespace, then builtins); in a function (``glob`` None) the names are
    its locals, and one not bound yet is UNDEFINED -- not a global of the same name."""
    if glob is None:
        return _resolved([loc[n] if n in loc else UNDEFINED for n in names])
    return _resolved(loc[n] if n in loc else glob[n] if n in glob else
                     getattr(builtins, n, UNDEFINED) for n in names)


def bound_state(loc: dict, names: tuple) -> tuple:
    """The state a loop body or branch hands back: a name it left unbound is UNDEFINED."""
    return tuple([loc.get(n, UNDEFINED) for n in names])


def ld(value):
    """A name's value as converted code reads it: a NumPy array that became traced (through
    any reference to it) reads as its Tracer, and a view of one as the same view of it."""
    if type(value) is OneBranch:
        raise value.error
    if type(value) is np.ndarray:
        ctx = _ctx()
        if ctx is not None and ctx.promoted:
            found = ctx.promoted.get(id(value))
            if found is not None:
                return found[1]
            if value.base is not None:
                return _view_of_promoted(ctx, value)
    return value


def _view_of_promoted(ctx, view: np.ndarray):
    """``view`` read after its base became traced: the Tracer view made the same way."""
    made = ctx.views.get(id(view))
    if made is not None:
        base = ld(made[1])
        if isinstance(base, Tracer):
            value = made[2](base)
            ctx.promoted[id(view)] = (view, value)
            return value
    owner = view.base
    if isinstance(owner, np.ndarray) and ctx.promoted.get(id(owner), (None,))[0] is owner:
        raise ctx.not_compilable(
            "reading a view of a NumPy array that became traced, made in a way nbxla does not "
            "follow (only x[slices] and x.reshape/transpose/swapaxes/squeeze are followed)",
            "take the view with basic indexing (x[1:-1, ::2]), or after the array's first write")
    return view


def _remember_view(ctx, view, base, how) -> None:
    """``view`` is a NumPy view of ``base``: ``how(tracer of base)`` makes the same view of it,
    should ``base`` (or ``view``) become traced."""
    if type(view) is np.ndarray and view.base is not None and type(base) is np.ndarray:
        ctx.views[id(view)] = (view, base, how)


def _resolved(values: tuple) -> tuple:
    """Values handed around as loop or branch state (not read: a one-branch name passes)."""
    return tuple(v if type(v) is OneBranch else ld(v) for v in values)


def _ctx() -> TraceContext | None:
    return TraceContext.active.get()


def _has_tracer(value) -> bool:
    if isinstance(value, Tracer):
        return True
    if isinstance(value, (list, tuple)):
        return any(_has_tracer(v) for v in value)
    if isinstance(value, dict):
        return any(_has_tracer(v) for v in value.values())
    return False


# ---- calls ---------------------------------------------------------------------------------

_ARRAY_MAKERS = (np.array, np.asarray, np.asanyarray, np.ascontiguousarray)


def call(f, *args, **kwargs):
    ctx = _ctx()
    if ctx is None:
        return f(*args, **kwargs)
    if (f is builtins.min or f is builtins.max) and not kwargs and _has_tracer(args):
        items = list(args[0]) if len(args) == 1 else list(args)
        pick = np.minimum if f is builtins.min else np.maximum
        result = items[0]
        for item in items[1:]:
            result = pick(result, item)
        return result
    if (f is int or f is float) and len(args) == 1 and not kwargs and isinstance(args[0], Tracer) \
            and args[0].ndim == 0 and args[0].dtype.kind in "biuf":
        # int(traced) / float(traced): the value stays traced, typed as a Python number would be
        from .index_tracer import IndexTracer
        from .rules import convert
        value = convert(args[0], np.int64 if f is int else np.float64)
        return IndexTracer(ctx, value.instr) if f is int else Tracer(ctx, value.instr)
    if any(f is m for m in _ARRAY_MAKERS) and args and _has_tracer(args[0]):
        from .rules import asarray, convert
        value = asarray(ctx, _stack_nested(ctx, args[0]))
        dtype = kwargs.get("dtype")
        value = convert(value, dtype) if dtype is not None else value
        return Tracer(ctx, value.instr) if value is args[0] else value
    if isinstance(f, type(call)) and not getattr(f, "__nbxla_converted__", False) \
            and _is_user_code(f):
        f = ENTRY_POINTS["convert_function"](f)
    if ctx.promoted:                # h(items[0]): an argument that is not a name
        args = _resolved(args)
    result = f(*args, **kwargs)
    owner = getattr(f, "__self__", None)
    if type(owner) is np.ndarray and getattr(f, "__name__", None) in _VIEW_METHODS:
        _remember_view(ctx, result, owner, lambda b, name=f.__name__: getattr(b, name)(*args, **kwargs))
    return result


# NumPy methods whose result may be a view, which Tracers make the same way.
_VIEW_METHODS = frozenset({"reshape", "transpose", "swapaxes", "squeeze"})


_LIBRARY_DIRS = tuple({sys.prefix, sys.base_prefix, sysconfig.get_paths()["purelib"],
                       sysconfig.get_paths()["stdlib"], os.path.dirname(os.path.dirname(__file__))})


def _is_user_code(f) -> bool:
    """The user's own helper functions are converted too; library code is called as it is."""
    return not os.path.abspath(f.__code__.co_filename).startswith(_LIBRARY_DIRS)


def _stack_nested(ctx, value):
    if isinstance(value, (list, tuple)):
        from .functions import stack
        from .rules import asarray
        return stack([asarray(ctx, _stack_nested(ctx, v)) for v in value])
    return value


def static_test(value, kind: str, lineno: int):
    """The test of an ``if``/``while`` left as Python (its body breaks, continues or returns)."""
    if isinstance(value, Tracer):
        raise NotCompilableError(
            f"`{kind}` on a traced value whose body holds break/continue/return (or try/with, "
            "del, global): only branches and loops whose bodies can be traced as functions of "
            "their state compile", _location(value.ctx, lineno),
            "restructure without break/continue/return inside it (e.g. carry a flag and test "
            "it with np.where), compute both branches with np.where(cond, a, b), or use "
            "mode=\"auto\" to run this part eagerly")
    return value


# ---- writes ---------------------------------------------------------------------------------

_INPLACE = {"Add": operator.iadd, "Sub": operator.isub, "Mult": operator.imul,
            "Div": operator.itruediv, "FloorDiv": operator.ifloordiv, "Mod": operator.imod,
            "Pow": operator.ipow, "MatMult": operator.imatmul, "BitAnd": operator.iand,
            "BitOr": operator.ior, "BitXor": operator.ixor, "LShift": operator.ilshift,
            "RShift": operator.irshift}


def promote(ctx, arr: np.ndarray) -> Tracer:
    """A traced array with ``arr``'s values (a broadcast constant when they are all equal)."""
    from .rules import full, asarray
    flat = arr.reshape(-1)
    if flat.size and (flat == flat[0]).all() and arr.dtype.kind != "c" or flat.size == 0:
        value = full(ctx, arr.shape, flat[0] if flat.size else 0, arr.dtype)
    else:
        value = asarray(ctx, arr)
    return Tracer(ctx, value.instr)


def _promotable(x, *values) -> bool:
    return isinstance(x, np.ndarray) and _ctx() is not None and _has_tracer(values)


def _owned(x: np.ndarray):
    """A view of another NumPy array cannot become traced (its base would not see writes)."""
    if x.base is not None and not (isinstance(x.base, bytes)):
        ctx = _ctx()
        raise ctx.not_compilable(WRITE_INTO_NUMPY, WRITE_INTO_NUMPY_HINT)


def _promote_owned(x: np.ndarray) -> Tracer:
    """The Tracer that stands for ``x`` from now on, in every scope that holds ``x``."""
    ctx = _ctx()
    found = ctx.promoted.get(id(x))
    if found is not None:
        return found[1]
    made = ctx.views.get(id(x))
    if made is not None:        # a view: its base becomes traced, and this is its view
        value = made[2](_promote_owned(made[1]))
    else:
        _owned(x)
        value = promote(ctx, x)
    ctx.promoted[id(x)] = (x, value)
    return value


def getitem(x, key):
    """``x[key]``: a NumPy array indexed at a traced position is read as a constant."""
    if _promotable(x, key):
        return promote(_ctx(), x)[key]
    item = x[key]
    if type(x) is np.ndarray and _basic_key(key):
        ctx = _ctx()
        if ctx is not None:
            _remember_view(ctx, item, x, lambda b, key=key: b[key])
    return ld(item)             # items[0] of a list: may be an array that became traced


def _basic_key(key) -> bool:
    parts = key if isinstance(key, tuple) else (key,)
    return all(k is None or k is Ellipsis or isinstance(k, (slice, int, np.integer)) for k in parts)


def _rolling() -> bool:
    ctx = _ctx()
    return ctx is not None and ctx.rolling > 0


def setitem(x, key, value):
    """``x[key] = value``; returns what the name ``x`` is bound to afterwards.  (Inside a
    loop body being traced once, a NumPy array written at all becomes traced: the write
    happens in every iteration, not once.)"""
    x = ld(x)                   # (the name itself is not read through ld: it is rebound)
    if _promotable(x, key, value) or isinstance(x, np.ndarray) and _rolling():
        x = _promote_owned(x)
    x[key] = value
    return x


def setitem_in_place(x, key, value) -> None:
    """``x[key] = value`` where ``x`` cannot be rebound (a global, ``a[i][j] = v``)."""
    if _promotable(x, key, value):
        raise _ctx().not_compilable(WRITE_INTO_NUMPY, WRITE_INTO_NUMPY_HINT)
    x[key] = value


def setitem_aug(x, key, op: str, value, rebind=True):
    """``x[key] op= value`` (NumPy: read the item, update it in place, write it back)."""
    x = ld(x)
    if _promotable(x, key, value) or isinstance(x, np.ndarray) and _rolling() and rebind:
        if not rebind:
            raise _ctx().not_compilable(WRITE_INTO_NUMPY, WRITE_INTO_NUMPY_HINT)
        x = _promote_owned(x)
    item = x[key]
    x[key] = _INPLACE[op](item, value)
    return x


def aug(x, op: str, value):
    """``x op= value`` on a name."""
    x = ld(x)
    if (_promotable(x, value) or isinstance(x, np.ndarray) and _rolling()) and x.ndim > 0:
        x = _promote_owned(x)
    return _INPLACE[op](x, value)


# ---- expressions ----------------------------------------------------------------------------

def _scalar_test(value):
    if isinstance(value, Tracer) and value.ndim:
        bool(value)                 # NumPy's rule: the usual error, at the line
    return value


def if_exp(test, then, orelse):
    test = _scalar_test(test)
    if not isinstance(test, Tracer):
        return then() if test else orelse()
    return _choose(test, then(), orelse(), "a conditional expression")


def and_(*thunks):
    value = thunks[0]()
    for thunk in thunks[1:]:
        value = _scalar_test(value)
        if isinstance(value, Tracer):
            value = _choose(value, thunk(), value, "`and`")
        elif not value:
            return value
        else:
            value = thunk()
    return value


def or_(*thunks):
    value = thunks[0]()
    for thunk in thunks[1:]:
        value = _scalar_test(value)
        if isinstance(value, Tracer):
            value = _choose(value, value, thunk(), "`or`")
        elif value:
            return value
        else:
            value = thunk()
    return value


def not_(value):
    value = _scalar_test(value)
    if isinstance(value, Tracer):
        return np.logical_not(value)
    return not value


def _choose(test: Tracer, a, b, what: str):
    """``a if test else b`` for a traced scalar test."""
    if a is b:
        return a
    if not (_is_value(a) and _is_value(b)):
        raise test.ctx.not_compilable(
            f"{what} on a traced value chooses between values that are not arrays or numbers "
            f"({type(a).__name__}, {type(b).__name__})", "choose between arrays with np.where")
    if test.dtype != np.bool_:
        test = np.not_equal(test, 0)
    return np.where(test, a, b)


def _is_value(v) -> bool:
    return isinstance(v, (Tracer, np.ndarray, np.generic, int, float, complex, bool))


# ---- tracked state: the Tracers a body can reach, and how to undo what it did -------------------

def _tracers_in(value, found: dict):
    value = _resolved((value,))[0]
    if isinstance(value, Tracer):
        if id(value) not in found:
            found[id(value)] = value
            if value.view is not None:
                _tracers_in(value.view.base, found)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _tracers_in(v, found)
    elif isinstance(value, dict):
        for v in value.values():
            _tracers_in(v, found)


class _Snapshot:
    """What tracing a body may change: Tracers' values, lists/dicts/NumPy arrays in place."""

    def __init__(self, state: tuple, tracers: list[Tracer]):
        self.tracers = [(t, t._instr, t.version, t.view.base_version if t.view else None)
                        for t in tracers]
        self.containers = []
        self.seen_changes: set[int] = set()
        for v in state:
            if isinstance(v, list):
                self.containers.append((v, list(v)))
            elif isinstance(v, dict):
                self.containers.append((v, dict(v)))
            elif isinstance(v, np.ndarray):
                self.containers.append((v, v.copy()))

    def changed_containers(self) -> bool:
        self.seen_changes = self.seen_changes | {id(obj) for obj, _ in self._changes()}
        return bool(self._changes())

    def changed(self) -> list:
        """(container, saved copy) of every container a branch changed so far."""
        return [(obj, saved) for obj, saved in self.containers if id(obj) in self.seen_changes]

    def _changes(self) -> list:
        found = []
        for obj, saved in self.containers:
            if isinstance(obj, np.ndarray):
                changed = not np.array_equal(obj, saved, equal_nan=True)
            elif isinstance(obj, list):
                changed = len(obj) != len(saved) or any(a is not b for a, b in zip(obj, saved))
            else:
                changed = obj.keys() != saved.keys() or any(obj[k] is not saved[k] for k in obj)
            if changed:
                found.append((obj, saved))
        return found

    def restore(self):
        for t, instr, version, base_version in self.tracers:
            t._instr, t.version = instr, version
            if t.view is not None:
                t.view.base_version = base_version
        for obj, saved in self.containers:
            if isinstance(obj, np.ndarray):
                obj[...] = saved
            elif isinstance(obj, list):
                obj[:] = saved
            else:
                obj.clear()
                obj.update(saved)


# ---- if --------------------------------------------------------------------------------------

def if_stmt(test, then, orelse, state: tuple, names: tuple, lineno: int):
    test = _scalar_test(test)
    if not isinstance(test, Tracer):
        return then(state) if test else orelse(state)
    ctx = test.ctx
    if test.dtype != np.bool_:
        test = np.not_equal(test, 0)
    start = len(ctx.builder.instructions)
    before = _tracer_states(state)
    try:
        merged = _traced_if(ctx, test, then, orelse, state, names, lineno, promote_arrays=True)
    except _WritesIntoNumpy as e:
        # NumPy arrays made in the compiled code that a branch writes into become traced
        # (create-then-fill) before the ``if``, and both branches are traced again.
        for arr in e.arrays:
            _promote_owned(arr)
        state = _resolved(state)
        before = _tracer_states(state)
        merged = _traced_if(ctx, test, then, orelse, state, names, lineno)
    work = sum(i.shape.size for i in ctx.builder.instructions[start:] if not i.shape.is_tuple)
    if work < CONDITIONAL_MIN_WORK:
        return merged
    # Expensive branches: run only the chosen one, as an HLO conditional.  (What the select
    # traced is left unused; the optimizer removes it.)
    after = _tracer_states(state)
    _restore(before)
    found = _conditional(ctx, test, then, orelse, state, lineno, merged, before)
    if found is None:
        _restore(after)
        return merged
    return found


def _tracer_states(state) -> list[tuple]:
    found: dict = {}
    _tracers_in(state, found)
    return [(t, t._instr, t.version) for t in found.values()]


def _restore(states: list[tuple]) -> None:
    for t, instr, version in states:
        t._instr, t.version = instr, version


def _drop_promotions(ctx, before: dict) -> list[np.ndarray]:
    """The arrays promoted since ``before`` (a copy of ``ctx.promoted``), forgotten again: a
    branch or loop body promotes in its own computation, whose values do not live outside."""
    made = [arr for key, (arr, _) in ctx.promoted.items() if key not in before]
    if made:
        ctx.promoted = dict(before)
    return made


def _reaches(values, arr) -> bool:
    """Is ``arr`` one of ``values`` or inside one of their lists, tuples or dicts?"""
    for v in values:
        if v is arr or isinstance(v, (list, tuple)) and _reaches(v, arr) \
                or isinstance(v, dict) and _reaches(v.values(), arr):
            return True
    return False


def _conditional(ctx, test, then, orelse, state: tuple, lineno: int, merged: tuple, saved: list):
    """The ``if`` as an HLO ``conditional`` whose branches take the traced values of the state
    (``saved``: their values before the ``if``, as one tuple) and give back those and the names
    they bind; None when a branch does not fit that form (views, names bound to different
    Python values or to arrays of different types, reads of traced values outside the state):
    then the select form ``merged`` stays."""
    if not saved or any(t.view is not None for t, _, _ in saved):
        return None
    tracers = [t for t, _, _ in saved]
    shapes = TupleShape(tuple(instr.shape for _, instr, _ in saved))
    outer, outer_constants = ctx.builder, ctx._constants
    checks = len(ctx.checks)
    branches = []
    promoted = dict(ctx.promoted)
    try:
        for fn, what in ((then, "then"), (orelse, "else")):
            builder = Builder(unique_name(f"{what}_line{lineno}"))
            ctx.builder, ctx._constants = builder, {}
            param = builder.parameter(shapes, "state")
            for k, t in enumerate(tracers):
                t._instr = builder.op("get-tuple-element", param, index=k)
            params = [t.instr for t in tracers]
            out = _resolved(fn(state))
            _drop_promotions(ctx, promoted)      # (arrays made in the branch)
            # a tracer the branch left alone is its parameter: mark it unchanged
            branches.append((builder, [t.instr if t.instr is not p else None
                                       for t, p in zip(tracers, params)], out, params))
            _restore(saved)
    finally:
        _restore(saved)
        ctx.builder, ctx._constants = outer, outer_constants
    if len(ctx.checks) != checks:
        # a branch's run-time check names the branch's values (the select form checks both)
        del ctx.checks[checks:]
        return None
    (_, t_then, o_then, _), (_, t_else, o_else, _) = branches
    slots = []
    for k, (a, b, m) in enumerate(zip(o_then, o_else, merged)):
        if a is b or not isinstance(m, Tracer):
            continue
        if not (isinstance(a, Tracer) and isinstance(b, Tracer) and a.shape == b.shape and a.dtype == b.dtype):
            return None
        slots.append(k)
    comps = []
    for builder, instrs, out, params in branches:
        builder.location = None
        instrs = [i if i is not None else p for i, p in zip(instrs, params)]
        root = builder.op("tuple", *instrs, *[out[k].instr for k in slots])
        try:
            _check_closed(builder)
        except CannotRoll:
            return None
        comps.append(builder.build(root))
    outer.location = _location(ctx, lineno)
    operand = outer.op("tuple", *[instr for _, instr, _ in saved])
    cond = outer.op("conditional", test.instr, operand, operand,
                    true_computation=comps[0], false_computation=comps[1])
    results = [outer.op("get-tuple-element", cond, index=k) for k in range(len(tracers) + len(slots))]
    for (t, instr, version), r, a, b in zip(saved, results, t_then, t_else):
        if a is not None or b is not None:
            t._instr, t.version = r, version + 1
    state_out = list(merged)
    for k, r in zip(slots, results[len(tracers):]):
        state_out[k] = Tracer(ctx, r)
    return tuple(state_out)


class _WritesIntoNumpy(Exception):
    def __init__(self, arrays):
        self.arrays = arrays


def _traced_if(ctx, test, then, orelse, state: tuple, names: tuple, lineno: int, promote_arrays=False):
    found: dict = {}
    _tracers_in(state, found)
    tracers = list(found.values())
    snap = _Snapshot(state, tracers)
    promoted = dict(ctx.promoted)
    out_then = _resolved(then(state))
    made = _drop_promotions(ctx, promoted)
    then_instrs = [t.instr for t in tracers]
    then_changed = snap.changed_containers()
    snap.restore()
    out_else = _resolved(orelse(state))
    made += _drop_promotions(ctx, promoted)
    else_instrs = [t.instr for t in tracers]
    # Arrays from before the ``if`` that a branch promoted (a helper wrote into one): promoted
    # before the ``if`` instead, so that the other branch starts from the same values.
    outer = [arr for arr in made if _reaches(state, arr)]
    if then_changed or snap.changed_containers() or outer:
        snap.restore()
        changed = [obj for obj, _ in snap.changed()] + outer
        if promote_arrays and all(isinstance(obj, np.ndarray) and obj.base is None for obj in changed):
            raise _WritesIntoNumpy(changed)
        raise ctx.not_compilable(
            "an `if` on a traced value changes a Python list, dict or NumPy array in place: "
            "both branches are traced, so both changes would happen",
            "keep the values in arrays and choose with np.where(cond, a, b)")
    from .rules import select, broadcast_to
    for t, a, b in zip(tracers, then_instrs, else_instrs):
        if a is not b:
            ta, tb = Tracer(ctx, a), Tracer(ctx, b)
            t._instr = select(broadcast_to(test, ta.shape), ta, tb).instr
            t.version += 1
    for t in tracers:                      # views follow their (merged) bases
        if t.view is not None:
            t.view.base_version = t.view.base.version
    merged = []
    for name, a, b in zip(names, out_then, out_else):
        if a is b:
            merged.append(a)
        elif a is UNDEFINED or b is UNDEFINED or type(a) is OneBranch or type(b) is OneBranch:
            if _is_value(a) or _is_value(b) or type(a) is OneBranch or type(b) is OneBranch:
                # fine until it is read (a temporary of one branch): then it is refused
                merged.append(OneBranch(NotCompilableError(
                    f"`{name}` is bound in only one branch of an `if` on a traced value: "
                    "whether it exists after the `if` would depend on the data",
                    _location(ctx, lineno),
                    f"bind `{name}` before the `if` (or in both branches), or choose with "
                    "np.where(cond, a, b)")))
            else:
                merged.append(UNDEFINED)
        elif isinstance(a, Tracer) or isinstance(b, Tracer):
            value = _merge_values(ctx, test, a, b, name)
            if value.ndim and any(isinstance(v, Tracer) and id(_root(v)) in found for v in (a, b)):
                # ``y`` is the array it held before the ``if`` (an argument, say) or another
                # one, depending on the data: a later write would land in one or the other
                ctx.ambiguous[id(value)] = (
                    value, f"writing into `{name}`, which after the `if` on a traced value at "
                    f"line {lineno} is the array it held before or another one, depending on "
                    "the data",
                    f"make `{name}` a new array in both branches (e.g. {name} = {name}.copy()), "
                    "or write into the arrays inside the branches")
            merged.append(value)
        elif type(a) is type(b) and _is_value(a) and np.array_equal(a, b):
            merged.append(a)
        elif _is_value(a) and _is_value(b):
            merged.append(_merge_values(ctx, test, a, b, name))
        else:
            raise ctx.not_compilable(
                f"the branches of an `if` on a traced value bind `{name}` to different Python "
                f"objects ({type(a).__name__}, {type(b).__name__})",
                "bind it to arrays or numbers in both branches")
    return tuple(merged)


def _merge_values(ctx, test, a, b, name):
    from .rules import asarray, broadcast_to, convert, select, resolve_input
    da, db = resolve_input(a), resolve_input(b)
    if isinstance(da, np.dtype) and isinstance(db, np.dtype) and da != db:
        raise ctx.not_compilable(
            f"the branches of an `if` on a traced value give `{name}` different dtypes "
            f"({da} and {db}): NumPy's result would depend on the data",
            f"make both the same dtype, e.g. with .astype(np.{np.result_type(da, db)})")
    dtype = np.result_type(da, db) if not (isinstance(da, np.dtype) and da == db) else da
    ta, tb = convert(asarray(ctx, a), dtype), convert(asarray(ctx, b), dtype)
    if ta.shape != tb.shape:
        raise ctx.not_compilable(
            f"the branches of an `if` on a traced value give `{name}` different shapes "
            f"({ta.shape} and {tb.shape})", "make both branches give the same shape")
    return select(broadcast_to(test, ta.shape), ta, tb)


# ---- loops -----------------------------------------------------------------------------------

def for_range(range_fn, args: tuple, body, state: tuple, names: tuple, lineno: int, target=(UNDEFINED,)):
    """The loop; returns the state after it and the loop variable's last value."""
    (last,) = target
    if range_fn is not builtins.range or not any(isinstance(a, Tracer) for a in args):
        r = range_fn(*args)
        ctx = _ctx()
        unroll_max = current_flags().unroll_max
        if ctx is None or range_fn is not builtins.range or len(r) <= unroll_max \
                or not _has_tracer(state):
            if ctx is not None and _has_tracer(state):
                ctx.loop_decisions.append((lineno, "unrolled", f"{len(r)} steps: short loops "
                                           f"(at most {unroll_max}) are unrolled"))
            # (a short loop is unrolled by choice, at any size: only a loop that has no other
            # way is held to the budget)
            budget = None if ctx is None or len(r) <= unroll_max else \
                _Budget(ctx, lineno, "no traced value in its state")
            return _python_loop(r, body, state, last, budget)
        flags = current_flags()
        try:
            state = _Loop(ctx, body, state, names, lineno, r.start, r.stop, r.step,
                          (min(r[0], r[-1]), max(r[0], r[-1])),
                          unroll_budget=(len(r), flags.unroll_budget if unroll_max else 0)).run()
            return tuple(state) + (r[-1],)
        except _Cheap as e:
            ctx.loop_decisions.append((lineno, "unrolled", str(e)))
            return _python_loop(r, body, state, last, None)
        except CannotRoll as e:
            ctx.loop_decisions.append((lineno, "unrolled", str(e)))
            budget = _Budget(ctx, lineno, str(e))
            if len(r) > UNROLL_LIMIT:
                raise budget.refusal(f"a loop of {len(r)} steps") from None
            return _python_loop(r, body, state, last, budget)
    ctx = next(a.ctx for a in args if isinstance(a, Tracer))
    start, stop, step = (0, args[0], 1) if len(args) == 1 else (tuple(args) + (1,))[:3]
    if isinstance(step, Tracer) or step == 0:
        raise ctx.not_compilable("range() with a traced step cannot compile",
                                 "use a Python int step")
    lo_hi = _dynamic_bounds(start, stop, step)
    try:
        state = _Loop(ctx, body, state, names, lineno, start, stop, step, lo_hi).run()
    except CannotRoll as e:
        raise NotCompilableError(
            f"a loop over range() with traced bounds could not be traced once: {e}",
            _location(ctx, lineno),
            "give the loop Python bounds (then it may be unrolled), or write its body "
            "with fixed shapes (np.where with a mask)") from None
    return tuple(state) + (_last_index(start, stop, step, last),)


def for_items(items, start, body, state: tuple, names: tuple, lineno: int):
    """``for target in items`` (``start`` None) or ``for target in enumerate(items, start)``;
    ``items`` is the last name of the state.  Traced items: the loop over their first axis is
    rolled like ``for i in range(len(items))`` with the item ``items[i]``; anything else is
    iterated in Python."""
    if not isinstance(items, Tracer) or not items.shape:
        for item in (items if start is None else builtins.enumerate(items, start)):
            state = body(item, state)
        return tuple(state)

    def indexed(i, state):
        item = getitem(state[-1], i)
        return body(item if start is None else (i + start, item), state)
    return for_range(builtins.range, (items.shape[0],), indexed, state, names, lineno)[:-1]


def traced_items(items) -> bool:
    """Does ``for x in items`` with break/continue run over a traced array (autograph)?"""
    return isinstance(items, Tracer) and items.ndim > 0


def range_bounds(*args):
    """(start, stop, step) of ``range(*args)`` (a ``for`` loop with ``break``, see autograph)."""
    start, stop, step = (0, args[0], 1) if len(args) == 1 else (tuple(args) + (1,))[:3]
    if isinstance(step, Tracer) or step == 0:
        ctx = next(a.ctx for a in args if isinstance(a, Tracer)) if isinstance(step, Tracer) else None
        if ctx is None:
            raise ValueError("range() arg 3 must not be zero")
        raise ctx.not_compilable("range() with a traced step cannot compile", "use a Python int step")
    return start, stop, step


def in_range(k, stop, step):
    return k < stop if step > 0 else k > stop


def _last_index(start, stop, step, before):
    """The loop variable after ``for i in range(start, stop, step)`` with traced bounds."""
    from .index_tracer import IndexTracer, weak_result
    trips = (stop - start + (step - 1 if step > 0 else step + 1)) // step
    last = start + (trips - 1) * step
    if before is not UNDEFINED and _is_value(before):
        last = np.where(trips > 0, last, before)
    if weak_result((start, stop) + ((before,) if before is not UNDEFINED else ())) \
            and isinstance(last, Tracer):      # Python ints in NumPy's eyes: so is the index
        return IndexTracer(last.ctx, last.instr)
    return last


def _python_loop(r, body, state, last, budget=None):
    for last in r:
        state = body(last, state)
        if budget is not None:
            budget.spend()
    return tuple(state) + (last,)


class _Budget:
    """What a loop traced step by step (unrolled) may add to the program: past
    ``UNROLL_BUDGET`` instructions it is refused at once, rather than after minutes of tracing
    and optimizing a program that grows with the trip count."""

    def __init__(self, ctx, lineno: int, why: str):
        self.ctx, self.lineno, self.why = ctx, lineno, why
        self.builder, self.start = ctx.builder, len(ctx.builder.instructions)

    def spend(self) -> None:
        if len(self.builder.instructions) - self.start > UNROLL_BUDGET:
            raise self.refusal("a loop")

    def refusal(self, what: str) -> NotCompilableError:
        return NotCompilableError(
            f"{what} that cannot be traced once into an HLO while ({self.why}) is too long to "
            f"unroll: its steps, traced one by one, would grow the program past "
            f"{UNROLL_BUDGET} instructions (loops of more than {UNROLL_LIMIT} steps are refused "
            "right away)", _location(self.ctx, self.lineno),
            "make the body traceable once (the reason above says what stops it: fixed shapes "
            "and dtypes, no Python lists or counters changed in it, no x[mask] kept after "
            "an iteration), run fewer steps, or run this part eagerly (mode=\"auto\")")


def _dynamic_bounds(start, stop, step):
    """(lowest, highest) value the index of range(start, stop, step) can take, when known."""
    from .index_tracer import value_range
    rs, re_ = value_range(start), value_range(stop)
    if rs is None or re_ is None:
        return None
    return (rs[0], re_[1] - 1) if step > 0 else (re_[0] + 1, rs[1])


def _location(ctx, lineno):
    """The user's location, moved to line ``lineno`` of the same file (a loop's header)."""
    import linecache
    from ..hlo import SourceLocation
    loc, frame = ctx.user_location(), ctx.user_frame()
    if loc is None or loc.line is None or frame is None or lineno is None:
        return loc
    shift = frame.f_lineno - loc.line
    source = linecache.getline(frame.f_code.co_filename, lineno) or None
    return SourceLocation(loc.file, lineno - shift, None, loc.function, source)


def while_loop(cond, body, state: tuple, names: tuple, lineno: int):
    ctx = _ctx()
    budget = _Budget(ctx, lineno, "its condition is a Python value") if ctx is not None else None
    while True:
        test = _scalar_test(cond(state))
        if isinstance(test, Tracer):
            break
        if not test:
            return state
        state = body(state)
        if budget is not None:
            budget.spend()
    ctx = test.ctx
    try:
        return _Loop(ctx, body, state, names, lineno, cond=cond).run()
    except CannotRoll as e:
        raise NotCompilableError(
            f"a `while` loop on a traced condition could not be traced once: {e}",
            _location(ctx, lineno),
            "keep the shapes and dtypes of the loop's values fixed and do not change Python "
            "lists or counters in it; or run it eagerly (mode=\"auto\")") from None


class _Loop:
    """One rolled loop: traces the body (and condition) into computations, emits the while."""

    def __init__(self, ctx, body, state, names, lineno, start=None, stop=None, step=None,
                 index_range=None, cond=None, unroll_budget=(0, 0)):
        self.ctx, self.body, self.state, self.names, self.lineno = ctx, body, _resolved(state), names, lineno
        self.start, self.stop, self.step, self.index_range, self.cond = start, stop, step, index_range, cond
        self.counted = cond is None
        self.trips, self.budget = unroll_budget     # (Python bounds: unrolled when cheap)

    def _find_objects(self):
        found: dict = {}
        _tracers_in(self.state, found)
        if isinstance(self.stop, Tracer):
            _tracers_in(self.stop, found)
        if isinstance(self.start, Tracer):
            _tracers_in(self.start, found)
        self.objects = list(found.values()) + [slot for slot, _ in self.checks]   # (checks: see run)

    def run(self):
        # (state slot, check) per run-time check the body makes (see loop_checks)
        self.checks: list = []
        self.checks_from = len(self.ctx.checks)
        self._find_objects()
        # name k -> initial value (a Tracer) when it gets its own slot (it is rebound)
        self.rebound: dict[int, Tracer] = {}
        self.weak: set[int] = set()      # rebound names that were Python ints
        self.static_after: dict[int, object] = {}
        attempts = 0
        while attempts < _ATTEMPTS:
            snap = _Snapshot(self.state, self.objects)
            promoted = dict(self.ctx.promoted)
            try:
                plan = self._trace()
            finally:
                changed = snap.changed_containers()
                snap.restore()
                # the body's checks name the body's values: never outputs of the program
                made_checks = self.ctx.checks[self.checks_from:]
                del self.ctx.checks[self.checks_from:]
                made = _drop_promotions(self.ctx, promoted)
            # NumPy arrays from before the loop that the body writes into (through any name,
            # a helper's parameter too) become traced before the loop and join its state.
            outer = [arr for arr in made if _reaches(self.state, arr)]
            if outer:
                for arr in outer:
                    _promote_owned(arr)
                self.state = _resolved(self.state)
                self._find_objects()
                continue
            if changed:
                raise CannotRoll("the body changes a Python list, dict or NumPy array in place")
            *plan, requests = plan
            new_checks = [(loop_checks.carry(self.ctx, c), c) for c in made_checks[len(self.checks):]]
            if not requests and not new_checks:
                if self.budget and self.trips * _size(plan[0]) <= self.budget:
                    size = _size(plan[0])
                    raise _Cheap(f"{self.trips} steps of a {size}-instruction body: within the "
                                 f"unroll budget ({self.budget}), where steps fuse and no step "
                                 "costs a host round trip")
                state = self._emit(*plan)
                for slot, check in self.checks:
                    self.ctx.add_check(slot.instr, check.fail, check.fold)
                return state
            attempts += 1
            self.checks += new_checks
            self.objects += [slot for slot, _ in new_checks]
            for k, old, shape, dtype in requests:
                self.rebound[k] = self._initial_for(old, shape, dtype)
        raise CannotRoll("the types of the loop's values do not settle")

    # -- one trace of the body (and the condition) with the current slot layout --

    def _slots(self):
        """(initial outer instruction, shape) per state slot after the index."""
        inits = [t._instr for t in self.objects] + [t.instr for t in self.rebound.values()]
        return inits

    def _trace(self):
        ctx = self.ctx
        inits = self._slots()
        index_shape = [Shape("s64")] if self.counted else []
        shapes = index_shape + [i.shape for i in inits]
        outer_builder, outer_constants = ctx.builder, ctx._constants
        try:
            body_comp, outs, new_state = self._trace_computation("body", shapes, inits, self.body)
            if self.cond is not None:
                cond_comp = self._trace_condition(shapes, inits)
            else:
                cond_comp = None
        finally:
            ctx.builder, ctx._constants = outer_builder, outer_constants
        # Which names did the body rebind, and are the slot types stable?  (The answers are
        # applied by ``run`` once the state is restored: initial values live outside.)
        requests = []
        for k, (old, new) in enumerate(zip(self.state, new_state)):
            if k in self.rebound or new is old:
                continue
            if isinstance(old, Tracer) and id(_root(old)) in self.written:
                # ``b[i] = v; b = f(b)``: the first step writes into the array ``b`` held
                # before the loop, later steps into the one it was rebound to -- not one body.
                # (Which name a write went through is not known: any write into that array
                # counts, so a loop that writes it through another name is unrolled too.)
                raise CannotRoll(f"the body writes into the array `{self.names[k]}` holds and "
                                 f"then rebinds `{self.names[k]}`")
            if isinstance(new, Tracer):
                if getattr(new, "weak", False):          # a loop index: a Python int
                    self.weak.add(k)
                requests.append((k, old, *_stored_type(new)))
            elif isinstance(new, Selection):
                raise CannotRoll(f"the body binds `{self.names[k]}` to x[mask] with a traced mask, whose "
                                 "length depends on the data")
            elif old is UNDEFINED:
                # a Python value first bound in the body (an inner loop's variable): the
                # same in every iteration, since the body is traced once
                self.static_after[k] = new
            elif not self.counted and _is_number(old) and _is_number(new) and type(old) is type(new):
                # a Python counter in a while loop on array values: it becomes traced
                if isinstance(old, int):
                    self.weak.add(k)
                requests.append((k, old, (), np.asarray(new).dtype))
            elif not _same_static(old, new):
                raise CannotRoll(f"the body changes `{self.names[k]}`, a Python value "
                                 f"({type(old).__name__})")
        for k, init in self.rebound.items():
            new = new_state[k]
            if not isinstance(new, Tracer):
                raise CannotRoll(f"the body binds `{self.names[k]}` to a Python value")
            if _stored_type(new) != (init.shape, init.dtype):
                requests.append((k, init, *_stored_type(new)))
        return body_comp, cond_comp, outs, requests

    def _initial_for(self, old, shape, dtype) -> Tracer:
        """The value a rebound name starts from, in the type the body gives it."""
        from .rules import asarray, broadcast_to, convert, full
        ctx = self.ctx
        if old is UNDEFINED or type(old) is OneBranch:      # (never read before the body binds it)
            return full(ctx, shape, 0, dtype)
        if isinstance(old, Tracer):
            value = Tracer(ctx, old.instr)
        elif _is_value(old):
            value = asarray(ctx, old)
        else:
            raise CannotRoll(f"the body binds a {type(old).__name__} value to an array")
        try:
            fits = np.broadcast_shapes(value.shape, shape) == tuple(shape)
        except ValueError:
            fits = False
        if not fits:
            raise CannotRoll("a value changes its shape in the loop")
        if value.dtype != dtype and not np.can_cast(value.dtype, dtype, "same_kind") \
                and not (value.dtype.kind in "iub" and dtype.kind in "fc"):
            raise CannotRoll("a value changes its dtype in the loop")
        return Tracer(ctx, broadcast_to(convert(value, dtype), shape).instr)

    def _bind_params(self, builder, shapes, inits):
        ctx = self.ctx
        param = builder.parameter(TupleShape(tuple(shapes)), "state")
        gtes = [builder.op("get-tuple-element", param, index=k) for k in range(len(shapes))]
        offset = 1 if self.counted else 0
        for t, g in zip(self.objects, gtes[offset:]):
            t._instr = g
        for t in self.objects:
            if t.view is not None:
                t.view.base_version = t.view.base.version
        state = list(self.state)
        for (k, _), g in zip(self.rebound.items(), gtes[offset + len(self.objects):]):
            state[k] = _weak(ctx, g) if k in self.weak else Tracer(ctx, g)
        index = None
        if self.counted:
            from .index_tracer import IndexTracer
            index = IndexTracer(ctx, gtes[0], self.index_range)
        return param, gtes, index, tuple(state)

    def _trace_computation(self, what, shapes, inits, fn):
        ctx = self.ctx
        builder = Builder(unique_name(f"{what}_line{self.lineno}"))
        ctx.builder, ctx._constants = builder, {}
        param, gtes, index, state = self._bind_params(builder, shapes, inits)
        versions = [t.version for t in self.objects]
        ctx.rolling += 1
        try:
            new_state = fn(index, state) if self.counted else fn(state)
        except CannotRoll:
            raise
        except (NbxlaError, IndexError, TypeError, ValueError, AttributeError, KeyError,
                ZeroDivisionError, OverflowError) as e:
            raise CannotRoll(_reason(e)) from None
        finally:
            ctx.rolling -= 1
        # arrays the body wrote into (a view's writes land in its base: bases only)
        self.written = {id(t) for t, v in zip(self.objects, versions) if t.view is None and t.version != v}
        loop_checks.fold(ctx, self.checks, ctx.checks[self.checks_from:])
        new_state = _resolved(new_state) if self.names else ()
        outs = []
        builder.location = None
        if self.counted:
            from .rules import emit, scalar
            nxt = emit(ctx, "add", Tracer(ctx, gtes[0]), scalar(ctx, self.step, np.int64))
            outs.append(nxt.instr)
        outs += [t.instr for t in self.objects]
        for k in self.rebound:
            v = new_state[k]
            outs.append(v.instr if isinstance(v, Tracer) else gtes[0])
        self.unchanged = [o is g for o, g in zip(outs, gtes)]
        builder.location = None
        root = builder.op("tuple", *outs)
        _check_closed(builder)
        return builder.build(root), outs, new_state

    def _trace_condition(self, shapes, inits):
        ctx = self.ctx
        builder = Builder(unique_name(f"cond_line{self.lineno}"))
        ctx.builder, ctx._constants = builder, {}
        param, gtes, _, state = self._bind_params(builder, shapes, inits)
        versions = [t.version for t in self.objects]
        checks = len(ctx.checks)
        try:
            test = _scalar_test(self.cond(state))
        except (NbxlaError, IndexError, TypeError, ValueError) as e:
            raise CannotRoll(_reason(e)) from None
        if len(ctx.checks) != checks:
            raise CannotRoll("the condition needs a check of its values after the run (an index "
                             "that may be out of bounds, a negative integer power)")
        if [t.version for t in self.objects] != versions:
            raise CannotRoll("the condition writes into an array")
        from .rules import asarray
        test = asarray(ctx, test)
        if test.dtype != np.bool_:
            test = np.not_equal(test, 0)
        builder.location = None
        _check_closed(builder)
        return builder.build(test.instr)

    def _emit(self, body_comp, cond_comp, outs):
        ctx = self.ctx
        inits = self._slots()
        outer = ctx.builder
        if self.counted:
            from .rules import asarray, convert
            start = self.start if not isinstance(self.start, Tracer) else Tracer(ctx, self.start.instr)
            start = convert(asarray(ctx, start), np.int64)
            init_instrs = [start.instr] + inits
            cond_comp = self._counted_condition([start.instr.shape] + [i.shape for i in inits])
        else:
            init_instrs = inits
        ctx.builder.location = _location(ctx, self.lineno)
        init = outer.op("tuple", *init_instrs)
        loop = outer.op("while", init, condition=cond_comp, body=body_comp)
        gtes = [outer.op("get-tuple-element", loop, index=k) for k in range(len(init_instrs))]
        offset = 1 if self.counted else 0
        for t, g, same in zip(self.objects, gtes[offset:], self.unchanged[offset:]):
            # a value the body does not change stays the loop's input: a loop around this one
            # must see it unchanged too (else it counts as written: a NumPy scalar argument
            # read in a nested loop was "read-only")
            if not same:
                t._instr = g
                t.version += 1
        for t in self.objects:
            if t.view is not None:
                t.view.base_version = t.view.base.version
        state = list(self.state)
        for (k, _), g in zip(self.rebound.items(), gtes[offset + len(self.objects):]):
            state[k] = _weak(ctx, g) if k in self.weak else Tracer(ctx, g)
        for k, value in self.static_after.items():
            state[k] = value
        ctx.loop_decisions.append((self.lineno, "rolled", "a while loop; its body traced once"))
        return tuple(state)

    def _counted_condition(self, shapes):
        """``index < stop`` (``>`` for a negative step); a traced stop is a state slot."""
        builder = Builder(unique_name(f"cond_line{self.lineno}"))
        param = builder.parameter(TupleShape(tuple(shapes)), "state")
        index = builder.op("get-tuple-element", param, index=0)
        if not isinstance(self.stop, Tracer):
            limit = builder.op("constant", shape=Shape("s64"), literal=np.asarray(self.stop, np.int64))
        else:
            k = next(j for j, t in enumerate(self.objects) if t is self.stop)
            limit = builder.op("get-tuple-element", param, index=1 + k)
            if limit.shape.element_type != "s64":
                limit = builder.op("convert", limit, shape=Shape("s64"))
        builder.op("compare", index, limit, direction="LT" if self.step > 0 else "GT")
        return builder.build()


def _root(t: Tracer) -> Tracer:
    while t.view is not None:
        t = t.view.base
    return t


def _stored_type(t: Tracer) -> tuple:
    """(shape, dtype) of a value the body gave, read without re-deriving a view: outside the
    body's trace that would build the view's slice in the outer computation from the body's
    values (a view bound in the body, its base written after)."""
    return t._instr.shape.dims, t._instr.shape.dtype


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _weak(ctx, instr) -> Tracer:
    from .index_tracer import IndexTracer
    return IndexTracer(ctx, instr)


def _same_static(old, new) -> bool:
    if type(old) is not type(new):
        return False
    try:
        return bool(old == new) if not isinstance(old, np.ndarray) else np.array_equal(old, new)
    except Exception:
        return False


def _reason(e: Exception) -> str:
    text = str(e).split("\n")[0]
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _check_closed(builder: Builder) -> None:
    """Every operand must come from this computation (a loop body cannot read the outer one's
    values except through its state)."""
    mine = {id(i) for i in builder.instructions}
    for instr in builder.instructions:
        for o in instr.operands:
            if id(o) not in mine:
                raise CannotRoll("the body reads a traced value that is not part of its state "
                                 "(a global or an attribute)")
