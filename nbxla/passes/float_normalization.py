"""Float normalization: ops that apply a called computation step by step on bf16 / f8 values
become the same op on f32, between converts.

XLA:CPU has no narrow-float arithmetic: its ``FloatNormalization`` pass rewrites every op that
computes on bf16 / f8 into its f32 form with converts around it (``hlo/low_precision.py``), and
the reference evaluator computes exactly that form.  The code generator does the same for
elementwise ops and single-op reducers inside its kernels (f32 registers, one rounding per
op), but an op whose called computation runs once per step -- a reduce-window's or scatter's
combiner, a sort's comparator, a map, a custom or variadic reducer -- would round after every
step inside a kernel, where XLA rounds once at the end.  Those ops are rewritten here, so that
their f32 form runs in the ordinary f32 kernels and library calls (the converts fuse into the
neighbouring kernels):

    r = bf16[..] reduce-window(x, init), to_apply=add.bf16
 -> r = bf16[..] convert(f32[..] reduce-window(convert(x), convert(init)), to_apply=add.f32)

A ``dot`` on bf16 / f8 gets its f32 form too (XLA:CPU's GEMMs take f32): the f32 dot is then an
ordinary one (BLAS, or the native dot kernel with its epilogue), the converts of its operands
fuse into their producers' kernels and the convert of its result into its readers', instead
of a library call that widens both operands and rounds the result with three NumPy passes of
its own on every call.

The rewrite changes no result: the evaluator computes the narrow op as this very f32 form.
A sort only moves values (its comparator compares widened keys exactly), so converting its
operands up and its results back gives the same bits.
"""

from __future__ import annotations

from ..hlo import Module
from ..hlo.builder import unique_name
from ..hlo.ir import Computation, Instruction, program_callees
from ..hlo.low_precision import STEPWISE_OPS, Widener, involves_low_precision, widen_shape
from ..hlo.opcodes import NATIVE_COMBINERS
from ..hlo.reducers import reducer_op
from ..hlo.shapes import TupleShape
from .pipeline import Pass, instruction_ids, rename_new_instructions


def needs_f32_form(instr: Instruction) -> bool:
    """Does ``instr`` apply a called computation step by step on a bf16 / f8 value, or is it
    a dot on them?"""
    shapes = [instr.shape] + [o.shape for o in instr.operands]
    if not any(involves_low_precision(s) for s in shapes):
        return False
    if instr.opcode in STEPWISE_OPS or instr.opcode == "dot":
        return True
    # (a reduce whose reducer is one recognized op accumulates in f32 inside its kernel)
    return instr.opcode == "reduce" and (instr.shape.is_tuple or
                                       reducer_op(instr.attrs["to_apply"]) not in NATIVE_COMBINERS)


class FloatNormalization(Pass):
    name = "float-normalization"

    def run(self, module: Module) -> bool:
        before, widener, changed = instruction_ids(module), Widener(), False
        for comp in _programs(module):
            widened: dict[int, Instruction] = {}      # operand id -> its convert to f32
            for instr in list(comp.instructions):
                if needs_f32_form(instr):
                    _rewrite(module, comp, instr, widener, widened)
                    changed = True
        if changed:
            rename_new_instructions(module, before)
        return changed


def _programs(module: Module) -> list[Computation]:
    """The entry and every computation its control flow runs as a program (not reducers,
    comparators or fusion bodies: those are widened with the op that calls them)."""
    found, stack, seen = [], [module.entry], set()
    while stack:
        comp = stack.pop()
        if id(comp) in seen:
            continue
        seen.add(id(comp))
        found.append(comp)
        for instr in comp.instructions:
            stack += program_callees(instr)
            if instr.opcode == "fusion":
                stack.append(instr.attrs["calls"])
    return found


def _rewrite(module: Module, comp: Computation, instr: Instruction, widener: Widener,
             widened: dict[int, Instruction]) -> None:
    """Replace ``instr`` in ``comp`` by converts, its f32 form and converts back.  An operand
    already converted for an earlier op of ``comp`` (``widened``) is read from that convert:
    one f32 copy of a bf16 value however many dots read it (the q, k and v projections of
    the same tokens)."""
    new: list[Instruction] = []

    def add(opcode, shape, operands, **attrs) -> Instruction:
        new.append(Instruction(opcode, shape, operands, attrs, unique_name(opcode.replace("-", "_")),
                               instr.location))
        return new[-1]

    operands = []
    for o in instr.operands:
        if o.shape.is_tuple or not involves_low_precision(o.shape):
            operands.append(o)
        elif id(o) in widened and widened[id(o)].operands[0] is o:
            operands.append(widened[id(o)])
        else:
            operands.append(add("convert", widen_shape(o.shape), [o]))
            widened[id(o)] = operands[-1]
    attrs = dict(widener.instruction(instr).attrs)         # its called computations in f32
    for callee in _called(attrs):
        _adopt(module, callee)
    wide = add(instr.opcode, widen_shape(instr.shape), operands, **attrs)
    if instr.shape.is_tuple:
        parts = []
        for k, leaf in enumerate(instr.shape.elements):
            part = add("get-tuple-element", wide.shape.elements[k], [wide], index=k)
            parts.append(add("convert", leaf, [part]) if part.shape != leaf else part)
        result = add("tuple", TupleShape(tuple(p.shape for p in parts)), parts)
    else:
        result = add("convert", instr.shape, [wide])
    # the last instruction takes the op's place and name (users and the root see it unchanged)
    result.name = instr.name
    at = comp.instructions.index(instr)
    comp.instructions[at:at + 1] = []
    comp.instructions[at:at] = new
    for i in new:
        i.parent = comp
    comp.replace_all_uses(instr, result)


def _called(attrs: dict) -> list[Computation]:
    found = []
    for value in attrs.values():
        if isinstance(value, Computation):
            found.append(value)
        elif isinstance(value, (list, tuple)):
            found += [v for v in value if isinstance(v, Computation)]
    return found


def _adopt(module: Module, comp: Computation) -> None:
    """Add a widened computation (and those it calls) to the module under a name of its own."""
    if comp.parent is module:
        return
    for instr in comp.instructions:
        for callee in instr.called_computations:
            _adopt(module, callee)
    names = module.computation_names()
    base, n = f"{comp.name}.f32", 1
    comp.name = base
    while comp.name in names:
        comp.name, n = f"{base}.{n}", n + 1
    module.add_computation(comp)


__all__ = ["FloatNormalization", "needs_f32_form"]
