"""The formula programs of benchmarks/formula_programs.py (part of programs.py's and
peers.py's sets): each compiles to native kernels under ``nbxla.jit`` and gives NumPy's values,
and its JAX-style version (over NumPy itself) is the same formula."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.formula_programs import FORMULAS  # noqa: E402
from benchmarks.programs import PROGRAMS  # noqa: E402


@pytest.mark.parametrize("name", sorted(FORMULAS))
def test_formula_program_agrees_with_numpy(name):
    import nbxla
    assert name in PROGRAMS
    p = PROGRAMS[name]("small")
    f = nbxla.jit(p.fn)
    got, want = f(*p.inputs), p.fn(*p.inputs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-12 * float(np.max(np.abs(w))))
    native = f.last_compilation.executable.native
    assert not native.interpreted and not native.interpreted_ops
    for g, w in zip(p.make_jax(np)(*p.inputs), want):       # (the same formula)
        np.testing.assert_array_equal(g, w)
