"""Whole-function compilation in auto mode (nbxla/cluster/whole.py): a function with no graph
break and no Python side effect runs as one compiled program; anything else is clustered as
before, and every call gives NumPy's result (the oracle: the plain function)."""

import numpy as np
import pytest

import nbxla
from nbxla.cluster import AutoFunction
from nbxla.cluster.purity import side_effect
from nbxla.cluster.whole import difference
from nbxla.runtime.cache import CompilationCache

SEEN = []
TABLE = np.zeros(3)


def auto(fn, **kw):
    return AutoFunction(fn, cache=CompilationCache(), **kw)


def rng_arrays(*shapes, seed=0):
    g = np.random.default_rng(seed)
    return [g.random(s) for s in shapes]


# ---- reading the source ------------------------------------------------------------------------

def helper_that_prints(x):
    print("step")
    return x * 2


def pure_helper(x):
    return np.sin(x) + 1.0


def test_pure_array_code_has_no_side_effect():
    def program(a, b, n):
        out = []
        for i in range(n):
            out.append(pure_helper(a) * b[i % len(b)])
        total = sum(float(v) for v in [1.0, 2.0])
        return np.stack(out).sum(axis=0) * total + abs(n)
    assert side_effect(program) is None


def calls_print(x):
    print(x)
    return x


def calls_helper(x):
    return helper_that_prints(x)


def appends_to_a_global(x):
    SEEN.append(1)
    return x


def draws(x):
    return x * np.random.rand(3)


def saves(x):
    np.save("/tmp/never.npy", x)
    return x


def writes_a_global(x):
    TABLE[0] = 1.0
    return x


def copies_into_a_global(x):
    np.copyto(TABLE, x[:3])
    return x


def adds_at_a_global(x):
    np.add.at(TABLE, [0, 1], 1.0)
    return x


def outputs_into_a_global(x):
    np.multiply(x[:3], 2.0, out=TABLE)
    return x


class Counter:
    def __init__(self):
        self.calls = 0

    def tick(self, x):
        self.calls += 1
        return x


COUNTER = Counter()


def calls_a_method_with_a_side_effect(x):
    return COUNTER.tick(x) * 2


def calls_an_unknown_method(x, model):
    return model.predict(x)


def maps_a_printing_helper(x):
    return sum(map(helper_that_prints, [x, x]))


def sorts_with_a_printing_key(x):
    return sorted([x, x * 2], key=helper_that_prints)[0]


def sets_an_attribute(x):
    x.flags.writeable = False
    return x


@pytest.mark.parametrize("fn, phrase", [
    (calls_print, "print()"), (calls_helper, "print()"), (appends_to_a_global, "writes into SEEN"),
    (draws, "numpy.random"), (saves, "numpy.save"), (writes_a_global, "writes into TABLE"),
    (sets_an_attribute, "sets an attribute"), (copies_into_a_global, "writes into TABLE"),
    (adds_at_a_global, "writes into TABLE"), (outputs_into_a_global, "writes into TABLE"),
    (calls_a_method_with_a_side_effect, "sets an attribute"),
    (maps_a_printing_helper, "print()"), (sorts_with_a_printing_key, "print()"),
])
def test_each_kind_of_side_effect_is_named_with_its_line(fn, phrase):
    why = side_effect(fn)
    assert why is not None and phrase in why and "line " in why, why


def test_methods_called_on_arguments_are_checked_per_call():
    methods = {}
    assert side_effect(calls_an_unknown_method, methods=methods) is None
    assert methods == {"model": {"predict"}}

    class Model:
        def __init__(self):
            self.seen = 0

        def predict(self, x):
            self.seen += 1
            return x * 2

    x = np.linspace(0.0, 1.0, 300)
    model, f = Model(), auto(calls_an_unknown_method)
    for _ in range(3):
        np.testing.assert_allclose(f(x, model), x * 2)
    assert model.seen == 3                       # every call ran the method (as Python)

    def array_api_style(x, xp, outer):
        return xp.sqrt(x) + outer(x, x).sum(axis=0)
    g = auto(array_api_style)
    for _ in range(3):
        np.testing.assert_allclose(g(x, np, np.outer), array_api_style(x, np, np.outer),
                                   rtol=1e-12)
    assert g._whole and "compiled whole" in g.last_report.to_text()


def test_writes_into_parameters_are_collected():
    def program(a, b, c):
        a[0] = 1.0
        b += 2.0
        return c * 2
    written = set()
    assert side_effect(program, written=written) is None
    assert written == {"a", "b"}


def test_calls_it_cannot_read_are_side_effects():
    import time

    def program(x):
        start = time.perf_counter()
        return x * 2.0, start
    assert "cannot read" in side_effect(program)


def test_difference_names_type_dtype_shape_and_values():
    a = np.arange(3.0)
    assert difference((a, 1), (a.copy(), 1)) is None
    assert "numpy.int64" in difference(np.int64(4), 4)
    assert "float32" in difference(a.astype(np.float32), a)
    assert "values" in difference(a + 1.0, a)
    assert difference(a + 1e-13, a) is None                  # rounding
    assert "list" in difference([a], (a,))


# ---- running ------------------------------------------------------------------------------------

def test_a_compilable_function_runs_compiled_whole_with_numpys_results():
    def program(a, b):
        t = np.exp(-a) * b
        for _ in range(3):
            t = 0.5 * (t + np.roll(t, 1, axis=0))
        return t.sum(axis=1), t.max()

    a, b = rng_arrays((300, 200), (300, 200))
    f = auto(program)
    for _ in range(12):
        got, want = f(a, b), program(a, b)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
        assert type(got[1]) is type(want[1]) and got[1] == pytest.approx(want[1], rel=1e-12)
    report = f.last_report
    assert f._whole and "compiled whole" in report.to_text()
    (cluster,) = report.clusters          # (of the last call that ran compiled)
    assert cluster.compiled and cluster.kernels >= 1 and not report.breaks


def test_writes_into_arguments_land_as_numpy_makes_them():
    def program(a, b):
        a += 1.0
        b[1:] = a[:-1] * 2.0
        return a.sum() + b.sum()

    base = rng_arrays(5000, 5000)
    f = auto(program)
    for _ in range(4):
        got_args, want_args = [x.copy() for x in base], [x.copy() for x in base]
        got, want = f(*got_args), program(*want_args)
        assert got == pytest.approx(want, rel=1e-12)
        for g, w in zip(got_args, want_args):
            np.testing.assert_allclose(g, w, rtol=1e-12)
    assert f._whole


def test_a_print_runs_on_every_call(capsys):
    def program(x):
        y = np.cos(x) * 2.0
        print("norm", round(float(np.abs(y).max()), 3))
        return y + 1.0

    (x,) = rng_arrays(1000)
    f = auto(program, min_work=1)
    for _ in range(3):
        np.testing.assert_allclose(f(x), program(x), rtol=1e-12)
    assert capsys.readouterr().out.count("norm") == 6
    assert "print()" in f.whole_refused
    assert "not compiled whole" in f.last_report.to_text()


def test_python_scalars_in_numpys_result_stay_python_scalars():
    def program(x):
        n = 0
        while x.max() > 0.01:        # (a loop on a value: compiled, n is traced)
            x = x * 0.5
            n += 1
        return x, n                  # NumPy: a Python int; the compiled loop: an int64 scalar

    (x,) = rng_arrays(100)
    f = auto(program)
    for _ in range(3):
        got = f(x)
        assert type(got[1]) is int and got[1] == program(x)[1]
        np.testing.assert_allclose(got[0], program(x)[0], rtol=1e-12)
    assert f._whole


def test_a_result_that_differs_from_numpys_gives_numpys_and_stops_whole_compilation(
        monkeypatch):
    import nbxla.cluster.whole as whole_module

    def program(a):
        a *= 2.0
        return a.sum()

    monkeypatch.setattr(whole_module, "difference",       # (as a compiler bug would)
                        lambda got, want, path="the result", single=False: f"{path} differs")
    base = rng_arrays(500)[0]
    f = auto(program)
    got_a, want_a = base.copy(), base.copy()
    got, want = f(got_a), program(want_a)
    assert type(got) is type(want) and got == want       # NumPy's own result, exactly
    np.testing.assert_array_equal(got_a, want_a)         # written once, as NumPy did
    assert "checked against NumPy's: the result differs" in f.whole_refused
    assert not f._whole


def test_a_list_argument_written_into_is_clustered():
    def program(parts, x):
        parts[0] = x * 2.0
        return parts[0] + parts[1]

    x, y = rng_arrays(50, 50)
    f = auto(program)
    got_parts, want_parts = [x, y], [x, y]
    np.testing.assert_allclose(f(got_parts, x), program(want_parts, x), rtol=1e-12)
    np.testing.assert_allclose(got_parts[0], want_parts[0], rtol=1e-12)


def test_recompiling_for_every_scalar_value_stops_whole_compilation():
    def program(x, n):
        return x[:n].sum() * 2.0          # (a slice bound: jit compiles per value of n)

    (x,) = rng_arrays(100)
    f = auto(program, measure=False)
    for n in range(1, 7):
        assert f(x, n) == pytest.approx(program(x, n), rel=1e-12)
    assert not f._whole and "compiled 4 times" in f.whole_refused


def test_a_graph_break_falls_back_to_clustering_with_the_reason():
    def program(x):
        y = np.sin(x)
        keep = np.unique(np.round(y, 1))              # a data-dependent shape
        return y.sum() + keep.size

    (x,) = rng_arrays(2000)
    f = auto(program, min_work=1)
    for _ in range(2):
        assert f(x) == pytest.approx(program(x), rel=1e-12)
    assert "nbxla.jit refused it" in f.whole_refused
    assert f.last_report.breaks


def test_jit_mode_auto_and_explain_use_it():
    def program(a):
        return np.tanh(a) * 3.0 + a ** 2

    (a,) = rng_arrays((400, 400))
    f = nbxla.jit(program, mode="auto")
    np.testing.assert_allclose(f(a), program(a), rtol=1e-12)
    report = nbxla.explain(program, a)
    assert "compiled whole" in report.to_text() and report.compiled_fraction == 1.0


def test_the_html_view_says_whether_it_compiled_whole():
    def program(a):
        return np.exp(a) + 1.0

    (a,) = rng_arrays(1000)
    html = nbxla.explain(program, a)._repr_mimebundle_()["text/html"]
    assert "whole function: compiled whole" in html


def test_keyword_arguments_written_into_are_compiled_whole():
    def program(alpha, C, A, B):             # (npbench calls kernels with keywords)
        C[:] = alpha * A @ B + 0.5 * C

    C, A, B = rng_arrays((60, 50), (60, 40), (40, 50))
    f = auto(program)
    for _ in range(4):
        got, want = {"C": C.copy()}, {"C": C.copy()}
        assert f(alpha=1.5, A=A, B=B, **got) is None
        program(alpha=1.5, A=A, B=B, **want)
        np.testing.assert_allclose(got["C"], want["C"], rtol=1e-12)
    assert f._whole and "compiled whole" in f.last_report.to_text()


def relax(p, b, steps):                  # a helper that writes into its first argument
    for _ in range(steps):
        p[1:-1] = 0.5 * (p[2:] + p[:-2]) - b[1:-1]


def test_writes_through_helpers_and_views_are_followed():
    def program(p, b, steps):
        inner = p[1:]                       # a view of an argument
        inner[0] = 0.0
        relax(p, b, steps)
        steps += 1                          # (an int: rebound, not written)
        return p.sum() + steps

    def writes_a_global_through_a_view(x):
        view = TABLE[1:]
        view[0] = 2.0
        return x

    written = set()
    assert side_effect(program, written=written) is None and written == {"p", "steps"}
    assert "writes into TABLE" in side_effect(writes_a_global_through_a_view)
    p0, b = rng_arrays(400, 400)
    f = auto(program)
    for _ in range(3):
        got_p, want_p = p0.copy(), p0.copy()
        assert f(got_p, b, 5) == pytest.approx(program(want_p, b, 5), rel=1e-12)
        np.testing.assert_allclose(got_p, want_p, rtol=1e-12)
    assert f._whole


def test_an_auto_function_called_inside_a_trace_joins_it():
    def inner(x):
        return np.sin(x) * 2.0

    inner_auto = nbxla.jit(inner, mode="auto")

    def outer(x):
        return inner_auto(x) + 1.0

    x = np.linspace(0.0, 1.0, 50)
    np.testing.assert_allclose(nbxla.jit(outer)(x), outer(x), rtol=1e-12)
    np.testing.assert_allclose(auto(outer)(x), outer(x), rtol=1e-12)


def test_an_argument_handed_back_is_the_argument_itself():
    def program(a, b):
        a *= 2.0
        return a, b.sum(), b

    a, b = rng_arrays(3000, 3000)
    f = auto(program)
    for _ in range(4):
        got = f(a, b)
        assert got[0] is a and got[2] is b
    assert f._whole


def test_decided_calls_keep_the_checks_for_other_arguments():
    def program(parts, scale):
        parts[0] *= scale
        return parts[0].sum()

    f = auto(program)
    a = rng_arrays((400, 400))[0]
    for _ in range(40):                       # arrays: compiled whole, then decided
        got, want = a.copy(), a.copy()
        assert f(got, 2.0) == pytest.approx(program(want, 2.0), rel=1e-12)
        np.testing.assert_allclose(got, want, rtol=1e-12)
    for _ in range(3):                        # keywords, other objects: checked each call
        got, want = a.copy(), a.copy()
        assert f(parts=got, scale=2.0) == pytest.approx(program(want, 2.0), rel=1e-12)
        np.testing.assert_allclose(got, want, rtol=1e-12)
    lists = [[a.copy()], [a.copy()]]          # a list written into: never the compiled path
    assert f(lists[0], 2.0) == pytest.approx(program(lists[1], 2.0), rel=1e-12)
    np.testing.assert_allclose(lists[0][0], lists[1][0], rtol=1e-12)


def test_numbers_rebound_and_numeric_imports_are_no_side_effects():
    def program(x, tol):
        import numpy as xp
        from math import sqrt
        step, previous, k = 0.4, xp.inf, 0
        while k < 3:
            step *= 0.5                         # (a float: rebound)
            previous = min(previous, sqrt(tol))
            k += 1
        return x * step + previous

    def imports_scipy(x):
        import scipy                            # noqa: F401
        return x

    assert side_effect(program) is None
    assert "imports a module" in side_effect(imports_scipy)
    x = np.arange(4.0)
    np.testing.assert_allclose(auto(program)(x, 4.0), program(x, 4.0), rtol=1e-12)


def test_a_signature_that_never_ran_whole_never_takes_its_fast_path():
    class Scale:
        def __init__(self):
            self.seen = 0

        def __call__(self, x):
            self.seen += 1
            return x * 3.0

    def program(x, fn):
        return fn(np.exp(x)) + 1.0

    x = np.linspace(0.0, 1.0, 200_000)
    f = auto(program)
    for _ in range(3):
        np.testing.assert_allclose(f(x, np.sqrt), program(x, np.sqrt), rtol=1e-12)
    scale = Scale()
    for _ in range(40):                          # decided, and called with the same objects
        np.testing.assert_allclose(f(x, scale), np.exp(x) * 3.0 + 1.0, rtol=1e-12)
    assert scale.seen == 40


def test_a_failure_while_reading_the_source_never_stops_the_call(monkeypatch):
    import nbxla.cluster.whole as whole_module

    def broken(*args, **kwargs):
        raise RuntimeError("unexpected source")
    monkeypatch.setattr(whole_module.WholeFunction, "of", broken)

    def program(x):
        return np.cos(x) * 2.0

    (x,) = rng_arrays(300)
    f = auto(program)
    np.testing.assert_allclose(f(x), program(x), rtol=1e-12)
    assert "could not be read" in f.whole_refused and "unexpected source" in f.whole_refused


def test_lambdas_partials_methods_and_odd_signatures_run_as_numpy_does():
    import functools

    class Model:
        def __init__(self):
            self.k = 3.0

        def step(self, a):
            return a * self.k

    def star(*arrays):
        return sum(np.sin(a) for a in arrays)

    def keyword_only(a, *, scale=2.0):
        return a * scale

    smooth = lambda a: np.tanh(a) * 2 + 1          # noqa: E731  (a lambda on its own line)
    noisy = lambda a: print(a.shape) or a           # noqa: E731
    x = np.linspace(0.0, 1.0, 20_000)
    cases = [(smooth, (x,), {}), (star, (x, x), {}), (keyword_only, (x,), {"scale": 4.0}),
             (functools.partial(keyword_only, scale=3.0), (x,), {}), (Model().step, (x,), {}),
             (noisy, (x,), {})]
    compiled = []
    for fn, args, kwargs in cases:
        f = nbxla.jit(fn, mode="auto")
        for _ in range(3):
            np.testing.assert_allclose(f(*args, **kwargs), fn(*args, **kwargs), rtol=1e-12)
        compiled.append(bool(f._whole))
    assert compiled == [True] * 5 + [False]
    assert "print()" in f.whole_refused                 # (the last lambda prints)
