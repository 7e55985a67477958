"""``%%xla --auto``: the cell runs as Python, its array work in compiled clusters."""

from __future__ import annotations

import numpy as np
import pytest

from tests.ipython_util import run, shell  # noqa: F401,F811  (fixture)

from nbxla.cluster import MIN_CLUSTER_WORK


def test_auto_cell_binds_numpy_arrays_prints_in_order_and_explains(shell):
    x = np.random.default_rng(0).random(MIN_CLUSTER_WORK)
    shell.user_ns["x"] = x
    cell = ("%%xla --auto --explain\n"
            "y = np.exp(x) * 2\n"
            "print('mean', round(float(y.mean()), 6))\n"
            "big = y[y > 4.0]\n"
            "y += 1\n"
            "y.sum()")
    result, out = run(shell, cell)
    assert result.success, out
    ns = shell.user_ns
    assert type(ns["y"]) is np.ndarray and type(ns["big"]) is np.ndarray
    eager_y = np.exp(x) * 2
    np.testing.assert_allclose(ns["big"], eager_y[eager_y > 4.0], rtol=1e-12)
    np.testing.assert_allclose(ns["y"], eager_y + 1, rtol=1e-12)
    assert ns["x"] is x                               # an input keeps its object
    assert f"mean {round(float(eager_y.mean()), 6)}" in out
    assert "graph break" in out and "line 3: float() of an array value" in out
    assert "line 4: boolean-mask indexing" in out
    assert result.result == pytest.approx((eager_y + 1).sum(), rel=1e-12)


def test_auto_cell_exception_points_at_the_cell_line_and_keeps_earlier_writes(shell):
    x = np.zeros(MIN_CLUSTER_WORK)
    shell.user_ns["x"] = x
    result, out = run(shell, "%%xla --auto\nx += 1\nraise RuntimeError('stop here')\n")
    assert not result.success and isinstance(result.error_in_exec, RuntimeError)
    assert "line 3" in out and "stop here" in out
    assert (x == 1).all()                             # the write before the raise landed


def test_auto_jit_flag_turns_cells_to_auto_and_compile_opts_out(shell, monkeypatch):
    monkeypatch.setenv("NBXLA_FLAGS", "--auto_jit")
    shell.user_ns["x"] = np.ones(MIN_CLUSTER_WORK)
    result, out = run(shell, "%%xla\nprint('runs as Python')\nz = x[x > 0][:5].sum()")
    assert result.success and "runs as Python" in out
    assert shell.user_ns["z"] == 5
    result, out = run(shell, "%%xla --compile\nz = x[x > 0][:5].sum()")
    assert not result.success and "boolean-mask" in out


def test_explain_needs_auto(shell):
    result, out = run(shell, "%%xla --explain\ny = 1")
    assert not result.success and "--auto" in out


def test_auto_cell_that_compiles_whole_runs_compiled_and_checked(shell):
    g = np.random.default_rng(1)
    a, b = g.random((300, 200)), g.random((300, 200))
    shell.user_ns.update(a=a, b=b)
    cell = ("%%xla --auto --explain\n"
            "t = np.exp(-a) * b\n"
            "a[0] = 0.0\n"
            "s = t.sum(axis=1)\n"
            "t.max()")
    for _ in range(2):                                # (compiled and checked, then cached)
        a[0] = 1.0
        result, out = run(shell, cell)
        assert result.success, out
        assert "compiled whole" in out and "no graph breaks" in out
        want_t = np.exp(-shell.user_ns["a"][1:]) * b[1:]
        np.testing.assert_allclose(shell.user_ns["s"][1:], want_t.sum(axis=1), rtol=1e-12)
        assert (shell.user_ns["a"][0] == 0.0).all() and shell.user_ns["a"] is a
    assert result.result == pytest.approx((np.exp(-np.r_[[np.ones(200)], a[1:]]) * b).max())


def test_auto_cell_with_a_print_is_clustered_and_says_why(shell):
    shell.user_ns["x"] = np.ones(MIN_CLUSTER_WORK)
    result, out = run(shell, "%%xla --auto --explain\ny = x * 2\nprint('hi')\ny.sum()")
    assert result.success and "hi" in out
    assert "not compiled whole: it calls print()" in out


def test_whole_auto_cell_binds_python_scalars_where_numpy_does(shell):
    shell.user_ns["x"] = np.random.default_rng(2).random(1000)
    cell = ("%%xla --auto --explain\n"
            "n = 0\n"
            "y = x.copy()\n"
            "while y.max() > 0.01:\n"
            "    y = y * 0.5\n"
            "    n += 1\n"
            "n")
    for _ in range(2):                          # (checked, then from the cache)
        result, out = run(shell, cell)
        assert result.success and "compiled whole" in out, out
        assert type(shell.user_ns["n"]) is int and type(result.result) is int
        assert type(shell.user_ns["y"]) is np.ndarray
