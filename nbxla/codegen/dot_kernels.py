"""The dot kernel: a fused computation holding one ``dot`` and its elementwise epilogue.

The form it takes (``passes/fused_dots.dot_epilogue_refusal``) is XLA's output fusion (dot +
bias + activation) and JAX's loop fusions of small batched dots: every value computed from the
dot reads it where it is itself evaluated, and every output has the dot's dims.

Rows of the output (all dims but the last) are the parallel range.  Per row, the last dim's
columns are accumulated in a stack array (up to ``CHUNK`` columns at a time): for each
contraction index ``c`` the operand that does not vary along the row is computed once, and the
column loop ``acc[j] += x(c) * y(c, j)`` is plain vector code (independent accumulators, no
reduction across lanes, so LLVM vectorizes it without reassociating anything).  Then each
column's epilogue runs with the dot's value taken from ``acc[j]`` (the elemental emitter's
``reduced`` values, as in row reductions), and the outputs are stored.

Arithmetic follows the evaluator's ``_dot``: operands converted to the result type first; f16,
bf16 and f32 products accumulate in f32 (rounded once to the result type), f64 in f64,
integers in the result type (wrapping).  The sum over the contraction runs in order, with
fused multiply-adds where the machine has them (BLAS orders and fuses it differently: results
agree to rounding, not bit for bit).
"""

from __future__ import annotations

from llvmlite import ir

from ..errors import UnsupportedError
from ..hlo.ir import Computation
from ..hlo.shapes import compute_type, is_float
from ..passes.fused_dots import dot_epilogue_refusal, fused_dot
from . import bf16
from .elemental import ElementalEmitter, const_i64, delinearize, linear_index, llvm_type
from .toolkit import (counted_loop, entry_alloca, kernel_function, kernel_outputs, KernelBuffers,
                      KernelSpec, load_at, product)

# Columns of one output row accumulated at a time (a stack array of this many accumulators).
CHUNK = 256
# Largest rhs (contraction x columns elements) copied to the stack once per batch element when
# it is not contiguous along the row (q @ k^T), so that the column loop reads it as vectors.
PACK_LIMIT = 8192


def emit_dot_kernel(module: ir.Module, name: str, comp: Computation) -> KernelSpec:
    why = dot_epilogue_refusal(comp)
    if why is not None:
        raise UnsupportedError(f"a fused dot in this form has no native code path ({why})")
    dot = fused_dot(comp)
    outputs = kernel_outputs(comp)
    params = comp.parameters
    fn, b = kernel_function(module, name)
    bufs = KernelBuffers(b, fn.args[0], [p.shape for p in params] + [o.shape for o in outputs])
    em = ElementalEmitter(b, comp, lambda k, index: load_at(b, bufs, k, params[k].shape.dims, index))

    dims = dot.shape.dims
    row_dims, n = (dims[:-1], dims[-1]) if dims else ((), 1)
    lhs, rhs = dot.operands
    a = dot.attrs
    lb, lc = list(a.get("lhs_batch_dims", ())), list(a.get("lhs_contracting_dims", ()))
    rb, rc = list(a.get("rhs_batch_dims", ())), list(a.get("rhs_contracting_dims", ()))
    lf = [d for d in range(lhs.shape.rank) if d not in lb and d not in lc]
    rf = [d for d in range(rhs.shape.rank) if d not in rb and d not in rc]
    contracted = [lhs.shape.dims[d] for d in lc]
    # Output dims: batch, lhs free, rhs free.  The last one is an rhs free dim when there is
    # one, else an lhs free dim, else a batch dim: which operands vary along a row.
    varies = (not rf, bool(rf) or not lf)
    positions = ({d: k for k, d in enumerate(lb)} | {d: len(lb) + k for k, d in enumerate(lf)},
                 {d: k for k, d in enumerate(rb)} | {d: len(lb) + len(lf) + k for k, d in enumerate(rf)})
    contracting = ({d: k for k, d in enumerate(lc)}, {d: k for k, d in enumerate(rc)})

    out_t = dot.shape.element_type
    ct = compute_type(out_t)                       # the dot's register type
    acc_t = "f32" if ct == "f16" else ct
    if not is_float(acc_t) and acc_t[0] not in "su":
        raise UnsupportedError(f"a {out_t} dot has no native code path")
    acc_ty = llvm_type(acc_t)
    zero = ir.Constant(acc_ty, 0.0 if is_float(acc_t) else 0)
    width = min(n, CHUNK)
    acc = entry_alloca(b, ir.ArrayType(acc_ty, max(width, 1)))

    # The loop order.  "columns": acc[j] += x(c) * y(c, j), vector code along the row, when
    # the operands that vary along the row are contiguous along it.  "packed" (q @ k^T: the
    # rhs varies along the row with a stride): per batch element the rhs is first copied to
    # the stack with the row contiguous, then "columns" reads the copy.  "inner": a
    # reassociated sum over c per column, when both operands are contiguous along the
    # contraction and the copy would be too large.  Otherwise "columns" with strided reads.
    last_out = len(dims) - 1
    along_row = [positions[k].get(op.shape.rank - 1) == last_out if varies[k] else True
                 for k, op in enumerate(dot.operands)]
    minor_contracted = bool(lc) and lc[-1] == lhs.shape.rank - 1 and rc[-1] == rhs.shape.rank - 1
    batch_dims = [dims[k] for k in range(len(lb))]
    lf_dims = [dims[len(lb) + k] for k in range(len(lf))]
    if all(along_row):
        form = "columns"
    elif len(rf) == 1 and varies[1] and along_row[0] and n <= CHUNK and n * product(contracted) <= PACK_LIMIT:
        form = "packed"
    elif minor_contracted:
        form = "inner"
    else:
        form = "columns"

    def operand(k: int, out_index: list, cidx: list):
        """Operand ``k`` at the element that output ``out_index`` and contraction ``cidx``
        read, converted as the evaluator converts it (to the result type, then widened)."""
        op = dot.operands[k]
        index = [cidx[contracting[k][d]] if d in contracting[k] else out_index[positions[k][d]]
                 for d in range(op.shape.rank)]
        v = em.convert_value(em.value(op, index), compute_type(op.shape.element_type), ct)
        if out_t == "bf16" and op.shape.element_type != "bf16":
            v = bf16.round_to_bf16(b, v)
        return em.convert_value(v, ct, acc_t)

    def multiply_add(total, x, y):
        if is_float(acc_t):
            # fmuladd: a fused multiply-add where the machine has one (as BLAS and XLA use),
            # half the instructions of a multiply and an add
            return em.intrinsic("llvm.fmuladd", acc_ty, [x, y, total])
        return b.add(total, b.mul(x, y))

    def slot(jj):
        return b.gep(acc, [const_i64(0), jj])

    def inner_products(outer):
        """Per column, one sum over the contraction (both operands contiguous along it):
        reassociated, so LLVM vectorizes it with several partial sums."""
        total = entry_alloca(b, acc_ty)

        def column(j):
            full = outer + [j] if dims else []
            b.store(zero, total)

            def contraction(c):
                em.reset_memo()
                cidx = delinearize(b, c, contracted) if contracted else []
                x, y = (operand(k, full, cidx) for k in (0, 1))
                if is_float(acc_t):
                    step = b.fadd(b.load(total), b.fmul(x, y, flags=("contract",)),
                                  flags=("reassoc", "nsz", "contract"))
                else:
                    step = b.add(b.load(total), b.mul(x, y))
                b.store(step, total)
            counted_loop(b, const_i64(0), const_i64(product(contracted)), "c", contraction)
            em.reset_memo()
            em.reduced[id(dot)] = em.convert_value(b.load(total), acc_t, ct)
            for k, out in enumerate(outputs):
                bufs.store(b, len(params) + k, linear_index(b, full, dims), em.value(out, full))
            del em.reduced[id(dot)]
        counted_loop(b, const_i64(0), const_i64(n), "col", column)

    def chunk(outer, j0, count, packed_rhs=None):
        """Columns [j0, j0 + count) of the output row at ``outer``: accumulate, then the
        epilogue.  ``packed_rhs(c, jj)``, when given, reads the rhs from the packed copy."""
        def at(jj):
            return jj if j0 is None else b.add(j0, jj)

        def out_index(jj):
            return outer + [at(jj)] if dims else []

        counted_loop(b, const_i64(0), count, "zero", lambda jj: b.store(zero, slot(jj)))

        def contraction(c):
            cidx = delinearize(b, c, contracted) if contracted else []
            em.reset_memo()
            fixed = [None if varies[k] else operand(k, outer + [None], cidx) for k in (0, 1)]

            def column(jj):
                em.reset_memo()
                x = fixed[0] if fixed[0] is not None else operand(0, out_index(jj), cidx)
                y = fixed[1] if fixed[1] is not None else \
                    packed_rhs(c, jj) if packed_rhs is not None else operand(1, out_index(jj), cidx)
                b.store(multiply_add(b.load(slot(jj)), x, y), slot(jj))
            counted_loop(b, const_i64(0), count, "col", column)
        counted_loop(b, const_i64(0), const_i64(product(contracted)), "c", contraction)

        def epilogue(jj):
            em.reset_memo()
            em.reduced[id(dot)] = em.convert_value(b.load(slot(jj)), acc_t, ct)
            full = out_index(jj)
            for k, out in enumerate(outputs):
                bufs.store(b, len(params) + k, linear_index(b, full, dims), em.value(out, full))
            del em.reduced[id(dot)]
        counted_loop(b, const_i64(0), count, "epi", epilogue)

    def row(r):
        outer = delinearize(b, r, row_dims) if row_dims else []
        if form == "inner":
            inner_products(outer)
        elif n <= CHUNK:
            chunk(outer, None, const_i64(n))
        else:
            def wide_chunk(j0):
                left = b.sub(const_i64(n), j0)
                chunk(outer, j0, b.select(b.icmp_signed("<", left, const_i64(CHUNK)), left, const_i64(CHUNK)))
            counted_loop(b, const_i64(0), const_i64(n), "chunk", wide_chunk, step=const_i64(CHUNK))

    def batch_element(u):
        """All rows of one batch element, the rhs packed first (contraction-major, the row
        contiguous) so that the column loop reads it as vectors."""
        bidx = delinearize(b, u, batch_dims) if batch_dims else []
        k_total = product(contracted)
        packed = entry_alloca(b, ir.ArrayType(acc_ty, k_total * n))

        def pack(c):
            cidx = delinearize(b, c, contracted) if contracted else []

            def column(j):
                em.reset_memo()
                v = operand(1, bidx + [None] * len(lf) + [j], cidx)
                b.store(v, b.gep(packed, [const_i64(0), b.add(b.mul(c, const_i64(n)), j)]))
            counted_loop(b, const_i64(0), const_i64(n), "pack", column)
        counted_loop(b, const_i64(0), const_i64(k_total), "packc", pack)

        def packed_rhs(c, jj):
            return b.load(b.gep(packed, [const_i64(0), b.add(b.mul(c, const_i64(n)), jj)]))

        def lhs_row(i):
            outer = bidx + (delinearize(b, i, lf_dims) if lf_dims else [])
            chunk(outer, None, const_i64(n), packed_rhs)
        counted_loop(b, const_i64(0), const_i64(product(lf_dims)), "lrow", lhs_row)

    if form == "packed":
        counted_loop(b, fn.args[1], fn.args[2], "batch", batch_element)
        b.ret_void()
        return KernelSpec(name, "dot", product(batch_dims), max(1, product(lf_dims) * n * product(contracted)))
    counted_loop(b, fn.args[1], fn.args[2], "row", row)
    b.ret_void()
    return KernelSpec(name, "dot", product(row_dims), max(1, n * product(contracted)))
