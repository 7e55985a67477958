"""Auto-clustering on a program that cannot be compiled whole: a Veros-style TKE kernel.

    python benchmarks/auto_clustering.py               # n = 200: (200, 200, 40) grids
    python benchmarks/auto_clustering.py --n 100 --repeats 5
    python benchmarks/auto_clustering.py --quick       # n = 24: a smoke test (seconds)
    python benchmarks/auto_clustering.py --programs small   # every program of programs.py
    python benchmarks/auto_clustering.py --breaks medium    # break_programs.py: graph breaks

The kernel integrates the turbulent kinetic energy (TKE) equation of an ocean model the way
Veros' NumPy backend does (and the pyhpc-benchmarks "tke" kernel after it): vertical mixing
as an implicit tridiagonal solve, done by SciPy's banded solver (``scipy.linalg.solve_banded``)
between large blocks of stencil and elementwise work on ``(n, n, 40)`` grids (the system's
diagonals before, lateral diffusion and a superbee-limited advection after).  ``nbxla.jit``
in its default (must-compile) mode refuses it: the SciPy call needs concrete arrays.

Contenders, in one process, interleaved (round-robin), medians of the repeats:
* ``numpy``: the function as written, eager NumPy (and SciPy);
* ``auto``: ``nbxla.jit(kernel, mode="auto")``; its first call (which compiles the
  clusters) is not timed, and its clustering report is printed;
* ``must-compile``: ``nbxla.jit(kernel)``: shown with the reason it refuses.

``--programs SIZE`` runs every program of ``benchmarks/programs.py`` (issue 17's real-program
shapes; ``--programs-file`` names another copy) eagerly and under ``mode="auto"``, side by
side, and prints the ratio (target: >= 0.95x NumPy for each, on calls after the first);
``--breaks SIZE`` does the same for ``benchmarks/break_programs.py`` (programs with graph
breaks).  Besides ``mode="auto"`` (which measures auto-clustered against plain calls and
keeps the faster), the table shows the second call alone and "always auto", every call
auto-clustered (``run_auto``).

Every contender gets fresh copies of the inputs per call (the kernel writes into ``tke`` and
``dtke``, as Veros does); results are checked against NumPy's.  Timings are printed, never
asserted.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path

import numpy as np

try:
    from scipy.linalg import solve_banded
except ImportError:                                   # the benchmark needs SciPy
    solve_banded = None

# ---- the kernel -----------------------------------------------------------------------------


def solve_tridiagonal(a, b, c, d):
    """Solve the tridiagonal systems along the last axis (sub-, main, super-diagonal a, b, c;
    right-hand side d) as one banded system: the columns are decoupled by zeroing the
    couplings between them, as Veros does for LAPACK."""
    nz = a.shape[-1]
    lower = a * (np.arange(nz) > 0)          # a[..., 0] couples to the previous column: drop it
    upper = c * (np.arange(nz) < nz - 1)
    n = lower.size
    zero = np.zeros(1, dtype=a.dtype)
    ab = np.stack([np.concatenate([zero, upper.reshape(n)[:-1]]),
                   b.reshape(n),
                   np.concatenate([lower.reshape(n)[1:], zero])])
    return solve_banded((1, 1), ab, d.reshape(n)).reshape(a.shape)


def solve_implicit(ks, a, b, c, d, b_edge):
    levels = np.arange(a.shape[2])[np.newaxis, np.newaxis, :]
    land = (ks >= 0)[:, :, np.newaxis]
    edge = land & (levels == ks[:, :, np.newaxis])
    water = land & (levels >= ks[:, :, np.newaxis])
    a_tri = water * a * np.logical_not(edge)
    b_tri = np.where(edge, b_edge, np.where(water, b, 1.0))
    c_tri = water * c
    d_tri = water * d
    return solve_tridiagonal(a_tri, b_tri, c_tri, d_tri), water


def pad_x(x, lo, hi):
    return np.concatenate([np.zeros_like(x[:lo]), x, np.zeros_like(x[:hi])], axis=0)


def superbee_flux(vel, var, mask, dx, cos_factor, dt, axis):
    """Superbee-limited advective flux of ``var`` across the faces along ``axis`` (0 or 1)."""
    def shift(x, k):
        sl = [slice(None)] * 3
        sl[axis] = slice(1 + k, x.shape[axis] - 2 + k)
        return x[tuple(sl)]
    velfac = 1.0
    uCFL = np.abs(velfac * shift(vel, 0) * dt / (cos_factor * dx))
    rjp = (shift(var, 2) - shift(var, 1)) * shift(mask, 1)
    rj = (shift(var, 1) - shift(var, 0)) * shift(mask, 0)
    rjm = (shift(var, 0) - shift(var, -1)) * shift(mask, -1)
    cr = np.where(shift(vel, 0) > 0.0, rjm, rjp) / np.where(np.abs(rj) < 1e-20, 1e-20, rj)
    cr = np.maximum(0.0, np.maximum(np.minimum(1.0, 2 * cr), np.minimum(2.0, cr)))
    return (shift(vel, 0) * (shift(var, 1) + shift(var, 0)) * 0.5
            - np.abs(shift(vel, 0)) * ((1.0 - cr) + uCFL * cr) * rj * 0.5)


def tke_kernel(u, v, w, maskU, maskV, maskW, dxt, dxu, dyt, dyu, dzt, dzw, cost, cosu,
               kbot, kappaM, mxl, forc, forc_tke_surface, tke, dtke):
    """One TKE step; writes tke[..., 1] and dtke[..., 0] in place, returns the surface
    correction."""
    tau, taup1, taum1 = 0, 1, 2
    dt_tke, dt_tracer, AB_eps = 1.0, 1.0, 0.1
    alpha_tke, c_eps, K_h_tke = 1.0, 0.7, 2000.0

    sqrttke = np.sqrt(np.maximum(0.0, tke[:, :, :, tau]))

    # -- vertical mixing: the implicit tridiagonal system (diagonals from stencil work) --
    ks = kbot[2:-2, 2:-2] - 1
    kap = kappaM[2:-2, 2:-2]
    delta = np.zeros_like(kap)
    delta[:, :, :-1] = dt_tke / dzt[1:] * alpha_tke * 0.5 * (kap[:, :, :-1] + kap[:, :, 1:])
    a_tri = np.zeros_like(kap)
    a_tri[:, :, 1:-1] = -delta[:, :, :-2] / dzw[1:-1]
    a_tri[:, :, -1] = -delta[:, :, -2] / (0.5 * dzw[-1])
    damp = dt_tke * c_eps * sqrttke[2:-2, 2:-2] / mxl[2:-2, 2:-2]
    b_tri = np.ones_like(kap)
    b_tri[:, :, 1:-1] = 1 + (delta[:, :, 1:-1] + delta[:, :, :-2]) / dzw[1:-1] + damp[:, :, 1:-1]
    b_tri[:, :, -1] = 1 + delta[:, :, -2] / (0.5 * dzw[-1]) + damp[:, :, -1]
    b_tri_edge = 1 + delta / dzw + damp
    c_tri = np.zeros_like(kap)
    c_tri[:, :, :-1] = -delta[:, :, :-1] / dzw[:-1]
    d_tri = tke[2:-2, 2:-2, :, tau] + dt_tke * forc[2:-2, 2:-2]
    d_tri[:, :, -1] += dt_tke * forc_tke_surface[2:-2, 2:-2] / (0.5 * dzw[-1])

    sol, water = solve_implicit(ks, a_tri, b_tri, c_tri, d_tri, b_tri_edge)
    tke[2:-2, 2:-2, :, taup1] = np.where(water, sol, tke[2:-2, 2:-2, :, taup1])

    # -- surface correction: add TKE if the surface flux drained the top box --
    top = tke[2:-2, 2:-2, -1, taup1]
    tke_surf_corr = np.zeros(maskU.shape[:2])
    tke_surf_corr[2:-2, 2:-2] = np.where(top < 0.0, -top * 0.5 * dzw[-1] / dt_tke, 0.0)
    tke[2:-2, 2:-2, -1, taup1] = np.maximum(0.0, top)

    # -- lateral diffusion --
    t0 = tke[:, :, :, tau]
    flux_east = pad_x(K_h_tke * (t0[1:] - t0[:-1]) / (cost[np.newaxis, :, np.newaxis]
                      * dxu[:-1, np.newaxis, np.newaxis]) * maskU[:-1], 0, 1)
    flux_north = np.concatenate([
        K_h_tke * (t0[:, 1:] - t0[:, :-1]) / dyu[np.newaxis, :-1, np.newaxis]
        * maskV[:, :-1] * cosu[np.newaxis, :-1, np.newaxis],
        np.zeros_like(t0[:, :1])], axis=1)
    tke[2:-2, 2:-2, :, taup1] += dt_tke * maskW[2:-2, 2:-2] * (
        (flux_east[2:-2, 2:-2] - flux_east[1:-3, 2:-2])
        / (cost[np.newaxis, 2:-2, np.newaxis] * dxt[2:-2, np.newaxis, np.newaxis])
        + (flux_north[2:-2, 2:-2] - flux_north[2:-2, 1:-3])
        / (cost[np.newaxis, 2:-2, np.newaxis] * dyt[np.newaxis, 2:-2, np.newaxis]))

    # -- advection: superbee-limited fluxes, then the tendency --
    fe = superbee_flux(u[:, :, :, tau], t0, maskU, dxt[1:-2, np.newaxis, np.newaxis],
                       cost[np.newaxis, :, np.newaxis], dt_tracer, axis=0)
    fn = superbee_flux(v[:, :, :, tau], t0, maskV, dyt[np.newaxis, 1:-2, np.newaxis],
                       cosu[np.newaxis, 1:-2, np.newaxis], dt_tracer, axis=1)
    flux_east = np.zeros_like(t0)
    flux_east[1:-2] = fe
    flux_north = np.zeros_like(t0)
    flux_north[:, 1:-2] = fn
    wtop = w[:, :, :-1, tau]
    flux_top = np.concatenate([wtop * 0.5 * (t0[:, :, 1:] + t0[:, :, :-1]) * maskW[:, :, :-1],
                               np.zeros_like(t0[:, :, :1])], axis=2)
    dtke_new = maskW[2:-2, 2:-2] * (
        -(flux_east[2:-2, 2:-2] - flux_east[1:-3, 2:-2])
        / (cost[np.newaxis, 2:-2, np.newaxis] * dxt[2:-2, np.newaxis, np.newaxis])
        - (flux_north[2:-2, 2:-2] - flux_north[2:-2, 1:-3])
        / (cost[np.newaxis, 2:-2, np.newaxis] * dyt[np.newaxis, 2:-2, np.newaxis]))
    dtke_new[:, :, 0] -= flux_top[2:-2, 2:-2, 0] / dzw[0]
    dtke_new[:, :, 1:-1] -= (flux_top[2:-2, 2:-2, 1:-1] - flux_top[2:-2, 2:-2, :-2]) / dzw[1:-1]
    dtke_new[:, :, -1] -= (flux_top[2:-2, 2:-2, -1] - flux_top[2:-2, 2:-2, -2]) / (0.5 * dzw[-1])
    dtke[2:-2, 2:-2, :, tau] = dtke_new

    # -- Adams-Bashforth time stepping --
    tke[:, :, :, taup1] += dt_tracer * ((1.5 + AB_eps) * dtke[:, :, :, tau]
                                         - (0.5 + AB_eps) * dtke[:, :, :, taum1])
    return tke_surf_corr


def tke_inputs(n: int, nz: int = 40, seed: int = 17) -> tuple:
    """Random but physically shaped inputs (masks of 0/1, positive spacings, a bottom index)."""
    rng = np.random.default_rng(seed)
    shape = (n, n, nz)

    def mask():
        return (rng.random(shape) > 0.1).astype(np.float64)
    u, v, w = (rng.standard_normal(shape + (3,)) for _ in range(3))
    maskU, maskV, maskW = mask(), mask(), mask()
    dxt, dxu, dyt, dyu = (1 + rng.random(n) for _ in range(4))
    dzt, dzw = 1 + rng.random(nz), 1 + rng.random(nz)
    cost, cosu = 0.5 + 0.5 * rng.random(n), 0.5 + 0.5 * rng.random(n)
    kbot = rng.integers(0, nz, size=(n, n))
    kappaM, mxl = rng.random(shape), 1 + rng.random(shape)
    forc, forc_tke_surface = rng.standard_normal(shape), rng.standard_normal((n, n))
    tke, dtke = rng.random(shape + (3,)), rng.standard_normal(shape + (3,))
    return (u, v, w, maskU, maskV, maskW, dxt, dxu, dyt, dyu, dzt, dzw, cost, cosu, kbot,
            kappaM, mxl, forc, forc_tke_surface, tke, dtke)


def fresh(inputs: tuple) -> tuple:
    """Copies of the arrays the kernel writes into (tke, dtke); the others are shared."""
    return inputs[:-2] + (inputs[-2].copy(), inputs[-1].copy())


# ---- the benchmark ----------------------------------------------------------------------------


def _timed(fn, inputs) -> float:
    args = fresh(inputs)
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def _check(fn, inputs, reference) -> str:
    args = fresh(inputs)
    out = fn(*args)
    got = (out, args[-2], args[-1])
    ok = all(np.allclose(g, r, rtol=1e-9, atol=1e-9) for g, r in zip(got, reference))
    return "ok" if ok else "MISMATCH"


def _leaves(value):
    if isinstance(value, (tuple, list)):
        return [leaf for item in value for leaf in _leaves(item)]
    return [value]


def _timed_call(fn, inputs, calls: int = 1) -> float:
    """Seconds per call of ``calls`` calls in a row."""
    start = time.perf_counter()
    for _ in range(calls):
        fn(*inputs)
    return (time.perf_counter() - start) / calls


def run_programs(path: Path, size: str, repeats: int, only: str = "") -> None:
    """Each program of ``path`` (benchmarks/programs.py or break_programs.py): eager NumPy vs
    ``mode="auto"`` (with its measured choice between auto-clustered and plain calls) vs
    always auto-clustered (``run_auto``), interleaved; and the second call alone."""
    import nbxla
    if not path.exists():
        print(f"{path} is not here: nothing to run")
        return
    spec = importlib.util.spec_from_file_location(path.stem, path)
    programs = sys.modules[path.stem] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(programs)
    print(f"{path.name} ({size}): per-call medians of {repeats} batches of calls (>= 2 ms each) "
          "after the measuring calls; '2nd' is the second call alone (NumPy's median over it)")
    print(f"{'program':<18}{'NumPy ms':>10}{'auto ms':>10}{'x NumPy':>9}{'2nd x':>7}"
          f"{'always-auto x':>15}  check  clusters (of an auto-clustered call)")
    for name, build in programs.PROGRAMS.items():
        if only and name not in only.split(","):
            continue
        program = build(size)
        if getattr(program, "needs_scipy", False) and solve_banded is None:
            print(f"{name:<18}skipped: needs SciPy")
            continue
        auto = nbxla.jit(program.fn, mode="auto")
        want = program.fn(*program.inputs)
        got = auto(*program.inputs)                       # the first call: compiles
        start = time.perf_counter()
        got2 = auto(*program.inputs)
        second = time.perf_counter() - start
        ok = all(np.allclose(g, w, rtol=1e-6, atol=1e-9)
                 for out in (got, got2) for g, w in zip(_leaves(out), _leaves(want)))
        contenders = {"numpy": program.fn, "auto": auto, "always": auto.run_auto}
        # Steady state: the calls that measure auto-clustered against plain ones come first
        # (up to 11; they are part of the first calls' cost, which '2nd x' shows), then
        # batches of calls long enough (>= 2 ms) that the clock and one stray interrupt do
        # not decide the ratio of a 10 us program.
        probes = 0
        while probes < 11 and auto._choice is not None and auto._choice.decided is None:
            auto(*program.inputs)
            probes += 1
        batch = max(1, round(2e-3 / max(_timed_call(program.fn, program.inputs), 1e-7)))
        times = {k: [] for k in contenders}
        for r in range(repeats):
            order = list(contenders)
            for label in order[r % 3:] + order[:r % 3]:
                times[label].append(_timed_call(contenders[label], program.inputs, batch))
        t_np, t_auto, t_always = (statistics.median(times[k]) for k in contenders)
        report = auto.last_report
        print(f"{name:<18}{t_np * 1e3:>10.2f}{t_auto * 1e3:>10.2f}{t_np / t_auto:>9.2f}"
              f"{t_np / second:>7.2f}{t_np / t_always:>15.2f}  {'ok' if ok else 'MISMATCH':<5}  "
              f"{report.headline()}", flush=True)
        if report.calls:
            print(f"{'':<18}calls: {report.calls}")


def main(argv=None) -> None:
    import nbxla
    from nbxla.errors import NbxlaError
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=200, help="grid size: (n, n, 40) (default 200)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="n = 24, 2 repeats")
    parser.add_argument("--programs", choices=["small", "medium"],
                        help="run benchmarks/programs.py's programs instead of the TKE kernel")
    parser.add_argument("--breaks", choices=["tiny", "small", "medium"],
                        help="run benchmarks/break_programs.py's programs (graph breaks)")
    parser.add_argument("--programs-file", type=Path,
                        default=Path(__file__).resolve().parent / "programs.py")
    parser.add_argument("--only", default="", help="with --programs: a comma-separated subset")
    args = parser.parse_args(argv)
    if args.programs:
        return run_programs(args.programs_file, args.programs, args.repeats, args.only)
    if args.breaks:
        return run_programs(Path(__file__).resolve().parent / "break_programs.py", args.breaks,
                            args.repeats, args.only)
    if solve_banded is None:
        raise SystemExit("this benchmark needs SciPy: pip install scipy")
    n, repeats = (24, 2) if args.quick else (args.n, args.repeats)
    inputs = tke_inputs(n)
    ref_args = fresh(inputs)
    reference = (tke_kernel(*ref_args), ref_args[-2], ref_args[-1])

    auto = nbxla.jit(tke_kernel, mode="auto")
    start = time.perf_counter()
    auto(*fresh(inputs))
    first_call = time.perf_counter() - start
    contenders = {"numpy": tke_kernel, "auto": auto}
    must = nbxla.jit(tke_kernel)
    try:
        must(*fresh(inputs))
        contenders["must-compile"] = must
        refused = None
    except NbxlaError as e:
        refused = f"{type(e).__name__}: {getattr(e, 'bare_message', str(e))[:100]}..."

    samples = {name: [] for name in contenders}
    names = list(contenders)
    for r in range(repeats):                         # round-robin, rotated per repeat
        for name in names[r % len(names):] + names[:r % len(names)]:
            samples[name].append(_timed(contenders[name], inputs))
    base = statistics.median(samples["numpy"])
    print(f"Veros-style TKE kernel on ({n}, {n}, 40) float64 grids, medians of {repeats} runs")
    print(f"{'contender':<14}{'ms':>10}{'x NumPy':>10}  check")
    for name in contenders:
        t = statistics.median(samples[name])
        check = "reference" if name == "numpy" else _check(contenders[name], inputs, reference)
        print(f"{name:<14}{t * 1e3:>10.1f}{base / t:>10.2f}  {check}")
    if refused:
        print(f"{'must-compile':<14}{'-':>10}{'-':>10}  refused: {refused}")
    print(f"auto first call (compiles its clusters): {first_call * 1e3:.0f} ms")
    print()
    print(auto.last_report.to_text())


if __name__ == "__main__":
    from nbxla.flags import switch_on
    switch_on("verify")     # (every jit signature's first call checked against NumPy;
                            # timings are of later calls, which it does not slow)
    main()
