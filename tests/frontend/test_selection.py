"""``x[mask]`` with a traced boolean mask (frontend/selection.py): kept at full size, it compiles
where its data-dependent length does not matter; elsewhere the error names the line.
Oracle: eager NumPy (values, dtypes, writes into arguments, the errors NumPy raises)."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import nbxla
from nbxla.errors import AotError, NotCompilableError
from nbxla.testing import compare_arrays
from tests.frontend_util import quiet

RNG = np.random.default_rng(11)


def same(want, got, rtol=1e-12):
    want = want if isinstance(want, tuple) else (want,)
    got = got if isinstance(got, tuple) else (got,)
    assert len(want) == len(got)
    for w, g in zip(want, got):
        ok, detail = compare_arrays(np.asarray(g), np.asarray(w), rtol=rtol)
        assert ok, detail


def reductions(x):
    s = x[x > 0]
    return (s.sum(), s.max(), np.min(s), s.size, (s * 2).mean(), np.count_nonzero(s > 0.5),
            s.prod(), (s > 1).any(), np.all(s > 0), np.add.reduce(s))


def positives(x):
    return x[x > 0]                        # compacted on the host after the run


def grid_selection(a, b):
    m = (a > 0.3) & (b < 0.8)
    return a[m] * b[m] + 1, np.sqrt(a[m]).astype(np.float32)


def write_back(a, k):
    a[a > 0] = a[a > 0] ** 2               # the mask computed twice: the same value
    k[k > 2] += 1
    return a.sum(), k


def mandelbrot(C, maxiter):
    N = np.zeros(C.shape, dtype=np.int64)
    Z = np.zeros_like(C)
    for n in range(maxiter):
        I = np.abs(Z) < 2.0
        N[I] = n
        Z[I] = Z[I] ** 2 + C[I]
    return Z, N


def ring_means(data, radius, npt):
    res = np.zeros(npt)
    for i in range(npt):                    # binds a selection: the loop is unrolled
        inside = np.logical_and(i / npt <= radius, radius < (i + 1) / npt)
        values = data[inside]
        res[i] = values.mean()
    return res


def _grid():
    x, y = np.linspace(-2.0, 0.5, 16), np.linspace(-1.25, 1.25, 12)
    return x + y[:, None] * 1j


CASES = [
    (reductions, lambda: (RNG.standard_normal(60),)),
    (positives, lambda: (RNG.standard_normal((5, 7)),)),
    (positives, lambda: (RNG.integers(-5, 5, 40),)),
    (grid_selection, lambda: (RNG.random((6, 9)), RNG.random((6, 9)))),
    (write_back, lambda: (RNG.standard_normal((4, 5)), RNG.integers(0, 9, (5, 6)))),
    (mandelbrot, lambda: (_grid(), 15)),
    (ring_means, lambda: (RNG.random(300), RNG.random(300), 6)),
]


@pytest.mark.parametrize("fn, make", CASES, ids=[f"{fn.__name__}{k}" for k, (fn, _) in enumerate(CASES)])
def test_selections_agree_with_numpy(fn, make):
    args = make()
    eager, compiled = copy.deepcopy(args), copy.deepcopy(args)
    with quiet():
        want = fn(*eager)
        got = nbxla.jit(fn)(*compiled)
    same(want, got)
    for w, g in zip(eager, compiled):
        if isinstance(w, np.ndarray):
            same(w, g)


def test_ring_means_loop_rolls_past_unroll_max_and_unrolls_below():
    """A selection bound in each step is a temporary of the step: past --unroll_max steps the
    loop rolls (a loop of 1000 bins was refused, or took 80 s under mode="auto"); a short loop
    is unrolled, with the reason."""
    for npt, rolled in ((6, True), (4, False)):
        jitted = nbxla.jit(ring_means)
        args = (RNG.random(50), RNG.random(50), npt)
        with quiet():
            same(ring_means(*args), jitted(*args))
        report = jitted.last_compilation.stage("fusion_report")
        assert (" while(" in jitted.last_compilation.stage("optimized_hlo")) == rolled
        if not rolled:
            assert "unrolled (the body binds `values` to x[mask]" in report, report[-800:]


def ring_means_then_last(data, radius, npt):
    res = np.zeros(npt)
    for i in range(npt):
        values = data[np.logical_and(i / npt <= radius, radius < (i + 1) / npt)]
        res[i] = values.mean()
    return res, values.sum()


def test_a_selection_read_after_a_rolled_loop_is_refused_clearly():
    args = (RNG.random(50), RNG.random(50), 8)
    with quiet(), pytest.raises(NotCompilableError, match="`values` holds x\\[mask\\] from the last step"):
        nbxla.jit(ring_means_then_last)(*args)
    args = (RNG.random(50), RNG.random(50), 3)          # short: unrolled, Python's semantics
    with quiet():
        same(ring_means_then_last(*args), nbxla.jit(ring_means_then_last)(*args))


def test_max_of_an_empty_selection_raises_numpys_error():
    x = -np.abs(RNG.standard_normal(8))
    with pytest.raises(ValueError, match="zero-size array to reduction operation maximum"):
        reductions(x)
    with quiet(), pytest.raises(ValueError, match="zero-size array to reduction operation maximum"):
        nbxla.jit(reductions)(x)


def combine_with_array(x):
    s = x[x > 0]
    return s + x


def two_masks(x):
    return x[x > 0] + x[x < 1]


def its_shape(x):
    return x[x > 0].shape[0]


def index_it(x):
    return x[x > 0][0]


def other_place(x, y):
    y[y > 0] = x[x > 0]
    return y


def other_method(x):
    return x[x > 0].std()


@pytest.mark.parametrize("fn, line", [
    (other_method, "return x[x > 0].std()"),
    (combine_with_array, "return s + x"),
    (two_masks, "return x[x > 0] + x[x < 1]"),
    (its_shape, "return x[x > 0].shape[0]"),
    (index_it, "return x[x > 0][0]"),
    (other_place, "y[y > 0] = x[x > 0]"),
])
def test_uses_that_need_the_length_name_the_line(fn, line):
    with quiet(), pytest.raises(NotCompilableError) as info:
        nbxla.jit(fn)(RNG.standard_normal(6), RNG.standard_normal(6)) if fn is other_place else \
            nbxla.jit(fn)(RNG.standard_normal(6))
    message = str(info.value)
    assert "boolean-mask indexing" in message and line in message, message
    assert "np.where" in info.value.hint


def test_a_mask_of_leading_axes_keeps_the_clear_error():
    def rows(x):
        return x[x[:, 0] > 0].sum()
    with quiet(), pytest.raises(NotCompilableError, match="boolean-mask indexing cannot be compiled"):
        nbxla.jit(rows)(RNG.standard_normal((5, 3)))


def test_ahead_of_time_refuses_a_selection_result(tmp_path):
    import nbxla.aot
    with pytest.raises(AotError, match=r"returns x\[mask\]"):
        nbxla.aot.compile(positives, ["f64[8]"], str(tmp_path), "positives")
