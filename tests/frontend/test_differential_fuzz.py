"""Differential fuzzer (issue 19): random programs drawn from the frontend's own registry
(every ufunc rule, every registered NumPy function) over random dtypes, shapes (0-d, empty,
broadcastable), views (reversed, strided, transposed) and special values (NaN, ±inf, ±0.0,
integer extremes), run eagerly by NumPy and under ``nbxla.jit``.

The promise checked: NumPy's answer (same dtype and shape, values within the per-dtype
tolerance of ``frontend_util``, NaNs in the same places), or an error: where NumPy raises,
an error of the same kind; where NumPy does not, an ``NbxlaError`` (a documented refusal)
whose message names the program's line.  Nothing else: no other exception, no wrong value.

A fixed seed in CI (300 programs on the evaluator, 60 compiled for the CPU); NBXLA_HYPOTHESIS_RANDOM=1 draws new ones and
NBXLA_HYPOTHESIS_EXAMPLES=N draws N.
"""

import functools
import inspect
import os

import numpy as np
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import nbxla
from nbxla.errors import NbxlaError
from nbxla.frontend.registry import FUNCTIONS, UFUNCS

from ..frontend_util import assert_same, jit, quiet

EXAMPLES = int(os.environ.get("NBXLA_HYPOTHESIS_EXAMPLES", "0")) or 300
DTYPES = [np.dtype(t) for t in (np.bool_, np.int8, np.uint8, np.int32, np.int64, np.uint64,
                                np.float32, np.float64, np.complex128)]
UNARY = sorted((u for u in UFUNCS if u.nin == 1), key=lambda u: u.__name__)
BINARY = sorted((u for u in UFUNCS if u.nin == 2), key=lambda u: u.__name__)
# How a registered function is called, from NumPy's own signature: arrays for its leading
# array parameters (a list of two for a sequence parameter), and ``axis`` when it has one.
_ARRAY_PARAMS = {"a", "b", "x", "y", "x1", "x2", "arr", "ary", "m", "v", "indices", "values",
                 "condition", "u", "array", "a1", "a2", "condlist", "choicelist"}
_SEQUENCE_PARAMS = {"arrays", "tup", "xi"}


def _call_pattern(fn):
    """(number of array arguments, whether they form one sequence, takes axis) or None."""
    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return None
    if params and params[0] in _SEQUENCE_PARAMS:
        return 2, True, "axis" in params
    k = 0
    while k < min(len(params), 2) and params[k] in _ARRAY_PARAMS:
        k += 1
    return (k, False, "axis" in params) if k else None
# (np.empty_like: its values are undefined, in NumPy as here.)
REGISTERED = sorted(((f, _call_pattern(f)) for f in FUNCTIONS if f is not np.empty_like and _call_pattern(f)),
                    key=lambda fp: getattr(fp[0], "__name__", repr(fp[0])))
_SPECIALS = {"f": [0.0, -0.0, np.nan, np.inf, -np.inf], "c": [complex(np.nan, 0), complex(0, np.inf), -0.0]}


def _elements(dtype):
    if dtype == np.bool_:
        return st.booleans()
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return st.one_of(st.integers(-3 if dtype.kind == "i" else 0, 5), st.sampled_from([info.min, info.max]))
    width = 32 if dtype == np.float32 else 64
    finite = st.floats(-8, 8, width=width)
    specials = st.sampled_from(_SPECIALS["f"])
    if dtype.kind == "c":
        return st.builds(complex, finite, finite) | st.sampled_from(_SPECIALS["c"])
    return finite | specials


@st.composite
def _array(draw, shape):
    dtype = draw(st.sampled_from(DTYPES))
    view = draw(st.sampled_from(["plain", "reversed", "strided", "transposed"]))
    if view == "strided":                      # every other element of a longer array
        base = draw(hnp.arrays(dtype, shape[:-1] + (2 * shape[-1],) if shape else (), elements=_elements(dtype)))
        return base[..., ::2] if shape else base
    arr = draw(hnp.arrays(dtype, shape, elements=_elements(dtype)))
    if view == "reversed" and arr.ndim:
        return arr[::-1]
    if view == "transposed" and arr.ndim >= 2:
        return np.ascontiguousarray(arr.T).T
    return arr


@st.composite
def programs(draw):
    shapes = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3,
                                                    min_side=0, max_side=3)).input_shapes
    inputs = [draw(_array(s)) for s in shapes]
    steps = []
    for k in range(draw(st.integers(1, 3))):
        n = len(inputs) + k                    # values available: inputs, then earlier steps
        kind = draw(st.sampled_from(["unary", "binary", "scalar", "function"]))
        a, b = draw(st.integers(0, n - 1)), draw(st.integers(0, n - 1))
        if kind == "unary":
            steps.append(("ufunc", draw(st.sampled_from(UNARY)), (a,), {}))
        elif kind == "binary":
            steps.append(("ufunc", draw(st.sampled_from(BINARY)), (a, b), {}))
        elif kind == "scalar":                 # a Python scalar: weak (NEP 50), maybe out of range
            value = draw(st.sampled_from([2, -1, 0, 300, 2 ** 40, 0.5, -0.0, float("nan"), 1j]))
            steps.append(("scalar", draw(st.sampled_from(BINARY)), (a,), {"value": value,
                                                                        "left": draw(st.booleans())}))
        else:
            fn, (arity, sequence, has_axis) = draw(st.sampled_from(REGISTERED))
            kwargs = {"axis": draw(st.sampled_from([0, -1, None]))} if has_axis and draw(st.booleans()) else {}
            args = (a, b)[:arity]
            steps.append(("sequence" if sequence else "function", fn, args, kwargs))
    return inputs, steps


def run(inputs, steps):
    """The program: each step reads earlier values; the result is every step's value."""
    values = list(inputs)
    for kind, fn, args, kwargs in steps:
        operands = [values[i] for i in args]
        if kind == "scalar":
            x, s = operands[0], kwargs["value"]
            values.append(fn(s, x) if kwargs["left"] else fn(x, s))   # the line errors must name
        elif kind == "sequence":
            values.append(fn(operands, **kwargs))                       # the line errors must name
        else:
            values.append(fn(*operands, **kwargs))                      # the line errors must name
    return tuple(values[len(inputs):])


def _describe(inputs, steps):
    ins = ", ".join(f"{a.dtype}{list(a.shape)}" for a in inputs)
    ops = "; ".join(f"{getattr(fn, '__name__', fn)}{args}{kwargs or ''}" for _, fn, args, kwargs in steps)
    return f"inputs {ins}: {ops}"


def _same_kind(expected: type, got: BaseException) -> bool:
    family = (TypeError, ValueError, IndexError, ArithmeticError)
    return isinstance(got, expected) or issubclass(expected, type(got)) or \
        (issubclass(expected, family) and isinstance(got, family))


_FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                     HealthCheck.filter_too_much])


@settings(_FUZZ, max_examples=EXAMPLES)
@given(program=programs())
def test_random_programs_match_numpy_or_fail_clearly(program):
    """On the reference evaluator (``NBXLA_FRONTEND_TEST_DEVICE`` picks another): the lowering."""
    _check(program, jit)


@settings(_FUZZ, max_examples=EXAMPLES // 5)
@given(program=programs())
def test_random_programs_compiled_for_the_cpu_match_numpy(program):
    """The same promise for what users run: optimized and compiled to native code."""
    _check(program, functools.partial(nbxla.jit, device="cpu"))


def _check(program, jit):
    inputs, steps = program
    what = _describe(inputs, steps)
    expected_error = None
    with quiet():
        try:
            expected = run([a.copy() for a in inputs], steps)
        except Exception as e:          # noqa: BLE001 - compared with nbxla's below
            expected_error = e
        try:
            actual = jit(run)([a.copy() for a in inputs], steps)
        except NbxlaError as e:
            event(f"refused: {type(e).__name__}" + (" (NumPy raises too)" if expected_error else ""))
            assert "test_differential_fuzz.py:" in str(e), f"{what}: no line in {type(e).__name__}: {e}"
            if expected_error is not None:
                assert _same_kind(type(expected_error), e) or not isinstance(e, (TypeError, ValueError,
                                                                                  IndexError)), \
                    f"{what}: NumPy raises {type(expected_error).__name__}, nbxla {type(e).__name__}: {e}"
            return
        except Exception as e:          # noqa: BLE001
            event("both raise")
            assert expected_error is not None, f"{what}: nbxla raised {type(e).__name__}: {e}; NumPy did not"
            assert _same_kind(type(expected_error), e), \
                f"{what}: NumPy raises {type(expected_error).__name__}: {expected_error}; " \
                f"nbxla {type(e).__name__}: {e}"
            return
    assert expected_error is None, f"{what}: NumPy raises {type(expected_error).__name__}: " \
                                   f"{expected_error}; nbxla returned {actual!r}"
    event("compared with NumPy")
    transcendental = any(getattr(fn, "__name__", "") not in _EXACT for _, fn, _, _ in steps)
    try:
        assert_same(expected, actual, transcendental=transcendental)
    except AssertionError as e:
        raise AssertionError(f"{what}: {e}") from None


# Ops whose results are exact (others may differ in the last bits from NumPy's libm).
_EXACT = {"add", "subtract", "multiply", "negative", "positive", "absolute", "maximum", "minimum",
          "equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "logical_and",
          "logical_or", "logical_xor", "logical_not", "bitwise_and", "bitwise_or", "bitwise_xor",
          "invert", "sign", "floor", "ceil", "rint", "trunc", "isnan", "isinf", "isfinite", "signbit",
          "copysign", "fmax", "fmin", "transpose", "flip", "ravel", "reshape", "where", "copy"}

