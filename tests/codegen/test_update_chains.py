"""Chains of constant-window updates (``b[1:-1, 1:-1] = ...; b[1:-1, 0] = ...; b[0, :] = ...``)
written row by row, each run of columns from the outermost update whose window holds it
(``codegen/loops._updated_row``): against eager NumPy, with windows that overlap (the later
one wins), span every row or every column, sit at clamped starts, in one to three dimensions,
written in place of an argument, and in chains longer than ``MAX_CHAIN`` (the rest read
elementwise).  Each program runs with the chain limit at 1, at the chain's own length and
above it, with the compiled-code cache off so that every run compiles anew."""

from __future__ import annotations

import numpy as np
import pytest

import nbxla
from nbxla.codegen import loops


def poisson_like(p, b):
    q = p.copy()
    q[1:-1, 1:-1] = 0.25 * (p[1:-1, 2:] + p[1:-1, :-2] + p[2:, 1:-1] + p[:-2, 1:-1]) - b[1:-1, 1:-1]
    q[1:-1, -1] = 0.5 * (p[1:-1, 0] + p[1:-1, -2]) - b[1:-1, -1]
    q[1:-1, 0] = 0.5 * (p[1:-1, 1] + p[1:-1, -1]) - b[1:-1, 0]
    return q


def rhs_like(u, v):
    out = np.zeros_like(u)
    out[1:-1, 1:-1] = (u[1:-1, 2:] - u[1:-1, :-2]) / 3.0 * (v[2:, 1:-1] - v[:-2, 1:-1])
    out[:, -1] = u[:, 0] * 2.0                          # a column over every row
    out[1:-1, 0] = v[1:-1, 1] - 1.0
    return out


def overlapping(x, y):
    out = x * 2.0
    out[1:6, 1:6] = y[:5, :5] + 1.0
    out[2:4, 3:8] = y[3:5, 1:6] * 3.0                   # over part of the window before
    out[0, :] = -1.0                                    # a row over every column
    out[3, 2:4] = 7.0
    return out


def rank_one(x):
    out = x + 1.0
    out[1:4] = x[2:5] * 2.0
    out[-2:] = x[:2] - 3.0
    out[2] = 9.0                                        # inside the first window
    return out


def rank_three(x):
    out = x * 1.5
    out[1:-1, 1:-1, 1:-1] = x[2:, 1:-1, :-2] - x[:-2, 1:-1, 2:]
    out[0] = x[-1] + 0.5
    out[:, :, 0] = x[:, :, 1] * 4.0
    return out


def deep(x):
    out = x - 1.0
    for k in range(6):                                  # six column updates: past MAX_CHAIN
        out[1:-1, k] = x[1:-1, k + 1] * (k + 2.0)
    return out


def in_place(a, b):
    a[1:-1, 1:-1] = a[1:-1, 1:-1] * 2.0 + b[1:-1, 1:-1]
    a[1:-1, 0] = a[1:-1, 0] - b[1:-1, 0]
    a[0, :] = 3.0


def _inputs(fn, rng):
    if fn is rank_one:
        return (rng.standard_normal(9),)
    if fn is rank_three:
        return (rng.standard_normal((5, 6, 7)),)
    if fn is deep:
        return (rng.standard_normal((6, 11)),)
    shape = (9, 11) if fn is not overlapping else (8, 10)
    return tuple(rng.standard_normal(shape) for _ in range(2))


CHAIN_LENGTH = {poisson_like: 3, rhs_like: 3, overlapping: 4, rank_one: 3, rank_three: 3, deep: 6, in_place: 3}


@pytest.mark.parametrize("fn", list(CHAIN_LENGTH), ids=lambda f: f.__name__)
@pytest.mark.parametrize("limit", ["one", "length", "default"])
def test_update_chains_match_numpy(fn, limit, monkeypatch):
    monkeypatch.setenv("NBXLA_CACHE_DIR", "off")
    monkeypatch.setattr(loops, "MAX_CHAIN", {"one": 1, "length": CHAIN_LENGTH[fn],
                                             "default": loops.MAX_CHAIN}[limit])
    rng = np.random.default_rng(3)
    args = _inputs(fn, rng)
    want_args = [a.copy() for a in args]
    want = fn(*want_args)
    got_args = [a.copy() for a in args]
    compiled = nbxla.jit(fn, device="cpu")
    got = compiled(*got_args)
    if want is None:                                    # (written into its argument)
        np.testing.assert_array_equal(got_args[0], want_args[0])
    else:
        np.testing.assert_array_equal(got, want)
    chains = [len(loops._window_chain(i.attrs["calls"].root))
              for c in compiled.last_compilation.optimized.computations for i in c.instructions
              if i.opcode == "fusion" and i.attrs.get("kind") == "kLoop"]
    assert max(chains, default=0) >= min(loops.MAX_CHAIN, 2), f"no fused update chain: {chains}"


def test_a_chain_longer_than_the_limit_is_cut_there():
    fb_root = nbxla.jit(deep, device="cpu")
    fb_root(np.ones((6, 11)))
    roots = [i.attrs["calls"].root for c in fb_root.last_compilation.optimized.computations
             for i in c.instructions if i.opcode == "fusion"]
    assert max(len(loops._window_chain(r)) for r in roots) == loops.MAX_CHAIN


# ---- in-place updates that read the array they write (``codegen/updates.py``) ----------------

def copy_boundary_rows(p):
    p[-1, :] = p[-2, :]                                 # reads a row the window does not hold
    p[0, :] = p[1, :]


def shift_down(p):
    p[1:, :] = p[:-1, :]                                # reads rows the window overwrites


def shift_within_a_column(p):
    p[2:6, 3] = p[3:7, 3] * 2.0                         # overlapping, along the first axis only


def beside_the_window(p):
    p[1:4, 2:5] = p[1:4, 5:8] + p[4:7, 2:5]             # apart along one axis each


@pytest.mark.parametrize("fn", [copy_boundary_rows, shift_down, shift_within_a_column, beside_the_window],
                         ids=lambda f: f.__name__)
def test_in_place_updates_reading_their_array_match_numpy(fn):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((9, 10))
    want, got = x.copy(), x.copy()
    fn(want)
    nbxla.jit(fn, device="cpu")(got)
    np.testing.assert_array_equal(got, want)


def test_one_pass_where_the_slices_read_lie_outside_the_window():
    from nbxla.codegen.updates import _one_pass
    from nbxla.hlo.parser import parse_hlo

    def one_pass(read: str) -> bool:           # rows [7, 9) written from the rows ``read``
        comp = parse_hlo(f"""
        HloModule m
        ENTRY e {{
          p = f64[9,10] parameter(0)
          r = f64[2,10] slice(p), slice={{{read}, [0:10]}}
          i = s64[] constant(7)
          z = s64[] constant(0)
          ROOT u = f64[9,10] dynamic-update-slice(p, r, i, z)
        }}""").entry
        return _one_pass(comp, comp.root, comp.parameters[0])
    assert one_pass("[3:5]") and one_pass("[5:7]")          # apart from the window
    assert not one_pass("[6:8]")                            # shifted into it: two passes
