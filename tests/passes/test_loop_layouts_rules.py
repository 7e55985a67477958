"""The pieces loop-major loop state relies on, each on its own (passes/loop_layouts.py,
simplify.py's slice rules, fusion's refusal of a minor-dim transpose into an update):
the values they keep, checked with the reference evaluator, and both sides of each condition."""

from __future__ import annotations

import numpy as np

from nbxla.hlo import Builder, Module, Shape
from nbxla.hlo.attributes import SliceDim
from nbxla.hlo.evaluator import evaluate
from nbxla.passes import AlgebraicSimplifier, DeadCodeElimination, Fusion, Pipeline
from nbxla.passes.loop_layouts import trip_count

from tests.frontend.test_loop_layouts import _compiled

RNG = np.random.default_rng(3032)


def _simplified(build, shape=(4, 5, 6)):
    b = Builder("s")
    x = b.parameter(Shape("f64", shape), "x")
    module = Module("s", b.build(build(b, x)))
    arg = RNG.random(shape)
    want = evaluate(module, [arg])
    result = Pipeline([AlgebraicSimplifier(), DeadCodeElimination()]).run(module)
    np.testing.assert_array_equal(np.asarray(evaluate(result.module, [arg])), np.asarray(want))
    return result.module.entry


def _update_at(b, x, position):
    upd = b.op("negate", b.op("slice", x, slice=(SliceDim(0, 4), SliceDim(0, 5), SliceDim(0, 1))))
    zero, at = b.constant(0, "s64"), b.constant(position, "s64")
    return b.op("dynamic-update-slice", x, upd, zero, zero, at), upd


def test_a_slice_of_an_update_at_its_window_is_the_update():
    def build(b, x):
        updated, _ = _update_at(b, x, 3)
        return b.op("slice", updated, slice=(SliceDim(0, 4), SliceDim(0, 5), SliceDim(3, 4)))
    entry = _simplified(build)
    assert all(i.opcode != "dynamic-update-slice" for i in entry.instructions)


def test_a_slice_beside_the_update_reads_the_array_under_it():
    def build(b, x):
        updated, _ = _update_at(b, x, 3)
        return b.op("slice", updated, slice=(SliceDim(0, 4), SliceDim(0, 5), SliceDim(4, 6)))
    entry = _simplified(build)
    assert all(i.opcode != "dynamic-update-slice" for i in entry.instructions)


def test_a_slice_overlapping_the_update_keeps_it():
    def build(b, x):
        updated, _ = _update_at(b, x, 3)
        return b.op("slice", updated, slice=(SliceDim(0, 4), SliceDim(0, 5), SliceDim(2, 4)))
    entry = _simplified(build)
    assert any(i.opcode == "dynamic-update-slice" for i in entry.instructions)


def test_a_slice_goes_through_a_transpose_only_where_it_is_as_contiguous():
    # x: (4, 5, 6); t = transpose to (6, 4, 5).  One position of t's first dim is contiguous in
    # t and strided in x: the slice stays on t.  One position of t's last dim (x's dim 1) is
    # strided in both; in x the runs are 6 long, in t 1: it reads x.
    def on_transpose(window):
        def build(b, x):
            t = b.op("transpose", x, dimensions=(2, 0, 1))
            return b.op("slice", t, slice=window)
        return build
    entry = _simplified(on_transpose((SliceDim(2, 3), SliceDim(0, 4), SliceDim(0, 5))))
    assert entry.root.opcode == "slice" and entry.root.operands[0].opcode == "transpose"
    entry = _simplified(on_transpose((SliceDim(0, 6), SliceDim(0, 4), SliceDim(1, 2))))
    assert entry.root.opcode == "transpose" and entry.root.operands[0].opcode == "slice"


def down_counting(x):
    for k in range(x.shape[1] - 2, -1, -1):
        x[:, k] = x[:, k] - 0.5 * x[:, k + 1]
    return x


def up_by_two(x):
    for k in range(1, x.shape[1], 2):
        x[:, k] = x[:, k] + x[:, k - 1]
    return x


def test_trip_counts_of_rolled_loops():
    for fn, n, want in [(down_counting, 30, 29), (up_by_two, 30, 15), (up_by_two, 31, 15)]:
        x = RNG.random((20, n))
        compilation = _compiled(fn, x, rtol=1e-10)
        loops = [i for i in compilation.hlo.instructions() if i.opcode == "while"]
        assert [trip_count(loop) for loop in loops] == [want], fn.__name__


def _update_of_transpose(perm, shape):
    b = Builder("f")
    x = b.parameter(Shape("f64", shape), "x")
    t = b.op("transpose", x, dimensions=perm)
    dims = t.shape.dims
    upd = b.op("negate", b.op("slice", t, slice=tuple(SliceDim(0, 1 if d == 0 else n) for d, n in enumerate(dims))))
    zero = b.constant(0, "s64")
    root = b.op("dynamic-update-slice", t, upd, *[zero] * len(dims))
    module = Module("f", b.build(root))
    arg = RNG.random(shape)
    want = evaluate(module, [arg])
    result = Pipeline([Fusion(), DeadCodeElimination()]).run(module)
    np.testing.assert_array_equal(np.asarray(evaluate(result.module, [arg])), np.asarray(want))
    fusions = [i for i in result.module.entry.instructions if i.opcode == "fusion"]
    return fusions


def test_a_transpose_of_the_minor_dim_is_not_fused_into_an_update():
    fusions = _update_of_transpose((2, 0, 1), (8, 9, 10))
    assert len(fusions) == 2          # the tiled transpose, then the update of its window
    # moving only a dim of one element is a reshape: it fuses
    fusions = _update_of_transpose((1, 0, 2), (1, 9, 10))
    assert len(fusions) == 1


def _dynamic_update(b, x, upd, index):
    zero = b.constant(0, "s64")
    return b.op("dynamic-update-slice", x, upd, zero, zero, index)


def _window(b, x, index):
    zero = b.constant(0, "s64")
    return b.op("dynamic-slice", x, zero, zero, index, dynamic_slice_sizes=(4, 5, 1))


def _simplified_at(build, shape=(4, 5, 6)):
    """As ``_simplified``, with a second parameter: an s64 index (evaluated at 2 and at 9, a
    start the update clamps)."""
    b = Builder("s")
    x = b.parameter(Shape("f64", shape), "x")
    i = b.parameter(Shape("s64", ()), "i")
    module = Module("s", b.build(build(b, x, i)))
    arg = RNG.random(shape)
    wants = [evaluate(module, [arg, np.int64(k)]) for k in (2, 9)]
    result = Pipeline([AlgebraicSimplifier(), DeadCodeElimination()]).run(module)
    for k, want in zip((2, 9), wants):
        np.testing.assert_array_equal(np.asarray(evaluate(result.module, [arg, np.int64(k)])), np.asarray(want))
    return result.module.entry


def test_windows_at_other_starts_keep_both_updates():
    def build(b, x, i):
        first = b.op("negate", _window(b, x, i))
        once = _dynamic_update(b, x, first, i)
        j = b.op("add", i, b.constant(1, "s64"))
        return _dynamic_update(b, once, b.op("negate", _window(b, once, j)), j)
    entry = _simplified_at(build)
    assert sum(op.opcode == "dynamic-update-slice" for op in entry.instructions) == 2
