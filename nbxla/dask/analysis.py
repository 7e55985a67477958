"""Which axes of a traced module follow the dask chunks, and where the module must be cut.

Every (instruction, dimension) pair is a node; an operation that maps an index of its operand
straight onto an index of its result (elementwise ops, broadcasts, transposes, the kept dims of
a reduce, the batch and free dims of a dot, a stride-1 slice) joins the two nodes in one *axis
class*.  A class holding a chunked dimension of a dask argument is a *chunked axis*: blocks of
every value in it can be computed from blocks of the inputs, one kernel per block.

Where an operation needs a whole chunked axis at once, the module is cut or the axis is
given up:

* a ``reduce`` (add/multiply/max/min/and/or) or a ``dot`` contracting a chunked axis is a
  *boundary*: each block computes a partial, dask's tree reduction combines them, and what
  follows runs in a later *stage*;
* a stride-1 ``slice`` keeps its axis (stencils): the block then needs a halo, measured by the
  *window* each value reads along the axis;
* anything else that mixes positions along a chunked axis (a sort, a cumulative sum, a
  reshape merging it, a gather, ...) makes that axis *whole*: its inputs are rechunked to one
  block along it when that is cheap, otherwise an ``NbxlaError`` names the line.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..hlo import Instruction, Module
from ..hlo.opcodes import OPCODES
from ..hlo.reducers import IDEMPOTENT, REDUCER_OPS, is_identity, reducer_op

# Reducers a tree reduction may apply in any grouping, and the init each must have (None: any
# init, because applying the op to it twice changes nothing).
# Reducer ops a blocked reduction combines block results with (hlo/reducers.py; xor is left to
# one whole-array reduce).
BLOCK_COMBINABLE = REDUCER_OPS - {"xor"}


@dataclass
class ParamInfo:
    """An entry parameter: a dask array (with its chunks) or a whole NumPy array."""
    name: str
    chunks: tuple[tuple[int, ...], ...] | None      # None: a NumPy array (or scalar)


@dataclass
class Analysis:
    module: Module
    instrs: list[Instruction]                        # the entry's instructions, in order
    outputs: list[Instruction]                       # the function's traced results
    index: dict[int, int]                            # id(instruction) -> position in instrs
    classes: dict[tuple[int, int], int]              # (position, dim) -> axis class id
    chunks: dict[int, tuple[int, ...]]               # chunked class -> its chunks
    whole: dict[int, str] = field(default_factory=dict)   # class made whole -> why (for the report)
    window: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)
    dep: set[int] = field(default_factory=set)       # positions that depend on a dask argument
    # position -> the chunked classes it reduces (a tree reduction ends its stage there)
    boundary: dict[int, tuple[int, ...]] = field(default_factory=dict)
    level: dict[int, int] = field(default_factory=dict)

    def cls(self, instr: Instruction, dim: int) -> int | None:
        """The chunked class of ``instr``'s dimension ``dim``, or None when it is not chunked."""
        c = self.classes.get((self.index[id(instr)], dim))
        return c if c in self.chunks else None

    def anchor(self, instr: Instruction, dim: int) -> int:
        """Index ``i`` of ``instr`` along ``dim`` belongs to the block holding base position
        ``i + anchor`` (its window's low end; 0 for values no dask argument feeds)."""
        w = self.window.get((self.index[id(instr)], dim))
        return w[0] if w is not None else 0


class _UnionFind:
    def __init__(self):
        self.parent: dict = {}

    def find(self, x):
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a, b):
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def value_dims(instr: Instruction) -> tuple[int, ...] | None:
    """The dims of a value: an array's, or those every element of a tuple shares (the results
    of a variadic reduce or sort); None for other tuples."""
    s = instr.shape
    if not s.is_tuple:
        return s.dims
    if s.elements and all(not e.is_tuple for e in s.elements) and len({e.dims for e in s.elements}) == 1:
        return s.elements[0].dims
    return None


def dim_links(instr: Instruction) -> tuple[list[tuple[int, int, int]], list[int], list[tuple[int, int]]]:
    """How ``instr`` maps operand dims onto its own: ``(operand, operand_dim, out_dim)`` links;
    the out dims it reduces positions of one operand into (reduce, dot); and the operand
    dims whose positions it mixes, ``(operand, dim)`` (these cannot stay chunked)."""
    op = instr.opcode
    links, mixed = [], []
    out_dims = value_dims(instr)
    if out_dims is None or any(value_dims(o) is None for o in instr.operands) or op == "tuple":
        return [], [], [(k, d) for k, o in enumerate(instr.operands) if value_dims(o) is not None
                        for d in range(len(value_dims(o)))]
    shape = instr.shape if not instr.shape.is_tuple else instr.shape.elements[0]
    if op == "get-tuple-element":
        return [(0, d, d) for d in range(len(out_dims))], [], []
    if OPCODES[op].elementwise:
        for k, o in enumerate(instr.operands):
            if o.shape.rank == shape.rank:
                links += [(k, d, d) for d in range(shape.rank) if o.shape.dims[d] == shape.dims[d]]
        return links, [], []
    a = instr.attrs
    if op == "broadcast":
        x = instr.operands[0]
        for k, d in enumerate(a.get("dimensions", ())):
            if x.shape.dims[k] == shape.dims[d]:
                links.append((0, k, d))
            else:
                mixed.append((0, k))
        return links, [], mixed
    if op == "transpose":
        return [(0, p, i) for i, p in enumerate(a["dimensions"])], [], []
    if op == "reshape":
        mapping = reshape_dim_map(instr.operands[0].shape.dims, shape.dims)
        x = instr.operands[0]
        return ([(0, k, j) for k, j in mapping.items()], [],
                [(0, k) for k in range(x.shape.rank) if k not in mapping and x.shape.dims[k] > 1])
    if op == "slice":
        for d, s in enumerate(a["slice"]):
            if s.stride == 1:
                links.append((0, d, d))
            else:
                mixed.append((0, d))
        return links, [], mixed
    if op == "reduce":
        n_inputs = len(instr.operands) // 2
        kept = [d for d in range(instr.operands[0].shape.rank) if d not in a["dimensions"]]
        return ([(k, d, j) for k in range(n_inputs) for j, d in enumerate(kept)],
                list(a["dimensions"]), [])
    if op == "dot":
        lhs, rhs = instr.operands
        lb, rb = a.get("lhs_batch_dims", ()), a.get("rhs_batch_dims", ())
        lc, rc = a.get("lhs_contracting_dims", ()), a.get("rhs_contracting_dims", ())
        out = 0
        for i, j in zip(lb, rb):
            links += [(0, i, out), (1, j, out)]
            out += 1
        for side, (x, batch, contract) in enumerate(((lhs, lb, lc), (rhs, rb, rc))):
            for d in range(x.shape.rank):
                if d not in batch and d not in contract:
                    links.append((side, d, out))
                    out += 1
        return links, list(lc), []
    same_rank = [k for k, o in enumerate(instr.operands) if len(value_dims(o)) == shape.rank]
    if op in ("concatenate", "pad", "reverse", "sort", "reduce-window"):
        fixed = _positional_dims(instr)
        for k in same_rank:
            for d in range(shape.rank):
                (links.append((k, d, d)) if d not in fixed else mixed.append((k, d)))
        return links, [], mixed
    return [], [], [(k, d) for k, o in enumerate(instr.operands) for d in range(o.shape.rank)]


def _positional_dims(instr: Instruction) -> set[int]:
    """The dims along which a concatenate/pad/reverse/sort/reduce-window moves positions."""
    a, op = instr.attrs, instr.opcode
    if op in ("concatenate", "reverse", "sort"):
        return set(a.get("dimensions", ()))
    if op == "pad":
        return {d for d, p in enumerate(a["padding"]) if (p.low, p.high, p.interior) != (0, 0, 0)}
    return {d for d, w in enumerate(a["window"].dims)
            if (w.size, w.stride, w.pad_low, w.pad_high, w.base_dilation, w.window_dilation)
            != (1, 1, 0, 0, 1, 1)}


def reshape_dim_map(src: tuple[int, ...], dst: tuple[int, ...]) -> dict[int, int]:
    """Operand dim -> result dim for dims a row-major reshape leaves intact (same size, same
    product of the dims before it, so the index along it is unchanged)."""
    out = {}
    for k, n in enumerate(src):
        before = int(np.prod(src[:k], dtype=np.int64))
        for j, m in enumerate(dst):
            if m == n and int(np.prod(dst[:j], dtype=np.int64)) == before:
                out[k] = j
                break
    return out


def analyze(module: Module, params: list[ParamInfo], describe) -> Analysis:
    """Axis classes, chunked axes, windows, boundaries and stage levels of ``module``.

    ``describe(instr)`` names an instruction for the report (its source line and operation).
    """
    entry = module.entry
    instrs = list(entry.instructions)
    index = {id(i): n for n, i in enumerate(instrs)}
    root = entry.root
    outputs = list(root.operands) if root.opcode == "tuple" else [root]
    uf = _UnionFind()
    mixed: list[tuple[tuple[int, int], Instruction]] = []
    reduced: dict[int, list[tuple[int, int]]] = {}   # position -> operand nodes it reduces
    for n, instr in enumerate(instrs):
        if instr is root and root.opcode == "tuple":
            continue
        for d in range(len(value_dims(instr) or ())):
            uf.find((n, d))
        links, reduces, mixes = dim_links(instr)
        for k, d, j in links:
            uf.union((index[id(instr.operands[k])], d), (n, j))
        for k, d in mixes:
            mixed.append(((index[id(instr.operands[k])], d), instr))
        if instr.opcode == "reduce" and reduces:
            reduced[n] = [(index[id(instr.operands[0])], d) for d in reduces]
            for other in instr.operands[1:len(instr.operands) // 2]:    # a variadic reduce's inputs
                for d in reduces:
                    uf.union((index[id(instr.operands[0])], d), (index[id(other)], d))
            if not _tree_reducible(instr):
                mixed += [(node, instr) for node in reduced[n]]
        elif instr.opcode == "dot" and reduces:
            lhs, rhs = instr.operands
            for i, j in zip(instr.attrs["lhs_contracting_dims"], instr.attrs["rhs_contracting_dims"]):
                uf.union((index[id(lhs)], i), (index[id(rhs)], j))
            reduced[n] = [(index[id(lhs)], i) for i in reduces]
    numbers: dict = {}          # class roots -> 0, 1, 2, ... in order of first appearance
    classes = {node: numbers.setdefault(uf.find(node), len(numbers)) for node in list(uf.parent)}

    # Chunked classes, and the dask arguments in each.
    members: dict[int, list[tuple[Instruction, int]]] = {}
    for p in entry.parameters:
        info = params[p.parameter_number]
        if info.chunks is None:
            continue
        for d, ch in enumerate(info.chunks):
            members.setdefault(classes[(index[id(p)], d)], []).append((p, d))
    chunks = {}
    for c, ms in members.items():
        picked = max((params[p.parameter_number].chunks[d] for p, d in ms), key=len)
        if len(picked) > 1:
            chunks[c] = picked
    a = Analysis(module, instrs, outputs, index, classes, chunks)

    def make_whole(c, why):
        if c in a.chunks and c not in a.whole:
            a.whole[c] = why
    for node, instr in mixed:
        make_whole(classes.get(node), f"{describe(instr)} mixes positions along an axis")
    for c, ms in members.items():
        if c in chunks and len({p.shape.dims[d] for p, d in ms}) > 1:
            make_whole(c, "dask arguments of different lengths meet along the axis")
    for n, instr in enumerate(instrs):
        seen = {}
        for d in range(len(value_dims(instr) or ())):
            c = classes.get((n, d))
            if c in chunks and c in seen:
                make_whole(c, f"{describe(instr)} has two dims ({seen[c]} and {d}) on the same axis")
            seen[c] = d
    for c in a.whole:
        del a.chunks[c]

    # Which values depend on dask arguments; reduction boundaries; windows; stage levels.
    dask_params = {index[id(p)] for p in entry.parameters if params[p.parameter_number].chunks is not None}
    for n, instr in enumerate(instrs):
        if n in dask_params or any(index[id(o)] in a.dep for o in instr.operands):
            a.dep.add(n)
        cs = tuple(sorted({classes[node] for node in reduced.get(n, ()) if classes[node] in a.chunks}))
        if cs and n in a.dep:
            a.boundary[n] = cs
    _windows(a, dask_params)
    for c in a.chunks:
        # A halo must come from the next block alone, also for values that start later or
        # end earlier than the arguments (their first and last blocks are shorter): chunks
        # must be at least the widest window plus the largest shift or shortening.
        base = sum(a.chunks[c])
        in_c = [(lo, hi, value_dims(instrs[n])[d])
                for (n, d), (lo, hi) in a.window.items() if classes[(n, d)] == c]
        width = max([hi - lo for lo, hi, _ in in_c] or [0])
        if width:
            width += max(hi + base - size for lo, hi, size in in_c)
        a.chunks[c] = merge_small_chunks(a.chunks[c], width)
    for n, instr in enumerate(instrs):
        if n not in a.dep or n in dask_params:
            a.level[n] = 0
            continue
        a.level[n] = max([a.level[index[id(o)]] for o in instr.operands if index[id(o)] in a.dep]
                         or [0]) + (1 if n in a.boundary else 0)
    return a


def _tree_reducible(instr: Instruction) -> bool:
    """A one-operand reduce whose reducer is one associative op and whose init is that op's
    identity (so every block may apply it once)."""
    op = reducer_op(instr.attrs["to_apply"])
    if len(instr.operands) != 2 or op not in BLOCK_COMBINABLE:
        return False
    init = instr.operands[1]
    return init.opcode == "constant" and \
        (op in IDEMPOTENT or is_identity(op, init.literal, init.shape.element_type))


def _windows(a: Analysis, dask_params: set[int]) -> None:
    """``window[(n, d)] = (lo, hi)``: value ``n`` at index ``i`` along chunked dim ``d`` reads
    base positions ``i+lo .. i+hi`` of the dask arguments (stencils widen it)."""
    for n, instr in enumerate(a.instrs):
        if n not in a.dep or value_dims(instr) is None:
            continue
        if n in dask_params:
            for d in range(instr.shape.rank):
                if a.classes[(n, d)] in a.chunks:
                    a.window[(n, d)] = (0, 0)
            continue
        links, _, _ = dim_links(instr)
        for k, d, j in links:
            w = a.window.get((a.index[id(instr.operands[k])], d))
            if w is None:
                continue
            if instr.opcode == "slice":
                s = instr.attrs["slice"][d].start
                w = (w[0] + s, w[1] + s)
            old = a.window.get((n, j))
            a.window[(n, j)] = w if old is None else (min(old[0], w[0]), max(old[1], w[1]))


def merge_small_chunks(chunks: tuple[int, ...], width: int) -> tuple[int, ...]:
    """Chunks each at least ``width`` long (merging neighbours), so that a halo of ``width``
    positions lies within the next block."""
    if all(c >= width for c in chunks):
        return chunks
    out: list[int] = []
    for c in chunks:
        if out and out[-1] < width:
            out[-1] += c
        else:
            out.append(c)
    if len(out) > 1 and out[-1] < width:
        last = out.pop()
        out[-1] += last
    return tuple(out)
