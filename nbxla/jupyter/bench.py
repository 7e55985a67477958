"""``%xla_bench``: an ``@nbxla.jit`` function against its eager self over a list of sizes.

    def inputs(n):
        return np.random.rand(n).astype(np.float32), np.random.rand(n).astype(np.float32)

    %xla_bench f inputs 1e4 1e5 1e6 1e7

For each size, ``inputs(n)`` builds the arguments; the first compiled call (which compiles)
is timed apart; then compiled and eager calls alternate (median and spread of ``repeats``).
The chart plots time and achieved GB/s against size, with the NumPy copy bandwidth as a
horizontal line: a small roofline-style view of how close each size gets to memory speed.
"""

from __future__ import annotations

import statistics
import time

from . import charts
from . import html as h
from .compare_view import machine_bandwidth

MIME = "application/vnd.nbxla.bench+json"


class Progress:
    """A one-line text progress indicator, updated in place in a notebook."""

    def __init__(self, total: int, label: str):
        self.total, self.label, self.done = total, label, 0
        self.message = "starting"
        self._handle = None
        try:
            from IPython import get_ipython
            from IPython.display import display
            if get_ipython() is not None:
                self._handle = display(self, display_id=True)
        except ImportError:
            pass

    def update(self, done: int, message: str) -> None:
        self.done, self.message = done, message
        if self._handle is not None:
            self._handle.update(self)

    def text(self) -> str:
        width = 20
        filled = round(width * self.done / self.total) if self.total else width
        return f"{self.label} [{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} {self.message}"

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/plain": self.text(),
                "text/html": f'<pre style="{h.MONO} margin: 0;">{h.esc(self.text())}</pre>'}


def bench(f, make_inputs, sizes, *, repeats: int = 5, budget_s: float = 2.0,
          progress: bool = True) -> "BenchReport":
    """Time ``f`` (an ``@nbxla.jit`` function) and ``f``'s plain Python over ``sizes``."""
    eager_fn = getattr(f, "fn", None)
    if eager_fn is None or not hasattr(f, "last_compilation"):
        raise TypeError(f"{f!r} is not an @nbxla.jit function")
    sizes = [int(n) for n in sizes]
    bar = Progress(len(sizes), f"xla_bench {getattr(f, '__name__', 'f')}") if progress else None
    rows = []
    start_all = time.perf_counter()
    for i, n in enumerate(sizes):
        if bar:
            bar.update(i, f"size {n:,}: compiling and timing")
        args = make_inputs(n)
        args = args if isinstance(args, tuple) else (args,)
        misses = f.cache.misses
        t0 = time.perf_counter()
        f(*args)
        first_ms = (time.perf_counter() - t0) * 1e3
        compilation = f.last_compilation
        compiled = f.cache.misses > misses
        eager, comp = [], []
        start = time.perf_counter()
        while len(comp) < repeats and (len(comp) < 1 or time.perf_counter() - start < budget_s):
            t0 = time.perf_counter()
            f(*args)
            comp.append((time.perf_counter() - t0) * 1e3)
            t0 = time.perf_counter()
            eager_fn(*args)
            eager.append((time.perf_counter() - t0) * 1e3)
        rows.append({"size": n, "eager_ms": eager, "compiled_ms": comp, "first_call_ms": first_ms,
                     "compiled_now": compiled,
                     "compile_ms": sum(compilation.timings_ms.values()) if compiled else 0.0,
                     "bytes_moved": compilation.fusion_report.bytes_moved,
                     "kernels": compilation.fusion_report.kernels_after})
    if bar:
        bar.update(len(sizes), f"done in {time.perf_counter() - start_all:.1f} s")
    return BenchReport(getattr(f, "__name__", "f"), rows, machine_bandwidth())


class BenchReport:
    def __init__(self, name: str, rows: list[dict], bandwidth: float):
        self.name, self.rows, self.bandwidth = name, rows, bandwidth
        self._png: bytes | None = None

    @staticmethod
    def _median(values):
        return statistics.median(values)

    def speedups(self) -> list[float]:
        return [self._median(r["eager_ms"]) / self._median(r["compiled_ms"]) for r in self.rows]

    def gbs(self, row: dict, which: str = "compiled_ms") -> float:
        return row["bytes_moved"] / (self._median(row[which]) * 1e6)

    def png(self) -> bytes:
        if self._png is None:
            self._png = charts.bench_chart([r["size"] for r in self.rows],
                                           [r["eager_ms"] for r in self.rows],
                                           [r["compiled_ms"] for r in self.rows],
                                           [r["bytes_moved"] for r in self.rows], self.bandwidth / 1e9)
        return self._png

    def _table_rows(self) -> list[list[str]]:
        out = []
        for r, s in zip(self.rows, self.speedups()):
            out.append([f"{r['size']:,}", h.human_ms(self._median(r["eager_ms"])),
                        h.human_ms(self._median(r["compiled_ms"])), f"{s:.2f}×",
                        f"{self.gbs(r):.2f}", h.human_ms(r["compile_ms"]) if r["compiled_now"] else "cached",
                        h.human_bytes(r["bytes_moved"])])
        return out

    _HEADER = ["size", "NumPy", "compiled", "speedup", "GB/s", "compile", "traffic"]

    def to_text(self) -> str:
        rows = [self._HEADER] + [[c.replace("×", "x") for c in r] for r in self._table_rows()]
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows]
        return (f"xla_bench {self.name} (medians; NumPy copy bandwidth "
                f"{self.bandwidth / 1e9:.1f} GB/s)\n" + "\n".join(lines))

    def __repr__(self) -> str:
        return self.to_text()

    def to_json(self) -> dict:
        return {"version": 1, "name": self.name, "rows": self.rows, "speedups": self.speedups(),
                "machine_copy_gbs": self.bandwidth / 1e9}

    def to_html(self) -> str:
        head = (f'<div style="margin-bottom: 4px;"><b>xla_bench {h.esc(self.name)}</b> '
                f'<span style="{h.MUTED}">· medians of interleaved runs · NumPy copy bandwidth '
                f"{self.bandwidth / 1e9:.1f} GB/s</span></div>")
        table = h.table(self._HEADER, [[h.esc(c) for c in r] for r in self._table_rows()],
                        numeric=set(range(len(self._HEADER))))
        chart = h.img_data_uri(self.png(), "image/png", f"xla_bench {self.name}",
                               "max-width: 100%; width: 800px;")
        return h.container(head + table + chart)

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/plain": self.to_text(), "text/html": self.to_html(), MIME: self.to_json()}
