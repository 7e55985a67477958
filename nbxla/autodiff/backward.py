"""Reverse-mode differentiation of an HLO graph, and the HloModule -> HloModule transform.

``backward`` walks the instructions between the differentiated inputs and the output in
reverse order and asks each one's VJP rule (``rules.py``) for its operands'
cotangents, summing where a value has several users.  It builds into any ``Builder``: a
module's (``vjp_module``) or that of a running trace (``nbxla.grad`` inside ``jit``/``%%xla``),
so the backward instructions are ordinary HLO that the pass pipeline fuses like the forward.
"""

from __future__ import annotations

from ..errors import TraceError
from ..hlo import Builder, Module, Shape
from ..hlo.ir import Instruction, clone_module, post_order
from ..hlo.shapes import is_float
from .emit import Emitter
from .rules import NOT_DIFFERENTIABLE, VJP_RULES, ZERO_GRADIENT, NoVjpRule


class NotDifferentiableError(TraceError):
    """The function's graph contains an operation without a derivative (or its rule)."""


def is_differentiable_shape(shape) -> bool:
    if shape.is_tuple:
        return any(is_differentiable_shape(s) for s in shape.elements)
    return is_float(shape.element_type)


def _accumulate(e: Emitter, cot: dict, target: Instruction, value):
    if target.shape.is_tuple:
        old = cot.get(id(target)) or [None] * len(target.shape.elements)
        cot[id(target)] = [a if b is None else b if a is None else e.add(a, b)
                           for a, b in zip(old, value)]
        return
    if value.shape.element_type != target.shape.element_type:
        value = e.convert(value, target.shape.element_type)
    if value.shape.dims != target.shape.dims:
        raise AssertionError(f"cotangent {value.shape} for %{target.name} {target.shape}")
    old = cot.get(id(target))
    cot[id(target)] = value if old is None else e.add(old, value)


def _not_differentiable(instr: Instruction, reason: str) -> NotDifferentiableError:
    return NotDifferentiableError(
        f"cannot differentiate through {instr.opcode} (%{instr.name}): {reason}",
        instr.location,
        "keep this operation out of the differentiated function (compute it outside and pass "
        "the result in), or stop the gradient by computing it from non-differentiated inputs")


def backward(builder: Builder, root: Instruction, seed, wrt: list[Instruction]) -> list:
    """Cotangents of ``wrt`` for ``root`` whose cotangent is ``seed``; None where none flows.

    Gradients do not flow past the ``wrt`` instructions themselves (they are the leaves)."""
    e = Emitter(builder)
    order = post_order(root)
    leaves = {id(w) for w in wrt}
    active: set[int] = set()
    for instr in order:
        if id(instr) in leaves or (is_differentiable_shape(instr.shape) and
                                   any(id(o) in active for o in instr.operands)):
            active.add(id(instr))
    cot: dict[int, object] = {}
    if id(root) in active:
        cot[id(root)] = seed
    saved_location = builder.location
    try:
        for instr in reversed(order):
            if id(instr) in leaves or id(instr) not in cot:
                continue
            g = cot.pop(id(instr))
            if instr.opcode in ZERO_GRADIENT:
                continue
            rule = VJP_RULES.get(instr.opcode)
            if rule is None:
                raise _not_differentiable(instr, NOT_DIFFERENTIABLE.get(instr.opcode, "no rule"))
            builder.location = instr.location     # backward code points at its forward line
            try:
                thunks = rule(e, instr, g)
                for op, thunk in zip(instr.operands, thunks):
                    if thunk is not None and id(op) in active:
                        _accumulate(e, cot, op, thunk())
            except NoVjpRule as why:
                raise _not_differentiable(instr, f"no transpose rule for {why}") from None
    finally:
        builder.location = saved_location
    return [cot.get(id(w)) for w in wrt]


def vjp_module(module: Module, wrt: list[int] | None = None) -> Module:
    """The module that returns ``(value, d value / d param_i for i in wrt)``.

    A scalar result is differentiated directly; for any other result the module takes one more
    parameter, the cotangent ``g``, and returns ``(value, g @ d value / d param_i ...)``.
    ``wrt`` defaults to every floating-point parameter.
    """
    module = clone_module(module)
    entry = module.entry
    params = entry.parameters
    if wrt is None:
        wrt = [i for i, p in enumerate(params) if is_differentiable_shape(p.shape)]
    b = Builder.extending(entry, entry.name + "_vjp")
    root = entry.root
    if root.shape.is_tuple:
        raise NotDifferentiableError(f"the module {module.name} returns a tuple; vjp_module "
                                     "differentiates one array result")
    e = Emitter(b)
    seed = e.full(root.shape, 1) if not root.shape.dims else b.parameter(root.shape, "cotangent")
    grads = backward(b, root, seed, [params[i] for i in wrt])
    outs = [g if g is not None else e.zeros(params[i].shape) for g, i in zip(grads, wrt)]
    out = Module(module.name + "_vjp", b.build(b.op("tuple", root, *outs)))
    out.make_names_unique()
    return out


__all__ = ["backward", "vjp_module", "NotDifferentiableError", "post_order", "Shape"]
