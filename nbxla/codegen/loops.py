"""Loop emitters: wrap the elemental emitter in loops over a fusion's iteration space.

Every kernel has the C signature ``void kernel(i8** buffers, i64 begin, i64 end)``: the
buffers are the fusion's parameters then its outputs (row-major, contiguous), and
``[begin, end)`` is the part of the parallel dimension this call computes, so the runtime
can split a kernel across threads.

* Loop fusions whose operands are indexed like the output (elementwise, scalar broadcasts,
  reshapes) iterate over one flat index: the contiguous fast path that LLVM vectorizes.
* Other loop fusions iterate over rows (all dims but the last) and the last dim inside.
* Reduction fusions iterate over the kept ("outer") index; per outer index each reduction
  runs in turn over the reduced dims, and values after a reduction (a mean's division,
  softmax's ``exp(x - max)``) are computed from the reduced values held in registers.
* A full reduction of elementwise work (``mean(3*x**2 + y)``) is split over threads: a
  ``partial`` kernel reduces a flat range into one slot per chunk, and a ``finish`` kernel
  combines the slots and computes the epilogue.

Float additions in reductions are summed in blocks of ``BLOCK`` elements (vectorized, in the
element type) whose sums are accumulated in double precision: as accurate as NumPy's
pairwise summation, at full vector speed.
"""

from __future__ import annotations

from llvmlite import ir

from ..errors import UnsupportedError
from ..hlo.ir import Computation, Instruction
from ..hlo.opcodes import COSTLY_TO_RECOMPUTE, ELEMENTWISE, NATIVE_COMBINERS
from ..hlo.shapes import compute_type, is_complex
from . import arg_reductions, column_groups
from .elemental import I1, I64, ElementalEmitter, const_i64, delinearize, linear_index, llvm_type
from .trig_guard import emit_versioned_loop, versioned_trig
from .toolkit import (ancestors, BLOCK, combine_values, componentwise, counted_loop, entry_alloca,
                      expand_index, is_linear, kernel_function, kernel_outputs,
                      KernelBuffers, KernelSpec, LinearEmitter, load_at, MINMAX_INTERLEAVE,
                      NanTrackingExtreme, narrow_float, nest, partial_type, product, reducer_opcode,
                      ReductionPlan, RunSizes, squeeze_dims, unknown_axes)


def emit_loop_kernel(module: ir.Module, name: str, comp: Computation) -> KernelSpec:
    outputs = kernel_outputs(comp)
    dims = outputs[0].shape.dims
    if any(o.shape.dims != dims for o in outputs):
        raise UnsupportedError("a loop fusion whose outputs have different shapes")
    params = comp.parameters
    shapes = [p.shape for p in params] + [o.shape for o in outputs]
    fn, b = kernel_function(module, name)
    bufs = KernelBuffers(b, fn.args[0], shapes)
    begin, end = fn.args[1], fn.args[2]
    if is_linear(comp.instructions, dims):
        def load(k, index):
            return bufs.load(b, k, index[0] if index and params[k].shape.rank else const_i64(0))

        def make_body(bounded=frozenset()):
            em = LinearEmitter(b, comp, load)
            em.bounded_trig = bounded

            def body(i):
                em.reset_memo()
                for k, out in enumerate(outputs):
                    bufs.store(b, len(params) + k, i, em.value(out, [i]))
            return body
        trig = versioned_trig(comp)         # (sin/cos: the cheap reduction where it may)
        if trig:
            emit_versioned_loop(b, begin, end, trig, lambda: LinearEmitter(b, comp, load), make_body)
        else:
            counted_loop(b, begin, end, "i", make_body())
        b.ret_void()
        return KernelSpec(name, "linear", product(dims), 1)

    def load_row(k, index):
        return load_at(b, bufs, k, params[k].shape.dims, index)
    em = ElementalEmitter(b, comp, load_row)
    rows, last = dims[:-1], dims[-1:]
    trig = versioned_trig(comp) if last else []

    def row_body(r):
        outer = delinearize(b, r, rows)
        if len(outputs) == 1 and outputs[0].opcode == "concatenate" and dims:
            _concatenated_row(b, em, bufs, len(params), outputs[0], outer)
            return
        if len(outputs) == 1 and dims and _window(outputs[0]) is not None:
            _updated_row(b, em, bufs, len(params), outputs[0], outer, _window(outputs[0]))
            return

        def make_inner(bounded=frozenset(), row_em=em):
            if bounded:
                row_em = ElementalEmitter(b, comp, load_row)
                row_em.bounded_trig = bounded

            def inner(idx):
                row_em.reset_memo()
                full = outer + idx
                for k, out in enumerate(outputs):
                    bufs.store(b, len(params) + k, linear_index(b, full, dims), row_em.value(out, full))
            return inner
        if trig:                            # (sin/cos: the cheap reduction where it may)
            emit_versioned_loop(b, const_i64(0), const_i64(last[0]), trig,
                                lambda: ElementalEmitter(b, comp, load_row),
                                lambda bounded: (lambda j, f=make_inner(bounded): f([j])),
                                index=lambda j: outer + [j])
        else:
            nest(b, last, "j", make_inner())
    counted_loop(b, begin, end, "row", row_body)
    b.ret_void()
    return KernelSpec(name, "rows", product(rows), product(last))


def _concatenated_row(b, em, bufs, k_out: int, concat: Instruction, outer: list) -> None:
    """One output row of a concatenation, operand by operand: along the last axis a loop per
    operand over its columns, along another axis the one operand the row lies in (chosen
    once per row).  Why: choosing the operand per element (the elemental emitter's way) is a
    branch in the inner loop, which LLVM does not vectorize (a 2-operand concatenation ran
    at a quarter of NumPy's speed)."""
    dims = concat.shape.dims
    axis = concat.attrs["dimensions"][0]
    offsets = [0]
    for op in concat.operands:
        offsets.append(offsets[-1] + op.shape.dims[axis])

    def copy_row(k, sub_outer, out_outer, column_offset=0):
        def column(j):
            em.reset_memo()
            out_j = b.add(j, const_i64(column_offset)) if column_offset else j
            bufs.store(b, k_out, linear_index(b, out_outer + [out_j], dims), em.value(concat.operands[k], sub_outer + [j]))
        counted_loop(b, const_i64(0), const_i64(concat.operands[k].shape.dims[-1]), f"cat{k}", column)

    if axis == len(dims) - 1:
        for k in range(len(concat.operands)):
            copy_row(k, outer, outer, offsets[k])
        return

    def from_operand(k):
        sub = list(outer)
        sub[axis] = b.sub(outer[axis], const_i64(offsets[k]))
        if k == len(concat.operands) - 1:
            copy_row(k, sub, outer)
            return
        with b.if_else(b.icmp_signed("<", outer[axis], const_i64(offsets[k + 1]))) as (this, later):
            with this:
                copy_row(k, sub, outer)
            with later:
                from_operand(k + 1)
    from_operand(0)


def _window(dus: Instruction) -> list[int] | None:
    """The (clamped) start of a ``dynamic-update-slice`` whose start indices are constants and
    whose update is not empty, or None."""
    if dus.opcode != "dynamic-update-slice" or 0 in dus.operands[1].shape.dims:
        return None
    starts = []
    for s, n, u in zip(dus.operands[2:], dus.shape.dims, dus.operands[1].shape.dims):
        if s.opcode != "constant":
            return None
        starts.append(min(max(int(s.literal.reshape(())), 0), n - u))
    return starts


def _updated_row(b, em, bufs, k_out: int, dus: Instruction, outer: list, starts: list[int]) -> None:
    """One output row of an update (a time step's ``B[1:-1, 1:-1] = ...``): the columns left
    and right of the window copied from the updated array, the window's columns computed
    from the update, each a branch-free loop; rows outside the window only copied.  Why: the
    elemental way selects per element between both sides, computing the update's stencil on
    every element of the array, and the branchy loop does not vectorize.  When the updated
    array is a parameter sharing the output's buffer (an in-place update), the copies are
    skipped."""
    dims, x, update = dus.shape.dims, dus.operands[0], dus.operands[1]
    n, s, u = dims[-1], starts[-1], update.shape.dims[-1]
    in_place = None
    if x.opcode == "parameter":
        in_place = b.icmp_unsigned("==", b.ptrtoint(bufs.ptrs[x.parameter_number], I64),
                                   b.ptrtoint(bufs.ptrs[k_out], I64))

    def columns(lo, hi, value):
        if hi <= lo:
            return

        def column(j):
            em.reset_memo()
            bufs.store(b, k_out, linear_index(b, outer + [j], dims), value(j))
        counted_loop(b, const_i64(lo), const_i64(hi), "upd", column)

    def copy(lo, hi):
        if in_place is None:
            columns(lo, hi, lambda j: em.value(x, outer + [j]))
            return
        with b.if_then(b.not_(in_place)):
            columns(lo, hi, lambda j: em.value(x, outer + [j]))

    inside = ir.Constant(ir.IntType(1), 1)
    for i, start, size in zip(outer, starts[:-1], update.shape.dims[:-1]):
        inside = b.and_(inside, b.and_(b.icmp_signed(">=", i, const_i64(start)),
                                       b.icmp_signed("<", i, const_i64(start + size))))
    with b.if_else(inside) as (window_row, other_row):
        with window_row:
            copy(0, s)
            sub = [b.sub(i, const_i64(start)) for i, start in zip(outer, starts[:-1])]
            columns(s, s + u, lambda j: em.value(update, sub + [b.sub(j, const_i64(s))]))
            copy(s + u, n)
        with other_row:
            copy(0, n)


# ---- reductions --------------------------------------------------------------------------------


def _wide_type(ty):
    """The type blocked sums of ``ty`` are totalled in: double, or {double, double}."""
    if isinstance(ty, ir.LiteralStructType):
        return ir.LiteralStructType([ir.DoubleType(), ir.DoubleType()])
    return ir.DoubleType()


def _zero(ty):
    if isinstance(ty, ir.LiteralStructType):
        return ir.Constant(ty, [ir.Constant(e, 0.0) for e in ty.elements])
    return ir.Constant(ty, 0.0)


def _widen(b, value, wide):
    elem = wide.elements[0] if isinstance(wide, ir.LiteralStructType) else wide
    return componentwise(b, lambda v: v if v.type == elem else b.fpext(v, elem), wide, value)


def _wide_add(b, x, y):
    return componentwise(b, b.fadd, x.type, x, y)


def apply_scalar_computation(b: ir.IRBuilder, comp: Computation, args: list) -> list:
    """Emit ``comp`` (a reducer: scalar parameters, scalar or tuple result) on ``args``;
    returns its result values."""
    em = ElementalEmitter(b, comp, lambda k, index: args[k])
    root = comp.root
    return [em.value(o, []) for o in root.operands] if root.opcode == "tuple" else [em.value(root, [])]


def _accumulate_custom(b, em, plan, reduce, outer_index, name) -> list:
    """A variadic or custom reduction: acc = reducer(acc, x) over the reduced elements in
    row-major order (the evaluator's), one accumulator per result."""
    n = len(reduce.operands) // 2
    inputs, inits = reduce.operands[:n], reduce.operands[n:]
    slots = []
    for init in inits:
        slot = entry_alloca(b, llvm_type(init.shape.element_type))
        b.store(em.value(init, []), slot)
        slots.append(slot)
    comp = reduce.attrs["to_apply"]

    def body(red_index):
        em.reset_memo()
        idx = plan.merge(outer_index, red_index)
        xs = [em.value(x, idx) for x in inputs]
        new = apply_scalar_computation(b, comp, [b.load(s) for s in slots] + xs)
        for slot, v in zip(slots, new):
            b.store(v, slot)
    nest(b, list(plan.red_dims), name + "c", body)
    return [b.load(s) for s in slots]


def _accumulate(b, em, plan, reduce, outer_index, name, keep=None):
    """Emit the reduction of ``reduce`` at ``outer_index``; returns the result value (a list
    of values for a variadic reduction).  ``keep(idx)``, when given, runs at every reduced
    element after the operand is computed (to store a value of it for a later phase)."""
    opcode = reducer_opcode(reduce)
    if reduce.shape.is_tuple or opcode is None:
        assert keep is None
        kind = arg_reductions.arg_reduction_kind(reduce, plan)
        if kind is not None:
            return arg_reductions.emit_arg_reduction(b, em, plan, reduce, outer_index, name, kind)
        values = _accumulate_custom(b, em, plan, reduce, outer_index, name)
        return values if reduce.shape.is_tuple else values[0]
    t = compute_type(reduce.shape.element_type)
    ty = llvm_type(t)
    init = em.value(reduce.operands[1], [])
    x_instr = reduce.operands[0]
    if not plan.red_dims:                 # reducing no dimensions: f(init, x)
        assert keep is None
        return combine_values(b, em, opcode, t, init, em.value(x_instr, plan.merge(outer_index, [])))
    extreme = NanTrackingExtreme(b, t, opcode == "maximum", init) if NanTrackingExtreme.applies(opcode, t) \
        else None
    blocked = opcode == "add" and t in ("f32", "f16", "c64")
    wide = _wide_type(ty)
    t, ty, x_type = _block_type(t, blocked), llvm_type(_block_type(t, blocked)), ty
    acc_slot = entry_alloca(b, ty)
    # Blocked float sums: a running double total of per-block sums.
    total_slot = entry_alloca(b, wide) if blocked else None
    if blocked:
        b.store(_widen(b, init, wide), total_slot)
        b.store(_zero(ty), acc_slot)
    else:
        b.store(init, acc_slot)
    red_dims = plan.red_dims
    inner = red_dims[-1] if red_dims else 1

    def innermost(prefix):
        def run_block(lo, hi):
            def body(j):
                em.reset_memo()
                idx = plan.merge(outer_index, prefix + [j])
                x = em.value(x_instr, idx)
                if keep is not None:
                    keep(idx)
                if x_type != ty:
                    x = b.fpext(x, ty)
                if extreme is not None:
                    extreme.add(x)
                else:
                    b.store(combine_values(b, em, opcode, t, b.load(acc_slot), x), acc_slot)
            counted_loop(b, lo, hi, name + "r", body, interleave=_reduction_interleave(opcode, x_instr, keep))
        if blocked and inner > BLOCK:
            def block_body(k):
                lo = b.mul(k, const_i64(BLOCK))
                hi = b.add(lo, const_i64(BLOCK))
                hi = b.select(b.icmp_signed(">", hi, const_i64(inner)), const_i64(inner), hi)
                b.store(_zero(ty), acc_slot)
                run_block(lo, hi)
                b.store(_wide_add(b, b.load(total_slot), _widen(b, b.load(acc_slot), wide)), total_slot)
            counted_loop(b, const_i64(0), const_i64(-(-inner // BLOCK)), name + "blk", block_body)
        else:
            run_block(const_i64(0), const_i64(inner))
            if blocked:
                b.store(_wide_add(b, b.load(total_slot), _widen(b, b.load(acc_slot), wide)), total_slot)
                b.store(_zero(ty), acc_slot)

    nest(b, list(red_dims[:-1]), name + "o", innermost)
    if extreme is not None:
        return extreme.result()
    if blocked:
        return narrow_float(b, b.load(total_slot), x_type)
    return b.load(acc_slot)


def _block_type(t: str, blocked: bool) -> str:
    """The type a block of a float sum accumulates in: f16 sums in f32 (rounded once at the end,
    as NumPy sums halves; nbxla/testing.py's f16 tolerance says why XLA's answers differ)."""
    return "f32" if blocked and t == "f16" else t


def emit_reduction_kernel(module: ir.Module, name: str, comp: Computation) -> KernelSpec:
    plan = ReductionPlan(comp)
    # Output values: (instruction, element) with element None, or k for the k-th result of
    # a variadic reduction that is itself an output.
    outputs = [(o, k) for o in kernel_outputs(comp) for k in (range(len(o.shape.elements)) if o.shape.is_tuple else [None])]
    out_shapes = [o.shape if k is None else o.shape.elements[k] for o, k in outputs]
    params = comp.parameters
    shapes = [p.shape for p in params] + out_shapes
    fn, b = kernel_function(module, name)
    bufs = KernelBuffers(b, fn.args[0], shapes)
    reduced: dict[int, ir.Value] = {}
    em = ElementalEmitter(b, comp, lambda k, index: load_at(b, bufs, k, params[k].shape.dims, index),
                          reduced)
    users = {id(r): [u for u in comp.instructions if u.opcode == "get-tuple-element" and u.operands[0] is r]
             for r in plan.reduces if r.shape.is_tuple}

    kept = _kept_row_value(comp, plan, outputs)
    if kept is not None:
        kept_phase, kept_value, kept_k = kept
        kept_buffer = len(params) + kept_k

        def keep(idx):
            bufs.store(b, kept_buffer, linear_index(b, idx, plan.in_dims), em.value(kept_value, idx))

    def outer_body(o):
        reduced.clear()
        tuples = {}
        outer_index = delinearize(b, o, plan.outer_dims)
        for n, r in enumerate(plan.reduces):
            value = _accumulate(b, em, plan, r, outer_index, f"red{n}",
                                keep if kept is not None and r is kept_phase else None)
            if r.shape.is_tuple:
                tuples[id(r)] = value
                for u in users[id(r)]:
                    reduced[id(u)] = value[u.attrs["index"]]
            else:
                reduced[id(r)] = value
        em.reset_memo()
        for k, ((out, element), shape) in enumerate(zip(outputs, out_shapes)):
            if squeeze_dims(shape.dims) == squeeze_dims(plan.outer_dims) and shape.dims != plan.in_dims:
                idx = expand_index(outer_index, plan.outer_dims, shape.dims)
                value = em.value(out, idx) if element is None else tuples[id(out)][element]
                bufs.store(b, len(params) + k, linear_index(b, idx, shape.dims), value)
        row_outputs = [(k, out) for k, ((out, element), shape) in enumerate(zip(outputs, out_shapes))
                       if shape.dims == plan.in_dims and element is None]
        if row_outputs:
            def write_row(red_index):
                em.reset_memo()
                idx = plan.merge(outer_index, red_index)
                if kept is not None:
                    reduced[id(kept_value)] = bufs.load(b, kept_buffer, linear_index(b, idx, plan.in_dims))
                for k, out in row_outputs:
                    bufs.store(b, len(params) + k, linear_index(b, idx, plan.in_dims), em.value(out, idx))
                if kept is not None:
                    del reduced[id(kept_value)]
            nest(b, list(plan.red_dims), "w", write_row)

    for (out, element), shape in zip(outputs, out_shapes):
        if squeeze_dims(shape.dims) != squeeze_dims(plan.outer_dims) and (shape.dims != plan.in_dims or element is not None):
            raise UnsupportedError("a reduction fusion output outside the reduced and input spaces")
    counted_loop(b, fn.args[1], fn.args[2], "outer", outer_body)
    b.ret_void()
    return KernelSpec(name, "reduce", product(plan.outer_dims), product(plan.red_dims))


def _reduction_interleave(opcode: str, operand: Instruction, keep) -> int:
    """How many vector iterations a row reduction's loop keeps in flight (see
    ``_interleave_metadata``).  Measured side by side on 1024-wide rows: 4 for max/min (row
    max 51 -> 30 us per 256 rows) and for sums of transcendental work that store nothing
    (log1p(exp(-|x|)).mean(-1): 1.64 -> 1.04 ms per 4096 rows); a loop that also stores
    (softmax's exp, kept for the next phase) got slower out of cache, and cheap sums gained
    nothing (layernorm got slower), so those keep one."""
    if opcode in ("maximum", "minimum"):
        return MINMAX_INTERLEAVE
    if keep is None and any(i.opcode in COSTLY_TO_RECOMPUTE for i in ancestors([operand])):
        return 4
    return 1


def _kept_row_value(comp: Computation, plan, outputs):
    """Softmax's ``e = exp(x - max)`` is needed twice per element: by the sum and by the output
    ``e / sum``.  When the one row output depends on its parameters only through such a
    costly value computed in a reduction phase, that phase stores the value into the output
    buffer and the output pass reads it back instead of computing it again.

    Returns (reduce whose phase computes it, the value, its output number) or None.  Only
    from the last phase, and only when nothing else the output pass reads could be
    overwritten by those stores (no parameter is read there except through the kept value;
    a reduction kernel's output never shares memory with its operands: buffer assignment
    updates in place only for loop fusions)."""
    rows = [(k, o) for k, (o, element) in enumerate(outputs)
            if element is None and o.shape.dims == plan.in_dims and plan.red_dims]
    if len(rows) != 1 or plan.custom:
        return None
    k, out = rows[0]
    last = plan.reduces[-1]
    reduce_ids = {id(r) for r in plan.reduces}
    for value in ancestors([last.operands[0]]):
        if value.shape.dims == plan.in_dims and value.opcode in COSTLY_TO_RECOMPUTE and value is not out \
                and value.shape.element_type == out.shape.element_type \
                and _reads_only_through(out, value, reduce_ids):
            return last, value, k
    return None


def _reads_only_through(out: Instruction, value: Instruction, reduce_ids: set) -> bool:
    """Does ``out`` use ``value`` -- only at the element it writes (through elementwise ops:
    the output pass overwrites the stored values as it goes, so a ``reverse`` or a slice
    would read one already overwritten) -- and reach array parameters only through it and
    reductions?"""
    stack, seen, uses_value = [out], set(), False
    while stack:
        i = stack.pop()
        if id(i) in seen or id(i) in reduce_ids:
            continue
        seen.add(id(i))
        if i is value:
            uses_value = True
        elif i.opcode == "parameter" and i.shape.rank > 0:
            return False
        elif i.opcode not in ELEMENTWISE and i.opcode not in ("broadcast", "constant"):
            return False
        else:
            stack.extend(i.operands)
    return uses_value


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


# ---- full reductions split across threads -------------------------------------------------------


def _slot_pointer(b, scratch, slot: int, ty):
    return b.bitcast(b.gep(scratch, [const_i64(8 * slot)]), ty.as_pointer())


def emit_full_reduction(module: ir.Module, name: str, comp: Computation, plan) -> KernelSpec:
    """``name`` reduces the flat range [begin, end) into 8-byte slots (one per reduction) of the
    scratch buffer passed after the parameters; ``name_finish`` combines ``begin`` chunks of
    slots and computes the outputs."""
    params = comp.parameters
    outputs = kernel_outputs(comp)
    shapes = [p.shape for p in params]
    fn, b = kernel_function(module, name)
    bufs = KernelBuffers(b, fn.args[0], shapes)
    scratch = b.load(b.gep(fn.args[0], [const_i64(len(params))]))
    em = LinearEmitter(b, comp, lambda k, index: bufs.load(
        b, k, index[0] if index and params[k].shape.rank else const_i64(0)))
    for n, r in enumerate(plan.reduces):
        opcode, t = reducer_opcode(r), compute_type(r.shape.element_type)
        pty, ty = partial_type(r), llvm_type(t)
        blocked = pty != ty
        x_type, t = ty, _block_type(t, blocked)
        ty = llvm_type(t)
        acc = entry_alloca(b, ty)
        total = entry_alloca(b, pty)
        b.store(ir.Constant(ty, 0.0) if blocked else em.value(r.operands[1], []), acc)
        if blocked:
            b.store(ir.Constant(pty, 0.0), total)

        def element(i, r=r, acc=acc, opcode=opcode, t=t, ty=ty, x_type=x_type):
            em.reset_memo()
            x = em.value(r.operands[0], [i])
            x = b.fpext(x, ty) if x_type != ty else x
            b.store(combine_values(b, em, opcode, t, b.load(acc), x), acc)

        interleave = _reduction_interleave(opcode, r.operands[0], None)
        if blocked:
            def block(k, acc=acc, total=total, element=element, interleave=interleave):
                lo = b.add(fn.args[1], b.mul(k, const_i64(BLOCK)))
                hi = b.add(lo, const_i64(BLOCK))
                hi = b.select(b.icmp_signed(">", hi, fn.args[2]), fn.args[2], hi)
                b.store(ir.Constant(ty, 0.0), acc)
                counted_loop(b, lo, hi, f"p{n}", element, interleave=interleave)
                b.store(b.fadd(b.load(total), b.fpext(b.load(acc), pty)), total)
            nblocks = b.sdiv(b.add(b.sub(fn.args[2], fn.args[1]), const_i64(BLOCK - 1)), const_i64(BLOCK))
            counted_loop(b, const_i64(0), nblocks, f"blk{n}", block)
            b.store(b.load(total), _slot_pointer(b, scratch, n, pty))
        elif NanTrackingExtreme.applies(opcode, t):
            extreme = NanTrackingExtreme(b, t, opcode == "maximum", em.value(r.operands[1], []))

            def add(i, r=r, extreme=extreme):
                em.reset_memo()
                extreme.add(em.value(r.operands[0], [i]))
            counted_loop(b, fn.args[1], fn.args[2], f"p{n}", add, interleave=interleave)
            b.store(extreme.result(), _slot_pointer(b, scratch, n, ty))
        else:
            counted_loop(b, fn.args[1], fn.args[2], f"p{n}", element, interleave=interleave)
            b.store(b.load(acc), _slot_pointer(b, scratch, n, ty))
    b.ret_void()

    # finish(buffers = params, outputs, scratch; begin = number of chunks)
    fin, b = kernel_function(module, name + "_finish")
    # A few partial slots and scalar outputs: vectorized and unrolled code would only cost
    # compile time (a quarter of the running example's, measured).
    fin.attributes.add("minsize")
    fin.attributes.add("optsize")
    shapes = [p.shape for p in params] + [o.shape for o in outputs]
    bufs = KernelBuffers(b, fin.args[0], shapes)
    scratch = b.load(b.gep(fin.args[0], [const_i64(len(shapes))]))
    reduced: dict[int, ir.Value] = {}
    em = ElementalEmitter(b, comp, lambda k, index: bufs.load(b, k, const_i64(0)), reduced)
    nred = len(plan.reduces)
    for n, r in enumerate(plan.reduces):
        opcode, t = reducer_opcode(r), compute_type(r.shape.element_type)
        pty, ty = partial_type(r), llvm_type(t)
        acc = entry_alloca(b, pty)
        init = em.value(r.operands[1], [])
        b.store(b.fpext(init, pty) if pty != ty else init, acc)

        def combine(k, n=n, acc=acc, opcode=opcode, t=t, pty=pty):
            slot = b.add(b.mul(k, const_i64(nred)), const_i64(n))
            ptr = b.bitcast(b.gep(scratch, [b.mul(slot, const_i64(8))]), pty.as_pointer())
            part = b.load(ptr)
            b.store(combine_values(b, em, opcode, "f64" if pty != llvm_type(t) else t, b.load(acc), part), acc)
        counted_loop(b, const_i64(0), fin.args[1], f"c{n}", combine)
        v = b.load(acc)
        reduced[id(r)] = narrow_float(b, v, ty) if pty != ty else v
    em.reset_memo()
    for k, out in enumerate(outputs):
        idx = [const_i64(0)] * out.shape.rank
        bufs.store(b, len(params) + k, const_i64(0), em.value(out, idx))
    b.ret_void()
    return KernelSpec(name, "full-reduce", product(plan.in_dims), 1, name + "_finish", len(plan.reduces))
