"""Nested rolled loops whose bodies make run-time checks (an index read from an array, an index
that may be negative) are traced a number of times that grows with the depth, not 2^depth.

A loop learns the checks its body makes from a first trace and traces again with one carried
slot per check; a loop nested in it did the same inside each of those traces, so a nest of d
such loops traced its innermost body 2^d times (npbench's scattering self-energies, eight
nested loops: 9 s of CPU to its first call at the smallest size).  The checks a loop's last
trace made now seed its next trace (inside the enclosing loop's next one).  Results, and the
errors NumPy raises for out-of-range indices, are NumPy's.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest

from nbxla.frontend import loops
from tests.frontend_util import check, check_or_same_error, jit


def nest(G, idx, S):
    """Four rolled loops; an index read from ``idx`` (a run-time bounds check) in the middle."""
    for k in range(G.shape[0]):
        for e in range(G.shape[1]):
            for a in range(idx.shape[0]):
                for b in range(idx.shape[1]):
                    if e - 1 >= 0:
                        S[k, e, a] += G[k, e - 1, idx[a, b]] @ G[k, e, idx[a, b]]
    return S


def _inputs(idx_high=7):
    rng = np.random.default_rng(30)
    G = rng.random((5, 6, 7, 3, 3))
    idx = rng.integers(0, idx_high, size=(6, 5)).astype(np.int32)
    return G, idx, np.zeros((5, 6, 6, 3, 3))


@pytest.fixture
def traces(monkeypatch):
    """Traces of each loop's body, by line (of this file)."""
    counts = collections.Counter()
    original = loops._Loop._trace_computation

    def counted(self, what, *args):
        if what == "body":
            counts[self.lineno] += 1
        return original(self, what, *args)
    monkeypatch.setattr(loops._Loop, "_trace_computation", counted)
    return counts


def test_innermost_body_traced_a_few_times_not_two_to_the_depth(traces):
    G, idx, S = _inputs()
    check(nest, G, idx, S)
    assert traces, "the loops should roll (each trace of a body is counted)"
    innermost = max(traces.values())
    # 4 nested loops: 2^4 = 16 traces of the innermost body before; now one more per level
    assert innermost <= 2 * 4, dict(traces)


def test_an_index_out_of_bounds_in_the_nest_raises_numpys_error():
    G, idx, S = _inputs(idx_high=9)        # some of idx's values are past G's axis of 7
    check_or_same_error(nest, G, idx, S)


def test_the_same_nest_at_two_sizes_compiles_and_agrees():
    for shape in [(2, 3, 4, 2, 2), (3, 2, 5, 3, 3)]:
        rng = np.random.default_rng(sum(shape))
        G = rng.random(shape)
        idx = rng.integers(0, shape[2], size=(3, 2)).astype(np.int64)
        f = jit(nest)
        out = f(G, idx, np.zeros(shape[:2] + (3,) + shape[3:]))
        np.testing.assert_allclose(out, nest(G, idx, np.zeros(shape[:2] + (3,) + shape[3:])))
