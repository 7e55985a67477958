"""Tests rerun with the leading dimension unknown: one mechanism for the frontend, pass and backend
tests (issue 31: "every test that runs on static shapes also runs with the leading dimension
symbolic, against the same oracles").

A rerun module names the test modules whose tests run again, and optionally which of them::

    from tests.symbolic_rerun import rerun
    rerun(globals(), test_indexing, test_methods, only={test_methods: ["test_array_methods"]})

Their tests (and the fixtures they use) are collected again in the rerun module, under an autouse
fixture that makes the leading dimension unknown in whatever the test compiles:

* **``nbxla.jit`` functions** made while the test runs compile with ``dynamic=True`` on the CPU
  (every dimension unknown where the program allows, else the leading ones, else the concrete
  sizes with the reason kept).  The test's own oracle (NumPy) checks the result at its size;
  where the compilation was symbolic, the function also runs at a larger leading size (the
  arguments' rows repeated) against NumPy there: the program must serve sizes it was not traced
  at.  (A backend test's function jitted for the evaluator is its oracle and stays the
  evaluator: ``rerun_device``.)
* **HLO modules** the test hands to ``compile_module``, ``build_executable`` or ``optimize`` (by
  the names the test modules imported) are also made symbolic in their leading size
  (``symbolic_in_leading_size``), compiled once by ``compile_symbolic_module`` and run at their
  size and a larger one against the reference evaluator on the module bound to that size (the
  pass and backend tests' oracle), on inputs drawn for the module (``model_values``).

**Counting.**  A rerun test in which something was compiled with unknown dimensions must have had
at least one compilation serve every size, unless the rerun module's ``SPECIALISED`` table names
the test with the reason: a change that quietly made everything specialise fails the tests it
touched, on whichever worker runs them.  (Modules that cannot be made symbolic at all -- no
leading size of 2 or more, a size held in an attribute -- are not counted: ``NOT_SYMBOLIC``.)
``SERVED`` and ``REFUSED`` keep each test's counts for a look from a debugger or ``-s`` print.

**Once per process** (``tests/rerun_memo.py``).  A module's check (``CHECKED``) and a
function's compile with unknown dimensions at one call signature (``COMPILED``: not active yet) are done once
per process and compiler state:
cases that differ only in their values, and a module handed to the CPU and to the evaluator,
compiled the same program again for the same verdict.  Each case still runs its own oracle.
"""

from __future__ import annotations

import os
import re
import sys
import types

import numpy as np
import pytest

import nbxla.api as api
from nbxla.compiler import compile_module
from nbxla.hlo import Module
from nbxla.hlo.elided import model_values
from nbxla.hlo.evaluator import evaluate, flatten
from nbxla.hlo.ir import clone_module
from nbxla.hlo.shapes import SymDim, SymbolicDimensionError, TupleShape
from nbxla.hlo.symbolic import bind_module, module_is_symbolic
from nbxla.passes import optimize
from nbxla.passes.verifier import verify_module
from nbxla.runtime.executable import build_executable
from nbxla.symbolic_compile import compile_symbolic_module, run_symbolic
from nbxla.testing import _TOLERANCES as compare_tolerances, compare_arrays
from tests import rerun_memo
from tests.rerun_memo import canonical_text, compiler_state

GROWN_BY = 3
# Why a program itself needs its sizes (NumPy semantics, the program's own choices): a test whose
# every compilation specialised for one of these needs no entry in its rerun module's SPECIALISED.
# Every other reason is the compiler's (a kernel or runtime path that reads its size from its
# code: issue 31 wants those gone), and a test specialising only for such reasons must be listed.
PROGRAM_REASONS = {
    "writes into its arguments": "writes into arguments are compiled per size (symbolic_compile._check_program)",
    "a result is a constant, a selection or a view": "a result that is not computed has no symbolic form",
    "checks indices or sizes when it runs": "the run-time checks are traced for the call's sizes",
    "does not trace at": "the function refuses other sizes (as NumPy does)",
    "where several sizes are unknown": "size 1 broadcasts: specialised where several sizes are unknown",
    "a constant computed from a size": "the program computes with a size as a number",
    "that is not a multiple of one unknown size": "a shape that is not a multiple of the size (a reshape, a slice)",
    "computations at one size": "a Python choice on a size",
    "instructions at one size": "a Python loop over a size",
    "depends on the size (%": "an attribute (slice limits, a window) holds the size",
    "the attribute": "an attribute (slice limits, a window) holds the size",
    "at size 1 the program is another one": "size 1 broadcasts",
    "compares a size in Python": "a Python branch on a size",
    "compares sizes a different number of times": "a Python loop over a size",
}


def compiler_gaps(refused: list[str]) -> list[str]:
    """The reasons among ``refused`` (compilation notes: ``x.shape[0] -> b specialised: why;
    ...``, one part per set of dimensions tried) that are the compiler's, not the program's."""
    parts = [part for why in refused for part in re.split(r"; (?=[\w\[\]'.]+\.shape\[\d+\] -> )", why)]
    return [part for part in parts if not any(reason in part for reason in PROGRAM_REASONS)]

# Why a module could not be made symbolic at all (not a compilation that specialised: not counted)
NOT_SYMBOLIC = ("no leading size of 2 or more", "a tuple parameter", "not a valid module at other sizes")
# test name -> symbolic compilations that served every size / reasons others specialised
SERVED: dict[str, int] = {}
REFUSED: dict[str, list[str]] = {}


# ---- HLO modules: the leading size made unknown ---------------------------------------------------

def _with_symbol(shape, n: int):
    if shape.is_tuple:
        return TupleShape(tuple(_with_symbol(s, n) for s in shape.elements))
    return type(shape)(shape.element_type, tuple(SymDim("b") if d == n else d for d in shape.dims), shape.layout)


def _leading_only(shape, n: int):
    if shape.is_tuple:
        return TupleShape(tuple(_leading_only(s, n) for s in shape.elements))
    dims = shape.dims
    return type(shape)(shape.element_type, (SymDim("b"),) + dims[1:], shape.layout) if dims and dims[0] == n else shape


def symbolic_in_leading_size(module: Module, every: bool = True) -> tuple[Module, int] | None:
    """The module with every dimension of its first array parameter's leading size (>= 2)
    unknown (``every=False``: only leading dimensions of that size, where a square matrix's
    other side keeps its size), and that size; None when there is none."""
    leading = next((p.shape.dims[0] for p in module.entry.parameters if not p.shape.is_tuple and p.shape.rank), None)
    if leading is None or leading < 2:
        return None
    out = clone_module(module)
    for comp in out.computations:
        for instr in comp.instructions:
            instr.shape = (_with_symbol if every else _leading_only)(instr.shape, leading)
    return out, leading


def _grown(arg: np.ndarray, shape, extra: int) -> np.ndarray:
    for d, dim in enumerate(shape.dims):
        if isinstance(dim, SymDim):
            arg = np.concatenate([arg, np.take(arg, np.arange(extra) % max(1, arg.shape[d]), axis=d)], axis=d)
    return arg


def check_symbolic(module: Module, inputs: list | None = None, exact: bool = False) -> str | None:
    """Compile ``module`` once with its leading size unknown and compare it with the evaluator at
    the inputs' size and a larger one (``inputs``: drawn for the module when None): every
    dimension of that size unknown, else (a square matrix: a range of b*b) only the leading
    ones.  None when it served both sizes, else why it stays specialised (words; any other
    failure raises).  With drawn inputs the check is a function of the module and of what the
    compiler's code reads (``rerun_memo.compiler_state``): a module checked already in this
    process, under the same state, gives the verdict it gave (``rerun_memo.CHECKED``) instead
    of compiling again."""
    if inputs is not None:
        return _check_both_ways(module, inputs, exact)
    key = (canonical_text(module), exact, compiler_state())
    if key not in rerun_memo.CHECKED:
        rerun_memo.CHECKED[key] = _check_both_ways(module, None, exact)
    return rerun_memo.CHECKED[key]


def _check_both_ways(module: Module, inputs: list | None, exact: bool) -> str | None:
    why = _check_symbolic(module, inputs, exact, every=True)
    if why is not None and symbolic_in_leading_size(module) is not None:
        alone = _check_symbolic(module, inputs, exact, every=False)
        why = None if alone is None else f"{why}; leading dimensions alone: {alone}"
    return why


def _check_symbolic(module: Module, inputs: list | None, exact: bool, every: bool) -> str | None:
    made = symbolic_in_leading_size(module, every)
    if made is None:
        return "no leading size of 2 or more"
    symbolic, n = made
    params = symbolic.entry.parameters
    if any(p.shape.is_tuple for p in params):
        return "a tuple parameter"
    sizes = [n, n + GROWN_BY]
    try:
        for size in sizes:
            verify_module(bind_module(symbolic, {"b": size}))
    except Exception as e:          # (an attribute holds the size: a full slice, an iota's bound)
        return f"not a valid module at other sizes: {type(e).__name__}"
    try:
        program = compile_symbolic_module(symbolic, {"b": n})
    except SymbolicDimensionError as e:
        return str(e)
    if inputs is None:
        rng = np.random.default_rng(31)
        inputs = [model_values(p.shape, rng) for p in bind_module(symbolic, {"b": n}).entry.parameters]
    for size in sizes:
        args = [_grown(a, p.shape, size - n) for a, p in zip(inputs, params)]
        try:
            got = run_symbolic(program, args)
        except SymbolicDimensionError as e:     # (a known gap: it should refuse when compiling)
            return f"refused when run at size {size}, not when compiled: {e}"
        with np.errstate(all="ignore"):
            want = flatten(evaluate(bind_module(symbolic, {"b": size}), args))
        for k, (g, w) in enumerate(zip(got, want)):
            g, w = np.asarray(g), np.asarray(w)
            if exact or w.dtype.kind in "biu":
                assert g.dtype == w.dtype and g.shape == w.shape and _bitwise_equal(g, w), \
                    f"{module.name} result {k} at b={size} differs from the evaluator"
            else:
                ok, detail = compare_arrays(g, w)
                assert ok, f"{module.name} result {k} at b={size}: {detail}"
    assert program.instances == len(sizes)      # one compilation, an instance per size
    return None


def _bitwise_equal(got: np.ndarray, want: np.ndarray) -> bool:
    """Equal bit for bit, NaN payloads aside."""
    if got.dtype.kind == "c":
        return _bitwise_equal(got.real.copy(), want.real.copy()) and _bitwise_equal(got.imag.copy(), want.imag.copy())
    if got.dtype.kind in "biu":
        return bool(np.array_equal(got, want))
    bits = f"u{got.dtype.itemsize}"
    nan = np.isnan(got.astype(np.float64)) & np.isnan(want.astype(np.float64))
    return bool(((got.view(bits) == want.view(bits)) | nan).all())


# ---- jit functions: dynamic=True, and a second size against NumPy ---------------------------------

def _grown_args(args: tuple, n: int) -> tuple:
    extra = max(1, n // 2)
    return tuple(np.concatenate([a, a[:extra]]) if isinstance(a, np.ndarray) and a.ndim and a.shape[0] == n
                 else a for a in args)


def _copies(args):
    return [np.copy(a) if isinstance(a, np.ndarray) else a for a in args]


def _tolerance(dtype: np.dtype) -> tuple[float, float]:
    return compare_tolerances.get(dtype.name, (0.0, 0.0)) if dtype.kind in "fcV" else (0.0, 0.0)


def _inputs_tolerance(args) -> tuple[float, float]:
    """The tolerance of the least precise floating argument: a float64 result computed from
    float32 arguments (``np.log(price / strike)`` in float32, then promoted) carries their
    rounding, which the test's own oracle allows for (its ``rtol``) and float64's does not."""
    found = [_tolerance(np.asarray(a).dtype) for a in args if isinstance(a, (np.ndarray, np.generic))]
    return max(found, default=(0.0, 0.0))


def _assert_same(expected, actual, path: str, floor: tuple[float, float] = (0.0, 0.0)) -> None:
    """NumPy's ``expected`` against nbxla's ``actual`` (nested containers), values within
    ``compare_arrays``' tolerance for their dtype (bf16 and f8 too), or ``floor``'s (the
    arguments' precision: ``_inputs_tolerance``) where that is looser."""
    if isinstance(expected, (tuple, list, dict)):
        assert type(actual) is type(expected) and len(actual) == len(expected), f"{path}: got {actual!r}"
        keys = expected.keys() if isinstance(expected, dict) else range(len(expected))
        for k in keys:
            _assert_same(expected[k], actual[k], f"{path}[{k!r}]", floor)
    elif isinstance(expected, (np.ndarray, np.generic)):
        want = np.asarray(expected)
        rtol, atol = (max(a, b) for a, b in zip(_tolerance(want.dtype), floor))
        with np.errstate(all="ignore"):
            finite = want[np.isfinite(want)] if want.dtype.kind in "fc" else want
            scale = max(1.0, float(np.abs(finite).max())) if finite.size and want.dtype.kind in "fc" else 1.0
        ok, detail = compare_arrays(np.asarray(actual), want, rtol=rtol or None, atol=atol * scale or None)
        assert ok, f"{path}: {detail}"
    else:
        assert expected == actual, f"{path}: expected {expected!r}, got {actual!r}"


class _Rerun:
    """What the current test compiled: symbolic compilations served, reasons for the others."""

    def __init__(self, name: str):
        self.name, self.served, self.refused, self.busy = name, 0, [], False

    def jitted(self, compiled, args, kwargs, result):
        comp = compiled.last_compilation
        if comp is None or self.busy:
            return
        if not module_is_symbolic(comp.hlo):
            if comp.dimensions:
                self.refused.append(comp.dimensions)
            return
        self.served += 1
        arrays = [a for a in args if isinstance(a, np.ndarray) and a.ndim]
        if not arrays or kwargs or compiled._bound:
            return
        n = arrays[0].shape[0]
        grown = _grown_args(args, n)
        from tests.frontend_util import quiet
        with quiet():
            try:
                expected = compiled.fn(*_copies(grown))
            except Exception:
                return                  # (NumPy refuses these sizes: nothing to compare)
            self.busy = True
            try:
                actual = compiled(*_copies(grown))
            finally:
                self.busy = False
        _assert_same(expected, actual, f"{compiled.__name__} at leading size {n + max(1, n // 2)}",
                     _inputs_tolerance(grown))

    def module(self, module, device="cpu"):
        if self.busy or not isinstance(module, Module) or str(device) not in ("cpu", "evaluator"):
            return
        self.busy = True
        try:
            why = check_symbolic(module)
        finally:
            self.busy = False
        if why is None:
            self.served += 1
        elif not why.startswith(NOT_SYMBOLIC):
            self.refused.append(why)


_ORIGINAL_INIT = api.CompiledFunction.__init__
_ORIGINAL_CALL = api.CompiledFunction.__call__


def _hooked(original, after):
    def hooked(module, *args, **kwargs):
        out = original(module, *args, **kwargs)
        after(module, *args[:1], **({"device": kwargs["device"]} if "device" in kwargs else {}))
        return out
    return hooked


def rerun_device(device: str, dynamic, evaluator_is_the_oracle: bool) -> tuple:
    """(device, dynamic) of a function a rerun test jits: unknown dimensions (``dynamic=True``,
    unless the test chose), on the CPU for the frontend tests' evaluator device; but a backend
    test's evaluator (``evaluator_is_the_oracle``: the rerun module's EVALUATOR_IS_THE_ORACLE)
    is its oracle, and stays the evaluator at the test's sizes (compiled for the CPU too, the
    test compared the CPU's symbolic program with another compile of itself)."""
    if device == "evaluator" and evaluator_is_the_oracle:
        return device, dynamic
    return ("cpu" if device == "evaluator" else device), (True if dynamic is None else dynamic)


def _leading_dimension_unknown(request, monkeypatch):
    """The autouse fixture of a rerun module (see the module's docstring)."""
    record = _Rerun(request.node.name)
    # (the test's monkeypatch is this fixture's: its setitem records, read as they grow)
    monkeypatch.setattr(rerun_memo, "PATCHED_ITEMS", getattr(monkeypatch, "_setitem", []))
    evaluator_is_the_oracle = getattr(request.module, "EVALUATOR_IS_THE_ORACLE", False)

    def init(self, fn, device="cpu", *args, dynamic=None, **kwargs):
        device, dynamic = rerun_device(device, dynamic, evaluator_is_the_oracle)
        _ORIGINAL_INIT(self, fn, device, *args, dynamic=dynamic, **kwargs)

    def call(self, *args, **kwargs):
        result = _ORIGINAL_CALL(self, *args, **kwargs)
        record.jitted(self, args, kwargs, result)
        return result

    monkeypatch.setattr(api.CompiledFunction, "__init__", init)
    monkeypatch.setattr(api.CompiledFunction, "__call__", call)
    # The module entry points, where the tests' modules imported them (nbxla's own calls inside
    # compile_module and friends are not hooked: one check per module a test hands over).
    hooks = {id(f): (f, _hooked(f, after)) for f, after in (
        (compile_module, record.module), (build_executable, record.module),
        (optimize, lambda module, *a, **k: record.module(module)))}
    for name, mod in list(sys.modules.items()):
        if not name.startswith("tests.") or not isinstance(mod, types.ModuleType):
            continue
        for attr, value in list(vars(mod).items()):
            found = hooks.get(id(value))
            if found is not None and found[0] is value:
                monkeypatch.setattr(mod, attr, found[1])
    yield
    SERVED[record.name] = record.served
    if record.refused:
        REFUSED[record.name] = record.refused
    table = getattr(request.module, "SPECIALISED", {})
    base = record.name.split("[")[0]
    gaps = compiler_gaps(record.refused)
    if gaps and not record.served and record.name not in table and base not in table:
        pytest.fail(f"{record.name}: every compilation specialised, for the compiler's reasons (add it to "
                    f"SPECIALISED with the reason if that is right): {gaps[:3]}")


def _is_fixture(value) -> bool:
    return type(value).__name__ == "FixtureFunctionDefinition" or hasattr(value, "_pytestfixturefunction")


def _thinned(test, most: int):
    """``test`` with each of its ``parametrize`` lists cut to ``most`` cases spread evenly over
    it (first and last kept): a representative rerun, since a symbolic compile costs several
    static ones."""
    marks = getattr(test, "pytestmark", [])
    if not any(m.name == "parametrize" and len(m.args[1]) > most for m in marks):
        return test
    new_marks = []
    for mark in marks:
        values = list(mark.args[1]) if mark.name == "parametrize" else []
        if len(values) <= most:
            new_marks.append(mark)
            continue
        keep = sorted({round(k * (len(values) - 1) / (most - 1)) for k in range(most)})
        kwargs = dict(mark.kwargs)
        if isinstance(kwargs.get("ids"), (list, tuple)):
            kwargs["ids"] = [kwargs["ids"][k] for k in keep]
        new_marks.append(pytest.mark.parametrize(mark.args[0], [values[k] for k in keep], **kwargs).mark)
    return _copy(test, new_marks)


def drop_cases(namespace: dict, names: list[str], drop, why: str) -> None:
    """The rerun tests ``names`` (as rerun in ``namespace``) without the ``parametrize`` values
    ``drop(value)`` is true of; ``why``: the reason, kept beside them for the reader."""
    for name in names:
        test = namespace[name]
        marks = [pytest.mark.parametrize(m.args[0], [v for v in m.args[1] if not drop(v)], **m.kwargs).mark
                 if m.name == "parametrize" else m for m in getattr(test, "pytestmark", [])]
        namespace[name] = _copy(test, marks)
        namespace[name].dropped_cases_because = why


def _copy(test, marks: list):
    """A copy of the function ``test`` with these pytest marks (the original keeps its own)."""
    copy = types.FunctionType(test.__code__, test.__globals__, test.__name__, test.__defaults__, test.__closure__)
    copy.__dict__.update(test.__dict__)
    copy.__wrapped__ = test
    copy.pytestmark = marks
    return copy


def rerun_directory(namespace: dict, left_out: dict[str, str], **kwargs) -> list[str]:
    """``rerun`` of every test module beside the rerun module (``test_*.py`` of its directory),
    but the reruns themselves (``*_rerun``) and those ``left_out`` names (module name -> why:
    a test of structure or timing that a program for every size rightly changes, one of
    another device, one too slow to compile twice).  A test module added to the directory is
    rerun without anyone listing it; a ``left_out`` name that is no module of the directory
    is an error (a stale entry).  Returns the module names rerun."""
    import importlib
    from pathlib import Path
    here = Path(namespace["__file__"]).parent
    names = sorted(p.stem for p in here.glob("test_*.py") if not p.stem.endswith("_rerun"))
    stale = sorted(set(left_out) - set(names))
    if stale:
        raise ValueError(f"{namespace['__name__']}: left_out names no test module of {here}: {stale}")
    modules = []
    for name in names:
        if name in left_out:
            continue
        try:
            modules.append(importlib.import_module(f"{namespace['__package__']}.{name}"))
        except pytest.skip.Exception:
            continue                # (a module that skips itself -- an optional part absent -- skips here too)
    rerun(namespace, *modules, **kwargs)
    return [m.__name__.rsplit(".", 1)[-1] for m in modules]


def cases_wanted(default: int) -> int:
    """How many cases of each ``parametrize`` list a rerun takes (0: every one): ``default``
    (the rerun module's: every case, unless it says otherwise), or what the environment's
    ``NBXLA_RERUN_CASES`` says (a number: a quick local run, each list cut to that many cases
    spread over it; or ``all``).  Every rerun takes every case by default: run uncut, the
    cases beyond a cut found faults the cut missed (the second-size check's float64 tolerance
    on results of float32 arguments, ``_inputs_tolerance``; a symbolic loop's runner in a
    straight-line entry, ``test_python_numbers_in_loops``' while_counter).  Every case is 5x
    the codegen rerun's cases of the old cut (2 a list: 466 -> 2511) and 3.5x the frontend's
    (4 a list: 777 -> 2719); what lowers their cost: a module checked once per process and a
    function compiled once per call signature (``rerun_memo``; the latter not active yet), and the backend tests'
    evaluator kept as their oracle (``EVALUATOR_IS_THE_ORACLE``) instead of a second symbolic
    compile."""
    wanted = os.environ.get("NBXLA_RERUN_CASES", "").strip().lower()
    if not wanted:
        return default
    if wanted == "all":
        return 0
    if not wanted.isdigit() or int(wanted) < 2:
        raise ValueError(f"NBXLA_RERUN_CASES={wanted!r}: a number of cases (2 or more) or 'all'")
    return int(wanted)


def rerun(namespace: dict, *modules, only: dict | None = None, skip: dict | None = None,
          cases_per_list: int = 0) -> None:
    """Collect the tests of ``modules`` again in the module whose ``namespace`` this is, under the
    leading-dimension fixture: all of them, or those ``only[module]`` names; never those ``skip``
    names (test name -> why: a test of structure, not of values, that a symbolic program
    rightly changes; or one too slow to compile twice); every case of each ``parametrize``
    list, or ``cases_per_list`` of them (``_thinned``), unless ``NBXLA_RERUN_CASES`` says
    otherwise (``cases_wanted``)."""
    cases_per_list = cases_wanted(cases_per_list)
    for module in modules:
        short = module.__name__.rsplit(".", 1)[-1]
        wanted = (only or {}).get(module)
        for name, value in vars(module).items():
            if _is_fixture(value) and name not in namespace:
                namespace[name] = value
            elif name.startswith("test_") and callable(value) and (wanted is None or name in wanted) \
                    and name not in (skip or {}):
                test = _thinned(value, cases_per_list) if cases_per_list else value
                namespace[f"{name}__{short}"] = test
    namespace["leading_dimension_unknown"] = pytest.fixture(autouse=True)(_leading_dimension_unknown)
