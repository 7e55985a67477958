"""Fusion's legality check of a new member without reductions from the group's kept facts
(``fusion_model.INCREMENTAL_CHECKS``: each group's outputs by shape, kept up to date as members
join and copies are made) decides exactly as the full check over all members did."""

import re

import numpy as np

import pytest
from hypothesis import HealthCheck, given, settings

from nbxla.hlo import Builder, Module, Shape
from nbxla.hlo.evaluator import evaluate
from nbxla.hlo.ir import clone_module
from nbxla.hlo.printer import print_module
from nbxla.passes import fusion_model
from nbxla.passes.fusion import Fusion
from nbxla.passes.fusion_model import Legality

from tests.hlo_strategies import hlo_modules
from tests.passes.test_fusion_scaling import stencil_graphs, wide_formula

F64 = "f64"
SAME = settings(max_examples=200, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _canonical(text: str) -> str:
    """The module's text with generated name suffixes renumbered by first appearance (copies
    made by fusion take process-wide counters)."""
    seen: dict[str, str] = {}
    return re.sub(r"\b([A-Za-z_][\w\-]*)\.(\d+)\b",
                  lambda m: seen.setdefault(m.group(0), f"{m.group(1)}.#{len(seen)}"), text)


def _fused(module: Module, incremental: bool, monkeypatch) -> tuple[str, list]:
    monkeypatch.setattr(fusion_model, "INCREMENTAL_CHECKS", incremental)
    clone = clone_module(module)
    p = Fusion()
    p.run(clone)
    refusals = [(_canonical(r.producer), _canonical(r.consumer), r.reason) for r in p.report.refusals]
    return _canonical(print_module(clone)), refusals


def _assert_same_decisions(module, monkeypatch):
    full = _fused(module, False, monkeypatch)
    incremental = _fused(module, True, monkeypatch)
    assert incremental[0] == full[0]
    assert incremental[1] == full[1]


@SAME
@given(case=hlo_modules(max_steps=24))
def test_random_graphs_fuse_the_same_either_way(case):
    module, _ = case
    with pytest.MonkeyPatch.context() as mp:
        _assert_same_decisions(module, mp)


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=stencil_graphs(max_steps=60))
def test_random_stencil_graphs_fuse_the_same_either_way(case):
    module = case[0]
    with pytest.MonkeyPatch.context() as mp:
        _assert_same_decisions(module, mp)


def mixed_scalar_chain(n: int, split_outputs: bool = False) -> Module:
    """A long chain alternating scalars and one-element arrays (a traced loop body such as
    crc16's), read at the end as a scalar and, with ``split_outputs``, also as a one-element
    array halfway.  (Each value is read once: a value read twice through reshapes between the
    two shapes doubles its index maps per step, see the report.)"""
    b = Builder("mixed")
    x = b.parameter(Shape(F64, ()), "x")
    y = b.parameter(Shape(F64, ()), "y")
    w = b.parameter(Shape(F64, (1,)), "w")
    outs = []
    for k in range(n):
        v = b.op("multiply", b.reshape(x, (1,)), w)
        x = b.op("add", b.reshape(v, ()), y)
        if split_outputs and k == n // 2:
            outs.append(v)
    return Module("mixed", b.build(b.op("tuple", x, *outs)))


def test_a_mixed_shape_chain_does_not_recheck_the_whole_group(monkeypatch):
    """Groups holding scalars and one-element arrays took the full check (every member's users)
    per candidate: quadratic in the chain's length."""
    calls = []
    original = Legality.check

    def counting(self, members, users, cycles=True):
        calls.append(len(members))
        return original(self, members, users, cycles)
    monkeypatch.setattr(Legality, "check", counting)
    Fusion().run(mixed_scalar_chain(300))
    # (left: the sibling merges' checks, 14400 members; every candidate checked in full: 119774)
    assert sum(calls) < 40000, f"{len(calls)} full checks over {sum(calls)} members"


@pytest.mark.parametrize("split", [False, True])
def test_mixed_shape_chains_fuse_the_same_either_way(split, monkeypatch):
    _assert_same_decisions(mixed_scalar_chain(40, split), monkeypatch)


def test_outputs_of_two_shapes_are_still_refused(monkeypatch):
    """A producer whose joining would leave outputs of two shapes is refused, with the reason."""
    monkeypatch.setattr(fusion_model, "INCREMENTAL_CHECKS", True)
    b = Builder("two_shapes")
    x = b.parameter(Shape(F64, (1,)), "x")
    y = b.op("exponential", x)                         # expensive: not copied
    s = b.reshape(y, ())
    out = b.op("add", s, s)
    module = Module("two_shapes", b.build(b.op("tuple", out, y)))
    p = Fusion()
    p.run(module)
    assert any("outputs of different shapes" in r.reason for r in p.report.refusals), p.report.refusals
    _assert_same_decisions(module, monkeypatch)


def test_a_wide_formula_fuses_the_same_either_way(monkeypatch):
    _assert_same_decisions(wide_formula(120, 3), monkeypatch)


def twice_read_chain(n: int) -> Module:
    """Scalars and one-element arrays, each value read twice through reshapes: groups form
    in a chain, each feeding the next, that leads back into an earlier kernel unless the
    cycle check walks on past the candidate while a group spans it."""
    b = Builder("mixed")
    x = b.parameter(Shape(F64, ()), "x")
    v = b.parameter(Shape(F64, (1,)), "v")
    for k in range(n):
        if k % 2:
            x = b.op("add", x, b.reshape(b.op("multiply", v, v), ()))
        else:
            v = b.op("add", v, b.reshape(x, (1,)))
    return Module("mixed", b.build(b.op("tuple", x)))


@pytest.mark.parametrize("n", [10, 40, 41])
def test_fusion_never_makes_a_cycle_through_a_chain_of_kernels(n):
    """40 steps made ``materialize`` raise a CycleError: a group past the candidate's position
    stopped the walk, though the groups after it led back to one spanning that position."""
    module = twice_read_chain(n)
    args = [np.float64(0.3), np.array([0.7])]
    want = evaluate(clone_module(module), args)
    Fusion().run(module)
    module.entry.sort_topologically()                   # (raises on a cycle)
    np.testing.assert_allclose(evaluate(module, args), want, rtol=1e-12)


def test_one_element_values_are_read_at_one_position(monkeypatch):
    """Reads through reshapes between ``()`` and ``(1,)`` counted as reads at new positions, so
    a chain reading each value twice doubled its index maps per step: fusion time grew
    exponentially (8.6 s at 80 steps).  A one-element value has one position."""
    from nbxla.passes import fusion_model as fm
    widest = []
    original = fm.read_maps

    def recording(user, operand, maps):
        got = original(user, operand, maps)
        widest.append(len(got))
        return got
    monkeypatch.setattr(fm, "read_maps", recording)
    Fusion().run(twice_read_chain(30))
    assert widest and max(widest) <= 2, max(widest)
