"""Window updates read back and written twice in a rolled loop (``passes/window_writes``): whole
programs against eager NumPy, and the loop body's updates still in place (``operand_buffers``:
each update fusion writes into its operand's buffer).  Cholesky's inner update read its own
row before and after the first update once a read-back forwarded a value that reads the
matrix, and copied the matrix every step (0.18 -> 16 ms at 120x120); a Thomas-like sweep
(npbench vadv's shape) writes each column once a step."""

from __future__ import annotations

import numpy as np

import nbxla
from nbxla.examples import cholesky, lu
from nbxla.hlo.aliasing import updated_parameter
from nbxla.passes.buffer_assignment import operand_buffers
from tests.frontend_util import use_flags


def _loop_bodies(compiled):
    module = compiled.last_compilation.optimized
    bodies = {id(i.attrs["body"]): i.attrs["body"] for c in module.computations for i in c.instructions
              if i.opcode == "while"}
    return list(bodies.values())


def _updates(body):
    return [i for i in body.instructions if i.opcode == "fusion" and updated_parameter(i.attrs["calls"]) is not None]


def _run(fn, *args):
    want = [a.copy() for a in args]
    fn(*want)
    got = [a.copy() for a in args]
    compiled = nbxla.jit(fn)
    compiled(*got)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
    return compiled


def _spd(n):
    a = np.random.default_rng(0).random((n, n))
    return a @ a.T + n * np.eye(n)


def test_cholesky_and_lu_updates_stay_in_place(monkeypatch):
    """Every update fusion of every rolled loop body writes into its operand's buffer."""
    use_flags(monkeypatch, "--unroll_max=0")
    for fn in (cholesky, lu):
        compiled = _run(fn, _spd(12))
        bodies = _loop_bodies(compiled)
        assert bodies, fn.__name__
        for body in bodies:
            in_place = operand_buffers(body, loop_body=True)
            for update in _updates(body):
                assert update.name in in_place, (fn.__name__, body.name, update.name)


def thomas_sweep(c, d, w):
    """vadv's forward sweep, reduced: column k written, read back, read beside (k - 1) and
    written again, for two arrays."""
    for k in range(1, c.shape[1]):
        c[:, k] = w[:, k] * 0.5
        divided = 1.0 / (3.0 - c[:, k - 1] * c[:, k])
        d[:, k] = w[:, k] + d[:, k]
        c[:, k] = c[:, k] * divided
        d[:, k] = (d[:, k] - d[:, k - 1]) * divided


def test_a_column_written_twice_a_step_is_written_once_in_place(monkeypatch):
    """The sweep's body: one update of ``c`` and one of ``d`` a step (the first of each merged
    into the second), each in its operand's buffer; the results are NumPy's."""
    use_flags(monkeypatch, "--unroll_max=0")
    rng = np.random.default_rng(1)
    compiled = _run(thomas_sweep, rng.random((7, 9)), rng.random((7, 9)), rng.random((7, 9)))
    (body,) = _loop_bodies(compiled)
    updates = _updates(body)
    assert len(updates) == 2, [u.name for u in updates]
    in_place = operand_buffers(body, loop_body=True)
    assert all(u.name in in_place for u in updates)
