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
* values are not recomputed without bound: a computed producer that other kernels need as
  well is not copied into a kernel that reads it at several positions (a stencil of it),
  and no kernel computes more than ``MAX_RECOMPUTE`` values per instruction for each
  element (XLA's "fused IR emitter inefficient" rule).  Stencils of stencils of in-place
  updates (ocean-model kernels) otherwise grew one kernel recomputing everything.

Fusions whose root is (or contains) a reduction are ``kind=kInput``, the others ``kLoop``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..hlo import Module
from ..hlo.builder import unique_name
from ..hlo.ir import Computation, Instruction
from ..hlo.opcodes import OPCODES
from ..hlo.shapes import TupleShape
from .cse import eliminate_common_subexpressions
from .pipeline import Pass, instruction_ids, rename_new_instructions

MAX_OPERANDS = 32
MAX_RECOMPUTE = 8

FUSIBLE = {op for op, info in OPCODES.items() if info.elementwise} | {
    "broadcast", "reshape", "transpose", "slice", "concatenate", "pad", "iota", "reverse",
    "constant", "bitcast", "reduce", "dynamic-slice", "dynamic-update-slice", "gather"}

EXPENSIVE = {"exponential", "exponential-minus-one", "log", "log-plus-one", "tanh", "logistic",
             "power", "divide", "remainder", "sqrt", "rsqrt", "cbrt", "sine", "cosine", "tan",
             "atan2", "erf", "reduce"}

# Never copied into a second kernel: recomputing these costs (a dynamic-update-slice is a
# whole array, and chains of them, one per in-place write, would be recomputed each time).
NOT_DUPLICATED = EXPENSIVE | {"dynamic-update-slice", "scatter"}

# Instructions that are not kernels on their own (no data is computed).
NOT_KERNELS = {"parameter", "constant", "tuple", "get-tuple-element", "bitcast", "reshape"}

# Ops that run the computations they call as programs; every other caller (reduce, sort,
# scatter, select-and-scatter, a custom call's comparator...) applies them to scalars, and
# those computations are not fused into.
_PROGRAM_CALLERS = {"while", "conditional", "call", "fusion"}


@dataclass
class Refusal:
    producer: str
    consumer: str
    reason: str


@dataclass
class FusionDecisions:
    """What the fusion pass did, for the fusion report."""
    kernels_before: int = 0
    kernels_after: int = 0
    fusions: list[str] = field(default_factory=list)         # names of fusion instructions
    refusals: list[Refusal] = field(default_factory=list)


def is_kernel(instr: Instruction) -> bool:
    return instr.opcode not in NOT_KERNELS


def _reduce_space(r: Instruction):
    """(input dims, reduced dims) of a reduce."""
    return r.operands[0].shape.dims, tuple(sorted(r.attrs["dimensions"]))


class _Group:
    """Members of a future fusion, with the facts legality checks need kept up to date."""

    def __init__(self, seed: Instruction, users):
        self.members: list[Instruction] = []
        self.ids: set[int] = set()
        self.dims: set[tuple] = set()
        self.has_reduce = False
        self.has_indexing = False
        self.params: set[int] = set()               # operands from outside
        self.external_users: dict[int, Instruction] = {}
        self.clones: dict[int, Instruction] = {}    # original's id -> its copy in this group
        self.add(seed, users)

    def add(self, instr: Instruction, users) -> None:
        self.members.append(instr)
        self.ids.add(id(instr))
        if not (instr.opcode == "constant" and instr.shape.rank == 0):   # scalars: duplicated
            self.dims.add(None if instr.shape.is_tuple else instr.shape.dims)
        self.has_reduce |= instr.opcode == "reduce"
        # Reads at other positions (slices, broadcasts...) are what can make values recomputed.
        self.has_indexing |= not instr.is_elementwise and instr.opcode != "constant"
        self.params.discard(id(instr))
        self.params.update(id(o) for o in instr.operands if id(o) not in self.ids)
        self.external_users.pop(id(instr), None)
        for u in users[id(instr)]:
            if id(u) not in self.ids:
                self.external_users[id(u)] = u

    def __contains__(self, instr: Instruction) -> bool:
        return id(instr) in self.ids


class _Fuser:
    def __init__(self, comp: Computation, decisions: FusionDecisions):
        self.comp, self.decisions = comp, decisions
        self.group_of: dict[int, _Group] = {}
        self._refused: set[tuple[int, int]] = set()
        self._users: dict[int, list[Instruction]] = {}
        self._position: dict[int, float] = {}

    # ---- graph queries --------------------------------------------------------------------

    def users(self) -> dict[int, list[Instruction]]:
        """Users of every instruction (kept up to date as producers are duplicated)."""
        return self._users

    def _index(self) -> None:
        self._users = {id(i): [] for i in self.comp.instructions}
        for instr in self.comp.instructions:
            for op in dict.fromkeys(instr.operands):
                self._users[id(op)].append(instr)
        self._position = {id(i): float(k) for k, i in enumerate(self.comp.instructions)}

    def _reaches(self, start: list[Instruction], targets: set[int], users) -> bool:
        """Is any of ``targets`` reachable from ``start`` along user edges?

        Other groups count as single nodes (they become one fusion): reaching any member of
        one reaches the users of all its members.
        """
        seen: set[int] = set()
        expanded: set[int] = set()        # groups whose members' users are already stacked
        stack = list(start)
        while stack:
            instr = stack.pop()
            if id(instr) in targets:
                return True
            if id(instr) in seen:
                continue
            seen.add(id(instr))
            stack.extend(users[id(instr)])
            group = self.group_of.get(id(instr))
            # (once per group: doing it for each member reached made this quadratic in the
            # group's size, minutes on the long elementwise chains of jax.random's threefry)
            if group is not None and id(group) not in expanded:
                expanded.add(id(group))
                for m in group.members:
                    if id(m) not in targets:
                        stack.extend(users[id(m)])
        return False

    # ---- legality ---------------------------------------------------------------------------

    def check_add(self, group: _Group, p: Instruction, users) -> str | None:
        """``check(group.members + [p])``, in time independent of the group's size when
        neither has a reduction and all have one shape (long elementwise chains)."""
        if group.has_reduce or p.opcode == "reduce" or p.shape.is_tuple or \
                (not (p.opcode == "constant" and p.shape.rank == 0) and group.dims != {p.shape.dims}):
            return self.check(group.members + [p], users)
        params = len(group.params) - (id(p) in group.params) + \
            sum(1 for o in dict.fromkeys(p.operands) if id(o) not in group.ids and id(o) not in group.params)
        if params > MAX_OPERANDS:
            return f"the kernel would read more than {MAX_OPERANDS} arrays"
        external = [u for k, u in group.external_users.items() if k != id(p)]
        external += [u for u in users[id(p)] if id(u) not in group.ids]
        if self._reaches(external, group.ids | {id(p)}, users):
            return "it would create a cycle (a path leaves the kernel and comes back)"
        return None

    def check(self, members: list[Instruction], users) -> str | None:
        """Why ``members`` cannot be one kernel, or None if they can."""
        ids = {id(m) for m in members}
        reduces = [m for m in members if m.opcode == "reduce"]
        spaces = {_reduce_space(r) for r in reduces}
        if len(spaces) > 1:
            return "reductions over different shapes or axes need separate kernels"
        after: set[int] = set()      # members computed from a reduction inside the group
        for m in self._topological(members):
            if any(id(o) in ids and (o.opcode == "reduce" or id(o) in after) for o in m.operands):
                after.add(id(m))
        if reduces:
            (in_dims, red) = next(iter(spaces))
            outer = _squeeze(n for i, n in enumerate(in_dims) if i not in red)
            trailing = tuple(red) == tuple(range(len(in_dims) - len(red), len(in_dims)))
            for m in members:
                if id(m) not in after or m.shape.is_tuple:
                    continue
                # A reduced value is held per outer index: what follows may only read it at
                # that same index (no reverse, transpose, slice... of reduced values).
                if not (m.is_elementwise or m.opcode in ("broadcast", "reduce", "constant") or
                        (m.opcode in ("reshape", "bitcast") and
                         _squeeze(m.shape.dims) == _squeeze(m.operands[0].shape.dims))):
                    return f"a reduction's result is read by {m.opcode} at other positions"
                if _squeeze(m.shape.dims) == outer:          # the reduced space (keepdims too)
                    continue
                if m.shape.dims == in_dims and not trailing:
                    # One kernel would walk the input column by column, once per phase (x.var(
                    # axis=0): 7x slower than NumPy); two kernels each read it row by row.
                    return "a reduction over leading axes is used back in the input's space"
                if m.shape.dims == in_dims and m.opcode == "broadcast":
                    if any(m.attrs["dimensions"][k] in red
                           for k, n in enumerate(m.operands[0].shape.dims) if n != 1):
                        return "a reduced value is broadcast along other than the reduced axes"
                    continue
                if m.shape.dims == in_dims:                  # e.g. softmax's x - max(x)
                    continue
                return "a reduction's result is used in a different iteration space"
        outputs = [m for m in members if m is self.comp.root or any(id(u) not in ids for u in users[id(m)])]
        if not reduces and len({o.shape.dims for o in outputs}) > 1:
            return "outputs of different shapes cannot share one loop"
        if reduces and any(not o.shape.is_tuple and o.shape.dims != in_dims and _squeeze(o.shape.dims) != outer
                           for o in outputs):
            return "a reduction kernel's outputs must be in its input's or its result's space"
        params = {id(o) for m in members for o in m.operands if id(o) not in ids}
        if len(params) > MAX_OPERANDS:
            return f"the kernel would read more than {MAX_OPERANDS} arrays"
        external_users = [u for m in members for u in users[id(m)] if id(u) not in ids]
        if self._reaches(external_users, ids, users):
            return "it would create a cycle (a path leaves the kernel and comes back)"
        return None

    def _topological(self, members):
        return sorted(members, key=lambda m: self._position[id(m)])

    # ---- growing groups ---------------------------------------------------------------------

    def run(self) -> bool:
        # Dead instructions are DCE's business: a group grown from one would have no output.
        live = {id(i) for i in self.comp.post_order()}
        self._index()
        for instr in list(reversed(self.comp.instructions)):
            if instr.opcode in FUSIBLE and id(instr) not in self.group_of and id(instr) in live and \
                    instr.opcode not in ("constant",) and not self._trivial(instr):
                self.grow(_Group(instr, self._users))
        self.merge_siblings()
        return self.materialize()

    def _trivial(self, instr: Instruction) -> bool:
        return instr.opcode in ("reshape", "bitcast") and all(o.opcode == "parameter" for o in instr.operands)

    def grow(self, group: _Group) -> None:
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
                if p in group or p.opcode not in FUSIBLE or id(p) in self.group_of:
                    continue
                before = len(group.members)
                if self._try_add(group, p, member, self._users):
                    work.extend(group.members[before:])
                else:
                    waiting[id(p)] = (p, member)
            # A refused producer whose users have all joined since gets another chance.
            for p, consumer in list(waiting.values()):
                if id(p) not in self.group_of and all(u in group for u in self._users[id(p)]):
                    del waiting[id(p)]
                    before = len(group.members)
                    if self._try_add(group, p, consumer, self._users):
                        work.extend(group.members[before:])

    def _recomputed(self, group: _Group, p: Instruction, shared: bool) -> str | None:
        """Why ``p`` should not join the group for the work it would recompute, or None.

        A value the emitter reads at several positions is computed once per position.  That
        is cheap for a value read straight from memory and right for one nobody else needs
        (a stencil of ``x * 2``), up to ``MAX_RECOMPUTE`` values per instruction; but a
        computed value that other kernels read too (``shared``) is computed once, in its own
        kernel, rather than again at every position here (XLA: a consumer that reuses its
        operand's elements does not fuse an expensive-to-repeat producer)."""
        if not group.has_indexing and (p.is_elementwise or p.opcode == "constant"):
            return None
        total, positions = self._evaluations(group.members + [p], p)
        if shared and positions > 1 and p.opcode != "constant" and \
                any(o.opcode not in ("parameter", "constant") for o in p.operands):
            return (f"it is read at {positions} positions here and used by other kernels: "
                    "computed once in its own kernel instead of at each position")
        if total > MAX_RECOMPUTE * (len(group.members) + 1):
            return (f"the kernel would compute more than {MAX_RECOMPUTE} values per "
                    "instruction for each element (values read at many positions)")
        return None

    def _evaluations(self, members: list[Instruction], target=None) -> tuple[int, int]:
        """(values the emitter computes per element for ``members`` as one kernel, positions
        at which ``target`` is computed): a member read by elementwise users shares their
        positions; each read through an indexing op (slice, broadcast, concatenate,
        dynamic-update-slice...) is a position of its own."""
        ids = {id(m) for m in members}
        keys: dict[int, set] = {}
        total, target_positions = 0, 0
        for m in reversed(self._topological(members)):
            mine = keys.get(id(m)) or {0}
            if m is target:                           # where this kernel reads it
                target_positions = len(mine)
            if m is self.comp.root or any(id(u) not in ids for u in self._users[id(m)]):
                mine = mine | {0}                     # an output: its own position too
            total += len(mine)
            if m.opcode == "constant":
                continue
            for o in dict.fromkeys(m.operands):
                if id(o) in ids:
                    keys.setdefault(id(o), set()).update(
                        mine if m.is_elementwise else ((id(m), k) for k in mine))
        return total, target_positions

    def _try_add(self, group: _Group, p: Instruction, consumer: Instruction, users) -> bool:
        outside = [u for u in users[id(p)] if u not in group]
        reason = self._recomputed(group, p, bool(outside))
        if reason is not None:
            return self._refuse(p, consumer, reason)
        # A value that must be written anyway (for the root or an unfusible user such as a
        # dot or tuple) is best computed here once and exported: a multi-output fusion.
        must_write = p is self.comp.root or any(u.opcode not in FUSIBLE for u in outside)
        must_write = must_write and p.opcode != "constant"     # constants are copied, never exported
        if outside and must_write and p.opcode not in NOT_DUPLICATED and \
                self.check_add(group, p, users) is None:
            group.add(p, users)
            self.group_of[id(p)] = group
            return True
        if outside and p.opcode not in NOT_DUPLICATED:
            # Cheap: recompute it inside this kernel; the original stays for its other users.
            if id(p) in group.clones:
                # Copied in already: new readers share that copy.  (A copy per request made
                # the copies' own operands be copied again: a Python loop of stencil
                # updates grew one group exponentially, 598 copies at 3 steps.)
                self._redirect(p, group.clones[id(p)], group)
                return True
            clone = self._duplicate(p, group)
            reason = self.check_add(group, clone, self._users)
            if reason is not None:
                self._undo_duplicate(clone, p)
                return self._refuse(p, consumer, reason)
            group.add(clone, self._users)
            group.clones[id(p)] = clone
            self.group_of[id(clone)] = group
            return True
        reason = self.check_add(group, p, users)
        if reason is not None:
            if outside:    # expensive values are computed once: only as an extra output
                reason = (f"{p.opcode} is expensive and has {len(users[id(p)])} users, so it is "
                          f"not duplicated; as an extra output of this kernel: {reason}")
            return self._refuse(p, consumer, reason)
        group.add(p, users)
        self.group_of[id(p)] = group
        return True

    def _same_group(self, a: str, b: str) -> bool:
        by_name = {i.name: i for i in self.comp.instructions}
        ga, gb = self.group_of.get(id(by_name.get(a))), self.group_of.get(id(by_name.get(b)))
        return ga is not None and ga is gb

    def _refuse(self, p, consumer, reason) -> bool:
        key = (id(p), id(consumer))
        if key not in self._refused:
            self._refused.add(key)
            self.decisions.refusals.append(Refusal(p.name, consumer.name, reason))
        return False

    def _duplicate(self, p: Instruction, group: _Group) -> Instruction:
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
        return clone

    def _redirect(self, p: Instruction, copy: Instruction, group: _Group) -> None:
        """Members reading ``p`` read its copy in the group instead."""
        moved = [u for u in self._users[id(p)] if u in group]
        for m in moved:
            m.operands = [copy if o is p else o for o in m.operands]
        self._users[id(p)] = [u for u in self._users[id(p)] if u not in group]
        self._users[id(copy)] += [m for m in moved if m not in self._users[id(copy)]]
        group.params.discard(id(p))

    def _undo_duplicate(self, clone: Instruction, p: Instruction) -> None:
        for m in self._users[id(clone)]:
            m.operands = [p if o is clone else o for o in m.operands]
        self._users[id(p)].extend(self._users.pop(id(clone)))
        for o in dict.fromkeys(p.operands):
            self._users[id(o)].remove(clone)
        self.comp.instructions.remove(clone)

    # ---- multi-output sibling fusion -------------------------------------------------------

    def merge_siblings(self) -> None:
        """Merge groups that read the same inputs and can share one pass over them."""
        inputs: dict[int, set[int]] = {}        # (each group's inputs, computed once per change)
        changed = True
        while changed:
            changed = False
            groups = list({id(g): g for g in self.group_of.values()}.values())
            users = self.users()
            for g in groups:
                if id(g) not in inputs:
                    inputs[id(g)] = self._inputs(g)
            for i, a in enumerate(groups):
                for b in groups[i + 1:]:
                    if inputs[id(a)].isdisjoint(inputs[id(b)]):
                        continue
                    if self.check(a.members + b.members, users) is None and \
                            (not (a.has_indexing or b.has_indexing) or
                             self._evaluations(a.members + b.members)[0] <=
                             MAX_RECOMPUTE * (len(a.members) + len(b.members))):
                        for m in b.members:
                            a.add(m, users)
                            self.group_of[id(m)] = a
                        del inputs[id(a)], inputs[id(b)]
                        changed = True
                        break
                if changed:
                    break

    @staticmethod
    def _inputs(group: _Group) -> set[int]:
        """The arrays a group reads from outside (constants and scalars do not count)."""
        return {id(o) for m in group.members for o in m.operands
                if o not in group and o.opcode not in ("constant",) and o.shape.rank > 0}

    # ---- building fusion instructions -------------------------------------------------------

    def materialize(self) -> bool:
        groups = list({id(g): g for g in self.group_of.values()}.values())
        if not groups:
            return False
        # Refusals that later growth overcame are not worth reporting.
        self.decisions.refusals = [r for r in self.decisions.refusals
                                   if not self._same_group(r.producer, r.consumer)]
        users = self.users()
        for group in groups:
            self._build_fusion(group, users)
        self.comp.sort_topologically()
        return True

    def _build_fusion(self, group: _Group, users) -> None:
        comp = self.comp
        members = self._topological(group.members)
        ids = {id(m) for m in members}
        outputs = [m for m in members if m is comp.root or any(id(u) not in ids for u in users[id(m)])]
        params: list[Instruction] = []
        for m in members:
            for o in m.operands:
                if id(o) not in ids and o not in params:
                    params.append(o)
        name = _fusion_name(members, outputs)
        taken = {c.name for c in comp.parent.computations}
        fused_name = unique_name(f"fused_{name}")
        while fused_name in taken:          # parsed HLO may already use the counter's names
            fused_name = unique_name(f"fused_{name}")
        fused = Computation(fused_name)
        mapping: dict[int, Instruction] = {}
        for i, p in enumerate(params):
            param = Instruction("parameter", p.shape, (), {"parameter_number": i}, unique_name(f"param_{i}"))
            fused.add(param)
            mapping[id(p)] = param
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
        position = max(comp.instructions.index(m) for m in members)
        comp.instructions.insert(position + 1, fusion)
        replacements = {}
        if len(outputs) == 1:
            replacements[id(outputs[0])] = fusion
        else:
            position = comp.instructions.index(fusion) + 1
            k = 0

            def add(instr):
                nonlocal position
                instr.parent = comp
                comp.instructions.insert(position, instr)
                position += 1
                return instr
            for out in outputs:
                parts = out.shape.elements if out.shape.is_tuple else [out.shape]
                gtes = [add(Instruction("get-tuple-element", s, [fusion], {"index": k + j},
                                        unique_name(f"{out.name}.out"), out.location))
                        for j, s in enumerate(parts)]
                k += len(parts)
                replacements[id(out)] = add(Instruction("tuple", out.shape, gtes, {}, unique_name(
                    f"{out.name}.out"), out.location)) if out.shape.is_tuple else gtes[0]
        for instr in comp.instructions:
            if id(instr) not in ids:
                instr.operands = [replacements.get(id(o), o) for o in instr.operands]
        comp.root = replacements.get(id(comp.root), comp.root)
        comp.instructions = [i for i in comp.instructions if id(i) not in ids]
        self.decisions.fusions.append(fusion)


def _squeeze(dims) -> tuple[int, ...]:
    return tuple(n for n in dims if n != 1)


def _fusion_name(members, outputs) -> str:
    """XLA-style names: the opcodes at the heart of the kernel (``reduce_multiply_fusion``)."""
    heads = [m.opcode for m in members if m.opcode == "reduce"] or [o.opcode for o in outputs]
    seen = list(dict.fromkeys(h.replace("-", "_") for h in heads))
    return "_".join(seen[:2])


def kernel_count(comp: Computation) -> int:
    return sum(1 for i in comp.instructions if is_kernel(i))


def fusion_targets(module: Module) -> list[Computation]:
    """Computations that run as programs (entry, loop bodies, branches), not scalar reducers."""
    skipped = set()         # computations applied to scalars, and fused computations
    for instr in module.instructions():
        if instr.opcode not in _PROGRAM_CALLERS or instr.opcode == "fusion":
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
        return changed
