"""Moving a producer (a convolution, a dot) into the loop fusion that is its only consumer, on
the optimized module the CPU executable runs: the CPU backend's epilogue folds
(``conv_epilogue``: a convolution with its bias / activation; ``gemm_epilogue``: a GEMM with
its scale-and-add).

The folded fusion keeps its name and output, gains the producer's operands as its last
parameters, and the producer leaves the program.  The buffer plan was made for the two steps:
the fusion now reads the producer's operands later than the plan assumed, so a fold is made
only where no value placed between the two steps shares their memory (``operands_survive``).
"""

from __future__ import annotations

from typing import Callable

from ..hlo.ir import Computation, Instruction


def operands_survive(plan, producer: Instruction, fusion: Instruction) -> str | None:
    """Do the producer's operands keep their values until the fusion runs, now that the
    fusion reads them?  The plan let their memory be reused from the producer on.  None:
    a value defined between the two steps shares it (no fold); "own output": only the
    fusion's planned output does (a fusion usually takes the place of the input that died at
    the producer), so it is written to memory of its own; "yes" otherwise, and always
    without a plan (every value has memory of its own)."""
    if plan is None:
        return "yes"
    values = plan.values
    if producer.name not in values or fusion.name not in values:
        return None
    first, last = values[producer.name].start, values[fusion.name].start
    answer = "yes"
    for operand in producer.operands:
        v = values.get(operand.name)
        if v is None or (v.kind == "parameter" and v.parameter in plan.donated):
            return None
        if v.kind != "arena":
            continue                # parameters and constants are never written
        if v.offset is None:
            return None
        for other in values.values():
            if other is v or other.kind != "arena" or not first < other.start <= last:
                continue
            if other.offset is None or (other.offset < v.offset + v.size and v.offset < other.offset + other.size):
                if other.start < last or other.name != fusion.name:
                    return None
                answer = "own output"
    return answer


def sole_loop_fusion_user(comp: Computation, producer: Instruction, users) -> Instruction | None:
    """The loop fusion that is ``producer``'s only user and reads it once (and calls no other
    instruction of the producer's opcode), or None.  ``users``: instructions by operand id."""
    found = users.get(id(producer), [])
    if len(found) != 1 or producer is comp.root:
        return None
    fusion = found[0]
    if fusion.opcode != "fusion" or fusion.attrs.get("kind", "kLoop") != "kLoop" or \
            sum(o is producer for o in fusion.operands) != 1:
        return None
    if any(i.opcode == producer.opcode for i in fusion.attrs["calls"].instructions):
        return None
    return fusion


def users_by_operand(comp: Computation) -> dict[int, list[Instruction]]:
    users: dict[int, list[Instruction]] = {}
    for instr in comp.instructions:
        for o in instr.operands:
            users.setdefault(id(o), []).append(instr)
    return users


def fold_producer(comp: Computation, producer: Instruction, fusion: Instruction,
                  accepts: Callable[[Computation, Instruction], bool]) -> bool:
    """Move ``producer`` into ``fusion``'s computation when ``accepts(new computation, the
    producer inside it)``; True when it did."""
    inner = fusion.attrs["calls"]
    position = fusion.operands.index(producer)
    params = inner.parameters
    clone: dict[int, Instruction] = {}
    kept = [p for p in params if p.parameter_number != position]
    new_params = []
    for number, p in enumerate(kept):
        copy = Instruction("parameter", p.shape, attrs={**p.attrs, "parameter_number": number}, name=p.name)
        clone[id(p)] = copy
        new_params.append(copy)
    producer_params = [Instruction("parameter", o.shape, attrs={"parameter_number": len(kept) + k},
                                   name=f"{producer.name}.operand{k}") for k, o in enumerate(producer.operands)]
    inner_producer = Instruction(producer.opcode, producer.shape, producer_params, dict(producer.attrs),
                                 name=producer.name, location=producer.location)
    clone[id(next(p for p in params if p.parameter_number == position))] = inner_producer
    body = []
    for instr in inner.instructions:
        if instr.opcode == "parameter":
            continue
        copy = Instruction(instr.opcode, instr.shape, [clone[id(o)] for o in instr.operands], dict(instr.attrs),
                           name=instr.name, location=instr.location)
        clone[id(instr)] = copy
        body.append(copy)
    new_inner = Computation(inner.name, new_params + producer_params + [inner_producer] + body, clone[id(inner.root)])
    if not accepts(new_inner, inner_producer):
        return False
    module = inner.parent
    if module is not None:
        shared = any(i is not fusion and inner in i.called_computations
                     for c in module.computations for i in c.instructions)
        if shared:                      # (another fusion calls the same computation: keep it)
            new_inner.name = f"{inner.name}.{producer.name}"
            for instr in new_inner.instructions:          # (names stay unique in the module)
                if instr is not inner_producer and not instr.name.startswith(producer.name + ".operand"):
                    instr.name = f"{instr.name}.{producer.name}"
            module.add_computation(new_inner)
        else:
            new_inner.parent = module
            module.computations[module.computations.index(inner)] = new_inner
    fusion.attrs["calls"] = new_inner
    fusion.operands = [o for o in fusion.operands if o is not producer] + list(producer.operands)
    comp.instructions.remove(producer)
    return True
