"""Transposes of 2-D to 4-D arrays: every permutation, through the tiled transpose kernel
(codegen/transposes.py) when the minor dim moves and the loop kernel when it stays, on dims
that are and are not multiples of the tile, for every element width.  The oracle is the
evaluator (NumPy's transpose); results must be bit for bit equal."""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest

from nbxla.codegen.transposes import TILE
from nbxla.compiler import compile_module
from nbxla.hlo.evaluator import evaluate, flatten
from nbxla.hlo.parser import parse_hlo

from tests.codegen.test_fused_dots import assert_no_evaluator_steps

RNG = np.random.default_rng(5)
TYPES = {"f32": np.float32, "f64": np.float64, "s8": np.int8, "bf16": ml_dtypes.bfloat16,
         "pred": np.bool_, "c64": np.complex64, "u16": np.uint16}


def transpose_module(t: str, dims, perm) -> str:
    out = [dims[p] for p in perm]
    def shape(d):
        return f"{t}[{','.join(map(str, d))}]"
    return (f"HloModule t\nENTRY %main (x: {shape(dims)}) -> {shape(out)} {{\n  %x = {shape(dims)} parameter(0)\n"
            f"  ROOT %t = {shape(out)} transpose(%x), dimensions={{{','.join(map(str, perm))}}}\n}}\n")


def sample(t: str, dims) -> np.ndarray:
    if t == "pred":
        return RNG.random(dims) < 0.5
    if t == "c64":
        return (RNG.standard_normal(dims) + 1j * RNG.standard_normal(dims)).astype(np.complex64)
    if t in ("s8", "u16"):
        return RNG.integers(0, 100, dims).astype(TYPES[t])
    return RNG.standard_normal(dims).astype(TYPES[t])


def check(t: str, dims, perm):
    text = transpose_module(t, dims, perm)
    x = sample(t, dims)
    comp = compile_module(parse_hlo(text), "cpu")
    native = comp.executable.native
    assert not native.interpreted and not native.interpreted_ops
    assert_no_evaluator_steps(native)
    got = comp.executable.run([x])[0]
    want = flatten(evaluate(parse_hlo(text), [x]))[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.array_equal(got.view(np.uint8), np.ascontiguousarray(want).view(np.uint8)), (t, dims, perm)
    return comp


def kernel_style(comp) -> str:
    native = comp.executable.native
    (symbol,) = set(native.kernel_symbols.values())
    return native.kernels.specs[symbol].style


@pytest.mark.parametrize("perm", list(itertools.permutations(range(3))))
@pytest.mark.parametrize("dims", [(16, 8, 24), (5, 9, 11), (128, 32, 64)])
def test_every_3d_permutation(dims, perm):
    comp = check("f32", dims, perm)
    if perm != (0, 1, 2):
        assert kernel_style(comp) == ("transpose" if perm[-1] != 2 else "transpose-runs")


@pytest.mark.parametrize("perm", list(itertools.permutations(range(4))))
def test_every_4d_permutation(perm):
    check("f32", (3, 10, 8, 17), perm)


@pytest.mark.parametrize("t", sorted(TYPES))
def test_element_widths(t):
    check(t, (9, 16, 13), (2, 0, 1))
    check(t, (17, 24), (1, 0))


def test_tile_edges():
    """Dims one below, at and one above the tile size, on both sides of the tile."""
    for n_a in (TILE - 1, TILE, TILE + 1):
        for n_b in (TILE - 1, TILE, TILE + 1, 3 * TILE + 5):
            check("f32", (n_b, 2, n_a), (1, 2, 0))


def test_large_transpose_is_split_across_threads():
    comp = check("f32", (128, 32, 64), (1, 2, 0))
    native = comp.executable.native
    assert "transpose over" in native.describe() and "split over" in native.describe()


@pytest.mark.parametrize("dims,perm,run", [((128, 32, 64), (1, 0, 2), 64), ((4, 5, 6, 7), (1, 0, 2, 3), 42),
                                           ((4, 5, 6, 7), (2, 1, 0, 3), 7), ((512, 512, 4), (1, 0, 2), 4)])
@pytest.mark.parametrize("t", ["f32", "s8", "c64"])
def test_transposes_keeping_the_minor_dim_copy_runs(dims, perm, run, t):
    from nbxla.codegen.transposes import run_copy_transpose
    comp = check(t, dims, perm)
    assert kernel_style(comp) == "transpose-runs"
    fusion = next(i for i in comp.executable.module.entry.instructions if i.opcode == "fusion")
    assert run_copy_transpose(fusion.attrs["calls"])[2] == run
