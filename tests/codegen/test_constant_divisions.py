"""Divisions by a constant (``hlo/division.py``): ``x / c`` runs as ``x * (1/c)`` plus one FMA
correction where ``1/c`` is a normal number (f64 only: f32 keeps dividing), NumPy's quotient bit
for bit away from the underflow threshold (within an ulp within a few ulps of it); any other
constant (zero, an infinity, NaN, one whose reciprocal is subnormal) still divides, bit for bit
as NumPy.  Fusion counts a division that multiplies as cheap: it is copied into each kernel
that reads it instead of being written out once.  Both sides of each rule, against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import nbxla
from nbxla.hlo.division import constant_reciprocal, is_expensive
from nbxla.hlo.parser import parse_hlo
from nbxla.passes.fusion_model import not_duplicated, recompute_flops, EXPENSIVE_FLOPS


def _values(dtype):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(1000) * 10.0 ** rng.integers(-20, 20, 1000)).astype(dtype)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -3.0, np.finfo(dtype).max,
                         np.finfo(dtype).tiny, -np.finfo(dtype).smallest_subnormal], dtype)
    return np.concatenate([x, specials])


def _divided_by(c: float):
    return lambda x: x / c       # (a Python float: a constant of x's type, NEP 50)


# (divisor, whether it multiplies): 1e308 and 1e38 have subnormal reciprocals in f64 and f32.
CASES = [(np.float64, 3.0, True), (np.float64, -0.1, True), (np.float64, 7e-300, True),
         (np.float64, 1e308, False), (np.float64, 0.0, False), (np.float64, -np.inf, False),
         (np.float64, np.nan, False),
         (np.float32, 3.0, False), (np.float32, 1e-37, False), (np.float32, 0.0, False)]


@pytest.mark.parametrize("dtype,c,multiplies", CASES)
def test_division_by_a_constant_against_numpy(dtype, c, multiplies):
    x = _values(dtype)
    f = nbxla.jit(_divided_by(float(c)))
    got = f(x)
    with np.errstate(all="ignore"):
        want = x / dtype(c)
    assert got.dtype == want.dtype
    ir = f.last_compilation.stage("llvm_ir")
    assert ("fdiv" not in ir) == multiplies
    if multiplies:
        # bit for bit where the dividend is not near the smallest normal (the residual of the
        # correction rounds there), within one ulp everywhere; the same infinities, NaNs and
        # signed zeros
        np.testing.assert_array_max_ulp(got, want, maxulp=1)
        away = ~(np.abs(x) < 1e4 * np.finfo(dtype).tiny)
        np.testing.assert_array_equal(got[away], want[away])
        same = ~np.isfinite(want) | (want == 0)
        np.testing.assert_array_equal(got[same], want[same])
        assert (np.signbit(got[want == 0]) == np.signbit(want[want == 0])).all()
    else:
        np.testing.assert_array_equal(got, want)


def test_exact_quotients_stay_exact_for_bin_edges():
    """``rmax * 40 / 40`` is ``rmax`` in NumPy, and a bin test ``radius < r2`` relies on it (the
    azimuthal integration's last bin): the product ``x * (1/40)`` alone is an ulp off for some
    ``rmax``, which moved the largest radius into the last bin."""
    rmax = np.random.default_rng(5).random(20000)
    for n in (40, 3, 7, 10, 100):
        got = nbxla.jit(lambda r, n=n: r * n / n)(rmax)
        np.testing.assert_array_equal(got, rmax * n / n)
    radius = np.random.default_rng(6).random((50, 500))

    def last_bin_counts(radius):         # (counts: exact sums, whatever their order)
        rmax = radius.max(axis=1, keepdims=True)
        r1, r2 = rmax * 39 / 40, rmax * 40 / 40
        return np.where((r1 <= radius) & (radius < r2), 1.0, 0.0).sum(axis=1)
    np.testing.assert_array_equal(nbxla.jit(last_bin_counts)(radius), last_bin_counts(radius))


def test_powers_of_two_are_exact_and_integers_divide():
    x = _values(np.float64)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(nbxla.jit(_divided_by(0.25))(x), x / 0.25)
    n = np.arange(-50, 50, dtype=np.int64)
    np.testing.assert_array_equal(nbxla.jit(lambda a: a // 3)(n), n // 3)


DIVISION = """HloModule m
ENTRY %m (x: {t}[4], y: {t}[4]) -> ({t}[4], {t}[4]) {{
  %x = {t}[4]{{0}} parameter(0)
  %y = {t}[4]{{0}} parameter(1)
  %c = {t}[] constant({c})
  %b = {t}[4]{{0}} broadcast({t}[] %c), dimensions={{}}
  %d = {t}[4]{{0}} divide({t}[4]{{0}} %x, {t}[4]{{0}} %b)
  %e = {t}[4]{{0}} divide({t}[4]{{0}} %x, {t}[4]{{0}} %y)
  ROOT %r = ({t}[4]{{0}}, {t}[4]{{0}}) tuple({t}[4]{{0}} %d, {t}[4]{{0}} %e)
}}
"""


@pytest.mark.parametrize("t,c,inverse", [("f64", "4", 0.25), ("f64", "3", 1 / 3), ("f32", "3", None),
                                         ("f64", "0", None), ("f64", "1e308", None), ("f32", "1e38", None),
                                         ("s32", "3", None), ("bf16", "3", None)])
def test_which_divisions_multiply(t, c, inverse):
    comp = parse_hlo(DIVISION.format(t=t, c=c)).entry
    d = next(i for i in comp.instructions if i.name == "d")
    e = next(i for i in comp.instructions if i.name == "e")
    assert constant_reciprocal(d) == (None if inverse is None else (float(c), inverse))
    assert is_expensive(d) == (inverse is None) and not_duplicated(d) == (inverse is None)
    assert recompute_flops(d) == (EXPENSIVE_FLOPS if inverse is None else 1)
    assert constant_reciprocal(e) is None and is_expensive(e) and not_duplicated(e)


def _two_updates(c):
    """Two in-place updates reading one shared ``un * 0.1 / c`` (channel flow's advection
    factor): where the division multiplies, each update's kernel computes it; else it is
    written once by a kernel of its own."""
    def f(u, v):
        un, vn = u.copy(), v.copy()
        a = un[1:-1] * 0.1 / c
        u[1:-1] = un[1:-1] - a * (un[1:-1] - un[:-2])
        v[1:-1] = vn[1:-1] - a * (vn[1:-1] - vn[:-2])
        return u, v
    return f


@pytest.mark.parametrize("c,kernels", [(3.0, 2), (0.0, 3), (1e308, 3)])
def test_a_shared_division_is_copied_into_its_readers_only_where_it_multiplies(c, kernels):
    rng = np.random.default_rng(1)
    u, v = rng.standard_normal(64), rng.standard_normal(64)
    f = nbxla.jit(_two_updates(c))
    got = f(u.copy(), v.copy())
    with np.errstate(all="ignore"):
        want = _two_updates(c)(u.copy(), v.copy())
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-14, atol=0, equal_nan=True)
    assert f.last_compilation.stage("optimized_hlo").count(" fusion(") == kernels
