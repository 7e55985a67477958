"""GPU workloads: nbxla's CUDA kernels against eager CuPy and JAX on the GPU.

    python benchmarks/gpu_workloads.py                    # needs CuPy and a GPU
    python benchmarks/gpu_workloads.py --device cuda-emulator --quick   # smoke test, no GPU

The running example ``mean(3*x**2 + y)`` (default 16384 x 16384 float32), ``sum(x + y*z)``
and a column reduction with few columns, ``x.sum(axis=0)`` over (size**2/16) x 4 (2**24 x 4
by default: its rows are split across blocks), each timed with the inputs already on the
device: nbxla (``nbxla.jit``, device cuda, CuPy inputs so nothing is copied), eager CuPy (the
same NumPy-style code on CuPy arrays) and ``jax.jit`` on the GPU when JAX has one.  Contenders are interleaved
round-robin; medians of the repeats; device time measured with CUDA events around
``inner`` back-to-back calls.  Achieved bandwidth is the bytes of the inputs divided by
the time, and is compared with the device's copy bandwidth measured in the same run
(``cupy.copyto`` of a 1 GiB buffer, counted as read + write).

Issue #6's targets, printed in the last column: >= 85 % of copy bandwidth on the running
example and >= 3x eager CuPy.  This script has not yet run on a real GPU (no session so far
was lent one); ``--device cuda-emulator`` runs the kernels' logic on the host to check
the script itself and is far too slow for timings.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

import nbxla


def running_example(x, y):
    return (3 * x**2 + y).mean()


def sum_xyz(x, y, z):
    return (x + y * z).sum()


def column_sum(x):
    return x.sum(axis=0)


# name -> (function, number of inputs, input shape for --size n)
WORKLOADS = {"running": (running_example, 2, lambda n: (n, n)),
             "sum_xyz": (sum_xyz, 3, lambda n: (n, n)),
             "columns4": (column_sum, 1, lambda n: (n * n // 16, 4))}


def _cupy():
    try:
        import cupy
        cupy.cuda.runtime.getDeviceCount()
        return cupy
    except Exception as e:                       # no CuPy, no driver, no device
        print(f"CuPy/GPU not usable here ({type(e).__name__}: {e})")
        return None


def _jax_gpu():
    try:
        import jax
        return jax if any(d.platform == "gpu" for d in jax.devices()) else None
    except Exception:
        return None


def time_device(fn, cupy, inner: int) -> float:
    """Seconds per call, with CUDA events when on a GPU, else wall time."""
    if cupy is None:
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        return (time.perf_counter() - start) / inner
    begin, end = cupy.cuda.Event(), cupy.cuda.Event()
    begin.record()
    for _ in range(inner):
        fn()
    end.record()
    end.synchronize()
    return cupy.cuda.get_elapsed_time(begin, end) / 1e3 / inner


def copy_bandwidth(cupy) -> float | None:
    if cupy is None:
        return None
    a = cupy.empty(1 << 28, cupy.float32)
    b = cupy.empty_like(a)
    seconds = time_device(lambda: cupy.copyto(b, a), cupy, 5)
    return 2 * a.nbytes / seconds / 1e9


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=("cuda", "cuda-emulator"))
    parser.add_argument("--size", type=int, default=16384)
    parser.add_argument("--quick", action="store_true", help="size 64, 1 repeat (smoke test)")
    parser.add_argument("--repeats", type=int, default=7)
    opts = parser.parse_args(argv)
    n, repeats = (64, 1) if opts.quick else (opts.size, opts.repeats)
    cupy = _cupy() if opts.device == "cuda" else None
    if opts.device == "cuda" and cupy is None:
        print("nothing to measure: run with a GPU, or --device cuda-emulator to check the script")
        return 0
    jax = _jax_gpu() if cupy is not None else None
    bandwidth = copy_bandwidth(cupy)
    rng = np.random.default_rng(0)
    print(f"{'workload':10} {'size':>11} {'nbxla':>10} {'CuPy':>10} {'JAX':>10} "
          f"{'xCuPy':>6} {'GB/s':>7} {'%copyBW':>8}")
    for name, (fn, arity, shape_of) in WORKLOADS.items():
        shape = shape_of(n)
        host = [rng.random(shape, dtype=np.float32) for _ in range(arity)]
        args = [cupy.asarray(a) for a in host] if cupy is not None else host
        compiled = nbxla.jit(fn, device=opts.device)
        got = compiled(*args)
        want = fn(*[a.astype(np.float64) for a in host])
        got = np.asarray(got.get() if hasattr(got, "get") else got)
        if not np.allclose(got, want, rtol=1e-4):
            print(f"{name}: nbxla gives {got}, NumPy (float64) {want}")
            return 1
        contenders = {"nbxla": lambda: compiled(*args)}
        if cupy is not None:
            contenders["CuPy"] = lambda: fn(*args)
        if jax is not None:
            jfn = jax.jit(fn)
            jargs = [jax.device_put(a) for a in host]
            jfn(*jargs).block_until_ready()
            contenders["JAX"] = lambda: jfn(*jargs).block_until_ready()
        samples = {k: [] for k in contenders}
        for r in range(repeats):
            order = list(contenders)[r % len(contenders):] + list(contenders)[:r % len(contenders)]
            for k in order:
                samples[k].append(time_device(contenders[k], cupy, 1 if opts.quick else 10))
        t = {k: statistics.median(v) for k, v in samples.items()}
        gbs = sum(a.nbytes for a in host) / t["nbxla"] / 1e9
        ratio = f"{t['CuPy'] / t['nbxla']:6.2f}" if "CuPy" in t else "     -"
        frac = f"{gbs / bandwidth:8.0%}" if bandwidth else "       -"
        cells = [f"{t[k] * 1e3:8.3f}ms" if k in t else f"{'-':>10}" for k in ("nbxla", "CuPy", "JAX")]
        size = "x".join(map(str, shape))
        print(f"{name:10} {size:>11} {' '.join(cells)} {ratio} {gbs:7.1f} {frac}")
    if bandwidth:
        print(f"device copy bandwidth (read + write): {bandwidth:.0f} GB/s; "
              "targets: running >= 85 % of it and >= 3x CuPy")
    return 0


if __name__ == "__main__":
    from nbxla.flags import switch_on
    switch_on("verify")     # (every jit signature's first call checked against NumPy;
                            # timings are of later calls, which it does not slow)
    sys.exit(main())
