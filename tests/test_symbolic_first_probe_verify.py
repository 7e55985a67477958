"""The automatic mode's symbolic compile verifies its first probe's optimized module once (the
static compile before it verified every pass of the same program at another size), and
``dynamic=True`` (no static compile before) still verifies after every pass; results equal
NumPy's at every size, with the same compile counts."""

import importlib

import numpy as np
import pytest

import nbxla
from nbxla.runtime.cache import CompilationCache

pipeline_module = importlib.import_module("nbxla.passes.pipeline")
symbolic_compile = importlib.import_module("nbxla.symbolic_compile")


def program(x, y):
    z = np.tanh(x * 0.5 + y) * np.exp(-x * x)
    return z - z.mean(axis=1, keepdims=True), (x * y).sum(axis=1)


def _verifications(monkeypatch):
    """Count verifications between passes and of a whole optimized module, while calling."""
    counts = {"between passes": 0, "result": 0}
    real_between = real_result = pipeline_module.verify_module        # (one function)

    def between(module, after=None):
        counts["between passes"] += 1
        return real_between(module, after)

    def result(module, after=None):
        counts["result"] += 1
        return real_result(module, after)
    monkeypatch.setattr(pipeline_module, "verify_module", between)
    monkeypatch.setattr(symbolic_compile, "verify_module", result, raising=False)
    return counts


def _inputs(n):
    g = np.random.default_rng(n)
    return g.random((n, 24)), g.random((n, 24))


@pytest.mark.parametrize("first", [1, 3])
def test_automatic_mode_verifies_the_first_probe_once(monkeypatch, first):
    cache = CompilationCache()
    f = nbxla.jit(program, cache=cache)
    f(*_inputs(first))                          # the static compile: every pass verified
    counts = _verifications(monkeypatch)
    f(*_inputs(first + 4))                      # the symbolic compile
    assert "symbolic" in f.last_compilation.explanation
    assert counts == {"between passes": 0, "result": 1}
    for n in [first, first + 4] + list(range(2, 12)):
        got, expected = f(*_inputs(n)), program(*_inputs(n))
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12)
    assert cache.misses == 2


def test_dynamic_true_still_verifies_every_pass(monkeypatch):
    cache = CompilationCache()
    f = nbxla.jit(program, cache=cache, dynamic=True)
    counts = _verifications(monkeypatch)
    f(*_inputs(5))
    assert "symbolic" in f.last_compilation.explanation
    assert counts["between passes"] > 1 and counts["result"] == 0
    for n in range(1, 12):
        got, expected = f(*_inputs(n)), program(*_inputs(n))
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12)
    assert cache.misses == 1
