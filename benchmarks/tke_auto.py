"""pyhpc-benchmarks' TKE kernel (NumPy version, after Veros) under ``nbxla.jit(mode="auto")``.

    python benchmarks/tke_auto.py                  # size 262144: (128, 128, 16) grids
    python benchmarks/tke_auto.py --calls 25 --size 65536
    python benchmarks/tke_auto.py --profile        # cProfile of steady-state auto calls

The kernel follows pyhpc-benchmarks' ``benchmarks/turbulent_kinetic_energy/tke_numpy.py``
operation for operation: the vertical mixing as a tridiagonal solve by LAPACK's ``dgtsv``
(``scipy.linalg.lapack``; an uncompilable call, so the function runs clustered, not whole),
the surface correction, lateral diffusion, superbee advection on the W grid (axis 2 padded
by ``pad_z_edges``, which allocates with ``np.zeros``) and Adams-Bashforth stepping.  Inputs
come from the benchmark's own generator (seed 17, masks of 0/1, shapes from ``size``).

NumPy and auto calls alternate after warm-up (the auto function's first calls compile and
measure); each call gets fresh copies of ``tke`` and ``dtke`` (written in place) and every
auto call's outputs are checked against NumPy's.  Prints the per-call medians and minimums
and their ratios.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
from scipy.linalg import lapack  # noqa: E402


def where(mask, a, b):
    return np.where(mask, a, b)


def solve_implicit(ks, a, b, c, d, b_edge=None, d_edge=None):
    levels = np.arange(a.shape[2])[np.newaxis, np.newaxis, :]
    land_mask = (ks >= 0)[:, :, np.newaxis]
    edge_mask = land_mask & (levels == ks[:, :, np.newaxis])
    water_mask = land_mask & (levels >= ks[:, :, np.newaxis])
    a_tri = water_mask * a * np.logical_not(edge_mask)
    b_tri = where(water_mask, b, 1.)
    if b_edge is not None:
        b_tri = where(edge_mask, b_edge, b_tri)
    c_tri = water_mask * c
    d_tri = water_mask * d
    if d_edge is not None:
        d_tri = where(edge_mask, d_edge, d_tri)
    return solve_tridiag(a_tri, b_tri, c_tri, d_tri), water_mask


def solve_tridiag(a, b, c, d):
    """The tridiagonal systems along the last axis, as one LAPACK system (the couplings
    between columns removed)."""
    assert a.shape == b.shape and a.shape == c.shape and a.shape == d.shape
    a[..., 0] = c[..., -1] = 0
    return lapack.dgtsv(a.flatten()[1:], b.flatten(), c.flatten()[:-1],
                        d.flatten())[3].reshape(a.shape)


def _calc_cr(rjp, rj, rjm, vel):
    eps = 1e-20
    return where(vel > 0., rjm, rjp) / where(np.abs(rj) < eps, eps, rj)


def pad_z_edges(arr):
    shape = list(arr.shape)
    shape[2] += 2
    out = np.zeros(shape, arr.dtype)
    out[:, :, 1:-1] = arr
    return out


def limiter(cr):
    return np.maximum(0., np.maximum(np.minimum(1., 2 * cr), np.minimum(2., cr)))


def _adv_superbee(vel, var, mask, dx, axis, cost, cosu, dt_tracer):
    velfac = 1
    if axis == 0:
        sm1, s, sp1, sp2 = ((slice(1 + n, -2 + n or None), slice(2, -2), slice(None))
                            for n in range(-1, 3))
        dx = cost[np.newaxis, 2:-2, np.newaxis] * dx[1:-2, np.newaxis, np.newaxis]
    elif axis == 1:
        sm1, s, sp1, sp2 = ((slice(2, -2), slice(1 + n, -2 + n or None), slice(None))
                            for n in range(-1, 3))
        dx = (cost * dx)[np.newaxis, 1:-2, np.newaxis]
        velfac = cosu[np.newaxis, 1:-2, np.newaxis]
    elif axis == 2:
        vel, var, mask = (pad_z_edges(a) for a in (vel, var, mask))
        sm1, s, sp1, sp2 = ((slice(2, -2), slice(2, -2), slice(1 + n, -2 + n or None))
                            for n in range(-1, 3))
        dx = dx[np.newaxis, np.newaxis, :-1]
    else:
        raise ValueError("axis must be 0, 1, or 2")
    uCFL = np.abs(velfac * vel[s] * dt_tracer / dx)
    rjp = (var[sp2] - var[sp1]) * mask[sp1]
    rj = (var[sp1] - var[s]) * mask[s]
    rjm = (var[s] - var[sm1]) * mask[sm1]
    cr = limiter(_calc_cr(rjp, rj, rjm, vel[s]))
    return (velfac * vel[s] * (var[sp1] + var[s]) * 0.5
            - np.abs(velfac * vel[s]) * ((1. - cr) + uCFL * cr) * rj * 0.5)


def adv_flux_superbee_wgrid(adv_fe, adv_fn, adv_ft, var, u_wgrid, v_wgrid, w_wgrid, maskW,
                            dxt, dyt, dzw, cost, cosu, dt_tracer):
    maskUtr = np.zeros_like(maskW)
    maskUtr[:-1, :, :] = maskW[1:, :, :] * maskW[:-1, :, :]
    adv_fe[...] = 0.
    adv_fe[1:-2, 2:-2, :] = _adv_superbee(u_wgrid, var, maskUtr, dxt, 0, cost, cosu, dt_tracer)

    maskVtr = np.zeros_like(maskW)
    maskVtr[:, :-1, :] = maskW[:, 1:, :] * maskW[:, :-1, :]
    adv_fn[...] = 0.
    adv_fn[2:-2, 1:-2, :] = _adv_superbee(v_wgrid, var, maskVtr, dyt, 1, cost, cosu, dt_tracer)

    maskWtr = np.zeros_like(maskW)
    maskWtr[:, :, :-1] = maskW[:, :, 1:] * maskW[:, :, :-1]
    adv_ft[...] = 0.
    adv_ft[2:-2, 2:-2, :-1] = _adv_superbee(w_wgrid, var, maskWtr, dzw, 2, cost, cosu,
                                            dt_tracer)


def integrate_tke(u, v, w, maskU, maskV, maskW, dxt, dxu, dyt, dyu, dzt, dzw, cost, cosu, kbot,
                  kappaM, mxl, forc, forc_tke_surface, tke, dtke):
    tau, taup1, taum1 = 0, 1, 2
    dt_tracer = dt_mom = 1
    AB_eps, alpha_tke, c_eps, K_h_tke = 0.1, 1., 0.7, 2000.

    flux_east = np.zeros_like(maskU)
    flux_north = np.zeros_like(maskU)
    flux_top = np.zeros_like(maskU)
    sqrttke = np.sqrt(np.maximum(0., tke[:, :, :, tau]))
    dt_tke = dt_mom

    # vertical mixing and dissipation: an implicit tridiagonal system per column
    ks = kbot[2:-2, 2:-2] - 1
    a_tri = np.zeros_like(maskU[2:-2, 2:-2])
    b_tri = np.zeros_like(maskU[2:-2, 2:-2])
    c_tri = np.zeros_like(maskU[2:-2, 2:-2])
    d_tri = np.zeros_like(maskU[2:-2, 2:-2])
    delta = np.zeros_like(maskU[2:-2, 2:-2])
    delta[:, :, :-1] = dt_tke / dzt[np.newaxis, np.newaxis, 1:] * alpha_tke * 0.5 \
        * (kappaM[2:-2, 2:-2, :-1] + kappaM[2:-2, 2:-2, 1:])
    a_tri[:, :, 1:-1] = -delta[:, :, :-2] / dzw[np.newaxis, np.newaxis, 1:-1]
    a_tri[:, :, -1] = -delta[:, :, -2] / (0.5 * dzw[-1])
    b_tri[:, :, 1:-1] = 1 + (delta[:, :, 1:-1] + delta[:, :, :-2]) \
        / dzw[np.newaxis, np.newaxis, 1:-1] \
        + dt_tke * c_eps * sqrttke[2:-2, 2:-2, 1:-1] / mxl[2:-2, 2:-2, 1:-1]
    b_tri[:, :, -1] = 1 + delta[:, :, -2] / (0.5 * dzw[-1]) \
        + dt_tke * c_eps / mxl[2:-2, 2:-2, -1] * sqrttke[2:-2, 2:-2, -1]
    b_tri_edge = 1 + delta / dzw[np.newaxis, np.newaxis, :] \
        + dt_tke * c_eps / mxl[2:-2, 2:-2, :] * sqrttke[2:-2, 2:-2, :]
    c_tri[:, :, :-1] = -delta[:, :, :-1] / dzw[np.newaxis, np.newaxis, :-1]
    d_tri[...] = tke[2:-2, 2:-2, :, tau] + dt_tke * forc[2:-2, 2:-2, :]
    d_tri[:, :, -1] += dt_tke * forc_tke_surface[2:-2, 2:-2] / (0.5 * dzw[-1])
    sol, water_mask = solve_implicit(ks, a_tri, b_tri, c_tri, d_tri, b_edge=b_tri_edge)
    tke[2:-2, 2:-2, :, taup1] = where(water_mask, sol, tke[2:-2, 2:-2, :, taup1])

    # add TKE if the surface density flux drains TKE in the uppermost box
    tke_surf_corr = np.zeros(maskU.shape[:2])
    mask = tke[2:-2, 2:-2, -1, taup1] < 0.0
    tke_surf_corr[2:-2, 2:-2] = where(mask, -tke[2:-2, 2:-2, -1, taup1] * 0.5 * dzw[-1] / dt_tke,
                                      0.)
    tke[2:-2, 2:-2, -1, taup1] = np.maximum(0., tke[2:-2, 2:-2, -1, taup1])

    # lateral diffusion
    flux_east[:-1, :, :] = K_h_tke * (tke[1:, :, :, tau] - tke[:-1, :, :, tau]) \
        / (cost[np.newaxis, :, np.newaxis] * dxu[:-1, np.newaxis, np.newaxis]) * maskU[:-1, :, :]
    flux_east[-1, :, :] = 0.
    flux_north[:, :-1, :] = K_h_tke * (tke[:, 1:, :, tau] - tke[:, :-1, :, tau]) \
        / dyu[np.newaxis, :-1, np.newaxis] * maskV[:, :-1, :] * cosu[np.newaxis, :-1, np.newaxis]
    flux_north[:, -1, :] = 0.
    tke[2:-2, 2:-2, :, taup1] += dt_tke * maskW[2:-2, 2:-2, :] * (
        (flux_east[2:-2, 2:-2, :] - flux_east[1:-3, 2:-2, :])
        / (cost[np.newaxis, 2:-2, np.newaxis] * dxt[2:-2, np.newaxis, np.newaxis])
        + (flux_north[2:-2, 2:-2, :] - flux_north[2:-2, 1:-3, :])
        / (cost[np.newaxis, 2:-2, np.newaxis] * dyt[np.newaxis, 2:-2, np.newaxis]))

    # advection
    adv_flux_superbee_wgrid(flux_east, flux_north, flux_top, tke[:, :, :, tau],
                            u[..., tau], v[..., tau], w[..., tau], maskW, dxt, dyt, dzw,
                            cost, cosu, dt_tracer)
    dtke[2:-2, 2:-2, :, tau] = maskW[2:-2, 2:-2, :] * (
        -(flux_east[2:-2, 2:-2, :] - flux_east[1:-3, 2:-2, :])
        / (cost[np.newaxis, 2:-2, np.newaxis] * dxt[2:-2, np.newaxis, np.newaxis])
        - (flux_north[2:-2, 2:-2, :] - flux_north[2:-2, 1:-3, :])
        / (cost[np.newaxis, 2:-2, np.newaxis] * dyt[np.newaxis, 2:-2, np.newaxis]))
    dtke[:, :, 0, tau] += -flux_top[:, :, 0] / dzw[0]
    dtke[:, :, 1:-1, tau] += -(flux_top[:, :, 1:-1] - flux_top[:, :, :-2]) / dzw[1:-1]
    dtke[:, :, -1, tau] += -(flux_top[:, :, -1] - flux_top[:, :, -2]) / (0.5 * dzw[-1])

    # Adams-Bashforth time stepping
    tke[:, :, :, taup1] += dt_tracer * ((1.5 + AB_eps) * dtke[:, :, :, tau]
                                         - (0.5 + AB_eps) * dtke[:, :, :, taum1])
    return tke, dtke, tke_surf_corr


def generate_inputs(size: int) -> tuple:
    """pyhpc-benchmarks' generator for the TKE benchmark (seed 17)."""
    np.random.seed(17)
    side = math.ceil(2 * size ** (1 / 3))
    shape = (side, side, math.ceil(0.25 * size ** (1 / 3)))
    maskU, maskV, maskW = ((np.random.rand(*shape) < 0.8).astype("float64") for _ in range(3))
    dxt, dxu = (np.random.randn(shape[0]) for _ in range(2))
    dyt, dyu = (np.random.randn(shape[1]) for _ in range(2))
    dzt, dzw = (np.random.randn(shape[2]) for _ in range(2))
    cost, cosu = (np.random.randn(shape[1]) for _ in range(2))
    kbot = np.random.randint(0, shape[2], size=shape[:2])
    forc_tke_surface = np.random.randn(*shape[:2])
    kappaM, mxl, forc = (np.random.randn(*shape) for _ in range(3))
    u, v, w, tke, dtke = (np.random.randn(*shape, 3) for _ in range(5))
    return (u, v, w, maskU, maskV, maskW, dxt, dxu, dyt, dyu, dzt, dzw, cost, cosu, kbot,
            kappaM, mxl, forc, forc_tke_surface, tke, dtke)


def fresh(inputs: tuple) -> tuple:
    """Copies of what the kernel writes into (tke, dtke); the other inputs are shared."""
    return inputs[:-2] + (inputs[-2].copy(), inputs[-1].copy())


def timed(fn, inputs) -> tuple[float, tuple]:
    args = fresh(inputs)
    start = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - start, out


def same(got, want) -> bool:
    return all(np.allclose(g, w, rtol=1e-12, atol=1e-12, equal_nan=True)
               for g, w in zip(got, want))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=262144)
    ap.add_argument("--calls", type=int, default=15, help="timed calls each (interleaved)")
    ap.add_argument("--warmup", type=int, default=15, help="auto calls before timing")
    ap.add_argument("--profile", action="store_true", help="cProfile 10 steady-state auto calls")
    args = ap.parse_args(argv)
    os.environ.setdefault("NBXLA_CACHE_DIR", "off")
    import nbxla
    inputs = generate_inputs(args.size)
    auto = nbxla.jit(integrate_tke, mode="auto")
    start = time.perf_counter()
    auto(*fresh(inputs))
    first = time.perf_counter() - start
    for _ in range(args.warmup):
        auto(*fresh(inputs))
        integrate_tke(*fresh(inputs))
    if args.profile:
        import cProfile
        import pstats
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(10):
            auto(*fresh(inputs))
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(30)
        pstats.Stats(prof).sort_stats("cumulative").print_stats(40)
        return 0
    t_np, t_auto, bad = [], [], 0
    for k in range(args.calls):
        pair = [("numpy", integrate_tke), ("auto", auto)]
        results = {}
        for name, fn in (pair if k % 2 == 0 else pair[::-1]):
            t, results[name] = timed(fn, inputs)
            (t_np if name == "numpy" else t_auto).append(t)
        bad += not same(results["auto"], results["numpy"])
    numpy_ms, auto_ms = statistics.median(t_np) * 1e3, statistics.median(t_auto) * 1e3
    shape = inputs[3].shape
    print(f"pyhpc TKE (numpy version) on {shape}, size {args.size}; per-call medians of "
          f"{args.calls} interleaved calls after {args.warmup} warm-up calls; "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"numpy  {numpy_ms:8.2f} ms   (min {min(t_np) * 1e3:.2f} ms)")
    print(f"auto   {auto_ms:8.2f} ms   (min {min(t_auto) * 1e3:.2f} ms; first call "
          f"{first * 1e3:.0f} ms)")
    print(f"ratio  {numpy_ms / auto_ms:8.2f} x NumPy   (of the minimums "
          f"{min(t_np) / min(t_auto):.2f})   check: "
          f"{'ok' if not bad else f'{bad} MISMATCHES'} ({args.calls} calls)")
    report = auto.last_report
    if report is not None:
        print(report.headline())
        if report.calls:
            print(f"calls: {report.calls}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
