"""Loop kernels written in place of an operand (the buffer plan's "in place of %x") stay
vectorized: their loads from inputs and stores to outputs carry LLVM alias scopes saying they
do not overlap, so the vectorizer needs no run-time overlap check (which an output written
over its own operand always failed, sending the kernel to its scalar loop).  The results must
still be the evaluator's: in place, each element is read before it is overwritten."""

from __future__ import annotations

import numpy as np
import pytest

from nbxla.compiler import compile_module
from nbxla.hlo.evaluator import evaluate, flatten
from nbxla.hlo.parser import parse_hlo
from nbxla.testing import compare_arrays

# GEMM, then a GELU epilogue with a bias broadcast along rows (a "rows" kernel) written over
# the GEMM's result, then an elementwise scale (a "linear" kernel) written over that.
MODULE = """HloModule in_place
ENTRY %main (x: f32[64,48], w: f32[48,40], b: f32[40]) -> f32[64,40] {
  %x = f32[64,48] parameter(0)
  %w = f32[48,40] parameter(1)
  %b = f32[40] parameter(2)
  %dot = f32[64,40] dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %bs = f32[64,40] broadcast(%b), dimensions={1}
  %biased = f32[64,40] add(%dot, %bs)
  %c = f32[] constant(0.7978846)
  %cs = f32[64,40] broadcast(%c), dimensions={}
  %inner = f32[64,40] multiply(%biased, %cs)
  %t = f32[64,40] tanh(%inner)
  %one = f32[] constant(1)
  %ones = f32[64,40] broadcast(%one), dimensions={}
  %onep = f32[64,40] add(%t, %ones)
  %gelu = f32[64,40] multiply(%biased, %onep)
  %dot2 = f32[64,40] dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %exp = f32[64,40] exponential(%dot2)
  %two = f32[] constant(2)
  %twos = f32[64,40] broadcast(%two), dimensions={}
  %scaled = f32[64,40] multiply(%exp, %twos)
  ROOT %sum = f32[64,40] add(%gelu, %scaled)
}
"""


def _compiled():
    return compile_module(parse_hlo(MODULE), "cpu")


def test_kernels_written_in_place_are_marked_not_aliasing():
    compilation = _compiled()
    plan = compilation.stage("buffer_assignment")
    assert "in place of %" in plan
    ir_text = compilation.stage("llvm_ir")
    # (element loads; the buffer pointers' loads from the kernel's pointer array are not)
    loads = [line for line in ir_text.splitlines() if " = load " in line and " = load i8*" not in line]
    stores = [line for line in ir_text.splitlines() if line.strip().startswith("store ") and "i8**" not in line]
    assert loads and all("!alias.scope" in line for line in loads), loads[:3]
    assert stores and all("!noalias" in line for line in stores), stores[:3]


def test_in_place_kernels_vectorize():
    """The optimized IR of every loop kernel has a vector loop that runs unguarded by an
    overlap check (no scalar-only kernels)."""
    text = _compiled().stage("llvm_ir_optimized")
    kernels = [k for k in text.split("define ")[1:] if not k.split("(")[0].endswith("_objects")]
    assert kernels
    for kernel in kernels:
        assert "<8 x float>" in kernel or "<16 x float>" in kernel, kernel[:200]
        assert "diff.check" not in kernel and "memcheck" not in kernel, kernel[:200]


@pytest.mark.parametrize("seed", [0, 1])
def test_in_place_kernels_match_the_evaluator(seed):
    rng = np.random.default_rng(seed)
    inputs = [rng.standard_normal(s).astype(np.float32) / 4 for s in ((64, 48), (48, 40), (40,))]
    got = _compiled().executable.run(inputs)
    want = flatten(evaluate(parse_hlo(MODULE), inputs))
    ok, detail = compare_arrays(np.asarray(got[0] if isinstance(got, (list, tuple)) else got), want[0],
                                rtol=1e-5, atol=1e-5)
    assert ok, detail
