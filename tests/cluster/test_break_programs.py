"""The programs of benchmarks/break_programs.py (each with a graph break: a SciPy banded
solve, np.unique, a boolean mask, print in a loop, while/if on a value, scipy.special) give
eager NumPy's results under auto-clustering on every call: the first (compiling), the
auto-clustered and plain calls of the measured choice, and a second auto-clustered call
(cached clusters); and the report names the break, or says it compiled whole (a program
whose break is only a ``float()`` for a ``while``: jit compiles the loop)."""

import importlib.util
import io
import sys
from pathlib import Path

import numpy as np
import pytest

from nbxla.cluster import AutoFunction
from nbxla.runtime.cache import CompilationCache

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("break_programs", REPO / "benchmarks" / "break_programs.py")
programs = sys.modules.setdefault("break_programs", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(programs)

# What each program's report must show among its breaks (a piece of the reason).
BREAK_REASON = {
    "banded_diffusion": "solve_banded needs NumPy arrays",
    "unique_labels": "np.unique",
    "masked_normalize": "x[...]",
    "heat_progress": "formatting an array value",
    "damped_iteration": "float() of an array value",
    "erf_blend": "scipy.special.erf",
}


def leaves(value):
    if isinstance(value, (tuple, list)):
        return [x for v in value for x in leaves(v)]
    return [value]


def assert_same(got, want):
    for g, w in zip(leaves(got), leaves(want), strict=True):
        assert type(g) is type(w), (type(g), type(w))
        if isinstance(w, (np.ndarray, np.generic)):
            assert g.dtype == w.dtype and np.shape(g) == np.shape(w)
            np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)
        else:
            assert g == w


def with_stream(inputs, stream):
    return tuple(stream if isinstance(x, io.StringIO) else x for x in inputs)


@pytest.mark.parametrize("whole", [True, False], ids=["auto", "clustered"])
@pytest.mark.parametrize("name", list(programs.PROGRAMS))
def test_break_program_matches_numpy_on_every_call(name, whole):
    program = programs.PROGRAMS[name]("tiny")
    if program.needs_scipy:
        pytest.importorskip("scipy")
    f = AutoFunction(program.fn, cache=CompilationCache(), min_work=1, whole=whole)
    want_out = io.StringIO()
    want = program.fn(*with_stream(program.inputs, want_out))
    snapshot = [x.copy() if isinstance(x, np.ndarray) else x for x in program.inputs]
    outputs = []
    for call in range(4):          # first (compiles), then the measured eager/auto calls
        out = io.StringIO()
        assert_same(f(*with_stream(program.inputs, out)), want)
        outputs.append(out.getvalue())
    out = io.StringIO()
    assert_same(f.run_auto(*with_stream(program.inputs, out)), want)
    outputs.append(out.getvalue())
    assert outputs == [want_out.getvalue()] * 5              # print output, in order
    for x, before in zip(program.inputs, snapshot):          # inputs are not written
        if isinstance(x, np.ndarray):
            np.testing.assert_array_equal(x, before)
    report = f.last_report
    assert report.compiled_clusters, report.to_text()
    if report.whole.startswith("compiled whole"):         # (one program: no break to name)
        assert whole and report.compiled_fraction == 1.0
        return
    reasons = " ".join(f"{b.reason} [{b.op}]" for b in report.breaks)
    assert BREAK_REASON[name] in reasons, report.to_text()
