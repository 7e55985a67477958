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
import os
import tempfile

import numpy as np

from ..codegen.aot import compile_symbolic_loops
from ..hlo.ir import Computation, Instruction, Module
from ..errors import NbxlaError
from ..hlo.symbolic import second_probe, symbols_of_module
from . import host_memory
from .cpu_control import flatten_leaves
from .cpu_kernels import PARALLEL_THRESHOLD, data_pointer
from .native_loops import check_loop_code, host_loop_reason, load_library, rebuild_state, support_object
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
    single-call path, which this thunk does not take.)"""

    def __init__(self, owner: SymbolicLoops, fn, instr: Instruction, sizes: np.ndarray):
        self.owner, self.fn, self.sizes = owner, fn, sizes          # (the library kept alive)
        self.fixed = frozenset()
        leaves = instr.shape.leaves() if instr.shape.is_tuple else [instr.shape]
        self.results = [(s.dims, s.dtype) for s in leaves]
        self.arg_types = [s.dtype for s in leaves]
        self.tuple_shape = instr.shape
        self.in_array = ctypes.c_void_p * max(1, len(leaves))

    def entry_runner(self, sources, index, general):
        return None

    def __call__(self, operands):
        args = []
        for a, t in zip(flatten_leaves(operands[0]), self.arg_types):
            if type(a) is not np.ndarray or a.dtype != t or not a.flags.c_contiguous:
                a = np.ascontiguousarray(a, dtype=t).reshape(np.shape(a))
            args.append(a)
        results = [host_memory.empty(dims, dtype) for dims, dtype in self.results]
        ins = self.in_array(*[data_pointer(a) for a in args])
        outs = self.in_array(*[data_pointer(r) for r in results])
        check_loop_code(self.fn(self.sizes.ctypes.data, ins, outs))
        return rebuild_state(self.tuple_shape, iter(results))


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
        loops[f"symloop{k}"] = Computation(f"{instr.name}.native", [param, loop], loop)
        names[instr.name] = f"symloop{k}"
    symbols = symbols_of_module(module)
    if len(symbols) > len(PROBE_SIZES):
        raise NbxlaError(f"{len(symbols)} unknown sizes")
    first = dict(zip(symbols, PROBE_SIZES))
    sizes = (first, {n: second_probe(h) for n, h in first.items()})
    store = default_cache()
    with tempfile.TemporaryDirectory(prefix="nbxla-symloop-") as tmp:
        path = os.path.join(tmp, "loops.so")
        symbols = compile_symbolic_loops(loops, module, sizes, path, parallel_threshold=PARALLEL_THRESHOLD,
                                         runtime_object=lambda wanted: support_object(store, wanted))
        with open(path, "rb") as f:
            library = load_library("library", f.read())
    return SymbolicLoops(library, symbols, names)
