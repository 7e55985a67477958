"""Each VJP rule against central finite differences, in float64, on the evaluator.

Every case is one forward instruction (built with the ``Builder``) of random float64 inputs.
``vjp_module`` gives the cotangents for a random output cotangent ``g``; central differences
of the forward module along a random direction ``v`` must match ``<grad, v>``.  The table
test checks that every opcode is in exactly one of the three autodiff tables and that every
differentiable opcode has a case here.
"""

from __future__ import annotations

import numpy as np
import pytest

from nbxla.autodiff import vjp_module
from nbxla.autodiff.rules import VJP_RULES, check_tables
from nbxla.hlo import Builder, Module, Shape, scalar_computation
from nbxla.hlo.attributes import PadDim, SliceDim, Window, WindowDim
from nbxla.hlo.evaluator import evaluate

F = "f64"


def _module(build, shapes):
    b = Builder("f")
    params = [b.parameter(Shape(t, s), f"p{i}") for i, (t, s) in enumerate(shapes)]
    return Module("f", b.build(build(b, *params)))


def check_vjp(build, shapes, inputs, wrt, rtol=1e-6, h=1e-6, seed=0):
    """``shapes``: [(element type, dims)]; ``inputs``: arrays; ``wrt``: differentiated params."""
    rng = np.random.default_rng(seed)
    fwd = _module(build, shapes)
    out = evaluate(fwd, inputs)
    g = rng.standard_normal(out.shape)
    vjp = vjp_module(fwd, wrt)
    extra = [] if out.ndim == 0 else [g]
    if out.ndim == 0:
        g = np.float64(1.0)
    value, *grads = evaluate(vjp, list(inputs) + extra)
    np.testing.assert_allclose(value, out, rtol=1e-12)
    for k, i in enumerate(wrt):
        v = rng.standard_normal(inputs[i].shape)
        plus, minus = list(inputs), list(inputs)
        plus[i] = inputs[i] + h * v
        minus[i] = inputs[i] - h * v
        fd = np.sum((evaluate(fwd, plus) - evaluate(fwd, minus)) * g) / (2 * h)
        got = np.sum(grads[k] * v)
        assert grads[k].shape == inputs[i].shape
        assert abs(got - fd) <= rtol * max(1.0, abs(fd)) * 10, (got, fd)


def r(*shape, lo=-2.0, hi=2.0, seed=1):
    return np.random.default_rng(seed + len(shape)).uniform(lo, hi, shape)


def s(*dims):
    return (F, dims)


def unary(op, lo=-2.0, hi=2.0):
    return (lambda b, x: b.op(op, x), [s(3, 4)], [r(3, 4, lo=lo, hi=hi)], [0])


def binary(op, lo=-2.0, hi=2.0, lo2=None, hi2=None):
    second = r(3, 4, lo=lo if lo2 is None else lo2, hi=hi if hi2 is None else hi2, seed=7)
    return (lambda b, x, y: b.op(op, x, y), [s(3, 4), s(3, 4)], [r(3, 4, lo=lo, hi=hi), second], [0, 1])


def _reduce(kind, dims):
    def build(b, x):
        return b.reduce(x, b.constant(0 if kind == "add" else -np.inf, F), dims,
                        scalar_computation(kind, F))
    return build


def _conv(b, x):
    return b.op("convert", b.op("convert", x, shape=Shape("f32", x.shape.dims)), shape=x.shape)


def _gather(b, x, idx):
    return b.op("gather", x, idx, offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,),
                index_vector_dim=1, slice_sizes=(1, 4))


def _scatter(kind):
    def build(b, x, idx, u):
        comp = scalar_computation("add", F) if kind == "add" else _replace()
        return b.op("scatter", x, idx, u, update_window_dims=(1,), inserted_window_dims=(0,),
                    scatter_dims_to_operand_dims=(0,), index_vector_dim=1, to_apply=comp)
    return build


def _replace():
    b = Builder("replace")
    b.parameter(Shape(F), "old")
    return b.build(b.parameter(Shape(F), "new"))


def _sort(b, x):
    cb = Builder("less")
    lhs, rhs = cb.parameter(Shape(F), "a"), cb.parameter(Shape(F), "b")
    return b.op("sort", x, dimensions=(1,), is_stable=True, to_apply=cb.build(cb.compare(lhs, rhs, "LT")))


def _cumsum(b, x):
    w = Window((WindowDim(1), WindowDim(4, 1, 3, 0)))
    return b.op("reduce-window", x, b.constant(0, F), window=w, to_apply=scalar_computation("add", F))


def _pool(b, x):
    w = Window((WindowDim(2, 2, 1, 0), WindowDim(3, 1, 1, 1)))
    return b.op("reduce-window", x, b.constant(0, F), window=w, to_apply=scalar_computation("add", F))


def _max_pool(b, x):
    w = Window((WindowDim(2, 2, 1, 0), WindowDim(3, 1, 1, 1)))
    return b.op("reduce-window", x, b.constant(-np.inf, F), window=w,
                to_apply=scalar_computation("maximum", F))


def _cummin(b, x):
    w = Window((WindowDim(1), WindowDim(6, 1, 5, 0)))
    return b.op("reduce-window", x, b.constant(np.inf, F), window=w,
                to_apply=scalar_computation("minimum", F))


def _cumprod(b, x):
    w = Window((WindowDim(1), WindowDim(6, 1, 5, 0)))
    return b.op("reduce-window", x, b.constant(1, F), window=w,
                to_apply=scalar_computation("multiply", F))


IDX = np.array([[2], [0], [2], [1]], np.int64)
INT = ("s64", (4, 1))
CASES = {
    **{op: unary(op) for op in ("abs", "negate", "exponential", "exponential-minus-one", "tanh",
                                 "logistic", "sine", "cosine", "erf", "copy", "cbrt")},
    "log": unary("log", 0.5, 3), "log-plus-one": unary("log-plus-one", -0.5, 3),
    "sqrt": unary("sqrt", 0.5, 3), "rsqrt": unary("rsqrt", 0.5, 3), "tan": unary("tan", -1, 1),
    "reduce-precision": (lambda b, x: b.op("reduce-precision", x, exponent_bits=11, mantissa_bits=52),
                         [s(3, 4)], [r(3, 4)], [0]),
    # (through float32 and back: linear, so a wide step keeps the rounding out of the quotient)
    "convert": (_conv, [s(3, 4)], [r(3, 4)], [0], dict(h=1e-2, rtol=1e-4)),
    **{op: binary(op) for op in ("add", "subtract", "multiply", "maximum", "minimum", "atan2")},
    "divide": binary("divide", 0.5, 2), "remainder": binary("remainder", 0.5, 5, 0.7, 1.3),
    "power": binary("power", 0.5, 2),
    "select": (lambda b, x, y: b.op("select", b.compare(x, y, "GT"), x, y), [s(3, 4), s(3, 4)],
               [r(3, 4), r(3, 4, seed=5)], [0, 1]),
    "clamp": (lambda b, lo, x, hi: b.op("clamp", lo, x, hi), [s(), s(3, 4), s()],
              [np.float64(-0.5), r(3, 4), np.float64(0.7)], [0, 1, 2]),
    "broadcast": (lambda b, x: b.op("broadcast", x, shape=Shape(F, (4, 2, 3)), dimensions=(2, 0)),
                  [s(3, 4)], [r(3, 4)], [0]),
    "reshape": (lambda b, x: b.reshape(x, (2, 6)), [s(3, 4)], [r(3, 4)], [0]),
    "bitcast": (lambda b, x: b.op("bitcast", x, shape=Shape(F, (12,))), [s(3, 4)], [r(3, 4)], [0]),
    "transpose": (lambda b, x: b.op("transpose", x, dimensions=(1, 2, 0)), [s(2, 3, 4)], [r(2, 3, 4)], [0]),
    "reverse": (lambda b, x: b.op("reverse", x, dimensions=(1,)), [s(3, 4)], [r(3, 4)], [0]),
    "slice": (lambda b, x: b.op("slice", x, slice=(SliceDim(1, 3), SliceDim(0, 7, 3))),
              [s(3, 8)], [r(3, 8)], [0]),
    "pad": (lambda b, x, v: b.op("pad", x, v, padding=(PadDim(1, -1, 1), PadDim(-1, 2))),
            [s(3, 4), s()], [r(3, 4), np.float64(0.3)], [0, 1]),
    "concatenate": (lambda b, x, y: b.op("concatenate", x, y, dimensions=(1,)),
                    [s(3, 4), s(3, 2)], [r(3, 4), r(3, 2, seed=9)], [0, 1]),
    "dynamic-slice": (lambda b, x: b.op("dynamic-slice", x, b.constant(1, "s64"), b.constant(3, "s64"),
                                        dynamic_slice_sizes=(2, 2)), [s(3, 4)], [r(3, 4)], [0]),
    "dynamic-update-slice": (lambda b, x, u: b.op("dynamic-update-slice", x, u, b.constant(1, "s64"),
                                                  b.constant(1, "s64")),
                             [s(3, 4), s(2, 2)], [r(3, 4), r(2, 2, seed=4)], [0, 1]),
    "reduce": (_reduce("add", (1,)), [s(3, 4)], [r(3, 4)], [0]),
    "reduce-window": (_cumsum, [s(3, 4)], [r(3, 4)], [0]),
    "dot": (lambda b, x, y: b.op("dot", x, y, lhs_batch_dims=(0,), rhs_batch_dims=(1,),
                                 lhs_contracting_dims=(2,), rhs_contracting_dims=(0,)),
            [s(2, 3, 4), s(4, 2, 5)], [r(2, 3, 4), r(4, 2, 5, seed=3)], [0, 1]),
    "gather": (_gather, [s(3, 4), INT], [r(3, 4), IDX], [0]),
    "scatter": (_scatter("add"), [s(3, 4), INT, s(4, 4)], [r(3, 4), IDX, r(4, 4, seed=2)], [0, 2]),
    "sort": (_sort, [s(3, 5)], [r(3, 5)], [0]),
    "tuple": (lambda b, x, y: b.op("get-tuple-element", b.op("tuple", x, b.op("multiply", x, y)), index=1),
              [s(3, 4), s(3, 4)], [r(3, 4), r(3, 4, seed=6)], [0, 1]),
}
CASES["get-tuple-element"] = CASES["tuple"]
EXTRA = {
    "reduce max": (_reduce("maximum", (0,)), [s(3, 4)], [r(3, 4)], [0]),
    "reduce max all": (_reduce("maximum", (0, 1)), [s(3, 4)], [r(3, 4)], [0]),
    "reduce multiply": (lambda b, x: b.reduce(x, b.constant(1, F), (1,), scalar_computation("multiply", F)),
                        [s(3, 4)], [r(3, 4, lo=0.5)], [0]),
    "reduce-window strided, padded": (_pool, [s(5, 4)], [r(5, 4)], [0]),
    "reduce-window max (pooling)": (_max_pool, [s(5, 4)], [r(5, 4)], [0]),
    "reduce-window min (cummin)": (_cummin, [s(3, 6)], [r(3, 6)], [0]),
    "reduce-window multiply (cumprod)": (_cumprod, [s(3, 6)], [r(3, 6, lo=0.5, hi=1.5)], [0]),
    "scatter replace": (_scatter("replace"), [s(3, 4), ("s64", (2, 1)), s(2, 4)],
                        [r(3, 4), np.array([[2], [0]]), r(2, 4, seed=2)], [0, 2]),
    "dot matmul": (lambda b, x, y: b.op("dot", x, y, lhs_contracting_dims=(1,), rhs_contracting_dims=(0,)),
                   [s(3, 4), s(4, 5)], [r(3, 4), r(4, 5, seed=3)], [0, 1]),
    "dot contract first": (lambda b, x, y: b.op("dot", x, y, lhs_contracting_dims=(0,),
                                                rhs_contracting_dims=(1,)),
                           [s(4, 3), s(5, 4)], [r(4, 3), r(5, 4, seed=3)], [0, 1]),
    "broadcast size-1": (lambda b, x: b.op("broadcast", x, shape=Shape(F, (3, 4)), dimensions=(0, 1)),
                         [s(1, 4)], [r(1, 4)], [0]),
}


def test_every_opcode_has_exactly_one_home():
    assert check_tables() == []


def test_every_rule_has_a_case():
    # (call and while: the loop tests below)
    assert sorted(set(VJP_RULES) - set(CASES) - {"call", "while"}) == []


@pytest.mark.parametrize("name", sorted(CASES) + sorted(EXTRA))
def test_rule_matches_finite_differences(name):
    build, shapes, inputs, wrt, *options = {**CASES, **EXTRA}[name]
    check_vjp(build, shapes, inputs, wrt, **(options[0] if options else {}))


def test_max_ties_share_the_gradient():
    fwd = _module(_reduce("maximum", (0, 1)), [s(2, 2)])
    _, grad = evaluate(vjp_module(fwd, [0]), [np.array([[1.0, 3.0], [3.0, 2.0]])])
    np.testing.assert_array_equal(grad, [[0, 0.5], [0.5, 0]])


def test_elementwise_maximum_ties_split_in_half():
    fwd = _module(lambda b, x, y: b.reduce(b.op("maximum", x, y), b.constant(0, F), (0,),
                                           scalar_computation("add", F)), [s(2), s(2)])
    _, gx, gy = evaluate(vjp_module(fwd, [0, 1]), [np.array([1.0, 2.0]), np.array([1.0, 0.0])])
    np.testing.assert_array_equal(gx, [0.5, 1.0])
    np.testing.assert_array_equal(gy, [0.5, 0.0])


# ---- call and while (loops with a static trip count are unrolled) -----------------------------

LOOP = """
HloModule loop

body {
  state = (s64[], f64[3,4], f64[4,4]) parameter(0)
  i = s64[] get-tuple-element(state), index=0
  one = s64[] constant(1)
  next = s64[] add(i, one)
  h = f64[3,4] get-tuple-element(state), index=1
  w = f64[4,4] get-tuple-element(state), index=2
  hw = f64[3,4] dot(h, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  t = f64[3,4] tanh(hw)
  fi = f64[] convert(i)
  b = f64[3,4] broadcast(fi), dimensions={}
  th = f64[3,4] call(t, b), to_apply=scaled
  ROOT out = (s64[], f64[3,4], f64[4,4]) tuple(next, th, w)
}

scaled {
  a = f64[3,4] parameter(0)
  c = f64[3,4] parameter(1)
  k = f64[] constant(0.1)
  kb = f64[3,4] broadcast(k), dimensions={}
  ck = f64[3,4] multiply(c, kb)
  s = f64[3,4] add(a, ck)
  ROOT m = f64[3,4] multiply(s, a)
}

cond {
  state = (s64[], f64[3,4], f64[4,4]) parameter(0)
  i = s64[] get-tuple-element(state), index=0
  n = s64[] constant(TRIPS)
  ROOT lt = pred[] compare(i, n), direction=LT
}

ENTRY main {
  x = f64[3,4] parameter(0)
  w = f64[4,4] parameter(1)
  zero = s64[] constant(0)
  init = (s64[], f64[3,4], f64[4,4]) tuple(zero, x, w)
  loop = (s64[], f64[3,4], f64[4,4]) while(init), condition=cond, body=body
  h = f64[3,4] get-tuple-element(loop), index=1
  z = f64[] constant(0)
  ROOT s = f64[] reduce(h, z), dimensions={0,1}, to_apply=add
}

add {
  a = f64[] parameter(0)
  b = f64[] parameter(1)
  ROOT c = f64[] add(a, b)
}
"""


@pytest.mark.parametrize("trips", [0, 1, 4])
def test_while_with_a_static_trip_count_and_a_call(trips):
    from nbxla.hlo.parser import parse_hlo
    fwd = parse_hlo(LOOP.replace("TRIPS", str(trips)))
    x, w = r(3, 4), r(4, 4) * 0.5
    value, gx, gw = evaluate(vjp_module(fwd, [0, 1]), [x, w])
    assert value == evaluate(fwd, [x, w])
    rng = np.random.default_rng(3)
    for i, grad in ((0, gx), (1, gw)):
        v = rng.standard_normal(grad.shape)
        args_p, args_m = [x, w], [x, w]
        args_p[i] = args_p[i] + 1e-6 * v
        args_m[i] = args_m[i] - 1e-6 * v
        fd = (evaluate(fwd, args_p) - evaluate(fwd, args_m)) / 2e-6
        assert np.sum(grad * v) == pytest.approx(fd, rel=1e-6, abs=1e-8)


def test_a_loop_without_a_static_trip_count_is_refused_with_the_reason():
    from nbxla.autodiff import NotDifferentiableError
    from nbxla.hlo.parser import parse_hlo
    text = LOOP.replace("n = s64[] constant(TRIPS)", "n = s64[] constant(3)\n  m = s64[] multiply(i, i)") \
               .replace("compare(i, n)", "compare(m, n)")
    with pytest.raises(NotDifferentiableError, match="trip count is not static"):
        vjp_module(parse_hlo(text), [0])


def test_jax_fori_loops_have_static_trip_counts():
    from pathlib import Path

    from nbxla.autodiff.calls import static_trip_count
    from nbxla.hlo.parser import parse_hlo
    path = Path(__file__).resolve().parents[1] / "hlo" / "jax_extra" / "fori_loop_tuple_carry.hlo"
    module = parse_hlo(path.read_text(), str(path))
    loops = [i for i in module.instructions() if i.opcode == "while"]
    assert loops and all(static_trip_count(w) is not None for w in loops)
