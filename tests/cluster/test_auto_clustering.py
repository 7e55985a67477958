"""Auto-clustering: programs with each kind of graph break give eager NumPy's results, and the
clustering report names the clusters and the breaks (reason and source line).

Most programs use small arrays with ``min_work=1`` (every array operation is recorded, so the
tests stay fast); the cost model itself is tested with the default threshold.  They test the
clustering, so whole-function compilation (``cluster/whole.py``, tested in test_whole.py) is
off unless a test says otherwise.
"""

import importlib.util
import inspect
import os
from pathlib import Path

import numpy as np
import pytest

import nbxla
from nbxla.cluster import AutoFunction, LazyArray, MIN_CLUSTER_WORK, MIN_REPLAYED_WORK
from nbxla.runtime.cache import CompilationCache

REPO = Path(__file__).resolve().parents[2]


def auto(fn, **kw):
    kw.setdefault("min_work", 1)
    kw.setdefault("whole", False)
    return AutoFunction(fn, cache=CompilationCache(), **kw)


def line_of(fn, text: str) -> int:
    """The source line of ``fn`` containing ``text``."""
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, ln in enumerate(lines) if text in ln)


def rng_arrays(*shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.random(s) for s in shapes]


def assert_same(got, want):
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want):
            assert_same(g, w)
        return
    assert type(got) is type(want), (type(got), type(want))
    if isinstance(want, (np.ndarray, np.generic)):
        assert got.dtype == want.dtype and np.shape(got) == np.shape(want)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    elif isinstance(want, float):          # (compiled sums may round differently)
        assert got == pytest.approx(want, rel=1e-12)
    else:
        assert got == want


def breaks_at(report, line):
    return [b for b in report.breaks if b.line == line]


# ---- one program per kind of break ----------------------------------------------------------

def test_scipy_solve_banded_between_array_work():
    linalg = pytest.importorskip("scipy.linalg", reason="SciPy is an optional test dependency")

    def program(a, b, c, d):
        diag = 4.0 + a * b                      # diagonals from elementwise work
        upper = np.concatenate([[0.0], c[:-1] * 0.5])
        lower = np.concatenate([c[1:] * 0.5, [0.0]])
        ab = np.stack([upper, diag, lower])
        x = linalg.solve_banded((1, 1), ab, d * 2.0)
        return np.sqrt(np.abs(x)) + x * a - d[::-1]

    args = rng_arrays(50, 50, 50, 50)
    f = auto(program)
    assert_same(f(*args), program(*args))
    report = f.last_report
    assert len(report.compiled_clusters) == 2
    (b,) = report.breaks
    assert "scipy.linalg" in b.reason and "solve_banded" in b.reason and b.flushed
    assert b.line == line_of(program, "linalg.solve_banded")
    first, second = report.compiled_clusters
    assert line_of(program, "diag = 4.0") in first.lines
    assert line_of(program, "np.sqrt") in second.lines


def test_scipy_special_ufunc_runs_eagerly_between_clusters():
    special = pytest.importorskip("scipy.special", reason="SciPy is an optional test dependency")

    def program(x, y):
        t = np.exp(-x * x) + y
        e = special.erf(t)
        return e * 2.0 - t

    args = rng_arrays((20, 30), (20, 30))
    f = auto(program)
    assert_same(f(*args), program(*args))
    report = f.last_report
    (b,) = report.breaks
    assert "scipy.special.erf" in b.reason and b.line == line_of(program, "special.erf")
    assert len(report.compiled_clusters) == 2


def test_boolean_mask_result():
    def program(x):
        y = np.sin(x) * 3.0
        big = y[y > 1.0]                         # data-dependent shape
        return big.sum() + y.mean(), big

    (x,) = rng_arrays(400)
    f = auto(program)
    assert_same(f(x), program(x))
    (b,) = f.last_report.breaks
    assert "mask" in b.reason and "shape" in b.reason and b.line == line_of(program, "y[y > 1.0]")


def test_np_unique():
    def program(x):
        k = np.floor(x * 10.0)
        values = np.unique(k)
        return values * 2.0, k.sum()

    (x,) = rng_arrays((30, 30))
    f = auto(program)
    assert_same(f(x), program(x))
    (b,) = f.last_report.breaks
    assert "np.unique" in b.reason and "depends on the data" in b.reason
    assert b.line == line_of(program, "np.unique")


def test_print_in_the_middle_keeps_the_order_of_output(capsys):
    def program(x):
        print("start")
        y = x * 2.0 + 1.0
        print("y:", y[:2])
        z = np.tanh(y)
        print("end", float(z.sum()) > 0)
        return z

    (x,) = rng_arrays(10)
    want = program(x)
    expected = capsys.readouterr().out
    f = auto(program)
    assert_same(f(x), want)
    assert capsys.readouterr().out == expected
    lines = {b.line for b in f.last_report.breaks}
    assert line_of(program, 'print("y:"') in lines and line_of(program, 'print("end"') in lines


def test_if_on_an_array_value():
    def program(x):
        y = np.cos(x) - 0.5
        if y.mean() > 0:
            y = y * 2.0
        else:
            y = y - 1.0
        return y + x

    for seed in (0, 1):
        (x,) = rng_arrays(64, seed=seed)
        f = auto(program)
        assert_same(f(x), program(x))
        (b,) = f.last_report.breaks
        assert "truth value" in b.reason and b.line == line_of(program, "if y.mean() > 0")


def test_python_list_built_from_array_values():
    def program(x):
        y = x ** 2 + 1.0
        firsts = [float(v) for v in y[:3]]
        rows = (y * 2.0).reshape(4, -1).tolist()
        return y * sum(firsts), len(rows), rows[0][0]

    (x,) = rng_arrays(16)
    f = auto(program)
    assert_same(f(x), program(x))
    reasons = [b.reason for b in f.last_report.breaks]
    assert any("float()" in r for r in reasons) and any("tolist" in r for r in reasons)


def test_unsupported_numpy_function():
    def program(x):
        y = np.abs(x - 0.5)
        m = np.median(y, axis=0)                # no lowering: runs eagerly
        return (y - m) * 2.0

    (x,) = rng_arrays((9, 7))
    f = auto(program)
    assert_same(f(x), program(x))
    (b,) = f.last_report.breaks
    assert "np.median" in b.reason and b.line == line_of(program, "np.median")
    assert len(f.last_report.compiled_clusters) == 2


def test_exception_raised_by_user_code_at_its_line_after_earlier_writes():
    def program(u, limit):
        u[1:] += u[:-1] * 0.5                   # lands in the caller's array before the raise
        if u.max() > limit:
            raise ValueError("too large")
        return u

    (u,) = rng_arrays(20)
    eager, compiled = u.copy(), u.copy()
    with pytest.raises(ValueError, match="too large"):
        program(eager, 0.5)
    f = auto(program)
    with pytest.raises(ValueError, match="too large") as info:
        f(compiled, 0.5)
    assert info.traceback[-1].lineno + 1 == line_of(program, "raise ValueError")
    np.testing.assert_array_equal(compiled, eager)


def test_numpy_errors_are_numpys():
    def program(x, y):
        z = x * 2.0
        return z + y                            # shapes do not broadcast

    x, y = rng_arrays(5, 4)
    with pytest.raises(ValueError) as eager:
        program(x, y)
    with pytest.raises(ValueError) as ours:
        auto(program)(x, y)
    assert str(ours.value) == str(eager.value)


# ---- same side effects ----------------------------------------------------------------------

def test_writes_into_arguments_and_views_land_in_the_callers_arrays():
    def program(u, v):
        inner = u[1:-1]
        inner *= 2.0                             # through a view of an argument
        v += u                                   # an argument in place
        s = float(v.sum())                       # a break: the writes are materialized
        inner += s * 1e-3                        # and the view still writes into u
        w = v[::2]
        w[...] = 0.0
        return u.sum() + v.sum()

    a, b = rng_arrays(30, 30)
    ea, eb, ca, cb = a.copy(), b.copy(), a.copy(), b.copy()
    want = program(ea, eb)
    f = auto(program)
    got = f(ca, cb)
    assert_same(got, want)
    np.testing.assert_allclose(ca, ea, rtol=1e-12)
    np.testing.assert_allclose(cb, eb, rtol=1e-12)


def test_random_numbers_are_drawn_eagerly_as_numpy_draws_them():
    def program(x, seed):
        rng = np.random.default_rng(seed)
        noise = rng.standard_normal(x.shape)
        np.random.seed(seed)
        more = np.random.rand(*x.shape)
        return x * noise + more

    (x,) = rng_arrays((8, 8))
    assert_same(auto(program)(x, 3), program(x, 3))


def test_results_are_numpy_arrays_and_scalars():
    def program(x):
        return x * 2.0, x.sum(), (x[0] + 1.0, [x.max()])

    (x,) = rng_arrays(6)
    got = auto(program)(x)
    assert_same(got[:2], program(x)[:2])
    assert type(got[2][0]) is np.float64 and type(got[2][1][0]) is np.float64
    assert not any(isinstance(v, LazyArray) for v in (got[0], got[1]))


# ---- caching and loops ------------------------------------------------------------------------

def test_second_call_compiles_nothing_and_a_loop_reuses_its_cluster():
    cache = CompilationCache()

    def program(y, steps):
        total = 0.0
        for _ in range(steps):
            y = np.sqrt(y * y + 1.0) * 0.5
            total += float(y.mean())              # a graph break in every iteration
        return y, total

    (x,) = rng_arrays(100)
    f = AutoFunction(program, cache=cache, min_work=1, whole=False)
    assert_same(f(x, 5), program(x, 5))
    report = f.last_report
    (cluster,) = report.compiled_clusters
    assert cluster.runs == 5
    assert cache.misses == 1
    (b,) = report.breaks
    assert b.count == 5 and b.line == line_of(program, "float(y.mean())")
    f.run_auto(x, 5)               # (a second auto-clustered call, whatever calls measured)
    assert cache.misses == 1                     # the second call compiled nothing
    assert f.last_report.clusters[0].compile_ms == 0.0


@pytest.mark.parametrize("replay, threshold", [(True, MIN_REPLAYED_WORK),
                                               (False, MIN_CLUSTER_WORK)])
def test_cost_model_runs_small_clusters_eagerly(replay, threshold):
    """The default threshold: lower where repeated calls replay from the tape (a replayed
    operation costs a few microseconds, a recorded one tens); both sides of each."""
    def program(x):
        return np.exp(x) * 2.0 + x

    f = AutoFunction(program, cache=CompilationCache(), whole=False, replay=replay)
    assert f.min_work == threshold
    for size in (100, threshold - 1):
        small = rng_arrays(size)[0]
        assert_same(f.run_auto(small), program(small))
        assert not f.last_report.compiled_clusters
        assert str(threshold) in f.last_report.to_text()
    big = rng_arrays(threshold)[0]
    assert_same(f.run_auto(big), program(big))
    assert len(f.last_report.compiled_clusters) == 1
    assert f.last_report.compiled_fraction == 1.0


def test_a_cluster_of_one_operation_is_replayed_eagerly():
    def program(x):
        y = x * 2.0
        return np.median(y)                      # no lowering: the one pending op runs first

    (x,) = rng_arrays(50)
    f = auto(program)
    assert_same(f(x), program(x))
    (cluster,) = f.last_report.clusters
    assert not cluster.compiled and "nothing to fuse" in cluster.why_eager
    assert f.last_report.compiled_fraction == 0.0


# ---- the report ---------------------------------------------------------------------------------

def test_explain_lists_clusters_breaks_and_fraction():
    def program(x):
        y = np.exp(x) + 1.0
        s = float(y.sum())
        return np.log(y) * s

    (x,) = rng_arrays(MIN_CLUSTER_WORK)
    report = nbxla.explain(AutoFunction(program, whole=False), x)
    text = report.to_text()
    assert "2 cluster(s), 2 compiled" in text and "graph break" in text
    assert f"line {line_of(program, 'float(y.sum())')}" in text
    assert 0.99 < report.compiled_fraction <= 1.0
    first = report.clusters[0]
    assert first.kernels >= 1 and first.ops >= 2 and first.runs == 1
    html = report._repr_mimebundle_()["text/html"]
    assert "break" in html and "float() of an array value" in html and "<script" not in html


# ---- entry points ---------------------------------------------------------------------------

def test_jit_mode_auto_and_the_auto_jit_flag(monkeypatch):
    def program(x):
        y = x * 2.0
        return y[y > 1.0][:3].sum()              # must-compile refuses this (a length from data)

    (x,) = rng_arrays(MIN_CLUSTER_WORK)
    assert nbxla.jit(program, mode="auto")(x) == pytest.approx(program(x), rel=1e-12)
    with pytest.raises(nbxla.NbxlaError):
        nbxla.jit(program)(x)
    monkeypatch.setenv("NBXLA_FLAGS", "--auto_jit")
    f = nbxla.jit(program)
    assert f(x) == pytest.approx(program(x), rel=1e-12)
    assert f.last_report is not None and f.last_report.breaks
    with pytest.raises(nbxla.NbxlaError):
        nbxla.jit(program, mode="compile")(x)
    with pytest.raises(ValueError):
        nbxla.jit(program, mode="sometimes")


def test_veros_tke_kernel_matches_numpy():
    pytest.importorskip("scipy.linalg", reason="SciPy is an optional test dependency")
    spec = importlib.util.spec_from_file_location("auto_bench", REPO / "benchmarks" / "auto_clustering.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    inputs = bench.tke_inputs(10, nz=6)
    eager, ours = bench.fresh(inputs), bench.fresh(inputs)
    want = bench.tke_kernel(*eager)
    f = auto(bench.tke_kernel)
    got = f(*ours)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    for g, w in zip(ours[-2:], eager[-2:]):           # tke and dtke, written in place
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)
    reasons = " ".join(b.reason for b in f.last_report.breaks)
    assert "solve_banded" in reasons
    assert len(f.last_report.compiled_clusters) >= 2
    assert os.path.basename(f.last_report.filename) == "auto_clustering.py"


def test_writing_a_pending_value_into_a_small_numpy_array_is_a_named_break():
    def program(x):
        out = np.zeros(4)                        # under min_work / 32: a NumPy array
        y = np.sqrt(x) * 2.0
        out[:] = y[:4]
        return out + y[-4:]

    (x,) = rng_arrays(400)
    f = auto(program, min_work=256)
    assert_same(f(x), program(x))
    (b,) = f.last_report.breaks
    assert "written into a NumPy array" in b.reason and b.line == line_of(program, "out[:] = y[:4]")


def test_a_small_created_array_written_with_a_pending_value_stays_in_the_graph():
    """Created arrays from min_work / 32 up are stand-ins: one below min_work enters the
    graph when a pending value is written into it (no break), and is made as NumPy's at a
    first use with nothing pending (the other side)."""
    seen = {}

    def program(x):
        out = np.zeros(16)                       # 16 >= 256 // 32, under min_work
        y = np.sqrt(x) * 2.0
        out[2:6] = y[:4]                         # a pending value: recorded, no break
        plain = np.ones(16)
        plain[0] = 3.0                           # nothing pending: made now, as NumPy's
        seen["plain"] = isinstance(plain, LazyArray) and plain.state.value is not None
        return out * 2.0 + y[-16:], plain + 1.0

    (x,) = rng_arrays(400)
    f = auto(program, min_work=256)
    got = f(x)
    assert seen["plain"]
    assert_same(got, program(x))
    assert not f.last_report.breaks
    assert len(f.last_report.compiled_clusters) == 1


def test_a_long_loop_is_cut_into_clusters_of_whole_iterations_compiled_once(monkeypatch):
    from nbxla.cluster import session
    monkeypatch.setattr(session, "SOFT_MAX_OPS", 20)
    monkeypatch.setattr(session, "HARD_MAX_OPS", 80)

    def program(a, steps):
        a = a * 1.0
        for _ in range(steps):
            b = np.sqrt(a * a + 1.0)
            a = b * 0.5 - a[::-1] * 0.25
        return a

    (x,) = rng_arrays(64)
    cache = CompilationCache()
    f = AutoFunction(program, cache=cache, min_work=1, whole=False)
    assert_same(f(x, 30), program(x, 30))
    report = f.last_report
    assert not report.breaks and len(report.clusters) <= 4
    assert max(c.ops for c in report.clusters) < session.HARD_MAX_OPS
    assert any(c.runs >= 3 for c in report.clusters)      # whole iterations, reused
    assert cache.misses == len(report.compiled_clusters)


def test_locals_not_read_again_are_not_computed_at_a_break():
    def program(x):
        a = np.exp(x)
        b = a * 2.0                              # last use of a
        c = b + 1.0                              # last use of b
        s = float(c.sum())                       # the break: only c (and the sum) are needed
        return c * s

    (x,) = rng_arrays(1000)
    f = auto(program)
    assert_same(f(x), program(x))
    first = f.last_report.clusters[0]
    assert len(first.compilation.hlo.entry.root.operands) == 2     # c and its sum, not a, b


def halved_sum(v):
    """A helper with a graph break (``float``) once its argument is used."""
    w = v * 0.5                                  # the last use of v: released after it
    return w, float(w.sum())


def test_a_local_read_once_by_its_last_statement_is_released_as_it_is_read():
    """``w, s = halved_sum(a)`` is a's last statement: the caller's name is released as the
    argument is read, so the break inside the helper computes w (and its sum), not a; a
    local read twice there stays (the other side)."""
    def once(x):
        a = np.exp(x) + 1.0
        w, s = halved_sum(a)
        return w * s

    def twice(x):
        a = np.exp(x) + 1.0
        w, s = halved_sum(a + a)
        return w * s

    (x,) = rng_arrays(1000)
    for program, outputs in ((once, 2), (twice, 3)):
        f = auto(program)
        assert_same(f(x), program(x))
        first = f.last_report.clusters[0]
        assert len(first.compilation.hlo.entry.root.operands) == outputs, program.__name__


def test_methods_of_stand_ins_leave_nothing_behind_between_calls():
    """``x.flatten`` on a stand-in is a new closure over x each time: the helper rewrite's
    cache must not keep it (nor x and its array) alive after the call."""
    from nbxla.cluster import rewrite

    def program(x):
        y = np.sin(x) * 2.0
        return y.flatten().sum() + y.ravel()[0]

    (x,) = rng_arrays((40, 30))
    f = auto(program)
    f(x)
    size = len(rewrite._REWRITTEN)
    for _ in range(3):
        assert f(x) == pytest.approx(program(x), rel=1e-12)
    assert len(rewrite._REWRITTEN) == size


def test_an_array_written_in_place_and_then_dropped_still_gets_the_write():
    def program(x):
        buf = np.zeros_like(x)                   # a stand-in (a call's large result)
        view = buf[1:]
        view += x[:-1]                           # a write through a view...
        del view                                 # ...whose names are then gone
        out = buf
        del buf
        return float(out.sum())

    (x,) = rng_arrays(300)
    assert auto(program)(x) == pytest.approx(program(x), rel=1e-12)


def test_a_jit_function_called_inside_joins_the_cluster():
    @nbxla.jit
    def smooth(y):
        return 0.25 * (y[:-2] + 2.0 * y[1:-1] + y[2:])

    def program(x):
        y = np.exp(x)
        z = smooth(y)                            # must-compile inside auto: inlined
        return float(z.sum()), z

    (x,) = rng_arrays(500)
    f = auto(program)
    assert_same(f(x), program(x))
    (cluster,) = f.last_report.clusters
    assert cluster.compiled and line_of(smooth.fn, "0.25 * (") in cluster.lines
