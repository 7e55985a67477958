"""``nbxla.jit(fn, mode="auto")``, ``nbxla.explain`` and auto-clustered notebook cells.

The function (or cell) runs as ordinary Python, always, and gives NumPy's result.  Its large
array arguments are handed in as stand-ins (``LazyArray``); array work on them is collected
into clusters that are compiled and cached, everything else runs eagerly between them.
"""

from __future__ import annotations

import ast
import functools
import gc
import inspect
import time
from typing import Callable

import numpy as np

from ..frontend.arguments import as_positional, positional_parameters
from ..frontend.tracer import Tracer
from .choice import ModeChoice
from .lazy import LazyArray
from .tape import Tape
from .report import ClusterReport, build_report
from .rewrite import ACTIVE, HOOK, hook, instrument, rewrite_tree
from .records import MIN_CLUSTER_WORK, MIN_REPLAYED_WORK, flatten
from .session import Session
from .whole import WholeFunction, run_cell_whole


def _wrap_args(session: Session, args: tuple, kwargs: dict):
    """Large NumPy arrays become stand-ins; small ones stay NumPy arrays (eager code on them
    then costs nothing extra, and writes into them happen in place as usual).  Lists and
    dicts are handed over as they are, the arrays in them too: the function may change them,
    and the caller must see that."""
    def wrap(x):
        if type(x) is np.ndarray and x.size >= session.min_work:
            return session.wrap(x)
        return tuple([wrap(v) for v in x]) if type(x) is tuple else x
    return tuple([wrap(a) for a in args]), {k: wrap(v) for k, v in kwargs.items()}


def _run(session: Session, call: Callable):
    active = ACTIVE.set(session)
    # Recording allocates many small objects (instructions, tracers): with the cyclic
    # collector on, its full passes over everything nbxla holds (compiled programs, their
    # modules) landed in the middle of recording, tens of ms per call.  Reference counting
    # still frees what it can; cycles are collected when the run ends, as timeit does.
    collecting = gc.isenabled()
    gc.disable()
    try:
        result = call()
    except BaseException:
        session.flush()          # writes made before the exception land, as in NumPy
        raise
    finally:
        session.closed = True
        ACTIVE.reset(active)
        if collecting:
            gc.enable()
    session.flush()
    if type(result) is LazyArray or isinstance(result, (tuple, list, dict)):
        return session.unwrap(result)
    return result


class AutoFunction:
    """A function run with auto-clustering; ``last_report`` is its latest ``ClusterReport``.

    Where that is the same as running it, it runs compiled whole (``whole.py``; ``whole``
    False: never); else its array work is clustered.  With ``measure`` (the default), calls
    are timed (``choice.ModeChoice``): per argument
    signature, after the first call one call runs the plain function and one runs
    auto-clustered, and later calls run the faster way; clusters are likewise timed compiled
    and eagerly (``choice.ClusterTiming``)."""

    def __init__(self, fn: Callable, device: str = "cpu", cache=None,
                 min_work: int | None = None, measure: bool = True, replay: bool = True,
                 whole: bool = True):
        functools.update_wrapper(self, fn)
        if not isinstance(getattr(self, "__name__", None), str):     # functools.partial, objects
            inner = fn.func if isinstance(fn, functools.partial) else fn
            self.__name__ = getattr(inner, "__name__", None) or type(inner).__name__
        if min_work is None:                # (replayed calls make smaller clusters pay)
            min_work = MIN_REPLAYED_WORK if replay else MIN_CLUSTER_WORK
        self.fn, self.device, self.cache, self.min_work = fn, device, cache, min_work
        self.measure = measure
        # Compiled whole when it can be (whole.py): a WholeFunction, False once that is
        # ruled out (self.whole_refused says why), None until the first call looks.
        self._whole = None if whole else False
        self.whole_refused = "" if whole else "whole=False"
        self._log = self._report = self._source = self._instrumented = None
        self._choices: dict = {}            # argument signature -> ModeChoice
        self._choice = None                 # the ModeChoice of the last auto-clustered call
        self._tape = Tape() if replay else None   # earlier calls' recordings (tape.py)
        self._fast = (None, None, None)    # (argument ids, their ModeChoice, how they run)
        try:                                # (keyword calls are made positional)
            self._positional = positional_parameters(inspect.signature(fn))
        except (TypeError, ValueError):
            self._positional = None

    def __call__(self, *args, **kwargs):
        # The fast path of a decided signature called again with the very same argument
        # objects (a loop over calls): no signature to build.  Ids say nothing about an
        # object freed meanwhile; then the call runs the way decided for the argument
        # objects before, which gives NumPy's result all the same (inside another auto run
        # too), until the next re-probe rebuilds the signature.
        if kwargs and self._positional is not None:
            args, kwargs = as_positional(self._positional, args, kwargs)
        ids, choice, run = self._fast
        if not kwargs and [*map(id, args)] == ids and choice.fast_calls:
            choice.fast_calls -= 1
            return run(*args)
        return self._measured_call(args, kwargs)

    def _decided(self, choice: ModeChoice, key, same_objects: bool) -> Callable:
        """How calls of signature ``key`` run now; ``same_objects``: with the very argument
        objects of a call that ran so (nothing to check again)."""
        if choice.fast_mode == "eager":
            return self.fn
        whole = same_objects and self._whole and key in self._whole.compiles
        return self._call_whole if whole else self.run_auto

    def _call_whole(self, *args):
        """The compiled whole function, decided faster, on the argument objects it ran on
        before (their checks were made then: what it writes into, the scalars it keys on)."""
        try:
            return self._whole.call_same(*args)
        except Exception as e:     # (a run-time check failed: NumPy's own error, or result)
            self._refuse_whole(f"running it failed: {type(e).__name__}")
            return self.run_auto(*args)

    def _measured_call(self, args, kwargs):
        if not self.measure or ACTIVE.get() is not None or \
                any(isinstance(x, Tracer) for x in _leaves((args, kwargs))):
            return self.run_auto(*args, **kwargs)   # (or inside another auto run, a trace)
        key = _signature(args, kwargs)
        choice = self._choices.get(key)
        if choice is None:
            choice = self._choices[key] = ModeChoice()
        elif choice.fast_calls:                # (a mode decided: up to the next re-probe)
            choice.fast_calls -= 1
            result = self._decided(choice, key, same_objects=False)(*args, **kwargs)
            if not kwargs:                     # (the next call with these: the fast path)
                self._fast = [*map(id, args)], choice, self._decided(choice, key, True)
            return result
        mode = choice.next_mode()
        if not choice.timed(mode):
            if mode == "eager":
                return self.fn(*args, **kwargs)
            self._choice = choice
            result = self.run_auto(*args, **kwargs)
            if choice.calls == 1 and self._whole:      # compiled whole: timed both ways
                choice.auto_first = True
                if self._whole.first_pair is not None:
                    choice.checked(*self._whole.first_pair)
                    if not kwargs:
                        self._fast = [*map(id, args)], choice, self._decided(choice, key, True)
            elif choice.calls == 1:         # the first call: what did its clusters win?
                choice.after_first_call(*_gain(self._log))
                if choice.fast_calls and not kwargs:
                    self._fast = [*map(id, args)], choice, self.fn
            return result
        start = time.perf_counter()
        if mode == "eager":
            result = self.fn(*args, **kwargs)
        else:
            self._choice = choice
            result = self.run_auto(*args, **kwargs)
        elapsed = time.perf_counter() - start
        # (A call that compiled a cluster says nothing about the calls after it: not counted,
        # unless calls keep compiling.)
        compiled = mode == "auto" and any(c.compile_ms > 0 for c in self._log.clusters)
        choice.record(mode, elapsed, compiled)
        self._report = None
        return result

    def run_auto(self, *args, **kwargs):
        """One auto-clustered call (whatever the measured choice says): compiled whole
        when it can be, else clustered."""
        # (The common call, arrays and scalars as positional arguments, in one cheap pass.)
        simple = not kwargs and all(type(a) is not tuple and type(a) is not list and
                                    type(a) is not dict for a in args)
        leaves = args if simple else _leaves((args, kwargs))
        if any(isinstance(x, (LazyArray, Tracer)) for x in leaves):
            return self.fn(*args, **kwargs)      # inside another auto run or a trace: inline
        if self._whole is not False and ACTIVE.get() is None:
            ran, result = self._run_whole(args, kwargs)
            if ran:
                return result
        session = Session(self.__name__, self.device, self.cache, min_work=self.min_work,
                          measure=self.measure, tape=self._tape)
        if simple:
            args = tuple(session.wrap(a) if type(a) is np.ndarray and a.size >= self.min_work
                         else a for a in args)
        else:
            args, kwargs = _wrap_args(session, args, kwargs)
        if self._instrumented is None:      # once: results of its calls become stand-ins
            self._instrumented = instrument(self.fn) or self.fn
        fn = self._instrumented
        try:
            return _run(session, lambda: fn(*args, **kwargs))
        finally:
            self._log, self._report = session.log, None
            if self.whole_refused:
                session.log.whole = f"not compiled whole: {self.whole_refused}"

    def _run_whole(self, args, kwargs) -> tuple[bool, object]:
        """Run the function as one program compiled by ``nbxla.jit`` when it compiles whole
        and has no Python side effect: (True, its result); else (False, None), and the
        reason is kept (``whole_refused``, the report)."""
        if self._whole is None:
            try:
                self._whole = WholeFunction.of(self.fn, self.device, self.cache)
            except Exception as e:    # (reading the source must never stop a NumPy program)
                self._whole = f"its source could not be read ({type(e).__name__}: {e})"
            if isinstance(self._whole, str):
                return self._refuse_whole(self._whole)
        whole = self._whole
        ran, result = whole.run(self.__name__, args, kwargs, _signature(args, kwargs))
        if ran:
            self._log, self._report = whole.log, None
        if whole.refused:
            self._refuse_whole(whole.refused)
        return ran, result

    def _refuse_whole(self, why: str) -> tuple[bool, None]:
        self._whole, self.whole_refused = False, why
        self._fast = (None, None, None)
        return False, None

    @property
    def last_report(self) -> ClusterReport | None:
        """The clustering report of the last call (made when first asked for)."""
        if self._report is None and self._log is not None:
            if self._source is None:
                self._source = (None, 1, None)
                try:
                    lines, first = inspect.getsourcelines(self.fn)
                    self._source = ([ln.rstrip("\n") for ln in lines], first,
                                    inspect.getsourcefile(self.fn))
                except (OSError, TypeError):
                    pass
            self._report = build_report(self._log, self.min_work, *self._source)
            if self._choice is not None:
                self._report.calls = self._choice.describe()
        return self._report

    @property
    def last_compilation(self):
        """The largest compiled cluster of the last call (for ``%xla_ir``), or None."""
        report = self.last_report
        compiled = [c for c in report.clusters if c.compiled] if report else []
        return max(compiled, key=lambda c: c.work).compilation if compiled else None

    def __get__(self, obj, objtype=None):
        return self if obj is None else functools.partial(self, obj)

    def __repr__(self) -> str:
        return f"<nbxla.jit {self.__name__} mode=auto device={self.device}>"


def _leaves(tree):
    return flatten(tree, [])


def _gain(log) -> tuple[float, float]:
    """What the compiled clusters of a call saved, by their measured best times, and what
    they took compiled (ms)."""
    runs = [run for run in log.clusters if run.compiled and run.measured and run.gain_ms > 0]
    return sum(run.gain_ms for run in runs), sum(run.run_ms for run in runs)


def _signature(args, kwargs) -> tuple:
    """What the measured choice between auto and plain calls is kept per: the arguments'
    shapes and dtypes (arrays) or types (anything else)."""
    key = tuple([(a.shape, a.dtype) if type(a) is np.ndarray else type(a) for a in args])
    if kwargs:
        key += tuple((k, (v.shape, v.dtype) if type(v) is np.ndarray else type(v))
                     for k, v in sorted(kwargs.items()))
    return key


def explain(fn: Callable, *args, **kwargs) -> ClusterReport:
    """Run ``fn(*args, **kwargs)`` with auto-clustering and return its clustering report
    (clusters, graph breaks with reasons and lines, the fraction of array work compiled)."""
    auto = fn if isinstance(fn, AutoFunction) else AutoFunction(getattr(fn, "fn", fn))
    auto.run_auto(*args, **kwargs)
    return auto.last_report


# ---- cells ------------------------------------------------------------------------------------

def run_cell(source: str, ns: dict, filename: str, name: str = "cell", device: str = "cpu",
             filename_display=None, min_work: int = MIN_CLUSTER_WORK, label: str | None = None,
             whole: bool = True):
    """Run a cell's source in ``ns`` with auto-clustering, as IPython would run it: names it
    binds are bound in ``ns`` (as NumPy arrays), and the value of a last expression is
    returned.  Returns ``(value, report)``; an exception propagates after writes made before
    it have landed and the names bound so far are NumPy arrays again.  A cell that compiles
    whole with no Python side effect runs compiled (``whole.run_cell_whole``; ``label``
    names it in messages)."""
    why_not = ""
    if whole:
        done, why_not = run_cell_whole(source, ns, filename, name, device, label or name,
                                       filename_display)
        if done is not None:
            return done
    tree = rewrite_tree(ast.parse(source, filename))
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    body = compile(tree, filename, "exec")
    tail = compile(last, filename, "eval") if last is not None else None
    session = Session(name, device, filename_display=filename_display, min_work=min_work)
    read = {n.id for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Name)}
    for key in read:
        if type(ns.get(key)) is np.ndarray and ns[key].size >= min_work:
            ns[key] = session.wrap(ns[key])

    def call():
        exec(body, ns)
        return eval(tail, ns) if tail is not None else None
    ns[HOOK] = hook
    try:
        value = _run(session, call)
    finally:
        ns.pop(HOOK, None)
        for key, value_now in list(ns.items()):
            if isinstance(value_now, LazyArray) and value_now.state.session is session:
                ns[key] = session.unwrap(value_now)
            elif isinstance(value_now, (list, tuple, dict)) and key in read:
                ns[key] = session.unwrap(value_now)
        session.log.whole = why_not
        lines = source.split("\n")
        report = build_report(session.log, session.min_work, lines, 1, filename)
    return value, report
