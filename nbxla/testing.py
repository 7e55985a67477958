"""The one tolerance rule for comparing results with expected ones (run-hlo, corpus tests,
``--verify``, ``jit(verify=True)``, auto mode's check of each new cluster).

``compare_arrays(got, want) -> (ok, detail)``: dtype and shape must match; integers and
booleans exactly; floats within a per-dtype tolerance (float32 rtol 1e-5, float64 1e-12,
float16 2e-3, bfloat16 1e-2), with
an absolute tolerance scaled by the largest expected magnitude; NaN and Inf positions equal.
``differences(pairs)`` applies it to labelled pairs; ``SharedCopies`` makes the copies an eager
oracle run works on.
"""

from __future__ import annotations

import numpy as np

from .hlo.shapes import LOW_PRECISION_DTYPES

# Default (rtol, atol) per element type kind; atol is scaled by the largest |expected| value
# so that it means "error relative to the output's magnitude" for outputs near zero.
_TOLERANCES = {
    # bf16 keeps 8 significant bits (one rounding is up to 2**-9 relative); f8 keeps 3 or 4.
    "float8_e5m2": (0.25, 0.25), "float8_e4m3fn": (0.125, 0.125),
    "bfloat16": (1e-2, 1e-2),
    # f16 keeps 11 bits (one rounding: up to 2**-11 relative).  2e-3, not 1e-3: f16 reductions.
    # nbxla accumulates f16 sums in f32 and rounds once (its answer is the one closer to the
    # exact sum); XLA:CPU adds in f16, each partial sum rounded, which for rows of a few
    # hundred elements puts its answer up to ~1.2e-3 of the output's magnitude away.  Both are
    # right for f16; 2e-3 (about 4 ulps at the largest value) accepts either.
    "float16": (2e-3, 2e-3),
    "float32": (1e-5, 1e-6), "complex64": (1e-5, 1e-6),
    "float64": (1e-12, 1e-13), "complex128": (1e-12, 1e-13),
}


def compare_arrays(got: np.ndarray, want: np.ndarray, rtol=None, atol=None) -> tuple[bool, str]:
    """Compare one output with its expected value; returns (ok, a short explanation)."""
    got, want = np.asarray(got), np.asarray(want)
    if got.dtype != want.dtype:
        return False, f"dtype {got.dtype}, expected {want.dtype}"
    if got.shape != want.shape:
        return False, f"shape {got.shape}, expected {want.shape}"
    default_rtol, default_atol = _TOLERANCES.get(want.dtype.name, (1e-5, 1e-6))
    if want.dtype in LOW_PRECISION_DTYPES:       # (ml_dtypes' kind is "V"): as f32, exactly
        got, want = got.astype(np.float32), want.astype(np.float32)
    if want.dtype.kind not in "fc":  # integers and pred: exact
        bad = int(np.count_nonzero(got != want))
        return bad == 0, f"{bad} of {want.size} elements differ" if bad else "exact"
    rtol = default_rtol if rtol is None else rtol
    with np.errstate(all="ignore"):
        finite = np.isfinite(want)
        scale = float(np.abs(want[finite]).max()) if finite.any() else 1.0
        atol = default_atol * max(scale, 1.0) if atol is None else atol
        both = finite & np.isfinite(got)
        nan_ok = np.array_equal(np.isnan(got), np.isnan(want))
        # Wherever either side is not finite, both must hold the same NaN or the same signed Inf.
        inf_ok = np.array_equal(np.where(both, 0, got), np.where(both, 0, want), equal_nan=True)
        err = np.abs(got[both].astype(np.complex128 if want.dtype.kind == "c" else np.float64)
                     - want[both])
        ref = np.abs(want[both])
        max_abs = float(err.max()) if err.size else 0.0
        max_rel = float((err / np.where(ref > 0, ref, np.inf)).max()) if err.size else 0.0
        close = bool(np.all(err <= atol + rtol * ref))
    detail = f"max abs err {max_abs:.3g}, max rel err {max_rel:.3g} (rtol {rtol:g}, atol {atol:.3g})"
    if not nan_ok:
        detail = "NaN positions differ; " + detail
    elif not inf_ok:
        detail = "Inf positions or signs differ; " + detail
    return nan_ok and inf_ok and close, detail


def differences(pairs) -> tuple[list[str], list[str]]:
    """``(label, got, want)`` triples compared by ``compare_arrays``: (the lines of those that
    match, the lines of those that differ), each ``"label: detail"``.  Python scalars compare
    as the NumPy values they are (NumPy hands back ``float`` where compiled code gives
    ``np.float64``)."""
    same, differ = [], []
    for label, got, want in pairs:
        ok, detail = compare_arrays(np.asarray(got), np.asarray(want))
        (same if ok else differ).append(f"{label}: {detail}")
    return same, differ


class SharedCopies:
    """Copies of arrays for an eager run that must not touch the originals, sharing memory as
    the originals do: views of one array become the same views of one copy, so a write
    through one shows in the others (``a[..., 0] = 0`` on a view of an argument).
    ``copies(array)`` is the copy of ``array``."""

    def __init__(self):
        self._owners: dict = {}             # id(memory owner) -> (owner, its copy)

    def __call__(self, array: np.ndarray) -> np.ndarray:
        owner = array
        while isinstance(owner.base, np.ndarray):
            owner = owner.base
        held = self._owners.get(id(owner))
        if held is None:
            # (order "K" keeps the owner's strides, so a view's byte offset means the same)
            held = self._owners[id(owner)] = (owner, owner.copy(order="K"))
        owner_copy = held[1]
        if owner is array:
            return owner_copy
        if owner.strides != owner_copy.strides or not owner_copy.flags.forc:
            return array.copy()             # (a layout "K" cannot keep: an unshared copy)
        offset = array.__array_interface__["data"][0] - owner.__array_interface__["data"][0]
        try:
            return np.ndarray(array.shape, array.dtype, buffer=owner_copy, offset=offset,
                              strides=array.strides)
        except (TypeError, ValueError):     # (not expressible over the copy's buffer)
            return array.copy()
