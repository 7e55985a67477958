"""Random HLO graphs compiled ahead of time and run from C give the evaluator's results.

The optimizer's strategies (tests/hlo_strategies.py: chains, broadcasts, reductions, slices,
pads, concatenations, dots, values with several users, tuple roots) exercise the driver's
buffer planning: reuse of dead temporaries, results written in place, views.  Each example
builds an object and a C program, so there are fewer examples than in the jit's test."""

import os
import tempfile

from hypothesis import HealthCheck, given, settings

from nbxla.hlo.evaluator import evaluate, flatten
from nbxla.testing import compare_arrays

from ..hlo_strategies import hlo_modules
from .aot_util import build, needs_cc, run

EXAMPLES = max(1, int(os.environ.get("NBXLA_HYPOTHESIS_EXAMPLES", "100")) // 4)


@needs_cc
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=hlo_modules(max_steps=16))
def test_object_matches_the_evaluator(case):
    module, args = case
    want = flatten(evaluate(module, args))
    with tempfile.TemporaryDirectory(prefix="nbxla-aot-prop-") as directory:
        obj, exe = build(module, None, directory, "random_graph")
        got = run(obj, exe, args, directory)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        ok, detail = compare_arrays(g, w.reshape(g.shape), rtol=1e-4 if w.dtype.name == "float32" else 1e-10)
        assert ok, f"output {i}: {detail}"
