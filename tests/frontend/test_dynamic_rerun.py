"""Frontend tests rerun with unknown dimensions (``tests/symbolic_rerun.py``): the same cases, the
same NumPy oracle, compiled by the CPU backend with ``dynamic=True`` (every dimension symbolic
where the program allows, else the leading one, else the concrete sizes with the reason
recorded); a symbolic compilation also runs at a larger leading size against NumPy there.
Every test module of this directory is rerun (a new one too, without being listed), but those
``LEFT_OUT`` names, each with its reason.
"""

from __future__ import annotations

from tests.symbolic_rerun import rerun_directory

LEFT_OUT = {
    "test_differential_fuzz": "a search over random programs (hundreds): compiled symbolic it takes minutes",
    "test_program_fuzz": "a search over random programs with loops: compiled symbolic it takes minutes",
    "test_refusal_time": "asserts how soon a program is refused (a timing), not values",
    "test_loop_compile_size": "asserts the optimized program's size and kernel counts of static compiles",
    "test_loop_programs_benchmark": "runs benchmarks/loop_programs.py in a fresh process, which the fixture "
                                    "does not reach",
    "test_jit_scalar_fast_path": "counts cache entries and fast-path hits of static compiles",
    "test_jit_tree_fast_path": "counts cache entries and fast-path hits of static compiles",
}

RERUN = rerun_directory(globals(), LEFT_OUT, skip={
    "test_nan_static_argument_finds_its_entry_again": "counts the cache entries of static compiles",
    "test_concatenating_a_thousand_computed_pieces": "a thousand pieces: compiled symbolic (traced at four "
                                                     "sizes) it takes minutes",
    "test_innermost_body_traced_a_few_times_not_two_to_the_depth": "counts the loop body's traces of a "
                                                                    "static compile (a symbolic one traces at "
                                                                    "several sizes)",
    "test_filled_array_traced_once": "counts the loop body's traces of a static compile (a symbolic one "
                                     "traces at several sizes)",
    "test_rolled_from_the_start_with_the_steps_types": "counts the loop body's traces of a static compile",
    "test_a_loop_reached_again_with_the_same_kinds_is_unrolled_without_counting":
        "counts the loop body's traces of a static compile (a symbolic one traces at several sizes)",
    "test_a_loop_reached_with_other_shapes_is_counted_again":
        "counts the loop body's traces of a static compile (a symbolic one traces at several sizes)",
    "test_python_steps_copy_only_small_states": "counts the step copies of one trace (a symbolic compile "
                                                "traces at several sizes)",
    "test_float_to_int_casts_out_of_range": "NumPy's vectorized cast of NaN and out-of-range floats depends on "
                                            "the position: NumPy at another size is no oracle (the test's own "
                                            "is element by element)",
})

# Tests whose every compilation stays specialised for the compiler's reasons (a kernel whose code
# reads its size, a runtime path without unknown sizes: issue 31's gaps), with the first reason.
# (Reasons of the program itself -- writes into arguments, a size used as a number -- need no
# entry: symbolic_rerun.PROGRAM_REASONS.)
SPECIALISED: dict[str, str] = {
}
