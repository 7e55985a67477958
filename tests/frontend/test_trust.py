"""NumPy's answer or a clear error (issue 19): each class of silently wrong result, stale
value and unclear error found by adversarial probes, checked against eager NumPy.  These
are also the tests behind the README's "What nbxla promises"."""

import functools
import re

import numpy as np
import pytest

import nbxla
from nbxla.errors import IndexCheckError, NbxlaError, UnsupportedInputError, ValueCheckError

from ..frontend_util import check, jit


def _fresh(fn):
    """A jit function with its own cache (entries and hit counts of this test only)."""
    return nbxla.jit(fn, device="evaluator", cache=nbxla.runtime.cache.CompilationCache())


# ---- wrong results ------------------------------------------------------------------------------

def test_lossy_convert_pair_is_kept():
    check(lambda x: x.astype(np.float64).astype(np.int64), np.array([2**53 + 1, -(2**53) - 1, 3]))
    check(lambda x: x.astype(np.float32).astype(np.int32), np.array([2**24 + 1, 7], np.int32))
    check(lambda x: x.astype(np.int64).astype(np.int8), np.array([1, -5], np.int8))


def test_complex_to_bool_is_nonzero():
    check(lambda z: z.astype(bool), np.array([1j, 2j, 0, 1 + 0j, -0.0 + 0j]))


def test_sign_of_negative_zero():
    got = check(lambda x: np.sign(x), np.array([-0.0, 0.0, -2.0, 3.0, np.nan]))
    assert not np.signbit(got[0])


@pytest.mark.parametrize("c", [0.0, -0.0])
def test_static_zero_and_negative_zero_compile_apart(c):
    f = _fresh(lambda x, c: 1 / (x * c))
    with np.errstate(divide="ignore"):
        f(np.ones(2), 0.0)
        np.testing.assert_array_equal(f(np.ones(2), c), 1 / (np.ones(2) * c))


def test_nan_static_argument_finds_its_entry_again():
    f = _fresh(lambda x, c: x + c)
    for _ in range(3):
        f(np.ones(2), float("nan"))
    assert f.cache.misses == 1 and f.cache.hits == 2


def test_integer_negative_power_raises_like_numpy():
    with pytest.raises(ValueError, match="Integers to negative integer powers"):
        np.arange(1, 4) ** np.array([-1, 2, 3])
    with pytest.raises(ValueCheckError, match="Integers to negative integer powers") as info:
        jit(lambda a, b: a ** b)(np.arange(1, 4), np.array([-1, 2, 3]))
    assert "test_trust.py:" in str(info.value)                 # the line that raised it
    with pytest.raises(ValueError, match="negative integer powers"):
        jit(lambda a: a ** -1)(np.arange(1, 4))
    check(lambda a, b: a ** b, np.arange(1, 4), np.array([0, 2, 3]))


def _add_out(a, b):
    np.add(a, b, out=a)
    return a


def test_out_casting_error_as_numpy():
    with pytest.raises(TypeError, match="Cannot cast ufunc 'add' output"):
        _add_out(np.arange(3), np.full(3, 0.5))
    a = np.arange(3)
    with pytest.raises(TypeError, match="Cannot cast ufunc 'add' output"):
        jit(_add_out)(a, np.full(3, 0.5))
    np.testing.assert_array_equal(a, [0, 1, 2])                # nothing written
    check(_add_out, np.arange(3.0), np.arange(3))


def test_matrix_and_masked_arrays_are_refused():
    with pytest.warns(PendingDeprecationWarning):
        m = np.matrix([[1, 2], [3, 4]])
    with pytest.raises(UnsupportedInputError, match="np.matrix"):
        jit(lambda a, b: a * b)(m, m)
    with pytest.raises(UnsupportedInputError, match="masked array"):
        jit(lambda a: a.sum())(np.ma.array([1, 2, 3], mask=[0, 1, 0]))


# ---- captured values: read at call time -----------------------------------------------------------

W = np.ones(3)
SCALE = 2.0


def _helper(x):
    return x * SCALE


def test_global_array_is_read_at_call_time_without_baking():
    global W
    f = _fresh(lambda x: x + W)
    x = np.arange(3.0)
    np.testing.assert_array_equal(f(x), x + 1)
    W[:] = 5                                                    # changed in place
    np.testing.assert_array_equal(f(x), x + 5)
    W = np.zeros(3)                                             # rebound
    try:
        np.testing.assert_array_equal(f(x), x)
        assert f.cache.misses == 1                              # same shape: no recompile
        hlo = f.get_compiler_ir(x)("hlo")
        assert hlo.count("parameter(") == 2 and "constant({5" not in hlo
    finally:
        W = np.ones(3)


def test_global_scalar_change_recompiles_and_names_it():
    global SCALE
    f = _fresh(lambda x: _helper(x) + 1)
    x = np.arange(3.0)
    np.testing.assert_array_equal(f(x), x * 2 + 1)
    SCALE = 3.0
    try:
        np.testing.assert_array_equal(f(x), x * 3 + 1)
        assert "SCALE: 2.0 -> 3.0 (constant)" in f.last_compilation.explanation
    finally:
        SCALE = 2.0


def test_closure_array_and_scalar_are_current_and_writes_land():
    a = np.ones(2)
    k = 1.0

    def g(y):
        a[0] += k
        return y + a
    f = _fresh(g)
    np.testing.assert_array_equal(f(np.zeros(2)), [2.0, 1.0])
    np.testing.assert_array_equal(a, [2.0, 1.0])               # the write landed in a
    k = 10.0
    np.testing.assert_array_equal(f(np.zeros(2)), [12.0, 1.0])
    assert "k: 1.0 -> 10.0" in f.last_compilation.explanation


def test_captured_mask_falls_back_to_a_constant_keyed_by_contents():
    mask = np.array([True, False, True])
    f = _fresh(lambda x: x[mask])
    np.testing.assert_array_equal(f(np.arange(3.0)), [0.0, 2.0])
    mask[1] = True
    np.testing.assert_array_equal(f(np.arange(3.0)), [0.0, 1.0, 2.0])


# ---- out-of-range indices -------------------------------------------------------------------------

@pytest.mark.parametrize("fn,idx,bad,axis", [
    (lambda a, i: a[i], np.array([1, 7]), 7, 0),
    (lambda a, i: a[..., i], np.array([[0], [-6]]), -6, 0),
    (lambda a, i: np.take(a, i), np.array([5]), 5, 0),
])
def test_out_of_range_traced_index_raises_index_error(fn, idx, bad, axis):
    a = np.arange(5.0)
    with pytest.raises(IndexError):
        fn(a, idx)
    with pytest.raises(IndexCheckError, match=rf"index {bad} is out of bounds for axis {axis} "
                                              r"with size 5") as info:
        jit(fn)(a, idx)
    assert "test_trust.py:" in str(info.value) and "--clamp_indices" in str(info.value)


def test_out_of_range_write_raises_before_writing():
    def put(a, i):
        a[i] = 0
        return a
    a = np.arange(5.0)
    with pytest.raises(IndexError, match="index 9"):
        jit(put)(a, np.array([0, 9]))
    np.testing.assert_array_equal(a, np.arange(5.0))
    check(put, np.arange(5.0), np.array([0, -1]))


def test_clamp_indices_flag_opts_out(monkeypatch):
    monkeypatch.setenv("NBXLA_FLAGS", "--clamp_indices=true")
    np.testing.assert_array_equal(jit(lambda a, i: a[i])(np.arange(5.0), np.array([1, 7])), [1.0, 4.0])


# ---- clear errors, or NumPy's answer ---------------------------------------------------------------

def test_python_ints_outside_the_dtype_compare_and_clip_as_numpy_2():
    u8 = np.arange(3, dtype=np.uint8)
    check(lambda a: (a == 300, a != 300, a < 300, -1 < a, a >= -1, 300 > a), u8)
    check(lambda a: (np.clip(a, -5, 300), np.clip(a, 1, 300), np.clip(a, -5, 1)), u8)
    with pytest.raises(OverflowError):                          # NumPy raises here too
        jit(lambda a: a + 300)(u8)


def test_too_many_dimensions_big_endian_are_clear():
    with pytest.raises(UnsupportedInputError, match="33 dimensions"):
        jit(lambda a: a + 1)(np.ones((1,) * 33))
    with pytest.raises(UnsupportedInputError, match="byte order"):
        jit(lambda a: a + 1)(np.arange(3, dtype=">f8"))


def test_jit_of_partial_and_numpy_functions():
    np.testing.assert_array_equal(jit(functools.partial(lambda a, k: a * k, k=3))(np.ones(2)), [3, 3])
    assert jit(np.sum)(np.ones(3)) == 3.0


def test_fstring_of_traced_value_names_the_line():
    with pytest.raises(NbxlaError, match="formatted") as info:
        jit(lambda a: f"{a.sum():.2f}")(np.ones(3))
    assert re.search(r"test_trust\.py:\d+", str(info.value))


def test_concatenating_a_thousand_computed_pieces():
    pieces = [np.full(2, i, float) for i in range(1100)]
    f = nbxla.jit(lambda ps: np.concatenate([p * 2 for p in ps]))    # the CPU backend
    np.testing.assert_array_equal(f(pieces), np.concatenate([p * 2 for p in pieces]))


def test_allocation_failure_names_the_users_shape():
    f = nbxla.jit(lambda a, b: np.outer(a, b) + 1)
    with pytest.raises(NbxlaError, match=r"f64\[3000000,3000000\].*test_trust\.py:\d+"):
        f(np.ones(3_000_000), np.ones(3_000_000))


@pytest.mark.parametrize("ufunc", [np.arcsinh, np.log10, np.rint, np.maximum, np.less])
def test_complex_inputs_to_real_only_lowerings_are_refused_at_the_line(ufunc):
    z = np.array([0.5 + 0.5j, -1.2 + 0.3j])
    with pytest.raises(NbxlaError, match=f"np.{ufunc.__name__} of complex arrays") as info:
        jit(lambda a: ufunc(*[a] * ufunc.nin))(z)
    assert "test_trust.py:" in str(info.value)


def test_cell_index_check_raises_and_leaves_the_namespace_alone():
    from nbxla.cell import run_cell
    ns = {"np": np, "a": np.arange(5.0), "i": np.array([0, 9])}
    with pytest.raises(IndexError, match="index 9 is out of bounds for axis 0 with size 5"):
        run_cell("a[i] = 1.0\nb = a * 2", ns, label="trust")
    np.testing.assert_array_equal(ns["a"], np.arange(5.0))
    assert "b" not in ns


def test_cell_constants_negative_zero_and_nan():
    from nbxla.cell import run_cell
    ns = {"np": np, "x": np.ones(2), "c": 0.0}
    with np.errstate(divide="ignore"):
        run_cell("y = 1 / (x * c)", ns, label="trust")
        np.testing.assert_array_equal(ns["y"], [np.inf, np.inf])
        ns["c"] = -0.0
        run_cell("y = 1 / (x * c)", ns, label="trust")
    np.testing.assert_array_equal(ns["y"], [-np.inf, -np.inf])


def test_cell_matrix_input_is_refused_by_name():
    from nbxla.cell import run_cell
    with pytest.warns(PendingDeprecationWarning):
        m = np.matrix([[1, 2], [3, 4]])
    with pytest.raises(UnsupportedInputError, match="^m is an np.matrix"):
        run_cell("y = m * m", {"np": np, "m": m}, label="trust")


def test_complex_sign_with_infinite_parts():
    check(lambda z: np.sign(z), np.array([complex(0, np.inf), complex(np.inf, 1), complex(np.inf, np.inf),
                                          complex(-np.inf, np.nan), complex(np.nan, 0), -0.0 + 0j, 3 - 4j]))


LABELS = np.array(["a", "b"])


def test_captured_non_numeric_arrays_are_left_alone():
    f = _fresh(lambda x: x * len(LABELS))
    np.testing.assert_array_equal(f(np.ones(2)), [2.0, 2.0])


def _outer_helper(x):
    return _helper(x) + _helper(x)


def test_a_helper_reached_twice_reads_current_values_on_both_paths():
    global SCALE
    f = _fresh(lambda x: _outer_helper(x) + _helper(x))
    x = np.ones(2)
    np.testing.assert_array_equal(f(x), [6.0, 6.0])
    SCALE = 5.0
    try:
        np.testing.assert_array_equal(f(x), [15.0, 15.0])
    finally:
        SCALE = 2.0


def test_cpu_all_beside_int8_diff():
    """Found by the differential fuzzer: a size-1 output read straight from the input beside a
    full reduction went into the reduction's finish kernel, which sees only the reductions."""
    x = np.array([0, 1], np.int8)
    got = nbxla.jit(lambda a: (np.all(a), np.diff(a)), device="cpu")(x)
    np.testing.assert_array_equal(got[1], np.diff(x))
    got = nbxla.jit(lambda a: (a.sum(), a[1:] * 2), device="cpu")(np.arange(2.0))
    assert got[0] == 1.0 and got[1].tolist() == [2.0]
