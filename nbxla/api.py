"""``nbxla.jit``: compile a NumPy function, like ``tf.function(jit_compile=True)``.

    @nbxla.jit
    def f(x, y):
        return np.mean(3 * x**2 + y)

Array arguments (and NumPy scalars) become parameters; every other argument is a
compile-time constant, so a new value means a new compilation.  Writes into argument arrays
are copied back into the caller's arrays after the run, as NumPy would have made them.
Arrays the function reads from its globals or closure are implicit arguments read on every
call, and the constants it reads there are part of the key (``frontend/captures.py``).
With ``verify=True`` (or ``NBXLA_FLAGS=--verify``) the first call of each compiled signature
is checked against the plain function (``call_check.py``).
"""

from __future__ import annotations

import functools
import inspect
import time
import types
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from .call_check import checked_call
from .compile_clock import recording_stages, stage
from .compiler import Compilation, compile_module
from .errors import ResourceError, TraceError, UnsupportedInputError
from .frontend.captures import CapturePlan, bake, has_arrays, rebuild, unbake
from .frontend.arguments import as_positional, positional_parameters
from .frontend.autograph import convert_function
from .frontend.cell_ast import check_function_no_random
from .flags import current_flags
from .frontend.trace import (StaticValue, TracedProgram, alias_pattern, is_array_leaf, leaf_signature,
                             trace, tree_flatten, tree_paths, tree_unflatten)
from .frontend.tracer import Tracer
from .dynamic_dims import DimensionPolicy, find_or_compile
from .runtime.cache import DEFAULT_CACHE, CacheKey, CompilationCache
from .runtime.donation import protect_aliases
from .symbolic_compile import compile_symbolic, static_compile_context
from .runtime.executable import resolve_device


# Adapters above this module (e.g. ``nbxla.dask``) for argument types it does not run itself:
# ``(claims(leaf) -> bool, adapter(compiled_function, args, kwargs) -> result)``.
ARRAY_ADAPTERS: list[tuple[Callable, Callable]] = []


def register_array_adapter(claims: Callable, adapter: Callable) -> None:
    """Calls with an argument leaf that ``claims`` accepts go to ``adapter`` instead."""
    ARRAY_ADAPTERS.append((claims, adapter))


# Modes above this module (``nbxla.cluster`` registers "auto"): ``jit(fn, mode=name)`` is
# ``MODES[name](fn, device, cache)``.
MODES: dict[str, Callable] = {}


def register_mode(name: str, make: Callable) -> None:
    """``jit(fn, mode=name)`` (and, for "auto", ``NBXLA_FLAGS=--auto_jit``) makes ``make(fn,
    device, cache)``."""
    MODES[name] = make


def _mode(name: str) -> Callable:
    if name not in MODES:
        raise ValueError(f"nbxla.jit: mode {name!r} is not available (known: "
                         f"{', '.join(['compile', *MODES])}); import the package that provides it")
    return MODES[name]


@dataclass
class CompiledProgram:
    program: TracedProgram
    compilation: Compilation
    verified: bool = False          # its first call was checked against the plain function

    @functools.cached_property
    def donated(self) -> tuple[int, ...]:
        """Entry parameters whose arrays a run overwrites (``runtime/donation.py``)."""
        native = getattr(self.compilation.executable, "native", None)
        return tuple(sorted(getattr(native, "donated", ())))


# Arguments the program updates in place get the new value written straight into their
# memory (no copy back) from this size up; smaller ones keep the write-back copy, which costs
# less than leaving the single-kernel runners (they take no outputs in argument memory).
DONATE_MIN_BYTES = 256 << 10


def donations(program: TracedProgram) -> dict[int, int]:
    """{entry parameter: output leaf} for the arguments ``program`` writes back that may be
    written in place: none when it has run-time checks (NumPy raises before it writes) or
    control flow (its native loops plan their own buffers), and only from
    ``DONATE_MIN_BYTES``."""
    entry = program.module.entry
    if program.checks or any(i.opcode in ("while", "conditional", "call") for c in program.module.computations
                             for i in c.instructions):
        return {}
    outputs = entry.root.operands if entry.root.opcode == "tuple" else [entry.root]
    if any(o.shape.is_tuple for o in outputs):
        return {}                           # (output k is a flat leaf number: flat roots only)
    number = {leaf: k for k, leaf in enumerate(program.param_leaves)}
    found = {}
    for leaf, k in program.writebacks:
        # (not an output also given back as a result: that must be an array of its own)
        if leaf in number and k < len(outputs) and sum(o is outputs[k] for o in outputs) == 1 \
                and outputs[k].shape.byte_size >= DONATE_MIN_BYTES and number[leaf] not in found:
            found[number[leaf]] = k
    return found


def to_host(value):
    """A NumPy array for a backend's output (CUDA outputs are CuPy arrays on the device)."""
    return value if isinstance(value, np.ndarray) else value.get() if hasattr(value, "get") \
        else np.asarray(value)


def run_program(compiled: CompiledProgram, leaves: list):
    """Run on the argument leaves; write back mutated arguments; rebuild the result."""
    program = compiled.program
    inputs = [leaves[i] for i in program.param_leaves]
    if compiled.donated:
        inputs = protect_aliases(inputs, compiled.donated)
    if recording_stages():
        with stage("run"):
            outputs = compiled.compilation.executable.run(inputs)
    else:           # (entering the context manager cost ~1 us of a small program's call)
        outputs = compiled.compilation.executable.run(inputs)
    if program.checks:
        program.run_checks(outputs)         # NumPy's IndexError/ValueError, before any write
    for leaf_index, k in program.writebacks:
        if outputs[k] is not leaves[leaf_index]:        # (else written in place: donation)
            np.copyto(leaves[leaf_index], to_host(outputs[k]))
    result = []
    for kind, value in program.out_slots:
        if kind == "out":
            k, value = value, outputs[value]
            value = value[()] if value.ndim == 0 else value   # NumPy gives scalars for 0-d results
            if k in program.python_ints:
                value = int(value)
        elif kind == "selection":           # x[mask]: its length depends on the data
            value = to_host(outputs[value])[to_host(outputs[value + 1])]
        elif kind == "view":                # x[1:]: NumPy's view of the caller's array
            leaf_index, keys = value
            value = leaves[leaf_index]
            for key in keys:
                value = value[key]
        elif isinstance(value, np.ndarray):  # ("static": made while tracing, from no traced value)
            value = value.copy()            # a new array per call, as NumPy makes: a caller's
            #                                 write into one result must not show in the next
        result.append(value)
    return tree_unflatten(program.out_treedef, result)


def _fast_runner(compiled: CompiledProgram, n_leaves: int, where: list[int] | None = None) -> Callable | None:
    """``run_program`` specialized for calls whose leaves (arguments, then captured values)
    are all arrays; None when the program writes into them (those calls take the general
    path: aliasing between arguments matters there).  ``where`` maps each flat leaf to its
    place among the ``n_leaves`` values the runner is given, where a captured container of
    constants (several static leaves, none of them a parameter) comes whole."""
    program = compiled.program
    if program.writebacks:
        # (the caller checks that the call's arrays are distinct objects, as they were when it
        # was traced: a program writing into ``A`` and reading ``B`` is wrong for ``f(A, A)``)
        if where is not None:
            return lambda args: run_program(compiled, [args[k] for k in where])
        return lambda args: run_program(compiled, list(args))
    run = compiled.compilation.executable.run
    if program.out_treedef.kind == "leaf" and len(program.out_slots) == 1 and program.out_slots[0][0] == "out" \
            and program.checks and not program.python_ints:
        # One result and run-time checks (``np.linalg.cholesky``'s info): the outputs, the
        # checks (NumPy's error), the result -- without ``run_program``'s general steps.
        pick, run_checks = program.out_slots[0][1], program.run_checks
        params = _places(program.param_leaves, where)

        def checked(leaves):
            outputs = run([leaves[i] for i in params])
            run_checks(outputs)
            value = outputs[pick]
            return value[()] if value.ndim == 0 else value      # NumPy gives scalars for 0-d results
        return checked
    if program.out_treedef.kind == "leaf" and program.out_slots == [("out", 0)] and not program.checks \
            and not program.python_ints:
        single = compiled.compilation.executable.run_single    # (0-d: a NumPy scalar)
        if single is None:
            def single(args):
                value = run(args)[0]
                return value[()] if value.ndim == 0 else value  # NumPy gives scalars for 0-d results
        params = _places(program.param_leaves, where)
        if params == list(range(n_leaves)):
            return single
        return lambda leaves: single([leaves[i] for i in params])    # (captured constants)
    treedef = program.out_treedef
    if treedef.kind == "tuple" and all(c.kind == "leaf" for c in treedef.children) and not program.checks \
            and all(kind == "out" for kind, _ in program.out_slots) and not program.python_ints:
        # A flat tuple of results (``return a, b``): picked straight from the outputs, unless
        # one is 0-d (NumPy gives a scalar there: the general path).
        picks = [k for _, k in program.out_slots]
        root = compiled.compilation.optimized.entry.root.shape
        ranks = [leaf.rank for leaf in (root.leaves() if root.is_tuple else [root])]
        params = _places(program.param_leaves, where)
        if all(ranks[k] for k in picks):
            as_tuple = compiled.compilation.executable.run_tuple
            if as_tuple is not None and params == list(range(n_leaves)) and picks == list(range(len(ranks))):
                return as_tuple                 # (the outputs in order, from the arguments)

            def flat(leaves):
                outputs = run([leaves[i] for i in params])
                return tuple([outputs[k] for k in picks])
            return flat
    if where is not None:
        return lambda args: run_program(compiled, [args[k] for k in where])
    return lambda args: run_program(compiled, list(args))


# Python scalars a fast-path key holds by value: they are compile-time constants of the
# program (a new value is a new compilation, as in the full key's ``StaticValue``).
_SCALAR_TYPES = (int, float, bool, complex)


def fast_argument_key(args) -> tuple:
    """The fast path's key part for positional arguments that are arrays or Python scalars:
    arrays by type, shape and dtype; scalars by type and value bits (``0.0`` and ``-0.0`` apart,
    every NaN one key, as ``StaticValue`` compares them).  TypeError for anything else (lists,
    NumPy scalars, objects: the full key decides)."""
    key = []
    for a in args:
        kind = type(a)
        if kind is np.ndarray:
            key.append((kind, a.shape, a.dtype))
        elif kind is float:
            # (by value where equal values have equal bits: not for 0.0 / -0.0 nor NaN)
            key.append((kind, a) if a == a and a != 0.0 else (kind, a.hex()))
        elif kind is int or kind is bool:
            key.append((kind, a))
        elif kind is complex:
            key.append((kind, a.real.hex(), a.imag.hex()))
        else:
            raise TypeError("not an array or a Python scalar")
    return tuple(key)


def _leaf_places(values: tuple) -> list[int]:
    """For each leaf of ``tree_flatten(values)``, the index of the value it comes from."""
    where = []
    for k, v in enumerate(values):
        where += [k] * (len(tree_flatten(v)[0]) if isinstance(v, (list, tuple, dict)) else 1)
    return where


def _places(leaf_indices: list[int], where: list[int] | None) -> list[int]:
    return leaf_indices if where is None else [where[i] for i in leaf_indices]


def array_tree_key(args) -> tuple | None:
    """Shapes and dtypes of arguments that are NumPy arrays or lists/tuples of them (the
    container types spell the structure); None if any leaf is something else."""
    key = []
    for a in args:
        kind = type(a)
        if kind is np.ndarray:
            key.append((a.shape, a.dtype))
        elif kind is list or kind is tuple:
            inner = array_tree_key(a)
            if inner is None:
                return None
            key.append((kind, inner))
        else:
            return None
    return tuple(key)


def _array_leaves(args, out: list) -> list:
    """The arrays of an argument tree ``array_tree_key`` accepted, in ``tree_flatten``'s order."""
    for a in args:
        if type(a) is np.ndarray:
            out.append(a)
        else:
            _array_leaves(a, out)
    return out


def _paths(name: str, tree) -> list[str]:
    return tree_paths(name, tree)           # (objects holding arrays too: ``self.w``)


class CompiledFunction:
    """A function compiled per input signature; see ``jit``."""

    def __init__(self, fn: Callable, device: str = "cpu", cache: CompilationCache | None = None,
                 follow_auto_flag: bool = False, verify: bool = False, checkable: bool = True,
                 dynamic=None):
        if not callable(fn):
            raise TypeError(f"nbxla.jit needs a function, not {type(fn).__name__}")
        functools.update_wrapper(self, fn)
        if not isinstance(getattr(self, "__name__", None), str):    # functools.partial, objects
            inner = fn.func if isinstance(fn, functools.partial) else fn
            self.__name__ = getattr(inner, "__name__", None) or type(inner).__name__
        # A bound method (``jit(m.f)``): its object is passed as the first argument on every
        # call, so that the arrays it holds (``self.w``) are read afresh, not baked in.
        self._bound = ()
        if isinstance(fn, types.MethodType) and not isinstance(fn.__self__, type):
            self._bound, fn = (fn.__self__,), fn.__func__
        self.fn = fn
        self.device = device
        # Which dimensions are unknown (one compilation for every size): dynamic_dims.py.
        self._dims = DimensionPolicy(dynamic)
        # Check the first call of each compiled signature against the plain function (also
        # with NBXLA_FLAGS=--verify): call_check.py.  Not ``checkable``: a function that only
        # runs traced (a gradient: NumPy has no oracle for it).
        self.verify, self.checkable = verify, checkable
        self.cache = cache or DEFAULT_CACHE
        self.last_compilation: Compilation | None = None
        # (flags, arg types/shapes/dtypes, captured values) -> (cache entry, generation, runner):
        # a bounded LRU, emptied with the cache (cache.clear(), evictions).
        self._fast = self.cache.shortcut_table()
        # Globals and closure cells the function reads, read afresh on every call.
        self._captures = CapturePlan(fn) if isinstance(fn, types.FunctionType) else None
        # Set once tracing needed a captured array's values (a constant mask): captured arrays
        # are then compile-time constants keyed by their contents (see captures.BakedArray).
        self._bake_captures = False
        # (captured list, its fast-path key part): while the plan hands out the same list (no
        # captured value changed, none is mutable), its tokens are the same -- a few us a call.
        self._token_memo = None
        # Made without an explicit mode: NBXLA_FLAGS=--auto_jit switches it to auto-clustering.
        self.follow_auto_flag = follow_auto_flag
        self._auto = None
        try:
            self._signature = inspect.signature(fn)
        except (TypeError, ValueError):
            self._signature = None
        # Parameter names in order, with their defaults, where every parameter may be passed
        # by position: keyword calls (``f(**args)``, as benchmark suites call kernels) are
        # then made positional and take the fast path below.
        self._positional = positional_parameters(self._signature)

    def _read_captures(self) -> list:
        if self._captures is None:
            return []
        captured = self._captures.read()
        return bake(captured) if self._bake_captures else captured

    def leaf_names(self, args, kwargs) -> list[str]:
        names = []
        params = list(self._signature.parameters) if self._signature else []
        for i, a in enumerate(args):
            names += _paths(params[i] if i < len(params) and
                            self._signature.parameters[params[i]].kind.name.startswith("POSITIONAL")
                            else f"args[{i}]", a)
        for k, v in kwargs.items():
            names += _paths(k, v)
        return names

    def _lookup(self, args, kwargs, device=None, captured=None):
        flags = current_flags()
        device = resolve_device(device or self.device)
        if captured is None:
            captured = self._read_captures()
        if captured:                # ((args, kwargs), {label: value}): see _traceable
            leaves, treedef = tree_flatten(((args, kwargs), dict(captured)))
        else:
            leaves, treedef = tree_flatten((args, kwargs))

        def names():
            return self.leaf_names(args, kwargs) + [p for label, v in captured for p in _paths(label, v)]
        try:
            signature = tuple(leaf_signature(leaf) for leaf in leaves)
        except UnsupportedInputError:       # again, to name the argument (not paid per call)
            signature = tuple(leaf_signature(leaf, name) for leaf, name in zip(leaves, names()))
        # (--verify changes no compiled code: not part of the key)
        key = CacheKey(self, device, replace(flags, verify=False) if flags.verify else flags,
                       signature, treedef, alias_pattern(leaves))

        note = ""
        if self._dims.enabled and device == "cpu" and not self.cache.contains(key):
            # (unknown dimensions: the CPU backend only, so far)
            found, note = self._symbolic_lookup(key, leaves, signature, names, treedef, device, flags,
                                                captured, len(tree_flatten((args, kwargs))[0]))
            if found is not None:
                return found

        def compile_now():
            with stage("source-checks"):
                check_function_no_random(self.fn)
            start = time.perf_counter()
            with stage("autograph"):
                fn = convert_function(self.fn) if not captured else self._traceable()
            with stage("trace"):
                program = trace(fn, leaves, treedef, name=_module_name(self.fn), leaf_names=names(),
                                argument_views=True)
            trace_ms = (time.perf_counter() - start) * 1e3
            # (kernels whose leading size 1 may become unknown: indexed as at any size)
            with static_compile_context(leaves if self._dims.enabled and device == "cpu" else []):
                return CompiledProgram(program, compile_module(program.module, device, trace_ms,
                                                               dump_to=flags.dump_to,
                                                               loop_decisions=program.loop_decisions,
                                                               donated=donations(program)))

        entry, hit = self.cache.get_or_compile(key, self, self.__name__, signature, names, device,
                                               compile_now)
        if not hit:
            if note:
                entry.explanation = f"{note} ({entry.explanation})"
                entry.value.compilation.dimensions = note
            entry.value.compilation.explanation = entry.explanation
            if self._dims.enabled and device == "cpu":
                self._dims.remember_static((key[1], key[2], key[4], key[5]), signature, entry.value.compilation)
        self.last_compilation = entry.value.compilation
        return entry.value, leaves, entry, treedef

    def _symbolic_lookup(self, key, leaves, signature, names, treedef, device, flags, captured, arguments):
        """(``_lookup``'s answer from a program with unknown dimensions, or None; and a note for
        the cache table when the call is compiled for its concrete sizes instead: the guard that
        failed, or why its dimensions cannot be symbolic).  See ``dynamic_dims.py``."""
        def compile_for(marks):
            check_function_no_random(self.fn)
            fn = convert_function(self.fn) if not captured else self._traceable()

            def trace_at(arg_leaves, log):
                with stage("trace"):
                    return trace(fn, arg_leaves, treedef, name=_module_name(self.fn), leaf_names=names(),
                                 argument_views=True, size_observations=log)
            return compile_symbolic(trace_at, leaves, marks, device,
                                    earlier=self._dims.earlier((key[1], key[2], key[4], key[5]), signature))

        sym, note = find_or_compile(self._dims, self.cache, (key[1], key[2], key[4], key[5]), signature, names,
                                    arguments, lambda pattern: CacheKey(self, *key[1:3], pattern, *key[4:]),
                                    self, self.__name__, device, compile_for)
        if sym is None:
            return None, note
        program = sym.program
        with stage("runtime-setup"):        # (an instance: a new size's plan and thunks)
            compilation = program.instance(program.values_of(leaves))
        self.last_compilation = compilation
        return (CompiledProgram(program.program, compilation), leaves, sym.entry, treedef), ""

    def _traceable(self) -> Callable:
        """The function traced when it captures values: traced with the tree ``((args, kwargs),
        captured)``, it is called ``f(args, kwargs, **captured)`` and runs ``self.fn`` with the
        captured names rebound to the traced values."""
        def call(args, kwargs, **captured):
            return convert_function(rebuild(self.fn, unbake(captured)))(*args, **kwargs)
        return call

    def __call__(self, *args, **kwargs):
        if self._bound:
            args = self._bound + args
        if kwargs and self._positional is not None:
            args, kwargs = as_positional(self._positional, args, kwargs)
        plan = self._captures
        captured = plan.still_current() if plan is not None and not self._bake_captures else None
        if captured is None:                # (reused: the common case, without a call per layer)
            captured = self._read_captures()
        # Fast path for the common call f(array, array, ...): a cache hit then costs one dict
        # lookup keyed by argument types, shapes and dtypes (and the captured values), and a
        # runner made for the entry.  The flags are keyed by identity: ``current_flags`` hands
        # out one object per NBXLA_FLAGS text and keeps it (hashing the dataclass cost more
        # than the rest of the key).
        flags = current_flags()
        if flags.auto_jit and self.follow_auto_flag:
            return self._auto_function()(*args, **kwargs)
        fast_key = tree = None
        if not kwargs:
            try:
                fast_key = (id(flags), fast_argument_key(args),
                            self._capture_tokens(captured, plan) if captured else ())
            except (AttributeError, TypeError):     # a static argument or a list: the full key
                # decides, unless every leaf is an array (a training step's parameter list)
                tree = array_tree_key(args) if not captured else None
                if tree is not None:
                    fast_key = (id(flags), "tree", tree)
            if fast_key is not None:
                hit = self._fast.get(fast_key)
                cache = self.cache
                if hit is not None and hit[1] == cache.generation:
                    entry, _, runner, self.last_compilation, distinct = hit
                    values = args if not captured else args + tuple([v for _, v in captured])
                    # (a program that writes into its arguments was traced with distinct arrays:
                    # an aliased call takes the full key, which tells the aliasing apart)
                    if distinct is None or len({id(values[k]) for k in distinct}) == len(distinct):
                        cache.touch(entry)
                        try:
                            return runner(values)
                        except MemoryError:
                            raise _memory_error(self.__name__, entry.value) from None
                elif hit is not None:           # the cache has evicted since: do not pin it
                    self._fast.clear()
        leaves = tree_flatten((args, kwargs))[0]
        if any(isinstance(leaf, Tracer) or getattr(type(leaf), "nbxla_stand_in", False)
               for leaf in leaves):
            # Called while tracing (%%xla, another jit), or from an auto-clustered run with
            # its stand-in arrays: inline, the body joins the caller's graph.
            return self.fn(*args, **kwargs)
        for claims, adapter in ARRAY_ADAPTERS:
            if any(claims(leaf) for leaf in leaves):
                return adapter(self, args, kwargs)
        try:
            compiled, leaves, entry, treedef = self._lookup(args, kwargs, captured=captured)
        except TraceError:
            if self._bake_captures or not has_arrays(captured):
                raise
            # The function needs a captured array's values while tracing: from now on its
            # captured arrays are constants keyed by their contents.
            self._bake_captures = True
            return self(*args, **kwargs)
        if tree is None:
            values = args + tuple([v for _, v in captured])
            where = _leaf_places(values)
            arrays = [leaf for leaf in leaves if is_array_leaf(leaf)]
            # Every array is an argument or a captured value itself (not inside a container).
            plain = len(where) == len(leaves) and \
                all(type(a) is np.ndarray or type(a) in _SCALAR_TYPES for a in args) \
                and all(type(a) is np.ndarray for a in arrays) and \
                all(values[where[i]] is leaf for i, leaf in enumerate(leaves) if is_array_leaf(leaf))
            runner = _fast_runner(compiled, len(values), None if len(where) == len(values) else where) \
                if plain else None
        else:
            runner = None if compiled.program.writebacks else \
                (lambda args, c=compiled: run_program(c, _array_leaves(args, [])))
            arrays, plain = leaves, True
        result = None
        if not compiled.verified and (self.verify or flags.verify) and self.checkable:
            # (before the fast path learns the entry: until checked, calls come here)
            result = self._checked(compiled, leaves, treedef, entry.leaf_names, bool(captured))
            compiled.verified = True
        # (Compiled from distinct arguments, a program that writes none of them is right for
        # any call with the same types, shapes and dtypes, aliased or not.)
        if fast_key is not None and runner is not None and plain \
                and len({id(a) for a in arrays}) == len(arrays):
            # (only plain calls reach here with writebacks: ``values`` is theirs)
            distinct = tuple([k for k, v in enumerate(values) if type(v) is np.ndarray]) \
                if compiled.program.writebacks else None
            self._fast[fast_key] = (entry, self.cache.generation, runner, entry.value.compilation,
                                    distinct)
            if len(self._fast) > FAST_PATH_ENTRIES:
                self._fast.popitem(last=False)
        if result is not None:              # (checked: it ran)
            return result[0]
        try:
            return run_program(compiled, leaves)
        except MemoryError:
            raise _memory_error(self.__name__, compiled) from None

    def _checked(self, compiled: CompiledProgram, leaves: list, treedef, names: list[str],
                 captures: bool) -> tuple:
        """(the result,) of a call run compiled and checked against the plain function on
        copies (call_check.py); captured values are passed to that as the trace passes them."""
        def plain(tree):
            if not captures:
                args, kwargs = tree
                return self.fn(*args, **kwargs)
            (args, kwargs), captured = tree
            return rebuild(self.fn, unbake(captured))(*args, **kwargs)

        def run(leaves):
            try:
                return run_program(compiled, leaves)
            except MemoryError:
                raise _memory_error(self.__name__, compiled) from None
        return (checked_call(self.__name__, run, plain, leaves, treedef, names),)

    def _capture_tokens(self, captured: list, plan) -> tuple:
        memo = self._token_memo
        if memo is not None and memo[0] is captured:
            return memo[1]
        tokens = tuple([_capture_token(v) for _, v in captured])
        if plan is not None and captured is plan.last:
            self._token_memo = (captured, tokens)
        return tokens

    _nbxla_wraps = True             # (captures.py follows what a jit function calls into .fn)

    def _auto_function(self):
        if self._auto is None:
            self._auto = _mode("auto")(self.fn, self.device, self.cache)
        return self._auto

    @property
    def last_report(self):
        """The clustering report of the last auto-clustered call (NBXLA_FLAGS=--auto_jit)."""
        return self._auto.last_report if self._auto is not None else None

    def get_compiler_ir(self, *args, device: str | None = None, **kwargs) -> Callable[..., str]:
        """Like TensorFlow's ``experimental_get_compiler_ir``: ``f.get_compiler_ir(x)(stage='hlo')``."""
        compiled = self._lookup(self._bound + args, kwargs, device)[0]
        return lambda stage="hlo": compiled.compilation.stage(stage)

    def compiled_inputs(self, *args, **kwargs) -> tuple[Compilation, list]:
        """(the compilation for these arguments, the inputs its executable runs on): what
        ``nbxla.profile`` times.  Compiles on a cache miss; runs nothing."""
        compiled, leaves, _, _ = self._lookup(self._bound + args, kwargs)
        return compiled.compilation, [leaves[i] for i in compiled.program.param_leaves]

    def __get__(self, obj, objtype=None):       # methods: bind like a function would
        return self if obj is None else functools.partial(self, obj)

    def __repr__(self) -> str:
        return f"<nbxla.jit {self.__name__} device={self.device}>"


# Shapes remembered per function by the fast path (each pins a compiled program).
FAST_PATH_ENTRIES = 64


def _capture_token(value):
    """A captured value's part of the fast-path key: arrays by type, shape and dtype (they are
    passed), anything else by value (a constant of the program); a list or dict of constants
    (a table of coefficients) by its contents, frozen."""
    if type(value) is np.ndarray:
        return (np.ndarray, value.shape, value.dtype)
    if is_array_leaf(value):
        raise TypeError("not a plain array")          # (scalars, subclasses: the full key)
    if isinstance(value, (list, dict)) or (isinstance(value, tuple) and not hasattr(value, "_fields")):
        return StaticValue(_frozen(value))
    return StaticValue(value)


def _frozen(value):
    """A hashable copy of a tree of constants; TypeError where it holds an array (those calls
    take the full key)."""
    if isinstance(value, dict):
        return (dict, tuple([(k, _frozen(v)) for k, v in value.items()]))
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return (type(value), tuple([_frozen(v) for v in value]))
    if is_array_leaf(value):
        raise TypeError("an array inside a captured container")
    return value


def _memory_error(name: str, compiled: CompiledProgram) -> ResourceError:
    """A failed allocation, told in the user's terms: the largest array the program makes,
    its shape and the line that makes it (not the runtime buffer that failed)."""
    arrays = [i for i in compiled.program.module.entry.instructions if not i.shape.is_tuple]
    biggest = max(arrays, key=lambda i: i.shape.size * _itemsize(i.shape), default=None)
    what = ""
    if biggest is not None:
        gib = biggest.shape.size * _itemsize(biggest.shape) / 2 ** 30
        where = f" at {biggest.location}" if biggest.location is not None else ""
        what = (f": its largest array is {biggest.shape.to_text(with_layout=False)} "
                f"({gib:.3g} GiB), made by {biggest.opcode}{where}")
    return ResourceError(f"not enough memory to run {name}{what}; use smaller inputs or compute "
                         "it in pieces")


def _itemsize(shape) -> int:
    try:
        return np.dtype(shape.dtype).itemsize
    except Exception:
        return 2                                        # bf16


def _module_name(fn) -> str:
    name = getattr(fn, "__name__", "fn")
    return name if name.isidentifier() else "lambda_fn"


def jit(fn: Callable | None = None, *, device: str = "cpu", cache: CompilationCache | None = None,
        mode: str | None = None, verify: bool = False, dynamic=None):
    """Compile ``fn``; usable as ``@jit``, ``@jit(device='cuda')`` or ``jit(fn, device=...)``.

    ``mode="compile"`` compiles the whole function or refuses it (like ``jit_compile=True``);
    ``mode="auto"`` runs it with auto-clustering (``nbxla.cluster``): it always runs, the parts
    that can be compiled are, the rest runs eagerly.  Without ``mode``, ``compile`` unless
    ``NBXLA_FLAGS`` has ``--auto_jit``.

    ``verify=True`` (or ``NBXLA_FLAGS=--verify``): the first call of each compiled signature
    also runs ``fn`` with NumPy on copies of the arguments and raises ``VerificationError``
    where results or written arguments differ; later calls cost nothing more.  (Auto mode
    always checks what it compiles, and runs what differs with NumPy.)

    ``dynamic``: which dimensions are unknown, compiled once for every size (``dynamic_dims.py``):
    ``None`` (default) makes a dimension symbolic when a second size is seen in it, ``True``
    every dimension of every array argument from the first call, ``False`` none (a compilation
    per shape), ``{"x": (0,)}`` the named ones.  Sizes 0 and 1 are always specialised.
    """
    make = _mode(mode) if mode not in (None, "compile") else None
    if fn is None:
        return lambda f: jit(f, device=device, cache=cache, mode=mode, verify=verify, dynamic=dynamic)
    if make is not None:
        return make(fn, device, cache)
    return CompiledFunction(fn, device, cache, follow_auto_flag=mode is None, verify=verify, dynamic=dynamic)


__all__ = ["jit", "CompiledFunction", "register_array_adapter", "register_mode"]
