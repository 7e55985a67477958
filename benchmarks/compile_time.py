"""First-call seconds of loop programs (issue 30): ``@nbxla.jit`` (trace + optimize + codegen +
one run, in-memory and persistent caches off) against ``jax.jit`` of a hand-written JAX port
where there is one (trace + XLA compile + one run), then the speed of later calls against
eager NumPy.

    PYTHONPATH=. /work/benchvenv/bin/python benchmarks/compile_time.py            # small, medium
    PYTHONPATH=. /work/benchvenv/bin/python benchmarks/compile_time.py --only conv2d --repeats 5
    ... --mode auto          # nbxla.jit(fn, mode="auto") instead
    ... --breakdown          # and where nbxla's first call went, stage by stage (compile_clock)

Each first call is repeated (``--first-repeats``), nbxla and JAX interleaved, from empty caches:
nbxla's compiled programs, converted functions and per-geometry helper kernels, and JAX's
caches (``jax.clear_caches``).  What a process pays once (LLVM's and XLA's start-up, nbxla's
C support code) is paid by a warm-up program first and printed apart.  Both wall-clock and
CPU seconds are printed, each the minimum over the repeats: on a loaded machine the wall
clock mostly measures the wait for a core.

The programs are the usual NumPy loop forms: a convolution as a double loop over output
positions (npbench's conv2d and LeNet-5), an azimuthal integration over radial bins with a
boolean mask per bin, a correlation matrix filled by triangular row products, LU, Jacobi.
Asserts nothing about time; prints whether each result agrees with NumPy's.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("NBXLA_CACHE_DIR", "off")     # (a first call, not a disk-cache hit)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

import nbxla  # noqa: E402
from nbxla import examples  # noqa: E402
from nbxla.compile_clock import StageTimes, recording  # noqa: E402
from nbxla.frontend import autograph  # noqa: E402
from nbxla.runtime import small_gemm  # noqa: E402
from nbxla.runtime.cache import DEFAULT_CACHE  # noqa: E402

try:
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)
except ImportError:                     # (JAX is a contender, not a dependency)
    jax = None


# ---- JAX ports (the idiomatic JAX form of each program) ---------------------------------------

def _jax_ports():
    if jax is None:
        return {}
    lax = jax.lax

    def conv2d(x, w):
        return lax.conv_general_dilated(x, w, (1, 1), "VALID",
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"))

    def maxpool(x):
        return lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")

    def lenet5(x, c1, b1, c2, b2, f1, fb1, f2, fb2, f3, fb3, N, C):
        x = maxpool(jnp.maximum(conv2d(x, c1) + b1, 0))
        x = maxpool(jnp.maximum(conv2d(x, c2) + b2, 0))
        x = jnp.reshape(x, (N, C))
        x = jnp.maximum(x @ f1 + fb1, 0)
        x = jnp.maximum(x @ f2 + fb2, 0)
        return x @ f3 + fb3

    def azimint(data, radius, npt):
        rmax = radius.max()

        def step(i, res):
            r1, r2 = rmax * i / npt, rmax * (i + 1) / npt
            mask = (r1 <= radius) & (radius < r2)
            return res.at[i].set(jnp.sum(jnp.where(mask, data, 0)) / jnp.sum(mask))
        return lax.fori_loop(0, npt, step, jnp.zeros(npt))

    def correlation(M, float_n, data):
        mean = jnp.mean(data, axis=0)
        stddev = jnp.std(data, axis=0)
        stddev = jnp.where(stddev <= 0.1, 1.0, stddev)
        data = (data - mean) / (jnp.sqrt(float_n) * stddev)
        corr = data.T @ data
        return corr.at[jnp.diag_indices(M)].set(1.0)

    def jacobi_2d(tsteps, A, B):
        def step(t, ab):
            A, B = ab
            B = B.at[1:-1, 1:-1].set(0.2 * (A[1:-1, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:] + A[2:, 1:-1] + A[:-2, 1:-1]))
            A = A.at[1:-1, 1:-1].set(0.2 * (B[1:-1, 1:-1] + B[1:-1, :-2] + B[1:-1, 2:] + B[2:, 1:-1] + B[:-2, 1:-1]))
            return A, B
        return lax.fori_loop(1, tsteps, step, (A, B))

    return {"conv2d": (conv2d, ()), "lenet5": (lenet5, (11, 12)), "azimint": (azimint, (2,)),
            "correlation": (correlation, (0,)), "jacobi_2d": (jacobi_2d, (0,))}


# ---- programs ----------------------------------------------------------------------------------

def _lenet_args(rng, n, h):
    c_before = 16 * ((((h - 4) // 2) - 4) // 2) ** 2
    f = (lambda *s: rng.random(s, dtype=np.float32))
    return (f(n, h, h, 1), f(5, 5, 1, 6), f(6), f(5, 5, 6, 16), f(16), f(c_before, 120), f(120),
            f(120, 84), f(84), f(84, 10), f(10), n, c_before)


def _spd(rng, n):
    a = rng.random((n, n))
    return a @ a.T + n * np.eye(n)


def programs(size: str):
    rng = np.random.default_rng(0)
    f32 = (lambda *s: rng.random(s, dtype=np.float32))
    small = size == "small"
    n_img, h = (8, 32) if small else (4, 64)
    return {
        "conv2d": (examples.conv2d, lambda: (f32(n_img, h, h, 3), f32(5, 5, 3, 16))),
        "lenet5": (examples.lenet5, lambda: _lenet_args(rng, 4 if small else 8, 28 if small else 44)),
        "azimint": (examples.azimint_naive,
                    lambda: (rng.random(40000 if small else 400000), rng.random(40000 if small else 400000),
                             100 if small else 1000)),
        "correlation": (examples.correlation,
                        lambda: (80, 100.0, rng.random((100, 80))) if small else (240, 260.0, rng.random((260, 240)))),
        "lu": (examples.lu, lambda: (_spd(rng, 60 if small else 120),)),
        "jacobi_2d": (examples.jacobi_2d, lambda: (50, rng.random((60, 60)), rng.random((60, 60))) if small
                      else (100, rng.random((250, 250)), rng.random((250, 250)))),
    }


def _agree(want, got) -> bool:
    want = want if isinstance(want, tuple) else (want,)
    got = got if isinstance(got, tuple) else (got,)
    return all(w is g is None or np.allclose(np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-6, equal_nan=True)
               for w, g in zip(want, got))


def _seconds(fn, args) -> float:
    return _wall_and_cpu(fn, args)[0]


def _wall_and_cpu(fn, args) -> tuple[float, float]:
    a = copy.deepcopy(args)
    start, start_cpu = time.perf_counter(), time.process_time()
    out = fn(*a)
    if jax is not None:
        jax.block_until_ready(out)
    return time.perf_counter() - start, time.process_time() - start_cpu


def _forget_nbxla():
    """Empty the caches a first call of a new program finds empty (see the module's docstring)."""
    DEFAULT_CACHE.clear()
    autograph._converted.clear()
    small_gemm._kernels.clear()


def _nbxla_first(fn, args, mode) -> tuple[float, float, StageTimes, object]:
    _forget_nbxla()
    jitted = nbxla.jit(fn, mode=mode)
    with recording() as stages:
        wall, cpu = _wall_and_cpu(jitted, args)
    return wall, cpu, stages, jitted


def _jax_first(port, static, args) -> tuple[float, float]:
    jax.clear_caches()
    return _wall_and_cpu(jax.jit(port, static_argnums=static), args)


def _warm_up(ports) -> str:
    """Pay once what a process pays once (LLVM's and XLA's start-up) with a small Jacobi."""
    fn, make = programs("small")["jacobi_2d"]
    args = make()
    nb = _wall_and_cpu(nbxla.jit(fn), args)
    text = f"warm-up (once per process, jacobi_2d small): nbxla {nb[0]:.2f} s ({nb[1]:.2f} s cpu)"
    if "jacobi_2d" in ports:
        jx = _wall_and_cpu(jax.jit(ports["jacobi_2d"][0], static_argnums=ports["jacobi_2d"][1]), args)
        text += f", JAX {jx[0]:.2f} s ({jx[1]:.2f} s cpu)"
    return text


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="")
    parser.add_argument("--sizes", default="small,medium")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--first-repeats", type=int, default=3)
    parser.add_argument("--mode", choices=["compile", "auto"], default="compile")
    parser.add_argument("--breakdown", action="store_true",
                        help="print where nbxla's first call went (its fastest repeat, by CPU time)")
    opts = parser.parse_args()
    chosen = [p for p in opts.only.split(",") if p]
    ports = _jax_ports()
    print(_warm_up(ports))
    print(f"{'program':12s} {'size':6s} {'nbxla 1st':>9s} {'(cpu)':>6s} {'JAX 1st':>8s} {'(cpu)':>6s} "
          f"{'ratio':>6s} {'(cpu)':>6s} {'NumPy ms':>9s} {'nbxla ms':>9s} {'xNumPy':>7s}  agrees")
    for size in opts.sizes.split(","):
        for name, (fn, make) in programs(size).items():
            if chosen and name not in chosen:
                continue
            args = make()
            nb_runs, jax_runs = [], []
            for r in range(opts.first_repeats):
                # (interleaved, the order alternating: neither always pays a cold cache)
                for which in ((0, 1) if r % 2 == 0 else (1, 0)):
                    if which == 0:
                        nb_runs.append(_nbxla_first(fn, args, opts.mode))
                    elif name in ports:
                        jax_runs.append(_jax_first(*ports[name], args))
            first, first_cpu = min(w for w, *_ in nb_runs), min(c for _, c, *_ in nb_runs)
            stages = min(nb_runs, key=lambda run: run[1])[2]
            jitted = nb_runs[-1][3]
            got, want = jitted(*copy.deepcopy(args)), fn(*copy.deepcopy(args))
            ok = _agree(want, got)
            jax_first = jax_cpu = None
            if jax_runs:
                jax_first, jax_cpu = min(w for w, _ in jax_runs), min(c for _, c in jax_runs)
            numpy_t, nbxla_t = [], []
            for r in range(opts.repeats):
                pair = [(numpy_t, fn), (nbxla_t, jitted)]
                for times, f in (pair if r % 2 == 0 else pair[::-1]):
                    times.append(_seconds(f, args))
            t_np, t_nb = min(numpy_t), min(nbxla_t)
            jax_text = f"{jax_first:8.2f} {jax_cpu:6.2f} {first / jax_first:6.1f} {first_cpu / jax_cpu:6.1f}" \
                if jax_first else f"{'-':>8s} {'-':>6s} {'-':>6s} {'-':>6s}"
            print(f"{name:12s} {size:6s} {first:9.2f} {first_cpu:6.2f} {jax_text} {t_np * 1e3:9.2f} "
                  f"{t_nb * 1e3:9.2f} {t_np / t_nb:7.2f}  {'ok' if ok else 'MISMATCH'}", flush=True)
            if opts.breakdown:
                print(stages.to_text(), flush=True)


if __name__ == "__main__":
    main()
