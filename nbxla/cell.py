"""Trace, compile, cache and run a notebook cell: namespace in, outputs out.

    result = run_cell(source, user_ns, label="Cell In[5]")

* **Inputs** are the names the cell reads before binding them (``cell_ast.analyze``).  Arrays
  and NumPy scalars, also inside lists/tuples/dicts, become parameters.  Every other value is
  a compile-time constant that is part of the cache key: hashable values by value (``alpha=0.5``,
  functions and classes by identity, so redefining a helper recompiles), unhashable ones by
  identity.  Modules are not part of the key.  The key cannot see inside objects: a helper
  whose *body* reads a global array, or an object mutated in place, is baked in at trace time.
* **Outputs** are the names the cell binds: traced values come back as NumPy arrays (0-d
  results as NumPy scalars, as eager NumPy gives for reductions); other values (ints, strings,
  functions) are remembered, so a cache hit binds them too.  Writes into input arrays
  (``u[1:-1] += ...``) are copied back into the user's arrays; a name still bound to an input
  array (``a += b``) keeps that very array object.
* **On a cache hit the cell's Python does not run** (as with ``tf.function``): ``print`` and
  other side effects happen only when the cell is traced.
* Nothing reaches the namespace until the whole run has succeeded (``CellResult.commit``).
"""

from __future__ import annotations

import itertools
import linecache
import time
from dataclasses import dataclass, field, replace
from types import FunctionType, ModuleType
from typing import Any, Callable

import numpy as np

from .compiler import Compilation, compile_module
from .dynamic_dims import DimensionPolicy, find_or_compile
from .hlo.shapes import SymbolicDimensionError
from .symbolic_compile import compile_symbolic
from .errors import NotCompilableError
from .flags import current_flags
from .runtime.cache import DEFAULT_CACHE, CompilationCache
from .runtime.executable import resolve_device
from .frontend import control, runtime
from .frontend.autograph import AG
from .frontend.cell_ast import DISPLAY, CellAnalysis, analyze, check_no_random
from .frontend.trace import (StaticValue, TracedProgram, TreeDef, alias_pattern, is_array_leaf,
                             leaf_signature, trace, tree_flatten, tree_unflatten)
from .frontend.ragged import RaggedSlice
from .frontend.selection import Selection
from .frontend.promotion import OneBranch
from .frontend.index_tracer import IndexTracer
from .frontend.tracer import Tracer

_anonymous = itertools.count(1)


class _Identity:
    """A cache-key stand-in for an unhashable constant: equal only to the same object."""
    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __eq__(self, other):
        return isinstance(other, _Identity) and other.obj is self.obj

    def __hash__(self):
        return id(self.obj)

    def __repr__(self):
        return f"<{type(self.obj).__name__} at {id(self.obj):#x}>"


def _signature(leaf, name: str | None = None) -> tuple:
    if is_array_leaf(leaf):
        return leaf_signature(leaf, name)
    try:                # (by bits: 0.0 and -0.0 apart, nan finds its entry again)
        return ("static", type(leaf).__name__, StaticValue(leaf))
    except TypeError:
        return ("static", type(leaf).__name__, _Identity(leaf))


def _leaf_names(name: str, d: TreeDef) -> list[str]:
    if d.kind == "leaf":
        return [name]
    if d.kind == "object":                  # an object holding arrays: m.w
        return [n for key, c in zip(d.keys, d.children) for n in _leaf_names(f"{name}.{key}", c)]
    labels = [repr(k) for k in d.keys] if d.kind == "dict" else range(len(d.children))
    return [n for label, c in zip(labels, d.children) for n in _leaf_names(f"{name}[{label}]", c)]


@dataclass
class CellInputs:
    """The values a cell reads, flattened: what the cache key and the executable need."""
    names: list[str]                  # read names passed as (possibly nested) arguments
    treedef: TreeDef                  # of ((those values...), {})
    leaves: list
    leaf_names: list[str]
    signature: tuple
    constants: tuple                  # (name, signature) of other read values


def gather_inputs(analysis: CellAnalysis, user_ns: dict) -> CellInputs:
    names, values, constants = [], [], []
    for name in analysis.reads:
        if name not in user_ns or name == DISPLAY:
            continue                  # builtins, or a NameError the cell will raise itself
        value = user_ns[name]
        if isinstance(value, ModuleType):
            continue                  # modules are not part of the key (see module docstring)
        if isinstance(value, (list, tuple, dict)) or is_array_leaf(value):
            names.append(name)
            values.append(value)
        else:
            constants.append((name, _signature(value)))
    leaves, treedef = tree_flatten((tuple(values), {}))     # trace() takes (args, kwargs)
    per_name = treedef.children[0].children
    leaf_names = [n for name, d in zip(names, per_name) for n in _leaf_names(name, d)]
    for leaf, name in zip(leaves, leaf_names):
        if is_array_leaf(leaf) and np.asarray(leaf).dtype.kind not in "biufc":
            raise NotCompilableError(
                f"{name} is an array of dtype {np.asarray(leaf).dtype}: compiled cells compute "
                "on bool and numeric arrays only", hint="use it in an ordinary cell")
    signature = tuple(_signature(leaf, name) for leaf, name in zip(leaves, leaf_names)) + \
        tuple(s for _, s in constants)
    leaf_names += [name for name, _ in constants]
    return CellInputs(names, treedef, leaves, leaf_names, signature, tuple(constants))


# ---- the compiled cell ----------------------------------------------------------------------
# A value the cell binds is rebuilt from slots: ("out", k) an output of the executable, ("int", k)
# one that NumPy binds as a Python int (a loop index),
# ("input", i) input leaf i itself, ("static", v) a Python value from trace time,
# ("selection", k) ``x[mask]`` compacted from outputs k (values) and k + 1 (the mask),
# ("array", a) a concrete array made at trace time (copied per run), ("function", f) a
# function defined in the cell (re-homed into the user's namespace).

@dataclass
class Binding:
    name: str
    action: str                       # "bind", "update" (a list/dict mutated in place), "delete"
    treedef: TreeDef | None = None
    slots: list = field(default_factory=list)


@dataclass
class CompiledCell:
    analysis: CellAnalysis
    program: TracedProgram
    compilation: Compilation
    bindings: list[Binding]
    display: Binding | None
    explanation: str = ""

    def run(self, inputs: CellInputs) -> "CellResult":
        """Run the executable; nothing is written anywhere yet."""
        leaves = inputs.leaves
        outputs = self.compilation.executable.run([leaves[i] for i in self.program.param_leaves])
        if self.program.checks:
            self.program.run_checks(outputs)     # NumPy's IndexError/ValueError, before any write
        outputs = [_own(out, leaves) for out in outputs]
        writebacks = [(leaves[i], outputs[k]) for i, k in self.program.writebacks]
        return CellResult(self, inputs, outputs, writebacks)


def _own(out: np.ndarray, leaves: list) -> np.ndarray:
    """Outputs must not alias the user's arrays (a backend may hand a parameter back)."""
    if any(isinstance(x, np.ndarray) and np.may_share_memory(out, x) for x in leaves):
        return out.copy()
    return out


@dataclass
class CellResult:
    cell: CompiledCell
    inputs: CellInputs
    outputs: list[np.ndarray]
    writebacks: list[tuple[np.ndarray, np.ndarray]]

    def value(self, binding: Binding, user_ns: dict | None = None):
        return tree_unflatten(binding.treedef, [self._slot(s, user_ns) for s in binding.slots])

    def _slot(self, slot, user_ns):
        kind, v = slot
        if kind == "out":
            out = self.outputs[v]
            return out[()] if out.ndim == 0 else out
        if kind == "int":
            return int(self.outputs[v])
        if kind == "selection":       # x[mask]: compacted here, its length depends on the data
            return self.outputs[v][self.outputs[v + 1]]
        if kind == "input":
            return self.inputs.leaves[v]
        if kind == "array":
            return v.copy()
        if kind == "function" and user_ns is not None:
            f = FunctionType(v.__code__, user_ns, v.__name__, v.__defaults__, v.__closure__)
            f.__kwdefaults__, f.__qualname__ = v.__kwdefaults__, v.__qualname__
            return f
        return v

    def commit(self, user_ns: dict):
        """Write everything back; returns the cell's display value (None if there is none)."""
        for array, new in self.writebacks:
            np.copyto(array, new if isinstance(new, np.ndarray) else new.get())  # CuPy: to host
        for b in self.cell.bindings:
            if b.action == "delete":
                user_ns.pop(b.name, None)
            elif b.action == "update":
                target, new = user_ns[b.name], self.value(b, user_ns)
                if isinstance(target, list):
                    target[:] = new
                else:
                    target.clear()
                    target.update(new)
            else:
                user_ns[b.name] = self.value(b, user_ns)
        return None if self.cell.display is None else self.value(self.cell.display, user_ns)


# ---- tracing --------------------------------------------------------------------------------

def trace_cell(analysis: CellAnalysis, inputs: CellInputs, user_ns: dict, *, filename: str,
               label: str, name: str,
               filename_display: Callable[[str], str | None] | None = None,
               size_observations: list | None = None) -> tuple[TracedProgram, list, Binding | None]:
    """Run the cell once on Tracers; returns the program, the bindings and the display recipe."""
    check_no_random(analysis, user_ns, filename, label)
    code = analysis.traced_code(filename)
    recipe: dict[str, Any] = {}

    def body(*values):
        ns = dict(user_ns)
        ns.update(zip(inputs.names, values))
        given = {name: (ns[name], tree_flatten(ns[name])) for name in inputs.names}
        builder = _Recipe(ns, tree_flatten(values)[0])   # before the cell mutates lists
        ns[AG] = runtime
        exec(code, ns)
        bindings = []
        for name, (obj, (leaves, treedef)) in given.items():
            # a list or dict from the namespace changed in place: update the user's object
            if ns.get(name) is obj and isinstance(obj, (list, dict)):
                now, now_def = tree_flatten(obj)
                if now_def != treedef or any(a is not b for a, b in zip(now, leaves)):
                    bindings.append(builder.binding(name, "update", obj))
        updated = {b.name for b in bindings}
        for name in analysis.binds:
            if name not in ns or ns[name] is control.UNDEFINED:
                bindings.append(Binding(name, "delete"))
            elif name not in updated:
                bindings.append(builder.binding(name, "bind", ns[name]))
        recipe["bindings"] = bindings
        recipe["display"] = builder.binding(DISPLAY, "bind", ns[DISPLAY]) \
            if analysis.displays and ns.get(DISPLAY) is not None else None
        return builder.outputs

    display = filename_display or (lambda f: label if f == filename else None)
    program = trace(body, list(inputs.leaves), inputs.treedef, name=name,
                    leaf_names=inputs.leaf_names, filename_display=display, names_outlive=True,
                    size_observations=size_observations)
    return program, recipe["bindings"], recipe["display"]


class _Recipe:
    """Turns the cell's final values into slots, collecting traced outputs once each."""

    def __init__(self, ns: dict, traced_leaves: list):
        self.ns = ns
        self.inputs = {id(leaf): i for i, leaf in enumerate(traced_leaves) if isinstance(leaf, Tracer)}
        self.outputs: list[Tracer] = []
        self._index: dict[int, int] = {}

    def binding(self, name: str, action: str, value) -> Binding:
        leaves, treedef = tree_flatten(value)
        return Binding(name, action, treedef, [self.slot(leaf) for leaf in leaves])

    def slot(self, leaf):
        if isinstance(leaf, OneBranch):     # NumPy would bind it or not, depending on the data
            raise leaf.error
        if isinstance(leaf, RaggedSlice):   # (its length depends on the data: not kept)
            raise NotCompilableError("leaving a slice whose bounds are read from the data (its length "
                                     "depends on the data) bound to a name of the cell is not supported",
                                     leaf.where, "reduce it inside the loop (y[i] = vals @ x[cols]) and "
                                     "bind no name to it, or run the cell eagerly (%%xla --auto)")
        if isinstance(leaf, Selection):
            self.outputs += [leaf.values, leaf.mask]
            return ("selection", len(self.outputs) - 2)
        if isinstance(leaf, Tracer):
            if id(leaf) in self.inputs:          # still the user's array (perhaps written into)
                return ("input", self.inputs[id(leaf)])
            if id(leaf) not in self._index:
                self._index[id(leaf)] = len(self.outputs)
                self.outputs.append(leaf)
            # a loop index or counter: NumPy binds a Python int
            return ("int" if isinstance(leaf, IndexTracer) else "out", self._index[id(leaf)])
        if isinstance(leaf, np.ndarray):
            return ("array", leaf)
        if isinstance(leaf, FunctionType) and leaf.__globals__ is self.ns:
            return ("function", leaf)
        return ("static", leaf)



# ---- compile (or find in the cache) and run ------------------------------------------------

@dataclass
class PreparedCell:
    cell: CompiledCell
    inputs: CellInputs
    hit: bool

    @property
    def compilation(self) -> Compilation:
        return self.cell.compilation

    def run(self) -> CellResult:
        return self.cell.run(self.inputs)


def register_source(source: str) -> str:
    """A filename under which ``linecache`` (and so error messages) finds the cell's lines."""
    filename = f"<nbxla-cell-{next(_anonymous)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    return filename


def prepare_cell(source: str, user_ns: dict, *, label: str = "cell", filename: str | None = None,
                 name: str = "cell", device: str | None = None, use_cache: bool = True,
                 cache: CompilationCache | None = None,
                 filename_display: Callable[[str], str | None] | None = None,
                 dynamic: bool = False) -> PreparedCell:
    """The compiled cell for the namespace's current inputs: from the cache, or traced now.

    ``source`` is the cell text padded with blank lines so that its line numbers are the
    notebook's; ``filename`` is what it is compiled under (``linecache`` must know it).
    """
    cache = DEFAULT_CACHE if cache is None else cache
    analysis = analyze(source)
    inputs = gather_inputs(analysis, user_ns)
    flags = current_flags()
    device = resolve_device(device or flags.device)
    filename = filename or register_source(source)
    code_key = ("cell", source.strip())

    def compile_now() -> CompiledCell:
        start = time.perf_counter()
        program, bindings, display = trace_cell(analysis, inputs, user_ns, filename=filename,
                                                label=label, name=name,
                                                filename_display=filename_display)
        trace_ms = (time.perf_counter() - start) * 1e3
        return CompiledCell(analysis, program,
                            compile_module(program.module, device, trace_ms, dump_to=flags.dump_to,
                                           loop_decisions=program.loop_decisions),
                            bindings, display)

    if not use_cache:
        cell = compile_now()
        cell.explanation = cell.compilation.explanation = "compiled without the cache (--no-cache)"
        return PreparedCell(cell, inputs, False)
    key = (code_key, device, flags, inputs.signature, inputs.treedef, tuple(inputs.leaf_names),
           alias_pattern(inputs.leaves))
    note = ""
    if dynamic and not cache.contains(key):
        prepared, note = _prepare_symbolic(analysis, inputs, user_ns, code_key, key, device, cache,
                                           dict(filename=filename, label=label, name=name,
                                                filename_display=filename_display))
        if prepared is not None:
            return prepared
    entry, hit = cache.get_or_compile(key, code_key, label, inputs.signature,
                                      lambda: inputs.leaf_names, device, compile_now)
    if not hit:
        if note:
            entry.explanation = f"{note} ({entry.explanation})"
            entry.value.compilation.dimensions = note
        entry.value.explanation = entry.value.compilation.explanation = entry.explanation
    return PreparedCell(entry.value, inputs, hit)


# Per cell source: which dimensions are symbolic, the programs made, the patterns refused.
_CELL_DIMENSIONS: dict = {}


def _prepare_symbolic(analysis, inputs: CellInputs, user_ns: dict, code_key, key, device, cache,
                      trace_options: dict) -> tuple[PreparedCell | None, str]:
    """``%%xla --dynamic``: the cell compiled once for every size of its arrays' dimensions
    (``dynamic_dims.py``), or (None, why not)."""
    policy = _CELL_DIMENSIONS.setdefault(code_key, DimensionPolicy(True))
    hit = [True]

    def compile_for(marks):
        hit[0] = False
        probes = []

        def trace_at(leaves, log):
            program, bindings, display = trace_cell(analysis, replace(inputs, leaves=leaves), user_ns,
                                                    size_observations=log, **trace_options)
            probes.append((bindings, display))
            return program
        program = compile_symbolic(trace_at, inputs.leaves, marks, device)
        if not all(_same_recipes(probes[0], other) for other in probes[1:]):
            raise SymbolicDimensionError("the cell binds a Python value or array computed from a size")
        program.cell_parts = probes[0]
        return program

    sym, note = find_or_compile(policy, cache, key[1:3] + key[4:], inputs.signature,
                                lambda: inputs.leaf_names, len(inputs.leaves),
                                lambda pattern: key[:3] + (pattern,) + key[4:], code_key,
                                trace_options["label"], device, compile_for)
    if sym is None:
        return None, note
    program = sym.program
    compilation = program.instance(program.values_of(inputs.leaves))
    cell = CompiledCell(analysis, program.program, compilation, *program.cell_parts,
                        explanation=sym.entry.explanation)
    return PreparedCell(cell, inputs, hit[0]), ""


def _same_recipes(first: tuple, second: tuple) -> bool:
    """Do the two probes bind the same things (slots equal, no value that changed with the size)?"""
    def slots(recipe):
        bindings, display = recipe
        out = []
        for b in list(bindings) + ([display] if display is not None else []):
            out.append((b.name, b.action, b.treedef, [(k, v if k not in ("array", "static") else
                                                      (np.asarray(v).tolist() if k == "array" else repr(v)))
                                                     for k, v in b.slots if k != "function"]))
        return out
    return slots(first) == slots(second)


def run_cell(source: str, user_ns: dict, **options):
    """Compile (or reuse) and run a cell, write its outputs into ``user_ns``; returns its display value."""
    return prepare_cell(source, user_ns, **options).run().commit(user_ns)
