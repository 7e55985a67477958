"""Real dots of moderate size on nbxla's own register-blocked GEMM kernel instead of BLAS.

A dot ``(batch, m, k) @ (batch, k, n)`` is the kernel of 1x1 convolutions
(``codegen/patch_gemm.py``, run through ``small_gemm``): the lhs of one batch element is an
"image" of ``m`` positions and ``k`` channels, the rhs its ``(k, n)`` kernel matrix, the
result ``(m, n)`` channels-last.  The kernel keeps a block of output rows as vector sums of
whole rows of ``n`` features (in panels of up to 64 f32 features with AVX-512) and adds each
lhs element, broadcast, times a kernel row with one fused multiply-add.

Why: OpenBLAS runs products of this size well below its peak (its packing and micro-kernel
are sized for large matrices), and NumPy calls it once per product of a batch, where the
kernel takes the whole batch in one call (``PatchGemm.kernel_step``: each image its own
kernel matrix).  Measured on one core of the benchmark machine (AVX-512, CPU time, the
least of repeats, the machine shared), BLAS / this kernel, us: attention's 4 heads of
128x128 @ 128x64 88-92 / 64, 512x64 @ 64x128 74 / 64, 1024x256 @ 256x256 1000 / 890; the
attention module (tests/hlo/models, f32) 0.81x -> 1.18x XLA:CPU's speed.  Past the kernel's limits
(products deeper than ``NATIVE_PANEL_DEPTH``, a kernel matrix of ``NATIVE_PANEL_KERNEL_BYTES``
or more: its panels no longer stay in L2 while a block of rows reads them) BLAS stays.

Operands not already in the ``(batch, m, k)`` / ``(batch, k, n)`` row-major form are copied
into it first.  An operand whose minor dim moves (q @ k^T reads k transposed) is copied by
nbxla's tiled transpose kernel (``codegen/transposes.py``, compiled here for the operand's
dims): 8 us for attention's 4 x 128x64 keys, where NumPy's transposing copy took 11 (BLAS
reads such a transpose in place: q @ k^T gains less, 97-101 -> 89 us, than p @ v).

Sums run in order over the contraction with fused multiply-adds: results agree with BLAS's
to rounding, not bit for bit (as BLAS's own blockings differ from one another).
"""

from __future__ import annotations

import ctypes
import hashlib
import threading

import numpy as np

from ..codegen.cpu import compile_helper_kernel, target_fingerprint
from ..codegen.transposes import emit_transpose_kernel
from ..codegen.patch_gemm import panel_widths, PatchGemm, WIDEST_ROW_BYTES
from ..hlo.evaluator_linalg import matmul_layout
from ..hlo.ir import Instruction
from ..hlo.parser import parse_hlo
from . import host_memory, small_gemm
from .persistent_cache import default_cache
from .conv_blocks import NATIVE_PANEL_DEPTH, NATIVE_PANEL_KERNEL_BYTES
from .conv_gemm import SPLIT_WORK
from .cpu_kernels import data_pointer, DotThunk, run_split, worker_count

# Smallest product (m * k * n multiply-adds of one batch element) taken (the bound of
# passes/fused_dots.SMALL_DOT_WORK, below which fused dots are native anyway) ...
MIN_PRODUCT = 32 ** 3
# ... and fewest multiply-adds of the whole dot: below, the kernel gains less than its call
# costs, and each geometry costs an LLVM compile.  Measured on one core, BLAS / kernel us:
# 64x32 @ 32x32 2.7 / 5.1, 128x64 @ 64x64 10.0 / 12.9, 8 x 64x64 @ 64x64 39 / 39,
# 128x256 @ 256x128 73 / 73, 256x64 @ 64x64 21 / 17, 4 x 128x128 @ 128x64 88 / 64.
MIN_WORK = 1 << 20
# Fewest rows (m): a block of rows holds up to 12 positions' sums (see patch_gemm).
MIN_ROWS = 16
# Rows of one "image row" of the kernel: larger m is cut into rows of a divisor of m in
# [MIN_WIDTH, MAX_WIDTH], so that large products split over the pool by rows.
MIN_WIDTH, MAX_WIDTH = 64, 512


def native_dot_refusal(instr: Instruction) -> str | None:
    """Why the dot ``instr`` does not run on nbxla's GEMM kernel (None: it does)."""
    a, b = (o.shape for o in instr.operands)
    t = instr.shape.element_type
    if not a.element_type == b.element_type == t or small_gemm.element_type(instr.shape.dtype) is None:
        return "not an f32 or f64 dot"
    _, _, (batch, m, k, n) = matmul_layout(instr, a.dims, b.dims)
    item = instr.shape.dtype.itemsize
    if m * k * n < MIN_PRODUCT or batch * m * k * n < MIN_WORK or m < MIN_ROWS:
        return "a small product (a BLAS call costs no more)"
    if n % (64 // item):
        return "columns not a whole number of 64-byte vectors"
    if k > NATIVE_PANEL_DEPTH or k * n * item >= NATIVE_PANEL_KERNEL_BYTES:
        return "a deep or wide product (BLAS runs near its peak)"
    if worker_count() > 1:
        # (attention's dots, 4-8M multiply-adds, split over the pool on 2 cores: the modules
        # went from 1.04-1.39x XLA's wall time on OpenBLAS to 0.68-0.79x; on one core the
        # kernel is the faster, 1.10-1.22x against 0.91-0.94x)
        return "more than one core: OpenBLAS's threads finish first"
    return None


_KERNEL = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
_transposers: dict = {}
_lock = threading.Lock()


class _Transposer:
    """``out = np.transpose(x, perm)`` (contiguous ``out``) by the tiled transpose kernel,
    compiled once per (element type, dims, perm) for the process (and the persistent cache)."""

    def __init__(self, t: str, dims: tuple, perm: tuple):
        key = (t, dims, perm)
        with _lock:
            found = _transposers.get(key)
            if found is None:
                out_dims = tuple(dims[p] for p in perm)
                comp = parse_hlo(f"HloModule transpose\nENTRY e {{\n  p = {t}[{','.join(map(str, dims))}] parameter(0)\n"
                                 f"  ROOT t = {t}[{','.join(map(str, out_dims))}] transpose(p), "
                                 f"dimensions={{{','.join(map(str, perm))}}}\n}}").entry
                name = "nbxla_dot_transpose_" + "_".join([t, *map(str, dims), "p", *map(str, perm)])
                store = default_cache()
                cache_key = hashlib.sha256(f"{target_fingerprint()},{name}".encode()).hexdigest() if store else None
                compiled = compile_helper_kernel(name, lambda m, n: emit_transpose_kernel(m, n, comp), "full",
                                                 store, cache_key)
                found = _transposers[key] = (_KERNEL(compiled.addresses[name]), compiled.specs[name].parallel_extent,
                                             compiled)
        self.fn, self.extent, self._compiled = found
        self.out_dims = tuple(dims[p] for p in perm)

    def __call__(self, x: np.ndarray, out: np.ndarray) -> None:
        self.fn((ctypes.c_void_p * 2)(data_pointer(x), data_pointer(out)), 0, self.extent)


def _width(m: int) -> int:
    """Positions per kernel row: ``m`` itself, or a divisor of it for large ``m``."""
    if m <= MAX_WIDTH:
        return m
    return next((w for w in range(MAX_WIDTH, MIN_WIDTH - 1, -1) if m % w == 0), m)


class NativeGemmDot(DotThunk):
    """A ``DotThunk`` (it takes the planned output buffer, and counts as a fresh result
    where BLAS's does) computed by the kernel; never the straight-line program's inline
    ``np.matmul`` (``plain`` is False)."""

    def __init__(self, instr: Instruction):
        super().__init__(instr)
        self.plain, self.controls = False, None
        a, b = (o.shape for o in instr.operands)
        lhs_perm, rhs_perm, (batch, m, k, n) = matmul_layout(instr, a.dims, b.dims)
        dtype = instr.shape.dtype
        t = small_gemm.element_type(dtype)
        # Per operand: None (in place), a permutation (NumPy's copy moves whole rows), or a
        # _Transposer (the minor dim moves)
        self.arranged = []
        for shape, perm in ((a, lhs_perm), (b, rhs_perm)):
            if perm == sorted(perm):
                self.arranged.append(None)
            elif perm[-1] == len(perm) - 1:
                self.arranged.append(perm)
            else:
                self.arranged.append(_Transposer(t, shape.dims, tuple(perm)))
        self.batch, self.m, self.k, self.n = batch, m, k, n
        item = dtype.itemsize
        width = _width(m)
        self.rows, self.width = m // width, width
        # (a power-of-two row of features that fits the registers is one panel; others panels)
        one_panel = n * item <= WIDEST_ROW_BYTES and n & (n - 1) == 0
        panels = () if one_panel else panel_widths(n, item)
        # (the batch is the kernel's images, each with its own rhs: one call for all of them)
        self.kernel = small_gemm.PatchGemmKernel(PatchGemm(
            t, batch, self.rows, width, k, 1, 1, self.rows, width, n, (1, 1), (1, 1),
            panels, kernel_step=k * n if batch > 1 else 0))
        self.dtype = dtype
        self.make = host_memory.allocator(instr.shape.dims, dtype)
        self.units = batch * self.rows
        self.pooled = self.units >= 2 and batch * m * k * n >= SPLIT_WORK and worker_count() > 1
        self.split = None
        self.how = "nbxla's register-blocked GEMM kernel" + (f", {batch} products" if batch > 1 else "") + \
            (f", split over {worker_count()} threads" if self.pooled else "")

    def __call__(self, operands, outs=None):
        # (contiguous operands in the GEMM form's order: the kernel reads them by pointer)
        lhs, rhs = operands
        how_lhs, how_rhs = self.arranged
        lhs = np.ascontiguousarray(lhs) if how_lhs is None else self._arranged(lhs, how_lhs)
        rhs = np.ascontiguousarray(rhs) if how_rhs is None else self._arranged(rhs, how_rhs)
        out = outs[0] if outs else self.make()
        flat = out.reshape(-1)
        kernel, block = self.kernel, self.width * self.n

        def run(_, begin, end):
            # (the kernel writes unit u at u - begin of the block it is given)
            kernel(lhs, rhs, flat[begin * block:], begin, end)
        if self.pooled:
            run_split(run, None, self.units)
        else:
            kernel(lhs, rhs, flat, 0, self.units)
        return out

    def _arranged(self, x: np.ndarray, how) -> np.ndarray:
        """``x`` contiguous in the dims order of the GEMM form, by ``how`` (a permutation or a
        ``_Transposer``; see ``arranged``)."""
        if isinstance(how, _Transposer):
            out = np.empty(how.out_dims, self.dtype)
            how(np.ascontiguousarray(x), out)
            return out
        return np.ascontiguousarray(np.transpose(x, how))
