"""Fusion on large modules: kernel counts and bounded recomputation, asserted on the optimized
HLO (never timings), and random large stencil-and-formula graphs checked against the evaluator.

The recompute property is measured here independently of the fusion pass's own bookkeeping:
every fused computation is walked from its root, carrying the offset (per dim) at which each
value is read -- slices shift it, elementwise ops and a ``dynamic-update-slice``'s base keep it
-- and the distinct offsets at which a parameter is reached are the times the kernel reads each
of its elements.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nbxla.compiler import compile_module
from nbxla.hlo import Builder, Module, Shape
from nbxla.hlo.attributes import SliceDim
from nbxla.hlo.evaluator import evaluate, flatten
from nbxla.passes import optimize
from nbxla.passes.fusion import MAX_MAPS, MAX_MEMBERS, fusion_targets
from nbxla.testing import compare_arrays

F64 = "f64"


def _offsets(body, root_offset):
    """{parameter number: set of offsets it is read at} for a fused computation built from
    elementwise ops, broadcasts of scalars, slices and dynamic-update-slices with constant
    starts; None when it holds anything else (the caller then skips the check)."""
    reads: dict[int, set] = {}
    stack = [(body.root, root_offset)]
    seen = set()
    while stack:
        instr, off = stack.pop()
        if (id(instr), off) in seen:
            continue
        seen.add((id(instr), off))
        op = instr.opcode
        if op == "parameter":
            reads.setdefault(instr.parameter_number, set()).add(off)
        elif op in ("constant",) or (op == "broadcast" and instr.operands[0].shape.rank == 0):
            continue
        elif op == "tuple":
            stack += [(o, off) for o in instr.operands]
        elif op == "slice":
            shifted = tuple(o + s.start for o, s in zip(off, instr.attrs["slice"]))
            stack.append((instr.operands[0], shifted))
        elif op == "dynamic-update-slice":
            starts = tuple(int(i.literal) for i in instr.operands[2:])
            stack.append((instr.operands[0], off))
            stack.append((instr.operands[1], tuple(o - s for o, s in zip(off, starts))))
        elif instr.is_elementwise:
            stack += [(o, off) for o in instr.operands if o.shape.rank > 0]
        else:
            return None
    return reads


def _reads_per_element(module):
    """Most times any kernel of ``module`` reads one element of one of its inputs."""
    worst = 0
    for comp in fusion_targets(module):
        for instr in comp.instructions:
            if instr.opcode != "fusion":
                continue
            body = instr.attrs["calls"]
            rank = body.root.shape.elements[0].rank if body.root.shape.is_tuple else body.root.shape.rank
            reads = _offsets(body, (0,) * rank)
            assert reads is not None, f"unexpected op in %{body.name}"
            worst = max([worst] + [len(v) for v in reads.values()])
    return worst


def jacobi_module(steps: int, n: int) -> Module:
    """2-D Jacobi as tracing an in-place NumPy loop gives it: per step, two interior updates."""
    b = Builder("jacobi")
    A = b.parameter(Shape(F64, (n, n)), "A")
    B = b.parameter(Shape(F64, (n, n)), "B")
    one = b.constant(1, "s64")
    fifth = b.broadcast(b.constant(0.2, F64), (n - 2, n - 2))

    def stencil(x):
        parts = [b.op("slice", x, slice=(SliceDim(1 + di, n - 1 + di), SliceDim(1 + dj, n - 1 + dj)))
                 for di, dj in ((0, 0), (0, -1), (0, 1), (1, 0), (-1, 0))]
        total = parts[0]
        for p in parts[1:]:
            total = b.op("add", total, p)
        return b.op("multiply", fifth, total)

    for _ in range(steps):
        B = b.op("dynamic-update-slice", B, stencil(A), one, one)
        A = b.op("dynamic-update-slice", A, stencil(B), one, one)
    return Module("jacobi", b.build(b.op("tuple", A, B)))


def _evaluate(module, args):
    return flatten(evaluate(module, args))


def test_a_100_step_stencil_becomes_a_few_kernels_per_step_each_reading_inputs_boundedly():
    steps, n = 100, 12
    module = jacobi_module(steps, n)
    result = optimize(module)
    fusions = [i for i in result.module.entry.instructions if i.opcode == "fusion"]
    # One kernel per update (2 per step), never the whole cone in one kernel.
    assert steps <= len(fusions) <= 2 * steps + 2
    assert max(len(f.attrs["calls"].instructions) for f in fusions) < 40
    # Each kernel reads an input element at most the stencil's width (5 points) times.
    assert _reads_per_element(result.module) <= 5
    rng = np.random.default_rng(0)
    args = [rng.uniform(size=(n, n)), rng.uniform(size=(n, n))]
    for got, want in zip(_evaluate(result.module, args), _evaluate(module, args)):
        ok, detail = compare_arrays(got, want)
        assert ok, detail


def test_the_stencil_compiles_without_interpretation_and_shares_one_kernel_per_update():
    module = jacobi_module(30, 10)
    comp = compile_module(module, "cpu")
    native = comp.executable.native
    assert native.interpreted == {} and native.interpreted_ops == {}
    # The updates of every step are the same code (B from A, A from B): compiled once per way
    # they run -- the first step's two, of the parameters, by the elemental kernel (a copy of
    # nearly all of A first would cost more); every later one in its operand's buffer, writing
    # only the window (runtime/window_updates.py).
    styles = sorted(spec.style for spec in native.kernels.specs.values())
    assert styles == ["in-place", "rows"], styles
    uses = sorted(list(native.kernel_symbols.values()).count(s) for s in native.kernels.specs)
    assert uses == [2, 58], uses
    rng = np.random.default_rng(1)
    args = [rng.uniform(size=(10, 10)), rng.uniform(size=(10, 10))]
    for got, want in zip(comp.executable.run(args), _evaluate(module, args)):
        ok, detail = compare_arrays(got, want)
        assert ok, detail


def chain_of_functional_stencils(steps: int, n: int) -> Module:
    """u <- u + 0.1 * (shift_left(u) + shift_right(u) - 2u), shifts by slice + concatenate:
    no updates at all, so only the cost model keeps fusion from taking the whole cone."""
    b = Builder("chain")
    u = b.parameter(Shape(F64, (n,)), "u")
    c = b.broadcast(b.constant(0.1, F64), (n,))
    two = b.broadcast(b.constant(2.0, F64), (n,))
    for _ in range(steps):
        left = b.op("concatenate", b.op("slice", u, slice=(SliceDim(1, n),)),
                    b.op("slice", u, slice=(SliceDim(0, 1),)), dimensions=(0,))
        right = b.op("concatenate", b.op("slice", u, slice=(SliceDim(n - 1, n),)),
                     b.op("slice", u, slice=(SliceDim(0, n - 1),)), dimensions=(0,))
        lap = b.op("subtract", b.op("add", left, right), b.op("multiply", two, u))
        u = b.op("add", u, b.op("multiply", c, lap))
    return Module("chain", b.build(u))


def test_recomputation_is_bounded_along_a_chain_without_updates():
    module = chain_of_functional_stencils(40, 16)
    result = optimize(module)
    fusions = [i for i in result.module.entry.instructions if i.opcode == "fusion"]
    assert len(fusions) >= 40 // 2               # a step or so per kernel, not one kernel
    for f in fusions:
        body = f.attrs["calls"]
        assert len(body.instructions) <= MAX_MEMBERS
    args = [np.random.default_rng(2).uniform(size=16)]
    ok, detail = compare_arrays(_evaluate(result.module, args)[0], _evaluate(module, args)[0])
    assert ok, detail


def wide_formula(terms: int, n: int) -> Module:
    """A wide elementwise DAG with many shared temporaries and several outputs (an equation
    of state's shape): every temporary feeds several later ones."""
    b = Builder("wide")
    xs = [b.parameter(Shape(F64, (n, n, 4)), f"x{k}") for k in range(3)]
    pool = list(xs)
    pool.append(b.op("sqrt", b.op("add", b.op("multiply", xs[0], xs[0]), b.broadcast(b.constant(1.0, F64), (n, n, 4)))))
    rng = np.random.default_rng(3)
    for k in range(terms):
        a, c = pool[rng.integers(len(pool))], pool[-1 - rng.integers(min(len(pool), 6))]
        op = ("add", "multiply", "subtract", "maximum")[k % 4]
        pool.append(b.op(op, a, c))
    outs = [b.op("divide", pool[-1], pool[3]), b.op("multiply", pool[-2], pool[-3]), pool[-4]]
    return Module("wide", b.build(b.op("tuple", *outs)))


def test_a_wide_formula_with_many_temporaries_is_one_kernel():
    module = wide_formula(600, 6)
    result = optimize(module)
    report = result.facts["fusion"]
    assert report.kernels_after == 1, [r.reason for r in report.refusals][:3]
    rng = np.random.default_rng(4)
    args = [rng.uniform(0.5, 1.0, size=(6, 6, 4)) for _ in range(3)]
    for got, want in zip(_evaluate(result.module, args), _evaluate(module, args)):
        ok, detail = compare_arrays(got, want)
        assert ok, detail


def test_every_kernel_boundary_says_why():
    result = optimize(jacobi_module(3, 8))
    report = result.facts["fusion"]
    assert report.boundaries
    fusions = {i.name for i in result.module.entry.instructions if i.opcode == "fusion"}
    for boundary in report.boundaries:
        assert boundary.producer in fusions and boundary.consumer in fusions and boundary.reason


def unrolled_cholesky(n: int) -> Module:
    """Cholesky as tracing the Python-unrolled loop gives it: per element, slices of the
    current matrix, a dot of two row pieces, and a one-element ``dynamic-update-slice``
    (n = 40: 820 updates, ~8000 instructions of mixed shapes)."""
    b = Builder("cholesky")
    A = b.parameter(Shape(F64, (n, n)), "A")

    def at(x, i, j, rows=1, cols=1):
        return b.op("slice", x, slice=(SliceDim(i, i + rows), SliceDim(j, j + cols)))

    def index(k):
        return b.constant(k, "s64")

    def row_dot(x, i, j, width):
        u = b.reshape(at(x, i, 0, cols=width), (width,))
        v = b.reshape(at(x, j, 0, cols=width), (width,))
        d = b.op("dot", u, v, lhs_contracting_dims=(0,), rhs_contracting_dims=(0,))
        return b.reshape(d, (1, 1))

    for i in range(n):
        for j in range(i):
            value = at(A, i, j)
            if j:
                value = b.op("subtract", value, row_dot(A, i, j, j))
            A = b.op("dynamic-update-slice", A, b.op("divide", value, at(A, j, j)), index(i), index(j))
        value = at(A, i, i)
        if i:
            value = b.op("subtract", value, row_dot(A, i, i, i))
        A = b.op("dynamic-update-slice", A, b.op("sqrt", value), index(i), index(i))
    return Module("cholesky", b.build(A))


def test_an_unrolled_cholesky_fuses_each_update_apart_and_agrees():
    """A large module of many small updates (the shape that made the legality checks
    quadratic): each update is its own small kernel (its row's inner product, a dot rewritten
    as a reduction, fused into it), and the result is the evaluator's and NumPy's Cholesky
    factor."""
    n = 40
    module = unrolled_cholesky(n)
    updates = n * (n + 1) // 2
    assert len(module.entry.instructions) > 7000
    result = optimize(module)
    entry = result.module.entry
    fusions = [i for i in entry.instructions if i.opcode == "fusion"]
    assert updates <= len(fusions) <= 2 * updates
    for f in fusions:
        body = f.attrs["calls"].instructions
        assert sum(i.opcode == "dynamic-update-slice" for i in body) <= 1
        assert len(body) < 40
    assert not any(i.opcode == "dot" for i in entry.instructions)
    reducing = [f for f in fusions if any(i.opcode == "reduce" for i in f.attrs["calls"].instructions)]
    assert len(reducing) == updates - n                                         # (none for the first column)
    rng = np.random.default_rng(5)
    m = rng.uniform(size=(n, n))
    a = m @ m.T + n * np.eye(n)
    got = _evaluate(result.module, [a])[0]
    ok, detail = compare_arrays(got, _evaluate(module, [a])[0])
    assert ok, detail
    np.testing.assert_allclose(np.tril(got), np.linalg.cholesky(a), rtol=1e-10, atol=1e-12)


# ---- random large graphs against the evaluator ---------------------------------------------

@st.composite
def stencil_graphs(draw, max_steps: int = 120):
    """(module, args): random long programs over same-shaped 2-D arrays mixing elementwise
    formulas, shifted reads, interior updates and reductions-free multi-output roots."""
    n = draw(st.integers(4, 9))
    b = Builder("random_stencil")
    pool = [b.parameter(Shape(F64, (n, n)), f"p{k}") for k in range(draw(st.integers(1, 3)))]
    one = b.constant(1, "s64")
    inner = (n - 2, n - 2)
    for _ in range(draw(st.integers(10, max_steps))):
        kind = draw(st.sampled_from(("binary", "binary", "unary", "shift", "update", "update")))
        x = pool[draw(st.integers(0, len(pool) - 1))]
        y = pool[max(0, len(pool) - 1 - draw(st.integers(0, 4)))]
        if kind == "binary":
            pool.append(b.op(draw(st.sampled_from(("add", "subtract", "multiply", "maximum"))), x, y))
        elif kind == "unary":
            pool.append(b.op(draw(st.sampled_from(("tanh", "negate", "abs", "exponential"))), x))
        elif kind == "shift":            # an interior stencil read, padded back by an update
            di, dj = draw(st.integers(-1, 1)), draw(st.integers(-1, 1))
            s = b.op("slice", x, slice=(SliceDim(1 + di, n - 1 + di), SliceDim(1 + dj, n - 1 + dj)))
            pool.append(b.op("dynamic-update-slice", y, s, one, one))
        else:
            parts = [b.op("slice", x, slice=(SliceDim(1 + di, n - 1 + di), SliceDim(1 + dj, n - 1 + dj)))
                     for di, dj in ((0, 0), (0, -1), (0, 1), (1, 0), (-1, 0))]
            total = parts[0]
            for p in parts[1:]:
                total = b.op("add", total, p)
            total = b.op("multiply", b.broadcast(b.constant(0.2, F64), inner), total)
            pool.append(b.op("dynamic-update-slice", y, total, one, one))
    outs = [pool[-1]] + [pool[draw(st.integers(0, len(pool) - 1))] for _ in range(draw(st.integers(0, 2)))]
    outs = list(dict.fromkeys(outs))
    root = outs[0] if len(outs) == 1 else b.op("tuple", *outs)
    if root.opcode == "parameter":
        root = b.op("copy", root)
    module = Module("random_stencil", b.build(root))
    module.make_names_unique()
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    args = [rng.uniform(-1, 1, size=(n, n)) for _ in range(sum(1 for i in module.entry.instructions
                                                                   if i.opcode == "parameter"))]
    return module, args


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=stencil_graphs())
def test_large_random_stencil_graphs_agree_with_the_evaluator_and_stay_bounded(case):
    module, args = case
    result = optimize(module)
    for got, want in zip(_evaluate(result.module, args), _evaluate(module, args)):
        ok, detail = compare_arrays(got, want)
        assert ok, detail
    assert _reads_per_element(result.module) <= MAX_MAPS



def test_the_spanning_index_answers_as_asking_every_group():
    """Fusion's O(log n) "does any group span this position" against the direct question,
    over growing spans at half positions, past the size it was made for too."""
    from nbxla.passes.fusion_model import Spans as _Spans
    rng = np.random.default_rng(6)
    spans, groups = _Spans(20), []
    for _ in range(400):
        if not groups or rng.random() < 0.3:
            q = rng.integers(0, 60) / 2
            groups.append([q, q])
            spans.move(None, (q, q))
        else:
            g = groups[rng.integers(len(groups))]
            new = (min(g[0], rng.integers(0, 60) / 2), max(g[1], rng.integers(0, 60) / 2))
            spans.move(tuple(g), new)
            g[:] = new
        for q in np.arange(0, 31, 0.5):
            assert spans.spanned(q) == any(f <= q < last for f, last in groups)
