"""Frontend tests rerun with unknown dimensions (``tests/symbolic_rerun.py``): the same cases, the
same NumPy oracle, compiled by the CPU backend with ``dynamic=True`` (every dimension symbolic
where the program allows, else the leading one, else the concrete sizes with the reason
recorded); a symbolic compilation also runs at a larger leading size against NumPy there.
"""

from __future__ import annotations

from tests.frontend import (test_bf16, test_functions, test_indexing, test_linalg_solve, test_loop_exits,
                            test_methods, test_nested_loops, test_programs, test_random, test_reductions,
                            test_selection, test_subcomputation, test_ufuncs, test_window_loops,
                            test_writes_through_references)
from tests.symbolic_rerun import rerun

rerun(globals(), test_programs, test_reductions, test_functions, test_ufuncs, test_indexing, test_methods,
      test_selection, test_random, test_bf16, test_linalg_solve, test_loop_exits, test_nested_loops,
      test_writes_through_references, test_subcomputation, test_window_loops)

# Tests whose every compilation stays specialised for the compiler's reasons (a kernel whose code
# reads its size, a runtime path without unknown sizes: issue 31's gaps), with the first reason.
# (Reasons of the program itself -- writes into arguments, a size used as a number -- need no
# entry: symbolic_rerun.PROGRAM_REASONS.)
SPECIALISED: dict[str, str] = {
    "test_in_a_loop_the_solve_runs_in_the_native_loop__test_linalg_solve":
        # (the loop's body calls LAPACK's solve: runtime/symbolic_loops.py compiles loops of
        # kernels for every size, not loops holding a library call)
        'its loops cannot run natively at every size (a custom-call: the LAPACK solve)',
}
