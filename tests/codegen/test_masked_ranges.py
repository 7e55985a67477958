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


# An in-place update of a column window whose rows outside [lo, hi) are the window's own values
# (``C[lo:hi, j] += s * x[lo:hi]`` masked to full length): only the range is written.
_MASKED_WINDOW = """
HloModule masked_window
ENTRY main {
  c = f64[@R,@C] parameter(0)
  x = f64[@R] parameter(1)
  lo = s64[] parameter(2)
  hi = s64[] parameter(3)
  j = s64[] parameter(4)
  zero = s64[] constant(0)
  old = f64[@R,1] dynamic-slice(c, zero, j), dynamic_slice_sizes={@R,1}
  oldv = f64[@R] reshape(old)
  sum = f64[@R] add(oldv, x)
  new = f64[@R,1] reshape(sum)
  iota = s64[@R,1] iota(), iota_dimension=0
  blo = s64[@R,1] broadcast(lo), dimensions={}
  bhi = s64[@R,1] broadcast(hi), dimensions={}
  c0 = pred[@R,1] compare(iota, blo), direction=GE
  c1 = pred[@R,1] compare(iota, bhi), direction=LT
  mask = pred[@R,1] and(c0, c1)
  upd = f64[@R,1] select(mask, new, OTHER)
  ROOT r = f64[@R,@C] dynamic-update-slice(c, upd, zero, j)
}
"""


def _window_module(rows, cols, other="old"):
    text = _MASKED_WINDOW.replace("@R", str(rows)).replace("@C", str(cols))
    if other == "old":
        return text.replace("OTHER", "old")
    return text.replace("upd = ", "zeros = f64[%d,1] broadcast(z), dimensions={}\n  upd = " % rows) \
        .replace("zero = s64[] constant(0)", "zero = s64[] constant(0)\n  z = f64[] constant(0)") \
        .replace("OTHER", "zeros")


@pytest.mark.parametrize("lo, hi", [(0, 0), (0, 9), (2, 7), (6, 6), (8, 3), (-4, 20), (8, 9), (-1, 1)])
@pytest.mark.parametrize("other", ["old", "zeros"])
def test_a_masked_window_update_matches_the_evaluator(lo, hi, other):
    rows, cols = 9, 5
    text = _window_module(rows, cols, other)
    rng = np.random.default_rng(abs(lo * 31 + hi))
    c, x = rng.standard_normal((rows, cols)), rng.standard_normal(rows)
    for j in (0, 3, 4):
        args = [c.copy(), x, np.int64(lo), np.int64(hi), np.int64(j)]
        got, want, _ = _run_both(text, args)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(_in_place(text, args), want)


def _in_place(text, args):
    """The in-place update kernel itself (as a native loop runs it: the output is the updated
    parameter's buffer), over the whole window."""
    import ctypes
    from nbxla.codegen.cpu import compile_helper_kernel
    from nbxla.codegen.updates import emit_in_place_update
    comp = parse_hlo(text).entry
    kernel = compile_helper_kernel("masked_window", lambda m, name: emit_in_place_update(m, name, comp))
    spec = kernel.specs["masked_window"]
    arrays = [np.ascontiguousarray(a) for a in args]
    arrays[0] = arrays[0].copy()
    pointers = (ctypes.c_void_p * (len(arrays) + 1))(*[a.ctypes.data for a in arrays], arrays[0].ctypes.data)
    run = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)(kernel.addresses["masked_window"])
    run(pointers, 0, spec.parallel_extent)
    return arrays[0]


def test_only_a_window_of_its_own_values_is_narrowed():
    from nbxla.codegen.updates import _masked_window
    for other, narrowed in (("old", True), ("zeros", False)):
        root = parse_hlo(_window_module(9, 5, other)).entry.root
        found = _masked_window(root, root.operands[1], root.operands[0])
        assert (found is not None) == narrowed
        if narrowed:
            assert found[0] == 0


@pytest.mark.parametrize("n", [1, 3, 12])
def test_symm_and_syr2k_match_numpy(n):
    from nbxla.examples import symm, syr2k
    rng = np.random.default_rng(n)
    A, B, C = rng.random((n, n)), rng.random((n, n + 2)), rng.random((n, n + 2))
    mine, theirs = C.copy(), C.copy()
    nbxla.jit(symm, cache=CompilationCache())(1.5, 1.2, mine, A, B)
    symm(1.5, 1.2, theirs, A, B)
    np.testing.assert_allclose(mine, theirs, rtol=1e-12)
    A2, B2, C2 = rng.random((n, n + 1)), rng.random((n, n + 1)), rng.random((n, n))
    mine, theirs = C2.copy(), C2.copy()
    nbxla.jit(syr2k, cache=CompilationCache())(1.5, 1.2, mine, A2, B2)
    syr2k(1.5, 1.2, theirs, A2, B2)
    np.testing.assert_allclose(mine, theirs, rtol=1e-12)


def test_unsigned_64_bit_bounds_are_not_narrowed():
    # (a bound above 2**63 would read as negative in the signed clamp: the whole range runs)
    text = _module(10, "iota-first").replace("s64", "u64")
    reduce = parse_hlo(text).entry.root
    assert masked_range(reduce.operands[0], 0.0) is None
    x = np.random.default_rng(4).standard_normal((2, 10))
    got, want, _ = _run_both(text, [x, np.uint64(2**63 + 5), np.uint64(7)])
    np.testing.assert_allclose(got, want)
    assert want == 0.0


def test_unsigned_32_bit_bounds_are_narrowed_and_agree():
    text = _module(10, "iota-first").replace("s64", "u32")
    reduce = parse_hlo(text).entry.root
    assert masked_range(reduce.operands[0], 0.0) is not None
    x = np.random.default_rng(5).standard_normal((2, 10))
    for lo, hi in [(0, 10), (3, 7), (4294967295, 3), (2, 4294967295)]:
        got, want, _ = _run_both(text, [x, np.uint32(lo), np.uint32(hi)])
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_complex_and_f32_masked_sums_compile_and_agree():
    # (complex sums are not narrowed -- their init is no real +0 -- and still compile; f32 sums
    # accumulate in blocks and are narrowed)
    for dtype, t in ((np.complex128, "c128"), (np.float32, "f32")):
        text = _module(24, "iota-first").replace("f64", t)
        if t == "c128":
            text = text.replace("c128[] constant(0)", "c128[] constant((0, 0))")
        rng = np.random.default_rng(6)
        x = (rng.standard_normal((2, 24)) + (1j * rng.standard_normal((2, 24)) if t == "c128" else 0)).astype(dtype)
        for lo, hi in [(0, 24), (5, 11), (12, 3)]:
            got, want, _ = _run_both(text, [x, np.int64(lo), np.int64(hi)])
            np.testing.assert_allclose(got, want, rtol=1e-5)


# Two dots masked by one bound ``lo + 1`` (trmm's ``A[i + 1:, i] @ B[i + 1:, j]`` for two j, as
# the simplifier leaves its unrolled inner loop): one fusion, the bound emitted for the first
# reduction's range, again inside its loop, and needed for the second reduction's range.
_TWO_MASKED_DOTS = """
HloModule two_masked_dots
add {
  a = f64[] parameter(0)
  b = f64[] parameter(1)
  ROOT s = f64[] add(a, b)
}
ENTRY main {
  x = f64[3,@N] parameter(0)
  lo = s64[] parameter(1)
  one = s64[] constant(1)
  lo1 = s64[] add(lo, one)
  r0 = f64[1,@N] slice(x), slice={[0:1], [0:@N]}
  r1 = f64[1,@N] slice(x), slice={[1:2], [0:@N]}
  r2 = f64[1,@N] slice(x), slice={[2:3], [0:@N]}
  u = f64[@N] reshape(r0)
  v = f64[@N] reshape(r1)
  w = f64[@N] reshape(r2)
  iota = s64[@N] iota(), iota_dimension=0
  blo = s64[@N] broadcast(lo1), dimensions={}
  mask = pred[@N] compare(iota, blo), direction=GE
  zero = f64[] constant(0)
  zeros = f64[@N] broadcast(zero), dimensions={}
  mu = f64[@N] select(mask, u, zeros)
  mv = f64[@N] select(mask, v, zeros)
  mw = f64[@N] select(mask, w, zeros)
  p = f64[@N] multiply(mu, mv)
  q = f64[@N] multiply(mu, mw)
  d0 = f64[] reduce(p, zero), dimensions={0}, to_apply=add
  d1 = f64[] reduce(q, zero), dimensions={0}, to_apply=add
  ROOT out = (s64[], f64[], f64[]) tuple(lo1, d0, d1)
}
"""


@pytest.mark.parametrize("n", [4, 3000])
def test_two_masked_reductions_sharing_a_bound_compile_and_match_the_evaluator(n):
    """Each reduction's range is computed after the previous reduction's loop: a bound the
    emitter had memoized inside that loop does not dominate it (LLVM's verifier refused the
    module: 'Instruction does not dominate all uses').  A short row and a long one (LLVM
    vectorizes the loops of the long one)."""
    text = _TWO_MASKED_DOTS.replace("@N", str(n))
    x = np.random.default_rng(3).standard_normal((3, n))
    cpu = compile_module(parse_hlo(text), "cpu")
    ref = compile_module(parse_hlo(text), "evaluator")
    assert cpu.executable.native.interpreted == {}
    for lo in (-2, 0, 1, n // 2, n - 1, n + 3):
        args = [x, np.int64(lo)]
        for got, want in zip(cpu.executable.run(args), ref.executable.run(args)):
            np.testing.assert_allclose(got, want, rtol=1e-12)
