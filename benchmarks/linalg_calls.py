"""Small LAPACK calls (issue 30): ``np.linalg.cholesky``, ``solve`` (a vector and several
right-hand sides) and ``inv`` of n x n matrices under ``@nbxla.jit`` against eager NumPy.  At
these sizes a call is a few tens of microseconds, so the LAPACK variant chosen and every
microsecond of dispatch around it show in the ratio.

    PYTHONPATH=. /work/main/.venv/bin/python benchmarks/linalg_calls.py
    PYTHONPATH=. /work/main/.venv/bin/python benchmarks/linalg_calls.py --sizes 50,100,127,128 --clock cpu
    OPENBLAS_NUM_THREADS=1 PYTHONPATH=. ... --clock cpu     # (a busy machine: thread CPU time)

Contenders run interleaved, round by round; each figure is the minimum over rounds of the mean
over ``--calls`` calls.  ``--clock cpu`` reads the calling thread's CPU time, which a busy
machine disturbs less than the wall clock (it leaves out OpenBLAS's own threads: use it with
one BLAS thread).  The header names the OpenBLAS kernel (benchmarks/blas_info.py; its
``OPENBLAS_CORETYPE`` pins are removed first).  Asserts nothing about speed; ``check`` says
whether the results agree with NumPy's.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from blas_info import describe, unpin_openblas  # noqa: E402

UNPINNED = unpin_openblas()         # (before NumPy loads OpenBLAS)

import numpy as np  # noqa: E402

import nbxla  # noqa: E402


def cholesky(a):
    return np.linalg.cholesky(a)


def solve(a, b):
    return np.linalg.solve(a, b)


def inverse(a):
    return np.linalg.inv(a)


def _spd(n: int, dtype, seed: int = 1) -> np.ndarray:
    m = np.random.default_rng(seed).random((n, n))
    return (m @ m.T + n * np.eye(n)).astype(dtype)


def cases(sizes):
    """(name, function, arguments) per call and size, f64 and f32."""
    for dtype in (np.float64, np.float32):
        for n in sizes:
            a = _spd(n, dtype)
            b = np.random.default_rng(2).random((n, 4)).astype(dtype)
            label = f"{n} {np.dtype(dtype).name}"
            yield f"cholesky {label}", cholesky, (a,)
            yield f"solve vec {label}", solve, (a, np.ascontiguousarray(b[:, 0]))
            yield f"solve 4 rhs {label}", solve, (a, b)
            yield f"inv {label}", inverse, (a,)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="50,100", help="comma-separated matrix sizes")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--calls", type=int, default=200, help="calls per round (fewer for inv)")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    args = parser.parse_args()
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter
    print(describe(UNPINNED))
    print(f"clock: {args.clock}; {args.rounds} rounds; load {open('/proc/loadavg').read().split()[0]}"
          if Path("/proc/loadavg").exists() else f"clock: {args.clock}")
    print(f"{'call':24s} {'NumPy us':>9s} {'nbxla us':>9s} {'xNumPy':>7s}  check")
    for name, fn, call_args in cases([int(s) for s in args.sizes.split(",")]):
        jitted = nbxla.jit(fn)
        want, got = fn(*call_args), jitted(*call_args)
        tol = 1e-3 if want.dtype == np.float32 else 1e-9
        check = "ok" if np.allclose(got, want, rtol=tol, atol=tol) else "DIFFERS"
        calls = max(1, args.calls // 4) if fn is inverse else args.calls
        best = {"numpy": float("inf"), "nbxla": float("inf")}
        for _ in range(args.rounds):
            for who, f in (("numpy", fn), ("nbxla", jitted)):
                start = clock()
                for _ in range(calls):
                    f(*call_args)
                best[who] = min(best[who], (clock() - start) / calls)
        print(f"{name:24s} {best['numpy'] * 1e6:9.1f} {best['nbxla'] * 1e6:9.1f} "
              f"{best['numpy'] / best['nbxla']:7.2f}  {check}", flush=True)


if __name__ == "__main__":
    main()
