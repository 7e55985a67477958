"""Python numbers a loop changes (``t = 0.0; for ...: t += dt``, npbench's nbody).

A Python float or complex that the body changes becomes a traced scalar of the loop's state,
so the loop is traced once instead of unrolled (or refused past the unroll budget).  It stays
a Python number in NumPy's promotion (NEP 50: ``x32 * t`` is float32), as do a loop index's
arithmetic (``i / 2``) and a complex's parts.  Where the body needs the number as a Python
value (``int(t)``), the loop is unrolled as before.  Every program runs on both sides of the
unroll threshold and with every loop rolled (``--unroll_max=0``), against eager NumPy: values
and dtypes.
"""

import copy

import numpy as np
import pytest

import nbxla

from ..frontend_util import quiet


def time_stepping(x, n):
    t = 0.0
    for i in range(n):
        t += 0.25
        x = x * np.float32(0.5) + t
    return x, t


def index_quotient(x, n):
    for i in range(n):
        x = x + i / 2
    return x


def scalar_functions(x, n):
    t = 0.0
    for i in range(n):
        t = t + 0.5
        x[i % 4] = x[i % 4] * np.float32(0.9) + np.sqrt(t) + np.exp(-t)
    return x, t


def to_int(x, n):
    t = 1.0
    for i in range(n):
        t *= 1.01
        x = x + int(t)          # (a traced conversion)
    return x


def needs_a_python_int(x, n):
    t = 1.0
    for i in range(n):
        t *= 1.05
        x = x + x[:int(t) // 2 + 1].sum()       # (a slice bound of unknown range: a Python int)
    return x


def complex_parts(x, n):
    z = 0j
    for i in range(n):
        z = z * 0.5 + 1j
        x = x + (z * z).real - z.imag
    return x, z


def while_counter(x, n):
    t = 0.0
    while (x > 0.1 / (n + 1)).any():
        x = x * 0.5
        t += 0.1
    return x * t


def energies(pos, vel):
    return 0.5 * np.sum(vel ** 2), np.sum(pos)


def nbody_like(pos, n):
    vel = pos * 0.1
    ke = np.ndarray(n + 1, dtype=np.float64)
    pe = np.ndarray(n + 1, dtype=np.float64)
    ke[0], pe[0] = energies(pos, vel)
    t, dt = 0.0, 0.01
    for i in range(n):
        vel += -pos * dt / 2.0
        pos += vel * dt
        t += dt
        ke[i + 1], pe[i + 1] = energies(pos, vel)
    return ke, pe, t


PROGRAMS = [time_stepping, index_quotient, scalar_functions, to_int, needs_a_python_int, complex_parts,
            while_counter, nbody_like]


@pytest.fixture(params=[None, "0"], ids=["default-unroll", "all-rolled"])
def unroll(request, monkeypatch):
    if request.param is not None:
        monkeypatch.setenv("NBXLA_FLAGS", f"--unroll_max={request.param}")


@pytest.mark.parametrize("n", [0, 1, 4, 5, 40])
@pytest.mark.parametrize("program", PROGRAMS, ids=lambda f: f.__name__)
def test_program_matches_numpy(program, n, unroll):
    x = np.random.default_rng(n).random(4).astype(np.float64 if program is nbody_like else np.float32)
    eager, compiled = copy.deepcopy((x, n)), copy.deepcopy((x, n))
    want = program(*eager)
    with quiet():
        got = nbxla.jit(program)(*compiled)
    want, got = (want, got) if isinstance(want, tuple) else ((want,), (got,))
    for k, (w, g) in enumerate(zip(want, got)):
        assert np.asarray(g).dtype == np.asarray(w).dtype, f"result {k}"
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-6, err_msg=f"result {k}")
    np.testing.assert_array_equal(compiled[0], eager[0])


def test_a_long_loop_with_a_python_float_is_rolled():
    """40 steps (past the unroll threshold): one HLO while, not 40 traced steps."""
    f = nbxla.jit(scalar_functions)
    with quiet():
        f(np.ones(4, np.float32), 40)
    assert [d[1] for d in f.last_compilation.loop_decisions] == ["rolled"]
    with quiet():
        f(np.ones(4, np.float32), 3)
    assert [d[1] for d in f.last_compilation.loop_decisions] == ["unrolled"]


def test_a_float_needed_as_a_python_value_unrolls_and_says_why():
    f = nbxla.jit(needs_a_python_int)
    with quiet():
        f(np.ones(4, np.float32), 40)
    (decision,) = f.last_compilation.loop_decisions
    assert decision[1] == "unrolled" and "Python number `t`" in decision[2]
