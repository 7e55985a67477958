"""Reduction fusions over the kept index: the general reduction kernel.

The kernel (``void kernel(i8** buffers, i64 begin, i64 end)``, as every loop kernel) iterates
over the kept ("outer") index; per outer index each reduction runs in turn over the reduced
dims, and values after a reduction (a mean's division, softmax's ``exp(x - max)``) are
computed from the reduced values held in registers.  Variadic and custom reducers (argmax, a
reducer computation) are applied element by element in the evaluator's order.

Float additions in reductions are summed in blocks of ``BLOCK`` elements (vectorized, in the
element type) whose sums are accumulated in double precision: as accurate as NumPy's
pairwise summation, at full vector speed.  ``block_type``, ``reduction_interleave`` and
``apply_scalar_computation`` are shared with the column and full reduction kernels (and the
scatter kernels, which apply a combiner computation the same way).
"""

from __future__ import annotations

from llvmlite import ir

from ..errors import UnsupportedError
from ..hlo.ir import Computation, Instruction
from ..hlo.opcodes import COSTLY_TO_RECOMPUTE, ELEMENTWISE, TYPE_AGNOSTIC
from ..hlo.shapes import compute_type, is_low_precision
from . import arg_reductions
from .compute_bound import prefer_wide_vectors
from .elemental import ElementalEmitter, const_i64, delinearize, linear_index, llvm_type
from .masked_ranges import true_range
from .run_sizes import at_least
from .toolkit import (ancestors, BLOCK, combine_values, componentwise, counted_loop, entry_alloca,
                      expand_index, kernel_function, kernel_outputs, KernelBuffers, KernelSpec, load_at,
                      MINMAX_INTERLEAVE, NanTrackingExtreme, narrow_float, nest, product, reducer_opcode,
                      ReductionPlan, squeeze_dims)


# Rows at least this long (elements) get 512-bit vectors where the work per element asks for
# them (``compute_bound.prefer_wide_vectors``: a softmax's exp, a layernorm's rsqrt); shorter
# rows would spend the wide vectors' lanes on remainders.  Measured on a Sapphire Rapids core:
# bf16 attention's softmax (8x128 rows of 128) 136 -> 119 us, the f32 attention module
# (4 heads) 203 -> 190 us.
WIDE_VECTOR_MIN_TRIP = 64


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


def _accumulate(b, em, plan, reduce, outer_index, name, keep=None, reuse=None):
    """Emit the reduction of ``reduce`` at ``outer_index``; returns the result value (a list
    of values for a variadic reduction).  ``keep(idx)``, when given, runs at every reduced
    element after the operand is computed (to store a value of it for a later phase);
    ``reuse(idx)`` before it (to read back a value an earlier phase stored)."""
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
    t, ty, x_type = block_type(t, blocked), llvm_type(block_type(t, blocked)), ty
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
                if reuse is not None:
                    reuse(idx)
                x = em.value(x_instr, idx)
                if keep is not None:
                    keep(idx)
                if x_type != ty:
                    x = b.fpext(x, ty)
                if extreme is not None:
                    extreme.add(x)
                else:
                    b.store(combine_values(b, em, opcode, t, b.load(acc_slot), x), acc_slot)
            counted_loop(b, lo, hi, name + "r", body, interleave=reduction_interleave(opcode, x_instr, keep))
        # (a run-time length takes the blocked loop: one block when short, the same sum)
        if blocked and not at_least(BLOCK, inner, unknown=False):
            def block_body(k):
                lo = b.mul(k, const_i64(BLOCK))
                hi = b.add(lo, const_i64(BLOCK))
                hi = b.select(b.icmp_signed(">", hi, const_i64(inner)), const_i64(inner), hi)
                b.store(_zero(ty), acc_slot)
                run_block(lo, hi)
                b.store(_wide_add(b, b.load(total_slot), _widen(b, b.load(acc_slot), wide)), total_slot)
            counted_loop(b, const_i64(0), const_i64(-(-inner // BLOCK)), name + "blk", block_body)
        else:
            whole = const_i64(0), const_i64(inner)
            # (a 1-D slice of index-dependent length masked to full length: its true length)
            run_block(*(true_range(b, em, reduce, *whole) if keep is None and reuse is None and len(red_dims) == 1
                        else whole))
            if blocked:
                b.store(_wide_add(b, b.load(total_slot), _widen(b, b.load(acc_slot), wide)), total_slot)
                b.store(_zero(ty), acc_slot)

    nest(b, list(red_dims[:-1]), name + "o", innermost)
    if extreme is not None:
        return extreme.result()
    if blocked:
        return narrow_float(b, b.load(total_slot), x_type)
    return b.load(acc_slot)


def block_type(t: str, blocked: bool) -> str:
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
    if plan.red_dims and at_least(plan.red_dims[-1], WIDE_VECTOR_MIN_TRIP):
        prefer_wide_vectors(fn, comp)    # long rows of costly elements: see WIDE_VECTOR_MIN_TRIP
    # (a reduction's outputs never share memory with its operands: see _kept_row_value)
    bufs = KernelBuffers(b, fn.args[0], shapes, first_output=len(params))
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

        first = _first_phase_value(plan, kept_value, kept_phase)
    else:
        first = None
    if first is not None:
        def keep_first(idx):
            bufs.store(b, kept_buffer, linear_index(b, idx, plan.in_dims), em.value(first, idx))

        def reuse_first(idx):
            reduced[id(first)] = bufs.load(b, kept_buffer, linear_index(b, idx, plan.in_dims))

    row_divides = _row_divides(comp, plan)

    def outer_body(o):
        reduced.clear()
        tuples = {}
        outer_index = delinearize(b, o, plan.outer_dims)
        for n, r in enumerate(plan.reduces):
            # (values emitted in the previous reduction's loop do not dominate what follows it:
            # a bound two masked reductions share, trmm's ``i + 1``, is emitted again)
            em.reset_memo()
            reuse = None
            if first is not None and r is kept_phase:
                reuse = reuse_first
            value = _accumulate(b, em, plan, r, outer_index, f"red{n}",
                                keep if kept is not None and r is kept_phase else
                                keep_first if first is not None and r is plan.reduces[0] else None, reuse)
            if reuse is not None:
                reduced.pop(id(first), None)
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
            def write_row(red_index, reciprocals=()):
                em.reset_memo()
                idx = plan.merge(outer_index, red_index)
                if kept is not None:
                    reduced[id(kept_value)] = bufs.load(b, kept_buffer, linear_index(b, idx, plan.in_dims))
                for d, total, recip in reciprocals:
                    x = em.value(d.operands[0], idx)
                    reduced[id(d)] = em.corrected_quotient(x, b.fmul(x, recip), total, recip)
                for k, out in row_outputs:
                    bufs.store(b, len(params) + k, linear_index(b, idx, plan.in_dims), em.value(out, idx))
                if kept is not None:
                    del reduced[id(kept_value)]
                for d, _, _ in reciprocals:
                    del reduced[id(d)]
            if row_divides:
                # Each division by a row's reduced value as a multiplication by its reciprocal
                # (one division a row) and a correction to the division's rounding, where the
                # reciprocal is a normal number, else divided.
                sums = [reduced[id(r)] for _, r in row_divides]
                recips = [b.fdiv(ir.Constant(v.type, 1.0), v) for v in sums]
                ok = _all(b, [_reciprocal_is_safe(b, v) for v in sums])
                with b.if_else(ok) as (then, otherwise):
                    with then:
                        nest(b, list(plan.red_dims), "wr",
                             lambda red_index: write_row(red_index, list(zip((d for d, _ in row_divides), sums, recips))))
                    with otherwise:
                        nest(b, list(plan.red_dims), "w", write_row)
            else:
                nest(b, list(plan.red_dims), "w", write_row)

    for (out, element), shape in zip(outputs, out_shapes):
        if squeeze_dims(shape.dims) != squeeze_dims(plan.outer_dims) and (shape.dims != plan.in_dims or element is not None):
            raise UnsupportedError("a reduction fusion output outside the reduced and input spaces")
    counted_loop(b, fn.args[1], fn.args[2], "outer", outer_body)
    b.ret_void()
    return KernelSpec(name, "reduce", product(plan.outer_dims), product(plan.red_dims))


def reduction_interleave(opcode: str, operand: Instruction, keep) -> int:
    """How many vector iterations a row reduction's loop keeps in flight (see
    ``toolkit._loop_metadata``).  Measured side by side on 1024-wide rows: 4 for max/min (row
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


def _row_divides(comp: Computation, plan) -> list:
    """The divisions of a row's elements by the row's reduced value (softmax's ``e / sum``) on
    f32 or f64: (divide, reduce) pairs.  XLA's algebraic simplifier turns ``A / broadcast(B)``
    into ``A * broadcast(1 / B)`` (XLA:CPU's optimized HLO of a softmax shows it); the output
    pass does the same, a multiplication instead of a division per element (a vector division
    takes several times a multiplication's issue slots).  One FMA correction a element
    (``ElementalEmitter.corrected_quotient``) then rounds ``x * (1/s)`` as ``x / s`` rounds,
    where ``1/s`` is a normal number, which the kernel checks per row
    (``_reciprocal_is_safe``); the division stays for rows where it is not."""
    reduce_ids = {id(r) for r in plan.reduces if not r.shape.is_tuple}
    found = []
    for i in comp.instructions:
        if i.opcode != "divide" or i.shape.element_type not in ("f32", "f64") or i.shape.dims != plan.in_dims:
            continue
        d = i.operands[1]
        while d.opcode in ("broadcast", "reshape", "bitcast") and id(d) not in reduce_ids:
            d = d.operands[0]
        if id(d) in reduce_ids and d.shape.element_type == i.shape.element_type:
            found.append((i, d))
    return found


def _reciprocal_is_safe(b: ir.IRBuilder, v):
    """Whether ``x * (1/v)`` stays within an ulp or so of ``x / v``: ``|v|`` in
    [2**-126, 2**126] for f32 (2**-1022, 2**1022 for f64: ``1/v`` is then a normal number), or
    ``v`` zero, infinite or NaN (both forms give the same inf, zero or NaN)."""
    f64 = isinstance(v.type, ir.DoubleType)
    lo, hi = (2.0 ** -1022, 2.0 ** 1022) if f64 else (2.0 ** -126, 2.0 ** 126)
    mag = b.call(b.module.declare_intrinsic("llvm.fabs", [v.type]), [v])
    normal = b.and_(b.fcmp_ordered(">=", mag, ir.Constant(v.type, lo)), b.fcmp_ordered("<=", mag, ir.Constant(v.type, hi)))
    special = b.or_(b.fcmp_ordered("==", mag, ir.Constant(v.type, 0.0)),
                    b.or_(b.fcmp_ordered("==", mag, ir.Constant(v.type, float("inf"))), b.fcmp_unordered("uno", v, v)))
    return b.or_(normal, special)


def _all(b: ir.IRBuilder, flags: list):
    result = flags[0]
    for f in flags[1:]:
        result = b.and_(result, f)
    return result


def _first_phase_value(plan, kept_value: Instruction, kept_phase: Instruction):
    """Softmax on bf16 scores: the first phase's operand (``f32(round(round(dot) * scale))``,
    two roundings and a multiply) is computed again by the second phase under its ``exp``.
    When that operand rounds to a narrow float on the way (several instructions an element)
    or is costly, the first phase stores it into the output buffer and the second reads it
    back; the second then overwrites the same element with its kept value (``exp``), which
    the output pass reads, as without this.

    Returns the value or None.  Only for two phases whose second keeps a value, where the
    second phase's operand uses the first's operand only at the element it reduces
    (elementwise, as the output pass uses the kept value) and reaches array parameters
    only through it, and where the value has the output buffer's element type (stored
    exactly)."""
    if len(plan.reduces) != 2 or kept_phase is not plan.reduces[1]:
        return None
    if plan.reduces[0].shape.is_tuple or reducer_opcode(plan.reduces[0]) is None:
        return None                     # (a variadic or custom first phase keeps nothing)
    value = plan.reduces[0].operands[0]
    if value.shape.dims != plan.in_dims or value.shape.element_type != kept_value.shape.element_type:
        return None
    if not _reads_only_through(kept_phase.operands[0], value, {id(r) for r in plan.reduces}):
        return None
    worth = any(i.opcode in COSTLY_TO_RECOMPUTE or
                (is_low_precision(i.shape.element_type) and i.opcode not in TYPE_AGNOSTIC)
                for i in ancestors([value]))
    return value if worth else None


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
