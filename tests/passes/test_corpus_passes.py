"""Real HLO exported by JAX still evaluates to JAX's recorded outputs after the optimizer, and the
buffer plan of each optimized module is safe to run on."""

import pytest

from nbxla.hlo.evaluator import evaluate, flatten
from nbxla.hlo.parser import parse_hlo
from nbxla.passes import optimize
from nbxla.testing import compare_arrays

from tests.conftest import corpus_files
from tests.passes.test_buffer_assignment import check_plan
from tests.hlo.test_corpus import CASE_RTOL, UNSUPPORTED, case_inputs_and_outputs
from tests.passes.test_property import assert_well_formed_fusions

# The unoptimized exports (with and without debug info), not XLA's optimized modules.
UNOPTIMIZED = [p for p in corpus_files("*.hlo") if ".opt." not in (p.id or "")]


@pytest.mark.parametrize("path", UNOPTIMIZED)
def test_optimized_corpus_case_matches_jax(path):
    case, ins, outs = case_inputs_and_outputs(path)
    if case in UNSUPPORTED:
        pytest.skip(UNSUPPORTED[case])
    result = optimize(parse_hlo(path.read_text(), str(path)))
    assert_well_formed_fusions(result.module)
    got = flatten(evaluate(result.module, ins))
    assert len(got) == len(outs)
    for i, (g, want) in enumerate(zip(got, outs)):
        assert g.dtype == want.dtype and g.shape == want.shape, f"out{i}: {g.dtype}{g.shape}"
        ok, detail = compare_arrays(g, want, rtol=CASE_RTOL.get(case))
        assert ok, f"out{i}: {detail}"
    check_plan(result.module, result.facts["buffer-assignment"], ins)


@pytest.mark.parametrize("path", UNOPTIMIZED)
def test_optimized_corpus_case_with_donated_inputs(path):
    case, ins, _ = case_inputs_and_outputs(path)
    if case in UNSUPPORTED:
        pytest.skip(UNSUPPORTED[case])
    result = optimize(parse_hlo(path.read_text(), str(path)), donated_parameters=set(range(len(ins))))
    check_plan(result.module, result.facts["buffer-assignment"], ins)


@pytest.mark.parametrize("start", [1, 2, 3, 5, 8, 13, 21])
def test_new_names_never_collide_with_parsed_ones(monkeypatch, start):
    """Passes name new instructions from a process-wide counter (``builder.unique_name``);
    parsed HLO already uses names such as ``%constant.4``.  Whatever the counter says, the
    optimized module keeps every name unique (the verifier checks after each pass)."""
    import itertools

    import nbxla.hlo.builder as builder
    paths = [p.values[0] for p in UNOPTIMIZED if (p.id or "").startswith(("fori_loop_while", "mlp", "lstm"))]
    if not paths:
        pytest.skip("HLO corpus not found")
    for path in paths:
        monkeypatch.setattr(builder, "_ids", itertools.count(start))
        result = optimize(parse_hlo(path.read_text(), str(path)))
        names = [i.name for i in result.module.instructions()]
        assert len(names) == len(set(names))
        assert set(result.facts["fusion"].fusions) <= set(names)
