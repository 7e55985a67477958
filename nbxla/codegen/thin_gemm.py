"""The thin-GEMM kernel: ``out = lhs[:, begin:end] @ rhs[begin:end, :]`` for a few rows
(``m``, an MLP's batch) against a large row-major ``rhs`` (its weight), reading ``rhs`` once,
row after row, in the order it lies in memory.

Why its own kernel: such a product is a stream over ``rhs`` (each element is used ``m``
times), and OpenBLAS runs it far from the memory's speed: it packs ``rhs`` into blocks
first and its micro-kernel is sized for many rows (8x30000 @ 30000x2000 f64 on the shared
2-core AVX-512 VM: ~29 ms on two threads, where reading the 480 MB weight once takes ~15 ms
on one core).  The runtime (``runtime/thin_gemm.py``) splits the contraction into chunks
over the pool, each chunk a contiguous run of ``rhs`` rows and a partial sum of its own.

Register blocking: ``ROWS`` output rows times ``PANEL`` vectors of 64 bytes are held as sums
(24 of AVX-512's 32 registers); per row of ``rhs``, one load of each of the panel's vectors
and per output row one broadcast ``lhs`` element and ``PANEL`` fused multiply-adds.  Rows of
``rhs`` are taken ``DEPTH`` at a time (unrolled): for each such block the kernel walks the
whole width, loading the panel's sums from the output, adding the block's ``DEPTH`` rank-one
updates and storing them back -- so ``DEPTH`` rows of ``rhs`` are read side by side, each
from start to end (streams the hardware prefetcher follows), and the sums of one output row
(``n`` elements) stay in L2.  Blocks of more rows made the streams too many to follow
(8x30000 @ 30000x2000 on one core, C prototype: DEPTH 4 36 ms, 8 30 ms, 32 83 ms).

Each panel also prefetches its rhs rows ``PREFETCH`` bytes ahead.

Sums run in order over the chunk's rows with fused multiply-adds (results agree with BLAS's
to rounding).  Columns past the last whole vector are the runtime's (a BLAS call on them).
"""

from __future__ import annotations

from dataclasses import dataclass

import llvmlite.binding as llvm
from llvmlite import ir

from .elemental import const_i64
from .toolkit import counted_loop, kernel_function, KernelBuffers, KernelSpec
from ..hlo.shapes import Shape

# Only with AVX-512 (32 vector registers): the blocking below needs 28 of them.
AVX512 = bool(llvm.get_host_cpu_features().get("avx512f", False))
ROWS = 8            # output rows whose sums one block holds
PANEL = 3           # vectors of 64 bytes per output row in one block
DEPTH = 8           # rows of rhs per rank-one block (unrolled)
# Bytes ahead in each rhs row that a panel asks the cache for (``llvm.prefetch``, one per
# vector it loads): the hardware's own prefetcher follows DEPTH streams less far ahead.
# 8x30000 @ 30000x2000 f64, one core, thread CPU (least of 12, load 12): none 36.6-37.4 ms,
# 256 B 32.6-34.5, 512 B 30.7-33.3, 768 B 32.5-34.9, 1 KiB 34.1, 2 KiB 36.8.  (Past the end of
# the matrix a prefetch is only a hint: it never faults.)
PREFETCH = 512


@dataclass(frozen=True)
class ThinGemm:
    t: str              # f32 or f64
    m: int              # output rows
    n: int              # elements of one rhs row and of one output row
    columns: int        # columns the kernel computes: whole vectors, at most n
    lhs_row: int        # elements from one lhs row (output row) to the next
    lhs_step: int       # elements from one lhs element to the next along the contraction

    @property
    def itemsize(self) -> int:
        return 4 if self.t == "f32" else 8

    @property
    def lanes(self) -> int:
        return 64 // self.itemsize


def emit_thin_gemm(module: ir.Module, name: str, g: ThinGemm) -> KernelSpec:
    """The kernel ``fn(buffers = [lhs, rhs, out], begin, end)``: ``out[:, :columns] =
    lhs[:, begin:end] @ rhs[begin:end, :columns]`` (``out`` overwritten, zero for an empty
    range)."""
    if g.columns % g.lanes or not 0 < g.columns <= g.n:
        raise ValueError(f"thin GEMM: {g.columns} columns are no whole number of vectors within {g.n}")
    fn, b = kernel_function(module, name)
    elem = ir.FloatType() if g.t == "f32" else ir.DoubleType()
    vec = ir.VectorType(elem, g.lanes)
    vec_ptr = vec.as_pointer()
    bufs = KernelBuffers(b, fn.args[0], [Shape(g.t, (1,))] * 3)
    lhs, rhs, out = bufs.ptrs
    begin, end = fn.args[1], fn.args[2]
    fmuladd_name = f"llvm.fmuladd.v{g.lanes}{g.t}"
    fmuladd = module.globals.get(fmuladd_name) or ir.Function(module, ir.FunctionType(vec, [vec] * 3), fmuladd_name)
    undef = ir.Constant(vec, ir.Undefined)
    i8_ptr = ir.IntType(8).as_pointer()
    # (read, keep in all cache levels, data)
    prefetch = module.globals.get("llvm.prefetch.p0") or ir.Function(
        module, ir.FunctionType(ir.VoidType(), [i8_ptr] + [ir.IntType(32)] * 3), "llvm.prefetch.p0")
    lanes0 = ir.Constant(ir.VectorType(ir.IntType(32), g.lanes), [0] * g.lanes)
    zero = ir.Constant(vec, [ir.Constant(elem, 0.0)] * g.lanes)
    vectors = g.columns // g.lanes

    def at(ptr, offset):
        return b.bitcast(b.gep(ptr, [offset]), vec_ptr)

    def offset(base, constant: int):
        return b.add(base, const_i64(constant)) if constant else base

    # out[:, :columns] = 0 (the first block adds to it like every other)
    for i in range(g.m):
        counted_loop(b, const_i64(0), const_i64(vectors), f"tg.zero{i}",
                     lambda j, i=i: b.store(zero, at(out, b.add(const_i64(i * g.n), b.mul(j, const_i64(g.lanes)))),
                                            align=g.itemsize), vectorize=False)

    def panel(a_first, b_first, column, rows: range, width: int, depth: int):
        """Sums of ``rows`` x ``width`` vectors from column ``column`` on, plus ``depth``
        rank-one updates from contraction row ``a_first`` / ``b_first`` (element offsets)."""
        sums = [[b.load(at(out, offset(column, i * g.n + v * g.lanes)), align=g.itemsize) for v in range(width)]
                for i in rows]
        for s in range(depth):
            row = offset(b_first, s * g.n)
            ys = [b.load(at(rhs, offset(b.add(row, column), v * g.lanes)), align=g.itemsize) for v in range(width)]
            for v in range(width):
                ahead = b.gep(rhs, [offset(b.add(row, column), v * g.lanes + PREFETCH // g.itemsize)])
                b.call(prefetch, [b.bitcast(ahead, i8_ptr), *(ir.Constant(ir.IntType(32), c) for c in (0, 3, 1))])
            for r, i in enumerate(rows):
                x = b.load(b.gep(lhs, [offset(a_first, i * g.lhs_row + s * g.lhs_step)]))
                xs = b.shuffle_vector(b.insert_element(undef, x, ir.Constant(ir.IntType(32), 0)), undef, lanes0)
                sums[r] = [b.call(fmuladd, [xs, y, acc]) for y, acc in zip(ys, sums[r])]
        for r, i in enumerate(rows):
            for v in range(width):
                b.store(sums[r][v], at(out, offset(column, i * g.n + v * g.lanes)), align=g.itemsize)

    def block(k, depth: int):
        """``depth`` rank-one updates from contraction row ``k`` on, over the whole width."""
        a_first, b_first = b.mul(k, const_i64(g.lhs_step)), b.mul(k, const_i64(g.n))
        for first in range(0, g.m, ROWS):
            rows = range(first, min(g.m, first + ROWS))
            full = vectors // PANEL * PANEL * g.lanes
            if full:
                counted_loop(b, const_i64(0), const_i64(full), "tg.panel",
                             lambda c: panel(a_first, b_first, c, rows, PANEL, depth),
                             step=const_i64(PANEL * g.lanes), vectorize=False)
            if vectors % PANEL:
                panel(a_first, b_first, const_i64(full), rows, vectors % PANEL, depth)

    blocks_end = b.add(begin, b.mul(b.udiv(b.sub(end, begin), const_i64(DEPTH)), const_i64(DEPTH)))
    counted_loop(b, begin, blocks_end, "tg.block", lambda k: block(k, DEPTH), step=const_i64(DEPTH), vectorize=False)
    counted_loop(b, blocks_end, end, "tg.rest", lambda k: block(k, 1), vectorize=False)
    b.ret_void()
    return KernelSpec(name, "thin-gemm", 0, g.m * g.columns)
