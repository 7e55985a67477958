"""The compilation pipeline: traced module -> optimized module -> executable, with a record.

A ``Compilation`` is what the notebook layer reads: every stage's text, timings, the device
and backend, and why it was compiled.  Stages are produced on demand and memoized.
"""

from __future__ import annotations

import itertools
import os
import sys
import time
from dataclasses import dataclass, field

from .compile_clock import stage
from .errors import NbxlaError
from .flags import current_flags
from .hlo import Module
from .hlo.elided import check_no_elided_constants
from .hlo.printer import print_module
from .hlo.symbolic import symbols_of_module
from .passes import PipelineResult, optimize
from .passes.report import FusionReport, fusion_report
from .runtime.executable import Executable, build_executable, resolve_device

_module_ids = itertools.count(1)


class UnknownStageError(NbxlaError, ValueError):
    """A stage name that this compilation does not have."""


# Stages a compilation can show, in pipeline order; backend stages arrive with the backends.
STAGES = ("hlo", "passes", "optimized_hlo", "optimized_hlo_dot", "fusion_report",
          "buffer_assignment")
# Backend stages: present when the backend produced them (the evaluator has none).
BACKEND_STAGES = {"llvm_ir": "the CPU backend", "llvm_ir_optimized": "the CPU backend",
                  "asm": "the CPU backend", "execution": "the CPU backend", "ptx": "the CUDA backend"}


@dataclass
class Compilation:
    name: str
    device: str
    hlo: Module                       # as traced
    optimized: Module                 # after the pass pipeline
    executable: Executable
    timings_ms: dict[str, float]
    pipeline: PipelineResult
    explanation: str = ""
    # (source line, "rolled"/"unrolled", why) per Python loop the tracer met
    loop_decisions: list = field(default_factory=list)
    module_id: int = field(default_factory=lambda: next(_module_ids))
    # Which dimensions are unknown (symbolic) and their guards, or why a dimension that could
    # have been was specialised (docs/unknown_dimensions.md); "" when neither applies.
    dimensions: str = ""
    # The last profile of this compilation (``nbxla.profile``, ``%%xla --profile``): anything
    # with ``to_text()``; it adds the ``profile`` stage.
    profile: object = field(default=None, repr=False)
    _stage_text: dict[str, str] = field(default_factory=dict, repr=False)

    @property
    def backend(self) -> str:
        return self.executable.backend

    @property
    def fusion_report(self) -> FusionReport:
        native = self.executable.native
        interpreted = {**getattr(native, "interpreted", {}), **getattr(native, "interpreted_ops", {})}
        loops = list(dict.fromkeys(f"line {line}: {how} ({why})" for line, how, why in self.loop_decisions))
        loops += [f"%{name}: {how}" for name, how in getattr(native, "loops", {}).items()]
        # (A symbolic module's figures -- bytes, flops -- are the first probe's: pipeline.module.)
        module = self.pipeline.module if symbols_of_module(self.optimized) else self.optimized
        return fusion_report(module, self.pipeline.facts.get("fusion"), interpreted, loops)

    @property
    def stages(self) -> tuple[str, ...]:
        return STAGES + tuple(self.executable.stages) + (("profile",) if self.profile is not None else ())

    def stage(self, name: str) -> str:
        if name == "profile":               # (not memoized: a later profile replaces it)
            if self.profile is None:
                raise UnknownStageError(
                    "stage 'profile' needs a run: profile it first with nbxla.profile(f)(*args) or "
                    f"%%xla --profile; available: {', '.join(self.stages)}")
            return self.profile.to_text()
        if name not in self._stage_text:
            if name == "hlo":
                text = print_module(self.hlo)
            elif name == "optimized_hlo":
                text = print_module(self.optimized)
            elif name == "passes":
                text = self.pipeline.history_text()
            elif name == "fusion_report":
                text = self.fusion_report.to_text()
                if self.dimensions:
                    text += f"\ndimensions: {self.dimensions}"
            elif name == "buffer_assignment":
                text = self.pipeline.facts["buffer-assignment"].to_text()
            elif name == "optimized_hlo_dot":
                from .hlo.graphviz import to_dot
                text = to_dot(self.optimized)
            elif name in self.executable.stages:
                text = self.executable.stages[name]
            elif name in BACKEND_STAGES:
                raise UnknownStageError(
                    f"stage {name!r} comes from {BACKEND_STAGES[name]}, and this compilation ran on "
                    f"{self.backend}; available: {', '.join(self.stages)}")
            else:
                raise UnknownStageError(f"unknown stage {name!r}; available: {', '.join(self.stages)}")
            self._stage_text[name] = text
        return self._stage_text[name]

    def dump(self, directory: str) -> list[str]:
        """Write every stage as ``module_NNNN.<name>.<stage>.txt`` (XLA's --xla_dump_to habit)."""
        os.makedirs(directory, exist_ok=True)
        paths = []
        for stage in self.stages:
            path = os.path.join(directory, f"module_{self.module_id:04d}.{self.name}.{stage}.txt")
            with open(path, "w") as f:
                f.write(self.stage(stage))
            paths.append(path)
        return paths


def pass_timing_text(comp: Compilation) -> str:
    """Where a compilation's time went: tracing, every pass, code generation."""
    rows = [("trace", comp.timings_ms["trace"])]
    rows += [(f"  {r.name}" + ("" if r.changed else " (no change)"), r.milliseconds) for r in comp.pipeline.history]
    rows += [("optimize (all passes)", comp.timings_ms["optimize"]), ("codegen", comp.timings_ms["codegen"])]
    total = comp.timings_ms["trace"] + comp.timings_ms["optimize"] + comp.timings_ms["codegen"]
    n = sum(len(c.instructions) for c in comp.hlo.computations)
    lines = [f"nbxla pass timing: {comp.name} ({n} HLO instructions traced), {total:.1f} ms in all"]
    lines += [f"  {name:<36}{ms:10.2f} ms" for name, ms in rows]
    return "\n".join(lines)


def compile_module(module: Module, device: str, trace_ms: float = 0.0, explanation: str = "",
                   dump_to: str | None = None, loop_decisions: list = (),
                   donated: dict[int, int] | None = None) -> Compilation:
    """``donated``: {entry parameter: output leaf} -- the caller's arrays the executable may
    write that output into (CPU only: ``runtime/donation.py``); their old values are lost."""
    device = resolve_device(device)
    check_no_elided_constants(module, "compile")
    start = time.perf_counter()
    with stage("passes"):
        pipeline = optimize(module, donated if donated and device == "cpu" else frozenset())
    optimized = pipeline.module
    optimize_ms = (time.perf_counter() - start) * 1e3
    start = time.perf_counter()
    with stage("runtime-setup"):
        executable = build_executable(optimized, device, pipeline.facts.get("buffer-assignment"))
    codegen_ms = (time.perf_counter() - start) * 1e3
    comp = Compilation(module.name, device, module, optimized, executable,
                       {"trace": trace_ms, "optimize": optimize_ms, "codegen": codegen_ms},
                       pipeline, explanation, list(loop_decisions))
    if current_flags().pass_timing:
        print(pass_timing_text(comp), file=sys.stderr)
    if dump_to:
        comp.dump(dump_to)
    return comp
