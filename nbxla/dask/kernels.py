"""Per-block HLO: one stage of the traced module, specialized to the ranges one block holds.

Each instruction is rebuilt with the block's extents along chunked axes (attributes are
unchanged: they never mention a chunked dimension, except a slice's, which becomes the
block's window).  Where a use reads less than its operand holds (a stencil, a halo), a
``slice`` selects it.  Partials of reductions keep one leading length-1 axis per chunked axis
they reduce, so dask's tree reduction can combine them.  The result is optimized by the usual
pipeline on the client, and the *optimized HLO text* is what travels to the workers.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from ..hlo import Computation, Instruction, Module, Shape, TupleShape
from ..hlo.attributes import SliceDim
from ..hlo.evaluator import evaluate
from ..hlo.ir import clone_module
from ..hlo.printer import print_module
from ..hlo.shape_inference import infer_shape
from ..passes import optimize
from ..passes.report import fusion_report
from .analysis import Analysis
from .stages import BlockRanges, Ranges, Stage


@dataclass(frozen=True)
class KernelSpec:
    """What a task ships: the optimized HLO text of one block's kernel, keyed by its hash."""
    key: str
    text: str
    n_outputs: int


@dataclass
class BlockKernel:
    spec: KernelSpec
    signature: str                   # parameter shapes -> result shapes
    summary: str                     # the fusion report's text


def _shape(instr: Instruction, ranges: Ranges):
    """``instr``'s shape with the block's extents (every element's, for a tuple)."""
    dims = tuple(e - s for s, e in ranges)
    if instr.shape.is_tuple:
        return TupleShape(tuple(Shape(e.element_type, dims) for e in instr.shape.elements))
    return Shape(instr.shape.element_type, dims)


def _restrict(value: Instruction, have: Ranges, want: Ranges, add) -> Instruction:
    """``value`` (holding ``have``) cut down to ``want``."""
    if want == have:
        return value
    dims = tuple(SliceDim(ws - hs, we - hs, 1) for (hs, _), (ws, we) in zip(have, want))
    return add(Instruction("slice", Shape(value.shape.element_type, tuple(e - s for s, e in want)),
                           [value], {"slice": dims}, "slice", value.location))


def leaf_value(instr: Instruction) -> np.ndarray:
    """The whole value of a leaf the tasks slice: a constant's literal, an iota's numbers."""
    if instr.opcode == "constant":
        return np.asarray(instr.literal)
    copy = Instruction(instr.opcode, instr.shape, [], dict(instr.attrs), instr.name)
    return np.asarray(evaluate(Computation("leaf", [copy], copy), []))


def build_block_module(a: Analysis, st: Stage, r: BlockRanges, avail: dict[int, Ranges],
                       name: str) -> Module:
    """The module one block runs: parameters are the stage's inputs (holding ``avail``) then
    its leaves (sliced to what the block needs); the root is the tuple of the stage's outputs."""
    body: list[Instruction] = []
    add = lambda i: body.append(i) or i                                     # noqa: E731
    local: dict[int, Instruction] = {}
    callees: dict[int, Computation] = {}

    def attrs_of(instr: Instruction) -> dict:
        out = {}
        for k, v in instr.attrs.items():
            if isinstance(v, Computation):
                v = callees.setdefault(id(v), _copy_computation(v))
            elif isinstance(v, tuple) and v and all(isinstance(c, Computation) for c in v):
                v = tuple(callees.setdefault(id(c), _copy_computation(c)) for c in v)
            out[k] = v
        return out
    number = 0
    for n in st.inputs + st.leaves:
        instr = a.instrs[n]
        have = avail[n] if n in avail else r.need[n]
        p = add(Instruction("parameter", _shape(instr, have), [], {"parameter_number": number},
                            instr.name, instr.location))
        number += 1
        local[n] = _restrict(p, have, r.need[n], add)

    def operand(n: int, k: int) -> Instruction:
        o = a.index[id(a.instrs[n].operands[k])]
        return _restrict(local[o], r.need[o], r.uses[(n, k)], add)
    for n in st.compute:
        if n not in r.need:
            continue
        instr = a.instrs[n]
        ops = [operand(n, k) for k in range(len(instr.operands))]
        attrs = attrs_of(instr)
        if instr.opcode == "slice":     # the use already selected the window along linked dims
            attrs["slice"] = tuple(s if s.stride != 1 else SliceDim(0, o, 1)
                                   for s, o in zip(instr.attrs["slice"], ops[0].shape.dims))
        local[n] = add(_rebuilt(instr, _shape(instr, r.need[n]), ops, attrs))
    outs = []
    for kind, n in st.outputs:
        instr = a.instrs[n]
        if kind == "value":
            outs.append(local[n])
            continue
        ops = [operand(n, k) for k in range(len(instr.operands))]
        kept = _partial_dims(instr, ops)
        red = add(_rebuilt(instr, Shape(instr.shape.element_type, kept), ops, attrs_of(instr)))
        lead = (1,) * len(a.boundary[n])
        outs.append(add(Instruction("reshape", Shape(instr.shape.element_type, lead + kept), [red],
                                    {}, "partial", instr.location)))
    root = outs[0] if len(outs) == 1 and outs[0].opcode != "parameter" else \
        add(Instruction("tuple", _tuple_shape(outs), outs, {}, "outputs"))
    module = Module(name, Computation(name, body, root))
    module.make_names_unique()
    return module


def _partial_dims(instr: Instruction, ops: list[Instruction]) -> tuple[int, ...]:
    shapes = [o.shape for o in ops]
    return infer_shape(instr.opcode, shapes, instr.attrs, declared=instr.shape).dims \
        if instr.opcode != "dot" else _dot_dims(instr, shapes)


def _dot_dims(instr: Instruction, shapes) -> tuple[int, ...]:
    a = instr.attrs
    lhs, rhs = shapes
    lb, rb = a.get("lhs_batch_dims", ()), a.get("rhs_batch_dims", ())
    lc, rc = a.get("lhs_contracting_dims", ()), a.get("rhs_contracting_dims", ())
    return (tuple(lhs.dims[i] for i in lb)
            + tuple(n for i, n in enumerate(lhs.dims) if i not in lb and i not in lc)
            + tuple(n for i, n in enumerate(rhs.dims) if i not in rb and i not in rc))


def _rebuilt(instr: Instruction, shape: Shape, ops: list[Instruction], attrs: dict) -> Instruction:
    inferred = infer_shape(instr.opcode, [o.shape for o in ops], attrs, declared=shape)
    if inferred.to_text(with_layout=False) != shape.to_text(with_layout=False):
        raise AssertionError(f"block shape of %{instr.name}: {inferred} != {shape}")
    return Instruction(instr.opcode, inferred, ops, attrs, instr.name, instr.location)


def _tuple_shape(outs):
    return TupleShape(tuple(o.shape for o in outs))


def _copy_computation(comp: Computation) -> Computation:
    """A private copy of a called computation (a reducer or comparator) for one module."""
    holder = Module("holder")
    holder.set_entry(comp)
    return clone_module(holder).entry


def compile_block(module: Module) -> BlockKernel:
    """Optimize ``module`` (client side) into the text a worker compiles."""
    result = optimize(module)
    text = print_module(result.module)
    root = result.module.entry.root
    n_out = len(root.operands) if root.opcode == "tuple" else 1
    report = fusion_report(result.module, result.facts.get("fusion"))
    entry = result.module.entry
    signature = (", ".join(p.shape.to_text(with_layout=False) for p in entry.parameters) + " -> "
                 + entry.root.shape.to_text(with_layout=False))
    key = hashlib.sha1(text.encode()).hexdigest()[:16]
    return BlockKernel(KernelSpec(key, text, n_out), signature, report.to_text())


def shared_block_kernels(modules: dict) -> dict:
    """One kernel per block geometry (geometry -> unoptimized block module): blocks whose
    modules differ only in the extents of chunked axes -- the last, shorter chunk -- share one
    kernel with unknown dimensions, which a worker compiles once for every block size
    (``worker.executable``); the others keep a kernel of their own.  Why: a chunking that does
    not divide the array gave two kernels per stage, each compiled on every worker."""
    built: dict = {}
    geometries = list(modules)
    if len(geometries) > 1:
        reference = geometries[0]
        shared, text = [reference], None
        for g in geometries[1:]:
            symbolic = _generalized(modules[reference], modules[g])
            if symbolic is None:
                continue
            printed = print_module(symbolic)
            if text is None:
                text, first = printed, symbolic
            if printed == text:
                shared.append(g)
        if text is not None:
            kernel = compile_block(modules[reference])
            entry = first.entry
            signature = (", ".join(p.shape.to_text(with_layout=False) for p in entry.parameters) + " -> "
                         + entry.root.shape.to_text(with_layout=False))
            spec = KernelSpec(hashlib.sha1(text.encode()).hexdigest()[:16], text, kernel.spec.n_outputs)
            summary = kernel.summary + f"\n(one kernel for {len(shared)} block shapes: unknown dimensions {signature})"
            for g in shared:
                built[g] = BlockKernel(spec, signature, summary)
    for g in geometries:
        if g not in built:
            built[g] = compile_block(modules[g])
    return built


def _generalized(m1: Module, m2: Module) -> Module | None:
    """The module with unknown dimensions both blocks' modules are instances of, or None."""
    from ..hlo.shapes import SymbolicDimensionError
    from ..hlo.symbolic import generalize_module
    pairs: dict[int, int] = {}
    for p1, p2 in zip(m1.entry.parameters, m2.entry.parameters):
        if p1.shape.is_tuple or p2.shape.is_tuple or p1.shape.rank != p2.shape.rank:
            return None
        for d1, d2 in zip(p1.shape.dims, p2.shape.dims):
            if d1 != d2 and pairs.setdefault(d1, d2) != d2:
                return None
    if not pairs or min(pairs) < 2 or min(pairs.values()) < 2:
        return None                 # (sizes 0 and 1 are specialised)
    names = {d1: f"s{k}" if k else "b" for k, d1 in enumerate(sorted(pairs))}
    try:
        return generalize_module(clone_module(m1), clone_module(m2), names, pairs.__getitem__)
    except (SymbolicDimensionError, KeyError):
        return None
