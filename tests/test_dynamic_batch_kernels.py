"""Kernels over a batch of unknown size (issue 31): native dots (their epilogues, a contraction
or a row over the batch), convolutions (the library call and the native depthwise kernel, each
with its bias / relu folded in), scans and row sorts.  One compilation serves sizes 1, 2, 7, 33
and 1031, each checked against NumPy (jit) or the evaluator (HLO modules); the static
compilation of the same program is the other side of each check."""

from __future__ import annotations

import numpy as np
import pytest

import nbxla
from benchmarks.conv_hlo import conv_bias_relu
from nbxla.hlo.evaluator import evaluate, flatten
from nbxla.hlo.parser import parse_hlo
from nbxla.hlo.symbolic import bind_module, module_is_symbolic
from nbxla.runtime.cache import CompilationCache
from nbxla.symbolic_compile import compile_symbolic_module, run_symbolic
from nbxla.testing import compare_arrays

SIZES = (1, 2, 7, 33, 1031)
RNG = np.random.default_rng(31)


def _ints(*shape):
    return RNG.integers(-4, 5, shape).astype(np.int32)


def _floats(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


W_INT, V_INT = _ints(12, 5), _ints(12)

W, BIAS = _floats(12, 6), _floats(6)

# (function, arguments at batch size n, the kernel that must serve every size)
PROGRAMS = {
    # no BLAS call takes s32: the native dot kernel, rows over the batch
    "int_matmul": (lambda x, w: x @ w, lambda n: (_ints(n, 12), W_INT)),
    # the row is the batch: its length read when the kernel runs
    "int_matvec": (lambda x, v: x @ v, lambda n: (_ints(n, 12), V_INT)),
    # a weight gradient: the contraction runs over the batch, its length read when it runs
    "int_weight_gradient": (lambda x, g: x.T @ g, lambda n: (_ints(n, 12), _ints(n, 5))),
    # a small dense layer: the dot a BLAS call, its bias and relu a rows kernel of 6-element rows
    "small_layer": (lambda x, w, b: np.maximum(x @ w + b, 0), lambda n: (_floats(n, 12), W, BIAS)),
    # scans along each row (the scan kernel: blocks of rows)
    "cumsum_rows": (lambda x: np.cumsum(x, axis=1), lambda n: (_floats(n, 40),)),
}


@pytest.mark.parametrize("name", PROGRAMS)
def test_one_compilation_serves_every_batch_size(name):
    fn, make = PROGRAMS[name]
    cache = CompilationCache()
    f = nbxla.jit(fn, cache=cache, dynamic=True)
    for n in SIZES:
        args = make(n)
        got, want = f(*args), fn(*args)
        ok, detail = compare_arrays(np.asarray(got), np.asarray(want))
        assert ok, f"{name} at batch size {n}: {detail}"
    assert cache.misses == 1, cache.entries()[0].explanation
    assert module_is_symbolic(f.last_compilation.hlo)


def test_the_static_compilations_agree():
    """(the other side: each program compiled for its size, dynamic=False)"""
    for name, (fn, make) in PROGRAMS.items():
        f = nbxla.jit(fn, cache=CompilationCache(), dynamic=False)
        for n in (2, 33):
            args = make(n)
            ok, detail = compare_arrays(np.asarray(f(*args)), np.asarray(fn(*args)))
            assert ok, f"{name} at {n}: {detail}"


def test_dot_kernels_read_the_sizes_they_do_not_know():
    f = nbxla.jit(PROGRAMS["int_weight_gradient"][0], cache=CompilationCache(), dynamic=True)
    f(*PROGRAMS["int_weight_gradient"][1](9))
    ir_text = f.last_compilation.stage("llvm_ir")
    assert '%"size' in ir_text                                   # (the RunSizes load)
    static = nbxla.jit(PROGRAMS["int_weight_gradient"][0], cache=CompilationCache(), dynamic=False)
    static(*PROGRAMS["int_weight_gradient"][1](9))
    assert '%"size' not in static.last_compilation.stage("llvm_ir")  # static kernels bake it in


def test_a_square_dot_with_every_side_unknown():
    """``x @ y + x`` over n x n integer matrices, every side one unknown size (dynamic=True):
    the native dot kernel's rows, row length and contraction, and its operands' strides,
    read when it runs."""
    fn = lambda x, y: x @ y + x                                  # noqa: E731
    cache = CompilationCache()
    f = nbxla.jit(fn, cache=cache, dynamic=True)
    for n in (8, 2, 3, 33, 1):
        x, y = _ints(n, n), _ints(n, n)
        np.testing.assert_array_equal(f(x, y), fn(x, y), err_msg=f"n={n}")
    assert cache.misses == 1, cache.entries()[0].explanation
    assert "x.shape[1] -> b" in f.last_compilation.dimensions, f.last_compilation.dimensions


def test_sorting_rows_serves_every_batch_size():
    fn = lambda x: np.sort(x, axis=1)           # noqa: E731
    cache = CompilationCache()
    f = nbxla.jit(fn, cache=cache, dynamic=True)
    for n in SIZES:
        x = _floats(n, 37)
        x[0, :3] = np.nan
        np.testing.assert_array_equal(f(x), fn(x))
    assert cache.misses == 1


SORT_BY_A_COMPARATOR = """HloModule sort_values
%less (l0: f32[], r0: f32[]) -> pred[] {
  %l0 = f32[] parameter(0)
  %r0 = f32[] parameter(1)
  ROOT %c = pred[] compare(%l0, %r0), direction=LE
}
ENTRY %main (x: f32[b]) -> f32[b] {
  %x = f32[b] parameter(0)
  ROOT %s = f32[b] sort(%x), dimensions={0}, to_apply=%less
}
"""


def test_the_sort_kernel_sorts_a_batch_of_unknown_length():
    """A comparator NumPy's sort cannot follow (LE: the merge sort's order of ties): the
    native sort kernel over the whole batch, its length read when it runs and its merge passes
    looping until a run covers it; the evaluator's answer, bit for bit, NaNs and ties too."""
    module = parse_hlo(SORT_BY_A_COMPARATOR)
    program = compile_symbolic_module(module, {"b": 3})
    for n in SIZES[1:]:
        x = np.round(_floats(n), 1)                 # (ties)
        x[::5] = np.nan
        got = run_symbolic(program, [x])[0]
        want = flatten(evaluate(bind_module(module, {"b": n}), [x]))[0]
        assert np.array_equal(got, want, equal_nan=True), f"length {n}"
    native = program.instance({"b": 7}).executable.native
    assert "s" in native.kernel_symbols and not native.library_calls
    assert '%"size' in program.compilation.stage("llvm_ir")


# ---- convolutions over an unknown batch (HLO modules, as the rerun builds them) -----------------

@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
@pytest.mark.parametrize("groups, features, out_features, runs_as", [
    (1, 8, 16, "library"),          # dense: the patch-GEMM library call with the epilogue in its store
    (8, 8, 8, "kernel"),            # depthwise: the native kernel with the epilogue folded in
])
def test_convolution_over_an_unknown_batch(layout, groups, features, out_features, runs_as):
    module = parse_hlo(conv_bias_relu(layout, groups, features, out_features))
    program = compile_symbolic_module(module, {"b": 3})
    for n in SIZES[1:]:             # (a module's programs serve 2 and up: run_symbolic)
        concrete = bind_module(module, {"b": n})
        args = [_floats(*p.shape.dims) for p in concrete.entry.parameters]
        got = run_symbolic(program, args)[0]
        want = flatten(evaluate(concrete, args))[0]
        ok, detail = compare_arrays(np.asarray(got), np.asarray(want))
        assert ok, f"batch {n}: {detail}"
    assert program.instances == len(SIZES) - 1
    native = program.instance({"b": 7}).executable.native
    assert "convolution" not in [i.opcode for i in native.module.entry.instructions]     # (folded)
    if runs_as == "library":
        assert list(native.library_calls.values()) == ["fusion"] and not native.kernel_symbols
    else:
        assert not native.library_calls and len(native.kernel_symbols) == 1     # (the fusion)
    # the static compile at one size folds the same way and agrees
    from nbxla.compiler import compile_module
    concrete = bind_module(module, {"b": 7})
    args = [_floats(*p.shape.dims) for p in concrete.entry.parameters]
    static = compile_module(concrete, "cpu").executable.run(args)[0]
    ok, detail = compare_arrays(np.asarray(static), np.asarray(run_symbolic(program, args)[0]))
    assert ok, detail


# ---- scatters over an unknown batch (np.add.at checks its indices when it runs: HLO modules) ----

HISTOGRAM = """HloModule histogram
%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}
ENTRY %main (bins: f32[20], idx: s32[b,1], v: f32[b]) -> f32[20] {
  %bins = f32[20] parameter(0)
  %idx = s32[b,1] parameter(1)
  %v = f32[b] parameter(2)
  ROOT %h = f32[20] scatter(%bins, %idx, %v), update_window_dims={}, inserted_window_dims={0},
    scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%add
}
"""

ROWS_INTO_A_TABLE = """HloModule rows_into_a_table
%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}
ENTRY %main (table: f32[b,4], idx: s32[5,1], v: f32[5,4]) -> f32[b,4] {
  %table = f32[b,4] parameter(0)
  %idx = s32[5,1] parameter(1)
  %v = f32[5,4] parameter(2)
  ROOT %t = f32[b,4] scatter(%table, %idx, %v), update_window_dims={1}, inserted_window_dims={0},
    scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%add
}
"""


@pytest.mark.parametrize("text", [HISTOGRAM, ROWS_INTO_A_TABLE], ids=["updates", "operand"])
def test_scatter_over_an_unknown_batch(text):
    """The updates' count (a histogram of a batch) or the operand's rows (the bound indices are
    checked against: out-of-range ones, here some, are dropped) read when the kernel runs."""
    module = parse_hlo(text.replace(",\n    ", ", "))
    program = compile_symbolic_module(module, {"b": 3})
    for n in SIZES[1:]:
        concrete = bind_module(module, {"b": n})
        args = [RNG.integers(-2, 22, p.shape.dims).astype(np.int32) if p.shape.element_type == "s32"
                else _floats(*p.shape.dims) for p in concrete.entry.parameters]
        got = run_symbolic(program, args)[0]
        want = flatten(evaluate(concrete, args))[0]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"batch {n}")
    assert program.instances == len(SIZES) - 1
    assert '%"size' in program.compilation.stage("llvm_ir")


def _random_bits_module(algorithm: str, t: str, dims: str) -> str:
    """Bits of the shape ``dims`` (``b`` where unknown) xor-ed into a parameter of that shape:
    the bits' batch is the parameter's."""
    shape = f"{t}[{dims}]"
    return f"""HloModule bits_over_a_batch
ENTRY %main (s: u64[2], x: {shape}) -> {shape} {{
  %s = u64[2] parameter(0)
  %x = {shape} parameter(1)
  %r = (u64[2], {shape}) rng-bit-generator(%s), algorithm={algorithm}
  %bits = {shape} get-tuple-element(%r), index=1
  ROOT %y = {shape} xor(%x, %bits)
}}"""


@pytest.mark.parametrize("algorithm, t, dims", [
    ("rng_three_fry", "u32", "b,4"),        # narrow ThreeFry: pairs along b when even, else the 4
    ("rng_three_fry", "u32", "b,5"),        # ... along b when even, else the longest
    ("rng_three_fry", "u16", "3,b"),        # ... along b when even, else the 3 (or b, the longest)
    ("rng_three_fry", "u32", "b"),
    ("rng_three_fry", "u64", "b,3"),        # one block per element
    ("rng_philox", "u32", "b,3"),
])
def test_random_bits_over_an_unknown_batch(algorithm, t, dims):
    """The bits, bit for bit the evaluator's, at even and odd batch sizes from one compilation
    (narrow ThreeFry chooses the axis it pairs along by the sizes' parity: when it runs)."""
    module = parse_hlo(_random_bits_module(algorithm, t, dims))
    program = compile_symbolic_module(module, {"b": 3})
    state = np.array([42, 7], np.uint64)
    sizes = (2, 3, 4, 7, 8, 33)
    for n in sizes:
        concrete = bind_module(module, {"b": n})
        x = RNG.integers(0, 2 ** 16, concrete.entry.parameters[1].shape.dims).astype(np.dtype(t.replace("u", "uint")))
        got = run_symbolic(program, [state, x])[0]
        want = flatten(evaluate(concrete, [state, x]))[0]
        assert got.dtype == want.dtype and np.array_equal(got, want), f"{algorithm} {t}[{dims}] at b={n}"
    assert program.instances == len(sizes)


POOLS = {
    # along the batch itself: the window's bounds test reads the batch's length when it runs
    "max 3x1 along the batch": ("f32[6,80]", "f32[6,80]", "size=3x1 pad=1_1x0_0", "maximum"),
    # NHWC pooling, stride 2, padded: the batch is the rows' outer index
    "max 3x3 stride 2 NHWC": ("f32[6,9,9,4]", "f32[6,5,5,4]", "size=1x3x3x1 stride=1x2x2x1 pad=0_0x1_1x1_1x0_0",
                              "maximum"),
    "sum 2x2 along the batch, padded after": ("f32[6,7]", "f32[6,7]", "size=2x2 pad=0_1x0_1", "add"),
}


@pytest.mark.parametrize("name", POOLS)
def test_pooling_windows_over_an_unknown_batch(name):
    """Pooling windows whose rows (or whose window's own axis) run over the batch: the window
    kernel's row count and bounds read when it runs; sizes odd and even against the evaluator."""
    from tests.symbolic_rerun import symbolic_in_leading_size
    operand, result, window, op = POOLS[name]
    text = f"""HloModule pool
%r (a: f32[], b: f32[]) -> f32[] {{
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %c = f32[] {op}(%a, %b)
}}
ENTRY %main (x: {operand}, i: f32[]) -> {result} {{
  %x = {operand} parameter(0)
  %i = f32[] parameter(1)
  ROOT %w = {result} reduce-window(%x, %i), window={{{window}}}, to_apply=%r
}}"""
    static = parse_hlo(text)
    module, six = symbolic_in_leading_size(static, every=False)
    program = compile_symbolic_module(module, {"b": six})
    sizes = (2, 3, 6, 7, 33)
    for n in sizes:
        concrete = bind_module(module, {"b": n})
        args = [_floats(*concrete.entry.parameters[0].shape.dims), np.float32(0 if op == "add" else -np.inf)]
        got = run_symbolic(program, args)[0]
        want = flatten(evaluate(concrete, args))[0]
        assert got.shape == want.shape and np.array_equal(got, want), f"{name} at b={n}"
    assert program.instances == len(sizes)
    assert '%"size' in program.compilation.stage("llvm_ir")



EVALUATOR_FUSION = """HloModule one_kernel_refused
ENTRY %main (x: f32[6,8], y: f32[6,8]) -> (f32[6,8], f32[6,8]) {
  %x = f32[6,8] parameter(0)
  %y = f32[6,8] parameter(1)
  %e = f32[6,8] exponential(%x)
  %two = f32[] constant(2)
  %t = f32[6,8] broadcast(%two), dimensions={}
  %m = f32[6,8] multiply(%y, %t)
  ROOT %r = (f32[6,8], f32[6,8]) tuple(%e, %m)
}"""


def test_a_fusion_the_evaluator_runs_serves_every_batch_size(monkeypatch):
    """A kernel the code generator refuses (here: made to, as test_cpu's fallback test does)
    runs the evaluator's rule on its fusion bound to each size; the other kernel stays native
    and symbolic."""
    from nbxla.codegen import cpu
    from nbxla.errors import UnsupportedError
    from tests.symbolic_rerun import symbolic_in_leading_size
    real = cpu.emit_kernel

    def emit(module, name, comp):
        spec = real(module, name, comp)
        if any(i.opcode == "exponential" for i in comp.instructions):
            raise UnsupportedError("refused by the test")
        return spec
    monkeypatch.setattr(cpu, "emit_kernel", emit)
    module, six = symbolic_in_leading_size(parse_hlo(EVALUATOR_FUSION), every=False)
    program = compile_symbolic_module(module, {"b": six})
    native = program.compilation.executable.native
    assert list(native.interpreted.values()) == ["refused by the test"] and len(native.kernels.specs) == 1
    sizes = (2, 5, 6, 33)
    for n in sizes:
        x, y = _floats(n, 8), _floats(n, 8)
        got = run_symbolic(program, [x, y])
        want = flatten(evaluate(bind_module(module, {"b": n}), [x, y]))
        for g, w in zip(got, want):
            assert g.shape == w.shape and np.array_equal(g, w), f"b={n}"
    assert program.instances == len(sizes)
