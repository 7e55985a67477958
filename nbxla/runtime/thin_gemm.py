"""Thin GEMMs -- a few rows against a large row-major matrix (an MLP's batch times its
weight) -- on nbxla's streaming kernel (``codegen/thin_gemm.py``) instead of OpenBLAS.

Why: such a product reads the matrix once and uses each element ``m`` times; OpenBLAS packs
the matrix into blocks before its micro-kernel reads them and runs well below the memory's
speed.  Measured on the shared 2-core AVX-512 VM, one thread, CPU time (least of repeats,
load 10): 8x30000 @ 30000x2000 f64 (npbench's mlp S) 52 ms in OpenBLAS, 31-33 ms in the
kernel; f32 35.5 / 17.4 ms.  npbench's mlp through jit, both cores (at real-time priority
above the machine's other load, least of 15): S 33.9 ms NumPy, 19.6-25.0 ms nbxla (34.9 before);
M 196-268 ms NumPy, 106-175 ms nbxla.

How: the contraction is cut into chunks of at least ``CHUNK_DEPTH`` rows, ``CHUNKS_PER_WORKER``
per thread of the pool, taken from a shared counter (``run_split``: a descheduled thread
holds back one chunk, not a half); each chunk streams a contiguous run of the matrix's rows
into a partial sum of its own, and the partial sums are added in chunk order (the same
result whichever thread took which chunk).  One chunk (a single core) writes the output
directly.  Columns past the last whole 64-byte vector are one BLAS call on that strip.

Taken (``thin_gemm_refusal``) for f32/f64 products of ``2..THIN_ROWS`` rows over a matrix of
at least ``MIN_MATRIX_ELEMENTS`` elements, ``MIN_DEPTH`` rows deep, stored as ``(k, n)``
row-major; the lhs in either order.  A GEMV (one row) stays with BLAS, which streams too.
"""

from __future__ import annotations

import ctypes
import hashlib
import threading

import numpy as np

from ..codegen.cpu import compile_helper_kernel, target_fingerprint
from ..codegen.thin_gemm import AVX512, emit_thin_gemm, ThinGemm
from ..hlo.evaluator_linalg import matmul_layout
from ..hlo.ir import Instruction
from . import host_memory
from .cpu_kernels import data_pointer, DotThunk, run_split, worker_count
from .persistent_cache import default_cache

# Most rows (m): each row's sums are a block of registers; past a few rows OpenBLAS's packing
# pays for itself (each packed element is used m times).
THIN_ROWS = 16
# Fewest matrix elements (k * n).  At the limit the kernel still beat OpenBLAS on one core
# (8x1024 @ 1024x1024 f64: 0.40 against 0.54 ms; 16x1024 @ 1024x2048 1.96 / 2.26; 2x1024 @
# 1024x1024 0.14 / 0.33; thread CPU, load 10), but below it a call is short next to what
# each geometry costs to compile (70-140 ms of LLVM's CPU for 8 and 16 rows; once per
# process, then from the persistent cache) and the pool's split; smaller ones are unmeasured.
MIN_MATRIX_ELEMENTS = 1 << 20
# Fewest contraction rows, and fewest per chunk (a chunk's fixed cost: zeroing its partial
# sums and adding them up, m * n each).
MIN_DEPTH = CHUNK_DEPTH = 256
CHUNKS_PER_WORKER = 4

_KERNEL = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
_POINTERS = ctypes.c_void_p * 3
_TYPES = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}
_kernels: dict = {}
_lock = threading.Lock()


def thin_gemm_refusal(instr: Instruction) -> str | None:
    """Why the dot ``instr`` does not run on the thin-GEMM kernel (None: it does)."""
    a, b = (o.shape for o in instr.operands)
    dtype = instr.shape.dtype
    if not a.element_type == b.element_type == instr.shape.element_type or np.dtype(dtype) not in _TYPES:
        return "not an f32 or f64 dot"
    if not AVX512:
        return "no AVX-512 (the kernel's register blocking needs its 32 vector registers)"
    if any(not isinstance(d, int) for s in (a, b, instr.shape) for d in s.dims):
        return "unknown dimensions"
    lhs_perm, rhs_perm, (batch, m, k, n) = matmul_layout(instr, a.dims, b.dims)
    if batch != 1 or a.rank != 2 or b.rank != 2:
        return "not one product of two matrices (a batch, or a vector operand)"
    if not 2 <= m <= THIN_ROWS:
        return f"not 2 to {THIN_ROWS} rows"
    if k < MIN_DEPTH or k * n < MIN_MATRIX_ELEMENTS or n < 64 // dtype.itemsize:
        return "a small matrix (it stays in the caches: BLAS's packing costs little)"
    if rhs_perm != sorted(rhs_perm):
        return "the matrix is read transposed (the kernel streams its rows)"
    return None


class ThinGemmDot(DotThunk):
    """A ``DotThunk`` computed by the thin-GEMM kernel (it takes the planned output buffer);
    never the straight-line program's inline ``np.matmul`` (``plain`` is False)."""

    def __init__(self, instr: Instruction):
        super().__init__(instr)
        self.plain, self.controls, self.split = False, None, None
        a, b = (o.shape for o in instr.operands)
        lhs_perm, _, (_, m, k, n) = matmul_layout(instr, a.dims, b.dims)
        self.transposed_lhs = lhs_perm != sorted(lhs_perm)
        self.m, self.k, self.n = m, k, n
        dtype = self.dtype = instr.shape.dtype
        lanes = 64 // dtype.itemsize
        self.columns = n - n % lanes
        # (the lhs as stored: (m, k), or (k, m) when contracted along its first dim)
        g = ThinGemm(_TYPES[np.dtype(dtype)], m, n, self.columns, *((1, m) if self.transposed_lhs else (k, 1)))
        self.fn, self._compiled = _kernel(g)
        chunks = min(k // CHUNK_DEPTH, worker_count() * CHUNKS_PER_WORKER) if worker_count() > 1 else 1
        self.chunks = max(1, chunks)
        self.bounds = [k * c // self.chunks for c in range(self.chunks + 1)]
        self.make = host_memory.allocator((m, n), dtype)
        self.make_partials = host_memory.allocator((self.chunks, m, n), dtype)
        self.how = "nbxla's thin-GEMM kernel (streams the matrix once" + \
            (f", {self.chunks} chunks of the contraction over {worker_count()} threads)" if self.chunks > 1 else ")")

    def __call__(self, operands, outs=None):
        lhs, rhs = (np.ascontiguousarray(o) for o in operands)
        out = outs[0] if outs else self.make()
        if not out.flags.c_contiguous:          # (the kernel writes by pointer: into memory of its own)
            result = self([lhs, rhs])
            np.copyto(out, result)
            return out
        out2d = out.reshape(self.m, self.n)
        if self.chunks == 1:
            self.fn(_POINTERS(data_pointer(lhs), data_pointer(rhs), data_pointer(out2d)), 0, self.k)
        else:
            partials = self.make_partials()
            fn, bounds = self.fn, self.bounds
            pointers = [_POINTERS(data_pointer(lhs), data_pointer(rhs), data_pointer(p)) for p in partials]

            def run(_, first, last):
                for c in range(first, last):
                    fn(pointers[c], bounds[c], bounds[c + 1])
            run_split(run, None, self.chunks)
            # (added in chunk order: the same sums whichever thread computed which chunk)
            np.sum(partials[:, :, :self.columns], axis=0, out=out2d[:, :self.columns])
        if self.columns < self.n:
            lhs2d = lhs.T if self.transposed_lhs else lhs
            np.matmul(lhs2d, rhs[:, self.columns:], out=out2d[:, self.columns:])
        return out


def _kernel(g: ThinGemm):
    """The compiled kernel of geometry ``g`` (once per process; kept in the persistent cache)."""
    with _lock:
        found = _kernels.get(g)
        if found is None:
            name = "nbxla_thin_gemm_" + "_".join(str(v) for v in vars(g).values())
            store = default_cache()
            key = hashlib.sha256(f"{target_fingerprint()},{name}".encode()).hexdigest() if store else None
            compiled = compile_helper_kernel(name, lambda m, n: emit_thin_gemm(m, n, g), "hand-vectorized", store, key)
            found = _kernels[g] = (_KERNEL(compiled.addresses[name]), compiled)
    return found
