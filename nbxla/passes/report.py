"""Cost analysis and the fusion report: what each kernel does, where it came from, what it moves.

FLOPs follow XLA's HloCostAnalysis conventions: one per output element of an elementwise
op, one per input element of a reduction, ``2*M*N*K`` for a dot; transcendental ops
(exp, log, tanh, ...) are also counted on their own.  Bytes are what a kernel reads from and
writes to memory: its operands and its outputs (values inside a fusion stay in registers).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from ..hlo import Module
from ..hlo.ir import Computation, Instruction, SourceLocation
from ..hlo.opcodes import DATA_MOVEMENT, TRANSCENDENTAL
from ..hlo.placement import CPU
from .fusion import Boundary, FusionDecisions, Refusal, fusion_targets, is_kernel



def _elements(shape) -> int:
    if shape.is_tuple:
        return sum(_elements(s) for s in shape.elements)
    return shape.size


def instruction_flops(instr: Instruction) -> tuple[int, int]:
    """(flops, transcendentals) of one instruction, counting called computations."""
    op = instr.opcode
    if op in DATA_MOVEMENT:
        return 0, 0
    if op == "dot":
        a = instr.operands[0].shape
        k = int(np.prod([a.dims[d] for d in instr.attrs.get("lhs_contracting_dims", ())], dtype=np.int64))
        return 2 * _elements(instr.shape) * k, 0
    if op == "convolution":
        kshape = instr.operands[1].shape
        dn = instr.attrs["dim_labels"]
        per_output = int(np.prod([kshape.dims[d] for d in dn.kernel_spatial], dtype=np.int64)) * \
            kshape.dims[dn.kernel_input_feature]
        return 2 * _elements(instr.shape) * per_output, 0
    if op in ("reduce", "reduce-window"):
        return _elements(instr.operands[0].shape), 0
    if op in ("fusion", "call"):
        return computation_flops(instr.called_computations[0])
    n = _elements(instr.shape)
    return n, n if op in TRANSCENDENTAL else 0


def computation_flops(comp: Computation) -> tuple[int, int]:
    flops = trans = 0
    for instr in comp.instructions:
        f, t = instruction_flops(instr)
        flops, trans = flops + f, trans + t
    return flops, trans


def _bytes(shape) -> int:
    return shape.byte_size


@dataclass
class KernelInfo:
    name: str
    kind: str                         # kLoop / kInput fusion, or the library call it is
    ops: dict[str, int]
    source_lines: list[SourceLocation]
    flops: int
    transcendentals: int
    bytes_read: int
    bytes_written: int
    interpreted: str | None = None    # why it runs on the reference evaluator, if it does

    def to_text(self) -> str:
        ops = ", ".join(f"{k}x{v}" if v > 1 else k for k, v in sorted(self.ops.items()))
        lines = ", ".join(sorted({f"{loc.file}:{loc.line}" for loc in self.source_lines})) or "-"
        mark = f" INTERPRETED (runs on the evaluator: {self.interpreted})" if self.interpreted else ""
        return (f"{self.name} [{self.kind}]{mark} ops: {ops}\n"
                f"    from: {lines}\n"
                f"    {self.flops} flops ({self.transcendentals} transcendental), "
                f"reads {self.bytes_read} B, writes {self.bytes_written} B")


@dataclass
class FusionReport:
    kernels_before: int
    kernels_after: int
    kernels: list[KernelInfo] = field(default_factory=list)
    refusals: list[Refusal] = field(default_factory=list)
    boundaries: list[Boundary] = field(default_factory=list)
    loops: list[str] = field(default_factory=list)   # each Python loop: rolled or unrolled, why;
    #                                                  each while of the entry: how it runs

    @property
    def bytes_moved(self) -> int:
        return sum(k.bytes_read + k.bytes_written for k in self.kernels)

    def to_text(self) -> str:
        out = [f"kernels: {self.kernels_before} before fusion -> {self.kernels_after} after"]
        out += [k.to_text() for k in self.kernels]
        if self.boundaries:
            out.append("kernel boundaries (values written by one kernel and read by another):")
            out += [f"  %{b.value}: {b.producer} -> {b.consumer}: {b.reason}" for b in self.boundaries]
        if self.refusals:
            out.append("fusions refused:")
            out += [f"  {r.producer} into {r.consumer}: {r.reason}" for r in self.refusals]
        if self.loops:
            out.append("loops:")
            out += [f"  {line}" for line in self.loops]
        return "\n".join(out)


def fusion_report(module: Module, decisions: FusionDecisions | None,
                  interpreted: dict[str, str] | None = None, loops: list[str] | None = None) -> FusionReport:
    """The report; ``interpreted`` (kernel name -> reason, from the backend) marks kernels that
    run on the reference evaluator; ``loops`` are the loop lines (see Compilation)."""
    interpreted = interpreted or {}
    kernels = []
    for comp in fusion_targets(module):
        for instr in comp.instructions:
            if not is_kernel(instr):
                continue
            body = instr.called_computations[0] if instr.opcode == "fusion" else None
            members = [i for i in body.instructions if i.opcode != "parameter"] if body else [instr]
            flops, trans = instruction_flops(instr)
            kind = instr.attrs.get("kind", "kLoop") if instr.opcode == "fusion" else \
                f"library call: {instr.opcode}" if CPU[instr.opcode].kind == "library" else instr.opcode
            kernels.append(KernelInfo(
                instr.name, kind,
                dict(Counter(m.opcode for m in members if m.opcode not in ("constant", "tuple"))),
                [m.location for m in members if m.location is not None],
                flops, trans,
                sum(_bytes(o.shape) for o in dict.fromkeys(instr.operands)), _bytes(instr.shape),
                interpreted.get(instr.name)))
    before = decisions.kernels_before if decisions else len(kernels)
    refusals = decisions.refusals if decisions else []
    boundaries = decisions.boundaries if decisions else []
    return FusionReport(before, len(kernels), kernels, list(refusals), list(boundaries), list(loops or ()))
