"""Cut an analysed module into stages, and work out what each block of a stage reads.

A *stage* is every value at one level (see ``analysis``): one compiled kernel per block
computes them together, fused by the usual pipeline.  Its inputs are dask arrays (the
arguments, tree-reduction results, values of earlier stages) and whole NumPy leaves (NumPy
arguments, constants and iotas that lie along a chunked axis), which each task slices to what
its block reads.  Its outputs are the values later stages or the caller need, and the
per-block *partials* of the reductions that end it.

Ranges are half-open ``(start, stop)`` index pairs, one per dimension, in each value's own
index space.  Index ``i`` of value ``v`` along a chunked axis belongs to the block whose base
range holds ``i + anchor(v)``; a block's requirement is propagated backwards through every
instruction (a stride-1 slice shifts it), so a stencil reads a few positions of the next
block: that is its halo.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from ..hlo import Instruction
from .analysis import Analysis, dim_links, value_dims

Range = tuple[int, int]
Ranges = tuple[Range, ...]


@dataclass
class Stage:
    level: int
    compute: list[int]                      # positions computed here, in order
    partials: list[int]                     # boundary positions whose per-block partial ends here
    outputs: list[tuple[str, int]]          # ("value", n) or ("partial", n)
    inputs: list[int] = field(default_factory=list)    # dask-array inputs (positions)
    leaves: list[int] = field(default_factory=list)    # whole NumPy leaves (positions)
    axes: list[int] = field(default_factory=list)      # chunked classes the blocks run over


def split_stages(a: Analysis) -> list[Stage]:
    """Stages in level order; a value a later stage (or the caller) needs is an output."""
    top = max([a.level[n] for n in a.dep] or [0])
    out_positions = {a.index[id(o)] for o in a.outputs}
    needed_later: set[int] = set()
    for n, instr in enumerate(a.instrs):
        uses = [a.index[id(o)] for o in instr.operands]
        if n in a.dep:
            consumer_level = a.level[n] - (1 if n in a.boundary else 0)
            needed_later.update(u for u in uses if u in a.dep and a.level[u] < consumer_level
                                and not _is_source(a, u))
    stages = []
    for level in range(top + 1):
        compute = [n for n in sorted(a.dep) if a.level[n] == level and not _is_source(a, n)]
        partials = [n for n in sorted(a.boundary) if a.level[n] == level + 1]
        outputs = [("value", n) for n in compute if n in needed_later or n in out_positions]
        if level == 0:      # results no dask argument feeds come out of the first stage
            outputs += [("value", n) for n in sorted(out_positions) if n not in a.dep]
        outputs += [("partial", n) for n in partials]
        if outputs:
            stages.append(_close(a, Stage(level, compute, partials, outputs)))
    return stages


def _is_source(a: Analysis, n: int) -> bool:
    """A value that is a dask array before any stage runs at its level: an argument or a
    tree-reduction result."""
    instr = a.instrs[n]
    return n in a.boundary or (instr.opcode == "parameter" and n in a.dep)


def _close(a: Analysis, st: Stage) -> Stage:
    """Find the stage's inputs, leaves and the instructions it recomputes (values no dask
    argument feeds: each stage recomputes what it uses of those)."""
    reached: list[int] = []
    seen: set[int] = set()

    def visit(n: int) -> None:
        if n in seen:
            return
        seen.add(n)
        instr = a.instrs[n]
        if n in a.dep and (_is_source(a, n) or a.level[n] < st.level):
            st.inputs.append(n)
        elif n not in a.dep and _is_leaf(a, instr):
            st.leaves.append(n)
        else:
            for o in instr.operands:
                visit(a.index[id(o)])
            reached.append(n)
    for kind, n in st.outputs:
        if kind == "partial":
            seen.add(n)
            for o in a.instrs[n].operands:
                visit(a.index[id(o)])
        else:
            visit(n)
    st.compute = sorted(reached)
    axes = set()
    for n in st.compute + st.inputs + st.leaves + st.partials:
        instr = a.instrs[n]
        for d in range(len(value_dims(instr) or ())):
            c = a.cls(instr, d)
            if c is not None:
                axes.add(c)
    for n in st.partials:
        axes.update(a.boundary[n])
    st.axes = sorted(axes)
    return st


def _is_leaf(a: Analysis, instr: Instruction) -> bool:
    """A value with no operands that a block cannot make itself: a NumPy argument, or a
    constant or iota along a chunked axis (a task slices it to the block)."""
    if instr.opcode == "parameter":
        return True
    if instr.opcode in ("constant", "iota"):
        return any(a.cls(instr, d) is not None for d in range(instr.shape.rank))
    return False


def blocks(a: Analysis, st: Stage):
    """Every block index of the stage: a dict class -> block number."""
    counts = [len(a.chunks[c]) for c in st.axes]
    for idx in itertools.product(*[range(n) for n in counts]):
        yield dict(zip(st.axes, idx))


def base_range(a: Analysis, c: int, b: int) -> Range:
    ch = a.chunks[c]
    start = sum(ch[:b])
    return start, start + ch[b]


def anchored(a: Analysis, instr: Instruction, block: dict[int, int]) -> Ranges:
    """The ranges of ``instr`` that belong to ``block`` (whole along unchunked dims)."""
    out = []
    for d, size in enumerate(value_dims(instr) or ()):
        c = a.cls(instr, d)
        if c is None or c not in block:
            out.append((0, size))
            continue
        lo, hi = base_range(a, c, block[c])
        shift = a.anchor(instr, d)
        out.append((min(max(lo - shift, 0), size), min(max(hi - shift, 0), size)))
    return tuple(out)


def operand_requirement(instr: Instruction, k: int, need: Ranges) -> Ranges:
    """What operand ``k`` of ``instr`` must hold for ``instr`` to produce ``need``."""
    x = instr.operands[k]
    req = [(0, n) for n in value_dims(x) or ()]
    links, _, _ = dim_links(instr)
    for kk, d, j in links:
        if kk != k:
            continue
        s, e = need[j]
        if instr.opcode == "slice":
            start = instr.attrs["slice"][d].start
            s, e = s + start, e + start
        req[d] = (s, e)
    return tuple(req)


def partial_requirements(a: Analysis, instr: Instruction, block: dict[int, int]) -> list[Ranges]:
    """What the operands of a boundary (reduce or dot) must hold for this block's partial: the
    dims it reduces along chunked axes cover the block, the others as for the value itself."""
    need = anchored(a, instr, block)
    reqs = []
    reduced_axis: dict[int, Range] = {}
    for k in range(len(instr.operands) if instr.opcode == "dot" else 1):
        req = list(operand_requirement(instr, k, need))
        x = instr.operands[k]
        dims = (instr.attrs["dimensions"] if instr.opcode == "reduce" else
                instr.attrs["lhs_contracting_dims" if k == 0 else "rhs_contracting_dims"])
        for i, d in enumerate(dims):
            if a.cls(x, d) is not None:
                # lhs and rhs contracting dims cover the same positions (the lhs's block)
                req[d] = reduced_axis.setdefault(i, anchored(a, x, block)[d])
        reqs.append(tuple(req))
    if instr.opcode == "reduce":
        reqs.append(())                     # the init: a scalar
    return reqs


@dataclass
class BlockRanges:
    """For one block: what each value holds (``need``) and what each use reads (``uses``)."""
    need: dict[int, Ranges]
    uses: dict[tuple[int, int], Ranges]          # (consumer position, operand number) -> ranges


def block_ranges(a: Analysis, st: Stage, block: dict[int, int]) -> BlockRanges:
    need: dict[int, Ranges] = {}
    uses: dict[tuple[int, int], Ranges] = {}

    def require(n: int, r: Ranges) -> None:
        old = need.get(n)
        need[n] = r if old is None else tuple((min(s0, s1), max(e0, e1))
                                              for (s0, e0), (s1, e1) in zip(old, r))
    for kind, n in st.outputs:
        instr = a.instrs[n]
        if kind == "value":
            require(n, anchored(a, instr, block))
        else:
            for k, r in enumerate(partial_requirements(a, instr, block)):
                uses[(n, k)] = r
                require(a.index[id(instr.operands[k])], r)
    for n in reversed(st.compute):
        instr = a.instrs[n]
        if n not in need:
            continue
        for k, o in enumerate(instr.operands):
            r = operand_requirement(instr, k, need[n])
            uses[(n, k)] = r
            require(a.index[id(o)], r)
    return BlockRanges(need, uses)
