"""The select-and-scatter kernel (max pooling's gradient): ``select-and-scatter(operand,
source, init)`` of the computation's parameters.

As the evaluator's rule: the output starts as ``init`` everywhere; then for each source
position in row-major order, its window over the (padded, dilated) operand picks one element
-- the first in row-major window order that ``select(picked, candidate)`` keeps against every
later candidate, padding never picked -- and the source value is combined into the output
there with ``scatter``.  Windows overlap, so the updates run in that one order, on one thread
(float sums then round as the evaluator's do).  Both computations are emitted inline; a
scatter that is a plain add is one instruction.
"""

from __future__ import annotations

from llvmlite import ir

from ..errors import UnsupportedError
from ..hlo.ir import Computation
from ..hlo.opcodes import NATIVE_COMBINERS
from ..hlo.shapes import is_complex
from .elemental import I1, I64, ElementalEmitter, const_i64, linear_index, llvm_type
from .reductions import apply_scalar_computation
from .toolkit import combine_values, counted_loop, entry_alloca, kernel_function, KernelBuffers, KernelSpec, \
    load_at, nest, product


def emit_select_and_scatter_kernel(module: ir.Module, name: str, comp: Computation) -> KernelSpec:
    sas = comp.root
    if any(o.opcode != "parameter" for o in sas.operands):
        raise UnsupportedError("a fused select-and-scatter has no native code path yet")
    window = sas.attrs["window"].dims
    if any(w.reversal for w in window):
        raise UnsupportedError("select-and-scatter with a reversed window has no native code path yet")
    operand, source, init = sas.operands
    t = sas.shape.element_type
    if is_complex(t):
        raise UnsupportedError("a complex select-and-scatter has no native code path")
    ty = llvm_type(t)
    params = comp.parameters
    k_operand, k_source, k_init = (params.index(o) for o in (operand, source, init))
    fn, b = kernel_function(module, name)
    bufs = KernelBuffers(b, fn.args[0], [p.shape for p in params] + [sas.shape])
    k_out = len(params)
    em = ElementalEmitter(b, comp, lambda k, index: load_at(b, bufs, k, params[k].shape.dims, index))
    select, scatter = sas.attrs["select"], sas.attrs["scatter"]
    root = scatter.root
    plain_add = root.opcode == "add" and root.opcode in NATIVE_COMBINERS and \
        {id(o) for o in root.operands} == {id(p) for p in scatter.parameters} and len(scatter.parameters) == 2
    odims = operand.shape.dims

    # 1. the output is init everywhere
    first = bufs.load(b, k_init, const_i64(0))
    counted_loop(b, const_i64(0), const_i64(product(odims)), "init",
                 lambda i: bufs.store(b, k_out, i, first))
    if product(source.shape.dims) == 0 or product(odims) == 0:
        b.ret_void()
        return KernelSpec(name, "select-and-scatter", 1, 1)

    picked_at = entry_alloca(b, I64)
    picked_value = entry_alloca(b, ty)

    # 2. per source position: pick, then scatter
    def per_source(sidx):
        b.store(const_i64(-1), picked_at)
        b.store(ir.Constant(ty, 0.0 if t[0] in "fb" else 0), picked_value)

        def per_window(widx):
            inside = ir.Constant(I1, 1)
            position = []
            for d, (w, s, k, n) in enumerate(zip(window, sidx, widx, odims)):
                q = b.add(b.mul(s, const_i64(w.stride)), b.mul(k, const_i64(w.window_dilation)))
                q = b.sub(q, const_i64(w.pad_low))
                inside = b.and_(inside, b.icmp_signed(">=", q, const_i64(0)))
                if w.base_dilation != 1:
                    inside = b.and_(inside, b.icmp_signed("==", b.srem(q, const_i64(w.base_dilation)),
                                                         const_i64(0)))
                    q = b.sdiv(q, const_i64(w.base_dilation))
                inside = b.and_(inside, b.icmp_signed("<", q, const_i64(n)))
                position.append(q)
            with b.if_then(inside):
                at = linear_index(b, position, odims)
                candidate = bufs.load(b, k_operand, at)
                none_yet = b.icmp_signed("<", b.load(picked_at), const_i64(0))
                (keeps,) = apply_scalar_computation(b, select, [b.load(picked_value), candidate])
                take = b.or_(none_yet, b.not_(keeps))
                with b.if_then(take):
                    b.store(at, picked_at)
                    b.store(candidate, picked_value)
        nest(b, [w.size for w in window], "w", per_window)

        at = b.load(picked_at)
        with b.if_then(b.icmp_signed(">=", at, const_i64(0))):
            value = bufs.load(b, k_source, linear_index(b, sidx, source.shape.dims))
            current = bufs.load(b, k_out, at)
            if plain_add:
                new = combine_values(b, em, "or" if t == "pred" else "add", t, current, value, ordered=True)
            else:
                (new,) = apply_scalar_computation(b, scatter, [current, value])
            bufs.store(b, k_out, at, new)

    nest(b, list(source.shape.dims), "s", per_source)
    b.ret_void()
    return KernelSpec(name, "select-and-scatter", 1, max(1, product(source.shape.dims) * product(
        [w.size for w in window])))
