"""A traced function planned over dask chunks, and the dask graph each call builds from it.

``DaskPlan`` is made once per argument signature (shapes, dtypes, chunks, constants): it
holds the stages, each block's compiled-kernel spec (optimized HLO text) and the report.  A
call turns it into dask arrays: a layer of ``nbxla-fused-...`` tasks per stage (one per
block, each running one kernel), ``dask.array.reduction`` for partials (tree combine by a
compiled reduce), ``rechunk`` for arguments whose chunks must change, and dask's
``overlap`` (the halo exchange ``map_overlap`` uses) for stencils.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import operator
from dataclasses import dataclass, field

import numpy as np

from ..errors import NbxlaError
from ..frontend.trace import TracedProgram, tree_unflatten
from .analysis import Analysis
from .kernels import BlockKernel, KernelSpec, build_block_module, leaf_value, shared_block_kernels
from .stages import Ranges, Stage, anchored, block_ranges, blocks, split_stages
from .worker import BlockCall, Combine, StageCall, combine_spec, identity, warm

# Partials a tree reduction combines at a time (per reduced axis).
SPLIT_EVERY = 16
# An axis is made whole (one block along it) only while each block stays below this size.
MAX_WHOLE_BLOCK_BYTES = 512 * 2**20


class DaskSplitError(NbxlaError):
    """A function whose work cannot be split over the dask chunks it was given."""


@dataclass
class StagePlan:
    stage: Stage
    name: str
    calls: dict[tuple, BlockCall]                   # block index (over stage.axes) -> call
    kernels: dict[str, tuple[BlockKernel, int]]     # kernel key -> (kernel, how many blocks)
    depth: dict[tuple[int, int], tuple[int, int]]   # (input, dim) -> halo (left, right)
    out_chunks: list[tuple]
    blockwise: bool = False         # built with da.blockwise (see DaskPlan._blockwise_stage)


@dataclass
class DaskPlan:
    name: str
    program: TracedProgram
    analysis: Analysis
    param_chunks: dict[int, tuple]                  # entry parameter -> the chunks it needs
    stages: list[StagePlan]
    leaf_values: dict[int, np.ndarray]              # constants / iotas the tasks slice
    notes: list[str] = field(default_factory=list)
    task_count: int | None = None                   # of the last call's graph
    warmed: set = field(default_factory=set)        # (client, workers) that have every kernel
    warm_note: str = ""
    _last_results: list = field(default_factory=list, repr=False)

    # ---- building the dask graph of a call -------------------------------------------------
    def run(self, leaves: list):
        a, prog = self.analysis, self.program
        arrays: dict[int, object] = {}
        numpy_leaves: dict[int, object] = dict(self.leaf_values)
        for number, leaf_index in enumerate(prog.param_leaves):
            p = a.module.entry.parameters[number]
            value = leaves[leaf_index]
            if number in self.param_chunks:
                if value.chunks != self.param_chunks[number]:
                    value = value.rechunk(self.param_chunks[number])
                arrays[a.index[id(p)]] = value
            else:
                numpy_leaves[a.index[id(p)]] = np.asarray(value)
        # Task keys name this call's inputs (like dask's own tokens): the same inputs give the
        # same keys, so results already in a cluster's memory are reused, and others never are.
        from dask.base import tokenize
        call_token = tokenize(*[arrays[k].name for k in sorted(arrays)],
                              *[numpy_leaves[k] for k in sorted(numpy_leaves)])[:10]
        for sp in self.stages:
            self._run_stage(sp, arrays, numpy_leaves, call_token)
        results = []
        for kind, value in prog.out_slots:
            if kind == "out":
                value = arrays[a.index[id(a.outputs[value])]]
            results.append(value)
        out = tree_unflatten(prog.out_treedef, results)
        self.warm_workers()
        collections = [r for r in results if hasattr(r, "__dask_graph__")]
        if collections:
            self.task_count = len({k for c in collections for k in c.__dask_graph__().keys()})
            self._last_results = collections
        return out

    def _run_stage(self, sp: StagePlan, arrays: dict, numpy_leaves: dict, call_token: str) -> None:
        import dask.array as da
        from dask.array.overlap import overlap
        from dask.base import tokenize
        from dask.highlevelgraph import HighLevelGraph
        a, st = self.analysis, sp.stage
        name = f"{sp.name}-{call_token}"
        inputs = []
        for n in st.inputs:
            x = arrays[n]
            depth = {d: lr for (m, d), lr in sp.depth.items() if m == n and lr != (0, 0)}
            if depth:
                x = overlap(x, depth={d: depth.get(d, 0) for d in range(x.ndim)},
                            boundary={d: "none" for d in range(x.ndim)}, allow_rechunk=False)
            inputs.append(x)
        if sp.blockwise:
            kind, n = st.outputs[0]
            arr = self._blockwise_stage(sp, name, inputs, [numpy_leaves[m] for m in st.leaves])
            arrays[n] = arr if kind == "value" else \
                self._tree_reduce(arr, a.instrs[n], len(a.boundary[n]), name)
            return
        dsk: dict = {}
        leaf_keys = []
        for n in st.leaves:
            value = numpy_leaves[n]
            key = f"nbxla-leaf-{tokenize(value)}"
            dsk[key] = value
            leaf_keys.append(key)
        for idx, call in sp.calls.items():
            block = dict(zip(st.axes, idx))
            keys = [(x.name, *[block.get(a.cls(a.instrs[n], d), 0) for d in range(x.ndim)])
                    for n, x in zip(st.inputs, inputs)]
            dsk[(name, *idx)] = (call, *keys, *leaf_keys)
        single = next(iter(sp.calls.values())).single
        if single:          # the tasks are the output's blocks: key them as its dims
            axes = self._output_axes(*st.outputs[0])
            dsk = {k if not isinstance(k, tuple) else
                   (name, *[dict(zip(st.axes, k[1:])).get(c, 0) if c is not None else 0 for c in axes]): v
                   for k, v in dsk.items()}
        layer = HighLevelGraph.from_collections(name, dsk, dependencies=inputs)
        for k, ((kind, n), chunks) in enumerate(zip(st.outputs, sp.out_chunks)):
            instr = a.instrs[n]
            if single:
                out_name, graph = name, layer
            else:
                out_name = f"{name}-out{k}"
                axes = self._output_axes(kind, n)
                out_dsk = {}
                for idx in sp.calls:
                    block = dict(zip(st.axes, idx))
                    if any(block[c] != 0 for c in st.axes if c not in axes):
                        continue    # the value is the same in every block along c: take block 0
                    out_dsk[(out_name, *[block.get(c, 0) if c is not None else 0 for c in axes])] = \
                        (operator.getitem, (name, *idx), k)
                graph = HighLevelGraph({**layer.layers, out_name: out_dsk},
                                       {**layer.dependencies, out_name: {name}})
            dtype = instr.shape.dtype
            arr = da.Array(graph, out_name, chunks, meta=np.empty((0,) * len(chunks), dtype))
            if kind == "value":
                arrays[n] = arr
            else:
                arrays[n] = self._tree_reduce(arr, instr, len(a.boundary[n]), out_name)

    def _blockwise_stage(self, sp: StagePlan, name: str, inputs: list, leaves: list):
        """A one-output stage whose arrays all follow the base chunks, as ``da.blockwise``: a
        block-number array (lazy, fused away) tells each task which kernel its block runs, and
        dask's optimizer can fuse the layer with its Blockwise neighbours."""
        import dask.array as da
        a, st = self.analysis, sp.stage
        kind, n = st.outputs[0]
        instr = a.instrs[n]
        fresh = iter(range(10**9))
        sym = {c: f"c{c}" for c in st.axes}

        def index(x_instr, ndim):
            out = []
            for d in range(ndim):
                c = a.cls(x_instr, d)
                out.append(sym[c] if c is not None else f"u{next(fresh)}")
            return tuple(out)
        shape = tuple(sum(a.chunks[c]) for c in st.axes)
        numbers = da.zeros(shape, chunks=tuple(a.chunks[c] for c in st.axes), dtype=np.int8)
        numbers = numbers.map_blocks(block_number, dtype=np.int64, blocks=numbers.numblocks,
                                     name=f"nbxla-block-number-{len(st.axes)}-{_chunks_token(numbers)}")
        args = [numbers, tuple(sym[c] for c in st.axes)]
        for m, x in zip(st.inputs, inputs):
            args += [x, index(a.instrs[m], x.ndim)]
        for value in leaves:
            args += [da.from_array(value, chunks=-1), tuple(f"u{next(fresh)}" for _ in range(np.ndim(value)))]
        out_index = list(index(instr, instr.shape.rank))
        new_axes = {s: instr.shape.dims[d] for d, s in enumerate(out_index) if s.startswith("u")}
        adjust = {}
        if kind == "partial":
            lead = [sym[c] for c in a.boundary[n]]
            adjust = dict.fromkeys(lead, 1)
            out_index = lead + out_index
        calls = {int(np.ravel_multi_index(idx, numbers.numblocks)) if idx else 0: call
                 for idx, call in sp.calls.items()}
        return da.blockwise(StageCall(calls), tuple(out_index), *args, new_axes=new_axes,
                            adjust_chunks=adjust or None, concatenate=True, name=name,
                            dtype=instr.shape.dtype,
                            meta=np.empty((0,) * len(out_index), instr.shape.dtype))

    def _output_axes(self, kind: str, n: int) -> list:
        """The chunked class of each dim of a stage output (None: one block)."""
        a = self.analysis
        instr = a.instrs[n]
        dims = [a.cls(instr, d) for d in range(instr.shape.rank)]
        return list(a.boundary[n]) + dims if kind == "partial" else dims

    def _tree_reduce(self, partials, instr, n_axes: int, name: str):
        import dask.array as da
        opcode, init = combiner(instr)
        combine = Combine(opcode, init[()], n_axes, combine_specs(instr, partials.chunks, n_axes))
        return da.reduction(partials, identity, combine, axis=tuple(range(n_axes)), keepdims=False,
                            dtype=instr.shape.dtype, combine=combine, concatenate=True,
                            split_every=dict.fromkeys(range(n_axes), SPLIT_EVERY),
                            name=f"{name}-combine",     # the per-chunk step fuses into ours
                            meta=np.empty((0,) * instr.shape.rank, instr.shape.dtype))

    # ---- every kernel the workers will need, compiled ahead on each of them ------------------
    def specs(self) -> list[KernelSpec]:
        """The block kernels and the tree reductions' combine kernels (their shapes follow
        from the chunks: dask groups partials ``SPLIT_EVERY`` at a time, level by level)."""
        out = {}
        for sp in self.stages:
            for key, (kernel, _) in sp.kernels.items():
                out[key] = kernel.spec
            for (kind, n), chunks in zip(sp.stage.outputs, sp.out_chunks):
                if kind == "partial":
                    instr = self.analysis.instrs[n]
                    for spec in combine_specs(instr, chunks, len(self.analysis.boundary[n])).values():
                        out[spec.key] = spec
        return list(out.values())

    def warm_workers(self) -> None:
        """With a distributed client, compile every kernel on every worker now (each once), so
        that no call after this one compiles anything on them."""
        try:
            from distributed import default_client
            client = default_client()
        except (ImportError, ValueError):
            return                      # local schedulers compile in this process, on demand
        workers = frozenset(client.scheduler_info()["workers"])
        if (id(client), workers) in self.warmed:
            return
        compiled = client.run(warm, self.specs())
        self.warmed.add((id(client), workers))
        self.warm_note = f"kernels compiled ahead on each worker: {compiled}"

    # ---- the report ------------------------------------------------------------------------
    def report(self) -> str:
        a = self.analysis
        lines = [f"nbxla on dask: {self.name}"]
        for c, ch in sorted(a.chunks.items()):
            lines.append(f"  chunked axis a{c}: {len(ch)} blocks {_chunks_text(ch)}")
        lines += [f"  {note}" for note in self.notes + [self.warm_note] if note]
        for sp in self.stages:
            st = sp.stage
            n_blocks = len(sp.calls)
            lines.append(f"stage {st.level}: {sp.name}: {n_blocks} task(s), one compiled kernel per "
                         f"block over {', '.join(f'a{c}' for c in st.axes) or 'one block'}; "
                         f"{len(sp.kernels)} distinct kernel(s)")
            # the kernel most blocks run, in full; the edge blocks' variants by name
            ranked = sorted(sp.kernels.items(), key=lambda item: -item[1][1])
            for i, (key, (k, count)) in enumerate(ranked):
                lines.append(f"  kernel {key}: {count} block(s), inputs {k.signature}")
                if i == 0:
                    lines += ["    " + line for line in k.summary.splitlines()]
            for (n, d), (left, right) in sorted(sp.depth.items()):
                if (left, right) != (0, 0):
                    lines.append(f"  halo: {a.instrs[n].name} dim {d} reads {left} before / "
                                 f"{right} after its block (dask overlap, as map_overlap)")
            for kind, n in st.outputs:
                instr = a.instrs[n]
                if kind == "partial":
                    lines.append(f"  dask op: {_where(instr)} {instr.opcode} over "
                                 f"{', '.join(f'a{c}' for c in a.boundary[n])}: per-block partial, "
                                 "then dask.array.reduction (tree combine, compiled)")
        if self.task_count is not None:
            import dask
            optimized = dask.optimize(*self._last_results)
            count = len({k for c in optimized for k in c.__dask_graph__().keys()})
            lines.append(f"dask graph of the last call: {self.task_count} tasks, {count} after "
                         "dask's optimization (blockwise fusion) — what runs")
        return "\n".join(lines)

    __str__ = report


def block_number(block, block_id=None, blocks=None):
    """A block's number (row-major over the stage's block grid), broadcast over the block."""
    return np.broadcast_to(np.int64(np.ravel_multi_index(block_id, blocks) if block_id else 0),
                           block.shape)


def _chunks_token(x) -> str:
    return hashlib.sha1(repr(x.chunks).encode()).hexdigest()[:10]


def combiner(instr) -> tuple[str, np.ndarray]:
    """The op and init that combine partials of a boundary: its reducer, or add for a dot."""
    if instr.opcode == "dot":
        return "add", np.zeros((), instr.shape.dtype)
    return (instr.attrs["to_apply"].root.opcode,
            np.asarray(instr.operands[1].literal, instr.shape.dtype))


def combine_specs(instr, chunks: tuple, n_axes: int) -> dict:
    """(shape, keepdims) -> the combine kernel, for every call the tree reduction will make."""
    opcode, init = combiner(instr)
    return {(shape, keepdims): combine_spec(opcode, init, shape, instr.shape.dtype, n_axes, keepdims)
            for shape, keepdims in combine_shapes(chunks, n_axes)}


def combine_shapes(chunks: tuple, n_axes: int):
    """``(shape, keepdims)`` of every combine call dask's tree reduction makes over partials
    with these chunks (as ``dask.array.reductions._tree_reduce`` groups them)."""
    blocks = [len(c) for c in chunks[:n_axes]]
    kept = [sorted(set(c)) for c in chunks[n_axes:]]
    depth = 1
    for n in blocks:
        depth = int(max(depth, math.ceil(math.log(n, SPLIT_EVERY)))) if n > 0 else depth
    for level in range(depth):
        groups = [sorted({min(SPLIT_EVERY, n - s) for s in range(0, n, SPLIT_EVERY)}) for n in blocks]
        for lead in itertools.product(*groups):
            for rest in itertools.product(*kept):
                yield tuple(lead) + tuple(rest), level < depth - 1
        blocks = [math.ceil(n / SPLIT_EVERY) for n in blocks]


def _where(instr) -> str:
    loc = instr.location
    return f"line {loc.line}" if loc is not None else f"%{instr.name}"


def _chunks_text(ch: tuple[int, ...]) -> str:
    sizes = sorted(set(ch))
    return "of " + "/".join(str(s) for s in sizes)


# ---- planning ------------------------------------------------------------------------------


def make_plan(name: str, program: TracedProgram, a: Analysis, param_chunks_in: dict[int, tuple]) -> DaskPlan:
    """Stages, kernels and notes for ``program`` over the chunks of its dask arguments."""
    if any(kind == "selection" for kind, _ in program.out_slots):
        raise DaskSplitError(f"{name} returns x[mask] with a traced mask: over chunks its length is not known "
                         "in advance. Return np.where(mask, x, fill), or compact the result after the call")
    entry = a.module.entry
    notes = []
    param_chunks = {}
    for number, chunks in param_chunks_in.items():
        p = entry.parameters[number]
        want = []
        for d, ch in enumerate(chunks):
            c = a.classes[(a.index[id(p)], d)]
            want.append(a.chunks[c] if c in a.chunks else (p.shape.dims[d],))
        want = tuple(want)
        if want != tuple(chunks):
            block = p.shape.dtype.itemsize * int(np.prod([max(w) if w else 0 for w in want]))
            whole = [(d, a.whole[a.classes[(a.index[id(p)], d)]]) for d in range(len(want))
                     if a.classes[(a.index[id(p)], d)] in a.whole]
            if whole and block > MAX_WHOLE_BLOCK_BYTES:
                d, why = whole[0]
                raise DaskSplitError(
                    f"{why}, so it needs axis {d} of {p.name} in one block; {p.name} has "
                    f"{len(chunks[d])} blocks along it, and one would be {_bytes(block)} (more than "
                    f"{_bytes(MAX_WHOLE_BLOCK_BYTES)}).\nRechunk {p.name} yourself "
                    f"({p.name}.rechunk({{{d}: -1}}) with smaller chunks along the other axes), or do "
                    "that operation outside the compiled function with dask's own method")
            for d, why in whole:
                notes.append(f"rechunked {p.name} to one block along axis {d} ({_bytes(block)} "
                             f"per block): {why}")
            if not whole:
                notes.append(f"rechunked {p.name} from {_shape_chunks(chunks)} to {_shape_chunks(want)} "
                             "(aligned with the other arguments / wide enough for the halo)")
        param_chunks[number] = want
    leaf_values = {}
    stages = []
    token = hashlib.sha1(str(program.module).encode()
                         + repr(sorted(a.chunks.items())).encode()).hexdigest()[:10]
    for st in split_stages(a):
        for n in st.leaves:
            if a.instrs[n].opcode != "parameter":
                leaf_values[n] = leaf_value(a.instrs[n])
        stages.append(_plan_stage(a, st, f"nbxla-fused-{name}-s{st.level}-{token}"))
    return DaskPlan(name, program, a, param_chunks, stages, leaf_values, notes)


def _bytes(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"


def _shape_chunks(chunks) -> str:
    return "(" + ", ".join(f"{len(c)}x{max(c) if c else 0}" for c in chunks) + ")"


def _plan_stage(a: Analysis, st: Stage, name: str) -> StagePlan:
    per_block = [(tuple(b[c] for c in st.axes), b, block_ranges(a, st, b)) for b in blocks(a, st)]
    depth: dict[tuple[int, int], tuple[int, int]] = {}
    for _, b, r in per_block:
        for n in st.inputs:
            instr = a.instrs[n]
            core = anchored(a, instr, b)
            for d, ((cs, ce), (ns, ne)) in enumerate(zip(core, r.need.get(n, core))):
                left, right = depth.get((n, d), (0, 0))
                depth[(n, d)] = (max(left, cs - ns), max(right, ne - ce))
    calls, kernels, modules, placed = {}, {}, {}, []
    for idx, b, r in per_block:
        avail = {}
        for n in st.inputs:
            instr = a.instrs[n]
            core = anchored(a, instr, b)
            avail[n] = _extend(core, [depth[(n, d)] for d in range(len(core))], instr.shape.dims)
        geometry = _geometry(a, st, r, avail)
        if geometry not in modules:
            modules[geometry] = build_block_module(a, st, r, avail, name.replace("-", "_"))
        placed.append((idx, r, geometry))
    built = shared_block_kernels(modules)
    for idx, r, geometry in placed:
        kernel = built[geometry]
        count = kernels.get(kernel.spec.key, (kernel, 0))[1]
        kernels[kernel.spec.key] = (kernel, count + 1)
        leaf_slices = tuple(tuple(slice(s, e) for s, e in r.need[n]) for n in st.leaves)
        calls[idx] = BlockCall(kernel.spec, leaf_slices, single=_single_output(a, st))
    out_chunks = [_out_chunks(a, st, kind, n) for kind, n in st.outputs]
    plan = StagePlan(st, name, calls, kernels, depth, out_chunks)
    plan.blockwise = _fits_blockwise(a, st, plan)
    return plan


def _fits_blockwise(a: Analysis, st: Stage, sp: StagePlan) -> bool:
    """One output, no halo, and every input and the output cut exactly at the base chunks
    (no shifted stencil values), so that dask's blockwise alignment holds."""
    if not next(iter(sp.calls.values())).single or any(lr != (0, 0) for lr in sp.depth.values()):
        return False
    kind, n = st.outputs[0]
    for m in st.inputs + [n]:
        instr = a.instrs[m]
        for d in range(instr.shape.rank):
            c = a.cls(instr, d)
            if c is not None and (a.anchor(instr, d) != 0 or instr.shape.dims[d] != sum(a.chunks[c])):
                return False
    return True


def _single_output(a: Analysis, st: Stage) -> bool:
    """One output covering every block: the stage's tasks are that array's blocks."""
    if len(st.outputs) != 1:
        return False
    kind, n = st.outputs[0]
    instr = a.instrs[n]
    covered = set(a.boundary[n]) if kind == "partial" else set()
    covered |= {a.cls(instr, d) for d in range(instr.shape.rank)}
    return covered >= set(st.axes)


def _extend(core: Ranges, depth, sizes) -> Ranges:
    """A block's ranges after dask's overlap (boundary 'none': nothing beyond the array)."""
    return tuple((max(0, s - left) if s > 0 else s, min(n, e + right) if e < n else e)
                 for (s, e), (left, right), n in zip(core, depth, sizes))


def _geometry(a: Analysis, st: Stage, r, avail) -> tuple:
    """What the block's module depends on: extents, and offsets of every cut-down use."""
    key = []
    for n in sorted(r.need):
        key.append(tuple(e - s for s, e in r.need[n]))
        if n in avail:
            key.append(tuple((ns - s, e - s) for (ns, _), (s, e) in zip(r.need[n], avail[n])))
    for (u, k), req in sorted(r.uses.items()):
        o = a.index[id(a.instrs[u].operands[k])]
        key.append(tuple((rs - ns, re - rs) for (rs, re), (ns, _) in zip(req, r.need[o])))
    return tuple(key)


def _out_chunks(a: Analysis, st: Stage, kind: str, n: int) -> tuple:
    instr = a.instrs[n]
    chunks = []
    if kind == "partial":
        chunks += [(1,) * len(a.chunks[c]) for c in a.boundary[n]]
    for d, size in enumerate(instr.shape.dims):
        c = a.cls(instr, d)
        if c is None:
            chunks.append((size,))
        else:
            chunks.append(tuple(anchored(a, instr, {c: b})[d][1] - anchored(a, instr, {c: b})[d][0]
                                for b in range(len(a.chunks[c]))))
    return tuple(chunks)
