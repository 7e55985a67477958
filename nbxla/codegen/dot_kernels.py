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
from ..hlo.shapes import compute_type, is_complex, is_float
from ..passes.fused_dots import dot_epilogue_refusal, fused_dot
from . import bf16
from .elemental import ElementalEmitter, const_i64, delinearize, linear_index, llvm_type
from .run_sizes import at_least
from .toolkit import (counted_loop, entry_alloca, kernel_function, kernel_outputs, KernelBuffers,
                      KernelSpec, load_at, product, RunSizes, unknown_axes)

# Columns of one output row accumulated at a time (a stack array of this many accumulators).
CHUNK = 256
# Largest rhs (contraction x columns elements) copied to the stack once per batch element when
# it is not contiguous along the row (q @ k^T), so that the column loop reads it as vectors.
PACK_LIMIT = 8192
# Register blocking (see ``_register_blocked``): widest output row (bytes) held as vector
# accumulators, and how many vector registers the accumulators of one block of rows may take
# (of AVX-512's 32 / AVX2's 16: the rest hold the rhs row and the broadcast lhs values).
BLOCKED_ROW_BYTES = 256
BLOCKED_REGISTERS = 12


def _itemsize(t: str) -> int:
    """Bytes of a register-blocked accumulator element (0: not register-blocked)."""
    return {"f32": 4, "f64": 8}.get(t, 0)


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
    complex_sum = is_complex(acc_t)
    if not is_float(acc_t) and not complex_sum and acc_t[0] not in "su":
        raise UnsupportedError(f"a {out_t} dot has no native code path")
    acc_ty = llvm_type(acc_t)
    # (complex: a {re, im} struct, zeroinitializer)
    zero = ir.Constant(acc_ty, None if complex_sum else 0.0 if is_float(acc_t) else 0)
    # Sizes read when the kernel runs, where they are a batch of unknown size: the
    # contraction's length (``x.T @ g``, a weight gradient) and the row's length (a matrix
    # times a vector, ``x @ w`` -> [b]); else constants.  One kernel for every batch size.
    run_sizes = None
    contraction_count = row_count = None
    if any(d in lc for d in unknown_axes(comp, lhs)) or any(d in rc for d in unknown_axes(comp, rhs)):
        run_sizes = RunSizes(b, fn.args[0], len(params) + len(outputs))
        contraction_count = run_sizes.size(product(contracted))
    if dims and len(dims) - 1 in unknown_axes(comp, dot):
        run_sizes = run_sizes or RunSizes(b, fn.args[0], len(params) + len(outputs))
        row_count = run_sizes.size(n)
    width = CHUNK if row_count is not None else min(n, CHUNK)
    acc = entry_alloca(b, ir.ArrayType(acc_ty, max(width, 1)))
    n_value = row_count if row_count is not None else const_i64(n)

    def contraction_loop(body):
        count = contraction_count if contraction_count is not None else const_i64(product(contracted))
        counted_loop(b, const_i64(0), count, "c", body)

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
    elif run_sizes is None and len(rf) == 1 and varies[1] and along_row[0] and n <= CHUNK \
            and n * product(contracted) <= PACK_LIMIT:
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
        if complex_sum:
            return complex_multiply_add(total, x, y)
        if is_float(acc_t):
            # fmuladd: a fused multiply-add where the machine has one (as BLAS and XLA use),
            # half the instructions of a multiply and an add
            return em.intrinsic("llvm.fmuladd", acc_ty, [x, y, total])
        return b.add(total, b.mul(x, y))

    def complex_multiply_add(total, x, y):
        # (t + x y per part, as two fused multiply-adds each: re = t + xr yr - xi yi,
        # im = t + xr yi + xi yr; BLAS's complex GEMMs sum the same four products)
        part = acc_ty.elements[0]
        (tr, ti), (xr, xi), (yr, yi) = em.parts(total), em.parts(x), em.parts(y)

        def fma(a, c, t):
            return em.intrinsic("llvm.fmuladd", part, [a, c, t])
        return em.pack(fma(xr, yr, fma(b.fneg(xi), yi, tr)), fma(xr, yi, fma(xi, yr, ti)))

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
                if complex_sum:
                    step = complex_multiply_add(b.load(total), x, y)
                elif is_float(acc_t):
                    step = b.fadd(b.load(total), b.fmul(x, y, flags=("contract",)),
                                  flags=("reassoc", "nsz", "contract"))
                else:
                    step = b.add(b.load(total), b.mul(x, y))
                b.store(step, total)
            contraction_loop(contraction)
            em.reset_memo()
            em.reduced[id(dot)] = em.convert_value(b.load(total), acc_t, ct)
            for k, out in enumerate(outputs):
                bufs.store(b, len(params) + k, linear_index(b, full, dims), em.value(out, full))
            del em.reduced[id(dot)]
        counted_loop(b, const_i64(0), n_value, "col", column)

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
        contraction_loop(contraction)

        epilogue_row(outer, j0, count)

    def epilogue_row(outer, j0, count):
        """The epilogue of columns [j0, j0 + count) of the row at ``outer``, the dot's values
        in the ``acc`` slots; the outputs stored."""
        def epilogue(jj):
            em.reset_memo()
            em.reduced[id(dot)] = em.convert_value(b.load(slot(jj)), acc_t, ct)
            full = outer + [jj if j0 is None else b.add(j0, jj)] if dims else []
            for k, out in enumerate(outputs):
                bufs.store(b, len(params) + k, linear_index(b, full, dims), em.value(out, full))
            del em.reduced[id(dot)]
        counted_loop(b, const_i64(0), count, "epi", epilogue)

    # Register blocking: ``block_rows`` rows of one batch element at a time, each row's n
    # accumulators one vector value (registers), per contraction index one vector load of the
    # rhs row (contiguous: a parameter's own row, or the packed copy) and, per row, one
    # broadcast lhs value and one vector fused multiply-add.  The scalar-slot loop above
    # keeps each accumulator in memory (a store and a load per multiply-add).
    m_rows = product(lf_dims)
    vector_bytes = n * _itemsize(acc_t)
    rhs_param = dot.operands[1] if dot.operands[1].opcode == "parameter" else None
    blocked = (row_count is None and is_float(acc_t) and acc_t == out_t and {lhs.shape.element_type, rhs.shape.element_type} == {out_t}
               and varies == (False, True) and len(rf) == 1 and dims and 0 < vector_bytes <= BLOCKED_ROW_BYTES
               and (form == "packed" or (form == "columns" and along_row[1] and rhs_param is not None)))
    direct_store = outputs == [dot]
    # (a row of unknown length is never blocked: its register count is no number)
    registers = max(1, -(-vector_bytes // 64)) if row_count is None else 1
    # (rows known only when the kernel runs -- a batch of unknown size as the lhs's free
    # dim -- are not a cap: a block that does not fit the range runs row by row)
    rows_unknown = any(len(lb) <= d < len(lb) + len(lf) for d in unknown_axes(comp, dot))
    block_rows = max(1, min(8, BLOCKED_REGISTERS // registers, *(() if rows_unknown else (m_rows,))))
    if block_rows < 2:
        blocked = False
    if blocked:
        vec_ty = ir.VectorType(acc_ty, n)
        accumulators = [entry_alloca(b, vec_ty) for _ in range(block_rows)]
        zero_vec = ir.Constant(vec_ty, [zero] * n)
        # (llvmlite's declare_intrinsic names no vector overloads)
        name_ = f"llvm.fmuladd.v{n}{acc_t}"
        fmuladd = module.globals.get(name_) or ir.Function(module, ir.FunctionType(vec_ty, [vec_ty] * 3), name_)

    def splat(x):
        v = b.insert_element(ir.Constant(vec_ty, ir.Undefined), x, ir.Constant(ir.IntType(32), 0))
        return b.shuffle_vector(v, ir.Constant(vec_ty, ir.Undefined), ir.Constant(ir.VectorType(ir.IntType(32), n), [0] * n))

    def rhs_row(outer, c, cidx, packed=None):
        """The rhs's n values along the row at contraction index ``c`` (one vector load)."""
        if packed is not None:
            at = b.gep(packed, [const_i64(0), b.mul(c, const_i64(n))])
        else:
            free = rf[0]
            index = [cidx[contracting[1][d]] if d in contracting[1] else
                     const_i64(0) if d == free else outer[positions[1][d]] for d in range(rhs.shape.rank)]
            at = b.gep(bufs.ptrs[rhs_param.parameter_number], [linear_index(b, index, rhs.shape.dims)])
        return b.load(b.bitcast(at, vec_ty.as_pointer()), align=_itemsize(acc_t))

    def row_block(r0, packed=None, rows=None):
        """Rows [r0, r0 + rows) (of one batch element; ``block_rows`` by default), register-blocked."""
        outers = [delinearize(b, b.add(r0, const_i64(q)), row_dims) for q in range(rows or block_rows)]
        for a_ in accumulators[:len(outers)]:
            b.store(zero_vec, a_)

        def contraction(c):
            cidx = delinearize(b, c, contracted) if contracted else []
            y = rhs_row(outers[0], c, cidx, packed)
            for q, outer in enumerate(outers):
                em.reset_memo()
                x = operand(0, outer + [None], cidx)
                total = b.call(fmuladd, [splat(x), y, b.load(accumulators[q])])
                b.store(total, accumulators[q])
        contraction_loop(contraction)
        for q, outer in enumerate(outers):
            if direct_store:
                # (the dot is the output: the row stored as one vector)
                at = b.gep(bufs.ptrs[len(params)], [linear_index(b, outer + [const_i64(0)], dims)])
                b.store(b.load(accumulators[q]), b.bitcast(at, vec_ty.as_pointer()), align=_itemsize(acc_t))
                continue
            b.store(b.load(accumulators[q]), b.bitcast(slot(const_i64(0)), vec_ty.as_pointer()), align=_itemsize(acc_t))
            epilogue_row(outer, None, const_i64(n))

    def rows_of(begin, end, packed=None, base=None):
        """Rows [begin, end): blocks of ``block_rows`` that stay in one batch element, the rest
        one by one (blocks of one row).  ``base``: the first row of the batch element (packed form)."""
        at = entry_alloca(b, ir.IntType(64))
        b.store(begin, at)
        head, body, after = (b.append_basic_block(f"rows.{k}") for k in ("head", "body", "end"))
        b.branch(head)
        b.position_at_end(head)
        r = b.load(at)
        b.cbranch(b.icmp_signed("<", r, end), body, after)
        b.position_at_end(body)
        fits = b.icmp_signed("<=", b.add(r, const_i64(block_rows)), end)
        if base is not None or batch_dims:
            # (a block stays in one batch element; without batch dims the range is one
            # element's rows, so fitting the range is enough -- and the row count, unknown
            # in a program for every batch size, is not read)
            within = b.urem(r, const_i64(m_rows)) if base is None else b.sub(r, base)
            fits = b.and_(fits, b.icmp_signed("<=", b.add(within, const_i64(block_rows)), const_i64(m_rows)))
        with b.if_else(fits) as (whole, rest):
            with whole:
                row_block(r, packed)
                b.store(b.add(r, const_i64(block_rows)), at)
            with rest:
                # (a row left over: one row of vector accumulators -- the scalar-slot loop
                # (``chunk``) stored every multiply-add, 0.35 ns each: 8 rows of 32 f32
                # columns, a block of 6 and two such rows, took 4.7x the time of 6 or 12 rows)
                row_block(r, packed, 1)
                b.store(b.add(r, const_i64(1)), at)
        b.branch(head)
        b.position_at_end(after)

    def row(r):
        outer = delinearize(b, r, row_dims) if row_dims else []
        if form == "inner":
            inner_products(outer)
        elif row_count is None and n <= CHUNK:
            chunk(outer, None, const_i64(n))
        else:
            def wide_chunk(j0):
                left = b.sub(n_value, j0)
                chunk(outer, j0, b.select(b.icmp_signed("<", left, const_i64(CHUNK)), left, const_i64(CHUNK)))
            counted_loop(b, const_i64(0), n_value, "chunk", wide_chunk, step=const_i64(CHUNK))

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
        if blocked:
            # (rows numbered as in the "columns" form: u * rows per element + i)
            first = b.mul(u, const_i64(m_rows))
            rows_of(first, b.add(first, const_i64(m_rows)), packed, base=first)
        else:
            counted_loop(b, const_i64(0), const_i64(product(lf_dims)), "lrow", lhs_row)

    run_sizes = tuple(run_sizes.values) if run_sizes is not None else ()
    if form == "packed":
        counted_loop(b, fn.args[1], fn.args[2], "batch", batch_element)
        b.ret_void()
        return KernelSpec(name, "dot", product(batch_dims), _at_least_one(product(lf_dims) * n * product(contracted)),
                          sizes=run_sizes)
    if blocked and form == "columns":
        rows_of(fn.args[1], fn.args[2])
    else:
        counted_loop(b, fn.args[1], fn.args[2], "row", row)
    b.ret_void()
    return KernelSpec(name, "dot", product(row_dims), _at_least_one(n * product(contracted)), sizes=run_sizes)


def _at_least_one(work):
    """``max(1, work)`` for the threading decision's work per unit, where ``work`` may be a
    run-time size (a product of sizes >= 1: itself)."""
    return work if at_least(work, 1, unknown=False) else 1
