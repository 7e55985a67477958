"""Ops that ran on the reference evaluator and now run as library calls or kernels of the CPU
runtime: integer and f16 convolutions (dense, strided, grouped, depthwise), FFTs, LAPACK
custom calls, random bits, variadic and custom reduce-windows.  Each runs with nothing on the
evaluator and gives the evaluator's results (integers bit for bit, floats within their type's
tolerance)."""

from __future__ import annotations

import numpy as np
import pytest

from nbxla.compiler import compile_module
from nbxla.hlo.evaluator import evaluate, flatten
from nbxla.hlo.parser import parse_hlo
from nbxla.testing import compare_arrays

RNG = np.random.default_rng(3)


def run_natively(text: str, inputs: list) -> list:
    """CPU results, checked against the evaluator's, with no instruction on the evaluator."""
    executable = compile_module(parse_hlo(text), "cpu").executable
    interpreted = {**executable.native.interpreted, **executable.native.interpreted_ops}
    assert not interpreted, interpreted
    got = executable.run(inputs)
    with np.errstate(all="ignore"):
        want = flatten(evaluate(parse_hlo(text), inputs))
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, (k, g.dtype, w.dtype, g.shape, w.shape)
        if w.dtype.kind in "iub":
            assert np.array_equal(g, w), f"output {k}"
        else:
            ok, detail = compare_arrays(g, w)
            assert ok, f"output {k}: {detail}"
    return got


def random_inputs(text: str, high: int = 8) -> list:
    out = []
    for p in parse_hlo(text).entry.parameters:
        dt = p.shape.dtype
        if dt.kind in "iu":
            lo = -high if dt.kind == "i" else 0
            out.append(RNG.integers(lo, high, p.shape.dims).astype(dt))
        elif dt.kind == "c":
            out.append((RNG.standard_normal(p.shape.dims) + 1j * RNG.standard_normal(p.shape.dims)).astype(dt))
        else:
            out.append(RNG.standard_normal(p.shape.dims).astype(np.float32).astype(dt))
    return out


CONVOLUTIONS = """
HloModule convolutions
ENTRY e {{
  x = {t}[2,9,9,6] parameter(0)
  w = {t}[3,3,6,8] parameter(1)
  d = {t}[3,3,1,6] parameter(2)
  g = {t}[3,3,2,6] parameter(3)
  dense = {r}[2,5,5,8] convolution(x, w), window={{size=3x3 stride=2x2 pad=1_1x1_1}}, dim_labels=b01f_01io->b01f
  depthwise = {r}[2,9,9,6] convolution(x, d), window={{size=3x3 pad=1_1x1_1}}, dim_labels=b01f_01io->b01f, feature_group_count=6
  grouped = {r}[2,7,7,6] convolution(x, g), window={{size=3x3}}, dim_labels=b01f_01io->b01f, feature_group_count=3
  ROOT t = ({r}[2,5,5,8], {r}[2,9,9,6], {r}[2,7,7,6]) tuple(dense, depthwise, grouped)
}}
"""


@pytest.mark.parametrize("t, r", [("s32", "s32"), ("s8", "s8"), ("s8", "s32"), ("u8", "u16"), ("s64", "s64"),
                                  ("f16", "f16"), ("f16", "f32"), ("f32", "f16"), ("f8e4m3fn", "f32"),
                                  ("f8e5m2", "bf16"), ("f32", "bf16"), ("f16", "f64"), ("c64", "c64"),
                                  ("c128", "c128")])
def test_integer_f16_f8_complex_and_mixed_convolutions(t, r):
    text = CONVOLUTIONS.format(t=t, r=r)
    # (s8 sums of 54 products of numbers up to 100 wrap: wrapping must match too)
    run_natively(text, random_inputs(text, high=100 if t == "s8" else 8))


def test_f16_convolution_is_computed_in_f32_and_rounded_once():
    text = CONVOLUTIONS.format(t="f16", r="f16")
    ins = random_inputs(text)
    got = run_natively(text, ins)
    wide = [x.astype(np.float32) for x in ins]
    f32_text = CONVOLUTIONS.format(t="f32", r="f32")
    # Rounded once from the native f32 convolution (whose summation order the blocked and
    # per-tap paths choose; the f32 path itself is checked against the evaluator elsewhere),
    # and within f16 rounding of the evaluator's f32 result.
    native_f32 = run_natively(f32_text, wide)
    exact = flatten(evaluate(parse_hlo(f32_text), wide))
    for g, n, e in zip(got, native_f32, exact):
        assert np.array_equal(g, n.astype(np.float16))
        np.testing.assert_allclose(g.astype(np.float32), e, rtol=2e-3, atol=2e-3)


# ---- LAPACK custom calls (JAX's CPU lowering of solve, det, inv, lu, solve_triangular) --------

LETTERS = {"f32": "s", "f64": "d", "c64": "c", "c128": "z"}


def getrf_module(t: str, dims: tuple) -> str:
    *batch, m, n = dims
    k = min(m, n)
    shape = f"{t}[{','.join(map(str, dims))}]"
    piv = f"s32[{','.join(map(str, [*batch, k]))}]"
    info = f"s32[{','.join(map(str, batch))}]"
    return f"""HloModule lu
ENTRY e {{
  a = {shape} parameter(0)
  ROOT lu = ({shape}, {piv}, {info}) custom-call(a), custom_call_target="lapack_{LETTERS[t]}getrf_ffi",
      api_version=API_VERSION_TYPED_FFI
}}"""


@pytest.mark.parametrize("t", sorted(LETTERS))
@pytest.mark.parametrize("dims", [(4, 4), (3, 6, 6), (5, 3), (3, 5), (2, 1, 1)], ids=str)
def test_getrf_runs_as_a_lapack_call(t, dims):
    text = getrf_module(t, dims)
    (a,) = random_inputs(text)
    lu, piv, info = run_natively(text, [a])
    # and it is an LU factorization: P A = L U
    *batch, m, n = dims
    k = min(m, n)
    for idx in np.ndindex(*batch):
        f = lu[idx]
        lower = np.tril(f, -1)[:, :k] + np.eye(m, k)
        upper = np.triu(f)[:k, :]
        perm = np.arange(m)
        for j, p in enumerate(piv[idx]):
            perm[[j, p - 1]] = perm[[p - 1, j]]
        np.testing.assert_allclose(lower @ upper, a[idx][perm], rtol=1e-4, atol=1e-4)
        assert info[idx] == 0


def test_getrf_of_a_singular_matrix_reports_the_zero_pivot():
    text = getrf_module("f64", (2, 4, 4))
    a = RNG.standard_normal((2, 4, 4))
    a[1, :, 2] = 0                          # a zero column stays zero: U[2, 2] == 0 exactly
    _, _, info = run_natively(text, [a])
    assert info[0] == 0 and info[1] == 3


def test_getrf_rule_is_scipys_lapack():
    scipy_linalg = pytest.importorskip("scipy.linalg")
    text = getrf_module("f64", (6, 6))
    (a,) = random_inputs(text)
    lu, piv, info = flatten(evaluate(parse_hlo(text), [a]))
    want_lu, want_piv = scipy_linalg.lu_factor(a)
    np.testing.assert_allclose(lu, want_lu, rtol=1e-12, atol=1e-12)
    assert np.array_equal(piv, want_piv + 1)


def trsm_module(t: str, a_dims: tuple, b_dims: tuple, side: str, uplo: str, trans: str, diag: str,
                alpha: bool) -> str:
    code = {"L": 76, "R": 82, "U": 85, "N": 78, "T": 84, "C": 67}
    a_shape = f"{t}[{','.join(map(str, a_dims))}]"
    b_shape = f"{t}[{','.join(map(str, b_dims))}]"
    extra = f", s" if alpha else ""
    param = f"\n  s = {t}[] parameter(2)" if alpha else ""
    return f"""HloModule trsm
ENTRY e {{
  a = {a_shape} parameter(0)
  b = {b_shape} parameter(1){param}
  ROOT x = {b_shape} custom-call(a, b{extra}), custom_call_target="lapack_{LETTERS[t]}trsm_ffi",
      api_version=API_VERSION_TYPED_FFI,
      backend_config={{diag = {code[diag]} : ui8, side = {code[side]} : ui8, trans_x = {code[trans]} : ui8, uplo = {code[uplo]} : ui8}}
}}"""


@pytest.mark.parametrize("t", sorted(LETTERS))
@pytest.mark.parametrize("side", ["L", "R"])
@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("trans", ["N", "T", "C"])
@pytest.mark.parametrize("diag", ["N", "U"])
def test_trsm_runs_as_a_blas_call(t, side, uplo, trans, diag):
    a_dims, b_dims = ((2, 5, 5), (2, 5, 3)) if side == "L" else ((2, 3, 3), (2, 5, 3))
    text = trsm_module(t, a_dims, b_dims, side, uplo, trans, diag, alpha=(trans == "T"))
    inputs = random_inputs(text)
    n = a_dims[-1]
    inputs[0] = inputs[0] + 4 * np.eye(n, dtype=inputs[0].dtype)     # (well conditioned)
    (x,) = run_natively(text, inputs)
    # and it solves the system
    a = np.tril(inputs[0]) if uplo == "L" else np.triu(inputs[0])
    if diag == "U":
        a[..., range(n), range(n)] = 1
    op = {"N": a, "T": np.swapaxes(a, -1, -2), "C": np.swapaxes(a, -1, -2).conj()}[trans]
    rhs = inputs[1] * (inputs[2] if len(inputs) > 2 else 1)
    lhs = op @ x if side == "L" else x @ op
    np.testing.assert_allclose(lhs, rhs, rtol=1e-3, atol=1e-3)


def qr_module(t: str, m: int, n: int) -> str:
    k = min(m, n)
    orgqr = {"f32": "sorgqr", "f64": "dorgqr", "c64": "cungqr", "c128": "zungqr"}[t]
    return f"""HloModule qr
ENTRY e {{
  a = {t}[2,{m},{n}] parameter(0)
  g = ({t}[2,{m},{n}], {t}[2,{k}]) custom-call(a), custom_call_target="lapack_{LETTERS[t]}geqrf_ffi"
  r = {t}[2,{m},{n}] get-tuple-element(g), index=0
  tau = {t}[2,{k}] get-tuple-element(g), index=1
  q = {t}[2,{m},{n}] custom-call(r, tau), custom_call_target="lapack_{orgqr}_ffi"
  ROOT o = ({t}[2,{m},{n}], {t}[2,{k}], {t}[2,{m},{n}]) tuple(r, tau, q)
}}"""


@pytest.mark.parametrize("t", sorted(LETTERS))
@pytest.mark.parametrize("m, n", [(5, 3), (4, 4)])
def test_qr_runs_as_lapack_calls(t, m, n):
    text = qr_module(t, m, n)
    (a,) = random_inputs(text)
    r, tau, q = run_natively(text, [a])
    tol = 1e-4 if t in ("f32", "c64") else 1e-10
    for b in range(2):
        np.testing.assert_allclose(q[b] @ np.triu(r[b])[:n], a[b], rtol=tol, atol=tol)
        np.testing.assert_allclose(q[b].conj().T @ q[b], np.eye(n), rtol=tol, atol=tol)


def test_geqrf_rule_is_scipys_lapack():
    scipy_linalg = pytest.importorskip("scipy.linalg")
    text = qr_module("f64", 5, 3)
    (a,) = random_inputs(text)
    r, tau, _ = flatten(evaluate(parse_hlo(text), [a]))
    raw, want_tau = scipy_linalg.qr(a[0], mode="raw")[0]
    np.testing.assert_allclose(r[0], raw, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(tau[0], want_tau, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("t, real", [("f32", "f32"), ("f64", "f64"), ("c64", "f32"), ("c128", "f64")])
@pytest.mark.parametrize("uplo", [76, 85])
def test_eigh_runs_as_a_lapack_call(t, real, uplo):
    """Eigenvalues as the evaluator's; eigenvectors are LAPACK's syevd / heevd called as XLA
    calls it (the evaluator's come from NumPy's eigh, whose call of the same routine picks
    other signs / phases for some matrices): equal up to one unit factor per column."""
    target = {"f32": "ssyevd", "f64": "dsyevd", "c64": "cheevd", "c128": "zheevd"}[t]
    text = f"""HloModule eigh
ENTRY e {{
  a = {t}[3,5,5] parameter(0)
  ROOT h = ({t}[3,5,5], {real}[3,5], s32[3]) custom-call(a), custom_call_target="lapack_{target}_ffi",
      backend_config={{mode = 86 : ui8, uplo = {uplo} : ui8}}
}}"""
    (a,) = random_inputs(text)
    executable = compile_module(parse_hlo(text), "cpu").executable
    assert not {**executable.native.interpreted, **executable.native.interpreted_ops}
    vectors, values, info = executable.run([a])
    want_vectors, want_values, want_info = flatten(evaluate(parse_hlo(text), [a]))
    ok, detail = compare_arrays(values, want_values)
    assert ok, detail
    assert np.array_equal(info, want_info) and not info.any()
    tol = 1e-3 if t in ("f32", "c64") else 1e-9
    phase = np.sum(want_vectors.conj() * vectors, axis=-2, keepdims=True)     # <v_evaluator, v>
    np.testing.assert_allclose(np.abs(phase), 1, rtol=tol, atol=tol)
    np.testing.assert_allclose(vectors, want_vectors * phase, rtol=tol, atol=tol)
    # and they are eigenvectors of the Hermitian matrix the uplo triangle describes
    tri = np.tril(a) if uplo == 76 else np.triu(a)
    herm = tri + np.swapaxes(tri, -1, -2).conj()
    herm[..., range(5), range(5)] = np.diagonal(tri, axis1=-2, axis2=-1).real
    np.testing.assert_allclose(herm @ vectors, vectors * values[..., None, :], rtol=tol, atol=tol)
    assert np.all(np.diff(values, axis=-1) >= 0)
