"""The profile record: kernels on the roofline, time per source line, decisions in words.

A ``Profile`` is plain data (built by ``profiler.build``); it renders as text here and as
HTML, a mimebundle and a roofline chart in ``jupyter/profile_view``.  Times are per run of
the compiled program; "total" is the measured time of a timed run, and the rows of the
per-line table (source lines, steps without a line, the dispatch between steps) add up to it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .machine import MachineLimits

# A kernel whose calls each take less than this, and sit far below both roofs, is bound by
# fixed costs (the call, thread start-up, dispatch): its verdict says how much work a call is.
OVERHEAD_US = 10.0
# Renderers registered from above (``jupyter/profile_view`` adds the HTML view with the bars
# and the roofline): ``view(profile)`` gives an object with ``_repr_mimebundle_``.
VIEWS: list = []

# At this fraction of a roof or more, a kernel is "at" it: only less traffic (or fewer flops) helps.
AT_ROOF = 0.6
# Above this fraction of the memory roof a kernel's data came from the caches, not memory.
ABOVE_ROOF = 1.3
# A kernel moving less than this per call works from the caches: the memory roof says nothing
# about it, and a short call is bound by its fixed costs.
CACHE_BYTES = 1 << 20


@dataclass
class KernelRow:
    """One step of the compiled program: a kernel, a library call, a loop's own dispatch..."""
    name: str                         # its HLO instruction
    program: str                      # the computation it runs in (the entry, a loop body)
    kind: str                         # kernel | library | loop | native-loop | control | interpreted | view
    how: str                          # how it runs, in words
    calls: float                      # per run
    seconds: float                    # per run, exclusive (without steps run inside it)
    flops: float                      # per run
    bytes_read: float                 # per run
    bytes_written: float              # per run
    lines: list[str] = field(default_factory=list)    # "file:line" of the ops it holds
    bound: str = ""                   # memory | compute | overhead | library | loop | interpreted | none
    verdict: str = ""
    bandwidth_fraction: float = 0.0   # achieved GB/s over this machine's roof for its traffic
    flops_fraction: float = 0.0       # achieved GFLOP/s over the peak
    in_native_loop: bool = False      # its time is a share of a native loop's (see build)

    @property
    def bytes(self) -> float:
        return self.bytes_read + self.bytes_written

    @property
    def gbs(self) -> float:
        return self.bytes / self.seconds / 1e9 if self.seconds > 0 else 0.0

    @property
    def gflops(self) -> float:
        return self.flops / self.seconds / 1e9 if self.seconds > 0 else 0.0

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes if self.bytes else 0.0

    @property
    def us_per_call(self) -> float:
        return self.seconds / self.calls * 1e6 if self.calls else 0.0


@dataclass
class LineTime:
    file: str
    line: int
    seconds: float                    # per run
    text: str = ""                    # the source line
    kernels: list[str] = field(default_factory=list)


@dataclass
class Decision:
    """A compiler decision about a source line, in words (``-loopinfo`` style)."""
    line: int | None
    kind: str                         # loop | fusion | library | kernel
    text: str
    file: str = ""

    def to_text(self) -> str:
        return f"line {self.line}: {self.text}" if self.line is not None else self.text


@dataclass
class LoopInfo:
    """A Python loop the tracer met (one entry of ``Compilation.loop_decisions``), with what
    the profile measured of it."""
    line: int
    how: str                          # "rolled" | "unrolled"
    why: str
    while_name: str | None = None     # the while it became, when rolled
    trips: float | None = None        # iterations per execution, measured
    body_kernels: int | None = None
    runs_as: str = ""                 # native loop / host-driven loop (why)


@dataclass
class Profile:
    name: str
    limits: MachineLimits
    runs: int                         # timed runs made
    total_s: float                    # a timed run (hooks on); the per-line rows add up to it
    call_s: float                     # a normal call (no hooks): what the caller pays
    kernels: list[KernelRow]
    lines: list[LineTime]             # source lines with time (and the lines without)
    unattributed: dict[str, float]    # "(no source line)", "(dispatch between steps)" -> seconds
    loops: list[LoopInfo]
    decisions: list[Decision]
    verdict: str
    source_file: str = ""             # the cell's or function's file
    source_lines: list[tuple[int, str]] = field(default_factory=list)   # the lines shown

    @property
    def lines_s(self) -> float:
        return sum(line.seconds for line in self.lines)

    @property
    def attributed_s(self) -> float:
        """Source lines plus the rows without a line: the measured total, by construction."""
        return self.lines_s + sum(self.unattributed.values())

    def line_seconds(self) -> dict[int, float]:
        """Seconds per line of the profiled source (its own file)."""
        out: dict[int, float] = {}
        for t in self.lines:
            if t.file == self.source_file:
                out[t.line] = out.get(t.line, 0.0) + t.seconds
        return out

    def to_text(self, width: int = 30) -> str:
        lim = self.limits
        out = [f"nbxla profile: {self.name}  ({self.runs} timed runs)",
               f"  call {_time(self.call_s)} (normal path); timed run {_time(self.total_s)}, "
               f"of which steps {_time(sum(k.seconds for k in self.kernels))}",
               f"  machine: read {lim.read_gbs:.1f} GB/s, copy {lim.copy_gbs:.1f} GB/s, "
               f"peak {lim.peak_gflops:.0f} GFLOP/s ({lim.threads} threads)",
               f"  verdict: {self.verdict}", "", "kernels (time share, per run):"]
        out.append(f"  {'share':>6} {'time':>9} {'calls':>7} {'GB/s':>7} {'GFLOP/s':>8} "
                   f"{'of BW':>6} {'of peak':>7}  name: verdict")
        shown = [k for k in self.kernels if k.kind != "view"]
        for k in shown:
            share = k.seconds / self.total_s if self.total_s else 0.0
            out.append(f"  {share:6.1%} {_time(k.seconds):>9} {k.calls:7.0f} {k.gbs:7.2f} {k.gflops:8.2f} "
                       f"{k.bandwidth_fraction:6.2f} {k.flops_fraction:7.2f}  {k.name}: {k.verdict}")
        views = [k for k in self.kernels if k.kind == "view"]
        if views:
            out.append(f"  ({len(views)} views and names: {_time(sum(k.seconds for k in views))})")
        out += ["", "time per source line:"]
        out += self.line_table(width)
        if self.decisions:
            out += ["", "decisions:"]
            out += [f"  {d.to_text()}" for d in self.decisions]
        return "\n".join(out)

    def line_table(self, width: int = 30) -> list[str]:
        """The source with a bar per line (the compiled program's line profiler)."""
        per_line = self.line_seconds()
        rows = []
        scale = max([self.total_s] + list(per_line.values())) or 1.0
        for number, text in self.source_lines:
            t = per_line.get(number, 0.0)
            bar = "#" * round(width * t / scale)
            share = f"{t / self.total_s:6.1%}" if t and self.total_s else " " * 6
            rows.append(f"  {number:4d} {share} {bar:<{width}} {text.rstrip()}")
        shown = {n for n, _ in self.source_lines}
        for t in self.lines:
            if t.file != self.source_file or t.line not in shown:
                rows.append(f"  {t.file}:{t.line} {t.seconds / self.total_s:6.1%} {t.text.strip()}")
        for label, t in self.unattributed.items():
            if t > 0:
                rows.append(f"       {t / self.total_s:6.1%} {label}")
        return rows

    def _repr_mimebundle_(self, include=None, exclude=None):
        if VIEWS:
            return VIEWS[-1](self)._repr_mimebundle_(include, exclude)
        return {"text/plain": self.to_text()}

    def __repr__(self) -> str:
        return f"<nbxla profile {self.name}: {self.verdict}>"

    def to_json(self) -> dict:
        """Plain data for the JupyterLab extension and tests."""
        lim = self.limits
        return {
            "name": self.name, "runs": self.runs, "total_s": self.total_s, "call_s": self.call_s,
            "verdict": self.verdict,
            "machine": {"read_gbs": lim.read_gbs, "copy_gbs": lim.copy_gbs,
                        "peak_gflops": lim.peak_gflops, "threads": lim.threads},
            "kernels": [{"name": k.name, "program": k.program, "kind": k.kind, "how": k.how,
                         "calls": k.calls, "seconds": k.seconds, "flops": k.flops,
                         "bytes": k.bytes, "gbs": k.gbs, "gflops": k.gflops,
                         "intensity": k.intensity, "bound": k.bound, "verdict": k.verdict,
                         "bandwidth_fraction": k.bandwidth_fraction,
                         "flops_fraction": k.flops_fraction, "lines": k.lines} for k in self.kernels],
            "source": [{"line": n, "text": text, "seconds": self.line_seconds().get(n, 0.0)}
                       for n, text in self.source_lines],
            "other_lines": [{"file": t.file, "line": t.line, "text": t.text, "seconds": t.seconds}
                            for t in self.lines if t.file != self.source_file],
            "unattributed": dict(self.unattributed),
            "decisions": [{"line": d.line, "kind": d.kind, "text": d.to_text()} for d in self.decisions],
        }


def _time(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} us"


def classify(row: KernelRow, limits: MachineLimits) -> None:
    """Set the row's fractions of the roofs, its bound and its one-line verdict."""
    if row.seconds > 0:
        roof = limits.bandwidth_for(row.bytes_read, row.bytes_written)
        row.bandwidth_fraction = row.gbs / roof
        row.flops_fraction = row.gflops / limits.peak_gflops
    frac_bw, frac_fl = row.bandwidth_fraction, row.flops_fraction
    if row.kind == "library":
        row.bound = "library"
        row.verdict = f"library call: {row.how} ({row.gflops:.1f} GFLOP/s, {frac_fl:.2f} of peak)"
    elif row.kind == "interpreted":
        row.bound = "interpreted"
        row.verdict = f"interpreted: {row.how} (slow: please report the HLO)"
    elif row.kind in ("loop", "control"):
        row.bound = "loop"
        row.verdict = row.how
    elif row.kind == "native-loop":
        row.bound = "loop"
        row.verdict = row.how
    elif row.kind == "view":
        row.bound = "none"
        row.verdict = "no work (a view or a name)"
    else:
        model_s = max(row.bytes / (limits.bandwidth_for(row.bytes_read, row.bytes_written) * 1e9),
                      row.flops / (limits.peak_gflops * 1e9))
        per_call = row.us_per_call
        in_cache = row.bytes / max(row.calls, 1) < CACHE_BYTES
        if per_call < OVERHEAD_US and (model_s < 0.5 * row.seconds or in_cache):
            row.bound = "overhead"
            row.verdict = (f"overhead bound: {per_call:.2f} us of work per call: more work per call "
                           "helps, not faster code")
        elif row.intensity < limits.ridge:
            row.bound = "memory"
            row.verdict = (f"memory bound, above the memory roof ({frac_bw:.2f}): its data stays in the "
                           "caches" if frac_bw > ABOVE_ROOF else
                           f"memory bound at {frac_bw:.2f} of bandwidth: only less traffic helps"
                           if frac_bw >= AT_ROOF else
                           f"memory bound, at {frac_bw:.2f} of bandwidth: below the roof (too little "
                           "parallel work, strided or gathered reads)")
        else:
            row.bound = "compute"
            row.verdict = (f"compute bound at {frac_fl:.2f} of peak flops: only fewer flops help"
                           if frac_fl >= AT_ROOF else
                           f"compute bound, at {frac_fl:.2f} of peak flops: below the roof "
                           "(transcendentals, dependent chains, scalar code)")
