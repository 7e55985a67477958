"""The clustering report: which clusters ran (compiled or eagerly), where the graph broke, and
how much of the array work ran compiled; ``nbxla.explain`` and ``%%xla --auto --explain``.

A ``ClusterReport`` is a record (like ``--tf_xla_clustering_debug``'s dumps or TorchDynamo's
``explain()``): text here, the notebook view in ``nbxla/jupyter/cluster_view.py``, which the
package wires in from above (``register_html_view``): this room imports nothing of the notebook
layer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .choice import EAGER_MARGIN
from .records import SessionLog


# The HTML view of a report, registered from above (``nbxla/__init__`` hands in
# ``jupyter.cluster_view.render_html``); without one a report shows as text only.
_HTML_VIEWS: list = []


def register_html_view(render) -> None:
    """Draw reports in notebooks with ``render(report) -> str`` (HTML); the latest one wins."""
    _HTML_VIEWS.append(render)


@dataclass
class ClusterSummary:
    """One cluster (by structure) over a run: how it was executed and how often."""
    number: int
    compiled: bool
    why_eager: str
    ops: int
    work: int
    lines: list[int]                 # source lines of its operations (sorted, unique)
    files: list[str]
    hlo_instructions: int = 0
    kernels: int = 0
    compile_ms: float = 0.0
    run_ms: float = 0.0
    runs: int = 0
    compilation: object = None
    measured: str = ""               # compiled vs eager times per run (the measured choice)

    def line_text(self) -> str:
        return _ranges(self.lines) or "?"


@dataclass
class BreakSummary:
    reason: str
    line: int | None
    file: str | None
    source: str | None
    flushed: bool                    # the pending graph ran here (vs. only this op ran eagerly)
    op: str | None
    count: int = 0


@dataclass
class ClusterReport:
    name: str
    min_work: int
    clusters: list[ClusterSummary] = field(default_factory=list)
    breaks: list[BreakSummary] = field(default_factory=list)
    compiled_work: int = 0
    eager_work: int = 0
    source: list[str] | None = None       # the function's or cell's lines, for the views
    first_line: int = 1
    filename: str | None = None
    calls: str = ""                        # the measured choice between auto and plain calls
    whole: str = ""                        # compiled whole, or why not (cluster/whole.py)

    @property
    def compiled_fraction(self) -> float:
        total = self.compiled_work + self.eager_work
        return self.compiled_work / total if total else 0.0

    @property
    def compiled_clusters(self) -> list[ClusterSummary]:
        return [c for c in self.clusters if c.compiled]

    def headline(self) -> str:
        return (f"{len(self.clusters)} cluster(s), {len(self.compiled_clusters)} compiled; "
                f"{len(self.breaks)} graph break(s); "
                f"{100 * self.compiled_fraction:.1f}% of array work ran compiled")

    def to_text(self) -> str:
        out = [f"nbxla auto-clustering of {self.name}: {self.headline()}",
               f"cost model: a cluster with less than {self.min_work} elements of work "
               "(elements its NumPy operations read or write, summed) runs eagerly with NumPy; "
               "a larger one is timed compiled and eagerly on its first run, then runs the "
               f"faster way (eagerly only if under {EAGER_MARGIN:g}x the compiled time)"]
        if self.whole:
            out.append(f"whole function: {self.whole}")
        if self.calls:
            out.append(f"calls: {self.calls}")
        for c in self.clusters:
            how = (f"compiled: {c.hlo_instructions} HLO instructions -> {c.kernels} kernel(s), "
                   f"compile {c.compile_ms:.1f} ms" if c.compiled else f"eager: {c.why_eager}")
            measured = f"; {c.measured}" if c.measured else ""
            out.append(f"  cluster {c.number}: {c.ops} op(s) on line(s) {c.line_text()}; {how}; "
                       f"runs {c.runs}, {c.run_ms:.2f} ms running; work {_count(c.work)} per run"
                       f"{measured}")
        if self.breaks:
            out.append("graph breaks:")
            for b in self.breaks:
                where = f"line {b.line}" if b.line is not None else "?"
                what = "pending graph ran" if b.flushed else "ran eagerly"
                op = f" [{b.op}]" if b.op else ""
                out.append(f"  {where}: {b.reason}{op} ({what}, x{b.count})")
                if b.source:
                    out.append(f"      {b.source.strip()}")
        else:
            out.append("no graph breaks")
        return "\n".join(out)

    def __str__(self) -> str:
        return self.to_text()

    def __repr__(self) -> str:
        return self.to_text()

    def to_json(self) -> dict:
        return {"name": self.name, "min_work": self.min_work, "calls": self.calls,
                "whole": self.whole,
                "compiled_fraction": self.compiled_fraction,
                "clusters": [{k: v for k, v in c.__dict__.items() if k != "compilation"}
                             for c in self.clusters],
                "breaks": [dict(b.__dict__) for b in self.breaks],
                "source": self.source, "first_line": self.first_line}

    def _repr_mimebundle_(self, include=None, exclude=None):
        bundle = {"text/plain": self.to_text()}
        if _HTML_VIEWS:
            bundle["text/html"] = _HTML_VIEWS[-1](self)
        return bundle


def build_report(log: SessionLog, min_work: int, source=None, first_line: int = 1,
                 filename: str | None = None) -> ClusterReport:
    report = ClusterReport(log.name, min_work, source=source, first_line=first_line,
                           filename=filename, whole=log.whole)
    by_key: dict = {}
    for run in log.clusters:
        lines = sorted({loc.line for loc in run.lines})
        key = run.key if run.compiled else ("eager", tuple(lines), run.why_eager)
        summary = by_key.get(key)
        if summary is None:
            summary = by_key[key] = ClusterSummary(
                len(by_key) + 1, run.compiled, run.why_eager, run.ops, run.work, lines,
                sorted({loc.file for loc in run.lines}), run.hlo_instructions, run.kernels,
                compilation=run.compilation)
            report.clusters.append(summary)
        summary.runs += 1
        summary.measured = run.measured or summary.measured
        summary.compile_ms += run.compile_ms
        summary.run_ms += run.run_ms
        if run.compiled:
            report.compiled_work += run.work
    report.eager_work = log.eager_work
    by_break: dict = {}
    for b in log.breaks:
        loc = b.location
        key = (b.reason, loc.file if loc else None, loc.line if loc else None, b.flushed, b.eager_op)
        summary = by_break.get(key)
        if summary is None:
            summary = by_break[key] = BreakSummary(b.reason, loc.line if loc else None,
                                                   loc.file if loc else None,
                                                   loc.source if loc else None, b.flushed, b.eager_op)
            report.breaks.append(summary)
        summary.count += 1
    return report


def _ranges(lines: list[int]) -> str:
    parts, start, prev = [], None, None
    for n in lines:
        if start is None:
            start = prev = n
        elif n == prev + 1:
            prev = n
        else:
            parts.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = prev = n
    if start is not None:
        parts.append(f"{start}" if start == prev else f"{start}-{prev}")
    return ", ".join(parts)


def _count(n: int) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return str(n)
