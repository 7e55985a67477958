"""``%%xla --compare``: eager NumPy against the compiled cell, as numbers and a chart.

Times come from ``cell_check.compare_times`` (interleaved repeats); this module only
presents them, with the compile time beside (never inside) the run times, and the achieved
memory bandwidth: the fusion report's estimated bytes over the median time, against a copy
bandwidth measured once per session.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from . import charts
from . import html as h

MIME = "application/vnd.nbxla.comparison+json"

_bandwidth: float | None = None


def machine_bandwidth() -> float:
    """Bytes per second of a large NumPy copy (read + write), measured once per session.

    A single-threaded copy of 64 MB: a reference line for the roofline-style views, not the
    machine's peak (the compiled code runs on several threads and can go above it).
    """
    global _bandwidth
    if _bandwidth is None:
        src = np.ones(1 << 24, np.float32)
        dst = np.empty_like(src)
        best = float("inf")
        for _ in range(5):
            start = time.perf_counter()
            np.copyto(dst, src)
            best = min(best, time.perf_counter() - start)
        _bandwidth = 2 * src.nbytes / best
    return _bandwidth


class Comparison:
    """Eager vs compiled times of one cell (from a ``cell_check.Timing``)."""

    def __init__(self, timing, compilation, *, reused: bool = False, name: str | None = None,
                 bandwidth: float | None = None):
        self.timing = timing
        self.name = name or compilation.name
        self.eager_ms = [s * 1e3 for s in (timing.numpy_samples or [timing.numpy_s])]
        self.compiled_ms = [s * 1e3 for s in (timing.compiled_samples or [timing.compiled_s])]
        self.compile_ms = sum(compilation.timings_ms.values())
        self.compile_parts = dict(compilation.timings_ms)
        self.reused = reused                 # the compiled program came from the cache
        self.bytes_moved = compilation.fusion_report.bytes_moved
        self.bandwidth = machine_bandwidth() if bandwidth is None else bandwidth
        self._png: bytes | None = None

    @property
    def speedup(self) -> float:
        return self.timing.speedup

    def achieved_gbs(self, which: str = "compiled") -> float:
        ms = statistics.median(self.compiled_ms if which == "compiled" else self.eager_ms)
        return self.bytes_moved / (ms * 1e6) if ms > 0 else 0.0

    def png(self) -> bytes:
        if self._png is None:
            self._png = charts.speedup_chart(self.eager_ms, self.compiled_ms, self.speedup,
                                             self.compile_ms, self.bytes_moved, self.bandwidth / 1e9)
        return self._png

    def to_text(self) -> str:
        cached = " (reused from the cache: no compilation this time)" if self.reused else ""
        return (f"{self.timing}\n"
                f"compile: {self.compile_ms:.1f} ms{cached}; estimated traffic "
                f"{h.human_bytes(self.bytes_moved)} -> {self.achieved_gbs():.2f} GB/s compiled "
                f"(NumPy copy bandwidth {self.bandwidth / 1e9:.1f} GB/s)")

    def __repr__(self) -> str:
        return self.to_text()

    def to_json(self) -> dict:
        return {"version": 1, "name": self.name, "backend": self.timing.backend,
                "eager_ms": self.eager_ms, "compiled_ms": self.compiled_ms,
                "speedup": self.speedup, "compile_ms": self.compile_ms,
                "compile_parts_ms": self.compile_parts, "reused_from_cache": self.reused,
                "bytes_moved": self.bytes_moved, "achieved_gbs": self.achieved_gbs(),
                "machine_copy_gbs": self.bandwidth / 1e9}

    def to_html(self) -> str:
        def spread(ms):
            return (f"{h.human_ms(statistics.median(ms))} "
                    f'<span style="{h.MUTED}">[{h.human_ms(min(ms))} – {h.human_ms(max(ms))}]</span>')
        rows = [["NumPy (eager)", spread(self.eager_ms), f"{self.achieved_gbs('eager'):.2f}"],
                [f"nbxla ({h.esc(self.timing.backend)})", spread(self.compiled_ms),
                 f"{self.achieved_gbs():.2f}"]]
        parts = ", ".join(f"{h.esc(k)} {h.human_ms(v)}" for k, v in self.compile_parts.items())
        color = "#1f77b4" if self.speedup >= 1 else "#d62728"
        head = (f'<div style="margin-bottom: 4px;"><b>{h.esc(self.name)}</b>: '
                f'<span style="font-size: 16px; font-weight: bold; color: {color};">'
                f"{self.speedup:.2f}× {'faster' if self.speedup >= 1 else 'slower'}</span> than NumPy "
                f'<span style="{h.MUTED}">(median of {self.timing.repeats} interleaved runs)</span></div>')
        compile_note = (f'<div style="{h.MUTED} margin: 4px 0;">compile time, not in the run times: '
                        f"{h.human_ms(self.compile_ms)} ({parts})"
                        f"{' — reused from the cache this time' if self.reused else ''}; "
                        f"estimated traffic {h.human_bytes(self.bytes_moved)}; NumPy copy bandwidth "
                        f"{self.bandwidth / 1e9:.1f} GB/s</div>")
        table = h.table(["", "time per run [min – max]", "GB/s"], rows, numeric={1, 2})
        chart = h.img_data_uri(self.png(), "image/png",
                               f"speedup chart: {self.speedup:.2f}x", "max-width: 100%; width: 720px;")
        return h.container(head + table + compile_note + chart)

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/plain": self.to_text(), "text/html": self.to_html(), MIME: self.to_json()}
