"""The pass tests rerun with the leading dimension unknown (``tests/symbolic_rerun.py``): every
HLO module a test optimizes or compiles is also compiled once with its leading size unknown (the
pipeline run at two sizes must give one program) and run at its size and a larger one against
the evaluator; ``nbxla.jit`` functions compile with ``dynamic=True``.  Every test module of this
directory is rerun (a new one too, without being listed), but those ``LEFT_OUT`` names."""

from __future__ import annotations

from tests.symbolic_rerun import drop_cases, rerun_directory

LEFT_OUT = {
    "test_fusion_scaling": "graphs of thousands of instructions: compiled symbolic they take minutes",
    "test_property": "its random modules have their own rerun, test_symbolic_rerun.py",
}

CHAOTIC = ("the corpus's fori_loop_while (x = 0.9 x + i sin x, 10 steps) amplifies one-ulp differences "
           "of sin ~10^4-fold: its float32 results are 1% from float64's, and the static compile is 4e-4 "
           "from the evaluator, so no oracle holds at the rerun's 1e-5 at another size (with JAX's "
           "recorded input: equal)")

RERUN = rerun_directory(globals(), LEFT_OUT, skip={
    "test_random_plans_are_safe": "a hypothesis search over plans: half a minute compiled symbolic",
    "test_fusion_report_lists_kernels_kinds_ops_lines_flops_and_bytes":
        "counts the bytes a kernel reads: a symbolic mean also reads its row count",
    "test_interpreted_kernels_are_warned_about_once_and_marked":
        "counts the warnings of its one compilation: the rerun compiles a second, symbolic one",
    "test_new_names_never_collide_with_parsed_ones": CHAOTIC,     # (it runs every corpus case)
})

drop_cases(globals(), ["test_optimized_corpus_case_matches_jax__test_corpus_passes",
                       "test_optimized_corpus_case_with_donated_inputs__test_corpus_passes"],
           lambda path: "fori_loop_while" in str(path), CHAOTIC)      # (the other cases rerun)

# Tests whose every compilation stays specialised for the compiler's reasons (a kernel whose code
# reads its size, a runtime path without unknown sizes: issue 31's gaps), with the first reason.
# (Reasons of the program itself need no entry: symbolic_rerun.PROGRAM_REASONS.)
SPECIALISED: dict[str, str] = {
}
