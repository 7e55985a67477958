"""Reductions over middle axes ((N, R, C) -> (N, C)) run as batched column reductions:
against the evaluator, with the kernel's range split across threads at arbitrary points
(splits fall inside batches, so blocks must stop at batch boundaries) and with short column
blocks (several per batch, the last one ragged).  Leading-axis column reductions share the
kernel and are checked the same way."""

import numpy as np
import pytest

import nbxla
from nbxla.codegen import column_reductions
from nbxla.runtime import cpu_kernels
from nbxla.runtime.cache import CompilationCache

from tests.codegen.test_cpu import assert_all_native


def _jit(fn, device="cpu"):
    return nbxla.jit(fn, device=device, cache=CompilationCache())


def _batched(f) -> bool:
    """Was a reduction emitted as batched column blocks (its batch loop is in the IR)?"""
    return '"bt.head"' in f.last_compilation.executable.native.kernels.llvm_ir


CASES = [
    ((8, 64, 1000), 1),
    ((3, 5, 7, 40), (1, 2)),            # two middle axes
    ((2, 3, 4, 5, 17), (2, 3)),         # two batch axes
    ((2, 1000, 2, 16), 1),              # two kept axes: flat columns
    ((5, 33, 700), 1),
    ((4, 9, 16), -2),
]


@pytest.mark.parametrize("block", [column_reductions.COLUMN_BLOCK, 48])       # (48: blocks end mid-batch)
@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("shape,axis", CASES + [((70, 300), 0)])
@pytest.mark.parametrize("op", ["sum", "max", "min", "prod"])
def test_middle_axis_reductions_match_the_evaluator(shape, axis, op, threads, block, monkeypatch):
    monkeypatch.setattr(column_reductions, "COLUMN_BLOCK", block)
    monkeypatch.setattr(cpu_kernels, "worker_count", lambda: threads)
    monkeypatch.setattr(cpu_kernels, "PARALLEL_THRESHOLD", 1 if threads > 1 else 1 << 62)
    x = np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32)
    x.flat[7] = np.nan if op in ("max", "min") else x.flat[7]
    if op == "prod":
        x = np.float32(1) + x / 50
    fn = lambda a: getattr(np, op)(a, axis=axis)                      # noqa: E731
    cpu, ref = _jit(fn), _jit(fn, "evaluator")
    got, want = cpu(x), ref(x)
    assert got.shape == want.shape == getattr(np, op)(x, axis=axis).shape
    np.testing.assert_allclose(got, want, rtol=2e-6)
    assert _batched(cpu) == (len(shape) > 2)
    assert_all_native(cpu.last_compilation)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int32, np.uint8, np.bool_])
def test_dtypes_and_an_epilogue(dtype):
    x = (np.random.default_rng(2).random((6, 50, 3, 20)) * 5).astype(dtype)
    if np.dtype(dtype).kind == "f":
        fn = lambda a: np.sqrt(a.sum(axis=1) * 2 + 1)                  # noqa: E731
    else:                     # (an epilogue keeping the sum's integer type)
        fn = lambda a: a.sum(axis=1) * 2 + 1                           # noqa: E731
    cpu, ref = _jit(fn), _jit(fn, "evaluator")
    np.testing.assert_allclose(cpu(x), ref(x), rtol=1e-6)
    assert _batched(cpu)


def test_few_kept_columns_take_the_row_kernel():
    x = np.random.default_rng(3).random((50, 40, 4), dtype=np.float32)
    cpu = _jit(lambda a: a.sum(axis=1))
    np.testing.assert_allclose(cpu(x), x.sum(axis=1), rtol=1e-5)
    assert not _batched(cpu)


def test_a_transposed_input_is_read_in_place():
    # The reduced value is not linear in the input (a transpose feeds it): one kept axis, so
    # it is indexed per element.
    x = np.random.default_rng(4).standard_normal((30, 20, 64)).astype(np.float32)
    fn = lambda a: (a.transpose(1, 0, 2) * 3).sum(axis=1)              # noqa: E731
    cpu, ref = _jit(fn), _jit(fn, "evaluator")
    np.testing.assert_allclose(cpu(x), ref(x), rtol=1e-5)


@pytest.mark.parametrize("rows", [1, 7, 8, 9, 23, 64])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_column_sums_add_row_by_row_like_numpy(rows, dtype):
    # The kernel combines 8 rows per pass; the sum per column must still be taken in row order
    # (as NumPy does for axis 0 of a C-ordered array), so the results are bitwise NumPy's.
    x = np.random.default_rng(rows).standard_normal((rows, 2, 37)).astype(dtype) * 1e3
    expected = np.zeros((2, 37), dtype)
    for row in x:
        expected += row
    np.testing.assert_array_equal(_jit(lambda a: a.sum(axis=0))(x), expected)
    batched = np.zeros((3, 37), dtype)
    y = np.stack([x[:, 0]] * 3)                                    # (3, rows, 37): axis 1
    for k in range(rows):
        batched += y[:, k]
    np.testing.assert_array_equal(_jit(lambda a: a.sum(axis=1))(y), batched)
