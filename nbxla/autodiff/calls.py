"""VJP rules for ops that run other computations: ``call`` and ``while``.

Both are differentiated by copying the called work into the graph being built and running
``backward`` through the copy: a ``call`` is inlined once; a ``while`` whose trip count is
static (a counter from a constant, compared with a constant, stepped by one: what
``jax.lax.fori_loop`` and Python ``for i in range(n)`` loops become) is unrolled.  The copy
recomputes the forward values the gradient needs (the original instruction still gives the
primal result), like rematerialization; the pass pipeline then optimizes it with the rest.
"""

from __future__ import annotations

from ..hlo import Builder
from ..hlo.ir import Computation, Instruction
from .backward import backward
from .rules import NoVjpRule, vjp_rule

MAX_UNROLLED = 50_000          # instructions an unrolled loop may add


def inline(builder: Builder, comp: Computation, args: list[Instruction]) -> Instruction:
    """Copy ``comp`` into ``builder`` with its parameters replaced by ``args``; its root's copy."""
    mapping: dict[int, Instruction] = {}
    for instr in comp.instructions:
        if instr.opcode == "parameter":
            mapping[id(instr)] = args[instr.parameter_number]
            continue
        attrs = {k: v for k, v in instr.attrs.items() if k != "metadata"}
        mapping[id(instr)] = builder.op(instr.opcode, *[mapping[id(o)] for o in instr.operands],
                                        shape=instr.shape, **attrs)
    return mapping[id(comp.root)]


def _through_copy(e, operands: list[Instruction], g, build) -> list:
    """Cotangents of ``operands`` for ``build(stand_ins)`` (a copy of the forward work) whose
    cotangent is ``g``.  Stand-ins (copies) keep the walk inside the copied work and give
    repeated operands one cotangent each; they are replaced by the operands afterwards."""
    b = e.b
    stand_ins = [b.op("copy", op) for op in operands]
    first = len(b.instructions) - len(stand_ins)
    root = build(stand_ins)
    grads = backward(b, root, g, stand_ins)
    real = {id(s): op for s, op in zip(stand_ins, operands)}
    for instr in b.instructions[first:]:
        if any(id(o) in real for o in instr.operands):
            instr.operands = [real.get(id(o), o) for o in instr.operands]
    return grads


@vjp_rule("call")
def _call(e, instr, g):
    cache = {}

    def cotangent(i):
        def thunk():
            if "grads" not in cache:
                cache["grads"] = _through_copy(e, instr.operands, g,
                                               lambda s: inline(e.b, instr.attrs["to_apply"], s))
            return cache["grads"][i]
        return thunk
    return [cotangent(i) for i in range(len(instr.operands))]


def static_trip_count(instr: Instruction) -> int | None:
    """The number of iterations of a counted ``while`` (None when it is not static)."""
    cond, body = instr.attrs["condition"], instr.attrs["body"]
    init = instr.operands[0]
    if init.opcode != "tuple" or not cond.parameters or not instr.shape.is_tuple:
        return None
    test = cond.root
    if test.opcode != "compare":
        return None
    direction = test.attrs["direction"]
    lhs, rhs = test.operands
    if rhs.opcode == "get-tuple-element":                 # limit > i  ->  i < limit
        lhs, rhs = rhs, lhs
        direction = {"GT": "LT", "GE": "LE", "LT": "GT", "LE": "GE"}.get(direction, direction)
    if direction not in ("LT", "LE") or lhs.opcode != "get-tuple-element" or \
            lhs.operands[0] is not cond.parameters[0] or rhs.opcode != "constant":
        return None
    k = lhs.attrs["index"]
    start = init.operands[k]
    step = body.root.operands[k] if body.root.opcode == "tuple" else None
    if start.opcode != "constant" or step is None or step.opcode != "add":
        return None
    counter = [o for o in step.operands if o.opcode == "get-tuple-element" and o.attrs["index"] == k
               and o.operands[0] is body.parameters[0]]
    one = [o for o in step.operands if o.opcode == "constant" and o.literal.ndim == 0 and o.literal == 1]
    if len(counter) != 1 or len(one) != 1:
        return None
    first, limit = int(start.literal), int(rhs.literal)
    return max(0, limit - first + (1 if direction == "LE" else 0))


@vjp_rule("while")
def _while(e, instr, g):
    trips = static_trip_count(instr)
    if trips is None:
        raise NoVjpRule("a while loop whose trip count is not static (a counter from a "
                              "constant, compared with a constant, stepped by one)")
    body = instr.attrs["body"]
    if trips * len(body.instructions) > MAX_UNROLLED:
        raise NoVjpRule(f"a while loop of {trips} iterations (unrolling it would add more "
                              f"than {MAX_UNROLLED} instructions)")

    def unrolled(stand_ins):
        state = stand_ins[0]
        for _ in range(trips):
            state = inline(e.b, body, [state])
        return state
    return [lambda: _through_copy(e, [instr.operands[0]], g, unrolled)[0]]
