"""Dot rewrites: matrix-vector products traced through size-1 reshapes become plain GEMV dots.

``A @ x`` with a 1-D ``x`` is traced as ``reshape(A @ reshape(x, (k, 1)))``.  After the
optimizer no dot reads a reshape that only adds size-1 free dims, the reshapes around it are
gone where only reshapes read it, the results agree with the evaluator on the original module,
and the executable runs them as GEMV calls with operands in place (no permutation).
"""

from __future__ import annotations

import numpy as np
import pytest

import nbxla
from nbxla.hlo import Builder, Module, Shape
from nbxla.hlo.evaluator import evaluate, flatten
from nbxla.passes import optimize
from nbxla.runtime.cpu_kernels import DotThunk


def _adds_unit_free_dims(dot, k) -> bool:
    r = dot.operands[k]
    if r.opcode != "reshape":
        return False
    side = "lhs" if k == 0 else "rhs"
    taken = set(dot.attrs.get(f"{side}_batch_dims", ())) | set(dot.attrs.get(f"{side}_contracting_dims", ()))
    unit = [d for d in range(r.shape.rank) if d not in taken and r.shape.dims[d] == 1]
    return bool(unit) and tuple(n for d, n in enumerate(r.shape.dims) if d not in unit) == r.operands[0].shape.dims


def _dots(module):
    return [i for c in module.computations for i in c.instructions if i.opcode == "dot"]


PROGRAMS = {
    "matvec": (lambda A, x: A @ x, [(7, 5), (5,)]),
    "vecmat": (lambda A, y: y @ A, [(7, 5), (7,)]),
    "atax": (lambda A, x: (A @ x) @ A, [(7, 5), (5,)]),
    "bicg": (lambda A, p, r: (r @ A, A @ p), [(7, 5), (5,), (7,)]),
    "scaled_update": (lambda A, x, y: 1.5 * (A @ x) + 0.5 * y, [(7, 5), (5,), (7,)]),
    "batched_matvec": (lambda B, v: B @ v, [(3, 7, 5), (5,)]),
    "explicit_row": (lambda A, x: x[None, :] @ A, [(5, 4), (5,)]),
    "column_kept": (lambda A, x: (A @ x[:, None]) + 1.0, [(7, 5), (5,)]),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_matrix_vector_programs_become_plain_dots_and_agree_with_numpy(name):
    fn, shapes = PROGRAMS[name]
    rng = np.random.default_rng(1)
    args = [rng.standard_normal(s) for s in shapes]
    f = nbxla.jit(fn)
    got = f(*args)
    want = fn(*args)
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
    optimized = f.last_compilation.optimized
    dots = _dots(optimized)
    assert dots
    assert not any(_adds_unit_free_dims(d, k) for d in dots for k in (0, 1)), f.last_compilation.stage("optimized_hlo")
    thunks = [s[0] for s in f.last_compilation.executable.native._plan[2]]
    gemv = [t for t in thunks if isinstance(t, DotThunk) and "GEMV" in t.how]
    assert gemv and all(t.lhs_perm is None and t.rhs_perm is None for t in gemv)


def _unit_dims_module(batch: bool, unit_at: int, reader: str) -> tuple[Module, list]:
    """dot(reshape(v) with a size-1 dim inserted at ``unit_at``, W), read by ``reader``."""
    b = Builder("f")
    nb = 1 if batch else 0
    v_dims = (2,) * nb + (4,)
    r_dims = list(v_dims)
    r_dims.insert(nb + unit_at, 1)          # before or after the contracted dim
    v = b.parameter(Shape("f64", v_dims), "v")
    w = b.parameter(Shape("f64", (2,) * nb + (4, 3)), "w")
    r = b.op("reshape", v, shape=Shape("f64", tuple(r_dims)))
    contract = nb + (1 - unit_at)
    d = b.op("dot", r, w, lhs_batch_dims=tuple(range(nb)), rhs_batch_dims=tuple(range(nb)),
             lhs_contracting_dims=(contract,), rhs_contracting_dims=(nb,))
    if reader == "root":
        out = d
    elif reader == "negate":
        out = b.op("tuple", b.op("negate", d), d)
    else:
        out = b.op("reshape", d, shape=Shape("f64", tuple(n for n in d.shape.dims if n != 1)))
    rng = np.random.default_rng(2)
    return Module("f", b.build(out)), [rng.standard_normal(v_dims), rng.standard_normal((2,) * nb + (4, 3))]


@pytest.mark.parametrize("batch", [False, True])
@pytest.mark.parametrize("unit_at", [0, 1])
@pytest.mark.parametrize("reader", ["root", "negate", "reshape"])
def test_unit_free_dims_leave_the_dot_and_results_agree_with_the_evaluator(batch, unit_at, reader):
    module, args = _unit_dims_module(batch, unit_at, reader)
    want = flatten(evaluate(module, args))
    optimized = optimize(module).module
    got = flatten(evaluate(optimized, args))
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-12)
    dots = _dots(optimized)
    assert len(dots) == 1 and 1 not in dots[0].shape.dims
    assert not _adds_unit_free_dims(dots[0], 0)
    assert optimized.entry.root.shape == module.entry.root.shape


INNER = {
    "dot": (lambda a, b: np.dot(a, b), [(9,), (9,)], np.float64),
    "masked_prefix": (lambda a, b, i: a[:i] @ b[:i], None, np.float64),
    "int32": (lambda a, b: a @ b, [(11,), (11,)], np.int32),
    "row_times_column": (lambda A, x: A[2] @ (x * 2.0), [(4, 6), (6,)], np.float32),
}


@pytest.mark.parametrize("name", sorted(INNER))
def test_inner_products_become_fused_reductions(name):
    """A vector-vector dot is a reduction of a product: no dot is left, and it agrees."""
    fn, shapes, dtype = INNER[name]
    rng = np.random.default_rng(2)
    if shapes is None:            # a loop over i: a[:i] is masked to full length
        def fn(a, b):
            out = np.zeros(a.shape[0])
            for i in range(a.shape[0]):
                out[i] = a[:i] @ b[:i]
            return out
        shapes = [(12,), (12,)]
    args = [(rng.standard_normal(s) * 10).astype(dtype) for s in shapes]
    f = nbxla.jit(fn)
    got = f(*args)
    want = fn(*args)
    assert np.asarray(got).dtype == np.asarray(want).dtype
    np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == np.float32 else 1e-12)
    assert not _dots(f.last_compilation.optimized), f.last_compilation.stage("optimized_hlo")


@pytest.mark.parametrize("side", ["vecmat", "matvec"])
def test_a_scalar_factor_on_a_vector_operand_moves_after_the_gemv(side):
    """``(beta * y) @ A`` (gemver's ``beta * y @ A``): the vector operand is first reshaped to
    a matrix; once that reshape is gone the scale moves after the dot into its epilogue, so no
    kernel runs before the GEMV (the dead reshape no longer counts as a second reader)."""
    fn = (lambda A, y, z: 1.2 * y @ A + z) if side == "vecmat" else (lambda A, y, z: A @ (1.2 * y) + z)
    rng = np.random.default_rng(3)
    A, y, z = rng.standard_normal((6, 6)), rng.standard_normal(6), rng.standard_normal(6)
    f = nbxla.jit(fn)
    np.testing.assert_allclose(f(A, y, z), fn(A, y, z), rtol=1e-12, atol=1e-12)
    entry = f.last_compilation.optimized.entry
    dot = next(i for i in entry.instructions if i.opcode == "dot")
    assert all(o.opcode == "parameter" for o in dot.operands), f.last_compilation.stage("optimized_hlo")
    assert sum(i.opcode == "fusion" for i in entry.instructions) == 1
