"""The loop programs of ``loop_programs.py`` against hand-written numba ports (explicit loops,
``@njit``), side by side with NumPy in one process: nbxla's speed relative to numba's, a
direction (issue 30 asks for nbxla within 2x of numba), not a gate.

    PYTHONPATH=. /path/to/venv-with-numba/bin/python benchmarks/loop_numba.py [--quick] [--only a,b]

Per program: NumPy, nbxla (``nbxla.jit``) and numba sampled round-robin (minimum of the
repeats), each one's speedup over NumPy, nbxla / numba (above 1: nbxla faster), and numba's
first call (its compile).  The results are checked against NumPy's.  Skips itself with a
message when numba is not installed.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

try:
    import numba
    from numba import njit
except ImportError:                              # (an optional contender)
    numba = None

import nbxla  # noqa: E402
from nbxla import examples  # noqa: E402
from loop_programs import programs  # noqa: E402


def ports() -> dict:
    """numba versions of the programs, as a numba user would write them (loops, not slices)."""

    @njit(cache=False)
    def correlation(M, float_n, data):
        N = data.shape[0]
        mean = np.zeros(M)
        std = np.zeros(M)
        for j in range(M):
            mean[j] = data[:, j].sum() / N
            std[j] = np.sqrt(((data[:, j] - mean[j]) ** 2).sum() / N)
            if std[j] <= 0.1:
                std[j] = 1.0
        for i in range(N):
            for j in range(M):
                data[i, j] = (data[i, j] - mean[j]) / (np.sqrt(float_n) * std[j])
        corr = np.eye(M)
        for i in range(M - 1):
            for j in range(i + 1, M):
                s = 0.0
                for k in range(N):
                    s += data[k, i] * data[k, j]
                corr[i, j] = s
                corr[j, i] = s
        return corr

    @njit(cache=False)
    def covariance(M, float_n, data):
        N = data.shape[0]
        for j in range(M):
            m = data[:, j].sum() / N
            for i in range(N):
                data[i, j] -= m
        cov = np.zeros((M, M))
        for i in range(M):
            for j in range(i, M):
                s = 0.0
                for k in range(N):
                    s += data[k, i] * data[k, j]
                cov[i, j] = cov[j, i] = s / (float_n - 1.0)
        return cov

    @njit(cache=False)
    def floyd_warshall(path):
        n = path.shape[0]
        for k in range(n):
            for i in range(n):
                pik = path[i, k]
                for j in range(n):
                    v = pik + path[k, j]
                    if v < path[i, j]:
                        path[i, j] = v

    @njit(cache=False)
    def gramschmidt_outer(A):
        m, n = A.shape
        Q = np.zeros_like(A)
        R = np.zeros((n, n))
        for k in range(n):
            nrm = 0.0
            for i in range(m):
                nrm += A[i, k] * A[i, k]
            R[k, k] = np.sqrt(nrm)
            for i in range(m):
                Q[i, k] = A[i, k] / R[k, k]
            for j in range(k + 1, n):
                s = 0.0
                for i in range(m):
                    s += Q[i, k] * A[i, j]
                R[k, j] = s
                for i in range(m):
                    A[i, j] -= Q[i, k] * s
        return Q, R

    @njit(cache=False)
    def contour_integral(NR, NM, slab_per_bc, Ham, int_pts, Y):
        P0 = np.zeros((NR, NM), dtype=np.complex128)
        P1 = np.zeros((NR, NM), dtype=np.complex128)
        for z in int_pts:
            Tz = np.zeros((NR, NR), dtype=np.complex128)
            for n in range(slab_per_bc + 1):
                zz = z ** (slab_per_bc / 2 - n)
                Tz += zz * Ham[n]
            X = np.linalg.solve(Tz, Y)
            if abs(z) < 1.0:
                X = -X
            P0 += X
            P1 += z * X
        return P0, P1

    @njit(cache=False)
    def symm(alpha, beta, C, A, B):
        temp2 = np.empty(C.shape[1])
        C *= beta
        for i in range(C.shape[0]):
            for j in range(C.shape[1]):
                t = 0.0
                for k in range(i):
                    C[k, j] += alpha * B[i, j] * A[i, k]
                    t += B[k, j] * A[i, k]
                temp2[j] = t
            for j in range(C.shape[1]):
                C[i, j] += alpha * B[i, j] * A[i, i] + alpha * temp2[j]

    @njit(cache=False)
    def syr2k(alpha, beta, C, A, B):
        for i in range(A.shape[0]):
            for j in range(i + 1):
                C[i, j] *= beta
            for k in range(A.shape[1]):
                for j in range(i + 1):
                    C[i, j] += A[j, k] * alpha * B[i, k] + B[j, k] * alpha * A[i, k]

    @njit(cache=False)
    def trmm(alpha, A, B):
        for i in range(B.shape[0]):
            for j in range(B.shape[1]):
                s = 0.0
                for k in range(i + 1, B.shape[0]):
                    s += A[k, i] * B[k, j]
                B[i, j] += s
        B *= alpha

    @njit(cache=False)
    def go_fast(a):
        trace = 0.0
        for i in range(a.shape[0]):
            trace += np.tanh(a[i, i])
        return a + trace

    @njit(cache=False)
    def crc16(data, poly=0x8408):
        crc = 0xFFFF
        for b in data:
            cur_byte = 0xFF & b
            for _ in range(0, 8):
                if (crc & 0x0001) ^ (cur_byte & 0x0001):
                    crc = (crc >> 1) ^ poly
                else:
                    crc >>= 1
                cur_byte >>= 1
        crc = (~crc & 0xFFFF)
        crc = (crc << 8) | ((crc >> 8) & 0xFF)
        return crc & 0xFFFF

    @njit(cache=False)
    def cholesky(A):
        n = A.shape[0]
        for i in range(n):
            for j in range(i):
                s = A[i, j]
                for k in range(j):
                    s -= A[i, k] * A[j, k]
                A[i, j] = s / A[j, j]
            s = A[i, i]
            for k in range(i):
                s -= A[i, k] * A[i, k]
            A[i, i] = np.sqrt(s)

    @njit(cache=False)
    def lu(A):
        n = A.shape[0]
        for i in range(n):
            for j in range(i):
                s = A[i, j]
                for k in range(j):
                    s -= A[i, k] * A[k, j]
                A[i, j] = s / A[j, j]
            for j in range(i, n):
                s = A[i, j]
                for k in range(i):
                    s -= A[i, k] * A[k, j]
                A[i, j] = s

    @njit(cache=False)
    def trisolv(L, b):
        x = np.zeros_like(b)
        for i in range(x.shape[0]):
            s = b[i]
            for j in range(i):
                s -= L[i, j] * x[j]
            x[i] = s / L[i, i]
        return x

    @njit(cache=False)
    def iir(x, b0, b1, a1):
        y = np.zeros_like(x)
        y[0] = b0 * x[0]
        for n in range(1, x.shape[0]):
            y[n] = b0 * x[n] + b1 * x[n - 1] - a1 * y[n - 1]
        return y

    @njit(cache=False)
    def jacobi_2d(TSTEPS, A, B):
        n = A.shape[0]
        for t in range(1, TSTEPS):
            for i in range(1, n - 1):
                for j in range(1, n - 1):
                    B[i, j] = 0.2 * (A[i, j] + A[i, j - 1] + A[i, j + 1] + A[i + 1, j] + A[i - 1, j])
            for i in range(1, n - 1):
                for j in range(1, n - 1):
                    A[i, j] = 0.2 * (B[i, j] + B[i, j - 1] + B[i, j + 1] + B[i + 1, j] + B[i - 1, j])

    @njit(cache=False)
    def histogram(values, nbins):
        counts = np.zeros(nbins, dtype=np.int64)
        for i in range(values.shape[0]):
            counts[values[i]] += 1
        return counts

    @njit(cache=False)
    def pairwise_dist(X):
        n, d = X.shape
        D = np.zeros((n, n))
        for i in range(n - 1):
            for j in range(i + 1, n):
                s = 0.0
                for k in range(d):
                    t = X[i, k] - X[j, k]
                    s += t * t
                D[i, j] = D[j, i] = np.sqrt(s)
        return D

    @njit(cache=False)
    def widest_path(cap):
        n = cap.shape[0]
        for k in range(n):
            for i in range(n):
                cik = cap[i, k]
                for j in range(n):
                    v = min(cik, cap[k, j])
                    if v > cap[i, j]:
                        cap[i, j] = v

    @njit(cache=False)
    def gramschmidt_left(A):
        m, n = A.shape
        Q = np.zeros_like(A)
        R = np.zeros((n, n))
        v = np.empty(m)
        for j in range(n):
            for r in range(m):
                v[r] = A[r, j]
            for i in range(j):
                s = 0.0
                for r in range(m):
                    s += Q[r, i] * v[r]
                R[i, j] = s
                for r in range(m):
                    v[r] -= s * Q[r, i]
            s = 0.0
            for r in range(m):
                s += v[r] * v[r]
            R[j, j] = np.sqrt(s)
            for r in range(m):
                Q[r, j] = v[r] / R[j, j]
        return Q, R

    @njit(cache=False)
    def lu_pivot(A):
        n = A.shape[0]
        perm = np.arange(n)
        for i in range(n):
            p = i
            for r in range(i + 1, n):
                if abs(A[r, i]) > abs(A[p, i]):
                    p = r
            if p != i:
                for c in range(n):
                    A[i, c], A[p, c] = A[p, c], A[i, c]
                perm[i], perm[p] = perm[p], perm[i]
            for r in range(i + 1, n):
                A[r, i] /= A[i, i]
                for c in range(i + 1, n):
                    A[r, c] -= A[r, i] * A[i, c]
        return perm

    @njit(cache=False)
    def mandelbrot(c, maxiter):
        counts = np.zeros(c.shape, dtype=np.int64)
        for r in range(c.shape[0]):
            for q in range(c.shape[1]):
                z = 0j
                for _ in range(maxiter):
                    if abs(z) > 2.0:
                        break
                    z = z * z + c[r, q]
                    counts[r, q] += 1
        return counts

    @njit(cache=False)
    def wave_2d(steps, u, c2):
        n, m = u.shape
        prev = u.copy()
        u = u.copy()
        for _ in range(steps):
            nxt = np.empty_like(u)
            for i in range(1, n - 1):
                for j in range(1, m - 1):
                    nxt[i, j] = (2 * u[i, j] - prev[i, j]
                                 + c2 * (u[i + 1, j] + u[i - 1, j] + u[i, j + 1] + u[i, j - 1] - 4 * u[i, j]))
            for j in range(m):
                nxt[0, j] = nxt[1, j]
                nxt[n - 1, j] = nxt[n - 2, j]
            for i in range(n):
                nxt[i, 0] = nxt[i, 1]
                nxt[i, m - 1] = nxt[i, m - 2]
            prev, u = u, nxt
        return u

    kahan_sum = njit(cache=False)(examples.kahan_sum)     # (a scalar loop: the NumPy source is numba's)

    @njit(cache=False)
    def spmv(A_row, A_col, A_val, x):
        y = np.zeros(A_row.size - 1, A_val.dtype)
        for i in range(A_row.size - 1):
            s = 0.0
            for k in range(A_row[i], A_row[i + 1]):
                s += A_val[k] * x[A_col[k]]
            y[i] = s
        return y

    return {"pairwise_dist": pairwise_dist, "widest_path": widest_path, "gramschmidt_left": gramschmidt_left,
            "lu_pivot": lu_pivot, "mandelbrot": mandelbrot, "wave_2d": wave_2d, "kahan_sum": kahan_sum,
            "spmv": spmv,
            "correlation": correlation, "covariance": covariance, "floyd_warshall": floyd_warshall,
            "gramschmidt_outer": gramschmidt_outer, "contour_integral": contour_integral, "symm": symm,
            "syr2k": syr2k, "trmm": trmm, "go_fast": go_fast, "crc16": crc16, "cholesky": cholesky, "lu": lu,
            "trisolv": trisolv, "iir": iir, "jacobi_2d": jacobi_2d, "histogram": histogram}


def _timed(fn, args) -> float:
    a = copy.deepcopy(args)
    start = time.perf_counter()
    fn(*a)
    return time.perf_counter() - start


def _results(fn, args):
    a = copy.deepcopy(args)
    out = fn(*a)
    out = out if isinstance(out, tuple) else (out,)
    return [np.asarray(o) for o in out if o is not None] + [x for x in a if isinstance(x, np.ndarray)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", default="")
    parser.add_argument("--repeats", type=int, default=7)
    opts = parser.parse_args()
    if numba is None:
        print("numba is not installed: nothing to compare (pip install numba)")
        return
    chosen = [p for p in opts.only.split(",") if p]
    mine = programs(opts.quick)
    rows = []
    for name, port in ports().items():
        if chosen and name not in chosen or name not in mine:
            continue
        fn, make = mine[name]
        args = make()
        jitted = nbxla.jit(fn)
        start = time.perf_counter()
        _timed(port, args)
        numba_first = time.perf_counter() - start
        _timed(jitted, args)
        want = _results(fn, args)
        ok = all(np.allclose(g, w, rtol=1e-6, atol=1e-9) for g, w in zip(_results(port, args), want)) and \
            all(np.allclose(g, w, rtol=1e-6, atol=1e-9) for g, w in zip(_results(jitted, args), want))
        times = {"numpy": [], "nbxla": [], "numba": []}
        contenders = [("numpy", fn), ("nbxla", jitted), ("numba", port)]
        for r in range(opts.repeats):
            for key, f in contenders[r % 3:] + contenders[:r % 3]:
                times[key].append(_timed(f, args))
        t = {k: min(v) for k, v in times.items()}
        rows.append((name, t["numpy"] / t["nbxla"], t["numpy"] / t["numba"], t["numba"] / t["nbxla"]))
        print(f"{name:18s} numpy {t['numpy'] * 1e3:9.2f} ms  nbxla {t['nbxla'] * 1e3:9.3f} ms "
              f"({rows[-1][1]:7.1f}x)  numba {t['numba'] * 1e3:9.3f} ms ({rows[-1][2]:7.1f}x, first call "
              f"{numba_first:5.2f} s)  nbxla/numba {rows[-1][3]:6.2f}  {'ok' if ok else 'MISMATCH'}", flush=True)
    if rows:
        print(f"\n{len(rows)} programs (numba {numba.__version__}); geometric means: nbxla "
              f"{statistics.geometric_mean([r[1] for r in rows]):.1f}x NumPy, numba "
              f"{statistics.geometric_mean([r[2] for r in rows]):.1f}x NumPy, nbxla/numba "
              f"{statistics.geometric_mean([r[3] for r in rows]):.2f}")


if __name__ == "__main__":
    main()
