"""The implicit-im2col GEMM kernel of dense 2-D convolutions with few output features
(``runtime/conv_blocks.py``): ``out[p, :] = sum_k patch(p, k) * kernel[k, :]`` where the patch
element is read from the padded channels-last input in place, never gathered.

Buffers: the padded input ``(N, Hp, Wp, C)``, the kernel ``(KH * KW * C, O)`` (HWIO order),
and an output block ``(rows, OW, O)`` -- or, for a channels-first output, the whole output
``(N, O, OH, OW)``, each sum stored a feature plane apart.  The parallel range is the output rows of the whole
convolution (``n * OH + oh``); a call on ``[begin, end)`` writes output row ``u`` at row
``u - begin`` of the block, so that the runtime computes any run of rows into a block of its
own.

Register blocking, as the dot kernel's (``dot_kernels.py``): ``R`` neighbouring output
positions of one row, their ``O`` sums each one vector value; per kernel row ``k``, one
vector load of the kernel row, and per position a broadcast input element and a vector
fused multiply-add.  More output features than the registers hold (``O`` above
``WIDEST_ROW_BYTES``) are computed in panels (``PatchGemm.panels``: widths of powers of two,
64, 32 and 16 f32 features with AVX-512), one after the other for each block of positions:
the panel's kernel columns are a strided part of each kernel row, its sums a part of each
output row.  The input elements of a window row are contiguous (``KW * C`` of them
without window dilation), so the loop over them is one counted loop; with window dilation,
a loop over the window's columns and one over the channels.

**Epilogue.**  A bias per output feature and a clamp (relu: ``[0, inf)``, relu6: ``[0, 6]``)
can be applied to each block's sums in registers before they are stored (``PatchGemm.bias``,
``lower``, ``upper``; the runtime recognizes them in the fusion consuming the convolution,
``runtime/conv_bias_act.py``): without them a separate kernel reads and writes the whole
output again (7x7 3 -> 64 on 224x224, stride 2: 0.39 of 2.26 ms).  The bias is a fourth
buffer of ``o`` features.  The clamp propagates NaN as HLO's maximum and minimum do.

**Feature groups** (``PatchGemm.groups``, a grouped convolution with too many input features
per group for ``convolution.py``'s kernel: ResNeXt's 32 per group): a loop over the groups
around the panels, each group reading its own run of input channels in every window column
and its own columns of the HWIO kernel, storing its own features of each output row.  One
call computes all groups of a range of rows, where the BLAS path made ``groups x taps`` tiny
GEMM calls (K = N = 32 features) per block.
"""

from __future__ import annotations

from dataclasses import dataclass

import llvmlite.binding as llvm
from llvmlite import ir

from .elemental import const_i64
from .toolkit import counted_loop, entry_alloca, kernel_function, KernelBuffers, KernelSpec
from ..hlo.shapes import Shape

# Vector registers (of 64 bytes) the accumulators of one block of positions may take: with
# AVX-512's 32 registers, 24 (the rest hold the kernel row and a broadcast); else 12 (of
# AVX2's 16 registers of 32 bytes: 6 of 64 bytes, rounded up for the halves LLVM splits).
_AVX512 = bool(llvm.get_host_cpu_features().get("avx512f", False))
REGISTERS = 24 if _AVX512 else 12
# Widest row of output features (bytes) the kernel is worth using for (see conv_blocks):
# measured with AVX-512, 64 f32 features (3x3 convolutions of 64 to 128 input channels) ran
# 1.3-3x faster than BLAS on gathered patches, mostly; without it, half the registers.
WIDEST_ROW_BYTES = 256 if _AVX512 else 128
# Products per window row (KW * C) up to which the kernel's innermost loop is written out
# unrolled (see ``short_loop``).
SHORT_LOOP = 8


@dataclass(frozen=True)
class PatchGemm:
    """The geometry of one convolution (all extents of the padded input and the output)."""
    t: str                  # f32 or f64
    n: int
    hp: int
    wp: int
    c: int
    kh: int
    kw: int
    oh: int
    ow: int
    o: int                          # output features (the kernel's and the output's row length)
    stride: tuple[int, int]
    dilation: tuple[int, int]
    panels: tuple[int, ...] = ()    # widths of the panels of output features (none: one of o)
    # Channels-first output: the number of real output features, stored lane by lane straight
    # into the whole (N, features, OH, OW) output (0: the (rows, OW, o) block of the range)
    channels_first: int = 0
    bias: bool = False              # add the 4th buffer (o features) to every position's sums
    lower: float | None = None      # then clamp them to [lower, upper] (None: unbounded)
    upper: float | None = None
    # bf16 convolutions' epilogue: the sum rounded to bf16 (the convolution's own result), then
    # the bias sum rounded again (a bf16 add), as the evaluator and XLA:CPU compute them
    bf16_steps: bool = False
    # Channels-last output of fewer features than ``o`` (the kernel's columns rounded up to a
    # power of two): each position's first ``stored`` sums stored lane by lane, the output
    # (rows, OW, stored) written in place (0: all ``o``)
    stored: int = 0
    # Feature groups: group ``k`` reads input channels [k * c / groups, (k + 1) * c / groups)
    # and computes output features [k * o / groups, ...) with the kernel's columns of the same
    # range (the kernel is HWIO's (KH * KW * c / groups, o)); ``panels`` then split one group's
    # features.  (Only channels-last block outputs of all features, without an epilogue.)
    groups: int = 1
    # Elements from one image's kernel matrix to the next (batched dots, runtime/native_dots.py:
    # image ``i`` multiplies by the kernel at ``i * kernel_step``); 0: one kernel for all images
    kernel_step: int = 0

    @property
    def group_inputs(self) -> int:
        return self.c // self.groups

    @property
    def group_outputs(self) -> int:
        return self.o // self.groups

    @property
    def out_row(self) -> int:
        return self.stored or self.o

    @property
    def itemsize(self) -> int:
        return 4 if self.t == "f32" else 8

    def panel_widths(self) -> tuple[int, ...]:
        return self.panels or (self.group_outputs,)

    def block_positions(self, width: int | None = None) -> int:
        registers = max(1, -(-(width or self.o) * self.itemsize // 64))
        return max(1, min(12, REGISTERS // registers, self.ow))


def panel_widths(o: int, itemsize: int) -> tuple[int, ...] | None:
    """Panels for ``o`` output features wider than ``WIDEST_ROW_BYTES``: the widest power-of-two
    panels that fit, down to one 64-byte vector; None when ``o`` is no multiple of a vector."""
    lanes, widest = 64 // itemsize, WIDEST_ROW_BYTES // itemsize
    if o % lanes:
        return None
    out, left, width = [], o, widest
    while left:
        while width > left:
            width //= 2
        out.append(width)
        left -= width
    return tuple(out)


def emit_patch_gemm(module: ir.Module, name: str, g: PatchGemm) -> KernelSpec:
    fn, b = kernel_function(module, name)
    elem = ir.FloatType() if g.t == "f32" else ir.DoubleType()
    out_shape = (g.n, g.channels_first, g.oh, g.ow) if g.channels_first else (g.n * g.oh, g.ow, g.out_row)
    ci = g.group_inputs
    kernels = g.n if g.kernel_step else 1
    shapes = [Shape(g.t, (g.n, g.hp, g.wp, g.c)), Shape(g.t, (kernels * g.kh * g.kw * ci, g.o)), Shape(g.t, out_shape)]
    if g.bias:
        shapes.append(Shape(g.t, (g.o,)))
    bufs = KernelBuffers(b, fn.args[0], shapes)
    x, w, out = bufs.ptrs[:3]
    row_step, image_step = g.wp * g.c, g.hp * g.wp * g.c
    (sh, sw), (dh, dw) = g.stride, g.dilation
    begin = fn.args[1]
    vec = accumulators = zero = undef = lanes0 = fmuladd = None
    if g.groups > 1 and (g.bias or g.channels_first or g.stored or g.bf16_steps):
        raise ValueError("the patch-GEMM kernel stores grouped convolutions channels-last, "
                         "all features, without an epilogue")
    first_feature = 0           # the current panel's first output feature (within its group)
    # the current group's first input channel and output feature (values of the group loop;
    # None without groups, so that a dense kernel's code is what it was before groups)
    first_channel = group_feature = None
    kernel_first = None         # the current image's kernel matrix (elements; with kernel_step)
    by_width = {}               # panel width -> (vector type, accumulators, zero, undef, lanes0, fmuladd)

    def use_panel(width: int, first: int):
        nonlocal vec, accumulators, zero, undef, lanes0, fmuladd, first_feature
        if width not in by_width:
            v = ir.VectorType(elem, width)
            fname = f"llvm.fmuladd.v{width}{g.t}"
            by_width[width] = (v, [entry_alloca(b, v) for _ in range(g.block_positions(width))],
                               ir.Constant(v, [ir.Constant(elem, 0.0)] * width), ir.Constant(v, ir.Undefined),
                               ir.Constant(ir.VectorType(ir.IntType(32), width), [0] * width),
                               module.globals.get(fname) or ir.Function(module, ir.FunctionType(v, [v] * 3), fname))
        vec, accumulators, zero, undef, lanes0, fmuladd = by_width[width]
        first_feature = first

    def stepping_loop(count: int, name: str, pointers: list, steps: list[int], body):
        """``body(p)`` ``count`` (>= 1) times, each pointer of ``p`` advanced by its step (in
        elements) after every iteration: the loop's address arithmetic strength-reduced as
        emitted, so that LLVM's code generator needs no loop strength reduction (it runs
        without, as for every kernel: codegen/cpu.py's ``machine_code``)."""
        pre = b.block
        loop = b.append_basic_block(f"{name}.body")
        after = b.append_basic_block(f"{name}.end")
        b.branch(loop)
        b.position_at_end(loop)
        left = b.phi(ir.IntType(64), name)
        left.add_incoming(const_i64(count), pre)
        phis = []
        for p in pointers:
            phi = b.phi(p.type)
            phi.add_incoming(p, pre)
            phis.append(phi)
        body(phis)
        latch = b.block
        left_next = b.sub(left, const_i64(1))
        left.add_incoming(left_next, latch)
        for phi, step in zip(phis, steps):
            phi.add_incoming(b.gep(phi, [const_i64(step)]), latch)
        b.cbranch(b.icmp_unsigned("!=", left_next, const_i64(0)), loop, after)
        b.position_at_end(after)

    def short_loop(count: int, name: str, xp, wp):
        """The innermost loop over a window row's products (from input element ``xp`` and kernel
        row ``wp`` on, one element and one kernel row a step): unrolled here when it is short.
        (The kernel is compiled without LLVM's unroller and vectorizers, which only rebuilt
        this hand-vectorized code at 2-4x its compile time; the one thing the unroller won was a
        short loop's overhead: LeNet's 5x5 window of 1 channel ran 14% slower as a loop.)"""
        if count <= SHORT_LOOP:
            for k in range(count):
                multiply_add(b.gep(xp, [const_i64(k)]) if k else xp, b.gep(wp, [const_i64(k * g.o)]) if k else wp)
        else:
            stepping_loop(count, name, [xp, wp], [1, g.o], lambda p: multiply_add(*p))

    def splat(v):
        return b.shuffle_vector(b.insert_element(undef, v, ir.Constant(ir.IntType(32), 0)), undef, lanes0)

    def in_group(feature):
        """A feature of the current group (``feature`` within it)."""
        return feature if group_feature is None else b.add(group_feature, feature)

    firsts: list[int] = []          # the current block's positions' input offsets (elements)

    def multiply_add(xp, wp):
        """Every position's sums += its input element (``xp`` + its offset) * kernel row ``wp``."""
        y = b.load(b.bitcast(wp, vec.as_pointer()), align=g.itemsize)
        for r, offset in enumerate(firsts):
            xv = b.load(b.gep(xp, [const_i64(offset)]) if offset else xp)
            b.store(b.call(fmuladd, [splat(xv), y, b.load(accumulators[r])]), accumulators[r])

    def masked_store():
        name = f"llvm.masked.store.v{vec.count}{g.t}.p0"
        return module.globals.get(name) or ir.Function(module, ir.FunctionType(
            ir.VoidType(), [vec, vec.as_pointer(), ir.IntType(32), ir.VectorType(ir.IntType(1), vec.count)]), name)

    bias_vectors = {}

    def bias_vector():
        """The current panel's bias, loaded once in the entry block.  (Loaded where it is added,
        after the previous position's scalar stores to a channels-first output, it cost ~80 ns
        a position: 7x7 3 -> 64 on 224x224, NCHW, 2.6 ms against 1.7 without the bias.)"""
        key = (vec.count, first_feature)
        if key not in bias_vectors:
            with b.goto_block(bufs.entry):
                at = b.bitcast(b.gep(bufs.ptrs[3], [const_i64(first_feature)]), vec.as_pointer())
                bias_vectors[key] = b.load(at, align=g.itemsize)
        return bias_vectors[key]

    def finished(total):
        """A position's sums with the epilogue applied (see the module's docstring)."""
        if g.bf16_steps:
            total = _round_to_bf16(b, total)
        if g.bias:
            total = b.fadd(total, bias_vector())
            if g.bf16_steps:
                total = _round_to_bf16(b, total)
        for bound, keeps in ((g.lower, ">"), (g.upper, "<")):
            if bound is not None:
                limit = ir.Constant(vec, [ir.Constant(elem, bound)] * vec.count)
                # (unordered-or-greater: a NaN sum stays NaN, as HLO's maximum gives)
                b_keep = b.fcmp_unordered(keeps, total, limit)
                total = b.select(b_keep, total, limit)
        return total

    def positions(x_row, out_row, ow0, count: int):
        """Output positions [ow0, ow0 + count) of the row whose window starts at ``x_row``."""
        for a in accumulators[:count]:
            b.store(zero, a)
        # (each position's input element a constant offset from the first one's)
        firsts[:] = [r * sw * g.c for r in range(count)]
        x_first = b.add(x_row, b.mul(ow0, const_i64(sw * g.c)))
        x0 = b.gep(x, [x_first if first_channel is None else b.add(x_first, first_channel)])
        w0 = b.gep(w, [in_group(const_i64(first_feature))])
        if kernel_first is not None:
            w0 = b.gep(w0, [kernel_first])

        def window_row(p):
            xp, wp = p
            if dw == 1 and g.groups == 1:
                short_loop(g.kw * g.c, "pg.j", xp, wp)
                return
            # (a group's channels of a window column are contiguous, the columns C apart)
            stepping_loop(g.kw, "pg.kw", [xp, wp], [dw * g.c, ci * g.o], lambda q: short_loop(ci, "pg.c", *q))
        stepping_loop(g.kh, "pg.kh", [x0, w0], [dh * row_step, g.kw * ci * g.o], window_row)
        for r in range(count):
            if g.channels_first:
                # (one scalar store per real feature, a plane apart: cheaper than NumPy's
                # transposing copy of the block afterwards, LeNet's 5x5 1 -> 32 on 28x28)
                position = b.add(out_row, b.add(ow0, const_i64(r)))
                total = finished(b.load(accumulators[r]))
                for j in range(min(vec.count, g.channels_first - first_feature)):
                    at = b.add(position, const_i64((first_feature + j) * g.oh * g.ow))
                    b.store(b.extract_element(total, ir.Constant(ir.IntType(32), j)), b.gep(out, [at]))
                continue
            at = b.add(out_row, b.add(b.mul(b.add(ow0, const_i64(r)), const_i64(g.out_row)),
                                      in_group(const_i64(first_feature))))
            if g.out_row < first_feature + vec.count:
                # (the real features only, one masked store: beats NumPy's copy of a padded block
                # afterwards, SSD's 1x1 box head of 12 features; and a store per feature made
                # LeNet-5's first kernel's IR 40% larger, its compile time with it)
                real = g.out_row - first_feature
                mask = ir.Constant(ir.VectorType(ir.IntType(1), vec.count), [int(j < real) for j in range(vec.count)])
                b.call(masked_store(), [finished(b.load(accumulators[r])),
                                        b.bitcast(b.gep(out, [at]), vec.as_pointer()),
                                        ir.Constant(ir.IntType(32), g.itemsize), mask])
                continue
            b.store(finished(b.load(accumulators[r])), b.bitcast(b.gep(out, [at]), vec.as_pointer()),
                    align=g.itemsize)

    def unit(u):
        nonlocal kernel_first
        image, oh = b.udiv(u, const_i64(g.oh)), b.urem(u, const_i64(g.oh))
        if g.kernel_step:
            kernel_first = b.mul(image, const_i64(g.kernel_step))
        x_row = b.add(b.mul(image, const_i64(image_step)), b.mul(oh, const_i64(sh * row_step)))
        if g.channels_first:        # (image, 0, oh, 0) of the whole output
            out_row = b.add(b.mul(image, const_i64(g.channels_first * g.oh * g.ow)), b.mul(oh, const_i64(g.ow)))
        else:
            out_row = b.mul(b.sub(u, begin), const_i64(g.ow * g.out_row))

        def panels():
            first = 0
            for width in g.panel_widths():
                use_panel(width, first)
                first += width
                r_max = g.block_positions(width)
                full = g.ow // r_max
                counted_loop(b, const_i64(0), const_i64(full * r_max), "pg.ow",
                             lambda ow0: positions(x_row, out_row, ow0, r_max), step=const_i64(r_max))
                if g.ow % r_max:
                    # (the rest of the row as one narrower block: one position at a time would
                    # wait on each sum's previous multiply-add)
                    positions(x_row, out_row, const_i64(full * r_max), g.ow % r_max)
        if g.groups == 1:
            panels()
            return

        def group(k):
            nonlocal first_channel, group_feature
            first_channel, group_feature = b.mul(k, const_i64(ci)), b.mul(k, const_i64(g.group_outputs))
            panels()
        counted_loop(b, const_i64(0), const_i64(g.groups), "pg.group", group)

    counted_loop(b, fn.args[1], fn.args[2], "pg.row", unit)
    b.ret_void()
    return KernelSpec(name, "patch-gemm", g.n * g.oh, g.ow * g.kh * g.kw * ci * g.o)


def _round_to_bf16(b: ir.IRBuilder, v):
    """A vector of f32 rounded to the nearest bf16 values (ties to even), still f32; NaN the
    quiet NaN of its sign (codegen/bf16.round_to_bf16, lane by lane)."""
    lanes = v.type.count
    i32 = ir.VectorType(ir.IntType(32), lanes)

    def splat(value):
        return ir.Constant(i32, [ir.Constant(ir.IntType(32), value)] * lanes)
    bits = b.bitcast(v, i32)
    odd = b.and_(b.lshr(bits, splat(16)), splat(1))
    rounded = b.and_(b.add(b.add(bits, splat(0x7FFF)), odd), splat(0xFFFF0000))
    quiet_nan = b.or_(b.and_(bits, splat(0x80000000)), splat(0x7FC00000))
    return b.bitcast(b.select(b.fcmp_unordered("uno", v, v), quiet_nan, rounded), v.type)
