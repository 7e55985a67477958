"""Python loops over traced values (the converted code's ``for``/``while``, see ``autograph.py``).

* ``for_range`` traces the loop body once, with the index a traced scalar, into an HLO
  ``while`` whose state is every traced value the body can reach (one slot per array object,
  so writes into arrays and their views stay visible, plus one per name the body rebinds).
  When that is not valid -- the body needs the index as a Python int, changes Python state,
  changes a value's shape -- it runs the Python loop instead (the trace is unrolled).  Loops
  of at most ``NBXLA_FLAGS=--unroll_max`` steps (4) are unrolled, and so are longer ones whose
  steps times body instructions fit ``--unroll_budget``: a rolled step costs a host round trip,
  unrolled steps fuse.  Both only while steps times the kernels each step adds (reductions,
  other ops that are a kernel of their own, a read of the previous step's values at other
  positions: ``unroll_cost``) stay within ``UNROLL_KERNEL_BUDGET``: each would be one more
  kernel to compile, and no fusion merges them across steps; and never when the body reduces a
  window that moves with the index (rolled, the nest becomes one window op).  A name bound to
  ``x[mask]`` in each step does not stop a loop of more than ``--unroll_max`` steps rolling;
  after the loop it refuses use.
* ``for_items`` does the same for ``for x in traced`` and ``enumerate(traced)`` (over the
  first axis, the item ``traced[i]``).
* ``while_loop`` runs in Python while its condition is a Python value, then as an HLO
  ``while`` once the condition is traced (from before the step that made it traced).
"""

from __future__ import annotations

import builtins
import sys

import numpy as np

from ..errors import NbxlaError, NotCompilableError
from ..flags import current_flags
from ..hlo import Builder, Shape, TupleShape
from ..hlo.builder import unique_name
from . import cheap_loops, loop_checks, step_undo
from .unroll_cost import kernels_per_step, moving_windows, size as _size
from .control import (UNDEFINED, CannotRoll, Snapshot, check_closed, getitem, is_value, location_at,
                      scalar_test, tracers_in, view_root)
from .promotion import (OneBranch, active_context, drop_promotions, has_tracer, promote_owned, reaches,
                        resolved_state)
from .loop_values import is_number, redefined_function, same_static, step_seeds, stored_type
from .ragged import RaggedSlice
from .selection import Selection, SelectionAfterLoop
from .tracer import Tracer

_ATTEMPTS = 4
# A loop that cannot be traced once is unrolled (traced step by step) only while that stays
# small: longer ones are refused at once, not after minutes of tracing and optimizing.
UNROLL_LIMIT = 1000
UNROLL_BUDGET = 2000
# Unrolled steps times kernels per step (see unroll_cost) stay within this: 28 x 28 unrolled
# window reductions (a convolution written as a loop over output positions) took a minute to
# compile, rolled one second; 20 unrolled steps of Floyd-Warshall (each reading the previous
# step's row and column: no fusion across steps) 1.3-4 s, rolled 0.1 s.
UNROLL_KERNEL_BUDGET = 4


class _Cheap(Exception):
    """The loop is cheaper unrolled (its steps times its body's size are within budget)."""


# ---- loops -----------------------------------------------------------------------------------

def for_range(range_fn, args: tuple, body, state: tuple, names: tuple, lineno: int, target=(UNDEFINED,),
              written: tuple = (), dead: tuple = ()):
    """The loop; returns the state after it and the loop variable's last value.  ``written``:
    the names whose items the body writes (see ``_Loop.run``); ``dead``: the names whose value
    on entry it never reads (``loop_writes.dead_on_entry``)."""
    (last,) = target
    if range_fn is not builtins.range or not any(isinstance(a, Tracer) for a in args):
        r = range_fn(*args)
        ctx = active_context()
        unroll_max = current_flags().unroll_max
        short = len(r) <= unroll_max
        if ctx is None or range_fn is not builtins.range or short and len(r) <= 1 \
                or not has_tracer(state):
            if ctx is not None and has_tracer(state):
                ctx.loop_decisions.append((lineno, "unrolled", f"{len(r)} steps: short loops "
                                           f"(at most {unroll_max}) are unrolled"))
            budget = None if ctx is None or short else \
                _Budget(ctx, lineno, "no traced value in its state")
            return _python_loop(r, body, state, last, budget)
        flags = current_flags()
        # (a short loop is unrolled by choice, at any size, unless its steps would each add
        # kernels of their own past UNROLL_KERNEL_BUDGET: nested 4-step loops of window
        # reductions were 16 kernels to compile)
        budget = sys.maxsize if short else flags.unroll_budget if unroll_max else 0
        seen = cheap_loops.key(body, lineno, r, state) if short else None
        if seen is not None and seen in ctx.cheap_loops:
            ctx.loop_decisions.append((lineno, "unrolled", f"{len(r)} steps: short loops (at most "
                                       f"{unroll_max}) are unrolled"))
            return _python_loop(r, body, state, last, None)
        try:
            state = _Loop(ctx, body, state, names, lineno, r.start, r.stop, r.step,
                          (min(r[0], r[-1]), max(r[0], r[-1])),
                          unroll_budget=(len(r), budget), written=written, dead=dead).run()
            return tuple(state) + (r[-1],)
        except _Cheap as e:
            if seen is not None:
                ctx.cheap_loops.add(seen)
            ctx.loop_decisions.append((lineno, "unrolled", f"{len(r)} steps: short loops (at most "
                                       f"{unroll_max}) are unrolled" if short else str(e)))
            return _python_loop(r, body, state, last, None)
        except CannotRoll as e:
            ctx.loop_decisions.append((lineno, "unrolled", str(e)))
            if short:
                return _python_loop(r, body, state, last, None)
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
        state = _Loop(ctx, body, state, names, lineno, start, stop, step, lo_hi, written=written,
                      dead=dead).run()
    except CannotRoll as e:
        raise NotCompilableError(
            f"a loop over range() with traced bounds could not be traced once: {e}",
            location_at(ctx, lineno),
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
    if before is not UNDEFINED and is_value(before):
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
            "right away)", location_at(self.ctx, self.lineno),
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




def while_loop(cond, body, state: tuple, names: tuple, lineno: int, written: tuple = (), dead: tuple = ()):
    ctx = active_context()
    budget = _Budget(ctx, lineno, "its condition is a Python value") if ctx is not None else None
    last = None         # (the state before the last step run in Python, how to undo that step)
    steps = 0
    clock_tried = ctx is None
    while True:
        test = scalar_test(cond(state))
        if isinstance(test, Tracer):
            break
        if not test:
            return state
        if not clock_tried and last is not None and steps > current_flags().unroll_max \
                and has_tracer(state):
            clock_tried = True
            rolled, state = _roll_on_python_numbers(ctx, cond, body, last, state, names, lineno, written, dead)
            if rolled:
                return state
            continue
        last = (state, step_undo.StepUndo(ctx, state)) \
            if ctx is not None and step_undo.undo_affordable(steps, state) else None
        state = body(state)
        steps += 1
        if budget is not None:
            budget.spend()
    ctx = test.ctx
    if last is not None:
        # The step that made the condition traced (``err = 1.0; while err > tol: ...; err =
        # traced``) is undone and the loop rolled from before it, its Python numbers made
        # traced: the same loop, whose body is then traced, optimized and compiled once
        # instead of twice (once peeled, once rolled; channel flow's first call: 1.14 -> 0.74 s
        # of CPU).  Where the body cannot be rolled from there (it needs a Python value the
        # step made traced), the step is run again in Python and the loop rolled after it.
        before, undo = last
        seeds = step_seeds(before, state)
        undo.restore()
        try:
            rolled = _Loop(ctx, body, before, names, lineno, cond=cond, written=written, seeds=seeds,
                           dead=dead).run()
            undo.drop_instructions()
            return rolled
        except CannotRoll:
            undo.restore()
            state = body(before)
            if not isinstance(scalar_test(cond(state)), Tracer):
                raise NbxlaError("internal error: a while loop's step, run again, gave a "
                                 "condition of another kind") from None
    try:
        return _Loop(ctx, body, state, names, lineno, cond=cond, written=written, dead=dead).run()
    except CannotRoll as e:
        raise NotCompilableError(
            f"a `while` loop on a traced condition could not be traced once: {e}",
            location_at(ctx, lineno),
            "keep the shapes and dtypes of the loop's values fixed and do not change Python "
            "lists or counters in it; or run it eagerly (mode=\"auto\")") from None


def _roll_on_python_numbers(ctx, cond, body, last, state, names, lineno, written, dead):
    """A ``while`` whose condition reads only Python numbers the body changes (``while t <
    t_end: ...; t += dt``), past ``--unroll_max`` steps run in Python: rolled from before the
    last of them with those numbers traced, so the condition is traced too -- the same IEEE
    arithmetic, the same trip count (before, every step was unrolled: 20 steps of a 1-D
    advection were 40 kernels, 0.4x NumPy, and 2000 were refused).  (rolled?, state): where it
    cannot be rolled so, the step is run again in Python and the loop goes on there."""
    before, undo = last
    seeds = step_seeds(before, state)
    if not any(number for *_, number in seeds):
        return False, state
    undo.restore()
    try:
        rolled = _Loop(ctx, body, before, names, lineno, cond=cond, written=written, seeds=seeds,
                       dead=dead).run()
        undo.drop_instructions()
        return True, rolled
    except CannotRoll:
        undo.restore()
        return False, body(before)


class _Loop:
    """One rolled loop: traces the body (and condition) into computations, emits the while."""

    def __init__(self, ctx, body, state, names, lineno, start=None, stop=None, step=None,
                 index_range=None, cond=None, unroll_budget=(0, 0), written=(), seeds=(), dead=()):
        self.ctx, self.body, self.state, self.names, self.lineno = ctx, body, resolved_state(state), names, lineno
        self.dead = frozenset(dead)      # (names whose value on entry the body never reads)
        self.written_names, self.seeds = written, seeds
        self.start, self.stop, self.step, self.index_range, self.cond = start, stop, step, index_range, cond
        self.counted = cond is None
        self.trips, self.budget = unroll_budget     # (Python bounds: unrolled when cheap)
        self.why = ""                               # (why a loop within budget stays rolled)
        # (a loop of at most --unroll_max steps: unrolled unless it is costly, see for_range)
        self.short = self.trips and self.budget == sys.maxsize

    def _find_objects(self):
        found: dict = {}
        tracers_in(self.state, found)
        if isinstance(self.stop, Tracer):
            tracers_in(self.stop, found)
        if isinstance(self.start, Tracer):
            tracers_in(self.start, found)
        self.objects = list(found.values()) + [slot for slot, _ in self.checks]   # (checks: see run)

    def run(self):
        # (state slot, check) per run-time check the body makes (see loop_checks)
        self.checks_key = (getattr(self.body, "__code__", None), self.lineno)
        seen = self.ctx.loop_checks_seen.get(self.checks_key, ()) if self.checks_key[0] else ()
        self.checks: list = [(loop_checks.carry(self.ctx, c), c) for c in seen]
        self.seeded = len(self.checks)
        self.checks_from = len(self.ctx.checks)
        self._promote_written()
        self._find_objects()
        # name k -> initial value (a Tracer) when it gets its own slot (it is rebound)
        self.rebound: dict[int, Tracer] = {}
        self.weak: set[int] = set()      # rebound names that were Python numbers
        self.numbers: set[int] = set()   # ...that were not traced before the loop
        for k, old, shape, dtype, weak, number in self.seeds:      # (see step_seeds)
            self.rebound[k] = self._initial_for(old, shape, dtype)
            if weak:
                self.weak.add(k)
            if number:
                self.numbers.add(k)
        self.static_after: dict[int, object] = {}
        attempts = 0
        while attempts < _ATTEMPTS:
            snap = Snapshot(self.state, self.objects)
            promoted = dict(self.ctx.promoted)
            try:
                plan = self._trace()
            except CannotRoll as e:
                if not self.numbers:
                    raise
                # (a Python number made traced may be needed as one: a slice bound, a shape)
                names = ", ".join(f"`{self.names[k]}`" for k in sorted(self.numbers))
                raise CannotRoll(f"{e} (with the Python number {names} that the body changes "
                                 "traced)") from None
            finally:
                changed = snap.changed_containers()
                snap.restore()
                # the body's checks name the body's values: never outputs of the program
                made_checks = self.ctx.checks[self.checks_from:]
                del self.ctx.checks[self.checks_from:]
                made = drop_promotions(self.ctx, promoted)
            # NumPy arrays from before the loop that the body writes into (through any name,
            # a helper's parameter too) become traced before the loop and join its state.
            outer = [arr for arr in made if reaches(self.state, arr)]
            if outer:
                for arr in outer:
                    promote_owned(arr)
                self.state = resolved_state(self.state)
                self._find_objects()
                continue
            if changed:
                raise CannotRoll("the body changes a Python list, dict or NumPy array in place")
            if self.seeded and not loop_checks.same(self.checks[:self.seeded], made_checks):
                # (this trace made other checks than the last one at this loop: learn them again)
                self.checks, self.seeded = [], 0
                self._find_objects()
                attempts += 1
                continue
            # (each slot reports through the check this trace folded into it: the last trace's
            # checks of one kind need not come in the earlier trace's order)
            self.checks = [(slot, new) for (slot, _), new in zip(self.checks, made_checks)] \
                + self.checks[len(made_checks):]
            *plan, requests = plan
            new_checks = [(loop_checks.carry(self.ctx, c), c) for c in made_checks[len(self.checks):]]
            if not requests and not new_checks:
                if self.checks_key[0] is not None:
                    self.ctx.loop_checks_seen[self.checks_key] = [c for _, c in self.checks]
                if self.budget and self.trips * _size(plan[0]) <= self.budget:
                    size, kernels = _size(plan[0]), kernels_per_step(plan[0])
                    windows = moving_windows(plan[0]) if self.counted else 0
                    if self.trips * kernels <= UNROLL_KERNEL_BUDGET and not windows:
                        raise _Cheap(f"{self.trips} steps of a {size}-instruction body: within the "
                                     f"unroll budget ({self.budget}), where steps fuse and no step "
                                     "costs a host round trip")
                    self.why = (f"{windows} reductions of a window that moves with the loop index: "
                                "rolled, the loop nest can be one window operation" if windows else
                                f"unrolled, its {self.trips} steps x {kernels} reductions or other "
                                f"kernels of their own would be more than {UNROLL_KERNEL_BUDGET} "
                                "kernels to compile")
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

    def _promote_written(self) -> None:
        """NumPy arrays made before the loop whose items the body writes by name (``out =
        np.empty(...)`` filled in the loop) become traced now, as a trace that finds the
        write would make them (and then trace the body again: a convolution's double loop
        was traced three times).  Only arrays of their own (a view's base would not see it)."""
        if not self.written_names:
            return
        promoted = False
        for name, value in zip(self.names, self.state):
            if name in self.written_names and type(value) is np.ndarray and value.base is None:
                promote_owned(value)
                promoted = True
        if promoted:
            self.state = resolved_state(self.state)

    # -- one trace of the body (and the condition) with the current slot layout --

    def _slots(self):
        """(initial outer instruction, shape) per state slot after the index."""
        inits = [t.stored_instr for t in self.objects] + [t.instr for t in self.rebound.values()]
        return inits

    def _trace(self):
        # (what the names first bound in the body hold after the loop: this trace's, not an
        # earlier attempt's, where a name bound from a Python counter was still a Python int)
        self.static_after = {}
        inits = self._slots()
        index_shape = [Shape("s64")] if self.counted else []
        shapes = index_shape + [i.shape for i in inits]
        body_comp, outs, new_state = self._trace_computation("body", shapes, inits, self.body)
        if self.cond is not None:
            cond_comp = self._trace_condition(shapes, inits)
        else:
            cond_comp = None
        # Which names did the body rebind, and are the slot types stable?  (The answers are
        # applied by ``run`` once the state is restored: initial values live outside.)
        requests = []
        for k, (old, new) in enumerate(zip(self.state, new_state)):
            if k in self.rebound or new is old:
                continue
            if isinstance(old, Tracer) and id(view_root(old)) in self.written:
                # ``b[i] = v; b = f(b)``: the first step writes into the array ``b`` held
                # before the loop, later steps into the one it was rebound to -- not one body.
                # (Which name a write went through is not known: any write into that array
                # counts, so a loop that writes it through another name is unrolled too.)
                raise CannotRoll(f"the body writes into the array `{self.names[k]}` holds and "
                                 f"then rebinds `{self.names[k]}`")
            if isinstance(new, Tracer):
                if getattr(new, "weak", False):          # a loop index: a Python int
                    self.weak.add(k)
                requests.append((k, old, *stored_type(new)))
            elif isinstance(new, Selection) and old is UNDEFINED and not self.short \
                    and not self.ctx.names_outlive:
                # ``values = data[mask]; res[i] = values.mean()``: a temporary of each step.
                # Its data-dependent length cannot be a loop state; after the loop the name
                # holds a stand-in that refuses use (a short loop is unrolled instead, where
                # it keeps the last step's selection, as Python does; so is any loop of a
                # cell, whose names are all outputs).
                self.static_after[k] = SelectionAfterLoop(self.names[k], location_at(self.ctx, self.lineno))
            elif isinstance(new, Selection):
                raise CannotRoll(f"the body binds `{self.names[k]}` to x[mask] with a traced mask, whose "
                                 "length depends on the data")
            elif isinstance(new, RaggedSlice) and old is UNDEFINED and not self.ctx.names_outlive:
                # (``cols = A_col[A_row[i]:A_row[i + 1]]``: a temporary of each step, as above)
                self.static_after[k] = SelectionAfterLoop(self.names[k], new.where or location_at(self.ctx, self.lineno),
                                                          "a slice whose bounds are read from the data")
            elif isinstance(new, RaggedSlice):
                raise CannotRoll(f"the body binds `{self.names[k]}` to a slice whose bounds are read from "
                                 "the data, whose length depends on the data")
            elif old is UNDEFINED or type(old) is OneBranch and type(new) is OneBranch \
                    or redefined_function(old, new) or self.names[k] in self.dead:
                # a Python value first bound in the body (an inner loop's variable), or a
                # helper the body defines afresh each step (``def f(...)`` in the loop): the
                # same in every iteration, since the body is traced once.  A name only a
                # traced branch binds (``if E - w >= 0: dHG = ...``) stays unreadable after
                # the loop as before it (the step of an outer loop before this one bound it
                # so: npbench's scattering self-energies unrolled five loops over that).  An
                # inner loop's variable bound before the loop (``dead``: never read before the
                # body binds it) is the same: 3mm's second triple loop reuses the first's ``k``.
                self.static_after[k] = new
            elif is_number(old) and is_number(new) and type(old) is type(new) \
                    and (not self.counted or not isinstance(old, int)):
                # a Python counter in a while loop on array values, or a Python float the body
                # changes (``t += dt``): it becomes traced, a Python number in promotion.  (A
                # for loop's Python int is left to unrolling: it may be a shape or an index.)
                self.weak.add(k)
                self.numbers.add(k)
                requests.append((k, old, (), np.asarray(new).dtype))
            elif not same_static(old, new):
                raise CannotRoll(f"the body changes `{self.names[k]}`, a Python value "
                                 f"({type(old).__name__})")
        for k, init in self.rebound.items():
            new = new_state[k]
            if not isinstance(new, Tracer):
                raise CannotRoll(f"the body binds `{self.names[k]}` to a Python value")
            if stored_type(new) != (init.shape, init.dtype):
                requests.append((k, init, *stored_type(new)))
        return body_comp, cond_comp, outs, requests

    def _initial_for(self, old, shape, dtype) -> Tracer:
        """The value a rebound name starts from, in the type the body gives it."""
        from .rules import asarray, broadcast_to, convert, full
        ctx = self.ctx
        if old is UNDEFINED or type(old) is OneBranch:      # (never read before the body binds it)
            return full(ctx, shape, 0, dtype)
        if isinstance(old, Tracer):
            value = Tracer(ctx, old.instr)
        elif is_value(old):
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
            t.rebind(g)
        state = self._state_from(gtes[offset + len(self.objects):])
        index = None
        if self.counted:
            from .index_tracer import IndexTracer
            index = IndexTracer(ctx, gtes[0], self.index_range)
        return param, gtes, index, tuple(state)

    def _state_from(self, rebound_slots) -> list:
        """The names' values once the objects' slots are bound (views follow their bases):
        each rebound name reads its own slot."""
        for t in self.objects:
            if t.view is not None:
                t.view.base_version = t.view.base.version
        state = list(self.state)
        for (k, _), g in zip(self.rebound.items(), rebound_slots):
            state[k] = _weak(self.ctx, g) if k in self.weak else Tracer(self.ctx, g)
        return state

    def _trace_computation(self, what, shapes, inits, fn):
        ctx = self.ctx
        with ctx.subcomputation(Builder(unique_name(f"{what}_line{self.lineno}"))) as builder:
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
            self.written = {id(t) for t, v in zip(self.objects, versions)
                            if t.view is None and t.version != v}
            loop_checks.fold(ctx, self.checks, ctx.checks[self.checks_from:])
            new_state = resolved_state(new_state) if self.names else ()
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
            check_closed(builder)
            return builder.build(root), outs, new_state

    def _trace_condition(self, shapes, inits):
        ctx = self.ctx
        with ctx.subcomputation(Builder(unique_name(f"cond_line{self.lineno}"))) as builder:
            param, gtes, _, state = self._bind_params(builder, shapes, inits)
            versions = [t.version for t in self.objects]
            checks = len(ctx.checks)
            ctx.loop_condition = True       # (its data-read indices stay clamped: dynamic.py)
            try:
                test = scalar_test(self.cond(state))
            except (NbxlaError, IndexError, TypeError, ValueError) as e:
                raise CannotRoll(_reason(e)) from None
            finally:
                ctx.loop_condition = False
            if len(ctx.checks) != checks:
                raise CannotRoll("the condition needs a check of its values after the run (an index "
                                 "that may be out of bounds, a negative integer power)")
            if [t.version for t in self.objects] != versions:
                raise CannotRoll("the condition writes into an array")
            if not isinstance(test, Tracer):     # (a constant test: no loop to build)
                raise CannotRoll("the condition reads no value of the loop's state")
            from .rules import asarray
            test = asarray(ctx, test)
            if test.dtype != np.bool_:
                test = np.not_equal(test, 0)
            builder.location = None
            check_closed(builder)
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
        ctx.builder.location = location_at(ctx, self.lineno)
        init = outer.op("tuple", *init_instrs)
        loop = outer.op("while", init, condition=cond_comp, body=body_comp)
        gtes = [outer.op("get-tuple-element", loop, index=k) for k in range(len(init_instrs))]
        offset = 1 if self.counted else 0
        for t, g, same in zip(self.objects, gtes[offset:], self.unchanged[offset:]):
            # a value the body does not change stays the loop's input: a loop around this one
            # must see it unchanged too (else it counts as written: a NumPy scalar argument
            # read in a nested loop was "read-only")
            if not same:
                t.rebind(g, t.version + 1)
        state = self._state_from(gtes[offset + len(self.objects):])
        for k, value in self.static_after.items():
            state[k] = value
        ctx.loop_decisions.append((self.lineno, "rolled", "a while loop; its body traced once" +
                                   (f" ({self.why})" if self.why else "")))
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




def _weak(ctx, instr) -> Tracer:
    from .index_tracer import weak_scalar
    return weak_scalar(ctx, instr)


def _reason(e: Exception) -> str:
    text = str(e).split("\n")[0]
    return f"{type(e).__name__}: {text}" if text else type(e).__name__

