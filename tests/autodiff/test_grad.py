"""``nbxla.grad`` of NumPy functions against float64 central differences of eager NumPy.

Each function runs eagerly in NumPy (the oracle) and through ``nbxla.value_and_grad``; the
gradient's inner product with a random direction must match the central difference of the
eager function along it, and the value must equal the eager value.  The same gradient taken
inside ``nbxla.jit`` (the backward pass joining the surrounding trace) must agree too.
Most cases run on the reference evaluator (they check differentiation, not codegen); the
training-step tests compile for the CPU.
"""

from __future__ import annotations

import numpy as np
import pytest

import nbxla
from nbxla.frontend.trace import tree_flatten, tree_unflatten

DEVICE = "evaluator"
rng = np.random.default_rng(0)


def randn(*shape):
    return rng.standard_normal(shape)


# ---- the functions ------------------------------------------------------------------------------

def log_softmax(z):
    m = z.max(axis=-1, keepdims=True)
    return z - (np.log(np.sum(np.exp(z - m), axis=-1, keepdims=True)) + m)


def mlp_xent(params, x, labels):
    w1, b1, w2, b2 = params
    h = np.maximum(x @ w1 + b1, 0)
    logp = log_softmax(h @ w2 + b2)
    return -np.mean(np.take_along_axis(logp, labels[:, None], axis=1))


def layernorm(x, gamma, beta):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    y = (x - mu) / np.sqrt(var + 1e-5) * gamma + beta
    return np.sum(y * np.cos(y))


def lstm_cell(p, x, state):
    h, c = state
    z = np.concatenate([x, h], axis=1) @ p["w"] + p["b"]
    n = h.shape[1]
    i, f, o = (1 / (1 + np.exp(-z[:, k * n:(k + 1) * n])) for k in range(3))
    g = np.tanh(z[:, 3 * n:])
    c2 = f * c + i * g
    h2 = o * np.tanh(c2)
    return np.sum(h2 ** 2) + np.mean(c2)


def stencil2d(u):
    for _ in range(3):
        u = u.copy()
        u[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
    return np.sum(u * u)


def where_gather(x, idx):
    y = np.where(x > 0.2, x * x, np.sin(x))
    return np.sum(np.take(y, idx, axis=0) * 2) + np.sum(y[idx] ** 3) + y[:, idx].mean()


def tanh_loop(x, w):
    h = x
    for _ in range(4):
        h = np.tanh(h @ w)
    return h.sum()


def max_no_ties(x):
    return np.max(x, axis=1).sum() + np.min(x) * 2 + np.max(x)


def attention(q, k, v):
    s = np.einsum("bqd,bkd->bqk", q, k) / np.sqrt(q.shape[-1])
    p = np.exp(log_softmax(s))
    return np.sum(np.einsum("bqk,bkd->bqd", p, v) ** 2)


def cumulative(x):
    return np.sum(np.log1p(np.cumsum(x * x, axis=1))) + np.cumsum(x, axis=0)[-1].sum() + \
        np.sum(np.maximum.accumulate(x, axis=1) ** 2) + np.sum(np.cumprod(x / 4 + 1, axis=1))


def linear_dict(p, x, y):
    pred = x @ p["w"] + p["b"]
    return np.mean((pred - y) ** 2)


def statistics(x):
    return np.std(x, axis=0).sum() + np.var(x) + np.abs(x).mean()


def reshapes(x):
    y = x.T.reshape(-1, 2)
    z = np.concatenate([y, y[::-1] * 2], axis=0)
    return np.sum(z.reshape(2, -1).T[1:, :] ** 2) + np.sum(np.pad(x, 1) ** 3)


def scatters(x, idx, v):
    y = x.copy()
    y[idx] = v * 3                      # scatter (replace)
    z = np.zeros_like(x)
    np.add.at(z, idx, v)                # scatter (add)
    return np.sum(np.sin(y)) + np.sum(z * x)


def elementwise_zoo(x, y):
    a = np.exp(x) / (1 + y * y) + np.expm1(x) * np.log(1 + np.abs(y) + y * y) + np.arctan2(x, y)
    b = np.sqrt(x * x + 1) ** 1.5 - np.clip(y, -0.5, 0.5) + np.power(np.abs(x) + 1, y) + np.tanh(y)
    return np.sum(a * b) / x.size


def sort_top2(x):
    s = np.sort(x, axis=1)
    return np.sum(s[:, -2:] ** 2) + s[:, 0].sum()


def argmax_pick(x):
    i = np.argmax(x, axis=1)
    return np.sum(np.take_along_axis(x, i[:, None], axis=1) ** 2) + np.max(x, axis=0).sum()


def float32_mlp(params, x, labels):
    return mlp_xent(params, x, labels)


labels = rng.integers(0, 3, 6)
idx = np.array([3, 0, 3, 1])
CASES = {
    "mlp_xent": (mlp_xent, ([randn(5, 7), randn(7) * 0.1, randn(7, 3), randn(3) * 0.1],
                            randn(6, 5), labels), 0),
    "layernorm": (layernorm, (randn(4, 6), randn(6), randn(6)), (0, 1, 2)),
    "lstm_cell": (lstm_cell, ({"w": randn(7, 16) * 0.5, "b": randn(16) * 0.1}, randn(3, 3),
                              (randn(3, 4), randn(3, 4))), (0, 1, 2)),
    "stencil2d": (stencil2d, (randn(6, 7),), 0),
    "where_gather": (where_gather, (randn(5, 5), idx), 0),
    "tanh_loop": (tanh_loop, (randn(3, 4), randn(4, 4) * 0.5), (0, 1)),
    "max_no_ties": (max_no_ties, (randn(4, 5),), 0),
    "attention": (attention, (randn(2, 3, 4), randn(2, 5, 4), randn(2, 5, 4)), (0, 1, 2)),
    "cumulative": (cumulative, (randn(3, 5),), 0),
    "linear_dict": (linear_dict, ({"w": randn(4, 2), "b": randn(2)}, randn(5, 4), randn(5, 2)), 0),
    "statistics": (statistics, (randn(5, 3),), 0),
    "reshapes": (reshapes, (randn(4, 3),), 0),
    "scatters": (scatters, (randn(5, 3), np.array([4, 1]), randn(2, 3)), (0, 2)),
    "elementwise_zoo": (elementwise_zoo, (randn(3, 4), randn(3, 4)), (0, 1)),
    "sort_top2": (sort_top2, (randn(3, 5),), 0),
    "argmax_pick": (argmax_pick, (randn(4, 5),), 0),
}


def _directional(fn, args, argnums, direction, h=1e-6):
    def shifted(sign):
        a = list(args)
        for n, d in zip(argnums, direction):
            leaves, tree = tree_flatten(a[n])
            a[n] = tree_unflatten(tree, [x + sign * h * dx for x, dx in zip(leaves, tree_flatten(d)[0])])
        return fn(*a)
    return (shifted(1) - shifted(-1)) / (2 * h)


def _dot(grads, direction):
    return sum(np.sum(g * d) for g, d in zip(tree_flatten(grads)[0], tree_flatten(direction)[0]))


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradient_matches_finite_differences(name):
    fn, args, argnums = CASES[name]
    nums = argnums if isinstance(argnums, tuple) else (argnums,)
    value, grads = nbxla.value_and_grad(fn, argnums, device=DEVICE)(*args)
    assert np.asarray(value) == pytest.approx(fn(*args), rel=1e-12)
    grads = grads if isinstance(argnums, tuple) else (grads,)
    for n, g in zip(nums, grads):                   # same structure, shapes and dtypes
        want, got = tree_flatten(args[n]), tree_flatten(g)
        assert got[1] == want[1]
        assert [(np.shape(a), np.asarray(a).dtype) for a in got[0]] == \
            [(np.shape(a), np.asarray(a).dtype) for a in want[0]]
    d = rng.standard_normal
    direction = [tree_unflatten(tree_flatten(args[n])[1], [d(np.shape(x)) for x in tree_flatten(args[n])[0]])
                 for n in nums]
    fd = _directional(fn, args, nums, direction)
    assert _dot(grads, direction) == pytest.approx(fd, rel=1e-6, abs=1e-7)


@pytest.mark.parametrize("name", ["mlp_xent", "lstm_cell", "scatters", "sort_top2"])
def test_grad_inside_jit_equals_grad_outside(name):
    fn, args, argnums = CASES[name]
    outside = nbxla.grad(fn, argnums, device=DEVICE)(*args)
    inside = nbxla.jit(lambda *a: nbxla.grad(fn, argnums)(*a), device=DEVICE)(*args)
    for a, b in zip(tree_flatten(outside)[0], tree_flatten(inside)[0]):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


def test_max_with_ties_splits_the_gradient():
    x = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]])
    g = nbxla.grad(lambda x: np.max(x, axis=1).sum(), device=DEVICE)(x)
    np.testing.assert_allclose(g, [[0, 0.5, 0.5], [1 / 3, 1 / 3, 1 / 3]])
    relu = nbxla.grad(lambda x: np.maximum(x, 0).sum(), device=DEVICE)(np.array([-1.0, 0.0, 2.0]))
    np.testing.assert_allclose(relu, [0, 0.5, 1])      # lax.max's convention at the kink


def test_float32_gradients_have_float32_dtype_and_match_float64():
    fn, (params, x, y), _ = CASES["mlp_xent"]
    g64 = nbxla.grad(fn, device=DEVICE)(params, x, y)
    g32 = nbxla.grad(fn, device=DEVICE)([p.astype(np.float32) for p in params], x.astype(np.float32), y)
    for a, b in zip(g64, g32):
        assert b.dtype == np.float32
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)


def test_closure_over_a_value_computed_from_the_argument_is_a_constant():
    def outer(x):
        y = x * 2                    # captured: JAX's semantics, a constant for the inner grad
        return nbxla.grad(lambda z: np.sum(z * y))(x)
    x = randn(3)
    np.testing.assert_allclose(nbxla.jit(outer, device=DEVICE)(x), 2 * x)


def test_gradient_tape_inside_jit():
    @nbxla.jit
    def step(w, x):
        with nbxla.GradientTape() as tape:
            loss = np.mean((x @ w) ** 2)
        return tape.gradient(loss, w)
    w, x = randn(3, 2), randn(4, 3)
    np.testing.assert_allclose(step(w, x), nbxla.grad(lambda w: np.mean((x @ w) ** 2), device=DEVICE)(w),
                               rtol=1e-12)
    with pytest.raises(nbxla.NbxlaError, match="inside @nbxla.jit"):
        nbxla.GradientTape().gradient(np.float64(1), w)


def test_errors_are_clear():
    with pytest.raises(nbxla.NbxlaError, match="dtype int64.*floating-point"):
        nbxla.grad(lambda x, y: x.sum(), argnums=1, device=DEVICE)(randn(2), np.arange(2))
    with pytest.raises(nbxla.NbxlaError, match="scalar.*shape \\(2,\\)"):
        nbxla.grad(lambda x: x * 2, device=DEVICE)(randn(2))
    text = """
HloModule m
ENTRY main {
  x = f64[1,4,1] parameter(0)
  k = f64[2,1,1] parameter(1)
  c = f64[1,3,1] convolution(x, k), window={size=2}, dim_labels=b0f_0io->b0f, metadata={source_file="model.py" source_line=12}
  z = f64[] constant(0)
  ROOT s = f64[] reduce(c, z), dimensions={0,1,2}, to_apply=add
}
add {
  a = f64[] parameter(0)
  b = f64[] parameter(1)
  ROOT c = f64[] add(a, b)
}
"""
    from nbxla.autodiff import NotDifferentiableError, vjp_module
    from nbxla.hlo.parser import parse_hlo
    with pytest.raises(NotDifferentiableError, match="model.py:12: cannot differentiate through "
                       "convolution .*no transpose rule for convolution"):
        vjp_module(parse_hlo(text), [0])


def test_output_independent_of_input_gives_zeros():
    g = nbxla.grad(lambda x, y: np.sum(y * y), device=DEVICE)(randn(3), randn(2))
    np.testing.assert_array_equal(g, np.zeros(3))


# ---- the compiled training step -----------------------------------------------------------------

def sgd_step(params, x, y, lr=0.1):
    loss, grads = nbxla.value_and_grad(mlp_xent)(params, x, y)
    return loss, [p - lr * g for p, g in zip(params, grads)]


def test_jitted_training_step_equals_the_eager_step():
    params = [p.astype(np.float32) for p in CASES["mlp_xent"][1][0]]
    x = randn(6, 5).astype(np.float32)
    eager_loss, eager = sgd_step(params, x, labels)          # grad compiled on its own
    step = nbxla.jit(sgd_step)                                # one program for the whole step
    loss, new = step(params, x, labels)
    assert loss == pytest.approx(eager_loss, rel=1e-5)
    for a, b in zip(new, eager):
        assert a.dtype == np.float32
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    numpy_loss = mlp_xent(params, x, labels)
    assert loss == pytest.approx(numpy_loss, rel=1e-5)


def test_grad_made_again_inside_an_eager_function_reuses_its_compilation():
    from nbxla.runtime.cache import CompilationCache
    cache = CompilationCache()
    x = randn(3)
    for _ in range(3):
        nbxla.grad(statistics, cache=cache)(x[:, None] * np.ones((1, 2)))
    assert cache.misses == 1 and cache.hits == 2


def test_grad_of_grad():
    x = randn(4)
    inner = nbxla.grad(lambda y: np.sum(np.sin(y) * y ** 3))
    second = nbxla.grad(lambda x: np.sum(inner(x) * np.arange(4.0)), device=DEVICE)(x)
    want = np.arange(4.0) * (-np.sin(x) * x ** 3 + 6 * np.cos(x) * x ** 2 + 6 * np.sin(x) * x)
    np.testing.assert_allclose(second, want, rtol=1e-12)


def test_the_backward_pass_is_fused_like_the_forward():
    params = [p.astype(np.float32) for p in CASES["mlp_xent"][1][0]]
    step = nbxla.jit(sgd_step)
    step(params, randn(6, 5).astype(np.float32), labels)
    report = step.last_compilation.fusion_report
    # every kernel is a fusion or a library call / scatter: no elementwise op runs on its own
    assert all(k.kind in ("kLoop", "kInput", "scatter") or "library" in k.kind for k in report.kernels), \
        [k.kind for k in report.kernels]
    assert report.kernels_after * 3 <= report.kernels_before     # (81 ops -> 21 kernels today)
    # backward work carries the forward's source lines (the stage viewer colors by line):
    # the weight gradients x.T @ g point at the matmul lines of mlp_xent
    # (anywhere: the SGD update w - lr * (x.T @ g) may hold its dot as one ?gemm, gemm_epilogue)
    weight_grads = [i for c in step.last_compilation.optimized.computations for i in c.instructions
                    if i.opcode == "dot" and i.attrs["lhs_contracting_dims"] == (0,)]
    first = mlp_xent.__code__.co_firstlineno
    assert len(weight_grads) == 2
    assert all(first < i.location.line < first + 5 for i in weight_grads)
