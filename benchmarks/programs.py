"""Real-program shapes: nbxla against eager NumPy and JAX, side by side in one process.

    python benchmarks/programs.py                   # small and medium sizes
    python benchmarks/programs.py --size small --only jacobi2d,eos --repeats 5

The programs are our own versions of the shapes that public NumPy benchmark suites contain
(none is copied from a suite): an equation of state (one wide elementwise formula with many
named temporaries and several outputs), great-circle distances (a transcendental formula), an isoneutral-mixing-style kernel (slices, ``where``,
broadcasts over 3-D grids), gt4py's horizontal diffusion (a stencil of stencils with flux
limiters), time-stepping stencils unrolled by tracing (2-D Jacobi, FDTD-2D,
heat-3d, with in-place slice writes), batched matmuls (doitgen's ``@`` on 3-D operands and an
``einsum`` with a batch dimension), and the BLAS-shaped linear algebra kernels gemm, gemver,
atax and bicg.

``PROGRAMS`` maps a name to a builder ``builder(size) -> Program`` (size ``"small"`` or
``"medium"``): tests and other benchmarks import it.  A ``Program`` holds the NumPy function
(which never mutates its inputs), its inputs, a JAX version (``make_jax(jnp)``, or None) and,
for streaming programs, the minimum bytes any implementation must move per call.

Columns
-------
* ``xNumPy``: NumPy's median time / nbxla's median time (> 1: nbxla faster); ``xJAX`` likewise
  for JAX's ``jit`` (inputs on the device beforehand, ``block_until_ready``).
* ``first``: the first call of a fresh ``nbxla.jit`` / ``jax.jit`` (trace, optimize, code
  generation and one run; nbxla's on-disk object cache is off).
* ``kern``: kernels in nbxla's optimized entry computation (fusions, library calls, loops);
  ``interp``: instructions that run on the reference evaluator at run time (target 0).
* ``GB/s`` and ``%BW``: the bandwidth each program achieves under nbxla (its minimum traffic /
  nbxla's median time), in GB/s and as a percentage of the machine's read+write (copy)
  bandwidth measured in this run (streaming programs only).
* ``med`` and ``p90``: nbxla's median and worst-decile per-call time, so that a slow regime in
  a run of calls cannot hide behind the median; ``np p90`` is NumPy's worst decile.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
os.environ.setdefault("JAX_PLATFORMS", "cpu")

from benchmarks.blas_info import describe as describe_blas, unpin_openblas  # noqa: E402

# Run as a script: OpenBLAS picks its kernel for this CPU (the environment may pin an older
# one; see blas_info), as benchmarks/peers.py does.  Imported, the importer's NumPy decides.
_UNPINNED = unpin_openblas() if __name__ == "__main__" else {}

import numpy as np  # noqa: E402


@dataclass
class Program:
    name: str
    fn: Callable                       # NumPy function of ``inputs``; never mutates them
    inputs: tuple
    make_jax: Callable | None = None   # make_jax(jnp) -> the same program in jax.numpy
    streaming_bytes: int | None = None # minimum bytes moved per call, for bandwidth-bound ones


def _rng():
    return np.random.default_rng(17)


# ---- equation of state: one wide formula -----------------------------------------------------

# Coefficients of a polynomial specific volume v(x, y, z) = sum c[i,j,k] x^i y^j z^k in the
# style of TEOS-10's 75-term fit (made-up values of realistic magnitude).
_EOS_DEG = (6, 5, 5)


def _eos_coefficients():
    g = np.random.default_rng(1)
    c = {}
    for k in range(_EOS_DEG[2] + 1):
        for j in range(_EOS_DEG[1] + 1 - k):
            for i in range(_EOS_DEG[0] + 1 - k):
                c[i, j, k] = float(g.uniform(-1, 1) * 10.0 ** (-3 - i - j - k))
    c[0, 0, 0] = 1.0e-3
    return c


_EOS_C = _eos_coefficients()


def eos_formula(xp, SA, CT, p, mask):
    """Specific volume, density and its derivatives by CT and SA, the thermal expansion and
    haline contraction coefficients, and a masked potential density, written the way ocean
    models write them: Horner forms in named temporaries."""
    sfac, offset = 0.0248826675584615, 5.971840214030754e-1
    x2 = sfac * SA
    xs = xp.sqrt(x2 + offset)
    ys = CT * 0.025
    z = p * 1e-4
    c = _EOS_C
    dx, dy, dz = _EOS_DEG
    # v_k(xs, ys) for each power of z, and their derivatives by xs and ys.
    vk, vk_x, vk_y = [], [], []
    for k in range(dz + 1):
        rows = []
        for j in range(dy + 1 - k):
            terms = [c[i, j, k] for i in range(dx + 1 - k)]
            r = terms[-1] + 0.0 * xs
            r_dx = terms[-1] * (len(terms) - 1) + 0.0 * xs
            for i in range(len(terms) - 2, -1, -1):
                r = r * xs + terms[i]
                if i > 0:
                    r_dx = r_dx * xs + terms[i] * i
            rows.append((r, r_dx))
        # Horner in ys over the rows: value, d/dys, d/dxs.
        v, v_x = rows[-1]
        v_y = 0.0 * xs
        for j in range(len(rows) - 2, -1, -1):
            v_y = v_y * ys + v
            v = v * ys + rows[j][0]
            v_x = v_x * ys + rows[j][1]
        vk.append(v)
        vk_x.append(v_x)
        vk_y.append(v_y)
    specvol = vk[-1]
    v_ct = vk_y[-1]
    v_sa = vk_x[-1]
    for k in range(dz - 1, -1, -1):
        specvol = specvol * z + vk[k]
        v_ct = v_ct * z + vk_y[k]
        v_sa = v_sa * z + vk_x[k]
    v_ct = v_ct * 0.025
    v_sa = v_sa * (0.5 * sfac) / xs
    rho = 1.0 / specvol
    alpha = v_ct / specvol
    beta = -v_sa / specvol
    drho_dct = -rho * alpha
    drho_dsa = rho * beta
    pot = xp.where(mask, rho - 1000.0 * (1.0 + 0.0 * z), 0.0)
    stable = xp.where(mask, xp.maximum(alpha, 0.0) * xp.minimum(beta, 1.0), 0.0)
    return rho, drho_dct, drho_dsa, pot, stable


def _eos(size):
    n = {"small": 32, "medium": 96}[size]
    g = _rng()
    SA = g.uniform(30, 38, (n, n, 40))
    CT = g.uniform(-2, 30, (n, n, 40))
    p = np.broadcast_to(np.linspace(0, 5000, 40), (n, n, 40)).copy()
    mask = g.uniform(size=(n, n, 40)) > 0.1

    def eos(SA, CT, p, mask):
        return eos_formula(np, SA, CT, p, mask)

    def make_jax(jnp):
        return lambda SA, CT, p, mask: eos_formula(jnp, SA, CT, p, mask)
    return Program("eos", eos, (SA, CT, p, mask), make_jax, SA.nbytes * 3 + mask.nbytes + SA.nbytes * 5)


# ---- arc distance: a transcendental formula DAG -------------------------------------------------

def arc_distance_formula(xp, theta_1, phi_1, theta_2, phi_2):
    """Great-circle distances (the haversine formula), as NumPy benchmark suites write it."""
    temp = xp.sin((theta_2 - theta_1) / 2) ** 2 + \
        xp.cos(theta_1) * xp.cos(theta_2) * xp.sin((phi_2 - phi_1) / 2) ** 2
    return 2 * (xp.arctan2(xp.sqrt(temp), xp.sqrt(1 - temp)))


def _arc_distance(size):
    n = {"small": 100_000, "medium": 1_000_000}[size]
    g = _rng()
    args = tuple(g.uniform(0, 3.1, n) for _ in range(4))

    def arc_distance(t1, p1, t2, p2):
        return arc_distance_formula(np, t1, p1, t2, p2)

    def make_jax(jnp):
        return lambda *a: arc_distance_formula(jnp, *a)
    return Program("arc_distance", arc_distance, args, make_jax, args[0].nbytes * 5)


# ---- isoneutral mixing: slices and where over 3-D grids -------------------------------------

def isoneutral_formula(xp, maskT, maskW, dxt, dyt, dzw, tem, sal, drdT, drdS, K_iso):
    """Slopes of neutral surfaces on a staggered grid and the tensor components from them, in
    the style of an ocean model's isoneutral diffusion: many shifted slices, ``where`` for
    masks and slope limits, 1-D grid spacings broadcast over the 3-D grid."""
    epsln = 1e-20
    iso_slopec, iso_dslope = 1e-3, 1e-3
    # Density gradients on the cell faces (east, north) and in the vertical.
    drodxe = drdT[1:-1, 1:-1, :] * (tem[2:, 1:-1, :] - tem[1:-1, 1:-1, :]) \
        + drdS[1:-1, 1:-1, :] * (sal[2:, 1:-1, :] - sal[1:-1, 1:-1, :])
    drodxe = maskT[2:, 1:-1, :] * maskT[1:-1, 1:-1, :] * drodxe / dxt[1:-1, None, None]
    drodyn = drdT[1:-1, 1:-1, :] * (tem[1:-1, 2:, :] - tem[1:-1, 1:-1, :]) \
        + drdS[1:-1, 1:-1, :] * (sal[1:-1, 2:, :] - sal[1:-1, 1:-1, :])
    drodyn = maskT[1:-1, 2:, :] * maskT[1:-1, 1:-1, :] * drodyn / dyt[None, 1:-1, None]
    drodzb = drdT[1:-1, 1:-1, :-1] * (tem[1:-1, 1:-1, 1:] - tem[1:-1, 1:-1, :-1]) \
        + drdS[1:-1, 1:-1, :-1] * (sal[1:-1, 1:-1, 1:] - sal[1:-1, 1:-1, :-1])
    drodzb = maskW[1:-1, 1:-1, :-1] * drodzb / dzw[None, None, :-1]
    drodzb = xp.concatenate([drodzb, xp.zeros_like(drodzb[:, :, :1])], axis=2)
    # Slopes, limited (a tapering where the stratification is weak).
    sxe = -drodxe / (xp.minimum(0.0, drodzb) - epsln)
    syn = -drodyn / (xp.minimum(0.0, drodzb) - epsln)
    taper_x = 0.5 * (1.0 + xp.tanh((iso_slopec - xp.abs(sxe)) / iso_dslope))
    taper_y = 0.5 * (1.0 + xp.tanh((iso_slopec - xp.abs(syn)) / iso_dslope))
    sxe = xp.where(xp.abs(sxe) > 1e-2, 0.0, sxe)
    syn = xp.where(xp.abs(syn) > 1e-2, 0.0, syn)
    K_11 = taper_x * K_iso * maskT[1:-1, 1:-1, :]
    K_22 = taper_y * K_iso * maskT[1:-1, 1:-1, :]
    K_13 = taper_x * K_iso * sxe
    K_23 = taper_y * K_iso * syn
    # The vertical component averages the slopes over the four neighbouring faces.
    sxb = 0.25 * (sxe[1:, 1:-1, :] + sxe[:-1, 1:-1, :] + sxe[1:, :-2, :] + sxe[:-1, 2:, :])
    syb = 0.25 * (syn[1:-1, 1:, :] + syn[1:-1, :-1, :] + syn[:-2, 1:, :] + syn[2:, :-1, :])
    K_33 = K_iso * (sxb[:-1] ** 2 + syb[:, :-1] ** 2) * maskW[2:-2, 2:-2, :]
    return K_11, K_22, K_13, K_23, K_33


def _isoneutral(size):
    nx, ny, nz = {"small": (40, 40, 30), "medium": (120, 120, 40)}[size]
    g = _rng()
    maskT = (g.uniform(size=(nx, ny, nz)) > 0.05).astype(np.float64)
    maskW = maskT.copy()
    dxt = g.uniform(1e3, 2e3, nx)
    dyt = g.uniform(1e3, 2e3, ny)
    dzw = g.uniform(5, 50, nz)
    tem = g.uniform(-2, 30, (nx, ny, nz))
    sal = g.uniform(33, 37, (nx, ny, nz))
    drdT = -g.uniform(0.1, 0.3, (nx, ny, nz))
    drdS = g.uniform(0.7, 0.8, (nx, ny, nz))
    K_iso = 1000.0
    args = (maskT, maskW, dxt, dyt, dzw, tem, sal, drdT, drdS)

    def isoneutral(maskT, maskW, dxt, dyt, dzw, tem, sal, drdT, drdS):
        return isoneutral_formula(np, maskT, maskW, dxt, dyt, dzw, tem, sal, drdT, drdS, K_iso)

    def make_jax(jnp):
        return lambda *a: isoneutral_formula(jnp, *a, K_iso)
    return Program("isoneutral", isoneutral, args, make_jax, tem.nbytes * 6 + tem.nbytes * 5)


# ---- time-stepping stencils (Python loops, unrolled by tracing) -----------------------------

def _setter(xp):
    """``A[idx] = value`` as NumPy code writes it; JAX arrays are immutable (``.at[].set``)."""
    if xp is np:
        def put(A, idx, value):
            A[idx] = value
            return A
    elif hasattr(xp, "functional_set"):       # an adapter (benchmarks/peers.py's torch)
        put = xp.functional_set
    else:
        def put(A, idx, value):
            return A.at[idx].set(value)
    return put


def jacobi2d_steps(xp, A, B, steps):
    put = _setter(xp)
    A, B = xp.copy(A), xp.copy(B)
    for _ in range(steps):
        B = put(B, (slice(1, -1), slice(1, -1)),
                0.2 * (A[1:-1, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:] + A[2:, 1:-1] + A[:-2, 1:-1]))
        A = put(A, (slice(1, -1), slice(1, -1)),
                0.2 * (B[1:-1, 1:-1] + B[1:-1, :-2] + B[1:-1, 2:] + B[2:, 1:-1] + B[:-2, 1:-1]))
    return A, B


def _jacobi2d(size):
    n, steps = {"small": (150, 50), "medium": (700, 100)}[size]
    g = _rng()
    A, B = g.uniform(size=(n, n)), g.uniform(size=(n, n))

    def jacobi2d(A, B):
        return jacobi2d_steps(np, A, B, steps)
    return Program("jacobi2d", jacobi2d, (A, B), lambda jnp: lambda A, B: jacobi2d_steps(jnp, A, B, steps),
                   A.nbytes * 4 * steps)


def fdtd2d_steps(xp, ex, ey, hz, fict, steps):
    put = _setter(xp)
    ex, ey, hz = xp.copy(ex), xp.copy(ey), xp.copy(hz)
    for t in range(steps):
        ey = put(ey, (0, slice(None)), fict[t])
        ey = put(ey, (slice(1, None), slice(None)), ey[1:, :] - 0.5 * (hz[1:, :] - hz[:-1, :]))
        ex = put(ex, (slice(None), slice(1, None)), ex[:, 1:] - 0.5 * (hz[:, 1:] - hz[:, :-1]))
        hz = put(hz, (slice(None, -1), slice(None, -1)),
                 hz[:-1, :-1] - 0.7 * (ex[:-1, 1:] - ex[:-1, :-1] + ey[1:, :-1] - ey[:-1, :-1]))
    return ex, ey, hz


def _fdtd2d(size):
    (nx, ny), steps = {"small": ((120, 140), 40), "medium": ((600, 700), 60)}[size]
    g = _rng()
    ex, ey, hz = (g.uniform(size=(nx, ny)) for _ in range(3))
    fict = g.uniform(size=steps)

    def fdtd2d(ex, ey, hz, fict):
        return fdtd2d_steps(np, ex, ey, hz, fict, steps)
    return Program("fdtd2d", fdtd2d, (ex, ey, hz, fict),
                   lambda jnp: lambda *a: fdtd2d_steps(jnp, *a, steps), ex.nbytes * 6 * steps)


def heat3d_steps(xp, A, B, steps):
    """Polybench heat-3d: B from A, then A from the new B (the same program in NumPy and
    JAX: each update reads the array as the previous one left it)."""
    put = _setter(xp)
    A, B = xp.copy(A), xp.copy(B)
    inner = (slice(1, -1),) * 3

    def stencil(src):
        return 0.125 * (src[2:, 1:-1, 1:-1] - 2.0 * src[1:-1, 1:-1, 1:-1] + src[:-2, 1:-1, 1:-1]) \
            + 0.125 * (src[1:-1, 2:, 1:-1] - 2.0 * src[1:-1, 1:-1, 1:-1] + src[1:-1, :-2, 1:-1]) \
            + 0.125 * (src[1:-1, 1:-1, 2:] - 2.0 * src[1:-1, 1:-1, 1:-1] + src[1:-1, 1:-1, :-2]) \
            + src[1:-1, 1:-1, 1:-1]
    for _ in range(steps):
        B = put(B, inner, stencil(A))
        A = put(A, inner, stencil(B))
    return A, B


def _heat3d(size):
    n, steps = {"small": (30, 40), "medium": (90, 60)}[size]
    g = _rng()
    A = g.uniform(size=(n, n, n))
    B = A.copy()

    def heat3d(A, B):
        return heat3d_steps(np, A, B, steps)
    return Program("heat3d", heat3d, (A, B), lambda jnp: lambda A, B: heat3d_steps(jnp, A, B, steps),
                   A.nbytes * 4 * steps)


# ---- horizontal diffusion: a stencil of stencils ------------------------------------------------

def hdiff_inplace(in_field, out_field, coeff):
    """gt4py's horizontal diffusion as NumPy benchmark suites write it: a Laplacian, two flux
    limiters with ``where``, one update written into ``out_field``."""
    I, J = out_field.shape[0], out_field.shape[1]
    lap_field = 4.0 * in_field[1:I + 3, 1:J + 3, :] - (
        in_field[2:I + 4, 1:J + 3, :] + in_field[0:I + 2, 1:J + 3, :] +
        in_field[1:I + 3, 2:J + 4, :] + in_field[1:I + 3, 0:J + 2, :])
    res = lap_field[1:, 1:J + 1, :] - lap_field[:-1, 1:J + 1, :]
    flx_field = np.where((res * (in_field[2:I + 3, 2:J + 2, :] - in_field[1:I + 2, 2:J + 2, :])) > 0, 0, res)
    res = lap_field[1:I + 1, 1:, :] - lap_field[1:I + 1, :-1, :]
    fly_field = np.where((res * (in_field[2:I + 2, 2:J + 3, :] - in_field[2:I + 2, 1:J + 2, :])) > 0, 0, res)
    out_field[:, :, :] = in_field[2:I + 2, 2:J + 2, :] - coeff[:, :, :] * (
        flx_field[1:, :, :] - flx_field[:-1, :, :] + fly_field[:, 1:, :] - fly_field[:, :-1, :])


def hdiff_formula(xp, in_field, coeff):
    """The same as a function of its inputs (JAX arrays are immutable)."""
    I, J = coeff.shape[0], coeff.shape[1]
    lap = 4.0 * in_field[1:I + 3, 1:J + 3, :] - (
        in_field[2:I + 4, 1:J + 3, :] + in_field[0:I + 2, 1:J + 3, :] +
        in_field[1:I + 3, 2:J + 4, :] + in_field[1:I + 3, 0:J + 2, :])
    res = lap[1:, 1:J + 1, :] - lap[:-1, 1:J + 1, :]
    flx = xp.where((res * (in_field[2:I + 3, 2:J + 2, :] - in_field[1:I + 2, 2:J + 2, :])) > 0, 0, res)
    res = lap[1:I + 1, 1:, :] - lap[1:I + 1, :-1, :]
    fly = xp.where((res * (in_field[2:I + 2, 2:J + 3, :] - in_field[2:I + 2, 1:J + 2, :])) > 0, 0, res)
    return in_field[2:I + 2, 2:J + 2, :] - coeff * (flx[1:, :, :] - flx[:-1, :, :] + fly[:, 1:, :] - fly[:, :-1, :])


def _hdiff(size):
    I, J, K = {"small": (64, 64, 60), "medium": (128, 128, 80)}[size]
    g = _rng()
    in_field, coeff = g.uniform(size=(I + 4, J + 4, K)), g.uniform(size=(I, J, K))

    def hdiff(in_field, coeff):
        out_field = np.zeros_like(coeff)
        hdiff_inplace(in_field, out_field, coeff)
        return out_field

    def make_jax(jnp):
        return lambda in_field, coeff: hdiff_formula(jnp, in_field, coeff)
    return Program("hdiff", hdiff, (in_field, coeff), make_jax, in_field.nbytes + 2 * coeff.nbytes)


# ---- batched matmul ---------------------------------------------------------------------------

def _doitgen(size):
    nr, nq, np_ = {"small": (25, 20, 30), "medium": (100, 80, 120)}[size]
    g = _rng()
    A = g.uniform(size=(nr, nq, np_))
    C4 = g.uniform(size=(np_, np_))

    def doitgen(A, C4):
        return np.reshape(np.reshape(A, (nr, nq, 1, np_)) @ C4, (nr, nq, np_))

    def make_jax(jnp):
        return lambda A, C4: jnp.reshape(jnp.reshape(A, (nr, nq, 1, np_)) @ C4, (nr, nq, np_))
    return Program("doitgen", doitgen, (A, C4), make_jax)


def _batched_einsum(size):
    b, m, k, n = {"small": (16, 32, 48, 40), "medium": (64, 128, 128, 96)}[size]
    g = _rng()
    X, W = g.uniform(size=(b, m, k)), g.uniform(size=(b, k, n))

    def batched_einsum(X, W):
        return 0.5 * np.einsum("bmk,bkn->bmn", X, W) + 1.0

    def make_jax(jnp):
        return lambda X, W: 0.5 * jnp.einsum("bmk,bkn->bmn", X, W) + 1.0
    return Program("batched_einsum", batched_einsum, (X, W), make_jax)


# ---- BLAS-shaped linear algebra ---------------------------------------------------------------

def _gemm(size):
    ni, nj, nk = {"small": (100, 110, 120), "medium": (500, 550, 600)}[size]
    g = _rng()
    alpha, beta = 1.5, 1.2
    A, B, C = g.uniform(size=(ni, nk)), g.uniform(size=(nk, nj)), g.uniform(size=(ni, nj))

    def gemm(A, B, C):
        return alpha * A @ B + beta * C
    return Program("gemm", gemm, (A, B, C), lambda jnp: gemm)


def gemver_formula(A, u1, v1, u2, v2, w, x, y, z, outer, alpha=1.5, beta=1.2):
    A = A + outer(u1, v1) + outer(u2, v2)
    x = x + beta * y @ A + z
    w = w + alpha * A @ x
    return A, x, w


def _gemver(size):
    n = {"small": 200, "medium": 1000}[size]
    g = _rng()
    A = g.uniform(size=(n, n))
    vecs = [g.uniform(size=n) for _ in range(8)]

    def gemver(A, u1, v1, u2, v2, w, x, y, z):
        return gemver_formula(A, u1, v1, u2, v2, w, x, y, z, np.outer)

    def make_jax(jnp):
        return lambda *a: gemver_formula(*a, jnp.outer)
    return Program("gemver", gemver, (A, *vecs), make_jax, A.nbytes * 2)


def _atax(size):
    m, n = {"small": (190, 210), "medium": (1800, 2200)}[size]
    g = _rng()
    A, x = g.uniform(size=(m, n)), g.uniform(size=n)

    def atax(A, x):
        return (A @ x) @ A
    return Program("atax", atax, (A, x), lambda jnp: atax, A.nbytes * 2)


def _bicg(size):
    m, n = {"small": (190, 210), "medium": (1800, 2200)}[size]
    g = _rng()
    A, p, r = g.uniform(size=(n, m)), g.uniform(size=m), g.uniform(size=n)

    def bicg(A, p, r):
        return r @ A, A @ p
    return Program("bicg", bicg, (A, p, r), lambda jnp: bicg, A.nbytes * 2)


PROGRAMS: dict[str, Callable[[str], Program]] = {
    "eos": _eos, "arc_distance": _arc_distance, "isoneutral": _isoneutral, "jacobi2d": _jacobi2d, "fdtd2d": _fdtd2d,
    "heat3d": _heat3d, "hdiff": _hdiff, "doitgen": _doitgen, "batched_einsum": _batched_einsum, "gemm": _gemm,
    "gemver": _gemver, "atax": _atax, "bicg": _bicg,
}
SIZES = ("small", "medium")


def _formula_builder(build):
    return lambda size: Program(*build(size))


from benchmarks.formula_programs import FORMULAS  # noqa: E402  (plain builders: no import cycle)
PROGRAMS.update({name: _formula_builder(build) for name, build in FORMULAS.items()})


# ---- measuring ------------------------------------------------------------------------------

def _leaves(value):
    if isinstance(value, (tuple, list)):
        return [x for v in value for x in _leaves(v)]
    return [np.asarray(value)]


def _agree(expected, got) -> bool:
    for e, g in zip(_leaves(expected), _leaves(got)):
        scale = max(1e-300, float(np.max(np.abs(e))) if e.size else 1.0)
        if e.shape != g.shape or not np.allclose(g, e, rtol=1e-6, atol=1e-9 * scale, equal_nan=True):
            return False
    return True


def _time_calls(fn, args, seconds: float, min_calls: int = 5) -> list[float]:
    """Per-call times (s) of back-to-back calls for about ``seconds``."""
    times = []
    start = time.perf_counter()
    while len(times) < min_calls or time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - t0)
        if len(times) >= 400:
            break
    return times


def kernel_stats(compilation) -> tuple[int, int]:
    """(kernels in the optimized entry computation, instructions run on the evaluator)."""
    report = compilation.fusion_report
    native = compilation.executable.native
    interpreted = 0
    if native is not None:
        interpreted = len(native.interpreted) + len(native.interpreted_ops)
    return report.kernels_after, interpreted


def copy_bandwidth() -> float:
    """Bytes per second of a large ``np.copyto`` (read + write), best of a few."""
    src = np.ones(1 << 24)
    dst = np.empty_like(src)
    best = min(_time_calls(lambda: np.copyto(dst, src), (), 0.2))
    return 2 * src.nbytes / best


def kernel_profile(compilation, inputs, repeats: int = 20) -> list[tuple[str, str, float, int]]:
    """(instruction, how it runs, best seconds, bytes read + written) of each step of the
    entry computation that moves data (fusions, library calls, loops), each step timed on
    its own: the entry program's steps are run one by one, in order, ``repeats`` times."""
    native = compilation.executable.native
    if native is None:
        return []
    comp = compilation.optimized.entry
    program = native.programs[comp.name]
    ops = [i for i in comp.instructions if i.opcode != "parameter"]
    best: dict[int, float] = {}
    for _ in range(repeats):
        values = [None] * program.size
        for k, number in program.params:
            values[k] = np.ascontiguousarray(inputs[number])
        for step, (thunk, operands, out, places) in enumerate(program.steps):
            args = [values[k] for k in operands]
            outs = None if places is None else [np.empty(dims, dtype) for _, dims, dtype in places]
            t0 = time.perf_counter()
            values[out] = thunk(args) if outs is None else thunk(args, outs)
            best[step] = min(best.get(step, np.inf), time.perf_counter() - t0)
    rows = []
    for step, instr in enumerate(ops):
        if instr.opcode in ("tuple", "get-tuple-element", "bitcast", "reshape", "constant"):
            continue
        operands = {id(o): o for o in instr.operands}
        moved = sum(o.shape.byte_size for o in operands.values()) + instr.shape.byte_size
        rows.append((instr.name, instr.opcode, best[step], moved))
    return rows


def measure(program: Program, seconds: float, use_jax: bool) -> dict:
    import nbxla
    row = {"name": program.name}
    expected = program.fn(*program.inputs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        f = nbxla.jit(program.fn)
        t0 = time.perf_counter()
        got = f(*program.inputs)
        row["first"] = time.perf_counter() - t0
    row["warnings"] = [str(w.message).splitlines()[0] for w in caught]
    row["ok"] = _agree(expected, got)
    row["kernels"], row["interp"] = kernel_stats(f.last_compilation)
    row["compile_ms"] = dict(f.last_compilation.timings_ms)
    contenders = {"numpy": (program.fn, program.inputs), "nbxla": (f, program.inputs)}
    if use_jax and program.make_jax is not None:
        import jax
        import jax.numpy as jnp
        jf = jax.jit(program.make_jax(jnp))
        jargs = [jax.device_put(a) for a in program.inputs]
        jax.block_until_ready(jargs)
        t0 = time.perf_counter()
        jax.block_until_ready(jf(*jargs))
        row["jax_first"] = time.perf_counter() - t0
        contenders["jax"] = (lambda *a: jax.block_until_ready(jf(*a)), jargs)
    samples = {k: [] for k in contenders}
    for _ in range(3):           # interleaved rounds: machine noise hits every contender
        for k, (fn, args) in contenders.items():
            samples[k] += _time_calls(fn, args, seconds / 3)
    for k, s in samples.items():
        row[k] = float(np.median(s))
        row[k + "_p90"] = float(np.percentile(s, 90))
    if program.streaming_bytes:
        row["bytes"] = program.streaming_bytes
    row["profile"] = kernel_profile(f.last_compilation, program.inputs)
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", choices=SIZES + ("all",), default="all")
    ap.add_argument("--only", default="", help="comma-separated program names")
    ap.add_argument("--seconds", type=float, default=1.0, help="timing budget per contender")
    ap.add_argument("--no-jax", action="store_true")
    ap.add_argument("--kernels", action="store_true",
                    help="each kernel of nbxla's entry computation timed alone: ms, GB/s, %% of copy bandwidth")
    args = ap.parse_args(argv)
    os.environ["NBXLA_CACHE_DIR"] = "off"
    use_jax = not args.no_jax
    if use_jax:
        try:
            import jax
            jax.config.update("jax_enable_x64", True)
        except ImportError:
            use_jax = False
    names = [n for n in args.only.split(",") if n] or list(PROGRAMS)
    sizes = SIZES if args.size == "all" else (args.size,)
    bw = copy_bandwidth()
    print(f"NumPy {np.__version__}; {describe_blas(_UNPINNED)}")
    print(f"copy bandwidth {bw / 1e9:.1f} GB/s; times per call; first = first call of a fresh jit")
    head = (f"{'program':<16}{'size':<7}{'xNumPy':>7}{'xJAX':>6}{'med ms':>9}{'p90 ms':>9}"
            f"{'numpy ms':>9}{'np p90':>8}{'jax ms':>8}{'first s':>8}{'jax 1st':>8}{'kern':>5}{'interp':>7}{'GB/s':>6}{'%BW':>5}  ok")
    print(head)
    for size in sizes:
        for name in names:
            try:
                row = measure(PROGRAMS[name](size), args.seconds, use_jax)
            except Exception as e:          # one failing program must not hide the others
                print(f"{name:<16}{size:<7}FAILED: {type(e).__name__}: {str(e).splitlines()[0][:120]}", flush=True)
                continue
            jx = f"{row['jax'] / row['nbxla']:6.2f}" if "jax" in row else f"{'-':>6}"
            jms = f"{row['jax'] * 1e3:8.2f}" if "jax" in row else f"{'-':>8}"
            j1 = f"{row['jax_first']:8.2f}" if "jax_first" in row else f"{'-':>8}"
            pbw = (f"{row['bytes'] / row['nbxla'] / 1e9:6.1f}{100 * row['bytes'] / row['nbxla'] / bw:5.0f}"
                   if "bytes" in row else f"{'-':>6}{'-':>5}")
            print(f"{name:<16}{size:<7}{row['numpy'] / row['nbxla']:7.2f}{jx}{row['nbxla'] * 1e3:9.2f}"
                  f"{row['nbxla_p90'] * 1e3:9.2f}{row['numpy'] * 1e3:9.2f}{row['numpy_p90'] * 1e3:8.2f}{jms}{row['first']:8.2f}{j1}"
                  f"{row['kernels']:5d}{row['interp']:7d}{pbw}  {'yes' if row['ok'] else 'NO'}", flush=True)
            if args.kernels:
                for kname, how, t, moved in row["profile"]:
                    print(f"    {kname:<40}{how:<12}{t * 1e3:9.3f} ms{moved / t / 1e9:8.1f} GB/s"
                          f"{100 * moved / t / bw:6.0f}% of copy")
            for w in dict.fromkeys(row["warnings"]):
                print(f"    warning: {w}")
    return 0


if __name__ == "__main__":
    from nbxla.flags import switch_on
    switch_on("verify")     # (every jit signature's first call checked against NumPy;
                            # timings are of later calls, which it does not slow)
    sys.exit(main())
