"""The scatter kernel: ``scatter(operands..., indices, updates...)`` of the computation's
parameters, one operand or several (a variadic scatter, as JAX's argmax-style scatters of
(value, index) pairs are).

The outputs start as copies of the operands (nothing is copied when the runtime passes an
operand's own buffer); then the updates are applied one at a time, in row-major order of the
updates with the scatter dimensions outer and the window inner (the evaluator's order: with
duplicate indices, float sums round the same way and the last update of a replace wins).  An
update whose whole window does not fit in the operand is skipped (XLA's semantics).  The
combiner is a recognized binary op (one accumulator instruction), a replace, or any other
computation of scalars, emitted inline on (current values..., update values...).  Operand
batching dims take their index from the paired dim of the indices.  Single-threaded:
duplicate indices make splitting unsafe.
"""

from __future__ import annotations

from llvmlite import ir

from ..errors import UnsupportedError
from ..hlo.ir import Computation, Instruction
from ..hlo.opcodes import NATIVE_COMBINERS
from ..hlo.shapes import is_complex
from .elemental import I1, ElementalEmitter, const_i64, linear_index
from .reductions import apply_scalar_computation
from .toolkit import combine_values, counted_loop, kernel_function, KernelBuffers, KernelSpec, load_at, nest, \
    product, RunSizes, unknown_axes


def scatter_combiner(scatter: Instruction) -> str | None:
    """The recognized combiner of a scatter: a binary opcode of (current, update) for a
    one-operand scatter, or "replace" (the computation returns the updates); None for anything
    else (emitted as a computation)."""
    comp = scatter.attrs["to_apply"]
    params, root = comp.parameters, comp.root
    n = len(params) // 2
    results = list(root.operands) if root.opcode == "tuple" else [root]
    if len(results) == n and all(r is params[n + k] for k, r in enumerate(results)):
        return "replace"
    if n == 1 and root.opcode in NATIVE_COMBINERS and len(root.operands) == 2 and \
            {id(o) for o in root.operands} == {id(p) for p in params} and root.operands[0] is not root.operands[1]:
        return root.opcode
    return None


def emit_scatter_kernel(module: ir.Module, name: str, comp: Computation) -> KernelSpec:
    scatter = comp.root
    if scatter.opcode != "scatter":
        raise UnsupportedError("a scatter kernel whose root is not a scatter")
    if any(o.opcode != "parameter" for o in scatter.operands):
        raise UnsupportedError("a fused scatter has no native code path yet")
    n = (len(scatter.operands) - 1) // 2
    operands, indices, updates = scatter.operands[:n], scatter.operands[n], scatter.operands[n + 1:]
    a = scatter.attrs
    opcode = scatter_combiner(scatter)
    types = [o.shape.element_type for o in operands]
    if opcode == "add" and types[0] == "pred":
        opcode = "or"
    if opcode is not None and opcode != "replace" and is_complex(types[0]) and opcode not in ("add", "multiply"):
        raise UnsupportedError(f"complex scatter with {opcode} has no native code path")
    params = comp.parameters
    k_operands = [params.index(o) for o in operands]
    k_indices = params.index(indices)
    k_updates = [params.index(u) for u in updates]
    out_shapes = scatter.shape.leaves() if scatter.shape.is_tuple else [scatter.shape]
    k_outs = [len(params) + k for k in range(n)]
    fn, b = kernel_function(module, name)
    bufs = KernelBuffers(b, fn.args[0], [p.shape for p in params] + out_shapes)
    em = ElementalEmitter(b, comp, lambda k, index: load_at(b, bufs, k, params[k].shape.dims, index))
    combiner = a["to_apply"]

    odims = operands[0].shape.dims
    udims = updates[0].shape.dims
    idims = indices.shape.dims
    rank = len(odims)
    window_dims = tuple(a.get("update_window_dims", ()))
    inserted = tuple(a.get("inserted_window_dims", ()))
    to_operand = tuple(a.get("scatter_dims_to_operand_dims", ()))
    operand_batching = tuple(a.get("input_batching_dims", ()))
    indices_batching = tuple(a.get("scatter_indices_batching_dims", ()))
    ivd = a.get("index_vector_dim", len(idims))
    scatter_dims = [d for d in range(len(udims)) if d not in window_dims]
    covered = [d for d in range(rank) if d not in inserted and d not in operand_batching]
    window_shape = [udims[d] for d in window_dims]
    extent = [1] * rank
    for k, d in enumerate(covered):
        extent[d] = window_shape[k]
    index_axes = [d for d in range(len(idims)) if d != ivd]     # indices dims, in scatter-dim order
    itype = indices.shape.element_type

    # The updates' count along their first scatter dim, read when the kernel runs where it is
    # a batch of unknown size (a histogram of a batch: ``np.add.at(out, idx, values)``).
    # And the operand's leading size where it is unknown (rows of a table scattered into):
    # the bound the starts are checked against, and the elements copied.
    scatter_counts: list = [udims[d] for d in scatter_dims]
    sizes = RunSizes(b, fn.args[0], len(params) + len(out_shapes))
    if scatter_dims and scatter_dims[0] in unknown_axes(comp, updates[0]):
        scatter_counts[0] = sizes.size(udims[scatter_dims[0]])
    leading: list = list(odims)
    copied = const_i64(product(odims))
    if odims and 0 in unknown_axes(comp, operands[0]):
        leading[0] = sizes.size(odims[0])
        copied = sizes.size(product(odims))
    run_sizes = tuple(sizes.values)

    # 1. out = operand (skipped when they are the same buffer: an in-place update)
    for k_in, k_out in zip(k_operands, k_outs):
        src = b.ptrtoint(bufs.ptrs[k_in], ir.IntType(64))
        dst = b.ptrtoint(bufs.ptrs[k_out], ir.IntType(64))
        copy_block = b.append_basic_block("copy")
        after_copy = b.append_basic_block("copied")
        b.cbranch(b.icmp_unsigned("!=", src, dst), copy_block, after_copy)
        b.position_at_end(copy_block)
        counted_loop(b, const_i64(0), copied, "cp",
                     lambda i, k_in=k_in, k_out=k_out: bufs.store(b, k_out, i, bufs.load(b, k_in, i)))
        b.branch(after_copy)
        b.position_at_end(after_copy)

    # 2. the updates, in order
    def per_scatter_index(sidx):
        starts = {}
        for k, d in enumerate(to_operand):
            sub = list(sidx)
            if ivd < len(idims):
                sub.insert(ivd, const_i64(k))
            v = bufs.load(b, k_indices, linear_index(b, sub, idims))
            starts[d] = em.convert_value(v, itype, "s64")
        for d, idim in zip(operand_batching, indices_batching):
            starts[d] = sidx[index_axes.index(idim)]
        fits = ir.Constant(I1, 1)
        for d in range(rank):
            s = starts.get(d, const_i64(0))
            fits = b.and_(fits, b.icmp_signed(">=", s, const_i64(0)))
            top = const_i64(odims[d] - extent[d]) if isinstance(leading[d], int) else \
                b.sub(leading[d], const_i64(extent[d]))
            fits = b.and_(fits, b.icmp_signed("<=", s, top))
        apply_block = b.append_basic_block("apply")
        skip_block = b.append_basic_block("skip")
        b.cbranch(fits, apply_block, skip_block)
        b.position_at_end(apply_block)

        def per_window_index(widx):
            uidx = [None] * len(udims)
            for d, i in zip(scatter_dims, sidx):
                uidx[d] = i
            for d, i in zip(window_dims, widx):
                uidx[d] = i
            oidx = []
            for d in range(rank):
                s = starts.get(d, const_i64(0))
                if d in covered:
                    w = widx[covered.index(d)]
                    s = w if d not in starts else b.add(s, w)
                oidx.append(s)
            off = linear_index(b, oidx, odims)
            u_off = linear_index(b, uidx, udims)
            news = [bufs.load(b, k, u_off) for k in k_updates]
            if opcode is None:
                currents = [bufs.load(b, k, off) for k in k_outs]
                news = apply_scalar_computation(b, combiner, currents + news)
            elif opcode != "replace":
                news = [combine_values(b, em, opcode, types[0], bufs.load(b, k_outs[0], off), news[0])]
            for k, v in zip(k_outs, news):
                bufs.store(b, k, off, v)
        nest(b, window_shape, "w", per_window_index)
        b.branch(skip_block)
        b.position_at_end(skip_block)

    nest(b, scatter_counts, "s", per_scatter_index)
    b.ret_void()
    return KernelSpec(name, "scatter", 1, max(1, product(udims)), sizes=run_sizes)
