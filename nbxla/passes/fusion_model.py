"""Fusion's cost model and legality: what one kernel may hold and what it costs to evaluate there.

The fusion pass (``fusion.py``) grows groups of instructions; before an instruction joins a
group, the checks here say whether the group stays one legal kernel (no cycle, one iteration
space, reductions read only in their own space, at most ``MAX_OPERANDS`` arrays) and whether
recomputing values in it stays bounded.  Every member knows the *index maps* at which the
kernel evaluates it (an elementwise user reads its operand where it is itself evaluated; a
shifted slice, a reverse, a broadcast... read it elsewhere, so the elemental emitter computes it
again); the bounds on those maps are in ``cost_reason``.
"""


from __future__ import annotations

from dataclasses import dataclass, field

from ..hlo.ir import Instruction
from ..hlo.division import is_expensive
from ..hlo.opcodes import ELEMENTWISE, EXPENSIVE, NOT_KERNELS, TRANSCENDENTAL
from .fusion_groups import ROOT_MAPS, Group, Spans

# Arrays one kernel may read (XLA's GPU limit, operands and outputs: 96).  The count is of the
# group's frontier while it grows, which for a wide formula grown half-way is far wider than
# the inputs of the finished kernel (32 split an equation of state into 19 kernels).
MAX_OPERANDS = 96
# Recomputation is a cost comparison.  Keeping a value out of a kernel costs writing it once and
# reading it back (2 x its element size in bytes per element); evaluating it inside the kernel at
# n index maps costs (n - 1) x its flops more.  The kernel recomputes while the extra flops stay
# below what the traffic would cost, at FLOPS_PER_BYTE flops for the time one byte moves (a core
# streams ~10 GB/s and does ~20 GFlop/s in vector lanes).  So a stencil keeps a neighbour's
# Laplacian (5 flops at up to 7 extra positions is less than 2 x 8 bytes of f64 traffic: hdiff is
# one kernel), while a chain of stencil steps still splits (a step's 20 flops at 7 positions, or
# an add at 49 positions, is more).
FLOPS_PER_BYTE = 2
# Flops per evaluation of opcodes that are more than one instruction (see ``recompute_flops``).
EXPENSIVE_FLOPS = 16
# Index maps at which one value may be evaluated whatever its cost (data movement costs no flops;
# the emitter's work and the kernel's size grow with the maps).
MAX_MAPS = 64
# What one kernel may hold: instructions, evaluations per element (sum over members of their
# index maps; the emitter stops at 20000) and the longest chain (the emitter recurses along
# it, about four Python frames a level).
MAX_MEMBERS = 2000
MAX_VALUES = 4000
MAX_DEPTH = 180
# Slices this small stay out of kernels much larger than they are: a NumPy view passes them
# in (see ``small_pick``).
SMALL_PICK = 16
SMALL_PICK_RATIO = 64
# A transcendental of a scalar joins kernels of at most this many elements (each evaluates it
# per element); in larger ones it is computed once, apart.
SCALAR_RECOMPUTE_LIMIT = 64
# Likewise a transcendental whose values a larger kernel reads through a broadcast: it joins
# while each of its values is evaluated at most this many times (XLA keeps an expensive
# producer out of a consumer that reuses its elements).  Measured: a pressure-level factor
# ``(1000 / p) ** 0.2857`` over 30 levels, broadcast over a 64x64x30 grid, made the grid's
# kernel evaluate 122880 powers instead of 30.
TRANSCENDENTAL_REUSE = 8

# Constant arrays up to this many elements are copied into each kernel that reads them (a
# table in the kernel's code); larger ones are read from memory, an operand like any array, as
# XLA keeps large constants out of its fusions.  Why: each element becomes an LLVM constant
# in the kernel's IR (npbench's Stockham FFT: fifteen 32768-element complex twiddle tables,
# 9.6 s of CPU in code generation for 123 instructions; as operands, a fraction of that).
INLINE_CONSTANT_ELEMENTS = 4096

# Legality of a new member without reductions from the group's kept facts (``Group.outputs``),
# not by ``Legality.check`` over all members: the two give the same answers (tests compare the
# fusions made either way on random graphs, with this off).
INCREMENTAL_CHECKS = True

# Never duplicated into a consumer: an update rewrites a whole array (computed once, in place).
NOT_DUPLICATED = EXPENSIVE | {"dynamic-update-slice"}


def not_duplicated(instr: Instruction) -> bool:
    """``instr`` is computed once, never copied into several kernels: an opcode in
    ``NOT_DUPLICATED``, except a division that runs as a multiplication (``hlo.division``)."""
    return instr.opcode in NOT_DUPLICATED and (instr.opcode != "divide" or is_expensive(instr))


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


def reduce_space(r: Instruction):
    """(input dims, reduced dims) of a reduce."""
    return r.operands[0].shape.dims, tuple(sorted(r.attrs["dimensions"]))



def small_pick(instr: Instruction) -> bool:
    """A slice taking a few elements (``fict[t]``, ``x[0, :4]``) of a larger array."""
    return instr.opcode == "slice" and not instr.shape.is_tuple and instr.shape.size <= SMALL_PICK \
        and instr.operands[0].shape.size > instr.shape.size


def size_of(dims) -> int:
    n = 1
    for d in dims or ():
        n *= d
    return n


def _known(dims) -> bool:
    return dims is not None and all(isinstance(d, int) for d in dims)


def reused_by_broadcast(x: Instruction, dims) -> bool:
    """Whether a kernel over arrays of ``dims`` (above ``SCALAR_RECOMPUTE_LIMIT`` elements)
    has more than ``TRANSCENDENTAL_REUSE`` elements per element of ``x`` (known sizes only).
    (Kernels with a reduction keep a function of the reduced value, evaluated per row.)"""
    if x.shape.is_tuple or not _known(x.shape.dims):
        return False
    limit = max(SCALAR_RECOMPUTE_LIMIT, TRANSCENDENTAL_REUSE * size_of(x.shape.dims))
    return any(_known(d) and size_of(d) > limit for d in dims)


def same_index(user: Instruction, operand: Instruction) -> bool:
    """Does ``user`` read ``operand`` only at the index where ``user`` itself is evaluated
    (so that the emitter's memo shares one evaluation among such readers)?"""
    if operand.shape.is_tuple or user.shape.is_tuple:
        return False
    if operand.shape.size == 1:
        return True                 # one element (a scalar, ``x[None]``): every read is the same
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


def read_maps(user: Instruction, operand: Instruction, maps: frozenset) -> frozenset:
    """The maps at which ``operand`` is evaluated for ``user`` evaluated at ``maps``."""
    if same_index(user, operand):
        return maps
    if user.opcode == "slice" and not user.shape.is_tuple and all(s.stride == 1 for s in user.attrs["slice"]):
        # A shifted window: the operand is read at the user's position plus the starts.  Maps
        # are then offsets, so two paths to the same neighbour (``lap[1:] - lap[:-1]`` read
        # through two differences) count as one position, evaluated once.
        starts = tuple(s.start for s in user.attrs["slice"])
        return frozenset(_shifted(t, starts) for t in maps)
    return frozenset(hash((t, id(user))) for t in maps)


def _shifted(t, starts: tuple):
    """Map ``t`` (0: the output's own index; a tuple: an offset from it; else opaque) moved by
    ``starts``."""
    if t == 0:
        t = (0,) * len(starts)
    if not isinstance(t, tuple) or len(t) != len(starts):
        return hash((t, starts))
    moved = tuple(a + b for a, b in zip(t, starts))
    return 0 if not any(moved) else moved


def index_maps(members: list[Instruction], ids: set[int], outputs: set[int], users) -> tuple[dict, dict, dict]:
    """Index maps and depths of a group's members, and the maps at which it reads arrays from
    outside, from scratch (members in topological order)."""
    maps: dict[int, frozenset] = {}
    depth: dict[int, int] = {}
    reads: dict[int, frozenset] = {}
    for m in reversed(members):
        got, d = (ROOT_MAPS, 0) if id(m) in outputs else (frozenset(), 0)
        for u in users[id(m)]:
            if id(u) in ids:
                got = got | read_maps(u, m, maps[id(u)])
                d = max(d, depth[id(u)] + 1)
        maps[id(m)], depth[id(m)] = got or ROOT_MAPS, d
        for o in dict.fromkeys(m.operands):
            if id(o) not in ids and o.opcode != "constant" and not o.shape.is_tuple and o.shape.rank > 0:
                reads[id(o)] = reads.get(id(o), frozenset()) | read_maps(m, o, maps[id(m)])
    return maps, depth, reads


def recompute_flops(instr: Instruction) -> int:
    """Flops one more evaluation of ``instr`` per element costs: none for what only moves or
    picks values (a slice, broadcast, transpose...: the kernel reads another position), one for
    plain arithmetic, ``EXPENSIVE_FLOPS`` for transcendentals, divisions and reductions (a
    kernel holds a reduction's result per outer index: more maps of it are more reads of the
    held value and of its neighbours' rows, not its whole extent again)."""
    op = instr.opcode
    if is_expensive(instr):
        return EXPENSIVE_FLOPS
    if op in ELEMENTWISE and op not in ("convert", "copy", "bitcast-convert"):
        return 1
    return 0


def _leaf(instr: Instruction):
    return instr.shape.elements[0] if instr.shape.is_tuple else instr.shape


def traffic_flops(instr: Instruction) -> int:
    """What writing ``instr``'s value once and reading it back costs, in flops per element."""
    return FLOPS_PER_BYTE * 2 * max(1, _leaf(instr).dtype.itemsize)


def cost_reason(p: Instruction, maps: frozenset, depth: int) -> str | None:
    """Why ``p`` evaluated at ``maps`` (``depth`` below an output) is too costly, or None."""
    if p.opcode == "dynamic-update-slice" and len(maps) > 1:
        return ("an updated array read at several positions is written once by its own kernel "
                "(recomputing the update for each read multiplies the work)")
    if len(maps) > MAX_MAPS:
        return f"{p.opcode} would be evaluated at {len(maps)} positions per element (more than {MAX_MAPS})"
    extra, saved = (len(maps) - 1) * recompute_flops(p), traffic_flops(p)
    if extra > saved:
        return (f"{p.opcode} would be recomputed at {len(maps)} positions per element: {extra} flops more, "
                f"against {saved} for writing it once and reading it back")
    if depth > MAX_DEPTH:
        return f"the kernel's chain of operations would be deeper than {MAX_DEPTH}"
    return None


def read_cost_reason(o: Instruction, maps: frozenset) -> str | None:
    """Why a kernel reading the array ``o`` at ``maps`` is too costly, or None.  The reads are
    loads from the cache after the first; keeping the reader of one of them out of the kernel
    saves no traffic (a slice left out is a copy written and read back), so only the emitter's
    bound applies: what is computed from the reads is charged by ``cost_reason``."""
    if len(maps) > MAX_MAPS:
        return f"the kernel would read %{o.name} at {len(maps)} positions per element (more than {MAX_MAPS})"
    return None


def squeeze(dims) -> tuple[int, ...]:
    return tuple(n for n in dims if n != 1)


class Legality:
    """The graph queries and legality checks of ``fusion._Fuser`` (a mixin: it reads the fuser's
    computation, positions, users and groups)."""

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
        self._spans = Spans(len(self.comp.instructions))

    def _reaches(self, start: list[Instruction], targets: set[int], users, limit: float) -> bool:
        """Is any of ``targets`` (none placed after position ``limit``) reachable from
        ``start`` along user edges?

        Other groups count as single nodes (they become one fusion): reaching any member of
        one reaches the users of all its members.  Instructions are in topological order, so
        the walk stops at a group whose outputs all come after ``limit``: what it leads to comes
        after them (without this, every legality check walked the rest of the module, quadratic
        on long programs).  An ungrouped instruction after ``limit`` stops it too.  Neither
        stops it while some group spans ``limit`` (an output before it, a member after it):
        through such a group a walk comes back, also from a group past ``limit`` (a chain of
        groups, each feeding the next, led back into the kernel: a cycle).
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
            if position[id(instr)] > limit and not spanning and (group is None or group.first > limit):
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

    def check_add(self, group: Group, p: Instruction, users) -> str | None:
        """``check(group.members + [p])``, in time independent of the group's size when
        neither has a reduction and all have one shape (long elementwise chains).  On success
        the index maps ``p`` would bring are kept for ``_join``."""
        reason = self._cost(group, p)
        if reason is not None:
            return reason
        if group.has_reduce or p.opcode == "reduce" or p.shape.is_tuple or None in group.dims or \
                not INCREMENTAL_CHECKS:
            return self.check(group.members + [p], users, cycles=False) or self._cycle_with(group, p, users)
        # Without reductions, ``check`` asks two things: one shape for every output, and the
        # operand count; both follow from the group's kept facts.  (Asking ``check`` walked every
        # member's users per candidate: quadratic, 20 ms of crc16's fusion, whose loop body mixes
        # scalars and one-element arrays.)
        if (not (p.opcode == "constant" and p.shape.rank == 0) and group.dims != {p.shape.dims}) and \
                len(group.output_dims_after(p, users)) > 1:
            return "outputs of different shapes cannot share one loop"
        params = len(group.params) - (id(p) in group.params) + \
            sum(1 for o in dict.fromkeys(p.operands)
                if id(o) not in group.ids and id(o) not in group.params and o.opcode != "constant")
        if params > MAX_OPERANDS:
            return f"the kernel would read more than {MAX_OPERANDS} arrays"
        return self._cycle_with(group, p, users)

    def _cycle_with(self, group: Group, p: Instruction, users) -> str | None:
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

    def _cost(self, group: Group, x: Instruction) -> str | None:
        """Why evaluating ``x`` in ``group`` (a new member, or a member with new readers) costs
        too much, or None; then ``self._pending`` holds the new maps and depths of ``x`` and
        of the members below it, for ``_join``."""
        users = self._users[id(x)]
        if x.shape.rank == 0 and x.opcode in TRANSCENDENTAL and \
                any(size_of(d) > SCALAR_RECOMPUTE_LIMIT for d in group.dims if d is not None):
            # (the elemental emitter evaluates it at every element: a complex power of one
            # scalar, broadcast over a 50x50 matrix, cost 2500 powers per loop step)
            return (f"{x.opcode} of a scalar would be recomputed at every element of the kernel: it is "
                    "computed once, in its own kernel")
        if x.opcode in TRANSCENDENTAL and not group.has_reduce and reused_by_broadcast(x, group.dims):
            return (f"each value of {x.opcode} would be recomputed more than {TRANSCENDENTAL_REUSE} times "
                    "(it is broadcast over a larger kernel): it is computed once, in its own kernel")
        maps = group.maps.get(id(x), frozenset())
        depth = group.depth.get(id(x), 0)
        exported = x is self.comp.root
        for u in users:
            if id(u) in group.ids:
                maps = maps | read_maps(u, x, group.maps[id(u)])
                depth = max(depth, group.depth[id(u)] + 1)
            elif u is not x:
                exported = True
        if exported or not maps:
            maps = maps | ROOT_MAPS
        reason = cost_reason(x, self._with_twin(group, x, maps), depth)
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
                    new = old | read_maps(y, o, ym)
                    reason = read_cost_reason(o, new)
                    if reason is not None:
                        return reason
                    reads[id(o)] = new
                    continue
                om, od = pending.get(id(o)) or (group.maps[id(o)], group.depth[id(o)])
                nm, nd = om | read_maps(y, o, ym), max(od, yd + 1)
                if nm == om and nd == od:
                    continue
                reason = cost_reason(o, self._with_twin(group, o, nm), nd)
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

    @staticmethod
    def _with_twin(group: Group, x: Instruction, maps: frozenset) -> frozenset:
        """``maps`` with those of ``x``'s twin in ``group`` (its copy, or the original of a
        copy): the fused computation's CSE makes the two one value evaluated at both."""
        twin = group.clones.get(id(x)) or group.origin.get(id(x))
        if twin is not None and id(twin) in group.ids:
            return maps | group.maps.get(id(twin), frozenset())
        return maps

    def _commit_cost(self, group: Group) -> None:
        pending_group, pending, values, reads = self._pending
        assert pending_group is group
        for k, (m, d) in pending.items():
            group.maps[k], group.depth[k] = m, d
            group.reads.pop(k, None)            # a member now, not an array read from outside
        group.reads.update(reads)
        group.values = values

    def _join(self, group: Group, p: Instruction, users) -> None:
        """Add ``p`` (just checked with ``check_add``) to ``group``."""
        self._commit_cost(group)
        group.add(p, users)
        self.group_of[id(p)] = group

    def check(self, members: list[Instruction], users, cycles: bool = True) -> str | None:
        """Why ``members`` cannot be one kernel, or None if they can (``cycles=False``: a
        caller checks cycles its own way)."""
        ids = {id(m) for m in members}
        reduces = [m for m in members if m.opcode == "reduce"]
        spaces = {reduce_space(r) for r in reduces}
        if len(spaces) > 1:
            return "reductions over different shapes or axes need separate kernels"
        if reduces:
            after: set[int] = set()      # members computed from a reduction inside the group
            for m in self._topological(members):
                if any(id(o) in ids and (o.opcode == "reduce" or id(o) in after) for o in m.operands):
                    after.add(id(m))
            (in_dims, red) = next(iter(spaces))
            outer = squeeze(n for i, n in enumerate(in_dims) if i not in red)
            trailing = tuple(red) == tuple(range(len(in_dims) - len(red), len(in_dims)))
            for m in members:
                if id(m) not in after or m.shape.is_tuple:
                    continue
                # A reduced value is held per outer index: what follows may only read it at
                # that same index (no reverse, transpose, slice... of reduced values).
                if not (m.is_elementwise or m.opcode in ("broadcast", "reduce", "constant") or
                        (m.opcode in ("reshape", "bitcast") and
                         squeeze(m.shape.dims) == squeeze(m.operands[0].shape.dims))):
                    return f"a reduction's result is read by {m.opcode} at other positions"
                if squeeze(m.shape.dims) == outer:          # the reduced space (keepdims too)
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
        if reduces and any(not o.shape.is_tuple and o.shape.dims != in_dims and squeeze(o.shape.dims) != outer
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
