"""The pass tests rerun with the leading dimension unknown (``tests/symbolic_rerun.py``): every
HLO module a test optimizes or compiles is also compiled once with its leading size unknown (the
pipeline run at two sizes must give one program) and run at its size and a larger one against
the evaluator; ``nbxla.jit`` functions compile with ``dynamic=True``.

(test_fusion_scaling's graphs of thousands of instructions are left out: compiled symbolic they
take minutes; the random-module property test has its own rerun, test_symbolic_rerun.py.)"""

from __future__ import annotations

from tests.passes import (test_buffer_assignment, test_dot_rewrites, test_float_normalization, test_fusion,
                          test_fusion_leading_axis_outputs, test_fusion_recompute, test_layouts, test_simplify,
                          test_while_state)
from tests.symbolic_rerun import rerun

rerun(globals(), test_buffer_assignment, test_dot_rewrites, test_float_normalization, test_fusion,
      test_fusion_leading_axis_outputs, test_fusion_recompute, test_layouts, test_simplify, test_while_state,
      skip={"test_random_plans_are_safe": "a hypothesis search over plans: half a minute compiled symbolic",
            "test_fusion_report_lists_kernels_kinds_ops_lines_flops_and_bytes":
                "counts the bytes a kernel reads: a symbolic mean also reads its row count"})

# Tests whose every compilation stays specialised for the compiler's reasons (a kernel whose code
# reads its size, a runtime path without unknown sizes: issue 31's gaps), with the first reason.
# (Reasons of the program itself need no entry: symbolic_rerun.PROGRAM_REASONS.)
SPECIALISED: dict[str, str] = {
}
