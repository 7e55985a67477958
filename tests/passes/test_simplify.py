"""The cleanup passes on their own: algebraic simplification, constant folding, CSE and DCE
(what each rewrites, what it must leave alone, and the values it keeps)."""

import numpy as np

from nbxla.frontend.trace import trace, tree_flatten
from nbxla.hlo import Builder, Module, Shape, scalar_computation
from nbxla.hlo.attributes import SliceDim
from nbxla.hlo.evaluator import evaluate
from nbxla.passes import (AlgebraicSimplifier, CommonSubexpressionElimination, ConstantFolding,
                          DeadCodeElimination, Pipeline, optimize)
from nbxla.passes.simplify import FOLD_LIMIT

f32 = np.float32


def traced(fn, *args):
    leaves, treedef = tree_flatten((args, {}))
    return trace(fn, leaves, treedef, name=fn.__name__).module


def entry_ops(module):
    return [i.opcode for i in module.entry.instructions if i.opcode != "parameter"]


def kernels(module):
    return [i for i in module.entry.instructions
            if i.opcode not in ("parameter", "constant", "tuple", "get-tuple-element", "bitcast")]


# ---- algebraic simplifier -------------------------------------------------------------------------

def simplified(build, passes=None):
    """Build ``root = build(b, x)`` on an f32[8] parameter, simplify, return the new root."""
    b = Builder("s")
    x = b.parameter(Shape("f32", (8,)), "x")
    root = build(b, x)
    module = Module("s", b.build(root))
    before = print_module_text(module)
    result = Pipeline(passes or [AlgebraicSimplifier(), DeadCodeElimination()]).run(module)
    arg = np.linspace(-3, 3, 8).astype(f32)
    arg[3] = -0.0
    want, got = evaluate(module, [arg]), evaluate(result.module, [arg])
    assert np.array_equal(np.asarray(got), np.asarray(want), equal_nan=True), before
    assert np.array_equal(np.signbit(np.asarray(got)), np.signbit(np.asarray(want)))
    return result.module.entry.root, result.module


def print_module_text(module):
    from nbxla.hlo.printer import print_module
    return print_module(module)


def splat(b, value, dims=(8,), t="f32"):
    return b.broadcast(b.constant(value, t), dims)


def test_multiply_by_one_is_removed():
    root, _ = simplified(lambda b, x: b.op("negate", b.op("multiply", x, splat(b, 1.0))))
    assert root.opcode == "negate" and root.operands[0].opcode == "parameter"


def test_add_negative_zero_is_removed_but_positive_zero_is_kept():
    root, _ = simplified(lambda b, x: b.op("negate", b.op("add", x, splat(b, -0.0))))
    assert root.operands[0].opcode == "parameter"
    root, _ = simplified(lambda b, x: b.op("negate", b.op("add", x, splat(b, 0.0))))
    assert root.operands[0].opcode == "add"             # -0.0 + 0.0 is +0.0


def test_subtract_zero_is_removed():
    root, _ = simplified(lambda b, x: b.op("negate", b.op("subtract", x, splat(b, 0.0))))
    assert root.operands[0].opcode == "parameter"


def test_double_negation_is_removed():
    root, _ = simplified(lambda b, x: b.op("exponential", b.op("negate", b.op("negate", x))))
    assert root.opcode == "exponential" and root.operands[0].opcode == "parameter"


def test_square_becomes_a_multiply():
    root, _ = simplified(lambda b, x: b.op("power", x, splat(b, 2.0)))
    assert root.opcode == "multiply" and root.operands[0] is root.operands[1]
    assert root.operands[0].opcode == "parameter"


def test_division_by_a_power_of_two_becomes_a_multiply_but_not_by_three():
    root, _ = simplified(lambda b, x: b.op("divide", x, splat(b, 4.0)))
    assert root.opcode == "multiply"
    (c,) = [o for o in root.operands if o.opcode != "parameter"]
    while c.opcode == "broadcast":
        c = c.operands[0]
    assert c.opcode == "constant" and float(c.literal) == 0.25
    root, _ = simplified(lambda b, x: b.op("divide", x, splat(b, 3.0)))
    assert root.opcode == "divide"                       # 1/3 is inexact


def test_reshape_chains_collapse():
    root, _ = simplified(lambda b, x: b.op("negate", b.reshape(b.reshape(b.reshape(x, (2, 4)), (4, 2)), (8, 1))))
    r = root.operands[0]
    assert r.opcode == "reshape" and r.operands[0].opcode == "parameter"
    root, _ = simplified(lambda b, x: b.op("negate", b.reshape(b.reshape(x, (8, 1)), (8,))))
    assert root.operands[0].opcode == "parameter"         # keepdims and back: gone


def test_transpose_chains_collapse():
    def build(b, x):
        m = b.reshape(x, (2, 4))
        t = b.op("transpose", b.op("transpose", m, dimensions=(1, 0)), dimensions=(1, 0))
        return b.op("negate", t)
    root, _ = simplified(build)
    assert root.operands[0].opcode == "reshape"


def test_broadcast_chains_collapse():
    def build(b, x):
        inner = b.broadcast(x, (8, 3), (0,))
        return b.op("negate", b.broadcast(inner, (2, 8, 3), (1, 2)))
    root, _ = simplified(build)
    bc = root.operands[0]
    assert bc.opcode == "broadcast" and bc.operands[0].opcode == "parameter"
    assert bc.attrs["dimensions"] == (1,)


def test_convert_round_trip_through_a_wider_type_is_removed():
    root, _ = simplified(lambda b, x: b.op("negate", b.convert(b.convert(x, "f64"), "f32")))
    assert root.operands[0].opcode == "parameter"


def test_convert_round_trip_through_a_narrower_type_is_kept():
    b = Builder("s")
    x = b.parameter(Shape("f64", (4,)), "x")
    module = Module("s", b.build(b.op("negate", b.convert(b.convert(x, "f32"), "f64"))))
    result = Pipeline([AlgebraicSimplifier(), DeadCodeElimination()]).run(module)
    assert [i.opcode for i in result.module.entry.instructions].count("convert") == 2
    arg = np.array([1 / 3, 1e-300, 1e300, -2.5])
    np.testing.assert_array_equal(evaluate(result.module, [arg]), evaluate(module, [arg]))


def test_full_slice_is_removed():
    root, _ = simplified(lambda b, x: b.op("negate", b.op("slice", x, slice=(SliceDim(0, 8, 1),))))
    assert root.operands[0].opcode == "parameter"
    root, _ = simplified(lambda b, x: b.op("negate", b.op("slice", x, slice=(SliceDim(0, 8, 2),))))
    assert root.operands[0].opcode == "slice"


def test_select_with_a_constant_predicate_picks_a_branch():
    def build(b, x):
        pred = b.broadcast(b.constant(True, "pred"), (8,))
        return b.op("select", pred, b.op("negate", x), b.op("exponential", x))
    root, module = simplified(build)
    assert root.opcode == "negate"
    assert "exponential" not in entry_ops(module)


# ---- constant folding, CSE, DCE -------------------------------------------------------------------

def test_constant_folding_folds_small_expressions():
    root, module = simplified(lambda b, x: b.op("add", x, b.op("multiply", splat(b, 3.0), splat(b, 2.0))),
                              [ConstantFolding(), DeadCodeElimination()])
    (c,) = [o for o in root.operands if o.opcode != "parameter"]
    assert c.opcode == "constant" and np.all(c.literal == 6.0)
    assert "multiply" not in entry_ops(module)


def test_constant_folding_is_bounded_in_size():
    n = 2000
    assert n > FOLD_LIMIT
    b = Builder("big")
    x = b.parameter(Shape("f32", (n,)), "x")
    big = b.op("exponential", splat(b, 1.0, (n,)))
    module = Module("big", b.build(b.op("add", x, big)))
    result = optimize(module)
    for instr in result.module.instructions():
        assert not (instr.opcode == "constant" and instr.shape.size >= n), instr
    arg = np.ones(n, f32)
    np.testing.assert_array_equal(evaluate(result.module, [arg]), evaluate(module, [arg]))


def test_cse_merges_duplicates():
    b = Builder("cse")
    x = b.parameter(Shape("f32", (8,)), "x")
    e1, e2 = b.op("exponential", x), b.op("exponential", x)
    module = Module("cse", b.build(b.op("add", e1, e2)))
    result = Pipeline([CommonSubexpressionElimination(), DeadCodeElimination()]).run(module)
    assert entry_ops(result.module).count("exponential") == 1
    root = result.module.entry.root
    assert root.operands[0] is root.operands[1]


def test_cse_keeps_different_attributes_apart():
    b = Builder("cse")
    x = b.parameter(Shape("f32", (8,)), "x")
    lt, gt = b.compare(x, x, "LT"), b.compare(x, x, "GT")
    module = Module("cse", b.build(b.op("tuple", lt, gt)))
    result = Pipeline([CommonSubexpressionElimination()]).run(module)
    assert entry_ops(result.module).count("compare") == 2
    assert not result.history[0].changed


def test_dce_removes_dead_code_and_unused_computations():
    b = Builder("dce")
    x = b.parameter(Shape("f32", (8,)), "x")
    dead = b.reduce(x, b.constant(0.0, "f32"), (0,), scalar_computation("add", "f32", "dead_add"))
    b.op("negate", dead)
    module = Module("dce", b.build(b.op("exponential", x)))
    assert any(c.name == "dead_add" for c in module.computations)
    result = Pipeline([DeadCodeElimination()]).run(module)
    assert entry_ops(result.module) == ["exponential"]
    assert [c.name for c in result.module.computations] == [result.module.entry.name]


def test_the_same_update_written_twice_is_written_once():
    """``a[..., 0] += v`` traces to an update of an update with the sum reshaped twice (CSE has
    not merged the reshapes yet): the outer update changes nothing and goes.  An outer update
    with other values at the same place covers the inner one, which goes where nothing else
    reads it and stays where something does (one writer of the array either way); at another
    place both stay."""
    from nbxla.hlo import Module
    cases = [(True, True, False, 1), (False, True, False, 2), (True, False, False, 1), (True, False, True, 2)]
    for same_place, same_value, inner_read, kept in cases:
        b = Builder("main")
        x = b.parameter(Shape("f32", (4, 3)), "x")
        v = b.parameter(Shape("f32", (4,)), "v")
        w = b.op("add", v, v) if not same_value else v
        first = b.op("dynamic-update-slice", x, b.op("reshape", v, shape=Shape("f32", (4, 1))),
                     b.constant(0, "s64"), b.constant(1, "s64"))
        second = b.op("dynamic-update-slice", first, b.op("reshape", w, shape=Shape("f32", (4, 1))),
                      b.constant(0, "s64"), b.constant(1 if same_place else 2, "s64"))
        root = b.op("tuple", second, b.op("negate", first)) if inner_read else second
        module = Module("m", b.build(root))
        args = [np.arange(12, dtype=f32).reshape(4, 3), np.array([-1, -2, -3, -4], f32)]
        want = evaluate(module, args)
        module = Pipeline([AlgebraicSimplifier(), DeadCodeElimination()]).run(module).module
        assert entry_ops(module).count("dynamic-update-slice") == kept, (same_place, same_value, inner_read)
        if inner_read:      # (the second still updates the first: not two writers of x)
            assert module.entry.root.operands[0].operands[0].opcode == "dynamic-update-slice"
        for got, expected in zip(tree_flatten(evaluate(module, args))[0], tree_flatten(want)[0]):
            np.testing.assert_array_equal(got, expected)


def test_a_window_written_twice_at_dynamic_starts_is_written_once():
    """``c[i, j:j+3] = u; c[i, j:j+3] = c[i, j:j+3] ** 2`` at dynamic starts (clamped past both
    ends): the read-back gives ``u``, the first update is then read by nothing but the second,
    which writes over the array under it; at other starts or another size both stay."""
    for starts2, dims2, kept in ((("i", "j"), (1, 3), 1), (("j", "i"), (1, 3), 2), (("i", "j"), (1, 2), 2)):
        module, runs = _read_back((1, 3), ("i", "j"), (1, 3), ("i", "j"), second=(dims2, starts2))
        ops = _simplify_and_check(module, runs)
        assert ops.count("dynamic-update-slice") == kept, (starts2, dims2)


def _read_back(update_dims, update_starts, slice_sizes, slice_starts, shape=(4, 5), second=None):
    """``dynamic-slice(dynamic-update-slice(x, u, *update_starts), *slice_starts)`` on f64 ``x``
    of ``shape``, ``u`` of ``update_dims``; a start is an int (a constant) or a name (``"i"``,
    ``"j"``: s64 parameters).  ``second=(dims, starts)``: the root is instead a second update
    of the first, with the square of the read's leading ``dims`` at ``starts``.  Returns
    (module, args at starts inside and outside the array)."""
    b = Builder("main")
    x = b.parameter(Shape("f64", shape), "x")
    u = b.parameter(Shape("f64", update_dims), "u")
    index = {"i": b.parameter(Shape("s64", ()), "i"), "j": b.parameter(Shape("s64", ()), "j")}

    def start(s):
        return index[s] if isinstance(s, str) else b.constant(s, "s64")
    written = b.op("dynamic-update-slice", x, u, *[start(s) for s in update_starts])
    read = b.op("dynamic-slice", written, *[start(s) for s in slice_starts],
                dynamic_slice_sizes=tuple(slice_sizes))
    root = b.op("negate", read)
    if second is not None:
        dims, starts = second
        if dims != tuple(slice_sizes):
            read = b.op("slice", read, slice=tuple(SliceDim(0, n, 1) for n in dims))
        root = b.op("dynamic-update-slice", written, b.op("multiply", read, read), *[start(s) for s in starts])
    module = Module("m", b.build(root))
    rng = np.random.default_rng(1)
    xs, us = rng.random(shape), rng.random(update_dims)
    # (starts past either end: each op clamps its own window into the array)
    runs = [[xs, us, np.int64(i), np.int64(j)] for i, j in ((1, 1), (9, 2), (-4, 7), (3, 3))]
    return module, runs


def _simplify_and_check(module, runs):
    """Simplify + DCE; the reference evaluator gives the same values at every run's starts."""
    wants = [np.asarray(evaluate(module, args)) for args in runs]
    result = Pipeline([AlgebraicSimplifier(), DeadCodeElimination()]).run(module).module
    for args, want in zip(runs, wants):
        np.testing.assert_array_equal(np.asarray(evaluate(result, args)), want)
    return entry_ops(result)


def test_a_window_read_back_at_its_update_start_is_the_update():
    """The same sizes at the same starts place the same window however the starts clamp (both
    into [0, n - size] of one n): the read is the update's value, the update goes."""
    for starts in (("i", "j"), ("i", 2), (7, "j")):
        ops = _simplify_and_check(*_read_back((1, 3), starts, (1, 3), starts))
        assert "dynamic-update-slice" not in ops and "dynamic-slice" not in ops, starts


def test_a_window_read_back_elsewhere_or_at_another_size_reads_the_array():
    """A read of another size at the same starts clamps to another place near the end (a
    [1, 2] read at column 4 of 5 starts at 3, the [1, 3] update at 2), a read at other starts
    may miss the window, and a wider update (no axis of one position) is not read back:
    update and read stay, with the values the evaluator gave before."""
    cases = [((1, 3), ("i", "j"), (1, 2), ("i", "j")),          # another size
             ((1, 3), ("i", "j"), (1, 3), ("j", "i")),          # other starts
             ((1, 3), ("i", 1), (1, 3), ("i", 2)),              # other constant start
             ((2, 3), ("i", "j"), (2, 3), ("i", "j"))]          # no axis of one position
    for update_dims, update_starts, slice_sizes, slice_starts in cases:
        ops = _simplify_and_check(*_read_back(update_dims, update_starts, slice_sizes, slice_starts))
        assert "dynamic-update-slice" in ops and "dynamic-slice" in ops, (update_dims, slice_sizes, slice_starts)


def test_lu_rolled_trailing_update_keeps_its_values_through_the_read_back(monkeypatch):
    """LU's rolled trailing update (``tests/codegen/test_box_updates.rank1_apart``, the case
    whose NaN first took the read-back rule out: that NaN was codegen's, see
    ``tests/codegen/test_loop_alias_scopes``): the simplifier reads the pivot column back from
    its update, and the module gives the same values before and after the cleanup passes, at
    n=2 (the size that failed) and n=5."""
    import nbxla
    from tests.codegen.test_box_updates import _matrix, rank1_apart
    from tests.frontend_util import use_flags
    use_flags(monkeypatch, "--unroll_max=0")

    def read_backs(module):
        (loop,) = [i for i in module.entry.instructions if i.opcode == "while"]
        return sum(i.opcode == "dynamic-slice" and i.operands[0].opcode == "dynamic-update-slice"
                   for i in loop.attrs["body"].instructions)
    for n in (2, 5):
        A = _matrix(n)
        jitted = nbxla.jit(rank1_apart)
        jitted(A.copy())
        module = jitted.last_compilation.hlo              # (as traced, loop rolled)
        before = read_backs(module)
        want = np.asarray(evaluate(module, [A.copy()]))
        np.testing.assert_allclose(want, rank1_apart(A.copy()), rtol=1e-12)
        result = Pipeline([AlgebraicSimplifier(), CommonSubexpressionElimination(), DeadCodeElimination()]).run(module)
        assert read_backs(result.module) < before
        np.testing.assert_array_equal(np.asarray(evaluate(result.module, [A.copy()])), want)


def _loop_reading_beside(start: int, limit: int, offset: int, n: int = 6, second: bool = True) -> str:
    """``for k in range(start, limit): c[:, k] = u + k; r = c[:, k + offset]; c[:, k] = r *
    c[:, k]; u = r + 1`` as HLO (dynamic starts clamp, as XLA's do: no NumPy wrap-around);
    ``second=False``: without the second update of ``c[:, k]``."""
    step = f"add(k, d)" if offset >= 0 else f"subtract(k, d)"
    if second:
        update = """  back = f64[3,1] dynamic-slice(c1, zero, k), dynamic_slice_sizes={3,1}
  w2 = f64[3,1] multiply(r, back)
  c2 = f64[3,@N] dynamic-update-slice(c1, w2, zero, k)"""
    else:
        update = "  c2 = f64[3,@N] copy(c1)"
    return f"""
HloModule beside

cond {{
  s = (s64[], f64[3,@N], f64[3,1]) parameter(0)
  k = s64[] get-tuple-element(s), index=0
  limit = s64[] constant({limit})
  ROOT more = pred[] compare(k, limit), direction=LT
}}

body {{
  s = (s64[], f64[3,@N], f64[3,1]) parameter(0)
  k = s64[] get-tuple-element(s), index=0
  c = f64[3,@N] get-tuple-element(s), index=1
  u = f64[3,1] get-tuple-element(s), index=2
  zero = s64[] constant(0)
  one = s64[] constant(1)
  d = s64[] constant({abs(offset)})
  kf = f64[] convert(k)
  kb = f64[3,1] broadcast(kf), dimensions={{}}
  w = f64[3,1] add(u, kb)
  c1 = f64[3,@N] dynamic-update-slice(c, w, zero, k)
  at = s64[] {step}
  r = f64[3,1] dynamic-slice(c1, zero, at), dynamic_slice_sizes={{3,1}}
{update}
  fone = f64[] constant(1)
  ones = f64[3,1] broadcast(fone), dimensions={{}}
  u1 = f64[3,1] add(r, ones)
  k1 = s64[] add(k, one)
  ROOT next = (s64[], f64[3,@N], f64[3,1]) tuple(k1, c2, u1)
}}

ENTRY main {{
  c = f64[3,@N] parameter(0)
  u = f64[3,1] parameter(1)
  k0 = s64[] constant({start})
  init = (s64[], f64[3,@N], f64[3,1]) tuple(k0, c, u)
  loop = (s64[], f64[3,@N], f64[3,1]) while(init), condition=cond, body=body
  c_out = f64[3,@N] get-tuple-element(loop), index=1
  u_out = f64[3,1] get-tuple-element(loop), index=2
  ROOT out = (f64[3,@N], f64[3,1]) tuple(c_out, u_out)
}}
""".replace("@N", str(n))


def _body_after_simplify(text: str, args: list):
    """The loop body after simplify + DCE; the evaluator gives the same values before and after."""
    from nbxla.hlo.parser import parse_hlo
    module = parse_hlo(text)
    want = evaluate(module, args)
    result = Pipeline([AlgebraicSimplifier(), DeadCodeElimination()]).run(module).module
    for got, expected in zip(tree_flatten(evaluate(result, args))[0], tree_flatten(want)[0]):
        np.testing.assert_array_equal(got, expected)
    (loop,) = [i for i in result.entry.instructions if i.opcode == "while"]
    return loop.attrs["body"]


def test_a_window_read_beside_a_counted_loops_update_moves_under_it_with_the_merge():
    """``c[:, k + offset]`` read between two updates of ``c[:, k]`` in ``for k in range(start,
    limit)``: where k and k + offset stay inside the array at every step, the windows never
    meet, the read takes the array under the first update, the read-back of ``c[:, k]`` is
    the first update's value, and the second update writes over the loop's ``c`` alone (one
    update a step, in place).  Where an end clamps both to one window (k - 1 at k = 0, k + 1
    at k = n - 1), both updates stay and the read reads the first.  The evaluator gives the
    same values either way."""
    n = 6
    cases = [(1, n, -1, True), (0, n - 1, 1, True), (2, 4, 2, True), (2, 4, -2, True),
             (0, n, -1, False),         # k - 1 = -1 clamps to 0, k's own window at k = 0
             (0, n, 1, False)]          # k + 1 = n clamps to n - 1 at k = n - 1
    rng = np.random.default_rng(2)
    args = [rng.random((3, n)), rng.random((3, 1))]
    for start, limit, offset, apart in cases:
        body = _body_after_simplify(_loop_reading_beside(start, limit, offset, n), args)
        updates = [i for i in body.instructions if i.opcode == "dynamic-update-slice"]
        reads = [i for i in body.instructions if i.opcode == "dynamic-slice"]
        assert len(updates) == (1 if apart else 2), (start, limit, offset)
        if apart:
            assert updates[0].operands[0].opcode == "get-tuple-element"
            assert all(r.operands[0].opcode == "get-tuple-element" for r in reads)


def test_a_window_read_beside_a_single_update_stays_on_it():
    """Without a second update to merge with, a read beside the update keeps reading the
    update's result: moved under it alone, the read would be a second reader of the array the
    update overwrites, which fusion may place after the update (no in-place kernel then)."""
    n = 6
    rng = np.random.default_rng(2)
    args = [rng.random((3, n)), rng.random((3, 1))]
    body = _body_after_simplify(_loop_reading_beside(1, n, -1, n, second=False), args)
    (read,) = [i for i in body.instructions if i.opcode == "dynamic-slice"]
    assert read.operands[0].opcode == "dynamic-update-slice"
