"""Cell semantics: a %%xla cell does to the namespace what the same cell does eagerly in NumPy.

The oracle is the cell itself, run by plain NumPy on copies of the same inputs.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

import nbxla
from nbxla.cell import run_cell
from nbxla.runtime.cache import DEFAULT_CACHE
from nbxla.testing import compare_arrays

from tests.ipython_util import run, user_names

RNG = np.random.default_rng(0)


def check_like_numpy(ip, body: str, **inputs):
    """Run ``body`` under %%xla and eagerly; every name bound and every input must agree."""
    eager_ns = {"np": np, **copy.deepcopy(inputs)}
    exec(body, eager_ns)
    ip.user_ns.update(inputs)
    result, out = run(ip, "%%xla\n" + body)
    assert result.success, out
    for name, want in eager_ns.items():
        if name in ("np", "__builtins__"):
            continue
        got = ip.user_ns[name]
        if isinstance(want, (np.ndarray, np.generic)):
            assert type(got) is type(want), name
            ok, detail = compare_arrays(np.asarray(got), np.asarray(want))
            assert ok, f"{name}: {detail}"
        else:
            assert got == want, name
    for name, arr in inputs.items():                 # in-place writes reached the user's arrays
        if isinstance(arr, np.ndarray):
            assert ip.user_ns[name] is arr
    return result


def test_outputs_are_numpy_values_with_eager_types(shell):
    x = RNG.standard_normal((4, 5)).astype(np.float32)
    check_like_numpy(shell, "y = 2 * x + 1\ns = y.sum()\nm = y.max(axis=0)\nk = x.shape[0] * 3\n", x=x)
    assert type(shell.user_ns["s"]) is np.float32
    assert shell.user_ns["k"] == 12


def test_cache_hit_skips_python_but_still_binds_names(shell):
    shell.user_ns["x"] = np.arange(4.0)
    cell = "%%xla\nprint('tracing')\ny = x * 2\nlabel = 'doubled'\nn = 7\nf = lambda t: t + n\n"
    result, out = run(shell, cell)
    assert out.count("tracing") == 1
    for name in ("y", "label", "n", "f"):
        del shell.user_ns[name]
    shell.user_ns["x"] = np.arange(4.0) + 10      # same shape: a hit
    result, out = run(shell, cell)
    assert result.success and "tracing" not in out
    np.testing.assert_array_equal(shell.user_ns["y"], (np.arange(4.0) + 10) * 2)
    assert shell.user_ns["label"] == "doubled" and shell.user_ns["n"] == 7
    assert shell.user_ns["f"](1) == 8               # the lambda sees the user's globals
    assert DEFAULT_CACHE.hits == 1 and DEFAULT_CACHE.misses == 1


def test_last_expression_is_displayed_and_semicolon_silences(shell):
    x = shell.user_ns["x"] = np.arange(6, dtype=np.int32)
    result, _ = run(shell, "%%xla\ny = x * x\ny.sum()")
    assert type(result.result) is type((x * x).sum()) and result.result == 55
    result, _ = run(shell, "%%xla\ny = x * x\ny.sum();")
    assert result.result is None
    result, _ = run(shell, "%%xla\nprint('no value')")
    assert result.result is None


def test_jacobi_step_updates_the_input_in_place(shell):
    u = RNG.standard_normal(32)
    check_like_numpy(shell, "for _ in range(3):\n    u[1:-1] += 0.25 * (u[2:] - 2 * u[1:-1] + u[:-2])\n", u=u)


def test_augmented_assignment_keeps_the_array_object(shell):
    a, b = np.ones(3, np.float32), np.arange(3, dtype=np.float32)
    check_like_numpy(shell, "a += b\nc = a\n", a=a, b=b)
    assert shell.user_ns["c"] is a


def test_gemm_writes_into_c(shell):
    A, B, C = (RNG.standard_normal((8, 8)) for _ in range(3))
    check_like_numpy(shell, "C[:] = alpha * A @ B + beta * C\n", A=A, B=B, C=C, alpha=2.0, beta=0.5)


def test_numpy_scalar_input_is_rebound_not_mutated(shell):
    s, x = np.float32(2), np.ones(2, np.float32)
    check_like_numpy(shell, "t = s\ns += 1\ny = s * x\n", s=s, x=x)
    assert shell.user_ns["t"] is s


def test_list_from_namespace_is_updated_in_place(shell):
    params = [np.ones(3), np.zeros(3)]
    shell.user_ns.update(params=params, lr=0.5)
    result, out = run(shell, "%%xla\nparams[0] = params[0] - lr * (params[1] + 1)\n")
    assert result.success, out
    assert shell.user_ns["params"] is params
    np.testing.assert_array_equal(params[0], np.full(3, 0.5))


@pytest.mark.parametrize("body", [
    # softmax
    "e = np.exp(x - x.max(axis=1, keepdims=True))\np = e / e.sum(axis=1, keepdims=True)\n",
    # heat equation on a 2-D grid, several steps, in place
    "for _ in range(4):\n"
    "    g[1:-1, 1:-1] += 0.1 * (g[2:, 1:-1] + g[:-2, 1:-1] + g[1:-1, 2:] + g[1:-1, :-2] - 4 * g[1:-1, 1:-1])\n",
    # pairwise squared distances
    "d = (x * x).sum(1)[:, None] + (y * y).sum(1)[None, :] - 2 * x @ y.T\nd = np.maximum(d, 0)\n",
    # logsumexp and a layer norm
    "m = x.max(axis=-1, keepdims=True)\nlse = m[:, 0] + np.log(np.exp(x - m).sum(-1))\n"
    "z = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)\n",
])
def test_kernels_match_numpy(shell, body):
    inputs = {"x": RNG.standard_normal((6, 5)), "y": RNG.standard_normal((7, 5)),
              "g": RNG.standard_normal((10, 12)).astype(np.float32)}
    check_like_numpy(shell, body, **inputs)


def test_redefining_a_helper_recompiles(shell):
    shell.user_ns["x"] = np.arange(3.0)
    run(shell, "def helper(v):\n    return v + 1")
    run(shell, "%%xla\ny = helper(x)")
    run(shell, "def helper(v):\n    return v * 10")
    result, out = run(shell, "%%xla\ny = helper(x)")
    assert result.success, out
    np.testing.assert_array_equal(shell.user_ns["y"], np.arange(3.0) * 10)
    assert DEFAULT_CACHE.misses == 2


def test_jit_function_called_in_a_cell_is_inlined(shell):
    shell.user_ns["x"] = np.arange(3.0)
    run(shell, "import nbxla\n@nbxla.jit\ndef triple(a):\n    return a * 3")
    result, out = run(shell, "%%xla\ny = triple(x) + 1")
    assert result.success, out
    np.testing.assert_array_equal(shell.user_ns["y"], np.arange(3.0) * 3 + 1)


def test_same_array_twice_is_not_confused_with_two_arrays(shell):
    a, b = np.ones(3), np.full(3, 5.0)
    shell.user_ns.update(a=a, b=a)
    run(shell, "%%xla\nc = a + b")
    shell.user_ns["b"] = b                      # same signature, different aliasing
    run(shell, "%%xla\nc = a + b")
    np.testing.assert_array_equal(shell.user_ns["c"], a + b)
    f = nbxla.jit(lambda p, q: p + q)           # the same rule for @nbxla.jit
    np.testing.assert_array_equal(f(a, a), a + a)
    np.testing.assert_array_equal(f(a, b), a + b)


def test_namespace_unchanged_when_a_cell_fails(shell):
    x = np.arange(5.0)
    shell.user_ns.update(x=x, keep="me")
    before = {k: (v, v.copy() if isinstance(v, np.ndarray) else v) for k, v in user_names(shell).items()}
    result, _ = run(shell, "%%xla\nx += 1\nkeep = 'gone'\ny = x * 2\nz = np.unique(y)\n")
    assert not result.success
    after = user_names(shell)
    assert set(after) == set(before)
    for k, (obj, value) in before.items():
        assert after[k] is obj
        if isinstance(obj, np.ndarray):
            np.testing.assert_array_equal(obj, value)
        else:
            assert obj == value


def test_run_cell_without_ipython():
    ns = {"np": np, "x": np.arange(4, dtype=np.float32), "alpha": 0.5}
    value = run_cell("y = alpha * x\ny.sum()", ns, label="demo")
    assert type(value) is np.float32 and value == 3.0
    np.testing.assert_array_equal(ns["y"], np.arange(4, dtype=np.float32) * 0.5)
