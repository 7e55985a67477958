"""Imported HLO's dot fused with its epilogue (``kind=kOutput``) over a batch of unknown size:
where one matrix product has the unknown size (``x: f32[b,k] @ w``), the program is split -- a
BLAS call and an epilogue kernel, as a static compile splits it at large sizes -- instead of
keeping the native kernel chosen at the probes' small sizes for every size
(``passes/fused_dots.product_size_unknown``); an unknown batch of small products keeps the
native kernel.  Both sides against the evaluator, at small and large sizes."""

import numpy as np
import pytest

from benchmarks.dynamic_batch_kernels import dense_relu_hlo
from nbxla.hlo.evaluator import evaluate
from nbxla.hlo.parser import parse_hlo
from nbxla.hlo.symbolic import bind_module
from nbxla.passes.fused_dots import product_size_unknown
from nbxla.symbolic_compile import compile_symbolic_module, run_symbolic

RNG = np.random.default_rng(34)

BATCHED_SMALL = """HloModule batched_small

%fused_bmm (p0: f32[b,4,8], p1: f32[b,8,4]) -> f32[b,4,4] {
  %p0 = f32[b,4,8]{2,1,0} parameter(0)
  %p1 = f32[b,8,4]{2,1,0} parameter(1)
  %dot = f32[b,4,4]{2,1,0} dot(f32[b,4,8]{2,1,0} %p0, f32[b,8,4]{2,1,0} %p1), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
  ROOT %tanh = f32[b,4,4]{2,1,0} tanh(f32[b,4,4]{2,1,0} %dot)
}

ENTRY %main (x: f32[b,4,8], y: f32[b,8,4]) -> f32[b,4,4] {
  %x = f32[b,4,8]{2,1,0} parameter(0)
  %y = f32[b,8,4]{2,1,0} parameter(1)
  ROOT %out = f32[b,4,4]{2,1,0} fusion(f32[b,4,8]{2,1,0} %x, f32[b,8,4]{2,1,0} %y), kind=kOutput, calls=%fused_bmm
}
"""


def _entry_opcodes(program):
    return [i.opcode for i in program.compilation.optimized.entry.instructions]


def _check(module, program, sizes):
    for n in sizes:
        concrete = bind_module(module, {"b": n})
        args = [RNG.standard_normal(p.shape.dims).astype(np.float32) for p in concrete.entry.parameters]
        expected = evaluate(concrete, args)
        expected = expected[0] if isinstance(expected, (list, tuple)) else expected
        np.testing.assert_allclose(run_symbolic(program, args)[0], expected, rtol=1e-4, atol=1e-4,
                                   err_msg=f"b = {n}")


@pytest.mark.parametrize("k, n", [(64, 32), (12, 6)])
def test_a_fused_dot_over_an_unknown_batch_is_split_for_every_size(k, n):
    module = parse_hlo(dense_relu_hlo(k, n))
    program = compile_symbolic_module(module, {"b": 3})         # (3 * k * n: native at 3 rows)
    assert "dot" in _entry_opcodes(program)                     # (the BLAS call, not one kernel)
    _check(module, program, [2, 3, 7, 300, 4096])
    assert module.entry.root.opcode == "fusion"                 # (the caller's module as given)


def test_an_unknown_batch_of_small_products_keeps_the_native_kernel():
    module = parse_hlo(BATCHED_SMALL)
    dot = next(i for i in module.computations[0].instructions if i.opcode == "dot")
    assert not product_size_unknown(dot)
    program = compile_symbolic_module(module, {"b": 3})
    assert "dot" not in _entry_opcodes(program)
    _check(module, program, [2, 5, 64])


def test_product_size_unknown_reads_rows_columns_and_contraction():
    dense = parse_hlo(dense_relu_hlo(64, 32))
    dot = next(i for c in dense.computations for i in c.instructions if i.opcode == "dot")
    assert product_size_unknown(dot)                            # (m = b)
    static = bind_module(dense, {"b": 5})
    dot = next(i for c in static.computations for i in c.instructions if i.opcode == "dot")
    assert not product_size_unknown(dot)
