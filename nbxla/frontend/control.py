"""The runtime of converted code (``autograph.py``): calls, writes and branches on Tracers,
and the state loops and branches share (``loops.py`` holds the loops; ``runtime.py`` is the
namespace converted code calls).

On Python values every helper does exactly what the Python statement would.  On traced ones:

* ``if_stmt`` / ``if_exp`` / ``and_`` / ``or_`` / ``not_`` trace both branches and choose with
  ``select`` (traced operations are pure, so computing both is only a cost); an ``if`` whose
  branches compute ``CONDITIONAL_MIN_WORK`` elements or more becomes an HLO ``conditional``
  instead, so that only the chosen branch runs.
* ``setitem`` turns a NumPy array made inside the compiled code into a traced one on its
  first traced write (``out = np.zeros(n); out[i] = traced``) -- one Tracer for every
  reference to that array (``ld``: a helper's parameter, the caller's name, a list item, a
  view taken with ``x[slices]`` or ``reshape``/``transpose``).
"""

from __future__ import annotations

import builtins
import contextlib
import operator
import os
import sys
import sysconfig

import numpy as np

from ..errors import NotCompilableError
from ..hlo import Builder, TupleShape
from ..hlo.builder import unique_name
from .promotion import (OneBranch, active_context, basic_key, drop_promotions, has_tracer, ld,
                        promotable, promote, promote_owned, reaches, remember_view, resolved_state)
from .registry import ENTRY_POINTS
from .tracer import WRITE_INTO_NUMPY, WRITE_INTO_NUMPY_HINT, Tracer

# An ``if`` on a traced value whose branches compute at least this many elements becomes an HLO
# ``conditional`` (only the chosen branch runs); cheaper ones select between both branches.
CONDITIONAL_MIN_WORK = 1 << 15


class _Undefined:
    """The value of a name a loop or branch has not bound (yet)."""

    def __repr__(self):
        return "<undefined>"


UNDEFINED = _Undefined()




class CannotRoll(Exception):
    """Tracing the loop body once is not valid; the reason says why."""


def get_state(loc: dict, glob: dict | None, names: tuple) -> tuple:
    """The values of ``names`` before a loop or branch.  In a cell, a name looks up as Python
    looks it up there (namespace, then builtins); in a function (``glob`` None) the names are
    its locals, and one not bound yet is UNDEFINED -- not a global of the same name."""
    if glob is None:
        return resolved_state([loc[n] if n in loc else UNDEFINED for n in names])
    return resolved_state(loc[n] if n in loc else glob[n] if n in glob else
                     getattr(builtins, n, UNDEFINED) for n in names)


def bound_state(loc: dict, names: tuple) -> tuple:
    """The state a loop body or branch hands back: a name it left unbound is UNDEFINED."""
    return tuple([loc.get(n, UNDEFINED) for n in names])














# ---- calls ---------------------------------------------------------------------------------

_ARRAY_MAKERS = (np.array, np.asarray, np.asanyarray, np.ascontiguousarray)


def call(f, *args, **kwargs):
    ctx = active_context()
    if ctx is None:
        return f(*args, **kwargs)
    if (f is builtins.min or f is builtins.max) and not kwargs and has_tracer(args):
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
    if isinstance(f, type) and issubclass(f, np.number) and len(args) == 1 and not kwargs \
            and isinstance(args[0], Tracer):
        # np.uint32(traced), np.float32(x[i]): NumPy's scalar types cast as astype does (a hash
        # loop's ``h ^ np.uint32(data[i])``; before, NumPy asked the tracer for its value)
        from .rules import convert
        value = convert(args[0], np.dtype(f))
        return Tracer(ctx, value.instr) if value is args[0] else value
    if any(f is m for m in _ARRAY_MAKERS) and args and has_tracer(args[0]):
        from .rules import asarray, convert
        value = asarray(ctx, _stack_nested(ctx, args[0]))
        dtype = kwargs.get("dtype")
        value = convert(value, dtype) if dtype is not None else value
        return Tracer(ctx, value.instr) if value is args[0] else value
    if f is np.empty or f is np.empty_like:
        # Unspecified contents: zeros are one valid answer, and one that becomes a fill when
        # the array is traced, not a constant of whatever the memory held (a 100 000-element
        # np.empty output of a loop was a 400 KB constant in the module and its keys).
        f = np.zeros if f is np.empty else np.zeros_like
    if isinstance(f, type(call)) and not getattr(f, "__nbxla_converted__", False) \
            and _is_user_code(f):
        f = ENTRY_POINTS["convert_function"](f)
    if ctx.promoted:                # h(items[0]): an argument that is not a name
        args = resolved_state(args)
    result = f(*args, **kwargs)
    owner = getattr(f, "__self__", None)
    if type(owner) is np.ndarray and getattr(f, "__name__", None) in _VIEW_METHODS:
        remember_view(ctx, result, owner, lambda b, name=f.__name__: getattr(b, name)(*args, **kwargs))
    return result


# NumPy methods whose result may be a view, which Tracers make the same way.
_VIEW_METHODS = frozenset({"reshape", "transpose", "swapaxes", "squeeze"})


_LIBRARY_DIRS = tuple({sys.prefix, sys.base_prefix, sysconfig.get_paths()["purelib"],
                       sysconfig.get_paths()["stdlib"], os.path.dirname(os.path.dirname(__file__))})


# nbxla.examples holds programs written the way users write them (lenet5 calls conv2d, whose
# loops must become HLO loops): converted like the user's own helpers.
_EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(__file__)), "examples.py")


def _is_user_code(f) -> bool:
    """The user's own helper functions are converted too; library code is called as it is."""
    path = os.path.abspath(f.__code__.co_filename)
    return path == _EXAMPLES or not path.startswith(_LIBRARY_DIRS)


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
            "their state compile", location_at(value.ctx, lineno),
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










def getitem(x, key):
    """``x[key]``: a NumPy array indexed at a traced position is read as a constant."""
    if promotable(x, key):
        return promote(active_context(), x)[key]
    item = x[key]
    if type(x) is np.ndarray and basic_key(key):
        ctx = active_context()
        if ctx is not None:
            remember_view(ctx, item, x, lambda b, key=key: b[key])
    return ld(item)             # items[0] of a list: may be an array that became traced




def _rolling() -> bool:
    ctx = active_context()
    return ctx is not None and ctx.rolling > 0


def setitem(x, key, value):
    """``x[key] = value``; returns what the name ``x`` is bound to afterwards.  (Inside a
    loop body being traced once, a NumPy array written at all becomes traced: the write
    happens in every iteration, not once.)"""
    x = ld(x)                   # (the name itself is not read through ld: it is rebound)
    if promotable(x, key, value) or isinstance(x, np.ndarray) and _rolling():
        x = promote_owned(x)
    x[key] = value
    return x


def setitem_in_place(x, key, value) -> None:
    """``x[key] = value`` where ``x`` cannot be rebound (a global, ``a[i][j] = v``)."""
    if promotable(x, key, value):
        raise active_context().not_compilable(WRITE_INTO_NUMPY, WRITE_INTO_NUMPY_HINT)
    x[key] = value


def setitem_aug(x, key, op: str, value, rebind=True):
    """``x[key] op= value`` (NumPy: read the item, update it in place, write it back)."""
    x = ld(x)
    if promotable(x, key, value) or isinstance(x, np.ndarray) and _rolling() and rebind:
        if not rebind:
            raise active_context().not_compilable(WRITE_INTO_NUMPY, WRITE_INTO_NUMPY_HINT)
        x = promote_owned(x)
    item = x[key]
    x[key] = _INPLACE[op](item, value)
    return x


def aug(x, op: str, value):
    """``x op= value`` on a name."""
    x = ld(x)
    if (promotable(x, value) or isinstance(x, np.ndarray) and _rolling()) and x.ndim > 0:
        x = promote_owned(x)
    return _INPLACE[op](x, value)


# ---- expressions ----------------------------------------------------------------------------

def scalar_test(value):
    if isinstance(value, Tracer) and value.ndim:
        bool(value)                 # NumPy's rule: the usual error, at the line
    return value


def if_exp(test, then, orelse):
    test = scalar_test(test)
    if not isinstance(test, Tracer):
        return then() if test else orelse()
    return _choose(test, then(), orelse(), "a conditional expression")


def and_(*thunks):
    value = thunks[0]()
    for thunk in thunks[1:]:
        value = scalar_test(value)
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
        value = scalar_test(value)
        if isinstance(value, Tracer):
            value = _choose(value, value, thunk(), "`or`")
        elif value:
            return value
        else:
            value = thunk()
    return value


def not_(value):
    value = scalar_test(value)
    if isinstance(value, Tracer):
        return np.logical_not(value)
    return not value


def _choose(test: Tracer, a, b, what: str):
    """``a if test else b`` for a traced scalar test."""
    if a is b:
        return a
    if not (is_value(a) and is_value(b)):
        raise test.ctx.not_compilable(
            f"{what} on a traced value chooses between values that are not arrays or numbers "
            f"({type(a).__name__}, {type(b).__name__})", "choose between arrays with np.where")
    if test.dtype != np.bool_:
        test = np.not_equal(test, 0)
    return np.where(test, a, b)


def is_value(v) -> bool:
    return isinstance(v, (Tracer, np.ndarray, np.generic, int, float, complex, bool))


# ---- tracked state: the Tracers a body can reach, and how to undo what it did -------------------

def tracers_in(value, found: dict):
    value = resolved_state((value,))[0]
    if isinstance(value, Tracer):
        if id(value) not in found:
            found[id(value)] = value
            if value.view is not None:
                tracers_in(value.view.base, found)
    elif isinstance(value, (list, tuple)):
        for v in value:
            tracers_in(v, found)
    elif isinstance(value, dict):
        for v in value.values():
            tracers_in(v, found)


class Snapshot:
    """What tracing a body may change: Tracers' values, lists/dicts/NumPy arrays in place."""

    def __init__(self, state: tuple, tracers: list[Tracer]):
        self.tracers = [(t, t.stored_instr, t.version, t.view.base_version if t.view else None)
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
            t.rebind(instr, version)
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
    test = scalar_test(test)
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
            promote_owned(arr)
        state = resolved_state(state)
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
    tracers_in(state, found)
    return [(t, t.stored_instr, t.version) for t in found.values()]


def _restore(states: list[tuple]) -> None:
    for t, instr, version in states:
        t.rebind(instr, version)






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
    outer = ctx.builder
    checks = len(ctx.checks)
    branches = []
    promoted = dict(ctx.promoted)
    decisions = len(ctx.loop_decisions)
    try:
        for fn, what in ((then, "then"), (orelse, "else")):
            with ctx.subcomputation(Builder(unique_name(f"{what}_line{lineno}"))) as builder:
                param = builder.parameter(shapes, "state")
                for k, t in enumerate(tracers):
                    t.rebind(builder.op("get-tuple-element", param, index=k))
                params = [t.instr for t in tracers]
                with _branch(ctx, None):
                    out = resolved_state(fn(state))
                drop_promotions(ctx, promoted)      # (arrays made in the branch)
                # a tracer the branch left alone is its parameter: mark it unchanged
                branches.append((builder, [t.instr if t.instr is not p else None
                                           for t, p in zip(tracers, params)], out, params))
                _restore(saved)
    except (IndexError, NotCompilableError, CannotRoll):
        # The select form traced both branches already; a branch traced on its own can fail
        # where that one did not: ``if i + 1 < N: t[i + 1]`` has no condition at hand in a
        # conditional's branch to guard the index with (nussinov's table past 73 x 73, where
        # the branches first cost a conditional, raised here and unrolled the whole loop nest).
        drop_promotions(ctx, promoted)
        del ctx.checks[checks:]
        del ctx.loop_decisions[decisions:]
        return None
    finally:
        _restore(saved)
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
            check_closed(builder)
        except CannotRoll:
            return None
        comps.append(builder.build(root))
    outer.location = location_at(ctx, lineno)
    operand = outer.op("tuple", *[instr for _, instr, _ in saved])
    cond = outer.op("conditional", test.instr, operand, operand,
                    true_computation=comps[0], false_computation=comps[1])
    results = [outer.op("get-tuple-element", cond, index=k) for k in range(len(tracers) + len(slots))]
    for (t, instr, version), r, a, b in zip(saved, results, t_then, t_else):
        if a is not None or b is not None:
            t.rebind(r, version + 1)
    state_out = list(merged)
    for k, r in zip(slots, results[len(tracers):]):
        state_out[k] = Tracer(ctx, r)
    return tuple(state_out)


@contextlib.contextmanager
def _branch(ctx, condition):
    """While a branch of an ``if`` on a traced value is traced: the condition it runs under."""
    ctx.branch_path.append((ctx.builder, condition))
    try:
        yield
    finally:
        ctx.branch_path.pop()


class _WritesIntoNumpy(Exception):
    def __init__(self, arrays):
        self.arrays = arrays


def _traced_if(ctx, test, then, orelse, state: tuple, names: tuple, lineno: int, promote_arrays=False):
    found: dict = {}
    tracers_in(state, found)
    tracers = list(found.values())
    snap = Snapshot(state, tracers)
    promoted = dict(ctx.promoted)
    with _branch(ctx, test):
        out_then = resolved_state(then(state))
    made = drop_promotions(ctx, promoted)
    then_instrs = [t.instr for t in tracers]
    then_changed = snap.changed_containers()
    snap.restore()
    with _branch(ctx, np.logical_not(test)):
        out_else = resolved_state(orelse(state))
    made += drop_promotions(ctx, promoted)
    else_instrs = [t.instr for t in tracers]
    # Arrays from before the ``if`` that a branch promoted (a helper wrote into one): promoted
    # before the ``if`` instead, so that the other branch starts from the same values.
    outer = [arr for arr in made if reaches(state, arr)]
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
            t.rebind(select(broadcast_to(test, ta.shape), ta, tb).instr, t.version + 1)
    for t in tracers:                      # views follow their (merged) bases
        if t.view is not None:
            t.view.base_version = t.view.base.version
    merged = []
    for name, a, b in zip(names, out_then, out_else):
        if a is b:
            merged.append(a)
        elif a is UNDEFINED or b is UNDEFINED or type(a) is OneBranch or type(b) is OneBranch:
            if is_value(a) or is_value(b) or type(a) is OneBranch or type(b) is OneBranch:
                # fine until it is read (a temporary of one branch): then it is refused
                merged.append(OneBranch(NotCompilableError(
                    f"`{name}` is bound in only one branch of an `if` on a traced value: "
                    "whether it exists after the `if` would depend on the data",
                    location_at(ctx, lineno),
                    f"bind `{name}` before the `if` (or in both branches), or choose with "
                    "np.where(cond, a, b)")))
            else:
                merged.append(UNDEFINED)
        elif isinstance(a, Tracer) or isinstance(b, Tracer):
            value = _merge_values(ctx, test, a, b, name)
            if value.ndim and any(isinstance(v, Tracer) and id(view_root(v)) in found for v in (a, b)):
                # ``y`` is the array it held before the ``if`` (an argument, say) or another
                # one, depending on the data: a later write would land in one or the other
                ctx.ambiguous[id(value)] = (
                    value, f"writing into `{name}`, which after the `if` on a traced value at "
                    f"line {lineno} is the array it held before or another one, depending on "
                    "the data",
                    f"make `{name}` a new array in both branches (e.g. {name} = {name}.copy()), "
                    "or write into the arrays inside the branches")
            merged.append(value)
        elif type(a) is type(b) and is_value(a) and np.array_equal(a, b):
            merged.append(a)
        elif is_value(a) and is_value(b):
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


# ---- helpers of branches and loops ------------------------------------------------------------

def location_at(ctx, lineno):
    """The user's location, moved to line ``lineno`` of the same file (a loop's header)."""
    import linecache
    from ..hlo import SourceLocation
    loc, frame = ctx.user_location(), ctx.user_frame()
    if loc is None or loc.line is None or frame is None or lineno is None:
        return loc
    shift = frame.f_lineno - loc.line
    source = linecache.getline(frame.f_code.co_filename, lineno) or None
    return SourceLocation(loc.file, lineno - shift, None, loc.function, source)


def view_root(t: Tracer) -> Tracer:
    while t.view is not None:
        t = t.view.base
    return t


def check_closed(builder: Builder) -> None:
    """Every operand must come from this computation (a loop body cannot read the outer one's
    values except through its state)."""
    mine = {id(i) for i in builder.instructions}
    for instr in builder.instructions:
        for o in instr.operands:
            if id(o) not in mine:
                raise CannotRoll("the body reads a traced value that is not part of its state "
                                 "(a global or an attribute)")

