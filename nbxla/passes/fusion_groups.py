"""The groups fusion grows (``fusion.py``) and the facts about each kept up to date as members
join, so that ``fusion_model.Legality``'s checks of a new member need not walk the group: its
members, shapes, outside operands and readers, outputs by shape, and index maps; and
``Spans``, how many groups span a position (for the cycle checks' walks)."""

from __future__ import annotations

from ..hlo.ir import Instruction

__all__ = ["ROOT_MAPS", "Group", "Spans"]

# The index map of a kernel's output: its own index (see ``fusion_model.read_maps``).
ROOT_MAPS = frozenset((0,))


class Spans:
    """How many groups span a position ``q`` (``first <= q < last``), in O(log n) per change and
    per question: a Fenwick tree over half-positions (clones sit half-way between the
    instructions) counting ``+1`` at each group's ``first`` and ``-1`` at its ``last``.  Asking
    every group instead made each reachability walk linear in the number of groups: quadratic
    on unrolled loops (a 16k-instruction Cholesky spent half its fusion time there)."""

    def __init__(self, positions: int):
        self.tree = [0] * (2 * positions + 8)
        self.deltas: dict[int, int] = {}        # the point values, to rebuild a larger tree

    def _add(self, q: float, delta: int) -> None:
        k = int(2 * q) + 1
        self.deltas[k] = self.deltas.get(k, 0) + delta
        if k >= len(self.tree):                 # past the end (clones of the last ones)
            self.tree = [0] * (2 * k + 8)
            for j, d in self.deltas.items():
                self._bump(j, d)
        else:
            self._bump(k, delta)

    def _bump(self, k: int, delta: int) -> None:
        tree = self.tree
        while k < len(tree):
            tree[k] += delta
            k += k & -k

    def move(self, old: tuple | None, new: tuple) -> None:
        """A group's span changed from ``old`` (None: a new group) to ``new`` (first, last)."""
        if old == new:
            return
        if old is not None:
            self._add(old[0], -1)
            self._add(old[1], 1)
        self._add(new[0], 1)
        self._add(new[1], -1)

    def spanned(self, q: float) -> bool:
        k, total = min(int(2 * q) + 1, len(self.tree) - 1), 0
        while k > 0:
            total += self.tree[k]
            k -= k & -k
        return total > 0


class Group:
    """Members of a future fusion, with the facts legality checks need kept up to date."""

    def __init__(self, seed: Instruction, users, position: dict[int, float], spans: Spans,
                 root: Instruction | None = None):
        self.position, self.spans, self.root = position, spans, root
        # The last member's position, and the first of a member ever read from outside (an
        # output): what leaves the group starts there (clones of early constants do not count).
        # Changed only through ``stretch`` (``spans`` follows them).
        self.first = self.last = position[id(seed)]
        spans.move(None, (self.first, self.last))
        self.members: list[Instruction] = []
        self.ids: set[int] = set()
        self.dims: set[tuple] = set()
        self.has_reduce = False
        self.params: dict[int, Instruction] = {}   # operands from outside (not constants: copied in)
        self.external_users: dict[int, Instruction] = {}
        # Per member: how many of its users are outside the group (``outside_user_added`` and
        # ``_removed`` follow users made or dropped by duplication); the group's outputs are the
        # members with some, and the root.  ``output_dims``: how many outputs of each shape,
        # so a new member's check need not walk every member's users (``output_dims_after``).
        self.outside: dict[int, int] = {}
        self.output_dims: dict[tuple, int] = {}
        self.clones: dict[int, Instruction] = {}    # original's id -> its copy in this group
        self.origin: dict[int, Instruction] = {}    # copy's id -> its original
        # Per member: the index maps (hashed paths of index-changing reads from an output) at
        # which the kernel evaluates it, and its distance from the outputs.
        self.maps: dict[int, frozenset] = {id(seed): ROOT_MAPS}
        self.reads: dict[int, frozenset] = {}       # the same for arrays read from outside
        self.depth: dict[int, int] = {id(seed): 0}
        self.values = 1
        self.add(seed, users)

    def stretch(self, first: float, last: float) -> None:
        first, last = min(self.first, first), max(self.last, last)
        self.spans.move((self.first, self.last), (first, last))
        self.first, self.last = first, last

    def add(self, instr: Instruction, users) -> None:
        self.members.append(instr)
        where = self.position[id(instr)]
        self.stretch(self.first, where)
        self.ids.add(id(instr))
        if not (instr.opcode == "constant" and instr.shape.rank == 0):   # scalars: duplicated
            self.dims.add(None if instr.shape.is_tuple else instr.shape.dims)
        self.has_reduce |= instr.opcode == "reduce"
        self.params.pop(id(instr), None)
        for o in instr.operands:
            if id(o) not in self.ids and o.opcode != "constant":
                self.params[id(o)] = o
        self.external_users.pop(id(instr), None)
        outside = 0
        for u in users[id(instr)]:
            if id(u) not in self.ids:
                outside += 1
                self.external_users[id(u)] = u
                self.stretch(where, self.last)
        self._set_outside(instr, outside)
        for o in dict.fromkeys(instr.operands):     # ``instr`` read them from outside until now
            if id(o) in self.ids and o is not instr:
                self._set_outside(o, self.outside[id(o)] - 1)

    def _set_outside(self, member: Instruction, count: int) -> None:
        was = self.outside.get(id(member))
        self.outside[id(member)] = count
        now_output = count > 0 or member is self.root
        was_output = was is not None and (was > 0 or member is self.root)
        if now_output != was_output:
            dims = self._dims_key(member)
            self.output_dims[dims] = self.output_dims.get(dims, 0) + (1 if now_output else -1)
            if not self.output_dims[dims]:
                del self.output_dims[dims]

    @staticmethod
    def _dims_key(member: Instruction):
        return None if member.shape.is_tuple else member.shape.dims

    def outside_user_added(self, member: Instruction) -> None:
        """``member`` got a reader outside the group (a copy of one of its readers made for
        another kernel, or for this one before it joins)."""
        self._set_outside(member, self.outside[id(member)] + 1)

    def outside_user_removed(self, member: Instruction) -> None:
        self._set_outside(member, self.outside[id(member)] - 1)

    def output_dims_after(self, p: Instruction, users) -> set:
        """The shapes of the group's outputs once ``p`` (not a member) joins: its operands in
        the group lose ``p`` as an outside reader, and ``p`` is an output when read from
        outside the group or the root.  In time of ``p``'s operands and users, not the group's
        size."""
        counts = dict(self.output_dims)
        for o in dict.fromkeys(p.operands):
            if id(o) in self.ids and self.outside[id(o)] == 1 and o is not self.root:
                counts[self._dims_key(o)] -= 1          # (``p`` was its one outside reader)
        if p is self.root or any(id(u) not in self.ids for u in users[id(p)]):
            counts[self._dims_key(p)] = counts.get(self._dims_key(p), 0) + 1
        return {d for d, c in counts.items() if c > 0}

    def __contains__(self, instr: Instruction) -> bool:
        return id(instr) in self.ids
