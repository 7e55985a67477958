"""The backend tests rerun with the leading dimension unknown (``tests/symbolic_rerun.py``): every
HLO module a test compiles is also compiled once with its leading size unknown and run at its
size and a larger one against the evaluator; every ``nbxla.jit`` function compiles with
``dynamic=True`` and, where symbolic, runs at a larger leading size against NumPy too.  Every
test module of this directory is rerun (a new one too, without being listed), but those
``LEFT_OUT`` names, each with its reason."""

from __future__ import annotations

from tests.passes.test_leading_dim_rerun import CHAOTIC
from tests.symbolic_rerun import drop_cases, rerun_directory

LEFT_OUT = {
    "test_column_groups": "asserts which kernel style the static compile picks, which a program for "
                          "every size rightly changes",
    "test_cuda": "the CUDA backend: unknown dimensions are compiled for the CPU only",
    "test_cuda_corpus": "the CUDA backend: unknown dimensions are compiled for the CPU only",
    "test_property": "a hypothesis search over random modules: their rerun is passes/test_symbolic_rerun.py",
    "test_aot_loops": "asserts the C and LLVM functions of ahead-of-time loops (AOT with unknown sizes has "
                      "its own tests: tests/aot/test_aot_unknown_sizes.py)",
    "test_light_kernels": "asserts which kernels are made light at their sizes",
    "test_object_keys": "asserts which compiles find machine code in the on-disk cache (of static compiles)",
}

# A function these tests jit for the evaluator is their oracle (the CPU's is the one under test):
# it stays the evaluator, at the test's sizes (``symbolic_rerun``), and the CPU's compiles with
# unknown dimensions.
EVALUATOR_IS_THE_ORACLE = True

RERUN = rerun_directory(globals(), LEFT_OUT, skip={
    "test_a_chain_longer_than_the_limit_is_cut_there": "asserts where a chain of updates is cut in the static "
                                                        "program",
})

drop_cases(globals(), ["test_corpus_case_on_cpu_matches_jax__test_corpus_cpu"],
           lambda path: "fori_loop_while" in str(path), CHAOTIC)      # (the other cases rerun)

# Tests whose every compilation stays specialised for the compiler's reasons (a kernel whose code
# reads its size, a runtime path without unknown sizes: issue 31's gaps), with the first reason.
# (Reasons of the program itself need no entry: symbolic_rerun.PROGRAM_REASONS.)
SPECIALISED: dict[str, str] = {
}
