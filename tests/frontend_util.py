"""The frontend oracle: run a function eagerly with NumPy and under ``nbxla.jit``, compare.

``check(fn, *args)`` runs ``fn`` on copies of the arguments twice — once plain NumPy, once
compiled — and asserts that the results *and the arguments afterwards* (in-place writes) are
the same: identical dtypes and shapes, values within a per-dtype tolerance, NaNs in the same
places.  NumPy's warnings are silenced in both runs (the evaluator computes with NumPy too).

The compiled side runs on the reference evaluator (``NBXLA_FRONTEND_TEST_DEVICE`` picks another
device): these tests check the lowering; backends are checked against the evaluator elsewhere.

Tolerances (relative, with an absolute floor of the same size for values near zero):
  bool, integers   exact
  float16          1e-2
  float32          1e-5 (``transcendental=True``: 1e-4 — exp/log/trig/hyperbolic lowerings)
  float64          1e-12 (``transcendental=True``: 1e-10)
  complex          as their component float type
"""

from __future__ import annotations

import ast
import functools
import inspect
import os
import textwrap
import warnings

import numpy as np
import pytest
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import nbxla

DEVICE = os.environ.get("NBXLA_FRONTEND_TEST_DEVICE", "evaluator")
jit = functools.partial(nbxla.jit, device=DEVICE)
TOL = {np.dtype(np.float16): 1e-2, np.dtype(np.float32): 1e-5, np.dtype(np.float64): 1e-12,
       np.dtype(np.complex64): 1e-5, np.dtype(np.complex128): 1e-12}
TRANSCENDENTAL_TOL = {np.dtype(np.float16): 1e-2, np.dtype(np.float32): 1e-4,
                      np.dtype(np.float64): 1e-10, np.dtype(np.complex64): 1e-4,
                      np.dtype(np.complex128): 1e-10}

DTYPES = [np.dtype(t) for t in (np.bool_, np.int32, np.int64, np.float32, np.float64)]
NUMERIC = DTYPES[1:]
FLOATS = [np.dtype(np.float32), np.dtype(np.float64)]


# The loop tests run twice: with the default flags, and with every loop that can be rolled
# rolled into an HLO ``while`` -- small test trip counts are unrolled by default, and would leave
# the rolled path (the one long loops take) untested (issue 28).  (Flags are part of every
# compilation's cache key.)
UNROLL_OFF = "--unroll_max=0"
UNROLL_FLAGS = [pytest.param("", id="unroll_default"), pytest.param(UNROLL_OFF, id="unroll_max0")]


def use_flags(monkeypatch, flags: str) -> None:
    """``flags`` added to ``NBXLA_FLAGS`` for this test (the flags already there are kept)."""
    if flags:
        monkeypatch.setenv("NBXLA_FLAGS", f"{os.environ.get('NBXLA_FLAGS', '')} {flags}".strip())


def has_loop(fn, _seen=None) -> bool:
    """Whether ``fn``, or a module-level function it calls, holds a ``for`` or ``while`` (only
    then can ``--unroll_max`` change what compiles)."""
    seen = _seen if _seen is not None else set()
    if fn in seen:
        return False
    seen.add(fn)
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError):
        return True                                  # (cannot tell: run it both ways)
    if any(isinstance(node, (ast.For, ast.While)) for node in ast.walk(tree)):
        return True
    called = (fn.__globals__.get(name) for name in fn.__code__.co_names)
    return any(has_loop(f, seen) for f in called if inspect.isfunction(f))


def with_unroll_flags(cases: dict) -> list:
    """pytest params (name, flags): every case with the default flags, and those whose
    function (``case.fn``) has a loop once more with ``--unroll_max=0``."""
    return [pytest.param(name, p.values[0], id=f"{p.id}-{name}")
            for name, case in sorted(cases.items()) for p in UNROLL_FLAGS
            if not p.values[0] or has_loop(case.fn)]


class quiet:
    """NumPy's floating-point warnings and RuntimeWarnings off (``Mean of empty slice``...)."""

    def __enter__(self):
        self._err = np.errstate(all="ignore")
        self._warn = warnings.catch_warnings()
        self._err.__enter__()
        self._warn.__enter__()
        warnings.simplefilter("ignore", RuntimeWarning)
        warnings.simplefilter("ignore", np.exceptions.ComplexWarning)

    def __exit__(self, *exc):
        self._warn.__exit__(*exc)
        self._err.__exit__(*exc)


def _copy(tree):
    if isinstance(tree, np.ndarray):
        return tree.copy()
    if isinstance(tree, (list, tuple)):
        return type(tree)(_copy(t) for t in tree)
    if isinstance(tree, dict):
        return {k: _copy(v) for k, v in tree.items()}
    return tree


def assert_same(expected, actual, *, transcendental=False, rtol=None, path="result"):
    """NumPy's ``expected`` against nbxla's ``actual`` (nested tuples/lists/dicts allowed)."""
    if isinstance(expected, (tuple, list)):
        assert isinstance(actual, (tuple, list)) and len(actual) == len(expected), \
            f"{path}: expected {type(expected).__name__} of {len(expected)}, got {actual!r}"
        for i, (e, a) in enumerate(zip(expected, actual)):
            assert_same(e, a, transcendental=transcendental, rtol=rtol, path=f"{path}[{i}]")
        return
    if isinstance(expected, dict):
        assert isinstance(actual, dict) and expected.keys() == actual.keys(), path
        for k in expected:
            assert_same(expected[k], actual[k], transcendental=transcendental, rtol=rtol,
                        path=f"{path}[{k!r}]")
        return
    if not isinstance(expected, (np.ndarray, np.generic)):
        assert expected == actual, f"{path}: expected {expected!r}, got {actual!r}"
        return
    e, a = np.asarray(expected), np.asarray(actual)
    assert isinstance(actual, (np.ndarray, np.generic)), f"{path}: got {type(actual).__name__}"
    assert a.dtype == e.dtype, f"{path}: dtype {a.dtype}, NumPy gives {e.dtype}"
    assert a.shape == e.shape, f"{path}: shape {a.shape}, NumPy gives {e.shape}"
    if e.dtype.kind in "biu":
        np.testing.assert_array_equal(a, e, err_msg=path)
        return
    tol = rtol if rtol is not None else (TRANSCENDENTAL_TOL if transcendental else TOL)[e.dtype]
    np.testing.assert_allclose(a, e, rtol=tol, atol=tol, equal_nan=True, err_msg=path)
    if e.dtype.kind == "f":      # NaN positions must agree exactly (assert_allclose checks it too)
        np.testing.assert_array_equal(np.isnan(a), np.isnan(e), err_msg=path)


def check(fn, *args, transcendental=False, rtol=None, **kwargs):
    """``fn(*args, **kwargs)`` under NumPy and under ``nbxla.jit``: same result, same writes."""
    eager_args, eager_kwargs = _copy(args), _copy(kwargs)
    jit_args, jit_kwargs = _copy(args), _copy(kwargs)
    with quiet():
        expected = fn(*eager_args, **eager_kwargs)
        actual = jit(fn)(*jit_args, **jit_kwargs)
    assert_same(expected, actual, transcendental=transcendental, rtol=rtol)
    assert_same(eager_args, jit_args, transcendental=transcendental, rtol=rtol, path="arguments")
    assert_same(eager_kwargs, jit_kwargs, transcendental=transcendental, rtol=rtol, path="kwargs")
    return actual


def eager_error(fn, *args, **kwargs):
    """The exception type NumPy raises for ``fn(*args)``, or None."""
    try:
        with quiet():
            fn(*_copy(args), **_copy(kwargs))
    except Exception as e:  # noqa: BLE001 - we compare the type with nbxla's
        return type(e)
    return None


def check_or_same_error(fn, *args, transcendental=False, rtol=None, **kwargs):
    """Like ``check``, but where NumPy raises, nbxla must raise an error of the same kind."""
    err = eager_error(fn, *args, **kwargs)
    if err is None:
        return check(fn, *args, transcendental=transcendental, rtol=rtol, **kwargs)
    try:
        with quiet():
            jit(fn)(*_copy(args), **_copy(kwargs))
    except Exception as e:  # noqa: BLE001
        assert isinstance(e, err) or issubclass(err, type(e)) or \
            (issubclass(err, (TypeError, ValueError, IndexError)) and
             isinstance(e, (TypeError, ValueError, IndexError))), \
            f"NumPy raises {err.__name__}, nbxla raised {type(e).__name__}: {e}"
        return None
    raise AssertionError(f"NumPy raises {err.__name__}, nbxla did not")


# ---- hypothesis strategies ---------------------------------------------------------------------

def shapes(min_dims=0, max_dims=3, min_side=0, max_side=4):
    return hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side,
                            max_side=max_side)


def elements(dtype, specials=False):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return st.booleans()
    if dtype.kind in "iu":
        return st.integers(-20 if dtype.kind == "i" else 0, 20)
    if dtype.kind == "c":
        part = elements(np.float32 if dtype == np.complex64 else np.float64, specials)
        return st.builds(complex, part, part)
    width = 32 if dtype == np.float32 else 64 if dtype == np.float64 else 16
    finite = st.floats(-10, 10, width=width)
    if specials:
        return st.one_of(finite, st.sampled_from([0.0, -0.0, np.nan, np.inf, -np.inf]))
    return finite


def arrays(dtype, shape, specials=False):
    return hnp.arrays(np.dtype(dtype), shape, elements=elements(dtype, specials))


def array_of(dtypes=DTYPES, min_dims=0, max_dims=3, min_side=0, max_side=4, specials=False):
    """(array) with a drawn dtype and shape."""
    return st.sampled_from(dtypes).flatmap(
        lambda dt: shapes(min_dims, max_dims, min_side, max_side).flatmap(
            lambda shp: arrays(dt, shp, specials)))


@st.composite
def broadcast_pair(draw, dtypes_a=DTYPES, dtypes_b=None, specials=False, max_dims=3):
    """Two arrays whose shapes broadcast together (possibly of different rank)."""
    sa, sb = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=max_dims,
                                                     max_side=4)).input_shapes
    da = draw(st.sampled_from(dtypes_a))
    db = draw(st.sampled_from(dtypes_b or dtypes_a))
    return draw(arrays(da, sa, specials)), draw(arrays(db, sb, specials))
