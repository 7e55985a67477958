"""The measured choices (nbxla/cluster/choice.py), fed with given times (tests never time
anything): per cluster compiled vs eager, per function auto-clustered vs plain NumPy; and
the report prints what was measured."""

import numpy as np
import pytest

from nbxla.cluster import AutoFunction, flush
from nbxla.cluster.choice import (EAGER_MARGIN, MAX_REPROBE_CALLS, REPROBE_CALLS, RETRY_RUNS,
                                  ClusterTiming, ModeChoice)
from nbxla.runtime.cache import CompilationCache


def drive(choice: ModeChoice, seconds: dict, calls: int) -> list:
    """The modes of ``calls`` calls when each mode takes ``seconds[mode]``."""
    modes = []
    while len(modes) < calls:
        if choice.fast_calls:                     # (the caller's fast path)
            choice.fast_calls -= 1
            modes.append(choice.decided)
            continue
        mode = choice.next_mode()
        modes.append(mode)
        if choice.timed(mode):
            choice.record(mode, seconds[mode])
    return modes[:calls]


@pytest.mark.parametrize("faster", ["auto", "eager"])
def test_mode_choice_probes_then_keeps_the_faster_and_reprobes(faster):
    slower = "eager" if faster == "auto" else "auto"
    choice = ModeChoice()
    modes = drive(choice, {faster: 0.010, slower: 0.030}, 3 * REPROBE_CALLS)
    assert modes[:5] == ["auto", "eager", "auto", "eager", "auto"]   # compile, 2 probe pairs
    assert choice.decided == faster
    later = modes[5:]
    assert later.count(slower) == 1 and later.index(slower) == REPROBE_CALLS - 1  # re-probe
    assert "later calls run" in choice.describe()


def test_reprobes_that_confirm_the_choice_come_at_doubling_gaps():
    choice = ModeChoice()
    calls = 5 + REPROBE_CALLS * (2 ** 8)
    modes = drive(choice, {"auto": 0.030, "eager": 0.010}, calls)
    probes = [c for c in range(5, calls) if modes[c] == "auto"]
    gaps = [b - a for a, b in zip(probes, probes[1:])]
    assert gaps[:5] == [2 * REPROBE_CALLS, 4 * REPROBE_CALLS, 8 * REPROBE_CALLS,
                        16 * REPROBE_CALLS, MAX_REPROBE_CALLS]
    assert set(gaps[5:]) == {MAX_REPROBE_CALLS}
    # a re-probe that wins takes over, and the gap starts again
    faster = drive(choice, {"auto": 0.001, "eager": 0.010}, 2 * MAX_REPROBE_CALLS)
    assert choice.decided == "auto" and faster[-1] == "auto"
    won = faster.index("auto")
    assert faster.index("eager", won) - won == REPROBE_CALLS


def test_close_or_short_calls_take_more_probe_pairs():
    choice = ModeChoice()
    drive(choice, {"auto": 0.0100, "eager": 0.0102}, 5)
    assert choice.decided is None                          # within 10%: measure again
    drive(choice, {"auto": 0.0100, "eager": 0.0102}, 2)
    assert choice.decided == "auto"                        # 3 pairs: the better best time
    short = ModeChoice()
    drive(short, {"auto": 1e-5, "eager": 5e-6}, 9)
    assert short.decided is None and short.pairs == 4      # under 0.5 ms: 5 pairs
    drive(short, {"auto": 1e-5, "eager": 5e-6}, 2)
    assert short.decided == "eager"


def test_calls_that_compiled_are_not_counted():
    choice = ModeChoice()
    choice.next_mode()
    choice.next_mode()
    choice.record("eager", 0.01)
    choice.next_mode()
    choice.record("auto", 5.0, compiled=True)              # it compiled: says nothing
    assert choice.times["auto"] == [] and choice.decided is None


def test_cluster_timing_runs_eagerly_only_when_clearly_faster_and_retries():
    timing = ClusterTiming([1.0, 1.2], [0.95])
    assert not timing.run_eagerly()                        # not under the margin
    timing = ClusterTiming([1.0], [EAGER_MARGIN * 0.5])
    runs = []
    for _ in range(2 * RETRY_RUNS):
        eager = timing.run_eagerly()
        runs.append(eager)
        timing.ran(not eager, 0.45 if eager else 1.0)
    assert runs.count(False) == 2                          # compiled again every RETRY_RUNS
    assert "compiled vs" in timing.describe()


def test_a_cluster_measured_faster_eagerly_runs_eagerly_with_numpys_result(monkeypatch):
    def program(x):
        return np.sqrt(x * x + 1.0) * 0.5 + x

    (x,) = [np.random.default_rng(0).random(64)]
    f = AutoFunction(program, cache=CompilationCache(), min_work=1, whole=False)
    f.run_auto(x)                                # (run_auto: whatever calls measured)
    (cluster,) = f.last_report.clusters
    assert cluster.compiled and "measured" in cluster.measured
    key = f._log.clusters[0].key
    monkeypatch.setitem(flush._TIMINGS, key, ClusterTiming([1.0], [0.1]))
    got = f.run_auto(x)
    np.testing.assert_allclose(got, program(x), rtol=1e-12)
    (cluster,) = f.last_report.clusters
    assert not cluster.compiled and "measured faster eagerly" in cluster.why_eager
    assert "measured 1 ms compiled vs" in f.last_report.to_text()


def test_the_report_prints_the_call_choice():
    def program(x):
        return np.exp(x) * 2.0 + x

    (x,) = [np.random.default_rng(1).random(64)]
    f = AutoFunction(program, cache=CompilationCache(), min_work=1, whole=False)
    for _ in range(12):
        np.testing.assert_allclose(f(x), program(x), rtol=1e-12)
    report = f.last_report
    assert report is not None and "calls:" in report.to_text()
    assert "plain NumPy" in report.calls


def test_probes_start_auto_clustered_when_the_first_calls_clusters_won_clearly():
    choice = ModeChoice()
    choice.auto_first = True
    modes = drive(choice, {"auto": 0.010, "eager": 0.030}, 5)
    assert modes == ["auto", "auto", "eager", "auto", "eager"]
    assert choice.decided == "auto"


def drive_samples(choice: ModeChoice, samples: dict, calls: int) -> list:
    """``drive`` with the time of each call of a mode taken in turn from ``samples[mode]``."""
    left = {mode: list(times) for mode, times in samples.items()}
    modes = []
    while len(modes) < calls:
        if choice.fast_calls:
            choice.fast_calls -= 1
            modes.append(choice.decided)
            continue
        mode = choice.next_mode()
        modes.append(mode)
        if choice.timed(mode):
            choice.record(mode, left[mode].pop(0) if len(left[mode]) > 1 else left[mode][0])
    return modes


def test_probes_that_contradict_a_clear_first_call_are_measured_again():
    """Auto-clustered probes first (the first call's clusters won clearly): when the probes
    say plain NumPy is faster, a third pair is measured before deciding (one slow probe on
    a loaded machine decided plain NumPy for 32 calls); without the first call's verdict,
    two pairs decide as before."""
    spiked = ModeChoice()
    spiked.auto_first = True
    drive_samples(spiked, {"auto": [0.060, 0.050, 0.010], "eager": [0.040]}, 5)
    assert spiked.decided is None and spiked.pairs == 2
    drive_samples(spiked, {"auto": [0.010], "eager": [0.040]}, 2)
    assert spiked.decided == "auto" and spiked.pairs == 3
    slower = ModeChoice()
    slower.auto_first = True
    drive_samples(slower, {"auto": [0.060], "eager": [0.040]}, 7)
    assert slower.decided == "eager" and slower.pairs == 3      # (confirmed: plain NumPy)
    plain = ModeChoice()                                       # no verdict from the first call
    drive_samples(plain, {"auto": [0.060], "eager": [0.040]}, 5)
    assert plain.decided == "eager" and plain.pairs == 2


def test_the_first_calls_measured_gain_sets_the_probes():
    nothing = ModeChoice()
    nothing.next_mode()
    nothing.after_first_call(0.0, 0.0)                    # no cluster saved anything
    assert drive(nothing, {"auto": 0.01, "eager": 0.02}, 3) == ["eager"] * 3
    assert "saved nothing" in nothing.describe()
    modes = drive(nothing, {"auto": 0.005, "eager": 0.02}, 3 * REPROBE_CALLS)  # re-probes
    assert nothing.decided == "auto" and modes[-1] == "auto"
    clear = ModeChoice()
    clear.next_mode()
    clear.after_first_call(30.0, 10.0)
    assert clear.auto_first and clear.decided is None
    unclear = ModeChoice()
    unclear.next_mode()
    unclear.after_first_call(0.5, 10.0)
    assert not unclear.auto_first and unclear.decided is None


def test_a_function_of_small_arrays_runs_as_plain_numpy_from_its_second_call():
    def program(x):
        return np.exp(x) * 2.0 + x

    (x,) = [np.random.default_rng(2).random(100)]          # under the default threshold
    f = AutoFunction(program, cache=CompilationCache(), whole=False)
    for _ in range(3 * REPROBE_CALLS):                     # (through re-probes)
        np.testing.assert_allclose(f(x), program(x), rtol=1e-12)
    assert f.last_report.calls


def test_the_plain_fast_path_keys_on_the_argument_objects():
    def program(x, y):
        return np.sin(x) + y

    g = np.random.default_rng(3)
    x, y = g.random(50), g.random(50)
    f = AutoFunction(program, cache=CompilationCache(), whole=False)
    for _ in range(5):
        np.testing.assert_array_equal(f(x, y), program(x, y))
    assert f._fast[0] == [id(x), id(y)]               # decided plain: the fast path is armed
    x[:] = 7.0                                          # same objects, new values: still NumPy's
    np.testing.assert_array_equal(f(x, y), program(x, y))
    other = g.random((4, 30)), g.random(30)            # other objects: the signature is built
    np.testing.assert_array_equal(f(*other), program(*other))
    assert len(f._choices) == 2


def test_a_checked_first_call_decides_a_clear_winner_at_once():
    clear = ModeChoice()
    clear.next_mode()
    clear.checked(0.001, 0.010)                      # compiled 10x faster
    assert clear.decided == "auto"
    assert drive(clear, {"auto": 0.001, "eager": 0.010}, 5) == ["auto"] * 5
    slow = ModeChoice()
    slow.next_mode()
    slow.checked(0.010, 0.001)
    assert slow.decided == "eager"
    close = ModeChoice()
    close.next_mode()
    close.checked(0.010, 0.012)                      # within 2x: the probes go on
    assert close.decided is None and close.auto_first and close.pairs == 1
