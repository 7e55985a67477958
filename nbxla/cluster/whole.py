"""Whole-function compilation in auto mode: a function that compiles whole, with no Python
side effect, runs as one program compiled by ``nbxla.jit`` (``WholeFunction``); a notebook
cell likewise, compiled as ``%%xla`` compiles it (``run_cell_whole``).

Why: recording costs Python time per NumPy call (10-20 us an operation, more than NumPy
spends on an array of 40,000 elements), so clustering cannot win on functions of many small
operations that ``jit`` compiles into a kernel or two (a 600-operation formula on
(40, 40, 30) grids: 10x as one compiled program, 1x recorded).  TensorFlow's auto-clustering
ends the same way on a graph with nothing uncompilable: one cluster.

It is used only where it is the same as running the function:

* its source shows no Python side effect (``purity.py``: ``jit`` traces once, so a ``print``
  would happen once instead of on every call);
* ``jit`` compiles it (a SciPy call, a data-dependent shape: refused, and the function is
  auto-clustered from then on);
* the first call of each argument signature gives what the plain function gives on the same
  inputs: result structure, types, dtypes, shapes, values up to rounding, and the writes
  into its arguments (``difference``).  A Python scalar in NumPy's result (an iteration
  count) is made one from the compiled program's NumPy scalar, and an argument NumPy hands
  back is handed back itself (``as_python``, ``returned_arguments``).
"""

from __future__ import annotations

import inspect
import time
import warnings

import numpy as np

from ..api import CompiledFunction
from ..cell import prepare_cell
from ..cell_check import verify
from ..frontend.cell_ast import DISPLAY
from .purity import IMMUTABLE, cell_side_effect, methods_are_pure, side_effect
from .records import MIN_CLUSTER_WORK, ClusterRun, SessionLog
from .report import build_report

# Whole compilation stops when one argument signature compiled more programs than this.
MAX_WHOLE_COMPILES = 3
_DEFAULT = object()


class WholeFunction:
    """An auto function's compiled-whole way of running, and what its checks found.

    ``refused`` says why it is not used (any more), empty while it is."""

    def __init__(self, fn, device: str, cache, written: dict, methods: dict):
        self.fn, self.jitted = fn, CompiledFunction(fn, device, cache)
        self.written = written               # parameters it may write into: name -> position
        self.methods = methods               # parameters whose methods it calls: name ->
                                             # (position, default, methods)
        self.compiles: dict = {}             # argument signature -> compilations seen
        self.first_pair = None               # (compiled, plain) seconds of the checked call
        self.scalars, self.returned = None, []   # what NumPy's results are made of
        self.refused = ""
        self.log: SessionLog | None = None   # of its last run, for the report

    @classmethod
    def of(cls, fn, device: str, cache) -> "WholeFunction | str":
        """The whole-function way for ``fn``, or why there is none (a side effect)."""
        written, methods = set(), {}
        why = side_effect(fn, written=written, methods=methods)
        if why is not None:
            return why
        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):
            return "its signature cannot be read"
        names = list(params)
        return cls(fn, device, cache, {n: names.index(n) for n in written},
                   {n: (names.index(n), params[n].default, m) for n, m in methods.items()})

    def run(self, name: str, args, kwargs, signature) -> tuple[bool, object]:
        """(True, the result) where this call ran compiled; (False, None) where it is for
        clustering (``refused`` set where that is for good)."""
        written = self._written(args, kwargs)
        if written is None or not self._methods_pure(args, kwargs):
            return False, None           # (it writes into a list or such: clustered, this call)
        seen = self.compiles.get(signature)
        # The first call of a signature is checked against the plain function (below): the
        # arrays it writes into are kept as they were.
        before = {n: a.copy() for n, a in written.items()} if seen is None else None
        start = time.perf_counter()
        try:
            result = self.jitted(*args, **kwargs)
        except Exception as e:     # refused (or failed): auto-clustered, which reruns it
            message = str(e).strip().splitlines()
            self.refused = (f"nbxla.jit refused it: {type(e).__name__}: "
                            f"{message[0] if message else ''}")
            return False, None
        ms = (time.perf_counter() - start) * 1e3
        compilation = self.jitted.last_compilation
        compiled = seen is None or compilation.module_id not in seen
        self.log = whole_log(name, compilation, ms, compiled)
        if seen is None:           # (the check last: the next call finds its data in cache)
            seen = self.compiles[signature] = set()
            result = self._check(args, kwargs, written, before, result)
        else:
            result = self.as_numpys(result, args, kwargs)
        seen.add(compilation.module_id)
        if len(seen) > MAX_WHOLE_COMPILES:
            self.refused = (f"it compiled {len(seen)} times for one argument signature "
                            "(jit keys on the values of scalar arguments)")
        return True, result

    def call_same(self, *args):
        """A call with the argument objects of a checked call: nothing to check again."""
        result = self.jitted(*args)
        return result if self.scalars is None and not self.returned else \
            self.as_numpys(result, args, {})

    def _written(self, args, kwargs) -> dict | None:
        """The arrays this call hands to the parameters the function may write into, by
        name; None where one is something else it could change (a list: jit would not write
        it back), or is left to its default (jit would not write into that either).
        Scalars are rebound, not written: ``n += 1`` on an int is no write."""
        written = {}
        for name, i in self.written.items():
            value = args[i] if i < len(args) else kwargs.get(name, _DEFAULT)
            if type(value) is np.ndarray:
                written[name] = value
            elif not isinstance(value, IMMUTABLE):
                return None
        return written

    def _methods_pure(self, args, kwargs) -> bool:
        """Are the methods it calls on its parameters those of NumPy passed in, or pure
        methods of arrays, in this call?"""
        for name, (i, default, methods) in self.methods.items():
            value = args[i] if i < len(args) else kwargs.get(name, default)
            if not methods_are_pure(value, methods):
                return False
        return True

    def _check(self, args, kwargs, written: dict, before: dict, result):
        """The first compiled call of a signature, against the plain function on the same
        inputs: the same result and the same writes into the arguments, or the function
        is not compiled whole from now on and this call gives NumPy's result.  Both are
        timed on the way (twice each where that is short: the first runs are cold), the
        first probe pair of the measured choice."""
        def run(fn):
            fresh_args, fresh_kwargs = list(args), dict(kwargs)
            for name, array in before.items():
                i = self.written[name]
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
        self.first_pair = None
        try:
            compiled = best_of_two(self.jitted)[0]
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")          # (the first call warned, if at all)
                eager, want, fresh_args, fresh_kwargs = best_of_two(self.fn)
        except Exception:          # the plain function raises where the compiled one did not
            return result          # (NumPy's error then comes at the next plain call)
        fresh = {name: fresh_args[i] if i < len(args) else fresh_kwargs[name]
                 for name, i in self.written.items() if name in written}
        self.scalars = python_scalars(want)
        self.returned = returned_arguments(want, fresh_args, fresh_kwargs)
        result = self.as_numpys(result, args, kwargs)
        single = any(type(a) is np.ndarray and a.dtype.char in "efF"
                     for a in (*args, *kwargs.values()))
        why = difference(result, want, single=single)
        for name, array in written.items():
            why = why or difference(array, fresh[name], f"argument {name} (written)", single)
        if why is not None:
            self.refused = f"its compiled result was checked against NumPy's: {why}"
            for name, array in written.items():
                np.copyto(array, fresh[name])
            return self.as_numpys(want, args, kwargs)      # (arguments handed back: theirs)
        self.first_pair = (compiled, eager)
        return result

    def as_numpys(self, result, args, kwargs):
        """The compiled program's result made what NumPy's is (see ``_check``)."""
        result = as_python(result, self.scalars)
        for where, (i, name) in self.returned:
            arg = kwargs.get(name) if name is not None else args[i] if i < len(args) else None
            if type(arg) is not np.ndarray:
                continue           # (passed another way than in the checked call: a copy)
            if where is None:
                return arg
            result = type(result)(arg if k == where else r for k, r in enumerate(result))
        return result


def run_cell_whole(source: str, ns: dict, filename: str, name: str, device: str, label: str,
                   filename_display=None) -> tuple:
    """A notebook cell that compiles whole and shows no Python side effect (the names it
    reads from ``ns`` are its inputs; it may write into arrays among them): compiled as
    ``%%xla`` compiles it, checked once per compilation against eager NumPy (``--verify``'s
    comparison), and committed.  Names eager NumPy binds to Python scalars (and such a
    displayed value) are bound to Python scalars.  Returns ((value, report), "") or (None,
    why not); nothing is committed in the second case."""
    written: set = set()
    why = cell_side_effect(source, ns, written)
    if why is None and not all(type(ns.get(n)) is np.ndarray or isinstance(ns.get(n), IMMUTABLE)
                               for n in written):
        why = "it writes into a name that is not an array"
    if why is not None:
        return None, f"not compiled whole: {why}"
    try:
        prepared = prepare_cell(source, ns, label=label, filename=filename, name=name,
                                device=device, filename_display=filename_display)
        start = time.perf_counter()
        result = prepared.run()
        ms = (time.perf_counter() - start) * 1e3
        compilation = prepared.compilation
        if compilation.module_id not in _CHECKED_CELLS:
            eager: dict = {}
            verify(prepared, result, ns, filename, eager)
            _CHECKED_CELLS[compilation.module_id] = {
                n for n in [b.name for b in prepared.cell.bindings] + [DISPLAY]
                if type(eager.get(n)) in (bool, int, float, complex)}
    except Exception as e:          # refused, or not NumPy's result: run as Python instead
        message = str(e).strip().splitlines()
        return None, (f"not compiled whole: nbxla refused it or it differs from NumPy "
                      f"({type(e).__name__}: {message[0] if message else ''})")
    value = result.commit(ns)
    for n in _CHECKED_CELLS[compilation.module_id]:
        if n == DISPLAY:
            value = value.item() if isinstance(value, np.generic) else value
        elif isinstance(ns.get(n), np.generic):
            ns[n] = ns[n].item()
    log = whole_log(name, compilation, ms, not prepared.hit)
    return (value, build_report(log, MIN_CLUSTER_WORK, source.split("\n"), 1, filename)), ""


# Compilations of cells checked against eager NumPy -> the names eager NumPy binds to Python
# scalars there.
_CHECKED_CELLS: dict = {}


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


def returned_arguments(result, args: list, kwargs: dict) -> list:
    """Where ``result`` (or an item of it, a tuple or list) is one of the argument arrays
    itself: [(None or the item's index, (position, name))]."""
    params = {id(a): (i, None) for i, a in enumerate(args) if type(a) is np.ndarray}
    params.update({id(a): (len(args), k) for k, a in kwargs.items() if type(a) is np.ndarray})
    if id(result) in params:
        return [(None, params[id(result)])]
    if type(result) in (tuple, list):
        return [(k, params[id(r)]) for k, r in enumerate(result) if id(r) in params]
    return []


def difference(got, want, path: str = "the result", single: bool = False) -> str | None:
    """How the compiled program's result ``got`` differs from NumPy's ``want`` (structure,
    type, dtype, shape, or values beyond rounding), or None.  ``single``: the inputs hold
    single-precision values, so any result may carry their rounding."""
    if isinstance(want, (tuple, list, dict)):
        if type(got) is not type(want) or len(got) != len(want):
            return f"{path} is a {type(got).__name__} where NumPy gives a {type(want).__name__}"
        items = want.items() if isinstance(want, dict) else enumerate(want)
        for k, w in items:
            if isinstance(want, dict) and k not in got:
                return f"{path} lacks the key {k!r}"
            why = difference(got[k], w, f"{path}[{k!r}]", single)
            if why is not None:
                return why
        return None
    if type(got) is not type(want):
        return (f"{path} is a {type(got).__module__}.{type(got).__name__} where NumPy gives a "
                f"{type(want).__module__}.{type(want).__name__}")
    if isinstance(want, (np.ndarray, np.generic)):
        if got.dtype != want.dtype or np.shape(got) != np.shape(want):
            return (f"{path} is {got.dtype}{list(np.shape(got))} where NumPy gives "
                    f"{want.dtype}{list(np.shape(want))}")
        if want.dtype.kind in "fc":       # (rounding: relative to the largest magnitude)
            rtol = 1e-4 if single or want.dtype.itemsize <= 4 * (
                2 if want.dtype.kind == "c" else 1) else 1e-9
            with np.errstate(all="ignore"):
                finite = np.abs(np.asarray(want)[np.isfinite(want)])
                scale = max(float(finite.max()), 1.0) if finite.size else 1.0
                close = np.allclose(got, want, rtol=rtol, atol=rtol * scale, equal_nan=True)
        else:
            close = np.array_equal(got, want)
        return None if close else f"{path} differs from NumPy's in its values"
    if isinstance(want, float) and isinstance(got, float):
        return None if np.isclose(got, want, rtol=1e-9, atol=1e-9, equal_nan=True) else \
            f"{path} differs from NumPy's ({got!r} vs {want!r})"
    try:
        return None if got == want else f"{path} differs from NumPy's ({got!r} vs {want!r})"
    except Exception:                   # (objects that do not compare: not the same)
        return f"{path} cannot be compared with NumPy's"


_PYTHON_SCALARS = (bool, int, float, complex)


def python_scalars(want):
    """Where NumPy's result holds Python scalars (an iteration count, a ``float()``): a tree
    like ``want`` with True there, for ``as_python``; None where it holds none.  (A compiled
    program gives NumPy scalars in their place.)"""
    if type(want) in (tuple, list):
        kinds = [python_scalars(w) for w in want]
        return type(want)(kinds) if any(k is not None for k in kinds) else None
    if type(want) is dict:
        kinds = {k: python_scalars(w) for k, w in want.items()}
        return kinds if any(k is not None for k in kinds.values()) else None
    return True if type(want) in _PYTHON_SCALARS else None


def as_python(result, kinds):
    """``result`` with the NumPy scalars at ``kinds``' places made Python scalars."""
    if kinds is None:
        return result
    if kinds is True:
        return result.item() if isinstance(result, np.generic) else result
    if type(result) is dict:
        return {k: as_python(v, kinds.get(k)) for k, v in result.items()}
    if type(result) in (tuple, list) and len(result) == len(kinds):
        return type(result)(as_python(r, k) for r, k in zip(result, kinds))
    return result
