"""The passes' property test rerun with the leading dimension unknown.

Each random valid module of ``test_property``'s generator is made symbolic in the leading size
of its first array parameter (every dimension of that size becomes ``b``), compiled once by
``compile_symbolic_module`` (the whole pipeline on two probes, which must agree) and run at the
module's size and a larger one, against the same oracle as the static pipeline test: the
reference evaluator on the module bound to that size.  Where the symbolic compile refuses, the
reason must be words (what depends on the size), never an exception of another kind.
"""

import os

from hypothesis import HealthCheck, given, settings

from tests.codegen.test_symbolic_rerun import REFUSED, check_symbolic
from tests.hlo_strategies import hlo_modules

EXAMPLES = int(os.environ.get("NBXLA_HYPOTHESIS_EXAMPLES", "0")) or None
PROPERTY = settings(max_examples=EXAMPLES or 60, deadline=None, derandomize=EXAMPLES is None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@PROPERTY
@given(case=hlo_modules(max_steps=12))
def test_pipeline_with_the_leading_size_unknown_agrees_with_the_evaluator(case):
    module, args = case
    name = f"random {id(module)}"
    if not check_symbolic(name, module, args, exact=False):
        assert REFUSED[name].strip(), "a refusal says why"
