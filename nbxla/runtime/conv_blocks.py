"""Dense 2-D convolutions (``feature_group_count`` 1) as im2col GEMMs over blocks of output
rows, each block's result written into the output (in the output's own layout) with the
epilogue applied on the way.

**Why blocks.**  One patch matrix for the whole output (the im2col of ``cpu_library``) is
``taps * C`` times the input: megabytes for a 56x56 layer, written once and read once from
memory.  A block of output rows (one image, ``rows`` output rows, all columns) has a patch
matrix of at most ``PATCH_BYTES``: it is gathered, multiplied and dropped while it sits in
the core's L2.  The GEMM's result block is likewise still in cache when it is written out.

**The gather.**  The input is padded once into channels-last ``(N, Hp, Wp, C)``.  For one
output row ``h`` and column ``w`` the window's rows are runs of ``KW * C`` contiguous elements
(without window dilation along W): the patch block is a strided view of shape
``(rows, OW, KH, KW * C)`` copied into a contiguous ``(rows * OW, KH * KW * C)`` matrix (long
contiguous runs: ``np.copyto`` moves them as memory copies).  Strides and dilations are
only strides of that view.

**The GEMM.**  Channels-last outputs (TensorFlow's NHWC) take ``patches @ kernel`` ->
``(rows * OW, O)``.  Channels-first outputs (JAX's NCHW) take ``kernel^T @ patches^T`` ->
``(O, rows * OW)`` (the patches read transposed by BLAS, no copy), so that each output
channel's block is a run of whole output rows: writing it out is a plain copy, not a
transpose.

**The epilogue.**  ``epilogue(values, out, region)`` gets the block's values (a view with
the output's logical dims), the output array and the block's region in it (slices); it
stores ``f(values)`` into ``out[region]``.  Without one, it copies.  See ``conv_epilogue``:
a consuming loop fusion of bias adds, activations and residual adds is applied here.

**The cost rule** (``dense_convolution``): the per-tap GEMMs of ``conv_gemm`` need no gather,
but each tap's GEMM has only ``C`` for its inner dimension, which BLAS runs well below its
peak while ``C`` is small (measured on the benchmark's machine: a 3x3 64->64 layer on 56x56
ran 9 GEMMs of K=64 at ~45 GFMA/s, one K=576 GEMM at ~65 GFMA/s, the gather costing less
than the difference).  So the blocked im2col runs below ``WIDE_MIN_CHANNELS`` input
channels and for strided convolutions (which the per-tap GEMMs do not take), the per-tap
GEMMs above.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..hlo.attributes import PadDim, WindowDim
from ..hlo.evaluator_data import pad_array
from ..hlo.ir import Instruction
from .conv_gemm import gemm, run_on_one_blas_thread

# Largest patch block (bytes): about a quarter of a core's L2, so that the patches, the
# kernel panel BLAS packs and the result block stay in it together.
PATCH_BYTES = 512 * 1024
# Input channels from which the per-tap GEMMs (conv_gemm) are taken for unstrided dense
# convolutions; below, the blocked im2col (see the module's docstring).
WIDE_MIN_CHANNELS = 128


def copy_epilogue(values: np.ndarray, out: np.ndarray, region: tuple) -> None:
    """The epilogue of a convolution without one: the values are the output."""
    np.copyto(out[region], values)


def blocked_refusal(instr) -> str | None:
    """Why the blocked im2col does not take ``instr`` (None when it does)."""
    dn = instr.attrs["dim_labels"]
    if len(dn.input_spatial) != 2:
        return f"{len(dn.input_spatial)} spatial dims (the blocked path takes 2)"
    if instr.attrs.get("feature_group_count", 1) != 1 or instr.attrs.get("batch_group_count", 1) != 1:
        return "feature or batch groups"
    window = instr.attrs.get("window")
    if window is not None:
        for w in window.dims:
            if w.base_dilation > 1:
                return "lhs dilation"
            if w.pad_low < 0 or w.pad_high < 0:
                return "negative padding"
    if 0 in instr.shape.dims or 0 in instr.operands[0].shape.dims or 0 in instr.operands[1].shape.dims:
        return "empty"
    return None


def prefers_per_tap(instr) -> bool:
    """The cost rule between the per-tap GEMMs and the blocked im2col, for a convolution both
    take (unstrided, dense): per tap once the input has ``WIDE_MIN_CHANNELS`` channels."""
    dn = instr.attrs["dim_labels"]
    return instr.operands[0].shape.dims[dn.input_feature] >= WIDE_MIN_CHANNELS


class BlockedConvolution:
    how = "im2col by blocks of output rows + one BLAS GEMM per block (output written with its epilogue)"

    def __init__(self, instr: Instruction, epilogue=copy_epilogue):
        dn = instr.attrs["dim_labels"]
        x, k = (o.shape.dims for o in instr.operands)
        window = instr.attrs.get("window")
        self.window = window.dims if window is not None else tuple(WindowDim(k[d]) for d in dn.kernel_spatial)
        self.dims, self.dtype = instr.shape.dims, instr.shape.dtype
        self.input_order = [dn.input_batch, *dn.input_spatial, dn.input_feature]
        self.kernel_order = [*dn.kernel_spatial, dn.kernel_input_feature, dn.kernel_output_feature]
        # The output's logical dims in (N, H, W, O) order, and back.
        self.nhwc_order = [dn.output_batch, *dn.output_spatial, dn.output_feature]
        self.to_logical = tuple(int(i) for i in np.argsort(self.nhwc_order))
        # Channels-first when the output is (b, f, h, w) in memory (row-major logical dims).
        self.channels_first = [dn.output_batch, dn.output_feature, *dn.output_spatial] == [0, 1, 2, 3]
        self.padding = [PadDim(0, 0), *(PadDim(w.pad_low, w.pad_high) for w in self.window), PadDim(0, 0)]
        self.pads = any(p != PadDim(0, 0) for p in self.padding)
        self.reversed = tuple(i for i, w in enumerate(self.window) if w.reversal)
        self.n, self.oh, self.ow, self.o = (self.dims[d] for d in self.nhwc_order)
        self.kh, self.kw = (k[d] for d in dn.kernel_spatial)
        c = x[dn.input_feature]
        self.depth = self.kh * self.kw * c
        row_bytes = self.ow * self.depth * self.dtype.itemsize
        self.rows = max(1, min(self.oh, PATCH_BYTES // max(row_bytes, 1)))
        self.epilogue = epilogue

    def __call__(self, operands: list[np.ndarray]) -> np.ndarray:
        x = np.transpose(operands[0], self.input_order)
        x = pad_array(x, self.dtype.type(0), self.padding) if self.pads else np.ascontiguousarray(x)
        k = np.transpose(operands[1], self.kernel_order)
        if self.reversed:
            k = np.flip(k, self.reversed)
        kmat = np.ascontiguousarray(k).reshape(self.depth, self.o)
        out = np.empty(self.dims, self.dtype)
        (sh, sw), (dh, dw) = ((w.stride for w in self.window), (w.window_dilation for w in self.window))
        item = x.itemsize
        c = x.shape[3]
        step_h, step_w = x.strides[1], x.strides[2]
        ow, o, hb, depth = self.ow, self.o, self.rows, self.depth
        blocks = -(-self.oh // hb)
        nhwc, to_logical, epilogue, cf = self.nhwc_order, self.to_logical, self.epilogue, self.channels_first

        def run(_, begin, end):
            patches = np.empty((hb * ow, depth), self.dtype)
            result = np.empty((o, hb * ow) if cf else (hb * ow, o), self.dtype)
            for unit in range(begin, end):
                n, h0 = divmod(unit, blocks)
                h0 *= hb
                h = min(self.oh, h0 + hb) - h0
                rows = h * ow
                base = x[n, h0 * sh:]
                if dw == 1:
                    view = as_strided(base, (h, ow, self.kh, self.kw * c),
                                      (sh * step_h, sw * step_w, dh * step_h, item), writeable=False)
                else:
                    view = as_strided(base, (h, ow, self.kh, self.kw, c),
                                      (sh * step_h, sw * step_w, dh * step_h, dw * step_w, item), writeable=False)
                p = patches[:rows]
                np.copyto(p.reshape(view.shape), view)
                if cf:
                    r = result[:, :rows]
                    gemm(kmat.T, p.T, r, False)
                    values = r.reshape(o, h, ow).transpose(1, 2, 0)[None]
                else:
                    r = result[:rows]
                    np.matmul(p, kmat, out=r)
                    values = r.reshape(1, h, ow, o)
                region = [slice(None)] * 4
                region[nhwc[0]], region[nhwc[1]] = slice(n, n + 1), slice(h0, h0 + h)
                epilogue(values.transpose(to_logical), out, tuple(region))
        units = self.n * blocks
        run_on_one_blas_thread(run, units, self.n * self.oh * ow * depth * o)
        return out
