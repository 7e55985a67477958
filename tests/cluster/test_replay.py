"""Replay from the tape (nbxla/cluster/tape.py): a repeated call of an auto function runs the
clusters its earlier calls recorded without recording again, and gives eager NumPy's
results whenever anything differs (other values of scalars, other branches, other values
alive at a break, plain arrays written between calls, writes into arguments and views)."""

import numpy as np
import pytest

from nbxla.cluster import AutoFunction
from nbxla.cluster.session import Session
from nbxla.runtime.cache import CompilationCache


def auto(fn):
    return AutoFunction(fn, cache=CompilationCache(), min_work=1, measure=False,
                        whole=False)


@pytest.fixture
def recorded(monkeypatch):
    """Counts the operations recorded for real (lowered with the frontend's rules)."""
    counter = {"ops": 0}
    original = Session._record

    def counting(self, *args, **kwargs):
        counter["ops"] += 1
        return original(self, *args, **kwargs)
    monkeypatch.setattr(Session, "_record", counting)
    return counter


def arrays(*shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s) for s in shapes]


def test_a_repeated_call_records_nothing_and_matches_numpy(recorded):
    def program(a, b):
        c = np.sin(a) * b + 1.0
        d = c[1:] - c[:-1]
        return d * d, float(d.sum())             # a break, then more work

    f = auto(program)
    a, b = arrays(50, 50)
    first = f(a, b)
    assert recorded["ops"] > 0
    recorded["ops"] = 0
    for seed in range(3):                        # new values, same shapes: replayed
        a, b = arrays(50, 50, seed=seed + 1)
        got, want = f(a, b), program(a, b)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
        assert got[1] == pytest.approx(want[1], rel=1e-12)
    assert recorded["ops"] == 0
    assert f.last_report.compiled_clusters and first is not None


def test_other_scalars_other_branches_and_other_shapes_record_again(recorded):
    def program(x, scale, flip):
        y = x * scale
        if flip:
            y = -y[::-1]
        if float(y.max()) > 1.0:                 # a branch on a value
            y = y / 2.0
        return np.exp(y) + scale

    f = auto(program)
    (x,) = arrays(40)
    for scale, flip, n in [(0.5, False, 40), (0.5, False, 40), (3.0, False, 40),
                           (0.5, True, 40), (0.5, True, 30), (0.5, False, 40)]:
        x = x[:n]
        np.testing.assert_allclose(f(x, scale, flip), program(x, scale, flip), rtol=1e-12)


def test_writes_into_arguments_and_through_views_land_on_every_call():
    def program(x, y):
        head = x[:10]
        head *= 2.0                              # through a view of an argument
        x[10:] += np.cos(y[10:])
        y[...] = x + y
        return head.sum()

    f = auto(program)
    for seed in range(4):
        x, y = arrays(30, 30, seed=seed)
        xe, ye = x.copy(), y.copy()
        got, want = f(x, y), program(xe, ye)
        assert got == pytest.approx(want, rel=1e-12)
        np.testing.assert_allclose(x, xe, rtol=1e-12)
        np.testing.assert_allclose(y, ye, rtol=1e-12)


def shifted_by_a_buffer(x, k):
    """A helper (not rewritten: its np.zeros stays a plain NumPy array) that adds a buffer
    to a stand-in and then overwrites the buffer."""
    buf = np.zeros(x.shape)
    buf[:k] = 1.0
    y = x + buf                                  # reads buf's values now
    buf[:] = 5.0                                 # a later write must not change y
    return y, buf


def test_plain_arrays_enter_as_snapshots_of_their_values_at_each_call():
    def program(x, k):
        y, buf = shifted_by_a_buffer(x, k)
        return y * 2.0, buf.sum()

    f = auto(program)
    (x,) = arrays(100)
    for k in (3, 3, 50, 3):
        got, want = f(x, k), program(x, k)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
        assert got[1] == want[1]


def test_values_alive_at_a_break_may_differ_between_calls():
    def program(x, keep):
        a = np.tanh(x)
        b = a * 3.0
        kept = a if keep else None               # alive at the break, or not
        total = float(b.sum())                   # a break
        out = b + total
        return (out, kept + 1.0) if keep else (out, None)

    f = auto(program)
    (x,) = arrays(64)
    for keep in (False, False, True, True, False):
        got, want = f(x, keep), program(x, keep)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
        if keep:
            np.testing.assert_allclose(got[1], want[1], rtol=1e-12)
        else:
            assert got[1] is None


def test_a_loop_with_a_break_each_iteration_replays_one_path(recorded):
    def program(u, steps):
        norms = []
        for _ in range(steps):
            u = 0.5 * (u + np.roll(u, 1)) + 0.01 * np.sin(u)
            norms.append(float(np.sqrt((u * u).sum())))
        return u, norms

    f = auto(program)
    (u,) = arrays(80)
    f(u, 3)
    recorded["ops"] = 0
    for steps in (3, 5):
        got, want = f(u, steps), program(u, steps)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-12)
    assert recorded["ops"] == 0                  # every iteration replays the same path


def test_an_exception_mid_replay_leaves_earlier_writes_landed():
    def program(x, fail):
        x[:5] = np.sqrt(np.abs(x[:5])) + 1.0
        y = x * 2.0
        if fail:
            raise ValueError("user error")
        return y.sum()

    f = auto(program)
    (x,) = arrays(20)
    f(x.copy(), False)
    x1, x2 = x.copy(), x.copy()
    with pytest.raises(ValueError, match="user error"):
        f(x1, True)
    with pytest.raises(ValueError, match="user error"):
        program(x2, True)
    np.testing.assert_allclose(x1, x2, rtol=1e-12)


def test_an_operation_refused_before_is_the_same_break_without_recording_again(recorded):
    def program(x):
        y = np.round(x * 3.0)
        levels = np.unique(y)                    # a data-dependent shape: a break
        big = y[y > 0.0]                         # a boolean mask: a break
        return (y * 0.5 + 1.0).sum() + levels.size + big.sum()

    f = auto(program)
    (x,) = arrays(60)
    f(x)
    recorded["ops"] = 0
    assert f(x) == pytest.approx(program(x), rel=1e-12)
    reasons = " ".join(b.op or "" for b in f.last_report.breaks)
    assert "np.unique" in reasons and "x[...]" in reasons
    assert recorded["ops"] == 0
    for seed in range(2):      # other values: other shapes after the mask (recorded anew)
        (x,) = arrays(60, seed=seed + 5)
        assert f(x) == pytest.approx(program(x), rel=1e-12)
