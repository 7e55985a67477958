"""Transcendentals as functions of the module that kernels call (``codegen/math_calls.py``):
one body per module however many kernels use it, the loop vectorizer's calls of the vector
variants at the widths asked for, and the same values, bit for bit, as the inlined code."""

from __future__ import annotations

import ctypes
import re
from collections import Counter

import llvmlite.binding as llvm
import numpy as np
import pytest
from llvmlite import ir

import nbxla
from nbxla.codegen import math_calls
from nbxla.codegen.compute_bound import INTERLEAVE, INTERLEAVE_MIN_EXTENT
from nbxla.codegen.cpu import compile_kernels
from nbxla.codegen.transcendentals import BOUNDED_TRIG_LIMIT
from nbxla.hlo.builder import Builder
from nbxla.hlo.shapes import Shape
from tests.codegen.test_transcendentals import run

_KERNEL = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
_DTYPES = {"f32": np.float32, "f64": np.float64}
# HLO opcode -> the inlined kernel of test_transcendentals computing it
_OPCODES = {"exponential": "exp", "exponential-minus-one": "expm1", "log": "log",
            "log-plus-one": "log1p", "tanh": "tanh", "logistic": "logistic", "erf": "erf",
            "sine": "sin", "cosine": "cos", "tan": "tan", "power": "pow", "atan2": "atan2"}


@pytest.fixture
def every_use_called(monkeypatch):
    """Kernels call their transcendentals from the first use (math_calls.MIN_CALLED_USES)."""
    monkeypatch.setattr(math_calls, "MIN_CALLED_USES", 1)


def _kernel(opcode: str, t: str, n: int, build=None):
    """compile_kernels of one fusion ``opcode(p0[, p1])`` (or ``build(builder, p0, p1)``)."""
    bld = Builder("k")
    p0, p1 = bld.parameter(Shape(t, (n,))), bld.parameter(Shape(t, (n,)))
    if build is not None:
        build(bld, p0, p1)
    else:
        bld.op(opcode, p0, p1) if opcode in ("power", "atan2") else bld.op(opcode, p0)
    return bld.build()


def _run(ck, name: str, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    out = np.empty_like(x)
    bufs = (ctypes.c_void_p * 3)(x.ctypes.data, y.ctypes.data, out.ctypes.data)
    _KERNEL(ck.addresses[name])(ctypes.cast(bufs, ctypes.c_void_p), 0, ck.specs[name].parallel_extent)
    return out


def _functions(text: str) -> dict[str, str]:
    """Defined function name -> its body, in an LLVM module's text."""
    found = re.findall(r"^define [^@\n]*@([\w.]+)\(.*?\n}", text, re.M | re.S)
    bodies = re.split(r"^define ", text, flags=re.M)[1:]
    return {name: body for name, body in zip(found, bodies)}


def _defined(text: str) -> list[str]:
    return re.findall(r"^define [^@\n]*@(nbxla_math_\w+)\(", text, re.M)


def test_a_function_used_by_several_kernels_has_one_body(every_use_called):
    """Three kernels calling exp (one also log): the module defines exp's scalar function and
    each vector variant once, every kernel calls them, and no kernel holds exp's code."""
    n = 1000 + 7                                        # (a vector loop and a remainder)
    builds = [lambda b, x, y: b.op("multiply", b.op("exponential", x), y),
              lambda b, x, y: b.op("exponential", b.op("add", x, y)),
              lambda b, x, y: b.op("log", b.op("exponential", b.op("subtract", x, y)))]
    fusions = [(f"k{i}", _kernel(None, "f64", n, build)) for i, build in enumerate(builds)]
    ck = compile_kernels("m", fusions)
    assert not ck.unsupported
    assert not _defined(ck.llvm_ir)                     # (declarations until optimized)
    defined = Counter(_defined(ck.llvm_ir_optimized))
    assert defined["nbxla_math_exp_f64"] == 1 and defined["nbxla_math_log_f64"] == 1
    assert any(re.fullmatch(r"nbxla_math_exp_f64_v\d+_r\d+", name) for name in defined)
    assert set(defined.values()) == {1}, defined
    functions = _functions(ck.llvm_ir_optimized)
    for name, _ in fusions:
        assert "@nbxla_math_exp_f64" in functions[name]
        assert "llvm.fmuladd" not in functions[name]       # (exp's polynomial is not inlined)
    rng = np.random.default_rng(0)
    x, y = rng.uniform(-5, 5, n), rng.uniform(-5, 5, n)
    with np.errstate(all="ignore"):
        refs = [np.exp(x) * y, np.exp(x + y), np.log(np.exp(x - y))]
    for (name, _), ref in zip(fusions, refs):
        np.testing.assert_allclose(_run(ck, name, x, y), ref, rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize("t", ["f32", "f64"])
@pytest.mark.parametrize("opcode", sorted(_OPCODES))
def test_called_functions_give_the_inlined_values_bit_for_bit(opcode, t, every_use_called):
    """A kernel calling the module's function (vector variant in the loop, scalar one in its
    remainder) against the inlined code of test_transcendentals, on n = 4096 + 13 elements;
    sin/cos/tan below BOUNDED_TRIG_LIMIT take the versioned loop's Cody-Waite form, above it
    (every block has a huge argument) the full one."""
    dtype, n = _DTYPES[t], 4096 + 13
    rng = np.random.default_rng(1)
    x = rng.uniform(-30, 30, n).astype(dtype)
    y = rng.uniform(-3, 3, n).astype(dtype)
    name = _OPCODES[opcode]
    if opcode in ("log", "log-plus-one", "power"):
        x = np.abs(x)
    ck = compile_kernels("m", [("k", _kernel(opcode, t, n))])
    assert "nbxla_math_" in ck.llvm_ir
    trig = opcode in ("sine", "cosine", "tan")
    expect = run(name + "_bounded" if trig else name, *([x, y] if opcode in ("power", "atan2") else [x]))
    np.testing.assert_array_equal(_run(ck, "k", x, y), expect)
    if trig:
        huge = (x * dtype(1e6)).astype(dtype)
        huge[::400] = dtype(3e30)                       # (every block: the full reduction)
        assert np.abs(huge).max() > BOUNDED_TRIG_LIMIT
        np.testing.assert_array_equal(_run(ck, "k", huge, y), run(name, huge))


def _variant_widths(text: str, fn: str) -> list[int]:
    return [int(v) for v in re.findall(rf"_ZGV_LLVM_N(\d+)v_{fn}\(", text)]


def test_loops_with_iterations_in_flight_call_one_variant_as_wide(every_use_called):
    """Both sides of compute_bound.INTERLEAVE_MIN_EXTENT: rows of 512 (interleaved: INTERLEAVE
    vectors in flight) are vectorized INTERLEAVE times as wide and call that variant, once an
    iteration; rows of 30 (not interleaved) call the registers' variant."""
    assert 30 < INTERLEAVE_MIN_EXTENT <= 512
    widths = {}
    for cols in (30, 512):
        f = nbxla.jit(lambda x, r: np.exp(x + r))
        x, r = np.linspace(-3, 3, 8 * cols).reshape(8, cols), np.linspace(0, 1, cols)
        np.testing.assert_allclose(f(x, r), np.exp(x + r), rtol=1e-14)
        text = f.last_compilation.stage("llvm_ir")
        widths[cols] = _variant_widths(text, "nbxla_math_exp_f64")
        forced = re.findall(r'"llvm.loop.vectorize.width", i32 (\d+)', text)
        if cols == 512:
            assert [int(w) for w in forced] == widths[cols], (forced, widths[cols])
        else:
            assert not forced
    assert len(widths[512]) == 1 and len(set(widths[30])) == 1
    assert widths[512][0] == INTERLEAVE * widths[30][0]


def _scratch(ty: ir.Type, triple: str | None = None):
    """A module (for the host, or ``triple``) and a builder in a function of one ``ty`` argument."""
    module = ir.Module("scratch")
    module.triple = llvm.get_process_triple() if triple is None else triple
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ty]), "f")
    return module, ir.IRBuilder(fn.append_basic_block()), fn.args[0]


@pytest.mark.parametrize("case", ["half", "vector", "other target", "constant"])
def test_values_the_module_cannot_call_for_are_inlined(case):
    """half (computed in float inline), values that are vectors already, modules for another
    target (the GPU backend's) and constant arguments (which LLVM folds into the inlined code)
    get the inlined code: no function is declared."""
    ty = {"half": ir.HalfType(), "vector": ir.VectorType(ir.DoubleType(), 4)}.get(case, ir.DoubleType())
    module, b, arg = _scratch(ty, "nvptx64-nvidia-cuda" if case == "other target" else None)
    value = math_calls.call(b, "exp", [ir.Constant(ty, 2.0) if case == "constant" else arg])
    assert not [g for g in module.globals if g.startswith(math_calls.PREFIX)]
    assert value.type == ty and "llvm.fmuladd" in str(module)     # (exp's polynomial, inline)
    # ... while a double argument in a host module is a call
    host, hb, harg = _scratch(ir.DoubleType())
    call = math_calls.call(hb, "exp", [harg])
    assert isinstance(call, ir.CallInstr) and call.callee.name == "nbxla_math_exp_f64"
    assert "vector-function-abi-variant" in str(host)


@pytest.mark.parametrize("uses", [1, 2, 3])
def test_kernels_call_from_min_called_uses_on(uses):
    """Both sides of math_calls.MIN_CALLED_USES (3): exp used once or twice is inlined, three
    times called; a sin counts twice (two loops, the largest body): sin and exp are called."""
    assert math_calls.MIN_CALLED_USES == 3
    n = 999

    def build(b, x, y):
        v = x
        for _ in range(uses):
            v = b.op("exponential", b.op("multiply", v, y))
        return v
    ck = compile_kernels("m", [("k", _kernel(None, "f64", n, build))])
    rng = np.random.default_rng(3)
    x, y = rng.uniform(-1, 1, n), rng.uniform(-1, 1, n)
    ref = x
    for _ in range(uses):
        ref = np.exp(ref * y)
    np.testing.assert_allclose(_run(ck, "k", x, y), ref, rtol=1e-14)
    assert ("nbxla_math_exp_f64" in ck.llvm_ir) == (uses >= 3)
    if uses == 2:
        trig = compile_kernels("m", [("k", _kernel(None, "f64", n, lambda b, x, y: b.op(
            "multiply", b.op("sine", x), b.op("exponential", y))))])
        assert "nbxla_math_sin_f64" in trig.llvm_ir and "nbxla_math_exp_f64" in trig.llvm_ir
