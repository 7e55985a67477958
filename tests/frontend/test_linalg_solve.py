"""``np.linalg.solve`` / ``inv`` / ``cholesky``: one custom call that the CPU backend runs
through NumPy's LAPACK (a library call, not the evaluator).  Oracle: eager NumPy."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

import nbxla
from nbxla.errors import AotError, LinAlgCheckError
from tests.frontend_util import check, jit, quiet

RNG = np.random.default_rng(9)


def solve(a, b):
    return np.linalg.solve(a, b)


def shifted_solve(a, b):
    return np.linalg.solve(a + 2 * np.eye(a.shape[-1]), b) * 2


def inverse_times(a):
    return np.linalg.inv(a) @ a


CASES = [
    (solve, (RNG.random((6, 6)), RNG.random(6))),
    (solve, (RNG.random((6, 6)), RNG.random((6, 3)))),
    (solve, (RNG.random((4, 5, 5)), RNG.random((4, 5, 2)))),
    (solve, (RNG.random((5, 5)).astype(np.float32), RNG.random(5).astype(np.float32))),
    (solve, (RNG.integers(1, 9, (3, 3)), np.ones(3))),
    (solve, (RNG.random((4, 4)) + 1j * RNG.random((4, 4)), RNG.random(4).astype(np.complex64))),
    (shifted_solve, (RNG.random((6, 6)), RNG.random((6, 2)))),
    (inverse_times, (RNG.random((5, 5)),)),
]


@pytest.mark.parametrize("fn, args", CASES, ids=[f"{fn.__name__}{k}" for k, (fn, _) in enumerate(CASES)])
def test_agrees_with_numpy_as_a_library_call(fn, args):
    want = fn(*args)
    jitted = nbxla.jit(fn)
    with quiet():
        got = jitted(*args)
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-5 if want.dtype == np.float32 else 1e-10)
    native = jitted.last_compilation.executable.native
    assert native.interpreted_ops == {}
    assert "library call: LAPACK gesv" in jitted.last_compilation.stage("execution")


def inverse(a):
    return np.linalg.inv(a)


def solve_by_identity_argument(a, e):
    return np.linalg.solve(a, e)


@pytest.mark.parametrize("fn, args, how", [
    (inverse, (RNG.random((6, 6)),), "inv"),
    (inverse, (RNG.random((5, 5)).astype(np.float32),), "inv"),            # (f32 was made f64)
    (inverse, (RNG.random((4, 4)).astype(np.complex64),), "inv"),
    (inverse, (RNG.integers(1, 9, (4, 4)) + 9 * np.eye(4, dtype=np.int64),), "inv"),
    (inverse, (RNG.random((3, 4, 4)),), "solve"),                       # (a broadcast identity)
    (solve_by_identity_argument, (RNG.random((6, 6)), np.eye(6)), "solve"),  # (not a constant)
    (shifted_solve, (RNG.random((6, 6)), RNG.random((6, 6))), "solve")])
def test_the_inverse_is_numpys_inv_where_the_right_hand_side_is_the_identity_constant(fn, args, how):
    """``inv`` (a solve with the identity constant) runs as ``np.linalg.inv``: the same LAPACK
    gesv, NumPy's identity made in C; any other right-hand side as ``np.linalg.solve``."""
    jitted = nbxla.jit(fn)
    with quiet():
        got = jitted(*args)
    want = fn(*args)
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-5 if want.dtype == np.float32 else 1e-12)
    assert f"library call: LAPACK gesv through np.linalg.{how}" in jitted.last_compilation.stage("execution")


def test_a_singular_matrix_raises_numpys_error():
    with quiet(), pytest.raises(np.linalg.LinAlgError, match="Singular matrix"):
        nbxla.jit(solve)(np.zeros((3, 3)), np.ones(3))
    with quiet(), pytest.raises(np.linalg.LinAlgError, match="Singular matrix"):
        nbxla.jit(inverse)(np.zeros((3, 3)))


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler: every loop is host-driven")
def test_in_a_loop_the_solve_runs_in_the_native_loop():
    def iterate(a, x):
        for _ in range(100):
            x = np.linalg.solve(a, x)
            x = x / np.abs(x).max()
        return x
    a, x = RNG.random((4, 4)) + 4 * np.eye(4), RNG.random(4)
    jitted = nbxla.jit(iterate)
    with quiet():
        np.testing.assert_allclose(jitted(a, x), iterate(a, x), rtol=1e-10)
    (how,) = jitted.last_compilation.executable.native.loops.values()
    # (LAPACK's gesv called from the compiled loop: runtime/native_loops.py)
    assert how.startswith("native"), how


@pytest.mark.skipif(shutil.which("cc") is None, reason="ahead-of-time compilation needs a C compiler")
def test_ahead_of_time_names_the_call(tmp_path):
    import nbxla.aot
    with pytest.raises(AotError, match="nbxla_linalg_solve"):
        nbxla.aot.compile(solve, ["f64[3,3]", "f64[3]"], str(tmp_path), "solve")


# ---- np.linalg.cholesky: LAPACK's potrf custom call (JAX's target), a library call too -----------

def _spd(*shape, dtype=np.float64):
    a = RNG.random(shape)
    return (a @ np.swapaxes(a, -1, -2) + shape[-1] * np.eye(shape[-1])).astype(dtype)


def cholesky(a):
    return np.linalg.cholesky(a)


def cholesky_both(a):
    return np.linalg.cholesky(a, upper=True), np.linalg.cholesky(a) @ np.ones(a.shape[-1])


def shifted_choleskys(a, n):
    total = np.zeros_like(a)
    for i in range(n):
        total += np.linalg.cholesky(a - i * 0.5 * np.eye(a.shape[-1]))
    return total


CHOLESKY_CASES = [
    (cholesky, (_spd(6, 6),)), (cholesky, (_spd(3, 4, 4),)), (cholesky, (_spd(5, 5, dtype=np.float32),)),
    (cholesky, (np.eye(3, dtype=np.int64) * 4,)), (cholesky, (np.zeros((0, 0)),)), (cholesky, (np.ones((1, 1)),)),
    (cholesky_both, (_spd(5, 5),)),
] + [(shifted_choleskys, (_spd(4, 4), n)) for n in (0, 1, 4, 5, 9)]


@pytest.mark.parametrize("fn, args", CHOLESKY_CASES,
                         ids=[f"{fn.__name__}{k}" for k, (fn, _) in enumerate(CHOLESKY_CASES)])
def test_cholesky_agrees_with_numpy(fn, args):
    check(fn, *args)
    jitted = nbxla.jit(fn)
    with quiet():
        got, want = jitted(*args), fn(*args)
    got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-5 if w.dtype == np.float32 else 1e-10)
    assert jitted.last_compilation.executable.native.interpreted_ops == {}


@pytest.mark.parametrize("fn, args", [(cholesky, (-np.eye(3),)), (cholesky, (np.stack([np.eye(3), -np.eye(3)]),)),
                                      (shifted_choleskys, (_spd(4, 4), 40))])
def test_cholesky_of_a_matrix_that_is_not_positive_definite_raises_numpys_error(fn, args):
    with quiet(), pytest.raises(np.linalg.LinAlgError, match="not positive definite"):
        fn(*args)
    for run in (nbxla.jit(fn), jit(fn)):
        with quiet(), pytest.raises(LinAlgCheckError, match="not positive definite") as info:
            run(*args)
        assert isinstance(info.value, np.linalg.LinAlgError) and __file__ in str(info.value)
