"""Loop emitters: wrap the elemental emitter in loops over a loop fusion's iteration space.

Every kernel has the C signature ``void kernel(i8** buffers, i64 begin, i64 end)``: the
buffers are the fusion's parameters then its outputs (row-major, contiguous), and
``[begin, end)`` is the part of the parallel dimension this call computes, so the runtime
can split a kernel across threads.

* Loop fusions whose operands are indexed like the output (elementwise, scalar broadcasts,
  reshapes) iterate over one flat index: the contiguous fast path that LLVM vectorizes.
* Other loop fusions iterate over rows (all dims but the last) and the last dim inside; a
  concatenation's or a constant-window update's rows are written operand by operand.

Reduction fusions have kernels of their own, with the same signature: ``reductions.py`` (the
general path, over the kept index), ``column_reductions.py`` (leading or middle axes, columns
innermost) and ``full_reductions.py`` (a whole reduction split over threads);
``kernels.emit_kernel`` chooses among them.
"""

from __future__ import annotations

from llvmlite import ir

from ..errors import UnsupportedError
from ..hlo.ir import Computation, Instruction
from .elemental import I64, ElementalEmitter, const_i64, delinearize, linear_index
from .trig_guard import emit_versioned_loop, versioned_trig
from .compute_bound import contraction_flags, interleave_count, prefer_wide_vectors
from .row_access import vectorize_within_rows
from .toolkit import (counted_loop, is_linear, kernel_function, kernel_outputs, KernelBuffers, KernelSpec,
                      LinearEmitter, load_at, nest, product)


# A loop kernel's outputs never overlap its inputs except where an output is written in place
# of an operand that the kernel reads only at the index it writes: the buffer plan overwrites an
# operand only then (``passes/buffer_assignment._reads_elementwise``: its in-place outputs and
# donations), and an update fusion written into the array it updates (whatever it reads) runs
# the in-place kernel of ``updates.py`` instead of this one.  Reading each element before
# storing it is safe in place, so every load and store of these kernels is marked as not
# aliasing (``KernelBuffers``' first_output).  Why always: LLVM's vectorizer otherwise guards
# each loop by a run-time overlap check of the buffers' whole footprints, which a stencil's
# reads (a row before the array, a row after it) fail for any two buffers placed next to each
# other in the arena -- channel flow's kernels ran their scalar loops, at a third of the speed.


def emit_loop_kernel(module: ir.Module, name: str, comp: Computation) -> KernelSpec:
    outputs = kernel_outputs(comp)
    dims = outputs[0].shape.dims
    if any(o.shape.dims != dims for o in outputs):
        raise UnsupportedError("a loop fusion whose outputs have different shapes")
    params = comp.parameters
    shapes = [p.shape for p in params] + [o.shape for o in outputs]
    fn, b = kernel_function(module, name)
    prefer_wide_vectors(fn, comp)
    contract = contraction_flags(comp)

    def emitter(cls, load):
        em = cls(b, comp, load)
        em.contract = contract          # (the trig check too: the same argument values)
        return em
    bufs = KernelBuffers(b, fn.args[0], shapes, first_output=len(params))
    begin, end = fn.args[1], fn.args[2]
    if is_linear(comp.instructions, dims):
        def load(k, index):
            return bufs.load(b, k, index[0] if index and params[k].shape.rank else const_i64(0))

        def make_body(bounded=frozenset()):
            em = emitter(LinearEmitter, load)
            em.bounded_trig = bounded

            def body(i):
                em.reset_memo()
                for k, out in enumerate(outputs):
                    bufs.store(b, len(params) + k, i, em.value(out, [i]))
            return body
        trig = versioned_trig(comp)         # (sin/cos: the cheap reduction where it may)
        if trig:
            emit_versioned_loop(b, begin, end, trig, lambda: emitter(LinearEmitter, load), make_body,
                                interleave=interleave_count(comp))
        else:
            counted_loop(b, begin, end, "i", make_body(), interleave=interleave_count(comp), widen_math=True)
        b.ret_void()
        return KernelSpec(name, "linear", product(dims), 1)

    def load_row(k, index):
        return load_at(b, bufs, k, params[k].shape.dims, index)
    em = emitter(ElementalEmitter, load_row)
    rows, last = dims[:-1], dims[-1:]
    trig = versioned_trig(comp) if last else []
    within_rows = bool(last) and vectorize_within_rows(comp, outputs, last[0])

    def row_body(r):
        outer = delinearize(b, r, rows)
        if len(outputs) == 1 and outputs[0].opcode == "concatenate" and dims:
            _concatenated_row(b, em, bufs, len(params), outputs[0], outer)
            return
        if len(outputs) == 1 and dims and _window_chain(outputs[0]):
            _updated_row(b, em, bufs, len(params), outputs[0], outer, _window_chain(outputs[0]))
            return

        def make_inner(bounded=frozenset(), row_em=em):
            if bounded:
                row_em = emitter(ElementalEmitter, load_row)
                row_em.bounded_trig = bounded

            def inner(idx):
                row_em.reset_memo()
                full = outer + idx
                for k, out in enumerate(outputs):
                    bufs.store(b, len(params) + k, linear_index(b, full, dims), row_em.value(out, full))
            return inner
        if trig:                            # (sin/cos: the cheap reduction where it may)
            emit_versioned_loop(b, const_i64(0), const_i64(last[0]), trig,
                                lambda: emitter(ElementalEmitter, load_row),
                                lambda bounded: (lambda j, f=make_inner(bounded): f([j])),
                                index=lambda j: outer + [j], interleave=interleave_count(comp, last[0]))
        elif last:
            counted_loop(b, const_i64(0), const_i64(last[0]), "j0", lambda j: make_inner()([j]),
                         interleave=interleave_count(comp, last[0]), vectorize_first=within_rows, widen_math=True)
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


# The most nested constant-window updates one row is written through: each level may triple
# the loops emitted (a branch on whether the row lies in that window, columns left and right
# of it); deeper chains read the rest elementwise.
MAX_CHAIN = 4


def _window_chain(dus: Instruction) -> list[tuple[Instruction, list[int]]]:
    """The constant-window updates ``dus`` is made of, outermost first, each with its (clamped)
    start: ``B[1:-1, 1:-1] = ...; B[1:-1, 0] = ...; B[1:-1, -1] = ...`` traces to an update of
    an update of an update of ``B``.  Empty when ``dus`` is not such an update."""
    chain = []
    while len(chain) < MAX_CHAIN and (starts := _window(dus)) is not None:
        chain.append((dus, starts))
        dus = dus.operands[0]
    return chain


def _updated_row(b, em, bufs, k_out: int, root: Instruction, outer: list, chain: list) -> None:
    """One output row of an update or a chain of updates (a time step's ``B[1:-1, 1:-1] = ...``
    and its boundary columns): each run of columns computed from the one update whose window
    holds it last (the outermost), the rest copied from the updated array, each run a
    branch-free loop; rows outside every window only copied.  Why: the elemental way selects
    per element between all sides, computing every update's stencil on every element of the
    array (at clamped positions: gathers), and the branchy loop does not vectorize.  Every
    element is written once.  When the updated array is a parameter sharing the output's
    buffer (an in-place update), the copies are skipped."""
    dims = root.shape.dims
    n = dims[-1]
    x = chain[-1][0].operands[0]
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
        if hi <= lo:
            return
        if in_place is None:
            columns(lo, hi, lambda j: em.value(x, outer + [j]))
            return
        with b.if_then(b.not_(in_place)):
            columns(lo, hi, lambda j: em.value(x, outer + [j]))

    def run(level, lo, hi):
        """Columns [lo, hi) of this row, as the updates ``chain[level:]`` leave them."""
        if hi <= lo:
            return
        if level == len(chain):
            copy(lo, hi)
            return
        dus, starts = chain[level]
        update = dus.operands[1]
        s = starts[-1]
        w_lo, w_hi = max(lo, s), min(hi, s + update.shape.dims[-1])
        if w_hi <= w_lo:
            run(level + 1, lo, hi)
            return

        def window_row():
            run(level + 1, lo, w_lo)
            sub = [b.sub(i, const_i64(start)) for i, start in zip(outer, starts[:-1])]
            columns(w_lo, w_hi, lambda j: em.value(update, sub + [b.sub(j, const_i64(s))]))
            run(level + 1, w_hi, hi)
        inside = None
        for i, start, size, full in zip(outer, starts[:-1], update.shape.dims[:-1], dims[:-1]):
            if size < full:
                test = b.and_(b.icmp_signed(">=", i, const_i64(start)), b.icmp_signed("<", i, const_i64(start + size)))
                inside = test if inside is None else b.and_(inside, test)
        if inside is None:              # (the window spans every row)
            window_row()
            return
        with b.if_else(inside) as (in_window, other_row):
            with in_window:
                window_row()
            with other_row:
                run(level + 1, lo, hi)
    run(0, 0, n)
