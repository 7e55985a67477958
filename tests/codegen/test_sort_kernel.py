"""The native sort kernel (codegen/sort_kernel.py) for comparators NumPy's sort cannot follow:
bit for bit the evaluator's merge sort -- for consistent comparators written in forms the
key recognizer does not read, for several operands, along any axis, for row lengths that are
and are not powers of two, across threads, and even for a comparator that is no strict weak
order (both keep every position valid); nothing on the evaluator."""

from __future__ import annotations

import numpy as np
import pytest

from nbxla.compiler import compile_module
from nbxla.hlo.evaluator import evaluate, flatten
from nbxla.hlo.parser import parse_hlo

from tests.codegen.test_cpu import assert_bitwise

COMPARATORS = {
    # a < b written as (a - b) < 0, ties by the second operand descending
    "difference": """
  diff = f32[] subtract(a, b)
  zero = f32[] constant(0)
  lt = pred[] compare(diff, zero), direction=LT
  eq = pred[] compare(diff, zero), direction=EQ
  g = pred[] compare(d, c), direction=LT
  t = pred[] and(eq, g)
  ROOT r = pred[] or(lt, t)""",
    # descending by a, through select
    "select": """
  gt = pred[] compare(a, b), direction=GT
  f = pred[] constant(false)
  ROOT r = pred[] select(gt, gt, f)""",
    # no strict weak order: the answer is the evaluator's algorithm's, which the kernel follows
    "inconsistent": """
  lt = pred[] compare(a, b), direction=LT
  cf = f32[] convert(c)
  k = pred[] compare(a, cf), direction=GT
  ROOT r = pred[] xor(lt, k)""",
}


def module(dims: tuple, axis: int, comparator: str) -> str:
    shape = ",".join(map(str, dims))
    return f"""HloModule sort_any
cmp {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  c = s32[] parameter(2)
  d = s32[] parameter(3){COMPARATORS[comparator]}
}}
ENTRY e {{
  x = f32[{shape}] parameter(0)
  i = s32[{shape}] parameter(1)
  ROOT s = (f32[{shape}], s32[{shape}]) sort(x, i), dimensions={{{axis}}}, is_stable=true, to_apply=cmp
}}"""


def run(text: str, inputs):
    executable = compile_module(parse_hlo(text), "cpu").executable
    native = executable.native
    assert not {**native.interpreted, **native.interpreted_ops} and not native.library_calls
    assert "s" in native.kernel_symbols
    got = executable.run(inputs)
    want = flatten(evaluate(parse_hlo(text), inputs))
    for g, w in zip(got, want):
        assert_bitwise(g, w)
    return got


@pytest.mark.parametrize("comparator", sorted(COMPARATORS))
@pytest.mark.parametrize("dims, axis", [((37,), 0), ((5, 37, 3), 1), ((16, 4), 0), ((3, 1), 1), ((2, 2), 1),
                                        ((4, 64), 1)], ids=str)
def test_sort_kernel_is_the_evaluators_merge_sort(comparator, dims, axis):
    rng = np.random.default_rng(len(dims) * 10 + axis)
    x = rng.integers(-4, 5, dims).astype(np.float32)        # (many ties)
    i = rng.integers(0, 100, dims).astype(np.int32)
    run(module(dims, axis, comparator), [x, i])


def test_sorted_order_of_a_consistent_comparator():
    x = np.array([3, -1, 2, 2, 0, -5, 2], np.float32)
    i = np.arange(7, dtype=np.int32)
    values, index = run(module((7,), 0, "difference"), [x, i])
    assert values.tolist() == sorted(x.tolist())
    # ties (the three 2s) by the second operand descending
    assert index[values == 2].tolist() == [6, 3, 2]


def test_long_rows_across_threads():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((64, 1000)).astype(np.float32)
    i = np.broadcast_to(np.arange(1000, dtype=np.int32), (64, 1000)).copy()
    values, _ = run(module((64, 1000), 1, "select"), [x, i])
    assert np.array_equal(values, -np.sort(-x, axis=1))
