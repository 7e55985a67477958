"""Compile time that does not grow with trip counts (issue 30): loops over output positions
whose body is a window reduction (a convolution written as a double loop, LeNet-5's layers, an
azimuthal integration over bins) stay rolled HLO whiles, so the optimized program has the same
size whatever the image size; loops whose unrolled steps would each add a kernel of their own
roll past a small kernel budget.  Timings are never asserted: sizes and counts are, and every
program's results against eager NumPy.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

import nbxla
from nbxla import examples
from nbxla.frontend import loops
from tests.frontend_util import UNROLL_FLAGS, quiet, use_flags

RNG = np.random.default_rng(30)


def _same(want, got, rtol=1e-5):
    want = want if isinstance(want, tuple) else (want,)
    got = got if isinstance(got, tuple) else (got,)
    assert len(want) == len(got)
    for w, g in zip(want, got):
        assert np.asarray(g).dtype == np.asarray(w).dtype
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=rtol)


def _run(fn, *args, rtol=1e-5):
    """The function compiled and eager on copies of the arguments; results and arguments agree."""
    eager, compiled = copy.deepcopy(args), copy.deepcopy(args)
    jitted = nbxla.jit(fn)
    with quiet():
        got = jitted(*compiled)
        want = fn(*eager)
    _same(want, got, rtol)
    for w, g in zip(eager, compiled):
        if isinstance(w, np.ndarray):
            _same(w, g, rtol)
    return jitted.last_compilation


def _optimized_size(compilation) -> int:
    return sum(1 for _ in compilation.optimized.instructions())


def _f32(*shape):
    return RNG.random(shape, dtype=np.float32)


# ---- np.newaxis next to slices at the loop index ----------------------------------------------

def window_products(x, w):
    K = w.shape[0]
    out = np.zeros((x.shape[0], x.shape[1] - K + 1, w.shape[2]), np.float32)
    for i in range(x.shape[1] - K + 1):
        out[:, i, :] = np.sum(x[:, i:i + K, :, np.newaxis] * w[np.newaxis, :, :, :], axis=(1, 2))
    return out


def new_axes_around_an_index(x):
    out = np.zeros((x.shape[0], 1, x.shape[1], 1))
    for i in range(x.shape[0]):
        out[i] = x[None, i, ..., None] + x[i, None, :, None]
    return out


@pytest.mark.parametrize("flags", UNROLL_FLAGS)
def test_new_axes_next_to_loop_index_slices_agree_with_numpy(flags, monkeypatch):
    use_flags(monkeypatch, flags)
    compilation = _run(window_products, _f32(2, 12, 3), _f32(3, 3, 4))
    assert " while(" in compilation.stage("hlo")                # 10 steps: traced once,
    assert " convolution(" in compilation.stage("optimized_hlo")  # then one convolution
    _run(new_axes_around_an_index, RNG.random((9, 3)))


# ---- the convolution loop: one rolled loop nest, then one convolution --------------------------

def test_convolution_loop_is_one_convolution_whatever_the_image():
    sizes = []
    for h in (9, 14):
        compilation = _run(examples.conv2d, _f32(2, h, h, 3), _f32(5, 5, 3, 4), rtol=1e-4)
        assert compilation.stage("hlo").count(" while(") == 2     # the i and j loops, rolled
        text = compilation.stage("optimized_hlo")
        assert " while(" not in text and text.count(" convolution(") == 1, text
        sizes.append(_optimized_size(compilation))
    assert sizes[0] == sizes[1]


def _lenet_args(n, h):
    c_before = 16 * ((((h - 4) // 2) - 4) // 2) ** 2
    return (_f32(n, h, h, 1), _f32(5, 5, 1, 6), _f32(6), _f32(5, 5, 6, 16), _f32(16),
            _f32(c_before, 120), _f32(120), _f32(120, 84), _f32(84), _f32(84, 10), _f32(10), n, c_before)


def test_lenet_program_size_does_not_grow_with_the_image():
    """(at 28 and 36 the second pooling loops have 4 steps: within the unroll budget, they stay
    rolled since their windows move with the index, and become a reduce-window)"""
    sizes = []
    for h in (28, 36, 44):
        compilation = _run(examples.lenet5, *_lenet_args(2, h), rtol=1e-4)
        text = compilation.stage("optimized_hlo")
        assert " while(" not in text and text.count(" convolution(") == 2 \
            and text.count(" reduce-window(") == 2, text
        sizes.append(_optimized_size(compilation))
    assert len(set(sizes)) == 1, sizes


def test_azimuthal_integration_and_correlation_agree_with_numpy():
    compilation = _run(examples.azimint_naive, RNG.random(500), RNG.random(500), 40)
    assert " while(" in compilation.stage("optimized_hlo")      # 40 bins: one rolled loop
    _run(examples.correlation, 30, 40.0, RNG.random((40, 30)), rtol=1e-9)


# ---- the kernel budget: both sides -------------------------------------------------------------

def reductions_per_step(x, steps, per_step):
    acc = np.zeros(x.shape[1])
    for i in range(steps):
        for k in range(per_step):        # (unrolled: a Python range over a Python value)
            acc = acc + np.sum(x * (i + k + 1.0), axis=0)
    return acc


@pytest.mark.parametrize("steps, per_step", [(4, 1), (5, 1), (2, 2), (3, 2), (8, 0)])
def test_steps_times_kernels_decide_unrolling(steps, per_step):
    """Unrolled while steps x reductions per step stay within UNROLL_KERNEL_BUDGET (4): short
    loops (at most --unroll_max steps) included, and a loop without reductions unrolls by its
    instruction budget alone."""
    x = RNG.random((6, 5))
    compilation = _run(reductions_per_step, x, steps, per_step, rtol=1e-12)
    rolled = steps * per_step > loops.UNROLL_KERNEL_BUDGET
    text = compilation.stage("optimized_hlo")
    assert (" while(" in text) == rolled, text
    if rolled:
        report = compilation.stage("fusion_report")
        assert f"its {steps} steps x {per_step} reductions" in report, report


def test_an_empty_array_filled_by_a_loop_is_a_fill_not_a_constant():
    """np.empty's contents are unspecified: inside compiled code it is np.zeros, which becomes
    a broadcast when the loop writes into it (was a constant as large as the array)."""
    compilation = _run(examples.conv2d, _f32(2, 9, 9, 3), _f32(5, 5, 3, 4), rtol=1e-4)
    hlo = compilation.hlo
    assert all(i.opcode != "constant" or np.size(i.literal) <= 1 for i in hlo.instructions()), \
        compilation.stage("hlo")


# ---- reads of the previous step's values at other positions: both sides -----------------------

def rows_and_columns_of_the_last_step(path, steps):
    """Floyd-Warshall's step: every element reads row k and column k of the previous step's
    matrix (no fusion across steps: one kernel per step unrolled)."""
    for k in range(steps):
        path[:] = np.minimum(path, np.add.outer(path[:, k], path[k, :]))
    return path


def elementwise_chain(x, steps):
    """Each step maps elements of the previous one: unrolled steps fuse into one kernel."""
    for k in range(steps):
        x = x * 0.5 + np.sin(x) * (k + 1.0)
    return x


def one_element_of_the_last_step(a, steps):
    """Each step reads one element the previous step wrote (Seidel's inner loop): recomputed,
    no kernel boundary."""
    for j in range(1, steps + 1):
        a[j] += a[j - 1]
        a[j] /= 3.0
    return a


@pytest.mark.parametrize("steps", [4, 5, 8])
def test_reads_of_the_last_steps_rows_count_a_kernel_per_step(steps):
    path = RNG.integers(1, 50, (9, 9)).astype(np.int32)
    compilation = _run(rows_and_columns_of_the_last_step, path, steps)
    rolled = steps > loops.UNROLL_KERNEL_BUDGET
    text = compilation.stage("optimized_hlo")
    assert (" while(" in text) == rolled, text
    if rolled:
        assert f"its {steps} steps x 1 reductions" in compilation.stage("fusion_report")


@pytest.mark.parametrize("fn, make", [(elementwise_chain, lambda: RNG.random(16)),
                                      (one_element_of_the_last_step, lambda: RNG.random(12))])
def test_element_maps_and_one_element_reads_still_unroll(fn, make):
    compilation = _run(fn, make(), 8)
    assert " while(" not in compilation.stage("optimized_hlo")


def two_writes_from_the_last_step(p, steps):
    """Two writes per step, each from the previous step's neighbours (a pressure step's
    interior and its boundary column): two kernels per step unrolled."""
    for _ in range(steps):
        q = p.copy()
        p[1:-1, 1:-1] = 0.25 * (q[1:-1, 2:] + q[1:-1, :-2] + q[2:, 1:-1] + q[:-2, 1:-1])
        p[1:-1, 0] = 0.5 * (q[2:, 0] + q[:-2, 0])
    return p


@pytest.mark.parametrize("steps", [2, 3])
def test_each_write_from_the_last_steps_neighbours_counts(steps):
    """2 steps x 2 writes = 4 kernels: unrolled (short loop); 3 x 2 = 6: rolled."""
    compilation = _run(two_writes_from_the_last_step, RNG.random((7, 8)), steps, rtol=1e-12)
    rolled = steps * 2 > loops.UNROLL_KERNEL_BUDGET
    assert (" while(" in compilation.stage("optimized_hlo")) == rolled
