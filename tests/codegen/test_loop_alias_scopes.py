"""Kernels inlined into a native loop (``codegen/aot_loops``) keep their alias claims to
themselves (``toolkit.KernelBuffers``: one alias scope per kernel).

LU's rolled trailing update, with the pivot column's new values read directly by the box
update (as simplify's read-back rule leaves it): a divide kernel writes the column into a
temporary, and the box update kernel reads that temporary.  With one alias scope for every
kernel of the module, the divide's store ("not aliasing any kernel input") and the box
update's load of the temporary ("a kernel input") were claimed apart once LLVM inlined both
into the loop; the load was moved above the store and read stale scratch: NaN at n=2, where
the reference evaluator (and NumPy) give 2.01."""

from __future__ import annotations

import numpy as np
import pytest

from nbxla.compiler import compile_module
from nbxla.hlo.evaluator import evaluate
from nbxla.hlo.parser import parse_hlo


def _lu_text(n: int) -> str:
    """``for i in range(n): A[i+1:, i] /= A[i, i]; A[i+1:, i+1:] -= outer(A[i+1:, i], A[i, i+1:])``
    as traced, after simplify: the outer product reads the column's update value ``col``."""
    return f"""
HloModule lu_rolled

cond {{
  state = (s64[], f64[{n},{n}]) parameter(0)
  i = s64[] get-tuple-element(state), index=0
  n = s64[] constant({n})
  ROOT more = pred[] compare(i, n), direction=LT
}}

body {{
  state = (s64[], f64[{n},{n}]) parameter(0)
  i = s64[] get-tuple-element(state), index=0
  A = f64[{n},{n}] get-tuple-element(state), index=1
  one = s64[] constant(1)
  zero = s64[] constant(0)
  n = s64[] constant({n})
  i1 = s64[] add(i, one)
  pivot_window = f64[1,1] dynamic-slice(A, i, i), dynamic_slice_sizes={{1,1}}
  pivot = f64[] reshape(pivot_window)
  column_window = f64[{n},1] dynamic-slice(A, zero, i), dynamic_slice_sizes={{{n},1}}
  column = f64[{n}] reshape(column_window)
  rows = s64[{n}] iota(), iota_dimension=0
  from = s64[{n}] broadcast(i1), dimensions={{}}
  below = pred[{n}] compare(rows, from), direction=GE
  nb = s64[{n}] broadcast(n), dimensions={{}}
  inside = pred[{n}] compare(rows, nb), direction=LT
  tail = pred[{n}] and(below, inside)
  fzero = f64[] constant(0)
  zeros = f64[{n}] broadcast(fzero), dimensions={{}}
  masked = f64[{n}] select(tail, column, zeros)
  pivots = f64[{n}] broadcast(pivot), dimensions={{}}
  divided = f64[{n}] divide(masked, pivots)
  kept = f64[{n}] select(tail, divided, zeros)
  kept2 = f64[{n},1] reshape(kept)
  rows2 = s64[{n},1] iota(), iota_dimension=0
  from2 = s64[{n},1] broadcast(i1), dimensions={{}}
  below2 = pred[{n},1] compare(rows2, from2), direction=GE
  nb2 = s64[{n},1] broadcast(n), dimensions={{}}
  inside2 = pred[{n},1] compare(rows2, nb2), direction=LT
  tail2 = pred[{n},1] and(below2, inside2)
  col = f64[{n},1] select(tail2, kept2, column_window)
  A1 = f64[{n},{n}] dynamic-update-slice(A, col, zero, i)
  colv = f64[{n}] reshape(col)
  left = f64[{n}] select(tail, colv, zeros)
  row_window = f64[1,{n}] dynamic-slice(A1, i, zero), dynamic_slice_sizes={{1,{n}}}
  row = f64[{n}] reshape(row_window)
  right = f64[{n}] select(tail, row, zeros)
  lb = f64[{n},{n}] broadcast(left), dimensions={{0}}
  rb = f64[{n},{n}] broadcast(right), dimensions={{1}}
  outer = f64[{n},{n}] multiply(lb, rb)
  r = s64[{n},{n}] iota(), iota_dimension=0
  c = s64[{n},{n}] iota(), iota_dimension=1
  from3 = s64[{n},{n}] broadcast(i1), dimensions={{}}
  nb3 = s64[{n},{n}] broadcast(n), dimensions={{}}
  r0 = pred[{n},{n}] compare(r, from3), direction=GE
  r1 = pred[{n},{n}] compare(r, nb3), direction=LT
  c0 = pred[{n},{n}] compare(c, from3), direction=GE
  c1 = pred[{n},{n}] compare(c, nb3), direction=LT
  rr = pred[{n},{n}] and(r0, r1)
  cc = pred[{n},{n}] and(c0, c1)
  box = pred[{n},{n}] and(rr, cc)
  zeros2 = f64[{n},{n}] broadcast(fzero), dimensions={{}}
  old = f64[{n},{n}] select(box, A1, zeros2)
  diff = f64[{n},{n}] subtract(old, outer)
  A2 = f64[{n},{n}] select(box, diff, A1)
  ROOT next = (s64[], f64[{n},{n}]) tuple(i1, A2)
}}

ENTRY main {{
  A = f64[{n},{n}] parameter(0)
  start = s64[] constant(0)
  init = (s64[], f64[{n},{n}]) tuple(start, A)
  loop = (s64[], f64[{n},{n}]) while(init), condition=cond, body=body
  ROOT out = f64[{n},{n}] get-tuple-element(loop), index=1
}}
"""


@pytest.mark.parametrize("n", [2, 3, 7])
def test_inlined_kernels_do_not_share_alias_claims(n):
    module = parse_hlo(_lu_text(n))
    rng = np.random.default_rng(0)
    A = rng.random((n, n)) + n * np.eye(n)
    want = np.asarray(evaluate(parse_hlo(_lu_text(n)), [A.copy()]))
    compilation = compile_module(module, "cpu")
    got = np.asarray(compilation.executable.run([A.copy()])[0])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
