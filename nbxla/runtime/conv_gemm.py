"""Dense (and widely grouped) convolutions as BLAS GEMMs, one per kernel tap, on the padded
input itself: no patch matrix is gathered.

**The wide-row trick.**  Take the input padded (and lhs-dilated: that is interior padding)
into channels-last ``(N, P..., C)`` and flatten it to rows of C.  With stride 1, output
position ``o`` reads, for kernel tap ``k``, input row ``flat(o) + flat(k * dilation)``, where
``flat`` is the row-major offset over the padded extents ``P``.  So for each tap the input
rows of *all* outputs at once are one contiguous block of the flat input shifted by a
constant, and the convolution is ``out_wide += block_k @ kernel[k]``: ``taps`` plain GEMMs
(``beta = 1`` accumulates in place) over a "wide" output of extents ``P`` instead of the
real output extents ``O = P - (K - 1) * dilation``; the extra positions (the right and
bottom edges, between images) are computed and cropped.  A 1x1 convolution is a single GEMM
over the unpadded input (nothing cropped); a 3x3 one on 56x56 computes 7% extra.

When the output is channels-first (``bf01``, JAX's default NCHW / OIHW), the same is done
per image as ``out_wide[n] (O, P) += kernel[k] (O, C) @ x[n] (C, P) shifted``, so that the
result lands in the output's own layout with no transpose.  Feature groups are GEMMs on
column / row blocks of the same buffers.

The GEMMs run on one OpenBLAS thread, large convolutions split into blocks of output rows
over nbxla's pool (see ``run_on_one_blas_thread``).
The GEMMs call NumPy's OpenBLAS directly (``cblas_?gemm`` with leading dimensions, found as
``blas_threads`` finds its thread controls), for the ``beta = 1`` accumulation and strided
blocks NumPy's matmul cannot take without copies; without it ``np.matmul`` into a
temporary, then an add.  Strided convolutions are left to the im2col path (``cpu_library``):
a stride would make the wide output that many times larger.
"""

from __future__ import annotations

import ctypes
import math

import numpy as np

from ..hlo.attributes import PadDim, WindowDim
from ..hlo.evaluator_data import pad_array
from ..hlo.ir import Instruction
from .blas_threads import controls as blas_thread_controls, openblas_libraries
from .cpu_kernels import run_split, worker_count

# Below this many input features per group, a tap's GEMM is too thin (K = channels) for BLAS to
# run near its peak: im2col, which packs all taps into K, does better (LeNet's 1-channel input).
WIDE_MIN_FEATURES = 16

# Output rows (channels-last) or columns (channels-first) per block of the split: about two
# blocks per thread, within these bounds (smaller GEMMs lose BLAS efficiency: 256-row blocks
# of a 3x3 64->64 convolution ran 1.5x slower than 1024-row ones; larger ones leave the
# output block out of L2 across the taps).
MIN_BLOCK, MAX_BLOCK = 64, 1024
# Multiply-adds from which the GEMMs are split over the pool (below, one call per tap with
# OpenBLAS's default threading: it threads none of them below ~260K multiply-adds anyway).
SPLIT_WORK = 4_000_000

ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112


def _find_cblas() -> dict:
    """{np.float32: sgemm, np.float64: dgemm} from NumPy's OpenBLAS (64- or 32-bit ints)."""
    found = {}
    for lib in openblas_libraries():
        for prefix, suffix, integer in (("scipy_cblas_", "64_", ctypes.c_int64), ("cblas_", "64_", ctypes.c_int64),
                                        ("scipy_cblas_", "", ctypes.c_int), ("cblas_", "", ctypes.c_int)):
            for letter, dtype, real in (("s", np.float32, ctypes.c_float), ("d", np.float64, ctypes.c_double)):
                fn = getattr(lib, f"{prefix}{letter}gemm{suffix}", None)
                if fn is None or dtype in found:
                    continue
                fn.restype = None
                fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, integer, integer, integer, real,
                               ctypes.c_void_p, integer, ctypes.c_void_p, integer, real, ctypes.c_void_p, integer]
                found[dtype] = fn
        if found:
            return found
    return found


_cblas: list = []


def cblas_gemms() -> dict:
    if not _cblas:
        _cblas.append(_find_cblas())
    return _cblas[0]


def cblas_operand(a: np.ndarray):
    """(transpose flag, leading dimension, array) for a row-major cblas operand."""
    item = a.itemsize
    rows, cols = a.shape
    if a.strides[1] == item and (rows == 1 or a.strides[0] >= cols * item):
        return _NO_TRANS, max(cols, a.strides[0] // item if rows > 1 else cols, 1), a
    if a.strides[0] == item and (cols == 1 or a.strides[1] >= rows * item):
        return _TRANS, max(rows, a.strides[1] // item if cols > 1 else rows, 1), a
    a = np.ascontiguousarray(a)
    return _NO_TRANS, max(cols, 1), a


def gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray, accumulate: bool) -> None:
    """``c = a @ b`` (``c += a @ b`` when accumulating) on 2-D views with any strides."""
    m, k = a.shape
    n = b.shape[1]
    if m == 0 or n == 0:
        return
    fn = cblas_gemms().get(c.dtype.type)
    if fn is None or c.strides[1] != c.itemsize or (m > 1 and c.strides[0] < n * c.itemsize):
        if accumulate:
            c += a @ b
        else:
            np.matmul(a, b, out=c)
        return
    ta, lda, a = cblas_operand(a)
    tb, ldb, b = cblas_operand(b)
    ldc = c.strides[0] // c.itemsize if m > 1 else n
    fn(ROW_MAJOR, ta, tb, m, n, k, 1.0, a.ctypes.data, lda, b.ctypes.data, ldb,
       1.0 if accumulate else 0.0, c.ctypes.data, max(ldc, n))


def wide_gemm_refusal(instr: Instruction) -> str | None:
    """Why ``instr`` (an f32/f64 convolution) does not take the wide-row GEMM path."""
    dn = instr.attrs["dim_labels"]
    window = instr.attrs.get("window")
    if window is not None and any(w.stride > 1 for w in window.dims):
        return "strided"
    if instr.attrs.get("batch_group_count", 1) > 1:
        return "batch groups"
    groups = instr.attrs.get("feature_group_count", 1)
    if instr.operands[0].shape.dims[dn.input_feature] // groups < WIDE_MIN_FEATURES:
        return "few input features per group"
    if 0 in instr.shape.dims or 0 in instr.operands[0].shape.dims or 0 in instr.operands[1].shape.dims:
        return "empty"
    return None


class WideGemmConvolution:
    how = "BLAS GEMM per kernel tap on the padded input (no patch matrix)"

    def __init__(self, instr: Instruction):
        dn = instr.attrs["dim_labels"]
        kdims = instr.operands[1].shape.dims
        window = instr.attrs.get("window")
        self.window = window.dims if window is not None else tuple(WindowDim(kdims[d]) for d in dn.kernel_spatial)
        r = len(dn.input_spatial)
        self.rank, self.dims, self.dtype = r, instr.shape.dims, instr.shape.dtype
        self.groups = instr.attrs.get("feature_group_count", 1)
        out_order = [dn.output_batch, dn.output_feature, *dn.output_spatial]
        # Channels-first when the output already is (b, f, spatial...) in memory order.
        self.channels_first = out_order == list(range(r + 2))
        spatial_pads = [PadDim(w.pad_low, w.pad_high, w.base_dilation - 1) for w in self.window]
        if self.channels_first:
            self.input_order = [dn.input_batch, dn.input_feature, *dn.input_spatial]
            self.padding = [PadDim(0, 0), PadDim(0, 0), *spatial_pads]
            # kernel as (taps, O, I)
            self.kernel_order = [*dn.kernel_spatial, dn.kernel_output_feature, dn.kernel_input_feature]
        else:
            self.input_order = [dn.input_batch, *dn.input_spatial, dn.input_feature]
            self.padding = [PadDim(0, 0), *spatial_pads, PadDim(0, 0)]
            self.kernel_order = [*dn.kernel_spatial, dn.kernel_input_feature, dn.kernel_output_feature]
            # wide result (N, P..., O) -> the output's dim order
            self.output_order = list(np.argsort([dn.output_batch, *dn.output_spatial, dn.output_feature]))
        self.pads = any(p != PadDim(0, 0) for p in self.padding)
        self.reversed = tuple(i for i, w in enumerate(self.window) if w.reversal)
        self.kernel_sizes = [kdims[d] for d in dn.kernel_spatial]

    def __call__(self, operands: list[np.ndarray]) -> np.ndarray:
        x = np.transpose(operands[0], self.input_order)
        x = pad_array(x, self.dtype.type(0), self.padding) if self.pads else np.ascontiguousarray(x)
        k = np.transpose(operands[1], self.kernel_order)
        if self.reversed:
            k = np.flip(k, self.reversed)
        taps = math.prod(self.kernel_sizes)
        k = np.ascontiguousarray(k).reshape(taps, *k.shape[self.rank:])
        n = x.shape[0]
        padded = x.shape[2:] if self.channels_first else x.shape[1:-1]
        spans = [(s - 1) * w.window_dilation for s, w in zip(self.kernel_sizes, self.window)]
        out_spatial = [p - s for p, s in zip(padded, spans)]
        strides = [math.prod(padded[i + 1:]) for i in range(self.rank)]
        offsets = [0]
        for size, w, stride in zip(self.kernel_sizes, self.window, strides):
            offsets = [o + j * w.window_dilation * stride for o in offsets for j in range(size)]
        reach = sum(s * st for s, st in zip(spans, strides))
        plane = math.prod(padded)
        g = self.groups
        if self.channels_first:
            c, o = x.shape[1], k.shape[1]
            ci, co = c // g, o // g
            flat = x.reshape(n, c, plane)
            m = plane - reach
            wide = np.empty((n, o, plane), self.dtype)
            block = block_size(n * m, m)
            blocks = -(-m // block)

            def run(_, begin, end):
                for unit in range(begin, end):
                    b, lo = divmod(unit, blocks)
                    lo *= block
                    hi = min(m, lo + block)
                    for grp in range(g):
                        rows, cols = slice(grp * co, (grp + 1) * co), slice(grp * ci, (grp + 1) * ci)
                        for t, off in enumerate(offsets):
                            gemm(k[t, rows, :], flat[b, cols, off + lo:off + hi], wide[b, rows, lo:hi], t > 0)
            run_on_one_blas_thread(run, n * blocks, n * m * c * o // g * len(offsets))
            wide = wide.reshape(n, o, *padded)
            return np.ascontiguousarray(wide[(slice(None), slice(None)) + tuple(slice(0, e) for e in out_spatial)])
        c, o = x.shape[-1], k.shape[-1]
        ci, co = c // g, o // g
        flat = x.reshape(n * plane, c)
        m = n * plane - reach
        wide = np.empty((n * plane, o), self.dtype)

        work = m * c * o // g * len(offsets)
        if g == 1 and m < o:
            # Few rows, many features (a 1x1 convolution on 14x14x512): blocks of output
            # features, so that each block packs its own part of the kernel once -- one block
            # per thread (whole vectors of features): each block packs all the rows again (1x1
            # 512 -> 512 on 14x14, one core: 0.72 ms as one GEMM, 0.80 in 2 blocks, 0.89 in 4).
            lanes = max(1, 64 // self.dtype.itemsize)
            block = -(-(-(-o // worker_count())) // lanes) * lanes

            def run(_, begin, end):
                cols = slice(begin * block, min(o, end * block))
                for t, off in enumerate(offsets):
                    gemm(flat[off:off + m], k[t, :, cols], wide[:m, cols], t > 0)
            run_on_one_blas_thread(run, -(-o // block), work)
        else:
            block = block_size(m, m)

            def run(_, begin, end):
                lo, hi = begin * block, min(m, end * block)
                for grp in range(g):
                    rows, cols = slice(grp * ci, (grp + 1) * ci), slice(grp * co, (grp + 1) * co)
                    for t, off in enumerate(offsets):
                        gemm(flat[off + lo:off + hi, rows], k[t, :, cols], wide[lo:hi, cols], t > 0)
            run_on_one_blas_thread(run, -(-m // block), work)
        wide = wide.reshape(n, *padded, o)[(slice(None),) + tuple(slice(0, e) for e in out_spatial)]
        return np.ascontiguousarray(np.transpose(wide, self.output_order))


def block_size(total: int, extent: int) -> int:
    """Rows per block for ``total`` rows in all, blocks taken within an extent of ``extent``."""
    return max(1, min(extent, max(MIN_BLOCK, min(MAX_BLOCK, -(-total // (2 * worker_count()))))))


def run_on_one_blas_thread(run, units: int, work: int) -> None:
    """``run(None, begin, end)`` over ``[0, units)`` with OpenBLAS on one thread: split over
    nbxla's pool when the work (multiply-adds) is large, else on the calling thread.

    Why not OpenBLAS's own threads (what dots use by default, see blas_threads): after a call
    they spin, waiting for the next one, for far longer than a convolution layer lasts; the
    next layer's depthwise kernel then runs its pool threads against them.  Measured with
    benchmarks/conv.py (2 shared cores): MobileNet blocks (depthwise kernel -> pointwise GEMM)
    2.4 / 1.2 / 3.2 ms split this way against 11.6 / 32 / 74 ms with OpenBLAS threading, and
    a lone 3x3 convolution 2.0 ms against 1.2 ms best / 166 ms median.  The pool's chunks
    never wait for a thread the OS has not scheduled."""
    controls = blas_thread_controls()
    if controls is None:
        run(None, 0, units)
        return
    get, set_ = controls
    threads = get()
    if threads > 1:
        set_(1)
    try:
        if work < SPLIT_WORK or units < 2 or worker_count() < 2:
            run(None, 0, units)
        else:
            run_split(run, None, units)
    finally:
        if threads > 1:
            set_(threads)


def matmul_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` for 2-D ``a`` (rows split over the pool, one BLAS thread: see above)."""
    m, k = a.shape
    out = np.empty((m, b.shape[1]), np.result_type(a, b))
    block = block_size(m, m)

    def run(_, begin, end):
        lo, hi = begin * block, min(m, end * block)
        np.matmul(a[lo:hi], b, out=out[lo:hi])
    run_on_one_blas_thread(run, -(-m // block), m * k * b.shape[1])
    return out
