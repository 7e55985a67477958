"""Existing frontend tests rerun with unknown dimensions: the same cases, the same NumPy oracle,
compiled by the CPU backend with ``dynamic=True`` (every dimension symbolic where the program
allows, else the leading one, else the concrete sizes with the reason recorded).

Where a case compiled symbolically, the compiled function is also run at a second leading size
(the arguments' rows repeated) and compared with NumPy there: the symbolic program must serve
sizes other than the one it was traced at.  ``SYMBOLIC`` counts those cases (printed at the end
with ``-s``), so that a change that quietly made everything specialise shows.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

import nbxla
import tests.frontend_util as frontend_util
from nbxla.hlo.symbolic import module_is_symbolic
from tests.frontend_util import assert_same, quiet

# The cases rerun: every test of these modules (whole programs, reductions, NumPy functions,
# ufuncs), collected here again under this module's fixture.  (Tests that call ``nbxla.jit``
# themselves, not ``frontend_util.check``, run unchanged: harmless, and cheap.)
from tests.frontend import test_functions, test_programs, test_reductions, test_ufuncs

RERUN_MODULES = (test_programs, test_reductions, test_functions, test_ufuncs)
for _module in RERUN_MODULES:
    for _name, _test in vars(_module).items():
        if _name.startswith("test_") and callable(_test):
            globals()[f"{_name}__{_module.__name__.rsplit('.', 1)[-1]}"] = _test

SYMBOLIC: list[str] = []


class SymbolicJit:
    """``nbxla.jit(fn, device="cpu", dynamic=True)``, plus a second call at another leading size
    when the compilation was symbolic, checked against NumPy."""

    def __init__(self, fn, **kwargs):
        self.fn = fn
        self.compiled = nbxla.jit(fn, device="cpu", dynamic=True, **kwargs)

    def __call__(self, *args, **kwargs):
        result = self.compiled(*args, **kwargs)
        comp = self.compiled.last_compilation
        if comp is not None and module_is_symbolic(comp.hlo):
            SYMBOLIC.append(getattr(self.fn, "__name__", "?"))
            self._at_another_size(args, kwargs)
        return result

    def _at_another_size(self, args, kwargs):
        arrays = [a for a in args if isinstance(a, np.ndarray) and a.ndim]
        if not arrays or kwargs:
            return
        n = arrays[0].shape[0]
        grown = tuple(np.concatenate([a, a[: max(1, n // 2)]]) if isinstance(a, np.ndarray) and a.ndim
                      and a.shape[0] == n else a for a in args)
        with quiet():
            try:
                expected = self.fn(*[np.copy(a) if isinstance(a, np.ndarray) else a for a in grown])
            except Exception:
                return                  # (NumPy refuses these sizes: nothing to compare)
            actual = self.compiled(*grown)
        assert_same(expected, actual, transcendental=True, path=f"result at leading size {n + max(1, n // 2)}")


@pytest.fixture(autouse=True)
def symbolic_leading_dimension(monkeypatch):
    monkeypatch.setattr(frontend_util, "jit", SymbolicJit)
    yield


def test_some_reruns_were_symbolic():
    """(Runs after the imported cases in this module on one worker; alone, it runs a case.)"""
    if not SYMBOLIC:
        functools.partial(frontend_util.check, lambda x: np.tanh(x) * 2)(np.ones((4, 8), np.float32))
    assert SYMBOLIC
