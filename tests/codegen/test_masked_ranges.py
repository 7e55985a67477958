"""Reductions of slices of index-dependent length, which the frontend masks to full length
(``select(lo <= iota < hi, x, 0)``), run over their true range (``codegen/masked_ranges.py``):
against the reference evaluator for every bound position (empty, clipped below 0 and above the
length, full), every compare direction and both operand orders; where the masked-out elements
are not provably the identity (``0 * inf``), the whole range, NaN as the evaluator gives it; and
the loop programs with triangular slices against eager NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import nbxla
from nbxla.compiler import compile_module
from nbxla.hlo.parser import parse_hlo
from nbxla.runtime.cache import CompilationCache
from nbxla.codegen.masked_ranges import masked_range
from nbxla.examples import cholesky, lu, trisolv, trmm

# A dot of two rows of x, both masked to [lo, hi): the shape the frontend gives A[i, lo:hi] @ ...
_MASKED_DOT = """
HloModule masked_dot
add {
  a = f64[] parameter(0)
  b = f64[] parameter(1)
  ROOT s = f64[] add(a, b)
}
ENTRY main {
  x = f64[2,@N] parameter(0)
  lo = s64[] parameter(1)
  hi = s64[] parameter(2)
  r0 = f64[1,@N] slice(x), slice={[0:1], [0:@N]}
  r1 = f64[1,@N] slice(x), slice={[1:2], [0:@N]}
  u = f64[@N] reshape(r0)
  v = f64[@N] reshape(r1)
  iota = s64[@N] iota(), iota_dimension=0
  blo = s64[@N] broadcast(lo), dimensions={}
  bhi = s64[@N] broadcast(hi), dimensions={}
  c0 = pred[@N] compare(LOWER), direction=LDIR
  c1 = pred[@N] compare(UPPER), direction=UDIR
  mask = pred[@N] and(c0, c1)
  zero = f64[] constant(0)
  zeros = f64[@N] broadcast(zero), dimensions={}
  mu = f64[@N] select(mask, u, zeros)
  mv = f64[@N] select(mask, VSIDE, zeros)
  p = f64[@N] multiply(mu, mv)
  ROOT d = f64[] reduce(p, zero), dimensions={0}, to_apply=add
}
"""

_FORMS = {   # (lower compare, direction, upper compare, direction): all mean lo <= i < hi
    "iota-first": ("iota, blo", "GE", "iota, bhi", "LT"),
    "bound-first": ("blo, iota", "LE", "bhi, iota", "GT"),
}


def _module(n, form, masked_v=True, lower_strict=False):
    lower, ldir, upper, udir = _FORMS[form]
    if lower_strict:      # lo < i: the same range from lo - 1
        ldir = {"GE": "GT", "LE": "LT"}[ldir]
    text = (_MASKED_DOT.replace("LOWER", lower).replace("LDIR", ldir).replace("UPPER", upper)
            .replace("UDIR", udir).replace("VSIDE", "v" if masked_v else "v_raw")
            .replace("@N", str(n)))
    if not masked_v:
        text = text.replace("mv = f64[%d] select(mask, v_raw, zeros)" % n, "mv = f64[%d] copy(v)" % n)
    return text


def _run_both(text, args):
    cpu = compile_module(parse_hlo(text), "cpu")
    ref = compile_module(parse_hlo(text), "evaluator")
    assert cpu.executable.native.interpreted == {}
    return cpu.executable.run(args)[0], ref.executable.run(args)[0], cpu


@pytest.mark.parametrize("form", sorted(_FORMS))
@pytest.mark.parametrize("lo, hi", [(0, 0), (0, 1), (3, 17), (5, 5), (9, 4), (-3, 6), (10, 40), (-5, 99),
                                    (0, 37), (36, 37)])
def test_a_masked_dot_matches_the_evaluator_at_every_bound(form, lo, hi):
    n = 37
    text = _module(n, form)
    x = np.random.default_rng(0).standard_normal((2, n))
    x[:, :2] = np.inf           # (outside most ranges: never read there; inf * inf inside)
    got, want, cpu = _run_both(text, [x, np.int64(lo), np.int64(hi)])
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_the_narrowed_kernel_is_the_one_compiled():
    comp = parse_hlo(_module(37, "iota-first")).entry
    reduce = comp.root
    found = masked_range(reduce.operands[0], 0.0)
    assert found is not None and len(found.lower) == 1 and len(found.upper) == 1
    strict = parse_hlo(_module(37, "bound-first", lower_strict=True)).entry.root
    bounds = masked_range(strict.operands[0], 0.0)
    assert bounds.lower[0].offset == 1 and bounds.upper[0].offset == 0


def test_a_strict_lower_bound_starts_one_later():
    text = _module(20, "iota-first", lower_strict=True)
    x = np.random.default_rng(1).standard_normal((2, 20))
    for lo, hi in [(-1, 20), (3, 9), (8, 9), (19, 25)]:
        got, want, _ = _run_both(text, [x, np.int64(lo), np.int64(hi)])
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_one_side_unmasked_is_not_narrowed_and_keeps_the_nan_of_zero_times_inf():
    # mu is 0 outside the mask but v is read everywhere: 0 * inf = NaN outside, in HLO as in
    # the evaluator, so the whole range must run.
    text = _module(16, "iota-first", masked_v=False)
    reduce = parse_hlo(text).entry.root
    assert masked_range(reduce.operands[0], 0.0) is None
    x = np.random.default_rng(2).standard_normal((2, 16))
    x[1, 15] = np.inf
    got, want, _ = _run_both(text, [x, np.int64(2), np.int64(8)])
    assert np.isnan(want) and np.isnan(got)


def test_a_nonzero_masked_value_is_not_the_identity():
    text = _module(12, "iota-first").replace("zero = f64[] constant(0)\n  zeros",
                                             "zero = f64[] constant(0)\n  one = f64[] constant(1)\n  zeros") \
        .replace("zeros = f64[12] broadcast(zero)", "zeros = f64[12] broadcast(one)")
    reduce = parse_hlo(text).entry.root
    assert masked_range(reduce.operands[0], 0.0) is None
    x = np.random.default_rng(3).standard_normal((2, 12))
    got, want, _ = _run_both(text, [x, np.int64(3), np.int64(7)])
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert abs(want - (x[0, 3:7] @ x[1, 3:7] + 8)) < 1e-9


@pytest.mark.parametrize("n", [1, 2, 7, 40])
def test_triangular_loop_programs_match_numpy(n):
    rng = np.random.default_rng(n)
    a = rng.random((n, n))
    spd = a @ a.T + n * np.eye(n)
    for program in (cholesky, lu):
        mine, theirs = spd.copy(), spd.copy()
        nbxla.jit(program, cache=CompilationCache())(mine)
        program(theirs)
        np.testing.assert_allclose(mine, theirs, rtol=1e-10, atol=1e-12)
    L = np.tril(rng.random((n, n))) + n * np.eye(n)
    b = rng.random(n)
    np.testing.assert_allclose(nbxla.jit(trisolv, cache=CompilationCache())(L, b), trisolv(L, b), rtol=1e-10)
    B, theirs = rng.random((n, n + 3)), None
    theirs = B.copy()
    nbxla.jit(trmm, cache=CompilationCache())(1.5, a, B)
    trmm(1.5, a, theirs)
    np.testing.assert_allclose(B, theirs, rtol=1e-10)


def test_a_slice_with_inf_outside_its_true_range_gives_numpys_answer():
    # NumPy never reads x[i+1:]; the masked program multiplies them by 0 only where both
    # operands are masked (exact zeros), and the true-range kernel does not read them at all.
    def prefix_dots(x, y):
        out = np.zeros(x.shape[0])
        for i in range(x.shape[0]):
            out[i] = x[:i] @ y[:i]
        return out
    x, y = np.arange(1.0, 9.0), np.arange(2.0, 10.0)
    x[-1] = np.inf
    got = nbxla.jit(prefix_dots, cache=CompilationCache())(x, y)
    np.testing.assert_allclose(got, prefix_dots(x, y))
    assert np.isfinite(got).all()
