"""Accuracy, special values and vectorization of the branch-free transcendentals.

Kernels ``out[i] = f(x[i] [, y[i]])`` are built directly from ``nbxla.codegen.transcendentals``
and compiled at O3 for the host (the same pipeline as ``nbxla.codegen.cpu``); a few run through
``nbxla.jit`` / ``compile_kernels`` to check the wiring into the elemental emitter.  f32 results
are compared with a float64 reference, f64 results with an 80-bit long double reference.
"""

from __future__ import annotations

import ctypes
import math

import numpy as np
import pytest
from llvmlite import ir

from nbxla.codegen import transcendentals as T

F32_ULP_BOUND = 4.0
F64_ULP_BOUND = 4.0

_UNARY = {
    "exp": (T.emit_exp, np.exp), "expm1": (T.emit_expm1, np.expm1),
    "log": (T.emit_log, np.log), "log1p": (T.emit_log1p, np.log1p),
    "tanh": (T.emit_tanh, np.tanh), "sin": (T.emit_sin, np.sin), "cos": (T.emit_cos, np.cos),
    "tan": (T.emit_tan, np.tan),
    "logistic": (T.emit_logistic, lambda x: 1 / (1 + np.exp(-x))),
    "erf": (T.emit_erf, None),
}
_BINARY = {"pow": T.emit_pow, "atan2": T.emit_atan2}
# the two outputs of emit_sincos, as kernels of their own
_SINCOS = {"sincos_sin": 0, "sincos_cos": 1}
# the Cody-Waite forms, valid below T.BOUNDED_TRIG_LIMIT (kernels check their arguments)
_BOUNDED_TRIG = {f"{name}_bounded": (lambda b, x, f=emit: f(b, x, bounded=True))
                 for name, emit in (("sin", T.emit_sin), ("cos", T.emit_cos), ("tan", T.emit_tan))}
_LLVM = {np.float32: ir.FloatType(), np.float64: ir.DoubleType(), np.float16: ir.HalfType()}
_kernels: dict = {}


def _compile(dtype):
    """One module with a kernel per function for ``dtype``: (x*, [y*,] out*, n)."""
    key = np.dtype(dtype).type
    if key in _kernels:
        return _kernels[key]
    import llvmlite.binding as llvm
    from nbxla.codegen.cpu import _lock, _new_target_machine, host_target_machine
    ty = _LLVM[key]
    mod = ir.Module("transcendentals_test")
    mod.triple = llvm.get_process_triple()
    i64 = ir.IntType(64)
    names = list(_UNARY) + list(_BINARY) + list(_SINCOS) + list(_BOUNDED_TRIG)
    for name in names:
        nargs = 2 if name in _BINARY else 1
        fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [ty.as_pointer()] * (nargs + 1) + [i64]),
                         "k_" + name)
        for a in fn.args[:-1]:
            a.add_attribute("noalias")
        entry, loop, done = fn.append_basic_block(), fn.append_basic_block(), fn.append_basic_block()
        b = ir.IRBuilder(entry)
        n = fn.args[-1]
        b.cbranch(b.icmp_signed(">", n, ir.Constant(i64, 0)), loop, done)
        b.position_at_end(loop)
        i = b.phi(i64)
        i.add_incoming(ir.Constant(i64, 0), entry)
        args = [b.load(b.gep(fn.args[k], [i])) for k in range(nargs)]
        if name in _BINARY:
            r = _BINARY[name](b, *args)
        elif name in _SINCOS:
            r = T.emit_sincos(b, *args)[_SINCOS[name]]
        elif name in _BOUNDED_TRIG:
            r = _BOUNDED_TRIG[name](b, *args)
        else:
            r = _UNARY[name][0](b, *args)
        b.store(r, b.gep(fn.args[nargs], [i]))
        i1 = b.add(i, ir.Constant(i64, 1))
        i.add_incoming(i1, b.block)
        b.cbranch(b.icmp_signed("<", i1, n), loop, done)
        b.position_at_end(done)
        b.ret_void()
    with _lock:
        tm = host_target_machine()
        mod.data_layout = str(tm.target_data)
        m = llvm.parse_assembly(str(mod))
        m.verify()
        pto = llvm.create_pipeline_tuning_options(speed_level=3)
        pto.loop_vectorization = True
        pto.slp_vectorization = True
        pb = llvm.create_pass_builder(tm, pto)
        pb.getModulePassManager().run(m, pb)
        asm = tm.emit_assembly(m)
        engine = llvm.create_mcjit_compiler(m, _new_target_machine())
        engine.finalize_object()
    fns = {}
    for name in names:
        nargs = 2 if name in _BINARY else 1
        proto = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * (nargs + 1)), ctypes.c_int64)
        fns[name] = proto(engine.get_function_address("k_" + name))
    _kernels[key] = (fns, engine, asm)
    return _kernels[key]


def run(name: str, *arrays) -> np.ndarray:
    dtype = arrays[0].dtype
    fns, _, _ = _compile(dtype.type)
    arrays = [np.ascontiguousarray(a, dtype=dtype) for a in arrays]
    out = np.empty_like(arrays[0])
    fns[name](*[a.ctypes.data for a in arrays], out.ctypes.data, out.size)
    return out


# ---- references and ulp error -----------------------------------------------------------------

def _erf_ref(x):
    return np.array([math.erf(v) for v in np.asarray(x, dtype=np.float64).ravel()])


def reference(name, *args):
    """float64 reference for f32 inputs, long double for f64 inputs."""
    wide = np.longdouble if args[0].dtype == np.float64 else np.float64
    a = [np.asarray(v, dtype=wide) for v in args]
    with np.errstate(all="ignore"):
        if name == "pow":
            return np.power(a[0], a[1])
        if name == "atan2":
            return np.arctan2(a[0], a[1])
        if name == "erf":
            return _erf_ref(args[0]).astype(wide)
        if name == "logistic":
            x = a[0]
            return np.where(x >= 0, 1 / (1 + np.exp(-x)), np.exp(x) / (1 + np.exp(x)))
        return _UNARY[name][1](a[0])


def ulp_error(got: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """|got - ref| in ulps of got's type at ref (0 where both are the same non-finite)."""
    info = np.finfo(got.dtype)
    mant = info.nmant
    ref = np.asarray(ref)
    with np.errstate(all="ignore"):
        _, e = np.frexp(np.abs(ref))
        ulp = np.ldexp(np.ones_like(ref), np.maximum(e - 1 - mant, info.minexp - mant))
        err = np.abs(got.astype(ref.dtype) - ref) / ulp
    same = (got.astype(ref.dtype) == ref) | (np.isnan(got) & np.isnan(ref))
    err = np.where(same, 0.0, err)
    # a finite reference beyond the largest finite value rounds to inf: that is right
    overflow = np.isinf(got) & (np.abs(ref) >= info.max) & (np.sign(got) == np.sign(ref))
    return np.where(overflow, 0.0, np.nan_to_num(err, nan=np.inf, posinf=np.inf))


# ---- inputs -----------------------------------------------------------------------------------

def _spread(rng, dtype, n, lo_exp, hi_exp, signed=True):
    """Values whose magnitudes are spread uniformly over binades [lo_exp, hi_exp)."""
    e = rng.uniform(lo_exp, hi_exp, n)
    v = np.exp2(e)
    if signed:
        v *= rng.choice([-1.0, 1.0], n)
    return v.astype(dtype)


_DOMAINS = {   # (lo binade, hi binade, signed, extra uniform range)
    "exp": (-30, 10, True, (-110, 90)), "expm1": (-30, 10, True, (-30, 90)),
    "log": (-149, 128, False, (0, 4)), "log1p": (-30, 128, False, (-1, 4)),
    "tanh": (-30, 6, True, (-12, 12)), "logistic": (-30, 7, True, (-110, 100)),
    "erf": (-30, 3, True, (-6, 6)), "sin": (-30, 128, True, (-100, 100)),
    "cos": (-30, 128, True, (-100, 100)), "tan": (-30, 128, True, (-100, 100)),
}
_DOMAINS64 = {"exp": (-60, 10, True, (-746, 710)), "expm1": (-60, 10, True, (-40, 710)),
              "log": (-1074, 1024, False, (0, 4)), "log1p": (-60, 1024, False, (-1, 4)),
              "tanh": (-60, 6, True, (-22, 22)), "logistic": (-60, 10, True, (-750, 750)),
              "erf": (-60, 3, True, (-7, 7)), "sin": (-60, 1024, True, (-100, 100)),
              "cos": (-60, 1024, True, (-100, 100)), "tan": (-60, 1024, True, (-100, 100))}


def samples(name, dtype, n, seed=0):
    rng = np.random.default_rng(seed)
    lo, hi, signed, (ulo, uhi) = (_DOMAINS if dtype == np.float32 else _DOMAINS64)[name]
    if dtype == np.float32 and name == "log":
        lo = -149
    with np.errstate(over="ignore"):
        spread = _spread(rng, dtype, n // 2, lo, hi, signed)
    parts = [spread[np.isfinite(spread)],
             rng.uniform(ulo, uhi, n // 2).astype(dtype)]
    if dtype == np.float32:     # every f32 exponent: raw bit patterns
        bits = rng.integers(0, 2 ** 32, n // 4, dtype=np.uint64).astype(np.uint32)
        raw = bits.view(np.float32)
        raw = raw[np.isfinite(raw)]
        parts.append(raw)
    return np.concatenate(parts)


def pow_samples(dtype, n, seed=1):
    rng = np.random.default_rng(seed)
    x = _spread(rng, np.float64, n, -20, 20, False)
    y = rng.uniform(-1, 1, n) * rng.choice([1, 4, 30, 100], n)
    near1 = 1 + rng.uniform(-1e-3, 1e-3, n // 4)
    ybig = rng.uniform(-1e4, 1e4, n // 4)
    xi = -_spread(rng, np.float64, n // 4, -3, 3, False)        # negative x, integer y
    yi = rng.integers(-30, 30, n // 4).astype(np.float64)
    return (np.concatenate([x, near1, xi]).astype(dtype), np.concatenate([y, ybig, yi]).astype(dtype))


def atan2_samples(dtype, n, seed=2):
    """(y, x): magnitudes over many binades (ratios from tiny to huge), similar magnitudes
    (results near every k/4 centre and near pi/4), and the axes and special values."""
    rng = np.random.default_rng(seed)
    hi = 120 if dtype == np.float32 else 1000
    y, x = _spread(rng, np.float64, n, -hi, hi), _spread(rng, np.float64, n, -hi, hi)
    xs = _spread(rng, np.float64, n, -3, 3)
    ys = xs * rng.uniform(-3, 3, n)
    special = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-30, -1e-30])
    sy, sx = (a.ravel() for a in np.meshgrid(special, special))
    with np.errstate(over="ignore"):
        return np.concatenate([y, ys, sy]).astype(dtype), np.concatenate([x, xs, sx]).astype(dtype)


def max_ulp(name, dtype, n=400_000):
    if name in _BINARY:
        x, y = (pow_samples if name == "pow" else atan2_samples)(dtype, n)
        got = run(name, x, y)
        return ulp_error(got, reference(name, x, y)).max()
    x = samples(name, dtype, n)
    got = run(name, x)
    return ulp_error(got, reference(name, x)).max()


# ---- tests ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(list(_UNARY) + list(_BINARY)))
def test_f32_accuracy(name):
    n = 300_000 if name != "erf" else 100_000
    err = max_ulp(name, np.float32, n)
    assert err <= F32_ULP_BOUND, (name, err)


@pytest.mark.parametrize("name", sorted(list(_UNARY) + list(_BINARY)))
def test_f64_accuracy(name):
    n = 100_000 if name != "erf" else 50_000
    err = max_ulp(name, np.float64, n)
    bound = F64_ULP_BOUND + (1.0 if name == "erf" else 0.0)   # math.erf's own error
    assert err <= bound, (name, err)


def test_f16_through_f32():
    x = np.linspace(-10, 10, 4001).astype(np.float16)
    for name in ("exp", "tanh", "sin", "log1p", "erf"):
        got = run(name, x if name != "log1p" else np.abs(x)).astype(np.float64)
        xx = (x if name != "log1p" else np.abs(x)).astype(np.float64)
        ref = reference(name, xx).astype(np.float16).astype(np.float64)
        err = ulp_error(got.astype(np.float16), ref)
        assert err.max() <= 1, name


_NAN, _INF = float("nan"), float("inf")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_special_values(dtype):
    info = np.finfo(dtype)
    tiny, den = info.tiny, info.smallest_subnormal
    x = np.array([_NAN, _INF, -_INF, 0.0, -0.0, den, -den, tiny, -tiny, 1.0, -1.0,
                  info.max, -info.max], dtype=dtype)

    def check(name, expect):
        got = run(name, x)
        expect = np.array(expect, dtype=dtype)
        ok = ((got == expect) & (np.signbit(got) == np.signbit(expect))) | (np.isnan(got) & np.isnan(expect))
        # finite nonzero results (exp(1), ...): only the accuracy matters
        close = np.isfinite(expect) & (expect != 0) & (np.sign(got) == np.sign(expect))
        with np.errstate(all="ignore"):
            close &= ulp_error(got, reference(name, x)) <= 4
        ok |= close
        assert ok.all(), (name, x[~ok], got[~ok], expect[~ok])

    with np.errstate(all="ignore"):
        rounded = {n: reference(n, x).astype(dtype) for n in _UNARY}
    for name in ("exp", "expm1", "log", "log1p", "tanh", "logistic", "erf"):
        check(name, rounded[name])
    e = rounded["sin"]
    got = run("sin", x)
    assert np.isnan(got[:3]).all() and np.array_equal(got[3:9], x[3:9])
    assert np.signbit(got[4]) and np.isnan(run("cos", x)[:3]).all()
    assert run("cos", x)[3] == 1 and run("cos", x)[4] == 1
    del e


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_exp_limits(dtype):
    """Overflow to inf, gradual underflow (correctly rounded denormals), then 0."""
    info = np.finfo(dtype)
    wide = np.longdouble if dtype == np.float64 else np.float64
    lo = float(np.log(wide(info.smallest_subnormal))) - 2
    hi = float(np.log(wide(info.max))) + 2
    x = np.linspace(lo, hi, 20001).astype(dtype)
    top = np.array(np.log(wide(info.max)), dtype=dtype)
    x = np.concatenate([x, np.nextafter(np.array([top, top]), np.array([-np.inf, np.inf], dtype=dtype))])
    got = run("exp", x)
    ref = np.exp(x.astype(wide))
    err = ulp_error(got, ref)
    assert err.max() <= 1.0
    assert np.isinf(got[-1]) and np.isfinite(got[-2])
    sub = got[(got > 0) & (got < info.tiny)]
    assert sub.size > 100                                   # denormal results, not flushed
    assert got[0] == 0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_log_denormals_and_domain(dtype):
    info = np.finfo(dtype)
    wide = np.longdouble if dtype == np.float64 else np.float64
    den = (np.arange(1, 5000) * info.smallest_subnormal).astype(dtype)
    assert ulp_error(run("log", den), np.log(den.astype(wide))).max() <= 1
    x = np.array([-1e-30, -1.0, -_INF, 0.0, -0.0], dtype=dtype)
    got = run("log", x)
    assert np.isnan(got[:3]).all() and (got[3:] == -np.inf).all()
    x = np.array([-1.0, -1.5, -_INF, -0.0, 1e-30], dtype=dtype)
    got = run("log1p", x)
    assert got[0] == -np.inf and np.isnan(got[1:3]).all()
    assert got[3] == 0 and np.signbit(got[3]) and got[4] == dtype(1e-30)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tanh_logistic_erf_saturation(dtype):
    x = np.array([5, 10, 20, 50, 1e10, -5, -10, -20, -50, -1e10], dtype=dtype)
    wide = np.longdouble if dtype == np.float64 else np.float64
    assert np.array_equal(run("tanh", x), np.tanh(x.astype(wide)).astype(dtype))
    assert np.array_equal(run("erf", x), np.sign(x)) or ulp_error(run("erf", x), _erf_ref(x)).max() <= 1
    x = np.array([-200, -100, -90, -88, 0, 90, 200], dtype=dtype)
    got = run("logistic", x)
    assert ulp_error(got, reference("logistic", x)).max() <= 2
    if dtype == np.float32:
        assert 0 < got[2] < np.finfo(dtype).tiny          # denormal result, no early overflow


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sin_cos_large_arguments(dtype):
    """Payne-Hanek reduction: accurate for every finite argument, including the arguments
    closest to multiples of pi/2."""
    info = np.finfo(dtype)
    rng = np.random.default_rng(5)
    top = np.log2(float(info.max))
    x = (np.exp2(rng.uniform(10, top, 50_000)) * rng.choice([-1, 1], 50_000)).astype(dtype)
    # near multiples of pi/2 (small k: the f64/f32 neighbours of k*pi/2)
    k = np.arange(1, 200_000, dtype=np.float64)
    near = (np.longdouble(k) * np.longdouble(np.pi) / 2).astype(dtype)
    near = np.concatenate([near, np.nextafter(near, dtype(np.inf)), np.nextafter(near, dtype(-np.inf))])
    # the double closest to a multiple of pi/2 (Muller, "Elementary Functions"): |r| ~ 2**-61
    hard = np.array([6381956970095103 * 2.0 ** 797, float.fromhex("0x1.6ac5b262ca1ffp+849"), 1e22],
                    dtype=np.float64)
    x = np.concatenate([x, near, hard.astype(dtype) if dtype == np.float64 else x[:0]])
    for name in ("sin", "cos"):
        err = ulp_error(run(name, x), reference(name, x))
        assert err.max() <= (1 if dtype == np.float32 else 2), (name, x[err.argmax()], err.max())
    err = ulp_error(run("tan", x), reference("tan", x))
    assert err.max() <= (1 if dtype == np.float32 else 3), ("tan", x[err.argmax()], err.max())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_trig_huge_arguments_match_numpy(dtype):
    """No reduction limit: huge finite arguments give NumPy's values, +-inf and NaN give NaN."""
    if dtype == np.float32:
        vals = [1e10, 1e20, 1e30, 3.4e38, float(np.finfo(np.float32).max), 8.5e8, 2.0 ** 64]
    else:
        vals = [1e10, 1e22, 1e100, 1e300, 1.7e308, float(np.finfo(np.float64).max), 2.0 ** 1023]
    x = np.array(vals + [-v for v in vals], dtype=dtype)
    for name in ("sin", "cos", "tan"):
        got = run(name, x)
        assert np.isfinite(got).all(), name
        err = ulp_error(got, reference(name, x))
        assert err.max() <= 2, (name, x[err.argmax()], got[err.argmax()])
        np.testing.assert_allclose(got, getattr(np, name)(x), rtol=4 * np.finfo(dtype).eps, atol=0)
    specials = np.array([np.inf, -np.inf, np.nan, -np.nan], dtype=dtype)
    for name in ("sin", "cos", "tan"):
        assert np.isnan(run(name, specials)).all(), name


def _below_trig_limit(dtype, seed=7):
    """Arguments below the Cody-Waite limit: every binade up to it, uniform ones, and the
    neighbours of multiples of pi/2 up to the limit (the cancellation cases)."""
    rng = np.random.default_rng(seed)
    limit = T.BOUNDED_TRIG_LIMIT
    top = np.log2(limit)
    spread = np.exp2(rng.uniform(-60 if dtype == np.float64 else -30, top, 100_000)) * rng.choice([-1, 1], 100_000)
    uniform = rng.uniform(-limit, limit, 50_000)
    k = np.concatenate([np.arange(1, 100_000), rng.integers(100_000, int(limit * 2 / np.pi), 100_000)])
    near = (np.longdouble(k) * np.longdouble(np.pi) / 2).astype(dtype)
    near = np.concatenate([near, np.nextafter(near, dtype(np.inf)), np.nextafter(near, dtype(-np.inf)), -near])
    x = np.concatenate([spread.astype(dtype), uniform.astype(dtype), near, np.array([0.0, -0.0], dtype)])
    return x[np.abs(x) < limit]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_bounded_trig_accuracy_below_the_limit(dtype):
    """The Cody-Waite forms are as accurate as the Payne-Hanek ones everywhere below the limit,
    the arguments nearest to multiples of pi/2 included, and agree with them closely."""
    x = _below_trig_limit(dtype)
    assert np.abs(x).max() > T.BOUNDED_TRIG_LIMIT / 2
    for name in ("sin", "cos", "tan"):
        got = run(f"{name}_bounded", x)
        err = ulp_error(got, reference(name, x))
        # (f64 sin/cos measured 0.75 ulp over these ~950K arguments: within 1 ulp)
        bound = 1 if dtype == np.float32 else (1 if name != "tan" else 3)
        assert err.max() <= bound, (name, x[err.argmax()], err.max())
        full = run(name, x)
        assert ulp_error(got, full.astype(np.float64 if dtype == np.float32 else np.longdouble)).max() <= 2
    assert np.signbit(run("sin_bounded", np.array([-0.0], dtype)))[0]       # sin(-0) = -0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_jit_trig_on_both_sides_of_the_limit(dtype):
    """A kernel versions its loop by blocks on whether every sin/cos argument is below the
    limit: blocks wholly below, blocks with one argument above (or inf/NaN) and the last
    partial block all give what the full reduction gives (NumPy's values within 2 ulp)."""
    import nbxla
    from nbxla.codegen.trig_guard import BLOCK
    f = nbxla.jit(lambda a, c: np.sin(a - c) * np.cos(c / 2) + np.sin(c))
    rng = np.random.default_rng(11)
    n = 7 * BLOCK + 37
    a = rng.uniform(-4, 4, n).astype(dtype)
    c = rng.uniform(-4, 4, n).astype(dtype)
    limit = T.BOUNDED_TRIG_LIMIT
    a[BLOCK + 5] = dtype(limit)                     # block 1: just at the limit
    c[3 * BLOCK + 100] = dtype(limit * 3.5)         # block 3: far above
    a[4 * BLOCK] = dtype(np.nextafter(dtype(limit), dtype(0)))   # block 4: just below, bounded
    c[5 * BLOCK + 1], a[6 * BLOCK + 2] = np.inf, np.nan            # blocks 5, 6
    c[n - 3] = dtype(-1e30 if dtype == np.float64 else -1e30)     # the partial last block
    got = f(a, c)
    with np.errstate(invalid="ignore"):
        want = f.fn(a, c)                           # NumPy's own formula
    finite = np.isfinite(want)
    assert (~finite).sum() == 2 and np.isnan(got[~finite]).all()
    # (each sin/cos within 2 ulp, then a product and a sum: a few ulps of the result)
    eps = np.finfo(dtype).eps
    np.testing.assert_allclose(got[finite], want[finite], rtol=8 * eps, atol=8 * eps)
    assert "check" in f.last_compilation.stage("llvm_ir")      # (the versioned loop)


def test_the_full_reduction_loop_of_a_versioned_kernel_is_left_scalar():
    """Blocks with an argument above the limit (or not finite) are the cold path: their loop
    (Payne-Hanek's reductions) is not vectorized -- its vector copies were a third of a trig
    kernel's LLVM time -- while the check and the bounded loop are; the values are checked on
    both sides of the limit by test_jit_trig_on_both_sides_of_the_limit."""
    import re
    import nbxla
    f = nbxla.jit(lambda a, c: np.sin(a - c) * np.cos(c / 2) + np.sin(c))
    a = np.linspace(-3, 3, 5000)
    a[7] = 1e30                                     # (one block takes the full loop)
    np.testing.assert_allclose(f(a, a[::-1].copy()), f.fn(a, a[::-1].copy()), rtol=1e-14, atol=1e-14)
    text = f.last_compilation.stage("llvm_ir")
    full_latch = re.search(r"br label %\"?full\.head\"?, !llvm\.loop (!\d+)", text)
    assert full_latch, "the full loop's latch carries loop metadata"
    loop_id = re.search(re.escape(full_latch.group(1)) + r" = [^\n]*", text).group(0)
    hints = re.findall(r"!\d+", loop_id.split("=", 1)[1])
    assert any('"llvm.loop.vectorize.enable", i1 0' in re.search(re.escape(h) + r" = [^\n]*", text).group(0)
               for h in hints)
    optimized = f.last_compilation.stage("llvm_ir_optimized")
    loops = re.findall(r"^(vector\.body\d*|full\.body\d*|bounded\.body\d*|check\.body\d*):", optimized, re.M)
    assert sum(name.startswith("vector.body") for name in loops) == 2, loops    # check, bounded


def test_trig_with_costly_arguments_is_not_versioned():
    """The check recomputes the arguments: a sin of an exp (or of a division) keeps one loop
    with the full reduction."""
    from nbxla.codegen.trig_guard import versioned_trig
    from nbxla.hlo.builder import Builder
    from nbxla.hlo.shapes import Shape
    b = Builder("k")
    x = b.parameter(Shape("f64", (8,)))
    b.op("multiply", b.op("sine", b.op("add", x, x)), b.op("cosine", x))
    assert len(versioned_trig(b.build())) == 2
    b2 = Builder("k2")
    y = b2.parameter(Shape("f64", (8,)))
    b2.op("sine", b2.op("exponential", y))
    comp2 = b2.build()
    assert versioned_trig(comp2) == []


def test_two_over_pi_table():
    """The bits of 2/pi behind the reduction: the well-known leading bits (fdlibm's ipio2
    table, 24 bits a word), and independent of the working precision."""
    from nbxla.codegen import trig_reduction as R
    ipio2 = [0xA2F983, 0x6E4E44, 0x1529FC, 0x2757D1, 0xF534DD, 0xC0DB62, 0x95993C, 0x439041,
             0xFE5163]
    lead = int("".join(f"{w:06x}" for w in ipio2), 16)
    assert R._TWO_OVER_PI_INT >> (R._PH_NBITS - 24 * len(ipio2)) == lead
    more = R._two_over_pi_bits(R._PH_NBITS + 300)
    assert more >> 300 == R._TWO_OVER_PI_INT
    assert R._window(1, 32) == 0xA2F9836E and R._window(-5, 8) == 0xA2F9836E >> 30
    assert R._window(-40, 8) == 0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_atan2_special_values_and_extremes(dtype):
    """Every pair of special and extreme values (signed zeros, denormals, the largest finite
    values, infinities, NaN): NumPy's result with its sign, or within 2.5 ulps; and ratios on
    both sides of tan(pi/8), where the reduction switches to pi/4 + atan((n - d) / (n + d)),
    at magnitudes from denormal to the overflow of n + d."""
    info = np.finfo(dtype)
    wide = np.longdouble if dtype == np.float64 else np.float64
    v = np.array([0.0, -0.0, info.smallest_subnormal, -3 * info.smallest_subnormal, info.tiny, 1.0, -0.5,
                  info.max, -info.max, info.max / 2, _INF, -_INF, _NAN, 1e-30], dtype=dtype)
    y, x = (a.ravel() for a in np.meshgrid(v, v))
    got, want = run("atan2", y, x), np.arctan2(y.astype(wide), x.astype(wide))
    rounded = want.astype(dtype)
    exact = ((got == rounded) & (np.signbit(got) == np.signbit(rounded))) | (np.isnan(got) & np.isnan(want))
    close = (ulp_error(got, want) <= 2.5) & (np.signbit(got) == np.signbit(rounded))
    assert (exact | close).all(), (y[~(exact | close)], x[~(exact | close)], got[~(exact | close)])
    rng = np.random.default_rng(7)
    t8 = np.tan(np.pi / 8)
    ratio = np.concatenate([t8 * (1 + rng.uniform(-1e-6, 1e-6, 20_000)), rng.uniform(0, 1, 20_000)])
    top = 1000 if dtype == np.float64 else 120
    scale = np.exp2(rng.integers(-top - 40, top + 28, ratio.size).astype(np.float64))
    d = (scale * rng.uniform(1, 2, ratio.size)).astype(dtype)
    n = (d.astype(np.float64) * ratio).astype(dtype)
    ok = np.isfinite(d) & (d > 0)
    n, d = n[ok], d[ok]
    for a, b in ((n, d), (d, n), (-n, -d), (d, -n)):
        err = ulp_error(run("atan2", a, b), np.arctan2(a.astype(wide), b.astype(wide)))
        assert err.max() <= (2.5 if dtype == np.float64 else 0.51), err.max()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pow_special_cases(dtype):
    vals = [_NAN, _INF, -_INF, 0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.0, -3.0, 2.5, 1e-30,
            -7.0, 1e30, 1e-45 if dtype == np.float32 else 5e-324]
    x, y = np.meshgrid(np.array(vals, dtype=dtype), np.array(vals, dtype=dtype))
    x, y = x.ravel(), y.ravel()
    got = run("pow", x, y)
    wide = np.float64 if dtype == np.float32 else np.longdouble
    with np.errstate(all="ignore"):
        expect = np.power(x, y)      # NumPy follows C99 pow for the special cases
        exact = np.power(x.astype(wide), y.astype(wide))
    ok = (got == expect) | (np.isnan(got) & np.isnan(expect))
    ok &= (np.signbit(got) == np.signbit(expect)) | np.isnan(got)
    # finite non-special results only need to be accurate
    finite = np.isfinite(expect) & (expect != 0) & np.isfinite(got)
    ok |= finite & (ulp_error(got, exact) <= 1)
    assert ok.all(), list(zip(x[~ok], y[~ok], got[~ok], expect[~ok]))


def test_pow_integer_powers_exact_enough():
    x = np.arange(-20, 21, dtype=np.float32)
    for k in range(-5, 9):
        got = run("pow", x, np.full_like(x, k))
        with np.errstate(all="ignore"):
            ref = np.power(x.astype(np.float64), k)
        assert ulp_error(got, ref).max() <= 0.5 + 1e-9 or k < 0


# ---- wiring and vectorization -----------------------------------------------------------------

def test_kernels_vectorize():
    """Every f32/f64 kernel's loop is vectorized: packed math and no calls at all (no libm)."""
    import re
    for dtype in (np.float32, np.float64):
        _, _, asm = _compile(dtype)
        assert not re.findall(r"\bcall\w*\s+(\S+)", asm)
        for block in re.split(r"\n(?=k_\w+:)", asm)[1:]:
            packed = re.findall(r"\bv?\w+p[sd]\s+.*%[xyz]mm", block)
            assert len(packed) > 10, block.split(":")[0]


def test_jit_exp_plus_one_vectorized():
    import nbxla
    f = nbxla.jit(lambda x: np.exp(x) + 1)
    x = np.linspace(-80, 80, 100_003).astype(np.float32)
    got = f(x)
    assert ulp_error(got, np.exp(x.astype(np.float64)) + 1).max() <= 2
    asm = f.last_compilation.stage("asm")
    assert "expf" not in asm
    assert ("ymm" in asm or "zmm" in asm or "xmm" in asm) and "ps\t" in asm
    packed = [ln for ln in asm.splitlines() if ln.strip().startswith(("vfmadd", "vmulps", "vaddps"))
              and "ps" in ln.split()[0]]
    assert packed


@pytest.mark.parametrize("fn,name", [(np.exp, "exp"), (np.log, "log"), (np.tanh, "tanh"),
                                     (np.sin, "sin"), (np.cos, "cos"), (np.expm1, "expm1"),
                                     (np.log1p, "log1p")])
def test_jit_wiring(fn, name):
    import nbxla
    f = nbxla.jit(lambda x: fn(x) * 2)
    x = samples(name, np.float32, 20_000, seed=3)
    if name in ("log", "log1p"):
        x = np.abs(x)
    got = f(x)
    with np.errstate(all="ignore"):
        ref = reference(name, x) * 2
    assert ulp_error(got, ref).max() <= F32_ULP_BOUND
    asm = f.last_compilation.stage("asm")
    assert f"{name}f" not in asm.replace("expm1", "").replace("log1p", "") or name in ("expm1", "log1p")


def test_compile_kernels_erf_logistic_pow():
    """Opcodes without a NumPy spelling go through the HLO builder and compile_kernels."""
    from nbxla.codegen.cpu import compile_kernels
    from nbxla.hlo.builder import Builder
    from nbxla.hlo.shapes import Shape
    n = 4099
    rng = np.random.default_rng(2)
    x = rng.uniform(-6, 6, n).astype(np.float32)
    y = rng.uniform(-3, 3, n).astype(np.float32)
    kernel_type = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
    for op in ("erf", "logistic", "power"):
        bld = Builder("k")
        p0 = bld.parameter(Shape("f32", (n,)))
        p1 = bld.parameter(Shape("f32", (n,)))
        bld.op(op, p0, p1) if op == "power" else bld.op(op, p0)
        comp = bld.build()
        ck = compile_kernels("m", [("k", comp)])
        assert not ck.unsupported, ck.unsupported
        for libm in ("erff", "expf", "powf"):
            assert libm not in ck.asm
        out = np.empty(n, np.float32)
        xs = np.abs(x) if op == "power" else x
        bufs = (ctypes.c_void_p * 3)(xs.ctypes.data, y.ctypes.data, out.ctypes.data)
        kernel_type(ck.addresses["k"])(ctypes.cast(bufs, ctypes.c_void_p), 0, ck.specs["k"].parallel_extent)
        ref = {"erf": lambda: _erf_ref(x), "logistic": lambda: reference("logistic", x),
               "power": lambda: np.power(xs.astype(np.float64), y.astype(np.float64))}[op]()
        assert ulp_error(out, ref).max() <= F32_ULP_BOUND, op


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sincos_is_sin_and_cos_bit_for_bit(dtype):
    """emit_sincos shares one argument reduction; its values are emit_sin's and emit_cos's."""
    x = np.concatenate([samples("sin", dtype, 100_000),
                        np.array([0.0, -0.0, np.inf, -np.inf, np.nan, np.finfo(dtype).max], dtype)])
    for name, single in (("sincos_sin", "sin"), ("sincos_cos", "cos")):
        got, want = run(name, x), run(single, x)
        same = (got.view(f"u{x.itemsize}") == want.view(f"u{x.itemsize}")) | (np.isnan(got) & np.isnan(want))
        assert same.all(), (name, x[~same][:4])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_jit_trig_in_row_kernels_on_both_sides_of_the_limit(dtype):
    """Broadcasts make a row kernel (rows, then the columns inside): each row's columns are
    versioned the same way; rows with a large or non-finite argument take the full form."""
    import nbxla
    rng = np.random.default_rng(12)
    lat = rng.uniform(-1.5, 1.5, 9).astype(dtype)
    lon = rng.uniform(-3, 3, 1100).astype(dtype)
    lat[4] = dtype(T.BOUNDED_TRIG_LIMIT * 2)       # one row above the limit
    lon[700] = np.inf                               # one column (a block of every row)
    lon[1099] = dtype(-1e30)

    def program(lat, lon):
        return np.sin(lat[:, None]) * np.cos(lon[None, :] - lat[:, None])
    f = nbxla.jit(program)
    got = f(lat, lon)
    with np.errstate(invalid="ignore"):
        want = program(lat, lon)
    finite = np.isfinite(want)
    assert np.isnan(got[~finite]).all() and (~finite).sum() == 9
    eps = np.finfo(dtype).eps
    np.testing.assert_allclose(got[finite], want[finite], rtol=8 * eps, atol=8 * eps)
    assert "check" in f.last_compilation.stage("llvm_ir")
    assert "rows" in f.last_compilation.stage("execution")
