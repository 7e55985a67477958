"""The runtime tests that build modules or jit programs and check values, rerun with the leading
dimension unknown (``tests/symbolic_rerun.py``): the same oracles, at the test's size and a larger
one.  Every test module of this directory is rerun (a new one too, without being listed), but
those ``LEFT_OUT`` names, each with its reason."""

from __future__ import annotations

from tests.symbolic_rerun import rerun_directory

# Modules whose tests assert how the static program runs -- which a program with unknown
# dimensions rightly changes -- or that the fixture cannot reach.
LEFT_OUT = {
    "test_native_loops": "asserts that loops run natively (control flow has no symbolic runtime path yet)",
    "test_masked_dot": "asserts the masked dot's kernel form at its size",
    "test_conv_blocks": "asserts the convolution algorithm chosen for its sizes",
    "test_straight_line": "asserts the arena and straight-line runner of the static program",
    "test_jit_dispatch": "counts compilations, cache hits and fast-path entries of static compiles",
    "test_kernel_cost_threading": "asserts which kernels split across threads at their sizes",
    "test_blas_policy": "asserts the OpenBLAS thread count chosen at its sizes",
    "test_persistent_cache": "runs its programs in fresh processes, which the fixture does not reach",
    "test_trust_runtime": "forks and evicts cache entries: structure, not values",
    "test_conv_bias_act": "asserts that the convolution runs in nbxla's kernel with its epilogue at its sizes",
    "test_conv_grouped": "asserts which grouped-convolution path its sizes take",
    "test_flat_native_loop": "asserts that loops run natively (control flow has no symbolic runtime path yet)",
    "test_execution_stage": "asserts how the static program's steps are described (native loops, "
                            "an unsupported custom-call the evaluator cannot run either)",
    "test_fastcall": "calls a kernel's entry points directly with arrays of its own sizes, which an "
                     "instance bound to other sizes does not take",
    "test_native_loop_entries": "asserts the native loop runners of the static program (control flow "
                                "has no symbolic runtime path yet)",
    "test_thin_gemm_kernel": "asserts that the static program's dot runs on the thin-GEMM kernel at its "
                             "row counts (a larger leading dim passes THIN_ROWS: BLAS then)",
    "test_gemm_epilogue": "asserts that the static program's dot runs as one ?gemm with its scale-and-add "
                          "(a program with unknown dimensions keeps the two steps)",
}

RERUN = rerun_directory(globals(), LEFT_OUT, skip={
    "test_getrf_runs_as_a_lapack_call": "grown by repeating rows and columns, the matrices are singular: "
                                        "LU's pivots are not unique there",
    "test_eigh_runs_as_a_lapack_call": "grown by repeating rows and columns, eigenvalues repeat: the "
                                       "eigenvectors are not unique there",
    "test_jit_sort_and_argsort_match_numpy_stable": "the function's np.argsort is not stable: NumPy at "
                                                    "another size is no oracle for ties",
    "test_single_native_loop_entry_takes_the_fast_runner_and_agrees_with_numpy":
        "asserts the native loop's fast runner of the static program",
    "test_native_loops_are_split_through_a_host_driven_twin":
        "builds an executable from the optimized module, which holds unknown sizes in a symbolic program",
})

# Tests whose every compilation stays specialised for the compiler's reasons (a kernel whose code
# reads its size, a runtime path without unknown sizes: issue 31's gaps), with the first reason.
# (Reasons of the program itself need no entry: symbolic_rerun.PROGRAM_REASONS.)
SPECIALISED: dict[str, str] = {
}
