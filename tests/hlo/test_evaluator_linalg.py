"""dot, convolution, fft and the LAPACK Cholesky custom call."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from nbxla.errors import EvaluationError, HloParseError
from nbxla.hlo import Builder, Shape, TupleShape, shape_of
from nbxla.hlo.attributes import ConvDimensionNumbers, RawAttr, Window, WindowDim
from nbxla.hlo.evaluator import evaluate
from nbxla.hlo.parser import parse_hlo
from nbxla.hlo.printer import print_module
from nbxla.hlo.shape_inference import window_output_size

F32 = np.float32


def dot(a, b, result_type=None, **dims):
    bld = Builder("dot")
    pa, pb = bld.parameter(shape_of(a)), bld.parameter(shape_of(b))
    shape = Shape(result_type, ()) if result_type else None
    bld.op("dot", pa, pb, shape=shape, **dims)
    return evaluate(bld.build(), [a, b])


def test_matmul_vecmat_matvec():
    rng = np.random.default_rng(0)
    a, b, v = rng.standard_normal((3, 4)), rng.standard_normal((4, 5)), rng.standard_normal(4)
    np.testing.assert_allclose(dot(a, b, lhs_contracting_dims=(1,), rhs_contracting_dims=(0,)), a @ b)
    np.testing.assert_allclose(dot(v, b, lhs_contracting_dims=(0,), rhs_contracting_dims=(0,)), v @ b)
    np.testing.assert_allclose(dot(a, v, lhs_contracting_dims=(1,), rhs_contracting_dims=(0,)), a @ v)
    outer = dot(v, v)  # no contracting dims: an outer product
    np.testing.assert_allclose(outer, np.outer(v, v))
    empty = dot(np.zeros((2, 0)), np.zeros((0, 3)), lhs_contracting_dims=(1,), rhs_contracting_dims=(0,))
    assert empty.shape == (2, 3) and not empty.any()


@st.composite
def dot_cases(draw):
    nb, nc, nfa, nfb = (draw(st.integers(0, 2)) for _ in range(4))
    sizes = lambda n: [draw(st.integers(0, 3)) for _ in range(n)]
    batch, contract, fa, fb = sizes(nb), sizes(nc), sizes(nfa), sizes(nfb)
    a_roles = [("b", i) for i in range(nb)] + [("c", i) for i in range(nc)] + [("f", i) for i in range(nfa)]
    b_roles = [("b", i) for i in range(nb)] + [("c", i) for i in range(nc)] + [("f", i) for i in range(nfb)]
    a_roles, b_roles = draw(st.permutations(a_roles)), draw(st.permutations(b_roles))
    size = {"b": batch, "c": contract}
    a_shape = [size[r][i] if r in size else fa[i] for r, i in a_roles]
    b_shape = [size[r][i] if r in size else fb[i] for r, i in b_roles]
    dtype = draw(st.sampled_from([np.int8, np.int32, np.uint16, np.float64, np.bool_, np.complex128]))
    rng = np.random.default_rng(draw(st.integers(0, 1000)))
    a = rng.integers(-100, 100, a_shape).astype(dtype)
    b = rng.integers(-100, 100, b_shape).astype(dtype)
    find = lambda roles, r: tuple(roles.index((r, i)) for i in range(len(size[r])))
    dims = dict(lhs_batch_dims=find(a_roles, "b"), rhs_batch_dims=find(b_roles, "b"),
                lhs_contracting_dims=find(a_roles, "c"), rhs_contracting_dims=find(b_roles, "c"))
    return a, b, dims


def einsum_reference(a, b, lhs_batch_dims, rhs_batch_dims, lhs_contracting_dims, rhs_contracting_dims):
    letters = iter("abcdefghijklmnop")
    la, lb = [None] * a.ndim, [None] * b.ndim
    for i, j in zip(lhs_batch_dims + lhs_contracting_dims, rhs_batch_dims + rhs_contracting_dims):
        la[i] = lb[j] = next(letters)
    la = [c or next(letters) for c in la]
    lb = [c or next(letters) for c in lb]
    out = [la[i] for i in lhs_batch_dims] + [c for i, c in enumerate(la) if i not in lhs_batch_dims + lhs_contracting_dims] \
        + [c for i, c in enumerate(lb) if i not in rhs_batch_dims + rhs_contracting_dims]
    wide = {"b": np.int64, "i": np.int64, "u": np.int64}.get(a.dtype.kind, a.dtype)
    r = np.einsum(f"{''.join(la)},{''.join(lb)}->{''.join(out)}", a.astype(wide), b.astype(wide))
    return (r != 0) if a.dtype == np.bool_ else r.astype(a.dtype)  # ints wrap, pred is or-of-ands


@given(dot_cases())
@settings(max_examples=120, deadline=None)
def test_dot_matches_einsum(case):
    a, b, dims = case
    got = dot(a, b, **dims)
    want = einsum_reference(a, b, **dims)
    assert got.dtype == a.dtype and got.shape == want.shape
    assert np.array_equal(got, want)


def test_dot_preferred_element_type_converts_operands_first():
    a = np.array([[100, 100]], np.int8)
    b = np.array([[100], [100]], np.int8)
    assert dot(a, b, "s32", lhs_contracting_dims=(1,), rhs_contracting_dims=(0,)).tolist() == [[20000]]
    assert dot(a, b, lhs_contracting_dims=(1,), rhs_contracting_dims=(0,)).tolist() == [[20000 % 256]]
    h = np.full((1, 4096), 1, np.float16)
    got = dot(h, h.T.copy(), lhs_contracting_dims=(1,), rhs_contracting_dims=(0,))
    assert got.dtype == np.float16 and got[0, 0] == 4096  # accumulated in f32, not f16 (would stop at 2048)


# --- convolution ------------------------------------------------------------------------------

def naive_conv(x, w, window, fgc=1, bgc=1):
    """Canonical layouts: x (N, C, S...), w (O, I, K...) -> (N // bgc, O, out...)."""
    n, c = x.shape[:2]
    o, i = w.shape[:2]
    out_sp = [window_output_size(s, wd) for s, wd in zip(x.shape[2:], window.dims)]
    out = np.zeros((n // bgc, o, *out_sp), np.int64)
    for b_, oo, *pos in np.ndindex(*out.shape):
        g = oo // (o // fgc)
        bg = oo // (o // bgc)
        for ii in range(i):
            for k in np.ndindex(*w.shape[2:]):
                src = []
                for p, kk, wd, size in zip(pos, k, window.dims, w.shape[2:]):
                    q = p * wd.stride + kk * wd.window_dilation - wd.pad_low
                    if q % wd.base_dilation:
                        break
                    src.append(q // wd.base_dilation)
                else:
                    if all(0 <= s < n_ for s, n_ in zip(src, x.shape[2:])):
                        kk_ = tuple(size - 1 - kk if wd.reversal else kk
                                    for kk, wd, size in zip(k, window.dims, w.shape[2:]))
                        out[(b_, oo, *pos)] += int(x[(bg * (n // bgc) + b_, g * i + ii, *src)]) * int(w[(oo, ii, *kk_)])
    return out


def conv(x, w, dn, window, result_type=None, **attrs):
    b = Builder("conv")
    px, pw = b.parameter(shape_of(x)), b.parameter(shape_of(w))
    b.op("convolution", px, pw, dim_labels=dn, window=window,
         shape=Shape(result_type, ()) if result_type else None, **attrs)
    return evaluate(b.build(), [x, w])


@st.composite
def conv_cases(draw):
    nsp = draw(st.integers(1, 2))
    groups = draw(st.integers(1, 2))
    batch_groups = 1 if groups > 1 else draw(st.integers(1, 2))
    n = batch_groups * draw(st.integers(1, 2))
    i = draw(st.integers(1, 2))
    o = groups * batch_groups * draw(st.integers(1, 2))
    spatial = [draw(st.integers(1, 5)) for _ in range(nsp)]
    ksize = [draw(st.integers(1, 3)) for _ in range(nsp)]
    dims = tuple(WindowDim(k, stride=draw(st.integers(1, 2)), pad_low=draw(st.integers(-1, 2)),
                           pad_high=draw(st.integers(-1, 2)), base_dilation=draw(st.integers(1, 2)),
                           window_dilation=draw(st.integers(1, 2)), reversal=draw(st.booleans()))
                 for k in ksize)
    window = Window(dims)
    rng = np.random.default_rng(draw(st.integers(0, 10 ** 6)))
    xc = rng.integers(-5, 5, (n, i * groups, *spatial)).astype(np.int32)
    wc = rng.integers(-5, 5, (o, i, *ksize)).astype(np.int32)
    rank = nsp + 2
    pin, pk, pout = (draw(st.permutations(range(rank))) for _ in range(3))
    dn = ConvDimensionNumbers(pin.index(0), pin.index(1), tuple(pin.index(2 + s) for s in range(nsp)),
                              pk.index(1), pk.index(0), tuple(pk.index(2 + s) for s in range(nsp)),
                              pout.index(0), pout.index(1), tuple(pout.index(2 + s) for s in range(nsp)))
    return xc, wc, window, groups, batch_groups, (pin, pk, pout), dn


@given(conv_cases())
@settings(max_examples=120, deadline=None)
def test_convolution_matches_naive_loop(case):
    xc, wc, window, groups, batch_groups, (pin, pk, pout), dn = case
    got = conv(np.transpose(xc, pin), np.transpose(wc, pk), dn, window,
               feature_group_count=groups, batch_group_count=batch_groups)
    want = np.transpose(naive_conv(xc, wc, window, groups, batch_groups), pout).astype(np.int32)
    assert got.dtype == np.int32 and np.array_equal(got, want)


def test_conv2d_nhwc_float_against_direct_sum():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 6, 6, 3)).astype(F32)
    w = rng.standard_normal((3, 3, 3, 4)).astype(F32)
    dn = ConvDimensionNumbers.from_text("b01f_01io->b01f")
    got = conv(x, w, dn, Window((WindowDim(3, pad_low=1, pad_high=1), WindowDim(3, pad_low=1, pad_high=1))))
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    want = np.zeros((2, 6, 6, 4))
    for r in range(6):
        for c in range(6):
            want[:, r, c, :] = np.einsum("nhwi,hwio->no", xp[:, r:r + 3, c:c + 3, :], w)
    assert got.dtype == F32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_convolution_without_window_attribute_is_valid_conv():
    x = np.arange(5, dtype=F32).reshape(1, 1, 5)
    w = np.array([1, 0, -1], F32).reshape(1, 1, 3)
    b = Builder("conv")
    px, pw = b.parameter(shape_of(x)), b.parameter(shape_of(w))
    b.op("convolution", px, pw, dim_labels=ConvDimensionNumbers.from_text("bf0_oi0->bf0"))
    assert evaluate(b.build(), [x, w]).tolist() == [[[-2, -2, -2]]]


# --- Cholesky (lapack_spotrf_ffi / lapack_dpotrf_ffi) ------------------------------------------

def potrf(a, uplo=76):
    t = "f32" if a.dtype == F32 else "f64"
    b = Builder("chol")
    p = b.parameter(shape_of(a))
    b.op("custom-call", p, shape=TupleShape((Shape(t, a.shape, None), Shape("s32", a.shape[:-2]))),
         custom_call_target="lapack_spotrf_ffi" if t == "f32" else "lapack_dpotrf_ffi",
         backend_config=RawAttr(f"{{uplo = {uplo} : ui8}}"))
    return evaluate(b.build(), [a])


def spd(n, batch=(), dtype=np.float64, seed=0):
    m = np.random.default_rng(seed).standard_normal((*batch, n, n))
    return (m @ np.swapaxes(m, -1, -2) + n * np.eye(n)).astype(dtype)


def test_cholesky_lower_keeps_upper_triangle_of_input():
    a = spd(5)
    a_marked = a + np.triu(np.full((5, 5), 100.0), 1)  # the upper triangle is not read
    factor, info = potrf(a_marked)
    assert info == 0 and info.dtype == np.int32
    low = np.tril(factor)
    np.testing.assert_allclose(low @ low.T, a, rtol=1e-12)
    assert np.array_equal(np.triu(factor, 1), np.triu(a_marked, 1))


def test_cholesky_upper_and_batched_f32():
    a = spd(4, batch=(2, 3), dtype=F32)
    a_marked = a + np.tril(np.full((4, 4), 100.0, F32), -1)  # the lower triangle is not read
    factor, info = potrf(a_marked, uplo=85)
    assert factor.dtype == F32 and info.shape == (2, 3) and not info.any()
    up = np.triu(factor)
    np.testing.assert_allclose(np.swapaxes(up, -1, -2) @ up, a, rtol=1e-4)
    assert np.array_equal(np.tril(factor, -1), np.tril(a_marked, -1))


def test_cholesky_failure_reports_info_and_nan():
    a = spd(4)
    a[2, 2] = -50.0  # leading minor of order 3 is not positive definite
    factor, info = potrf(a)
    assert info == 3 and np.isnan(factor).all()


def test_cholesky_rejects_bad_uplo_and_dtype():
    with pytest.raises(EvaluationError, match="uplo"):
        potrf(spd(2), uplo=99)
    b = Builder("chol")
    p = b.parameter(Shape("f64", (2, 2)))
    b.op("custom-call", p, shape=TupleShape((Shape("f64", (2, 2)), Shape("s32"))), custom_call_target="lapack_spotrf_ffi")
    with pytest.raises(EvaluationError, match="lapack_spotrf_ffi needs square float32"):
        evaluate(b.build(), [spd(2)])


FFT_TEXT = """
HloModule fft
ENTRY %main (x: f32[3,4,8]) -> (c64[3,4,8], c64[3,4,8], c64[3,4,5], f32[3,4,8]) {
  %x = f32[3,4,8]{2,1,0} parameter(0)
  %c = c64[3,4,8]{2,1,0} convert(%x)
  %f = c64[3,4,8]{2,1,0} fft(%c), fft_type=FFT, fft_length={4,8}
  %i = c64[3,4,8]{2,1,0} fft(%f), fft_type=IFFT, fft_length={8}
  %r = c64[3,4,5]{2,1,0} fft(%x), fft_type=RFFT, fft_length={8}
  %ir = f32[3,4,8]{2,1,0} fft(%r), fft_type=IRFFT, fft_length={8}
  ROOT %t = (c64[3,4,8], c64[3,4,8], c64[3,4,5], f32[3,4,8]) tuple(%f, %i, %r, %ir)
}"""


def test_fft_types_match_numpy_and_roundtrip():
    module = parse_hlo(FFT_TEXT)
    assert print_module(parse_hlo(print_module(module))) == print_module(module)
    x = np.random.default_rng(0).standard_normal((3, 4, 8)).astype(F32)
    f, i, r, ir = evaluate(module, [x])
    assert f.dtype == np.complex64 and np.allclose(f, np.fft.fft2(x), atol=1e-4)
    assert np.allclose(i, np.fft.ifft(np.fft.fft2(x), axis=-1), atol=1e-5)
    assert np.allclose(r, np.fft.rfft(x), atol=1e-5) and ir.dtype == F32 and np.allclose(ir, x, atol=1e-5)


def test_fft_shape_errors_say_what_the_type_needs():
    bad = FFT_TEXT.replace("fft_type=RFFT, fft_length={8}", "fft_type=RFFT, fft_length={6}")
    with pytest.raises(HloParseError, match=r"RFFT takes f32/f64 operands ending in \[6\]"):
        parse_hlo(bad)
