"""``nbxla.jit(fn, verify=True)`` and ``NBXLA_FLAGS=--verify``: the first call of each compiled
signature is checked against the plain function on copies; a difference raises
``VerificationError`` naming the output or argument; a checked signature is not checked again."""

import numpy as np
import pytest

import nbxla
import nbxla.api
import nbxla.call_check
from nbxla.errors import NbxlaError, VerificationError
from nbxla.runtime.cache import CompilationCache


def axpy(a, x, y):
    return a * x + y, (x * y).sum()


def scale_in_place(p, q):
    p *= 3.0
    return q + 1.0


def args():
    rng = np.random.default_rng(0)
    return 2.0, rng.random(16), rng.random(16)


@pytest.fixture
def count_checks(monkeypatch):
    calls = []
    real = nbxla.call_check.checked_call

    def counting(*a, **kw):
        calls.append(a[0])
        return real(*a, **kw)
    monkeypatch.setattr(nbxla.api, "checked_call", counting)
    return calls


def test_a_right_compilation_is_checked_once(count_checks):
    f = nbxla.jit(axpy, verify=True, cache=CompilationCache())
    for _ in range(3):
        got, want = f(*args()), axpy(*args())
        np.testing.assert_allclose(got[0], want[0])
        assert got[1] == pytest.approx(want[1])
    assert count_checks == ["axpy"]
    f(2.0, np.ones(4), np.ones(4))               # a new signature: checked
    assert count_checks == ["axpy", "axpy"]


def test_the_decorator_form_and_an_argument_written_in_place():
    @nbxla.jit(verify=True, cache=CompilationCache())
    def scale(p, q):
        p *= 3.0
        return q + 1.0
    p, q = np.arange(4.0), np.ones(4)
    np.testing.assert_array_equal(scale(p, q), q + 1.0)
    np.testing.assert_array_equal(p, np.arange(4.0) * 3)     # written once, not twice


def _wrong(monkeypatch, break_it):
    real = nbxla.api.run_program

    def wrong(compiled, leaves):
        result = real(compiled, leaves)
        return break_it(result, leaves)
    monkeypatch.setattr(nbxla.api, "run_program", wrong)


def test_a_wrong_output_is_named(monkeypatch):
    _wrong(monkeypatch, lambda result, leaves: (result[0] * 1.1, result[1]))
    f = nbxla.jit(axpy, verify=True, cache=CompilationCache())
    with pytest.raises(VerificationError) as info:
        f(*args())
    message = str(info.value)
    assert isinstance(info.value, NbxlaError)
    assert "axpy" in message and "output 0: max abs err" in message and "output 1" not in message
    assert "report" in message and "without nbxla.jit" in message
    with pytest.raises(VerificationError):      # not checked: checked again, not the fast path
        f(*args())


def test_a_wrong_write_back_names_the_argument(monkeypatch):
    def write_more(result, leaves):
        leaves[0] += 1.0
        return result
    _wrong(monkeypatch, write_more)
    f = nbxla.jit(scale_in_place, verify=True, cache=CompilationCache())
    p, q = np.arange(4.0), np.ones(4)
    want_p, want_q = p.copy(), q.copy()
    scale_in_place(want_p, want_q)
    with pytest.raises(VerificationError, match=r"argument `p` after the call: max abs err 1"):
        f(p, q)
    np.testing.assert_array_equal(p, want_p)        # left as NumPy leaves it, not as compiled
    np.testing.assert_array_equal(q, want_q)


def test_a_wrong_dtype_is_named(monkeypatch):
    _wrong(monkeypatch, lambda result, leaves: (result[0].astype(np.float32), result[1]))
    with pytest.raises(VerificationError, match="output 0: dtype float32, expected float64"):
        nbxla.jit(axpy, verify=True, cache=CompilationCache())(*args())


def test_the_flag_turns_it_on_without_a_new_compilation(monkeypatch, count_checks):
    cache = CompilationCache()
    f = nbxla.jit(axpy, cache=cache)
    f(*args())
    assert count_checks == []
    compiled = cache.misses
    monkeypatch.setenv("NBXLA_FLAGS", "--verify")
    f(*args())
    f(*args())
    assert count_checks == ["axpy"] and cache.misses == compiled
    _wrong(monkeypatch, lambda result, leaves: (result[0] + 1.0, result[1]))
    with pytest.raises(VerificationError):
        nbxla.jit(axpy, cache=cache)(*args())


def test_captured_arrays_are_copied_for_the_plain_run():
    table = np.arange(8.0)

    def shift(x):
        table[0] += 1.0                          # (writes a captured array, as NumPy would)
        return x + table
    f = nbxla.jit(shift, verify=True, cache=CompilationCache())
    got = f(np.ones(8))
    assert table[0] == 1.0                       # once, by the compiled run
    np.testing.assert_array_equal(got, np.ones(8) + table)


def test_switch_on_adds_the_flag_once_and_keeps_the_others(monkeypatch):
    from nbxla.flags import FlagError, current_flags, switch_on
    monkeypatch.setenv("NBXLA_FLAGS", "--pass_timing")
    switch_on("verify")
    switch_on("verify")
    import os
    assert os.environ["NBXLA_FLAGS"] == "--pass_timing --verify"
    assert current_flags().verify and current_flags().pass_timing
    with pytest.raises(FlagError, match="not an NBXLA_FLAGS switch"):
        switch_on("dump_to")


def test_a_function_that_runs_only_traced_is_not_checked():
    from nbxla.errors import UncheckedWarning

    def needs_tracing(x):
        with nbxla.GradientTape() as tape:
            y = (x * x).sum()
        return tape.gradient(y, x)
    f = nbxla.jit(needs_tracing, verify=True, cache=CompilationCache())
    with pytest.warns(UncheckedWarning, match="needs_tracing cannot be checked"):
        np.testing.assert_allclose(f(np.arange(3.0)), 2 * np.arange(3.0))
