"""The backend tests rerun with the leading dimension unknown (``tests/symbolic_rerun.py``): every
HLO module a test compiles is also compiled once with its leading size unknown and run at its
size and a larger one against the evaluator; every ``nbxla.jit`` function compiles with
``dynamic=True`` and, where symbolic, runs at a larger leading size against NumPy too.

(test_column_groups is left out: it asserts which kernel style the static compile picks, which
a program for every size rightly changes.)"""

from __future__ import annotations

from tests.codegen import (test_bf16, test_bitcast_widths, test_complex_scatter,
                           test_compute_bound, test_convolution, test_cpu, test_custom_reducers,
                           test_elemental_gaps, test_f16_reductions, test_f8, test_fused_dots,
                           test_in_place_vectorized, test_masked_ranges, test_middle_axes, test_random_bits,
                           test_reduce_window, test_row_kernels, test_select_and_scatter, test_single_unit,
                           test_sort_kernel, test_transcendentals, test_transposes, test_variadic_scatter)
from tests.symbolic_rerun import rerun

rerun(globals(), test_bf16, test_bitcast_widths, test_complex_scatter, test_compute_bound,
      test_convolution, test_cpu, test_custom_reducers, test_elemental_gaps, test_f16_reductions, test_f8,
      test_fused_dots, test_in_place_vectorized, test_masked_ranges, test_middle_axes, test_random_bits,
      test_reduce_window, test_row_kernels, test_select_and_scatter, test_single_unit, test_sort_kernel,
      test_transcendentals, test_transposes, test_variadic_scatter, cases_per_list=2)

# Tests whose every compilation stays specialised for the compiler's reasons (a kernel whose code
# reads its size, a runtime path without unknown sizes: issue 31's gaps), with the first reason.
# (Reasons of the program itself need no entry: symbolic_rerun.PROGRAM_REASONS.)
SPECIALISED: dict[str, str] = {
    "test_large_integer_dot_stays_native__test_fused_dots":
        'the generated code of kernel @"nbxla_fusion" depends on the size; leading dimens',
    "test_multi_output_fusion_with_computed_operands__test_fused_dots":
        'the generated code of kernel @"nbxla_f" depends on the size; leading dimensions ',
}
