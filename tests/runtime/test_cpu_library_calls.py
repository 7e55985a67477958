"""sort and convolution on the CPU backend run as library calls (nbxla/runtime/sort_library.py, cpu_library.py).

The oracle is the reference evaluator on the same module: sorts must agree bit for bit
(equal keys keep their order, NaNs and signed zeros land where the comparator says), float
convolutions within ``compare_arrays``'s tolerance.  np.sort / np.argsort through ``nbxla.jit``
are also checked against NumPy's stable sort.  What the library path does not recognize must
fall back to the evaluator's rule, be listed in ``interpreted_ops``, and still be right.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nbxla
from nbxla.codegen.convolution import native_convolution_refusal
from nbxla.hlo import Builder, Module, Shape
from nbxla.hlo.attributes import ConvDimensionNumbers, Window, WindowDim
from nbxla.hlo.evaluator import evaluate, flatten
from nbxla.hlo.parser import parse_hlo
from nbxla.runtime.executable import build_executable
from nbxla.testing import compare_arrays


def run_both(module: Module, inputs: list):
    """(cpu results, evaluator results, the cpu executable's native object)."""
    executable = build_executable(module, "cpu")
    got = executable.run(inputs)
    want = flatten(evaluate(module, inputs))
    return got, want, executable.native


def assert_identical(got, want):
    """Same dtype, shape and bits (so -0.0 vs 0.0 and NaN placement count)."""
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert g.tobytes() == w.tobytes(), f"got {g!r}, expected {w!r}"


# ---- sort: comparators as HLO text ------------------------------------------------------------

def sort_module(types: list[str], dims: list[int], axis: int, comparator: str) -> Module:
    """``sort(p0, p1, ...)`` along ``axis`` with ``comparator`` (a body using p0 p1 ... params)."""
    shape = ",".join(map(str, dims))
    params = "\n".join(f"  {n}{k} = {t}[] parameter({2 * k + j})"
                       for k, t in enumerate(types) for j, n in enumerate(("l", "r")))
    args = "\n".join(f"  a{k} = {t}[{shape}] parameter({k})" for k, t in enumerate(types))
    result = f"{types[0]}[{shape}]" if len(types) == 1 else \
        "(" + ", ".join(f"{t}[{shape}]" for t in types) + ")"
    return parse_hlo(f"""HloModule sorting

less {{
{params}
{comparator}
}}

ENTRY main {{
{args}
  ROOT s = {result} sort({", ".join(f"a{k}" for k in range(len(types)))}), dimensions={{{axis}}}, to_apply=less
}}
""")


SPECIAL = np.array([np.nan, -np.nan, 0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, 2.0, 1.0, -0.0, np.nan],
                   np.float32)

# JAX's key canonicalization (NaNs -> one NaN, -0 -> 0) on l0 and r0.
JAX_KEYS = """
  c_nan = f32[] constant(nan)
  c_zero = f32[] constant(0)
  ln = pred[] compare(l0, l0), direction=NE
  lz = pred[] compare(l0, c_zero), direction=EQ
  lk0 = f32[] select(lz, c_zero, l0)
  lk = f32[] select(ln, c_nan, lk0)
  rn = pred[] compare(r0, r0), direction=NE
  rz = pred[] compare(r0, c_zero), direction=EQ
  rk0 = f32[] select(rz, c_zero, r0)
  rk = f32[] select(rn, c_nan, rk0)"""

NBXLA_NAN_LAST = """
  lt = pred[] compare(l0, r0), direction={direction}
  rnan = pred[] compare(r0, r0), direction=NE
  lnan = pred[] compare(l0, l0), direction=NE
  lnum = pred[] not(lnan)
  nan_last = pred[] and(rnan, lnum)
  ROOT less = pred[] or(lt, nan_last)"""

FLOAT_COMPARATORS = {
    "plain-LT": "  ROOT lt = pred[] compare(l0, r0), direction=LT",
    "plain-GT": "  ROOT gt = pred[] compare(l0, r0), direction=GT",
    "swapped-LT": "  ROOT lt = pred[] compare(r0, l0), direction=LT",
    "totalorder-LT": "  ROOT lt = pred[] compare(l0, r0), direction=LT, type=TOTALORDER",
    "totalorder-GT": "  ROOT gt = pred[] compare(l0, r0), direction=GT, type=TOTALORDER",
    "jax-LT": JAX_KEYS + "\n  ROOT lt = pred[] compare(lk, rk), direction=LT, type=TOTALORDER",
    "jax-GT": JAX_KEYS + "\n  ROOT gt = pred[] compare(lk, rk), direction=GT, type=TOTALORDER",
    "nbxla-nan-last": NBXLA_NAN_LAST.format(direction="LT"),
    "nbxla-nan-last-descending": NBXLA_NAN_LAST.format(direction="GT"),
}


@pytest.mark.parametrize("name", sorted(FLOAT_COMPARATORS))
@pytest.mark.parametrize("data", ["special", "no-nan"])
def test_float_comparators_run_natively_and_match_the_evaluator(name, data):
    rng = np.random.default_rng(0)
    pool = SPECIAL if data == "special" else SPECIAL[~np.isnan(SPECIAL)]
    x = rng.choice(pool, (3, 40)).astype(np.float32)
    module = sort_module(["f32", "s32"], [3, 40], 1, FLOAT_COMPARATORS[name])
    index = np.broadcast_to(np.arange(40, dtype=np.int32), (3, 40)).copy()
    got, want, native = run_both(module, [x, index])
    assert_identical(got, want)       # the index operand shows that equal keys kept their order
    assert native.library_calls == {"s": "sort"} and native.interpreted_ops == {}


@pytest.mark.parametrize("t", ["s8", "s32", "s64", "u8", "u32", "u64", "pred", "f16", "f64"])
@pytest.mark.parametrize("direction", ["LT", "GT"])
def test_typed_keys_ascending_and_descending(t, direction):
    rng = np.random.default_rng(1)
    dtype = Shape(t).dtype
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        x = rng.choice(np.array([info.min, info.max, 0, 1, 2, 2, 3], dtype), (5, 6, 7))
    elif dtype.kind == "b":
        x = rng.random((5, 6, 7)) < 0.5
    else:
        x = rng.choice(SPECIAL[~np.isnan(SPECIAL)], (5, 6, 7)).astype(dtype)
    module = sort_module([t, "s32"], [5, 6, 7], 1, f"  ROOT c = pred[] compare(l0, r0), direction={direction}")
    index = np.broadcast_to(np.arange(6, dtype=np.int32)[:, None], (5, 6, 7)).copy()
    got, want, native = run_both(module, [x, index])
    assert_identical(got, want)
    assert native.library_calls == {"s": "sort"}


@pytest.mark.parametrize("kind", ["UNSIGNED", "SIGNED"])
def test_compare_type_reinterprets_integer_keys(kind):
    x = np.array([-3, 5, -1, 0, 7, -3, 2], np.int32)
    module = sort_module(["s32"], [7], 0, f"  ROOT c = pred[] compare(l0, r0), direction=LT, type={kind}")
    got, want, native = run_both(module, [x])
    assert_identical(got, want)
    assert native.library_calls == {"s": "sort"}


def test_nbxla_pred_comparator_orders_false_first():
    x = np.array([True, False, True, False, False], bool)
    module = sort_module(["pred", "s32"], [5], 0, """
  nl = pred[] not(l0)
  ROOT less = pred[] and(nl, r0)""")
    got, want, native = run_both(module, [x, np.arange(5, dtype=np.int32)])
    assert_identical(got, want)
    assert native.library_calls == {"s": "sort"}


def test_lexicographic_jax_comparator_with_three_operands():
    """jnp.lexsort-style: key 0, then key 1 on ties; operand 2 is carried along."""
    rng = np.random.default_rng(2)
    k0 = rng.choice(SPECIAL, 64).astype(np.float32)
    k1 = rng.integers(0, 3, 64).astype(np.int32)
    payload = np.arange(64, dtype=np.int64)
    module = sort_module(["f32", "s32", "s64"], [64], 0, JAX_KEYS + """
  lt0 = pred[] compare(lk, rk), direction=LT, type=TOTALORDER
  eq0 = pred[] compare(lk, rk), direction=EQ, type=TOTALORDER
  lt1 = pred[] compare(l1, r1), direction=GT
  tie = pred[] and(eq0, lt1)
  ROOT less = pred[] or(lt0, tie)""")
    got, want, native = run_both(module, [k0, k1, payload])
    assert_identical(got, want)
    assert native.library_calls == {"s": "sort"}


def test_xla_bitcast_total_order_key_is_recognized():
    """XLA's optimized form of a total-order compare: signed compare of flipped float bits."""
    x = np.random.default_rng(3).choice(SPECIAL, (4, 9)).astype(np.float32)
    module = sort_module(["f32"], [4, 9], 0, """
  zero = s32[] constant(0)
  mask = s32[] constant(2147483647)
  lb = s32[] bitcast(l0)
  lx = s32[] xor(mask, lb)
  lneg = pred[] compare(lb, zero), direction=LT
  lkey = s32[] select(lneg, lx, lb)
  rb = s32[] bitcast(r0)
  rx = s32[] xor(mask, rb)
  rneg = pred[] compare(rb, zero), direction=LT
  rkey = s32[] select(rneg, rx, rb)
  ROOT lt = pred[] compare(lkey, rkey), direction=LT""")
    got, want, native = run_both(module, [x])
    assert_identical(got, want)
    assert native.library_calls == {"s": "sort"}


def test_plain_float_compare_with_nans_defers_to_the_sort_kernel_per_call(monkeypatch):
    """NumPy's sort for calls without NaN keys; the native sort kernel (the evaluator's merge
    sort, step for step) for the others: the evaluator's answer either way, and the
    evaluator's rule is never called."""
    from nbxla.hlo.evaluator import RULES
    module = sort_module(["f32"], [8], 0, "  ROOT lt = pred[] compare(l0, r0), direction=LT")
    executable = build_executable(module, "cpu")
    native = getattr(executable, "native", executable)
    assert native.library_calls == {"s": "sort"} and "s" in native.kernel_symbols
    assert not native.interpreted_ops
    inputs = (np.array([3, 1, 2, 0, -1, 5, 4, 2], np.float32), SPECIAL[:8].copy())
    assert np.isnan(inputs[1]).any()
    wants = [flatten(evaluate(module, [x])) for x in inputs]

    def evaluator_sort(*args):
        raise AssertionError("the evaluator's sort rule ran")
    monkeypatch.setitem(RULES, "sort", evaluator_sort)
    for x, want in zip(inputs, wants):
        assert_identical(executable.run([x]), want)


UNRECOGNIZED = {
    # LE is not a strict order: the evaluator's merge sort decides what happens to ties.
    "non-strict LE": ("  ROOT le = pred[] compare(l0, r0), direction=LE", "not a recognized key order"),
    "keys of different operands": ("  ROOT lt = pred[] compare(l0, r1), direction=LT",
                                   "not a recognized key order"),
}


@pytest.mark.parametrize("case", sorted(UNRECOGNIZED))
def test_unrecognized_comparator_runs_in_the_native_sort_kernel(case):
    """No library call: the native sort kernel (the evaluator's merge sort, step for step)."""
    comparator, reason = UNRECOGNIZED[case]
    x = np.array([3, 1, 2, 1, -1, 5, 4, 2], np.float32)
    module = sort_module(["f32", "f32"], [8], 0, comparator)
    got, want, native = run_both(module, [x, x[::-1].copy()])
    assert_identical(got, want)
    assert native.library_calls == {} and native.interpreted_ops == {}
    assert "s" in native.kernel_symbols


def test_key_with_arithmetic_is_computed_on_whole_arrays():
    """Any elementwise key works: here |x| descending, ties in input order."""
    x = np.array([-3, 1, 3, -1, 0, 2, -2, 3], np.int32)
    module = sort_module(["s32"], [8], 0, """
  la = s32[] abs(l0)
  ra = s32[] abs(r0)
  ROOT gt = pred[] compare(la, ra), direction=GT""")
    got, want, native = run_both(module, [x])
    assert_identical(got, want)
    assert native.library_calls == {"s": "sort"}


def test_sort_along_an_empty_or_size_one_axis():
    for dims in ([0, 3], [3, 0], [3, 1]):
        x = np.arange(int(np.prod(dims)), dtype=np.float32).reshape(dims)
        module = sort_module(["f32"], dims, 1, "  ROOT lt = pred[] compare(l0, r0), direction=LT")
        got, want, _ = run_both(module, [x])
        assert_identical(got, want)


@given(st.lists(st.sampled_from(SPECIAL.tolist() + [0.5, -2.5]), min_size=1, max_size=30),
       st.sampled_from(sorted(FLOAT_COMPARATORS)))
@settings(max_examples=60, deadline=None)
def test_sort_property_against_the_evaluator(values, name):
    x = np.array(values, np.float32)
    module = sort_module(["f32", "s32"], [len(x)], 0, FLOAT_COMPARATORS[name])
    got, want, _ = run_both(module, [x, np.arange(len(x), dtype=np.int32)])
    assert_identical(got, want)


@given(st.lists(st.sampled_from(SPECIAL.tolist() + [0.5, -2.5]), min_size=1, max_size=30),
       st.sampled_from(sorted(FLOAT_COMPARATORS)), st.integers(1, 3))
@settings(max_examples=60, deadline=None)
def test_one_operand_sort_property_against_the_evaluator(values, name, rows):
    # One operand sorted by itself takes NumPy's unstable (fast) sort unless ties could be
    # told apart (-0 and +0, NaNs): the bits must still be the stable sort's.
    x = np.tile(np.array(values, np.float32), (rows, 1))
    x[0] = x[0, ::-1]
    for axis in (0, 1):
        got, want, _ = run_both(sort_module(["f32"], list(x.shape), axis, FLOAT_COMPARATORS[name]), [x])
        assert_identical(got, want)


@pytest.mark.parametrize("dtype,t", [(np.int32, "s32"), (np.uint8, "u8"), (np.float64, "f64")])
def test_one_operand_sort_without_ties_to_tell_apart(dtype, t):
    x = (np.random.default_rng(5).standard_normal((4, 300)) * 50).astype(dtype)   # (ints: many ties)
    for direction in ("LT", "GT"):
        module = sort_module([t], [4, 300], 1, f"  ROOT c = pred[] compare(l0, r0), direction={direction}")
        got, want, native = run_both(module, [x])
        assert_identical(got, want)
        assert native.library_calls == {"s": "sort"}


# ---- sort through nbxla.jit (the frontend's comparators) -------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.uint8, np.bool_])
@pytest.mark.parametrize("axis", [0, 1, -1, None])
def test_jit_sort_and_argsort_match_numpy_stable(dtype, axis):
    rng = np.random.default_rng(4)
    if np.dtype(dtype).kind == "f":
        x = rng.choice(SPECIAL, (6, 9)).astype(dtype)
    else:
        x = rng.integers(0, 3, (6, 9)).astype(dtype)

    def f(a):
        return np.sort(a, axis=axis), np.argsort(a, axis=axis)
    cpu = nbxla.jit(f, device="cpu")
    got_sorted, got_order = cpu(x)
    want_sorted, want_order = np.sort(x, axis=axis, kind="stable"), np.argsort(x, axis=axis, kind="stable")
    assert got_sorted.dtype == want_sorted.dtype and got_sorted.tobytes() == want_sorted.tobytes()
    assert np.array_equal(got_order, want_order)
    native = cpu.last_compilation.executable.native
    assert set(native.library_calls.values()) == {"sort"} and native.interpreted_ops == {}


# ---- convolution: im2col + BLAS -------------------------------------------------------------

def conv_module(x_shape, k_shape, dtype, dn: ConvDimensionNumbers, window: Window | None, **attrs) -> Module:
    b = Builder("conv")
    x = b.parameter(Shape(dtype, x_shape), "x")
    k = b.parameter(Shape(dtype, k_shape), "k")
    b.op("convolution", x, k, dim_labels=dn, name="conv",
         **({"window": window} if window is not None else {}), **attrs)
    return Module("conv", b.build())


@st.composite
def conv_cases(draw):
    """A random convolution in every respect the evaluator handles, with float data."""
    rank = draw(st.integers(0, 3))
    groups = draw(st.integers(1, 3))
    batch_groups = 1 if groups > 1 else draw(st.integers(1, 3))
    n = batch_groups * draw(st.integers(1, 2))
    i = draw(st.integers(1, 3))
    o = groups * batch_groups * draw(st.integers(1, 2))
    spatial = [draw(st.integers(1, 6)) for _ in range(rank)]
    window = Window(tuple(
        WindowDim(draw(st.integers(1, 3)), stride=draw(st.integers(1, 3)),
                  pad_low=draw(st.integers(-2, 2)), pad_high=draw(st.integers(-2, 2)),
                  base_dilation=draw(st.integers(1, 3)), window_dilation=draw(st.integers(1, 2)),
                  reversal=draw(st.booleans()))
        for _ in range(rank)))
    pin, pk, pout = (draw(st.permutations(range(rank + 2))) for _ in range(3))
    dn = ConvDimensionNumbers(pin.index(0), pin.index(1), tuple(pin.index(2 + s) for s in range(rank)),
                              pk.index(1), pk.index(0), tuple(pk.index(2 + s) for s in range(rank)),
                              pout.index(0), pout.index(1), tuple(pout.index(2 + s) for s in range(rank)))
    # Canonical (N, C, S...) and (O, I, K...) shapes, permuted into the labelled layouts.
    x_canon = (n, i * groups, *spatial)
    k_canon = (o, i, *[w.size for w in window.dims])
    x_shape = tuple(x_canon[p] for p in pin)
    k_shape = tuple(k_canon[p] for p in pk)
    dtype = draw(st.sampled_from(["f32", "f64"]))
    return x_shape, k_shape, dtype, dn, window, groups, batch_groups, draw(st.integers(0, 2 ** 16))


def check_convolution(x_shape, k_shape, dtype, dn, window, seed=0, **attrs):
    module = conv_module(x_shape, k_shape, dtype, dn, window, **attrs)
    rng = np.random.default_rng(seed)
    npt = Shape(dtype).dtype
    x = rng.standard_normal(x_shape).astype(npt)
    k = rng.standard_normal(k_shape).astype(npt)
    got, want, native = run_both(module, [x, k])
    ok, detail = compare_arrays(got[0], want[0])
    assert ok, detail
    assert native.interpreted_ops == {}
    # a convolution with few inputs per group runs in its own kernel, the rest as BLAS calls
    native_kernel = native_convolution_refusal(module.entry.root) is None
    assert native.library_calls == ({} if native_kernel else {"conv": "convolution"})


@given(conv_cases())
@settings(max_examples=150, deadline=None)
def test_convolution_property_against_the_evaluator(case):
    x_shape, k_shape, dtype, dn, window, groups, batch_groups, seed = case
    check_convolution(x_shape, k_shape, dtype, dn, window, seed,
                      feature_group_count=groups, batch_group_count=batch_groups)


GRID = [
    # (dim_labels, input dims, kernel dims, window text pieces, groups, batch groups)
    ("b01f_01io->b01f", (2, 10, 10, 3), (3, 3, 3, 4), dict(), 1, 1),
    ("bf01_oi01->bf01", (2, 3, 9, 8), (4, 3, 3, 2), dict(stride=2, pad_low=1, pad_high=1), 1, 1),
    ("b01f_01io->b01f", (1, 7, 7, 6), (3, 3, 2, 6), dict(window_dilation=2), 3, 1),
    ("bf01_oi01->bf01", (1, 4, 6, 6), (4, 1, 3, 3), dict(pad_low=1, pad_high=1), 4, 1),    # depthwise
    ("bf0_oi0->bf0", (4, 3, 12), (6, 3, 3), dict(base_dilation=2, pad_low=-1, pad_high=2), 1, 2),
    ("f01b_i01o->01bf", (3, 6, 5, 2), (3, 2, 2, 5), dict(reversal=True, pad_low=-1), 1, 1),
    ("b012f_012io->b012f", (1, 4, 5, 6, 2), (2, 2, 3, 2, 3), dict(stride=2), 1, 1),
]


@pytest.mark.parametrize("labels,x_shape,k_shape,window,groups,batch_groups", GRID)
@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_convolution_grid(labels, x_shape, k_shape, window, groups, batch_groups, dtype):
    dn = ConvDimensionNumbers.from_text(labels)
    sizes = [k_shape[d] for d in dn.kernel_spatial]
    w = Window(tuple(WindowDim(s, **window) for s in sizes))
    check_convolution(x_shape, k_shape, dtype, dn, w,
                      feature_group_count=groups, batch_group_count=batch_groups)


def test_convolution_without_window_attribute():
    check_convolution((1, 2, 7), (3, 2, 3), "f32", ConvDimensionNumbers.from_text("bf0_oi0->bf0"), None)


def test_convolution_cropped_to_nothing_gives_zeros():
    dn = ConvDimensionNumbers.from_text("bf0_oi0->bf0")
    check_convolution((1, 1, 3), (1, 1, 2), "f32", dn, Window((WindowDim(2, pad_low=-2, pad_high=-1),)))


def test_integer_convolution_runs_as_a_library_call():
    """im2col + NumPy's integer matmul: exact (tests/runtime/test_library_fallbacks.py has more)."""
    dn = ConvDimensionNumbers.from_text("b01f_01io->b01f")
    module = conv_module((1, 5, 5, 2), (3, 3, 2, 2), "s32", dn, Window((WindowDim(3), WindowDim(3))))
    rng = np.random.default_rng(5)
    x = rng.integers(-5, 5, (1, 5, 5, 2)).astype(np.int32)
    k = rng.integers(-5, 5, (3, 3, 2, 2)).astype(np.int32)
    got, want, native = run_both(module, [x, k])
    assert np.array_equal(got[0], want[0])
    assert native.library_calls == {"conv": "convolution"} and native.interpreted_ops == {}


def test_library_results_do_not_alias_inputs():
    x = np.array([3, 1, 2], np.float32)
    module = sort_module(["f32"], [3], 0, "  ROOT lt = pred[] compare(l0, r0), direction=LT")
    executable = build_executable(module, "cpu")
    (out,) = executable.run([x])
    assert not np.shares_memory(out, x)
