"""Flushing a session: the pending graph becomes a cluster -- compiled (cached by structure,
shapes and dtypes), its first run checked against the eager replay, timed both ways where the
choice is close -- or replayed eagerly; then every alive stand-in is concrete (``Session`` mixes
this in; see session.py for the whole story)."""

from __future__ import annotations

import math
import time
import warnings

import numpy as np

from ..compiler import compile_module
from ..errors import NbxlaError
from ..hlo import Module
from ..runtime.cache import CacheKey
from ..runtime.host_memory import memory_owner
from ..testing import SharedCopies, differences
from .choice import ClusterTiming
from .records import Break, ClusterRun, fingerprint, ident, reachable
from .tape import FlushEntry

# What the process learned about each cluster key, across sessions.
_REFUSED: dict = {}          # cluster key -> why the compiler refused it (not tried again)
_CHECKED: set = set()        # cluster keys whose first compiled run was checked against NumPy's
_TIMINGS: dict = {}          # cluster key -> ClusterTiming (choice.py)
_FACTS: dict = {}            # cluster key -> (HLO instructions, kernels after fusion)


class Flushing:
    """The flush half of ``Session``."""

    def flush(self, reason: str | None = None, location=None, eager_op: str | None = None) -> None:
        if reason is not None:
            self.log.breaks.append(Break(reason, location, True, eager_op))
        if self.replaying and self.replayed:
            return self._flush_replayed()
        if self.ctx is None:
            return
        members = [x for x in (r() for r in self.members) if x is not None and x.state.epoch == self.epoch]
        roots = [x for x in members if x.state.root is None and (x.state.value is None or self.pending(x))]
        views = [x for x in members if x.state.root is not None and x.state.value is None]
        run = None
        if roots and self.ops:
            run = self._run_cluster(roots)
            if self.node is not None and all(x is not None for x in self.param_owners) and \
                    all(x.state.num_epoch == self.epoch for x in roots + self.param_owners):
                self.tape.remember_flush(self.node, FlushEntry(
                    run.key, run.compilation, [x.state.num for x in self.param_owners],
                    [x.state.num for x in roots]))
        self._end_epoch(members, roots, views, run)

    def _end_epoch(self, members, roots, views, run) -> None:
        for x in views:                      # created after their bases: bases are done
            x.state.value = x.state.root[1](x.state.root[0].state.value)
        for x in roots + views:
            self._own(x, x.state.value)
        for x in members:
            x.state.tracer = x.state.entry = x.state.slot = x.state.spec = None
        self.epoch += 1
        self._reset()
        if run is not None:
            self.log.clusters.append(run)

    def _run_cluster(self, roots, entry: FlushEntry | None = None) -> ClusterRun:
        """Run the pending graph's cluster for ``roots`` (compiled, or replayed eagerly);
        with a tape ``entry`` (roots None where no longer alive), its cluster as compiled
        before, with no module built."""
        n_ops, work = self._op_count(), self.work
        lines = [r[4] for r in self.replayed] if self.replaying else \
            [op.location for op in self.ops]
        lines = [line for line in lines if line is not None]
        if work < self.min_work or n_ops < 2:
            why = (f"work {work} < {self.min_work} elements" if work < self.min_work else
                   "one operation, nothing to fuse") + " (cost model)"
            run = ClusterRun(None, n_ops, work, lines, False, why)
            self._replay(roots, run)
            return run
        if entry is None:
            module = self._module(roots)
            key = CacheKey("nbxla.cluster", fingerprint(module.entry), self.device)
        else:
            key = entry.key
        run = ClusterRun(key, n_ops, work, lines, True)
        refused = _REFUSED.get(key)
        if refused is None and entry is not None and entry.compilation is not None:
            compilation, compile_ms = entry.compilation, 0.0
        elif refused is None:
            if entry is not None:        # (not compiled when it was recorded: cannot be now)
                raise RuntimeError("nbxla: a replayed cluster has no compilation")
            try:
                compilation, compile_ms = self._compile(key, module)
            except NbxlaError as e:
                refused = _REFUSED[key] = f"the compiler refused it: {e}"
            except Exception as e:      # a compiler bug must not stop a program NumPy runs
                refused = _REFUSED[key] = f"the compiler failed ({type(e).__name__}: {e})"
        if refused is None:
            run.compilation, run.compile_ms = compilation, compile_ms
            facts = _FACTS.get(key)
            if facts is None:       # (the fusion report walks the module: once per cluster)
                if entry is not None:
                    module = compilation.hlo
                facts = _FACTS[key] = (reachable(module.entry.root),
                                       compilation.fusion_report.kernels_after)
            run.hlo_instructions, run.kernels = facts
            timing = _TIMINGS.get(key) if self.measure else None
            if timing is not None and timing.run_eagerly():
                run.compiled, run.why_eager = False, "measured faster eagerly (cost model)"
                self._replay(roots, run)
                timing.ran(False, run.run_ms)
                run.measured = timing.describe()
                return run                  # (no gain: it runs eagerly)
            try:                        # (it only reads the inputs: on failure, replay)
                outputs, run.run_ms = self._execute(compilation)
                eager_ms = None
                if key not in _CHECKED:     # (nothing unchecked is handed back)
                    differs, eager_ms = self._check(roots, outputs)
                    _CHECKED.add(key)
                    if differs:
                        refused = _REFUSED[key] = (
                            f"its compiled result differed from NumPy's ({differs}): a bug in "
                            "nbxla (please report it); it runs eagerly from now on")
                if refused is None and self.measure and timing is None:
                    timing = self._time_both_ways(key, compilation, eager_ms)
                elif timing is not None:
                    timing.ran(True, run.run_ms)
            except Exception as e:
                refused = _REFUSED[key] = f"running it failed ({type(e).__name__}: {e})"
        if refused is not None:
            run.compiled, run.why_eager = False, refused
            self._replay(roots, run)
            return run
        if timing is not None:
            run.measured, run.gain_ms = timing.describe(), timing.gain_ms()
        for x, value in zip(roots, outputs):
            if x is None:
                continue                 # (replayed: an output no longer alive)
            if x.state.value is None:
                x.state.value = value
            else:
                np.copyto(x.state.value, value)
        return run

    def _execute(self, compilation):
        """Run the compiled cluster on its parameters: (outputs, milliseconds)."""
        start = time.perf_counter()
        outputs = [o if isinstance(o, np.ndarray) else o.get() if hasattr(o, "get")
                   else np.asarray(o)                                       # (CUDA: CuPy)
                   for o in compilation.executable.run(list(self.params))]
        return outputs, (time.perf_counter() - start) * 1e3

    def _check(self, roots, outputs) -> tuple[str, float]:
        """The first run of a cluster in this process against its eager replay on copies of
        its arrays (so the replay writes nothing the program sees): (how its outputs differ,
        "" where they do not; the replay's milliseconds, the first eager timing)."""
        copies = SharedCopies()
        start = time.perf_counter()
        try:
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")     # (the program's own run warns, if at all)
                values = self._eager_ops([id(x.state.slot) for x in roots
                                          if x is not None and x.state.value is None], copies)
        except Exception as e:           # NumPy refuses what the graph did: not NumPy's result
            return f"NumPy raises {type(e).__name__}: {e}", math.inf
        eager_ms = (time.perf_counter() - start) * 1e3
        pairs = [(f"output {k} ({got.dtype}{list(got.shape)})", got,
                  values[id(x.state.slot)] if x.state.value is None else copies(x.state.value))
                 for k, (x, got) in enumerate(zip(roots, outputs)) if x is not None]
        differ = differences(pairs)[1]
        # Each output is an array of its own, as NumPy's are: a write into one (after the
        # flush) must not show in another.
        owners: dict = {}
        for k, got in enumerate(outputs):
            first = owners.setdefault(id(memory_owner(got)), k)
            if first != k:
                differ.append(f"outputs {first} and {k} are one array where NumPy makes two")
        return "; ".join(differ), eager_ms

    def _time_both_ways(self, key, compilation, eager_ms: float | None) -> ClusterTiming:
        """The first run of a cluster in this process: time two more compiled runs (the first
        was cold) and, unless its check did, an eager replay on copies of its arrays, and
        remember both: later runs take the faster way."""
        compiled_ms = [self._execute(compilation)[1] for _ in range(2)]
        if eager_ms is None:
            start = time.perf_counter()
            try:
                with np.errstate(all="ignore"):      # (the program's own run warns, if at all)
                    self._eager_ops((), SharedCopies())
                eager_ms = (time.perf_counter() - start) * 1e3
            except Exception:                        # NumPy refuses what the graph did: compile
                eager_ms = math.inf
        timing = _TIMINGS[key] = ClusterTiming(compiled_ms, [eager_ms])
        return timing

    def _module(self, roots) -> Module:
        b = self.ctx.builder
        b.location = None
        seen, outputs = set(), []
        for x in roots:
            instr = x.state.tracer.instr
            if instr.opcode == "parameter" or id(instr) in seen:     # outputs are new arrays
                instr = b.op("copy", instr)
            seen.add(id(instr))
            outputs.append(instr)
        module = Module(f"{ident(self.name)}_cluster", b.build(b.op("tuple", *outputs)))
        module.make_names_unique()
        return module

    def _compile(self, key, module):
        signature = tuple(("array", p.shape, p.dtype.str) for p in self.params)
        start = time.perf_counter()
        entry, hit = self.cache.get_or_compile(
            key, ("nbxla.cluster", self.name), f"{self.name} (auto cluster)", signature,
            lambda: [f"p{i}" for i in range(len(self.params))], self.device,
            lambda: compile_module(module, self.device))
        return entry.value, (0.0 if hit else (time.perf_counter() - start) * 1e3)
