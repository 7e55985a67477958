"""Box updates in place (``codegen/box_updates.py``): a loop's write of a slice of
index-dependent length in two dimensions (``A[i + 1:, i + 1:] -= ...``, a ``select`` on an iota
box mask over the whole array) runs over the box only, in the array's own buffer, and a
one-operand scatter in a loop (``A[[i, p]] = A[[p, i]]``) writes into its operand's buffer.

Against eager NumPy, on both sides of each choice the kernel makes: the slices of the array
it reads lying apart from the box (one pass: LU's pivot row and column) or meeting it (two
passes, decided at run time: ``A[i:, i:] -= np.outer(A[i:, i], A[i, i:])``), a read that is
neither (a transpose: always two passes), only elementwise reads (rows split over threads),
an empty box (the last step), a box clipped by the array's end; and the structural facts that
put these kernels in place (``updated_parameter``, the loop body's ``operand_buffers``)."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import nbxla
from nbxla.examples import lu_pivot
from nbxla.hlo.aliasing import box_updated_parameter, scatters_in_place, updated_parameter
from nbxla.hlo.iota_masks import box_bounds
from nbxla.passes.buffer_assignment import operand_buffers
from tests.frontend_util import use_flags


def rank1_apart(A):
    """LU's trailing update: reads row i and column i, outside the box [i+1, n)^2."""
    n = A.shape[0]
    for i in range(n):
        A[i + 1:, i] /= A[i, i]
        A[i + 1:, i + 1:] -= np.outer(A[i + 1:, i], A[i, i + 1:])
    return A


def rank1_meeting(A):
    """The box [i, n)^2 holds row i and column i that the update reads: two passes."""
    n = A.shape[0]
    for i in range(n):
        A[i:, i:] -= 0.01 * np.outer(A[i:, i], A[i, i:])
    return A


def transposed(A):
    """A read of the array transposed (no slice, not elementwise): always two passes."""
    n = A.shape[0]
    for i in range(n - 1):
        A[i + 1:, i + 1:] = 0.5 * (A[i + 1:, i + 1:] + A.T[i + 1:, i + 1:])
    return A


def elementwise_only(A):
    """A lower-left box read only at the written elements (rows split over threads)."""
    n = A.shape[0]
    for i in range(n):
        A[i:, :i] = A[i:, :i] * 0.9 + 1.0
    return A


def clipped(A):
    """Boxes reaching past the end (i + 3 > n): clipped to the array, empty at the end."""
    n = A.shape[0]
    for i in range(n):
        A[i + 3:, 1:i + 2] += A[i, 0]
    return A


def pivot_swaps(A):
    """Rows swapped by list indices in a loop: a scatter in its operand's buffer."""
    n = A.shape[0]
    perm = np.arange(n)
    for i in range(n):
        p = i + np.argmax(np.abs(A[i:, i]))
        A[[i, p]] = A[[p, i]]
        perm[[i, p]] = perm[[p, i]]
    return perm


PROGRAMS = [rank1_apart, rank1_meeting, transposed, elementwise_only, clipped, pivot_swaps, lu_pivot]


def _matrix(n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.random((n, n)) + n * np.eye(n)


@pytest.mark.parametrize("fn", PROGRAMS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("n", [1, 2, 7, 33])
def test_box_updates_match_numpy(fn, n, monkeypatch):
    use_flags(monkeypatch, "--unroll_max=0")            # (rolled at every trip count)
    A = _matrix(n)
    want_arg, got_arg = copy.deepcopy(A), copy.deepcopy(A)
    want = fn(want_arg)
    got = nbxla.jit(fn)(got_arg)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got_arg, want_arg, rtol=1e-12, atol=1e-12)


def _body_fusions(fn, *args):
    """(the loop body, its fusions' computations by name) of ``fn``'s one rolled loop."""
    jitted = nbxla.jit(fn)
    jitted(*args)
    module = jitted.last_compilation.optimized
    (loop,) = [i for i in module.entry.instructions if i.opcode == "while"]
    body = loop.attrs["body"]
    return body, {i.name: i for i in body.instructions}


@pytest.mark.parametrize("fn", [rank1_apart, rank1_meeting, transposed, elementwise_only],
                         ids=lambda f: f.__name__)
def test_the_loop_body_updates_its_box_in_place(fn, monkeypatch):
    use_flags(monkeypatch, "--unroll_max=0")
    body, instrs = _body_fusions(fn, _matrix(9))
    boxes = [name for name, i in instrs.items() if i.opcode == "fusion"
             and box_updated_parameter(i.attrs["calls"].root) is not None]
    assert boxes, "no select-on-a-box update fusion in the loop body"
    in_place = operand_buffers(body, loop_body=True)
    assert any(name in in_place for name in boxes)


def test_a_row_swap_scatters_into_its_operand(monkeypatch):
    use_flags(monkeypatch, "--unroll_max=0")
    body, instrs = _body_fusions(pivot_swaps, _matrix(9))
    scatters = [name for name, i in instrs.items() if scatters_in_place(i)]
    assert scatters
    assert set(scatters) & set(operand_buffers(body, loop_body=True))


def test_box_masks_are_recognized_and_others_are_not():
    """``box_bounds`` accepts ands of iota compares with scalars (any nesting), per dimension,
    and nothing else; ``updated_parameter`` takes a select on a box of a parameter only."""
    from nbxla.hlo.parser import parse_hlo
    text = """
HloModule m
ENTRY main {
  a = f64[4,5] parameter(0)
  lo = s64[] parameter(1)
  x = f64[4,5] parameter(2)
  blo = s64[4,5] broadcast(lo), dimensions={}
  r = s64[4,5] iota(), iota_dimension=0
  c = s64[4,5] iota(), iota_dimension=1
  c0 = pred[4,5] compare(r, blo), direction=GE
  c1 = pred[4,5] compare(blo, c), direction=GT
  c2 = pred[4,5] compare(c, r), direction=LT
  box = pred[4,5] and(c0, c1)
  notbox = pred[4,5] and(c0, c2)
  up = f64[4,5] select(box, x, a)
  ROOT not_a_box = f64[4,5] select(notbox, x, a)
}
"""
    comp = parse_hlo(text).entry
    named = {i.name: i for i in comp.instructions}
    found = box_bounds(named["box"])
    assert sorted(found) == [0, 1]
    assert [b.offset for b in found[0].lower] == [0] and not found[0].upper
    assert not found[1].lower and [b.offset for b in found[1].upper] == [0]
    assert box_bounds(named["notbox"]) is None          # (iota against iota: a triangle)
    assert box_updated_parameter(named["up"]) == 0
    assert updated_parameter(comp) is None              # (its root's mask is no box)
