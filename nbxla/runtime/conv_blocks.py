"""Dense 2-D convolutions (and grouped ones nbxla's kernel takes) as im2col GEMMs over blocks of output
rows, each block's result written into the output (in the output's own layout) while it is
in cache.

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

**The store.**  Each block's values (a view with the output's logical dims) are copied into
its region of the output; a channels-last (N, H, W, O) output is written by the block's GEMM
itself (``blas_direct``: a block is whole output rows, contiguous there).  A consuming bias
add and activation stays the fusion's own native loop kernel over the whole output for
BLAS's blocks: NumPy's in-place ufuncs applied block by block measured slower -- 3x3
64 -> 64 on 56x56 with bias and relu 2.29 against 1.87 ms, MobileNet blocks 10-30% slower;
and again, on BLAS's channels-last blocks (3x3 256 -> 256 on 14x14 and 512 -> 512 on 7x7,
interleaved in one process), 1-2.5% more time on one core and 1-2% more CPU time on two,
the wall time on two cores within noise.  nbxla's own kernel applies a bias and relu /
relu6 in registers: ``conv_bias_act``.

**Few output features** (at most ``NATIVE_GEMM_BYTES`` per position: 32 f32 features): no
patches are gathered; nbxla's own kernel (``small_gemm``, ``codegen/patch_gemm.py``) reads
them from the padded input in place, register-blocked, faster than OpenBLAS on these narrow
products; channels-first outputs are then computed channels-last and transposed as each
block is stored.

**Feature groups** with whole vectors of output features per group (``takes_grouped``:
ResNeXt-like 3x3 convolutions of 32 features per group) run in the same kernel, a loop over
the groups inside it (grouped3x3 28x28x256 in 8 groups, one core: 0.99 ms, against 2.35 ms as
the per-tap path's 72 GEMMs of 32 x 32 features a block, and XLA's 2.32 ms).

**Fewer blocks than threads** (one small image, 3x3 256 -> 256 on 14x14, is one block): with
BLAS into a channels-last output, the image is cut into runs of output rows, one a thread
(``thread_blocks``); otherwise each block's GEMM is split by output features over the pool
(``_split_by_features``), where the one block ran on one thread.  nbxla's kernel is split
by runs of output rows of any length (``_split_rows``): it gathers nothing.

**The cost rule** (``prefers_per_tap``): the per-tap GEMMs of ``conv_gemm`` need no gather,
but each tap's GEMM has only ``C`` for its inner dimension, which BLAS runs well below its
peak while ``C`` is small (measured on the benchmark's machine: a 3x3 64->64 layer on 56x56
ran 9 GEMMs of K=64 at ~45 GFMA/s, one K=576 GEMM at ~65 GFMA/s, the gather costing less
than the difference).  So the blocked im2col runs below ``WIDE_MIN_CHANNELS`` input
channels and for strided convolutions (which the per-tap GEMMs do not take), the per-tap
GEMMs above.
"""

from __future__ import annotations

import math

import numpy as np

from ..hlo.attributes import PadDim, WindowDim
from ..hlo.ir import Instruction
from ..codegen.patch_gemm import panel_widths, WIDEST_ROW_BYTES
from . import small_gemm
from . import conv_gemm
from .conv_gemm import gemm, run_on_one_blas_thread
from .cpu_kernels import run_split, worker_count

# Largest patch block (bytes): about a quarter of a core's L2, so that the patches, the
# kernel panel BLAS packs and the result block stay in it together.
PATCH_BYTES = 512 * 1024
# Input channels from which the per-tap GEMMs (conv_gemm) are taken for unstrided dense
# convolutions; below, the blocked im2col (see the module's docstring).
WIDE_MIN_CHANNELS = 128
# Widest row of output features (bytes) computed by nbxla's own implicit-im2col kernel instead
# of BLAS (on gathered patches, or per tap): 64 f32 features with AVX-512, 32 without (see
# codegen/patch_gemm.py).  Measured on one core of the benchmark machine (AVX-512): 3x3
# convolutions 16 -> 32 features 0.17 ms against 0.38 (BLAS blocked), 128 -> 64 on 28x28
# 1.45 against 2.19 (BLAS blocked and per tap), 64 -> 64 on 2x16x16 0.54 against 0.73.
NATIVE_GEMM_BYTES = WIDEST_ROW_BYTES
# Output positions per image from which wide unstrided convolutions take the per-tap GEMMs:
# below, the taps' GEMMs are short (and the wide output's extra edge positions a larger
# share) and one GEMM over gathered patches (K = taps x channels) wins.  Measured on one core,
# 3x3 convolutions, ms blocked / per tap: NCHW 256 -> 256 on 14x14 2.2 / 3.7, on 28x28
# 8.2 / 9.6, 128 -> 128 on 56x56 10.3 / 8.3, 512 -> 512 on 14x14 8.4 / 16.7; NHWC 512 -> 512
# on 7x7 2.7 / 3.5, 256 -> 256 on 14x14 2.1 / 2.2, on 28x28 8.3 / 7.5.
PER_TAP_MIN_POSITIONS = {"channels-last": 256, "channels-first": 1024}
# Convolutions with more output features than NATIVE_GEMM_BYTES run in nbxla's kernel, in
# panels (see codegen/patch_gemm.py), rather than as BLAS GEMMs while the products are at
# most NATIVE_PANEL_DEPTH deep (kernel taps x input channels) and the kernel matrix is below
# NATIVE_PANEL_KERNEL_BYTES (half the core's L2: each block of positions reads a whole panel
# of it).  Measured on one core (AVX-512, 2 MiB L2), nbxla / BLAS ms: 1x1 16 -> 96 on 150x150
# 0.81 / 1.06, 32 -> 192 on 38x38 0.15 / 0.20, 576 -> 160 on 10x10 0.15 / 0.19, 3x3 64 -> 128
# on 56x56 2.9 / 4.8, 128 -> 128 on 28x28 1.74 / 2.16; past the limits BLAS wins: 3x3
# 256 -> 256 on 14x14 4.2 / 2.1, 1x1 512 -> 512 on 14x14 0.98 / 0.87.
NATIVE_PANEL_DEPTH = 1152
NATIVE_PANEL_KERNEL_BYTES = 1 << 20
# Narrowest group of output features (bytes) nbxla's kernel takes for grouped convolutions:
# one AVX2 vector (8 f32 features); narrower groups stay with the im2col path.
GROUP_MIN_BYTES = 32
# Fewest output positions per block: BLAS packs the whole kernel matrix on every call, which
# a block of fewer positions does not repay (a 3x3 256->256 layer on 14x14 in blocks of 56
# positions ran 1.7x slower than in one block).
MIN_POSITIONS = 256
# nbxla's kernel split over the pool by runs of output rows (``_split_rows``): at most this
# many runs per thread (the pool hands them out one by one: a thread the OS has descheduled
# delays the call by at most its run), each of at least this many output positions.
SPLIT_RUNS_PER_THREAD = 8
SPLIT_MIN_POSITIONS = 32
# Padded inputs from this size (bytes) get only their borders zeroed, not the whole buffer
# (below, one np.zeros is cheaper than several small slice assignments).
ZEROS_BYTES = 1 << 16


def blocked_refusal(instr) -> str | None:
    """Why the blocked im2col does not take ``instr`` (None when it does)."""
    dn = instr.attrs["dim_labels"]
    if len(dn.input_spatial) != 2:
        return f"{len(dn.input_spatial)} spatial dims (the blocked path takes 2)"
    if instr.attrs.get("batch_group_count", 1) != 1:
        return "batch groups"
    window = instr.attrs.get("window")
    if window is not None:
        for w in window.dims:
            if w.base_dilation > 1:
                return "lhs dilation"
            if w.pad_low < 0 or w.pad_high < 0:
                return "negative padding"
    if 0 in instr.shape.dims or 0 in instr.operands[0].shape.dims or 0 in instr.operands[1].shape.dims:
        return "empty"
    if instr.attrs.get("feature_group_count", 1) != 1 and not takes_native(instr):
        return "feature groups (only nbxla's kernel takes them: see takes_grouped)"
    return None


def prefers_per_tap(instr) -> bool:
    """The cost rule between the per-tap GEMMs and the blocked im2col, for a convolution both
    take (unstrided, dense): per tap once the input has ``WIDE_MIN_CHANNELS`` channels and
    each image has ``PER_TAP_MIN_POSITIONS`` output positions, and for unpadded 1x1 windows,
    unless the outputs are few enough for nbxla's own kernel (``takes_native``)."""
    dn = instr.attrs["dim_labels"]
    window = instr.attrs.get("window")
    # (a 1x1 window without padding is one GEMM on the input itself: nothing to gather)
    pointwise = all(instr.operands[1].shape.dims[d] == 1 for d in dn.kernel_spatial) and \
        (window is None or all(w.pad_low == w.pad_high == 0 for w in window.dims))
    wide = instr.operands[0].shape.dims[dn.input_feature] >= WIDE_MIN_CHANNELS
    channels_first = [dn.output_batch, dn.output_feature, *dn.output_spatial] == list(range(len(instr.shape.dims)))
    positions = int(np.prod([instr.shape.dims[d] for d in dn.output_spatial]))
    large = positions >= PER_TAP_MIN_POSITIONS["channels-first" if channels_first else "channels-last"]
    return ((wide and large) or pointwise) and not takes_native(instr)


def takes_native(instr) -> bool:
    """Does the blocked path run ``instr`` with nbxla's own kernel?  Few output features; or
    more, in panels, when the products are short (at most ``NATIVE_PANEL_DEPTH``), where BLAS
    runs below its peak."""
    dn = instr.attrs["dim_labels"]
    k = instr.operands[1].shape.dims
    o = k[dn.kernel_output_feature]
    item = instr.shape.dtype.itemsize
    if small_gemm.element_type(instr.shape.dtype) is None:
        return False
    if instr.attrs.get("feature_group_count", 1) != 1:
        return takes_grouped(instr)
    if (1 << max(0, (o - 1).bit_length())) * item <= NATIVE_GEMM_BYTES:
        return True
    depth = k[dn.kernel_input_feature] * int(np.prod([k[d] for d in dn.kernel_spatial]))
    # (channels-last outputs only: a channels-first one would be transposed block by block,
    # where BLAS's kernel^T @ patches^T writes it in place: 1x1 128 -> 512 on 28x28, NCHW,
    # 1.86 ms in panels against 1.16 ms)
    return dn.output_feature == len(instr.shape.dims) - 1 and depth <= NATIVE_PANEL_DEPTH and depth * o * item < NATIVE_PANEL_KERNEL_BYTES and \
        panel_widths(o, item) is not None


def takes_grouped(instr) -> bool:
    """Does nbxla's kernel take the grouped convolution ``instr`` (f32 / f64)?  Each group's
    output features must fill whole vectors with no rounding up (the kernel's columns of one
    group are read in place): a power of two of at least ``GROUP_MIN_BYTES``, or panels; its
    products at most ``NATIVE_PANEL_DEPTH`` deep, as dense convolutions' panels.  (Fewer
    features per group: the depthwise kernel of ``codegen/convolution.py`` or the im2col
    path.)"""
    dn = instr.attrs["dim_labels"]
    k = instr.operands[1].shape.dims
    groups, item = instr.attrs.get("feature_group_count", 1), instr.shape.dtype.itemsize
    co = k[dn.kernel_output_feature] // groups
    depth = k[dn.kernel_input_feature] * int(np.prod([k[d] for d in dn.kernel_spatial]))
    if depth > NATIVE_PANEL_DEPTH or depth * co * groups * item >= NATIVE_PANEL_KERNEL_BYTES:
        return False
    if co * item > NATIVE_GEMM_BYTES:
        return panel_widths(co, item) is not None
    return co * item >= GROUP_MIN_BYTES and co & (co - 1) == 0


class BlockedConvolution:
    how = "im2col by blocks of output rows + one GEMM per block"

    def __init__(self, instr: Instruction, epilogue=None):
        """``epilogue``: a ``conv_bias_act.BiasActivation`` the native kernel applies to the
        sums (only with it: ``takes_native``)."""
        dn = instr.attrs["dim_labels"]
        x, k = (o.shape.dims for o in instr.operands)
        window = instr.attrs.get("window")
        self.window = window.dims if window is not None else tuple(WindowDim(k[d]) for d in dn.kernel_spatial)
        self.dims, self.dtype = instr.shape.dims, instr.shape.dtype
        # The output's logical dims in (N, H, W, O) order, and back.
        self.nhwc_order = [dn.output_batch, *dn.output_spatial, dn.output_feature]
        self.to_logical = tuple(int(i) for i in np.argsort(self.nhwc_order))
        # Channels-first in and out (JAX's NCHW / OIHW, row-major logical dims): the patches
        # are gathered transposed, straight from the input's layout (see ``_gather``).
        o = k[dn.kernel_output_feature]
        # Few output features: nbxla's own register-blocked GEMM (small_gemm.py), channels-last
        # (it takes rows of at most NATIVE_GEMM_BYTES, the output features of a position).
        # (the kernel's sums are vectors of a power-of-two width: O rounded up, the extra
        # features zero columns of the kernel, computed and dropped; LLVM's code for other
        # widths (20, 48 lanes) ran 10-40x slower)
        self.o_wide = 1 << max(0, (o - 1).bit_length())
        self.native = takes_native(instr)
        # (wider than one panel: panels of the kernel's own columns, nothing rounded up)
        self.panels = ()
        self.groups = instr.attrs.get("feature_group_count", 1)
        if self.groups > 1:
            # (each group's features in place: powers of two or panels, see takes_grouped)
            co = o // self.groups
            self.o_wide = o
            if co * self.dtype.itemsize > NATIVE_GEMM_BYTES:
                self.panels = panel_widths(co, self.dtype.itemsize)
        elif self.native and self.o_wide * self.dtype.itemsize > NATIVE_GEMM_BYTES:
            self.o_wide, self.panels = o, panel_widths(o, self.dtype.itemsize)
        # A channels-first (N, O, OH, OW) output: nbxla's kernel stores into it directly, a
        # feature plane apart, instead of NumPy transposing each block (see patch_gemm).
        self.store_channels_first = self.native and not self.panels and self.groups == 1 and \
            [dn.output_batch, dn.output_feature, *dn.output_spatial] == [0, 1, 2, 3]
        self.channels_first = not self.native and \
            [dn.output_batch, dn.output_feature, *dn.output_spatial] == [0, 1, 2, 3] and \
            [dn.input_batch, dn.input_feature, *dn.input_spatial] == [0, 1, 2, 3]
        if self.channels_first:
            self.input_order = [0, 1, 2, 3]
            self.kernel_order = [dn.kernel_output_feature, dn.kernel_input_feature, *dn.kernel_spatial]
        else:
            self.input_order = [dn.input_batch, *dn.input_spatial, dn.input_feature]
            self.kernel_order = [*dn.kernel_spatial, dn.kernel_input_feature, dn.kernel_output_feature]
        # (no transposing view to make per call where the operand is in order already)
        self.input_in_order = self.input_order == list(range(4))
        self.kernel_in_order = self.kernel_order == list(range(4))
        spatial_pads = [PadDim(w.pad_low, w.pad_high) for w in self.window]
        self.padding = [PadDim(0, 0), PadDim(0, 0), *spatial_pads] if self.channels_first else \
            [PadDim(0, 0), *spatial_pads, PadDim(0, 0)]
        self.pads = any(p != PadDim(0, 0) for p in self.padding)
        # (padding is never negative here: blocked_refusal)
        self.padded_shape = tuple(x[d] + p.low + p.high for d, p in zip(self.input_order, self.padding))
        self.interior = tuple(slice(p.low, p.low + x[d]) for d, p in zip(self.input_order, self.padding))
        self.border = None          # (small inputs: zeros for the whole buffer)
        if int(np.prod(self.padded_shape)) * self.dtype.itemsize >= ZEROS_BYTES:
            self.border = []
            for d, p in enumerate(self.padding):
                head = (slice(None),) * d
                if p.low:
                    self.border.append(head + (slice(0, p.low),))
                if p.high:
                    self.border.append(head + (slice(self.padded_shape[d] - p.high, None),))
        self.reversed = tuple((2 if self.channels_first else 0) + i for i, w in enumerate(self.window) if w.reversal)
        self.n, self.oh, self.ow, self.o = (self.dims[d] for d in self.nhwc_order)
        self.kh, self.kw = (k[d] for d in dn.kernel_spatial)
        self.c = x[dn.input_feature]
        self.depth = self.kh * self.kw * self.c // self.groups
        row_bytes = self.ow * self.depth * self.dtype.itemsize
        self.rows = min(self.oh, max(PATCH_BYTES // max(row_bytes, 1), -(-MIN_POSITIONS // self.ow), 1))
        # Small images: several whole images per block (fewer, larger GEMMs; fewer calls).
        self.images = 1
        if self.rows == self.oh:
            image_bytes = max(row_bytes * self.oh, 1)
            self.images = min(self.n, max(1, PATCH_BYTES // image_bytes, -(-MIN_POSITIONS // (self.ow * self.oh))))
        self.gemm = None
        self.fixed_kernel = None            # (see fix_kernel)
        self.units = self.most = None       # (the blocks, made on the first call)
        # Channels-last output: the kernel writes each block straight into its (contiguous)
        # rows of the output, no block copy (7x7 3 -> 64 on 224x224, stride 2: the copy was
        # ~10% of the convolution); with the features rounded up, only the real ones
        # (``PatchGemm.stored``: SSD's 1x1 heads of 12 and 15 features, 9.9 -> 7.5 us a call).
        self.direct = self.native and list(self.nhwc_order) == [0, 1, 2, 3]
        # BLAS, channels-last output in (N, H, W, O) order: each block's GEMM writes its rows
        # of the output (contiguous: whole output rows) itself, no result block and copy.
        self.blas_direct = not self.native and not self.channels_first and list(self.nhwc_order) == [0, 1, 2, 3]
        self.how = f"{BlockedConvolution.how}, by {'nbxla' if self.native else 'BLAS'}"
        if epilogue is not None and not self.native:
            raise ValueError(f"an epilogue needs nbxla's kernel, which does not take %{instr.name}")
        self.has_bias = epilogue is not None and epilogue.has_bias
        if self.native:
            padded = [x[d] + p.low + p.high for d, p in zip(self.input_order, self.padding)]
            self.gemm = small_gemm.PatchGemmKernel(small_gemm.PatchGemm(
                small_gemm.element_type(self.dtype), self.n, padded[1], padded[2], self.c, self.kh, self.kw,
                self.oh, self.ow, self.o_wide, tuple(w.stride for w in self.window),
                tuple(w.window_dilation for w in self.window), self.panels,
                o if self.store_channels_first else 0, self.has_bias,
                None if epilogue is None else epilogue.lower, None if epilogue is None else epilogue.upper,
                epilogue is not None and epilogue.bf16, o if self.direct and self.o_wide != o else 0, self.groups))

    def blocks(self) -> list[tuple[int, int, int, int]]:
        """The blocks of the output: (first image, images, first row, rows)."""
        if self.images > 1 or self.rows == self.oh:
            return [(n, min(self.images, self.n - n), 0, self.oh) for n in range(0, self.n, self.images)]
        return [(n, 1, h, min(self.rows, self.oh - h)) for n in range(self.n) for h in range(0, self.oh, self.rows)]

    def thread_blocks(self) -> list[tuple[int, int, int, int]] | None:
        """BLAS, channels-last output in place, fewer blocks than threads (one small image):
        the blocks cut by images, then by output rows, into one per thread (None: not so
        cut).  Each thread then gathers its own patches and writes its rows of the output
        itself; cut by output features instead (``_split_by_features``), the gather and the
        copy into the output ran on the calling thread alone (3x3 256 -> 256 on 14x14: 0.07
        and 0.005 of the ~1.1 ms each thread took)."""
        threads = worker_count()
        blocks = self.blocks()
        if self.native or not self.blas_direct or len(blocks) >= threads:
            return None
        if self.n >= threads:                          # whole images, as evenly as they go
            bounds = [self.n * i // threads for i in range(threads + 1)]
            return [(a, b - a, 0, self.oh) for a, b in zip(bounds, bounds[1:])]
        runs = -(-threads // self.n)                   # runs of rows, within one image each
        if runs > self.oh:
            return None
        bounds = [self.oh * i // runs for i in range(runs + 1)]
        return [(n, 1, a, b - a) for n in range(self.n) for a, b in zip(bounds, bounds[1:])]

    def kernel_matrix(self, kernel: np.ndarray) -> np.ndarray:
        """The kernel operand as the GEMM's matrix: channels-first (O, C * KH * KW),
        channels-last (KH * KW * C, O) -- for nbxla's kernel with O rounded up (zero columns)."""
        k = kernel if self.kernel_in_order else np.transpose(kernel, self.kernel_order)
        if self.reversed:
            k = np.flip(k, self.reversed)
        if self.native and self.o_wide != self.o:
            # (zero columns; the kernel copied (and widened) into the rest in one step)
            wide = np.zeros(k.shape[:-1] + (self.o_wide,), self.dtype)
            wide[..., :self.o] = k
            return wide.reshape(self.depth, self.o_wide)
        k = np.ascontiguousarray(k, self.dtype)
        return k.reshape(self.o, self.depth) if self.channels_first else k.reshape(self.depth, self.o)

    def fix_kernel(self, kernel: np.ndarray) -> None:
        """Make the kernel matrix once from a constant kernel operand (a frozen model's
        weights), which every call then uses instead of its own operand: bf16 weights were
        widened, rounded-up ones copied, on every call."""
        self.fixed_kernel = self.kernel_matrix(kernel)

    def __call__(self, operands: list[np.ndarray], bias: np.ndarray | None = None) -> np.ndarray:
        """The convolution of ``operands`` (input, kernel); ``bias``: the epilogue's, when it
        has one (O features)."""
        # (operands of a narrower type, bf16, are widened by the same copies)
        x = operands[0] if self.input_in_order else np.transpose(operands[0], self.input_order)
        if self.pads:
            # (one copy into the interior of fresh memory, only the borders zeroed -- the whole
            # buffer zeroed while small: measured 0.7 us on 8x8x32 and 24 us on 56x56x64
            # against pad_array's 7 and 49 us)
            if self.border is None:
                padded = np.zeros(self.padded_shape, self.dtype)
            else:
                padded = np.empty(self.padded_shape, self.dtype)
                for region in self.border:
                    padded[region] = 0
            padded[self.interior] = x
            x = padded
        else:
            x = np.ascontiguousarray(x, self.dtype)
        kmat = self.fixed_kernel if self.fixed_kernel is not None else self.kernel_matrix(operands[1])
        if self.has_bias:
            # (the kernel reads o_wide features: the padded ones' bias is 0, and they are dropped)
            bias = np.ascontiguousarray(bias, self.dtype)
            if self.native and self.o_wide != self.o:
                bias = np.concatenate([bias, np.zeros(self.o_wide - self.o, self.dtype)])
        out = np.empty(self.dims, self.dtype)
        ow, o, depth = self.ow, self.o, self.depth
        work = self.n * self.oh * ow * depth * o
        if self.units is None:       # (made once: a small convolution's call is mostly such overhead)
            cut = self.thread_blocks()
            self.units = cut if cut is not None and work >= conv_gemm.SPLIT_WORK else self.blocks()
            self.most = max(i * h for _, i, _, h in self.units) * ow
        units, most, native = self.units, self.most, self.gemm
        nhwc, to_logical, cf = self.nhwc_order, self.to_logical, self.channels_first
        direct, store_cf, blas_direct = self.direct, self.store_channels_first, self.blas_direct
        out_rows = out.reshape(-1, o) if blas_direct else None

        def run(_, begin, end):
            patches = None if native is not None else np.empty(most * depth, self.dtype)
            result = None if direct or store_cf or blas_direct else \
                np.empty(most * (self.o_wide if native is not None else o), self.dtype)
            for n, images, h0, h in units[begin:end]:
                rows = images * h * ow
                if native is not None:
                    # (patches read in place by nbxla's kernel: output rows n * OH + h0 on)
                    first = n * self.oh + h0
                    if direct:
                        native(x, kmat, out[n:n + images, h0:h0 + h], first, first + images * h, bias)
                        continue
                    if store_cf:
                        native(x, kmat, out, first, first + images * h, bias)
                        continue
                    r = result[:rows * self.o_wide]
                    native(x, kmat, r, first, first + images * h, bias)
                    values = r.reshape(images, h, ow, self.o_wide)[..., :o]
                    region = [slice(None)] * 4
                    region[nhwc[0]], region[nhwc[1]] = slice(n, n + images), slice(h0, h0 + h)
                    np.copyto(out[tuple(region)], values.transpose(to_logical))
                    continue
                view = self._gather(x, n, images, h0, h)
                p = patches[:rows * depth]
                np.copyto(p.reshape(view.shape), view)
                if cf:
                    r = result[:rows * o].reshape(o, rows)
                    gemm(kmat, p.reshape(depth, rows), r, False)
                    values = r.reshape(o, images, h, ow).transpose(1, 2, 3, 0)
                elif blas_direct:
                    first = (n * self.oh + h0) * ow
                    np.matmul(p.reshape(rows, depth), kmat, out=out_rows[first:first + rows])
                    continue
                else:
                    r = result[:rows * o].reshape(rows, o)
                    np.matmul(p.reshape(rows, depth), kmat, out=r)
                    values = r.reshape(images, h, ow, o)
                region = [slice(None)] * 4
                region[nhwc[0]], region[nhwc[1]] = slice(n, n + images), slice(h0, h0 + h)
                np.copyto(out[tuple(region)], values.transpose(to_logical))
        if native is not None and (direct or store_cf) and work >= conv_gemm.SPLIT_WORK and \
                worker_count() > 1:
            self._split_rows(x, kmat, out, bias)
        elif native is not None and (work < conv_gemm.SPLIT_WORK or len(units) < 2):
            run(None, 0, len(units))       # (no BLAS call to keep on one thread: a small one runs here)
        elif native is None and len(units) < worker_count() and work >= conv_gemm.SPLIT_WORK:
            self._split_by_features(x, kmat, out, work)
        else:
            run_on_one_blas_thread(run, len(units), work)
        return out

    def _split_rows(self, x: np.ndarray, kmat: np.ndarray, out: np.ndarray, bias) -> None:
        """nbxla's kernel over runs of output rows (of all images, ``n * OH`` in all), shared by
        the pool: the kernel reads the input in place and writes each run straight into the
        output, so a run may be any length -- unlike the patch blocks of ``blocks``, sized for
        BLAS, of which one small image makes one (3x3 128 -> 128 on 28x28, stride 2: its 14
        output rows ran on one thread, 0.86x JAX's time with two)."""
        rows_total = self.n * self.oh
        # (runs of at least SPLIT_MIN_POSITIONS positions -- each call re-reads its kernel
        # panel -- as even as whole rows make them: 14 rows in runs of 5 left one thread 10)
        runs = max(1, min(SPLIT_RUNS_PER_THREAD * worker_count(), rows_total,
                          rows_total * self.ow // SPLIT_MIN_POSITIONS))
        bounds = [rows_total * i // runs for i in range(runs + 1)]
        native = self.gemm
        if self.direct:
            flat = out.reshape(rows_total, self.ow, self.o)

            def run(_, begin, end):
                lo, hi = bounds[begin], bounds[end]
                native(x, kmat, flat[lo:hi], lo, hi, bias)
        else:
            def run(_, begin, end):
                native(x, kmat, out, bounds[begin], bounds[end], bias)
        run_split(run, None, runs)

    def _split_by_features(self, x: np.ndarray, kmat: np.ndarray, out: np.ndarray, work: int) -> None:
        """BLAS with fewer blocks than threads (one small image: 3x3 256 -> 256 on 14x14 is one
        block): each block's patches gathered here, its GEMM split by output features over the
        pool, so that every thread has a share (the block whole ran on one thread, 0.73x JAX's
        time with two)."""
        o, depth, ow, cf = self.o, self.depth, self.ow, self.channels_first
        lanes = max(1, 64 // self.dtype.itemsize)       # (pieces of whole vectors of features)
        width = -(-(-(-o // worker_count())) // lanes) * lanes
        blocks = []
        for n, images, h0, h in self.units:
            rows = images * h * ow
            p = np.ascontiguousarray(self._gather(x, n, images, h0, h))
            blocks.append((p.reshape(depth, rows) if cf else p.reshape(rows, depth),
                           np.empty((o, rows) if cf else (rows, o), self.dtype)))
        pieces = [(p, r, lo, min(o, lo + width)) for p, r in blocks for lo in range(0, o, width)]

        def run(_, begin, end):
            for p, r, lo, hi in pieces[begin:end]:
                if cf:
                    gemm(kmat[lo:hi], p, r[lo:hi], False)
                else:
                    gemm(p, kmat[:, lo:hi], r[:, lo:hi], False)
        run_on_one_blas_thread(run, len(pieces), work)
        for (n, images, h0, h), (_, r) in zip(self.units, blocks):
            values = r.reshape(o, images, h, ow).transpose(1, 2, 3, 0) if cf else r.reshape(images, h, ow, o)
            region = [slice(None)] * 4
            region[self.nhwc_order[0]], region[self.nhwc_order[1]] = slice(n, n + images), slice(h0, h0 + h)
            np.copyto(out[tuple(region)], values.transpose(self.to_logical))

    def _gather(self, x: np.ndarray, n: int, images: int, h0: int, h: int) -> np.ndarray:
        """The patches of output rows [h0, h0 + h) of images [n, n + images), as a strided view
        of the padded input whose row-major order is the patch matrix's: channels-last
        (images, h, OW, KH, KW * C), the runs of KW * C contiguous; channels-first (C, KH, KW,
        images, h, OW), patches transposed (taps by positions), the runs of OW contiguous when
        unstrided."""
        (sh, sw), (dh, dw) = ((w.stride for w in self.window), (w.window_dilation for w in self.window))
        # (byte strides of the contiguous padded input from its shape: NumPy may give a dim of
        # size 1 any stride)
        item = x.itemsize
        # (math.prod: np.prod of a tuple costs several microseconds, on every block)
        step_n, step_1, step_2, step_3 = (math.prod(x.shape[d + 1:]) * item for d in range(4))
        offset = n * step_n
        if self.channels_first:
            step_c, step_h, step_w = step_1, step_2, step_3
            shape = (self.c, self.kh, self.kw, images, h, self.ow)
            strides = (step_c, dh * step_h, dw * step_w, step_n, sh * step_h, sw * step_w)
        else:
            step_h, step_w = step_1, step_2
            if dw == 1:
                shape = (images, h, self.ow, self.kh, self.kw * self.c)
                strides = (step_n, sh * step_h, sw * step_w, dh * step_h, item)
            else:
                shape = (images, h, self.ow, self.kh, self.kw, self.c)
                strides = (step_n, sh * step_h, sw * step_w, dh * step_h, dw * step_w, item)
        # (an ndarray over the padded input's buffer: as_strided costs several times more)
        return np.ndarray(shape, x.dtype, buffer=x, offset=offset + h0 * sh * step_h, strides=strides)
