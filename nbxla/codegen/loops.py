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

from dataclasses import dataclass

from llvmlite import ir

from ..errors import UnsupportedError
from ..hlo.ir import Computation, Instruction
from ..hlo.shapes import is_complex, is_float
from .elemental import I1, I8, I32, I64, ElementalEmitter, const_i64, llvm_type, row_major_strides, storage_type

BLOCK = 4096
_LINEAR_OPS = {"parameter", "constant", "convert", "reshape", "bitcast", "copy", "select", "clamp",
               "compare"}
_RECOGNIZED_REDUCERS = {"add", "multiply", "maximum", "minimum", "and", "or"}


@dataclass
class KernelSpec:
    """How the runtime calls one kernel."""
    name: str
    style: str                 # "linear", "rows", "reduce", "full-reduce"
    parallel_extent: int       # size of the [begin, end) range
    work_per_unit: int         # elements computed per unit of the range (for threading decisions)
    finish_name: str | None = None
    scratch_slots: int = 0     # full reductions: 8-byte partial results per chunk
    object_entry: str | None = None   # the same kernel taking array objects (see cpu.py)


def _kernel_function(module: ir.Module, name: str) -> tuple[ir.Function, ir.IRBuilder]:
    fnty = ir.FunctionType(ir.VoidType(), [I8.as_pointer().as_pointer(), I64, I64])
    fn = ir.Function(module, fnty, name)
    fn.args[0].name, fn.args[1].name, fn.args[2].name = "buffers", "begin", "end"
    for arg in (fn.args[0],):
        arg.add_attribute("noalias")
    block = fn.append_basic_block("entry")
    return fn, ir.IRBuilder(block)


class _Buffers:
    """Typed pointers to the kernel's buffers, loaded once in the entry block."""

    def __init__(self, b: ir.IRBuilder, arg, shapes: list):
        self.ptrs = []
        for k, shape in enumerate(shapes):
            raw = b.load(b.gep(arg, [const_i64(k)]))
            self.ptrs.append(b.bitcast(raw, storage_type(shape.element_type).as_pointer()))
        self.shapes = shapes

    def load(self, b, k: int, offset) -> ir.Value:
        if is_complex(self.shapes[k].element_type):
            # Two scalar loads (re, im): interleaved accesses LLVM's vectorizer understands.
            p = b.gep(self.ptrs[k], [offset])
            v = ir.Constant(self.ptrs[k].type.pointee, ir.Undefined)
            for part in (0, 1):
                v = b.insert_value(v, b.load(b.gep(p, [ir.Constant(I32, 0), ir.Constant(I32, part)])), part)
            return v
        v = b.load(b.gep(self.ptrs[k], [offset]))
        if self.shapes[k].element_type == "pred":
            return b.icmp_unsigned("!=", v, ir.Constant(I8, 0))
        return v

    def store(self, b, k: int, offset, value) -> None:
        if is_complex(self.shapes[k].element_type):
            p = b.gep(self.ptrs[k], [offset])
            for part in (0, 1):
                b.store(b.extract_value(value, part), b.gep(p, [ir.Constant(I32, 0), ir.Constant(I32, part)]))
            return
        if self.shapes[k].element_type == "pred":
            value = b.zext(value, I8)
        b.store(value, b.gep(self.ptrs[k], [offset]))


def _loop(b: ir.IRBuilder, begin, end, name: str, body, step=None, interleave: int = 1) -> None:
    """``for (i = begin; i < end; i += step) body(i)`` (step 1 by default); leaves the
    builder after the loop.  ``interleave`` > 1 asks LLVM's vectorizer for that many vector
    iterations in flight (see ``_interleave_metadata``)."""
    pre = b.block
    head = b.append_basic_block(f"{name}.head")
    loop = b.append_basic_block(f"{name}.body")
    after = b.append_basic_block(f"{name}.end")
    b.branch(head)
    b.position_at_end(head)
    i = b.phi(I64, name)
    i.add_incoming(begin, pre)
    b.cbranch(b.icmp_signed("<", i, end), loop, after)
    b.position_at_end(loop)
    body(i)
    nxt = b.add(i, const_i64(1) if step is None else step, name=f"{name}.next")
    i.add_incoming(nxt, b.block)
    latch = b.branch(head)
    if interleave > 1:
        latch.set_metadata("llvm.loop", _interleave_metadata(b.module, interleave))
    b.position_at_end(after)


def _interleave_metadata(module: ir.Module, count: int):
    """Loop metadata forcing an interleave count.  Why: interleaving is off for the module
    (it slowed memory-bound loops and doubled compile times), but a reduction whose
    combiner is a long dependency chain (NaN-propagating max: six instructions per vector)
    runs at the chain's latency with one accumulator; several accumulators hide it."""
    inner = module.add_metadata([ir.MetaDataString(module, "llvm.loop.interleave.count"),
                                 ir.Constant(I32, count)])
    loop_id = module.add_metadata([inner])
    loop_id.operands = (loop_id, inner)      # loop IDs refer to themselves (LLVM LangRef)
    return loop_id


def _nest(b, dims, name, body, index=()):
    """Nested loops over ``dims``; ``body(index_list)``."""
    if not dims:
        body(list(index))
        return
    _loop(b, const_i64(0), const_i64(dims[0]), f"{name}{len(index)}",
          lambda i: _nest(b, dims[1:], name, body, index + (i,)))


def _outputs(comp: Computation) -> list[Instruction]:
    root = comp.root
    return list(root.operands) if root.opcode == "tuple" else [root]


def _is_linear(instructions: list[Instruction], dims) -> bool:
    """Can every value be indexed by the output's flat index?"""
    for instr in instructions:
        if instr.opcode == "tuple":
            continue
        if instr.shape.is_tuple:
            return False
        n = instr.shape.size
        same = instr.shape.dims == dims or (n == int(_prod(dims)) and instr.opcode in ("reshape", "bitcast"))
        if instr.opcode == "broadcast" and instr.operands[0].shape.rank == 0:
            continue
        if instr.shape.rank == 0 and instr.opcode in ("constant", "parameter"):
            continue
        if not same:
            return False
        if not (instr.is_elementwise or instr.opcode in _LINEAR_OPS):
            return False
        if instr.opcode in ("reshape", "bitcast") and instr.operands[0].shape.size != n:
            return False
    return True


def _prod(dims) -> int:
    out = 1
    for n in dims:
        out *= n
    return out


class _LinearEmitter(ElementalEmitter):
    """Elemental emitter over flat indices: reshapes are free, parameters are read at i."""

    flat_index = True

    def _reshape(self, instr, index):
        return self.value(instr.operands[0], index)

    def _bitcast(self, instr, index):
        return self._same_bits(instr, self._reshape(instr, index))

    def _broadcast(self, instr, index):
        return self.value(instr.operands[0], [])


def emit_loop_kernel(module: ir.Module, name: str, comp: Computation) -> KernelSpec:
    outputs = _outputs(comp)
    dims = outputs[0].shape.dims
    if any(o.shape.dims != dims for o in outputs):
        raise UnsupportedError("a loop fusion whose outputs have different shapes")
    params = comp.parameters
    shapes = [p.shape for p in params] + [o.shape for o in outputs]
    fn, b = _kernel_function(module, name)
    bufs = _Buffers(b, fn.args[0], shapes)
    begin, end = fn.args[1], fn.args[2]
    if _is_linear(comp.instructions, dims):
        def load(k, index):
            return bufs.load(b, k, index[0] if index and params[k].shape.rank else const_i64(0))
        em = _LinearEmitter(b, comp, load)

        def body(i):
            em.reset_memo()
            for k, out in enumerate(outputs):
                bufs.store(b, len(params) + k, i, em.value(out, [i]))
        _loop(b, begin, end, "i", body)
        b.ret_void()
        return KernelSpec(name, "linear", _prod(dims), 1)

    em = ElementalEmitter(b, comp, lambda k, index: _load_at(b, bufs, k, params[k].shape.dims, index))
    rows, last = dims[:-1], dims[-1:]

    def row_body(r):
        outer = _delinearize(b, r, rows)
        if len(outputs) == 1 and outputs[0].opcode == "concatenate" and dims:
            _concatenated_row(b, em, bufs, len(params), outputs[0], outer)
            return

        def inner(idx):
            em.reset_memo()
            full = outer + idx
            for k, out in enumerate(outputs):
                bufs.store(b, len(params) + k, _linear(b, full, dims), em.value(out, full))
        _nest(b, last, "j", inner)
    _loop(b, begin, end, "row", row_body)
    b.ret_void()
    return KernelSpec(name, "rows", _prod(rows), _prod(last))


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
            bufs.store(b, k_out, _linear(b, out_outer + [out_j], dims), em.value(concat.operands[k], sub_outer + [j]))
        _loop(b, const_i64(0), const_i64(concat.operands[k].shape.dims[-1]), f"cat{k}", column)

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


def _load_at(b, bufs, k, dims, index):
    return bufs.load(b, k, _linear(b, index, dims))


def _linear(b, index, dims):
    acc = None
    for i, stride, n in zip(index, row_major_strides(dims), dims):
        if n == 1:
            continue
        term = i if stride == 1 else b.mul(i, const_i64(stride))
        acc = term if acc is None else b.add(acc, term)
    return acc if acc is not None else const_i64(0)


def _delinearize(b, linear, dims):
    out = []
    strides = row_major_strides(dims)
    for d, (n, stride) in enumerate(zip(dims, strides)):
        if n == 1:
            out.append(const_i64(0))
            continue
        q = linear if stride == 1 else b.udiv(linear, const_i64(stride))
        out.append(q if d == 0 else b.urem(q, const_i64(n)))
    return out


# ---- reductions --------------------------------------------------------------------------------

def _reducer_opcode(reduce: Instruction) -> str | None:
    comp = reduce.attrs["to_apply"]
    root = comp.root
    params = comp.parameters
    if len(params) == 2 and root.opcode in _RECOGNIZED_REDUCERS and \
            {id(o) for o in root.operands} == {id(p) for p in params}:
        return root.opcode
    return None


def _combine(b: ir.IRBuilder, em: ElementalEmitter, opcode: str, t: str, acc, x, ordered=False):
    """``acc (op) x``.  Float sums and products may be reassociated (row reductions vectorize
    along the row that way) unless ``ordered``."""
    fast = () if ordered else ("reassoc", "nsz")
    if is_complex(t):
        (p, q), (r, s) = em._parts(acc), em._parts(x)
        if opcode == "add":
            return em._pack(b.fadd(p, r, flags=fast), b.fadd(q, s, flags=fast))
        if opcode == "multiply":
            return em._pack(*em.complex_multiply(p, q, r, s))
        raise UnsupportedError(f"complex {opcode} reductions have no native code path")
    if opcode == "add":
        if t == "pred":
            return b.or_(acc, x)            # (a one-bit add would be xor; pred add is "or")
        return b.fadd(acc, x, flags=fast) if is_float(t) else b.add(acc, x)
    if opcode == "multiply":
        if t == "pred":
            return b.and_(acc, x)
        return b.fmul(acc, x, flags=fast) if is_float(t) else b.mul(acc, x)
    if opcode in ("and", "or"):
        return getattr(b, opcode + "_")(acc, x)
    return em.minmax(t, x, acc, opcode == "maximum")


class _NanTrackingExtreme:
    """A float max/min accumulation split in two: the max (min) of the numbers, one ``vmaxps``
    per vector (``maxnum`` with no-NaN flags), and a flag set by any NaN; the result is NaN
    when the flag is set.  Why: the NaN-propagating ``llvm.maximum`` (with -0 < +0) is a
    six-instruction dependency chain per vector on x86; this leaves one instruction on the
    chain.  (A NaN makes the max poison under those flags, but the result then is the NaN.)"""

    def __init__(self, b: ir.IRBuilder, t: str, is_max: bool, init):
        self.b, self.ty = b, llvm_type(t)
        self.intrinsic = b.module.declare_intrinsic("llvm.maxnum" if is_max else "llvm.minnum", [self.ty],
                                                    ir.FunctionType(self.ty, [self.ty, self.ty]))
        self.acc, self.nan = _entry_alloca(b, self.ty), _entry_alloca(b, I1)
        self.reset(init)

    @staticmethod
    def applies(opcode: str, t: str) -> bool:
        return opcode in ("maximum", "minimum") and is_float(t) and not is_complex(t)

    def reset(self, init) -> None:
        self.b.store(init, self.acc)
        self.b.store(self.b.fcmp_unordered("uno", init, init), self.nan)

    def add(self, x) -> None:
        b = self.b
        b.store(b.or_(b.load(self.nan), b.fcmp_unordered("uno", x, x)), self.nan)
        b.store(b.call(self.intrinsic, [b.load(self.acc), x], fastmath=("nnan", "nsz")), self.acc)

    def result(self):
        b = self.b
        return b.select(b.load(self.nan), ir.Constant(self.ty, float("nan")), b.load(self.acc))


class _ReductionPlan:
    def __init__(self, comp: Computation):
        self.reduces = [i for i in comp.instructions if i.opcode == "reduce"]
        # Variadic (argmax) or custom reducers: only the row kernel, which applies the
        # reducer computation element by element in the evaluator's order, handles them.
        self.custom = any(r.shape.is_tuple or _reducer_opcode(r) is None for r in self.reduces)
        first = self.reduces[0]
        self.in_dims = first.operands[0].shape.dims
        self.reduced = tuple(sorted(first.attrs["dimensions"]))
        self.outer_dims = tuple(n for i, n in enumerate(self.in_dims) if i not in self.reduced)
        self.red_dims = tuple(self.in_dims[i] for i in self.reduced)

    def require_recognized(self) -> None:
        if self.custom:
            raise UnsupportedError("variadic or custom reducers have no native code path yet")

    def merge(self, outer_index, red_index):
        """The input-space index from an outer index and a reduced index."""
        it_o, it_r = iter(outer_index), iter(red_index)
        return [next(it_r) if d in self.reduced else next(it_o) for d in range(len(self.in_dims))]


def _wide_type(ty):
    """The type blocked sums of ``ty`` are totalled in: double, or {double, double}."""
    if isinstance(ty, ir.LiteralStructType):
        return ir.LiteralStructType([ir.DoubleType(), ir.DoubleType()])
    return ir.DoubleType()


def _zero(ty):
    if isinstance(ty, ir.LiteralStructType):
        return ir.Constant(ty, [ir.Constant(e, 0.0) for e in ty.elements])
    return ir.Constant(ty, 0.0)


def _componentwise(b, fn, ty, *values):
    """``fn`` on each component of struct (complex) values, or on the values themselves."""
    if not isinstance(values[0].type, ir.LiteralStructType):
        return fn(*values)
    out = ir.Constant(ty, ir.Undefined)
    for part in (0, 1):
        out = b.insert_value(out, fn(*[b.extract_value(v, part) for v in values]), part)
    return out


def _widen(b, value, wide):
    elem = wide.elements[0] if isinstance(wide, ir.LiteralStructType) else wide
    return _componentwise(b, lambda v: v if v.type == elem else b.fpext(v, elem), wide, value)


def _wide_add(b, x, y):
    return _componentwise(b, b.fadd, x.type, x, y)


def _narrow(b: ir.IRBuilder, value, ty):
    """double -> ty; to half through float (a direct double->half truncation is a libcall
    that MCJIT cannot resolve)."""
    if isinstance(ty, ir.LiteralStructType):
        return _componentwise(b, lambda v: _narrow(b, v, ty.elements[0]), ty, value)
    if isinstance(ty, ir.HalfType):
        return b.fptrunc(b.fptrunc(value, ir.FloatType()), ty)
    return b.fptrunc(value, ty)


def _entry_alloca(b: ir.IRBuilder, ty: ir.Type):
    """A stack slot in the entry block (mem2reg turns it into registers), not in a loop."""
    entry = b.function.entry_basic_block
    here = b.block
    if entry.is_terminated:
        b.position_before(entry.terminator)
    else:
        b.position_at_end(entry)
    slot = b.alloca(ty)
    b.position_at_end(here)
    return slot


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
        slot = _entry_alloca(b, llvm_type(init.shape.element_type))
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
    _nest(b, list(plan.red_dims), name + "c", body)
    return [b.load(s) for s in slots]


def _accumulate(b, em, plan, reduce, outer_index, name, keep=None):
    """Emit the reduction of ``reduce`` at ``outer_index``; returns the result value (a list
    of values for a variadic reduction).  ``keep(idx)``, when given, runs at every reduced
    element after the operand is computed (to store a value of it for a later phase)."""
    opcode = _reducer_opcode(reduce)
    if reduce.shape.is_tuple or opcode is None:
        assert keep is None
        from . import arg_reductions                  # (arg_reductions builds on this module)
        kind = arg_reductions.arg_reduction_kind(reduce, plan)
        if kind is not None:
            return arg_reductions.emit_arg_reduction(b, em, plan, reduce, outer_index, name, kind)
        values = _accumulate_custom(b, em, plan, reduce, outer_index, name)
        return values if reduce.shape.is_tuple else values[0]
    t = reduce.shape.element_type
    ty = llvm_type(t)
    init = em.value(reduce.operands[1], [])
    x_instr = reduce.operands[0]
    if not plan.red_dims:                 # reducing no dimensions: f(init, x)
        assert keep is None
        return _combine(b, em, opcode, t, init, em.value(x_instr, plan.merge(outer_index, [])))
    extreme = _NanTrackingExtreme(b, t, opcode == "maximum", init) if _NanTrackingExtreme.applies(opcode, t) \
        else None
    blocked = opcode == "add" and t in ("f32", "f16", "c64")
    wide = _wide_type(ty)
    acc_slot = _entry_alloca(b, ty)
    # Blocked float sums: a running double total of per-block sums.
    total_slot = _entry_alloca(b, wide) if blocked else None
    b.store(init, acc_slot)
    if blocked:
        b.store(_widen(b, init, wide), total_slot)
        b.store(_zero(ty), acc_slot)
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
                if extreme is not None:
                    extreme.add(x)
                else:
                    b.store(_combine(b, em, opcode, t, b.load(acc_slot), x), acc_slot)
            _loop(b, lo, hi, name + "r", body, interleave=_reduction_interleave(opcode, x_instr, keep))
        if blocked and inner > BLOCK:
            def block_body(k):
                lo = b.mul(k, const_i64(BLOCK))
                hi = b.add(lo, const_i64(BLOCK))
                hi = b.select(b.icmp_signed(">", hi, const_i64(inner)), const_i64(inner), hi)
                b.store(_zero(ty), acc_slot)
                run_block(lo, hi)
                b.store(_wide_add(b, b.load(total_slot), _widen(b, b.load(acc_slot), wide)), total_slot)
            _loop(b, const_i64(0), const_i64(-(-inner // BLOCK)), name + "blk", block_body)
        else:
            run_block(const_i64(0), const_i64(inner))
            if blocked:
                b.store(_wide_add(b, b.load(total_slot), _widen(b, b.load(acc_slot), wide)), total_slot)
                b.store(_zero(ty), acc_slot)

    _nest(b, list(red_dims[:-1]), name + "o", innermost)
    if extreme is not None:
        return extreme.result()
    if blocked:
        return _narrow(b, b.load(total_slot), ty)
    return b.load(acc_slot)


def emit_reduction_kernel(module: ir.Module, name: str, comp: Computation) -> KernelSpec:
    plan = _ReductionPlan(comp)
    # Output values: (instruction, element) with element None, or k for the k-th result of
    # a variadic reduction that is itself an output.
    outputs = [(o, k) for o in _outputs(comp) for k in (range(len(o.shape.elements)) if o.shape.is_tuple else [None])]
    out_shapes = [o.shape if k is None else o.shape.elements[k] for o, k in outputs]
    params = comp.parameters
    shapes = [p.shape for p in params] + out_shapes
    fn, b = _kernel_function(module, name)
    bufs = _Buffers(b, fn.args[0], shapes)
    reduced: dict[int, ir.Value] = {}
    em = ElementalEmitter(b, comp, lambda k, index: _load_at(b, bufs, k, params[k].shape.dims, index),
                          reduced)
    users = {id(r): [u for u in comp.instructions if u.opcode == "get-tuple-element" and u.operands[0] is r]
             for r in plan.reduces if r.shape.is_tuple}

    kept = _kept_row_value(comp, plan, outputs)
    if kept is not None:
        kept_phase, kept_value, kept_k = kept
        kept_buffer = len(params) + kept_k

        def keep(idx):
            bufs.store(b, kept_buffer, _linear(b, idx, plan.in_dims), em.value(kept_value, idx))

    def outer_body(o):
        reduced.clear()
        tuples = {}
        outer_index = _delinearize(b, o, plan.outer_dims)
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
            if _squeeze(shape.dims) == _squeeze(plan.outer_dims) and shape.dims != plan.in_dims:
                idx = _expand(outer_index, plan.outer_dims, shape.dims)
                value = em.value(out, idx) if element is None else tuples[id(out)][element]
                bufs.store(b, len(params) + k, _linear(b, idx, shape.dims), value)
        row_outputs = [(k, out) for k, ((out, element), shape) in enumerate(zip(outputs, out_shapes))
                       if shape.dims == plan.in_dims and element is None]
        if row_outputs:
            def write_row(red_index):
                em.reset_memo()
                idx = plan.merge(outer_index, red_index)
                if kept is not None:
                    reduced[id(kept_value)] = bufs.load(b, kept_buffer, _linear(b, idx, plan.in_dims))
                for k, out in row_outputs:
                    bufs.store(b, len(params) + k, _linear(b, idx, plan.in_dims), em.value(out, idx))
                if kept is not None:
                    del reduced[id(kept_value)]
            _nest(b, list(plan.red_dims), "w", write_row)

    for (out, element), shape in zip(outputs, out_shapes):
        if _squeeze(shape.dims) != _squeeze(plan.outer_dims) and (shape.dims != plan.in_dims or element is not None):
            raise UnsupportedError("a reduction fusion output outside the reduced and input spaces")
    _loop(b, fn.args[1], fn.args[2], "outer", outer_body)
    b.ret_void()
    return KernelSpec(name, "reduce", _prod(plan.outer_dims), _prod(plan.red_dims))


# Elementwise ops costly enough that reading a stored value back beats computing it again.
_COSTLY = {"exponential", "exponential-minus-one", "log", "log-plus-one", "tanh", "logistic", "power",
           "sine", "cosine", "tan", "erf", "atan2"}


MINMAX_INTERLEAVE = 4


def _reduction_interleave(opcode: str, operand: Instruction, keep) -> int:
    """How many vector iterations a row reduction's loop keeps in flight (see
    ``_interleave_metadata``).  Measured side by side on 1024-wide rows: 4 for max/min (row
    max 51 -> 30 us per 256 rows) and for sums of transcendental work that store nothing
    (log1p(exp(-|x|)).mean(-1): 1.64 -> 1.04 ms per 4096 rows); a loop that also stores
    (softmax's exp, kept for the next phase) got slower out of cache, and cheap sums gained
    nothing (layernorm got slower), so those keep one."""
    if opcode in ("maximum", "minimum"):
        return MINMAX_INTERLEAVE
    if keep is None and any(i.opcode in _COSTLY for i in _ancestors([operand])):
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
    for value in _ancestors([last.operands[0]]):
        if value.shape.dims == plan.in_dims and value.opcode in _COSTLY and value is not out \
                and value.shape.element_type == out.shape.element_type \
                and _reads_only_through(out, value, reduce_ids):
            return last, value, k
    return None


def _reads_only_through(out: Instruction, value: Instruction, reduce_ids: set) -> bool:
    """Does ``out`` use ``value``, and reach array parameters only through it and reductions?"""
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


def _column_plan(comp: Computation):
    """A plan when the fusion reduces a block of consecutive axes that are not the innermost
    ones -- the leading axes into the trailing ones, or middle axes ((N, R, C) -> (N, C): a
    batch of column reductions) -- and its single output (the reduction or an elementwise
    epilogue of it) has the reduction's type: then the output buffer can hold the
    accumulators."""
    plan = _ReductionPlan(comp)
    outputs = _outputs(comp)
    r = plan.reduces[0]
    if (len(plan.reduces) != 1 or len(outputs) != 1 or not plan.reduced
            or plan.reduced != tuple(range(plan.reduced[0], plan.reduced[-1] + 1))
            or plan.reduced[-1] == len(plan.in_dims) - 1):
        return None
    kept = plan.in_dims[plan.reduced[-1] + 1:]
    if plan.custom:
        # Variadic (argmax down columns) or custom reducers: the reduction itself is the
        # output (a buffer per result holds the accumulators), its inputs read per element.
        if outputs[0] is not r or len(kept) > 1 or plan.reduced[0] > 0 and _prod(kept) < MIN_BATCHED_COLUMNS:
            return None
        return plan
    if (outputs[0].shape.element_type != r.shape.element_type
            or _squeeze(outputs[0].shape.dims) != _squeeze(plan.outer_dims)):
        return None
    if plan.reduced[0] > 0:                       # batched: middle axes
        if _prod(kept) < MIN_BATCHED_COLUMNS or (len(kept) > 1 and not _linear_input(comp, r, plan)):
            return None
        return plan
    # Several kept axes (the mean image of a batch, (N, H, W) -> (H, W)) are one flat column
    # index when the input can be read at flat positions.
    if len(kept) > 1 and not _linear_input(comp, r, plan):
        from . import column_groups               # (column_groups builds on this module)
        if not column_groups.applies(comp, plan):
            return None
    return plan


def _linear_input(comp: Computation, r: Instruction, plan) -> bool:
    """Can the reduced input be read at flat positions (elementwise work on full arrays)?"""
    feeding = {id(i) for i in _ancestors([r.operands[0]])}
    return _is_linear([i for i in comp.instructions if id(i) in feeding], plan.in_dims)


def emit_column_reduction(module: ir.Module, name: str, comp: Computation, plan) -> KernelSpec:
    """Reduce leading (or middle) axes with the columns innermost: for each block of columns,
    one pass over the rows accumulates a contiguous vector of partial results (kept in the
    output buffer), then the epilogue runs over the block.  Reads are contiguous and
    vectorized; the summation order per column is NumPy's (row by row).

    Middle axes, (N..., R..., C...) -> (N..., C...), are a batch of such reductions: the
    kernel's range of flat output positions is cut at batch boundaries, so that within a
    block the columns are consecutive in memory."""
    (out,) = _outputs(comp)
    (r,) = plan.reduces
    params = comp.parameters
    results = list(r.shape.elements) if r.shape.is_tuple else [r.shape]    # (out is r when custom)
    shapes = [p.shape for p in params] + ([out.shape] if out is not r else results)
    fn, b = _kernel_function(module, name)
    bufs = _Buffers(b, fn.args[0], shapes)
    k_out = len(params)
    accumulators = range(k_out, k_out + len(results))
    n_in = len(r.operands) // 2
    reduced: dict[int, ir.Value] = {}
    em = ElementalEmitter(b, comp, lambda k, index: _load_at(b, bufs, k, params[k].shape.dims, index),
                          reduced)
    opcode = _reducer_opcode(r) if not plan.custom else None
    t = results[0].element_type

    def combine(accs, xs):
        if plan.custom:
            return apply_scalar_computation(b, r.attrs["to_apply"], accs + xs)
        return [_combine(b, em, opcode, t, accs[0], xs[0], ordered=True)]
    first, last = plan.reduced[0], plan.reduced[-1]
    batch_dims, kept_dims = plan.in_dims[:first], plan.in_dims[last + 1:]
    rows = _prod(plan.red_dims)
    columns = _prod(kept_dims)
    if len(kept_dims) > 1:               # flat columns: read the input at flat positions
        flat = _LinearEmitter(b, comp, lambda k, index: bufs.load(
            b, k, index[0] if index and params[k].shape.rank else const_i64(0)))

        def inputs_at(batch, c, i, red_index):
            row = b.add(b.mul(batch, const_i64(rows)), i)
            return [flat.value(r.operands[0], [b.add(b.mul(row, const_i64(columns)), c)])]
    else:
        def inputs_at(batch, c, i, red_index):
            outer = _delinearize(b, batch, batch_dims) + [c] if batch_dims else [c]
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
            _loop(b, lo, hi, "ci", init)

            def rows_from(i, count):
                """Combine rows i .. i+count-1 into each column of the block, in row order."""
                red_indices = [_delinearize(b, b.add(i, const_i64(u)), plan.red_dims) for u in range(count)]

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
                _loop(b, lo, hi, "cc", column)
            whole = rows - rows % COLUMN_ROWS_PER_PASS
            if whole:
                _loop(b, const_i64(0), const_i64(whole), "cr", lambda i: rows_from(i, COLUMN_ROWS_PER_PASS),
                      step=const_i64(COLUMN_ROWS_PER_PASS))
            if whole < rows:
                _loop(b, const_i64(whole), const_i64(rows), "crr", lambda i: rows_from(i, 1))
            if out is not r:
                def epilogue(c):
                    em.reset_memo()
                    reduced.clear()
                    o = b.add(base, c)
                    reduced[id(r)] = bufs.load(b, k_out, o)
                    idx = _expand(_delinearize(b, o, plan.outer_dims), plan.outer_dims, out.shape.dims)
                    bufs.store(b, k_out, o, em.value(out, idx))
                _loop(b, lo, hi, "ce", epilogue)

        nblocks = b.sdiv(b.add(b.sub(c_end, c_begin), const_i64(COLUMN_BLOCK - 1)), const_i64(COLUMN_BLOCK))
        _loop(b, const_i64(0), nblocks, "cb", block_body)

    if batch_dims:
        first_batch = b.sdiv(fn.args[1], const_i64(columns))
        end_batch = b.sdiv(b.add(fn.args[2], const_i64(columns - 1)), const_i64(columns))
        _loop(b, first_batch, end_batch, "bt", batch_body)
    else:
        batch_body(const_i64(0))
    b.ret_void()
    return KernelSpec(name, "reduce", _prod(plan.outer_dims), rows)


def _clamp(b: ir.IRBuilder, value, lo: int, hi: int):
    value = b.select(b.icmp_signed("<", value, const_i64(lo)), const_i64(lo), value)
    return b.select(b.icmp_signed(">", value, const_i64(hi)), const_i64(hi), value)


def _squeeze(dims):
    return tuple(n for n in dims if n != 1)


def _expand(outer_index, outer_dims, dims):
    """Map an outer-space index to a shape equal to it up to size-1 dims."""
    it = iter([i for i, n in zip(outer_index, outer_dims) if n != 1])
    return [const_i64(0) if n == 1 else next(it) for n in dims]


# ---- full reductions split across threads -------------------------------------------------------

def _full_reduction_plan(comp: Computation) -> _ReductionPlan | None:
    """A plan when the fusion reduces everything in one phase from linear-indexable inputs."""
    plan = _ReductionPlan(comp)
    if plan.custom or plan.outer_dims and _prod(plan.outer_dims) != 1:
        return None
    if any(is_complex(r.shape.element_type) for r in plan.reduces):
        return None                       # (partial results are 8-byte slots)
    reduce_ids = {id(r) for r in plan.reduces}
    feeding = _ancestors([r.operands[0] for r in plan.reduces])
    if reduce_ids & {id(i) for i in feeding}:
        return None                       # a reduction feeds another: several phases
    feeding_ids = {id(f) for f in feeding}
    prefix = [i for i in comp.instructions if id(i) in feeding_ids]
    if not prefix or not _is_linear(prefix, plan.in_dims):
        return None
    if any(o.shape.is_tuple or _squeeze(o.shape.dims) for o in _outputs(comp)):
        return None                       # (the finish kernel writes scalar outputs only)
    return plan


def _ancestors(roots: list[Instruction]) -> list[Instruction]:
    seen: dict[int, Instruction] = {}
    stack = list(roots)
    while stack:
        i = stack.pop()
        if id(i) not in seen:
            seen[id(i)] = i
            stack.extend(i.operands)
    return list(seen.values())


def _slot_pointer(b, scratch, slot: int, ty):
    return b.bitcast(b.gep(scratch, [const_i64(8 * slot)]), ty.as_pointer())


def _partial_type(r: Instruction):
    t = r.shape.element_type
    return ir.DoubleType() if _reducer_opcode(r) == "add" and t in ("f32", "f16") else llvm_type(t)


def emit_full_reduction(module: ir.Module, name: str, comp: Computation, plan) -> KernelSpec:
    """``name`` reduces the flat range [begin, end) into 8-byte slots (one per reduction) of the
    scratch buffer passed after the parameters; ``name_finish`` combines ``begin`` chunks of
    slots and computes the outputs."""
    params = comp.parameters
    outputs = _outputs(comp)
    shapes = [p.shape for p in params]
    fn, b = _kernel_function(module, name)
    bufs = _Buffers(b, fn.args[0], shapes)
    scratch = b.load(b.gep(fn.args[0], [const_i64(len(params))]))
    em = _LinearEmitter(b, comp, lambda k, index: bufs.load(
        b, k, index[0] if index and params[k].shape.rank else const_i64(0)))
    for n, r in enumerate(plan.reduces):
        opcode, t = _reducer_opcode(r), r.shape.element_type
        pty, ty = _partial_type(r), llvm_type(t)
        blocked = pty != ty
        acc = _entry_alloca(b, ty)
        total = _entry_alloca(b, pty)
        b.store(ir.Constant(ty, 0.0) if blocked else em.value(r.operands[1], []), acc)
        if blocked:
            b.store(ir.Constant(pty, 0.0), total)

        def element(i, r=r, acc=acc, opcode=opcode, t=t):
            em.reset_memo()
            b.store(_combine(b, em, opcode, t, b.load(acc), em.value(r.operands[0], [i])), acc)

        interleave = _reduction_interleave(opcode, r.operands[0], None)
        if blocked:
            def block(k, acc=acc, total=total, element=element, interleave=interleave):
                lo = b.add(fn.args[1], b.mul(k, const_i64(BLOCK)))
                hi = b.add(lo, const_i64(BLOCK))
                hi = b.select(b.icmp_signed(">", hi, fn.args[2]), fn.args[2], hi)
                b.store(ir.Constant(ty, 0.0), acc)
                _loop(b, lo, hi, f"p{n}", element, interleave=interleave)
                b.store(b.fadd(b.load(total), b.fpext(b.load(acc), pty)), total)
            nblocks = b.sdiv(b.add(b.sub(fn.args[2], fn.args[1]), const_i64(BLOCK - 1)), const_i64(BLOCK))
            _loop(b, const_i64(0), nblocks, f"blk{n}", block)
            b.store(b.load(total), _slot_pointer(b, scratch, n, pty))
        elif _NanTrackingExtreme.applies(opcode, t):
            extreme = _NanTrackingExtreme(b, t, opcode == "maximum", em.value(r.operands[1], []))

            def add(i, r=r, extreme=extreme):
                em.reset_memo()
                extreme.add(em.value(r.operands[0], [i]))
            _loop(b, fn.args[1], fn.args[2], f"p{n}", add, interleave=interleave)
            b.store(extreme.result(), _slot_pointer(b, scratch, n, ty))
        else:
            _loop(b, fn.args[1], fn.args[2], f"p{n}", element, interleave=interleave)
            b.store(b.load(acc), _slot_pointer(b, scratch, n, ty))
    b.ret_void()

    # finish(buffers = params, outputs, scratch; begin = number of chunks)
    fin, b = _kernel_function(module, name + "_finish")
    # A few partial slots and scalar outputs: vectorized and unrolled code would only cost
    # compile time (a quarter of the running example's, measured).
    fin.attributes.add("minsize")
    fin.attributes.add("optsize")
    shapes = [p.shape for p in params] + [o.shape for o in outputs]
    bufs = _Buffers(b, fin.args[0], shapes)
    scratch = b.load(b.gep(fin.args[0], [const_i64(len(shapes))]))
    reduced: dict[int, ir.Value] = {}
    em = ElementalEmitter(b, comp, lambda k, index: bufs.load(b, k, const_i64(0)), reduced)
    nred = len(plan.reduces)
    for n, r in enumerate(plan.reduces):
        opcode, t = _reducer_opcode(r), r.shape.element_type
        pty, ty = _partial_type(r), llvm_type(t)
        acc = _entry_alloca(b, pty)
        init = em.value(r.operands[1], [])
        b.store(b.fpext(init, pty) if pty != ty else init, acc)

        def combine(k, n=n, acc=acc, opcode=opcode, t=t, pty=pty):
            slot = b.add(b.mul(k, const_i64(nred)), const_i64(n))
            ptr = b.bitcast(b.gep(scratch, [b.mul(slot, const_i64(8))]), pty.as_pointer())
            part = b.load(ptr)
            b.store(_combine(b, em, opcode, "f64" if pty != llvm_type(t) else t, b.load(acc), part), acc)
        _loop(b, const_i64(0), fin.args[1], f"c{n}", combine)
        v = b.load(acc)
        reduced[id(r)] = _narrow(b, v, ty) if pty != ty else v
    em.reset_memo()
    for k, out in enumerate(outputs):
        idx = [const_i64(0)] * out.shape.rank
        bufs.store(b, len(params) + k, const_i64(0), em.value(out, idx))
    b.ret_void()
    return KernelSpec(name, "full-reduce", _prod(plan.in_dims), 1, name + "_finish", len(plan.reduces))


# Unfused ops that get a kernel of their own (the runtime offers each one alone, as a
# computation of one instruction over parameters).
STANDALONE_KERNEL_OPS = frozenset({"scatter", "reduce-window"})


def standalone_computation(instr: Instruction) -> Computation:
    """``instr`` applied to parameters: how a standalone op is handed to ``emit_kernel``."""
    params = [Instruction("parameter", o.shape, attrs={"parameter_number": k}, name=f"{instr.name}.p{k}")
              for k, o in enumerate(instr.operands)]
    root = Instruction(instr.opcode, instr.shape, params, dict(instr.attrs), name=instr.name)
    return Computation(f"{instr.name}.computation", params + [root], root)


def emit_kernel(module: ir.Module, name: str, comp: Computation) -> KernelSpec:
    if comp.root.opcode == "scatter":
        return emit_scatter_kernel(module, name, comp)
    if comp.root.opcode == "reduce-window":
        from .windows import emit_reduce_window_kernel     # (windows builds on this module)
        return emit_reduce_window_kernel(module, name, comp)
    if any(i.opcode == "reduce" for i in comp.instructions):
        plan = _full_reduction_plan(comp)
        if plan is not None:
            return emit_full_reduction(module, name, comp, plan)
        plan = _column_plan(comp)
        if plan is not None:
            from . import column_groups               # (column_groups builds on this module)
            if not plan.custom and column_groups.applies(comp, plan):
                return column_groups.emit_grouped_column_reduction(module, name, comp, plan)
            return emit_column_reduction(module, name, comp, plan)
        return emit_reduction_kernel(module, name, comp)
    return emit_loop_kernel(module, name, comp)


# ---- scatter ------------------------------------------------------------------------------------

_SCATTER_COMBINERS = {"add", "multiply", "maximum", "minimum", "and", "or"}


def scatter_combiner(scatter: Instruction) -> str | None:
    """The recognized combiner of a scatter: a binary opcode of (current, update), or
    "replace" (the computation returns the update); None for anything else."""
    comp = scatter.attrs["to_apply"]
    params, root = comp.parameters, comp.root
    if len(params) != 2:
        return None
    if root is params[1]:
        return "replace"
    if root.opcode in _SCATTER_COMBINERS and len(root.operands) == 2 and \
            {id(o) for o in root.operands} == {id(p) for p in params} and root.operands[0] is not root.operands[1]:
        return root.opcode
    return None


def emit_scatter_kernel(module: ir.Module, name: str, comp: Computation) -> KernelSpec:
    """A computation whose root is ``scatter(operand, indices, updates)`` of its parameters.

    The output starts as a copy of the operand (nothing is copied when the runtime passes the
    operand's own buffer); then the updates are applied one at a time, in row-major order of
    the updates with the scatter dimensions outer and the window inner (the evaluator's
    order: with duplicate indices, float sums round the same way and the last update of a
    replace wins).  An update whose whole window does not fit in the operand is skipped
    (XLA's semantics).  Single-threaded: duplicate indices make splitting unsafe.
    """
    scatter = comp.root
    if scatter.opcode != "scatter" or scatter.shape.is_tuple or len(scatter.operands) != 3:
        raise UnsupportedError("variadic scatter has no native code path yet")
    if any(o.opcode != "parameter" for o in scatter.operands):
        raise UnsupportedError("a fused scatter has no native code path yet")
    a = scatter.attrs
    if a.get("input_batching_dims") or a.get("scatter_indices_batching_dims"):
        raise UnsupportedError("scatter with batching dims has no native code path yet")
    opcode = scatter_combiner(scatter)
    if opcode is None:
        raise UnsupportedError("scatter with a custom combiner has no native code path yet")
    operand, indices, updates = scatter.operands
    t = scatter.shape.element_type
    if opcode == "add" and t == "pred":
        opcode = "or"
    if is_complex(t) and opcode not in ("add", "multiply", "replace"):
        raise UnsupportedError(f"complex scatter with {opcode} has no native code path")
    params = comp.parameters
    k_operand, k_indices, k_updates = (params.index(o) for o in (operand, indices, updates))
    shapes = [p.shape for p in params] + [scatter.shape]
    k_out = len(params)
    fn, b = _kernel_function(module, name)
    bufs = _Buffers(b, fn.args[0], shapes)
    em = ElementalEmitter(b, comp, lambda k, index: _load_at(b, bufs, k, params[k].shape.dims, index))

    odims = operand.shape.dims
    udims = updates.shape.dims
    idims = indices.shape.dims
    rank = len(odims)
    window_dims = tuple(a.get("update_window_dims", ()))
    inserted = tuple(a.get("inserted_window_dims", ()))
    to_operand = tuple(a.get("scatter_dims_to_operand_dims", ()))
    ivd = a.get("index_vector_dim", len(idims))
    scatter_dims = [d for d in range(len(udims)) if d not in window_dims]
    covered = [d for d in range(rank) if d not in inserted]
    window_shape = [udims[d] for d in window_dims]
    extent = [1] * rank
    for k, d in enumerate(covered):
        extent[d] = window_shape[k]
    itype = indices.shape.element_type

    # 1. out = operand (skipped when they are the same buffer: an in-place update)
    size = _prod(odims)
    src = b.ptrtoint(bufs.ptrs[k_operand], I64)
    dst = b.ptrtoint(bufs.ptrs[k_out], I64)
    copy_block = b.append_basic_block("copy")
    after_copy = b.append_basic_block("copied")
    b.cbranch(b.icmp_unsigned("!=", src, dst), copy_block, after_copy)
    b.position_at_end(copy_block)
    _loop(b, const_i64(0), const_i64(size), "cp",
          lambda i: bufs.store(b, k_out, i, bufs.load(b, k_operand, i)))
    b.branch(after_copy)
    b.position_at_end(after_copy)

    # 2. the updates, in order
    def per_scatter_index(sidx):
        batch = list(sidx)                       # indices' dims other than the index vector dim
        starts = {}
        for k, d in enumerate(to_operand):
            sub = list(batch)
            if ivd < len(idims):
                sub.insert(ivd, const_i64(k))
            v = bufs.load(b, k_indices, _linear(b, sub, idims))
            starts[d] = em._convert_value(v, itype, "s64")
        fits = ir.Constant(I1, 1)
        for d in range(rank):
            s = starts.get(d, const_i64(0))
            fits = b.and_(fits, b.icmp_signed(">=", s, const_i64(0)))
            fits = b.and_(fits, b.icmp_signed("<=", s, const_i64(odims[d] - extent[d])))
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
            off = _linear(b, oidx, odims)
            u = bufs.load(b, k_updates, _linear(b, uidx, udims))
            if opcode == "replace":
                new = u
            else:
                new = _combine(b, em, opcode, t, bufs.load(b, k_out, off), u)
            bufs.store(b, k_out, off, new)
        _nest(b, window_shape, "w", per_window_index)
        b.branch(skip_block)
        b.position_at_end(skip_block)

    _nest(b, [udims[d] for d in scatter_dims], "s", per_scatter_index)
    b.ret_void()
    return KernelSpec(name, "scatter", 1, max(1, _prod(udims)))
