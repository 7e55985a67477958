"""Whole programs with Python loops: ``@nbxla.jit`` (loops rolled into HLO ``while``) against
eager NumPy (the loops run in the interpreter).

    python benchmarks/loop_programs.py              # suite-like sizes, about a minute
    python benchmarks/loop_programs.py --quick      # small sizes (seconds)
    python benchmarks/loop_programs.py --only cholesky,iir --repeats 7
    python benchmarks/loop_programs.py --mode auto  # nbxla.jit(fn, mode="auto") instead

Per program: the first call (trace + optimize + codegen + run, a fresh cache), the second
call alone, then NumPy and the compiled function sampled round-robin (medians), the speedup
(NumPy time / nbxla time), whether the optimized HLO kept a ``while`` and how many, and
whether the results agree.  Every call gets fresh copies of the inputs (the programs write
into them).  Asserts nothing about speed.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import nbxla  # noqa: E402
from nbxla.examples import (advect_until, channel_flow, cholesky, contour_integral, correlation, covariance,  # noqa: E402
                            crc16, durbin, floyd_warshall, fnv1a, go_fast, gramschmidt, gramschmidt_left,
                            gramschmidt_outer, histogram_fill, iir_filter, jacobi_2d, k3mm_loops, kahan_sum, knn_smooth,
                            lu, lu_pivot, mandelbrot, nbody, newton_sqrt, nussinov, pairwise_distances, rolling_median,
                            seidel_2d, sort_rows, spmv, stable_ranks, symm, syr2k, thomas, top_k_rows, trisolv, trmm,
                            wave_2d, widest_path)
from nbxla.runtime.cache import DEFAULT_CACHE  # noqa: E402


def _spd(rng, n):
    a = rng.random((n, n))
    return a @ a.T + n * np.eye(n)


def _floyd_paths(n):
    """npbench's initialization: int32 distances, 999 for missing edges."""
    i, j = np.indices((n, n))
    path = (i * j % 7 + 1).astype(np.int32)
    path[((i + j) % 13 == 0) | ((i + j) % 7 == 0) | ((i + j) % 11 == 0)] = 999
    return path


def _contour(rng, NR, NM, points):
    ham = rng.random((3, NR, NR)) + 1j * rng.random((3, NR, NR))
    radii = np.r_[np.full(points // 2, 0.8), np.full(points - points // 2, 1.2)]
    pts = np.exp(1j * np.linspace(0, 2 * np.pi, points)) * radii
    return NR, NM, 2, ham, pts, rng.random((NR, NM)) + 1j * rng.random((NR, NM))


def _channel(ny, nx, nit):
    """npbench's start: everything at rest (its "S" size is 61 x 61, nit 5)."""
    return (nit, np.zeros((ny, nx)), np.zeros((ny, nx)), .01, 2 / (nx - 1), 2 / (ny - 1), np.zeros((ny, nx)),
            1.0, .1, 1.0)


def _grid(rows, cols):
    """The complex plane around the Mandelbrot set."""
    return np.linspace(-2, 1, cols)[None, :] + 1j * np.linspace(-1.2, 1.2, rows)[:, None]


def _pulse(n):
    """A square of ones in the middle of an n x n field at rest."""
    u = np.zeros((n, n))
    u[n // 3:2 * n // 3, n // 3:2 * n // 3] = 1.0
    return u


def _bodies(rng, n, steps):
    """npbench's start: equal masses, random positions and velocities."""
    return (20.0 * np.ones((n, 1)) / n, rng.random((n, 3)), rng.random((n, 3)), n, steps, 0.01, 1.0, 0.1)


def _csr(rng, rows, cols, nnz):
    """npbench's spmv input: a random sparse matrix's uint32 row offsets and column indices."""
    flat = np.sort(rng.choice(rows * cols, nnz, replace=False))
    indptr = np.searchsorted(flat // cols, np.arange(rows + 1)).astype(np.uint32)
    return indptr, (flat % cols).astype(np.uint32), rng.random(nnz), rng.random(cols)


def _with_nans(rng, a):
    a[rng.random(a.shape) < 0.05] = np.nan
    a[rng.random(a.shape) < 0.02] = -0.0
    return a


def programs(quick: bool):
    rng = np.random.default_rng(0)
    s = (lambda big, small: small if quick else big)
    n = s(120, 30)
    M, N = s(500, 40), s(600, 50)
    return {
        # (npbench's "S" sizes where known; the loop shapes of issue 30)
        "correlation": (correlation, lambda: (M, float(N), rng.random((N, M)))),
        "covariance": (covariance, lambda: (M, float(N), rng.random((N, M)))),
        "floyd_warshall": (floyd_warshall, lambda: (_floyd_paths(s(200, 20)),)),
        "gramschmidt_outer": (gramschmidt_outer, lambda: (rng.random((s(240, 24), s(200, 20))),)),
        "contour_integral": (contour_integral, lambda: _contour(rng, s(50, 10), s(150, 30), s(32, 8))),
        "symm": (symm, lambda: (1.5, 1.2, rng.random((s(60, 12), s(80, 14))), rng.random((s(60, 12),) * 2),
                                rng.random((s(60, 12), s(80, 14))))),
        "syr2k": (syr2k, lambda: (1.5, 1.2, rng.random((s(70, 12),) * 2), rng.random((s(70, 12), s(50, 10))),
                                  rng.random((s(70, 12), s(50, 10))))),
        "trmm": (trmm, lambda: (1.5, rng.random((s(60, 12),) * 2), rng.random((s(60, 12), s(80, 14))))),
        "go_fast": (go_fast, lambda: (rng.random((s(2000, 100),) * 2),)),
        "crc16": (crc16, lambda: (rng.integers(0, 256, s(1000, 50)).astype(np.uint8),)),
        "cholesky": (cholesky, lambda: (_spd(rng, n),)),
        "lu": (lu, lambda: (_spd(rng, n),)),
        "trisolv": (trisolv, lambda: (np.tril(rng.random((s(400, 40),) * 2)) + s(400, 40) * np.eye(s(400, 40)),
                                      rng.random(s(400, 40)))),
        "durbin": (durbin, lambda: (rng.random(s(400, 40)) * 0.01,)),
        "iir": (iir_filter, lambda: (rng.random(s(20000, 500)), 0.2, 0.3, 0.5)),
        "jacobi_2d": (jacobi_2d, lambda: (s(100, 10), rng.random((s(250, 30),) * 2), rng.random((s(250, 30),) * 2))),
        "seidel_2d": (seidel_2d, lambda: (s(8, 3), rng.random((s(60, 12),) * 2))),
        "newton_sqrt": (newton_sqrt, lambda: (rng.random(s(100000, 1000)) + 0.5,)),
        "gramschmidt": (gramschmidt, lambda: (rng.random((s(120, 20), s(100, 16))),)),
        "channel_flow": (channel_flow, lambda: _channel(*s((61, 61, 5), (21, 21, 3)))),
        "histogram": (histogram_fill, lambda: (rng.integers(0, 64, s(20000, 500)), 64)),
        # (more shapes in the same styles: a shrinking row slice with a reduction, a (max, min)
        # Floyd-Warshall, left-looking Gram-Schmidt, pivoting, a complex grid, a leapfrog
        # stencil with four boundary updates, a scalar recurrence)
        "pairwise_dist": (pairwise_distances, lambda: (rng.random((s(300, 30), 8)),)),
        "widest_path": (widest_path, lambda: (rng.random((s(200, 20),) * 2),)),
        "gramschmidt_left": (gramschmidt_left, lambda: (rng.random((s(120, 20), s(60, 12))),)),
        "lu_pivot": (lu_pivot, lambda: (rng.random((s(100, 16),) * 2),)),
        "mandelbrot": (mandelbrot, lambda: (_grid(s(100, 20), s(120, 24)), s(50, 30))),
        "wave_2d": (wave_2d, lambda: (s(100, 10), _pulse(s(100, 20)), 0.2)),
        "kahan_sum": (kahan_sum, lambda: (rng.random(s(20000, 500)),)),
        # (npbench's own forms: helpers that return from ifs, np.ndarray buffers, a float clock)
        "nussinov": (nussinov, lambda: (s(60, 12), rng.integers(0, 4, s(60, 12), dtype=np.int32))),
        "nbody": (nbody, lambda: _bodies(rng, s(100, 12), s(50, 6))),
        # (a slice whose bounds are read from the data: npbench's S size)
        "spmv": (spmv, lambda: _csr(rng, s(4096, 60), s(4096, 60), s(8192, 120))),
        # (found by hunting, numba-style: loop variables reused by every nest, a sweep reading
        # an array it updated, NumPy scalar types on array items, a float clock, an argsort
        # per step)
        "k3mm_loops": (k3mm_loops, lambda: tuple(rng.random(shape) for shape in
                                                 [(s(40, 8), s(42, 9)), (s(42, 9), s(43, 10)),
                                                  (s(43, 10), s(41, 7)), (s(41, 7), s(44, 11))])),
        "thomas": (thomas, lambda: (rng.random(s(20000, 200)), rng.random(s(20000, 200)) + 4,
                                    rng.random(s(20000, 200)), rng.random(s(20000, 200)))),
        "fnv1a": (fnv1a, lambda: (rng.integers(0, 256, s(20000, 100)).astype(np.uint8),)),
        "advect_until": (advect_until, lambda: (rng.random(s(2000, 50)), 1.0, 1.0 / s(2000, 50), s(0.5, 0.2))),
        "knn_smooth": (knn_smooth, lambda: (rng.random(s(500, 30)), rng.random(s(500, 30)), 5)),
        # (sorts inside loops: a window's median, the top k of each row by argsort(-row), rows
        # sorted in place with NaNs and signed zeros, a stable argsort of integer labels)
        "rolling_median": (rolling_median, lambda: (rng.random(s(20000, 200)), 15)),
        "top_k_rows": (top_k_rows, lambda: (rng.integers(0, 20, (s(500, 30), s(500, 30))).astype(np.float64), 5)),
        "sort_rows": (sort_rows, lambda: (_with_nans(rng, rng.standard_normal((s(500, 30), s(500, 30)))),)),
        "stable_ranks": (stable_ranks, lambda: (rng.integers(0, 30, (s(500, 30), s(500, 30))).astype(np.int32),
                                                rng.random((s(500, 30), s(500, 30))))),
    }


def _time(fn, args, repeats_inner=1) -> float:
    a = copy.deepcopy(args)
    start = time.perf_counter()
    fn(*a)
    return time.perf_counter() - start


def _agree(want, got) -> bool:
    want = want if isinstance(want, tuple) else (want,)
    got = got if isinstance(got, tuple) else (got,)
    return all(w is g is None or np.allclose(np.asarray(g), np.asarray(w), rtol=1e-6, atol=1e-9,
                                             equal_nan=True)
               for w, g in zip(want, got))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", default="")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--mode", choices=["compile", "auto"], default="compile",
                        help="nbxla.jit's mode (auto: whole-function compilation where it "
                             "applies, measured against plain NumPy)")
    opts = parser.parse_args()
    chosen = [p for p in opts.only.split(",") if p]
    rows = []
    for name, (fn, make) in programs(opts.quick).items():
        if chosen and name not in chosen:
            continue
        args = make()
        DEFAULT_CACHE.clear()
        jitted = nbxla.jit(fn, mode=opts.mode)
        eager_args, jit_args = copy.deepcopy(args), copy.deepcopy(args)
        start = time.perf_counter()
        got = jitted(*jit_args)
        first = time.perf_counter() - start
        want = fn(*eager_args)
        second = _time(jitted, args)
        ok = _agree(want, got) and all(_agree(e, j) for e, j in zip(eager_args, jit_args)
                                       if isinstance(e, np.ndarray))
        compilation = jitted.last_compilation
        whiles = compilation.stage("optimized_hlo").count(" while(") if compilation else 0
        numpy_t, nbxla_t = [], []
        for r in range(opts.repeats):
            pair = [(numpy_t, fn), (nbxla_t, jitted)]
            for times, f in (pair if r % 2 == 0 else pair[::-1]):
                times.append(_time(f, args))
        t_np, t_nb = statistics.median(numpy_t), statistics.median(nbxla_t)
        rows.append((name, first, t_np, t_nb, t_np / t_nb, whiles, ok))
        print(f"{name:14s} first call {first:7.2f} s   numpy {t_np * 1e3:9.2f} ms   nbxla "
              f"{t_nb * 1e3:9.2f} ms   xNumPy {t_np / t_nb:7.1f}   2nd call xNumPy "
              f"{t_np / second:7.1f}   whiles {whiles}   {'ok' if ok else 'MISMATCH'}", flush=True)
    if rows:
        worst = max(r[1] for r in rows)
        print(f"\n{len(rows)} programs; slowest first call {worst:.2f} s; "
              f"geometric-mean speedup over NumPy "
              f"{statistics.geometric_mean([r[4] for r in rows]):.1f}x")


if __name__ == "__main__":
    from nbxla.flags import switch_on
    switch_on("verify")     # (every jit signature's first call checked against NumPy;
                            # timings are of later calls, which it does not slow)
    main()
