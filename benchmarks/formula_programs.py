"""Formula DAGs: elementwise programs built of transcendentals, powers and ``where``, over 1-D
and 3-D arrays, written the way NumPy users write them (named temporaries, no loops).

Added to ``programs.PROGRAMS`` (so ``programs.py`` and ``peers.py`` run them): each builder
``build(size) -> (name, fn, inputs, make_jax, streaming_bytes)``, ``make_jax(xp)`` the same
formula over ``jax.numpy`` (or peers.py's small torch adapter).

* ``black_scholes``: option prices, log/sqrt/exp and a polynomial cumulative normal with
  ``where`` (the classic NumPy and numba benchmark); 1-D.
* ``spherical``: spherical to Cartesian coordinates and a rotation: sin and cos of the same
  angles (one argument reduction can serve both); 1-D.
* ``thermo``: potential temperature, saturation vapour pressure, relative humidity, dew point
  and equivalent potential temperature on a 3-D grid with 1-D pressure levels: fractional
  powers, exp, log, min and ``where``.
"""

from __future__ import annotations

import numpy as np


def _rng():
    return np.random.default_rng(23)


def black_scholes_formula(xp, S, K, T, rate=0.02, vol=0.3):
    sqrt_t = xp.sqrt(T)
    d1 = (xp.log(S / K) + (rate + 0.5 * vol * vol) * T) / (vol * sqrt_t)
    d2 = d1 - vol * sqrt_t

    def cnd(d):            # Abramowitz and Stegun 26.2.17
        k = 1.0 / (1.0 + 0.2316419 * xp.abs(d))
        w = k * (0.319381530 + k * (-0.356563782 + k * (1.781477937 + k * (-1.821255978 + k * 1.330274429))))
        w = 1.0 - 0.3989422804014327 * xp.exp(-0.5 * d * d) * w
        return xp.where(d < 0, 1.0 - w, w)
    discount = K * xp.exp(-rate * T)
    n1, n2 = cnd(d1), cnd(d2)
    call = S * n1 - discount * n2
    put = discount * (1.0 - n2) - S * (1.0 - n1)
    return call, put


def _black_scholes(size):
    n = {"small": 200_000, "medium": 2_000_000}[size]
    g = _rng()
    args = (g.uniform(5, 30, n), g.uniform(1, 100, n), g.uniform(0.25, 10, n))

    def black_scholes(S, K, T):
        return black_scholes_formula(np, S, K, T)
    return "black_scholes", black_scholes, args, (lambda xp: lambda *a: black_scholes_formula(xp, *a)), 5 * args[0].nbytes


def spherical_formula(xp, r, theta, phi):
    st, ct = xp.sin(theta), xp.cos(theta)
    sp, cp = xp.sin(phi), xp.cos(phi)
    x, y, z = r * st * cp, r * st * sp, r * ct
    c, s = 0.955336489125606, 0.29552020666133955          # cos 0.3, sin 0.3
    return c * x - s * y, s * x + c * y, z


def _spherical(size):
    n = {"small": 200_000, "medium": 2_000_000}[size]
    g = _rng()
    args = (g.uniform(1, 2, n), g.uniform(0, np.pi, n), g.uniform(-np.pi, np.pi, n))

    def spherical(r, theta, phi):
        return spherical_formula(np, r, theta, phi)
    return "spherical", spherical, args, (lambda xp: lambda *a: spherical_formula(xp, *a)), 6 * args[0].nbytes


def thermo_formula(xp, T, p, q):
    theta = T * (1000.0 / p[None, None, :]) ** 0.2857
    tc = T - 273.15
    es = 6.112 * xp.exp(17.67 * tc / (tc + 243.5))
    e = q * p[None, None, :] / (0.622 + 0.378 * q)
    rh = xp.minimum(e / es, 1.0)
    ln = xp.log(e / 6.112)
    dew = 243.5 * ln / (17.67 - ln)
    theta_e = theta * xp.exp(2.5e6 * q / (1004.0 * xp.where(T > 150.0, T, 150.0)))
    return theta, rh, dew, theta_e


def _thermo(size):
    nx, ny, nz = {"small": (64, 64, 30), "medium": (160, 160, 50)}[size]
    g = _rng()
    T = g.uniform(200, 310, (nx, ny, nz))
    p = np.linspace(1000, 100, nz)
    q = g.uniform(1e-4, 2e-2, (nx, ny, nz))

    def thermo(T, p, q):
        return thermo_formula(np, T, p, q)
    return "thermo", thermo, (T, p, q), (lambda xp: lambda *a: thermo_formula(xp, *a)), 6 * T.nbytes


FORMULAS = {"black_scholes": _black_scholes, "spherical": _spherical, "thermo": _thermo}
