"""CPU workloads: nbxla's compiled code against eager NumPy, numexpr and JAX ``jit``.

    python benchmarks/cpu_workloads.py            # default sizes, < 3 minutes on 2 cores
    python benchmarks/cpu_workloads.py --quick    # small sizes: a smoke test (seconds)
    python benchmarks/cpu_workloads.py --big      # adds the running example at 16384**2
    python benchmarks/cpu_workloads.py --only softmax,lstm --repeats 15 --explain
    python benchmarks/cpu_workloads.py --blas-threads 1   # NumPy's BLAS on one thread

Method
------
* All contenders run in this one process on the same float32 inputs.  Per workload, each
  contender is warmed up (compiled) first; then for every repeat each contender takes one
  sample, in an order rotated by one position per repeat (round-robin), so that machine
  noise hits everyone alike.  A sample is ``inner`` back-to-back calls (``inner`` chosen so
  a sample lasts >= ~20 ms) divided by ``inner``; the table shows medians of the samples.
* JAX: ``jax.jit`` of the *same* function written against ``jax.numpy``, inputs placed on
  the CPU device beforehand (and waited for: the copies are asynchronous), timed with
  ``jax.block_until_ready``; its compile time is ``jit(f).lower(*args).compile()``,
  excluded from the timings.
* numexpr: the workload as numexpr expressions (float constants passed as float32 scalars,
  or numexpr would compute in float64).  ``hyb`` marks workloads where numexpr cannot
  express everything (axis reductions it cannot fuse, matmul): those parts run in NumPy.
* nbxla: ``nbxla.jit(f)`` (device cpu) of the NumPy function.  Its compile time is the
  compilation record's trace + optimize + codegen.
* ``xNumPy`` etc. are speedups: the other contender's time / nbxla's time (> 1: nbxla faster).
* GB/s counts the bytes of the inputs read plus the outputs written, once each (the
  minimum traffic of any implementation), divided by nbxla's time.  ``%BW`` is that over
  the machine's read bandwidth measured in the same run, before and after the workloads
  (the better of the two; see ``measure_bandwidth``).  ``*``: inputs + outputs fit in the
  last-level cache, so the figure is not a DRAM one.
* nbxla's persistent object-code cache is turned off (``NBXLA_CACHE_DIR=off``) so that
  compile times are cold compilations; ``--disk-cache`` leaves it on.
* ``check`` compares every contender's result with eager NumPy's (rtol 1e-3, atol 1e-3 of
  the largest magnitude); a contender that disagrees is named there.
* Peak extra memory (running example only): the peak resident set size during one call
  above the resident size before it (Linux: ``/proc/self/clear_refs`` resets the peak,
  ``VmHWM`` reads it), inputs already resident, after warm-up.
* Compile times are the best of two cold compilations in this process (each from a fresh
  ``nbxla.jit`` / ``jax.jit`` object), so that one-time initialization (LLVM's target
  setup, ~70 ms, lands on the first workload's first call, listed separately) and machine
  noise count less.
* Black-Scholes needs the normal CDF, and NumPy has no ``erf``: every contender uses the
  same Abramowitz & Stegun 26.2.17 formula (one ``exp``, a rational polynomial, a
  ``where`` for negative arguments; |error| < 7.5e-8).

Where nbxla trails NumPy or JAX, the script prints nbxla's fusion report, the fusions the
CPU backend interprets instead of compiling, and for the dispatch-bound workloads how much
of a call is ``executable.run`` and how much the ``jit`` wrapper.

Timings are printed, never asserted (tests only run ``--quick`` and look at the output).
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import gc
import math
import os
import re
import sys
import time
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Compile times are cold compilations: nbxla's on-disk object cache stays off unless asked for.
_DISK_CACHE = "--disk-cache" in sys.argv[1:]
if not _DISK_CACHE:
    os.environ["NBXLA_CACHE_DIR"] = "off"
# --blas-threads N must reach the BLAS library before NumPy loads it.
for _i, _arg in enumerate(sys.argv[1:], 1):
    if _arg.startswith("--blas-threads"):
        _n = _arg.split("=", 1)[1] if "=" in _arg else (sys.argv[_i + 1] if _i + 1 < len(sys.argv) else "")
        for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[_var] = _n
        # numexpr would take OMP_NUM_THREADS for itself: keep it on every core.
        os.environ.setdefault("NUMEXPR_NUM_THREADS", str(len(os.sched_getaffinity(0))
                                                         if hasattr(os, "sched_getaffinity") else os.cpu_count()))

import numpy as np  # noqa: E402

import nbxla  # noqa: E402

try:
    import numexpr as ne
except ImportError:          # optional contender (the ``bench`` extra)
    ne = None
try:
    import jax
    import jax.numpy as jnp
except ImportError:          # optional contender (the ``bench`` extra)
    jax = jnp = None

F32 = np.float32
CONTENDERS = ("NumPy", "numexpr", "JAX", "nbxla")


# ----------------------------------------------------------------------------------------
# Workloads: each written once against an array module ``xp`` (NumPy for eager NumPy and
# nbxla, jax.numpy for JAX), so every contender computes the same formulation.

def running_example(x, y, xp=np):
    return xp.mean(3 * x**2 + y)


def sum_xyz(x, y, z, xp=np):
    return xp.sum(x + y * z)


def softmax(x, xp=np):
    m = xp.max(x, axis=-1, keepdims=True)
    e = xp.exp(x - m)
    return e / xp.sum(e, axis=-1, keepdims=True)


def layernorm(x, gamma, beta, xp=np):
    mu = xp.mean(x, axis=-1, keepdims=True)
    d = x - mu
    var = xp.mean(d * d, axis=-1, keepdims=True)
    return d / xp.sqrt(var + 1e-5) * gamma + beta


# Abramowitz & Stegun 26.2.17: Phi(x) = 1 - pdf(x) * poly(t), t = 1 / (1 + p x), x >= 0.
AS_P = 0.2316419
AS_B = (0.319381530, -0.356563782, 1.781477937, -1.821255978, 1.330274429)
INV_SQRT_2PI = 0.3989422804014327
BS_R, BS_V = 0.02, 0.30


def norm_cdf(d, xp=np):
    a = xp.abs(d)
    t = 1.0 / (1.0 + AS_P * a)
    poly = t * (AS_B[0] + t * (AS_B[1] + t * (AS_B[2] + t * (AS_B[3] + t * AS_B[4]))))
    n = 1.0 - INV_SQRT_2PI * xp.exp(-0.5 * a * a) * poly
    return xp.where(d < 0, 1.0 - n, n)


def black_scholes(S, K, T, xp=np):
    """European call and put (put by put-call parity)."""
    sqrt_t = xp.sqrt(T)
    d1 = (xp.log(S / K) + (BS_R + 0.5 * BS_V * BS_V) * T) / (BS_V * sqrt_t)
    d2 = d1 - BS_V * sqrt_t
    k_disc = K * xp.exp(-BS_R * T)
    call = S * norm_cdf(d1, xp) - k_disc * norm_cdf(d2, xp)
    return call, call - S + k_disc


# ---- --reductions: reductions beyond rows and whole arrays --------------------------------

def sum_middle(x, xp=np):
    return x.sum(axis=1)                        # (N, R, C) -> (N, C): a batch of column sums


def mean_hw(x, xp=np):
    return x.mean(axis=(2, 3))                  # an NCHW batch's spatial mean


def sum_columns(x, xp=np):
    return x.sum(axis=0)


def argmax_all(x, xp=np):
    return xp.argmax(x)


def argmax_rows(x, xp=np):
    return xp.argmax(x, axis=1)


def argmax_columns(x, xp=np):
    return xp.argmax(x, axis=0)


def _sigmoid(v, xp):
    return 1.0 / (1.0 + xp.exp(-v))


def lstm_cell(x, h, c, w_x, w_h, b, xp=np):
    """One LSTM step; gates in the order input, forget, cell, output."""
    n = h.shape[1]
    gates = x @ w_x + h @ w_h + b
    i = _sigmoid(gates[:, :n], xp)
    f = _sigmoid(gates[:, n:2 * n], xp)
    g = xp.tanh(gates[:, 2 * n:3 * n])
    o = _sigmoid(gates[:, 3 * n:], xp)
    c_new = f * c + i * g
    return o * xp.tanh(c_new), c_new


def chain20(x, xp=np):
    """20 elementwise ops (5 x multiply, add, abs, sqrt): one kernel, pure call overhead."""
    for _ in range(5):
        x = xp.sqrt(xp.abs(x * 0.9 + 0.1))
    return x


# ---- numexpr versions ------------------------------------------------------------------

_FLOAT_LITERAL = re.compile(r"(?<![\w.])(\d+\.\d*(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+)")


@functools.lru_cache(maxsize=None)
def _ne_float32(expr: str) -> tuple[str, tuple[tuple[str, F32], ...]]:
    """Float literals -> named float32 scalars (numexpr computes ``f32 * 0.5`` in float64)."""
    consts: dict[str, F32] = {}
    names: dict[float, str] = {}

    def name(m):
        value = float(m.group(1))
        if value not in names:
            names[value] = f"_c{len(names)}"
            consts[names[value]] = F32(value)
        return names[value]
    return _FLOAT_LITERAL.sub(name, expr), tuple(consts.items())


def ne32(expr: str, **arrays):
    text, consts = _ne_float32(expr)
    return ne.evaluate(text, local_dict={**arrays, **dict(consts)})


def _as_cdf_expr(d: str, t: str) -> str:
    """A&S 26.2.17 given ``t = 1 / (1 + p |d|)`` as an array (numexpr has no common
    subexpressions); ``where(d < 0, 1 - n, n)`` as ``0.5 + sign * (0.5 - q)``, the same
    formula written so that ``q = pdf * poly`` appears once."""
    poly = f"{t} * ({AS_B[0]} + {t} * ({AS_B[1]} + {t} * ({AS_B[2]} + {t} * ({AS_B[3]} + {t} * {AS_B[4]}))))"
    q = f"{INV_SQRT_2PI} * exp(-0.5 * {d} * {d}) * {poly}"
    return f"(0.5 + where({d} < 0, -1.0, 1.0) * (0.5 - {q}))"


def ne_running(x, y):
    return ne32("sum(3 * x**2 + y)", x=x, y=y) / F32(x.size)


def ne_sum_xyz(x, y, z):
    return ne32("sum(x + y * z)", x=x, y=y, z=z)


def ne_softmax(x):                                  # hyb: the row max in NumPy
    m = x.max(axis=-1, keepdims=True)
    e = ne32("exp(x - m)", x=x, m=m)
    s = ne32("sum(e, axis=1)", e=e)[:, None]
    return ne32("e / s", e=e, s=s)


def ne_layernorm(x, gamma, beta):                   # hyb: the row means in NumPy
    mu = x.mean(axis=-1, keepdims=True)
    d = ne32("x - mu", x=x, mu=mu)
    var = (ne32("sum(d * d, axis=1)", d=d) / F32(x.shape[-1]))[:, None]
    return ne32("d / sqrt(var + 1e-5) * gamma + beta", d=d, var=var, gamma=gamma, beta=beta)


def ne_black_scholes(S, K, T):
    d1 = ne32(f"(log(S / K) + {BS_R + 0.5 * BS_V * BS_V} * T) / ({BS_V} * sqrt(T))", S=S, K=K, T=T)
    d2 = ne32(f"d1 - {BS_V} * sqrt(T)", d1=d1, T=T)
    t1 = ne32(f"1.0 / (1.0 + {AS_P} * abs(d1))", d1=d1)
    t2 = ne32(f"1.0 / (1.0 + {AS_P} * abs(d2))", d2=d2)
    call = ne32(f"S * {_as_cdf_expr('d1', 't1')} - K * exp(-{BS_R} * T) * {_as_cdf_expr('d2', 't2')}",
                S=S, K=K, T=T, d1=d1, d2=d2, t1=t1, t2=t2)
    put = ne32(f"call - S + K * exp(-{BS_R} * T)", call=call, S=S, K=K, T=T)
    return call, put


def ne_lstm_cell(x, h, c, w_x, w_h, b):            # hyb: the matmuls in NumPy
    n = h.shape[1]
    gates = x @ w_x + h @ w_h + b
    i, f, g, o = gates[:, :n], gates[:, n:2 * n], gates[:, 2 * n:3 * n], gates[:, 3 * n:]
    c_new = ne32("1.0 / (1.0 + exp(-f)) * c + 1.0 / (1.0 + exp(-i)) * tanh(g)", f=f, c=c, i=i, g=g)
    h_new = ne32("1.0 / (1.0 + exp(-o)) * tanh(c_new)", o=o, c_new=c_new)
    return h_new, c_new


_CHAIN_EXPR = "x"
for _ in range(5):
    _CHAIN_EXPR = f"sqrt(abs({_CHAIN_EXPR} * 0.9 + 0.1))"


def ne_chain20(x):
    return ne32(_CHAIN_EXPR, x=x)


# ---- inputs -----------------------------------------------------------------------------

def _uniform(rng, shape, lo=-1.0, hi=1.0):
    a = rng.random(shape, dtype=F32)
    a *= F32(hi - lo)
    a += F32(lo)
    return a


@dataclass
class Case:
    name: str            # workload name (what --only matches)
    size: str            # shown in the table
    fn: Callable         # fn(*args, xp=...) -> array or tuple of arrays
    make: Callable       # rng -> tuple of input arrays
    ne_fn: Callable | None = None
    ne_hybrid: bool = False
    per_call_us: bool = False       # report microseconds (dispatch-bound workloads)
    memory: bool = False            # measure peak extra memory
    notes: list[str] = field(default_factory=list)


def build_cases(args) -> list[Case]:
    quick = args.quick
    cases = []
    sizes = [256] if quick else [1024, 4096, 8192]
    if args.big:
        sizes.append(16384)
    for n in sizes:
        mem = n == sizes[-1] or n == 16384
        cases.append(Case("running", f"{n}x{n}", running_example,
                          lambda rng, n=n: (_uniform(rng, (n, n)), _uniform(rng, (n, n))),
                          ne_running, memory=mem))
    for n in ([256] if quick else [1024, 4096, 8192]):
        cases.append(Case("sum_xyz", f"{n}x{n}", sum_xyz,
                          lambda rng, n=n: tuple(_uniform(rng, (n, n)) for _ in range(3)), ne_sum_xyz))
    rows, cols = (256, 128) if quick else (4096, 1024)
    cases.append(Case("softmax", f"{rows}x{cols}", softmax,
                      lambda rng: (_uniform(rng, (rows, cols), -4, 4),), ne_softmax, ne_hybrid=True))
    cases.append(Case("layernorm", f"{rows}x{cols}", layernorm,
                      lambda rng: (_uniform(rng, (rows, cols), -4, 4), _uniform(rng, (cols,), 0.5, 1.5),
                                   _uniform(rng, (cols,))), ne_layernorm, ne_hybrid=True))
    m = 10**5 if quick else 10**7
    cases.append(Case("blackscholes", f"{m:.0e}".replace("+0", ""), black_scholes,
                      lambda rng: (_uniform(rng, (m,), 50, 150), _uniform(rng, (m,), 50, 150),
                                   _uniform(rng, (m,), 0.1, 2.0)), ne_black_scholes))
    for batch, hidden in ([(32, 128)] if quick else [(32, 128), (256, 512)]):
        def make(rng, b=batch, h=hidden):
            scale = 1 / math.sqrt(h)
            return (_uniform(rng, (b, h)), _uniform(rng, (b, h)), _uniform(rng, (b, h)),
                    _uniform(rng, (h, 4 * h), -scale, scale), _uniform(rng, (h, 4 * h), -scale, scale),
                    _uniform(rng, (4 * h,), -0.1, 0.1))
        cases.append(Case("lstm", f"b{batch}/h{hidden}", lstm_cell, make, ne_lstm_cell, ne_hybrid=True,
                          per_call_us=hidden <= 128))
    cases.append(Case("chain20", "128", chain20, lambda rng: (_uniform(rng, (128,)),), ne_chain20,
                      per_call_us=True))
    if args.reductions:
        cases += reduction_cases(quick)
    if args.only:
        wanted = [w.strip() for w in args.only.split(",")]
        cases = [c for c in cases if any(w in c.name for w in wanted)]
    return cases


def reduction_cases(quick: bool) -> list[Case]:
    def scaled(shape):
        return tuple(max(2, n // 16) for n in shape) if quick else shape
    table = [("sum_middle", sum_middle, (8, 64, 1000)), ("sum_middle", sum_middle, (64, 256, 1024)),
             ("mean_hw", mean_hw, (16, 3, 224, 224)), ("sum_columns", sum_columns, (2048, 3000)),
             ("sum_columns", sum_columns, (256, 100000)), ("argmax_all", argmax_all, (4096, 4096)),
             ("argmax_rows", argmax_rows, (4096, 4096)), ("argmax_columns", argmax_columns, (4096, 4096))]
    return [Case(name, "x".join(map(str, scaled(shape))), fn,
                 lambda rng, shape=scaled(shape): (_uniform(rng, shape),))
            for name, fn, shape in table]


# ---- measuring --------------------------------------------------------------------------

def _leaves(value) -> list[np.ndarray]:
    if isinstance(value, (tuple, list)):
        return [leaf for v in value for leaf in _leaves(v)]
    return [np.asarray(value)]


def _nbytes(value) -> int:
    return sum(a.nbytes for a in _leaves(value))


def _disagreement(got, ref) -> str | None:
    """None when ``got`` matches NumPy's ``ref``; else what differs."""
    got, ref = _leaves(got), _leaves(ref)
    if len(got) != len(ref):
        return f"{len(got)} outputs, NumPy has {len(ref)}"
    for g, r in zip(got, ref):
        if g.shape != r.shape:
            return f"shape {g.shape}, NumPy {r.shape}"
        r64 = r.astype(np.float64)
        scale = float(np.max(np.abs(r64))) if r.size else 0.0
        g64 = g.astype(np.float64)
        if not np.allclose(g64, r64, rtol=1e-3, atol=1e-3 * scale + 1e-6):
            err = np.abs(g64 - r64) / np.maximum(np.abs(r64), 1e-300)
            return f"max relative difference {np.nanmax(err):.2g} (NaN: {int(np.isnan(g64).sum())})"
    return None


def _status_kb(field_name: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _can_reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return _status_kb("VmHWM") is not None
    except OSError:
        return False


def peak_extra_bytes(call: Callable) -> tuple[int, str]:
    """Peak memory one call needs beyond what is resident before it."""
    gc.collect()
    if _can_reset_peak():
        before = _status_kb("VmRSS")
        result = call()
        peak = _status_kb("VmHWM")
        del result
        return max(0, peak - before) * 1024, "RSS"
    tracemalloc.start()       # fallback: sees NumPy's allocations only (not JAX's)
    try:
        result = call()
        _, peak = tracemalloc.get_traced_memory()
        del result
    finally:
        tracemalloc.stop()
    return peak, "tracemalloc"


def _time_block(call: Callable, inner: int) -> float:
    start = time.perf_counter()
    for _ in range(inner):
        call()
    return (time.perf_counter() - start) / inner


@dataclass
class Result:
    case: Case
    times: dict[str, float]                 # contender -> median seconds per call
    compile_ms: dict[str, float]
    bytes_moved: int
    mismatches: dict[str, str]               # contender -> how it differs from NumPy
    peak: dict[str, tuple[int, str]] = field(default_factory=dict)
    nbxla_fn: object = None
    error: dict[str, str] = field(default_factory=dict)
    input_bytes: int = 0


def _compile_ms(compiled) -> float:
    timings = compiled.last_compilation.timings_ms
    return sum(timings.get(k, 0.0) for k in ("trace", "optimize", "codegen"))


def run_case(case: Case, rng, repeats: int, sample_s: float) -> Result:
    inputs = case.make(rng)
    reference = case.fn(*inputs)
    bytes_moved = sum(a.nbytes for a in inputs) + _nbytes(reference)
    calls: dict[str, Callable] = {"NumPy": lambda: case.fn(*inputs)}
    compile_ms: dict[str, float] = {}
    errors: dict[str, str] = {}
    results: dict[str, object] = {"NumPy": reference}

    if ne is not None and case.ne_fn is not None:
        calls["numexpr"] = lambda: case.ne_fn(*inputs)
    if jax is not None:
        try:
            jitted = jax.jit(functools.partial(case.fn, xp=jnp))
            jax_inputs = jax.block_until_ready([jax.device_put(a) for a in inputs])   # copies are async
            for fn in (jitted, jax.jit(functools.partial(case.fn, xp=jnp))):   # best of 2
                start = time.perf_counter()
                fn.lower(*jax_inputs).compile()
                compile_ms["JAX"] = min(compile_ms.get("JAX", math.inf), (time.perf_counter() - start) * 1e3)
            calls["JAX"] = lambda: jax.block_until_ready(jitted(*jax_inputs))
        except Exception as e:  # noqa: BLE001 -- a contender failing is reported, not fatal
            errors["JAX"] = f"{type(e).__name__}: {e}"
    compiled = nbxla.jit(case.fn, device="cpu")
    try:
        start = time.perf_counter()
        results["nbxla"] = compiled(*inputs)
        first_call_ms = (time.perf_counter() - start) * 1e3
        compile_ms["nbxla_first_call"] = first_call_ms
        compile_ms["nbxla"] = _compile_ms(compiled)
        again = nbxla.jit(case.fn, device="cpu")      # a fresh function object: compiles again
        again(*inputs)
        compile_ms["nbxla"] = min(compile_ms["nbxla"], _compile_ms(again))
        del again
        calls["nbxla"] = lambda: compiled(*inputs)
    except Exception as e:  # noqa: BLE001
        errors["nbxla"] = f"{type(e).__name__}: {e}"

    # Warm up (and keep one result per contender for the check), then calibrate.
    inner: dict[str, int] = {}
    for name, call in calls.items():
        if name not in results:
            results[name] = call()
        single = min(_time_block(call, 1) for _ in range(2))
        inner[name] = max(1, min(200_000, int(math.ceil(sample_s / max(single, 1e-7)))))
    mismatches = {name: why for name, value in results.items() if name != "NumPy"
                  for why in [_disagreement(value, reference)] if why}
    del results

    names = [n for n in CONTENDERS if n in calls]
    samples: dict[str, list[float]] = {n: [] for n in names}
    for r in range(repeats):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:       # round-robin order per repeat
            samples[name].append(_time_block(calls[name], inner[name]))
    times = {n: float(np.median(s)) for n, s in samples.items()}

    if case.per_call_us and "nbxla" in calls:       # where a call's time goes
        try:
            run = compiled.last_compilation.executable.run
            flat = list(inputs)
            run(flat)
            ex_s = min(_time_block(lambda: run(flat), inner["nbxla"]) for _ in range(3))
            full_s = min(_time_block(calls["nbxla"], inner["nbxla"]) for _ in range(3))
            compile_ms["nbxla_run_us"], compile_ms["nbxla_call_us"] = ex_s * 1e6, full_s * 1e6
        except Exception:  # noqa: BLE001 -- diagnostics only
            pass

    peak = {}
    if case.memory:
        for name in names:
            peak[name] = peak_extra_bytes(calls[name])
    return Result(case, times, compile_ms, bytes_moved, mismatches, peak,
                  compiled if "nbxla" in calls else None, errors, sum(a.nbytes for a in inputs))


# ---- machine bandwidth ------------------------------------------------------------------

_READ_IR = r"""
define i64 @read_sum(i64* noalias nocapture readonly %p, i64 %n) nounwind {
entry:
  %nonempty = icmp sgt i64 %n, 0
  br i1 %nonempty, label %loop, label %exit
loop:
  %i = phi i64 [0, %entry], [%i.next, %loop]
  %acc = phi i64 [0, %entry], [%acc.next, %loop]
  %q = getelementptr inbounds i64, i64* %p, i64 %i
  %v = load i64, i64* %q, align 8
  %acc.next = add i64 %acc, %v
  %i.next = add nuw nsw i64 %i, 1
  %done = icmp eq i64 %i.next, %n
  br i1 %done, label %exit, label %loop
exit:
  %r = phi i64 [0, %entry], [%acc.next, %loop]
  ret i64 %r
}
"""


def _read_kernel():
    """An int64 sum compiled by LLVM for the host CPU: vectorized, several accumulators,
    nothing but loads and integer adds -- it is bound by memory reads, not arithmetic (unlike
    ``np.sum`` on floats, ~20 GB/s here).  Called through ctypes, which releases the GIL."""
    import llvmlite.binding as llvm
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()

    def machine():
        return llvm.Target.from_default_triple().create_target_machine(
            cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(), opt=3, jit=True)
    mod = llvm.parse_assembly(_READ_IR)
    mod.triple = llvm.get_process_triple()
    tm = machine()
    mod.data_layout = str(tm.target_data)
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    engine = llvm.create_mcjit_compiler(mod, machine())
    engine.finalize_object()
    fn = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64)(
        engine.get_function_address("read_sum"))
    return fn, engine


def measure_bandwidth(nbytes: int, repeats: int) -> dict[str, float]:
    """GB/s of a read-only reduction and of a copy (memcpy), on 1 and on all threads."""
    fn, _engine = _read_kernel()
    n = nbytes // 8
    src = np.ones(n, dtype=np.int64)
    dst = np.ones(n, dtype=np.int64)          # touched: no page faults in the timings
    assert fn(src.ctypes.data, n) == n
    threads = max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    pool = ThreadPoolExecutor(max_workers=threads)
    s_ptr, d_ptr = src.ctypes.data, dst.ctypes.data

    def split(t):
        return [(n * k // t, n * (k + 1) // t) for k in range(t)]

    def read(t):
        parts = split(t)
        return lambda: [f.result() for f in [pool.submit(fn, s_ptr + 8 * a, b - a) for a, b in parts]]

    def copy(t):
        parts = split(t)
        return lambda: [f.result() for f in
                        [pool.submit(ctypes.memmove, d_ptr + 8 * a, s_ptr + 8 * a, 8 * (b - a)) for a, b in parts]]

    tests = {"read 1T": (read(1), src.nbytes), "copy 1T": (copy(1), 2 * src.nbytes)}
    if threads > 1:
        tests[f"read {threads}T"] = (read(threads), src.nbytes)
        tests[f"copy {threads}T"] = (copy(threads), 2 * src.nbytes)
    samples = {k: [] for k in tests}
    for r in range(repeats):
        for name, (call, _) in tests.items():
            call()
            samples[name].append(_time_block(call, 1))
    pool.shutdown()
    out = {name: tests[name][1] / float(np.median(s)) / 1e9 for name, s in samples.items()}
    out["threads"] = threads
    return out


def last_level_cache_bytes() -> int:
    """Largest CPU cache (Linux sysfs); 0 when unknown."""
    best = 0
    for size_file in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        try:
            text = size_file.read_text().strip().upper()
            scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
            best = max(best, int(text.rstrip("KMG")) * scale)
        except (OSError, ValueError):
            pass
    return best


# ---- printing ---------------------------------------------------------------------------

def fmt_time(seconds: float | None, micro: bool) -> str:
    if seconds is None:
        return "-"
    if micro or seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    return f"{seconds * 1e3:.2f} ms"


def fmt_ratio(other: float | None, mine: float | None) -> str:
    if other is None or mine is None:
        return "-"
    return f"{other / mine:.2f}"


def fmt_bytes(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


HEADER = ("workload", "size", "NumPy", "numexpr", "JAX", "nbxla", "xNumPy", "xnumexpr", "xJAX",
          "GB/s", "%BW", "compile ms nbxla/JAX", "check")


def table_row(res: Result, read_bw: float, cache_bytes: int = 0) -> tuple[str, ...]:
    c, t = res.case, res.times
    micro = c.per_call_us
    mine = t.get("nbxla")
    gbs = res.bytes_moved / mine / 1e9 if mine else None
    ne_time = fmt_time(t.get("numexpr"), micro) + (" hyb" if c.ne_hybrid and "numexpr" in t else "")
    comp = f"{res.compile_ms['nbxla']:.0f}" if "nbxla" in res.compile_ms else "-"
    comp += f"/{res.compile_ms['JAX']:.0f}" if "JAX" in res.compile_ms else "/-"
    check = "ok" if not res.mismatches else "DIFF:" + ",".join(res.mismatches)
    if res.error:
        check += " ERR:" + ",".join(res.error)
    return (c.name, c.size, fmt_time(t.get("NumPy"), micro), ne_time, fmt_time(t.get("JAX"), micro),
            fmt_time(mine, micro), fmt_ratio(t.get("NumPy"), mine), fmt_ratio(t.get("numexpr"), mine),
            fmt_ratio(t.get("JAX"), mine), f"{gbs:.1f}" if gbs else "-",
            (f"{100 * gbs / read_bw:.0f}%" + ("*" if res.bytes_moved < cache_bytes else ""))
            if gbs and read_bw else "-", comp, check)


def print_table(rows: list[tuple[str, ...]]):
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for k, row in enumerate(rows):
        print("  ".join(cell.ljust(w) if i < 2 or i == len(row) - 1 else cell.rjust(w)
                        for i, (cell, w) in enumerate(zip(row, widths))).rstrip())
        if k == 0:
            print("  ".join("-" * w for w in widths))


def diagnose(res: Result) -> list[str]:
    """Why nbxla trails: its fusion report and any fusion the CPU backend interprets."""
    lines = [f"    {name}: {why}" for name, why in res.mismatches.items()]
    if "nbxla_run_us" in res.compile_ms:
        lines.append(f"    call overhead: executable.run alone {res.compile_ms['nbxla_run_us']:.1f} us, "
                     f"the jit call {res.compile_ms['nbxla_call_us']:.1f} us (best of 3; the difference "
                     "is argument flattening, signature and cache lookup)")
    comp = getattr(res.nbxla_fn, "last_compilation", None)
    if comp is None:
        return lines
    native = getattr(comp.executable, "native", None)
    interpreted = getattr(native, "interpreted", {}) or {}
    for name, why in interpreted.items():
        lines.append(f"    interpreted (not native): {name}: {why}")
    try:
        report = comp.stage("fusion_report")
    except Exception as e:  # noqa: BLE001
        report = f"(no fusion report: {e})"
    lines += ["    " + line for line in report.splitlines()]
    return lines


def _git_state() -> str:
    import subprocess
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                              text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "nbxla"], cwd=REPO,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (head or "unknown") + (" + uncommitted changes in nbxla/" if dirty else "")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="small sizes: a smoke test")
    p.add_argument("--big", action="store_true",
                   help="add the running example at 16384x16384 (1 GiB per input; ~6 GiB resident with all contenders)")
    p.add_argument("--only", help="run only workloads whose name contains one of these (comma separated): "
                                  "running, sum_xyz, softmax, layernorm, blackscholes, lstm, chain20")
    p.add_argument("--reductions", action="store_true",
                   help="add reductions over middle axes and wide columns, and argmax "
                        "(sum_middle, mean_hw, sum_columns, argmax_all, argmax_rows, argmax_columns)")
    p.add_argument("--repeats", type=int, help="samples per contender (default 9; 3 with --quick)")
    p.add_argument("--disk-cache", action="store_true",
                   help="let nbxla use its persistent object-code cache (compile times then show "
                        "loads from disk after the first run); off by default: cold compiles")
    p.add_argument("--blas-threads", type=int,
                   help="threads for NumPy's BLAS (the matmuls of NumPy, numexpr-hybrid and nbxla's dot "
                        "thunks); default: the library's own choice")
    p.add_argument("--explain", action="store_true",
                   help="print nbxla's fusion report for every workload, not only where it trails")
    args = p.parse_args(argv)
    repeats = args.repeats or (3 if args.quick else 9)
    sample_s = 0.002 if args.quick else 0.02

    print(f"nbxla {nbxla.__version__}, NumPy {np.__version__}, "
          f"numexpr {ne.__version__ if ne else 'not installed'} ({ne.nthreads if ne else '-'} threads), "
          f"JAX {jax.__version__ if jax else 'not installed'}"
          + (f" ({jax.devices()[0].platform})" if jax else ""))
    print(f"tree: {_git_state()}")
    print("nbxla compile times: " + ("persistent cache ON (NBXLA_CACHE_DIR="
                                      f"{os.environ.get('NBXLA_CACHE_DIR', 'default')})" if _DISK_CACHE
                                      else "cold (persistent cache off)"))
    blas = {k: os.environ[k] for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
            if k in os.environ}
    print("BLAS threads: " + (", ".join(f"{k}={v}" for k, v in blas.items()) if blas else
                              "library default (set OPENBLAS_NUM_THREADS=1 to keep BLAS off nbxla's cores)"))
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    print(f"cores usable: {len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()}"
          + (f", load average {load[0]:.1f} (other processes distort timings; ratios are interleaved)"
             if load else ""))

    bw_bytes = (64 << 20) if args.quick else (1 << 30)
    bw = measure_bandwidth(bw_bytes, 3 if args.quick else 5)
    threads = bw.pop("threads")
    print(f"bandwidth ({fmt_bytes(bw_bytes)} int64 array; read = LLVM-vectorized int64 sum, "
          f"copy = memcpy, counted as read+write bytes): "
          + ", ".join(f"{k} {v:.1f} GB/s" for k, v in bw.items()))
    read_bw = bw.get(f"read {threads}T", bw["read 1T"])
    if args.quick:
        print(f"%BW below = nbxla GB/s / read {threads}T ({read_bw:.1f} GB/s)\n")

    rng = np.random.default_rng(0)
    results = []
    for case in build_cases(args):
        print(f"  running {case.name} {case.size} ...", file=sys.stderr, flush=True)
        results.append(run_case(case, rng, repeats, sample_s))
        gc.collect()
    if not args.quick:      # once more at the end: the fraction uses the best of the two
        bw_after = measure_bandwidth(bw_bytes, 5)
        bw_after.pop("threads")
        print("bandwidth again after the workloads: "
              + ", ".join(f"{k} {v:.1f} GB/s" for k, v in bw_after.items()))
        read_bw = max(read_bw, bw_after.get(f"read {threads}T", bw_after["read 1T"]))
        print(f"%BW below = nbxla GB/s / best read {threads}T ({read_bw:.1f} GB/s)\n")

    print(f"float32; medians of {repeats} interleaved samples; xNAME = NAME time / nbxla time "
          "(> 1: nbxla faster); hyb = numexpr with NumPy for what it cannot express")
    cache_bytes = last_level_cache_bytes()
    rows = [HEADER] + [table_row(r, read_bw, cache_bytes) for r in results]
    print_table(rows)
    if cache_bytes and any(r.bytes_moved < cache_bytes for r in results):
        print(f"* inputs + outputs fit in the {fmt_bytes(cache_bytes)} last-level cache: "
              "not a DRAM-bandwidth figure")

    for res in results:
        if res.peak:
            print(f"\npeak extra memory during one call, {res.case.name} {res.case.size} "
                  f"(inputs {fmt_bytes(res.input_bytes)}, already resident): "
                  + ", ".join(f"{n} {fmt_bytes(b)}" + (f" ({how})" if how != "RSS" else "")
                              for n, (b, how) in res.peak.items()))
    firsts = [(r.case.name, r.case.size, r.compile_ms["nbxla_first_call"]) for r in results
              if "nbxla_first_call" in r.compile_ms]
    if firsts:
        print("\nnbxla first call (trace + compile + run), ms: "
              + ", ".join(f"{n} {s} {ms:.0f}" for n, s, ms in firsts))

    for res in results:
        t = res.times
        trails = "nbxla" in t and any(t.get(o) is not None and t[o] < t["nbxla"] for o in ("NumPy", "JAX"))
        if res.error:
            for name, err in res.error.items():
                print(f"\n{res.case.name} {res.case.size}: {name} failed: {err}")
        if trails or args.explain or res.mismatches or "nbxla_run_us" in res.compile_ms:
            heading = []
            if trails:
                heading.append("nbxla trails " + ", ".join(
                    o for o in ("NumPy", "JAX") if t.get(o) is not None and t[o] < t["nbxla"]))
            if res.mismatches:
                heading.append("results differ from NumPy's: " + ", ".join(res.mismatches))
            print(f"\n{res.case.name} {res.case.size}: {'; '.join(heading) or 'nbxla report'}")
            print("\n".join(diagnose(res)))
    return 0


if __name__ == "__main__":
    from nbxla.flags import switch_on
    switch_on("verify")     # (every jit signature's first call checked against NumPy;
                            # timings are of later calls, which it does not slow)
    sys.exit(main())
