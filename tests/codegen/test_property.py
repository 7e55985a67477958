"""Random HLO graphs compiled by the CPU backend give the evaluator's results.

The same strategies as the optimizer's property tests (tests/hlo_strategies.py): chains,
broadcasts, reductions over random axes, slices, pads, concatenations, dots, values with
several users, tuple roots.  Each module goes through the whole pipeline and native code.
"""

import os

from hypothesis import HealthCheck, given, settings

from nbxla.compiler import compile_module
from nbxla.hlo.evaluator import evaluate, flatten
from nbxla.testing import compare_arrays

from tests.hlo_strategies import hlo_modules

EXAMPLES = int(os.environ.get("NBXLA_HYPOTHESIS_EXAMPLES", "100"))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=hlo_modules(max_steps=16))
def test_native_code_matches_the_evaluator(case):
    module, args = case
    want = flatten(evaluate(module, args))
    compilation = compile_module(module, "cpu")
    got = compilation.executable.run(args)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        # transcendentals are ≤ 4 ulp apart; sums may be combined in another order
        ok, detail = compare_arrays(g, w, rtol=1e-4 if w.dtype.name == "float32" else 1e-10)
        assert ok, f"output {i}: {detail}\n{compilation.stage('optimized_hlo')}"
