"""The "hand-vectorized" LLVM pipeline (codegen/cpu.py's PIPELINES) and the kernels without
LLVM work: every kernel's machine code, the patch GEMM's and the others', is generated without
loop strength reduction (the switch is LLVM's global option: it is cleared after each, in
both orders, and code that is not nbxla's keeps LSR); a module of no kernels gets no LLVM engine, and a program of library calls only
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
from tests.codegen.test_light_kernels import _strength_reduction_at_code_generation


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
def test_strength_reduction_is_off_around_every_kernels_code_generation(monkeypatch, hand_first):
    """LLVM's -disable-lsr is set around each kernel's code generation, hand-vectorized or
    not, and cleared after it."""
    calls = []
    real = llvm.set_option
    monkeypatch.setattr(llvm, "set_option", lambda name, option: (calls.append(option), real(name, option)))
    order = [("hand", _patch_gemm(f"hv_{hand_first}")), ("full", _full_kernel(f"full_{hand_first}"))]
    for kind, compile_it in (order if hand_first else order[::-1]):
        calls.clear()
        compile_it()
        assert calls == ["-disable-lsr=true", "-disable-lsr=false"], kind


def test_no_kernel_gets_strength_reduction_and_llvm_keeps_it_for_others(monkeypatch):
    """At each kernel's code generation LSR is off (LLVM's global -disable-lsr set), and
    after it the option is back off for code that is not nbxla's.  (A kernel is compiled
    first: the process's one-time helpers -- libcalls.py's, made with the first kernel -- are
    not kernels.)"""
    _full_kernel("warm_up")()

    def run():
        _patch_gemm("hv_timed")()
        _full_kernel("full_timed")()
    seen, on_after = _strength_reduction_at_code_generation(monkeypatch, run)
    assert len(seen) >= 2 and not any(seen) and on_after, (seen, on_after)


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
