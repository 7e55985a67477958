"""Kernels whose sizes are read when they run (``codegen/run_sizes.py``): one compilation of a
program with an unknown dimension serves every size, the kernels' loop bounds and strides
computed from the call's sizes.  Oracles: NumPy for jit functions, the reference evaluator for
HLO modules; sizes 1 (jit only: a module's run starts at 2), 2, 7, 33 and 1031, and both sides
of the thresholds the kernels switch at (a transpose's tile, a long row's chunk, a sum's
block)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import nbxla
from nbxla.codegen.arg_reductions import CHUNK
from nbxla.codegen.toolkit import BLOCK
from nbxla.codegen.transposes import TILE
from nbxla.runtime.cache import CompilationCache
from nbxla.hlo.evaluator import evaluate, flatten
from nbxla.hlo.parser import parse_hlo
from nbxla.hlo.symbolic import bind_module, module_is_symbolic
from nbxla.symbolic_compile import compile_symbolic_module, run_symbolic
from nbxla.testing import compare_arrays

SIZES = (1, 2, 7, 33, 1031)


def _served_by_one_compilation(fn, args_at, sizes=SIZES, dynamic=True, exact=True):
    """``fn`` jitted with unknown dimensions and called at each size: equal to NumPy, and
    every call served by the one symbolic compilation."""
    f = nbxla.jit(fn, dynamic=dynamic, cache=CompilationCache())
    compilations = set()
    for n in sizes:
        args = args_at(n)
        got, want = f(*args), fn(*args)
        for g, w in zip(*(([x] if not isinstance(x, tuple) else list(x)) for x in (got, want))):
            g, w = np.asarray(g), np.asarray(w)
            if exact:
                assert g.shape == w.shape and np.array_equal(g, w, equal_nan=w.dtype.kind in "fc"), f"size {n}"
            else:
                ok, detail = compare_arrays(g, w)
                assert ok, f"size {n}: {detail}"
        comp = f.last_compilation
        assert module_is_symbolic(comp.hlo), f"size {n}: {comp.dimensions}"
        compilations.add(id(comp.hlo))
    assert len(compilations) == 1


def _module_served(text: str, shape_at, sizes=(2, 3, 7, 16, 33, 1031), dtype=np.float32):
    """The module (its unknown dimension ``b``) compiled once, run at each size against the
    evaluator on the module bound to that size."""
    module = parse_hlo(text)
    program = compile_symbolic_module(module)
    rng = np.random.default_rng(7)
    for n in sizes:
        x = rng.standard_normal(shape_at(n)).astype(dtype)
        got = run_symbolic(program, [x])
        want = flatten(evaluate(bind_module(module, {"b": n}), [x]))
        for g, w in zip(got, want):
            assert np.array_equal(np.asarray(g), np.asarray(w)), f"size {n}"
    return program


# ---- transposes ------------------------------------------------------------------------------

@pytest.mark.parametrize("perm", [p for p in itertools.permutations(range(3)) if p != (0, 1, 2)])
@pytest.mark.parametrize("unknown", [0, 1, 2])
def test_every_3d_transpose_with_the_unknown_dim_anywhere(perm, unknown):
    dims = [5, 3, 20]
    dims[unknown] = "b"
    in_text = ",".join(map(str, dims))
    out_text = ",".join(str(dims[p]) for p in perm)
    text = (f"HloModule t\nENTRY e {{ p = f32[{in_text}]{{2,1,0}} parameter(0)\n"
            f" ROOT t = f32[{out_text}]{{2,1,0}} transpose(p), dimensions={{{','.join(map(str, perm))}}} }}")
    program = _module_served(text, lambda n: tuple(n if d == "b" else d for d in dims))
    style = next(iter(program.compilation.executable.native.kernels.specs.values())).style
    assert style == ("transpose-runs" if perm[-1] == 2 else "transpose")


@pytest.mark.parametrize("t", [np.int8, np.float16, np.float32, np.complex128])
def test_transposes_of_every_element_width(t):
    _served_by_one_compilation(lambda x: x.T.copy(),
                               lambda n: ((np.arange(n * 19) % 101).astype(t).reshape(n, 19),))


def test_a_large_transpose_with_an_unknown_minor_dim_splits_across_threads():
    """Tiles of an unknown dim: the range counts rows and each part of a split range runs the
    tiles that start in it (none twice, none left out); sizes on both sides of a tile."""
    text = ("HloModule t\nENTRY e { p = f32[600,b]{1,0} parameter(0)\n"
            " ROOT t = f32[b,600]{1,0} transpose(p), dimensions={1,0} }")
    program = _module_served(text, lambda n: (600, n), sizes=(TILE - 1, TILE, TILE + 1, 2049))
    instance = program.instance({"b": 2049}).executable.native
    assert "split over" in instance.describe()


# ---- reverse, pad, concatenate, reshape, broadcast ---------------------------------------------

@pytest.mark.parametrize("name,fn", [
    ("flip", lambda x: np.flip(x, axis=0) + 1),
    ("flip_both", lambda x: np.flip(x) * 2),
    ("pad", lambda x: np.pad(x, ((0, 0), (1, 2))) + 1),
    ("concatenate", lambda x: np.concatenate([x, x * 2], axis=0) - 1),
    ("concatenate_minor", lambda x: np.concatenate([x, -x], axis=1)),
    ("reshape", lambda x: (x * 3).reshape(-1, 2, 3)),
    ("broadcast", lambda x: x[:, None, :] + np.arange(4, dtype=np.float32)[None, :, None]),
    ("swapaxes", lambda x: np.swapaxes(x[:, :, None] * 2, 0, 2)),
])
def test_data_movement_kernels_read_the_size_when_they_run(name, fn):
    # (a broadcast of a size-1 dim is another program: NumPy's rule, not the kernel's)
    _served_by_one_compilation(fn, lambda n: (np.arange(n * 6, dtype=np.float32).reshape(n, 6) / 7,),
                               sizes=SIZES[1:] if name == "broadcast" else SIZES)


# ---- reductions ------------------------------------------------------------------------------

@pytest.mark.parametrize("which", [np.argmax, np.argmin])
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_arg_reductions_over_an_unknown_dim(which, axis):
    def args(n):
        x = (np.arange(n * 53) * 7919 % 13).astype(np.float32).reshape(n, 53)
        x[n // 2, 5] = np.nan
        return (x,)
    _served_by_one_compilation(lambda x: which(x, axis=axis), args)


def test_max_and_argmax_together_over_long_unknown_rows():
    """Rows of ``53 * b`` elements: on both sides of the chunk a long row is searched by."""
    sizes = (1, 2, 33, CHUNK // 53, CHUNK // 53 + 1, 1031)
    _served_by_one_compilation(lambda x: (np.max(x), np.argmax(x)),
                               lambda n: ((np.arange(n * 53) * 7919 % 1009).astype(np.float32).reshape(n, 53),),
                               sizes=sizes)


def test_row_sums_over_an_unknown_last_axis_on_both_sides_of_a_block():
    rng = np.random.default_rng(3)
    sizes = (1, 2, 7, BLOCK - 1, BLOCK + 1, 3 * BLOCK + 5)
    _served_by_one_compilation(lambda x: (np.sum(x, axis=1), np.max(x, axis=1)),
                               lambda n: (rng.standard_normal((4, n)).astype(np.float32),),
                               sizes=sizes, dynamic={"x": (1,)}, exact=False)


def test_column_sums_whose_rows_come_from_a_reshape():
    _served_by_one_compilation(lambda x: np.sum(x.reshape(-1, 4), axis=0),
                               lambda n: (np.arange(n * 8, dtype=np.float32).reshape(n, 8),))


# ---- a size the runtime needs as a number: refused when compiling, not when running ------------

def test_a_size_the_runtime_reads_as_a_number_refuses_the_compile(monkeypatch):
    """The runtime makes a program's instance at a size from the entry bound to it over the
    symbolic fused computations; a runtime path reading one of their sizes as a number raises
    ``the unknown size ... used as a number``.  That must be a refusal of the compile (then
    compiled for the concrete size), not an error of a later call: here the buffer plan is made
    to read the fused computations' sizes, as such a path would."""
    import nbxla.symbolic_program as symbolic_program
    from nbxla.hlo.shapes import SymbolicDimensionError
    real = symbolic_program.plan_buffers

    def reads_fused_sizes(module):
        for fusion in module.entry.instructions:
            if fusion.opcode == "fusion":
                for instr in fusion.attrs["calls"].instructions:
                    [int(d) for d in instr.shape.dims]
        return real(module)
    monkeypatch.setattr(symbolic_program, "plan_buffers", reads_fused_sizes)
    text = ("HloModule t\nENTRY e { p = f32[b,20,40]{2,1,0} parameter(0)\n"
            " r = f32[800*b]{0} reshape(p)\n c = f32[] constant(2)\n k = f32[800*b]{0} broadcast(c), dimensions={}\n"
            " ROOT m = f32[800*b]{0} multiply(r, k) }")
    with pytest.raises(SymbolicDimensionError, match=r"runtime needs a size as a number \(the unknown size .*b used as a number\)"):
        compile_symbolic_module(parse_hlo(text))
    monkeypatch.setattr(symbolic_program, "plan_buffers", real)
    program = compile_symbolic_module(parse_hlo(text))
    x = np.ones((3, 20, 40), np.float32)
    assert np.array_equal(np.asarray(run_symbolic(program, [x])[0]), np.full(2400, 2, np.float32))


# ---- dynamic slices and updates along an unknown dim ---------------------------------------------

@pytest.mark.parametrize("start", [0, 3, 10_000, -4])
def test_dynamic_slice_and_update_clamped_to_an_unknown_size(start):
    """Starts are clamped to [0, b - size]: at every size, with the start in and out of range."""
    text = ("HloModule t\nENTRY e { p = f32[b,5]{1,0} parameter(0)\n i = s32[] parameter(1)\n z = s32[] constant(0)\n"
            " s = f32[2,5]{1,0} dynamic-slice(p, i, z), dynamic_slice_sizes={2,5}\n"
            " n = f32[2,5]{1,0} negate(s)\n"
            " ROOT u = f32[b,5]{1,0} dynamic-update-slice(p, n, i, z) }")
    module = parse_hlo(text)
    program = compile_symbolic_module(module)
    for n in (2, 3, 7, 33, 1031):
        x = np.arange(n * 5, dtype=np.float32).reshape(n, 5)
        args = [x, np.int32(start)]
        got = run_symbolic(program, args)
        want = flatten(evaluate(bind_module(module, {"b": n}), args))
        assert np.array_equal(np.asarray(got[0]), np.asarray(want[0])), f"size {n}"
