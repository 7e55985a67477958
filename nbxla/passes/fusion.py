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
  the elemental emitter computes it again).  A value evaluated at more than
  ``RECOMPUTE_LIMIT`` maps stays out (a chain of stencil steps fuses one step per kernel,
  never the whole cone); a ``dynamic-update-slice`` is never duplicated nor read at more
  than one map (each time step's update is one kernel writing the whole array once); a
  kernel holds at most ``MAX_MEMBERS`` instructions, ``MAX_VALUES`` evaluations per element
  and a chain ``MAX_DEPTH`` deep, so the code generator can always emit it.

Fusions whose root is (or contains) a reduction are ``kind=kInput``, the others ``kLoop``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..hlo import Module
from ..hlo.builder import unique_name
from ..hlo.ir import Computation, Instruction
from ..hlo.opcodes import EXPENSIVE, FUSIBLE, NOT_KERNELS, PROGRAM_CALLERS, TRANSCENDENTAL
from ..hlo.shapes import TupleShape
from .cse import eliminate_common_subexpressions
from .pipeline import Pass, instruction_ids, rename_new_instructions

# Arrays one kernel may read (XLA's GPU limit, operands and outputs: 96).  The count is of the
# group's frontier while it grows, which for a wide formula grown half-way is far wider than
# the inputs of the finished kernel (32 split an equation of state into 19 kernels).
MAX_OPERANDS = 96
# Index maps at which one value may be evaluated in a kernel: a 7-point stencil step (heat-3d)
# reads its producer at 7; two chained 5-point steps would read it at 25.
RECOMPUTE_LIMIT = 8
# What one kernel may hold: instructions, evaluations per element (sum over members of their
# index maps; the emitter stops at 20000) and the longest chain (the emitter recurses along
# it, about four Python frames a level).
MAX_MEMBERS = 2000
MAX_VALUES = 4000
MAX_DEPTH = 180
# Slices this small stay out of kernels much larger than they are: a NumPy view passes them
# in (see ``_small_pick``).
SMALL_PICK = 16
_SMALL_PICK_RATIO = 64
# A transcendental of a scalar joins kernels of at most this many elements (each evaluates it
# per element); in larger ones it is computed once, apart.
SCALAR_RECOMPUTE_LIMIT = 64

# Never duplicated into a consumer: an update rewrites a whole array (computed once, in place).
NOT_DUPLICATED = EXPENSIVE | {"dynamic-update-slice"}


@dataclass
class Refusal:
    producer: str
    consumer: str
    reason: str


@dataclass
class Boundary:
    """A value one kernel writes and another reads from memory, and why they are apart."""
    producer: str          # the kernel (fusion or library call) writing it
    consumer: str          # the kernel reading it
    value: str             # the instruction whose result crosses, as named before fusion
    reason: str


@dataclass
class FusionDecisions:
    """What the fusion pass did, for the fusion report."""
    kernels_before: int = 0
    kernels_after: int = 0
    fusions: list[str] = field(default_factory=list)         # names of fusion instructions
    refusals: list[Refusal] = field(default_factory=list)
    boundaries: list[Boundary] = field(default_factory=list)


def is_kernel(instr: Instruction) -> bool:
    return instr.opcode not in NOT_KERNELS


def _reduce_space(r: Instruction):
    """(input dims, reduced dims) of a reduce."""
    return r.operands[0].shape.dims, tuple(sorted(r.attrs["dimensions"]))


class _Spans:
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


class _Group:
    """Members of a future fusion, with the facts legality checks need kept up to date."""

    def __init__(self, seed: Instruction, users, position: dict[int, float], spans: _Spans):
        self.position, self.spans = position, spans
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
        self.clones: dict[int, Instruction] = {}    # original's id -> its copy in this group
        # Per member: the index maps (hashed paths of index-changing reads from an output) at
        # which the kernel evaluates it, and its distance from the outputs.
        self.maps: dict[int, frozenset] = {id(seed): _ROOT_MAPS}
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
        for u in users[id(instr)]:
            if id(u) not in self.ids:
                self.external_users[id(u)] = u
                self.stretch(where, self.last)

    def __contains__(self, instr: Instruction) -> bool:
        return id(instr) in self.ids


_ROOT_MAPS = frozenset((0,))


def _small_pick(instr: Instruction) -> bool:
    """A slice taking a few elements (``fict[t]``, ``x[0, :4]``) of a larger array."""
    return instr.opcode == "slice" and not instr.shape.is_tuple and instr.shape.size <= SMALL_PICK \
        and instr.operands[0].shape.size > instr.shape.size


def _size(dims) -> int:
    n = 1
    for d in dims or ():
        n *= d
    return n


def _same_index(user: Instruction, operand: Instruction) -> bool:
    """Does ``user`` read ``operand`` only at the index where ``user`` itself is evaluated
    (so that the emitter's memo shares one evaluation among such readers)?"""
    if operand.shape.is_tuple or user.shape.is_tuple:
        return False
    if operand.shape.rank == 0:
        return True                 # a scalar has one element: every read is the same
    if user.is_elementwise:
        return True
    op = user.opcode
    if op == "dynamic-update-slice":
        return all(o is not operand for o in user.operands[1:])
    if op == "slice":
        return all(s.start == 0 and s.stride == 1 for s in user.attrs["slice"])
    if op in ("reshape", "bitcast", "copy"):
        return user.shape.dims == operand.shape.dims
    return False


def _read_maps(user: Instruction, operand: Instruction, maps: frozenset) -> frozenset:
    """The maps at which ``operand`` is evaluated for ``user`` evaluated at ``maps``."""
    if _same_index(user, operand):
        return maps
    return frozenset(hash((t, id(user))) for t in maps)


def _index_maps(members: list[Instruction], ids: set[int], outputs: set[int], users) -> tuple[dict, dict, dict]:
    """Index maps and depths of a group's members, and the maps at which it reads arrays from
    outside, from scratch (members in topological order)."""
    maps: dict[int, frozenset] = {}
    depth: dict[int, int] = {}
    reads: dict[int, frozenset] = {}
    for m in reversed(members):
        got, d = (_ROOT_MAPS, 0) if id(m) in outputs else (frozenset(), 0)
        for u in users[id(m)]:
            if id(u) in ids:
                got = got | _read_maps(u, m, maps[id(u)])
                d = max(d, depth[id(u)] + 1)
        maps[id(m)], depth[id(m)] = got or _ROOT_MAPS, d
        for o in dict.fromkeys(m.operands):
            if id(o) not in ids and o.opcode != "constant" and not o.shape.is_tuple and o.shape.rank > 0:
                reads[id(o)] = reads.get(id(o), frozenset()) | _read_maps(m, o, maps[id(m)])
    return maps, depth, reads


def _cost_reason(p: Instruction, maps: frozenset, depth: int) -> str | None:
    """Why ``p`` evaluated at ``maps`` (``depth`` below an output) is too costly, or None."""
    if p.opcode == "dynamic-update-slice" and len(maps) > 1:
        return ("an updated array read at several positions is written once by its own kernel "
                "(recomputing the update for each read multiplies the work)")
    if len(maps) > RECOMPUTE_LIMIT:
        return (f"{p.opcode} would be recomputed at {len(maps)} positions per element (more than "
                f"{RECOMPUTE_LIMIT}: a chain of stencil steps fuses one step per kernel)")
    if depth > MAX_DEPTH:
        return f"the kernel's chain of operations would be deeper than {MAX_DEPTH}"
    return None


class _Fuser:
    def __init__(self, comp: Computation, decisions: FusionDecisions):
        self.comp, self.decisions = comp, decisions
        self.group_of: dict[int, _Group] = {}
        self._refused: set[tuple[int, int]] = set()
        self._users: dict[int, list[Instruction]] = {}
        self._position: dict[int, float] = {}
        self._pending = None
        self._fusion_of: dict[int, Instruction] = {}      # group -> its fusion instruction
        self._groups: list[_Group] = []                   # every group made (merged ones too)

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
        self._spans = _Spans(len(self.comp.instructions))

    def _reaches(self, start: list[Instruction], targets: set[int], users, limit: float) -> bool:
        """Is any of ``targets`` (none placed after position ``limit``) reachable from
        ``start`` along user edges?

        Other groups count as single nodes (they become one fusion): reaching any member of
        one reaches the users of all its members.  Instructions are in topological order, so
        the walk stops at a group whose outputs all come after ``limit``: what it leads to comes
        after them (without this, every legality check walked the rest of the module, quadratic
        on long programs).  An ungrouped instruction after ``limit`` stops it too unless some
        group spans ``limit`` (an output before it, a member after it): only through such a
        group can a walk come back.
        """
        position = self._position
        spanning = self._spans.spanned(limit)
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
            group = self.group_of.get(id(instr))
            if position[id(instr)] > limit and (group.first > limit if group is not None else not spanning):
                continue
            stack.extend(users[id(instr)])
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
        neither has a reduction and all have one shape (long elementwise chains).  On success
        the index maps ``p`` would bring are kept for ``_join``."""
        reason = self._cost(group, p)
        if reason is not None:
            return reason
        if group.has_reduce or p.opcode == "reduce" or p.shape.is_tuple or \
                (not (p.opcode == "constant" and p.shape.rank == 0) and group.dims != {p.shape.dims}):
            return self.check(group.members + [p], users, cycles=False) or self._cycle_with(group, p, users)
        params = len(group.params) - (id(p) in group.params) + \
            sum(1 for o in dict.fromkeys(p.operands)
                if id(o) not in group.ids and id(o) not in group.params and o.opcode != "constant")
        if params > MAX_OPERANDS:
            return f"the kernel would read more than {MAX_OPERANDS} arrays"
        return self._cycle_with(group, p, users)

    def _cycle_with(self, group: _Group, p: Instruction, users) -> str | None:
        """Would ``group`` (one kernel, no cycle through it) plus ``p`` have one?  A new cycle
        passes through ``p``: from the group out and into ``p`` (a walk that stops past ``p``'s
        position: cheap, as groups grow towards producers), or from ``p``'s readers outside
        back into the group (only values read elsewhere too: exported or expensive ones)."""
        external = [u for k, u in group.external_users.items() if k != id(p)]
        if self._reaches(external, {id(p)}, users, self._position[id(p)]):
            return "it would create a cycle (a path leaves the kernel and comes back)"
        outside = [u for u in users[id(p)] if id(u) not in group.ids]
        if outside and self._reaches(outside, group.ids, users, group.last):
            return "it would create a cycle (a path leaves the kernel and comes back)"
        return None

    def _cost(self, group: _Group, x: Instruction) -> str | None:
        """Why evaluating ``x`` in ``group`` (a new member, or a member with new readers) costs
        too much, or None; then ``self._pending`` holds the new maps and depths of ``x`` and
        of the members below it, for ``_join``."""
        users = self._users[id(x)]
        if x.shape.rank == 0 and x.opcode in TRANSCENDENTAL and \
                any(_size(d) > SCALAR_RECOMPUTE_LIMIT for d in group.dims if d is not None):
            # (the elemental emitter evaluates it at every element: a complex power of one
            # scalar, broadcast over a 50x50 matrix, cost 2500 powers per loop step)
            return (f"{x.opcode} of a scalar would be recomputed at every element of the kernel: it is "
                    "computed once, in its own kernel")
        maps = group.maps.get(id(x), frozenset())
        depth = group.depth.get(id(x), 0)
        exported = x is self.comp.root
        for u in users:
            if id(u) in group.ids:
                maps = maps | _read_maps(u, x, group.maps[id(u)])
                depth = max(depth, group.depth[id(u)] + 1)
            elif u is not x:
                exported = True
        if exported or not maps:
            maps = maps | _ROOT_MAPS
        reason = _cost_reason(x, maps, depth)
        if reason is not None:
            return reason
        pending = {id(x): (maps, depth)}
        reads: dict[int, frozenset] = {}        # arrays read from outside: their new maps
        work = [x]
        while work:                 # members below ``x`` are now also read through it
            y = work.pop()
            ym, yd = pending[id(y)]
            for o in dict.fromkeys(y.operands):
                if id(o) not in group.ids:
                    if o.opcode == "constant" or o.shape.is_tuple or o.shape.rank == 0:
                        continue                # (constants are copied in; scalars read once)
                    old = reads.get(id(o)) or group.reads.get(id(o), frozenset())
                    new = old | _read_maps(y, o, ym)
                    if len(new) > RECOMPUTE_LIMIT:
                        return (f"the kernel would read %{o.name} at {len(new)} positions per element "
                                f"(more than {RECOMPUTE_LIMIT}: a chain of stencil steps fuses one step "
                                "per kernel)")
                    reads[id(o)] = new
                    continue
                om, od = pending.get(id(o)) or (group.maps[id(o)], group.depth[id(o)])
                nm, nd = om | _read_maps(y, o, ym), max(od, yd + 1)
                if nm == om and nd == od:
                    continue
                reason = _cost_reason(o, nm, nd)
                if reason is not None:
                    return reason
                pending[id(o)] = (nm, nd)
                work.append(o)
        values = group.values + sum(len(m) - len(group.maps.get(k, ())) for k, (m, _) in pending.items())
        if values > MAX_VALUES:
            return f"the kernel would evaluate more than {MAX_VALUES} values per element"
        if id(x) not in group.ids and len(group.members) >= MAX_MEMBERS:
            return f"the kernel would hold more than {MAX_MEMBERS} instructions"
        self._pending = (group, pending, values, reads)
        return None

    def _commit_cost(self, group: _Group) -> None:
        pending_group, pending, values, reads = self._pending
        assert pending_group is group
        for k, (m, d) in pending.items():
            group.maps[k], group.depth[k] = m, d
            group.reads.pop(k, None)            # a member now, not an array read from outside
        group.reads.update(reads)
        group.values = values

    def _join(self, group: _Group, p: Instruction, users) -> None:
        """Add ``p`` (just checked with ``check_add``) to ``group``."""
        self._commit_cost(group)
        group.add(p, users)
        self.group_of[id(p)] = group

    def check(self, members: list[Instruction], users, cycles: bool = True) -> str | None:
        """Why ``members`` cannot be one kernel, or None if they can (``cycles=False``: a
        caller checks cycles its own way)."""
        ids = {id(m) for m in members}
        reduces = [m for m in members if m.opcode == "reduce"]
        spaces = {_reduce_space(r) for r in reduces}
        if len(spaces) > 1:
            return "reductions over different shapes or axes need separate kernels"
        if reduces:
            after: set[int] = set()      # members computed from a reduction inside the group
            for m in self._topological(members):
                if any(id(o) in ids and (o.opcode == "reduce" or id(o) in after) for o in m.operands):
                    after.add(id(m))
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
        if reduces and not trailing and sum(not o.shape.is_tuple for o in outputs) > 1:
            # The column kernel with several outputs walks the input column by column: two
            # column sums of a 1024x512 array took 2.1 ms fused against 2 x 50 us apart, a bias
            # gradient beside the activation gradient or the optimizer update 4-15x slower.
            return "a reduction over leading axes writes one array (several outputs would be " \
                   "written column by column)"
        params = {id(o) for m in members for o in m.operands if id(o) not in ids and o.opcode != "constant"}
        if len(params) > MAX_OPERANDS:
            return f"the kernel would read more than {MAX_OPERANDS} arrays"
        if not cycles:
            return None
        external_users = [u for m in members for u in users[id(m)] if id(u) not in ids]
        if self._reaches(external_users, ids, users, max(self._position[id(m)] for m in members)):
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
                group = _Group(instr, self._users, self._position, self._spans)
                self._groups.append(group)
                self.grow(group)
        self.merge_siblings()
        return self.materialize()

    def _trivial(self, instr: Instruction) -> bool:
        """Left standalone (no kernel): a reshape of what no kernel computes (a parameter, a
        dot's result) is a view, and so is a small slice (see ``_small_pick``)."""
        return (instr.opcode in ("reshape", "bitcast") and all(o.opcode not in FUSIBLE for o in instr.operands)) \
            or _small_pick(instr)

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

    def _try_add(self, group: _Group, p: Instruction, consumer: Instruction, users) -> bool:
        outside = [u for u in users[id(p)] if u not in group]
        # A value that must be written anyway (for the root or an unfusible user such as a
        # dot or tuple) is best computed here once and exported: a multi-output fusion.
        must_write = p is self.comp.root or any(u.opcode not in FUSIBLE for u in outside)
        must_write = must_write and p.opcode != "constant"     # constants are copied, never exported
        if _small_pick(p) and _SMALL_PICK_RATIO * p.shape.size <= max(_size(d) for d in group.dims):
            return self._refuse(p, consumer, f"a slice of at most {SMALL_PICK} elements is read as a value "
                                             "(a view), so that kernels differing only in its offset (the "
                                             "steps of a time loop) are one code")
        if p.opcode == "dynamic-update-slice" and any(u.opcode in FUSIBLE for u in outside):
            # Its other readers would need it too: an update is computed once, by the kernel
            # that writes it, and read from memory by the others (tried again once they join).
            return self._refuse(p, consumer, "the updated array has readers in other kernels: it is "
                                             "written once, by its own kernel")
        if outside and must_write and p.opcode not in NOT_DUPLICATED and \
                self.check_add(group, p, users) is None:
            self._join(group, p, users)
            return True
        if outside and p.opcode not in NOT_DUPLICATED and p.opcode != "constant" and not group.has_reduce and \
                all(u.opcode in FUSIBLE and u.opcode != "reduce" and id(u) not in self.group_of for u in outside) \
                and self.check_add(group, p, users) is None:
            # Elementwise work whose other readers are in no kernel yet, and most likely join
            # this one (a wide formula's shared temporaries): computed once here (exported if
            # they do not), rather than copied now and kept as a second kernel for them.
            # (Next to reductions, copies are kept: each reduction recomputes its input.)
            self._join(group, p, users)
            return True
        if outside and p.opcode not in NOT_DUPLICATED:
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
            owner = self.group_of.get(id(o))
            if owner is not None and owner is not group:     # ``o`` is read from outside now
                owner.stretch(self._position[id(o)], owner.last)
        return clone

    def _redirect(self, p: Instruction, copy: Instruction, group: _Group) -> list[Instruction]:
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
        self.comp.instructions.remove(clone)

    # ---- multi-output sibling fusion -------------------------------------------------------

    def merge_siblings(self) -> None:
        """Multi-output fusion: merge groups that read the same inputs (siblings) or where one
        reads what the other computes (producer and consumer), when one kernel can do both.

        Candidates come from an index of the groups by the arrays they read, so each group is
        compared with the few it shares an array with, not with every other group."""
        groups = list({id(g): g for g in self.group_of.values()}.values())
        inputs = {id(g): self._inputs(g) for g in groups}
        readers: dict[int, list[_Group]] = {}
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
                    a.stretch(b.first, a.last)
                    a.maps, a.depth, a.reads = merged
                    a.values = sum(len(v) for v in a.maps.values())
                    alive.discard(id(b))
                    inputs[id(a)] = self._inputs(a)
                    for k in inputs[id(a)]:
                        readers.setdefault(k, []).append(a)
                    grown = True
                    break

    def _merged_cost(self, a: _Group, b: _Group, users):
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
        maps, depth, reads = _index_maps(ordered, ids, outputs, users)
        if sum(len(v) for v in maps.values()) > MAX_VALUES or any(len(r) > RECOMPUTE_LIMIT for r in reads.values()):
            return None
        if any(_cost_reason(m, maps[id(m)], depth[id(m)]) is not None for m in ordered):
            return None
        return maps, depth, reads

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

    def _boundaries(self, groups: list[_Group], users) -> list[tuple]:
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

    def _apart_reason(self, a: _Group, b: _Group, users) -> str:
        why = self.check(a.members + b.members, users)
        if why is None:
            why = "recomputing values of one in the other would exceed the cost bounds " \
                  f"(at most {RECOMPUTE_LIMIT} positions per value, {MAX_VALUES} values per element)"
        return "the two kernels cannot be merged: " + why

    def _build_fusion(self, group: _Group, users, removed: set[int], placed: dict) -> None:
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
                if o.opcode == "constant":
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
