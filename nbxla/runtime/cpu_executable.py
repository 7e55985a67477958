"""The CPU executable: a list of thunks over the entry computation of an optimized module.

Each entry instruction becomes one thunk: a native kernel call for a fusion (split across
a thread pool when it is large; ctypes releases the GIL during the call), a library call
for ``dot`` (NumPy's BLAS, through the reference rule's ``np.matmul``), a view for
reshape/bitcast, and the reference evaluator's rule for everything else (sort, while,
gather, ...) and for the fusions the code generator cannot emit yet, which the compilation
record lists.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import numpy as np

from ..codegen.cpu import CompiledKernels, compile_kernels, target_fingerprint
from ..codegen.loops import STANDALONE_KERNEL_OPS
from ..hlo.printer import print_module
from .persistent_cache import default_cache
from ..hlo import Module
from ..hlo.evaluator import RULES, Interpreter
from ..hlo.evaluator import _conform as conform
from ..hlo.ir import Computation, Instruction
from .thunks import structural_thunk

# Kernels doing less work than this run on the calling thread (threads cost ~10 µs).
PARALLEL_THRESHOLD = 1 << 17
_KERNEL_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)


def worker_count() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:       # not on Linux
        return max(1, os.cpu_count() or 1)


_pool: ThreadPoolExecutor | None = None


def _thread_pool() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=worker_count(), thread_name_prefix="nbxla")
    return _pool


def _data_pointer(arr: np.ndarray) -> int:
    # Through the buffer protocol: ~0.4 us, against ~1.5 us for arr.ctypes.data (this is paid
    # per buffer per call, and dispatch overhead matters for small computations).
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(arr))
    except (TypeError, ValueError):          # read-only or empty arrays
        return arr.__array_interface__["data"][0]


class _KernelThunk:
    """Calls one compiled kernel on its operand arrays, writing fresh output arrays."""

    def __init__(self, instr: Instruction, address: int, extent: int, work_per_unit: int):
        self.fn = _KERNEL_TYPE(address)
        self.outputs = [(s.dims, s.dtype) for s in
                        (instr.shape.elements if instr.shape.is_tuple else [instr.shape])]
        self.pointer_array = ctypes.c_void_p * (len(instr.operands) + len(self.outputs))
        self.extent = extent
        self.parallel = extent >= 2 and extent * work_per_unit >= PARALLEL_THRESHOLD
        self.tuple_result = instr.shape.is_tuple

    def __call__(self, operands: list[np.ndarray], outs: list | None = None):
        if outs is None:
            outs = [np.empty(dims, dtype) for dims, dtype in self.outputs]
        ptrs = self.pointer_array()       # per call: executables may run on several threads
        for k, arr in enumerate(operands):
            ptrs[k] = _data_pointer(arr)
        for k, arr in enumerate(outs, len(operands)):
            ptrs[k] = _data_pointer(arr)
        if self.parallel:
            n = min(worker_count(), self.extent)
            bounds = [self.extent * i // n for i in range(n + 1)]
            futures = [_thread_pool().submit(self.fn, ptrs, bounds[i], bounds[i + 1])
                       for i in range(1, n)]
            self.fn(ptrs, bounds[0], bounds[1])
            for f in futures:
                f.result()
        else:
            self.fn(ptrs, 0, self.extent)
        return tuple(outs) if self.tuple_result else outs[0]


class _FullReductionThunk:
    """A full reduction: chunks reduced in parallel into 8-byte slots, then one finish call."""

    def __init__(self, instr: Instruction, address: int, finish: int, extent: int, slots: int):
        self.partial, self.finish = _KERNEL_TYPE(address), _KERNEL_TYPE(finish)
        self.outputs = [(s.dims, s.dtype) for s in
                        (instr.shape.elements if instr.shape.is_tuple else [instr.shape])]
        self.n_in = len(instr.operands)
        self.extent, self.slots = extent, slots
        self.parts = max(1, min(worker_count(), extent // (PARALLEL_THRESHOLD // 2)))
        self.tuple_result = instr.shape.is_tuple

    def __call__(self, operands: list[np.ndarray], outs: list | None = None):
        scratch = np.empty(self.parts * self.slots, np.float64)      # 8-byte slots
        base = [_data_pointer(a) for a in operands]
        calls = []
        for c in range(self.parts):
            ptrs = (ctypes.c_void_p * (self.n_in + 1))(*base, _data_pointer(scratch) + 8 * self.slots * c)
            calls.append((ptrs, self.extent * c // self.parts, self.extent * (c + 1) // self.parts))
        futures = [_thread_pool().submit(self.partial, *call) for call in calls[1:]]
        self.partial(*calls[0])
        for f in futures:
            f.result()
        if outs is None:
            outs = [np.empty(dims, dtype) for dims, dtype in self.outputs]
        ptrs = (ctypes.c_void_p * (self.n_in + len(outs) + 1))(
            *base, *[_data_pointer(o) for o in outs], _data_pointer(scratch))
        self.finish(ptrs, self.parts, 0)
        return tuple(outs) if self.tuple_result else outs[0]


class _MatmulThunk:
    """A dot in matmul form ([batch..., m, k] x [batch..., k, n], same float dtype): one
    np.matmul (NumPy's BLAS) into the planned buffer, without the reference rule's generality."""

    def __init__(self, instr: Instruction):
        self.dims, self.dtype = instr.shape.dims, instr.shape.dtype

    @staticmethod
    def applies(instr: Instruction) -> bool:
        a, b = (o.shape for o in instr.operands)
        nb = len(instr.attrs.get("lhs_batch_dims", ()))
        batch = tuple(range(nb))
        return (a.rank == b.rank == nb + 2
                and a.element_type == b.element_type == instr.shape.element_type
                and a.element_type in ("f32", "f64", "c64", "c128")
                and tuple(instr.attrs.get("lhs_batch_dims", ())) == batch
                and tuple(instr.attrs.get("rhs_batch_dims", ())) == batch
                and tuple(instr.attrs.get("lhs_contracting_dims", ())) == (nb + 1,)
                and tuple(instr.attrs.get("rhs_contracting_dims", ())) == (nb,))

    def __call__(self, operands, outs=None):
        out = outs[0] if outs else np.empty(self.dims, self.dtype)
        np.matmul(operands[0], operands[1], out=out)
        return out


def _contiguous(value):
    if isinstance(value, tuple):
        return tuple(_contiguous(v) for v in value)
    arr = np.asarray(value)
    # (np.ascontiguousarray would turn 0-d arrays into 1-d ones)
    return arr if arr.flags.c_contiguous else np.array(arr, order="C")


class CpuExecutable:
    backend = "cpu (LLVM)"

    def __init__(self, module: Module, plan=None):
        self.module = module
        self.plan = plan
        entry = module.entry
        # Kernel symbols get a prefix: a fusion named like a libm function ("cbrt") must not
        # become the definition its own body calls.
        fusions = [("nbxla_" + i.name.replace(".", "_").replace("-", "_"), i)
                   for i in entry.instructions if i.opcode == "fusion"]
        # Ops the fusion pass leaves alone but the code generator can emit (scatter, ...) are
        # compiled like a fusion of one instruction: a kernel of their own.
        scatters = [("nbxla_" + i.name.replace(".", "_").replace("-", "_"), i)
                    for i in entry.instructions if i.opcode in STANDALONE_KERNEL_OPS]
        store = default_cache()
        key = None
        if store is not None:
            names = ",".join(n for n, _ in fusions + scatters)
            key = hashlib.sha256((target_fingerprint() + names + print_module(module)).encode()).hexdigest()
        self.kernels: CompiledKernels = compile_kernels(
            module.name, [(n, i.attrs["calls"]) for n, i in fusions] +
            [(n, _single_instruction_computation(i)) for n, i in scatters], store, key)
        kernel_of = {id(instr): name for name, instr in fusions + scatters}
        self._interpreter = Interpreter()
        self._literal_ids: set[int] = set()
        self._steps: list[tuple[Instruction, Callable]] = []
        for instr in entry.instructions:
            self._steps.append((instr, self._thunk(instr, kernel_of.get(id(instr)))))
        self._root = entry.root
        self._plan = self._schedule()
        # Fusions the code generator could not emit, by HLO instruction name, with the reason.
        hlo_name = {kernel: instr.name for kernel, instr in fusions}
        self.interpreted = {hlo_name[k]: why for k, why in self.kernels.unsupported.items()
                            if k in hlo_name}
        # Standalone ops that were offered to the code generator but run through the
        # evaluator's rule (a scatter with a custom combiner, say), with the reason.
        op_name = {kernel: instr.name for kernel, instr in scatters}
        self.interpreted_ops = {op_name[k]: why for k, why in self.kernels.unsupported.items()
                                if k in op_name}

    def _thunk(self, instr: Instruction, kernel: str | None) -> Callable:
        op = instr.opcode
        if kernel is not None and kernel in self.kernels.addresses:
            spec = self.kernels.specs[kernel]
            if spec.style == "full-reduce":
                return _FullReductionThunk(instr, self.kernels.addresses[kernel],
                                           self.kernels.addresses[spec.finish_name],
                                           spec.parallel_extent, spec.scratch_slots)
            return _KernelThunk(instr, self.kernels.addresses[kernel], spec.parallel_extent,
                                spec.work_per_unit)
        if op == "dot" and _MatmulThunk.applies(instr):
            return _MatmulThunk(instr)
        if op == "constant":
            lit = _contiguous(instr.literal)
            self._literal_ids.add(id(lit))
            return lambda ops: lit
        structural = structural_thunk(instr)
        if structural is not None:
            return structural
        rule = RULES[op]
        interp = self._interpreter

        def interpreted(ops, instr=instr, rule=rule):
            with np.errstate(all="ignore"):
                # _conform: exactly the instruction's dtype, which native kernels rely on.
                return _contiguous(conform(instr, instr.shape, rule(instr, ops, interp), False))
        return interpreted

    def _schedule(self):
        """Steps as (thunk, operand slots) over a flat list of values: the per-call loop does
        no dictionary work (dispatch overhead matters for small computations)."""
        slot = {}
        params, steps = [], []
        for instr, thunk in self._steps:
            slot[id(instr)] = len(slot)
            if instr.opcode == "parameter":
                params.append((slot[id(instr)], instr.parameter_number))
            else:
                places = self._arena_outputs(instr, thunk)
                steps.append((thunk, [slot[id(o)] for o in instr.operands], slot[id(instr)], places))
        self._arena_bytes = self.plan.arena_bytes if self.plan is not None and \
            any(st[3] is not None for st in steps) else 0
        return len(slot), params, steps, slot[id(self._root)]

    def _arena_outputs(self, instr: Instruction, thunk) -> list | None:
        """(offset, dims, dtype) per output of a kernel whose outputs the buffer plan places
        in the arena; None when it has none (or is live-out: results get their own memory,
        so that what a caller keeps does not pin the whole arena)."""
        if self.plan is None or not isinstance(thunk, (_KernelThunk, _FullReductionThunk, _MatmulThunk)):
            return None
        shapes = instr.shape.elements if instr.shape.is_tuple else [instr.shape]
        names = [f"{instr.name}{{{k}}}" for k in range(len(shapes))] if instr.shape.is_tuple else [instr.name]
        places = []
        for name, shape in zip(names, shapes):
            v = self.plan.values.get(name)
            if v is None or v.kind != "arena" or v.end >= self.plan.length or v.offset is None:
                return None
            places.append((v.offset, shape.dims, shape.dtype))
        return places

    def run(self, inputs: list) -> list[np.ndarray]:
        size, params, steps, root = self._plan
        values = [None] * size
        for k, number in params:
            arr = inputs[number]
            values[k] = arr if type(arr) is np.ndarray and arr.flags.c_contiguous else _contiguous(arr)
        arena = None
        if self._arena_bytes:
            raw = np.empty(self._arena_bytes + 64, np.uint8)      # one allocation per run
            start = -raw.ctypes.data % 64
            arena = raw[start:start + self._arena_bytes]
        for thunk, operands, out, places in steps:
            if places is None:
                values[out] = thunk([values[k] for k in operands])
            else:
                outs = [np.ndarray(dims, dtype, buffer=arena, offset=offset) for offset, dims, dtype in places]
                result = thunk([values[k] for k in operands], outs)
                values[out] = result
        # Results never alias inputs or cached constants (reshapes are views).
        return [leaf if leaf.base is None and not self._is_literal(leaf) else leaf.copy()
                for leaf in _flatten(values[root])]

    def _is_literal(self, arr) -> bool:
        return id(arr) in self._literal_ids


def _single_instruction_computation(instr: Instruction) -> Computation:
    """``instr`` applied to parameters: how a standalone op is handed to the code generator."""
    params = [Instruction("parameter", o.shape, attrs={"parameter_number": k}, name=f"{instr.name}.p{k}")
              for k, o in enumerate(instr.operands)]
    root = Instruction(instr.opcode, instr.shape, params, dict(instr.attrs), name=instr.name)
    return Computation(f"{instr.name}.computation", params + [root], root)


def _flatten(value) -> list[np.ndarray]:
    if isinstance(value, tuple):
        return [leaf for v in value for leaf in _flatten(v)]
    return [np.asarray(value)]
