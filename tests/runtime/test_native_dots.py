"""Real dots of moderate size on nbxla's own GEMM kernel (runtime/native_dots.py): every operand
arrangement (in place, a copy keeping the minor dim, the tiled transpose), panels of features,
batches, long products cut into kernel rows, the pool's split -- each against the evaluator;
and the limits of the path, on both sides."""

from __future__ import annotations

import numpy as np
import pytest

from nbxla.hlo import Builder, Module, Shape
from nbxla.hlo.evaluator import evaluate
from nbxla.runtime import cpu_executable, native_dots
from nbxla.runtime.cpu_kernels import DotThunk
from nbxla.runtime.executable import build_executable
from nbxla.runtime.native_dots import MIN_PRODUCT, MIN_WORK, NativeGemmDot


def dot_module(t: str, a_dims, b_dims, lhs_batch=(), rhs_batch=(), lhs_c=(1,), rhs_c=(0,)) -> Module:
    b = Builder("f")
    x, y = b.parameter(Shape(t, a_dims), "x"), b.parameter(Shape(t, b_dims), "y")
    d = b.op("dot", x, y, lhs_batch_dims=lhs_batch, rhs_batch_dims=rhs_batch,
             lhs_contracting_dims=lhs_c, rhs_contracting_dims=rhs_c)
    return Module("f", b.build(d))


def run_and_check(module: Module, native: bool, seed: int = 0):
    rng = np.random.default_rng(seed)
    args = [rng.standard_normal(p.shape.dims).astype(p.shape.dtype) for p in module.entry.parameters]
    exe = build_executable(module, "cpu")
    got = exe.run(args)[0]
    tol = 1e-4 if got.dtype == np.float32 else 1e-10
    np.testing.assert_allclose(got, evaluate(module, args), rtol=tol, atol=tol)
    thunks = [s[0] for s in exe.native._plan[2] if isinstance(s[0], DotThunk)]
    assert len(thunks) == 1
    assert isinstance(thunks[0], NativeGemmDot) == native, thunks[0].how
    assert "evaluator" not in exe.stages["execution"]
    return thunks[0], exe


CASES = {
    # name: (type, lhs dims, rhs dims, lhs batch, rhs batch, lhs contracting, rhs contracting)
    "plain": ("f32", (128, 64), (64, 128), (), (), (1,), (0,)),
    "attention_scores": ("f32", (4, 128, 64), (4, 128, 64), (0,), (0,), (2,), (2,)),   # q @ k^T
    "attention_values": ("f32", (4, 128, 128), (4, 128, 64), (0,), (0,), (2,), (1,)),  # p @ v
    "lhs_transposed": ("f32", (128, 256), (128, 64), (), (), (0,), (0,)),              # a.T @ b
    "batch_not_leading": ("f32", (128, 4, 64), (4, 64, 48), (1,), (0,), (2,), (1,)),  # copies rows
    "panels_of_48": ("f32", (512, 48), (48, 48), (), (), (1,), (0,)),
    "panels_wide": ("f32", (65, 100), (100, 208), (), (), (1,), (0,)),
    "f64": ("f64", (256, 96), (96, 48), (), (), (1,), (0,)),
    "long_divisible": ("f32", (1024, 32), (32, 32), (), (), (1,), (0,)),    # rows of 512
    "long_prime": ("f32", (1031, 32), (32, 32), (), (), (1,), (0,)),        # one row of 1031
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_native_dots_match_the_evaluator(name):
    t, a, b, lb, rb, lc, rc = CASES[name]
    thunk, exe = run_and_check(dot_module(t, a, b, lb, rb, lc, rc), native=True)
    assert "nbxla's register-blocked GEMM kernel" in exe.stages["execution"]


def test_a_transposed_rhs_goes_through_the_tiled_transpose_and_a_row_copy_through_numpy():
    thunk, _ = run_and_check(dot_module("f32", *CASES["attention_scores"][1:]), native=True)
    assert thunk.arranged[0] is None and isinstance(thunk.arranged[1], native_dots._Transposer)
    thunk, _ = run_and_check(dot_module("f32", *CASES["batch_not_leading"][1:]), native=True)
    assert list(thunk.arranged[0]) == [1, 0, 2] and thunk.arranged[1] is None


@pytest.fixture(autouse=True)
def one_core(monkeypatch):
    """The kernel is taken on one core (on more, dots stay with OpenBLAS's threads:
    test_dots_stay_with_openblas_on_more_than_one_core)."""
    monkeypatch.setattr(native_dots, "worker_count", lambda: 1)


@pytest.mark.parametrize("workers, native", [(1, True), (2, False)])
def test_dots_stay_with_openblas_on_more_than_one_core(workers, native, monkeypatch):
    monkeypatch.setattr(native_dots, "worker_count", lambda: workers)
    run_and_check(dot_module("f32", (1024, 32), (32, 32)), native=native)


@pytest.mark.parametrize("pooled", [False, True])
def test_split_over_the_pool_or_not_gives_the_same_result(pooled, monkeypatch):
    """Both sides of SPLIT_WORK (the split's units: batch x kernel rows, here 2 x 4)."""
    monkeypatch.setattr(native_dots, "SPLIT_WORK", 1 if pooled else 1 << 62)
    monkeypatch.setattr(native_dots, "worker_count", lambda: 2)
    monkeypatch.setattr(cpu_executable, "native_dot_refusal", lambda instr: None)   # (the kernel's split itself)
    module = dot_module("f32", (2, 1024, 64), (2, 64, 64), (0,), (0,), (2,), (1,))
    thunk, _ = run_and_check(module, native=True)
    assert thunk.pooled == pooled and thunk.units == 2 * 2


def test_the_smallest_dots_taken_and_the_ones_below():
    # the whole dot: MIN_WORK multiply-adds (1024 x 32 x 32) taken, a row fewer not
    assert 1024 * 32 * 32 == MIN_WORK
    run_and_check(dot_module("f32", (1024, 32), (32, 32)), native=True)
    run_and_check(dot_module("f32", (1023, 32), (32, 32)), native=False)
    # one product of a batch: MIN_PRODUCT (32 x 32 x 32) taken, a row fewer not
    assert 32 * 32 * 32 == MIN_PRODUCT
    batched = {"lhs_batch": (0,), "rhs_batch": (0,), "lhs_c": (2,), "rhs_c": (1,)}
    run_and_check(dot_module("f32", (1100, 32, 32), (1100, 32, 32), **batched), native=True)
    run_and_check(dot_module("f32", (1100, 31, 32), (1100, 32, 32), **batched), native=False)


@pytest.mark.parametrize("dims, native", [
    (((512, 64), (64, 40)), False),          # 40 columns: no whole 64-byte vectors
    (((512, 64), (64, 48)), True),           # 48: three of them
    (((64, 1153), (1153, 16)), False),       # deeper than NATIVE_PANEL_DEPTH
    (((64, 1152), (1152, 16)), True),        # at it
    (((16, 1024), (1024, 256)), False),      # a 1 MiB kernel matrix
    (((16, 1000), (1000, 256)), True),       # just under
])
def test_limits_of_the_native_path(dims, native):
    run_and_check(dot_module("f32", *dims), native=native)


def test_other_element_types_stay_with_their_paths():
    for t, refused in (("bf16", True), ("s32", True), ("f32", False)):
        instr = dot_module(t, (128, 64), (64, 128)).entry.root
        assert (native_dots.native_dot_refusal(instr) is not None) == refused
