"""Measured choices between compiled and eager execution: the part of the cost model that
times instead of guessing.

The static threshold (``session.MIN_CLUSTER_WORK``) decides what is worth *recording*; it
cannot see how good a compiled kernel is compared with NumPy's, nor what recording a
function's operations costs in Python.  Two measured choices settle what it cannot:

* ``ClusterTiming`` — per cluster (by its cache key): the first time a cluster is compiled,
  it is also replayed eagerly on copies of its inputs, and both are timed; later runs use
  the faster way.  (A compiled run is timed on every run, so the choice follows the
  compiled kernel's steady cost; a cluster that runs eagerly is tried compiled again now
  and then.)
* ``ModeChoice`` — per auto-clustered function and argument signature: after the first
  call (which compiles), one call runs the plain function eagerly and one auto-clustered,
  both timed, and later calls use the faster; the loser is re-timed now and then.  This
  is what makes auto mode never slower than eager NumPy beyond noise: recording costs
  Python time per operation that no per-cluster choice can win back.

Both are decisions only: either way of running gives NumPy's result.
"""

from __future__ import annotations

# A cluster (or a function) runs eagerly only when eager was measured clearly faster:
# compiled code is steadier and ties go to compiling.  Times compare by their best sample:
# interference from other processes only ever adds time.
EAGER_MARGIN = 0.9
# A cluster that runs eagerly is run compiled again every this many runs (its kernel
# may have been timed cold or under load).  A function's losing mode likewise, first
# REPROBE_CALLS calls after the decision; each re-probe that confirms the decision doubles
# the gap, up to MAX_REPROBE_CALLS (a re-probe of a losing auto-clustered mode costs a
# recording, which on a 10 us function is twice the call: every 32 calls that was 3%).
RETRY_RUNS = 8
REPROBE_CALLS = 32
MAX_REPROBE_CALLS = 1024
# Function-level probes: a pair of calls (eager, auto) at a time (5 pairs for calls under
# 0.5 ms, 3 under 5 ms, else 2); when the ratio of their best times is within CLOSE, up to
# MAX_PROBE_PAIRS pairs, then the better best time wins.
CLOSE = (0.9, 1.1)
MAX_PROBE_PAIRS = 3
CLEAR_WIN = 2.0                  # (a first call's pair this far apart decides at once)
SAMPLES_KEPT = 5                 # (>= the most pairs: the best of all probes counts)
MAX_COMPILING_PROBES = 2


def _recent(samples: list, value: float) -> None:
    samples.append(value)
    del samples[:-SAMPLES_KEPT]


class ClusterTiming:
    """Compiled and eager run times (ms) of one cluster, and the choice they give."""

    __slots__ = ("compiled", "eager", "eager_runs")

    def __init__(self, compiled_ms: list, eager_ms: list):
        self.compiled = list(compiled_ms)
        self.eager = list(eager_ms)
        self.eager_runs = 0          # consecutive eager runs since the last compiled one

    def run_eagerly(self) -> bool:
        """Should the next run be the eager replay?"""
        eager = min(self.eager) < EAGER_MARGIN * min(self.compiled)
        if eager and self.eager_runs + 1 >= RETRY_RUNS:
            return False             # time the compiled kernel again
        return eager

    def ran(self, compiled: bool, ms: float) -> None:
        _recent(self.compiled if compiled else self.eager, ms)
        self.eager_runs = 0 if compiled else self.eager_runs + 1

    def gain_ms(self) -> float:
        """What running compiled saves per run, by best times (ms)."""
        return min(self.eager) - min(self.compiled)

    def describe(self) -> str:
        return (f"measured {min(self.compiled):.3g} ms compiled vs "
                f"{min(self.eager):.3g} ms eager per run (best of {len(self.compiled)} / "
                f"{len(self.eager)})")


class ModeChoice:
    """Per argument signature of an auto function: run it auto-clustered or plain eager?"""

    __slots__ = ("times", "pairs", "decided", "calls", "compiling", "fast_calls", "auto_first",
                 "next_probe", "probe_gap")

    def __init__(self):
        # Probe auto-clustered calls before plain ones (the first call's clusters saved
        # much more than recording costs): the second call is then the likely faster one.
        self.auto_first = False
        self.times = {"auto": [], "eager": []}     # seconds per measured call
        self.compiling = 0                         # timed auto calls that compiled
        self.pairs = 0
        self.decided: str | None = None
        self.calls = 0
        # How many calls may run ``fast_mode`` before the next probe (the caller's fast path
        # counts them down without asking): once a mode is decided, up to the re-probe.
        self.fast_calls = 0
        self.next_probe = 0                        # the call that re-probes the losing mode
        self.probe_gap = REPROBE_CALLS

    def _decide(self, mode: str) -> None:
        if mode != self.decided:
            self.decided, self.probe_gap = mode, REPROBE_CALLS
            self.next_probe = self.calls + self.probe_gap

    def after_first_call(self, gain_ms: float, compiled_ms: float) -> None:
        """What the first call's clusters measured: ``gain_ms`` saved by running compiled,
        ``compiled_ms`` spent so.  Nothing saved (no cluster, or each runs eagerly): the
        auto-clustered calls can only add recording, so plain NumPy it is (re-probed, see
        REPROBE_CALLS).  Clearly more saved than spent (> 1 ms and > half the compiled
        time): the probes start auto-clustered."""
        if gain_ms <= 0:
            self._decide("eager")
            # (plain calls from the next on, up to the one before the re-probe, which is
            # timed: the re-probe is compared with it)
            self.fast_calls = self.next_probe - 2 - self.calls
            self.calls += self.fast_calls
        elif gain_ms > 1.0 and 2 * gain_ms > compiled_ms:
            self.auto_first = True

    def checked(self, compiled_s: float, eager_s: float) -> None:
        """The first call's own timing of both ways (a function compiled whole, checked
        against the plain one): the first probe pair; a winner by CLEAR_WIN is decided at
        once, with no probe calls.  Either way the next call runs the faster way so far,
        untimed, by the caller's fast path (the second call is a call like the others)."""
        self.record("auto", compiled_s)
        self.record("eager", eager_s)
        self.auto_first = compiled_s <= eager_s
        if compiled_s * CLEAR_WIN < eager_s:
            self._decide("auto")
        elif eager_s * CLEAR_WIN < compiled_s:
            self._decide("eager")
        self.fast_calls = self.next_probe - 1 - self.calls if self.decided else 1
        self.calls += self.fast_calls

    @property
    def fast_mode(self) -> str:
        """The mode of the caller's fast-path calls: the decided one, else the faster so far."""
        return self.decided or ("auto" if self.auto_first else "eager")

    def next_mode(self) -> str:
        """The mode of the next call (the first call, which compiles, is always "auto")."""
        self.calls += 1
        if self.calls == 1:
            return "auto"
        if self.decided is None:                   # probing: a pair at a time
            first, second = ("auto", "eager") if self.auto_first else ("eager", "auto")
            return first if len(self.times[first]) <= len(self.times[second]) else second
        if self.calls >= self.next_probe:
            self.probe_gap = min(2 * self.probe_gap, MAX_REPROBE_CALLS)
            self.next_probe = self.calls + self.probe_gap
            return "eager" if self.decided == "auto" else "auto"
        self.fast_calls = self.next_probe - 1 - self.calls    # (up to the next re-probe)
        self.calls += self.fast_calls
        return self.decided

    def timed(self, mode: str) -> bool:
        """Is a call in ``mode`` now one whose time counts?  (A decided mode's calls are not
        timed once it has a sample: a re-probe of the other mode is compared with it.)"""
        return self.calls > 1 and (self.decided is None or mode != self.decided or
                                   not self.times[mode])

    def record(self, mode: str, seconds: float, compiled: bool = False) -> None:
        """A timed call; ``compiled``: it compiled a cluster (counted only after
        MAX_COMPILING_PROBES such calls: then compiling is what its calls cost)."""
        if compiled:
            self.compiling += 1
            if self.compiling <= MAX_COMPILING_PROBES:
                return
        _recent(self.times[mode], seconds)
        auto, eager = self.times["auto"], self.times["eager"]
        if self.decided is not None:               # a re-probe of the losing mode
            if mode != self.decided and self.times[self.decided] and \
                    min(self.times[mode]) < EAGER_MARGIN * min(self.times[self.decided]):
                self._decide(mode)
            return
        if len(auto) != len(eager) or not auto:
            return
        self.pairs += 1
        # Short calls are noisy and cheap to repeat: more pairs before deciding.  Never one
        # pair alone: the first calls after a compiling one ran cold (a BLAS call right after
        # it was measured 5x slower than its median).
        best = min(min(auto), min(eager))
        needed = 2 if best > 5e-3 else 3 if best > 5e-4 else 5
        if self.pairs < needed:
            return
        ratio = min(auto) / min(eager)
        if self.auto_first and ratio > 1.0 and self.pairs < MAX_PROBE_PAIRS:
            # The first call measured its clusters clearly faster compiled, and the probes
            # say the opposite: one slow probe on a loaded machine is enough for that, and
            # deciding plain NumPy wrongly costs until the re-probe.  Measure again.
            return
        if ratio < CLOSE[0]:
            self._decide("auto")
        elif ratio > CLOSE[1]:
            self._decide("eager")
        elif self.pairs >= max(needed, MAX_PROBE_PAIRS):
            self._decide("auto" if min(auto) <= min(eager) else "eager")

    def describe(self) -> str:
        auto, eager = self.times["auto"], self.times["eager"]
        if not auto or not eager:
            if self.decided == "eager":
                return ("the first call's clusters saved nothing measured: later calls run as "
                        f"plain NumPy (auto-clustered again after {REPROBE_CALLS} calls, "
                        "then at doubling gaps)")
            return "calls of this signature not timed yet (the first call compiles; the " \
                   "next ones are timed eager and auto-clustered)"
        timing = (f"auto-clustered {1e3 * min(auto):.3g} ms vs plain NumPy "
                  f"{1e3 * min(eager):.3g} ms per call (best of {len(auto)} / {len(eager)})")
        if self.decided is None:
            return f"{timing}: still measuring"
        return f"{timing}: later calls run {'auto-clustered' if self.decided == 'auto' else 'as plain NumPy'}"
