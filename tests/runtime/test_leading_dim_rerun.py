"""The runtime tests that build modules or jit programs and check values, rerun with the leading
dimension unknown (``tests/symbolic_rerun.py``): the same oracles, at the test's size and a larger
one.

(Left out: test_native_loops, test_masked_dot, test_conv_blocks and test_straight_line assert how
the static program runs -- native loops, the convolution algorithm, the arena -- which a program
with unknown dimensions rightly changes: control flow has no symbolic runtime path yet.)"""

from __future__ import annotations

from tests.runtime import (test_bf16_arrays, test_conv_gemm, test_cpu_control_flow, test_cpu_library_calls,
                           test_flat_tuple_results, test_library_fallbacks, test_matmul_transposed)
from tests.symbolic_rerun import rerun

rerun(globals(), test_bf16_arrays, test_conv_gemm, test_cpu_control_flow, test_cpu_library_calls,
      test_flat_tuple_results, test_library_fallbacks, test_matmul_transposed, cases_per_list=2,
      skip={"test_getrf_runs_as_a_lapack_call": "grown by repeating rows and columns, the matrices are "
                                                "singular: LU's pivots are not unique there",
            "test_eigh_runs_as_a_lapack_call": "grown by repeating rows and columns, eigenvalues repeat: "
                                               "the eigenvectors are not unique there",
            "test_jit_sort_and_argsort_match_numpy_stable": "the function's np.argsort is not stable: NumPy at "
                                                            "another size is no oracle for ties"})

# Tests whose every compilation stays specialised for the compiler's reasons (a kernel whose code
# reads its size, a runtime path without unknown sizes: issue 31's gaps), with the first reason.
# (Reasons of the program itself need no entry: symbolic_rerun.PROGRAM_REASONS.)
SPECIALISED: dict[str, str] = {
}
