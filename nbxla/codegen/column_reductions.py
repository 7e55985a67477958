"""Column reductions: a fusion reducing leading (or middle) axes, with the columns innermost.

``column_plan`` says whether a fusion has that form; ``emit_column_reduction`` walks the rows
once per block of columns, accumulating a contiguous vector of partial results in the output
buffer (contiguous, vectorized reads; NumPy's summation order per column, row by row).  Few
columns over many rows take ``column_groups.py``'s grouped kernel instead.
"""

from __future__ import annotations

from llvmlite import ir

from ..hlo.ir import Computation, Instruction
from . import column_groups
from .elemental import ElementalEmitter, const_i64, delinearize
from .reductions import apply_scalar_computation
from .toolkit import (ancestors, combine_values, counted_loop, expand_index, is_linear, kernel_function,
                      kernel_outputs, KernelBuffers, KernelSpec, LinearEmitter, load_at, product,
                      reducer_opcode, ReductionPlan, RunSizes, squeeze_dims, unknown_axes)


# Columns accumulated per pass over the rows (64 KiB of f32 accumulators, in L2).  Every
# extra pass re-walks the rows, and the hardware prefetcher streams whole rows into the cache
# whichever part a pass reads: measured side by side against 512-8192, the longest block was
# fastest or tied on every shape tried ((2048, 3000) axis 0 on one thread: 1.14 -> 0.77 ms;
# (256, 100000): 5.0 -> 3.4 ms; 4096^2: 4.2 -> 2.2 ms against 512).
COLUMN_BLOCK = 16384

# Each pass over a block of columns combines this many rows: the partial results are loaded
# and stored once per group of rows instead of once per row, and the rows are read as that
# many concurrent streams.  The order of combination per column stays row by row.
COLUMN_ROWS_PER_PASS = 8


# A reduction over middle axes keeps this many trailing elements per batch, at least, to run
# as batched column reductions: with fewer, vectors would be too short to pay off and the
# strided row kernel reads a batch's few columns from L1 anyway.
MIN_BATCHED_COLUMNS = 16


def column_plan(comp: Computation):
    """A plan when the fusion reduces a block of consecutive axes that are not the innermost
    ones -- the leading axes into the trailing ones, or middle axes ((N, R, C) -> (N, C): a
    batch of column reductions) -- and its single output (the reduction or an elementwise
    epilogue of it) has the reduction's type: then the output buffer can hold the
    accumulators."""
    plan = ReductionPlan(comp)
    outputs = kernel_outputs(comp)
    r = plan.reduces[0]
    if (len(plan.reduces) != 1 or len(outputs) != 1 or not plan.reduced
            or plan.reduced != tuple(range(plan.reduced[0], plan.reduced[-1] + 1))
            or plan.reduced[-1] == len(plan.in_dims) - 1):
        return None
    kept = plan.in_dims[plan.reduced[-1] + 1:]
    if plan.custom:
        # Variadic (argmax down columns) or custom reducers: the reduction itself is the
        # output (a buffer per result holds the accumulators), its inputs read per element.
        if outputs[0] is not r or len(kept) > 1 or plan.reduced[0] > 0 and product(kept) < MIN_BATCHED_COLUMNS:
            return None
        return plan
    if (outputs[0].shape.element_type != r.shape.element_type
            or squeeze_dims(outputs[0].shape.dims) != squeeze_dims(plan.outer_dims)):
        return None
    if plan.reduced[0] > 0:                       # batched: middle axes
        if product(kept) < MIN_BATCHED_COLUMNS or (len(kept) > 1 and not _linear_input(comp, r, plan)):
            return None
        return plan
    # Several kept axes (the mean image of a batch, (N, H, W) -> (H, W)) are one flat column
    # index when the input can be read at flat positions.
    if len(kept) > 1 and not _linear_input(comp, r, plan):
        if not column_groups.applies(comp, plan):
            return None
    return plan


def _linear_input(comp: Computation, r: Instruction, plan) -> bool:
    """Can the reduced input be read at flat positions (elementwise work on full arrays)?"""
    feeding = {id(i) for i in ancestors([r.operands[0]])}
    return is_linear([i for i in comp.instructions if id(i) in feeding], plan.in_dims)


def emit_column_reduction(module: ir.Module, name: str, comp: Computation, plan) -> KernelSpec:
    """Reduce leading (or middle) axes with the columns innermost: for each block of columns,
    one pass over the rows accumulates a contiguous vector of partial results (kept in the
    output buffer), then the epilogue runs over the block.  Reads are contiguous and
    vectorized; the summation order per column is NumPy's (row by row).

    Middle axes, (N..., R..., C...) -> (N..., C...), are a batch of such reductions: the
    kernel's range of flat output positions is cut at batch boundaries, so that within a
    block the columns are consecutive in memory."""
    (out,) = kernel_outputs(comp)
    (r,) = plan.reduces
    params = comp.parameters
    results = list(r.shape.elements) if r.shape.is_tuple else [r.shape]    # (out is r when custom)
    shapes = [p.shape for p in params] + ([out.shape] if out is not r else results)
    fn, b = kernel_function(module, name)
    bufs = KernelBuffers(b, fn.args[0], shapes)
    k_out = len(params)
    accumulators = range(k_out, k_out + len(results))
    n_in = len(r.operands) // 2
    reduced: dict[int, ir.Value] = {}
    em = ElementalEmitter(b, comp, lambda k, index: load_at(b, bufs, k, params[k].shape.dims, index),
                          reduced)
    opcode = reducer_opcode(r) if not plan.custom else None
    t = results[0].element_type

    def combine(accs, xs):
        if plan.custom:
            return apply_scalar_computation(b, r.attrs["to_apply"], accs + xs)
        return [combine_values(b, em, opcode, t, accs[0], xs[0], ordered=True)]
    first, last = plan.reduced[0], plan.reduced[-1]
    batch_dims, kept_dims = plan.in_dims[:first], plan.in_dims[last + 1:]
    rows = product(plan.red_dims)
    columns = product(kept_dims)
    # The row count, read when the kernel runs where a reduced axis is unknown (one kernel for
    # every batch size: a bias gradient's column sum); else a constant.
    sizes = RunSizes(b, fn.args[0], len(shapes)) if rows_unknown(comp, plan) else None
    rows_v = sizes.size(rows) if sizes is not None else const_i64(rows)
    if len(kept_dims) > 1:               # flat columns: read the input at flat positions
        flat = LinearEmitter(b, comp, lambda k, index: bufs.load(
            b, k, index[0] if index and params[k].shape.rank else const_i64(0)))

        def inputs_at(batch, c, i, red_index):
            row = b.add(b.mul(batch, rows_v), i)
            return [flat.value(r.operands[0], [b.add(b.mul(row, const_i64(columns)), c)])]
    else:
        def inputs_at(batch, c, i, red_index):
            outer = delinearize(b, batch, batch_dims) + [c] if batch_dims else [c]
            idx = plan.merge(outer, red_index)
            return [em.value(x, idx) for x in r.operands[:n_in]]

    def batch_body(batch):
        base = b.mul(batch, const_i64(columns))            # flat output position of column 0
        c_begin = _clamp(b, b.sub(fn.args[1], base), 0, columns)
        c_end = _clamp(b, b.sub(fn.args[2], base), 0, columns)

        def block_body(blk):
            lo = b.add(c_begin, b.mul(blk, const_i64(COLUMN_BLOCK)))
            hi = b.add(lo, const_i64(COLUMN_BLOCK))
            hi = b.select(b.icmp_signed(">", hi, c_end), c_end, hi)

            def init(c):
                em.reset_memo()
                for k, init_value in zip(accumulators, r.operands[n_in:]):
                    bufs.store(b, k, b.add(base, c), em.value(init_value, []))
            counted_loop(b, lo, hi, "ci", init)

            def rows_from(i, count):
                """Combine rows i .. i+count-1 into each column of the block, in row order."""
                red_indices = [delinearize(b, b.add(i, const_i64(u)), plan.red_dims) for u in range(count)]

                def column(c):
                    o = b.add(base, c)
                    accs = [bufs.load(b, k, o) for k in accumulators]
                    for u in range(count):
                        em.reset_memo()
                        if len(kept_dims) > 1:
                            flat.reset_memo()
                        accs = combine(accs, inputs_at(batch, c, b.add(i, const_i64(u)), red_indices[u]))
                    for k, acc in zip(accumulators, accs):
                        bufs.store(b, k, o, acc)
                counted_loop(b, lo, hi, "cc", column)
            if sizes is not None:           # (both loops: the count is not known here)
                whole = b.sub(rows_v, b.srem(rows_v, const_i64(COLUMN_ROWS_PER_PASS)))
                counted_loop(b, const_i64(0), whole, "cr", lambda i: rows_from(i, COLUMN_ROWS_PER_PASS),
                             step=const_i64(COLUMN_ROWS_PER_PASS))
                counted_loop(b, whole, rows_v, "crr", lambda i: rows_from(i, 1))
            whole = rows - rows % COLUMN_ROWS_PER_PASS
            if sizes is None and whole:
                counted_loop(b, const_i64(0), const_i64(whole), "cr", lambda i: rows_from(i, COLUMN_ROWS_PER_PASS),
                      step=const_i64(COLUMN_ROWS_PER_PASS))
            if sizes is None and whole < rows:
                counted_loop(b, const_i64(whole), const_i64(rows), "crr", lambda i: rows_from(i, 1))
            if out is not r:
                def epilogue(c):
                    em.reset_memo()
                    reduced.clear()
                    o = b.add(base, c)
                    reduced[id(r)] = bufs.load(b, k_out, o)
                    idx = expand_index(delinearize(b, o, plan.outer_dims), plan.outer_dims, out.shape.dims)
                    bufs.store(b, k_out, o, em.value(out, idx))
                counted_loop(b, lo, hi, "ce", epilogue)

        nblocks = b.sdiv(b.add(b.sub(c_end, c_begin), const_i64(COLUMN_BLOCK - 1)), const_i64(COLUMN_BLOCK))
        counted_loop(b, const_i64(0), nblocks, "cb", block_body)

    if batch_dims:
        first_batch = b.sdiv(fn.args[1], const_i64(columns))
        end_batch = b.sdiv(b.add(fn.args[2], const_i64(columns - 1)), const_i64(columns))
        counted_loop(b, first_batch, end_batch, "bt", batch_body)
    else:
        batch_body(const_i64(0))
    b.ret_void()
    return KernelSpec(name, "reduce", product(plan.outer_dims), rows,
                      sizes=tuple(sizes.values) if sizes is not None else ())


def rows_unknown(comp: Computation, plan) -> bool:
    """Does a column reduction reduce over an axis known only when it runs?"""
    axes = unknown_axes(comp, plan.reduces[0].operands[0])
    return any(a in plan.reduced for a in axes)


def _clamp(b: ir.IRBuilder, value, lo: int, hi: int):
    value = b.select(b.icmp_signed("<", value, const_i64(lo)), const_i64(lo), value)
    return b.select(b.icmp_signed(">", value, const_i64(hi)), const_i64(hi), value)
