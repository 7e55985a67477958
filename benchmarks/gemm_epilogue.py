"""GEMM-bound programs (npbench's gemm / k2mm / k3mm / mlp forms, float64) under NumPy and
nbxla.jit, with and without (``nbxla before``) the GEMM epilogue fold (``runtime/gemm_epilogue.py``:
a dot scaled and added to an array of its shape runs as one ``?gemm`` with alpha and beta, into
the caller's array when donated), the thin-GEMM rule (``cpu_kernels.THIN_OUTPUT``: a small
output over a deep contraction on one BLAS thread, split over the pool) and the thin-GEMM
kernel (``runtime/thin_gemm.py``: a few rows against a large row-major matrix, streamed).  ``nbxla before`` is
compiled with both switched off in this process, so the contenders run interleaved on the same
inputs.

    python benchmarks/gemm_epilogue.py [--size S|M] [--repeats N] [--only gemm,k2mm]

Prints per program: min wall and process-CPU ms of each, NumPy / contender ratios, the load.
Unset OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE for numbers comparable to the npbench sweeps.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

import nbxla
from nbxla.runtime import cpu_executable, cpu_kernels, gemm_epilogue


def gemm(alpha, beta, C, A, B):
    C[:] = alpha * A @ B + beta * C
    return C


def k2mm(alpha, beta, A, B, C, D):
    D[:] = alpha * A @ B @ C + beta * D
    return D


def k3mm(A, B, C, D):
    return A @ B @ C @ D


def mlp(input, w1, b1, w2, b2, w3, b3, output):
    x = np.maximum(input @ w1 + b1, 0)
    x = np.maximum(x @ w2 + b2, 0)
    x = x @ w3 + b3
    e = np.exp(x - np.max(x, axis=-1, keepdims=True))
    output[:, :] = e / np.sum(e, axis=-1, keepdims=True)


SIZES = {   # npbench's bench_info presets
    "gemm": {"S": (1000, 1100, 1200), "M": (2500, 2750, 3000)},
    "k2mm": {"S": (800, 850, 900, 950), "M": (2000, 2250, 2500, 2750)},
    "k3mm": {"S": (800, 850, 900, 950, 1000), "M": (2000, 2200, 2400, 2600, 2800)},
    "mlp": {"S": (3, 8, 30000, 2000, 2000), "M": (3, 8, 30000, 10000, 10000)},
}


def inputs(name: str, size: str):
    g = np.random.default_rng(0)
    r = lambda *s: g.random(s)                                      # noqa: E731
    p = SIZES[name][size]
    if name == "gemm":
        ni, nj, nk = p
        return [1.5, 1.2, r(ni, nj), r(ni, nk), r(nk, nj)], [2]
    if name == "k2mm":
        ni, nj, nk, nl = p
        return [1.5, 1.2, r(ni, nk), r(nk, nj), r(nj, nl), r(ni, nl)], [5]
    if name == "k3mm":
        ni, nj, nk, nl, nm = p
        return [r(ni, nk), r(nk, nj), r(nj, nm), r(nm, nl)], []
    c_in, n, s0, s1, s2 = p
    return [r(n, c_in), r(c_in, s0), r(s0), r(s0, s1), r(s1), r(s1, s2), r(s2), np.empty((n, s2))], [7]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="S")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--only", default="gemm,k2mm,k3mm,mlp")
    args = ap.parse_args()
    print(f"size {args.size}, float64, min of {args.repeats} (wall / process CPU ms); "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', 'unset')}")
    for name in args.only.split(","):
        fn = globals()[name]
        base, written = inputs(name, args.size)
        fresh = lambda: [a.copy() if k in written else a for k, a in enumerate(base)]  # noqa: E731
        contenders = {"numpy": fn, "nbxla": nbxla.jit(fn)}
        # (compiled by its first call here, while the fold, the thin-GEMM rule and kernel are off)
        saved = (cpu_executable.fold_gemm_epilogues, cpu_kernels.THIN_OUTPUT, cpu_executable.thin_gemm_refusal,
                 gemm_epilogue.thin_gemm_refusal)
        cpu_executable.fold_gemm_epilogues, cpu_kernels.THIN_OUTPUT = (lambda module, plan=None: {}), 0
        cpu_executable.thin_gemm_refusal = gemm_epilogue.thin_gemm_refusal = lambda instr: "off"
        try:
            before = nbxla.jit(fn)
            before(*fresh())
        finally:
            (cpu_executable.fold_gemm_epilogues, cpu_kernels.THIN_OUTPUT, cpu_executable.thin_gemm_refusal,
             gemm_epilogue.thin_gemm_refusal) = saved
        contenders["nbxla before"] = before
        contenders["nbxla"](*fresh())
        best = {k: [np.inf, np.inf] for k in contenders}
        order = list(contenders)
        for rep in range(args.repeats):
            for k in order[rep % 3:] + order[:rep % 3]:
                a = fresh()
                w0, c0 = time.perf_counter(), time.process_time()
                contenders[k](*a)
                w, c = time.perf_counter() - w0, time.process_time() - c0
                best[k] = [min(best[k][0], w), min(best[k][1], c)]
        np_w, np_c = best["numpy"]
        cells = "  ".join(f"{k} {w * 1e3:7.1f}/{c * 1e3:7.1f} (x{np_w / w:4.2f} wall, x{np_c / c:4.2f} cpu)"
                          for k, (w, c) in best.items() if k != "numpy")
        print(f"{name:5s} numpy {np_w * 1e3:7.1f}/{np_c * 1e3:7.1f}  {cells}  load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
