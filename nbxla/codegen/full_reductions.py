"""Full reductions split across threads (``mean(3*x**2 + y)``): a ``partial`` kernel reduces
a flat range into one slot per chunk of a scratch buffer, and a ``finish`` kernel combines
the slots and computes the epilogue.  Blocked float sums as in ``reductions.py``.
"""

from __future__ import annotations

from llvmlite import ir

from ..hlo.ir import Computation
from ..hlo.shapes import compute_type
from .elemental import ElementalEmitter, const_i64, llvm_type
from .masked_ranges import true_range
from .reductions import block_type, reduction_interleave
from .toolkit import (BLOCK, combine_values, counted_loop, entry_alloca, kernel_function, kernel_outputs,
                      KernelBuffers, KernelSpec, LinearEmitter, NanTrackingExtreme, narrow_float,
                      partial_type, product, reducer_opcode)


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
        begin, end = true_range(b, em, r, fn.args[1], fn.args[2])
        pty, ty = partial_type(r), llvm_type(t)
        blocked = pty != ty
        x_type, t = ty, block_type(t, blocked)
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

        interleave = reduction_interleave(opcode, r.operands[0], None)
        if blocked:
            def block(k, acc=acc, total=total, element=element, interleave=interleave):
                lo = b.add(begin, b.mul(k, const_i64(BLOCK)))
                hi = b.add(lo, const_i64(BLOCK))
                hi = b.select(b.icmp_signed(">", hi, end), end, hi)
                b.store(ir.Constant(ty, 0.0), acc)
                counted_loop(b, lo, hi, f"p{n}", element, interleave=interleave)
                b.store(b.fadd(b.load(total), b.fpext(b.load(acc), pty)), total)
            nblocks = b.sdiv(b.add(b.sub(end, begin), const_i64(BLOCK - 1)), const_i64(BLOCK))
            counted_loop(b, const_i64(0), nblocks, f"blk{n}", block)
            b.store(b.load(total), _slot_pointer(b, scratch, n, pty))
        elif NanTrackingExtreme.applies(opcode, t):
            extreme = NanTrackingExtreme(b, t, opcode == "maximum", em.value(r.operands[1], []))

            def add(i, r=r, extreme=extreme):
                em.reset_memo()
                extreme.add(em.value(r.operands[0], [i]))
            counted_loop(b, begin, end, f"p{n}", add, interleave=interleave)
            b.store(extreme.result(), _slot_pointer(b, scratch, n, ty))
        else:
            counted_loop(b, begin, end, f"p{n}", element, interleave=interleave)
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
