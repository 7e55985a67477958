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

# Tests whose every compilation legitimately stays specialised, and why.
SPECIALISED: dict[str, str] = {}
