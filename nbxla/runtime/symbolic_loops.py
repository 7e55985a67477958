"""Native loops over unknown sizes: the ``while``s of a jit program compiled for every size.

A static program's loops run as C compiled for their sizes (``native_loops``); a program with
unknown dimensions (``symbolic_compile``) cannot bake its sizes into C.  Here each ``while`` of
its entry is compiled once by the ahead-of-time driver for unknown sizes
(``codegen/aot_symbolic``): every buffer size, kernel range and dot shape is an expression of
the size vector the function takes, so one library serves every size; an instance (one size)
only binds that vector.  Why: a host-driven loop pays a Python dispatch per kernel per
iteration, 10x a small loop's native time -- without this, a loop program's second size would
trade its native loop for a symbolic program that is slower at every size.

A loop whose dot is large at a given size (``native_loops.LARGE_DOT``) stays host-driven at that
size (NumPy's BLAS), with the reason recorded, as for static programs.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
import tempfile

import numpy as np

from ..codegen.aot import compile_symbolic_loops
from ..codegen.cpu import target_fingerprint
from ..hlo.printer import PrintOptions, print_module
from ..hlo import TupleShape
from ..hlo.aliasing import passed_through
from ..hlo.ir import Computation, Instruction, Module
from ..errors import NbxlaError, UnsupportedError
from ..hlo.symbolic import second_probe, symbols_of_module
from . import host_memory
from .blas_threads import gesv_addresses
from .cpu_control import flatten_leaves
from .cpu_kernels import PARALLEL_THRESHOLD, data_pointer
from .native_loops import (check_loop_code, host_loop_reason, load_library, native_loops_enabled, rebuild_state,
                           support_object)
from .persistent_cache import default_cache


class SymbolicLoops:
    """The loops of one symbolic program, compiled into one library (``build``)."""

    def __init__(self, library, symbols: list[str], names: dict[str, str]):
        self.library, self.symbols = library, symbols
        self.functions = {}
        for loop, symbol in names.items():
            fn = getattr(library, symbol)
            fn.restype = ctypes.c_int
            fn.argtypes = [ctypes.c_void_p] * 3
            self.functions[loop] = fn

    def thunks(self, entry: Computation, values: dict[str, int]) -> tuple[dict, dict]:
        """For the ``while``s of an instance's (bound) entry at sizes ``values``: the thunks by
        instruction name, and why the others stay host-driven."""
        sizes = np.array([values[n] for n in self.symbols], np.int64)
        found, why = {}, {}
        for instr in entry.instructions:
            fn = self.functions.get(instr.name)
            if instr.opcode != "while" or fn is None:
                continue
            reason = host_loop_reason(instr)
            if reason:
                why[instr.name] = reason
            else:
                found[instr.name] = SymbolicLoopThunk(self, fn, instr, sizes)
        return found, why


class SymbolicLoopThunk:
    """Runs one ``while`` through the symbolic library at one size: fresh results per call.
    (``fixed``, ``arg_types`` and ``entry_runner``: as ``NativeLoopThunk``, for the runtime's
    single-call path.)"""

    def __init__(self, owner: SymbolicLoops, fn, instr: Instruction, sizes: np.ndarray):
        self.owner, self.fn, self.sizes = owner, fn, sizes          # (the library kept alive)
        leaves = instr.shape.leaves() if instr.shape.is_tuple else [instr.shape]
        flat = instr.shape.is_tuple and not any(e.is_tuple for e in instr.shape.elements)
        self.fixed = passed_through(instr.attrs["body"]) if flat else frozenset()
        self.results = [(s.dims, s.dtype) for k, s in enumerate(leaves) if k not in self.fixed]
        self.arg_types = [s.dtype for s in leaves]
        self.tuple_shape = instr.shape
        self.in_array = ctypes.c_void_p * max(1, len(leaves))
        self.sizes_pointer = sizes.ctypes.data
        self.flat_state = flat
        # (as ``NativeLoopThunk.flat``: a runner on the state's leaves, which a straight-line
        # entry calls -- None where the state nests tuples)
        self.flat = (lambda *leaves: self((leaves,))) if flat else None
        self.makers = [host_memory.allocator(dims, dtype) for dims, dtype in self.results]
        changed = iter(range(len(self.results)))
        self.picks = [(True, k) if k in self.fixed else (False, next(changed)) for k in range(len(leaves))]

    def entry_runner(self, sources: list, index: int, general) -> callable:
        """``run_single(inputs)`` for an entry that is only this loop (as
        ``NativeLoopThunk.entry_runner``): ``sources`` per state leaf (a parameter number, or a
        constant array), ``index`` the leaf returned.  Why: the general run (a tuple, the
        leaves flattened and rebuilt) was twice a small loop's own time."""
        fn, sizes, pointers = self.fn, self.sizes.ctypes.data, self.in_array
        makers = [host_memory.allocator(dims, dtype) for dims, dtype in self.results]
        index = [k for k in range(len(self.arg_types)) if k not in self.fixed].index(index)
        scalar = not self.results[index][0]
        keep = [s for s in sources if not isinstance(s, int)]     # (constants' memory)
        plan = [(s, t) if isinstance(s, int) else (None, data_pointer(s)) for s, t in zip(sources, self.arg_types)]

        def run_single(inputs):
            ptrs = []
            for number, fixed in plan:
                if number is None:
                    ptrs.append(fixed)
                    continue
                a = inputs[number]
                if type(a) is not np.ndarray or a.dtype != fixed or not a.flags.c_contiguous:
                    value = general(inputs)[0]
                    return value[()] if scalar else value
                ptrs.append(data_pointer(a))
            outs = [make() for make in makers]
            check_loop_code(fn(sizes, pointers(*ptrs), pointers(*[data_pointer(o) for o in outs])))
            out = outs[index]
            return out[()] if scalar else out
        run_single.constants = keep
        return run_single

    def __call__(self, operands):
        state = operands[0]
        if self.flat_state and type(state) is tuple:
            # (the common case, a flat state of exact C-contiguous arrays, as a straight-line
            # entry's values are: no flattening, conversions or rebuilding)
            for a, t in zip(state, self.arg_types):
                if type(a) is not np.ndarray or a.dtype != t or not a.flags.c_contiguous:
                    break
            else:
                outs = [make() for make in self.makers]
                check_loop_code(self.fn(self.sizes_pointer, self.in_array(*[data_pointer(a) for a in state]),
                                        self.in_array(*[data_pointer(o) for o in outs])))
                return tuple([state[k] if fixed else outs[k] for fixed, k in self.picks])
        args = []
        for a, t in zip(flatten_leaves(operands[0]), self.arg_types):
            if type(a) is not np.ndarray or a.dtype != t or not a.flags.c_contiguous:
                a = np.ascontiguousarray(a, dtype=t).reshape(np.shape(a))
            args.append(a)
        results = [host_memory.empty(dims, dtype) for dims, dtype in self.results]
        ins = self.in_array(*[data_pointer(a) for a in args])
        outs = self.in_array(*[data_pointer(r) for r in results])
        check_loop_code(self.fn(self.sizes.ctypes.data, ins, outs))
        changed = iter(results)
        leaves = [args[k] if k in self.fixed else next(changed) for k in range(len(args))]
        return rebuild_state(self.tuple_shape, iter(leaves))


# The sizes the library's kernels are emitted at, one per symbol (the program serves every size)
PROBE_SIZES = (17, 19, 23, 29, 31, 37, 41, 43, 47, 53)


def build(module: Module) -> SymbolicLoops:
    """The library of the entry ``while``s of the symbolic optimized ``module``.  Raises what
    the driver or the C compiler raise (the caller keeps the loops host-driven, with the
    reason)."""
    loops, names = {}, {}
    for k, instr in enumerate(i for i in module.entry.instructions if i.opcode == "while"):
        param = Instruction("parameter", instr.operands[0].shape, attrs={"parameter_number": 0}, name="state")
        loop = Instruction("while", instr.shape, [param], dict(instr.attrs), name=instr.name)
        fixed = passed_through(instr.attrs["body"])
        if fixed and not any(e.is_tuple for e in instr.shape.elements):
            # (results: only what the loop changes; the thunk hands back the rest, as
            # ``native_loops`` does: the loop reads those leaves where they are, no copy)
            changed = [Instruction("get-tuple-element", e, [loop], {"index": j}, name=f"{instr.name}.{j}")
                       for j, e in enumerate(instr.shape.elements) if j not in fixed]
            root = Instruction("tuple", TupleShape(tuple(c.shape for c in changed)), changed,
                               name=f"{instr.name}.out")
            loops[f"symloop{k}"] = Computation(f"{instr.name}.native", [param, loop, *changed, root], root)
        else:
            loops[f"symloop{k}"] = Computation(f"{instr.name}.native", [param, loop], loop)
        names[instr.name] = f"symloop{k}"
    symbols = symbols_of_module(module)
    if len(symbols) > len(PROBE_SIZES):
        raise NbxlaError(f"{len(symbols)} unknown sizes")
    first = dict(zip(symbols, PROBE_SIZES))
    sizes = (first, {n: second_probe(h) for n, h in first.items()})
    store = default_cache()
    # (kept in the persistent cache, as static native loops are: the C compiler's run is most
    # of such a program's compile time)
    key = hashlib.sha256(f"symbolic-loops,{target_fingerprint()},{gesv_addresses() is not None},{symbols},"
                         f"{print_module(module, PrintOptions(large_constants='digest'))}".encode()).hexdigest()
    cached = store.load(key) if store is not None else None
    if cached is not None:
        return SymbolicLoops(load_library("library", cached[1]), sorted(symbols), names)
    with tempfile.TemporaryDirectory(prefix="nbxla-symloop-") as tmp:
        path = os.path.join(tmp, "loops.so")
        order = compile_symbolic_loops(loops, module, sizes, path, parallel_threshold=PARALLEL_THRESHOLD,
                                       runtime_object=lambda wanted: support_object(store, wanted),
                                       host_lapack=gesv_addresses() is not None)
        with open(path, "rb") as f:
            data = f.read()
    if store is not None:
        store.save(key, {"what": "symbolic loops", "loops": len(loops)}, data)
    return SymbolicLoops(load_library("library", data), order, names)


def loops_for(module: Module):
    """``build(module)``, or why its loops run from the host ("" when its entry has none)."""
    if not any(i.opcode == "while" for i in module.entry.instructions):
        return ""
    if not native_loops_enabled():
        return "host-driven: NBXLA_NATIVE_LOOPS=0"
    try:
        return build(module)
    except (NbxlaError, UnsupportedError, OSError, subprocess.SubprocessError, AttributeError) as e:
        return f"host-driven: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
