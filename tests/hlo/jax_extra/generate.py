"""Writes the extra JAX corpus: real HLO exported by JAX for what /work/shared/corpus does not
cover (scatter and gather variants, sorts, windows, convolutions, control flow, bit twiddling,
special functions, complex numbers, small integer and float types, empty arrays, ...).

Run by hand with a Python that has JAX (the tests never import it)::

    .venv/bin/python tests/hlo/jax_extra/generate.py [NAME ...]

For each case NAME it writes NAME.hlo (``lowered.as_text(dialect="hlo")``), NAME.opt.hlo
(``lowered.compile().as_text()``, XLA:CPU's optimized module) and NAME.npz (``in0, in1, ...``
the positional arguments, ``out0, out1, ...`` JAX's results, the flattened pytree), and
``cases.json`` with each case's description.  64-bit mode is on, as in the shared corpus.
"""

from __future__ import annotations

import json
import sys
import zlib
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

jax.config.update("jax_enable_x64", True)

HERE = Path(__file__).resolve().parent
RNG = np.random.default_rng(0)     # reseeded per case from its name (see write_case)
CASES: dict[str, tuple] = {}


def case(description):
    """Registers ``fn`` (returning (function, args)) under its own name."""
    def register(make):
        CASES[make.__name__] = (description, make)
        return make
    return register


def _with_nans(x, count):
    flat = x.reshape(-1)
    flat[RNG.choice(flat.size, count, replace=False)] = np.nan
    return x


def f32(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def f64(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float64)


def ints(lo, hi, *shape, dtype=np.int32):
    return RNG.integers(lo, hi, shape).astype(dtype)


# ---- scatter ------------------------------------------------------------------------------------

@case("x.at[idx].add/multiply/min/max with repeated 1-D indices, .set with unique ones")
def scatter_combiners_1d():
    def f(x, idx, uniq, v):
        return (x.at[idx].add(v), x.at[idx].multiply(v), x.at[idx].min(v), x.at[idx].max(v),
                x.at[uniq].set(v[:4]))
    return f, (f32(10), np.array([1, 3, 3, 7, 1, 1, 9, 0], np.int32),
               np.array([2, 5, 8, 0], np.int32), f32(8))


@case("x.at[rows, cols].add (2-D index pairs) and x.at[idx].set(rows) on a matrix")
def scatter_2d_indices():
    def f(x, r, c, v, idx, rows):
        return x.at[r, c].add(v), x.at[idx].set(rows), x.at[:, idx].add(rows.T[:, :2].sum() + 1.0)
    return f, (f32(5, 6), np.array([0, 4, 2, 2, 1], np.int32), np.array([5, 0, 3, 3, 1], np.int32),
               f32(5), np.array([3, 1], np.int32), f32(2, 6))


@case("out-of-bounds scatter indices: mode='drop' and mode='clip', negative indices")
def scatter_oob_modes():
    def f(x, idx, v):
        return (x.at[idx].add(v, mode="drop"), x.at[idx].set(v, mode="clip"),
                x.at[idx].get(mode="fill", fill_value=-1.0), x.at[idx].get(mode="clip"))
    return f, (f64(6), np.array([-1, 7, 2, 100, -9, 5], np.int64), f64(6))


@case("integer scatters: s32 add with repeats, u8 max, s64 min")
def scatter_integer_types():
    def f(a, b, c, idx, va, vb, vc):
        return a.at[idx].add(va), b.at[idx].max(vb), c.at[idx].min(vc)
    idx = np.array([0, 2, 2, 5, 0], np.int32)
    return f, (ints(-50, 50, 6), ints(0, 255, 6, dtype=np.uint8), ints(-9, 9, 6, dtype=np.int64),
               idx, ints(-50, 50, 5), ints(0, 255, 5, dtype=np.uint8), ints(-20, 20, 5, dtype=np.int64))


@case("jax.ops.segment_sum / segment_max / segment_min")
def segment_reductions():
    def f(data, seg):
        return (jax.ops.segment_sum(data, seg, num_segments=4),
                jax.ops.segment_max(data, seg, num_segments=4),
                jax.ops.segment_min(data, seg, num_segments=4))
    return f, (f32(10, 3), np.array([0, 0, 1, 3, 3, 3, 1, 0, 3, 1], np.int32))


@case("scatter of whole rows and 2-D blocks (update window dims) with lax.scatter_add")
def scatter_windows():
    def f(x, idx, upd):
        dn = lax.ScatterDimensionNumbers(update_window_dims=(1, 2), inserted_window_dims=(),
                                         scatter_dims_to_operand_dims=(0, 1))
        return lax.scatter_add(x, idx, upd, dn)
    return f, (f32(6, 7), np.array([[0, 0], [3, 4], [1, 1]], np.int32), f32(3, 2, 3))


# ---- gather -------------------------------------------------------------------------------------

@case("take_along_axis along axis 1 and axis 0, and with argsort indices")
def gather_take_along_axis():
    def f(x, i1, i0):
        return (jnp.take_along_axis(x, i1, axis=1), jnp.take_along_axis(x, i0, axis=0),
                jnp.take_along_axis(x, jnp.argsort(x, axis=1), axis=1))
    return f, (f32(4, 5), ints(0, 5, 4, 3), ints(0, 4, 2, 5))


@case("advanced indexing: x[i, :, j], x[idx2d], x[:, idx], negative indices, boolean-free")
def gather_advanced_indexing():
    def f(x, i, j, idx2d, neg):
        return x[i, :, j], x[idx2d], x[:, neg], x[1:, neg, ::2]
    return f, (f32(4, 5, 6), np.array([0, 3, 1], np.int32), np.array([5, 0, 2], np.int32),
               np.array([[0, 1], [3, 3]], np.int32), np.array([-1, 2, -5], np.int32))


@case("jnp.take with mode clip, wrap and fill (out-of-range indices)")
def gather_take_modes():
    def f(x, idx):
        return (jnp.take(x, idx, axis=1, mode="clip"), jnp.take(x, idx, axis=1, mode="wrap"),
                jnp.take(x, idx, axis=0, mode="fill", fill_value=7.0))
    return f, (f32(3, 4), np.array([0, -1, 5, 3, -7], np.int32))


@case("vmap of dynamic_slice: a gather with slice sizes > 1 and per-row starts")
def gather_vmap_dynamic_slice():
    def f(x, starts):
        return jax.vmap(lambda row, s: lax.dynamic_slice(row, (s, s * 0 + 1), (2, 3)))(x, starts)
    return f, (f32(4, 6, 5), np.array([0, 4, 5, -2], np.int32))


# ---- sorting ------------------------------------------------------------------------------------

@case("argsort along axis 0 (stable), descending sort, sort with NaN and -0.0")
def sort_argsort_variants():
    def f(x, y):
        return (jnp.argsort(x, axis=0, stable=True), jnp.sort(x, axis=1, descending=True),
                jnp.sort(y), jnp.argsort(y))
    x = np.round(f32(6, 5), 0)          # ties, to check stability
    y = np.array([3.0, np.nan, -0.0, 0.0, -np.inf, 1.0, np.nan, -2.0, np.inf], np.float32)
    return f, (x, y)


@case("lax.sort of three operands with num_keys=2, and a u32/s8/bool sort")
def sort_multi_operand_keys():
    def f(k1, k2, v, u, s, b):
        return lax.sort((k1, k2, v), num_keys=2) + (jnp.sort(u), jnp.sort(s), jnp.sort(b))
    return f, (ints(0, 3, 12), ints(0, 4, 12), f32(12), ints(0, 2**32, 9, dtype=np.uint32),
               ints(-128, 128, 9, dtype=np.int8), ints(0, 2, 7, dtype=np.bool_))


@case("lax.top_k (k=3) of a matrix and jnp.median / percentile (sorts)")
def sort_top_k():
    def f(x):
        vals, idx = lax.top_k(x, 3)
        return vals, idx, jnp.median(x, axis=1), jnp.percentile(x, 30.0)
    return f, (f32(4, 7),)


@case("jnp.searchsorted (left and right) and jnp.interp")
def sort_searchsorted_interp():
    def f(a, v, xp, fp):
        return (jnp.searchsorted(a, v), jnp.searchsorted(a, v, side="right"),
                jnp.interp(v, xp, fp))
    a = np.sort(f32(10))
    return f, (a, np.concatenate([a[::3], f32(5)]).astype(np.float32), np.sort(f32(6)), f32(6))


# ---- windows ------------------------------------------------------------------------------------

def _pool(x, init, op, window, strides, padding):
    return lax.reduce_window(x, init, op, window, strides, padding)


@case("max pool 3x3 stride 2 SAME padding, avg pool 2x2 VALID, on NHWC")
def reduce_window_pools():
    def f(x):
        mx = _pool(x, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")
        avg = _pool(x, 0.0, lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "VALID") / 4.0
        mn = _pool(x, jnp.inf, lax.min, (1, 2, 3, 1), (1, 1, 1, 1), ((0, 0), (1, 0), (2, 1), (0, 0)))
        return mx, avg, mn
    return f, (f32(2, 7, 6, 3),)


@case("reduce_window with base dilation and window dilation, integer max window")
def reduce_window_dilated():
    def f(x, n):
        a = lax.reduce_window(x, np.float32(0), lax.add, (2, 3), (1, 2), ((1, 1), (0, 2)),
                              base_dilation=(2, 1), window_dilation=(1, 2))
        b = lax.reduce_window(n, np.int32(np.iinfo(np.int32).min), lax.max, (3,), (2,), ((1, 1),),
                              window_dilation=(2,))
        return a, b
    return f, (f32(5, 7), ints(-100, 100, 11))


@case("cummax, cummin, reverse cumsum, cumprod (s64), cumlogsumexp (custom reducer)")
def cumulative_ops():
    def f(x, n):
        return (lax.cummax(x, axis=0), lax.cummin(x, axis=1), lax.cumsum(x, axis=1, reverse=True),
                jnp.cumprod(n, axis=0), lax.cumlogsumexp(x, axis=1))
    return f, (f32(5, 6), ints(-3, 4, 6, 2, dtype=np.int64))


@case("grad of a max pool: select-and-scatter")
def select_and_scatter_maxpool_grad():
    def loss(x):
        y = _pool(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
        return (y * y).sum()
    return jax.grad(loss), (f32(2, 6, 4, 2),)


@case("grad of an overlapping max pool with padding (windows share elements)")
def select_and_scatter_overlapping():
    def loss(x):
        y = _pool(x, -jnp.inf, lax.max, (3, 3), (2, 1), ((1, 1), (1, 1)))
        return (jnp.sin(y)).sum()
    return jax.grad(loss), (f32(7, 5),)


@case("grad of an average pool (pad + reduce_window of the cotangent)")
def avg_pool_grad():
    def loss(x):
        return (_pool(x, 0.0, lax.add, (1, 3, 3), (1, 2, 2), "SAME") ** 2).sum()
    return jax.grad(loss), (f32(2, 7, 7),)


# ---- convolution --------------------------------------------------------------------------------

@case("1-D convolution NWC/WIO with stride 2, padding (2,1), rhs dilation 2")
def conv1d_strided_dilated():
    def f(x, k):
        return lax.conv_general_dilated(x, k, (2,), ((2, 1),), rhs_dilation=(2,),
                                        dimension_numbers=("NWC", "WIO", "NWC"))
    return f, (f32(2, 13, 3), f32(3, 3, 4))


@case("2-D grouped convolution NCHW/OIHW, feature_group_count=2, SAME, stride 2")
def conv2d_nchw_grouped():
    def f(x, k):
        return lax.conv_general_dilated(x, k, (2, 2), "SAME", feature_group_count=2,
                                        dimension_numbers=("NCHW", "OIHW", "NCHW"))
    return f, (f32(2, 4, 7, 6), f32(6, 2, 3, 3))


@case("depthwise convolution (feature_group_count = channels), NHWC")
def conv2d_depthwise():
    def f(x, k):
        return lax.conv_general_dilated(x, k, (1, 1), ((1, 1), (0, 0)), feature_group_count=3,
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return f, (f32(1, 5, 5, 3), f32(3, 2, 1, 3))


@case("grads of a grouped strided conv: lhs dilation (input grad), batch_group_count (kernel grad)")
def conv2d_grads():
    def loss(x, k):
        y = lax.conv_general_dilated(x, k, (2, 1), ((1, 1), (1, 0)), feature_group_count=2,
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return (y * y).sum()
    return jax.grad(loss, argnums=(0, 1)), (f32(2, 6, 5, 4), f32(3, 2, 2, 6))


@case("3-D convolution NDHWC/DHWIO, VALID, and its transpose (conv_transpose)")
def conv3d_and_transpose():
    def f(x, k, k2):
        y = lax.conv_general_dilated(x, k, (1, 2, 1), "VALID",
                                     dimension_numbers=("NDHWC", "DHWIO", "NDHWC"))
        t = lax.conv_transpose(x[:, 0], k2, (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return y, t
    return f, (f32(1, 4, 5, 4, 2), f32(2, 2, 2, 2, 3), f32(3, 3, 2, 2))


@case("jnp.convolve full/same/valid and jnp.correlate (1-D convolutions, f64)")
def convolve_1d():
    def f(a, v):
        return (jnp.convolve(a, v), jnp.convolve(a, v, mode="same"),
                jnp.convolve(a, v, mode="valid"), jnp.correlate(a, v, mode="full"))
    return f, (f64(9), f64(4))


# ---- dot ----------------------------------------------------------------------------------------

@case("dot_general with two batch and two contracting dims; einsum with permuted outputs")
def dot_general_multi_dims():
    def f(a, b, c, d):
        g = lax.dot_general(a, b, (((1, 4), (3, 0)), ((0, 2), (1, 2))))
        e = jnp.einsum("abcd,adbe->ceab", c, d)
        return g, e, jnp.tensordot(c, d.transpose(3, 1, 0, 2), axes=2)
    return f, (f32(2, 3, 4, 5, 2), f32(2, 2, 4, 3, 3), f32(2, 3, 4, 5), f32(2, 5, 3, 4))


@case("integer and f64 dots, preferred_element_type, matrix-vector with int8 inputs")
def dot_integer_and_f64():
    def f(a, b, c, d, e, g):
        return (a @ b, c @ d, lax.dot(e, g, preferred_element_type=jnp.int32))
    return f, (ints(-9, 9, 3, 4), ints(-9, 9, 4, 5), f64(3, 4), f64(4), ints(-100, 100, 2, 6, dtype=np.int8),
               ints(-100, 100, 6, 3, dtype=np.int8))


@case("multi-head attention: softmax(q k^T / sqrt(d)) v with einsum, causal mask")
def attention_heads():
    def f(q, k, v):
        s = jnp.einsum("bhqd,bhkd->bhqk", q, k) / jnp.sqrt(8.0)
        mask = jnp.tril(jnp.ones((5, 5), bool))
        s = jnp.where(mask, s, -1e9)
        return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), v)
    return f, (f32(2, 3, 5, 8), f32(2, 3, 5, 8), f32(2, 3, 5, 8))


# ---- control flow -------------------------------------------------------------------------------

@case("fori_loop with a tuple carry (int counter, f32 vector, f64 scalar)")
def fori_loop_tuple_carry():
    def f(x, y):
        def body(i, c):
            n, v, s = c
            return n + i * 2, v * 0.5 + jnp.roll(v, 1), s + jnp.sum(v).astype(jnp.float64)
        return lax.fori_loop(0, 7, body, (jnp.int32(1), x, y))
    return f, (f32(6), np.float64(0.25))


@case("lax.scan: a running state and stacked per-step outputs (dynamic-update-slice)")
def scan_stacked_outputs():
    def f(xs, h0, w):
        def step(h, x):
            h = jnp.tanh(h @ w + x)
            return h, (h.sum(), h * 2)
        return lax.scan(step, h0, xs)
    return f, (f32(6, 4), f32(4), f32(4, 4, scale=0.5))


@case("while_loop with a data-dependent trip count (Collatz steps) and a Newton sqrt")
def while_data_dependent():
    def f(n, a):
        def collatz(c):
            k, steps = c
            return jnp.where(k % 2 == 0, k // 2, 3 * k + 1), steps + 1
        _, steps = lax.while_loop(lambda c: c[0] != 1, collatz, (n, jnp.int64(0)))

        def newton(c):
            x, i = c
            return 0.5 * (x + a / x), i + 1
        root, iters = lax.while_loop(lambda c: (jnp.abs(c[0] * c[0] - a) > 1e-10).any() & (c[1] < 50),
                                     newton, (a, 0))
        return steps, root, iters
    return f, (np.int64(27), np.abs(f64(5)) + 0.5)


@case("lax.switch with three branches on an index operand (clamped), with two operands")
def switch_three_branches():
    def f(i, x, y):
        branches = [lambda x, y: x + y, lambda x, y: x * y - 1.0, lambda x, y: jnp.sin(x) / (1 + y * y)]
        return tuple(lax.switch(k, branches, x, y) for k in (i, i + 1, i + 5, i - 3))
    return f, (np.int32(0), f32(3, 2), f32(3, 2))


@case("lax.cond with tuple operands and tuple results, nested inside a fori_loop")
def cond_in_loop():
    def f(x, n):
        def body(i, c):
            a, b = c
            return lax.cond(i % 3 == 0, lambda a, b: (a + b, b * 2), lambda a, b: (a - 1, b + a.sum()), a, b)
        return lax.fori_loop(0, 5, body, (x, n))
    return f, (f32(4), np.float32(1.5))


@case("nested loops: a scan inside a fori_loop; lax.map over rows")
def nested_loops_map():
    def f(x):
        def outer(i, acc):
            _, ys = lax.scan(lambda c, r: (c + r, c * r), jnp.zeros(x.shape[1], x.dtype), acc)
            return ys + i
        y = lax.fori_loop(0, 3, outer, x)
        return y, lax.map(lambda r: jnp.dot(r, r), x)
    return f, (f32(4, 3, scale=0.5),)


@case("vmap of a while_loop (per-element trip counts) and of lax.cond (becomes select)")
def vmap_control_flow():
    def g(n, x):
        def body(c):
            k, v = c
            return k - 1, v * 1.5 + 1.0
        _, v = lax.while_loop(lambda c: c[0] > 0, body, (n, x))
        return v, lax.cond(x > 0, jnp.sin, jnp.cos, x)
    return jax.vmap(g), (ints(0, 6, 7), f32(7))


@case("jax.checkpoint (remat) under grad: optimization barrier")
def remat_grad():
    def loss(w, x):
        layer = jax.checkpoint(lambda w, x: jnp.tanh(x @ w))
        return jnp.sum(layer(w, layer(w, x)) ** 2)
    return jax.grad(loss), (f32(4, 4), f32(3, 4))


# ---- elementwise --------------------------------------------------------------------------------

@case("lax.clamp with array and scalar bounds (f32, s32), jnp.clip on u8")
def clamp_variants():
    def f(lo, x, hi, n, u):
        return (lax.clamp(lo, x, hi), lax.clamp(np.float32(-2), x, np.float32(0.5)),
                lax.clamp(np.int32(-3), n, np.int32(4)), jnp.clip(u, 10, 200))
    lo = f32(3, 4) - 1.0
    return f, (lo, f32(3, 4), lo + 1.5, ints(-10, 10, 3, 4), ints(0, 256, 3, 4, dtype=np.uint8))


@case("integer division and remainder: lax.div/rem (truncating), // and % (flooring), by zero")
def int_div_rem():
    def f(a, b, u, v):
        return (lax.div(a, b), lax.rem(a, b), a // b, a % b, jnp.fmod(a, b),
                lax.div(u, v), lax.rem(u, v), lax.div(a, jnp.zeros_like(a)), lax.rem(a, jnp.zeros_like(a)))
    a = np.array([7, -7, 7, -7, 0, 13, -13, np.iinfo(np.int32).min, 5], np.int32)
    b = np.array([2, 2, -2, -2, 3, 0, 5, -1, 0], np.int32)
    u = np.array([7, 0, 4000000000, 9, 255], np.uint32)
    v = np.array([2, 3, 7, 0, 16], np.uint32)
    return f, (a, b, u, v)


@case("float remainder and floor division with negative operands (f32, f64)")
def float_div_rem():
    def f(a, b, c, d):
        return lax.rem(a, b), a % b, a // b, jnp.fmod(c, d), c // d, jnp.divmod(c, d)
    return f, (f32(10, scale=5), f32(10, scale=2), f64(10, scale=5), f64(10, scale=2))


@case("shifts: left/arithmetic/logical on s32, u32, u8, s64 incl. shift >= bit width")
def shifts():
    def f(a, s, u, b, w, t):
        return (lax.shift_left(a, s), lax.shift_right_arithmetic(a, s), lax.shift_right_logical(a, s),
                lax.shift_left(u, s.astype(jnp.uint32)), lax.shift_right_logical(u, s.astype(jnp.uint32)),
                b << jnp.uint8(3), b >> jnp.uint8(9), lax.shift_right_arithmetic(w, t), lax.shift_left(w, t))
    return f, (np.array([1, -1, 12345, -99999, 7, -8, 2**30, -2**31], np.int32),
               np.array([0, 1, 5, 31, 32, 33, -1, 4], np.int32),
               np.array([1, 2**32 - 1, 2**31, 77, 5, 9, 1, 0], np.uint32),
               ints(0, 256, 5, dtype=np.uint8),
               np.array([-2**62, 3, -5, 2**40], np.int64), np.array([3, 63, 64, 1], np.int64))


@case("population_count and count-leading-zeros on u32, s32, u8, s64")
def popcnt_clz():
    def f(a, b, c, d):
        return (lax.population_count(a), lax.clz(a), lax.population_count(b), lax.clz(b),
                lax.population_count(c), lax.clz(c), lax.population_count(d), lax.clz(d))
    return f, (np.array([0, 1, 2**31, 2**32 - 1, 12345], np.uint32),
               np.array([0, -1, 1, -2**31, 2**30], np.int32),
               np.array([0, 1, 128, 255, 16], np.uint8),
               np.array([0, -1, 1, 2**62, -2**63], np.int64))


@case("bitcast_convert_type f32<->u32/s32, f64->s64, f32->u8[4] and back, f16->u16")
def bitcast_convert():
    def f(x, y, h, b):
        u = lax.bitcast_convert_type(x, jnp.uint32)
        return (u, lax.bitcast_convert_type(u ^ jnp.uint32(1), jnp.float32), lax.bitcast_convert_type(x, jnp.int32),
                lax.bitcast_convert_type(y, jnp.int64), lax.bitcast_convert_type(x, jnp.uint8),
                lax.bitcast_convert_type(b, jnp.float32), lax.bitcast_convert_type(h, jnp.uint16))
    return f, (np.array([1.0, -0.0, np.inf, 3.5e-39, -2.5], np.float32), f64(3),
               np.array([1.0, -2.0, 65504.0], np.float16), ints(0, 256, 2, 4, dtype=np.uint8))


@case("lax.reduce_precision to f16 and bf16 formats (f32 and f64 inputs)")
def reduce_precision():
    def f(x, y):
        return (lax.reduce_precision(x, exponent_bits=5, mantissa_bits=10),
                lax.reduce_precision(x, exponent_bits=8, mantissa_bits=7),
                lax.reduce_precision(y, exponent_bits=8, mantissa_bits=23),
                lax.reduce_precision(x, exponent_bits=4, mantissa_bits=3))
    x = np.concatenate([f32(8, scale=100),
                        np.array([1e-6, 7e4, 1e30, np.nan, -np.inf, 1.00048828125, 2.5e-8], np.float32)])
    return f, (x, np.concatenate([f64(6, scale=1e3), np.array([1e-40, 3.4e38, 1e39])]))


@case("rounding: lax.round half-even and away-from-zero, jnp.round(decimals), rint, trunc")
def rounding():
    def f(x):
        return (lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN), lax.round(x, lax.RoundingMethod.AWAY_FROM_ZERO),
                jnp.round(x, 1), jnp.rint(x), jnp.trunc(x))
    return f, (np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.45, 0.25, 1e8 + 0.5, -3.7, 0.05], np.float32),)


@case("is_finite, isnan, isinf, nan_to_num, signbit, copysign, nextafter, frexp/ldexp")
def float_classification():
    def f(x, y):
        m, e = jnp.frexp(x)
        return (jnp.isfinite(x), jnp.isnan(x), jnp.isinf(x), jnp.nan_to_num(x), jnp.signbit(x),
                jnp.copysign(x, y), jnp.nextafter(x, y), m, e, jnp.ldexp(m, e))
    # No subnormal inputs: XLA:CPU flushes them to zero (frexp(3e-39) gives 0.5 * 2**-149
    # there), which is a property of XLA's CPU runtime, not of HLO.
    x = np.array([1.0, -0.0, np.nan, np.inf, -np.inf, 3e-30, 1e30, -7.25], np.float32)
    return f, (x, np.array([-1, 1, 1, -1, 2, -3, np.inf, 0.0], np.float32))


@case("expm1, log1p, atan2, cbrt, tan, logistic, erf, erfc (f32 and f64)")
def unary_special_basic():
    def f(x, y):
        return (jnp.expm1(x), jnp.log1p(jnp.abs(x)), jnp.arctan2(x, y), jnp.cbrt(x), jnp.tan(x),
                jax.nn.sigmoid(x), lax.erf(x), jax.scipy.special.erfc(x), jnp.expm1(y.astype(jnp.float64)),
                jnp.log1p(jnp.abs(y).astype(jnp.float64)))
    x = np.concatenate([f32(10), np.array([1e-7, -1e-7, 0.0, 30.0], np.float32)])
    return f, (x, f32(14))


@case("erf_inv, lgamma, digamma (CHLO decompositions into plain HLO), f32 and f64")
def unary_special_chlo():
    def f(p, x, y):
        return (lax.erf_inv(p), lax.lgamma(x), lax.digamma(x), lax.lgamma(y), lax.digamma(y),
                jax.scipy.special.gammaln(-x + 0.5))
    p = np.array([-0.999, -0.5, 0.0, 0.3, 0.9, 0.9999, 1.0, -1.0], np.float32)
    x = np.abs(f32(10, scale=4)) + 0.05
    return f, (p, x, np.abs(f64(6, scale=10)) + 0.1)


@case("inverse trig/hyperbolic: arcsin, arccos, arctan, sinh, cosh, arcsinh, arccosh, arctanh")
def unary_trig_hyperbolic():
    def f(x):
        u = jnp.tanh(x)
        return (jnp.arcsin(u), jnp.arccos(u), jnp.arctan(x), jnp.sinh(x), jnp.cosh(x), jnp.arcsinh(x),
                jnp.arccosh(jnp.abs(x) + 1), jnp.arctanh(u * 0.99))
    return f, (f32(12, scale=2),)


@case("NaN semantics: lax.max/min propagate NaN, fmax/fmin do not; pow edge cases")
def nan_semantics():
    def f(x, y):
        return lax.max(x, y), lax.min(x, y), jnp.fmax(x, y), jnp.fmin(x, y), lax.pow(x, y), jnp.sign(x)
    x = np.array([np.nan, 1.0, -0.0, 0.0, np.inf, 2.0, -8.0, 0.0], np.float32)
    y = np.array([1.0, np.nan, 0.0, -0.0, -1.0, 0.5, 1.0 / 3.0, -1.0], np.float32)
    return f, (x, y)


@case("integer power (jnp.power s32^s32 by squaring), integer_pow, abs/sign/negate of INT_MIN")
def int_pow_abs_sign():
    def f(a, b, c):
        return jnp.power(a, jnp.abs(b)), lax.integer_pow(a, 3), jnp.abs(c), jnp.sign(c), -c
    return f, (np.array([2, -3, 1, -1, 0, 5, 7], np.int32), np.array([10, 3, -4, -3, 2, 0, 12], np.int32),
               np.array([np.iinfo(np.int32).min, -5, 0, 9], np.int32))


@case("jax.nn activations: gelu (tanh and erf), silu, softplus, elu, relu6, log_softmax")
def nn_activations():
    def f(x):
        return (jax.nn.gelu(x), jax.nn.gelu(x, approximate=False), jax.nn.silu(x), jax.nn.softplus(x),
                jax.nn.elu(x), jax.nn.relu6(x * 4), jax.nn.log_softmax(x, axis=0))
    return f, (f32(5, 4, scale=3),)


# ---- complex ------------------------------------------------------------------------------------

@case("complex: lax.complex, real, imag, conj, abs, angle, exp, log, sqrt, mul, div (c64)")
def complex_elementwise():
    def f(re, im, w):
        z = lax.complex(re, im)
        return (z, jnp.real(z * w), jnp.imag(z / w), jnp.conj(z), jnp.abs(z), jnp.angle(z), jnp.exp(z),
                jnp.log(z), jnp.sqrt(z), z * z + w)
    return f, (f32(6), f32(6), (f32(6) + 1j * f32(6)).astype(np.complex64))


@case("complex128: matmul, sum, power, sin/cos, expm1-free reciprocal")
def complex128_linear():
    def f(a, b):
        return a @ b, jnp.sum(a, axis=0), a ** 2, jnp.sin(a), jnp.cos(b), 1.0 / a, jnp.prod(b, axis=1)
    c = lambda *s: (f64(*s) + 1j * f64(*s)).astype(np.complex128)
    return f, (c(3, 4), c(4, 2))


@case("jnp.fft.fft / ifft / rfft / irfft (fft op)")
def fft_ops():
    def f(x, z):
        return jnp.fft.fft(z), jnp.fft.ifft(z), jnp.fft.rfft(x), jnp.fft.irfft(jnp.fft.rfft(x), n=8), jnp.fft.fft2(z)
    return f, (f32(3, 8), (f32(3, 8) + 1j * f32(3, 8)).astype(np.complex64))


# ---- data movement ------------------------------------------------------------------------------

@case("iota over several dims: broadcasted_iota, jnp.indices, meshgrid, tril/triu, eye with k")
def iota_multi_dim():
    def f(x):
        i = lax.broadcasted_iota(jnp.int32, (3, 4, 5), 1)
        j = lax.broadcasted_iota(jnp.float32, (3, 4, 5), 2)
        gx, gy = jnp.meshgrid(jnp.arange(3.0), jnp.arange(4), indexing="xy")
        return i, j * x, jnp.indices((2, 3)), gx, gy, jnp.tril(x[0], -1), jnp.triu(x[0], 2), jnp.eye(3, 5, k=1)
    return f, (f32(3, 4, 5),)


@case("jnp.pad modes reflect, edge, wrap, symmetric, linear_ramp; lax.pad negative + interior")
def pad_modes():
    def f(x, v):
        return (jnp.pad(x, ((1, 2), (2, 1)), mode="reflect"), jnp.pad(x, 2, mode="edge"),
                jnp.pad(x, ((0, 3), (1, 0)), mode="wrap"), jnp.pad(x, 1, mode="symmetric"),
                jnp.pad(v, (2, 3), mode="linear_ramp", end_values=(1.0, -1.0)),
                lax.pad(x, np.float32(0.5), ((-1, 2, 1), (3, -2, 2))))
    return f, (f32(4, 5), f32(5))


@case("rev over several axes (f32, s8), jnp.roll static and dynamic, rot90")
def rev_roll():
    def f(x, n, s):
        return (lax.rev(x, (0, 2)), jnp.flip(n), jnp.roll(x, 2, axis=1), jnp.roll(x, s, axis=2),
                jnp.rot90(x[0]))
    return f, (f32(2, 3, 4), ints(-128, 128, 5, dtype=np.int8), np.int32(-3))


@case("dynamic_slice / dynamic_update_slice with out-of-range (clamped) and negative starts")
def dynamic_slices_clamped():
    def f(x, u, i, j):
        return (lax.dynamic_slice(x, (i, j), (2, 3)), lax.dynamic_update_slice(x, u, (i, j)),
                lax.dynamic_update_slice(x, u, (j, i)), lax.dynamic_slice_in_dim(x, -j, 3, axis=1))
    return f, (f32(5, 6), f32(2, 3), np.int32(4), np.int32(-2))


@case("repeat, tile, kron, outer, diagonal, trace, diff, concatenate with empty pieces")
def reshaping_misc():
    def f(x, v):
        return (jnp.repeat(x, 2, axis=0), jnp.tile(v, (2, 3)), jnp.kron(x[:2, :2], x[1:3, 1:3]),
                jnp.outer(v, v), jnp.diagonal(x, 1), jnp.trace(x), jnp.diff(x, axis=1, n=2),
                jnp.concatenate([x, jnp.zeros((0, 4), x.dtype), x[:1]]))
    return f, (f32(3, 4), f32(3))


@case("one_hot, cross-entropy with log_softmax and take_along_axis, accuracy via argmax")
def one_hot_cross_entropy():
    def f(logits, labels):
        oh = jax.nn.one_hot(labels, 5)
        lp = jax.nn.log_softmax(logits)
        ce = -jnp.take_along_axis(lp, labels[:, None], axis=1).mean()
        return oh, ce, -(oh * lp).sum(1), (jnp.argmax(logits, 1) == labels).mean()
    return f, (f32(6, 5), ints(0, 5, 6))


# ---- reductions ---------------------------------------------------------------------------------

@case("argmax/argmin over axis 0, 2 and all, with NaN and ties; on int and bool")
def argmax_variants():
    def f(x, n, b):
        return (jnp.argmax(x, axis=0), jnp.argmin(x, axis=2), jnp.argmax(x), jnp.argmin(n, axis=1),
                jnp.argmax(b, axis=0), jnp.nanargmax(x, axis=1))
    x = np.round(f32(3, 4, 5), 0)
    x[1, 2, 3] = np.nan
    x[2, 0, 0] = np.nan
    return f, (x, ints(-3, 3, 4, 6), ints(0, 2, 4, 3, dtype=np.bool_))


@case("logsumexp over axes, with -inf rows; softmax and log_softmax along axis 0")
def logsumexp_softmax():
    def f(x):
        y = x.at[1].set(-jnp.inf)
        return (jax.scipy.special.logsumexp(x, axis=1), jax.scipy.special.logsumexp(y, axis=1),
                jax.scipy.special.logsumexp(x), jax.nn.softmax(x, axis=0), jax.nn.log_softmax(x, axis=0))
    return f, (f32(4, 6, scale=3),)


@case("layer norm (f64) and batch norm (f32) with var/std/mean over several axes")
def norms():
    def f(x, y, g, b):
        mu = x.mean(-1, keepdims=True)
        ln = (x - mu) / jnp.sqrt(x.var(-1, keepdims=True) + 1e-6) * g + b
        bn = (y - y.mean((0, 1, 2))) / (y.std((0, 1, 2)) + 1e-5)
        return ln, bn, jnp.var(y, axis=(0, 2), ddof=1)
    return f, (f64(4, 6), f32(2, 3, 4, 5), f64(6), f64(6))


@case("bitwise reductions: and/or/xor over u32, max over u8, min over s64, prod over s32")
def integer_reductions():
    def f(u, b, s, p):
        return (jnp.bitwise_and.reduce(u, axis=0), jnp.bitwise_or.reduce(u, axis=1),
                jnp.bitwise_xor.reduce(u, axis=0), jnp.max(b, axis=0), jnp.min(s), jnp.prod(p, axis=1),
                jnp.sum(b), jnp.sum(b, dtype=jnp.uint8))
    return f, (ints(0, 2**32, 4, 5, dtype=np.uint32), ints(0, 256, 4, 5, dtype=np.uint8),
               ints(-2**40, 2**40, 7, dtype=np.int64), ints(-4, 5, 3, 6))


@case("lax.reduce with two operands and a custom two-value reducer (sum and max together)")
def variadic_reduce_custom():
    def f(x, y):
        def comb(a, b):
            return a[0] + b[0], jnp.maximum(a[1], b[1])
        return lax.reduce((x, y), (np.float32(0), np.float32(-np.inf)), comb, (1,))
    return f, (f32(4, 6), f32(4, 6))


@case("nan-aware reductions: nanmean, nanmax, nanstd, nansum with NaNs")
def nan_reductions():
    def f(x):
        return jnp.nanmean(x, 0), jnp.nanmax(x, 1), jnp.nanstd(x), jnp.nansum(x), jnp.nanmin(x, 0)
    x = f32(4, 5)
    x[0, 1] = x[2, 3] = x[3, 1] = np.nan
    return f, (x,)


# ---- random -------------------------------------------------------------------------------------

@case("jax.random (threefry) on a raw u32[2] key: uniform, normal, randint, bits, split")
def random_threefry():
    def f(key):
        k1, k2, k3 = jax.random.split(key, 3)
        return (jax.random.uniform(k1, (3, 4)), jax.random.normal(k2, (5,)),
                jax.random.randint(k3, (6,), -10, 10), jax.random.bits(k1, (4,), jnp.uint32),
                jax.random.bernoulli(k2, 0.3, (8,)))
    return f, (np.array([0, 42], np.uint32),)


@case("jax.random permutation, choice without replacement, categorical, gumbel")
def random_permutation():
    def f(key, logits):
        k1, k2, k3 = jax.random.split(key, 3)
        return (jax.random.permutation(k1, 10), jax.random.choice(k2, 8, (3,), replace=False),
                jax.random.categorical(k3, logits), jax.random.gumbel(k3, (2, 2)))
    return f, (np.array([7, 1234], np.uint32), f32(4, 6))


# ---- dtypes -------------------------------------------------------------------------------------

@case("float16 arithmetic: add, mul, exp, tanh, sum, mean, matmul, max")
def float16_ops():
    def f(a, b):
        return a + b, a * b, jnp.exp(a), jnp.tanh(b), jnp.sum(a, axis=1), jnp.mean(b), a @ b.T, jnp.max(a, 0)
    return f, (f32(4, 6).astype(np.float16), f32(4, 6).astype(np.float16))


@case("bfloat16 inside a computation (f32 in, f32 out)")
def bfloat16_internal():
    def f(x):
        return (x.astype(jnp.bfloat16) * 3).astype(jnp.float32)
    return f, (f32(8),)


@case("small integer types: int8/uint8/int16/uint16 wrap-around, u32 multiply overflow, s64 big values")
def small_int_wraparound():
    def f(a, b, c, d, u, w):
        return (a + a, a * b, c - jnp.int16(30000), d * jnp.uint16(300), u * u, w * jnp.int64(3),
                (a.astype(jnp.uint8) + b), -u)
    return f, (ints(-128, 128, 6, dtype=np.int8), ints(0, 256, 6, dtype=np.uint8),
               ints(-32768, 32768, 6, dtype=np.int16), ints(0, 65536, 6, dtype=np.uint16),
               np.array([3, 65536, 2**31, 2**32 - 1, 7, 100000], np.uint32),
               np.array([2**62, -2**62, 5, -1, 2**33, 0], np.int64))


@case("converts: f32 -> s32/u8/s8 out of range, NaN and inf; s64 -> s32 and u32 -> f32, f64 -> f16")
def convert_edge_cases():
    def f(x, n, u, d):
        return (x.astype(jnp.int32), x.astype(jnp.uint8), x.astype(jnp.int8), n.astype(jnp.int32),
                u.astype(jnp.float32), d.astype(jnp.float16), d.astype(jnp.float32), n.astype(jnp.bool_),
                x.astype(jnp.uint32), x.astype(jnp.int64))
    x = np.array([1.7, -1.7, 3e9, -3e9, np.nan, np.inf, -np.inf, 300.5, -129.9, 255.9], np.float32)
    return f, (x, np.array([2**40 + 5, -2**33 - 1, 0, 7], np.int64), np.array([2**32 - 1, 16777217, 0], np.uint32),
               np.array([1e5, 1e-9, 3.14159, 65519.0, -70000.0], np.float64))


@case("boolean logic and comparisons: xor, not, unsigned compares, compare of s8 with u8 casts")
def bool_and_compare():
    def f(a, b, u, v):
        return (a ^ b, ~a, a & ~b, u < v, u >= v, (u.astype(jnp.int8) < v.astype(jnp.int8)),
                jnp.logical_xor(a, u > 100), a.astype(jnp.int32) + b)
    return f, (ints(0, 2, 8, dtype=np.bool_), ints(0, 2, 8, dtype=np.bool_), ints(0, 256, 8, dtype=np.uint8),
               ints(0, 256, 8, dtype=np.uint8))


# ---- shapes -------------------------------------------------------------------------------------

@case("zero-size arrays: sum/max over empty axes, (3,0)@(0,4), concat, cumsum")
def zero_size_arrays():
    def f(e, x):
        return (e.sum(0), e.sum(1), e.max(1, initial=-1.0), x[:, :0] @ e, jnp.concatenate([e, e], axis=1),
                jnp.exp(e), e.shape[1] + e.sum(), jnp.cumsum(e, axis=1))
    return f, (np.zeros((0, 4), np.float32), f32(3, 2))


@case("0-d inputs and outputs: scalar arithmetic on f32, s64, bool; scalars broadcast into arrays")
def scalars_0d():
    def f(a, n, b, x):
        return a * 2 + 1, n // 3, ~b, jnp.where(b, a, -a), x * a + n, jnp.sum(x) * a
    return f, (np.float32(1.25), np.int64(-7), np.bool_(True), f32(3))


@case("nested pytree outputs: dict of tuples, a list, a scalar and a constant")
def pytree_outputs():
    def f(x):
        return {"a": (x, x.sum()), "b": [x * 2, jnp.float32(3.0)], "c": jnp.arange(3)}
    return f, (f32(2, 3),)


# ---- models -------------------------------------------------------------------------------------

@case("grad of an MLP loss w.r.t. all params (transposed dots, broadcast reductions)")
def mlp_grad():
    def loss(params, x, y):
        w1, b1, w2, b2 = params
        h = jax.nn.relu(x @ w1 + b1)
        out = h @ w2 + b2
        return jnp.mean((out - y) ** 2)
    params = (f32(5, 8), f32(8), f32(8, 3), f32(3))
    return jax.value_and_grad(loss), (params, f32(6, 5), f32(6, 3))


@case("small CNN forward: conv NHWC + bias + relu + max pool + dense + softmax")
def cnn_forward():
    def f(x, k, b, w):
        y = jax.nn.relu(lax.conv_general_dilated(x, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")) + b)
        y = _pool(y, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
        return jax.nn.softmax(y.reshape(y.shape[0], -1) @ w)
    return f, (f32(2, 6, 6, 2), f32(3, 3, 2, 4), f32(4), f32(36, 5))


@case("associative_scan (prefix sums by strided slices and interior pads) of a 1-D and 2-D array")
def associative_scan():
    def f(x, y):
        return lax.associative_scan(jnp.add, x), lax.associative_scan(jnp.maximum, y, axis=1)
    return f, (f32(11), f32(3, 6))


@case("polyval, jnp.where with broadcasting, jnp.select, piecewise-style masks")
def select_polyval():
    def f(c, x):
        return (jnp.polyval(c, x), jnp.select([x < -1, x > 1], [x * 2, x ** 2], default=0.0),
                jnp.where(x[:, None] > x[None, :], x[:, None], 0.0))
    return f, (f32(4), f32(6))


# ---- more programs -------------------------------------------------------------------------------

@case("lax.rng_bit_generator with the THREE_FRY, PHILOX and DEFAULT algorithms (u32 and u64 outputs)")
def rng_bit_generator_algorithms():
    def f(key):
        outs = []
        for alg in (lax.RandomAlgorithm.RNG_THREE_FRY, lax.RandomAlgorithm.RNG_PHILOX,
                    lax.RandomAlgorithm.RNG_DEFAULT):
            k, bits = lax.rng_bit_generator(key, (3, 5), dtype=jnp.uint32, algorithm=alg)
            outs += [k, bits]
        outs.append(lax.rng_bit_generator(key, (7,), dtype=jnp.uint64,
                                          algorithm=lax.RandomAlgorithm.RNG_THREE_FRY)[1])
        return tuple(outs)
    return f, (np.array([1, 2, 3, 4], np.uint32),)


@case("jax.random.gamma and poisson (rejection sampling in while loops)")
def random_rejection_sampling():
    def f(key, a):
        k1, k2 = jax.random.split(key)
        return jax.random.gamma(k1, a), jax.random.poisson(k2, 3.5, (6,))
    return f, (np.array([3, 9], np.uint32), np.array([0.5, 1.0, 2.5, 7.0], np.float32))


@case("scan with reverse=True and unroll=2; fori_loop with a traced trip count; bool in the carry")
def scan_variants():
    def f(xs, n):
        c1, ys = lax.scan(lambda c, x: (c * 0.9 + x, c), jnp.float32(0), xs, reverse=True, unroll=2)

        def body(i, c):
            s, flag, k = c
            return s + i, jnp.logical_xor(flag, s % 3 == 0), k * 2
        return c1, ys, lax.fori_loop(0, n, body, (jnp.int32(0), jnp.bool_(False), jnp.uint8(1)))
    return f, (f32(9), np.int32(6))


@case("jnp.nonzero/argwhere/unique with a static size, bincount, histogram, isin")
def data_dependent_sizes():
    def f(x, n):
        return (jnp.nonzero(x > 0, size=8, fill_value=-1)[0], jnp.argwhere(x.reshape(3, 4) > 0.5, size=5),
                jnp.unique(n, size=6, fill_value=-1), jnp.bincount(n, length=7),
                jnp.histogram(x, bins=4, range=(-2.0, 2.0))[0], jnp.isin(n, jnp.array([1, 3, 5])))
    return f, (f32(12), ints(0, 7, 10))


@case("sort of complex numbers (lexicographic), lexsort, sort along axis 0 of a 3-D s64 array")
def sort_complex_lexsort():
    def f(z, a, b, t):
        return jnp.sort(z), jnp.lexsort((a, b)), jnp.sort(t, axis=0)
    z = (np.round(f32(8), 0) + 1j * f32(8)).astype(np.complex64)
    return f, (z, ints(0, 3, 9), ints(0, 3, 9), ints(-5, 5, 4, 2, 3, dtype=np.int64))


@case("integer and float64 convolutions, conv with preferred_element_type, f64 batch-grouped conv")
def conv_dtypes():
    def f(x, k, xd, kd):
        return (lax.conv_general_dilated(x, k, (1,), "SAME", dimension_numbers=("NWC", "WIO", "NWC")),
                lax.conv_general_dilated(x.astype(jnp.int8), k.astype(jnp.int8), (2,), "VALID",
                                         dimension_numbers=("NWC", "WIO", "NWC"), preferred_element_type=jnp.int32),
                lax.conv_general_dilated(xd, kd, (1, 1), "VALID", batch_group_count=2,
                                         dimension_numbers=("NCHW", "OIHW", "NCHW")))
    return f, (ints(-5, 5, 2, 9, 3), ints(-3, 3, 3, 3, 4), f64(4, 3, 5, 5), f64(4, 3, 2, 2))


@case("einsum with a repeated index (diagonal), trace of a batch, outer products with size-1 dims")
def einsum_special():
    def f(a, b, c):
        return (jnp.einsum("ii->i", a), jnp.einsum("bii->b", b), jnp.einsum("i,j->ij", c[:, 0], c[0]),
                jnp.einsum("ij,jk->ik", c, c.T), jnp.einsum("bij->bji", b) + a[None], c[:, :1] * c[:1, :])
    return f, (f32(4, 4), f32(3, 4, 4), f32(5, 6))


@case("64-bit and 16-bit integers: u64 arithmetic, shifts and division by zero; s16/u16 division")
def wide_and_narrow_ints():
    def f(u, v, s, t):
        return (u * v, u + v, u >> jnp.uint64(60), u << jnp.uint64(3), lax.div(u, v), lax.rem(u, v),
                lax.div(s, t), lax.rem(s, t), s * t, t.astype(jnp.uint16) // jnp.uint16(7))
    return f, (np.array([2**64 - 1, 2**63, 12345678901234567, 7, 0], np.uint64),
               np.array([3, 2, 0, 2**40, 5], np.uint64),
               np.array([-32768, 1000, -7, 7, 0, 32767], np.int16), np.array([-1, 7, 2, -2, 0, 0], np.int16))


@case("converts at 64-bit edges: u64/s64 -> f32/f64 rounding, f64 -> u64/s64 beyond 2**63, f32 -> u32")
def convert_64bit_edges():
    def f(u, s, d):
        return (u.astype(jnp.float32), u.astype(jnp.float64), s.astype(jnp.float32), d.astype(jnp.uint64),
                d.astype(jnp.int64), d.astype(jnp.float32).astype(jnp.uint32), s.astype(jnp.uint64))
    return f, (np.array([2**64 - 1, 2**63 + 2**40, 2**53 + 1, 16777217, 0], np.uint64),
               np.array([-2**63, 2**63 - 1, -(2**53) - 1, 16777217, -1], np.int64),
               np.array([1.5e19, 9.3e18, -1.0, 2.0**63, 4.2e9, np.nan, 1e300, -1e300], np.float64))


@case("jax.nn.dot_product_attention (xla implementation) with a bias and a mask")
def dot_product_attention():
    def f(q, k, v, bias):
        mask = jnp.tril(jnp.ones((1, 1, 6, 6), bool))
        return jax.nn.dot_product_attention(q, k, v, bias=bias, mask=mask, implementation="xla")
    return f, (f32(2, 6, 2, 8), f32(2, 6, 2, 8), f32(2, 6, 2, 8), f32(1, 2, 6, 6))


@case("clip with NaN bounds, where with NaN, sign/abs of -0.0 and NaN, maximum of ints with floats")
def nan_edge_elementwise():
    def f(x, lo):
        return (jnp.clip(x, lo, 1.0), jnp.where(jnp.isnan(x), 0.0, x), jnp.sign(x), jnp.abs(x),
                jnp.maximum(x, 0), jnp.minimum(lo, x), jnp.float_power(jnp.abs(x), 0.5))
    x = np.array([np.nan, -0.0, 0.0, -3.0, 2.5, np.inf, -np.inf, 0.7], np.float32)
    return f, (x, np.array([0.0, np.nan, -1.0, np.nan, 3.0, 0.0, -np.inf, 0.8], np.float32))


@case("NaN through scatter max/min, max pool, cummax/cummin and segment_max; signed zeros in max")
def nan_windows_scatter():
    def f(x, idx, v, img, z):
        return (x.at[idx].max(v), x.at[idx].min(v), _pool(img, -jnp.inf, lax.max, (2, 2), (1, 1), "VALID"),
                lax.cummax(img, axis=1), lax.cummin(img, axis=0), jax.ops.segment_max(v, idx, num_segments=6),
                jnp.max(z), jnp.min(z), lax.max(z, -z))
    v = np.array([1.0, np.nan, 3.0, -1.0, 2.0, np.nan], np.float32)
    img = _with_nans(f32(5, 6), 3)
    return f, (f32(6), np.array([0, 0, 2, 3, 3, 5], np.int32), v, img, np.array([0.0, -0.0, -0.0], np.float32))


# ---- medium sizes (vectorized loops, row/column/middle-axis reduction kernels, tails) ------------

@case("max/min/argmax/argmin over rows, columns and all of a 67x130 f32 with NaNs; nanmax")
def reductions_nan_medium():
    def f(x, y):
        return (x.max(0), x.max(1), x.min(0), x.min(1), x.max(), jnp.argmax(x, 0), jnp.argmax(x, 1),
                jnp.argmin(x, 0), jnp.argmin(x, 1), jnp.argmax(x), jnp.nanmax(x, 1), y.max(0), jnp.argmin(y, 1))
    return f, (_with_nans(f32(67, 130), 9), f32(67, 130))


@case("sum/mean/var/prod over axes 0, 1, 2 and (0, 2) of odd 3-D shapes, f32 and f64")
def reductions_odd_shapes():
    def f(x, d):
        return (x.sum(0), x.sum(1), x.sum(2), x.sum((0, 2)), x.mean(1), x.var(0), jnp.prod(1 + x / 50, axis=2),
                d.sum(0), d.var(1), d.std(), jnp.abs(x).max(1))
    return f, (f32(33, 65, 7), f64(129, 31))


@case("integer reductions over medium arrays: s32 sum with wrap-around, u8 max, s8 min, argmax with ties")
def reductions_integer_medium():
    def f(a, b, c, t):
        return (a.sum(0, dtype=jnp.int32), a.sum(1, dtype=jnp.int32), b.max(0), b.max(1), c.min(0), jnp.argmax(t, 0),
                jnp.argmin(t, 1), jnp.argmax(t))
    return f, (ints(-2**30, 2**30, 40, 300), ints(0, 256, 77, 129, dtype=np.uint8),
               ints(-128, 128, 50, 70, dtype=np.int8), ints(0, 4, 90, 60))


@case("transcendentals over 4098 values incl. large, tiny, negative, NaN and inf arguments (f32)")
def transcendentals_wide_range():
    def f(x, p):
        a = jnp.abs(x)
        return (jnp.exp(x), jnp.log(a), jnp.tanh(x), jnp.sin(x), jnp.cos(x), jnp.expm1(x), jnp.log1p(a),
                jax.nn.sigmoid(x), lax.erf(x), jnp.sqrt(a), lax.rsqrt(a), jnp.cbrt(x), jnp.power(a, p),
                jnp.arctan2(x, p), jnp.tan(x / 100))
    x = np.concatenate([f32(3000, scale=3), f32(1000, scale=40),
                        np.array([0.0, -0.0, 1e-30, -1e-30, 88.5, -103.0, 89.0, 1e4, -1e4, np.nan, np.inf, -np.inf,
                                  3.4e38, -3.4e38, 0.5, -0.5, 1.0, -1.0, 2.0, 20.0, -20.0, 9.0, 1e-7,
                                  -1e-7] + [float(v) for v in f32(74, scale=0.01)], np.float32)])
    return f, (x, np.concatenate([f32(4089, scale=2), np.array([0, -0.0, 1, -1, 0.5, 2, np.nan, np.inf, -np.inf],
                                                                np.float32)]))


@case("float64 transcendentals over 2051 values incl. edge arguments")
def transcendentals_f64():
    def f(x):
        a = jnp.abs(x)
        return jnp.exp(x), jnp.log(a), jnp.tanh(x), jnp.sin(x), jnp.cos(x), jnp.expm1(x), jnp.log1p(a), lax.erf(x)
    return f, (np.concatenate([f64(2000, scale=5), np.array([0, -0.0, 1e-300, 709.0, -745.0, 710.0, 1e5, np.nan,
                                                              np.inf, -np.inf, 1e-8], np.float64),
                               f64(40, scale=1e-3)]),)


@case("softmax, log_softmax and layer norm over 65x131, cumsum along both axes of 30x200")
def normalizations_medium():
    def f(x, c):
        mu = x.mean(-1, keepdims=True)
        ln = (x - mu) * lax.rsqrt(x.var(-1, keepdims=True) + 1e-5)
        return jax.nn.softmax(x), jax.nn.log_softmax(x, axis=0), ln, jnp.cumsum(c, 0), jnp.cumsum(c, 1)
    return f, (f32(65, 131, scale=3), f32(30, 200))


@case("3-D transposes, a strided slice, reverse, concatenate and pad over 9x17x33")
def data_movement_medium():
    def f(x):
        return (x.transpose(2, 0, 1), x.transpose(1, 2, 0) * 2, x[:, ::3, 1::2], x[::-1, :, ::-1] + 1,
                jnp.concatenate([x, x[:, :5]], axis=1), jnp.pad(x, ((1, 2), (0, 0), (3, 1))))
    return f, (f32(9, 17, 33),)


@case("float16 reductions and elementwise over medium arrays (accumulation precision)")
def float16_medium():
    def f(a):
        return a.sum(0), a.sum(1), a.max(1), jnp.exp(a / 4), a.mean(), (a * a).sum(1)
    return f, (f32(64, 100).astype(np.float16),)


@case("segment_sum of 3000 rows into 50 segments and a gather of 1000 rows")
def scatter_gather_medium():
    def f(data, seg, idx):
        return jax.ops.segment_sum(data, seg, num_segments=50), data[idx], jnp.take(data, idx[:7], axis=0).sum(1)
    return f, (f32(3000, 4), ints(0, 50, 3000), ints(0, 3000, 1000))


@case("dots XLA:CPU fuses: relu(x @ w + b) small and large, tanh(2 * batched small dots), an int32 dot")
def fused_dot_epilogues():
    def f(x, w, b, a, c, big_x, big_w, i, j):
        return (jax.nn.relu(x @ w + b), jnp.tanh(2 * jnp.einsum("bij,bjk->bik", a, c)),
                jax.nn.relu(big_x @ big_w + b.sum()), (i @ j) * 3 + 1)
    return f, (f32(8, 32), f32(32, 16), f32(16), f32(64, 8, 16), f32(64, 16, 8), f32(96, 64), f32(64, 80),
               ints(-9, 9, 12, 20), ints(-9, 9, 20, 6))


@case("transposes moving the minor dim: f32[24,18,36] {1,2,0} and {2,0,1}, 4-D f32, f16 and int8")
def transposes_minor_dim():
    def f(x, y, h, q):
        return (x.transpose(1, 2, 0), x.transpose(2, 0, 1), y.transpose(0, 3, 1, 2), y.transpose(3, 2, 1, 0),
                h.transpose(2, 1, 0), q.transpose(1, 0))
    return f, (f32(24, 18, 36), f32(4, 9, 10, 17), f32(13, 20, 24).astype(np.float16),
               ints(-100, 100, 33, 70, dtype=np.int8))


@case("f16 row sums reduced in f16 (lax.reduce: XLA:CPU adds in f16, nbxla in f32)")
def float16_row_reduce():
    def f(a):
        return lax.reduce(a, np.float16(0), lax.add, (1,)), lax.reduce(a * a, np.float16(0), lax.add, (1,))
    return f, (f32(768, 160).astype(np.float16),)


# ---- expected errors ----------------------------------------------------------------------------

@case("jnp.linalg.solve: LAPACK getrf custom call (not supported by nbxla)")
def linalg_solve_lapack():
    def f(a, b):
        return jnp.linalg.solve(a, b)
    return f, (f32(4, 4) + 4 * np.eye(4, dtype=np.float32), f32(4, 2))


# -------------------------------------------------------------------------------------------------

def write_case(name: str, description: str, make) -> dict:
    global RNG
    RNG = np.random.default_rng(zlib.crc32(name.encode()))  # a case's inputs do not depend on the others
    fn, args = make()
    lowered = jax.jit(fn).lower(*args)
    hlo = lowered.as_text(dialect="hlo")
    opt = lowered.compile().as_text()
    outs = jax.tree_util.tree_leaves(jax.jit(fn)(*args))
    ins = jax.tree_util.tree_leaves(args)
    (HERE / f"{name}.hlo").write_text(hlo)
    (HERE / f"{name}.opt.hlo").write_text(opt)
    arrays = {f"in{i}": np.asarray(a) for i, a in enumerate(ins)}
    arrays.update({f"out{i}": np.asarray(o) for i, o in enumerate(outs)})
    np.savez(HERE / f"{name}.npz", **arrays)
    return {"description": description,
            "inputs": [f"{a.dtype}{list(a.shape)}" for a in map(np.asarray, ins)],
            "outputs": [f"{o.dtype}{list(o.shape)}" for o in map(np.asarray, outs)]}


def main(names: list[str]) -> None:
    index_path = HERE / "cases.json"
    index = json.loads(index_path.read_text()) if index_path.exists() and names else {}
    failed = []
    for name in names or CASES:
        description, make = CASES[name]
        try:
            index[name] = write_case(name, description, make)
        except Exception as e:      # report every broken case at once, then fail
            failed.append(name)
            print(f"{name}: FAILED {type(e).__name__}: {str(e).splitlines()[0]}")
            continue
        print(f"{name}: {index[name]['outputs']}")
    index_path.write_text(json.dumps({"jax": jax.__version__, "x64": True,
                                      **{k: v for k, v in sorted(index.items()) if k not in ("jax", "x64")}},
                                     indent=1) + "\n")
    if failed:
        sys.exit(f"cases that failed: {', '.join(failed)}")


if __name__ == "__main__":
    main(sys.argv[1:])
