"""Differential program fuzzer (issue 28): random programs with loops, helpers that write into
their parameters, views written through, copies and boundary assignments
(``program_generator``), run by NumPy and under ``nbxla.jit`` with the same arguments.

The promise checked: the same result and the same final value of every argument (float64,
tolerance of ``compare_arrays``), or a refusal (an ``NbxlaError``, counted as a hypothesis
event) -- never a wrong value, never another exception.  Each program runs with the unroll
threshold as it is and with every loop rolled (``--unroll_max=0``), so that short trip counts
do not hide the rolled path.

A fixed seed in CI; NBXLA_HYPOTHESIS_RANDOM=1 draws new programs and NBXLA_HYPOTHESIS_EXAMPLES=N
draws N of them.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import os
import sys
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import nbxla
from nbxla.errors import NbxlaError
from nbxla.testing import compare_arrays

from ..frontend_util import quiet
from .program_generator import TRIPS, programs

EXAMPLES = int(os.environ.get("NBXLA_HYPOTHESIS_EXAMPLES", "0")) or 60
_DIR = tempfile.mkdtemp(prefix="nbxla-program-fuzz-")
SHAPE = (6, 5)


def load(source: str):
    """The program as a module with a file, so that nbxla can read its source."""
    name = "fuzzprog_" + hashlib.sha1(source.encode()).hexdigest()[:16]
    if name in sys.modules:
        return sys.modules[name]
    path = os.path.join(_DIR, name + ".py")
    with open(path, "w") as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[name] = module
    return module


def check_program(source: str, n: int, s, unroll_max: str | None, monkeypatch) -> None:
    prog = load(source).prog
    rng = np.random.default_rng(len(source))
    args = (n, s, rng.random(SHAPE), rng.random(SHAPE))
    eager, compiled = copy.deepcopy(args), copy.deepcopy(args)
    with np.errstate(all="ignore"):
        want = prog(*eager)
    if unroll_max is not None:
        monkeypatch.setenv("NBXLA_FLAGS", f"--unroll_max={unroll_max}")
    try:
        with quiet():
            got = nbxla.jit(prog)(*compiled)
    except NbxlaError as e:
        event(f"refused: {str(e).splitlines()[0].split(': ', 1)[-1][:60]}")
        return
    want, got = (want, got) if isinstance(want, tuple) else ((want,), (got,))
    assert isinstance(got, tuple) and len(got) == len(want), f"result {got!r}:\n{source}"
    pairs = [(f"result {k}", w, g) for k, (w, g) in enumerate(zip(want, got))]
    for what, w, g in pairs + [("x after the call", eager[2], compiled[2]),
                               ("y after the call", eager[3], compiled[3])]:
        ok, detail = compare_arrays(np.asarray(g), np.asarray(w), rtol=1e-9)
        assert ok, f"{what} differs from NumPy ({detail}) for n={n}, s={s!r}, " \
                   f"unroll_max={unroll_max}:\n{source}"


_FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                      HealthCheck.function_scoped_fixture])


@pytest.mark.parametrize("unroll_max", [None, "0"], ids=["default-unroll", "all-rolled"])
@settings(_FUZZ, max_examples=EXAMPLES)
@given(source=programs(), n=st.sampled_from(TRIPS), numpy_scalar=st.booleans())
def test_programs_match_numpy(source, n, numpy_scalar, unroll_max, monkeypatch):
    s = np.float64(0.375) if numpy_scalar else 0.375
    check_program(source, n, s, unroll_max, monkeypatch)


SAMPLE = """import numpy as np

def h0(b, u, s):
    b[1:-1, 1:-1] = 0.25 * (u[2:, 1:-1] + u[1:-1, 0:-2])

def prog(n, s, x, y):
    t1 = np.zeros(x.shape)
    for i2 in range(n):
        h0(t1, x, s)
        v3 = y[1:-1, 1:-1]
        v3 += 0.25 * np.tanh(t1[1:-1, 1:-1])
        x[0, :] = x[1, :]
    return t1
"""


def test_the_check_compiles_and_can_fail(monkeypatch):
    """The generator's shape of program compiles (it is not merely refused), and a compiled
    result that differs from NumPy's fails the check."""
    def refused(msg):
        raise AssertionError(f"refused: {msg}")
    monkeypatch.setattr(sys.modules[__name__], "event", refused)
    check_program(SAMPLE, 5, 0.375, None, monkeypatch)
    real = nbxla.jit
    monkeypatch.setattr(nbxla, "jit", lambda fn: (lambda *a: real(fn)(*a) + 1e-6))
    with pytest.raises(AssertionError, match="result 0 differs from NumPy"):
        check_program(SAMPLE, 5, 0.375, None, monkeypatch)
