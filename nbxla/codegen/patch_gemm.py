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

    @property
    def itemsize(self) -> int:
        return 4 if self.t == "f32" else 8

    def panel_widths(self) -> tuple[int, ...]:
        return self.panels or (self.o,)

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
    out_shape = (g.n, g.channels_first, g.oh, g.ow) if g.channels_first else (g.n * g.oh, g.ow, g.o)
    shapes = [Shape(g.t, (g.n, g.hp, g.wp, g.c)), Shape(g.t, (g.kh * g.kw * g.c, g.o)), Shape(g.t, out_shape)]
    bufs = KernelBuffers(b, fn.args[0], shapes)
    x, w, out = bufs.ptrs
    row_step, image_step = g.wp * g.c, g.hp * g.wp * g.c
    (sh, sw), (dh, dw) = g.stride, g.dilation
    begin = fn.args[1]
    vec = accumulators = zero = undef = lanes0 = fmuladd = None
    first_feature = 0           # the current panel's first output feature
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

    def short_loop(count: int, name: str, body):
        """The innermost loop over a window row's products: unrolled here when it is short.
        (The kernel is compiled without LLVM's unroller and vectorizers, which only rebuilt
        this hand-vectorized code at 2-4x its compile time; the one thing the unroller won was a
        short loop's overhead: LeNet's 5x5 window of 1 channel ran 14% slower as a loop.)"""
        if count <= SHORT_LOOP:
            for k in range(count):
                body(const_i64(k))
        else:
            counted_loop(b, const_i64(0), const_i64(count), name, body)

    def splat(v):
        return b.shuffle_vector(b.insert_element(undef, v, ir.Constant(ir.IntType(32), 0)), undef, lanes0)

    def kernel_row(k):
        at = b.add(b.mul(k, const_i64(g.o)), const_i64(first_feature))
        return b.load(b.bitcast(b.gep(w, [at]), vec.as_pointer()), align=g.itemsize)

    def positions(x_row, out_row, ow0, count: int):
        """Output positions [ow0, ow0 + count) of the row whose window starts at ``x_row``."""
        for a in accumulators[:count]:
            b.store(zero, a)
        firsts = [b.add(x_row, b.mul(b.add(ow0, const_i64(r)), const_i64(sw * g.c))) for r in range(count)]

        def multiply_add(x_offset, k):
            y = kernel_row(k)
            for r in range(count):
                xv = b.load(b.gep(x, [b.add(firsts[r], x_offset)]))
                b.store(b.call(fmuladd, [splat(xv), y, b.load(accumulators[r])]), accumulators[r])

        def window_row(i):
            x_i = b.mul(i, const_i64(dh * row_step))
            k_i = b.mul(i, const_i64(g.kw * g.c))
            if dw == 1:
                short_loop(g.kw * g.c, "pg.j", lambda j: multiply_add(b.add(x_i, j), b.add(k_i, j)))
                return

            def window_column(jw):
                x_j = b.add(x_i, b.mul(jw, const_i64(dw * g.c)))
                k_j = b.add(k_i, b.mul(jw, const_i64(g.c)))
                short_loop(g.c, "pg.c", lambda c: multiply_add(b.add(x_j, c), b.add(k_j, c)))
            counted_loop(b, const_i64(0), const_i64(g.kw), "pg.kw", window_column)
        counted_loop(b, const_i64(0), const_i64(g.kh), "pg.kh", window_row)
        for r in range(count):
            if g.channels_first:
                # (one scalar store per real feature, a plane apart: cheaper than NumPy's
                # transposing copy of the block afterwards, LeNet's 5x5 1 -> 32 on 28x28)
                position = b.add(out_row, b.add(ow0, const_i64(r)))
                total = b.load(accumulators[r])
                for j in range(min(vec.count, g.channels_first - first_feature)):
                    at = b.add(position, const_i64((first_feature + j) * g.oh * g.ow))
                    b.store(b.extract_element(total, ir.Constant(ir.IntType(32), j)), b.gep(out, [at]))
                continue
            at = b.add(out_row, b.add(b.mul(b.add(ow0, const_i64(r)), const_i64(g.o)), const_i64(first_feature)))
            b.store(b.load(accumulators[r]), b.bitcast(b.gep(out, [at]), vec.as_pointer()), align=g.itemsize)

    def unit(u):
        image, oh = b.udiv(u, const_i64(g.oh)), b.urem(u, const_i64(g.oh))
        x_row = b.add(b.mul(image, const_i64(image_step)), b.mul(oh, const_i64(sh * row_step)))
        if g.channels_first:        # (image, 0, oh, 0) of the whole output
            out_row = b.add(b.mul(image, const_i64(g.channels_first * g.oh * g.ow)), b.mul(oh, const_i64(g.ow)))
        else:
            out_row = b.mul(b.sub(u, begin), const_i64(g.ow * g.o))
        first = 0
        for width in g.panel_widths():
            use_panel(width, first)
            first += width
            r_max = g.block_positions(width)
            full = g.ow // r_max
            counted_loop(b, const_i64(0), const_i64(full * r_max), "pg.ow",
                         lambda ow0: positions(x_row, out_row, ow0, r_max), step=const_i64(r_max))
            if g.ow % r_max:
                # (the rest of the row as one narrower block: one position at a time would wait
                # on each sum's previous multiply-add)
                positions(x_row, out_row, const_i64(full * r_max), g.ow % r_max)

    counted_loop(b, fn.args[1], fn.args[2], "pg.row", unit)
    b.ret_void()
    return KernelSpec(name, "patch-gemm", g.n * g.oh, g.ow * g.kh * g.kw * g.c * g.o)
