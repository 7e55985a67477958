"""Dead loop state (passes/while_state.py): state elements nothing needs leave the ``while``.

Oracles: the reference evaluator on the module before and after the pass (the loops below run
a few steps), eager NumPy for traced programs.  The structural assertions say which elements
must stay: those read after the loop, by the condition, or needed for a live element.
"""

from __future__ import annotations

import numpy as np
import pytest

import nbxla
from nbxla.hlo.evaluator import evaluate, flatten
from nbxla.hlo.ir import clone_module
from nbxla.hlo.parser import parse_hlo
from nbxla.passes import WhileStateElimination, optimize
from nbxla.runtime.cache import CompilationCache
from tests.frontend_util import use_flags


@pytest.fixture(autouse=True)
def _loops_stay_loops(monkeypatch):
    """These programs' loops are short on purpose: here they must stay HLO whiles (what runs
    them is the subject), not be unrolled by the cost rule."""
    use_flags(monkeypatch, "--unroll_budget=0")

# State: (i, x, junk, feeds, tested, side).  After the loop only x is read; x needs feeds; the
# condition reads tested (and i); junk and side are written and never needed.
LOOP = """HloModule dead_state

body {
  p = (s32[], f32[6], f32[6], f32[6], f32[], f32[6]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[6] get-tuple-element(p), index=1
  junk = f32[6] get-tuple-element(p), index=2
  feeds = f32[6] get-tuple-element(p), index=3
  tested = f32[] get-tuple-element(p), index=4
  side = f32[6] get-tuple-element(p), index=5
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  x1 = f32[6] add(x, feeds)
  junk1 = f32[6] multiply(junk, x)
  feeds1 = f32[6] sine(feeds)
  half = f32[] constant(0.5)
  tested1 = f32[] multiply(tested, half)
  side1 = f32[6] add(side, junk)
  ROOT next = (s32[], f32[6], f32[6], f32[6], f32[], f32[6]) tuple(i1, x1, junk1, feeds1, tested1, side1)
}

cond {
  p = (s32[], f32[6], f32[6], f32[6], f32[], f32[6]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  tested = f32[] get-tuple-element(p), index=4
  n = s32[] constant(5)
  lt = pred[] compare(i, n), direction=LT
  tiny = f32[] constant(0.01)
  big = pred[] compare(tested, tiny), direction=GT
  ROOT go = pred[] and(lt, big)
}

ENTRY main {
  x = f32[6] parameter(0)
  y = f32[6] parameter(1)
  zero = s32[] constant(0)
  one = f32[] constant(1)
  init = (s32[], f32[6], f32[6], f32[6], f32[], f32[6]) tuple(zero, x, y, y, one, x)
  w = (s32[], f32[6], f32[6], f32[6], f32[], f32[6]) while(init), condition=cond, body=body
  unused = f32[6] get-tuple-element(w), index=2
  ROOT out = f32[6] get-tuple-element(w), index=1
}
"""


def _loops(module):
    return [i for c in module.computations for i in c.instructions if i.opcode == "while"]


def _inputs():
    rng = np.random.default_rng(3)
    return [rng.standard_normal(6).astype(np.float32), rng.standard_normal(6).astype(np.float32)]


def test_dead_elements_leave_and_results_agree_with_the_evaluator():
    module = parse_hlo(LOOP)
    want = flatten(evaluate(module, _inputs()))
    shrunk = clone_module(module)
    assert WhileStateElimination().run(shrunk)
    (loop,) = _loops(shrunk)
    # i, x, feeds, tested stay (read after, needed by x, read by the condition); junk, side go.
    assert [s.dims for s in loop.shape.elements] == [(), (6,), (6,), ()]
    body = loop.attrs["body"]
    assert not any(i.opcode in ("multiply",) and i.shape.rank == 1 for i in body.instructions)
    got = flatten(evaluate(shrunk, _inputs()))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    assert not WhileStateElimination().run(shrunk)      # nothing more to drop


@pytest.mark.parametrize("root", ["w", "tuple(get-tuple-element(w), index=2)"], ids=["whole", "junk-read"])
def test_a_loop_read_whole_or_through_every_element_keeps_its_state(root):
    text = LOOP
    if root == "w":
        text = text.replace("ROOT out = f32[6] get-tuple-element(w), index=1",
                            "ROOT out = (s32[], f32[6], f32[6], f32[6], f32[], f32[6]) copy(w)")
    else:                # junk read after the loop: junk stays, side still goes
        text = text.replace("ROOT out = f32[6] get-tuple-element(w), index=1",
                            "x_out = f32[6] get-tuple-element(w), index=1\n"
                            "  ROOT out = f32[6] add(x_out, unused)")
    module = parse_hlo(text)
    want = flatten(evaluate(module, _inputs()))
    changed = WhileStateElimination().run(module)
    (loop,) = _loops(module)
    assert len(loop.shape.elements) == (6 if root == "w" else 5) and changed == (root != "w")
    for g, w in zip(flatten(evaluate(module, _inputs())), want):
        np.testing.assert_array_equal(g, w)


def test_the_optimized_module_agrees_with_the_evaluator():
    module = parse_hlo(LOOP)
    optimized = optimize(module).module
    (loop,) = _loops(optimized)
    assert len(loop.shape.elements) == 4
    np.testing.assert_array_equal(flatten(evaluate(optimized, _inputs()))[0], flatten(evaluate(module, _inputs()))[0])


def stencil_steps(A, B):
    """A time loop whose temporary ``value`` and alias ``src`` become loop state when the loop
    is rolled: neither is read after the loop."""
    for _ in range(8):
        for src, which in ((A, 0), (B, 1)):
            value = 0.25 * (src[2:, 1:-1] + src[:-2, 1:-1] + src[1:-1, 2:] + src[1:-1, :-2])
            if which == 0:
                B[1:-1, 1:-1] = value
            else:
                A[1:-1, 1:-1] = value
    return A, B


def test_a_rolled_time_loop_carries_only_its_arrays_and_agrees_with_numpy():
    rng = np.random.default_rng(5)
    A, B = rng.random((12, 11)), rng.random((12, 11))
    want = stencil_steps(A.copy(), B.copy())
    f = nbxla.jit(stencil_steps, cache=CompilationCache())
    got = f(A.copy(), B.copy())
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-13)
    comp = f.last_compilation
    (traced,) = _loops(comp.hlo)
    (loop,) = _loops(comp.optimized)
    assert len(traced.shape.elements) > 3 and len(loop.shape.elements) == 3     # counter, A, B


def test_two_loops_one_started_from_a_tuple_parameter():
    """The first loop's initial state is a parameter (not a ``tuple`` instruction): its kept
    elements are read out of it; the second loop starts from the first one's result."""
    text = LOOP[:LOOP.index("ENTRY main {")] + """body2 {
  p = (s32[], f32[6], f32[6]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[6] get-tuple-element(p), index=1
  d = f32[6] get-tuple-element(p), index=2
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  x1 = f32[6] add(x, x)
  d1 = f32[6] cosine(d)
  ROOT next = (s32[], f32[6], f32[6]) tuple(i1, x1, d1)
}

cond2 {
  p = (s32[], f32[6], f32[6]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}

ENTRY main {
  s = (s32[], f32[6], f32[6], f32[6], f32[], f32[6]) parameter(0)
  w = (s32[], f32[6], f32[6], f32[6], f32[], f32[6]) while(s), condition=cond, body=body
  zero = s32[] constant(0)
  x = f32[6] get-tuple-element(w), index=1
  side = f32[6] get-tuple-element(w), index=5
  init2 = (s32[], f32[6], f32[6]) tuple(zero, x, side)
  w2 = (s32[], f32[6], f32[6]) while(init2), condition=cond2, body=body2
  ROOT out = f32[6] get-tuple-element(w2), index=1
}"""
    module = parse_hlo(text)
    x, y = _inputs()
    state = (np.int32(0), x, y, y, np.float32(1), x)
    want = flatten(evaluate(module, [state]))
    shrunk = clone_module(module)
    assert WhileStateElimination().run(shrunk)
    first, second = sorted(_loops(shrunk), key=lambda w: len(w.shape.elements), reverse=True)
    assert len(first.shape.elements) == 4 and len(second.shape.elements) == 2
    for g, w in zip(flatten(evaluate(shrunk, [state])), want):
        np.testing.assert_array_equal(g, w)
