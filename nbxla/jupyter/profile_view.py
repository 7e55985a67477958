"""The profile in a notebook: verdicts, time bars per source line, kernels on a roofline.

``ProfileView(profile)`` renders a ``nbxla.profiler.Profile`` as text, as self-contained HTML
(the source with a time bar per line, the kernel table, the decisions, and the roofline as an
inline PNG) and as JSON (``application/vnd.nbxla.profile+json``) for the JupyterLab extension.
``roofline_figure(profile)`` is the matplotlib figure itself (one point per kernel, the
machine's measured bandwidth and peak flops as the roofs).
"""

from __future__ import annotations

import base64
import io

from ..profiler.report import VIEWS
from . import html as h

MIME = "application/vnd.nbxla.profile+json"
BAR = "#1f77b4"
ROOF = "#d62728"
# Point colors by what bounds the kernel.
BOUND_COLORS = {"memory": "#1f77b4", "compute": "#2ca02c", "overhead": "#ff7f0e", "library": "#9467bd",
                "interpreted": "#d62728"}


def roofline_figure(profile, width: float = 6.4, height: float = 3.6):
    """The roofline: attainable GFLOP/s against flops per byte (log-log), the roofs from the
    machine's calibration, one point per kernel and library call that did arithmetic (its
    area grows with its share of the time)."""
    import numpy as np
    from matplotlib.figure import Figure

    lim = profile.limits
    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    ax = fig.subplots()
    points = [k for k in profile.kernels if k.kind in ("kernel", "library", "interpreted") and k.seconds > 0]
    xs = [max(k.intensity, 1e-3) for k in points]
    lo = min(xs + [lim.ridge / 100]) / 2
    hi = max(xs + [lim.ridge * 100]) * 2
    grid = np.geomspace(lo, hi, 200)
    ax.plot(grid, np.minimum(grid * lim.read_gbs, lim.peak_gflops), color=ROOF, lw=1.5,
            label=f"roofs: read {lim.read_gbs:.1f} GB/s, peak {lim.peak_gflops:.0f} GFLOP/s")
    ax.plot(grid, np.minimum(grid * lim.copy_gbs, lim.peak_gflops), color=ROOF, lw=1, ls="--",
            label=f"copy {lim.copy_gbs:.1f} GB/s")
    total = profile.total_s or 1.0
    for k, x in zip(points, xs):
        y = max(k.gflops, 1e-4)
        ax.scatter([x], [y], s=20 + 400 * k.seconds / total, color=BOUND_COLORS.get(k.bound, "#555"),
                   alpha=0.75, edgecolors="black", linewidths=0.5, zorder=3)
        ax.annotate(k.name, (x, y), textcoords="offset points", xytext=(6, 4), fontsize=7)
    for bound, color in BOUND_COLORS.items():
        if any(k.bound == bound for k in points):
            ax.scatter([], [], color=color, label=f"{bound} bound" if bound not in ("library", "interpreted")
                       else bound, s=25)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (flops per byte moved)")
    ax.set_ylabel("GFLOP/s achieved")
    ax.set_title(f"{profile.name}: one point per kernel (area: share of time)", fontsize=9, loc="left")
    ax.legend(fontsize=7, frameon=False, loc="lower right")
    ax.spines[["top", "right"]].set_visible(False)
    return fig


def roofline_png(profile) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    fig = roofline_figure(profile)
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def _seconds(s: float) -> str:
    return h.human_ms(s * 1e3)


class ProfileView:
    """A profile as text, HTML and JSON (see the module docstring)."""

    def __init__(self, profile):
        self.profile = profile
        self._png = None

    def png(self) -> bytes:
        if self._png is None:
            self._png = roofline_png(self.profile)
        return self._png

    def to_text(self) -> str:
        return self.profile.to_text()

    def __repr__(self) -> str:
        return self.to_text()

    def to_json(self) -> dict:
        return {"version": 1, **self.profile.to_json()}

    def lines_html(self) -> str:
        """The source with a time bar per line (``nbxla-line-bar``), then the rows without one."""
        p = self.profile
        per_line = p.line_seconds()
        scale = max([p.total_s] + list(per_line.values())) or 1.0
        kernels = {(t.file, t.line): t.kernels for t in p.lines}
        cell = "padding: 0 6px; white-space: pre; vertical-align: middle;"
        rows = []

        def row(label: str, seconds: float, text: str, title: str = "") -> str:
            width = 100 * seconds / scale
            share = f"{seconds / p.total_s:.1%}" if seconds and p.total_s else ""
            return (f'<tr class="nbxla-line" title="{h.esc(title)}">'
                    f'<td style="{cell} {h.MUTED} text-align: right;">{h.esc(label)}</td>'
                    f'<td style="{cell} width: 160px;"><div class="nbxla-line-bar" style="background: {BAR}; '
                    f'height: 10px; width: {width:.1f}%; min-width: {1 if seconds else 0}px;"></div></td>'
                    f'<td style="{cell} text-align: right;">{share}</td>'
                    f'<td style="{cell} {h.MONO}">{h.esc(text)}</td></tr>')
        for number, text in p.source_lines:
            t = per_line.get(number, 0.0)
            names = kernels.get((p.source_file, number), [])
            rows.append(row(str(number), t, text, ("kernels: " + ", ".join(names)) if names else ""))
        shown = {n for n, _ in p.source_lines}
        for t in p.lines:
            if t.file != p.source_file or t.line not in shown:
                rows.append(row(f"{t.file.rsplit('/', 1)[-1]}:{t.line}", t.seconds, t.text.strip()))
        for label, t in p.unattributed.items():
            if t > 0:
                rows.append(row("", t, label))
        return (f'<table class="nbxla-profile-lines" style="border-collapse: collapse; {h.FONT}">'
                + "".join(rows) + "</table>")

    def kernels_html(self) -> str:
        p = self.profile
        rows = []
        for k in p.kernels:
            if k.kind == "view":
                continue
            share = k.seconds / p.total_s if p.total_s else 0.0
            rows.append([h.esc(k.name), f"{share:.1%}", _seconds(k.seconds), f"{k.calls:.0f}",
                         h.human_bytes(k.bytes), f"{k.flops:.3g}", f"{k.gbs:.2f}", f"{k.gflops:.2f}",
                         f"{k.bandwidth_fraction:.2f}", f"{k.flops_fraction:.2f}", h.esc(k.verdict)])
        return h.table(["kernel", "share", "time", "calls", "bytes", "flops", "GB/s", "GFLOP/s",
                        "of BW", "of peak", "verdict"], rows, numeric=set(range(1, 10)))

    def to_html(self) -> str:
        p, lim = self.profile, self.profile.limits
        head = (f'<div style="margin-bottom: 4px;"><b>{h.esc(p.name)}</b>: '
                f'<span class="nbxla-profile-verdict" style="font-weight: bold;">{h.esc(p.verdict)}</span></div>'
                f'<div style="{h.MUTED} margin-bottom: 6px;">call {_seconds(p.call_s)} (normal path), timed run '
                f"{_seconds(p.total_s)} ({p.runs} runs); machine: read {lim.read_gbs:.1f} GB/s, copy "
                f"{lim.copy_gbs:.1f} GB/s, peak {lim.peak_gflops:.0f} GFLOP/s on {lim.threads} threads</div>")
        decisions = "".join(f"<li>{h.esc(d.to_text())}</li>" for d in p.decisions)
        decisions = (f'<div style="margin-top: 6px;"><b>decisions</b><ul class="nbxla-profile-decisions" '
                     f'style="margin: 2px 0;">{decisions}</ul></div>') if decisions else ""
        b64 = base64.b64encode(self.png()).decode("ascii")
        chart = (f'<img class="nbxla-roofline" src="data:image/png;base64,{b64}" '
                 f'alt="roofline: one point per kernel" style="max-width: 100%; width: 640px;"/>')
        body = (head + '<div style="margin: 4px 0;"><b>time per source line</b></div>' + self.lines_html()
                + '<div style="margin: 8px 0 4px;"><b>kernels</b></div>' + self.kernels_html()
                + decisions + f'<div style="margin-top: 6px;">{chart}</div>')
        return f'<div class="nbxla-profile">{h.container(body)}</div>'

    def _repr_html_(self) -> str:
        return self.to_html()

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/plain": self.to_text(), "text/html": self.to_html(), MIME: self.to_json()}


VIEWS.append(ProfileView)       # a Profile displays itself with this view once it is imported
