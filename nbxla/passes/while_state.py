"""Dead loop state: drop the elements of a ``while``'s state that nothing needs.

Why: a Python loop rolled into a ``while`` carries every variable the loop assigns, also
temporaries like ``value`` in ``for ...: value = f(A); B[1:-1] = value``, and names of arrays
updated in place (``src`` bound to ``B``).  Nothing after the loop reads them, but the body
still computes and writes them every step: a whole extra kernel, or a copy of an array, per
iteration.  (XLA's while-loop simplifier removes such dead tuple elements too.)

An element is live when the loop's caller reads it (a ``get-tuple-element`` of the result),
when the condition reads it, or when the body needs it to compute a live element; everything
else goes, from the initial tuple, the body, the condition and the result alike.  Loops whose
result or parameters are used whole (not through ``get-tuple-element``), whose body root is
not a ``tuple``, whose computations are shared, or whose body has side effects are left alone.
"""

from __future__ import annotations

from ..hlo import Module, TupleShape
from ..hlo.builder import unique_name
from ..hlo.evaluator_linalg import MASKED_DOT_TARGET, POTRF_TARGETS, SOLVE_TARGET
from ..hlo.ir import Computation, Instruction
from .pipeline import Pass, computation_uses, instruction_ids, loop_owns_its_computations, rename_new_instructions

# Ops whose effect is not only their result: a loop running them keeps all of its state.
_EFFECTS = frozenset({"custom-call", "rng", "infeed", "outfeed", "send", "send-done", "recv", "recv-done"})
# custom-call targets known to compute only their result (nbxla's own and the LAPACK ones
# its backends implement): a masked dot in a loop body (trisolv, Cholesky) must not keep the
# loop's dead state alive.
_PURE_TARGETS = frozenset({MASKED_DOT_TARGET, SOLVE_TARGET, *POTRF_TARGETS, "TopK"})


class WhileStateElimination(Pass):
    name = "while-state"

    def run(self, module: Module) -> bool:
        before, changed = instruction_ids(module), False
        uses = computation_uses(module)
        # Callers first: a loop inside a body may lose its readers when the outer loop shrinks;
        # within a computation, later loops first: a loop started from an earlier one's result
        # may stop reading some of it.  Each computation is walked a fixed number of times, and
        # the readers are kept up to date as loops shrink (linear in the module's size).
        for comp in reversed(module.computations_post_order()):
            readers = _live_readers(comp)
            added: dict[int, list[Instruction]] = {}
            for loop in [i for i in reversed(comp.instructions) if i.opcode == "while"]:
                if id(loop) not in readers:
                    continue
                init = loop.operands[0]
                new = _shrink(comp, loop, uses, readers)
                if new is not None:
                    added[id(loop)] = new
                    for i in new:
                        readers[id(i)] = []
                        for o in dict.fromkeys(i.operands):
                            readers[id(o)].append(i)
                    readers[id(new[-1])].append(loop)
                    _unread(init, loop, readers, comp.root)
            if added:
                comp.instructions = [n for i in comp.instructions for n in added.get(id(i), []) + [i]]
                _drop_dead(comp)
                changed = True
        if changed:
            rename_new_instructions(module, before)
        return changed


def _live_readers(comp: Computation) -> dict[int, list[Instruction]]:
    """For each instruction the root needs (by id), the live instructions that read it."""
    live = comp.post_order()
    readers: dict[int, list[Instruction]] = {id(i): [] for i in live}
    for i in live:
        for o in dict.fromkeys(i.operands):
            readers[id(o)].append(i)
    return readers


def _unread(value: Instruction, reader: Instruction, readers: dict, root: Instruction) -> None:
    """``reader`` no longer reads ``value``; what is left without live readers is dead."""
    stack = [(value, reader)]
    while stack:
        value, reader = stack.pop()
        found = readers[id(value)]
        found.remove(reader)
        if not found and value is not root and value.opcode != "parameter":
            del readers[id(value)]
            stack += [(o, value) for o in dict.fromkeys(value.operands)]


def _drop_dead(comp: Computation) -> None:
    reached = {id(i) for i in comp.post_order()}
    comp.instructions = [i for i in comp.instructions if id(i) in reached]


def _gtes_only(comp: Computation, value: Instruction, readers: dict) -> list[Instruction] | None:
    """The live readers of ``value`` in ``comp`` when all are ``get-tuple-element``s, else None."""
    found = readers.get(id(value), [])
    if comp.root is value or any(r.opcode != "get-tuple-element" for r in found):
        return None
    return found


def _has_effects(comp: Computation, seen: set) -> bool:
    if id(comp) in seen:
        return False
    seen.add(id(comp))
    return any(i.opcode in _EFFECTS and not (i.opcode == "custom-call" and
                                             i.attrs.get("custom_call_target") in _PURE_TARGETS)
               or any(_has_effects(c, seen) for c in i.called_computations)
               for i in comp.instructions)


def _shrink(comp: Computation, loop: Instruction, uses: dict[int, int], readers: dict) -> list | None:
    """Drops ``loop``'s dead state elements; returns the instructions to insert before it
    (the new initial tuple), or None when nothing changed.  Readers of the dropped elements
    in ``comp`` are dead and left for the caller to drop."""
    if not loop.shape.is_tuple or not loop_owns_its_computations(loop, uses):
        return None
    body, cond = loop.attrs["body"], loop.attrs["condition"]
    outside = _gtes_only(comp, loop, readers)
    (state,), (cstate,) = body.parameters, cond.parameters
    inside, tested = _gtes_only(body, state, _live_readers(body)), _gtes_only(cond, cstate, _live_readers(cond))
    root = body.root
    if outside is None or inside is None or tested is None or root.opcode != "tuple" \
            or any(root in i.operands for i in body.instructions) or _has_effects(body, set()):
        return None
    # The state elements each instruction of the body depends on.
    needs: dict[int, frozenset] = {}
    for instr in body.instructions:
        if instr.opcode == "get-tuple-element" and instr.operands[0] is state:
            needs[id(instr)] = frozenset([instr.attrs["index"]])
        else:
            needs[id(instr)] = frozenset().union(*(needs.get(id(o), ()) for o in instr.operands))
    live = {g.attrs["index"] for g in outside} | {g.attrs["index"] for g in tested}
    work = list(live)
    while work:
        for k in needs[id(root.operands[work.pop()])]:
            if k not in live:
                live.add(k)
                work.append(k)
    if len(live) == len(loop.shape.elements):
        return None
    kept = sorted(live)
    place = {k: j for j, k in enumerate(kept)}
    shape = TupleShape(tuple(loop.shape.elements[k] for k in kept))
    # The initial state: the kept elements of the loop's operand.
    init = loop.operands[0]
    added = []
    if init.opcode == "tuple":
        parts = [init.operands[k] for k in kept]
    else:
        parts = added = [Instruction("get-tuple-element", loop.shape.elements[k], [init], {"index": k},
                                     unique_name("get-tuple-element"), loop.location) for k in kept]
    new_init = Instruction("tuple", shape, parts, name=unique_name("tuple"), location=loop.location)
    for i in added + [new_init]:
        i.parent = comp
    loop.operands[0] = new_init
    loop.shape = shape
    for g in outside:
        g.attrs["index"] = place[g.attrs["index"]]
    # The body and condition: reads of kept elements renumbered, the root cut down, the rest
    # (reads of dropped elements, and what only they fed) dropped.
    state.shape = cstate.shape = shape
    for g in tested + inside:
        if g.attrs["index"] in place:
            g.attrs["index"] = place[g.attrs["index"]]
    root.operands = [root.operands[k] for k in kept]
    root.shape = shape
    _drop_dead(body)
    _drop_dead(cond)
    return added + [new_init]
