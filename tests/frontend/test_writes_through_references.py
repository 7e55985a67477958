"""Writes that reach an array through another reference (issue 28's silently wrong answers).

A NumPy array made inside the compiled code becomes traced on its first traced write; every
reference to it must then see the traced value: the caller's name after a helper wrote into
its parameter, a list item, the other branch of an ``if``, the next step of a rolled loop.
Each program runs at trip counts on both sides of the unroll threshold and with every loop
rolled (``--unroll_max=0``), against eager NumPy (results and the arguments afterwards).
"""

import copy

import numpy as np
import pytest

import nbxla
from nbxla.testing import compare_arrays

from ..frontend_util import quiet


# ---- the lid-driven-cavity shape: helpers write into their parameters in a time loop -----------

def build_up_b(b, u, v):
    b[1:-1, 1:-1] = (u[1:-1, 2:] - u[1:-1, 0:-2]) + (v[2:, 1:-1] - v[0:-2, 1:-1])


def pressure_poisson(nit, p, b):
    for q in range(nit):
        pn = p.copy()
        p[1:-1, 1:-1] = (pn[1:-1, 2:] + pn[1:-1, 0:-2] + pn[2:, 1:-1] + pn[0:-2, 1:-1]) * 0.25 - b[1:-1, 1:-1]
        p[:, -1] = p[:, -2]
        p[0, :] = p[1, :]
        p[:, 0] = p[:, 1]
        p[-1, :] = 0


def cavity_flow(nt, nit, u, v, p):
    b = np.zeros(u.shape)
    for n in range(nt):
        un = u.copy()
        vn = v.copy()
        build_up_b(b, u, v)
        pressure_poisson(nit, p, b)
        u[1:-1, 1:-1] = un[1:-1, 1:-1] - 0.1 * (p[1:-1, 2:] - p[1:-1, 0:-2]) + 0.01 * (un[2:, 1:-1] - un[0:-2, 1:-1])
        v[1:-1, 1:-1] = vn[1:-1, 1:-1] - 0.1 * (p[2:, 1:-1] - p[0:-2, 1:-1]) + 0.01 * (un[1:-1, 2:] - vn[1:-1, 0:-2])
        u[0, :] = 0
        u[:, 0] = 0
        u[:, -1] = 0
        u[-1, :] = 1
        v[0, :] = 0
        v[-1, :] = 0
        v[:, 0] = 0
        v[:, -1] = 0


# ---- smaller shapes of the same mistake ------------------------------------------------------

def fill(b, u):
    b[1:-1] = u[1:-1] * 2


def bump(b, u):
    b += u


def helper_fills_local(n, u):
    b = np.zeros(u.shape)
    s = u * 0
    for i in range(n):
        fill(b, u + i)
        s = s + b
    return s, b


def helper_in_traced_if(n, u):
    b = np.zeros(u.shape)
    if u[0] > 0.5:
        fill(b, u)
    else:
        bump(b, u)
    return b * 3


def list_items_written(n, u):
    bufs = [np.zeros(u.shape), np.ones(u.shape)]
    for i in range(n):
        fill(bufs[0], u + i)
        bump(bufs[1], bufs[0])
    return bufs[0] + bufs[1]


def fresh_each_step(n, u):
    s = u * 0
    for i in range(n):
        c = np.zeros(u.shape)
        fill(c, u + i)
        s = s + c
    return s


def numpy_update_then_helper(n, u):
    t = np.zeros(u.shape)
    t += 0.25 * np.tanh(t)          # (NumPy values: an ordinary in-place update)
    fill(t, u)
    return t


def write_then_rebind(b, u):
    for q in range(len(u) - 1):
        b[1] = u[0]                 # the first step writes into the caller's array...
        b = np.tanh(u * b)          # ...later ones into the new array


def rebinding_helper(n, x, u):
    write_then_rebind(x, u)
    return u * 2


def view_then_base_updated(n, u):
    t = np.zeros(u.shape)
    v = t[1:-1]
    for i in range(n):
        v += 0.25 * (u[:-2] - v)        # through the view...
        t[1:-1] *= 0.5                  # ...then the base, by its own name
    return t


def argument_or_new_array(x, u):
    if u[0] > 0.5:
        fill(x, u)                      # x is still the argument...
    else:
        x = x * 2                       # ...or a new array, depending on the data
    bump(x, u)                          # so where this write lands depends on the data
    return x


def energies(u):
    return u.sum() * 0.5, u.max()


def tuple_targets_in_a_loop(n, u):
    # (npbench's nbody: ``KE[i + 1], PE[i + 1] = getEnergy(...)`` into np.ndarray buffers)
    ke = np.ndarray(n + 1, dtype=np.float64)
    pe = np.ndarray(n + 1, dtype=np.float64)
    ke[0], pe[0] = energies(u)
    for i in range(n):
        u = np.tanh(u + i)
        ke[i + 1], pe[i + 1] = energies(u)
    return ke, pe


def nested_and_starred_targets(n, u):
    a, b = np.zeros(u.shape), np.zeros(3)
    for i in range(n):
        (a[i % len(u)], b[0]), *rest = (u[1] * i, u[2]), u[3], u[4]
        b[1:] = rest
    a[0], last = u[0], u[-1]
    return a, b, last


PROGRAMS = [helper_fills_local, helper_in_traced_if, list_items_written, fresh_each_step,
            numpy_update_then_helper, rebinding_helper, view_then_base_updated,
            tuple_targets_in_a_loop, nested_and_starred_targets]


def _same(label, want, got):
    for k, (w, g) in enumerate(zip(want, got) if isinstance(want, tuple) else [(want, got)]):
        ok, detail = compare_arrays(np.asarray(g), np.asarray(w), rtol=1e-12)
        assert ok, f"{label} {k}: {detail}"


@pytest.fixture(params=[None, "0"], ids=["default-unroll", "all-rolled"])
def unroll(request, monkeypatch):
    if request.param is not None:
        monkeypatch.setenv("NBXLA_FLAGS", f"--unroll_max={request.param}")


@pytest.mark.parametrize("nt, nit", [(0, 1), (1, 1), (3, 1), (4, 4), (5, 1), (3, 5), (12, 7)])
def test_cavity_flow_matches_numpy(nt, nit, unroll):
    rng = np.random.default_rng(nt * 10 + nit)
    args = [rng.random((9, 8)) for _ in range(3)]
    eager, compiled = copy.deepcopy(args), copy.deepcopy(args)
    cavity_flow(nt, nit, *eager)
    with quiet():
        nbxla.jit(cavity_flow)(nt, nit, *compiled)
    for name, w, g in zip("uvp", eager, compiled):
        _same(name, w, g)


@pytest.mark.parametrize("n", [0, 1, 4, 5, 17])
@pytest.mark.parametrize("program", PROGRAMS, ids=lambda f: f.__name__)
def test_program_matches_numpy(program, n, unroll):
    rng = np.random.default_rng(n)
    args = (n, rng.random(6)) if program is not rebinding_helper else (n, rng.random(n + 2), rng.random(n + 2))
    eager, compiled = copy.deepcopy(args), copy.deepcopy(args)
    want = program(*eager)
    with quiet():
        got = nbxla.jit(program)(*compiled)
    _same("result", want, got)
    for k, (w, g) in enumerate(zip(eager, compiled)):
        if isinstance(w, np.ndarray):
            _same(f"argument {k}", w, g)


def test_a_write_whose_target_depends_on_the_data_is_refused():
    with quiet(), pytest.raises(nbxla.NotCompilableError, match="depending on the data"):
        nbxla.jit(argument_or_new_array)(np.ones(4), np.full(4, 0.7))
