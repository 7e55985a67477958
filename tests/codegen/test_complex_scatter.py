"""Native complex arithmetic and native scatter on the CPU backend, against the evaluator.

Complex: every op the code generator emits for c64/c128 runs in one multi-output fusion on
all pairs of component edge values (NaN, +-inf, +-0, subnormals, huge and tiny magnitudes)
plus random values; exactly rounded ops must be bitwise equal to the evaluator (NumPy), the
others (divide, abs, sign, exp, log, sqrt) within ``compare_arrays``' tolerance with the
same NaN positions and the same infinities.  Complex data movement and sums are native too.

Scatter: a standalone scatter compiles to a kernel of its own (output = a copy of the
operand, then the updates applied one at a time); add/multiply/max/min/replace combiners,
duplicate indices, windows that do not fit (skipped), multi-dimensional windows, index
vectors in any dimension.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

from nbxla.hlo import Builder, Module, Shape, scalar_computation
from nbxla.hlo.builder import unique_name
from nbxla.hlo.evaluator import evaluate, flatten
from nbxla.hlo.shapes import to_numpy_dtype
from nbxla.runtime.executable import build_executable

from tests.codegen.test_cpu import (_edge_values, _movement_module, _reduce, assert_bitwise, assert_close,
                               compile_and_run, fusion, kernel_name)

COMPLEX = ["c64", "c128"]
PART = {"c64": "f32", "c128": "f64"}
OTHER = {"c64": "c128", "c128": "c64"}


# ---- complex elementwise ------------------------------------------------------------------------

def _complex_inputs(t: str):
    """x: every (re, im) pair of edge values, then random values of all magnitudes; y: x
    permuted; p: random pred; r, s: real parts."""
    rng = np.random.default_rng(5)
    dt = to_numpy_dtype(t)
    e = _edge_values(t).real.copy()
    re, im = np.repeat(e, len(e)), np.tile(e, len(e))
    n = 300
    mag = 10.0 ** rng.uniform(-30 if t == "c64" else -300, 30 if t == "c64" else 300, n)
    rr = rng.standard_normal(n) * mag
    ri = rng.standard_normal(n) * mag[::-1]
    x = np.empty(len(re) + n, dt)
    x.real, x.imag = np.concatenate([re, rr]), np.concatenate([im, ri])
    y = x[rng.permutation(len(x))]
    y[: len(e) ** 2 // 4] = x[::-1][: len(e) ** 2 // 4]        # some pairs of specials
    p = rng.random(len(x)) < 0.5
    return [x, y, p, x.real.copy(), y.imag.copy()]


# label -> (build(fb, x, y, p, r, s), exact)
def _complex_ops(t):
    part, other = PART[t], OTHER[t]
    return {
        "negate": (lambda fb, x, y, p, r, s: fb.op("negate", x), True),
        "real": (lambda fb, x, y, p, r, s: fb.op("real", x), True),
        "imag": (lambda fb, x, y, p, r, s: fb.op("imag", x), True),
        "conj": (lambda fb, x, y, p, r, s: fb.op("complex", fb.op("real", x),
                                                  fb.op("negate", fb.op("imag", x))), True),
        "complex": (lambda fb, x, y, p, r, s: fb.op("complex", r, s), True),
        "add": (lambda fb, x, y, p, r, s: fb.op("add", x, y), True),
        "subtract": (lambda fb, x, y, p, r, s: fb.op("subtract", x, y), True),
        "multiply": (lambda fb, x, y, p, r, s: fb.op("multiply", x, y), True),
        "square": (lambda fb, x, y, p, r, s: fb.op("multiply", x, x), True),
        "eq": (lambda fb, x, y, p, r, s: fb.op("compare", x, y, direction="EQ"), True),
        "ne": (lambda fb, x, y, p, r, s: fb.op("compare", x, y, direction="NE"), True),
        "eq_self": (lambda fb, x, y, p, r, s: fb.op("compare", x, x, direction="EQ"), True),
        "select": (lambda fb, x, y, p, r, s: fb.op("select", p, x, y), True),
        "to_other": (lambda fb, x, y, p, r, s: fb.op("convert", x, shape=x.shape.with_type(other)), True),
        "to_real": (lambda fb, x, y, p, r, s: fb.op("convert", x, shape=x.shape.with_type(part)), True),
        "to_pred": (lambda fb, x, y, p, r, s: fb.op("convert", x, shape=x.shape.with_type("pred")), True),
        "to_s32": (lambda fb, x, y, p, r, s: fb.op("convert", x, shape=x.shape.with_type("s32")), True),
        "from_real": (lambda fb, x, y, p, r, s: fb.op("convert", r, shape=r.shape.with_type(t)), True),
        "from_s32": (lambda fb, x, y, p, r, s: fb.op("convert", fb.op(
            "convert", r, shape=r.shape.with_type("s32")), shape=r.shape.with_type(t)), True),
        "scalar_constant": (lambda fb, x, y, p, r, s: fb.op("add", x, fb.broadcast(
            fb.constant(np.array(1.5 - 2.25j, to_numpy_dtype(t))), x.shape.dims)), True),
        "divide": (lambda fb, x, y, p, r, s: fb.op("divide", x, y), False),
        "reciprocal": (lambda fb, x, y, p, r, s: fb.op("divide", fb.broadcast(
            fb.constant(np.array(1, to_numpy_dtype(t))), x.shape.dims), x), False),
        "abs": (lambda fb, x, y, p, r, s: fb.op("abs", x), False),
        "sign": (lambda fb, x, y, p, r, s: fb.op("sign", x), False),
        "exp": (lambda fb, x, y, p, r, s: fb.op("exponential", x), False),
        "log": (lambda fb, x, y, p, r, s: fb.op("log", x), False),
        "sqrt": (lambda fb, x, y, p, r, s: fb.op("sqrt", x), False),
    }


@functools.cache
def complex_case(t: str):
    ins = _complex_inputs(t)
    n = len(ins[0])
    part = PART[t]
    b = Builder(f"complex_{t}")
    params = [b.parameter(Shape(t, (n,)), "x"), b.parameter(Shape(t, (n,)), "y"),
              b.parameter(Shape("pred", (n,)), "p"), b.parameter(Shape(part, (n,)), "r"),
              b.parameter(Shape(part, (n,)), "s")]
    ops = _complex_ops(t)
    f = fusion(b, f"complex_ops_{t}", params,
               lambda fb, *ps: [build(fb, *ps) for build, _ in ops.values()])
    module = Module(f"complex_{t}", b.build(f))
    got, want, interpreted = compile_and_run(module, ins)
    return dict(zip(ops, zip(got, want))), interpreted


@pytest.mark.parametrize("t", COMPLEX)
def test_complex_fusion_is_native(t):
    _, interpreted = complex_case(t)
    assert interpreted == {}, interpreted


@pytest.mark.parametrize("label", list(_complex_ops("c64")))
@pytest.mark.parametrize("t", COMPLEX)
def test_complex_op_matches_evaluator(t, label):
    results, _ = complex_case(t)
    got, want = results[label]
    if _complex_ops(t)[label][1]:
        assert_bitwise(got, want, f"{t} {label}")
    else:
        assert_close(got, want, f"{t} {label}")


@pytest.mark.parametrize("t", COMPLEX)
def test_complex_special_values_follow_c99(t):
    """A few values written out (NumPy = C99 Annex G), so the emitter's special-case
    handling is pinned independently of how the evaluator happens to compute them."""
    dt = to_numpy_dtype(t)
    inf, nan = np.inf, np.nan
    z = np.array([complex(0, 0), complex(-0.0, 0), complex(inf, 1), complex(-inf, 1),
                  complex(1, inf), complex(nan, inf), complex(-4, 0), complex(-4, -0.0)], dt)
    b = Builder("specials")
    x = b.parameter(Shape(t, z.shape), "x")
    f = fusion(b, "specials", [x], lambda fb, a: [fb.op("sqrt", a), fb.op("log", a), fb.op("exponential", a),
                                                   fb.op("abs", a)])
    got, _, interpreted = compile_and_run(Module("specials", b.build(f)), [z])
    assert interpreted == {}
    sqrt, log, exp, mag = got
    assert sqrt[0] == 0 and sqrt[2] == complex(inf, 0) and sqrt[3] == complex(0, inf)
    assert sqrt[4] == complex(inf, inf) and sqrt[5] == complex(inf, inf)
    assert sqrt[6] == complex(0, 2) and sqrt[7] == complex(0, -2)
    assert np.signbit(sqrt[7].imag) and not np.signbit(sqrt[6].imag)
    assert log[0] == complex(-inf, 0) and log[1].real == -inf and log[1].imag == np.pi
    assert log[2] == complex(inf, 0) and log[3].real == inf and np.isclose(log[3].imag, np.pi)
    assert exp[0] == 1 and exp[3] == 0 and np.isnan(exp[4].real) and np.isnan(exp[4].imag)
    assert mag[5] == inf and mag[2] == inf and mag[6] == 4


@pytest.mark.parametrize("t", COMPLEX)
def test_complex_data_movement_is_native_and_bitwise(t):
    module, names = _movement_module(t)
    rng = np.random.default_rng(3)
    dt = to_numpy_dtype(t)

    def rand(dims):
        return (rng.standard_normal(dims) + 1j * rng.standard_normal(dims)).astype(dt)
    ins = [rand(d) for d in [(6, 8), (8,), (6,), (), (1, 8), (3, 4, 5)]] + [np.int32(1), np.int32(2)]
    got, want, interpreted = compile_and_run(module, ins)
    assert interpreted == {}, interpreted
    for g, w in zip(got, want):
        assert_bitwise(g, w, t)


# ---- complex reductions -------------------------------------------------------------------------

@functools.cache
def complex_reduction_case(t: str):
    rng = np.random.default_rng(11)
    dt = to_numpy_dtype(t)
    a = (rng.random((7, 3000)) + 1j * rng.random((7, 3000))).astype(dt)
    c = (rng.uniform(0.5, 1.5, (5, 12)) * np.exp(1j * rng.uniform(-1, 1, (5, 12)))).astype(dt)
    b = Builder(f"complex_sums_{t}")
    pa, pc = b.parameter(Shape(t, a.shape), "a"), b.parameter(Shape(t, c.shape), "c")
    outs = {
        "row_sum": fusion(b, "row_sum", [pa], lambda fb, x: _reduce(fb, x, 0, (1,), "add", t), "kInput"),
        "column_sum": fusion(b, "column_sum", [pa], lambda fb, x: _reduce(fb, x, 0, (0,), "add", t), "kInput"),
        "all_sum": fusion(b, "all_sum", [pa], lambda fb, x: _reduce(fb, fb.op("multiply", x, x), 0, (0, 1),
                                                                    "add", t), "kInput"),
        "mean_abs_rows": fusion(b, "mean_abs_rows", [pa], lambda fb, x: fb.op(
            "abs", fb.op("divide", _reduce(fb, x, 1 + 1j, (1,), "add", t),
                         fb.broadcast(fb.constant(np.array(3000, dt)), (7,)))), "kInput"),
        "prod_rows": fusion(b, "prod_rows", [pc], lambda fb, x: _reduce(fb, x, 1, (1,), "multiply", t), "kInput"),
    }
    module = Module(f"complex_sums_{t}", b.build(b.op("tuple", *outs.values())))
    got, want, interpreted = compile_and_run(module, [a, c])
    return dict(zip(outs, zip(got, want))), interpreted


@pytest.mark.parametrize("name", ["row_sum", "column_sum", "all_sum", "mean_abs_rows", "prod_rows"])
@pytest.mark.parametrize("t", COMPLEX)
def test_complex_reduction_native_and_matches_evaluator(t, name):
    results, interpreted = complex_reduction_case(t)
    assert kernel_name(name) not in interpreted, interpreted[kernel_name(name)]
    got, want = results[name]
    assert_close(got, want, f"{t} {name}")


def test_complex64_sum_at_least_as_accurate_as_numpy():
    rng = np.random.default_rng(2)
    n = 1 << 20
    x = (rng.random(n) + 1j * rng.random(n)).astype(np.complex64)
    exact = x.astype(np.complex128).sum()
    b = Builder("csum")
    p = b.parameter(Shape("c64", (n,)), "x")
    f = fusion(b, "csum", [p], lambda fb, a: _reduce(fb, a, 0, (0,), "add", "c64"), "kInput")
    executable = build_executable(Module("csum", b.build(f)), "cpu")
    assert executable.native.interpreted == {}
    got = complex(executable.run([x])[0])
    ours = abs(got - exact) / abs(exact)
    numpy = abs(complex(x.sum()) - exact) / abs(exact)
    assert ours <= max(numpy, 1e-7), (ours, numpy)


# ---- scatter ------------------------------------------------------------------------------------

def _replace(t):
    b = Builder(unique_name(f"replace_{t}"))
    b.parameter(Shape(t), "current")
    new = b.parameter(Shape(t), "update")
    return b.build(new)


def _combiner(kind, t):
    if kind == "replace":
        return _replace(t)
    if kind == "custom":                                 # current - 2 * update: not recognized
        b = Builder(unique_name(f"custom_{t}"))
        cur, upd = b.parameter(Shape(t), "current"), b.parameter(Shape(t), "update")
        return b.build(b.op("subtract", cur, b.op("add", upd, upd)))
    return scalar_computation(kind, t)


# name -> (operand shape, indices (array), updates shape, attrs)
_IDX_1D = np.array([[3], [0], [3], [-1], [9], [10], [3], [5]], np.int32)        # dups, out of bounds
SCATTER_CASES = {
    "elements": ((10,), _IDX_1D, (8,), dict(update_window_dims=(), inserted_window_dims=(0,),
                                             scatter_dims_to_operand_dims=(0,), index_vector_dim=1)),
    "rows_implicit_vector": ((10, 4), np.array([7, 2, 7, -3, 9, 12, 0], np.int64), (7, 4),
                             dict(update_window_dims=(1,), inserted_window_dims=(0,),
                                  scatter_dims_to_operand_dims=(0,), index_vector_dim=1)),
    # a 2x3 window into a 5x6 operand; window dims around the scatter dim; starts that do not
    # fit (4 + 2 > 5, 6 + 3 > 6, negative) are skipped as a whole
    "window_2d": ((5, 6), np.array([[0, 0], [3, 3], [4, 0], [1, 4], [-1, 2], [3, 3], [2, 1]], np.int32),
                  (2, 7, 3), dict(update_window_dims=(0, 2), inserted_window_dims=(),
                                  scatter_dims_to_operand_dims=(0, 1), index_vector_dim=1)),
    # the index vector along dimension 0 of the indices, 2-D scatter dims, a 3-D operand with
    # the middle dimension inserted
    "vector_dim_0": ((4, 3, 5), np.array([[[0, 3], [1, 3]], [[1, 2], [1, 3]]], np.int32), (2, 2, 4, 2),
                     dict(update_window_dims=(2, 3), inserted_window_dims=(1,),
                          scatter_dims_to_operand_dims=(0, 1), index_vector_dim=0)),
}


def _scatter_inputs(name, t, rng):
    oshape, idx, ushape, _ = SCATTER_CASES[name]
    dt = to_numpy_dtype(t)

    def rand(shape):
        if t == "pred":
            return rng.random(shape) < 0.5
        if dt.kind in "iu":
            return rng.integers(-50, 50, shape).astype(dt)
        v = rng.standard_normal(shape)
        if dt.kind == "c":
            v = v + 1j * rng.standard_normal(shape)
        return v.astype(dt)
    return [rand(oshape), idx, rand(ushape)]


SCATTER_RUNS = [(name, kind, t) for name in SCATTER_CASES for kind, t in
                [("add", "f32"), ("replace", "f32"), ("maximum", "f32"), ("minimum", "s32"),
                 ("multiply", "f64"), ("add", "s32"), ("add", "pred"), ("add", "c64"), ("replace", "c128")]]


@functools.cache
def scatter_case():
    """Every scatter run in one module (one compilation): {(name, kind, t): (got, want)}."""
    rng = np.random.default_rng(9)
    b = Builder("scatters")
    outs, ins = [], []
    for name, kind, t in SCATTER_RUNS + [("rows_implicit_vector", "custom", "f32")]:
        values = _scatter_inputs(name, t, rng)
        params = [b.parameter(_shape_of(v), f"{name}_{kind}_{t}_{k}") for k, v in enumerate(values)]
        outs.append(b.op("scatter", *params, to_apply=_combiner(kind, t), **SCATTER_CASES[name][3],
                         name=f"scatter_{name}_{kind}_{t}"))
        ins += values
    module = Module("scatters", b.build(b.op("tuple", *outs)))
    executable = build_executable(module, "cpu")
    before = [a.copy() for a in ins]
    got = executable.run(ins)
    for a, c in zip(ins, before):                 # inputs are not updated in place
        assert_bitwise(a, c, "scatter input")
    with np.errstate(all="ignore"):
        want = flatten(evaluate(module, ins))
    keys = SCATTER_RUNS + [("rows_implicit_vector", "custom", "f32")]
    inputs = [ins[3 * k:3 * k + 3] for k in range(len(keys))]
    return dict(zip(keys, zip(got, want, inputs))), executable.native


def _shape_of(v):
    from nbxla.hlo.shapes import shape_of
    return shape_of(np.asarray(v))


@pytest.mark.parametrize("name, kind, t", SCATTER_RUNS, ids=lambda v: str(v))
def test_scatter_native_and_matches_evaluator(name, kind, t):
    results, native = scatter_case()
    scatter_name = f"scatter_{name}_{kind}_{t}"
    assert scatter_name not in native.interpreted_ops, native.interpreted_ops[scatter_name]
    assert native.kernels.specs[f"nbxla_{kernel_name(scatter_name)}"].style == "scatter"
    got, want, _ = results[(name, kind, t)]
    assert_bitwise(got, want, f"{name} {kind} {t}")


def test_scatter_with_custom_combiner_is_native_and_correct():
    """current - 2 * update: the combiner computation is emitted inline (codegen/scatter.py)."""
    results, native = scatter_case()
    assert "scatter_rows_implicit_vector_custom_f32" not in native.interpreted_ops
    got, want, _ = results[("rows_implicit_vector", "custom", "f32")]
    assert_bitwise(got, want, "custom combiner")


def test_scatter_replace_last_duplicate_wins_and_out_of_bounds_skipped():
    results, _ = scatter_case()
    got, _, (operand, idx, updates) = results[("elements", "replace", "f32")]
    expected = operand.copy()
    for i, u in zip(idx[:, 0], updates):
        if 0 <= i < 10:
            expected[i] = u
    assert_bitwise(got, expected, "replace")
    assert got[3] == updates[6]                  # the last of three updates of element 3


def test_corpus_scatter_add_is_native():
    from .test_corpus_cpu import compiled_corpus_case
    compilation = compiled_corpus_case("scatter_add")
    native = compilation.executable.native
    scatters = [i.name for i in compilation.optimized.entry.instructions if i.opcode == "scatter"]
    assert len(scatters) == 2 and native.interpreted_ops == {}
    assert all(native.kernels.specs[f"nbxla_{kernel_name(s)}"].style == "scatter" for s in scatters)
