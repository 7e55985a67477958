"""Identical kernels (an unrolled time loop's steps) are compiled once; a kernel whose
instruction count no other kernel has cannot be identical to one, and is not printed to find
out (``structure_key``: 8 ms per emission of eos's 900-instruction kernel)."""

import importlib

import numpy as np

from nbxla.hlo.parser import parse_hlo
from nbxla.runtime.executable import build_executable

cpu_executable = importlib.import_module("nbxla.runtime.cpu_executable")

MODULE = """HloModule sharing

%step_a (p: f32[8]) -> f32[8] {
  %p = f32[8]{0} parameter(0)
  %t = f32[8]{0} tanh(f32[8]{0} %p)
  ROOT %m = f32[8]{0} multiply(f32[8]{0} %t, f32[8]{0} %p)
}

%step_b (q: f32[8]) -> f32[8] {
  %q = f32[8]{0} parameter(0)
  %u = f32[8]{0} tanh(f32[8]{0} %q)
  ROOT %n = f32[8]{0} multiply(f32[8]{0} %u, f32[8]{0} %q)
}

%other (r: f32[8]) -> f32[8] {
  %r = f32[8]{0} parameter(0)
  ROOT %e = f32[8]{0} exponential(f32[8]{0} %r)
}

ENTRY %main (x: f32[8]) -> f32[8] {
  %x = f32[8]{0} parameter(0)
  %f1 = f32[8]{0} fusion(f32[8]{0} %x), kind=kLoop, calls=%step_a
  %f2 = f32[8]{0} fusion(f32[8]{0} %f1), kind=kLoop, calls=%step_b
  ROOT %f3 = f32[8]{0} fusion(f32[8]{0} %f2), kind=kLoop, calls=%other
}
"""


def test_identical_kernels_shared_and_one_alone_in_its_count_not_printed(monkeypatch):
    module = parse_hlo(MODULE)
    printed = []
    real = cpu_executable.structure_key
    monkeypatch.setattr(cpu_executable, "structure_key", lambda comp: printed.append(comp.name) or real(comp))
    distinct, compiled = cpu_executable.kernel_computations(module)
    symbols = {instr.name: symbol for symbol, instr in compiled}
    assert symbols["f1"] == symbols["f2"] != symbols["f3"]      # the two steps: one kernel
    assert [comp.name for _, comp in distinct] == ["step_a", "other"]
    assert sorted(printed) == ["step_a", "step_b"]                # (not %other: 2 instructions)
    x = np.linspace(-1, 1, 8, dtype=np.float32)
    out = build_executable(module, "cpu").run([x])
    got = out[0] if isinstance(out, (list, tuple)) else out
    t = np.tanh(x) * x
    np.testing.assert_allclose(got, np.exp(np.tanh(t) * t), rtol=1e-5)
