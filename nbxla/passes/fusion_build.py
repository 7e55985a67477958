"""Fusion's construction: the groups the fusion pass settled on become ``fusion`` instructions
(one called computation each, multi-output ones returning a flat tuple), and the values that
still cross between kernels are recorded with the reason they do, for the fusion report."""

from __future__ import annotations

from ..hlo.builder import unique_name
from ..hlo.ir import Computation, Instruction
from ..hlo.opcodes import FUSIBLE, NOT_KERNELS
from ..hlo.shapes import TupleShape
from .cse import eliminate_common_subexpressions
from .fusion_model import INLINE_CONSTANT_ELEMENTS, MAX_VALUES, Boundary, Group, is_kernel


class Construction:
    """Building the fusion instructions of ``fusion._Fuser`` (a mixin)."""

    # ---- building fusion instructions -------------------------------------------------------

    def materialize(self) -> bool:
        groups = list({id(g): g for g in self.group_of.values()}.values())
        if not groups:
            return False
        # Refusals that later growth overcame are not worth reporting.
        by_name = {i.name: i for i in self.comp.instructions}
        self.decisions.refusals = [r for r in self.decisions.refusals
                                   if not self._same_group(by_name, r.producer, r.consumer)]
        users = self.users()
        pending_boundaries = self._boundaries(groups, users)
        # Each fusion goes right after its last member; the instruction list is rebuilt once.
        removed: set[int] = set()
        placed: dict[int, list[Instruction]] = {}
        for group in groups:
            self._build_fusion(group, users, removed, placed)
        comp, order = self.comp, []
        for instr in comp.instructions:
            if id(instr) not in removed:
                order.append(instr)
            order += placed.get(id(instr), ())
        comp.instructions = order
        comp.sort_topologically()
        for producer, consumer, value, reason in pending_boundaries:
            self.decisions.boundaries.append(Boundary(
                self._fusion_of.get(id(producer), producer), self._fusion_of.get(id(consumer), consumer),
                value, reason))
        return True

    def _boundaries(self, groups: list[Group], users) -> list[tuple]:
        """(producer group, consumer group or instruction, value name, reason) for every value
        that leaves a group for another kernel: the refusal that kept them apart, or why a
        merge was not possible."""
        refused = {}
        for r in self.decisions.refusals:
            refused.setdefault(r.producer, r.reason)
        found, seen = [], set()
        for g in groups:
            for m in g.members:
                for u in users[id(m)]:
                    if id(u) in g.ids:
                        continue
                    other = self.group_of.get(id(u))
                    if other is None and (u.opcode in NOT_KERNELS or u.opcode in FUSIBLE):
                        continue            # a program output, a view or name: no kernel reads it
                    key = (id(g), id(other if other is not None else u))
                    if key in seen:
                        continue
                    seen.add(key)
                    if other is None:
                        reason = f"{u.opcode} is not fused: it runs as its own call (a library call or a loop)"
                    else:
                        reason = refused.get(m.name) or self._apart_reason(g, other, users)
                    found.append((g, other if other is not None else u, m.name, reason))
        for instr in self.comp.instructions:       # library calls and loops feeding kernels
            if id(instr) in self.group_of or not is_kernel(instr) or instr.opcode in FUSIBLE:
                continue
            for other in {id(g): g for u in users[id(instr)]
                          if (g := self.group_of.get(id(u))) is not None}.values():
                found.append((instr, other, instr.name, f"{instr.opcode} runs as its own call (a library "
                                                        "call or a loop); the work on its result is a kernel after it"))
        return found

    def _apart_reason(self, a: Group, b: Group, users) -> str:
        why = self.check(a.members + b.members, users)
        if why is None:
            why = "recomputing values of one in the other would exceed the cost bounds " \
                  f"(recomputed flops against traffic, {MAX_VALUES} values per element)"
        return "the two kernels cannot be merged: " + why

    def _build_fusion(self, group: Group, users, removed: set[int], placed: dict) -> None:
        comp = self.comp
        members = self._topological(group.members)
        ids = {id(m) for m in members}
        outputs = [m for m in members if m is comp.root or any(id(u) not in ids for u in users[id(m)])]
        params: list[Instruction] = []
        constants: dict[int, Instruction] = {}
        for m in members:
            for o in m.operands:
                if id(o) in ids:
                    continue
                if o.opcode == "constant" and o.shape.size <= INLINE_CONSTANT_ELEMENTS:
                    constants[id(o)] = o
                elif o not in params:
                    params.append(o)
        name = _fusion_name(members, outputs)
        taken = comp.parent.computation_names()
        fused_name = unique_name(f"fused_{name}")
        while fused_name in taken:          # parsed HLO may already use the counter's names
            fused_name = unique_name(f"fused_{name}")
        fused = Computation(fused_name)
        mapping: dict[int, Instruction] = {}
        for i, p in enumerate(params):
            param = Instruction("parameter", p.shape, (), {"parameter_number": i}, unique_name(f"param_{i}"))
            fused.add(param)
            mapping[id(p)] = param
        for c in constants.values():
            mapping[id(c)] = fused.add(Instruction("constant", c.shape, (), c.attrs,
                                                   unique_name(c.name.split(".")[0]), c.location))
        for m in members:
            clone = Instruction(m.opcode, m.shape, [mapping[id(o)] for o in m.operands], m.attrs,
                                m.name, m.location)
            fused.add(clone)
            mapping[id(m)] = clone
        if len(outputs) == 1:
            fused.root = mapping[id(outputs[0])]
        else:
            # A flat tuple of arrays, one buffer each: a tuple-shaped output (a variadic
            # reduction) contributes its elements.
            elements = []
            for o in outputs:
                if o.shape.is_tuple:
                    elements += [fused.add(Instruction("get-tuple-element", s, [mapping[id(o)]], {"index": k},
                                                       unique_name(f"{o.name}.{k}")))
                                 for k, s in enumerate(o.shape.elements)]
                else:
                    elements.append(mapping[id(o)])
            fused.root = fused.add(Instruction("tuple", TupleShape(tuple(e.shape for e in elements)),
                                               elements, {}, unique_name("tuple")))
        # A cheap producer duplicated into this kernel may have joined it later as well.
        eliminate_common_subexpressions(fused)
        comp.parent.add_computation(fused)
        kind = "kInput" if any(m.opcode == "reduce" for m in members) else "kLoop"
        fusion = Instruction("fusion", fused.root.shape, params, {"kind": kind, "calls": fused},
                             unique_name(f"{name}_fusion"), outputs[-1].location)
        fusion.parent = comp
        new = placed.setdefault(id(members[-1]), [])
        new.append(fusion)
        for p in params:            # (later fusions rewire their outputs' readers: this one too)
            users.setdefault(id(p), []).append(fusion)
        replacements = {}
        if len(outputs) == 1:
            replacements[id(outputs[0])] = fusion
        else:
            k = 0

            def add(instr):
                instr.parent = comp
                new.append(instr)
                return instr
            for out in outputs:
                parts = out.shape.elements if out.shape.is_tuple else [out.shape]
                gtes = [add(Instruction("get-tuple-element", s, [fusion], {"index": k + j},
                                        unique_name(f"{out.name}.out"), out.location))
                        for j, s in enumerate(parts)]
                k += len(parts)
                replacements[id(out)] = add(Instruction("tuple", out.shape, gtes, {}, unique_name(
                    f"{out.name}.out"), out.location)) if out.shape.is_tuple else gtes[0]
        for out in outputs:
            for instr in users[id(out)]:
                if id(instr) not in ids:
                    instr.operands = [replacements.get(id(o), o) for o in instr.operands]
        comp.root = replacements.get(id(comp.root), comp.root)
        removed |= ids
        self._fusion_of[id(group)] = fusion
        self.decisions.fusions.append(fusion)


def _fusion_name(members, outputs) -> str:
    """XLA-style names: the opcodes at the heart of the kernel (``reduce_multiply_fusion``)."""
    heads = [m.opcode for m in members if m.opcode == "reduce"] or [o.opcode for o in outputs]
    seen = list(dict.fromkeys(h.replace("-", "_") for h in heads))
    return "_".join(seen[:2])

