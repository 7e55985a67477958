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

# The cases rerun: whole programs, reductions, ufuncs on small arrays (imported: pytest collects
# them here again, under this module's fixture).
from tests.frontend.test_programs import (test_attention, test_black_scholes,  # noqa: F401
                                          test_kmeans_step, test_lstm_cell, test_mlp_forward_and_backward,
                                          test_pairwise_distances, test_polynomial_and_rounding_kernel,
                                          test_softmax_logsumexp_layernorm)
from tests.frontend.test_reductions import (test_argmax_nan_and_ties, test_reduction_dtype_argument,  # noqa: F401
                                            test_mean_var_std_result_dtypes)

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
        assert_same(expected, actual, transcendental=True, path=f"result at leading size {grown[0].shape[0]}")


@pytest.fixture(autouse=True)
def symbolic_leading_dimension(monkeypatch):
    monkeypatch.setattr(frontend_util, "jit", SymbolicJit)
    yield


def test_some_reruns_were_symbolic():
    """(Runs after the imported cases in this module on one worker; alone, it runs a case.)"""
    if not SYMBOLIC:
        functools.partial(frontend_util.check, lambda x: np.tanh(x) * 2)(np.ones((4, 8), np.float32))
    assert SYMBOLIC
