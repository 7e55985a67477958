"""The stage viewer: what the compiler made of a cell, as a display object.

``StageView(compilation)`` reads a ``Compilation`` record (it never compiles): its stages,
timings and fusion report.  It renders as

* ``text/plain`` — one stage's text, or a summary with the fusion report (terminal IPython);
* ``text/html`` — sections for every stage, HLO syntax-highlighted, and the cell's source
  beside the optimized HLO with each line colored by the kernel it ended up in;
* ``application/vnd.nbxla.stages+json`` — the same facts as data, for the JupyterLab extension.
"""

from __future__ import annotations

import linecache
import subprocess
from collections import Counter

from ..errors import NbxlaError
from ..hlo.graphviz import render_svg
from . import html as h

MIME = "application/vnd.nbxla.stages+json"
SCHEMA_VERSION = 1

HTML_STAGE_LIMIT = 30_000      # characters of one stage shown in HTML (the rest: a note)
JSON_STAGE_LIMIT = 400_000     # characters of one stage carried in the JSON bundle
HLO_STAGES = {"hlo", "passes", "optimized_hlo"}
STAGE_TITLES = {
    "hlo": "HLO as traced",
    "passes": "optimization passes (module after each pass that changed it)",
    "optimized_hlo": "optimized HLO, beside the source",
    "optimized_hlo_dot": "graph of the optimized HLO (fusions as clusters)",
    "fusion_report": "fusion report: kernels, bytes, FLOPs",
    "buffer_assignment": "buffer assignment",
    "llvm_ir": "LLVM IR",
    "llvm_ir_optimized": "LLVM IR after LLVM's optimizations",
    "asm": "machine code (assembly)",
    "ptx": "PTX (CUDA)",
    "profile": "profile: time per kernel and per source line, verdicts, decisions",
}


def _clip(text: str, limit: int) -> tuple[str, int]:
    """(text cut to ``limit`` characters at a line end, number of characters left out)."""
    if len(text) <= limit:
        return text, 0
    cut = text.rfind("\n", 0, limit)
    cut = limit if cut <= 0 else cut
    return text[:cut], len(text) - cut


class StageView:
    """A Compilation's stages for display; ``stages`` picks some (default: all it has)."""

    def __init__(self, compilation, stages=None, *, source: str | None = None, first_line: int = 1,
                 title: str | None = None):
        self.compilation = compilation
        self.single = stages is not None and len(stages) == 1
        names = list(compilation.stages) if stages is None else list(stages)
        if stages is not None:
            for name in names:              # an unknown stage fails now, with the list of stages
                compilation.stage(name)
        self.stages = names
        self.title = title or compilation.name
        self.report = compilation.fusion_report
        self.kernels = _kernels(compilation, self.report)
        self.source = _source_lines(compilation, self.kernels, source, first_line)

    # ---- text -------------------------------------------------------------------------------

    def header_text(self) -> str:
        c, t = self.compilation, self.compilation.timings_ms
        return (f"{self.title}: {c.backend} on {c.device}; compiled in {sum(t.values()):.1f} ms "
                f"({', '.join(f'{k} {v:.1f}' for k, v in t.items())}); "
                f"why compiled: {c.explanation or 'first compilation'}")

    def to_text(self) -> str:
        if self.single:
            return self.compilation.stage(self.stages[0])
        return "\n".join([self.header_text(), self.report.to_text(),
                          f"stages: {', '.join(self.stages)}  (%xla_ir NAME, or "
                          f"compilation.stage(NAME), shows one)"])

    def __repr__(self) -> str:
        return self.to_text()

    # ---- data -------------------------------------------------------------------------------

    def to_json(self) -> dict:
        c = self.compilation
        stages, truncated = {}, []
        for name in self.stages:
            text, left = _clip(c.stage(name), JSON_STAGE_LIMIT)
            stages[name] = text
            if left:
                truncated.append(name)
        return {
            "version": SCHEMA_VERSION,
            "name": self.title,
            "module": c.name,
            "backend": c.backend,
            "device": c.device,
            "explanation": c.explanation,
            "timings_ms": dict(c.timings_ms),
            "stage_order": list(self.stages),
            "stages": stages,
            "truncated": truncated,
            "kernels_before": self.report.kernels_before,
            "kernels_after": self.report.kernels_after,
            "kernels": [{k: v for k, v in kernel.items() if k != "lines_set"} for kernel in self.kernels],
            "refusals": [{"producer": r.producer, "consumer": r.consumer, "reason": r.reason}
                         for r in self.report.refusals],
            "source": self.source,
        }

    # ---- HTML -------------------------------------------------------------------------------

    def to_html(self) -> str:
        parts = [self._header_html()]
        for name in self.stages:
            opened = self.single or name in ("optimized_hlo", "fusion_report")
            parts.append(h.details(f"{h.esc(name)} <span style=\"{h.MUTED} font-weight: normal;\">"
                                   f"— {h.esc(STAGE_TITLES.get(name, name))}</span>",
                                   self._stage_html(name), open_=opened))
        return h.container("".join(parts))

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/plain": self.to_text(), "text/html": self.to_html(), MIME: self.to_json()}

    def _header_html(self) -> str:
        c, r = self.compilation, self.report
        t = c.timings_ms
        timing = ", ".join(f"{h.esc(k)} {h.human_ms(v)}" for k, v in t.items())
        return (f'<div style="margin-bottom: 4px;"><b>{h.esc(self.title)}</b> '
                f'<span style="{h.MUTED}">· {h.esc(c.backend)} on {h.esc(c.device)} · compiled in '
                f'{h.human_ms(sum(t.values()))} ({timing}) · {r.kernels_before} kernels before fusion '
                f'→ <b>{r.kernels_after}</b> after · estimated traffic {h.human_bytes(r.bytes_moved)}'
                f'</span><br/><span style="{h.MUTED}">why compiled: {h.esc(c.explanation or "first compilation")}'
                f"</span></div>")

    def _stage_html(self, name: str) -> str:
        if name == "optimized_hlo":
            return self._source_beside_hlo_html()
        if name == "fusion_report":
            return self._kernels_html() + h.details("as text", h.plain_pre(self.compilation.stage(name)))
        if name == "optimized_hlo_dot":
            return _graph_html(self.compilation.stage(name))
        text, left = _clip(self.compilation.stage(name), HTML_STAGE_LIMIT)
        body = "\n".join(h.highlight_hlo_lines(text)) if name in HLO_STAGES else h.esc(text)
        return h.pre(body) + _left_out_note(name, left)

    def _source_beside_hlo_html(self) -> str:
        color = {k["name"]: k["color"] for k in self.kernels}
        by_computation = {k["computation"]: k["name"] for k in self.kernels if k["computation"]}
        text, left = _clip(self.compilation.stage("optimized_hlo"), HTML_STAGE_LIMIT)
        hlo_rows, inside = [], None
        for raw, line in zip(text.split("\n"), h.highlight_hlo_lines(text)):
            instr, comp = h.hlo_line_owner(raw)
            if comp is not None:
                inside = by_computation.get(comp)
            owner = inside or (instr if instr in color else None)
            hlo_rows.append(_row(line or " ", color.get(owner), _badge(self.kernels, owner)))
            if raw.strip() == "}":
                inside = None
        hlo = h.pre("".join(hlo_rows)) + _left_out_note("optimized_hlo", left)
        return ('<div style="display: flex; flex-wrap: wrap; gap: 10px; align-items: flex-start;">'
                f'<div style="flex: 0 1 auto; min-width: 16em; max-width: 100%;">'
                f'<div style="{h.MUTED} margin-bottom: 2px;">source {h.esc(self.source["file"] or "")}'
                f"</div>{self._source_html()}</div>"
                f'<div style="flex: 1 1 30em; min-width: 0;"><div style="{h.MUTED} margin-bottom: 2px;">'
                f"optimized HLO (each kernel's lines in its color)</div>{hlo}</div></div>"
                + self._legend_html())

    def _source_html(self) -> str:
        lines = self.source["lines"]
        if not lines:
            return h.pre(f'<span style="{h.MUTED}">(source text not available)</span>')
        width = len(str(lines[-1]["line"]))
        names = {k["name"]: k for k in self.kernels}
        rows = []
        for entry in lines:
            owners = entry["kernels"]
            number = f'<span style="color: #999;">{entry["line"]:>{width}} </span>'
            text = h.esc(entry["text"]) if entry["text"] is not None else f'<span style="{h.MUTED}">⋯</span>'
            badges = "".join(_badge(self.kernels, k) for k in owners)
            rows.append(_row(number + (text or " "), names[owners[0]]["color"] if owners else None, badges))
        return h.pre("".join(rows))

    def _legend_html(self) -> str:
        if not self.kernels:
            return f'<div style="{h.MUTED}">no kernels: nothing to compute</div>'
        items = "".join(
            f'<span style="display: inline-block; margin: 2px 8px 2px 0;">'
            f'<span style="background: {k["color"]}; padding: 0 6px; border-radius: 3px;">'
            f'K{k["index"]}</span> {h.esc(k["name"])} ({h.esc(k["kind"])})</span>'
            for k in self.kernels)
        return f'<div style="margin-top: 4px;">{items}</div>'

    def _kernels_html(self) -> str:
        r = self.report
        rows = []
        for k in self.kernels:
            moved = k["bytes_read"] + k["bytes_written"]
            intensity = k["flops"] / moved if moved else 0.0
            ops = ", ".join(f"{op}×{n}" if n > 1 else op for op, n in sorted(k["ops"].items()))
            lines = ", ".join(str(n) for n in k["lines"]) or "–"
            rows.append([f'<span style="background: {k["color"]}; padding: 0 6px; border-radius: 3px;">'
                         f'K{k["index"]}</span>', h.esc(k["name"]), h.esc(k["kind"]), h.esc(ops),
                         h.esc(lines), h.human_bytes(k["bytes_read"]), h.human_bytes(k["bytes_written"]),
                         h.human_count(k["flops"]), h.human_count(k["transcendentals"]),
                         f"{intensity:.2g}"])
        head = (f'<div style="margin-bottom: 4px;">{r.kernels_before} kernels before fusion → '
                f'<b>{r.kernels_after}</b> after; estimated memory traffic '
                f"<b>{h.human_bytes(r.bytes_moved)}</b></div>")
        table = h.table(["", "kernel", "kind", "ops", "source lines", "reads", "writes", "FLOPs",
                         "transcendental", "FLOP/byte"], rows, numeric={5, 6, 7, 8, 9})
        refused = ""
        if r.refusals:
            refused = h.details(f"{len(r.refusals)} fusion(s) refused", "<ul>" + "".join(
                f"<li><code>{h.esc(x.producer)}</code> into <code>{h.esc(x.consumer)}</code>: "
                f"{h.esc(x.reason)}</li>" for x in r.refusals) + "</ul>")
        return head + table + refused


# ---- facts gathered from the record --------------------------------------------------------

def _kernels(compilation, report) -> list[dict]:
    """Per kernel: its facts from the fusion report, its color and its fused computation."""
    by_name = {i.name: i for i in compilation.optimized.instructions()}
    kernels = []
    for index, k in enumerate(report.kernels, start=1):
        instr = by_name.get(k.name)
        called = instr.called_computations if instr is not None and instr.opcode == "fusion" else []
        kernels.append({
            "index": index, "name": k.name, "kind": k.kind, "ops": dict(k.ops),
            "color": h.KERNEL_COLORS[(index - 1) % len(h.KERNEL_COLORS)],
            "computation": called[0].name if called else None,
            "flops": k.flops, "transcendentals": k.transcendentals,
            "bytes_read": k.bytes_read, "bytes_written": k.bytes_written,
            "files": sorted({loc.file for loc in k.source_lines}),
            "lines": sorted({loc.line for loc in k.source_lines}),
            "lines_set": {(loc.file, loc.line) for loc in k.source_lines},
        })
    return kernels


def _source_lines(compilation, kernels, source: str | None, first_line: int) -> dict:
    """The source beside the HLO: its lines, each with the kernels its instructions went to.

    The text is ``source`` when the caller has it (the magic passes the cell); otherwise it is
    rebuilt from the instructions' locations, and from ``linecache`` for lines between them.
    """
    located = [i.location for i in compilation.hlo.instructions() if i.location is not None]
    files = Counter(loc.file for loc in located)
    main_file = files.most_common(1)[0][0] if files else None
    owners: dict[int, list[str]] = {}
    for k in kernels:
        for file, line in sorted(k["lines_set"]):
            if file == main_file and k["name"] not in owners.setdefault(line, []):
                owners[line].append(k["name"])
    if source is not None:
        texts = dict(enumerate(source.rstrip("\n").split("\n"), start=first_line))
    else:
        texts = {loc.line: loc.source.rstrip("\n") for loc in located
                 if loc.file == main_file and loc.source is not None}
        cached = linecache.getlines(main_file) if main_file else []
        if texts or owners:
            for n in range(min([*texts, *owners]), max([*texts, *owners]) + 1):
                if n not in texts and 0 < n <= len(cached):
                    texts[n] = cached[n - 1].rstrip("\n")
    numbers = sorted(set(texts) | set(owners))
    if numbers:
        numbers = list(range(numbers[0], numbers[-1] + 1))
    return {"file": main_file, "lines": [{"line": n, "text": texts.get(n), "kernels": owners.get(n, [])}
                                         for n in numbers]}


# ---- small pieces ---------------------------------------------------------------------------

def _row(inner: str, color: str | None, badges: str = "") -> str:
    style = "display: block;" + (f" background: {color};" if color else "")
    return f'<span style="{style}">{inner}{badges}</span>'


def _badge(kernels: list[dict], name: str | None) -> str:
    for k in kernels:
        if k["name"] == name:
            return (f'<span style="float: right; margin-left: 8px; color: #555; font-size: 10px;">'
                    f'K{k["index"]}</span>')
    return ""


def _left_out_note(name: str, left: int) -> str:
    if not left:
        return ""
    return (f'<div style="{h.MUTED}">… {left} more characters not shown; '
            f"<code>compilation.stage({h.esc(repr(name))})</code> has all of it.</div>")


def _graph_html(dot_text: str) -> str:
    """The graph as an SVG image when Graphviz's ``dot`` is installed, else a note and the DOT."""
    dot_section = h.details("DOT source", h.plain_pre(dot_text))
    try:
        svg = render_svg(dot_text, timeout=20)
    except (NbxlaError, OSError, subprocess.SubprocessError) as e:    # a timeout, a crash
        return (f'<div style="{h.MUTED}">Graphviz could not draw this graph: {h.esc(e)}</div>'
                + dot_section)
    if svg is None:
        return (f'<div style="{h.MUTED}">Graphviz\'s <code>dot</code> is not installed, so the graph '
                "is not drawn here (install the <code>graphviz</code> system package, e.g. "
                "<code>apt-get install graphviz</code>, or paste the DOT text below into any "
                "Graphviz viewer).</div>" + h.details("DOT source", h.plain_pre(dot_text), open_=True))
    return h.img_data_uri(svg.encode(), "image/svg+xml", "HLO graph") + dot_section
