"""AOT with several unknown sizes, loops, transposed dots and the planned arena: each object is
linked into a C program that runs it at several sizes in one process (the per-thread arena
grows and shrinks between them), every result checked against NumPy and against the
caller's-arena entry point; sizes outside the range return 2; refusals name the dimension."""

from __future__ import annotations

import numpy as np
import pytest

import nbxla.aot
from nbxla.errors import AotError
from tests.aot.aot_util import needs_cc
from tests.aot.unknown_util import UnknownSizeProgram

RNG = np.random.default_rng(31)
W = (RNG.random((64, 64), np.float32) - 0.5) * 0.2


def two_batches(x, y):
    return np.tanh(x) * 2, y.sum(axis=0), (y @ W[:32, :16]).max(axis=0)


def grid(x, y):
    return np.exp(x) * 2 - y


def square(x):
    return np.tanh(x) + 1


def gradients(x, g):
    return x.T @ g, g.sum(axis=0)


def loop(x, w, steps):
    s = x
    t = x.sum(axis=0)
    i = 0
    while i < steps:
        s = np.tanh(s @ w) + x
        t = t + s.sum(axis=0)
        i += 1
    return s, t


def chain(x, w):
    # (written out: a Python loop may become an HLO while)
    s = np.tanh(x @ w) + x
    s = np.tanh(s @ w) + x
    s = np.tanh(s @ w) + x
    s = np.tanh(s @ w) + x
    return np.tanh(s @ w) + x


def _rows(n, cols):
    return RNG.random((n, cols), np.float32)


def _check(program, cases, fn, rtol=2e-5):
    for (sizes, args), (rc, got) in zip(cases, program.run(cases)):
        assert rc == 0, f"sizes {sizes}: return code {rc}"
        want = fn(*args)
        want = want if isinstance(want, tuple) else (want,)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol * max(1.0, float(np.abs(w).max())),
                                       err_msg=f"sizes {sizes}")


@needs_cc
def test_two_arguments_with_different_unknown_sizes(tmp_path):
    program = UnknownSizeProgram(two_batches, ["f32[?,64]", "f32[?n,32]"], tmp_path, "two")
    assert program.symbols == ["b", "n"]
    cases = [({"b": b, "n": n}, [_rows(b, 64), _rows(n, 32)]) for b, n in ((33, 7), (2, 100), (100, 2), (17, 19))]
    _check(program, cases, two_batches)
    # several unknown sizes: size 1 is specialised (broadcasting), so it is outside the range
    (rc, _), = program.run([({"b": 1, "n": 5}, [_rows(1, 64), _rows(5, 32)])])
    assert rc == 2
    text = open(program.obj.header_path).read()
    assert "int two(int64_t b, int64_t n, const float *arg0, const float *arg1," in text
    assert "#define TWO_ARG1_SIZE(b, n) (((int64_t)32 * (n)))" in text
    assert "#define TWO_MIN_N 2" in text


@needs_cc
def test_an_array_of_two_unknown_sizes_elementwise(tmp_path):
    program = UnknownSizeProgram(grid, ["f32[?m,?n]", "f32[?m,?n]"], tmp_path, "grid")
    cases = [({"m": m, "n": n}, [_rows(m, n), _rows(m, n)]) for m, n in ((2, 3), (7, 33), (100, 13), (5, 2))]
    _check(program, cases, grid)
    assert "#define GRID_ARG0_SIZE(m, n) (((m) * (n)))" in open(program.obj.header_path).read()


@needs_cc
def test_a_square_of_one_unknown_size(tmp_path):
    program = UnknownSizeProgram(square, ["f32[?,?]"], tmp_path, "square")
    _check(program, [({"b": b}, [_rows(b, b)]) for b in (1, 2, 7, 33, 100)], square)


@needs_cc
def test_a_transposed_dot_over_the_unknown_size(tmp_path):
    program = UnknownSizeProgram(gradients, ["f32[?,64]", "f32[?,32]"], tmp_path, "gradients")
    _check(program, [({"b": b}, [_rows(b, 64), _rows(b, 32)]) for b in (1, 2, 7, 33, 100, 1031)], gradients,
           rtol=1e-4)


@needs_cc
def test_a_while_loop_whose_state_has_the_unknown_size(tmp_path):
    program = UnknownSizeProgram(loop, ["f32[?,64]", "f32[64,64]", "s32[]"], tmp_path, "loop")
    c = open(program.obj.object_path, "rb").read()
    assert c                                           # (the object exists; its C runs the loop)
    cases = [({"b": b}, [_rows(b, 64), W, np.int32(steps)])
             for b, steps in ((100, 3), (1, 0), (2, 1), (7, 5), (33, 2), (1031, 4))]
    _check(program, cases, loop, rtol=1e-4)


@needs_cc
def test_the_loop_is_a_c_loop_and_temporaries_share_slots(tmp_path):
    nbxla.aot.compile(loop, ["f32[?,64]", "f32[64,64]", "s32[]"], str(tmp_path), "loop", emit_c=True)
    text = (tmp_path / "loop.driver.c").read_text()
    assert "for (;;)" in text and "loop_p2(sz, cur, pd," in text
    # five layers of [b,64] temporaries (a dot's result, then the layer's) live in two slots
    nbxla.aot.compile(chain, ["f32[?,64]", "f32[64,64]"], str(tmp_path), "chain", emit_c=True)
    text = (tmp_path / "chain.driver.c").read_text()
    assert "char *s1 = " in text and "char *s2 = " not in text
    assert "malloc(" not in text.split("/* ---- generated ---- */")[1]


@needs_cc
def test_the_chain_runs_in_a_reused_arena(tmp_path):
    program = UnknownSizeProgram(chain, ["f32[?,64]", "f32[64,64]"], tmp_path, "chain")
    # (large, then small, then larger: the arena is grown only when a call needs more)
    _check(program, [({"b": b}, [_rows(b, 64), W]) for b in (100, 1, 2, 7, 1031, 33)], chain, rtol=1e-4)


def row_sums(x):
    return x.sum(axis=1)


@needs_cc
def test_a_reduction_over_an_unknown_row_length_reads_it_when_it_runs(tmp_path):
    """(Once refused: the row kernel baked its length in; it reads it from its sizes array
    now, codegen/run_sizes.py.)  Rows on both sides of a sum's block."""
    program = UnknownSizeProgram(row_sums, ["f32[?m,?n]"], tmp_path, "rows")
    _check(program, [({"m": m, "n": n}, [_rows(m, n)]) for m, n in ((2, 3), (7, 33), (3, 4097), (5, 2))],
           row_sums, rtol=1e-4)


@pytest.mark.parametrize("spec, match", [("f32[?B,3]", r"the dimension '\?B'"), ("f32[?n-1,3]", "not an array type"), ("f32[3,x]", "neither a size"),
                                         ("f32[?in,3]", r"\?in has a name the object's C uses")])
def test_bad_unknown_size_names_are_refused(tmp_path, spec, match):
    with pytest.raises(AotError, match=match):
        nbxla.aot.compile(lambda x: x * 2, [spec], str(tmp_path), "bad")
