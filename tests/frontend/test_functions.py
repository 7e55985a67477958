"""NumPy functions (shape manipulation, joining, selection, linear algebra, sorting, statistics)
against eager NumPy, through ``nbxla.jit``."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nbxla
from tests.frontend_util import (DTYPES, NUMERIC, array_of, arrays, broadcast_pair, check,
                                 check_or_same_error, shapes, jit)

FEW = settings(max_examples=12, deadline=None)
F64 = np.dtype(np.float64)


def _x(shape=(3, 4), dtype=np.float64):
    return (np.arange(int(np.prod(shape))) % 7 - 3).astype(dtype).reshape(shape)


# ---- shapes and views --------------------------------------------------------------------------

@FEW
@given(x=array_of(max_dims=4))
def test_reshape_ravel_flatten_transpose(x):
    check(lambda a: (a.reshape(-1), np.reshape(a, (1,) + a.shape), a.ravel(), a.flatten(), a.T,
                     np.transpose(a), a.transpose(*reversed(range(a.ndim))), np.ravel(a.T)), x)


@FEW
@given(x=array_of(min_dims=2, max_dims=4))
def test_swapaxes_moveaxis_expand_squeeze(x):
    check(lambda a: (np.swapaxes(a, 0, -1), a.swapaxes(1, 0), np.moveaxis(a, 0, -1),
                     np.moveaxis(a, [0, 1], [-1, -2]), np.expand_dims(a, 1),
                     np.expand_dims(a, (0, -1)), np.squeeze(np.expand_dims(a, 2)),
                     np.expand_dims(a, -1).squeeze(-1)), x)


def test_squeeze_and_shape_queries():
    x = np.zeros((1, 3, 1, 2))
    check(lambda a: (a.squeeze(), np.squeeze(a, axis=(0, 2)), np.shape(a), np.ndim(a),
                     np.size(a), np.size(a, 1), a.shape, a.ndim, a.size, a.dtype, a.itemsize,
                     a.nbytes, len(a)), x)
    check_or_same_error(lambda a: np.squeeze(a, 1), x)


@FEW
@given(pair=broadcast_pair())
def test_broadcast_to(pair):
    a, b = pair
    shape = np.broadcast_shapes(a.shape, b.shape)
    check(lambda x: np.broadcast_to(x, shape), a)


def test_reshape_errors_and_views():
    check_or_same_error(lambda a: a.reshape(5, -1), _x())
    check_or_same_error(lambda a: a.reshape(-1, -1), _x())

    def f(a):
        r = a.reshape(4, 3)
        r[0] = 100.0
        t = a.T.reshape(-1)      # a copy in NumPy (non-contiguous)
        return r, t
    check(f, _x())


@pytest.mark.parametrize("fn", [np.zeros_like, np.ones_like], ids=lambda f: f.__name__)
@FEW
@given(x=array_of())
def test_like_constructors(fn, x):
    check(lambda a: (fn(a), fn(a, dtype=np.float32), np.full_like(a, 7), np.full_like(a, 2.5, dtype=np.float64),
                     np.empty_like(a).shape, np.empty_like(a).dtype), x)


def test_copy_asarray_astype():
    def f(a):
        c = a.copy()
        c += 1
        e = np.copy(a)
        e[0] = -1
        return c, e, a.astype(np.int32), a.astype(bool), a.astype(np.float32)
    check(f, _x((4,)) + 0.5)


def test_asarray_of_traced_value_is_concretization_error():
    # np.asarray/np.array do not dispatch to __array_function__: NumPy asks for the values.
    with pytest.raises(nbxla.ConcretizationError, match="np.asarray"):
        jit(lambda a: np.asarray(a * 2))(np.ones(3))


# ---- joining, splitting ---------------------------------------------------------------------------

@FEW
@given(data=st.data())
def test_concatenate_stack(data):
    shape = data.draw(shapes(min_dims=1, max_dims=3))
    dts = data.draw(st.lists(st.sampled_from(DTYPES), min_size=1, max_size=3))
    xs = [data.draw(arrays(dt, shape)) for dt in dts]
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    check(lambda *a: (np.concatenate(a, axis=axis), np.stack(a), np.stack(a, axis=-1),
                      np.concatenate(a, axis=None), np.hstack(a), np.vstack(a)), *xs)


def test_stack_variants():
    a, b = _x((3,)), _x((3,)) * 2
    check(lambda x, y: (np.column_stack([x, y]), np.dstack([x, y]), np.hstack([x, 1.0 * y]),
                        np.vstack([x, y]), np.stack([x, 3 * y], axis=1),
                        np.concatenate([x, np.array([1.0, 2.0])])), a, b)
    A = _x((2, 3))
    check(lambda x: (np.column_stack([x, x]), np.dstack([x, x]), np.atleast_1d(x[0, 0]),
                     np.atleast_2d(x[0]), np.atleast_3d(x), np.atleast_3d(x[0]),
                     np.atleast_3d(x[0, 0]), np.atleast_1d(x, x[0])), A)


@pytest.mark.parametrize("sections", [2, 3, [1, 3], [0, 5, 10], [2, 2]])
def test_split(sections):
    x = _x((6, 4))
    check_or_same_error(lambda a: np.split(a, sections), x)
    check(lambda a: np.array_split(a, sections, axis=1), x)
    check_or_same_error(lambda a: np.hsplit(a, 2), x)
    check_or_same_error(lambda a: np.vsplit(a, 3), x)


def test_split_views_write_through():
    def f(a):
        top, bottom = np.split(a, 2)
        top += 100
        return bottom
    check(f, _x((4, 2)))


# ---- selection ---------------------------------------------------------------------------------

@FEW
@given(pair=broadcast_pair(), c=array_of([np.dtype(bool)], max_dims=2))
def test_where(pair, c):
    a, b = pair
    try:
        np.broadcast_shapes(a.shape, b.shape, c.shape)
    except ValueError:
        return
    check(lambda p, x, y: (np.where(p, x, y), np.where(p, x, 0), np.where(p, 1.5, y)), c, a, b)


def test_where_with_two_python_scalars():
    """Only the condition is traced: the branches still find the trace they belong to."""
    c = np.array([True, False, True])
    check(lambda p: (np.where(p, 1, 2), np.where(p, 1.5, 0), np.where(p, 1, np.float32(2))), c)


def test_copyto():
    def f(a, b):
        np.copyto(a, b)                          # broadcast
        np.copyto(a[0], 5, where=a[1] > 0.5)     # into a view, with a mask
        np.copyto(a[2], np.float32(-1))
        return a
    check(f, np.linspace(0, 1, 12).reshape(3, 4), np.linspace(1, 0, 4))
    check_or_same_error(lambda a: np.copyto(a, 1.5), np.zeros(3, np.int64))   # same_kind
    with pytest.raises(nbxla.NotCompilableError, match="not traced"):
        jit(lambda a: np.copyto(np.zeros(3), a))(np.ones(3))


def test_where_one_argument_not_compilable():
    with pytest.raises(nbxla.NotCompilableError, match="output shape depends on the data"):
        jit(lambda a: np.where(a > 0))(np.ones(3))


@FEW
@given(x=array_of(NUMERIC), lo=st.integers(-5, 0), hi=st.integers(0, 5))
def test_clip(x, lo, hi):
    check(lambda a: (np.clip(a, lo, hi), a.clip(lo, hi), np.clip(a, None, hi), a.clip(min=lo),
                     np.clip(a, np.float32(lo), hi)), x)


def test_select():
    x = _x((5,))
    check(lambda a: np.select([a < -1, a > 1], [a * 10, a + 0.5], default=-7), x)
    check(lambda a: np.select([a < 0], [a]), x.astype(np.int32))


# ---- take, take_along_axis, indexing helpers ---------------------------------------------------

@pytest.mark.parametrize("mode", ["raise", "wrap", "clip"])
def test_take_constant_indices(mode):
    x = _x((3, 4))
    idx = [0, -1, 2] if mode == "raise" else [0, -1, 7, -9]
    check(lambda a: (np.take(a, idx, mode=mode), np.take(a, idx, axis=1, mode=mode),
                     a.take(np.array([[1, 0]]), axis=0, mode=mode), np.take(a, 5, mode=mode)), x)
    check_or_same_error(lambda a: np.take(a, [12]), x)


@pytest.mark.parametrize("mode", ["raise", "wrap", "clip"])
def test_take_traced_indices(mode):
    x = _x((3, 4))
    idx = np.array([0, -1, 2, 1], np.int32) if mode == "raise" else np.array([0, -1, 7, -9])
    check(lambda a, i: (np.take(a, i, mode=mode), np.take(a, i, axis=1, mode=mode),
                        np.take(a, i.reshape(2, 2), axis=-1, mode=mode)), x, idx)


def test_take_traced_out_of_range_raises_or_clamps_with_the_flag(monkeypatch):
    # NumPy raises IndexError, and so does the compiled program (checked after the run);
    # NBXLA_FLAGS=--clamp_indices=true clamps as XLA does.
    with pytest.raises(IndexError, match="index 10 is out of bounds for axis 0 with size 4"):
        jit(lambda a, i: np.take(a, i))(np.arange(4.0), np.array([10, -10]))
    monkeypatch.setenv("NBXLA_FLAGS", "--clamp_indices=true")
    got = jit(lambda a, i: np.take(a, i))(np.arange(4.0), np.array([10, -10]))
    np.testing.assert_array_equal(got, [3.0, 0.0])


@FEW
@given(x=array_of([F64, np.dtype(np.int32)], min_dims=1, min_side=1), data=st.data())
def test_take_along_axis(x, data):
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    n = x.shape[axis]
    shape = list(x.shape)
    shape[axis] = data.draw(st.integers(0, 4))
    idx = data.draw(arrays(np.int64, tuple(shape)).map(lambda i: i % n - (i % 2) * n))
    check(lambda a, i: (np.take_along_axis(a, i, axis=axis),
                        np.take_along_axis(a, np.argsort(a, axis=axis), axis=axis)), x, idx)


def test_take_along_axis_none_and_broadcast():
    x = _x((3, 4))
    check(lambda a: np.take_along_axis(a, np.array([5, 0, -1]), axis=None), x)
    check(lambda a, i: np.take_along_axis(a, i, axis=1), x, np.array([[0, 3]]))


def test_diagonal_trace_diag():
    x = _x((3, 4))
    check(lambda a: (np.diagonal(a), a.diagonal(1), np.diagonal(a, -1), np.trace(a), a.trace(-2),
                     np.trace(a.astype(np.int32)), np.trace(a, dtype=np.float32), np.diag(a),
                     np.diag(a, 2), np.diag(a[0]), np.diag(a[0], 1), np.diag(a[1], -2)), x)
    y = _x((2, 3, 4))
    check(lambda a: (np.diagonal(a, 0, 1, 2), np.diagonal(a, 1, 2, 0), np.trace(a, axis1=1, axis2=2)), y)


# ---- flips, rolls, pads, repeats, tiles ----------------------------------------------------------

@FEW
@given(x=array_of(min_dims=1, max_dims=3))
def test_flip(x):
    check(lambda a: (np.flip(a), np.flip(a, 0), np.flip(a, -1), np.flipud(a)), x)
    if x.ndim >= 2:
        check(lambda a: (np.fliplr(a), np.flip(a, (0, 1))), x)


def test_flip_is_a_view():
    def f(a):
        v = np.flip(a, 0)
        v[0] = -1
        return v
    check(f, _x((3, 2)))


@FEW
@given(x=array_of(min_dims=1, max_dims=3), shift=st.integers(-7, 7), data=st.data())
def test_roll(x, shift, data):
    axis = data.draw(st.one_of(st.none(), st.integers(-x.ndim, x.ndim - 1)))
    check(lambda a: np.roll(a, shift, axis=axis), x)


def test_roll_multiple_axes():
    check(lambda a: (np.roll(a, (1, -2), axis=(0, 1)), np.roll(a, 1, axis=(0, 0))), _x((3, 4)))


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "symmetric", "wrap"])
@FEW
@given(x=array_of([np.dtype(np.int32), F64], min_dims=1, max_dims=2, min_side=2), data=st.data())
def test_pad(mode, x, data):
    widths = data.draw(st.one_of(st.integers(0, 2),
                                 st.tuples(st.integers(0, 2), st.integers(0, 2)),
                                 st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2)),
                                          min_size=x.ndim, max_size=x.ndim).map(tuple)))
    if mode == "constant":
        check(lambda a: (np.pad(a, widths), np.pad(a, widths, constant_values=7),
                         np.pad(a, widths, constant_values=((1, 2),) * a.ndim)), x)
    else:
        check(lambda a: np.pad(a, widths, mode=mode), x)


def test_pad_traced_constant_and_unsupported_mode():
    check(lambda a, v: np.pad(a, 1, constant_values=v), _x((2, 2)), np.float64(9))
    with pytest.raises(nbxla.NotCompilableError, match="np.pad\\(mode='median'\\)"):
        jit(lambda a: np.pad(a, 1, mode="median"))(_x((2, 2)))


@pytest.mark.parametrize("repeats, axis", [(2, None), (3, 0), ([1, 0, 2], 0), ([2, 1, 0, 1], 1), (0, 1)])
def test_repeat(repeats, axis):
    check(lambda a: (np.repeat(a, repeats, axis=axis), a.repeat(repeats, axis)), _x((3, 4)))


@pytest.mark.parametrize("reps", [2, (2, 1), (1, 3), (2, 1, 2), (0, 2)])
def test_tile(reps):
    check(lambda a: (np.tile(a, reps), np.tile(a[0], reps)), _x((2, 3)))


def test_meshgrid():
    x, y, z = np.arange(3.0), np.arange(4, dtype=np.int32), np.linspace(0, 1, 2)
    check(lambda a, b, c: (np.meshgrid(a, b), np.meshgrid(a, b, indexing="ij"),
                           np.meshgrid(a, b, c), np.meshgrid(a, b, sparse=True), np.meshgrid(a)),
          x, y, z)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_diff(n):
    x = _x((3, 5)) ** 2
    check(lambda a: (np.diff(a, n), np.diff(a, n, axis=0), np.diff(a > 0, n),
                     np.diff(a, n, prepend=0), np.diff(a, n, axis=0, append=a[:1])), x)


def test_tril_triu():
    for shape in [(4, 4), (3, 5), (2, 3, 4), (4,)]:
        x = _x(shape)
        check(lambda a: (np.tril(a), np.triu(a), np.tril(a, 1), np.triu(a, -1), np.tril(a, -5),
                         np.triu(a > 0, 2)), x)


# ---- linear algebra ----------------------------------------------------------------------------

@FEW
@given(data=st.data())
def test_matmul_dot_shapes(data):
    dt = data.draw(st.sampled_from(DTYPES))
    m, k, n = (data.draw(st.integers(0, 3)) for _ in range(3))
    batch = data.draw(shapes(max_dims=2, max_side=3))
    a = data.draw(arrays(dt, batch + (m, k)))
    b = data.draw(arrays(dt, (k, n)))
    v = data.draw(arrays(dt, (k,)))
    check(lambda x, y, z: (x @ y, np.matmul(x, z), z @ y, np.dot(x, y), np.dot(z, z), x.dot(z),
                           np.inner(z, z), np.vdot(z, z), np.dot(x, 2)), a, b, v)


def test_bool_matmul_does_not_wrap():
    a = np.ones((1, 300), bool)
    check(lambda x: (x @ x.T, np.dot(x, x.T), np.einsum("ij,kj->ik", x, x)), a)


def test_dot_nd():
    check(lambda a, b: np.dot(a, b), _x((2, 3, 4)), _x((5, 4, 2)))


@pytest.mark.parametrize("axes", [0, 1, 2, ([1, 0], [0, 1]), ((2,), (0,)), ([-1], [0])])
def test_tensordot(axes):
    a, b = _x((3, 2, 4)), _x((4, 2, 5)).reshape(2, 4, 5)
    if axes in (2, ([1, 0], [0, 1])):
        b = _x((2, 3, 5)) if axes == ([1, 0], [0, 1]) else _x((2, 4, 5))
    if axes == ((2,), (0,)) or axes == ([-1], [0]):
        b = _x((4, 5))
    if axes == 1:
        b = _x((4, 6))
    check(lambda x, y: np.tensordot(x, y, axes), a, b)


def test_outer():
    check(lambda a, b: (np.outer(a, b), np.outer(a > 0, b > 0), np.outer(a.reshape(2, 2), b)),
          _x((4,)), _x((3,), np.int32))


EINSUMS = [
    ("ij,jk->ik", [(2, 3), (3, 4)]), ("ij,jk", [(2, 3), (3, 4)]), ("ij->ji", [(2, 3)]),
    ("ij->", [(2, 3)]), ("ij->j", [(2, 3)]), ("i,i->", [(3,), (3,)]), ("i,j->ij", [(2,), (3,)]),
    ("bij,bjk->bik", [(2, 2, 3), (2, 3, 4)]), ("bij,jk->bik", [(2, 2, 3), (3, 4)]),
    ("...ij,...jk->...ik", [(2, 2, 3), (3, 4)]), ("ij,ij->ij", [(2, 3), (2, 3)]),
    ("ij,kj->ik", [(2, 3), (4, 3)]), ("i,ij,j->", [(2,), (2, 3), (3,)]),
    ("abc,cd,db->a", [(2, 3, 4), (4, 5), (5, 3)]), ("ijk", [(2, 3, 4)]), ("kji", [(2, 3, 4)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]), ("...i,...i->...", [(3, 4), (3, 4)]),
    ("i,i", [(3,), (3,)]), ("ij,k->ijk", [(2, 1), (3,)]), ("ab,ab->", [(1, 3), (2, 3)]),
]


@pytest.mark.parametrize("subscripts, shapes_", EINSUMS, ids=[e[0] for e in EINSUMS])
@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.bool_])
def test_einsum(subscripts, shapes_, dtype):
    args = [(_x(s, dtype) if dtype != np.bool_ else _x(s) > 0) for s in shapes_]
    check(lambda *a: np.einsum(subscripts, *a), *args)


def test_einsum_repeated_index_not_compilable():
    with pytest.raises(nbxla.NotCompilableError, match="repeated index"):
        jit(lambda a: np.einsum("ii->i", a))(np.eye(3))


def test_cross():
    a, b = _x((4, 3)), _x((4, 3)) ** 2 + 1
    check(lambda x, y: (np.cross(x, y), np.cross(x[0], y[1]), np.cross(x.T, y.T, axis=0)), a, b)


NORM_CASES = [(None, None), (1, 0), (np.inf, 1), (-np.inf, -1), (0, 1), (3, 0), (None, 1),
              ("fro", None), ("fro", (0, 1)), (1, (0, 1)), (-1, (1, 0)), (np.inf, (0, 1)),
              (-np.inf, (0, 1)), (None, (1, 0))]


@pytest.mark.parametrize("ord, axis", NORM_CASES, ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.complex128])
@pytest.mark.parametrize("keepdims", [False, True])
def test_linalg_norm(ord, axis, dtype, keepdims):
    x = _x((3, 4), dtype) + (1j if dtype == np.complex128 else 0)
    check(lambda a: np.linalg.norm(a, ord, axis, keepdims), x, transcendental=True)


def test_linalg_norm_vector_default():
    check(lambda a: (np.linalg.norm(a), np.linalg.norm(a, 1), np.linalg.norm(a, np.inf)),
          _x((5,), np.float32), transcendental=True)
    with pytest.raises(nbxla.NotCompilableError, match="singular"):
        jit(lambda a: np.linalg.norm(a, 2))(_x((3, 3)))


# ---- sorting -----------------------------------------------------------------------------------

@FEW
@given(x=array_of([np.dtype(t) for t in (np.bool_, np.int32, np.int64, np.float32, np.float64)],
                  min_dims=1, max_side=6, specials=True), data=st.data())
def test_sort_argsort(x, data):
    axis = data.draw(st.one_of(st.none(), st.integers(-x.ndim, x.ndim - 1)))
    check(lambda a: (np.sort(a, axis=axis), np.argsort(a, axis=axis, kind="stable")), x)


def test_sort_method_in_place_and_nan_last():
    def f(a):
        b = np.sort(a)
        a.sort()
        return b, a.argsort(kind="stable")
    check(f, np.array([3.0, np.nan, -1.0, -0.0, 0.0, np.inf, -np.inf, np.nan, 2.0]))


def test_argsort_stable_ties():
    x = np.array([[2, 1, 2, 1, 0, 2], [5, 5, 5, 5, 5, 5]], np.int32)
    check(lambda a: (np.argsort(a, kind="stable"), np.argsort(a, axis=0, kind="stable")), x)


# ---- rounding, comparison with tolerance, complex parts -------------------------------------------

@pytest.mark.parametrize("decimals", [0, 1, 2, -1])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_round(decimals, dtype):
    x = (np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.14159, -17.25, 123.456, 0.125]) *
         (10 if dtype in (np.int32, np.int64) else 1)).astype(dtype)
    check(lambda a: (np.round(a, decimals), np.around(a, decimals), a.round(decimals)), x)


def test_isclose_allclose():
    a = np.array([1.0, np.nan, np.inf, 1e-9, 2.0])
    b = np.array([1.0 + 1e-9, np.nan, np.inf, 0.0, 2.1])
    check(lambda x, y: (np.isclose(x, y), np.isclose(x, y, equal_nan=True),
                        np.isclose(x, y, rtol=0.1), np.allclose(x, x), np.allclose(x, y),
                        np.isclose(x, 2), np.array_equal(x, x), np.array_equal(x, y, equal_nan=True)),
          a, b)
    check(lambda x, y: np.isclose(x, y), np.arange(3), np.arange(3, dtype=np.float32))


def test_real_imag_angle_conj():
    z = np.array([1 + 2j, -3 - 1j, 0j], np.complex128)
    check(lambda a: (np.real(a), np.imag(a), np.conj(a), np.angle(a), np.angle(a, deg=True),
                     a.conj(), a.conjugate(), np.iscomplexobj(a)), z)
    r = np.array([-1.0, 2.0])
    check(lambda a: (np.real(a), np.imag(a), np.conj(a), np.angle(a), a.real, a.imag), r)


def test_nan_to_num():
    check(lambda a: (np.nan_to_num(a), np.nan_to_num(a, nan=-1.0, posinf=9.0)),
          np.array([np.nan, np.inf, -np.inf, 1.0], np.float32))


# ---- statistics --------------------------------------------------------------------------------

@FEW
@given(x=array_of(DTYPES, min_dims=1, specials=True), data=st.data())
def test_nan_reductions_count_ptp(x, data):
    axis = data.draw(st.one_of(st.none(), st.integers(-x.ndim, x.ndim - 1)))
    keep = data.draw(st.booleans())
    check_or_same_error(lambda a: (np.nansum(a, axis=axis, keepdims=keep),
                                   np.nanprod(a, axis=axis), np.count_nonzero(a, axis=axis),
                                   np.count_nonzero(a, axis=axis, keepdims=keep)), x)
    if x.dtype != np.bool_ and x.size:
        check_or_same_error(lambda a: (np.ptp(a, axis=axis, keepdims=keep),
                                       np.nanmean(a, axis=axis, keepdims=keep)), x)


def test_count_nonzero_total():
    check(lambda a: np.count_nonzero(a), _x((3, 4)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_average(dtype):
    x = _x((3, 4), dtype)
    w = np.array([1.0, 2.0, 0.5, 3.0])
    w2 = np.arange(12, dtype=np.float32).reshape(3, 4) + 1
    check(lambda a, v, v2: (np.average(a), np.average(a, axis=1), np.average(a, axis=1, weights=v),
                            np.average(a, weights=v2), np.average(a, axis=0, weights=v2),
                            np.average(a, axis=1, weights=v, returned=True),
                            np.average(a, axis=0, returned=True),
                            np.average(a, axis=1, weights=v, keepdims=True)), x, w, w2)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.complex128])
@pytest.mark.parametrize("shape", [(3, 6), (4, 1), (1, 5), (5,), (0, 4)])
def test_cov(dtype, shape):
    x = (_x(shape, np.float64) * 9).astype(dtype)
    y = _x(shape, np.float64)
    for fn in (lambda a, b: np.cov(a), lambda a, b: np.cov(a, rowvar=False),
               lambda a, b: np.cov(a, bias=True), lambda a, b: np.cov(a, ddof=0),
               lambda a, b: np.cov(a, ddof=2), lambda a, b: np.cov(a, b),
               lambda a, b: np.cov(a, b, rowvar=False), lambda a, b: np.cov(a, dtype=np.float32)):
        check_or_same_error(fn, x, y)


def test_cov_with_weights_is_refused_with_the_reason():
    with pytest.raises(nbxla.NotCompilableError, match="fweights/aweights"):
        jit(lambda a: np.cov(a, aweights=np.ones(4)))(_x((3, 4)))


# ---- what is refused, and how ------------------------------------------------------------------

@pytest.mark.parametrize("fn, match", [
    (lambda a: np.unique(a), "np.unique cannot be compiled: its output shape depends on the data"),
    (lambda a: np.nonzero(a), "np.nonzero cannot be compiled"),
    (lambda a: a.nonzero(), "np.nonzero cannot be compiled"),
    (lambda a: np.argwhere(a), "np.argwhere cannot be compiled"),
    (lambda a: np.flatnonzero(a), "np.flatnonzero cannot be compiled"),
    (lambda a: np.histogram(a, [0.0, 0.5, 1.0]), "np.histogram with explicit bin edges"),
    (lambda a: np.histogram2d(a[0], a[1]), "np.histogram2d cannot be compiled"),
    (lambda a: np.linalg.eig(a), "np.linalg.eig is not supported"),
    (lambda a: np.fft.fft(a), "np.fft.fft is not supported"),
    (lambda a: np.bincount(a.astype(int)[0]), "np.bincount cannot be compiled"),
    (lambda a: np.unique_values(a), "np.unique_values cannot be compiled"),
    (lambda a: np.convolve(a[0], a[1]), "np.convolve is not supported"),
    (lambda a: np.frexp(a), "np.frexp is not supported"),
    (lambda a: np.divide.at(a, [0], 1), "np.divide.at is not supported"),
    (lambda a: np.repeat(a, a.astype(int)[0]), "traced repeats"),
    (lambda a: np.roll(a, a.astype(int)[0, 0]), "traced shift"),
])
def test_unsupported_functions_name_themselves(fn, match):
    with pytest.raises(nbxla.NotCompilableError, match=match.replace("(", "\\(").replace(")", "\\)")):
        jit(fn)(np.eye(3))


@pytest.mark.parametrize("fn", [lambda a: float(a.sum()), lambda a: int(a[0, 0]), lambda a: a.item(),
                                lambda a: a.tolist(), lambda a: 1 if a.sum() > 0 else 0,
                                lambda a: a[0, 0] and a[1, 1], lambda a: range(a.sum())])
def test_concretization_errors(fn):
    with pytest.raises(nbxla.ConcretizationError, match="np.where"):
        jit(fn)(np.eye(3))


def test_error_points_at_the_user_line():
    def kernel(a):
        b = a * 2
        return np.unique(b)          # the offending line
    with pytest.raises(nbxla.NotCompilableError) as info:
        jit(kernel)(np.ones(3))
    assert "np.unique(b)" in str(info.value)
    assert "test_functions.py" in str(info.value)
