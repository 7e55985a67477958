"""Matplotlib charts as PNG bytes, for the speedup and benchmark views.

Figures are made with ``matplotlib.figure.Figure`` and the Agg canvas directly, never through
``pyplot``: nothing is shown twice, the user's backend and current figure are left alone.
"""

from __future__ import annotations

import io

import numpy as np

EAGER = "#8c8c8c"
COMPILED = "#1f77b4"
BANDWIDTH = "#d62728"


def _figure(width: float, height: float):
    from matplotlib.figure import Figure
    return Figure(figsize=(width, height), dpi=100, layout="constrained")


def _png(fig) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def speedup_chart(eager_ms: list[float], compiled_ms: list[float], speedup: float,
                  compile_ms: float, bytes_moved: int, bandwidth_gbs: float | None) -> bytes:
    """Eager vs compiled (median bar, every run a dot, min-max whiskers) and achieved GB/s."""
    fig = _figure(7.2, 2.3)
    ax, bw = fig.subplots(1, 2, width_ratios=[3, 2])
    for y, samples, color in ((1, eager_ms, EAGER), (0, compiled_ms, COMPILED)):
        med = float(np.median(samples))
        ax.barh(y, med, color=color, alpha=0.85, height=0.6)
        ax.errorbar(med, y, xerr=[[med - min(samples)], [max(samples) - med]], fmt="none",
                    ecolor="black", capsize=4, lw=1)
        ax.plot(samples, [y] * len(samples), "o", color="black", ms=2.5, alpha=0.6)
    ax.set_yticks([0, 1], ["nbxla (compiled)", "NumPy (eager)"])
    ax.set_xlabel("time per run (ms); bar: median, whiskers: min–max")
    longest = max(max(eager_ms), max(compiled_ms))
    ax.set_xlim(0, longest * 1.8)
    ax.set_title(f"median of {len(compiled_ms)} runs; compile {compile_ms:.0f} ms (not included)",
                 fontsize=9, loc="left")
    ax.text(max(compiled_ms) + longest * 0.03, 0, f"{speedup:.2f}×" + ("" if speedup >= 1 else " (slower)"),
            ha="left", va="center", fontsize=13, fontweight="bold",
            color=COMPILED if speedup >= 1 else BANDWIDTH)
    ax.spines[["top", "right"]].set_visible(False)
    gbs = [bytes_moved / (float(np.median(s)) * 1e6) for s in (eager_ms, compiled_ms)]
    bw.barh([1, 0], gbs, color=[EAGER, COMPILED], alpha=0.85, height=0.6)
    bw.set_yticks([0, 1], ["compiled", "eager"])
    if bandwidth_gbs:
        bw.axvline(bandwidth_gbs, color=BANDWIDTH, ls="--", lw=1)
        bw.text(bandwidth_gbs, 1.45, " copy bandwidth", color=BANDWIDTH, fontsize=8, va="center")
    bw.set_xlim(0, max(gbs + [bandwidth_gbs or 0]) * 1.35 or 1)
    bw.set_ylim(-0.5, 1.7)
    bw.set_xlabel("GB/s (fused kernels' bytes ÷ time)")
    bw.spines[["top", "right"]].set_visible(False)
    return _png(fig)


def bench_chart(sizes: list[int], eager_ms: list[list[float]], compiled_ms: list[list[float]],
                bytes_moved: list[int], bandwidth_gbs: float | None) -> bytes:
    """Time and achieved GB/s against problem size, eager vs compiled (log-log)."""
    fig = _figure(8, 2.9)
    tax, gax = fig.subplots(1, 2)
    med = {name: np.array([np.median(s) for s in runs]) for name, runs in
           (("eager", eager_ms), ("compiled", compiled_ms))}
    for name, runs, color in (("NumPy (eager)", eager_ms, EAGER), ("nbxla (compiled)", compiled_ms, COMPILED)):
        m = np.array([np.median(s) for s in runs])
        tax.plot(sizes, m, "o-", color=color, label=name, ms=4)
        tax.fill_between(sizes, [min(s) for s in runs], [max(s) for s in runs], color=color, alpha=0.2)
        gbs = np.array(bytes_moved) / (m * 1e6)
        gax.plot(sizes, gbs, "o-", color=color, label=name, ms=4)
    for n, e, c in zip(sizes, med["eager"], med["compiled"]):
        tax.annotate(f"{e / c:.1f}×", (n, c), textcoords="offset points", xytext=(0, -12),
                     ha="center", fontsize=8, color=COMPILED)
    if bandwidth_gbs:
        gax.axhline(bandwidth_gbs, color=BANDWIDTH, ls="--", lw=1, label="copy bandwidth")
    for ax, label in ((tax, "time per run (ms); band: min–max"), (gax, "GB/s (fused kernels' bytes ÷ time)")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("size")
        ax.set_ylabel(label, fontsize=8)
        ax.spines[["top", "right"]].set_visible(False)
        ax.legend(fontsize=7, frameon=False)
    tax.set_title("speedup written under each compiled point", fontsize=9, loc="left")
    return _png(fig)
