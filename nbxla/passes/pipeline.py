"""Passes as small objects in a pipeline, with a verifier between them and a history.

A pass has a ``name`` and ``run(module) -> changed``.  The pipeline runs them in order on its
own copy of the module, verifies the module after each one, and records the module (a copy,
printed on request) after every pass that changed something (modules up to
``RECORD_TEXT_LIMIT`` instructions):
``%xla_ir stage=passes`` and ``--dump_to`` show the module's history step by step.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

from ..hlo import Module
from ..hlo.ir import clone_module
from ..hlo.printer import PrintOptions, print_module
from .verifier import verify_module


# Modules larger than this (instructions in all computations) keep no text per pass.
RECORD_TEXT_LIMIT = 20000
# (large constants print as "{...}" there, as in XLA's dumps: see hlo.printer)
_HISTORY_TEXT = PrintOptions(large_constants="elide")


class Pass:
    name = "pass"

    def run(self, module: Module) -> bool:      # pragma: no cover - interface
        raise NotImplementedError


def instruction_ids(module: Module) -> dict[int, object]:
    """The module's instructions by id (test membership with ``id(i) in ids``).  The values
    keep them alive: an instruction a pass drops could otherwise be freed and its id reused
    by one the pass creates, which would then pass for an old one (and keep a taken name)."""
    return {id(i): i for i in module.instructions()}


def computation_uses(module: Module) -> dict[int, int]:
    """How many instructions call each computation, by the computation's id."""
    uses: dict[int, int] = {}
    for instr in module.instructions():
        for comp in instr.called_computations:
            uses[id(comp)] = uses.get(id(comp), 0) + 1
    return uses


def loop_owns_its_computations(loop, uses: dict[int, int]) -> bool:
    """Whether ``loop`` is the one caller of its body and condition (``computation_uses``), and
    they are two computations: only then may a pass rewrite them for this loop alone."""
    body, cond = loop.attrs["body"], loop.attrs["condition"]
    return body is not cond and uses.get(id(body)) == 1 and uses.get(id(cond)) == 1


def rename_new_instructions(module: Module, before: dict[int, object]) -> None:
    """Give instructions a pass created (not in ``before``) names no other instruction has.

    Passes name new instructions with ``builder.unique_name`` (a process-wide counter), which
    can collide with names that came from parsed HLO text (``%constant.4``); the instructions
    that were there before the pass keep their names.
    """
    taken = {i.name for i in module.instructions() if id(i) in before}
    for instr in module.instructions():
        if id(instr) in before:
            continue
        if instr.name in taken:
            base = re.sub(r"\.\d+$", "", instr.name)
            n = 1
            while f"{base}.{n}" in taken:
                n += 1
            instr.name = f"{base}.{n}"
        taken.add(instr.name)


@dataclass
class PassRecord:
    name: str
    changed: bool
    milliseconds: float
    # The module after the pass, when it changed something: a copy, printed when its ``text``
    # is first asked for.  (Printing it after every pass took 7 of the 19 ms LeNet-5's
    # pipeline ran, on every compile; a copy costs a fifth of a print.)  Or, instead, a
    # note of why no copy was kept.
    snapshot: Module | str | None = field(default=None, repr=False)

    @property
    def text(self) -> str | None:
        """The module text after the pass, when it changed something."""
        if isinstance(self.snapshot, Module):
            self.snapshot = print_module(self.snapshot, _HISTORY_TEXT)
        return self.snapshot


@dataclass
class PipelineResult:
    module: Module
    history: list[PassRecord] = field(default_factory=list)
    facts: dict = field(default_factory=dict)   # what passes report (fusion decisions, buffers)

    def history_text(self) -> str:
        parts = []
        for rec in self.history:
            status = "changed" if rec.changed else "no change"
            parts.append(f"// ---- after {rec.name} ({status}, {rec.milliseconds:.2f} ms)")
            if rec.text is not None:
                parts.append(rec.text)
        return "\n".join(parts)


class Pipeline:
    def __init__(self, passes: list[Pass], verify: bool = True, record_text: bool = True):
        self.passes, self.verify, self.record_text = passes, verify, record_text

    def run(self, module: Module) -> PipelineResult:
        module = clone_module(module)
        module.make_names_unique()
        result = PipelineResult(module)
        if self.verify:
            verify_module(module)
        for p in self.passes:
            start = time.perf_counter()
            changed = bool(p.run(module))
            ms = (time.perf_counter() - start) * 1e3
            if self.verify and changed:         # (an unchanged module was verified before)
                verify_module(module, after=p.name)
            snapshot = None
            if changed and self.record_text:
                size = sum(len(c.instructions) for c in module.computations)
                # (Printing a module of an unrolled loop after every pass took longer than the
                # passes: 145K instructions, 10 MB of text each time.)
                snapshot = clone_module(module) if size <= RECORD_TEXT_LIMIT else \
                    f"// (module of {size} instructions: its text after this pass is not kept)"
            result.history.append(PassRecord(p.name, changed, ms, snapshot))
            report = getattr(p, "report", None)
            if report is not None:
                result.facts[p.name] = report
        return result
