"""Programs with graph breaks, for auto-clustering (issue 20): NumPy code that must-compile
``nbxla.jit`` refuses, because something in the middle needs concrete values.

    python benchmarks/auto_clustering.py --breaks medium      # auto vs NumPy, side by side

Each program is our own, in the shape such code takes in simulation and data scripts: array
work before and after a SciPy banded solve, ``np.unique``, a boolean mask, ``print`` of a
value in a time loop, an ``if``/``while`` on a value, and a ``scipy.special`` function (a
ufunc from outside NumPy).  ``PROGRAMS`` maps a name to ``builder(size) -> Program`` (sizes
``"tiny"`` for tests, ``"small"``, ``"medium"``); the functions never mutate their inputs.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Callable

import numpy as np


@dataclass
class Program:
    name: str
    fn: Callable
    inputs: tuple
    needs_scipy: bool = False


def _rng():
    return np.random.default_rng(20)


# ---- a banded solve between stencil blocks ------------------------------------------------------

def implicit_column_diffusion(T, kappa, dz, forcing, dt):
    """Explicit lateral smoothing, an implicit vertical diffusion step solved per water
    column by SciPy's banded solver (all columns as one banded system), then a tendency."""
    from scipy.linalg import solve_banded
    nx, ny, nz = T.shape
    lateral = T.copy()
    lateral[1:-1, 1:-1] = T[1:-1, 1:-1] + 0.1 * (T[2:, 1:-1] + T[:-2, 1:-1] + T[1:-1, 2:]
                                                 + T[1:-1, :-2] - 4.0 * T[1:-1, 1:-1])
    k = dt * 0.5 * (kappa[:, :, 1:] + kappa[:, :, :-1]) / (dz[1:] * dz[:-1])
    upper = np.zeros_like(T)
    lower = np.zeros_like(T)
    upper[:, :, :-1] = -k                      # coupling to the level below
    lower[:, :, 1:] = -k
    main = 1.0 - upper - lower
    n = T.size
    ab = np.stack([np.concatenate([np.zeros(1), upper.reshape(n)[:-1]]),
                   main.reshape(n),
                   np.concatenate([lower.reshape(n)[1:], np.zeros(1)])])
    rhs = lateral + dt * forcing * np.exp(-0.1 * np.arange(nz))
    new = solve_banded((1, 1), ab, rhs.reshape(n)).reshape(T.shape)
    tendency = (new - T) / dt
    energy = 0.5 * (new * new).sum(axis=2)
    return np.where(np.abs(tendency) > 1e-3, tendency, 0.0), energy


def _banded(size):
    n = {"tiny": 8, "small": 48, "medium": 128}[size]
    g = _rng()
    shape = (n, n, 32)
    return Program("banded_diffusion", implicit_column_diffusion,
                   (g.random(shape), 0.1 + g.random(shape), 1.0 + g.random(32),
                    g.standard_normal(shape), 0.5), needs_scipy=True)


# ---- np.unique between array work -----------------------------------------------------------------

def label_statistics(x, y, bins):
    """Labels from binned values, ``np.unique`` (a data-dependent shape) for the label set
    and counts, then per-label means used back in elementwise work."""
    score = np.sqrt(x * x + y * y) * np.cos(3.0 * np.arctan2(y, x))
    labels = np.clip(np.floor((score + 2.0) * bins / 4.0), 0, bins - 1).astype(np.int64)
    uniq, inverse, counts = np.unique(labels, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse.ravel(), weights=score.ravel(), minlength=uniq.size)
    means = sums / counts
    centered = score - means[inverse].reshape(score.shape)
    return uniq, counts, np.tanh(centered) * 0.5 + 0.25 * centered * centered


def _unique(size):
    n = {"tiny": 20, "small": 300, "medium": 1500}[size]
    g = _rng()
    return Program("unique_labels", label_statistics,
                   (g.standard_normal((n, n)), g.standard_normal((n, n)), 16))


# ---- a boolean mask, then a float() of its statistic -----------------------------------------------

def masked_normalize(x, w, threshold):
    """Select values above a threshold (a boolean mask: data-dependent shape), take their
    mean and spread as Python floats, normalize the whole field with them."""
    field = np.exp(-x * x) * w + 0.5 * np.sin(x)
    chosen = field[field > threshold]
    m = float(chosen.mean()) if chosen.size else 0.0
    s = float(chosen.std()) if chosen.size else 1.0
    z = (field - m) / (s + 1e-12)
    return np.where(field > threshold, z, -z * 0.1) + np.log1p(np.abs(z)), chosen.size


def _masked(size):
    n = {"tiny": 30, "small": 400, "medium": 1500}[size]
    g = _rng()
    return Program("masked_normalize", masked_normalize,
                   (g.standard_normal((n, n)), g.random((n, n)), 0.6))


# ---- print of a value in a time loop ---------------------------------------------------------------

def heat_with_progress(u, steps, every, out):
    """2-D explicit diffusion; every ``every`` steps the field's norm is printed (a break:
    ``print`` formats a float of it) to the stream ``out``."""
    u = u.copy()
    for t in range(steps):
        u[1:-1, 1:-1] = u[1:-1, 1:-1] + 0.2 * (u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:]
                                               + u[1:-1, :-2] - 4.0 * u[1:-1, 1:-1])
        if t % every == 0:
            print(f"step {t}: norm {np.sqrt((u * u).sum()):.6e}", file=out)
    return u


def _progress(size):
    n, steps = {"tiny": (24, 6), "small": (300, 30), "medium": (1000, 40)}[size]
    return Program("heat_progress", heat_with_progress,
                   (_rng().random((n, n)), steps, 10, io.StringIO()))


# ---- if / while on a value ---------------------------------------------------------------------------

def damped_iteration(x, b, tol, max_steps):
    """A relaxation iterated until the residual (a Python float: ``while`` needs it) is
    small, with a branch on the value (halve the step when it grows)."""
    x = x.copy()
    step, previous, k = 0.4, np.inf, 0
    residual = float(np.abs(b - x - 0.1 * np.sin(x)).max())
    while residual > tol and k < max_steps:
        r = b - x - 0.1 * np.sin(x)
        x = x + step * r / (1.0 + 0.1 * np.cos(x))
        residual = float(np.abs(r).max())
        if residual > previous:
            step *= 0.5
        previous = residual
        k += 1
    return x, k


def _iteration(size):
    n = {"tiny": 40, "small": 400, "medium": 1200}[size]
    g = _rng()
    return Program("damped_iteration", damped_iteration,
                   (g.standard_normal((n, n)), g.standard_normal((n, n)), 1e-8, 60))


# ---- a scipy.special ufunc between array work ---------------------------------------------------------

def error_function_blend(x, y):
    """Smooth switch built on ``scipy.special.erf`` (a ufunc nbxla has no lowering for)
    between elementwise blocks."""
    from scipy.special import erf
    s = (x - 0.5 * y) / np.sqrt(1.0 + y * y)
    blend = 0.5 * (1.0 + erf(s * 3.0))
    return blend * np.exp(-s * s) + (1.0 - blend) * np.cos(x) * y


def _erf(size):
    n = {"tiny": 30, "small": 400, "medium": 1500}[size]
    g = _rng()
    return Program("erf_blend", error_function_blend,
                   (g.standard_normal((n, n)), g.standard_normal((n, n))), needs_scipy=True)


PROGRAMS: dict[str, Callable[[str], Program]] = {
    "banded_diffusion": _banded, "unique_labels": _unique, "masked_normalize": _masked,
    "heat_progress": _progress, "damped_iteration": _iteration, "erf_blend": _erf,
}
