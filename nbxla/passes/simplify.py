"""Algebraic simplification and constant folding.

Only rewrites that give bit-identical results are made (``x*1 -> x`` but not ``x*0 -> 0``
for floats, ``x+0 -> x`` only where ``-0.0`` cannot be changed), so the evaluator gives the
same answer before and after.  Constant folding runs the reference evaluator on small
constant subexpressions; broadcasts of scalars and iotas are left alone because they are
cheaper to compute inside a kernel than to read from memory.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ..hlo import Module, Shape
from ..hlo.builder import unique_name
from ..hlo.evaluator import evaluate
from ..hlo.ir import Computation, Instruction
from ..hlo.opcodes import NEVER_FOLD
from ..hlo.shapes import LOW_PRECISION_DTYPES
from .pipeline import Pass, instruction_ids, rename_new_instructions

FOLD_LIMIT = 1024          # largest constant (in elements) folding may create
OPERAND_FOLD_LIMIT = 1 << 16   # largest operand (in elements) folding may evaluate


def scalar_value(instr: Instruction):
    """The single value of a constant or a broadcast of a scalar constant, else None."""
    while instr.opcode == "broadcast" and instr.operands[0].shape.rank == 0:
        instr = instr.operands[0]
    if instr.opcode == "constant":
        lit = instr.literal
        if lit.size and np.all(lit == lit.flat[0]) and not np.isnan(lit.flat[0]):
            return lit.flat[0]
    return None


def _is(instr, value) -> bool:
    v = scalar_value(instr)
    return v is not None and v == value


def _is_negative_zero(instr) -> bool:
    """-0.0 (complex: both parts -0.0, the only zero that x + zero leaves unchanged)."""
    v = scalar_value(instr)
    if v is None or v != 0:
        return False
    if np.iscomplexobj(v):
        return bool(np.signbit(np.real(v)) and np.signbit(np.imag(v)))
    return bool(np.signbit(v))


class _Rewriter:
    """Creates replacement instructions placed before the one being rewritten."""

    def __init__(self, at: Instruction):
        self.at, self.new = at, []

    def op(self, opcode, *operands, shape, **attrs) -> Instruction:
        instr = Instruction(opcode, shape, operands, attrs, unique_name(opcode.replace("-", "_")),
                            self.at.location)
        self.new.append(instr)
        return instr


def _constant_starts(update: Instruction) -> list[int] | None:
    """The starts of a dynamic-update-slice with constant indices, clamped as it clamps them."""
    starts = []
    for index, n, u in zip(update.operands[2:], update.shape.dims, update.operands[1].shape.dims):
        if index.opcode != "constant" or index.literal.size != 1:
            return None
        starts.append(min(max(int(index.literal.reshape(-1)[0]), 0), n - u))
    return starts


def contiguous_run(sizes, dims) -> int:
    """Elements of a row-major slice of ``sizes`` from an array of ``dims`` that lie next to each
    other in memory."""
    run = 1
    for size, n in zip(reversed(sizes), reversed(dims)):
        run *= size
        if size != n:
            break
    return run


def _slice_through(instr: Instruction, rw: _Rewriter) -> Instruction | None:
    """A static slice read from an update or a transpose, without it: the update itself when the
    slice is exactly the updated window, the array under it when the slice misses the window;
    a slice of a transpose as the transpose of the operand's slice (it reads only that part,
    in the operand's order: a loop that carried an array transposed leaves its edge steps
    slicing the transpose back)."""
    x, window = instr.operands[0], instr.attrs["slice"]
    if x.opcode == "dynamic-update-slice" and all(s.stride == 1 for s in window):
        starts = _constant_starts(x)
        if starts is None:
            return None
        sizes = x.operands[1].shape.dims
        if 1 in sizes and all((s.start, s.limit) == (c, c + u) for s, c, u in zip(window, starts, sizes)):
            # (one position of an axis, read back: a loop's edge step.  A wider window read
            # back (a stencil's ``b[1:-1]`` of an unrolled time loop) keeps reading the array:
            # its update's formula copied into each reader multiplied the copies per step.)
            return x.operands[1]
        if any(s.limit <= c or s.start >= c + u for s, c, u in zip(window, starts, sizes)):
            return rw.op("slice", x.operands[0], shape=instr.shape, slice=tuple(window))
    if x.opcode == "transpose":
        perm = x.attrs["dimensions"]
        inner = x.operands[0]
        # output dim i of the transpose is the operand's dim perm[i]
        inner_window = [window[perm.index(j)] for j in range(len(perm))]
        inner_dims = [instr.shape.dims[perm.index(j)] for j in range(len(perm))]
        if contiguous_run(inner_dims, inner.shape.dims) < contiguous_run(instr.shape.dims, x.shape.dims):
            return None     # the slice lies in longer runs in the transpose (a copy made for that)
        sliced = rw.op("slice", inner, shape=Shape(instr.shape.element_type, inner_dims), slice=tuple(inner_window))
        return rw.op("transpose", sliced, shape=instr.shape, dimensions=tuple(perm))
    return None


def _simplify(instr: Instruction, rw: _Rewriter) -> Instruction | None:
    op, ops, t = instr.opcode, instr.operands, instr.shape.element_type if not instr.shape.is_tuple else None
    floaty = t is not None and t[0] in "fcb"   # f16/f32/f64/bf16, c64/c128
    if op == "add":
        a, b = ops
        for x, zero in ((a, b), (b, a)):
            if _is(zero, 0) and (not floaty or _is_negative_zero(zero)) and t != "pred":
                return x
    if op == "subtract" and _is(ops[1], 0) and t != "pred":
        return ops[0]
    if op == "multiply" and t != "pred":
        a, b = ops
        if _is(b, 1):
            return a
        if _is(a, 1):
            return b
    if op == "divide" and _is(ops[1], 1):
        return ops[0]
    if op == "divide" and floaty and t[0] == "f":
        c = scalar_value(ops[1])
        if c is not None and c != 0 and np.isfinite(c):
            m, e = np.frexp(np.float64(c))
            if abs(m) == 0.5:        # a power of two: x / c == x * (1/c) exactly
                inv = rw.op("constant", shape=Shape(t), literal=np.asarray(1 / c, instr.shape.dtype))
                if instr.shape.rank:
                    inv = rw.op("broadcast", inv, shape=instr.shape, dimensions=())
                return rw.op("multiply", ops[0], inv, shape=instr.shape)
    if op == "power":
        if _is(ops[1], 2):
            return rw.op("multiply", ops[0], ops[0], shape=instr.shape)
        if _is(ops[1], 1):
            return ops[0]
    if op in ("negate", "not") and ops[0].opcode == op:
        return ops[0].operands[0]
    if op == "reshape":
        x = ops[0]
        if x.shape.dims == instr.shape.dims:
            return x
        if x.opcode == "reshape":
            if x.operands[0].shape.dims == instr.shape.dims:     # keepdims and back again
                return x.operands[0]
            return rw.op("reshape", x.operands[0], shape=instr.shape)
    if op == "transpose":
        perm = instr.attrs["dimensions"]
        if perm == tuple(range(len(perm))):
            return ops[0]
        x = ops[0]
        if x.opcode == "transpose":
            inner = x.attrs["dimensions"]
            composed = tuple(inner[p] for p in perm)
            if composed == tuple(range(len(composed))):
                return x.operands[0]
            return rw.op("transpose", x.operands[0], shape=instr.shape, dimensions=composed)
    if op == "broadcast":
        x, dims = ops[0], instr.attrs["dimensions"]
        if x.shape.dims == instr.shape.dims and dims == tuple(range(len(dims))):
            return x
        if x.opcode == "broadcast":
            inner_dims = x.attrs["dimensions"]
            inner = x.operands[0]
            if all(inner.shape.dims[i] == x.shape.dims[d] for i, d in enumerate(inner_dims)):
                return rw.op("broadcast", inner, shape=instr.shape,
                             dimensions=tuple(dims[d] for d in inner_dims))
    if op == "convert":
        x = ops[0]
        if x.shape.element_type == t:
            return x
        if x.opcode == "convert":
            src = x.operands[0]
            if _widens(src.shape, x.shape):
                if src.shape.element_type == t:
                    return src
                # src -> t directly equals src -> mid -> t only when mid -> t converts the
                # same way src -> t does (float -> int saturates or is undefined where int ->
                # int wraps): same kind of type on both sides.
                if _kind(x.shape) == _kind(instr.shape) == _kind(src.shape):
                    return rw.op("convert", src, shape=instr.shape)
    if op == "slice":
        x = ops[0]
        if all((s.start, s.limit, s.stride) == (0, n, 1) for s, n in zip(instr.attrs["slice"], x.shape.dims)):
            return x
        through = _slice_through(instr, rw)
        if through is not None:
            return through
    if op == "dynamic-slice" and tuple(instr.attrs["dynamic_slice_sizes"]) == ops[0].shape.dims:
        # the whole array: its starts are clamped to 0 whatever they are (a masked slice's read
        # of a whole axis, which a masked dot passes on to read in place)
        return ops[0]
    if op == "dynamic-update-slice" and ops[0].opcode == op and _same_values(ops[0].operands[1:], ops[1:]):
        # The same update at the same place twice (``a[..., 0] += v`` traces to a write of the
        # sum, then a write of the sum reshaped again): the second changes nothing.
        return ops[0]
    if op == "copy" and ops[0].opcode != "parameter":
        return ops[0]
    if op == "opt-barrier":
        # It keeps XLA's scheduler and rematerialization from moving work across it; nbxla
        # has neither, and its value is its operand's.
        return ops[0]
    if op == "select":
        p, a, b = ops
        if a is b:
            return a
        v = scalar_value(p)
        if v is not None:
            return a if v else b
    return None


def _same_values(a: list[Instruction], b: list[Instruction]) -> bool:
    """Are ``a`` and ``b`` the same values one by one (before CSE has merged them): the same
    instructions, equal scalar constants, or reshapes of the same value to the same shape?"""
    def same(x, y):
        if x is y:
            return True
        if x.opcode != y.opcode or x.shape != y.shape:
            return False
        if x.opcode == "constant":
            return x.shape.rank == 0 and x.literal.tolist() == y.literal.tolist()
        return x.opcode == "reshape" and same(x.operands[0], y.operands[0])
    return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))


def _widens(src: Shape, mid: Shape) -> bool:
    """Every value of src's type is exactly representable in mid's type.  (NumPy's "safe"
    casting also allows int64 -> float64, which rounds 2**53 + 1: not exact.)"""
    a, b = np.dtype(src.dtype), np.dtype(mid.dtype)
    if a == np.bool_:
        return True
    if not np.can_cast(a, b, casting="safe"):
        return False
    # (ml_dtypes calls int8 -> float8 safe; its kind is "V", and its finfo knows the mantissa)
    if a.kind in "iu" and (b.kind in "fc" or b in LOW_PRECISION_DTYPES):
        bits = a.itemsize * 8 - (a.kind == "i")           # magnitude bits of the integer
        return ml_dtypes.finfo(b).nmant + 1 >= bits
    return True


def _kind(shape: Shape) -> str:
    try:
        kind = np.dtype(shape.dtype).kind
    except Exception:
        return "?"
    return {"u": "i", "b": "i"}.get(kind, kind)


class _RewritePass(Pass):
    """Applies ``rule(instr, rewriter) -> replacement or None`` to every instruction."""

    def run(self, module: Module) -> bool:
        before, changed = instruction_ids(module), False
        for comp in module.computations:
            changed |= _rewrite_computation(comp, type(self).rule)
        rename_new_instructions(module, before)
        return changed


class AlgebraicSimplifier(_RewritePass):
    name = "algsimp"
    rule = staticmethod(_simplify)


def _rewrite_computation(comp: Computation, rule) -> bool:
    """Apply ``rule`` to each instruction; replacements take over all uses."""
    changed = False
    replace: dict[int, Instruction] = {}
    order: list[Instruction] = []
    for instr in comp.instructions:
        instr.operands = [replace.get(id(o), o) for o in instr.operands]
        rw = _Rewriter(instr)
        new = rule(instr, rw)
        for n in rw.new:
            n.parent = comp
        order.extend(rw.new)
        order.append(instr)
        if new is not None and new is not instr:
            while id(new) in replace:
                new = replace[id(new)]
            replace[id(instr)] = new
            changed = True
    comp.instructions = order
    if id(comp.root) in replace:
        comp.root = replace[id(comp.root)]
    return changed


# ---- constant folding ----------------------------------------------------------------------



def _fold(instr: Instruction, rw: _Rewriter) -> Instruction | None:
    if instr.opcode in NEVER_FOLD or instr.shape.is_tuple or not instr.operands:
        return None
    if not all(o.opcode == "constant" or (o.opcode == "broadcast" and o.operands[0].opcode == "constant")
               for o in instr.operands):
        return None
    if instr.shape.size > FOLD_LIMIT or instr.shape.element_type == "bf16":
        return None
    # Folding evaluates the instruction: never on operands beyond a size limit (a reduction of
    # a broadcast 10^12-element zero would be materialized here).
    if any(_materialized_size(o) > OPERAND_FOLD_LIMIT for o in instr.operands):
        return None
    value = _evaluate_alone(instr)
    return rw.op("constant", shape=instr.shape, literal=value)


def _materialized_size(instr: Instruction) -> int:
    return 0 if instr.shape.is_tuple else instr.shape.size


def _evaluate_alone(instr: Instruction) -> np.ndarray:
    """Evaluate one instruction whose operands are constants (or broadcasts of constants)."""
    copies = {}
    comp = Computation(unique_name("fold"))

    def copy(i: Instruction) -> Instruction:
        if id(i) not in copies:
            c = Instruction(i.opcode, i.shape, [copy(o) for o in i.operands], i.attrs, i.name)
            comp.add(c)
            copies[id(i)] = c
        return copies[id(i)]

    comp.root = copy(instr)
    return np.asarray(evaluate(comp, []))


class ConstantFolding(_RewritePass):
    name = "constant-folding"
    rule = staticmethod(_fold)
