"""Light kernels (codegen/cpu.py's LIGHT_KERNEL_ELEMENTS): small kernels of the entry computation
are emitted with their loops marked ``llvm.loop.unroll.disable`` (LLVM's unroller doubled their
code and compile time for no speed); larger ones, and every kernel of a loop body, are not.
Both sides of the threshold, against NumPy; the rule's parts on HLO directly."""

from __future__ import annotations

import os

import llvmlite.binding as llvm
import numpy as np
import pytest

import nbxla
from nbxla.codegen import cpu
from nbxla.codegen.cpu import LIGHT_KERNEL_ELEMENTS, light_kernel
from nbxla.hlo.parser import parse_hlo
from nbxla.runtime.cpu_executable import kernel_computations, light_kernel_symbols

DISABLE = "llvm.loop.unroll.disable"


def bias_relu(x, b):
    return np.maximum(x + b, 0)


@pytest.mark.parametrize("rows,light", [(LIGHT_KERNEL_ELEMENTS // 16, True), (LIGHT_KERNEL_ELEMENTS // 16 + 1, False)])
def test_threshold_both_sides_against_numpy(rows, light):
    rng = np.random.default_rng(0)
    x, b = rng.standard_normal((rows, 16)).astype(np.float32), rng.standard_normal(16).astype(np.float32)
    f = nbxla.jit(bias_relu)
    np.testing.assert_array_equal(f(x, b), bias_relu(x, b))
    text = f.last_compilation.stage("llvm_ir")
    # (a larger kernel's IR may still hold DISABLE, on the loop within a row that is vectorized
    # first -- codegen/row_access.py -- but its loop over rows carries none)
    assert any('br label %"row.head", !llvm.loop' in line for line in text.splitlines()) == light
    assert (DISABLE in text) == (light or "llvm.loop.vectorize.followup_all" in text)


WINDOW = """HloModule pool
%max (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %m = f32[] maximum(f32[] %a, f32[] %b)
}
ENTRY %pool (x: f32[64,64]) -> f32[32,32] {
  %x = f32[64,64]{1,0} parameter(0)
  %init = f32[] constant(-inf)
  ROOT %rw = f32[32,32]{1,0} reduce-window(f32[64,64]{1,0} %x, f32[] %init), window={size=2x2 stride=2x2}, to_apply=%max
}
"""


def test_the_largest_operand_result_or_window_counts(monkeypatch):
    rw = parse_hlo(WINDOW).entry
    # (input 4096 elements, output 1024, output x window 4096)
    monkeypatch.setattr(cpu, "LIGHT_KERNEL_ELEMENTS", 4096)
    assert light_kernel(rw)
    monkeypatch.setattr(cpu, "LIGHT_KERNEL_ELEMENTS", 4095)
    assert not light_kernel(rw)


def test_dots_are_never_light():
    dot = parse_hlo("""HloModule d
ENTRY %d (a: s32[4,4], b: s32[4,4]) -> s32[4,4] {
  %a = s32[4,4]{1,0} parameter(0)
  %b = s32[4,4]{1,0} parameter(1)
  ROOT %dot = s32[4,4]{1,0} dot(s32[4,4]{1,0} %a, s32[4,4]{1,0} %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
""").entry
    assert not light_kernel(dot)


def steps(x, b):
    y = np.sin(x) * 2.0
    for _ in range(40):                   # (rolled: a while whose body has its own kernels)
        y = np.maximum(y * 0.5 + b, 0.0)
    return y + 1.0


def test_loop_body_kernels_are_never_light(monkeypatch):
    monkeypatch.setenv("NBXLA_NATIVE_LOOPS", "0")       # (the body's kernels compiled with the entry's)
    rng = np.random.default_rng(1)
    x, b = rng.standard_normal(256), rng.standard_normal(256)
    f = nbxla.jit(steps)
    np.testing.assert_allclose(f(x, b), steps(x, b), rtol=1e-12)
    module = f.last_compilation.optimized
    assert any(i.opcode == "while" for i in module.entry.instructions)
    distinct, compiled = kernel_computations(module)
    light = light_kernel_symbols(module, distinct, compiled)
    entry = {id(i) for i in module.entry.instructions}
    in_body = {symbol for symbol, instr in compiled if id(instr) not in entry}
    assert in_body and not light & in_body
    assert light, "the entry's small kernels are light"


def two_sizes(x, b, big):
    return np.maximum(x + b, 0), big * 2.0 + 1.0


def _strength_reduction_at_code_generation(monkeypatch, run) -> tuple[list[bool], bool]:
    """Was LLVM's loop strength reduction on (its global ``-disable-lsr`` option off) at each
    machine-code generation while ``run()`` ran, in order?  And is it on again after (for
    LLVM's other users)?"""
    disabled, seen = [False], []
    set_option = llvm.set_option

    def tracked(name, option):
        if option.startswith("-disable-lsr="):
            disabled[0] = option == "-disable-lsr=true"
        set_option(name, option)
    monkeypatch.setattr(llvm, "set_option", tracked)
    for cls, method in ((llvm.ExecutionEngine, "finalize_object"), (llvm.TargetMachine, "emit_object")):
        def noted(self, *args, _real=getattr(cls, method)):
            seen.append(not disabled[0])
            return _real(self, *args)
        monkeypatch.setattr(cls, method, noted)
    run()
    return seen, not disabled[0]


@pytest.mark.parametrize("big_rows", [LIGHT_KERNEL_ELEMENTS // 16, LIGHT_KERNEL_ELEMENTS // 16 + 1])
def test_no_kernel_gets_strength_reduction_light_or_not(monkeypatch, big_rows):
    """Machine code without loop strength reduction for light and heavy kernels alike (it took
    a third to most of their code generation for no speed: cpu.machine_code), on both sides
    of the light threshold (once a heavy kernel kept it for its whole module)."""
    monkeypatch.setenv("NBXLA_CACHE_DIR", "off")
    rng = np.random.default_rng(2)
    x, b = rng.standard_normal((64, 16)), rng.standard_normal(16)
    big = rng.standard_normal((big_rows, 16))
    f = nbxla.jit(two_sizes)
    got = []
    seen, _ = _strength_reduction_at_code_generation(monkeypatch, lambda: got.extend(f(x, b, big)))
    assert seen and not any(seen), seen
    for g, w in zip(got, two_sizes(x, b, big)):
        np.testing.assert_array_equal(g, w)


def recurrence(x, a):
    y = np.zeros_like(x)
    for k in range(1, x.shape[0]):
        y[k] = a * y[k - 1] + x[k]
    return y


def test_native_loops_get_no_strength_reduction(monkeypatch):
    monkeypatch.setenv("NBXLA_CACHE_DIR", "off")
    x = np.random.default_rng(4).random(300)
    f = nbxla.jit(recurrence)
    got = []
    seen, _ = _strength_reduction_at_code_generation(monkeypatch, lambda: got.append(f(x, 0.5)))
    assert seen and not any(seen), seen
    assert any(i.opcode == "while" for i in f.last_compilation.optimized.entry.instructions)
    np.testing.assert_allclose(got[0], recurrence(x, 0.5), rtol=1e-12)
