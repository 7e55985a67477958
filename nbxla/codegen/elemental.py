"""The elemental emitter: LLVM IR computing one element of a fused computation at an index.

Given an index into an instruction's shape, ``value(instr, index)`` emits the code that
computes that element from the fusion's parameters, following indexing through broadcast,
reshape, transpose, slice, pad, concatenate, reverse and iota.  Nothing in a fusion is
materialized: intermediate values live in registers.  The emitter is backend-neutral; the
CPU loop emitters (and later the GPU ones) decide which indices to ask for.

An index is a list of i64 values, one per dimension.  A parameter element is read through
a ``load(param_number, index)`` callback supplied by the loop emitter, which knows where
each buffer lives.

Kept whole (over the 700-line rule on purpose): ``ElementalEmitter`` is the table of
elemental rules itself, one method per opcode (``ELEMENTAL_RULES``, checked against the
opcode list), sharing the per-index memo and the index arithmetic; splitting it by opcode
family would scatter the one table that says which opcodes fuse.
"""

from __future__ import annotations

import contextvars
import functools
from contextlib import contextmanager
from typing import Callable

import numpy as np
from llvmlite import ir

from ..errors import UnsupportedError
from ..hlo.division import constant_reciprocal
from ..hlo.ir import Computation, Instruction
from ..hlo.low_precision import KEEPS_NARROW_TYPES
from ..hlo.opcodes import TYPE_AGNOSTIC
from .run_sizes import RunSize
from ..hlo.shapes import complex_component, compute_type, is_complex, is_float, is_integral, is_low_precision
from . import bf16, f8, math_calls
from .complex_math import ComplexMath, host_has_fma

I1, I8, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)

_LLVM_TYPES = {
    "pred": I1, "s8": I8, "u8": I8, "s16": ir.IntType(16), "u16": ir.IntType(16),
    "s32": I32, "u32": I32, "s64": I64, "u64": I64,
    "f16": ir.HalfType(), "f32": ir.FloatType(), "f64": ir.DoubleType(),
    "bf16": ir.FloatType(),     # an f32 in registers, 16 bits in memory (see bf16.py)
    "f8e4m3fn": ir.FloatType(), "f8e5m2": ir.FloatType(),     # f32 in registers, 8 bits in memory (f8.py)
    # Complex values are {re, im} structs in registers and in memory (NumPy's interleaved
    # layout); the loop emitters load and store the two components separately.
    "c64": ir.LiteralStructType([ir.FloatType(), ir.FloatType()]),
    "c128": ir.LiteralStructType([ir.DoubleType(), ir.DoubleType()]),
}

# Ops whose code does not depend on the element type (they only move values or choose
# between them): complex values go through their ordinary rules.  Every other op with a
# complex operand or result goes to ``_COMPLEX_FUNCTIONS`` or a ``_complex_<op>`` rule, or is
# unsupported.

# Complex functions of one operand: opcode -> (the ComplexMath method, whether c64 computes it
# in double and rounds once).  exp, sign and logistic take the part type as given: they follow
# NumPy's float order of operations, or pick double themselves (see complex_math).
_COMPLEX_FUNCTIONS = {
    "sign": ("sign", False), "exponential": ("exp", False), "logistic": ("logistic", False),
    "log": ("log", True), "log-plus-one": ("log1p", True), "sqrt": ("sqrt", True),
    "rsqrt": ("rsqrt", True), "sine": ("sin", True), "cosine": ("cos", True),
    "tan": ("tan", True), "tanh": ("tanh", True),
}


def llvm_type(element_type: str) -> ir.Type:
    """Register type of an element (pred is i1 in registers, i8 in memory)."""
    try:
        return _LLVM_TYPES[element_type]
    except KeyError:
        raise UnsupportedError(f"element type {element_type} has no native code path yet") from None


def storage_type(element_type: str) -> ir.Type:
    if element_type == "bf16":
        return ir.IntType(16)
    if f8.is_f8(element_type):
        return I8
    return I8 if element_type == "pred" else llvm_type(element_type)


def to_storage(b: ir.IRBuilder, element_type: str, v):
    """A register value as it is kept in memory (pred: i8, bf16: its 16 bits, f8: its 8)."""
    if element_type == "pred":
        return b.zext(v, I8)
    if f8.is_f8(element_type):
        return f8.to_bits(b, element_type, v)
    return bf16.to_bits(b, v) if element_type == "bf16" else v


def from_storage(b: ir.IRBuilder, element_type: str, v):
    """A value read from memory as it is kept in registers (the inverse of ``to_storage``)."""
    if element_type == "pred":
        return b.icmp_unsigned("!=", v, ir.Constant(I8, 0))
    if f8.is_f8(element_type):
        return f8.from_bits(b, element_type, v)
    return bf16.from_bits(b, v) if element_type == "bf16" else v


def round_to_narrow(b: ir.IRBuilder, element_type: str, v):
    """An f32 computed for a bf16 / f8 result, rounded to that type (still an f32)."""
    if element_type == "bf16":
        return bf16.round_to_bf16(b, v)
    return f8.round_to_f8(b, element_type, v)


def const_i64(v: int) -> ir.Value:
    if isinstance(v, RunSize):      # (an unknown dim: computed in the kernel's prologue)
        return v.emit()
    return ir.Constant(I64, int(v))


def row_major_strides(dims) -> list[int]:
    strides, step = [], 1
    for n in reversed(dims):
        strides.append(step)
        step *= n
    return list(reversed(strides))


# A kernel whose elements need more values than this is not emitted (the runtime interprets
# its fusion instead).  Fused values read at several positions are recomputed per position,
# and chains of such reads multiply: a Python loop of 1-D stencil updates fused into one
# kernel needs 3**steps values and hung the code generator.  The largest kernel of the two
# JAX corpora needs under 1000.
MAX_EMITTED_VALUES = 20000


# Set while kernels are emitted whose leading dimension may be unknown (``leading_unit_dims``).
_LEADING_UNIT_INDEXED = contextvars.ContextVar("nbxla_leading_unit_indexed", default=False)


@contextmanager
def leading_unit_dims(indexed: bool = True):
    """Inside: a leading dimension of size 1 is indexed like any other (its index times its
    stride, an index that is 0 at run time), not dropped from the index arithmetic.  Why: a
    program compiled for every size of its batch dimension after a static compile at batch 1
    (the automatic mode's first size) then finds that compile's kernels the very same code as
    its own and takes their machine code (``symbolic_machine_code``) instead of running LLVM
    again; a dimension of size 1 elsewhere (keepdims) is size 1 at every size and stays dropped.
    Costs a multiplication by 0 (folded by LLVM) or a division of a row number by a constant."""
    token = _LEADING_UNIT_INDEXED.set(indexed)
    try:
        yield
    finally:
        _LEADING_UNIT_INDEXED.reset(token)


def leading_unit_indexed() -> bool:
    return _LEADING_UNIT_INDEXED.get()


def _dropped(d: int, n) -> bool:
    """Is dimension ``d`` of size ``n`` left out of the index arithmetic?"""
    return n == 1 and not (d == 0 and _LEADING_UNIT_INDEXED.get())


def linear_index(b: ir.IRBuilder, index: list, dims) -> ir.Value:
    """The row-major flat position of a per-dimension ``index`` (size-1 dims contribute nothing,
    but see ``leading_unit_dims``)."""
    acc = None
    for d, (i, stride, n) in enumerate(zip(index, row_major_strides(dims), dims)):
        if _dropped(d, n) or stride == 0:
            continue
        term = i if stride == 1 else b.mul(i, const_i64(stride))
        acc = term if acc is None else b.add(acc, term)
    return acc if acc is not None else const_i64(0)


def delinearize(b: ir.IRBuilder, linear: ir.Value, dims) -> list:
    """The per-dimension index of row-major position ``linear`` (no remainder on the outermost
    non-unit dimension: ``linear`` is already below its extent)."""
    strides = row_major_strides(dims)
    first = next((d for d, n in enumerate(dims) if not _dropped(d, n)), None)
    out = []
    for d, (n, stride) in enumerate(zip(dims, strides)):
        if _dropped(d, n):
            out.append(const_i64(0))
            continue
        q = linear if stride == 1 else b.udiv(linear, const_i64(stride))
        out.append(q if d == first else b.urem(q, const_i64(n)))
    return out


class ElementalEmitter:
    """Emits element computations for one fused computation into ``builder``."""

    # True when indices are flat element numbers (the linear fast path), not per-dimension.
    flat_index = False
    # ids of sin/cos/tan instructions whose arguments the kernel checked are below
    # transcendentals.BOUNDED_TRIG_LIMIT: emitted with the cheap reduction (trig_guard.py).
    bounded_trig: frozenset = frozenset()
    # ("contract",) where the kernel lets a multiply and the add or subtract using it become
    # one fused multiply-add (compute_bound.contracts_arithmetic decides; f32/f64 only).
    contract: tuple = ()

    def __init__(self, builder: ir.IRBuilder, comp: Computation,
                 load: Callable[[int, list], ir.Value], reduced: dict[int, ir.Value] | None = None):
        self.b = builder
        self.comp = comp
        self.load = load
        self.module = builder.module
        # Values of reductions already computed for the current row (row fusions).
        self.reduced = reduced if reduced is not None else {}
        self._memo: dict[tuple, ir.Value] = {}
        self._emitted = 0
        self.cmath = ComplexMath(builder, self._libm)

    def reset_memo(self) -> None:
        self._memo.clear()

    # ---- entry point --------------------------------------------------------------------------

    def value(self, instr: Instruction, index: list) -> ir.Value:
        key = (id(instr), tuple(id(i) for i in index))
        v = self._memo.get(key)
        if v is None:
            self._emitted += 1
            if self._emitted > MAX_EMITTED_VALUES:
                raise UnsupportedError(
                    f"the fused expression of %{self.comp.name} needs more than {MAX_EMITTED_VALUES} "
                    "values per element (values read at many positions, recomputed for each); it "
                    "runs through the evaluator")
            v = self._emit(instr, index)
            if instr.opcode not in KEEPS_NARROW_TYPES and not instr.shape.is_tuple \
                    and is_low_precision(instr.shape.element_type):
                v = round_to_narrow(self.b, instr.shape.element_type, v)   # computed in f32: round once, as XLA
            self._memo[key] = v
        return v

    def _emit(self, instr: Instruction, index: list) -> ir.Value:
        op = instr.opcode
        if id(instr) in self.reduced:
            return self.reduced[id(instr)]
        if op == "parameter":
            return self.load(instr.parameter_number, index)
        if op not in TYPE_AGNOSTIC and _involves_complex(instr):
            if op in _COMPLEX_FUNCTIONS:
                name, in_double = _COMPLEX_FUNCTIONS[op]
                return self._complex_function(instr, index, getattr(self.cmath, name), in_double)
            rule = COMPLEX_RULES.get(op)
            if rule is None:
                raise UnsupportedError(f"no native code for complex {op} yet")
            return getattr(self, rule)(instr, index)
        rule = ELEMENTAL_RULES.get(op)
        if rule is None:
            raise UnsupportedError(f"no native code for {op} yet")
        return getattr(self, rule)(instr, index)

    # ---- helpers ------------------------------------------------------------------------------

    def intrinsic(self, name: str, ty: ir.Type, args: list) -> ir.Value:
        """Call an overloaded LLVM intrinsic whose arguments and result all have type ``ty``."""
        fn = self.module.declare_intrinsic(name, [ty], ir.FunctionType(ty, [ty] * len(args)))
        return self.b.call(fn, args)

    def _libm(self, name: str, ty: ir.Type, args: list) -> ir.Value:
        if isinstance(ty, ir.HalfType):
            # libm has no half functions: the float one, rounded once to half (as NumPy's
            # half loops compute)
            wide = [self.b.fpext(a, ir.FloatType()) for a in args]
            return self.b.fptrunc(self._libm(name, ir.FloatType(), wide), ty)
        fname = name + {"float": "f", "double": ""}[str(ty)]
        fn = self.module.globals.get(fname)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(ty, [ty] * len(args)), fname)
        return self.b.call(fn, args)

    def _t(self, instr: Instruction) -> str:
        """The element type ``instr`` computes in (bf16: f32)."""
        return compute_type(instr.shape.element_type)

    def _operand(self, instr: Instruction, k: int, index: list) -> ir.Value:
        return self.value(instr.operands[k], index)

    # ---- constants and index-producing ops ----------------------------------------------------

    def _constant(self, instr, index):
        lit = instr.literal
        ty = llvm_type(self._t(instr))
        if lit.ndim == 0 or lit.size == 1:
            return self._scalar_constant(ty, self._t(instr), lit.reshape(-1)[0])
        # A small constant array: a private global indexed at run time.
        flat = lit.reshape(-1)
        name = f"const_{instr.name.replace('.', '_')}"
        g = self.module.globals.get(name)
        sty = storage_type(self._t(instr))
        if g is None:
            arr_ty = ir.ArrayType(sty, flat.size)
            g = ir.GlobalVariable(self.module, arr_ty, name)
            g.global_constant = True
            g.linkage = "private"
            g.initializer = ir.Constant(arr_ty, [self._scalar_constant(sty, self._t(instr), v, storage=True)
                                                 for v in flat])
        offset = index[0] if self.flat_index else linear_index(self.b, index, instr.shape.dims)
        ptr = self.b.gep(g, [const_i64(0), offset])
        v = self.b.load(ptr)
        return self.b.icmp_unsigned("!=", v, ir.Constant(I8, 0)) if self._t(instr) == "pred" else v

    def _scalar_constant(self, ty, t, v, storage=False):
        if is_complex(t):
            v = complex(v)
            return ir.Constant(ty, [ir.Constant(ty.elements[0], v.real), ir.Constant(ty.elements[1], v.imag)])
        if t == "pred":
            return ir.Constant(I8 if storage else I1, int(bool(v)))
        if is_float(t):
            return ir.Constant(ty, float(v))
        return ir.Constant(ty, int(np.asarray(v).astype(np.int64 if t[0] == "s" else np.uint64)))

    def _iota(self, instr, index):
        i = index[instr.attrs["iota_dimension"]]
        return self._convert_int(i, "s64", self._t(instr))

    # ---- index arithmetic ---------------------------------------------------------------------

    def _broadcast(self, instr, index):
        x = instr.operands[0]
        dims = instr.attrs["dimensions"]
        sub = [const_i64(0) if x.shape.dims[k] == 1 else index[d] for k, d in enumerate(dims)]
        return self.value(x, sub)

    def _reshape(self, instr, index):
        x = instr.operands[0]
        src, dst = x.shape.dims, instr.shape.dims
        if [n for n in src if n != 1] == [n for n in dst if n != 1]:
            # Only size-1 dims are inserted or removed: map the other dims directly.
            it = iter([i for i, n in zip(index, dst) if n != 1])
            return self.value(x, [const_i64(0) if n == 1 else next(it) for n in src])
        return self.value(x, delinearize(self.b, linear_index(self.b, index, dst), src))

    def _bitcast(self, instr, index):
        return self._same_bits(instr, self._reshape(instr, index))

    def _same_bits(self, instr, v):
        """A bitcast names the same bytes; one that also changes the element type (same width,
        as in XLA's optimized comparators: a float's bits as an integer key) reinterprets them."""
        return self._reinterpret(v, instr.operands[0].shape.element_type, instr.shape.element_type,
                                 f"a bitcast from {{src}} to {{dst}} has no native code path")

    def _reinterpret(self, v, src: str, dst: str, refusal: str):
        """``v``'s bits (as stored in memory) read as type ``dst`` of the same width."""
        if src == dst:
            return v
        if "pred" in (src, dst) or _bit_width(storage_type(src)) != _bit_width(storage_type(dst)):
            raise UnsupportedError(refusal.format(src=src, dst=dst))
        b = self.b
        return from_storage(b, dst, b.bitcast(to_storage(b, src, v), storage_type(dst)))

    def _copy(self, instr, index):
        return self._operand(instr, 0, index)

    def _transpose(self, instr, index):
        perm = instr.attrs["dimensions"]
        sub = [None] * len(perm)
        for out_dim, in_dim in enumerate(perm):
            sub[in_dim] = index[out_dim]
        return self._operand(instr, 0, sub)

    def _slice(self, instr, index):
        b = self.b
        sub = []
        for i, s in zip(index, instr.attrs["slice"]):
            v = i if s.stride == 1 else b.mul(i, const_i64(s.stride))
            sub.append(v if s.start == 0 else b.add(v, const_i64(s.start)))
        return self._operand(instr, 0, sub)

    def _reverse(self, instr, index):
        dims = instr.attrs["dimensions"]
        sub = [self.b.sub(const_i64(n - 1), i) if d in dims else i
               for d, (i, n) in enumerate(zip(index, instr.shape.dims))]
        return self._operand(instr, 0, sub)

    def _select_among(self, choices: list[tuple[ir.Value, Callable[[], ir.Value]]], default, ty):
        """Emit if/else blocks choosing a value; used by concatenate and pad."""
        b = self.b
        end = b.append_basic_block("merge")
        incoming = []
        # Values computed before the branches dominate all of them; values computed inside
        # one branch dominate nothing else, so each branch starts from the same memo.
        before = dict(self._memo)
        for cond, make in choices:
            then = b.append_basic_block("take")
            other = b.append_basic_block("next")
            b.cbranch(cond, then, other)
            b.position_at_end(then)
            self._memo = dict(before)
            v = make()
            incoming.append((v, b.block))
            b.branch(end)
            b.position_at_end(other)
        self._memo = dict(before)
        v = default()
        incoming.append((v, b.block))
        b.branch(end)
        b.position_at_end(end)
        phi = b.phi(ty)
        for v, block in incoming:
            phi.add_incoming(v, block)
        self._memo = before
        return phi

    def _concatenate(self, instr, index):
        b = self.b
        d = instr.attrs["dimensions"][0]
        ty = llvm_type(self._t(instr))
        offsets, start = [], 0
        for op in instr.operands:
            offsets.append(start)
            start += op.shape.dims[d]

        def piece(k):
            def make():
                sub = list(index)
                if offsets[k]:
                    sub[d] = b.sub(index[d], const_i64(offsets[k]))
                return self.value(instr.operands[k], sub)
            return make

        choices = [(b.icmp_signed("<", index[d], const_i64(offsets[k + 1])), piece(k))
                   for k in range(len(instr.operands) - 1)]
        return self._select_among(choices, piece(len(instr.operands) - 1), ty)

    def _pad(self, instr, index):
        b = self.b
        x, pad_value = instr.operands
        ty = llvm_type(self._t(instr))
        inside = ir.Constant(I1, 1)
        sub = []
        for i, p, n in zip(index, instr.attrs["padding"], x.shape.dims):
            shifted = b.sub(i, const_i64(p.low)) if p.low else i
            step = p.interior + 1
            if step != 1:
                ok = b.icmp_signed("==", b.srem(shifted, const_i64(step)), const_i64(0))
                inside = b.and_(inside, ok)
                shifted = b.sdiv(shifted, const_i64(step))
            inside = b.and_(inside, b.icmp_signed(">=", shifted, const_i64(0)))
            inside = b.and_(inside, b.icmp_signed("<", shifted, const_i64(n)))
            sub.append(shifted)
        return self._select_among([(inside, lambda: self.value(x, sub))],
                                  lambda: self.value(pad_value, []), ty)

    def _dynamic_slice(self, instr, index):
        x = instr.operands[0]
        starts = self._start_operands(instr.operands[1:], x.shape.rank)
        sub = [self.b.add(i, self.clamped_start(start, at, n - size))
               for i, (start, at), n, size in zip(index, starts, x.shape.dims, instr.shape.dims)]
        return self.value(x, sub)

    @staticmethod
    def _start_operands(starts: list, rank: int) -> list[tuple[Instruction, list]]:
        """(operand, index) of each dimension's start: scalar operands, or the old form's one
        vector of starts (the evaluator accepts both)."""
        if len(starts) == 1 and starts[0].shape.rank == 1:
            return [(starts[0], [const_i64(d)]) for d in range(rank)]
        return [(s, []) for s in starts]

    def clamped_start(self, start: Instruction, index: list, limit: int) -> ir.Value:
        """An index operand as i64, clamped to [0, limit] (XLA clamps dynamic starts)."""
        b = self.b
        v = self.convert_value(self.value(start, index), start.shape.element_type, "s64")
        v = b.select(b.icmp_signed("<", v, const_i64(0)), const_i64(0), v)
        return b.select(b.icmp_signed(">", v, const_i64(limit)), const_i64(limit), v)

    def _gather(self, instr, index):
        x, idx = instr.operands
        a = instr.attrs
        offset_dims, collapsed = a.get("offset_dims", ()), a.get("collapsed_slice_dims", ())
        operand_batching = a.get("operand_batching_dims", ())
        start_map, sizes = a.get("start_index_map", ()), a.get("slice_sizes", ())
        ivd = a.get("index_vector_dim", idx.shape.rank)
        batch_index = [i for d, i in enumerate(index) if d not in offset_dims]
        starts = {}
        for k, operand_dim in enumerate(start_map):
            sub = list(batch_index)
            if ivd < idx.shape.rank:
                sub.insert(ivd, const_i64(k))
            starts[operand_dim] = self.clamped_start(idx, sub, x.shape.dims[operand_dim] - sizes[operand_dim])
        # A batching dimension of the operand is indexed by the output's position along the
        # paired batch dimension of the indices (clamped like every start).
        batch_axes = [d for d in range(idx.shape.rank) if d != ivd]
        for operand_dim, idx_dim in zip(operand_batching, a.get("start_indices_batching_dims", ())):
            i, limit = batch_index[batch_axes.index(idx_dim)], const_i64(x.shape.dims[operand_dim] - 1)
            starts[operand_dim] = self.b.select(self.b.icmp_signed(">", i, limit), limit, i)
        kept = [d for d in range(x.shape.rank) if d not in collapsed and d not in operand_batching]
        sub = []
        for d in range(x.shape.rank):
            offset = index[offset_dims[kept.index(d)]] if d in kept else const_i64(0)
            sub.append(self.b.add(starts[d], offset) if d in starts else offset)
        return self.value(x, sub)

    def _dynamic_update_slice(self, instr, index):
        b = self.b
        x, update = instr.operands[:2]
        starts = self._start_operands(instr.operands[2:], x.shape.rank)
        inside = ir.Constant(I1, 1)
        sub = []
        for i, n, u, (start, at) in zip(index, x.shape.dims, update.shape.dims, starts):
            rel = b.sub(i, self.clamped_start(start, at, n - u))
            inside = b.and_(inside, b.and_(b.icmp_signed(">=", rel, const_i64(0)),
                                           b.icmp_signed("<", rel, const_i64(u))))
            # Clamped so the (discarded) read outside the update stays in bounds.
            rel = b.select(b.icmp_signed("<", rel, const_i64(0)), const_i64(0), rel)
            sub.append(b.select(b.icmp_signed(">=", rel, const_i64(max(u, 1))), const_i64(max(u - 1, 0)), rel))
        if 0 in update.shape.dims:
            return self.value(x, index)
        return b.select(inside, self.value(update, sub), self.value(x, index))

    # ---- elementwise --------------------------------------------------------------------------

    def _convert_int(self, v, src: str, dst: str):
        """Integer-to-integer or integer-to-float conversion with HLO semantics."""
        return self.convert_value(v, src, dst)

    def convert_value(self, v, src: str, dst: str):
        b = self.b
        if src == dst:
            return v
        ty = llvm_type(dst)
        if src == "pred":
            if is_float(dst):
                return b.uitofp(v, ty)
            return b.zext(v, ty)
        if dst == "pred":
            if is_float(src):
                return b.fcmp_unordered("!=", v, ir.Constant(v.type, 0.0))
            return b.icmp_unsigned("!=", v, ir.Constant(v.type, 0))
        if is_integral(src) and is_integral(dst):
            sw, dw = v.type.width, ty.width
            if sw == dw:
                return v
            if sw > dw:
                return b.trunc(v, ty)
            return b.sext(v, ty) if src[0] == "s" else b.zext(v, ty)
        if is_integral(src):
            return b.sitofp(v, ty) if src[0] == "s" else b.uitofp(v, ty)
        if is_integral(dst):
            # NaN -> 0, saturate out of range (XLA's convert semantics).  Half goes through
            # float first (exact): LLVM 20's x86 lowering of the saturating conversion from half
            # gives the integer minimum for NaN.
            if _float_width(src) == 16:
                v = b.fpext(v, ir.FloatType())
            name = "llvm.fptosi.sat" if dst[0] == "s" else "llvm.fptoui.sat"
            fn = self.module.declare_intrinsic(name, [ty, v.type], ir.FunctionType(ty, [v.type]))
            return b.call(fn, [v])
        if _float_width(src) < _float_width(dst):
            return b.fpext(v, ty)
        if src == "f64" and dst == "f16":
            return self._f64_to_f16(v)
        return b.fptrunc(v, ty)

    def _f64_to_f16(self, v):
        """f64 -> f16 correctly rounded.  LLVM lowers the direct fptrunc to compiler-rt's
        __truncdfhf2, which is not in the process (the kernel would jump to address 0), and
        rounding to f32 first would round twice (1 + 2**-11 + 2**-40 -> 1 + 2**-11 -> 1).  So:
        f64 -> f32 rounded to odd (truncate, then set the last bit if anything was cut off),
        then f32 -> f16 (hardware, to nearest even): with 13 more bits in f32 than in f16,
        the odd bit only says "above the halfway point", so the second rounding is correct."""
        b = self.b
        f32, i32 = ir.FloatType(), I32
        nearest = b.fptrunc(v, f32)
        magnitude = self.intrinsic("llvm.fabs", v.type, [v])
        rounded_up = b.fcmp_ordered(">", self.intrinsic("llvm.fabs", v.type, [b.fpext(nearest, v.type)]), magnitude)
        bits = b.bitcast(nearest, i32)
        bits = b.select(rounded_up, b.sub(bits, ir.Constant(i32, 1)), bits)   # toward zero
        inexact = b.fcmp_ordered("!=", b.fpext(b.bitcast(bits, f32), v.type), v)
        bits = b.select(inexact, b.or_(bits, ir.Constant(i32, 1)), bits)
        return b.fptrunc(b.bitcast(bits, f32), ir.HalfType())

    def _convert(self, instr, index):
        x = instr.operands[0]
        return self.convert_value(self.value(x, index), compute_type(x.shape.element_type), self._t(instr))

    def _bitcast_convert(self, instr, index):
        """The same bits as another type.  Between widths a minor dim of the width ratio
        appears (wide to narrow: element k of it is the k-th narrow piece, lowest bits first,
        as NumPy's little-endian view) or vanishes (narrow to wide: the pieces joined)."""
        x = instr.operands[0]
        src, dst = x.shape.element_type, instr.shape.element_type
        sw, dw = _bit_width(storage_type(src)), _bit_width(storage_type(dst))
        refusal = "bitcast-convert between widths (or of pred) has no native code path yet"
        if sw == dw or "pred" in (src, dst) or not sw or not dw or self.flat_index:
            return self._reinterpret(self.value(x, index), src, dst, refusal)
        b = self.b
        if sw > dw:
            shift = b.mul(index[-1], const_i64(dw))           # (sw <= 64: the widest type)
            shift = b.trunc(shift, ir.IntType(sw)) if sw < 64 else shift
            piece = b.lshr(self._bits(self.value(x, index[:-1]), src), shift)
            return self._from_bits(b.trunc(piece, ir.IntType(dw)), dst)
        joined = ir.Constant(ir.IntType(dw), 0)
        for k in range(dw // sw):
            piece = b.zext(self._bits(self.value(x, index + [const_i64(k)]), src), ir.IntType(dw))
            joined = b.or_(joined, b.shl(piece, ir.Constant(ir.IntType(dw), k * sw)) if k else piece)
        return self._from_bits(joined, dst)

    def _bits(self, v, t: str):
        """A register value's stored bits as an integer."""
        stored = to_storage(self.b, t, v)
        return stored if isinstance(stored.type, ir.IntType) else self.b.bitcast(stored, ir.IntType(_bit_width(stored.type)))

    def _from_bits(self, bits, t: str):
        """The register value whose stored bits are the integer ``bits``."""
        ty = storage_type(t)
        return from_storage(self.b, t, bits if isinstance(ty, ir.IntType) else self.b.bitcast(bits, ty))

    def _reduce_precision(self, instr, index):
        """Round to a float format with fewer bits, on the bit pattern (the evaluator's rule,
        as XLA's emitter): mantissa to nearest even, exponent overflow -> signed inf,
        underflow (the target's subnormals included) -> signed zero, NaN stays NaN while a
        mantissa bit remains."""
        b = self.b
        v = self._operand(instr, 0, index)
        ebits, mbits = instr.attrs["exponent_bits"], instr.attrs["mantissa_bits"]
        width = _float_width(self._t(instr))
        src_m = {16: 10, 32: 23, 64: 52}[width]
        src_e = width - 1 - src_m
        ity = ir.IntType(width)

        def k(value):
            return ir.Constant(ity, value)
        bits = b.bitcast(v, ity)
        if mbits < src_m:
            shift = src_m - mbits
            last = 1 << shift
            bias = b.add(b.lshr(b.and_(bits, k(last)), k(shift)), k((last >> 1) - 1))
            bits = b.and_(b.add(bits, bias), k(((1 << width) - 1) ^ (last - 1)))
        if ebits < src_e:
            exp_mask = ((1 << src_e) - 1) << src_m
            bias, reduced_bias = (1 << (src_e - 1)) - 1, (1 << (ebits - 1)) - 1
            exponent = b.and_(bits, k(exp_mask))
            signed_zero = b.and_(bits, k(1 << (width - 1)))
            overflow = b.icmp_unsigned(">", exponent, k((bias + reduced_bias) << src_m))
            underflow = b.icmp_unsigned("<=", exponent, k((bias - reduced_bias) << src_m))
            bits = b.select(overflow, b.or_(signed_zero, k(exp_mask)), b.select(underflow, signed_zero, bits))
        out = b.bitcast(bits, v.type)
        if mbits > 0:
            out = b.select(b.fcmp_unordered("uno", v, v), v, out)
        return out

    def _unary_float(self, instr, index, intrinsic):
        v = self._operand(instr, 0, index)
        return self.intrinsic(intrinsic, v.type, [v])

    def _negate(self, instr, index):
        v = self._operand(instr, 0, index)
        return self.b.fneg(v) if is_float(self._t(instr)) else self.b.neg(v)

    def _abs(self, instr, index):
        v = self._operand(instr, 0, index)
        if is_float(self._t(instr)):
            return self.intrinsic("llvm.fabs", v.type, [v])
        if self._t(instr)[0] == "u":
            return v
        fn = self.module.declare_intrinsic("llvm.abs", [v.type], ir.FunctionType(v.type, [v.type, I1]))
        return self.b.call(fn, [v, ir.Constant(I1, 0)])

    def _exponential(self, instr, index):
        return math_calls.call(self.b, "exp", [self._operand(instr, 0, index)], self.inline_math)

    def _log(self, instr, index):
        return math_calls.call(self.b, "log", [self._operand(instr, 0, index)], self.inline_math)

    def _sqrt(self, instr, index):
        return self._unary_float(instr, index, "llvm.sqrt")

    def _sine(self, instr, index):
        return self._trig("sin", instr, index)

    def _cosine(self, instr, index):
        return self._trig("cos", instr, index)

    @functools.cached_property
    def inline_math(self) -> bool:
        """Are this computation's transcendentals inlined rather than called (math_calls)?"""
        return not math_calls.calls_pay(self.comp)

    def _trig(self, name: str, instr, index):
        """sin/cos/tan; the cheap reduction where the kernel checked the arguments (trig_guard).
        Inline where another of them takes the same operand: LLVM then computes their shared
        argument reduction and polynomials once (two calls computed them twice: sin(x)*cos(x)
        ran 1.6x slower)."""
        bounded = "_bounded" if id(instr) in self.bounded_trig else ""
        x = instr.operands[0]
        shared = any(u is not instr and u.opcode in ("sine", "cosine", "tan") and u.operands[0] is x
                     for u in self.comp.instructions)
        return math_calls.call(self.b, name + bounded, [self._operand(instr, 0, index)], shared or self.inline_math)

    def _floor(self, instr, index):
        return self._unary_float(instr, index, "llvm.floor")

    def _ceil(self, instr, index):
        return self._unary_float(instr, index, "llvm.ceil")

    def _round_nearest_even(self, instr, index):
        return self._unary_float(instr, index, "llvm.roundeven")

    def _round_nearest_afz(self, instr, index):
        return self._unary_float(instr, index, "llvm.round")

    def _rsqrt(self, instr, index):
        v = self._unary_float(instr, index, "llvm.sqrt")
        return self.b.fdiv(ir.Constant(v.type, 1.0), v)

    def _tanh(self, instr, index):
        return math_calls.call(self.b, "tanh", [self._operand(instr, 0, index)], self.inline_math)

    def _exponential_minus_one(self, instr, index):
        return math_calls.call(self.b, "expm1", [self._operand(instr, 0, index)], self.inline_math)

    def _log_plus_one(self, instr, index):
        return math_calls.call(self.b, "log1p", [self._operand(instr, 0, index)], self.inline_math)

    def _cbrt(self, instr, index):
        return self._libm("cbrt", llvm_type(self._t(instr)), [self._operand(instr, 0, index)])

    def _tan(self, instr, index):
        return self._trig("tan", instr, index)

    def _erf(self, instr, index):
        return math_calls.call(self.b, "erf", [self._operand(instr, 0, index)], self.inline_math)

    def _atan2(self, instr, index):
        return math_calls.call(self.b, "atan2", [self._operand(instr, 0, index), self._operand(instr, 1, index)],
                               self.inline_math)

    def _logistic(self, instr, index):
        return math_calls.call(self.b, "logistic", [self._operand(instr, 0, index)], self.inline_math)

    def _is_finite(self, instr, index):
        v = self._operand(instr, 0, index)
        a = self.intrinsic("llvm.fabs", v.type, [v])
        return self.b.fcmp_ordered("<", a, ir.Constant(v.type, float("inf")))

    def _sign(self, instr, index):
        b = self.b
        v = self._operand(instr, 0, index)
        if is_float(self._t(instr)):
            zero, one = ir.Constant(v.type, 0.0), ir.Constant(v.type, 1.0)
            s = b.select(b.fcmp_ordered(">", v, zero), one,
                         b.select(b.fcmp_ordered("<", v, zero), ir.Constant(v.type, -1.0), v))
            return s      # keeps NaN and signed zero
        zero = ir.Constant(v.type, 0)
        if self._t(instr)[0] == "u":
            return b.zext(b.icmp_unsigned("!=", v, zero), v.type)
        gt = b.zext(b.icmp_signed(">", v, zero), v.type)
        lt = b.zext(b.icmp_signed("<", v, zero), v.type)
        return b.sub(gt, lt)

    def _not(self, instr, index):
        return self.b.not_(self._operand(instr, 0, index))

    def _popcnt(self, instr, index):
        v = self._operand(instr, 0, index)
        return self.intrinsic("llvm.ctpop", v.type, [v])

    def _count_leading_zeros(self, instr, index):
        v = self._operand(instr, 0, index)
        fn = self.module.declare_intrinsic("llvm.ctlz", [v.type], ir.FunctionType(v.type, [v.type, I1]))
        return self.b.call(fn, [v, ir.Constant(I1, 0)])

    def _contracted(self, instr) -> tuple:
        # (f16/bf16 compute in f32 and round after every operation: never contracted)
        return self.contract if instr.shape.element_type in ("f32", "f64") else ()

    def _binary(self, instr, index):
        return self._operand(instr, 0, index), self._operand(instr, 1, index)

    def _add(self, instr, index):
        a, c = self._binary(instr, index)
        if self._t(instr) == "pred":
            return self.b.or_(a, c)        # pred addition is logical or (XLA, the evaluator)
        return self.b.fadd(a, c, flags=self._contracted(instr)) if is_float(self._t(instr)) else self.b.add(a, c)

    def _subtract(self, instr, index):
        a, c = self._binary(instr, index)
        return self.b.fsub(a, c, flags=self._contracted(instr)) if is_float(self._t(instr)) else self.b.sub(a, c)

    def _multiply(self, instr, index):
        a, c = self._binary(instr, index)
        if self._t(instr) == "pred":
            return self.b.and_(a, c)
        return self.b.fmul(a, c, flags=self._contracted(instr)) if is_float(self._t(instr)) else self.b.mul(a, c)

    def _divide(self, instr, index):
        t = self._t(instr)
        divisor = constant_reciprocal(instr)
        if divisor is not None:         # (x / c as x * (1/c), corrected: hlo/division.py)
            return self._divide_by_constant(self._operand(instr, 0, index), *divisor)
        a, c = self._binary(instr, index)
        if is_float(t):
            return self.b.fdiv(a, c)
        return self._int_divide(a, c, t, remainder=False)

    def _divide_by_constant(self, a, c: float, inverse: float):
        """``a / c`` as ``a * (1/c)``, corrected (``corrected_quotient``): exactly where the
        quotient is a float, ``rmax * 40 / 40`` is ``rmax``, as a bin edge must be."""
        y = ir.Constant(a.type, inverse)
        return self.corrected_quotient(a, self.b.fmul(a, y), ir.Constant(a.type, c), y)

    def corrected_quotient(self, a, q, divisor, reciprocal):
        """The division ``a / divisor`` from the product ``q = a * reciprocal`` and one
        correction, ``q + (a - q*divisor) * reciprocal`` with the residual exact (an FMA):
        Markstein's step, which rounds as the division does where ``reciprocal`` is a normal
        number.  Where the residual is not finite and nonzero, ``q`` is kept: infinite or NaN
        operands and overflowing quotients (the residual is then inf or NaN, and so would the
        correction be, where the division gives inf or 0), and exact quotients (``-0.0 / c``
        keeps its sign).  Where ``a`` is within a few ulps of the smallest normal the residual
        itself may round: an ulp off, as the product alone is everywhere without FMA."""
        if not host_has_fma():
            return q
        b = self.b
        residual = self.intrinsic("llvm.fma", a.type, [b.fneg(q), divisor, a])
        corrected = self.intrinsic("llvm.fma", a.type, [residual, reciprocal, q])
        size = self.intrinsic("llvm.fabs", a.type, [residual])
        worth = b.and_(b.fcmp_ordered(">", size, ir.Constant(a.type, 0.0)),
                       b.fcmp_ordered("<", size, ir.Constant(a.type, float("inf"))))
        return b.select(worth, corrected, q)

    def _remainder(self, instr, index):
        a, c = self._binary(instr, index)
        t = self._t(instr)
        if is_float(t):
            return self.b.frem(a, c)
        return self._int_divide(a, c, t, remainder=True)

    def _int_divide(self, a, c, t, remainder):
        """XLA integer division: x/0 = -1 (all bits), x%0 = x, INT_MIN/-1 = INT_MIN, INT_MIN%-1 = 0."""
        b = self.b
        ty = a.type
        zero, one = ir.Constant(ty, 0), ir.Constant(ty, 1)
        is_zero = b.icmp_unsigned("==", c, zero)
        if t[0] == "u":
            safe = b.select(is_zero, one, c)
            q = b.urem(a, safe) if remainder else b.udiv(a, safe)
            return b.select(is_zero, a if remainder else ir.Constant(ty, -1), q)
        int_min = ir.Constant(ty, -(1 << (ty.width - 1)))
        overflow = b.and_(b.icmp_signed("==", a, int_min), b.icmp_signed("==", c, ir.Constant(ty, -1)))
        bad = b.or_(is_zero, overflow)
        safe = b.select(bad, one, c)
        q = b.srem(a, safe) if remainder else b.sdiv(a, safe)
        if remainder:
            return b.select(is_zero, a, b.select(overflow, zero, q))
        return b.select(is_zero, ir.Constant(ty, -1), b.select(overflow, int_min, q))

    def _power(self, instr, index):
        a, c = self._binary(instr, index)
        t = self._t(instr)
        if is_float(t):
            return math_calls.call(self.b, "pow", [a, c], self.inline_math)
        return self._int_power(a, c, signed=t[0] == "s")

    def _int_power(self, base, exponent, signed: bool):
        """XLA's integer power (the evaluator's rule): exponentiation by squaring over every
        bit of the exponent read as unsigned, wrapping around; a negative exponent gives 0
        (1 for base 1).  Unrolled over the bit width with selects: no branches, so loops
        over it vectorize."""
        b = self.b
        ty = base.type
        one = ir.Constant(ty, 1)
        acc, square = one, base
        for k in range(ty.width):
            bit = b.trunc(b.lshr(exponent, ir.Constant(ty, k)), I1)
            acc = b.select(bit, b.mul(acc, square), acc)
            if k + 1 < ty.width:
                square = b.mul(square, square)
        if not signed:
            return acc
        negative = b.icmp_signed("<", exponent, ir.Constant(ty, 0))
        return b.select(negative, b.zext(b.icmp_signed("==", base, one), ty), acc)

    def _maximum(self, instr, index):
        return self._minmax(instr, index, True)

    def _minimum(self, instr, index):
        return self._minmax(instr, index, False)

    def _minmax(self, instr, index, is_max):
        a, c = self._binary(instr, index)
        return self.minmax(self._t(instr), a, c, is_max)

    def minmax(self, t: str, a, c, is_max: bool):
        """max/min of two values of element type ``t`` (NaN-propagating for floats)."""
        b = self.b
        if is_float(t):
            return self.intrinsic("llvm.maximum" if is_max else "llvm.minimum", a.type, [a, c])
        if t == "pred":
            return b.or_(a, c) if is_max else b.and_(a, c)
        cmp = b.icmp_signed if t[0] == "s" else b.icmp_unsigned
        return b.select(cmp(">" if is_max else "<", a, c), a, c)

    def _and(self, instr, index):
        return self.b.and_(*self._binary(instr, index))

    def _or(self, instr, index):
        return self.b.or_(*self._binary(instr, index))

    def _xor(self, instr, index):
        return self.b.xor(*self._binary(instr, index))

    def _shift(self, instr, index, kind):
        b = self.b
        a, c = self._binary(instr, index)
        width = ir.Constant(a.type, a.type.width)
        too_big = b.icmp_unsigned(">=", c, width)
        safe = b.select(too_big, ir.Constant(a.type, 0), c)
        if kind == "shl":
            return b.select(too_big, ir.Constant(a.type, 0), b.shl(a, safe))
        if kind == "lshr":
            return b.select(too_big, ir.Constant(a.type, 0), b.lshr(a, safe))
        fill = b.ashr(a, ir.Constant(a.type, a.type.width - 1))
        return b.select(too_big, fill, b.ashr(a, safe))

    def _shift_left(self, instr, index):
        return self._shift(instr, index, "shl")

    def _shift_right_logical(self, instr, index):
        return self._shift(instr, index, "lshr")

    def _shift_right_arithmetic(self, instr, index):
        return self._shift(instr, index, "ashr")

    def _compare(self, instr, index):
        b = self.b
        x = instr.operands[0]
        a, c = self._binary(instr, index)
        t = x.shape.element_type
        direction = instr.attrs["direction"]
        op = {"EQ": "==", "NE": "!=", "LT": "<", "LE": "<=", "GT": ">", "GE": ">="}[direction]
        if is_float(t):
            if instr.attrs.get("type") == "TOTALORDER":
                return b.icmp_signed(op, self._total_order_key(a), self._total_order_key(c))
            return b.fcmp_unordered(op, a, c) if direction == "NE" else b.fcmp_ordered(op, a, c)
        if t == "pred" or t[0] == "u":
            return b.icmp_unsigned(op, a, c)
        return b.icmp_signed(op, a, c)

    def _total_order_key(self, v):
        """A signed integer ordered like IEEE totalOrder (-NaN < -inf < ... < -0 < +0 < ...
        < +inf < +NaN): floats are sign-magnitude, so flipping the magnitude bits of negative
        values turns their bits into two's complement order."""
        b = self.b
        width = {"half": 16, "float": 32, "double": 64}[str(v.type)]
        ity = ir.IntType(width)
        bits = b.bitcast(v, ity)
        negative_mask = b.ashr(bits, ir.Constant(ity, width - 1))      # all ones if negative
        return b.xor(bits, b.and_(negative_mask, ir.Constant(ity, (1 << (width - 1)) - 1)))

    def _select(self, instr, index):
        p = instr.operands[0]
        pv = self.value(p, [] if p.shape.rank == 0 else index)
        return self.b.select(pv, self._operand(instr, 1, index), self._operand(instr, 2, index))

    def _clamp(self, instr, index):
        lo_i, x_i, hi_i = instr.operands
        lo = self.value(lo_i, [] if lo_i.shape.rank == 0 else index)
        hi = self.value(hi_i, [] if hi_i.shape.rank == 0 else index)
        x = self.value(x_i, index)
        b = self.b
        t = self._t(instr)
        if is_float(t):
            return self.intrinsic("llvm.minimum", x.type, [self.intrinsic("llvm.maximum", x.type, [x, lo]), hi])
        cmp = b.icmp_signed if t[0] == "s" else b.icmp_unsigned
        m = b.select(cmp(">", x, lo), x, lo)
        return b.select(cmp("<", m, hi), m, hi)

    # ---- real/imag of real numbers ------------------------------------------------------------

    def _real(self, instr, index):
        return self._operand(instr, 0, index)

    def _imag(self, instr, index):
        v = self._operand(instr, 0, index)
        return ir.Constant(v.type, 0.0 if is_float(self._t(instr)) else 0)

    # ---- complex numbers ----------------------------------------------------------------------
    #
    # The functions live in complex_math.ComplexMath (NumPy, i.e. glibc's C99 Annex G
    # functions, is the oracle); these rules read the operands' parts, choose the precision a
    # function computes in (c64: mostly double, rounded once) and pack the result.

    def parts(self, v):
        return self.b.extract_value(v, 0), self.b.extract_value(v, 1)

    def pack(self, re, im):
        ty = ir.LiteralStructType([re.type, re.type])
        return self.b.insert_value(self.b.insert_value(ir.Constant(ty, ir.Undefined), re, 0), im, 1)

    def _complex_operand(self, instr, k, index):
        return self.parts(self._operand(instr, k, index))

    def complex_multiply(self, a, b, c, d):
        return self.cmath.multiply(a, b, c, d)

    def _complex_function(self, instr, index, fn, in_double=True):
        """Apply ``fn(re, im) -> (re, im)`` to operand 0, in double (rounded once) for c64
        unless ``in_double`` is false."""
        cm = self.cmath
        x, y = self._complex_operand(instr, 0, index)
        part = x.type
        if in_double:
            x, y = cm.widen(x), cm.widen(y)
        re, im = fn(x, y)
        return self.pack(cm.narrow(re, part), cm.narrow(im, part))

    def _complex_binary(self, instr, index, fn):
        (a, b), (c, d) = self._complex_operand(instr, 0, index), self._complex_operand(instr, 1, index)
        return self.pack(*fn(a, b, c, d))

    def _complex_add(self, instr, index):
        return self._complex_binary(instr, index, lambda a, b, c, d: (self.b.fadd(a, c), self.b.fadd(b, d)))

    def _complex_subtract(self, instr, index):
        return self._complex_binary(instr, index, lambda a, b, c, d: (self.b.fsub(a, c), self.b.fsub(b, d)))

    def _complex_multiply(self, instr, index):
        return self._complex_binary(instr, index, self.cmath.multiply)

    def _complex_divide(self, instr, index):
        return self._complex_binary(instr, index, self.cmath.divide)

    def _complex_negate(self, instr, index):
        return self._complex_function(instr, index, lambda x, y: (self.b.fneg(x), self.b.fneg(y)), False)

    def _complex_complex(self, instr, index):
        return self.pack(self._operand(instr, 0, index), self._operand(instr, 1, index))

    def _complex_real(self, instr, index):
        return self._complex_operand(instr, 0, index)[0]

    def _complex_imag(self, instr, index):
        return self._complex_operand(instr, 0, index)[1]

    def _complex_compare(self, instr, index):
        direction = instr.attrs["direction"]
        if direction not in ("EQ", "NE"):
            raise UnsupportedError(f"complex compare {direction} has no native code path")
        B = self.b
        (a, b), (c, d) = self._complex_operand(instr, 0, index), self._complex_operand(instr, 1, index)
        if direction == "EQ":
            return B.and_(B.fcmp_ordered("==", a, c), B.fcmp_ordered("==", b, d))
        return B.or_(B.fcmp_unordered("!=", a, c), B.fcmp_unordered("!=", b, d))

    def _complex_convert(self, instr, index):
        x = instr.operands[0]
        src, dst = compute_type(x.shape.element_type), self._t(instr)
        v = self.value(x, index)
        if is_complex(src):
            re, im = self.parts(v)
            part = complex_component(src)
            if not is_complex(dst):
                return self.convert_value(re, part, dst)     # the real part (as the evaluator)
            return self.pack(self.convert_value(re, part, complex_component(dst)),
                              self.convert_value(im, part, complex_component(dst)))
        re = self.convert_value(v, src, complex_component(dst))
        return self.pack(re, ir.Constant(re.type, 0.0))

    def _complex_abs(self, instr, index):
        return self.cmath.hypot(*self._complex_operand(instr, 0, index))

    def _complex_exponential_minus_one(self, instr, index):
        part = llvm_type(complex_component(self._t(instr)))
        return self._complex_function(instr, index, lambda x, y: self.cmath.expm1(x, y, part))

    def _complex_power(self, instr, index):
        """NumPy's a**b: its integer-exponent path in the part type, glibc's cpow in double."""
        cm = self.cmath
        (ar, ai), (br, bi) = self._complex_operand(instr, 0, index), self._complex_operand(instr, 1, index)
        general = cm.pow_general(ar, ai, br, bi)
        applies, re, im = cm.pow_small_integer(ar, ai, br, bi)
        re, im = cm.sel2(applies, (re, im), general)
        return self.pack(*cm.pow_special_cases(ar, ai, br, bi, re, im))


def _method_names(prefix: str, opcodes: str) -> dict[str, str]:
    return {op: prefix + op.replace("-", "_") for op in opcodes.split()}


# The elemental codegen rules: opcode -> the ElementalEmitter method that emits one element of
# it.  Looked up by name on the emitter (so a subclass's override, e.g. the flat-index reshape,
# is the one used); the check below turns a renamed or missing method into an import error
# instead of a silent fall-back to the evaluator.
ELEMENTAL_RULES = _method_names("_", """
    abs negate exponential exponential-minus-one log log-plus-one sqrt rsqrt cbrt tanh logistic
    sine cosine tan erf floor ceil round-nearest-even round-nearest-afz sign not is-finite popcnt
    count-leading-zeros real imag convert bitcast-convert reduce-precision copy
    add subtract multiply divide remainder power maximum minimum and or xor atan2 shift-left
    shift-right-arithmetic shift-right-logical compare select clamp
    constant iota broadcast reshape transpose slice reverse bitcast pad dynamic-slice
    dynamic-update-slice concatenate gather""")

# Rules for ops with complex operands or results, beside the one-operand complex functions of
# _COMPLEX_FUNCTIONS (type-agnostic ops need neither).
COMPLEX_RULES = _method_names("_complex_", """
    abs negate exponential-minus-one real imag convert add subtract multiply divide power complex
    compare""")

for _rule in (*ELEMENTAL_RULES.values(), *COMPLEX_RULES.values()):
    assert callable(getattr(ElementalEmitter, _rule, None)), f"ElementalEmitter has no {_rule}"

def _bit_width(ty: ir.Type) -> int:
    return ty.width if isinstance(ty, ir.IntType) else {"half": 16, "float": 32, "double": 64}.get(str(ty), 0)


def _float_width(t: str) -> int:
    return {"f16": 16, "bf16": 16, "f32": 32, "f64": 64}[t]


def _involves_complex(instr: Instruction) -> bool:
    if not instr.shape.is_tuple and is_complex(instr.shape.element_type):
        return True
    return any(not o.shape.is_tuple and is_complex(o.shape.element_type) for o in instr.operands)
