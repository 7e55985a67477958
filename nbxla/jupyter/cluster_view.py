"""The clustering report in a notebook: source lines colored by cluster, graph breaks marked.

``render_html(report)`` is what ``nbxla.explain(...)`` and ``%%xla --auto --explain`` show
(self-contained HTML, inline styles only, like the other views); ``report.to_text()`` is the
plain-text fallback.  It only reads the ``ClusterReport`` record.
"""

from __future__ import annotations

from . import html as h

BREAK_STYLE = "border-left: 3px solid #d73a49; background: #fff0f0;"
EAGER_COLOR = "#eeeeee"


def _cluster_colors(report) -> dict[int, str]:
    colors, k = {}, 0
    for c in report.clusters:
        if c.compiled:
            colors[c.number] = h.KERNEL_COLORS[k % len(h.KERNEL_COLORS)]
            k += 1
        else:
            colors[c.number] = EAGER_COLOR
    return colors


def _source_html(report, colors) -> str:
    """The function's or cell's lines, each colored by the (first) cluster with work on it."""
    if not report.source:
        return ""
    owner: dict[int, int] = {}
    for c in report.clusters:
        for line in c.lines:
            owner.setdefault(line, c.number)
    breaks: dict[int, list] = {}
    for b in report.breaks:
        if b.line is not None:
            breaks.setdefault(b.line, []).append(b)
    rows = []
    for i, text in enumerate(report.source):
        n = report.first_line + i
        style = f"background: {colors[owner[n]]};" if n in owner else ""
        note = ""
        if n in breaks:
            style += BREAK_STYLE
            note = "  ◀ break: " + "; ".join(b.reason for b in breaks[n])
        tag = f"[{owner[n]}]" if n in owner else ""
        rows.append(f'<div style="{style} white-space: pre;">'
                    f'<span style="{h.MUTED}">{n:4d} {tag:>4} </span>{h.esc(text)}'
                    f'<span style="color: #d73a49;">{h.esc(note)}</span></div>')
    return (f'<div style="{h.MONO} margin: 6px 0; padding: 4px; border: 1px solid #e4e4e4; '
            f'border-radius: 4px; overflow: auto;">' + "".join(rows) + "</div>")


def render_html(report) -> str:
    colors = _cluster_colors(report)
    head = (f'<div style="margin-bottom: 4px;"><b>nbxla auto-clustering: {h.esc(report.name)}</b> '
            f'<span style="{h.MUTED}">· {h.esc(report.headline())}</span></div>'
            f'<div style="{h.MUTED}">cost model: clusters with less than {report.min_work} '
            "elements of work run eagerly with NumPy; larger ones are timed both ways on their "
            "first run and run the faster way</div>")
    if report.whole:
        head += f'<div style="{h.MUTED}">whole function: {h.esc(report.whole)}</div>'
    if report.calls:
        head += f'<div style="{h.MUTED}">calls: {h.esc(report.calls)}</div>'

    rows = []
    for c in report.clusters:
        swatch = (f'<span style="display: inline-block; width: 0.9em; height: 0.9em; '
                  f'background: {colors[c.number]}; border: 1px solid #bbb;"></span>')
        how = (f"compiled: {c.hlo_instructions} HLO → {c.kernels} kernel(s)" if c.compiled
               else f"eager: {h.esc(c.why_eager)}")
        if c.measured:
            how += f'<br><span style="{h.MUTED}">{h.esc(c.measured)}</span>'
        rows.append([f"{swatch} {c.number}", how, str(c.ops), h.esc(c.line_text()),
                     f"{c.compile_ms:.1f}", str(c.runs), f"{c.run_ms:.2f}", h.human_count(c.work)])
    clusters = h.table(["cluster", "how it ran", "ops", "lines", "compile ms", "runs", "run ms",
                        "work/run"], rows, numeric={2, 4, 5, 6, 7}) if rows else \
        f'<div style="{h.MUTED}">no array work was recorded</div>'
    brows = [[str(b.line) if b.line is not None else "?", h.esc(b.reason),
              h.esc(b.op or ""), "pending graph ran" if b.flushed else "ran eagerly", str(b.count)]
             for b in report.breaks]
    breaks = h.table(["line", "graph break", "operation", "effect", "times"], brows, numeric={4}) \
        if brows else f'<div style="{h.MUTED}">no graph breaks</div>'
    return h.container(head + _source_html(report, colors) + clusters +
                       '<div style="margin-top: 6px;"></div>' + breaks)
