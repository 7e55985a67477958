"""Chains of window updates in place (``aliasing.update_chain``, ``codegen/updates._emit_chain``):
a fusion whose root sets several windows of one parameter one after another (a time step's
walls, ``p[-1, :] = p[-2, :]; p[0, :] = p[1, :]``) writes only those windows into the
parameter's buffer instead of copying the whole array.

Against eager NumPy in rolled loops, on both sides of each condition: windows whose values
are read only outside every window (in place), a later update reading an earlier window or
its own (not a chain: the elemental kernel), windows that overlap (the later one wins), a
window at a run-time start (not a chain); and the structural facts (``update_chain`` on
parsed HLO, the loop body's ``operand_buffers``)."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import nbxla
from nbxla.hlo.aliasing import update_chain, updated_parameter
from nbxla.hlo.parser import parse_hlo
from nbxla.passes.buffer_assignment import operand_buffers
from tests.frontend_util import use_flags


def walls(p, b):
    """A Jacobi step with periodic columns, then its walls (npbench's channel flow)."""
    for _ in range(5):
        pn = p.copy()
        p[1:-1, 1:-1] = 0.25 * (pn[1:-1, 2:] + pn[1:-1, :-2] + pn[2:, 1:-1] + pn[:-2, 1:-1]) - b[1:-1, 1:-1]
        p[1:-1, -1] = 0.5 * (pn[1:-1, 0] + pn[1:-1, -2])
        p[-1, :] = p[-2, :]
        p[0, :] = p[1, :]
    return p


def reads_an_earlier_window(p, b):
    """The second wall copies the first one's new values: the order matters."""
    for _ in range(4):
        p[1:-1, 1:-1] = 0.5 * p[1:-1, 1:-1] + b[1:-1, 1:-1]
        p[-1, :] = p[-2, :] * 2.0
        p[0, :] = p[-1, :] + 1.0
    return p


def overlapping(p, b):
    """Windows that overlap: the later one wins where they meet."""
    for _ in range(3):
        p[2:-2, 2:-2] = p[2:-2, 2:-2] * 0.9 + b[2:-2, 2:-2]
        p[0, :] = p[3, :] - 1.0
        p[0, 1:3] = p[4, 1:3] * 3.0
        p[:, -1] = p[:, 2] + b[:, 0]
    return p


def walls_in_turn(p, b):
    """Each wall copies a neighbour line that the wall before it has just set (npbench's
    cavity flow: the corners pass from wall to wall)."""
    for _ in range(5):
        pn = p.copy()
        p[1:-1, 1:-1] = 0.25 * (pn[1:-1, 2:] + pn[1:-1, :-2] + pn[2:, 1:-1] + pn[:-2, 1:-1]) - b[1:-1, 1:-1]
        p[:, -1] = p[:, -2]
        p[0, :] = p[1, :]
        p[:, 0] = p[:, 1]
        p[-1, :] = 0
    return p


def interior_then_walls(u, b):
    """A stencil reading its own window, then constant walls: one kernel, the interior
    computed into a temporary before it is stored."""
    for _ in range(4):
        un = u.copy()
        u[1:-1, 1:-1] = un[1:-1, 1:-1] - 0.1 * (un[1:-1, 1:-1] - un[1:-1, :-2]) + 0.2 * (un[2:, 1:-1] - un[:-2, 1:-1])
        u[0, :] = 0
        u[:, 0] = 0
        u[:, -1] = b[:, 0]
        u[-1, :] = 0
    return u


def moving_window(p, b):
    """A wall at a run-time row (the loop index): no chain."""
    for i in range(1, p.shape[0] - 1):
        p[1:-1, 1:-1] = p[1:-1, 1:-1] * 0.5 + b[1:-1, 1:-1]
        p[i, :] = p[i - 1, :]
        p[0, :] = p[-1, :]
    return p


PROGRAMS = [walls, reads_an_earlier_window, overlapping, walls_in_turn, interior_then_walls, moving_window]


@pytest.mark.parametrize("fn", PROGRAMS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("shape", [(6, 7), (33, 40)])
def test_update_chains_match_numpy(fn, shape, monkeypatch):
    use_flags(monkeypatch, "--unroll_max=0")            # (rolled at every trip count)
    rng = np.random.default_rng(1)
    p, b = rng.random(shape), rng.random(shape)
    want_arg, got_arg = copy.deepcopy(p), copy.deepcopy(p)
    want = fn(want_arg, b)
    got = nbxla.jit(fn)(got_arg, b)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got_arg, want_arg, rtol=1e-12, atol=1e-12)


def test_the_walls_are_written_in_place_in_the_loop_body(monkeypatch):
    use_flags(monkeypatch, "--unroll_max=0")
    rng = np.random.default_rng(0)
    jitted = nbxla.jit(walls)
    jitted(rng.random((12, 12)), rng.random((12, 12)))
    (loop,) = [i for i in jitted.last_compilation.optimized.entry.instructions if i.opcode == "while"]
    body = loop.attrs["body"]
    chains = [i.name for i in body.instructions if i.opcode == "fusion"
              and len(update_chain(i.attrs["calls"]) or ()) > 1]
    assert chains, "no chain of wall updates in the loop body"
    assert set(chains) <= set(operand_buffers(body, loop_body=True))


CHAIN = """
HloModule m
ENTRY main {
  p = f64[5,4] parameter(0)
  hi = s64[] constant(4)
  lo = s64[] constant(0)
  row3 = f64[1,4] slice(p), slice={[3:4], [0:4]}
  row1 = f64[1,4] slice(p), slice={[1:2], [0:4]}
  %s
  ROOT second = f64[5,4] dynamic-update-slice(first, %s, lo, lo)
}
"""


@pytest.mark.parametrize("first, second_update, chained", [
    ("first = f64[5,4] dynamic-update-slice(p, row3, hi, lo)", "row1", True),
    # the second update reads the first window (row 4) of the parameter: order would matter
    ("first = f64[5,4] dynamic-update-slice(p, row1, hi, lo)\n  row4 = f64[1,4] slice(p), slice={[4:5], [0:4]}",
     "row4", False),
    # the second update reads its own window (row 0): a chain, that link in two passes
    ("first = f64[5,4] dynamic-update-slice(p, row3, hi, lo)\n  row0 = f64[1,4] slice(p), slice={[0:1], [0:4]}",
     "row0", True),
    # the second update reads the first one's result in the first window: the buffer holds it
    ("first = f64[5,4] dynamic-update-slice(p, row3, hi, lo)\n  back = f64[1,4] slice(first), slice={[4:5], [0:4]}",
     "back", True),

    # a start read at run time
    ("at = s64[] parameter(1)\n  first = f64[5,4] dynamic-update-slice(p, row3, at, lo)", "row1", False),
])
def test_update_chain_takes_windows_read_only_outside(first, second_update, chained):
    comp = parse_hlo(CHAIN % (first, second_update)).entry
    chain = update_chain(comp)
    if chained:
        assert [d.name for d in chain] == ["first", "second"]
        assert updated_parameter(comp) == 0
    else:
        assert chain is None and updated_parameter(comp) is None


THREE = """
HloModule m
ENTRY main {
  p = f64[5,4] parameter(0)
  hi = s64[] constant(4)
  lo = s64[] constant(0)
  row3 = f64[1,4] slice(p), slice={[3:4], [0:4]}
  row1 = f64[1,4] slice(p), slice={[1:2], [0:4]}
  first = f64[5,4] dynamic-update-slice(p, row3, hi, lo)
  mid = f64[5,4] dynamic-update-slice(first, row1, lo, lo)
  back = f64[1,4] slice(first), slice={[%s], [0:4]}
  ROOT last = f64[5,4] dynamic-update-slice(mid, back, lo, lo)
}
"""


@pytest.mark.parametrize("rows, chained", [("4:5", True), ("0:1", False), ("2:3", True)])
def test_a_later_link_reads_an_earlier_result_only_where_no_link_between_wrote(rows, chained):
    """``last`` reads ``first``'s result: in its window (row 4, still in the buffer), where
    ``mid`` wrote since (row 0: not a chain) or where nothing wrote (row 2)."""
    comp = parse_hlo(THREE % rows).entry
    assert (update_chain(comp) is not None) == chained
