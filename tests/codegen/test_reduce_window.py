"""Native reduce-window kernels on the CPU backend, against the reference evaluator.

Modules are written as HLO text (parsed, optimized and compiled with ``compile_module``), one
module holding many reduce-windows so that each compiles once per session.  A reduce-window
with a recognized reducer must run natively (``native.interpreted_ops`` empty) and give the
evaluator's bits: the kernels combine each window's elements in the evaluator's order, and
prefix windows (cumsum, cumprod, running max) scan in ``ufunc.accumulate``'s order.
Geometry: ranks 0-4, window sizes, strides, low/high padding (some larger than the window,
some making every window padding), base and window dilation, reversal, empty inputs and
outputs, prefix windows along every axis.  Every reducer on every element type.  Threads on
and off give the same bits.  NumPy programs using np.cumsum / np.cumprod /
np.maximum.accumulate through ``nbxla.jit``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nbxla
from nbxla.compiler import compile_module
from nbxla.hlo.attributes import WindowDim, Window
from nbxla.hlo.evaluator import evaluate, flatten
from nbxla.hlo.parser import parse_hlo
from nbxla.hlo.shape_inference import window_output_size
from nbxla.hlo.shapes import to_numpy_dtype
from nbxla.runtime import cpu_kernels

from tests.codegen.test_cpu import assert_bitwise, assert_close, kernel_name

REDUCERS = ("add", "multiply", "maximum", "minimum", "and", "or")
INTEGER_TYPES = ["s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64"]
ALL_TYPES = ["pred"] + INTEGER_TYPES + ["f16", "f32", "f64", "c64", "c128"]


def W(size, stride=1, pad=(0, 0), lhs=1, rhs=1, rev=False) -> WindowDim:
    return WindowDim(size, stride, pad[0], pad[1], lhs, rhs, rev)


def prefix(dims, axis) -> tuple:
    """The window of an inclusive scan along ``axis`` (what np.cumsum lowers to)."""
    return tuple(W(n, pad=(n - 1, 0)) if d == axis else W(1) for d, n in enumerate(dims))


@dataclass(frozen=True)
class Case:
    name: str
    t: str
    dims: tuple
    window: tuple
    op: str
    init: str = "identity"        # or "random": an init value that is not the reducer's identity

    @property
    def out_dims(self) -> tuple:
        return tuple(window_output_size(n, w) for n, w in zip(self.dims, self.window))


# ---- building and running modules -----------------------------------------------------------

def _shape_text(t, dims) -> str:
    return f"{t}[{','.join(map(str, dims))}]"


def hlo_text(cases, name="reduce_windows") -> str:
    """One module: parameters (input, init) per case, a reduce-window per case, a tuple root."""
    lines = [f"HloModule {name}", ""]
    for op, t in sorted({(c.op, c.t) for c in cases}):
        lines += [f"{op}_{t} {{", f"  lhs = {t}[] parameter(0)", f"  rhs = {t}[] parameter(1)",
                  f"  ROOT r = {t}[] {op}(lhs, rhs)", "}", ""]
    lines.append("ENTRY main {")
    outs = []
    for k, c in enumerate(cases):
        window = Window(c.window).to_text() if c.window else "{}"
        lines += [f"  x{k} = {_shape_text(c.t, c.dims)} parameter({2 * k})",
                  f"  init{k} = {c.t}[] parameter({2 * k + 1})",
                  f"  {c.name} = {_shape_text(c.t, c.out_dims)} reduce-window(x{k}, init{k}), "
                  f"window={window}, to_apply={c.op}_{c.t}"]
        outs.append(_shape_text(c.t, c.out_dims))
    lines += [f"  ROOT out = ({', '.join(outs)}) tuple({', '.join(c.name for c in cases)})", "}"]
    return "\n".join(lines) + "\n"


def random_input(t, dims, op, rng) -> np.ndarray:
    dt = to_numpy_dtype(t)
    if t == "pred":
        return rng.random(dims) < (0.8 if op in ("multiply", "minimum", "and") else 0.2)
    if t[0] in "su":
        info = np.iinfo(dt)
        if op == "multiply":                  # small factors, with wrap-around on long windows
            return rng.integers(-3 if t[0] == "s" else 0, 4, dims).astype(dt)
        return rng.integers(info.min, info.max, dims, dtype=dt, endpoint=True)
    if op == "multiply":                      # factors near +-1: long products stay finite
        x = rng.uniform(0.5, 1.5, dims) * rng.choice([-1, 1], dims)
    else:
        x = rng.standard_normal(dims) * 10
    if t[0] == "c":
        x = x + 1j * (rng.uniform(0.5, 1.5, dims) if op == "multiply" else rng.standard_normal(dims))
    x = np.asarray(x).astype(dt)
    if op in ("maximum", "minimum") and x.size > 6:
        x.reshape(-1)[rng.integers(0, x.size)] = np.nan       # NaN propagates through windows
    return x


def init_value(t, op, kind, rng):
    dt = to_numpy_dtype(t)
    if kind == "random":
        return random_input(t, (), "add" if op in ("maximum", "minimum") else op, rng)[()]
    if t == "pred":
        return np.bool_(op in ("multiply", "minimum", "and"))
    if op == "add" or op == "or":
        return dt.type(0)
    if op == "multiply":
        return dt.type(1)
    if op == "and":
        return dt.type(-1) if t[0] == "s" else dt.type(np.iinfo(dt).max)
    big = np.iinfo(dt).max if t[0] in "su" else np.inf
    small = np.iinfo(dt).min if t[0] in "su" else -np.inf
    return dt.type(small if op == "maximum" else big)


def case_inputs(cases, seed=0) -> list:
    rng = np.random.default_rng(seed)
    ins = []
    for c in cases:
        ins += [random_input(c.t, c.dims, c.op, rng), np.asarray(init_value(c.t, c.op, c.init, rng))]
    return ins


@dataclass
class Run:
    compilation: object
    got: dict
    want: dict


def compile_and_compare(cases, seed=0, name="reduce_windows") -> Run:
    module = parse_hlo(hlo_text(cases, name))
    compilation = compile_module(module, "cpu")
    ins = case_inputs(cases, seed)
    got = compilation.executable.run(ins)
    with np.errstate(all="ignore"):
        want = flatten(evaluate(parse_hlo(hlo_text(cases, name)), ins))
    return Run(compilation, dict(zip(cases, got)), dict(zip(cases, want)))


def kernel_style(run: Run, case: Case) -> str:
    native = run.compilation.executable.native       # (identical kernels share one symbol)
    return native.kernels.specs[native.kernel_symbols[case.name]].style


def is_scan(case: Case) -> bool:
    dims = case.dims
    return bool(dims) and any(case.window == prefix(dims, a) for a in range(len(dims)) if dims[a] > 1)


def check_case(run: Run, case: Case):
    assert run.compilation.executable.native.interpreted_ops == {}
    got, want = run.got[case], run.want[case]
    assert got.dtype == want.dtype and got.shape == want.shape == case.out_dims
    if case.t[0] == "c" and case.op == "multiply" and is_scan(case):
        # The kernel multiplies as NumPy's SIMD loop does (with FMA); np.multiply.accumulate
        # along the last axis runs a scalar loop without FMA: the last bit may differ.
        assert_close(got, want, case.name)
    else:
        assert_bitwise(got, want, case.name)


# ---- geometry ------------------------------------------------------------------------------------

GEOMETRY = {
    # rank 0: init op x
    "scalar": ((), ()),
    # rank 1
    "r1_size3": ((17,), (W(3),)),
    "r1_stride3_pad_beyond_window": ((20,), (W(4, 3, (5, 6)),)),
    "r1_all_padding_windows": ((3,), (W(2, 1, (6, 7)),)),
    "r1_base_dilated": ((9,), (W(2, 1, (1, 1), lhs=3),)),
    "r1_base_dilated_strided": ((11,), (W(4, 3, (2, 3), lhs=2),)),
    "r1_window_dilated": ((15,), (W(3, 2, rhs=3),)),
    "r1_reversed": ((10,), (W(3, 1, (1, 1), rev=True),)),
    "r1_size1": ((6,), (W(1),)),
    "r1_window_wider_than_input": ((5,), (W(7),)),           # empty output
    "r1_empty_input_padded": ((0,), (W(2, 1, (1, 2)),)),      # every window is padding
    "r1_long_row": ((1500,), (W(5, 1, (2, 2)),)),              # several column blocks
    "r1_prefix": ((700,), prefix((700,), 0)),
    "r1_prefix_length2": ((2,), prefix((2,), 0)),
    "r1_full_window_both_sides": ((9,), (W(9, 1, (8, 8)),)),   # not a prefix: a wider window
    # rank 2
    "r2_pool3x3": ((13, 11), (W(3), W(3))),
    "r2_maxpool3x3_s2_same": ((16, 15), (W(3, 2, (1, 1)), W(3, 2, (1, 1)))),
    "r2_pool2x2_s2": ((8, 10), (W(2, 2), W(2, 2))),
    "r2_transposed_conv_like": ((5, 6), (W(3, 1, (2, 2), lhs=2), W(3, 1, (2, 2), lhs=2))),
    "r2_window_dilated": ((12, 9), (W(2, 1, rhs=2), W(3, 1, (1, 0), rhs=2))),
    "r2_pad_larger_than_window": ((4, 5), (W(2, 1, (3, 3)), W(1, 1, (0, 4)))),
    "r2_high_pad_only_rows": ((6, 5), (W(3, 2, (0, 5)), W(2, 3, (4, 0)))),
    "r2_reversed": ((7, 7), (W(2, rev=True), W(3, 1, (1, 1), rev=True))),
    "r2_empty_rows": ((0, 5), (W(1), W(2))),
    "r2_empty_output": ((4, 5), (W(5), W(2))),
    "r2_wide_rows": ((3, 1300), (W(2), W(4, 2, (1, 2)))),
    "r2_prefix_axis0": ((40, 33), prefix((40, 33), 0)),
    "r2_prefix_axis1": ((7, 61), prefix((7, 61), 1)),
    "r2_prefix_wide_lanes": ((5, 1100), prefix((5, 1100), 0)),  # several blocks of lanes
    "r2_prefix_strided_other_axis": ((6, 8), (W(6, 1, (5, 0)), W(1, 2))),   # not a prefix
    # rank 3
    "r3_cube": ((5, 6, 7), (W(2), W(2, 1, (0, 1)), W(3, 2, (1, 1)))),
    "r3_dilated_mix": ((4, 5, 6), (W(2, 2, (1, 1), lhs=2), W(1), W(2, 1, rhs=2))),
    "r3_prefix_axis0": ((9, 4, 5), prefix((9, 4, 5), 0)),
    "r3_prefix_axis1": ((3, 10, 6), prefix((3, 10, 6), 1)),
    "r3_prefix_axis2": ((3, 4, 12), prefix((3, 4, 12), 2)),
    # rank 4: NCHW and NHWC pooling
    "r4_nchw_maxpool": ((2, 3, 9, 8), (W(1), W(1), W(3, 2, (1, 1)), W(3, 2, (1, 1)))),
    "r4_nhwc_avgpool": ((2, 7, 6, 3), (W(1), W(2, 2), W(2, 2, (0, 1)), W(1))),
    "r4_channel_window": ((2, 5, 3, 4), (W(1), W(3, 1, (1, 1)), W(1), W(2))),
    "r4_prefix_axis2": ((2, 3, 8, 5), prefix((2, 3, 8, 5), 2)),
    "r4_prefix_axis3": ((2, 3, 4, 9), prefix((2, 3, 4, 9), 3)),
}


def geometry_cases(t: str, ops) -> list[Case]:
    return [Case(f"rw_{name}_{op}_{t}{'_init' if init == 'random' else ''}", t, dims, window, op, init)
            for name, (dims, window) in GEOMETRY.items() for op, init in ops]


# (reducer, init) pairs: the identity, and for sums a value that is not (it must enter once)
GEOMETRY_OPS = {"f32": (("add", "identity"), ("add", "random"), ("maximum", "identity")),
                "s32": (("add", "random"), ("minimum", "identity")),
                "pred": (("or", "identity"),)}


@functools.cache
def geometry_run(t: str) -> Run:
    return compile_and_compare(geometry_cases(t, GEOMETRY_OPS[t]), seed=1, name=f"geometry_{t}")


GEOMETRY_PARAMS = [(t, c) for t in GEOMETRY_OPS for c in geometry_cases(t, GEOMETRY_OPS[t])]


@pytest.mark.parametrize("t, case", GEOMETRY_PARAMS, ids=[c.name for _, c in GEOMETRY_PARAMS])
def test_geometry_native_and_bitwise_equal_to_evaluator(t, case):
    check_case(geometry_run(t), case)


def test_prefix_windows_compile_to_scans_and_others_to_windows():
    run = geometry_run("f32")
    for case in geometry_cases("f32", GEOMETRY_OPS["f32"]):
        if case.out_dims and 0 in case.out_dims:
            continue
        expected = "scan" if is_scan(case) else "window"
        assert kernel_style(run, case) == expected, case.name


# ---- every reducer on every element type --------------------------------------------------------

TYPE_WINDOWS = {
    "pool": ((9, 14), (W(3, 2, (1, 1)), W(3, 1, (1, 1)))),
    "dilated": ((7, 6), (W(2, 1, (1, 1), lhs=2), W(2, 1, rhs=2))),
    "prefix_rows": ((6, 9), prefix((6, 9), 1)),
    "prefix_cols": ((30, 5), prefix((30, 5), 0)),
}


def reducers_for(t: str):
    if t[0] == "c":
        return ("add", "multiply")
    if t[0] == "f":
        return ("add", "multiply", "maximum", "minimum")
    return REDUCERS


def type_cases(t: str) -> list[Case]:
    return [Case(f"rw_{name}_{op}_{t}{'_init' if init == 'random' else ''}", t, dims, window, op, init)
            for name, (dims, window) in TYPE_WINDOWS.items() for op in reducers_for(t)
            for init in ("identity", "random")]


@functools.cache
def type_run(t: str) -> Run:
    return compile_and_compare(type_cases(t), seed=2, name=f"types_{t}")


@pytest.mark.parametrize("t", ALL_TYPES)
def test_every_reducer_native_on_every_type(t):
    run = type_run(t)
    for case in type_cases(t):
        check_case(run, case)


def test_long_float_sums_match_the_evaluator_bit_for_bit():
    """Sequential sums round differently from pairwise or blocked ones: a long window sum and
    a long cumsum are the evaluator's bits only if the order of additions is its order."""
    cases = [Case("long_cumsum_f32", "f32", (100000,), prefix((100000,), 0), "add"),
             Case("long_cumsum_f16", "f16", (3000,), prefix((3000,), 0), "add"),
             Case("long_cumsum_cols_f32", "f32", (2000, 37), prefix((2000, 37), 0), "add"),
             Case("long_window_sum_f32", "f32", (5000,), (W(1000, 7, (500, 500)),), "add"),
             Case("long_cumprod_f64", "f64", (20000,), prefix((20000,), 0), "multiply", "random")]
    run = compile_and_compare(cases, seed=3, name="long_sums")
    for case in cases:
        check_case(run, case)


def test_padding_is_never_loaded():
    """Each input is a view into a buffer of NaNs: a load outside the input (from the padding
    side of a window) would put a NaN into the result."""
    cases = [Case("oob_pool", "f32", (9, 10), (W(4, 2, (3, 4)), W(5, 3, (4, 6))), "maximum"),
             Case("oob_dilated", "f32", (6, 7), (W(3, 1, (5, 5), lhs=2), W(2, 2, (3, 3), lhs=3, rhs=2)), "add"),
             Case("oob_1d", "f64", (5,), (W(3, 1, (8, 8)),), "minimum"),
             Case("oob_scan_rows", "f32", (4, 9), prefix((4, 9), 1), "add"),
             Case("oob_scan_cols", "f32", (9, 4), prefix((9, 4), 0), "maximum")]
    module = compile_module(parse_hlo(hlo_text(cases, "guarded")), "cpu")
    ins = []
    for x, init in zip(*[iter(case_inputs(cases, seed=7))] * 2):
        x = np.nan_to_num(x)                              # no NaN of its own
        guarded = np.full(x.size + 2048, np.nan, x.dtype)
        view = guarded[1024:1024 + x.size].reshape(x.shape)
        view[...] = x
        ins += [view, init]
    got = module.executable.run(ins)
    want = flatten(evaluate(parse_hlo(hlo_text(cases, "guarded")), ins))
    for case, g, w in zip(cases, got, want):
        assert not np.isnan(g).any(), f"{case.name} read outside its input"
        assert_bitwise(g, w, case.name)


# ---- custom and variadic reducers (applied inline) ---------------------------------------------------------------------

CUSTOM = """HloModule custom
sum_of_squares {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  bb = f32[] multiply(b, b)
  ROOT r = f32[] add(a, bb)
}
xor_s32 {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  ROOT r = s32[] xor(a, b)
}
argmax {
  v0 = f32[] parameter(0)
  i0 = s32[] parameter(1)
  v1 = f32[] parameter(2)
  i1 = s32[] parameter(3)
  ge = pred[] compare(v0, v1), direction=GE
  v = f32[] select(ge, v0, v1)
  i = s32[] select(ge, i0, i1)
  ROOT t = (f32[], s32[]) tuple(v, i)
}
ENTRY main {
  x = f32[10,12] parameter(0)
  n = s32[10,12] parameter(1)
  zero = f32[] constant(0)
  izero = s32[] constant(0)
  ninf = f32[] constant(-inf)
  squares = f32[8,5] reduce-window(x, zero), window={size=3x4 stride=1x2}, to_apply=sum_of_squares
  xors = s32[10,12] reduce-window(n, izero), window={size=1x12 pad=0_0x11_0}, to_apply=xor_s32
  pairs = (f32[5,6], s32[5,6]) reduce-window(x, n, ninf, izero), window={size=2x2 stride=2x2}, to_apply=argmax
  pv = f32[5,6] get-tuple-element(pairs), index=0
  pi = s32[5,6] get-tuple-element(pairs), index=1
  holes = (f32[10,12], s32[10,12]) reduce-window(x, n, ninf, izero), window={size=3x3 stride=2x2 pad=1_2x1_1 lhs_dilate=2x2}, to_apply=argmax
  hv = f32[10,12] get-tuple-element(holes), index=0
  hi = s32[10,12] get-tuple-element(holes), index=1
  ROOT out = (f32[8,5], s32[10,12], f32[5,6], s32[5,6], f32[10,12], s32[10,12]) tuple(squares, xors, pv, pi, hv, hi)
}
"""


def test_custom_and_variadic_reducers_run_natively():
    """Custom reducers (a prefix window too: no scan for them, as in the evaluator) and an
    argmax pooling with padding and base-dilation holes, bit for bit the evaluator's."""
    module = parse_hlo(CUSTOM)
    compilation = compile_module(module, "cpu")
    assert compilation.executable.native.interpreted_ops == {}
    assert {"squares", "xors", "pairs", "holes"} <= set(compilation.executable.native.kernel_symbols)
    rng = np.random.default_rng(4)
    ins = [rng.standard_normal((10, 12)).astype(np.float32),
           rng.integers(-1000, 1000, (10, 12)).astype(np.int32)]
    got = compilation.executable.run(ins)
    want = flatten(evaluate(parse_hlo(CUSTOM), ins))
    for g, w in zip(got, want):
        assert_bitwise(g, w, "custom reduce-window")


# ---- threads ------------------------------------------------------------------------------------

THREAD_CASES = [
    Case("t_maxpool", "f32", (600, 700), (W(3, 2, (1, 1)), W(3, 2, (1, 1))), "maximum"),
    Case("t_sumpool", "f32", (500, 520), (W(4, 1, (2, 1)), W(4, 1, (1, 2))), "add", "random"),
    Case("t_cumsum_cols", "f32", (400, 1500), prefix((400, 1500), 0), "add"),
    Case("t_cumsum_rows", "f64", (600, 400), prefix((600, 400), 1), "add"),
    Case("t_cumprod_s64", "s64", (64, 50, 60), prefix((64, 50, 60), 1), "multiply"),
    Case("t_long_1d_window", "f32", (300000,), (W(7, 2, (3, 3)),), "add"),
]


def _split_across_threads(run: Run) -> int:
    """How many of the cases' kernels the runtime splits across threads (its rule: a range
    of at least 2 units and PARALLEL_THRESHOLD work in all)."""
    specs = run.compilation.executable.native.kernels.specs
    threshold = cpu_kernels.PARALLEL_THRESHOLD
    return sum(1 for case in run.got
               for spec in [specs[f"nbxla_{kernel_name(case.name)}"]]
               if spec.parallel_extent >= 2 and spec.parallel_extent * spec.work_per_unit >= threshold)


def test_threads_on_and_off_give_identical_bits(monkeypatch):
    monkeypatch.setattr(cpu_kernels, "PARALLEL_THRESHOLD", 1 << 17)     # split these sizes
    threaded = compile_and_compare(THREAD_CASES, seed=5, name="threads")
    assert _split_across_threads(threaded) == len(THREAD_CASES)
    monkeypatch.setattr(cpu_kernels, "PARALLEL_THRESHOLD", 1 << 62)
    inline = compile_and_compare(THREAD_CASES, seed=5, name="threads")
    assert _split_across_threads(inline) == 0
    for case in THREAD_CASES:
        check_case(threaded, case)
        check_case(inline, case)
        assert_bitwise(threaded.got[case], inline.got[case], f"{case.name}: threaded vs single-threaded")


# ---- vectorization --------------------------------------------------------------------------------

def _kernel_ir(run: Run, case: Case) -> str:
    text = run.compilation.executable.native.kernels.llvm_ir_optimized
    start = text.index(f"@nbxla_{kernel_name(case.name)}(")
    return text[start:text.find("\n}\n", start)]


@pytest.mark.parametrize("op", ["maximum", "add"])
def test_stride1_pooling_and_column_scans_are_vectorized(op):
    pool = Case(f"vec_pool_{op}", "f32", (64, 80), (W(3, 1, (1, 1)), W(3, 1, (1, 1))), op)
    scan = Case(f"vec_scan_{op}", "f32", (64, 80), prefix((64, 80), 0), op)
    run = compile_and_compare([pool, scan], name=f"vectorized_{op}")
    for case in (pool, scan):
        check_case(run, case)
        assert "x float>" in _kernel_ir(run, case), f"{case.name} has no vector code"


# ---- random geometry ----------------------------------------------------------------------------

@st.composite
def window_cases(draw):
    rank = draw(st.integers(1, 4))
    dims = tuple(draw(st.integers(0 if rank > 1 else 1, 6)) for _ in range(rank))
    window = []
    for n in dims:
        size = draw(st.integers(1, 4))
        pad = (draw(st.integers(0, 5)), draw(st.integers(0, 5)))
        window.append(W(size, draw(st.integers(1, 3)), pad, draw(st.integers(1, 3)),
                        draw(st.integers(1, 3)), draw(st.booleans())))
    if draw(st.integers(0, 3)) == 0 and max(dims) > 1:         # sometimes a prefix window
        axis = dims.index(max(dims))
        window = list(prefix(dims, axis))
    t = draw(st.sampled_from(["f32", "f64", "s16", "u32", "pred", "c64"]))
    op = draw(st.sampled_from(reducers_for(t)))
    return Case("random_rw", t, dims, tuple(window), op, draw(st.sampled_from(["identity", "random"])))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(window_cases(), st.integers(0, 2 ** 16))
def test_random_windows_match_the_evaluator(case, seed):
    run = compile_and_compare([case], seed=seed, name="random_window")
    check_case(run, case)


# ---- NumPy programs through nbxla.jit -----------------------------------------------------------

def _programs():
    """name -> (function, input kind, bitwise equal to the evaluator)."""
    return {
        "cumsum_flat": (lambda x: np.cumsum(x), "f32", True),
        "cumsum_axis0": (lambda x: np.cumsum(x, axis=0), "f32", True),
        "cumsum_axis1_int": (lambda x: np.cumsum(x, axis=1), "i32", True),
        "cumsum_bool": (lambda x: np.cumsum(x > 0, axis=0), "f64", True),
        "cumprod_axis1": (lambda x: np.cumprod(1 + x / 10, axis=1), "f64", True),
        "running_max": (lambda x: np.maximum.accumulate(x, axis=1), "f32", True),
        "running_min_axis0": (lambda x: np.minimum.accumulate(x, axis=0), "i64", True),
        # (the row sum is a native blocked reduction: close to NumPy's pairwise sum, not equal)
        "cumsum_in_expression": (lambda x: np.cumsum(x * 2.0, axis=1) - x.sum(axis=1, keepdims=True),
                                 "f32", False),
    }


@pytest.mark.parametrize("name", list(_programs()))
def test_numpy_scans_through_jit_are_native_and_match_numpy(name):
    fn, kind, exact = _programs()[name]
    rng = np.random.default_rng(6)
    x = {"f32": rng.standard_normal((37, 45)).astype(np.float32),
         "f64": rng.standard_normal((37, 45)),
         "i32": rng.integers(-10 ** 6, 10 ** 6, (37, 45)).astype(np.int32),
         "i64": rng.integers(-10 ** 12, 10 ** 12, (37, 45))}[kind]
    cpu, ev = nbxla.jit(fn, device="cpu"), nbxla.jit(fn, device="evaluator")
    got, want, expected = cpu(x), ev(x), fn(x)
    compilation = cpu.last_compilation
    windows = [i for i in compilation.optimized.entry.instructions if i.opcode == "reduce-window"]
    assert windows and compilation.executable.native.interpreted_ops == {}
    (assert_bitwise if exact else assert_close)(got, want, f"{name}: cpu vs evaluator")
    assert got.dtype == expected.dtype
    assert_close(got, expected, f"{name}: cpu vs NumPy")


def test_jax_cumsum_corpus_runs_as_native_scans():
    from .test_corpus_cpu import compiled_corpus_case
    compilation = compiled_corpus_case("cumsum")
    native = compilation.executable.native
    windows = [i.name for i in compilation.optimized.entry.instructions if i.opcode == "reduce-window"]
    assert len(windows) == 3 and native.interpreted_ops == {}
    assert all(native.kernels.specs[f"nbxla_{kernel_name(w)}"].style == "scan" for w in windows)
