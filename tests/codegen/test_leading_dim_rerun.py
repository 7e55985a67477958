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
    # (these two read the HLO corpus: they run only where ../shared/corpus is present)
    "test_corpus_scatter_add_is_native__test_complex_scatter":
        'the generated code of kernel @"nbxla_scatter_add" depends on the size; leading dim',
    "test_jax_cumsum_corpus_runs_as_native_scans__test_reduce_window":
        'kernel nbxla_reduce_window_sum (scan) reads its size from its code, not its range',
    "test_a_kernel_that_cannot_be_emitted_is_interpreted_and_the_others_stay_native__test_cpu":
        "kernel nbxla_reduce_fusion's range is not a multiple of one size",
    "test_argmax_scatter_with_duplicates_and_out_of_bounds_indices__test_variadic_scatter":
        'the generated code of kernel @"nbxla_s" depends on the size; leading dimensions ',
    "test_argmax_scatter_with_nan_updates__test_variadic_scatter":
        'the generated code of kernel @"nbxla_s" depends on the size; leading dimensions ',
    "test_batched_small_dots_in_a_loop_fusion__test_fused_dots":
        'kernel nbxla_fusion (dot) reads its size from its code, not its range; leading d',
    "test_bits_match_the_evaluator__test_random_bits":
        'the generated code of kernel @"nbxla_r" depends on the size; leading dimensions ',
    "test_depthwise_windows_in_both_layouts__test_convolution":
        'convolutions have no symbolic runtime path yet; leading dimensions alone: convol',
    "test_dimension_numbers__test_fused_dots":
        'the generated code of kernel @"nbxla_fusion" depends on the size; leading dimens',
    "test_element_types__test_fused_dots":
        'kernel nbxla_fusion (dot) reads its size from its code, not its range; leading d',
    "test_fusion_in_another_form_is_split__test_fused_dots":
        'the generated code of kernel @"nbxla_exponential_fusion" depends on the size; le',
    "test_header_less_module_with_a_fused_dot_parses_and_runs__test_fused_dots":
        'the generated code of kernel @"nbxla_fusion" depends on the size; leading dimens',
    "test_kOutput_dot_bias_relu_large_is_split_into_blas_and_epilogue__test_fused_dots":
        'the generated code of kernel @"nbxla_maximum_fusion" depends on the size; leadin',
    "test_kOutput_dot_bias_relu_small_runs_as_one_native_kernel__test_fused_dots":
        'the generated code of kernel @"nbxla_fusion" depends on the size; leading dimens',
    "test_large_integer_dot_stays_native__test_fused_dots":
        'the generated code of kernel @"nbxla_fusion" depends on the size; leading dimens',
    "test_large_results_split_across_threads__test_random_bits":
        'the generated code of kernel @"nbxla_r" depends on the size; leading dimensions ',
    "test_long_rows_across_threads__test_sort_kernel":
        'kernel nbxla_s (sort) reads its size from its code, not its range; leading dimen',
    "test_multi_output_fusion_with_computed_operands__test_fused_dots":
        'the generated code of kernel @"nbxla_f" depends on the size; leading dimensions ',
    "test_numpy_scans_through_jit_are_native_and_match_numpy__test_reduce_window":
        'kernel nbxla_reduce_window (scan) reads its size from its code, not its range',
    "test_q_at_k_transposed_is_register_blocked_on_the_packed_copy__test_fused_dots":
        'kernel nbxla_fusion (dot) reads its size from its code, not its range; leading d',
    "test_random_depthwise_against_the_evaluator__test_convolution":
        'convolutions have no symbolic runtime path yet; leading dimensions alone: convol',
    "test_random_windows_match_the_evaluator__test_reduce_window":
        'kernel nbxla_random_rw is planned differently at different sizes; leading dimens',
    "test_register_blocked_batched_dots__test_fused_dots":
        'kernel nbxla_fusion (dot) reads its size from its code, not its range; leading d',
    "test_register_blocks_with_rows_split_anywhere__test_fused_dots":
        'kernel nbxla_fusion (dot) reads its size from its code, not its range; leading d',
    "test_sort_kernel_is_the_evaluators_merge_sort__test_sort_kernel":
        'the generated code of kernel @"nbxla_s" depends on the size; leading dimensions ',
    "test_sorted_order_of_a_consistent_comparator__test_sort_kernel":
        'the generated code of kernel @"nbxla_s" depends on the size; leading dimensions ',
    "test_stride1_pooling_and_column_scans_are_vectorized__test_reduce_window":
        'the generated code of kernel @"nbxla_vec_pool_maximum" depends on the size; lead',
    "test_variadic_replace_with_windows__test_variadic_scatter":
        'the generated code of kernel @"nbxla_s" depends on the size; leading dimensions ',
    "test_xla_cpu_output_with_metadata_and_backend_config__test_fused_dots":
        'kernel nbxla_ynn_fusion (dot) reads its size from its code, not its range; leadi',
}
