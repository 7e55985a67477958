"""The evaluator is the oracle for passes: random valid graphs give the same results before and
after every pass, and after the whole pipeline; every result verifies and fusions are well formed.

``NBXLA_HYPOTHESIS_EXAMPLES=2000 pytest tests/passes/test_property.py`` runs more examples.
"""

import os

import pytest
from hypothesis import HealthCheck, given, settings

from nbxla.hlo.evaluator import evaluate, flatten
from nbxla.hlo.ir import clone_module
from nbxla.hlo.printer import print_module
from nbxla.passes import default_pipeline, optimize, verify_module
from nbxla.passes.fusion import MAX_OPERANDS, fusion_targets
from nbxla.testing import compare_arrays

from tests.hlo_strategies import hlo_modules

EXAMPLES = int(os.environ.get("NBXLA_HYPOTHESIS_EXAMPLES", "0")) or None
PROPERTY = settings(max_examples=EXAMPLES or 300, deadline=None, derandomize=EXAMPLES is None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

PASSES = list({p.name: p for p in default_pipeline().passes}.values())   # each pass once


def outputs(module, args):
    return flatten(evaluate(module, args))


def assert_same(before, after, args, what):
    want, got = outputs(before, args), outputs(after, args)
    assert len(got) == len(want), what
    for i, (g, w) in enumerate(zip(got, want)):
        ok, detail = compare_arrays(g, w)
        assert ok, f"{what}: output {i}: {detail}\n--- before:\n{print_module(before)}\n" \
                   f"--- after:\n{print_module(after)}"


def assert_well_formed_fusions(module):
    callers = {}
    for comp in module.computations:
        for instr in comp.instructions:
            if instr.opcode != "fusion":
                continue
            body = instr.attrs["calls"]
            assert id(body) not in callers, f"%{body.name} is called by two fusions"
            callers[id(body)] = instr
            assert instr.attrs["kind"] in ("kLoop", "kInput"), instr.attrs["kind"]
            has_reduce = any(i.opcode == "reduce" for i in body.instructions)
            assert (instr.attrs["kind"] == "kInput") == has_reduce, instr.name
            params = body.parameters
            assert len(params) == len(instr.operands) <= MAX_OPERANDS
            for p, o in zip(params, instr.operands):
                assert p.shape.compatible(o.shape), f"{instr.name}: {p.shape} vs {o.shape}"
            assert body.root.shape.compatible(instr.shape)
            for i in body.instructions:
                assert i.opcode not in ("dot", "fusion", "convolution", "custom-call", "while",
                                        "conditional", "call"), f"{i.opcode} inside %{body.name}"
    for comp in fusion_targets(module):       # kernels stay out of each other's computations
        assert all(i.opcode != "parameter" or i.parameter_number < len(comp.parameters)
                   for i in comp.instructions)


@pytest.mark.parametrize("p", PASSES)
@settings(PROPERTY, max_examples=EXAMPLES or 80)
@given(case=hlo_modules())
def test_each_pass_alone_preserves_results(p, case):
    module, args = case
    verify_module(module)
    clone = clone_module(module)
    p.run(clone)
    verify_module(clone, after=p.name)
    assert_same(module, clone, args, f"after {p.name}")
    if p.name == "fusion":
        assert_well_formed_fusions(clone)


@PROPERTY
@given(case=hlo_modules(max_steps=20))
def test_pipeline_preserves_results(case):
    module, args = case
    before = print_module(module)
    result = optimize(module)
    assert print_module(module) == before, "optimize must not change its input"
    verify_module(result.module)
    assert_same(module, result.module, args, "after the pipeline")
    assert_well_formed_fusions(result.module)
    # Running the pipeline again finds an already-optimized module (no fusion inside fusion).
    again = optimize(result.module)
    assert_same(module, again.module, args, "after the pipeline twice")
    assert_well_formed_fusions(again.module)
