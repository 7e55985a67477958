"""``nbxla.jit``: compile a NumPy function, like ``tf.function(jit_compile=True)``.

    @nbxla.jit
    def f(x, y):
        return np.mean(3 * x**2 + y)

Array arguments (and NumPy scalars) become parameters; every other argument is a
compile-time constant, so a new value means a new compilation.  Writes into argument arrays
are copied back into the caller's arrays after the run, as NumPy would have made them.
"""

from __future__ import annotations

import functools
import inspect
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .compiler import Compilation, compile_module
from .frontend.cell_ast import check_function_no_random
from .flags import current_flags
from .frontend.trace import (TracedProgram, alias_pattern, leaf_signature, trace, tree_flatten,
                             tree_unflatten)
from .frontend.tracer import Tracer
from .runtime.cache import DEFAULT_CACHE, CacheKey, CompilationCache
from .runtime.executable import resolve_device


@dataclass
class CompiledProgram:
    program: TracedProgram
    compilation: Compilation


def to_host(value):
    """A NumPy array for a backend's output (CUDA outputs are CuPy arrays on the device)."""
    return value if isinstance(value, np.ndarray) else value.get() if hasattr(value, "get") \
        else np.asarray(value)


def run_program(compiled: CompiledProgram, leaves: list):
    """Run on the argument leaves; write back mutated arguments; rebuild the result."""
    program = compiled.program
    inputs = [leaves[i] for i in program.param_leaves]
    outputs = compiled.compilation.executable.run(inputs)
    for leaf_index, k in program.writebacks:
        np.copyto(leaves[leaf_index], to_host(outputs[k]))
    result = []
    for kind, value in program.out_slots:
        if kind == "out":
            value = outputs[value]
            value = value[()] if value.ndim == 0 else value   # NumPy gives scalars for 0-d results
        result.append(value)
    return tree_unflatten(program.out_treedef, result)


def _fast_runner(compiled: CompiledProgram, n_args: int) -> Callable | None:
    """``run_program`` specialized for calls whose arguments are all arrays; None when the
    program writes into its arguments (those calls take the general path: aliasing between
    arguments matters there)."""
    program = compiled.program
    if program.writebacks:
        return None
    run = compiled.compilation.executable.run
    if program.param_leaves == list(range(n_args)) and program.out_treedef.kind == "leaf" \
            and program.out_slots == [("out", 0)]:
        if compiled.compilation.executable.run_single is not None:
            return compiled.compilation.executable.run_single        # (0-d: a NumPy scalar)

        def single_result(args):
            value = run(args)[0]
            return value[()] if value.ndim == 0 else value  # NumPy gives scalars for 0-d results
        return single_result
    return lambda args: run_program(compiled, list(args))


def _paths(name: str, tree) -> list[str]:
    if isinstance(tree, (tuple, list)) and not hasattr(tree, "_fields"):
        return [p for i, item in enumerate(tree) for p in _paths(f"{name}[{i}]", item)]
    if isinstance(tree, dict):
        return [p for k, item in tree.items() for p in _paths(f"{name}[{k!r}]", item)]
    return [name]


class CompiledFunction:
    """A function compiled per input signature; see ``jit``."""

    def __init__(self, fn: Callable, device: str = "cpu", cache: CompilationCache | None = None,
                 follow_auto_flag: bool = False):
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.device = device
        self.cache = cache or DEFAULT_CACHE
        self.last_compilation: Compilation | None = None
        # Made without an explicit mode: NBXLA_FLAGS=--auto_jit switches it to auto-clustering.
        self.follow_auto_flag = follow_auto_flag
        self._auto = None
        self._fast: dict = {}       # (flags, arg shapes and dtypes) -> (cache entry, cache generation)
        try:
            self._signature = inspect.signature(fn)
        except (TypeError, ValueError):
            self._signature = None

    def _leaf_names(self, args, kwargs) -> list[str]:
        names = []
        params = list(self._signature.parameters) if self._signature else []
        for i, a in enumerate(args):
            names += _paths(params[i] if i < len(params) and
                            self._signature.parameters[params[i]].kind.name.startswith("POSITIONAL")
                            else f"args[{i}]", a)
        for k, v in kwargs.items():
            names += _paths(k, v)
        return names

    def _lookup(self, args, kwargs, device=None):
        flags = current_flags()
        device = resolve_device(device or self.device)
        leaves, treedef = tree_flatten((args, kwargs))
        signature = tuple(leaf_signature(leaf) for leaf in leaves)
        key = CacheKey(self, device, flags, signature, treedef, alias_pattern(leaves))

        def compile_now():
            check_function_no_random(self.fn)
            start = time.perf_counter()
            program = trace(self.fn, leaves, treedef, name=_module_name(self.fn),
                            leaf_names=self._leaf_names(args, kwargs))
            trace_ms = (time.perf_counter() - start) * 1e3
            return CompiledProgram(program, compile_module(program.module, device, trace_ms,
                                                           dump_to=flags.dump_to))

        entry, hit = self.cache.get_or_compile(key, self, self.__name__, signature,
                                               lambda: self._leaf_names(args, kwargs), device,
                                               compile_now)
        if not hit:
            entry.value.compilation.explanation = entry.explanation
        self.last_compilation = entry.value.compilation
        return entry.value, leaves, entry

    def __call__(self, *args, **kwargs):
        # Fast path for the common call f(array, array, ...): a cache hit then costs one dict
        # lookup keyed by argument types, shapes and dtypes, and a runner made for the entry.
        fast_key = None
        flags = current_flags()
        if flags.auto_jit and self.follow_auto_flag:
            return self._auto_function()(*args, **kwargs)
        if not kwargs:
            try:
                fast_key = (flags, tuple([(type(a), a.shape, a.dtype) for a in args]))
            except AttributeError:          # a static argument: the full key decides
                pass
            else:
                hit = self._fast.get(fast_key)
                if hit is not None and hit[1] == self.cache.generation:
                    entry, _, runner = hit
                    self.cache.touch(entry)
                    self.last_compilation = entry.value.compilation
                    return runner(args)
                if hit is not None:             # the cache has evicted since: do not pin it
                    self._fast.clear()
        leaves = tree_flatten((args, kwargs))[0]
        if any(isinstance(leaf, Tracer) or getattr(type(leaf), "nbxla_stand_in", False)
               for leaf in leaves):
            # Called while tracing (%%xla, another jit), or from an auto-clustered run with
            # its stand-in arrays: inline, the body joins the caller's graph.
            return self.fn(*args, **kwargs)
        compiled, leaves, entry = self._lookup(args, kwargs)
        runner = _fast_runner(compiled, len(args))
        # (Compiled from distinct arguments, a program that writes none of them is right for
        # any call with the same types, shapes and dtypes, aliased or not.)
        if fast_key is not None and runner is not None and all(type(a) is np.ndarray for a in args) \
                and len({id(a) for a in args}) == len(args):
            self._fast[fast_key] = (entry, self.cache.generation, runner)
        return run_program(compiled, leaves)

    def _auto_function(self):
        if self._auto is None:
            from .cluster import AutoFunction        # the auto-clustering layer, above this one
            self._auto = AutoFunction(self.fn, self.device, self.cache)
        return self._auto

    @property
    def last_report(self):
        """The clustering report of the last auto-clustered call (NBXLA_FLAGS=--auto_jit)."""
        return self._auto.last_report if self._auto is not None else None

    def get_compiler_ir(self, *args, device: str | None = None, **kwargs) -> Callable[..., str]:
        """Like TensorFlow's ``experimental_get_compiler_ir``: ``f.get_compiler_ir(x)(stage='hlo')``."""
        compiled, _, _ = self._lookup(args, kwargs, device)
        return lambda stage="hlo": compiled.compilation.stage(stage)

    def __get__(self, obj, objtype=None):       # methods: bind like a function would
        return self if obj is None else functools.partial(self, obj)

    def __repr__(self) -> str:
        return f"<nbxla.jit {self.__name__} device={self.device}>"


def _module_name(fn) -> str:
    name = getattr(fn, "__name__", "fn")
    return name if name.isidentifier() else "lambda_fn"


def jit(fn: Callable | None = None, *, device: str = "cpu", cache: CompilationCache | None = None,
        mode: str | None = None):
    """Compile ``fn``; usable as ``@jit``, ``@jit(device='cuda')`` or ``jit(fn, device=...)``.

    ``mode="compile"`` compiles the whole function or refuses it (like ``jit_compile=True``);
    ``mode="auto"`` runs it with auto-clustering (``nbxla.cluster``): it always runs, the parts
    that can be compiled are, the rest runs eagerly.  Without ``mode``, ``compile`` unless
    ``NBXLA_FLAGS`` has ``--auto_jit``.
    """
    if mode not in (None, "compile", "auto"):
        raise ValueError(f"nbxla.jit: mode must be 'compile' or 'auto', not {mode!r}")
    if fn is None:
        return lambda f: jit(f, device=device, cache=cache, mode=mode)
    if mode == "auto":
        from .cluster import AutoFunction            # the auto-clustering layer, above this one
        return AutoFunction(fn, device, cache)
    return CompiledFunction(fn, device, cache, follow_auto_flag=mode is None)


__all__ = ["jit", "CompiledFunction"]
