"""The "hand-vectorized" LLVM pipeline (codegen/cpu.py's PIPELINES) and the kernels without
LLVM work: the patch GEMM's machine code is generated without loop strength reduction, every
other kernel's with it (the switch is LLVM's global option, so both sides are checked, in
both orders); a module of no kernels gets no LLVM engine, and a program of library calls only
(conv2d's convolution loop) still computes NumPy's result.  The patch GEMM's own results
against the evaluator: tests/runtime/test_conv_blocks.py."""

from __future__ import annotations

import llvmlite.binding as llvm
import numpy as np
import pytest

import nbxla
from nbxla import examples
from nbxla.codegen import cpu
from nbxla.codegen.patch_gemm import PatchGemm, emit_patch_gemm
from nbxla.codegen.kernels import emit_kernel
from nbxla.hlo.parser import parse_hlo


def _ran_strength_reduction(compile_something) -> bool:
    """Did LLVM run loop strength reduction while ``compile_something()`` ran?"""
    llvm.set_time_passes(True)
    try:
        compile_something()
    finally:
        report = llvm.report_and_reset_timings()
        llvm.set_time_passes(False)
    return "Loop Strength Reduction" in report


def _patch_gemm(name):
    g = PatchGemm("f32", 1, 8, 8, 3, 3, 3, 6, 6, 16, (1, 1), (1, 1))
    return lambda: cpu.compile_helper_kernel(name, lambda m, n: emit_patch_gemm(m, n, g), "hand-vectorized")


_LOOP_KERNEL = """HloModule m
ENTRY e {
  p = f32[1000] parameter(0)
  x = f32[1000] exponential(p)
  ROOT y = f32[1000] multiply(x, p)
}"""


def _full_kernel(name):
    comp = parse_hlo(_LOOP_KERNEL).entry
    return lambda: cpu.compile_helper_kernel(name, lambda m, n: emit_kernel(m, n, comp))


@pytest.mark.parametrize("hand_first", [True, False])
def test_strength_reduction_is_off_only_for_hand_vectorized_kernels(monkeypatch, hand_first):
    """LLVM's -disable-lsr is set around the hand-vectorized kernel's code generation only,
    and cleared after it."""
    calls = []
    real = llvm.set_option
    monkeypatch.setattr(llvm, "set_option", lambda name, option: (calls.append(option), real(name, option)))
    order = [("hand", _patch_gemm(f"hv_{hand_first}")), ("full", _full_kernel(f"full_{hand_first}"))]
    for kind, compile_it in (order if hand_first else order[::-1]):
        calls.clear()
        compile_it()
        assert calls == (["-disable-lsr=true", "-disable-lsr=false"] if kind == "hand" else []), kind


def test_kernels_compiled_after_a_hand_vectorized_one_keep_strength_reduction():
    """(LLVM's own pass timing: the global switch really is back off for the next kernel)"""
    _patch_gemm("hv_before")()
    assert _ran_strength_reduction(_full_kernel("full_after"))


def test_unknown_pipeline_is_refused_by_name():
    with pytest.raises(ValueError, match="unknown LLVM pipeline 'fast'.*full, hand-vectorized"):
        cpu.optimize_module(llvm.parse_assembly(""), cpu.host_target_machine(), "fast")


def test_a_module_without_kernels_gets_no_engine():
    kernels = cpu.compile_kernels("nothing", [])
    assert kernels.specs == {} and kernels.addresses == {} and kernels.engine is None
    llvm.parse_assembly(kernels.llvm_ir).verify()          # (%xla_ir shows a valid, empty module)


def test_library_call_only_program_matches_numpy():
    """conv2d's loop becomes one convolution (a library call, no fused kernel)."""
    rng = np.random.default_rng(0)
    x, w = rng.random((2, 9, 9, 3), dtype=np.float32), rng.random((3, 3, 3, 5), dtype=np.float32)
    got = nbxla.jit(examples.conv2d)(x, w)
    np.testing.assert_allclose(got, examples.conv2d(x, w), rtol=1e-5, atol=1e-5)
