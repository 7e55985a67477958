"""Fusion: group instructions into kernels that read their inputs once and keep the rest in registers.

Groups grow from consumers towards producers (XLA's instruction fusion), then siblings that
read the same inputs merge (multi-output fusion):

* a producer joins its consumer's group when all of its users are already in the group;
* a cheap producer (add, broadcast, convert...) with users elsewhere is *duplicated* into the
  group; an expensive one (exp, log, divide, a reduction...) is never duplicated: it joins
  as an extra output of the group when that is legal, and otherwise stays apart (the
  refusal and its reason are recorded);
* reductions fuse with their producers (``sum(x + y*z)`` is one kernel) and with consumers in
  the reduced ("outer") space (``mean = sum / n``); when the reduced axes are the trailing
  ones, consumers that broadcast the result back along those axes fuse too, giving one
  row-wise kernel for softmax and layernorm;
* ``dot`` is a library call and never fused: the elementwise work after it (bias, activation)
  becomes one kernel (a dot epilogue);
* a fusion never creates a cycle and has at most ``MAX_OPERANDS`` parameters;
* recomputation is bounded (a cost model, not a rule list): every member of a group knows the
  *index maps* at which the kernel evaluates it (an elementwise user reads its operand where
  it is itself evaluated; a shifted slice, a reverse, a broadcast... read it elsewhere, so
  the elemental emitter computes it again).  A value stays out when recomputing it at its
  maps costs more flops than writing it and reading it back would cost in traffic
  (``fusion_model.cost_reason``: a stencil's Laplacian is recomputed at its neighbours, a
  chain of stencil steps fuses one step per kernel, never the whole cone); a ``dynamic-update-slice`` is never duplicated nor read at more
  than one map (each time step's update is one kernel writing the whole array once); a
  kernel holds at most ``MAX_MEMBERS`` instructions, ``MAX_VALUES`` evaluations per element
  and a chain ``MAX_DEPTH`` deep, so the code generator can always emit it.

The cost model and legality checks are in ``fusion_model.py``, the building of fusion
instructions in ``fusion_build.py``.

Fusions whose root is (or contains) a reduction are ``kind=kInput``, the others ``kLoop``.
"""

from __future__ import annotations

from ..hlo import Module
from ..hlo.builder import unique_name
from ..hlo.ir import Computation, Instruction
from ..hlo.opcodes import FUSIBLE, PROGRAM_CALLERS, TRANSCENDENTAL
from .fusion_build import Construction
from .fusion_model import (MAX_MAPS, MAX_MEMBERS, MAX_OPERANDS, MAX_VALUES, not_duplicated, SMALL_PICK,
                           SMALL_PICK_RATIO, Boundary, FusionDecisions, Group, Legality, Refusal, cost_reason,
                           index_maps, is_kernel, read_cost_reason, reused_by_broadcast, size_of,
                           small_pick)
from .pipeline import Pass, instruction_ids, rename_new_instructions

__all__ = ["Boundary", "Fusion", "FusionDecisions", "MAX_MEMBERS", "MAX_OPERANDS", "MAX_VALUES",
           "MAX_MAPS", "Refusal", "fusion_targets", "is_kernel", "kernel_count"]


class _Fuser(Legality, Construction):
    def __init__(self, comp: Computation, decisions: FusionDecisions):
        self.comp, self.decisions = comp, decisions
        self.group_of: dict[int, Group] = {}
        self._refused: set[tuple[int, int]] = set()
        self._users: dict[int, list[Instruction]] = {}
        self._position: dict[int, float] = {}
        self._pending = None
        self._fusion_of: dict[int, Instruction] = {}      # group -> its fusion instruction
        self._groups: list[Group] = []                   # every group made (merged ones too)

    # ---- growing groups ---------------------------------------------------------------------

    def run(self) -> bool:
        # Dead instructions are DCE's business: a group grown from one would have no output.
        live = {id(i) for i in self.comp.post_order()}
        self._index()
        for instr in list(reversed(self.comp.instructions)):
            if instr.opcode in FUSIBLE and id(instr) not in self.group_of and id(instr) in live and \
                    instr.opcode not in ("constant",) and not self._trivial(instr):
                group = Group(instr, self._users, self._position, self._spans, self.comp.root)
                self._groups.append(group)
                self.grow(group)
        self.merge_siblings()
        return self.materialize()

    def _trivial(self, instr: Instruction) -> bool:
        """Left standalone (no kernel): a reshape of what no kernel computes (a parameter, a
        dot's result) is a view, and so is a small slice (see ``small_pick``)."""
        return (instr.opcode in ("reshape", "bitcast") and all(o.opcode not in FUSIBLE for o in instr.operands)) \
            or small_pick(instr)

    def grow(self, group: Group) -> None:
        """Pull producers into the group until none more can join.

        A producer refused because some of its users were still outside is tried again
        whenever one of its users joins (layernorm's mean joins once both of its uses have).
        """
        self.group_of[id(group.members[0])] = group
        work = [group.members[0]]
        waiting: dict[int, tuple[Instruction, Instruction]] = {}   # refused producer -> (p, consumer)
        while work:
            member = work.pop()
            for p in dict.fromkeys(member.operands):
                if p in group or p.opcode not in FUSIBLE or id(p) in self.group_of or id(p) in waiting \
                        or p.opcode == "constant":
                    # (a refused producer is tried again below, once its readers join; constants
                    # are copied into each kernel that reads them when it is built: joining them
                    # here walked all their readers per kernel, quadratic for a ``0`` index
                    # shared by thousands of updates)
                    continue
                before = len(group.members)
                if self._try_add(group, p, member, self._users):
                    work.extend(group.members[before:])
                else:
                    waiting[id(p)] = (p, member)
            # A refused producer whose users have all joined since gets another chance.
            for p, consumer in list(waiting.values()):
                if id(p) not in self.group_of and \
                        all(u in group or u.opcode not in FUSIBLE for u in self._users[id(p)]):
                    del waiting[id(p)]
                    before = len(group.members)
                    if self._try_add(group, p, consumer, self._users):
                        work.extend(group.members[before:])

    def _try_add(self, group: Group, p: Instruction, consumer: Instruction, users) -> bool:
        outside = [u for u in users[id(p)] if u not in group]
        # A value that must be written anyway (for the root or an unfusible user such as a
        # dot or tuple) is best computed here once and exported: a multi-output fusion.
        must_write = p is self.comp.root or any(u.opcode not in FUSIBLE for u in outside)
        must_write = must_write and p.opcode != "constant"     # constants are copied, never exported
        if small_pick(p) and SMALL_PICK_RATIO * p.shape.size <= max(size_of(d) for d in group.dims):
            return self._refuse(p, consumer, f"a slice of at most {SMALL_PICK} elements is read as a value "
                                             "(a view), so that kernels differing only in its offset (the "
                                             "steps of a time loop) are one code")
        if p.opcode == "dynamic-update-slice" and any(u.opcode in FUSIBLE for u in outside):
            # Its other readers would need it too: an update is computed once, by the kernel
            # that writes it, and read from memory by the others (tried again once they join).
            return self._refuse(p, consumer, "the updated array has readers in other kernels: it is "
                                             "written once, by its own kernel")
        if any(_updates_a_transpose(u) and u.operands[0] is p and u in group for u in users[id(p)]):
            # Fused, the update's kernel would write the whole array element by element through
            # the transpose (strided on one side); alone, the tiled transpose kernel writes it
            # and the update writes only its window, in place.
            return self._refuse(p, consumer, "a transpose of the minor dim into an updated array is written by "
                                             "its own (tiled) kernel; the update then writes only its window")
        if outside and must_write and not not_duplicated(p) and \
                self.check_add(group, p, users) is None:
            self._join(group, p, users)
            return True
        if outside and not not_duplicated(p) and p.opcode != "constant" and not group.has_reduce and \
                all(u.opcode in FUSIBLE and u.opcode != "reduce" and id(u) not in self.group_of for u in outside) \
                and self.check_add(group, p, users) is None:
            # Elementwise work whose other readers are in no kernel yet, and most likely join
            # this one (a wide formula's shared temporaries): computed once here (exported if
            # they do not), rather than copied now and kept as a second kernel for them.
            # (Next to reductions, copies are kept: each reduction recomputes its input.)
            self._join(group, p, users)
            return True
        if outside and not not_duplicated(p):
            # Cheap: recompute it inside this kernel; the original stays for its other users.
            if id(p) in group.clones:
                # Copied in already: new readers share that copy.  (A copy per request made
                # the copies' own operands be copied again: a Python loop of stencil
                # updates grew one group exponentially, 598 copies at 3 steps.)
                copy = group.clones[id(p)]
                moved = self._redirect(p, copy, group)
                reason = self._cost(group, copy)
                if reason is not None:
                    self._unredirect(p, copy, moved)
                    return self._refuse(p, consumer, reason)
                self._commit_cost(group)
                return True
            clone = self._duplicate(p, group)
            reason = self.check_add(group, clone, self._users)
            if reason is not None:
                self._undo_duplicate(clone, p)
                return self._refuse(p, consumer, reason)
            self._join(group, clone, self._users)
            group.params.pop(id(p), None)       # (its readers here read the copy now)
            group.reads.pop(id(p), None)
            group.clones[id(p)] = clone
            group.origin[id(clone)] = p
            return True
        waiting = [u for u in outside if u.opcode in FUSIBLE and id(u) not in self.group_of]
        if waiting:
            # Its other readers may join this kernel still (then it is tried again); an
            # expensive value with readers elsewhere is computed once, as an extra output.
            return self._refuse(p, consumer, f"{p.opcode} is expensive and has readers in no kernel yet "
                                             f"({len(waiting)} of {len(users[id(p)])}): it is not duplicated")
        reason = self.check_add(group, p, users)
        if reason is not None:
            if outside:    # expensive values are computed once: only as an extra output
                reason = (f"{p.opcode} is expensive and has {len(users[id(p)])} users, so it is "
                          f"not duplicated; as an extra output of this kernel: {reason}")
            return self._refuse(p, consumer, reason)
        self._join(group, p, users)
        return True

    def _same_group(self, by_name: dict, a: str, b: str) -> bool:
        ga, gb = self.group_of.get(id(by_name.get(a))), self.group_of.get(id(by_name.get(b)))
        return ga is not None and ga is gb

    def _refuse(self, p, consumer, reason) -> bool:
        key = (id(p), id(consumer))
        if key not in self._refused:
            self._refused.add(key)
            self.decisions.refusals.append(Refusal(p.name, consumer.name, reason))
        return False

    def _duplicate(self, p: Instruction, group: Group) -> Instruction:
        clone = Instruction(p.opcode, p.shape, p.operands, p.attrs, unique_name(p.name.split(".")[0]),
                            p.location)
        clone.parent = self.comp
        self.comp.instructions.append(clone)          # placed properly by the final sort
        self._position[id(clone)] = self._position[id(p)] + 0.5
        moved = [u for u in self._users[id(p)] if u in group]
        for m in moved:
            m.operands = [clone if o is p else o for o in m.operands]
        self._users[id(p)] = [u for u in self._users[id(p)] if u not in group]
        self._users[id(clone)] = moved
        for o in dict.fromkeys(p.operands):
            self._users[id(o)].append(clone)
            owner = self.group_of.get(id(o))
            if owner is not None:
                owner.outside_user_added(o)                  # (the copy is not a member yet)
                owner.external_users[id(clone)] = clone      # (a path out: cycle checks start there)
            if owner is not None and owner is not group:     # ``o`` is read from outside now
                owner.stretch(self._position[id(o)], owner.last)
        return clone

    def _redirect(self, p: Instruction, copy: Instruction, group: Group) -> list[Instruction]:
        """Members reading ``p`` read its copy in the group instead; returns them."""
        moved = [u for u in self._users[id(p)] if u in group]
        for m in moved:
            m.operands = [copy if o is p else o for o in m.operands]
        self._users[id(p)] = [u for u in self._users[id(p)] if u not in group]
        self._users[id(copy)] += [m for m in moved if m not in self._users[id(copy)]]
        group.params.pop(id(p), None)
        return moved

    def _unredirect(self, p: Instruction, copy: Instruction, moved: list[Instruction]) -> None:
        for m in moved:
            m.operands = [p if o is copy else o for o in m.operands]
        self._users[id(copy)] = [u for u in self._users[id(copy)] if u not in moved]
        self._users[id(p)] += moved
        if moved:
            self.group_of[id(copy)].params[id(p)] = p

    def _undo_duplicate(self, clone: Instruction, p: Instruction) -> None:
        for m in self._users[id(clone)]:
            m.operands = [p if o is clone else o for o in m.operands]
        self._users[id(p)].extend(self._users.pop(id(clone)))
        for o in dict.fromkeys(p.operands):
            self._users[id(o)].remove(clone)
            owner = self.group_of.get(id(o))
            if owner is not None:
                owner.outside_user_removed(o)
                owner.external_users.pop(id(clone), None)
        self.comp.instructions.remove(clone)

    # ---- multi-output sibling fusion -------------------------------------------------------

    def merge_siblings(self) -> None:
        """Multi-output fusion: merge groups that read the same inputs (siblings) or where one
        reads what the other computes (producer and consumer), when one kernel can do both.

        Candidates come from an index of the groups by the arrays they read, so each group is
        compared with the few it shares an array with, not with every other group."""
        groups = list({id(g): g for g in self.group_of.values()}.values())
        inputs = {id(g): self._inputs(g) for g in groups}
        readers: dict[int, list[Group]] = {}
        for g in groups:
            for k in inputs[id(g)]:
                readers.setdefault(k, []).append(g)
        alive = {id(g) for g in groups}
        tried: set[tuple] = set()
        users = self.users()
        for a in groups:
            grown = True
            while grown and id(a) in alive:
                grown = False
                candidates = {id(b): b for k in inputs[id(a)] for b in readers[k]}
                for k in inputs[id(a)]:                     # its producers
                    b = self.group_of.get(k)
                    if b is not None:
                        candidates.setdefault(id(b), b)
                for m in a.members:                         # its consumers
                    for b in readers.get(id(m), ()):
                        candidates.setdefault(id(b), b)
                candidates = {k: b for k, b in candidates.items() if k in alive and b is not a}
                for b in candidates.values():
                    key = (id(a), id(b), len(a.members), len(b.members))
                    if key in tried:
                        continue
                    tried.add(key)
                    merged = self._merged_cost(a, b, users)
                    if merged is None:
                        continue
                    for m in b.members:
                        a.add(m, users)
                        self.group_of[id(m)] = a
                    a.clones.update(b.clones)
                    a.origin.update(b.origin)
                    a.stretch(b.first, a.last)
                    a.maps, a.depth, a.reads = merged
                    a.values = sum(len(v) for v in a.maps.values())
                    alive.discard(id(b))
                    inputs[id(a)] = self._inputs(a)
                    for k in inputs[id(a)]:
                        readers.setdefault(k, []).append(a)
                    grown = True
                    break

    def _merged_cost(self, a: Group, b: Group, users):
        """(maps, depths) of ``a`` and ``b`` as one kernel, or None when they cannot be one."""
        members = a.members + b.members
        if len(members) > MAX_MEMBERS or self.check(members, users) is not None:
            return None
        ids = a.ids | b.ids
        ordered = self._topological(members)
        outputs = {id(m) for m in ordered if m is self.comp.root or
                   any(id(u) not in ids for u in users[id(m)])}
        if len(outputs) > 1 and any(m.opcode == "dynamic-update-slice" for m in ordered if id(m) in outputs):
            # An update is best its own kernel's one output: only the window is computed, in
            # place; as one of several outputs every element would choose between both sides.
            return None
        if any(_updates_a_transpose(m) and id(m.operands[0]) in ids for m in ordered):
            return None                 # (see _try_add: the transpose is tiled on its own)
        dims = {m.shape.dims for m in ordered if not m.shape.is_tuple}
        if not any(m.opcode == "reduce" for m in ordered) and \
                any(m.opcode in TRANSCENDENTAL and reused_by_broadcast(m, dims) for m in ordered):
            return None                 # (see fusion_model.TRANSCENDENTAL_REUSE)
        maps, depth, reads = index_maps(ordered, ids, outputs, users)
        if sum(len(v) for v in maps.values()) > MAX_VALUES:
            return None
        arrays = {id(o): o for m in ordered for o in m.operands}
        if any(read_cost_reason(arrays[k], r) is not None for k, r in reads.items()):
            return None
        if any(cost_reason(m, maps[id(m)], depth[id(m)]) is not None for m in ordered):
            return None
        for original, copy in (*a.clones.items(), *b.clones.items()):
            # (a value and its copy become one after the fused computation's CSE)
            if original in ids and id(copy) in ids and cost_reason(
                    copy, maps[original] | maps[id(copy)], depth[id(copy)]) is not None:
                return None
        return maps, depth, reads

    @staticmethod
    def _inputs(group: Group) -> set[int]:
        """The arrays a group reads from outside (constants and scalars do not count)."""
        return {id(o) for m in group.members for o in m.operands
                if o not in group and o.opcode not in ("constant",) and o.shape.rank > 0}


def kernel_count(comp: Computation) -> int:
    return sum(1 for i in comp.instructions if is_kernel(i))


def fusion_targets(module: Module) -> list[Computation]:
    """Computations that run as programs (entry, loop bodies, branches), not scalar reducers."""
    skipped = set()         # computations applied to scalars, and fused computations
    for instr in module.instructions():
        if instr.opcode not in PROGRAM_CALLERS or instr.opcode == "fusion":
            skipped.update(id(c) for c in instr.called_computations)
    return [c for c in module.computations_post_order() if id(c) not in skipped]


class Fusion(Pass):
    name = "fusion"

    def __init__(self):
        self.report = FusionDecisions()

    def run(self, module: Module) -> bool:
        self.report = FusionDecisions()
        before, changed = instruction_ids(module), False
        for comp in fusion_targets(module):
            self.report.kernels_before += kernel_count(comp)
            changed |= _Fuser(comp, self.report).run()
            self.report.kernels_after += kernel_count(comp)
        rename_new_instructions(module, before)
        self.report.fusions = [f.name for f in self.report.fusions]   # names after renaming
        self.report.boundaries = [Boundary(b.producer.name, b.consumer.name, b.value, b.reason)
                                  for b in self.report.boundaries]
        return changed


def _updates_a_transpose(update: Instruction) -> bool:
    """Is it an update of an array a transpose of the minor dim computes?"""
    return update.opcode == "dynamic-update-slice" and update.operands[0].opcode == "transpose" \
        and _moves_minor_dim(update.operands[0])


def _moves_minor_dim(transpose: Instruction) -> bool:
    """Does the transpose change which dim (of more than one element) is minor, so that it is a
    real reordering of memory, not a reshape?"""
    perm, dims = transpose.attrs["dimensions"], transpose.operands[0].shape.dims
    kept = [p for p in perm if dims[p] > 1]
    return kept != sorted(kept)
