"""Thunks that call compiled CPU kernels: one kernel over its operand buffers (split across
a thread pool when large; ctypes releases the GIL during the call), a full reduction's
partial and finish kernels, and ``dot`` as NumPy's BLAS calls (GEMM, GEMV, batched GEMM)."""

from __future__ import annotations

import ctypes
import itertools
import os
import weakref
from types import SimpleNamespace
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..hlo.evaluator_linalg import matmul_layout
from ..hlo.ir import Instruction
from ..hlo.low_precision import widen_shape, widen_value
from ..codegen.elemental import row_major_strides
from ..hlo.division import is_expensive
from ..passes.fused_dots import dot_contraction, dot_epilogue_refusal, fused_dot
from ..hlo.opcodes import TRANSCENDENTAL
from ..hlo.shapes import bit_width
from . import host_memory
# (ARRAY_DATA_OFFSET also compiled into the kernels' array-object entry points: codegen/cpu.py)
from .fastcall import ARRAY_DATA_OFFSET, kernel_caller, object_caller
from .blas_threads import (OPENBLAS_THREADED, OPENBLAS_THREADED_GEMV, SPLIT_PRODUCT, controls as blas_thread_controls,
                           policy_mode, threads_for_call)

# Kernels doing less work than this (units of one add streamed from memory, ~0.3-0.45 ns per
# element here; see ``element_cost``) run on the calling thread: handing work to the pool and
# waiting for it costs 30-50 us here (2-vCPU VM), more than splitting saves below ~1M of them
# (measured: a 512K-element sum or add ran 2-3x faster inline).
PARALLEL_THRESHOLD = 1 << 20
# Unsplit kernels of at least this much work release the GIL while they run (as ctypes calls
# did), so that other Python threads calling compiled code run meanwhile: from about 10 us of
# work, where taking the GIL back (~0.1-0.2 us) is noise; below it the GIL stays held.
RELEASE_GIL_WORK = 1 << 15
# What one more operation per element adds to a kernel's work, in those units (measured here,
# one core, inline: f32 add 0.15 ns/element in cache, 0.44 out of it; exp 0.29 / 0.33; tanh 0.40 /
# 0.41; 8 cheap ops 0.20 / 0.44; f64 tanh ~1.2 ns).  A vectorized cheap op (add, multiply,
# compare, convert, one step of a row reduction) is nearly free beside the memory pass; a
# transcendental costs about one pass in f32, four in f64 (half the lanes, longer polynomials).
# The costs were 1 per op and 16 per transcendental: a 65K-element softmax (~40 us inline)
# counted 2M and was split, and ran 0.57-0.64x as fast split (the attention modules' softmax
# kernel, 4 and 8 heads of 128x128: the pool's thread starts ~20 us after it is asked).
CHEAP_OP_COST = 1 / 16
DIVIDE_COST = 1 / 4
TRANSCENDENTAL_COST = 1
WIDE_TRANSCENDENTAL_COST = 4
# A fused dot kernel's work per unit of its range counts multiply-adds (codegen/dot_kernels.py),
# each far cheaper than a streamed element: measured on one core, 0.020-0.024 ns per f32
# multiply-add (batches of 32x32 @ 32x32, 8x64 @ 64x64), 0.034-0.066 with the rhs read
# transposed (q @ k^T), 0.038-0.043 in bf16.  Counted as whole units, a pure dot fusion of 1M
# multiply-adds (~23 us on one core) was split, and ran slower at every size measured on the
# shared 2-core VM at load ~6.5 (interleaved in one process, wall min / median / CPU time,
# split against one thread): 1M 45 / 93 / 57 us against 22 / 23 / 23, 2M 67 / 184 / 91 against 43 / 47 / 46,
# 4M 108 / 145 / 130 against 84 / 87 / 87, 8M (8x64 @ 64x64) 215 / 643 / 270 against
# 183 / 200 / 200 -- as BLAS dots split over the pool did below ``SPLIT_PRODUCT``.  A
# multiply-add counts 1/8 unit (between the f32 and the bf16 / transposed rates): f32 dots split
# from ~8M of them (~170 us on one core); the epilogue's work per output element is spread
# over the contraction's multiply-adds.
DOT_MAC_COST = 1 / 8
KERNEL_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)


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


# Chunks per thread of a split kernel.  Threads take chunks from a shared counter, so a
# thread the OS has descheduled (another process, BLAS or XLA threads spinning on the same
# cores) delays the call by at most the chunk it holds: with fixed halves, the caller waited
# for the whole half of a thread that had not run yet (10x slower calls in bursts).
CHUNKS_PER_THREAD = 8


def run_split(fn, ptrs, extent: int) -> None:
    """``fn(ptrs, begin, end)`` over ``[0, extent)``, shared by the calling thread and the
    pool's threads chunk by chunk; a pool thread that has not started when the work is done
    is not waited for."""
    threads = min(worker_count(), extent)
    n = min(extent, threads * CHUNKS_PER_THREAD)
    bounds = [extent * i // n for i in range(n + 1)]
    claim = itertools.count().__next__          # atomic under the GIL

    def work():
        while (c := claim()) < n:
            fn(ptrs, bounds[c], bounds[c + 1])
    futures = [_thread_pool().submit(work) for _ in range(threads - 1)]
    work()
    for f in futures:
        if not f.cancel():                      # started: it may hold the last chunks
            f.result()


def _forget_pool_after_fork() -> None:
    """A forked child has none of the parent's threads, but inherits the pool object that
    believes it has them: work handed to it would wait forever.  The child starts afresh."""
    global _pool
    _pool = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool_after_fork)


_read_pointer = ctypes.c_void_p.from_address


def c_strides(dims, itemsize: int) -> tuple:
    """Byte strides of a C-contiguous array of ``dims``."""
    return tuple(s * itemsize for s in row_major_strides(dims))


def data_pointer(arr: np.ndarray) -> int:
    """The address of an array's first element.  Paid per buffer per kernel call, where
    dispatch overhead matters: reading it from the array object takes ~0.12 us, the buffer
    protocol ~0.3 us, ``arr.ctypes.data`` ~0.9 us."""
    if ARRAY_DATA_OFFSET is not None and type(arr) is np.ndarray:
        return _read_pointer(id(arr) + ARRAY_DATA_OFFSET).value or 0
    return arr.__array_interface__["data"][0]


# ctypes prototypes take at most 1024 arguments: kernels with more buffers (a concatenation
# of a thousand pieces) are called through their pointer-array entry point instead.
MAX_OBJECT_ARGS = 256


def object_entry_type(buffers: int):
    """The ctypes prototype of a kernel's entry point taking array objects (codegen/cpu.py),
    or None when it has too many buffers for one ctypes call (see MAX_OBJECT_ARGS)."""
    if buffers > MAX_OBJECT_ARGS:
        return None
    return ctypes.CFUNCTYPE(None, *[ctypes.py_object] * buffers, ctypes.c_int64, ctypes.c_int64)


def element_cost(instr: Instruction) -> float:
    """Work per element of a kernel, in units of one add streamed from memory (what
    ``PARALLEL_THRESHOLD`` was measured with): one unit for the pass itself, plus what its
    operations add (see ``CHEAP_OP_COST``).  A 500-op formula, or ten f64 tanh, make a kernel
    of 40K elements worth splitting (~0.5 ms on one core); a softmax over 128K does not (~60 us)."""
    if instr.opcode != "fusion":
        return 1
    comp = instr.attrs["calls"]
    cost = _element_costs.get(comp)
    if cost is None:
        # (kept per computation: every size of a program with unknown dimensions makes its
        # thunks again over the same fused computations -- half a millisecond per size)
        dot = fused_dot(comp) if dot_epilogue_refusal(comp) is None else None
        contraction = dot_contraction(dot) if dot is not None else None
        if contraction is None:
            # (no dot; or a contraction over an unknown size -- a program for every batch
            # size, ``x.T @ g`` -- counted as before, a unit a multiply-add)
            cost = _fusion_cost(comp)
        else:
            # (the dot kernel's unit of work is a multiply-add: DOT_MAC_COST)
            cost = DOT_MAC_COST + _fusion_cost(comp) / max(1, contraction)
        _element_costs[comp] = cost
    return cost


_element_costs: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _fusion_cost(comp) -> float:
    cost = 1.0
    for i in comp.instructions:
        wide = not i.shape.is_tuple and bit_width(i.shape.element_type) >= 64
        if i.opcode in TRANSCENDENTAL:
            cost += WIDE_TRANSCENDENTAL_COST if wide else TRANSCENDENTAL_COST
        elif i.opcode in ("divide", "remainder") and is_expensive(i):
            cost += DIVIDE_COST         # (not a division by a constant: a multiplication, below)
        elif i.is_elementwise or i.opcode == "reduce":
            cost += 2 * CHEAP_OP_COST if wide else CHEAP_OP_COST
    return cost


def _output_shapes(instr: Instruction) -> list[tuple]:
    """(dims, dtype) of each array an instruction gives (one, or a tuple's elements)."""
    return [(s.dims, s.dtype) for s in (instr.shape.elements if instr.shape.is_tuple else [instr.shape])]


class KernelThunk:
    """Calls one compiled kernel on its operand arrays, writing fresh output arrays."""

    def __init__(self, instr: Instruction, address: int, extent: int, work_per_unit: int,
                 object_entry: int | None = None, sizes: tuple = (), style: str = ""):
        """``sizes``: the values of the sizes the kernel reads when it runs (``RunSizes`` in
        codegen/toolkit.py), passed as an i64 array after the output buffers; ``style``: the
        kernel's (``KernelSpec.style``: "rows" kernels run over ranges of rows)."""
        self.fn = KERNEL_TYPE(address)
        self.style = style
        self.outputs = _output_shapes(instr)
        self.makers = [host_memory.allocator(dims, dtype) for dims, dtype in self.outputs]
        self.sizes = (np.array(sizes, np.int64),) if sizes else ()
        self.pointer_array = ctypes.c_void_p * (len(instr.operands) + len(self.outputs) + len(self.sizes))
        self.extent = extent
        self.parallel = extent >= 2 and extent * work_per_unit * element_cost(instr) >= PARALLEL_THRESHOLD
        self.tuple_result = instr.shape.is_tuple
        # Small kernels are called with the arrays themselves (the cheapest dispatch).
        self.object_fn = None
        # The cheapest of all: a built-in function on the arrays, ``call(*operands, *outs)``
        # (fastcall.py: no ctypes conversions); None where CPython's C API is not at hand.
        self.call = None
        if object_entry is not None and not self.parallel and ARRAY_DATA_OFFSET is not None:
            prototype = object_entry_type(len(instr.operands) + len(self.outputs) + len(self.sizes))
            self.object_fn = prototype(object_entry) if prototype is not None else None
            if self.object_fn is not None:
                work = extent * work_per_unit * element_cost(instr)
                self.call = kernel_caller(address, extent, len(instr.operands) + len(self.outputs), self.sizes,
                                          release=work >= RELEASE_GIL_WORK)

    def __call__(self, operands: list[np.ndarray], outs: list | None = None):
        if outs is None:
            outs = [make() for make in self.makers]
        if self.object_fn is not None:
            for a in operands:
                if type(a) is not np.ndarray:    # only exact ndarrays have the known layout
                    break
            else:
                if self.call is not None:
                    self.call(*operands, *outs)
                else:
                    self.object_fn(*operands, *outs, *self.sizes, 0, self.extent)
                return tuple(outs) if self.tuple_result else outs[0]
        # A pointer array per call: executables may run on several threads at once.
        ptrs = self.pointer_array(*[data_pointer(a) for a in operands], *[data_pointer(a) for a in outs],
                                  *[data_pointer(a) for a in self.sizes])
        if self.parallel:
            run_split(self.fn, ptrs, self.extent)
        else:
            self.fn(ptrs, 0, self.extent)
        return tuple(outs) if self.tuple_result else outs[0]


class FullReductionThunk:
    """A full reduction: chunks reduced in parallel into 8-byte slots, then one finish call."""

    def __init__(self, instr: Instruction, address: int, finish: int, extent: int, slots: int,
                 work_per_unit: int = 1, object_entry: int | None = None):
        self.partial, self.finish = KERNEL_TYPE(address), KERNEL_TYPE(finish)
        self.outputs = _output_shapes(instr)
        self.makers = [host_memory.allocator(dims, dtype) for dims, dtype in self.outputs]
        self.n_in = len(instr.operands)
        self.extent, self.slots = extent, slots
        self.parts = max(1, min(worker_count(), extent, extent * work_per_unit // (PARALLEL_THRESHOLD // 2)))
        self.tuple_result = instr.shape.is_tuple
        # Unsplit, both phases run in one call taking the arrays themselves (codegen/cpu.py).
        self.object_fn = self.call = None      # (call: the built-in one, as KernelThunk's)
        if object_entry is not None and self.parts == 1 and ARRAY_DATA_OFFSET is not None:
            prototype = object_entry_type(self.n_in + len(self.outputs))
            self.object_fn = prototype(object_entry) if prototype is not None else None
            if self.object_fn is not None:
                self.call = object_caller(object_entry, extent, self.n_in + len(self.outputs),
                                          release=extent * work_per_unit >= RELEASE_GIL_WORK)

    def __call__(self, operands: list[np.ndarray], outs: list | None = None):
        if self.object_fn is not None and all(type(a) is np.ndarray for a in operands):
            if outs is None:
                outs = [make() for make in self.makers]
            if self.call is not None:
                self.call(*operands, *outs)
            else:
                self.object_fn(*operands, *outs, 0, self.extent)
            return tuple(outs) if self.tuple_result else outs[0]
        scratch = np.empty(self.parts * self.slots, np.float64)      # 8-byte slots
        base = [data_pointer(a) for a in operands]
        calls = []
        for c in range(self.parts):
            ptrs = (ctypes.c_void_p * (self.n_in + 1))(*base, data_pointer(scratch) + 8 * self.slots * c)
            calls.append((ptrs, self.extent * c // self.parts, self.extent * (c + 1) // self.parts))
        futures = [_thread_pool().submit(self.partial, *call) for call in calls[1:]]
        self.partial(*calls[0])
        for f in futures:
            f.result()
        if outs is None:
            outs = [make() for make in self.makers]
        ptrs = (ctypes.c_void_p * (self.n_in + len(outs) + 1))(
            *base, *[data_pointer(o) for o in outs], data_pointer(scratch))
        self.finish(ptrs, self.parts, 0)
        return tuple(outs) if self.tuple_result else outs[0]


# A GEMM is thin with at most THIN_SIDE rows (or columns) and THIN_OUTPUT outputs (m * n): its
# OpenBLAS threads would meet once per block of the contraction with little work between
# meetings (see ``DotThunk``).  Squarer GEMMs (npbench's gemm, k2mm, k3mm, a 128^3 product,
# where two OpenBLAS threads measured 1.35-1.56x one on idle cores) keep the default policy.
THIN_OUTPUT = 1 << 18
THIN_SIDE = 32
# The least rows (columns) of one block of a GEMM split over the pool.
GEMM_SPLIT_BLOCK = 128


class DotThunk:
    """Any ``dot`` whose operands and result share a BLAS element type, as NumPy's BLAS calls:
    operands permuted (a copy only when the dims are not already in place) to one
    ``(batch, m, k) @ (batch, k, n)``; ``m == 1`` or ``n == 1`` without batch is a GEMV
    (``np.matmul`` with a vector operand), a batch is one ``np.matmul`` over 3-D operands
    (NumPy loops GEMM calls over it).  The result is written into the planned buffer."""

    TYPES = ("f32", "f64", "c64", "c128")

    def __init__(self, instr: Instruction):
        a, b = (o.shape for o in instr.operands)
        self.lhs_perm, self.rhs_perm, (batch, m, k, n) = matmul_layout(instr, a.dims, b.dims)
        self.lhs_perm = None if self.lhs_perm == sorted(self.lhs_perm) else self.lhs_perm
        self.rhs_perm = None if self.rhs_perm == sorted(self.rhs_perm) else self.rhs_perm
        self.make = host_memory.allocator(instr.shape.dims, instr.shape.dtype)
        if batch == 1 and m == 1:
            self.how, self.shapes = "GEMV (vector @ matrix)", ((k,), (k, n), (n,))
        elif batch == 1 and n == 1:
            self.how, self.shapes = "GEMV (matrix @ vector)", ((m, k), (k,), (m,))
        elif batch == 1:
            self.how, self.shapes = "GEMM", ((m, k), (k, n), (m, n))
        else:
            self.how, self.shapes = f"{batch} GEMMs (batched np.matmul)", ((batch, m, k), (batch, k, n), (batch, m, n))
        # Operands already in the GEMM/GEMV form (the common case) skip the reshapes: for
        # small products the Python around the BLAS call is most of the time.
        plain = self.lhs_perm is None and self.rhs_perm is None and (a.dims, b.dims, instr.shape.dims) == self.shapes
        self.plain = plain
        # How many OpenBLAS threads a call gets (blas_threads.threads_for_call): products
        # OpenBLAS would thread run on one thread when small or when other work keeps the
        # cores busy (OpenBLAS's threads stall for whole scheduler ticks when the cores are
        # busy); with NBXLA_BLAS_ONE_THREAD=1 large ones are split across nbxla's pool
        # instead (the pool's chunks do not wait for a thread that has not started).
        self.work, self.mode = batch * m * k * n, policy_mode()
        vector = m == 1 or n == 1             # (OpenBLAS sends a GEMM with m or n == 1 to GEMV)
        threaded = m * k * n >= OPENBLAS_THREADED_GEMV if vector else m * k * n > OPENBLAS_THREADED
        self.controls = blas_thread_controls() if threaded and self.mode != "openblas" else None
        # A batch of products each large enough for OpenBLAS to thread (attention's per-head
        # q @ k^T, p @ v) runs on one BLAS thread while the cores are busy: OpenBLAS's threads
        # meet once per product, and each meeting waits for a thread the scheduler may not
        # run (4 heads of 128x128x64: 0.27 ms a call on one BLAS thread, 11 ms threaded with
        # XLA's threads in the process).  On idle cores each product gets OpenBLAS's threads
        # as NumPy's do, judged by one product's multiply-adds (``product_work``): 8 heads of
        # 128x64 @ 64x128 f32 took 133 us threaded, 181 us on one thread, and 185-204 us split
        # over the pool (its thread wakes too late for a call this short).
        self.batched = batch > 1
        self.product_work = m * k * n
        # So does a thin GEMM -- a small output over a deep contraction (an MLP's 8-row batch
        # against a 30000x2000 weight) --, split over the pool along its longer side from
        # SPLIT_PRODUCT on: OpenBLAS's threads meet once per block of the contraction, and each
        # meeting waits for a thread the scheduler may not run.  8x30000 @ 30000x1000 on the
        # shared 2-core VM (load 13): 808 ms threaded (162 ms of CPU), 128 ms on one thread,
        # 167 ms split by columns; 64 rows: 2460 / 638 / 544 ms.
        self.thin = batch == 1 and not vector and min(m, n) <= THIN_SIDE and m * n <= THIN_OUTPUT and threaded
        self.split_axis = None
        if self.work >= SPLIT_PRODUCT and worker_count() > 1:
            # Split over the pool only where one core takes several scheduler ticks: batches
            # split from 4M multiply-adds ran 0.63-0.8x as fast as on one thread up to 64M
            # (1.2 ms), 1.7x at 128M (2.5 ms), on the shared 2-core VM; at 8M, calls in which
            # the pool's thread took chunks were the slower ones (median 202 us against 165 us
            # where it started too late to take any, 146 us unsplit).
            # A GEMM splits along its longer side, in blocks of at least GEMM_SPLIT_BLOCK: each
            # block packs the whole of the other operand again (128x256 @ 256x1024 split into
            # 16 blocks of 8 rows took twice the CPU time of one call, 3.3 against 1.7 ms;
            # in 128-column blocks 1.9 ms, 64-column 1.9-2.0).
            if batch > 1:
                self.split_axis = ("batch", batch, batch)
            elif m == 1 or n == 1:
                self.split_axis = ("rows", m, m) if m > 1 else ("columns", n, n)
            elif self.thin:                   # (one block per worker: the small side is packed once each)
                self.split_axis = ("rows", m, m) if m >= n else ("columns", n, n)
            else:
                axis, extent = ("rows", m) if m >= n else ("columns", n)
                self.split_axis = (axis, extent, max(1, extent // GEMM_SPLIT_BLOCK))
        # (split on every call: what the GEMV pairs and update_gemv, each splitting its own way, leave alone)
        self.split = self.split_axis if self.controls is not None and (self.batched or self.thin or self.mode == "one") \
            else None

    def call_plan(self) -> tuple[int, tuple | None]:
        """(OpenBLAS threads for the next call, 0 = OpenBLAS's own count; the pool split or
        None).  Batches and NBXLA_BLAS_ONE_THREAD's calls split large products over the pool
        (``split``); the default policy's one thread on busy cores does not: there the pool's
        thread finds no core either, and the blocks only cost (128x256 @ 256x1024 at load 9:
        1.89 ms CPU split in 128-column blocks, 1.63 ms unsplit)."""
        if self.controls is None:
            return 0, None
        if self.thin and self.mode != "one":
            # (thin: OpenBLAS's threads on idle cores -- mlp S 0.78x NumPy on one thread split
            # over the pool, quiet --, one thread split over the pool while the cores are busy)
            want = threads_for_call(self.work, self.mode)
            return (1, self.split) if want == 1 else (want, None)
        if self.split is not None:
            return 1, self.split
        if self.batched:        # (one BLAS thread on busy cores; OpenBLAS's on idle ones)
            return threads_for_call(self.product_work, self.mode), None
        return threads_for_call(self.work, self.mode), None

    @classmethod
    def applies(cls, instr: Instruction) -> bool:
        a, b = (o.shape for o in instr.operands)
        return a.element_type == b.element_type == instr.shape.element_type and a.element_type in cls.TYPES

    def __call__(self, operands, outs=None):
        if self.controls is None:
            return self._product(operands, outs, None)
        want, split = self.call_plan()
        get, set_ = self.controls
        threads = get()
        if want >= threads:
            return self._product(operands, outs, split)
        set_(want)
        try:
            return self._product(operands, outs, split)
        finally:
            set_(threads)

    def _product(self, operands, outs, split):
        if self.plain:
            out = outs[0] if outs else self.make()
            self._matmul(operands[0], operands[1], out, split)
            return out
        out = outs[0] if outs else self.make()
        lhs, rhs = operands
        if self.lhs_perm is not None:
            lhs = np.transpose(lhs, self.lhs_perm)
        if self.rhs_perm is not None:
            rhs = np.transpose(rhs, self.rhs_perm)
        ls, rs, os_ = self.shapes
        self._matmul(lhs.reshape(ls), rhs.reshape(rs), out.reshape(os_), split)
        return out

    @staticmethod
    def _matmul(lhs, rhs, out, split) -> None:
        """``out = lhs @ rhs`` in the GEMM/GEMV form, split into row, column or batch blocks
        over the pool when ``split`` says so (np.matmul releases the GIL)."""
        if split is None:
            np.matmul(lhs, rhs, out=out)
            return
        axis, extent, blocks = split
        if axis == "columns" and lhs.ndim == 1:             # vector @ matrix
            def part(begin, end):
                np.matmul(lhs, rhs[:, begin:end], out=out[begin:end])
        elif axis == "columns":
            def part(begin, end):
                np.matmul(lhs, rhs[:, begin:end], out=out[:, begin:end])
        elif axis == "rows":
            def part(begin, end):
                np.matmul(lhs[begin:end], rhs, out=out[begin:end])
        else:
            def part(begin, end):
                np.matmul(lhs[begin:end], rhs[begin:end], out=out[begin:end])
        if blocks == extent:
            run_split(lambda _, begin, end: part(begin, end), None, extent)
        else:
            run_split(lambda _, b, e: part(extent * b // blocks, extent * e // blocks), None, blocks)


class WidenedDotThunk:
    """A bf16 ``dot`` as XLA:CPU computes it: operands widened to f32 (exactly), one f32
    GEMM through ``DotThunk``, the result rounded once to bf16 -- or kept, when the dot asks
    for an f32 result (``preferred_element_type``).  The optimizer gives bf16 dots this f32
    form in the module itself (``passes/float_normalization.py``: the converts fuse with their
    neighbours); this thunk runs a bf16 dot that reaches the runtime as written."""

    def __init__(self, instr: Instruction):
        wide = SimpleNamespace(opcode="dot", name=instr.name, attrs=instr.attrs,
                               shape=widen_shape(instr.shape),
                               operands=[SimpleNamespace(shape=widen_shape(o.shape)) for o in instr.operands])
        self.inner = DotThunk(wide)
        self.how, self.dtype = f"{self.inner.how} in f32", instr.shape.dtype

    @staticmethod
    def applies(instr: Instruction) -> bool:
        a, b = (o.shape for o in instr.operands)
        return a.element_type == b.element_type == "bf16" and instr.shape.element_type in ("bf16", "f32")

    def __call__(self, operands, outs=None):
        result = self.inner([widen_value(o) for o in operands])
        if result.dtype != self.dtype:
            result = result.astype(self.dtype)          # (round to nearest even, once)
        if outs:
            outs[0][...] = result
            return outs[0]
        return result
