"""Indexing, item assignment and views against eager NumPy, including writes into arguments."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nbxla
from tests.frontend_util import DTYPES, array_of, check, check_or_same_error, jit

FEW = settings(max_examples=25, deadline=None)


@st.composite
def basic_index(draw, shape):
    """A basic index for ``shape``: ints (negative too), slices with any step, None, ..."""
    key, dims = [], list(shape)
    use_ellipsis = draw(st.booleans()) and len(dims) > 0
    ellipsis_at = draw(st.integers(0, len(dims))) if use_ellipsis else -1
    for d, n in enumerate(dims):
        if d == ellipsis_at:
            key.append(Ellipsis)
            break
        if draw(st.integers(0, 5)) == 0:
            key.append(None)
        kind = draw(st.sampled_from(["int", "slice", "full"])) if n > 0 else "slice"
        if kind == "int":
            key.append(draw(st.integers(-n, n - 1)))
        elif kind == "full":
            key.append(slice(None))
        else:
            bound = st.one_of(st.none(), st.integers(-n - 2, n + 2))
            step = draw(st.one_of(st.none(), st.sampled_from([1, 2, 3, -1, -2])))
            key.append(slice(draw(bound), draw(bound), step))
    if draw(st.booleans()):
        key.append(None)
    return tuple(key)


@st.composite
def array_and_index(draw, dtypes=DTYPES):
    x = draw(array_of(dtypes, max_dims=3, max_side=5))
    return x, draw(basic_index(x.shape))


@FEW
@given(xk=array_and_index())
def test_basic_getitem(xk):
    x, key = xk
    check(lambda a: a[key], x)


@FEW
@given(xk=array_and_index(), value=st.integers(-5, 5))
def test_basic_setitem_scalar_on_argument(xk, value):
    x, key = xk

    def f(a):
        a[key] = value
        return a.sum()
    check_or_same_error(f, x)


@FEW
@given(xk=array_and_index([np.dtype(np.int32), np.dtype(np.float64)]))
def test_basic_setitem_array_and_augmented(xk):
    x, key = xk
    shape = np.empty(x.shape)[key].shape
    v = np.arange(int(np.prod(shape)), dtype=x.dtype).reshape(shape)

    def f(a, v):
        a[key] += v
        b = a.copy()
        b[key] = v * 2
        return b
    check_or_same_error(f, x, v)


def test_int_and_negative_indices():
    x = np.arange(24.0).reshape(2, 3, 4)
    check(lambda a: (a[0], a[-1], a[1, -2], a[-1, -1, -1], a[0][1][2], a[..., -1], a[None, 1, ..., None]), x)
    check_or_same_error(lambda a: a[2], x)
    check_or_same_error(lambda a: a[0, 0, 0, 0], x)


def test_stepped_and_reversed_slices():
    x = np.arange(30).reshape(5, 6)
    check(lambda a: (a[::2], a[::-1], a[1::-2, ::3], a[-2:0:-1, 4:1:-2], a[10:], a[:, 3:3],
                     a[::-1, ::-1].T), x)


CONSTANT_KEYS = [
    ([0, 2, 2],), (np.array([1, -1]),), (slice(None), [2, 0]), ([0, 1], [1, 2]),
    (np.array([[0, 1], [1, 0]]),), (Ellipsis, [1]), ([0, 1], slice(1, None), ),
    (np.array([True, False, True, True]),), (np.array([[True, False, True], [False, True, True],
                                                       [True, True, False], [False] * 3]),),
    (1, [2, 0]), ([[0], [1]], [1, 2]), (slice(None), None, [0, 2]),
]


@pytest.mark.parametrize("key", CONSTANT_KEYS, ids=str)
def test_constant_advanced_indexing(key):
    x = np.arange(12.0).reshape(4, 3)
    check(lambda a: a[key], x)

    def put(a):
        a[key] = -1.0
        a[key] += 10.0
        return a
    check(put, x)


def test_traced_index_array():
    x = np.arange(20.0).reshape(4, 5)
    idx = np.array([3, 0, -1, 2, 2], np.int64)
    check(lambda a, i: (a[i], a[:, i], a[..., i], a[i[:2]], a[:, i.reshape(1, 5)]), x, idx)
    check(lambda a, i: (a[i], a[:, i]), x, idx.astype(np.int32)[:3])
    check(lambda a, i: a[i], np.arange(5), np.array(2))


def test_traced_index_assignment():
    x = np.arange(20.0).reshape(4, 5)
    idx = np.array([3, 0, -1], np.int64)

    def f(a, i):
        a[i] = 0.0
        a[:, i] = a[:, i] * 10
        return a
    check(f, x, idx)


def test_traced_boolean_mask_selection():
    """x[mask] compiles where its length does not matter (tests/frontend/test_selection.py):
    returned, it is compacted after the run; its length used is refused."""
    np.testing.assert_array_equal(jit(lambda a: a[a > 2])(np.arange(5.0)), np.array([3.0, 4.0]))
    with pytest.raises(nbxla.NotCompilableError, match="boolean-mask"):
        jit(lambda a: a[a > 2].shape[0])(np.arange(5.0))


def test_traced_boolean_mask_assignment_of_one_value_is_a_select():
    x = np.linspace(-2, 2, 12).reshape(3, 4)

    def f(a, b, rows):
        a[a < 0] = 0                        # a Python scalar, cast like NumPy (int -> float)
        a[a > 1.5] = np.float32(1.5)
        b[b % 3 == 0] = -1.7                # a float into ints: truncated, as NumPy casts
        a[rows] = np.arange(4.0)            # a row mask: one value per column
        a[rows] = np.ones((1, 4)) * 7
        return a, b
    check(f, x, np.arange(12).reshape(3, 4), np.array([True, False, True]))
    check_or_same_error(lambda a, m: a.__setitem__(m, 1.0), x, np.array([True, False]))
    with pytest.raises(nbxla.NotCompilableError, match="one value per selected element") as info:
        jit(lambda a, v: a.__setitem__(a > 0, v))(x, np.ones(6))
    assert "np.where" in info.value.hint


def test_arrays_made_inside_take_traced_values():
    """Create-then-fill: a NumPy array made inside the compiled code becomes traced on its
    first traced write (``control.setitem``)."""
    def made_inside(a):
        out = np.zeros(3)
        out[0] = a.sum()
        return out

    def sliced(a):
        out = np.empty((2, 3))
        out[1:] = a
        out[0] = 1.0
        return out

    def augmented(a):
        out = np.zeros(3)
        out += a
        return out
    for fn in (made_inside, sliced, augmented):
        check(fn, np.arange(3.0))


GLOBAL_OUT = np.zeros(3)


def test_writing_traced_values_into_an_untraced_array_names_the_fix():
    def into_view(a):
        out = np.zeros((3, 2))
        row = out.T[0]
        row[1] = a.sum()                    # a view through .T is not followed: cannot become traced

    with pytest.raises(nbxla.NotCompilableError, match="into a NumPy array that is not traced") as info:
        jit(into_view)(np.ones(3))
    assert "np.zeros_like(x, shape=" in info.value.hint
    assert info.value.location.source.strip().startswith("row")

    def into_global(a):
        GLOBAL_OUT[0] = a.sum()             # a global array is an implicit argument: the write lands
    GLOBAL_OUT[:] = 0
    jit(into_global)(np.ones(3))
    assert GLOBAL_OUT[0] == 3
    with pytest.raises(nbxla.ConcretizationError, match=r"float\(\) of a traced array"):
        jit(lambda a: float(a.sum()))(np.ones(3))      # not a write: the usual message


def test_two_traced_index_arrays_not_compilable():
    f = jit(lambda a, i, j: a[i, j])
    with pytest.raises(nbxla.NotCompilableError, match="one index array"):
        f(np.ones((3, 3)), np.array([0, 1]), np.array([1, 2]))


def test_slice_bound_read_from_data_is_not_compilable():
    f = jit(lambda a, i: a[i.sum():])
    with pytest.raises(nbxla.NotCompilableError, match="depends on the data"):
        f(np.ones(5), np.array([1, 1]))


# ---- writes into arguments and views ----------------------------------------------------------

def test_augmented_assignment_on_argument():
    def f(a, b):
        a += b
        a *= 2
        return None
    check(f, np.arange(6.0).reshape(2, 3), np.ones(3))


def test_slice_write_into_argument():
    def f(u):
        u[1:-1] += 0.25 * (u[:-2] - 2 * u[1:-1] + u[2:])
        u[0] = u[-1] = 0
    check(f, np.linspace(0, 1, 9))


def test_full_assign_pattern():
    def gemm(C, A, B, alpha, beta):
        C[:] = alpha * A @ B + beta * C
    rng = np.random.default_rng(0)
    check(gemm, rng.random((3, 4)), rng.random((3, 5)), rng.random((5, 4)), 1.5, 0.5)


def test_view_write_changes_base():
    def f(a):
        v = a[1:]
        v += 1
        w = a[:, ::-1]
        w[0] = 100
        return v, w
    check(f, np.arange(12).reshape(3, 4))


def test_transpose_view_write():
    def f(a):
        a.T[0] = 1
        t = a.T
        t[1, 2] = -5
        return t
    check(f, np.zeros((3, 4)))


def test_writes_visible_through_earlier_view():
    def f(a):
        v = a[::2]
        r = a.reshape(2, 6)
        a[0] = 99
        a[-1] += 1
        return v.copy(), r, v.sum(), r.T
    check(f, np.arange(12.0).reshape(4, 3))


def test_view_of_view_chain():
    def f(a):
        v = a[1:][:, 1:].T
        v[0] += 10
        x = a.reshape(-1)
        x[::5] = -1
        return v
    check(f, np.arange(16).reshape(4, 4))


def test_setitem_casts_value_like_numpy():
    def f(a, b):
        a[0] = 3.7          # float into int array truncates
        b[:] = True
        return a, b
    check(f, np.zeros(3, np.int32), np.zeros(2, np.float32))


def test_inplace_same_kind_error():
    def f(a):
        a += 1.5
    check_or_same_error(f, np.zeros(3, np.int32))


def test_ufunc_out_into_argument():
    def f(a, b):
        np.add(a, b, out=a)
        np.sqrt(b, out=b)
        np.multiply(a[0], 2, out=a[0])
    check(f, np.arange(6.0).reshape(2, 3), np.arange(3.0))


def test_same_array_passed_twice():
    x = np.arange(4.0)

    def f(a, b):
        a += 1
        return b * 1
    expected_x = x.copy()
    expected = f(expected_x, expected_x)
    got = jit(f)(x, x)
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(x, expected_x)


def test_overlapping_arguments_refused():
    x = np.arange(6.0)

    def f(a, b):
        a += 1
        return b
    with pytest.raises(nbxla.NotCompilableError, match="shares its memory"):
        jit(f)(x[:4], x[2:])


def test_write_to_readonly_argument():
    x = np.arange(3.0)
    x.flags.writeable = False

    def f(a):
        a += 1
    with pytest.raises(ValueError, match="read-only"):
        jit(f)(x)


def test_write_through_broadcast_view_refused():
    def f(a):
        b = np.broadcast_to(a, (2, 3))
        b[0] = 1
    with pytest.raises((ValueError, nbxla.NotCompilableError)):
        jit(f)(np.zeros(3))


def test_iteration_and_len():
    check(lambda a: [r.sum() for r in a] + [len(a)], np.arange(6.0).reshape(3, 2))
