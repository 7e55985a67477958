"""Column reductions over few columns (grouped rows, split across threads) against the
evaluator, NumPy and a float64 reference."""

import numpy as np
import pytest

import nbxla
from nbxla.codegen import column_groups, column_reductions
from nbxla.runtime.cache import CompilationCache

from tests.codegen.test_cpu import assert_all_native


def _jit(fn, device="cpu"):
    return nbxla.jit(fn, device=device, cache=CompilationCache())


def _kernel_styles(f):
    return {s.style for s in f.last_compilation.executable.native.kernels.specs.values()}


@pytest.mark.parametrize("columns", [1, 2, 3, 4, 5, 7, 16, 17, 31, 32])
@pytest.mark.parametrize("rows", [20_000, 65_537])
def test_sums_are_accurate_and_grouped(columns, rows):
    x = np.random.default_rng(columns).random((rows, columns), dtype=np.float32) + np.float32(0.5)
    f = _jit(lambda a: a.sum(axis=0))
    got = f(x)
    exact = x.astype(np.float64).sum(axis=0)
    numpy_error = np.abs(x.sum(axis=0) - exact) / exact
    assert np.all(np.abs(got - exact) / exact <= np.maximum(2 * numpy_error, 1e-6))
    assert_all_native(f.last_compilation)
    assert "full-reduce" in _kernel_styles(f)          # the grouped kernel, not the column one


@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.int64, np.uint8, np.float32])
@pytest.mark.parametrize("op", ["max", "min", "prod", "sum"])
def test_reducers_and_dtypes_match_the_evaluator(dtype, op):
    rng = np.random.default_rng(1)
    x = (rng.random((40_001, 3)) * 4).astype(dtype)
    if np.dtype(dtype).kind == "f":
        x[17, 1] = np.nan
        if op == "prod":
            x = (x / 3 + 0.7).astype(dtype)
    fn = {"max": lambda a: a.max(axis=0), "min": lambda a: a.min(axis=0),
          "prod": lambda a: np.prod(a, axis=0),
          "sum": lambda a: a.sum(axis=0)}[op]
    cpu, ref = _jit(fn), _jit(fn, "evaluator")
    got, want = cpu(x), ref(x)
    assert got.dtype == want.dtype
    if np.dtype(dtype).kind == "f" and op in ("sum", "prod"):
        np.testing.assert_allclose(got, want, rtol=2e-5 if dtype == np.float32 else 1e-12)
    else:
        np.testing.assert_array_equal(got, want)        # ints wrap the same; NaN propagates
    assert_all_native(cpu.last_compilation)


def test_boolean_any_all():
    x = np.zeros((70_000, 5), bool)
    x[69_999, 1] = True            # in the rows left over after the last whole group
    x[123, 3] = True
    x[:, 4] = True
    f = _jit(lambda a: (a.any(axis=0), a.all(axis=0)))
    anys, alls = f(x)
    np.testing.assert_array_equal(anys, x.any(axis=0))
    np.testing.assert_array_equal(alls, x.all(axis=0))


def test_fused_input_epilogue_keepdims_and_three_dims():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((300, 50, 3)).astype(np.float32)
    bias = rng.standard_normal(3).astype(np.float32)
    f = _jit(lambda a, c: np.mean(a * a + 1, axis=(0, 1), keepdims=True) * 2 + c)
    got = f(x, bias)
    want = np.mean((x * x + 1).astype(np.float64), axis=(0, 1), keepdims=True) * 2 + bias
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert got.shape == (1, 1, 3)
    assert "full-reduce" in _kernel_styles(f)


def test_threads_on_and_off_agree(monkeypatch):
    from nbxla.runtime import cpu_kernels
    x = np.random.default_rng(3).integers(0, 1000, (400_000, 4)).astype(np.int64)
    f = _jit(lambda a: (a * 3 - 1).sum(axis=0))
    threaded = f(x)
    monkeypatch.setattr(cpu_kernels, "worker_count", lambda: 1)
    single = _jit(lambda a: (a * 3 - 1).sum(axis=0))(x)
    np.testing.assert_array_equal(threaded, single)
    np.testing.assert_array_equal(threaded, (x * 3 - 1).sum(axis=0))


@pytest.mark.parametrize("columns", [1, 3, 4, 7, 32])
def test_row_vector_broadcasts_are_grouped(columns):
    rng = np.random.default_rng(columns)
    x = rng.standard_normal((50_003, columns)).astype(np.float32)
    m, w = x.mean(axis=0), rng.random(columns).astype(np.float32)
    # (one reduction per function: several in one fusion make a row kernel)
    centered = _jit(lambda a, m: ((a - m) ** 2).sum(axis=0))
    peak = _jit(lambda a, w: (a * (w * 2) + 1).max(axis=0))
    above = _jit(lambda a, m: (a > m).any(axis=0))
    ref = ((x.astype(np.float64) - m) ** 2).sum(axis=0)
    np.testing.assert_allclose(centered(x, m), ref, rtol=1e-6)
    np.testing.assert_array_equal(peak(x, w), (x * (w * 2) + 1).max(axis=0))
    np.testing.assert_array_equal(above(x, m), (x > m).any(axis=0))
    for f in (centered, peak, above):
        assert_all_native(f.last_compilation)
        assert _kernel_styles(f) == {"full-reduce"}


def test_integer_row_vector_broadcast_in_the_leftover_rows():
    x = np.arange(3 * 40_001, dtype=np.int64).reshape(40_001, 3) % 97
    v = np.array([5, -7, 11], np.int64)
    f = _jit(lambda a, v: (a * v - 3).sum(axis=0))
    np.testing.assert_array_equal(f(x, v), (x * v - 3).sum(axis=0))
    assert "full-reduce" in _kernel_styles(f)


def test_what_is_not_grouped():
    # a column vector broadcast along the columns (not linear-indexable in a group): the
    # column kernel, which still gives the right answer
    x = np.random.default_rng(4).random((5000, 4), dtype=np.float32)
    v = np.random.default_rng(5).random(5000, dtype=np.float32)
    f = _jit(lambda a, v: (a * v[:, None]).sum(axis=0))
    np.testing.assert_allclose(f(x, v), (x * v[:, None]).sum(axis=0), rtol=1e-4)
    assert "full-reduce" not in _kernel_styles(f)
    assert column_groups.group_width(3) % 48 == 0 and column_groups.group_width(32) == 128


@pytest.mark.parametrize("shape", [(200_003, 3), (3000, 300)])
def test_variance_over_rows_is_two_row_major_passes(shape):
    """x.var(axis=0): the mean and the centered sum are separate kernels (one fused kernel
    would walk the input column by column, once per phase), and the result is at least as
    accurate as NumPy's."""
    x = np.random.default_rng(6).random(shape, dtype=np.float32)
    f = _jit(lambda a: a.var(axis=0))
    got = f(x)
    exact = x.astype(np.float64).var(axis=0)
    assert np.all(np.abs(got - exact) <= np.maximum(2 * np.abs(x.var(axis=0) - exact), 1e-7 * exact))
    comp = f.last_compilation
    assert len([i for i in comp.optimized.entry.instructions if i.opcode == "fusion"]) == 2
    assert "a reduction over leading axes is used back in the input's space" in comp.stage("fusion_report")
    if shape[1] <= column_groups.MAX_COLUMNS:
        assert _kernel_styles(f) == {"full-reduce"}


@pytest.mark.parametrize("shape,axes", [((64, 100, 8), (0,)), ((30, 16, 16, 3), (0,)), ((20_000, 4, 8), (0,)),
                                        ((50, 7, 6, 5), (0, 1))])
def test_several_kept_axes_are_flat_columns(shape, axes):
    """Reducing leading axes and keeping several (a batch's mean image): elementwise inputs
    are read as rows of flat columns (the column kernels); all forms match NumPy."""
    rng = np.random.default_rng(8)
    x = rng.random(shape, dtype=np.float32)
    v = rng.random(shape[len(axes):], dtype=np.float32)
    for fn, args in [(lambda a: (a * 2).sum(axis=axes), (x,)), (lambda a: a.max(axis=axes), (x,)),
                     (lambda a, v: ((a - v) ** 2).mean(axis=axes, keepdims=True), (x, v))]:
        f = _jit(fn)
        got = f(*args)
        np.testing.assert_allclose(got, fn(*[a.astype(np.float64) for a in args]), rtol=2e-6)
        assert_all_native(f.last_compilation)
    linear = _jit(lambda a: (a * 2).sum(axis=axes))
    linear(x)
    fusion = next(i for i in linear.last_compilation.optimized.entry.instructions if i.opcode == "fusion")
    assert column_reductions.column_plan(fusion.attrs["calls"]) is not None
