"""What keeps a replayed call from running a stale plan (nbxla/cluster/tape.py, replay.py).

A repeated call of an auto function replays its clusters from the tape: the function's
Python still runs, and every operation is checked against the tape by its key (the function
called, constants by value, stand-ins by number, each array by shape and dtype when it
enters).  So a changed global, closure variable, helper, foreign callable or argument shape
cannot run the clusters recorded before: the first operation that differs materializes what
was replayed and records anew.  These tests change each of those between calls and compare
with eager NumPy, and count what was recorded for real.  The replayed log (``replayed``)
stands in for the ``Op`` list until an eager run needs it; eager runs of replayed clusters
(measured faster eagerly, refused by the compiler) are checked here too.
"""

import numpy as np
import pytest
from scipy.linalg import solve_banded

from nbxla.cluster import AutoFunction
from nbxla.cluster import flush as flush_module
from nbxla.cluster.choice import ClusterTiming
from nbxla.cluster.records import SOFT_MAX_OPS
from nbxla.cluster.session import Session
from nbxla.runtime.cache import CompilationCache


def auto(fn, **kw):
    kw.setdefault("min_work", 1)
    return AutoFunction(fn, cache=CompilationCache(), measure=False, whole=False, **kw)


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


def close(got, want):
    for g, w in zip(got if isinstance(got, tuple) else (got,),
                    want if isinstance(want, tuple) else (want,)):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


SCALE = 2.0
WEIGHTS = np.linspace(0.0, 1.0, 100)         # over 64 elements: a snapshot parameter
SMALL = np.array([1.0, 2.0, 3.0])            # a constant of the cluster, keyed by value


def uses_globals(x):
    y = np.sin(x) * SCALE + WEIGHTS
    return y * (SMALL[0] + SMALL[2])


def test_changed_globals_are_seen_on_the_next_call(recorded):
    global SCALE
    f = auto(uses_globals)
    (x,) = arrays(100)
    close(f(x), uses_globals(x))
    close(f(x), uses_globals(x))
    recorded["ops"] = 0
    old = SCALE, WEIGHTS.copy(), SMALL.copy()
    try:
        SCALE = -3.5                               # a float constant: another key
        close(f(x), uses_globals(x))
        assert recorded["ops"] > 0
        recorded["ops"] = 0
        WEIGHTS[:] = 7.0                           # a large plain array, written in place
        SMALL[2] = 10.0                            # a small one (a constant by value)
        close(f(x), uses_globals(x))
        assert recorded["ops"] > 0                 # (SMALL keys the operation anew)
        recorded["ops"] = 0
        WEIGHTS[:] = -1.0                          # same keys: replayed, new snapshot
        close(f(x), uses_globals(x))
        assert recorded["ops"] == 0
    finally:
        SCALE = old[0]
        WEIGHTS[:], SMALL[:] = old[1], old[2]


def test_a_changed_closure_variable_records_again(recorded):
    def make(shift):
        def program(x):
            return np.exp(x * 0.5) + shift
        return program

    (x,) = arrays(30)
    program = make(1.0)
    f = auto(program)
    close(f(x), program(x))
    close(f(x), program(x))
    recorded["ops"] = 0
    cell = program.__closure__[0]
    cell.cell_contents = 4.0                       # the same function object, a new value
    close(f(x), program(x))
    assert recorded["ops"] > 0


def first_helper(x):
    return np.tanh(x) * 2.0


def second_helper(x):
    return np.tanh(x) * 2.0 + np.cos(x)


HELPER = first_helper


def calls_a_global_helper(x):
    return HELPER(x) - 1.0


def test_a_rebound_helper_runs_as_itself_not_as_the_old_plan(recorded):
    global HELPER
    f = auto(calls_a_global_helper)
    (x,) = arrays(50)
    close(f(x), calls_a_global_helper(x))
    close(f(x), calls_a_global_helper(x))
    recorded["ops"] = 0
    try:
        HELPER = second_helper
        close(f(x), calls_a_global_helper(x))
        assert recorded["ops"] > 0
    finally:
        HELPER = first_helper


def banded(a, b, d):
    ab = np.stack([np.concatenate([[0.0], a[:-1]]), b, np.concatenate([a[1:], [0.0]])])
    return solve_banded((1, 1), ab, d)


def doubled(a, b, d):
    return 2.0 * d


def test_a_changed_foreign_callable_gives_its_own_result(recorded):
    """The uncompilable call (native code) runs on every call; replacing it between calls
    gives the new callable's result, and the clusters around it replay."""
    def program(x, solver):
        a = np.abs(x) * 0.1
        b = 4.0 + x * x
        d = np.sin(x)
        sol = solver(a, b, d)                      # a graph break (native code) or not
        return sol * 3.0 + a

    f = auto(program)
    (x,) = arrays(64)
    for solver in (banded, banded, doubled, banded, doubled):
        close(f(x, solver), program(x, solver))
    recorded["ops"] = 0
    close(f(x, banded), program(x, banded))
    close(f(x, doubled), program(x, doubled))
    assert recorded["ops"] == 0                     # both paths are on the tape now


def test_another_shape_records_a_new_path_and_the_old_one_still_replays(recorded):
    def program(x, y):
        return np.sqrt(np.abs(x[1:] - x[:-1])) * y[1:]

    f = auto(program)
    x, y = arrays(40, 40)
    close(f(x, y), program(x, y))
    recorded["ops"] = 0
    x2, y2 = arrays(41, 41, seed=1)
    close(f(x2, y2), program(x2, y2))               # the shapes differ: not replayed
    assert recorded["ops"] > 0
    recorded["ops"] = 0
    close(f(x, y), program(x, y))
    close(f(x2, y2), program(x2, y2))
    assert recorded["ops"] == 0
    xf = x.astype(np.float32)                       # a dtype too
    close(f(xf, y), program(xf, y))
    assert recorded["ops"] > 0


def test_a_replayed_cluster_measured_faster_eagerly_runs_its_logged_calls(monkeypatch):
    """The Op list of a replayed cluster is made from the replayed log only when an eager
    run needs it: the eager run gives NumPy's result, writes into arguments included."""
    def program(x, y):
        y[2:] = np.cos(x[2:]) * 2.0                 # a write into an argument
        z = np.where(x > 0.0, x, -x) + y
        return z * z

    f = AutoFunction(program, cache=CompilationCache(), min_work=1, whole=False)
    x, y = arrays(50, 50)
    y1, y2 = y.copy(), y.copy()
    close(f.run_auto(x, y1), program(x, y2))
    for key in list(flush_module._TIMINGS):          # (every cluster: eager is faster)
        flush_module._TIMINGS[key] = ClusterTiming([10.0], [0.001])
    y1, y2 = y.copy(), y.copy()
    close(f.run_auto(x, y1), program(x, y2))
    np.testing.assert_allclose(y1, y2, rtol=1e-12)
    run = f.last_report.clusters[0]
    assert not run.compiled and "measured faster eagerly" in run.why_eager
    assert run.ops >= 4 and run.lines                # (counted and placed from the log)


def test_a_replayed_cluster_the_compiler_refused_runs_eagerly(monkeypatch):
    def program(x):
        return np.log1p(np.abs(x)) * 3.0 - x

    f = auto(program)
    (x,) = arrays(30)
    close(f(x), program(x))
    monkeypatch.setitem(flush_module._REFUSED, _only_cluster_key(f), "refused for the test")
    close(f(x), program(x))
    assert "refused for the test" in f.last_report.clusters[0].why_eager


def _only_cluster_key(f):
    node = f._tape.root
    while not node.flushes:
        (op,) = node.children.values()
        node = op.node
    return node.flushes[0].key


def test_views_made_eagerly_are_keyed_when_a_graph_uses_them(recorded):
    """A view of a concrete array (made eagerly) gets its tape key only when a graph numbers
    it; slices of ints key it later, a list index at once (a list can change)."""
    def program(x, rows):
        inner = x[2:-2, 1:]                         # a view, keyed when first used
        picked = x[rows]                            # a copy (fancy indexing): not a view
        return np.sin(inner) * 2.0 + picked[:, 1:].sum(axis=0)

    f = auto(program)
    (x,) = arrays((12, 9))
    rows = [0, 3]
    close(f(x, rows), program(x, rows))
    recorded["ops"] = 0
    close(f(x, rows), program(x, rows))
    assert recorded["ops"] == 0
    rows = [1, 2]
    x2 = arrays((12, 9), seed=3)[0]
    close(f(x2, rows), program(x2, rows))


def test_a_chain_past_the_size_cap_replays_the_same_clusters(recorded):
    def program(x):
        y = x
        for _ in range(SOFT_MAX_OPS // 2 + 20):    # past the cap: split where it began
            y = y * 0.5
            y = y + 1.0
        return y

    f = auto(program)
    (x,) = arrays(20)
    close(f(x), program(x))
    first = [(c.ops, c.lines) for c in f.last_report.clusters]
    assert len(first) >= 2
    recorded["ops"] = 0
    close(f(x), program(x))
    assert recorded["ops"] == 0
    assert [(c.ops, c.lines) for c in f.last_report.clusters] == first


def test_changed_slice_bounds_record_again_and_equal_ones_replay(recorded):
    """Slices of ints are keyed flat (start, stop, step): bounds that change between calls --
    of a pending array (recorded) or of a view that a graph numbers -- record anew; the same
    bounds, as new slice objects, replay; a bool bound is keyed by its type."""
    def program(x, lo, hi, step):
        y = x * 2.0
        window = y[lo:hi:step, 1:]                  # a view of a pending value
        edge = x[lo:hi:step, :-1]                   # a view of the argument
        return np.cos(window) + edge

    f = auto(program)
    (x,) = arrays((16, 7))
    close(f(x, 2, -2, 1), program(x, 2, -2, 1))
    recorded["ops"] = 0
    close(f(x, 2, -2, 1), program(x, 2, -2, 1))
    assert recorded["ops"] == 0                     # the same bounds: replayed
    for lo, hi, step in [(1, -2, 1), (2, -3, 1), (2, -2, 2), (True, -2, 1), (None, 14, 1)]:
        recorded["ops"] = 0
        close(f(x, lo, hi, step), program(x, lo, hi, step))
        assert recorded["ops"] > 0, (lo, hi, step)  # another slice: recorded, not replayed


def test_index_tuples_in_the_replayed_log_of_an_eager_run(monkeypatch):
    """A replayed cluster run eagerly runs its logged calls: an index tuple of slices and
    ints is logged as it is, one holding a list is copied (the program may change the list
    after the call), and writes through index tuples land."""
    def program(x, y, rows):
        z = x * 2.0 + y
        picked = z[rows, 1:]                        # a list inside the index tuple
        rows.append(0)                              # changed after the call
        z[1:-1, 0] = np.sin(z[2:, 0])               # plain index tuples, a write
        return picked.sum(axis=0) * 2.0, z[:, ::2] + 1.0

    f = AutoFunction(program, cache=CompilationCache(), min_work=1, whole=False)
    x, y = arrays((12, 9), (12, 9))
    close(f.run_auto(x, y, [0, 3]), program(x, y, [0, 3]))
    for key in list(flush_module._TIMINGS):          # (every cluster: eager is faster)
        flush_module._TIMINGS[key] = ClusterTiming([10.0], [0.001])
    for _ in range(2):
        close(f.run_auto(x, y, [0, 3]), program(x, y, [0, 3]))
    assert any(not run.compiled for run in f.last_report.clusters)
