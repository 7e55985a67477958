"""Native code for ops the elemental emitter used to hand to the reference evaluator.

* Complex functions (c64, c128: exp, log, sqrt, rsqrt, log1p, expm1, sin, cos, tan, tanh,
  logistic, power): accuracy in ulps on random arguments against complex long double
  references (the bounds below are the ones ``nbxla/codegen/complex_math.py`` states);
  special values on a grid of parts {0, -0, 1, -1, tiny, huge, inf, -inf, NaN, ...} against
  NumPy (NaN and infinities exactly where NumPy has them, signed zeros as NumPy's, finite
  values against the accurate reference); branch cuts and large/tiny magnitudes written out;
  every fusion native and within tolerance of the evaluator; the CUDA backend's PTX
  assembles and its emulated kernels agree with the CPU's.
* Integer power, total-order compare, f16 cbrt/atan2, f64 -> f16, same-width
  bitcast-convert, reduce-precision, gather with batching dimensions and
  dynamic-(update-)slice with a start vector: bit for bit against the evaluator, and against
  independent references where one is cheap.
"""

from __future__ import annotations

import functools
import math
import warnings

import numpy as np
import pytest

from nbxla.codegen import gpu
from nbxla.hlo import Builder, Module, Shape
from nbxla.hlo.evaluator import evaluate, flatten
from nbxla.hlo.parser import parse_hlo
from nbxla.hlo.shapes import to_numpy_dtype
from nbxla.runtime.executable import build_executable
from nbxla.testing import compare_arrays

from tests.codegen.test_cpu import assert_bitwise, compile_and_run, fusion

COMPLEX = ["c64", "c128"]
LD = np.clongdouble

# name -> (opcode, arity)
FUNCTIONS = {"exp": ("exponential", 1), "log": ("log", 1), "sqrt": ("sqrt", 1), "rsqrt": ("rsqrt", 1),
             "log1p": ("log-plus-one", 1), "expm1": ("exponential-minus-one", 1), "sin": ("sine", 1),
             "cos": ("cosine", 1), "tan": ("tan", 1), "tanh": ("tanh", 1), "logistic": ("logistic", 1),
             "pow": ("power", 2)}

# Max error of each part in ulps of that part, (c64, c128); None: not claimed (the real part
# of expm1 cancels near e**x cos y = 1; logistic and pow are ill-conditioned, see below).
COMPONENT_BOUND = {"exp": (2.5, 2.5), "log": (1, 2), "sqrt": (1, 2.5), "rsqrt": (1, 6.5),
                   "log1p": (1, 2.5), "expm1": (1, None), "sin": (1, 4), "cos": (1, 4),
                   "tan": (1, 6.5), "tanh": (1, 6.5), "logistic": (1, None), "pow": (1, None)}
# Max error of each part in ulps of |f(z)|, divided by 1 + the condition number of f at z.
CONDITIONED_BOUND = {"expm1": 3, "logistic": 4, "pow": 2.5}


def _np_dtype(t):
    return to_numpy_dtype(t)


def _part_info(t):
    return np.finfo(np.float32 if t == "c64" else np.float64)


# ---- references ---------------------------------------------------------------------------------

def _exact_log1p_argument(z):
    """2x + x*x + y*y for each element, exact to long double (Veltkamp split products summed
    with math.fsum): NumPy's own log1p loses all digits where this cancels."""
    x, y = (np.asarray(v, np.float64) for v in (z.real, z.imag))

    def split(v):
        c = 134217729.0 * v
        hi = c - (c - v)
        return hi, v - hi
    (xh, xl), (yh, yl) = split(x), split(y)
    terms = np.stack([2 * x, xh * xh, 2 * xh * xl, xl * xl, yh * yh, 2 * yh * yl, yl * yl], axis=1)
    out = np.empty(len(x), np.longdouble)
    for i, row in enumerate(terms):
        hi = math.fsum(row)
        out[i] = np.longdouble(hi) + np.longdouble(math.fsum(list(row) + [-hi]))
    return out


def _with_parts(re, im):
    out = np.empty(np.shape(re), LD)
    out.real, out.imag = re, im
    return out


def reference(name, a, b=None):
    """The function in complex long double (glibc's csinl, clogl, ...; formulas as NumPy's)."""
    z = np.asarray(a).astype(LD)
    x, y = z.real, z.imag
    with np.errstate(all="ignore"):
        if name == "log1p":
            # log1p of the exact sum; near -1, where log1p is ill-conditioned, log|1 + z|
            # (1 + x is exact there)
            u = _exact_log1p_argument(np.asarray(a))
            direct = (u < -0.75) | (np.maximum(np.abs(x), np.abs(y)) > 2.0 ** 500) | np.isnan(u)
            return _with_parts(np.where(direct, np.log(np.hypot(1 + x, y)), np.log1p(u) / 2), np.arctan2(y, 1 + x))
        if name == "expm1":
            s = np.sin(y / 2)
            return _with_parts(np.expm1(x) * np.cos(y) - 2 * s * s, np.exp(x) * np.sin(y))
        if name == "rsqrt":
            return 1 / np.sqrt(z)
        if name == "logistic":
            return 1 / (1 + np.exp(-z))
        if name == "pow":
            w = np.asarray(b).astype(LD)
            return np.where((z == 1) | (w == 0), LD(1), np.power(z, w))
        return getattr(np, name)(z)


def numpy_result(name, a, b=None):
    """What NumPy (the evaluator's rules) computes."""
    with np.errstate(all="ignore"):
        if name == "pow":
            return np.where((a == 1) | (b == 0), np.ones((), a.dtype), np.power(a, b))
        if name == "rsqrt":
            return np.reciprocal(np.sqrt(a))
        if name == "logistic":
            one = a.dtype.type(1)
            return one / (one + np.exp(-a))
        return getattr(np, name)(a)


def condition_number(name, a, b=None):
    z = np.asarray(a).astype(LD)
    with np.errstate(all="ignore"):
        f = reference(name, a, b)
        if name == "logistic":                      # f' = f (1 - f)
            return np.abs(z) * np.abs(1 - f)
        if name == "pow":                           # w = b log a: d/da ~ |b|, d/db ~ |w|
            w = np.asarray(b).astype(LD)
            return np.abs(w) + np.abs(w * np.log(z))
        if name == "expm1":
            return np.abs(z * np.exp(z) / f)
    raise KeyError(name)


def ulp(v, t):
    info = _part_info(t)
    _, e = np.frexp(np.abs(np.asarray(v, np.longdouble)))
    return np.ldexp(np.ones(np.shape(v), np.longdouble), np.maximum(e - 1 - info.nmant, info.minexp - info.nmant))


def part_errors(got, ref, t, part):
    """(error in ulps of the part, error in ulps of |ref|) of one part, 0 where equal."""
    g, r = getattr(got.astype(LD), part), getattr(ref, part)
    with np.errstate(all="ignore"):
        diff = np.abs(g - r)
        same = (g == r) | (np.isnan(g) & np.isnan(r))
        return np.where(same, 0, diff / ulp(r, t)), np.where(same, 0, diff / ulp(np.abs(ref), t))


# ---- running complex functions ------------------------------------------------------------------

def run_functions(t, names, args_by_name, device="cpu"):
    """Compile one module with a fusion per function (its own parameters) and run it."""
    b = Builder(f"complex_functions_{t}")
    outs, ins = [], []
    for name in names:
        opcode, arity = FUNCTIONS[name]
        args = args_by_name[name]
        params = [b.parameter(Shape(t, a.shape), f"{name}_{k}") for k, a in enumerate(args)]
        outs.append(fusion(b, "f_" + name, params, lambda fb, *ps, opcode=opcode: fb.op(opcode, *ps)))
        ins += list(args)
    module = Module(f"complex_functions_{t}", b.build(b.op("tuple", *outs)))
    executable = build_executable(module, device)
    with np.errstate(all="ignore"):
        got = executable.run(ins)
    return dict(zip(names, got)), executable, module, ins


def _spread(rng, n, lo, hi):
    """Values whose magnitudes are spread uniformly over binades [lo, hi), random signs."""
    return np.exp2(rng.uniform(lo, hi, n)) * rng.choice([-1.0, 1.0], n)


def random_arguments(name, t, n, seed):
    rng = np.random.default_rng(seed)
    wide = t == "c128"
    dt = _np_dtype(t)
    if name == "pow":
        return [(_spread(rng, n, -10, 10) + 1j * _spread(rng, n, -10, 10)).astype(dt),
                (_spread(rng, n, -6, 2.5) + 1j * _spread(rng, n, -6, 2.5)).astype(dt)]
    huge = (-300, 300) if wide else (-40, 40)
    domains = {"exp": ((-20, 9.4 if wide else 6.4), (-20, 10)), "log": (huge, huge), "sqrt": (huge, huge),
               "rsqrt": (huge, huge), "log1p": ((-30, 20), (-30, 20)), "expm1": ((-30, 6), (-30, 6)),
               "sin": ((-20, 10), (-20, 6)), "cos": ((-20, 10), (-20, 6)), "tan": ((-20, 10), (-20, 6)),
               "tanh": ((-20, 6), (-20, 10)), "logistic": ((-10, 5), (-10, 5))}
    (xlo, xhi), (ylo, yhi) = domains[name]
    z = _spread(rng, n, xlo, xhi) + 1j * _spread(rng, n, ylo, yhi)
    m = n // 4
    z[:m] = rng.uniform(-4, 4, m) + 1j * rng.uniform(-4, 4, m)
    circle = (1 + _spread(rng, m, -40, -1)) * np.exp(1j * rng.uniform(-np.pi, np.pi, m))
    if name == "log":                       # near the unit circle: log|z| cancels
        z[m:2 * m] = circle
    if name == "log1p":                     # near |1 + z| = 1
        z[m:2 * m] = circle - 1
    if name == "logistic":                  # around the poles too
        z[m:2 * m] = rng.uniform(-20, 20, m) + 1j * rng.uniform(-20, 20, m)
    return [z.astype(dt)]


@functools.cache
def accuracy_case(t):
    n = 40_000
    args = {name: random_arguments(name, t, n, seed) for seed, name in enumerate(FUNCTIONS)}
    got, executable, module, ins = run_functions(t, list(FUNCTIONS), args)
    return got, args, dict(executable.native.interpreted), module, ins


@pytest.mark.parametrize("name", list(FUNCTIONS))
@pytest.mark.parametrize("t", COMPLEX)
def test_complex_accuracy_on_random_arguments(t, name):
    got_all, args_all, interpreted, _, _ = accuracy_case(t)
    assert interpreted == {}, interpreted
    got, args = got_all[name], args_all[name]
    ref = reference(name, *args)
    finite = np.isfinite(ref) & (np.abs(ref) < _part_info(t).max)
    assert finite.mean() > 0.95
    bound = COMPONENT_BOUND[name][COMPLEX.index(t)]
    for part in ("real", "imag"):
        component, normwise = part_errors(got, ref, t, part)
        if bound is not None:
            worst = np.argmax(np.where(finite, component, 0))
            assert component[finite].max() <= bound, \
                (part, component[worst], args[0][worst], got[worst], ref[worst])
        if name in CONDITIONED_BOUND:
            scaled = normwise / (1 + condition_number(name, *args))
            assert scaled[finite].max() <= CONDITIONED_BOUND[name], (part, scaled[finite].max())


# ---- special values against NumPy ------------------------------------------------------------

def special_grid(t):
    info = _part_info(t)
    parts = np.array([0.0, -0.0, 1.0, -1.0, info.tiny, -info.tiny, info.max, -info.max, np.inf, -np.inf,
                      np.nan, 0.5, -2.0, 100.0, info.smallest_subnormal], info.dtype)
    z = np.empty(len(parts) ** 2, _np_dtype(t))
    z.real, z.imag = np.repeat(parts, len(parts)), np.tile(parts, len(parts))
    return z


@functools.cache
def special_case(t):
    z = special_grid(t)
    a, b = np.repeat(z, len(z)), np.tile(z, len(z))
    args = {name: [a, b] if name == "pow" else [z] for name in FUNCTIONS}
    got, executable, module, ins = run_functions(t, list(FUNCTIONS), args)
    return got, args, dict(executable.native.interpreted), module, ins


def numpy_overflows(name, args):
    """Where NumPy's result is infinite although the exact one is finite and representable
    (log1p of |z| near the largest value: NumPy's hypot(1 + x, y) overflows).  Ours is the
    exact value there, a documented difference."""
    want, ref = numpy_result(name, *args), reference(name, *args)
    with np.errstate(all="ignore"):
        limit = np.finfo(want.real.dtype).max
        infinite = (np.isinf(want.real) | np.isinf(want.imag)) & ~np.isnan(want)
        return infinite & np.isfinite(ref) & (np.abs(ref.real) < limit) & (np.abs(ref.imag) < limit)


def phase_is_noise(name, t, args):
    """pow's elements whose exponent w = b log a has an imaginary part so large that its
    rounding alone moves the phase by more than a radian: only which parts are NaN, infinite
    or zero is defined there, not their signs."""
    if name != "pow":
        return np.zeros(args[0].shape, bool)
    with np.errstate(all="ignore"):
        w = np.asarray(args[1]).astype(LD) * np.log(np.asarray(args[0]).astype(LD))
        return np.abs(w.imag) * _part_info(t).eps > 1


def special_value_problems(name, t, got, args):
    """Indices where ``got`` disagrees with NumPy on a special value: NaN or an infinity
    where NumPy has none (or the reverse), another infinity, a zero of the other sign where
    the exact result is zero; finite values must be close to the accurate reference (where
    that is finite, else to NumPy's value), normwise, or within a few subnormals."""
    want = numpy_result(name, *args)
    ref = reference(name, *args)
    info = _part_info(t)
    slack = 8 * (1 + condition_number(name, *args)) if name in ("pow", "logistic") else 8
    noise = phase_is_noise(name, t, args)
    overflow = numpy_overflows(name, args)
    scale = ulp(np.abs(np.where(np.isfinite(ref), ref, want.astype(LD))), t)
    bad = np.zeros(got.shape, bool)
    with np.errstate(all="ignore"):
        for part in ("real", "imag"):
            g, w, r = (getattr(v, part) for v in (got, want, ref))
            bad |= np.isnan(g) != np.isnan(w)
            bad |= (np.isinf(g) | np.isinf(w)) & np.where(noise, np.isinf(g) != np.isinf(w), g != w)
            exact_zero = (w == 0) & (r == 0)
            bad |= exact_zero & ((g != 0) | ((np.signbit(g) != np.signbit(w)) & ~noise))
            target = np.where(np.isfinite(r), r, w.astype(np.longdouble))
            finite = np.isfinite(w) & ~exact_zero & ~noise
            err = np.abs(g.astype(np.longdouble) - target)
            ok = (err <= slack * scale) | (err <= 4 * float(info.smallest_subnormal))
            ok |= (g == w) & (np.signbit(g) == np.signbit(w))        # NumPy's own value
            bad |= finite & ~ok
            exact = np.abs(g.astype(np.longdouble) - r) <= 8 * scale
            bad = np.where(overflow, ~exact, bad)
    return np.flatnonzero(bad)


@pytest.mark.parametrize("name", list(FUNCTIONS))
@pytest.mark.parametrize("t", COMPLEX)
def test_complex_special_values_follow_numpy(t, name):
    got_all, args_all, interpreted, _, _ = special_case(t)
    assert interpreted == {}, interpreted
    got, args = got_all[name], args_all[name]
    bad = special_value_problems(name, t, got, args)
    examples = [([a[i] for a in args], got[i], numpy_result(name, *[a[i:i + 1] for a in args])[0])
                for i in bad[:6]]
    assert len(bad) == 0, f"{len(bad)} of {got.size} differ: {examples}"


@pytest.mark.parametrize("case", [special_case, accuracy_case], ids=["grid", "random"])
@pytest.mark.parametrize("t", COMPLEX)
def test_complex_functions_native_and_match_the_evaluator(t, case):
    """The CPU backend against the evaluator: NaN and infinities part by part in the same
    places, finite results within the project's one tolerance rule.  Left out: the
    documented differences (NumPy's overflowing log1p, pow's noise phases) and arguments
    where NumPy's own float rounding is amplified past the tolerance (condition number
    times epsilon above 1e-6)."""
    got, args, interpreted, module, ins = case(t)
    assert interpreted == {}, interpreted
    with np.errstate(all="ignore"):
        want = flatten(evaluate(module, ins))
    eps = float(_part_info(t).eps)
    for name, expected in zip(FUNCTIONS, want):
        keep = ~numpy_overflows(name, args[name]) & ~phase_is_noise(name, t, args[name])
        assert keep.all() or name in ("log1p", "pow"), name
        if name in CONDITIONED_BOUND:
            with np.errstate(all="ignore"):
                keep &= ~(condition_number(name, *args[name]) * eps > 1e-6)
        mine, theirs = got[name][keep], expected[keep]
        for part in ("real", "imag"):
            g, w = getattr(mine, part), getattr(theirs, part)
            assert np.array_equal(np.isnan(g), np.isnan(w)), (t, name, part, "NaN positions")
            assert np.array_equal(np.where(np.isinf(w), w, 0), np.where(np.isinf(w), g, 0)), (t, name, part, "inf")
        finite = np.isfinite(theirs)
        ok, detail = compare_arrays(mine[finite], theirs[finite])
        assert ok, f"{t} {name}: {detail}"


def _values(t, pairs):
    out = np.empty(len(pairs), _np_dtype(t))
    out.real, out.imag = [p[0] for p in pairs], [p[1] for p in pairs]
    return out


@pytest.mark.parametrize("t", COMPLEX)
def test_complex_branch_cuts_keep_the_sign_of_zero(t):
    """On the negative real axis the sign of the imaginary zero picks the side of the cut."""
    z = _values(t, [(-1.0, 0.0), (-1.0, -0.0), (-4.0, 0.0), (-4.0, -0.0), (-0.0, 0.0), (0.0, -0.0), (-2.0, -0.0)])
    names = ["log", "sqrt", "rsqrt", "log1p", "pow"]
    args = {n: [z] for n in names}
    args["pow"] = [_values(t, [(-8.0, 0.0), (-8.0, -0.0)]), np.full(2, 1 / 3, _np_dtype(t))]
    got, executable, _, _ = run_functions(t, names, args)
    assert executable.native.interpreted == {}
    log, sqrt, rsqrt, log1p, p = (got[n] for n in names)
    pi = float(np.array(np.pi, _part_info(t).dtype))
    assert log[0] == complex(0, pi) and log[1] == complex(0, -pi)
    assert log[4] == complex(-np.inf, pi) and log[5].real == -np.inf and np.signbit(log[5].imag)
    assert sqrt[2] == 2j and sqrt[3] == -2j and np.signbit(sqrt[3].imag) and not np.signbit(sqrt[2].imag)
    assert rsqrt[2] == -0.5j and rsqrt[3] == 0.5j
    assert log1p[6] == complex(0, -pi) and np.signbit(log1p[6].imag)
    np.testing.assert_allclose(p, [1 + 1.7320508075688772j, 1 - 1.7320508075688772j], rtol=4 * _part_info(t).eps)


@pytest.mark.parametrize("t", COMPLEX)
def test_complex_large_and_tiny_magnitudes(t):
    """Results that are representable although an intermediate (e**x, cosh y, |z|**2) is not."""
    info = _part_info(t)
    big_x = 88.8 if t == "c64" else 709.9              # e**x overflows, e**x cos 0.8 does not
    near_half_pi = float(np.nextafter(info.dtype.type(np.pi / 2), info.dtype.type(0)))   # cos ~ 1e-8 / 6e-17
    tiny, huge = float(info.smallest_subnormal) * 64, float(info.max)
    cases = {
        "exp": [(big_x, 0.8), (big_x, -0.8)],
        "sin": [(tiny, 100.0 if t == "c64" else 740.0), (1.0, 20.0)],
        "cos": [(near_half_pi, 90.0 if t == "c64" else 711.0)],
        "tanh": [(40.0 if t == "c64" else 355.0, 1.0), (-30.0, 2.0)],
        "tan": [(1.0, 40.0 if t == "c64" else 355.0)],
        "log": [(tiny, tiny), (huge, huge), (huge, -tiny)],
        "log1p": [(huge, huge), (tiny, -tiny)],
        "sqrt": [(huge, huge), (tiny, tiny), (-huge, tiny)],
        "rsqrt": [(tiny, tiny), (huge, -huge)],
    }
    args = {name: [_values(t, pairs)] for name, pairs in cases.items()}
    got, executable, _, _ = run_functions(t, list(cases), args)
    assert executable.native.interpreted == {}
    for name, values in got.items():
        ref = reference(name, *args[name])
        for part in ("real", "imag"):
            representable = np.abs(getattr(ref, part)) <= info.max
            assert representable.any() or part == "imag", (name, ref)
            assert np.isfinite(getattr(values, part)[representable]).all(), (name, part, values, ref)
            component, normwise = part_errors(values, ref, t, part)
            assert (np.minimum(component, normwise)[representable] <= 4).all(), (name, part, values, ref)


def assert_parts_agree(got, want, what):
    """Part by part: NaN and infinities in the same places, finite values within the
    project's tolerance relative to |want| (compare_arrays compares a finite part exactly
    when the other part is infinite)."""
    rtol = 1e-5 if got.dtype == np.complex64 else 1e-12
    for part in ("real", "imag"):
        g, w = getattr(got, part), getattr(want, part)
        assert np.array_equal(np.isnan(g), np.isnan(w)), (what, part, "NaN")
        assert np.array_equal(np.where(np.isinf(w), w, 0), np.where(np.isinf(w), g, 0)), (what, part, "inf")
        finite = np.isfinite(w)
        with np.errstate(all="ignore"):
            close = np.abs(g - w) <= rtol * np.maximum(np.abs(want), np.finfo(g.dtype).tiny)
        assert (close | ~finite).all(), (what, part, g[finite & ~close][:4], w[finite & ~close][:4])


# ---- the CUDA backend ---------------------------------------------------------------------------

@pytest.mark.parametrize("t", COMPLEX)
def test_complex_functions_on_the_cuda_backend(t):
    """The same fusions through the NVPTX path: PTX that ptxas accepts (no libm left but the
    device bodies), and emulated kernels that agree with the CPU's."""
    rng = np.random.default_rng(3)
    dt = _np_dtype(t)
    z = np.concatenate([special_grid(t)[::7], (rng.standard_normal(64) * 2 + 1j * rng.standard_normal(64)).astype(dt)])
    args = {name: [z, z[::-1].copy()] if name == "pow" else [z] for name in FUNCTIONS}
    cpu, _, _, _ = run_functions(t, list(FUNCTIONS), args)
    emulated, executable, _, _ = run_functions(t, list(FUNCTIONS), args, device="cuda-emulator")
    kernels = executable.native.kernels
    assert not kernels.unsupported, kernels.unsupported
    for name in FUNCTIONS:
        assert_parts_agree(emulated[name], cpu[name], f"{t} {name}")
    if gpu.find_ptxas() is not None:
        result = gpu.run_ptxas(kernels.ptx, "sm_80")
        assert result.ok, result.log[-2000:]


def test_real_gap_ops_on_the_cuda_backend():
    """Integer power, total-order compare, f16 libm functions, f64 -> f16, reduce-precision
    and bitcast-convert through the NVPTX path: bit for bit with the CPU backend."""
    rng = np.random.default_rng(8)
    n = 300
    floats = np.concatenate([_total_order_values(np.float32), rng.standard_normal(n - 16)]).astype(np.float32)
    ins = [rng.integers(-9, 9, n).astype(np.int32), rng.integers(-3, 40, n).astype(np.int32),
           rng.integers(0, 255, n).astype(np.uint8), floats,
           (rng.standard_normal(n) * 1e3).astype(np.float64), (rng.standard_normal(n) * 10).astype(np.float16)]
    b = Builder("gaps")
    ps = [b.parameter(Shape(t, (n,)), f"p{k}") for k, t in enumerate(["s32", "s32", "u8", "f32", "f64", "f16"])]

    def build(fb, i, e, u, f, d, h):
        return [fb.op("power", i, e), fb.op("power", u, u),
                fb.op("compare", f, fb.op("negate", f), direction="LT", type="TOTALORDER"),
                fb.op("convert", d, shape=d.shape.with_type("f16")), fb.op("cbrt", h), fb.op("atan2", h, h),
                fb.op("reduce-precision", f, exponent_bits=8, mantissa_bits=7),
                fb.op("bitcast-convert", f, shape=f.shape.with_type("u32"))]
    module = Module("gaps", b.build(fusion(b, "gaps", ps, build)))
    cpu = build_executable(module, "cpu")
    emulated = build_executable(module, "cuda-emulator")
    assert cpu.native.interpreted == {} and not emulated.native.kernels.unsupported
    for k, (g, w) in enumerate(zip(emulated.run(ins), cpu.run(ins))):
        assert_bitwise(np.asarray(g), w, f"output {k}")
    if gpu.find_ptxas() is not None:
        result = gpu.run_ptxas(emulated.native.kernels.ptx, "sm_80")
        assert result.ok, result.log[-2000:]


# ---- integer power --------------------------------------------------------------------------

INTEGER_TYPES = ["s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64"]


def _int_power_reference(a, b, t):
    """Python integers: a**b mod 2**width for b >= 0; b < 0 gives 1 for a == 1, else 0."""
    dt = _np_dtype(t)
    width = 8 * dt.itemsize
    out = []
    for x, e in zip(a.tolist(), b.tolist()):
        if e < 0:
            out.append(1 if x == 1 else 0)
        else:
            out.append(pow(x, e, 1 << width))
    return np.array([v % (1 << width) for v in out], np.uint64).astype(dt)


@pytest.mark.parametrize("t", INTEGER_TYPES)
def test_integer_power_native_and_bitwise(t):
    dt = _np_dtype(t)
    info = np.iinfo(dt)
    rng = np.random.default_rng(11)
    signed = info.min < 0
    wide = np.int64 if signed else np.uint64
    edge = np.array([0, 1, 2, 3, 7, info.max, info.max - 1] + ([-1, -2, -3, info.min, info.min + 1] if signed else []),
                    wide).astype(dt)
    exps = np.array([0, 1, 2, 3, 5, 8, 13, 31, 63, 64, 100, 255, info.max] + ([-1, -2, info.min] if signed else []),
                    wide).astype(dt)
    a = np.concatenate([np.repeat(edge, len(exps)), rng.integers(info.min, info.max, 300, dtype=dt, endpoint=True)])
    b = np.concatenate([np.tile(exps, len(edge)), rng.integers(info.min, info.max, 300, dtype=dt, endpoint=True)])
    builder = Builder("ipow")
    pa, pb = builder.parameter(Shape(t, a.shape), "a"), builder.parameter(Shape(t, b.shape), "b")
    f = fusion(builder, "ipow", [pa, pb], lambda fb, x, y: fb.op("power", x, y))
    got, want, interpreted = compile_and_run(Module("ipow", builder.build(f)), [a, b])
    assert interpreted == {}, interpreted
    assert_bitwise(got[0], want[0], f"{t} power")
    assert_bitwise(got[0], _int_power_reference(a, b, t), f"{t} power vs Python")


# ---- total-order compare ------------------------------------------------------------------------

def _total_order_values(dt):
    info = np.finfo(dt)
    bits = np.dtype(f"u{np.dtype(dt).itemsize}")
    neg_nan = np.array([np.nan], dt)
    neg_nan = (neg_nan.view(bits) | bits.type(1 << (8 * np.dtype(dt).itemsize - 1))).view(dt)
    # ascending in IEEE totalOrder
    return np.concatenate([neg_nan, np.array([-np.inf, -info.max, -1.5, -1.0, -info.tiny, -info.smallest_subnormal,
                                              -0.0, 0.0, info.smallest_subnormal, info.tiny, 1.0, 1.5, info.max,
                                              np.inf, np.nan], dt)])


@pytest.mark.parametrize("t", ["f16", "f32", "f64"])
def test_total_order_compare_native_and_bitwise(t):
    dt = _np_dtype(t)
    ordered = _total_order_values(dt)
    n = len(ordered)
    rank = np.arange(n)
    a, b = np.repeat(ordered, n), np.tile(ordered, n)
    ra, rb = np.repeat(rank, n), np.tile(rank, n)
    builder = Builder("total")
    pa, pb = builder.parameter(Shape(t, a.shape), "a"), builder.parameter(Shape(t, b.shape), "b")
    directions = ["EQ", "NE", "LT", "LE", "GT", "GE"]
    f = fusion(builder, "total", [pa, pb], lambda fb, x, y: [
        fb.op("compare", x, y, direction=d, type="TOTALORDER") for d in directions])
    got, want, interpreted = compile_and_run(Module("total", builder.build(f)), [a, b])
    assert interpreted == {}, interpreted
    expect = {"EQ": ra == rb, "NE": ra != rb, "LT": ra < rb, "LE": ra <= rb, "GT": ra > rb, "GE": ra >= rb}
    for d, g, w in zip(directions, got, want):
        assert_bitwise(g, w, f"{t} {d}")
        assert_bitwise(g, expect[d], f"{t} {d} vs the order")


def test_total_order_compare_from_hlo_text():
    """The form JAX emits in sort comparators."""
    hlo = """
HloModule total_order

%fused_lt (p0: f32[6], p1: f32[6]) -> pred[6] {
  %p0 = f32[6]{0} parameter(0)
  %p1 = f32[6]{0} parameter(1)
  ROOT %lt = pred[6]{0} compare(f32[6]{0} %p0, f32[6]{0} %p1), direction=LT, type=TOTALORDER
}

ENTRY %main (x: f32[6], y: f32[6]) -> pred[6] {
  %x = f32[6]{0} parameter(0)
  %y = f32[6]{0} parameter(1)
  ROOT %f = pred[6]{0} fusion(f32[6]{0} %x, f32[6]{0} %y), kind=kLoop, calls=%fused_lt
}
"""
    module = parse_hlo(hlo)
    x = np.array([-0.0, np.nan, -np.inf, 1.0, np.inf, 0.0], np.float32)
    y = np.array([0.0, np.inf, -3.0, np.nan, np.nan, -0.0], np.float32)
    got, want, interpreted = compile_and_run(module, [x, y])
    assert interpreted == {}
    assert got[0].tolist() == [True, False, True, True, True, False]
    assert_bitwise(got[0], want[0])


# ---- f16 --------------------------------------------------------------------------------------

def test_f16_cbrt_and_atan2_native_and_bitwise():
    """libm has no half functions: the float ones, rounded once (as NumPy's half loops)."""
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.standard_normal(500) * 100, [0.0, -0.0, np.inf, -np.inf, np.nan, 65504.0, 6e-8]])
    x = x.astype(np.float16)
    y = x[rng.permutation(len(x))]
    builder = Builder("half")
    px, py = builder.parameter(Shape("f16", x.shape), "x"), builder.parameter(Shape("f16", y.shape), "y")
    f = fusion(builder, "half", [px, py], lambda fb, a, b: [fb.op("cbrt", a), fb.op("atan2", a, b)])
    got, want, interpreted = compile_and_run(Module("half", builder.build(f)), [x, y])
    assert interpreted == {}, interpreted
    assert_bitwise(got[0], want[0], "cbrt")
    assert_bitwise(got[1], want[1], "atan2")
    with np.errstate(all="ignore"):
        assert_bitwise(got[0], np.cbrt(x), "cbrt vs NumPy")
        assert_bitwise(got[1], np.arctan2(x, y), "atan2 vs NumPy")


def _f64_to_f16_cases():
    """Every f16 value, the midpoints between neighbours and the doubles just around them
    (where rounding through f32 first goes wrong), the overflow and underflow edges."""
    h = np.arange(0, 0x7C00, dtype=np.uint16).view(np.float16).astype(np.float64)
    mid = (h[:-1] + h[1:]) / 2
    around = [mid, np.nextafter(mid, np.inf), np.nextafter(mid, -np.inf),
              mid + mid * 2.0 ** -40, mid - mid * 2.0 ** -40]
    edges = np.array([65504.0, 65519.99, 65520.0, 65520.000001, 1e300, 2.0 ** -25, 2.0 ** -25 * (1 + 2.0 ** -40),
                      2.0 ** -26, 1e-300, 5e-324, np.inf, np.nan, 0.0, 1.0 + 2.0 ** -11 + 2.0 ** -40])
    pos = np.concatenate([h, *around, edges])
    return np.concatenate([pos, -pos])


@pytest.mark.parametrize("src", ["f64", "c128"])
def test_convert_f64_to_f16_is_correctly_rounded(src):
    x = _f64_to_f16_cases()
    if src == "c128":
        x = x.astype(np.complex128)
    builder = Builder("to_half")
    p = builder.parameter(Shape(src, x.shape), "x")
    f = fusion(builder, "to_half", [p], lambda fb, a: fb.op("convert", a, shape=a.shape.with_type("f16")))
    got, want, interpreted = compile_and_run(Module("to_half", builder.build(f)), [x])
    assert interpreted == {}, interpreted
    assert_bitwise(got[0], want[0], f"{src} -> f16")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert_bitwise(got[0], np.real(x).astype(np.float16), f"{src} -> f16 vs NumPy")


# ---- bitcast-convert and reduce-precision -------------------------------------------------------

@pytest.mark.parametrize("src,dst", [("f32", "s32"), ("s32", "f32"), ("f32", "u32"), ("f64", "s64"),
                                     ("u64", "f64"), ("f16", "u16"), ("s16", "f16"), ("u8", "s8")])
def test_same_width_bitcast_convert_native_and_bitwise(src, dst):
    rng = np.random.default_rng(4)
    dt = _np_dtype(src)
    raw = rng.integers(0, 256, 1000 * dt.itemsize, dtype=np.uint8)
    x = raw.view(dt)
    builder = Builder("bits")
    p = builder.parameter(Shape(src, x.shape), "x")
    f = fusion(builder, "bits", [p], lambda fb, a: fb.op("bitcast-convert", a, shape=a.shape.with_type(dst)))
    got, want, interpreted = compile_and_run(Module("bits", builder.build(f)), [x])
    assert interpreted == {}, interpreted
    assert np.array_equal(got[0].view(np.uint8), want[0].view(np.uint8)), (src, dst)


@pytest.mark.parametrize("t", ["f16", "f32", "f64"])
def test_reduce_precision_native_and_bitwise(t):
    """bf16-like (8, 7), f16-like (5, 10) and narrower formats, and no change at all."""
    dt = _np_dtype(t)
    info = np.finfo(dt)
    rng = np.random.default_rng(6)
    x = np.concatenate([(rng.standard_normal(2000) * np.exp2(rng.uniform(-30, 30, 2000))),
                        [0.0, -0.0, np.inf, -np.inf, np.nan, 65504.0, 65520.0, 1e-8, float(info.max),
                         float(info.smallest_subnormal), 1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8]])
    with np.errstate(all="ignore"):
        x = x.astype(dt)
    formats = [(8, 7), (5, 10), (4, 3), (2, 1), (5, 0), (info.nexp, info.nmant)]
    builder = Builder("rp")
    p = builder.parameter(Shape(t, x.shape), "x")
    f = fusion(builder, "rp", [p], lambda fb, a: [fb.op("reduce-precision", a, exponent_bits=e, mantissa_bits=m)
                                                  for e, m in formats])
    got, want, interpreted = compile_and_run(Module("rp", builder.build(f)), [x])
    assert interpreted == {}, interpreted
    for (e, m), g, w in zip(formats, got, want):
        assert_bitwise(g, w, f"{t} e{e} m{m}")
    if t == "f32":                     # the f16 format is the f16 type's rounding
        with np.errstate(all="ignore"):
            as_half = x.astype(np.float16).astype(np.float32)
        normal = np.abs(as_half) >= np.finfo(np.float16).tiny
        assert_bitwise(got[1][normal], as_half[normal], "f32 -> f16 format")


# ---- gather with batching dims, dynamic slices with a start vector ------------------------------

_GATHER_DUS_HLO = """
HloModule gaps

%fused_gather (p0: f32[3,5,4], p1: s32[3,4,1]) -> f32[3,4,2] {
  %p0 = f32[3,5,4]{2,1,0} parameter(0)
  %p1 = s32[3,4,1]{2,1,0} parameter(1)
  ROOT %g = f32[3,4,2]{2,1,0} gather(f32[3,5,4]{2,1,0} %p0, s32[3,4,1]{2,1,0} %p1), offset_dims={2}, collapsed_slice_dims={1}, start_index_map={1}, operand_batching_dims={0}, start_indices_batching_dims={0}, index_vector_dim=2, slice_sizes={1,1,2}
}

%fused_gather_t (r0: f32[4,6,2], r1: s32[2,3,4]) -> f32[3,4] {
  %r0 = f32[4,6,2]{2,1,0} parameter(0)
  %r1 = s32[2,3,4]{2,1,0} parameter(1)
  ROOT %g2 = f32[3,4]{1,0} gather(f32[4,6,2]{2,1,0} %r0, s32[2,3,4]{2,1,0} %r1), offset_dims={}, collapsed_slice_dims={1,2}, start_index_map={1,2}, operand_batching_dims={0}, start_indices_batching_dims={2}, index_vector_dim=0, slice_sizes={1,1,1}
}

%fused_dus (q0: f32[6,7], q1: f32[2,3], q2: s32[2]) -> f32[6,7] {
  %q0 = f32[6,7]{1,0} parameter(0)
  %q1 = f32[2,3]{1,0} parameter(1)
  %q2 = s32[2]{0} parameter(2)
  ROOT %d = f32[6,7]{1,0} dynamic-update-slice(f32[6,7]{1,0} %q0, f32[2,3]{1,0} %q1, s32[2]{0} %q2)
}

%fused_ds (s0: f32[6,7], s1: s32[2]) -> f32[2,3] {
  %s0 = f32[6,7]{1,0} parameter(0)
  %s1 = s32[2]{0} parameter(1)
  ROOT %e = f32[2,3]{1,0} dynamic-slice(f32[6,7]{1,0} %s0, s32[2]{0} %s1), dynamic_slice_sizes={2,3}
}

ENTRY %main (a: f32[3,5,4], i: s32[3,4,1], b: f32[4,6,2], j: s32[2,3,4], x: f32[6,7], u: f32[2,3], s: s32[2]) -> (f32[3,4,2], f32[3,4], f32[6,7], f32[2,3]) {
  %a = f32[3,5,4]{2,1,0} parameter(0)
  %i = s32[3,4,1]{2,1,0} parameter(1)
  %b = f32[4,6,2]{2,1,0} parameter(2)
  %j = s32[2,3,4]{2,1,0} parameter(3)
  %x = f32[6,7]{1,0} parameter(4)
  %u = f32[2,3]{1,0} parameter(5)
  %s = s32[2]{0} parameter(6)
  %f1 = f32[3,4,2]{2,1,0} fusion(f32[3,5,4]{2,1,0} %a, s32[3,4,1]{2,1,0} %i), kind=kLoop, calls=%fused_gather
  %f2 = f32[3,4]{1,0} fusion(f32[4,6,2]{2,1,0} %b, s32[2,3,4]{2,1,0} %j), kind=kLoop, calls=%fused_gather_t
  %f3 = f32[6,7]{1,0} fusion(f32[6,7]{1,0} %x, f32[2,3]{1,0} %u, s32[2]{0} %s), kind=kLoop, calls=%fused_dus
  %f4 = f32[2,3]{1,0} fusion(f32[6,7]{1,0} %x, s32[2]{0} %s), kind=kLoop, calls=%fused_ds
  ROOT %t = (f32[3,4,2]{2,1,0}, f32[3,4]{1,0}, f32[6,7]{1,0}, f32[2,3]{1,0}) tuple(%f1, %f2, %f3, %f4)
}
"""


@pytest.mark.parametrize("starts", [(5, 2), (-3, 9), (1, 1)])
def test_gather_batching_dims_and_start_vectors(starts):
    module = parse_hlo(_GATHER_DUS_HLO)
    rng = np.random.default_rng(2)
    ins = [rng.standard_normal((3, 5, 4)).astype(np.float32), rng.integers(-2, 7, (3, 4, 1)).astype(np.int32),
           rng.standard_normal((4, 6, 2)).astype(np.float32), rng.integers(-1, 7, (2, 3, 4)).astype(np.int32),
           rng.standard_normal((6, 7)).astype(np.float32), rng.standard_normal((2, 3)).astype(np.float32),
           np.array(starts, np.int32)]
    got, want, interpreted = compile_and_run(module, ins)
    assert interpreted == {}, interpreted
    for g, w, what in zip(got, want, ["gather", "gather (index vector first)", "dus", "ds"]):
        assert_bitwise(g, w, what)
    # independent references: batch b of the first gather reads a[b, clamp(i[b, k]), 2-wide]
    a, i = ins[0], np.clip(ins[1][..., 0], 0, 4)
    expect = np.stack([a[bb, i[bb], :2] for bb in range(3)])
    assert_bitwise(got[0], expect, "gather vs NumPy indexing")
    r, c = min(max(starts[0], 0), 4), min(max(starts[1], 0), 4)
    x = ins[4].copy()
    x[r:r + 2, c:c + 3] = ins[5]
    assert_bitwise(got[2], x, "dus vs NumPy")
    assert_bitwise(got[3], ins[4][r:r + 2, c:c + 3], "ds vs NumPy")
