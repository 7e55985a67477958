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
import warnings
from typing import Callable

import numpy as np

from ..frontend.tracer import Tracer
from .choice import ModeChoice
from .lazy import LazyArray
from .tape import Tape
from .report import ClusterReport, build_report
from .rewrite import ACTIVE, HOOK, hook, instrument, rewrite_tree
from .session import MIN_CLUSTER_WORK, ClusterRun, Session, SessionLog, flatten
from .whole import IMMUTABLE, as_python, difference, python_scalars, side_effect


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

    With ``measure`` (the default), calls are timed (``choice.ModeChoice``): per argument
    signature, after the first call one call runs the plain function and one runs
    auto-clustered, and later calls run the faster way; clusters are likewise timed compiled
    and eagerly (``choice.ClusterTiming``)."""

    def __init__(self, fn: Callable, device: str = "cpu", cache=None,
                 min_work: int = MIN_CLUSTER_WORK, measure: bool = True, replay: bool = True,
                 whole: bool = True):
        functools.update_wrapper(self, fn)
        self.fn, self.device, self.cache, self.min_work = fn, device, cache, min_work
        self.measure = measure
        # Compiled whole when it can be (whole.py): the nbxla.jit function, False once that
        # is ruled out (self.whole_refused says why), None until the first call looks.
        self._whole = None if whole else False
        self.whole_refused = "" if whole else "whole=False"
        self._whole_written: dict = {}       # parameters it writes into: name -> position
        self._whole_compiles: dict = {}      # argument signature -> compilations seen
        self._first_pair = None              # (compiled, plain) seconds of the checked call
        self._scalars, self._returned = None, []   # what NumPy's results are made of
        self._log = self._report = self._source = self._instrumented = None
        self._choices: dict = {}            # argument signature -> ModeChoice
        self._choice = None                 # the ModeChoice of the last auto-clustered call
        self._tape = Tape() if replay else None   # earlier calls' recordings (tape.py)
        self._fast = (None, None, None)    # (argument ids, their ModeChoice, how they run)

    def __call__(self, *args, **kwargs):
        # The fast path of a decided signature called again with the very same argument
        # objects (a loop over calls): no signature to build.  Ids say nothing about an
        # object freed meanwhile; then the call runs the way decided for the argument
        # objects before, which gives NumPy's result all the same (inside another auto run
        # too), until the next re-probe rebuilds the signature.
        ids, choice, run = self._fast
        if not kwargs and [*map(id, args)] == ids and choice.fast_calls:
            choice.fast_calls -= 1
            return run(*args)
        return self._measured_call(args, kwargs)

    def _decided(self, choice: ModeChoice, same_objects: bool) -> Callable:
        """How calls of a decided signature run; ``same_objects``: with the very argument
        objects of a call that ran so (no check to repeat)."""
        if choice.fast_mode == "eager":
            return self.fn
        return self._call_whole if same_objects and self._whole else self.run_auto

    def _call_whole(self, *args):
        """The compiled whole function, decided faster, on the argument objects it ran on
        before (their checks were made then: what it writes into, the scalars it keys on)."""
        try:
            return self._as_numpys(self._whole(*args), args, {})
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
            result = self._decided(choice, same_objects=False)(*args, **kwargs)
            if not kwargs:                     # (the next call with these: the fast path)
                self._fast = [*map(id, args)], choice, self._decided(choice, same_objects=True)
            return result
        mode = choice.next_mode()
        if not choice.timed(mode):
            if mode == "eager":
                return self.fn(*args, **kwargs)
            self._choice = choice
            result = self.run_auto(*args, **kwargs)
            if choice.calls == 1 and self._whole:      # compiled whole: timed both ways
                choice.auto_first = True
                if self._first_pair is not None:
                    choice.checked(*self._first_pair)
                    if not kwargs:
                        self._fast = [*map(id, args)], choice, self._decided(choice, True)
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
            written: set = set()
            why = side_effect(self.fn, written=written)
            if why is not None:
                return self._refuse_whole(why)
            try:
                names = list(inspect.signature(self.fn).parameters)
                self._whole_written = {n: names.index(n) for n in written}
            except (TypeError, ValueError):
                return self._refuse_whole("its signature cannot be read")
            from ..api import CompiledFunction      # (the layer below this one)
            self._whole = CompiledFunction(self.fn, self.device, self.cache)
        written = self._written(args, kwargs)
        if written is None:
            return False, None           # (it writes into a list or such: clustered, this call)
        key = _signature(args, kwargs)
        seen = self._whole_compiles.get(key)
        # The first call of a signature is checked against the plain function (below): the
        # arrays it writes into are kept as they were.
        before = {n: a.copy() for n, a in written.items()} if seen is None else None
        start = time.perf_counter()
        try:
            result = self._whole(*args, **kwargs)
        except Exception as e:     # refused (or failed): auto-clustered, which reruns it
            message = str(e).strip().splitlines()
            return self._refuse_whole(f"nbxla.jit refused it: {type(e).__name__}: "
                                      f"{message[0] if message else ''}")
        ms = (time.perf_counter() - start) * 1e3
        compilation = self._whole.last_compilation
        compiled = seen is None or compilation.module_id not in seen
        self._log, self._report = whole_log(self.__name__, compilation, ms, compiled), None
        if seen is None:           # (the check last: the next call finds its data in cache)
            seen = self._whole_compiles[key] = set()
            result = self._check_whole(args, kwargs, written, before, result)
        else:
            result = self._as_numpys(result, args, kwargs)
        seen.add(compilation.module_id)
        if len(seen) > MAX_WHOLE_COMPILES:
            self._refuse_whole(f"it compiled {len(seen)} times for one argument signature "
                               "(jit keys on the values of scalar arguments)")
        return True, result

    def _written(self, args, kwargs) -> dict | None:
        """The arrays this call hands to the parameters the function may write into, by
        name; None where one is something else it could change (a list: jit would not write
        it back), or is left to its default (jit would not write into that either).
        Scalars are rebound, not written: ``n += 1`` on an int is no write."""
        written = {}
        for name, i in self._whole_written.items():
            value = args[i] if i < len(args) else kwargs.get(name, _DEFAULT)
            if type(value) is np.ndarray:
                written[name] = value
            elif not isinstance(value, IMMUTABLE):
                return None
        return written

    def _check_whole(self, args, kwargs, written: dict, before: dict, result):
        """The first compiled call of a signature, against the plain function on the same
        inputs: the same result (structure, types, dtypes, shapes, values up to rounding)
        and the same writes into the arguments, or the function is not compiled whole from
        now on and this call gives NumPy's result.  Both are timed on the way (twice each
        where that is short: the first runs are cold), the first probe pair of the measured
        choice."""
        def run(fn):
            fresh_args, fresh_kwargs = list(args), dict(kwargs)
            for name, array in before.items():
                i = self._whole_written[name]
                if i < len(args):
                    fresh_args[i] = array.copy()
                else:
                    fresh_kwargs[name] = array.copy()
            start = time.perf_counter()
            out = fn(*fresh_args, **fresh_kwargs)
            return time.perf_counter() - start, out, fresh_args, fresh_kwargs
        def best_of_two(fn):       # (one run only where it is long: the first call's cost)
            first = run(fn)
            return first if first[0] > 0.05 else min(first, run(fn), key=lambda r: r[0])
        self._first_pair = None
        try:
            compiled = best_of_two(self._whole)[0]
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")          # (the first call warned, if at all)
                eager, want, fresh_args, fresh_kwargs = best_of_two(self.fn)
        except Exception:          # the plain function raises where the compiled one did not
            return result          # (NumPy's error then comes at the next plain call)
        fresh = {name: fresh_args[i] if i < len(args) else fresh_kwargs[name]
                 for name, i in self._whole_written.items() if name in written}
        # What NumPy's result is made of beyond values: Python scalars (an iteration count)
        # where the compiled program gives NumPy scalars, and arguments handed back
        # themselves (``return a`` after writing into it) where it gives copies.
        self._scalars = python_scalars(want)
        self._returned = _returned_arguments(want, fresh_args, fresh_kwargs)
        result = self._as_numpys(result, args, kwargs)
        single = any(type(a) is np.ndarray and a.dtype.char in "efF"
                     for a in (*args, *kwargs.values()))
        why = difference(result, want, single=single)
        for name, array in written.items():
            why = why or difference(array, fresh[name], f"argument {name} (written)", single)
        if why is not None:
            self._refuse_whole(f"its compiled result was checked against NumPy's: {why}")
            for name, array in written.items():
                np.copyto(array, fresh[name])
            return self._as_numpys(want, args, kwargs)      # (arguments handed back: theirs)
        self._first_pair = (compiled, eager)
        return result

    def _as_numpys(self, result, args, kwargs):
        """The compiled program's result made what NumPy's is (see ``_check_whole``)."""
        result = as_python(result, self._scalars)
        for where, (i, name) in self._returned:
            arg = args[i] if i < len(args) else kwargs[name]
            if where is None:
                return arg
            result = type(result)(arg if k == where else r for k, r in enumerate(result))
        return result

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


_DEFAULT = object()
# Whole compilation stops when one argument signature compiled more programs than this.
MAX_WHOLE_COMPILES = 3


def whole_log(name: str, compilation, ms: float, compiled: bool) -> SessionLog:
    """The log of a call run as one compiled program: one cluster, no graph break."""
    facts = _WHOLE_FACTS.get(compilation.module_id)
    if facts is None:            # (once per compilation: the fusion report walks the module)
        traced = [i for i in compilation.hlo.entry.instructions
                  if i.opcode not in ("parameter", "tuple")]
        lines = list({(loc.file, loc.line): loc for loc in
                      (i.location for i in traced) if loc is not None}.values())
        work = sum(i.shape.size for i in traced if hasattr(i.shape, "dims"))
        facts = _WHOLE_FACTS[compilation.module_id] = (
            len(traced), work, lines, len(compilation.optimized.entry.instructions),
            compilation.fusion_report.kernels_after)
    ops, work, lines, instructions, kernels = facts
    run = ClusterRun(("whole", compilation.module_id), ops, work, lines, True,
                     compile_ms=sum(compilation.timings_ms.values()) if compiled else 0.0,
                     run_ms=0.0 if compiled else ms, hlo_instructions=instructions,
                     kernels=kernels, compilation=compilation)
    return SessionLog(name, [run], whole="compiled whole by nbxla.jit: no graph break and no "
                                         "Python side effect in its source")


_WHOLE_FACTS: dict = {}          # compilation id -> what the report says about it


def _returned_arguments(result, args: list, kwargs: dict) -> list:
    """Where ``result`` (or an item of it, a tuple or list) is one of the argument arrays
    itself: [(None or the item's index, (position, name))]."""
    params = {id(a): (i, None) for i, a in enumerate(args) if type(a) is np.ndarray}
    params.update({id(a): (len(args), k) for k, a in kwargs.items() if type(a) is np.ndarray})
    if id(result) in params:
        return [(None, params[id(result)])]
    if type(result) in (tuple, list):
        return [(k, params[id(r)]) for k, r in enumerate(result) if id(r) in params]
    return []


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
             filename_display=None, min_work: int = MIN_CLUSTER_WORK):
    """Run a cell's source in ``ns`` with auto-clustering, as IPython would run it: names it
    binds are bound in ``ns`` (as NumPy arrays), and the value of a last expression is
    returned.  Returns ``(value, report)``; an exception propagates after writes made before
    it have landed and the names bound so far are NumPy arrays again."""
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
            if isinstance(value_now, LazyArray) and value_now._session is session:
                ns[key] = session.unwrap(value_now)
            elif isinstance(value_now, (list, tuple, dict)) and key in read:
                ns[key] = session.unwrap(value_now)
        lines = source.split("\n")
        report = build_report(session.log, session.min_work, lines, 1, filename)
    return value, report
