"""A module whose every kernel the code generator refuses is not handed to LLVM (no module,
no engine of nothing); one with a kernel left compiles it, the refusal recorded beside it."""

from __future__ import annotations

from nbxla.codegen import cpu
from nbxla.hlo.parser import parse_hlo

TWO_CONVOLUTIONS = """HloModule two
ENTRY %two (x: f32[1,6,6,2], w: f32[3,3,2,2]) -> f32[1,2,2,2] {
  %x = f32[1,6,6,2]{3,2,1,0} parameter(0)
  %w = f32[3,3,2,2]{3,2,1,0} parameter(1)
  %c1 = f32[1,4,4,2]{3,2,1,0} convolution(%x, %w), window={size=3x3}, dim_labels=b01f_01io->b01f
  ROOT %c2 = f32[1,2,2,2]{3,2,1,0} convolution(%c1, %w), window={size=3x3}, dim_labels=b01f_01io->b01f
}
"""

ADD = """HloModule add
ENTRY %add (a: f64[8], b: f64[8]) -> f64[8] {
  %a = f64[8]{0} parameter(0)
  %b = f64[8]{0} parameter(1)
  ROOT %s = f64[8]{0} add(%a, %b)
}
"""


def test_all_refused_builds_no_llvm_module(monkeypatch):
    made = []
    original = cpu._load
    monkeypatch.setattr(cpu, "_load", lambda *a, **k: made.append(1) or original(*a, **k))
    refused = parse_hlo(TWO_CONVOLUTIONS).entry
    kernels = cpu.compile_kernels("refused", [("nbxla_two", refused)])
    assert kernels.specs == {} and kernels.addresses == {} and kernels.engine is None
    assert "2 convolutions" in kernels.unsupported["nbxla_two"]
    assert made == []


def test_a_kernel_left_is_compiled_beside_the_refusal():
    refused, add = parse_hlo(TWO_CONVOLUTIONS).entry, parse_hlo(ADD).entry
    kernels = cpu.compile_kernels("mixed", [("nbxla_two", refused), ("nbxla_add", add)])
    assert set(kernels.specs) == {"nbxla_add"} and kernels.addresses["nbxla_add"]
    assert "nbxla_two" in kernels.unsupported
