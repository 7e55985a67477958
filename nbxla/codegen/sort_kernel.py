"""``sort`` with any comparator as a native kernel: the evaluator's merge sort, step for step.

The CPU runtime sorts by NumPy's argsort when it recognizes the comparator as an order of keys
(runtime/sort_library.py); this kernel is for the other comparators.  It computes exactly what
the evaluator's ``sort_by_comparator`` computes (hlo/evaluator_reduce.py), so that the answer is
the same even for a comparator that is no strict weak order: a bottom-up merge sort of the
positions of each row, runs of width 1, 2, 4, ...; in each pass every element finds its new
place by a binary search in the other run of its pair (a left element passes the right-run
elements that compare before it, a right element the left-run elements it does not compare
before), with the comparator emitted inline on the operands' values at two positions.  At the
end every output takes its operand's values in the sorted order.

A unit of the parallel range is one row (one position of the other dimensions); its two
position arrays (2 x 8 bytes per element) come from ``malloc``.  (For a comparator that is no
strict weak order the merge may place two elements at one position; the positions stay valid
row positions, so the kernel never reads outside its operands, where the evaluator's answer is
undefined too.)
"""

from __future__ import annotations

from llvmlite import ir

from ..errors import UnsupportedError
from ..hlo.ir import Computation
from .elemental import const_i64
from .reductions import apply_scalar_computation
from .toolkit import counted_loop, entry_alloca, kernel_function, KernelBuffers, KernelSpec, product, RunSizes, \
    unknown_axes

_I8P, _I64 = ir.IntType(8).as_pointer(), ir.IntType(64)


def _libc(module: ir.Module, name: str, ret, args):
    fn = module.globals.get(name)
    return fn if fn is not None else ir.Function(module, ir.FunctionType(ret, args), name)


def emit_sort_kernel(module: ir.Module, name: str, comp: Computation) -> KernelSpec:
    sort = comp.root
    operands = sort.operands
    if any(o.opcode != "parameter" for o in operands):
        raise UnsupportedError("a fused sort has no native code path")
    dims = list(operands[0].shape.dims)
    if not dims:
        raise UnsupportedError("a sort of scalars has no native code path (nothing to sort)")
    axis = sort.attrs["dimensions"][0]
    outer, n, inner = int(product(dims[:axis])), dims[axis], int(product(dims[axis + 1:]))
    out_shapes = sort.shape.leaves() if sort.shape.is_tuple else [sort.shape]
    comparator = sort.attrs["to_apply"]

    fn, b = kernel_function(module, name)
    params = comp.parameters
    bufs = KernelBuffers(b, fn.args[0], [p.shape for p in params] + out_shapes)
    slots = [o.parameter_number for o in operands]
    outs = [len(params) + k for k in range(len(out_shapes))]
    rows = outer * inner
    if rows == 0 or n == 0:
        b.ret_void()
        return KernelSpec(name, "sort", 0, 1)
    malloc = _libc(module, "malloc", _I8P, [_I64])
    free = _libc(module, "free", ir.VoidType(), [_I8P])
    lo_slot, hi_slot = entry_alloca(b, _I64), entry_alloca(b, _I64)
    # The row's length, read when the kernel runs where the sorted axis is a batch of unknown
    # size (one kernel for every length: the merge passes then loop until a run covers it).
    length_unknown = axis in unknown_axes(comp, operands[0])
    run_sizes = RunSizes(b, fn.args[0], len(params) + len(out_shapes)) if length_unknown else None
    n_v = run_sizes.size(n) if length_unknown else const_i64(n)
    cur_slot, nxt_slot = entry_alloca(b, _I64.as_pointer()), entry_alloca(b, _I64.as_pointer())
    width_slot = entry_alloca(b, _I64)

    def row_unit(r):
        o, i = b.udiv(r, const_i64(inner)), b.urem(r, const_i64(inner))
        start = b.add(b.mul(o, b.mul(n_v, const_i64(inner))), i)        # element j at start + j * inner

        def offset(j):
            return b.add(start, b.mul(j, const_i64(inner)))

        def less(lhs, rhs):
            args = []
            for s in slots:
                args += [bufs.load(b, s, offset(lhs)), bufs.load(b, s, offset(rhs))]
            (result,) = apply_scalar_computation(b, comparator, args)
            return result

        raw = b.call(malloc, [b.mul(n_v, const_i64(2 * 8))])
        first = b.bitcast(raw, _I64.as_pointer())
        b.store(first, cur_slot)
        b.store(b.gep(first, [n_v]), nxt_slot)
        counted_loop(b, const_i64(0), n_v, "init", lambda j: b.store(j, b.gep(first, [j])))

        def merge_pass(width):
            cur, nxt = b.load(cur_slot), b.load(nxt_slot)
            pair = b.shl(width, const_i64(1))
            # (a comparator that is no strict weak order can send two elements to one place
            # and none to another: the place keeps a valid position, never garbage)
            counted_loop(b, const_i64(0), n_v, "keep",
                         lambda j: b.store(b.load(b.gep(cur, [j])), b.gep(nxt, [j])))

            def element(j):
                base = b.mul(b.udiv(j, pair), pair)
                in_left = b.icmp_unsigned("<", b.sub(j, base), width)
                right_start = b.add(base, width)
                right_len = b.select(b.icmp_signed("<", n_v, right_start), const_i64(0),
                                     b.sub(n_v, right_start))
                right_len = b.select(b.icmp_signed("<", width, right_len), width, right_len)
                other_start = b.select(in_left, right_start, base)
                other_len = b.select(in_left, right_len, width)
                me = b.load(b.gep(cur, [j]))
                b.store(const_i64(0), lo_slot)
                b.store(other_len, hi_slot)
                head = b.append_basic_block("search.head")
                body = b.append_basic_block("search.body")
                done = b.append_basic_block("search.done")
                b.branch(head)
                b.position_at_end(head)
                lo, hi = b.load(lo_slot), b.load(hi_slot)
                b.cbranch(b.icmp_signed("<", lo, hi), body, done)
                b.position_at_end(body)
                mid = b.lshr(b.add(lo, hi), const_i64(1))
                probe = b.load(b.gep(cur, [b.add(other_start, mid)]))
                # a left element moves past b in the right run if b < a; a right element b
                # moves past a in the left run unless b < a (equal elements keep their order)
                b_before_a = less(b.select(in_left, probe, me), b.select(in_left, me, probe))
                go_right = b.select(in_left, b_before_a, b.not_(b_before_a))
                b.store(b.select(go_right, b.add(mid, const_i64(1)), lo), lo_slot)
                b.store(b.select(go_right, hi, mid), hi_slot)
                b.branch(head)
                b.position_at_end(done)
                new_pos = b.select(in_left, b.add(j, lo), b.add(b.sub(j, width), lo))
                b.store(me, b.gep(nxt, [new_pos]))
            counted_loop(b, const_i64(0), n_v, "elem", element)
            b.store(nxt, cur_slot)
            b.store(cur, nxt_slot)

        if length_unknown:                   # (widths 1, 2, 4, ... below the length read)
            b.store(const_i64(1), width_slot)
            head, body, done = (b.append_basic_block(f"passes.{k}") for k in ("head", "body", "done"))
            b.branch(head)
            b.position_at_end(head)
            b.cbranch(b.icmp_signed("<", b.load(width_slot), n_v), body, done)
            b.position_at_end(body)
            width = b.load(width_slot)
            merge_pass(width)
            b.store(b.shl(width, const_i64(1)), width_slot)
            b.branch(head)
            b.position_at_end(done)
        width = 1
        while width < n and not length_unknown:     # (n is known: the passes are unrolled)
            merge_pass(const_i64(width))
            width *= 2
        perm = b.load(cur_slot)

        def gather(j):
            source = offset(b.load(b.gep(perm, [j])))
            for s, out in zip(slots, outs):
                bufs.store(b, out, offset(j), bufs.load(b, s, source))
        counted_loop(b, const_i64(0), n_v, "out", gather)
        b.call(free, [raw])

    counted_loop(b, fn.args[1], fn.args[2], "row", row_unit)
    b.ret_void()
    passes = max(1, (n - 1).bit_length())
    if length_unknown:              # (work in proportion to the length: the threading guess)
        return KernelSpec(name, "sort", rows, n * 64, sizes=tuple(run_sizes.values))
    return KernelSpec(name, "sort", rows, n * passes * passes)
