"""Loops run natively: a ``while`` of the entry compiled, with everything inside it, into one C
function by the ahead-of-time driver (``codegen/aot_driver``), loaded as a shared library.

Why: the host-driven ``while`` of ``cpu_control`` pays a Python dispatch per kernel per
iteration and copies the loop state at every update; a Cholesky or an IIR filter runs
thousands of iterations of a few tiny kernels, where that overhead is the whole run time
(0.02-0.05x NumPy).  The driver calls the kernels directly from C and updates the state in
place (``codegen/updates``), so such loops beat NumPy's interpreted ones by a wide margin.

A loop stays host-driven, with the reason recorded, when the native path does not fit: no C
compiler on the machine, something inside that the driver has no native code for, or a large
``dot`` (NumPy's multithreaded BLAS beats the driver's own GEMM; per-iteration dispatch is then
small beside the work).  The shared library is kept in the persistent cache.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
import tempfile

import numpy as np

from ..codegen.aot import compile_native_loops, compile_runtime_object, runtime_object_key
from ..codegen.aot_loops import llvm_loops_enabled
from ..codegen.cpu import object_engine, target_fingerprint
from ..errors import NbxlaError, UnsupportedError
from ..hlo import TupleShape
from ..hlo.aliasing import passed_through
from ..hlo.evaluator_linalg import MASKED_DOT_TARGET
from ..hlo.ir import Computation, Instruction
from ..passes.buffer_assignment import BufferPlan
from .cpu_control import flatten_leaves, program_computations_of
from . import host_memory
from .blas_threads import gemm_addresses, gesv_addresses
from .cpu_kernels import c_strides, PARALLEL_THRESHOLD, data_pointer
from .fastcall import loop_caller
from .single_call import loop_entry_runner
from .persistent_cache import PersistentCache

# A dot of more multiply-adds than this inside a loop keeps the loop host-driven (NumPy's BLAS).
LARGE_DOT = 1 << 18


def native_loops_enabled() -> bool:
    """``NBXLA_NATIVE_LOOPS=0`` keeps every loop host-driven (to compare, or to debug)."""
    return os.environ.get("NBXLA_NATIVE_LOOPS", "1") != "0"


def check_loop_code(rc: int) -> None:
    """Raise what a native loop's return code says went wrong (0: nothing)."""
    if rc == 2:     # (nbxla_solve: LAPACK's info > 0, as NumPy reports it)
        raise np.linalg.LinAlgError("Singular matrix")
    if rc == 1:
        raise MemoryError("a native loop could not allocate its scratch memory")
    if rc:
        raise RuntimeError(f"a native loop failed (code {rc}): LAPACK was not available or refused "
                           "its arguments")


class NativeLoopThunk:
    """Runs one ``while`` through its compiled C function: fresh result arrays per call."""

    def __init__(self, library: ctypes.CDLL, symbol: str, instr: Instruction):
        """``symbol``: the loop's function in ``library`` (see ``_build``): it returns only the
        state the loop changes; what the body passes on unchanged is the operand itself."""
        self.library = library                      # (kept alive with the function)
        self.fn = getattr(library, symbol)
        self.fn.restype = ctypes.c_int
        self.fixed = passed_through(instr.attrs["body"])
        self.results = [(s.dims, s.dtype) for k, s in enumerate(instr.shape.leaves()) if k not in self.fixed]
        self.arg_types = [s.dtype for s in instr.operands[0].shape.leaves()]
        self.arg_shapes = [s.dims for s in instr.operands[0].shape.leaves()]
        self.fn.argtypes = [ctypes.c_void_p] * (len(self.arg_types) + len(self.results))
        self.tuple_shape = instr.shape
        # The loop called as a built-in function on the arrays themselves (fastcall.py): the
        # ctypes call and a data pointer read per buffer in Python were the driver's ~2 us
        # per call; None where fast calls are not available (ctypes, as below).
        self.call = loop_caller(ctypes.cast(self.fn, ctypes.c_void_p).value,
                                len(self.arg_types) + len(self.results))
        self.flat = self._flat_runner()

    def __call__(self, operands):
        state = operands[0]
        if self.flat is not None and type(state) is tuple:
            for a, t in zip(state, self.arg_types):
                if type(a) is not np.ndarray or a.dtype != t or not a.flags.c_contiguous:
                    break
            else:
                return self.flat(*state)
        # (reshaped: ascontiguousarray makes 0-d arrays 1-d, and fixed leaves are handed back)
        args = []
        for a, t in zip(flatten_leaves(operands[0]), self.arg_types):
            if type(a) is not np.ndarray or a.dtype != t or not a.flags.c_contiguous:
                a = np.ascontiguousarray(a, dtype=t).reshape(a.shape)
            args.append(a)
        results = [host_memory.empty(dims, dtype) for dims, dtype in self.results]
        if self.call is not None:
            rc = self.call(*args, *results)
            if rc is not None:
                check_loop_code(rc)
        else:   # (data_pointer reads the address from the array object: ``ctypes.data`` ~1 us each)
            check_loop_code(self.fn(*[data_pointer(a) for a in args], *[data_pointer(r) for r in results]))
        changed = iter(results)
        leaves = [args[k] if k in self.fixed else next(changed) for k in range(len(args))]
        return rebuild_state(self.tuple_shape, iter(leaves))

    def _flat_runner(self) -> callable | None:
        """``run(*leaves) -> tuple`` for a flat state (no nested tuples) whose leaves are exact
        C-contiguous arrays of the loop's types, as every value of a straight-line entry is
        (``straight_line.py``; ``__call__`` checks them): no flattening, conversions or
        rebuilding, which cost more than the loop itself in a short scalar loop (CRC-16 of 1000
        bytes: ~5 of ~12 us).  None for a nested state."""
        if any(e.is_tuple for e in self.tuple_shape.elements):
            return None
        fn, makers = self.fn, [host_memory.allocator(dims, dtype) for dims, dtype in self.results]
        changed = iter(range(len(self.results)))
        picks = [(True, k) if k in self.fixed else (False, next(changed)) for k in range(len(self.arg_types))]
        call = self.call
        if call is not None:
            def run(*leaves):
                outs = [make() for make in makers]
                rc = call(*leaves, *outs)
                if rc is not None:
                    check_loop_code(rc)
                return tuple([leaves[k] if fixed else outs[k] for fixed, k in picks])
            return run

        def run(*leaves):
            outs = [make() for make in makers]
            check_loop_code(fn(*[data_pointer(a) for a in leaves], *[data_pointer(o) for o in outs]))
            return tuple([leaves[k] if fixed else outs[k] for fixed, k in picks])
        return run

    def entry_runner(self, sources: list, index: int, general) -> callable:
        """``run_single(inputs)`` for an entry that is only this loop: ``sources`` per state
        leaf (a parameter number, or a constant array), ``index`` the state leaf returned.  Called
        straight from the jit fast path: the general run (a tuple, the loop's leaves flattened
        and rebuilt, ``ctypes.data`` per buffer) was 3x the cost of a kernel call."""
        fn = self.fn
        changed = [k for k in range(len(self.arg_types)) if k not in self.fixed]
        several = isinstance(index, tuple)          # (then run(inputs) -> [those results])
        pick = tuple(changed.index(k) for k in index) if several else changed.index(index)
        makers = [host_memory.allocator(dims, dtype) for dims, dtype in self.results]
        scalar = not several and not self.results[pick][0]
        keep = [s for s in sources if not isinstance(s, int)]     # (constants' memory)
        plan = [(s, c_strides(s_shape, t.itemsize)) if isinstance(s, int) else (None, data_pointer(s))
                for s, s_shape, t in zip(sources, self.arg_shapes, self.arg_types)]

        def fallback(inputs):
            if several:
                return general(inputs)
            value = general(inputs)[0]
            return value[()] if scalar else value

        if self.call is not None:
            strides = [fixed if number is not None else None for number, fixed in plan]
            run_single = loop_entry_runner(self.call, sources, strides, makers, pick, scalar,
                                           fallback, check_loop_code)
            run_single.constants = keep
            return run_single

        def run_single(inputs):
            ptrs = []
            for number, fixed in plan:
                if number is None:
                    ptrs.append(fixed)
                    continue
                a = inputs[number]
                if type(a) is not np.ndarray or a.strides != fixed:
                    return fallback(inputs)
                ptrs.append(data_pointer(a))
            outs = [make() for make in makers]
            check_loop_code(fn(*ptrs, *[data_pointer(o) for o in outs]))
            if several:
                return [outs[k] for k in pick]
            out = outs[pick]
            return out[()] if scalar else out
        run_single.constants = keep
        return run_single


def native_entry_runner(entry: Computation, native: dict, general, fill) -> callable | None:
    """The fast runner of an entry that only feeds parameters and constants to one native loop
    and returns one array it computes (see ``NativeLoopThunk.entry_runner``); else None.
    Kernels without operands (``np.zeros_like(x)``: a fill) count as constants: ``fill(instr)``
    computes one once (the loop reads its initial state, never writes it)."""
    found = _loop_entry(entry, native, fill)
    if found is None or entry.root.opcode != "get-tuple-element":
        return None
    thunk, sources, (index,) = found
    return thunk.entry_runner(sources, index, general)


def native_entry_outputs_runner(entry: Computation, native: dict, general, fill) -> callable | None:
    """As ``native_entry_runner``, for an entry returning a tuple of arrays the loop computes
    (a program whose checks ride along, ``counts[values[i]] += 1``: the result and the carried
    index extremes): ``run(inputs) -> [outputs]``, the executable's ``run``; else None."""
    found = _loop_entry(entry, native, fill)
    if found is None or entry.root.opcode != "tuple":
        return None
    thunk, sources, indices = found
    if not isinstance(thunk, NativeLoopThunk):      # (a symbolic loop's runner returns one leaf)
        return None
    return thunk.entry_runner(sources, tuple(indices), general)


def _loop_entry(entry: Computation, native: dict, fill):
    """(the loop's thunk, the sources of its state leaves, the state indices the root returns)
    for an entry whose root is one native loop's changed leaves (a get-tuple-element of it, or
    a tuple of those) and whose other instructions are parameters and constants; else None."""
    root = entry.root
    picks = root.operands if root.opcode == "tuple" else [root]
    if not picks or any(p.opcode != "get-tuple-element" for p in picks):
        return None
    loop = picks[0].operands[0]
    if id(loop) not in native or any(p.operands[0] is not loop for p in picks):
        return None
    state = loop.operands[0]
    thunk = native[id(loop)]
    indices = [p.attrs["index"] for p in picks]
    if state.opcode != "tuple" or any(k in thunk.fixed for k in indices) or \
            any(i not in (root, loop, state, *picks) and i.opcode != "parameter" and i.operands
                for i in entry.instructions):
        return None
    sources = []
    for op, dtype in zip(state.operands, thunk.arg_types):
        if op.shape.is_tuple:
            return None
        if op.opcode == "parameter":
            sources.append(op.parameter_number)
        elif not op.operands:
            value = op.literal if op.opcode == "constant" else fill(op)
            if isinstance(value, (tuple, list)):
                return None
            sources.append(np.ascontiguousarray(np.asarray(value), dtype).reshape(op.shape.dims))
        else:
            return None
    return thunk, sources, indices


def rebuild_state(shape, leaves):
    if shape.is_tuple:
        return tuple(rebuild_state(e, leaves) for e in shape.elements)
    return next(leaves)


def native_loops(loops: list[Instruction], module_text: str, store: PersistentCache | None,
                 plan: BufferPlan | None = None) -> dict:
    """For each ``while`` of the entry (``loops``): a NativeLoopThunk, or the reason it stays
    host-driven.  The loops that fit are compiled into one shared library (one C compiler run),
    their programs following ``plan``'s nested plans (the module's buffer plan) where given."""
    found = {id(i): host_loop_reason(i) for i in loops}
    chosen = [i for i in loops if not found[id(i)]]
    if not chosen:
        return found
    key = None
    try:
        if store is not None:
            names = ",".join(i.name for i in chosen)
            key = hashlib.sha256(f"native-loops,{target_fingerprint()},{names},{gesv_addresses() is not None},"
                                 f"{llvm_loops_enabled()},"
                                 f"{module_text}".encode()).hexdigest()
            cached = store.load(key)
            if cached is not None:
                library = load_library(cached[0].get("kind", "library"), cached[1])
                return {**found, **{id(i): NativeLoopThunk(library, f"loop{k}", i) for k, i in enumerate(chosen)}}
        kind, data = _build(chosen, store, plan)
    except (NbxlaError, UnsupportedError, OSError, subprocess.SubprocessError) as e:
        if len(chosen) > 1:      # find the loops that fail; the others are compiled together
            one_by_one = {id(i): native_loops([i], module_text, None, plan)[id(i)] for i in chosen}
            kept = [i for i in chosen if isinstance(one_by_one[id(i)], NativeLoopThunk)]
            return {**found, **one_by_one, **(native_loops(kept, module_text, store, plan) if kept else {})}
        return {**found, id(chosen[0]): f"host-driven: {str(e).splitlines()[0] if str(e) else type(e).__name__}"}
    if store is not None:
        store.save(key, {"loops": len(chosen), "kind": kind}, data)
    library = load_library(kind, data)
    return {**found, **{id(i): NativeLoopThunk(library, f"loop{k}", i) for k, i in enumerate(chosen)}}


def host_loop_reason(instr: Instruction) -> str:
    for comp in program_computations_of(instr):
        for i in comp.instructions:
            if i.opcode == "custom-call" and i.attrs.get("custom_call_target") == MASKED_DOT_TARGET \
                    and gemm_addresses() is None and i.shape.element_type in ("f32", "f64"):
                flops = int(np.prod(i.shape.dims, dtype=np.int64)) * i.operands[0].shape.dims[-1]
                if flops > LARGE_DOT:
                    return f"host-driven: %{i.name} is a large dot ({flops} multiply-adds) and NumPy's " \
                           "BLAS was not found for the native loop to call"
            if i.opcode == "dot":
                lhs, rhs = i.operands
                flops = int(np.prod(i.shape.dims, dtype=np.int64)) * int(np.prod(
                    [lhs.shape.dims[d] for d in i.attrs.get("lhs_contracting_dims", ())], dtype=np.int64))
                if flops > LARGE_DOT:
                    return f"host-driven: %{i.name} is a large dot ({flops} multiply-adds), NumPy's BLAS runs it"
    return ""


# The support code compiled so far in this process: (the routines in it, the object).
_RUNTIME_OBJECTS: list[tuple[frozenset, bytes]] = []


def support_object(store: PersistentCache | None, names) -> bytes:
    """The driver's support code with (at least) the routines ``names``, compiled once: kept
    per process and in the persistent cache (compiled with each driver, it was half of a native
    loop's compile time).  A new one has every routine this process needed so far, so that the
    next module most likely finds its routines in it (one C compiler run per new routine, not
    per new combination)."""
    needed = frozenset(names)
    for routines, found in _RUNTIME_OBJECTS:
        if needed <= routines:
            return found
    key = runtime_object_key(needed)
    cached = store.load(f"aot-runtime-{key}") if store is not None else None
    if cached is not None:
        _RUNTIME_OBJECTS.append((needed, cached[1]))
        return cached[1]
    routines = needed.union(*(r for r, _ in _RUNTIME_OBJECTS))
    found = compile_runtime_object(routines)
    if store is not None:
        for which in {needed, routines}:
            store.save(f"aot-runtime-{runtime_object_key(which)}", {"what": "aot_runtime.c",
                                                                   "routines": sorted(routines)}, found)
    _RUNTIME_OBJECTS.append((routines, found))
    return found


def _build(loops: list[Instruction], store: PersistentCache | None = None,
           plan: BufferPlan | None = None) -> tuple[str, bytes]:
    """("object", MCJIT object code) or ("library", a shared library) exporting
    ``int loopK(const T *state leaves..., T *results...)`` for the K-th of ``loops``: object code
    where every loop runs in LLVM (no C compiler or linker run: they were half of such a
    loop's compile time), else a library with the driver's C.  Their programs follow ``plan``'s
    nested plans where given."""
    entries = {}
    for k, instr in enumerate(loops):
        param = Instruction("parameter", instr.operands[0].shape, attrs={"parameter_number": 0}, name="state")
        init, extra = _known_start(instr, param)
        loop = Instruction("while", instr.shape, [init], dict(instr.attrs), name=instr.name)
        fixed = passed_through(instr.attrs["body"])
        if fixed:     # (results: only what the loop changes; NativeLoopThunk hands back the rest)
            changed = [Instruction("get-tuple-element", e, [loop], {"index": j}, name=f"{instr.name}.{j}")
                       for j, e in enumerate(instr.shape.elements) if j not in fixed]
            root = Instruction("tuple", TupleShape(tuple(c.shape for c in changed)), changed, name=f"{instr.name}.out")
            entries[f"loop{k}"] = Computation(f"{instr.name}.native", [param, *extra, loop, *changed, root], root)
        else:
            entries[f"loop{k}"] = Computation(f"{instr.name}.native", [param, *extra, loop], loop)
    with tempfile.TemporaryDirectory(prefix="nbxla-loop-") as tmp:
        path = os.path.join(tmp, "loops.so")
        obj = compile_native_loops(entries, path, parallel_threshold=PARALLEL_THRESHOLD,
                                   host_lapack=gesv_addresses() is not None,
                                   runtime_object=lambda names: support_object(store, names), plan=plan)
        if obj is not None:
            return "object", obj
        with open(path, "rb") as f:
            return "library", f.read()


def _known_start(instr: Instruction, param: Instruction) -> tuple[Instruction, list[Instruction]]:
    """The loop's initial state in its library: ``param`` (the state the caller passes), with
    the scalars the entry starts it from as constants (a counter's first value) built in.  Why:
    LLVM then knows where the counter starts, and with the condition's bound, its range, so the
    clamps of the indices it feeds fold away (``y[n] = ... y[n - 1]`` then forwards the stored
    value to the next iteration instead of reading memory).  The caller still passes those
    leaves (the same values); the library does not read them.  Returns (the state, the
    instructions made for it)."""
    state = instr.operands[0]
    shape = state.shape
    if state.opcode != "tuple" or any(e.is_tuple for e in shape.elements):
        return param, []
    known = {k: o for k, o in enumerate(state.operands)
             if o.opcode == "constant" and not o.shape.is_tuple and not o.shape.dims}
    if not known:
        return param, []
    made = []
    for k, e in enumerate(shape.elements):
        if k in known:
            made.append(Instruction("constant", e, attrs={"literal": known[k].literal}, name=f"start{k}"))
        else:
            made.append(Instruction("get-tuple-element", e, [param], {"index": k}, name=f"state{k}"))
    init = Instruction("tuple", shape, made, name="start")
    return init, [*made, init]


class _ObjectLibrary:
    """Object code loaded by MCJIT, its functions reached as a ctypes library's are."""

    def __init__(self, obj: bytes):
        self.engine, _ = object_engine(obj=obj)     # (the code lives as long as the engine)

    def __getattr__(self, name: str):
        address = self.engine.get_function_address(name)
        if not address:
            raise AttributeError(name)
        return ctypes.CFUNCTYPE(ctypes.c_int)(address)


def load_library(kind: str, library: bytes):
    if kind == "object":
        return _ObjectLibrary(library)
    # (dlopen needs a file; it stays mapped after the file is removed)
    with tempfile.NamedTemporaryFile(prefix="nbxla-loop-", suffix=".so") as f:
        f.write(library)
        f.flush()
        loaded = ctypes.CDLL(f.name)
    # (the masked dots' large windows call NumPy's BLAS through these; without, plain C)
    gemms = gemm_addresses()
    if gemms is not None:
        loaded.nbxla_set_blas.argtypes = [ctypes.c_void_p] * 4
        loaded.nbxla_set_blas(*gemms)
    gesvs = gesv_addresses()
    if gesvs is not None:
        loaded.nbxla_set_lapack.argtypes = [ctypes.c_void_p] * 4
        loaded.nbxla_set_lapack(*gesvs)
    return loaded
