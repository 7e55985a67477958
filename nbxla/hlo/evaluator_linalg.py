"""Reference rules for dot, convolution, fft and the LAPACK custom-call targets."""

from __future__ import annotations

import functools
import math
import re

import numpy as np

from .attributes import PadDim, Window, WindowDim
from .evaluator_common import fail, operand_type
from .evaluator_data import pad_array
from .evaluator_elementwise import convert_array
from .shape_inference import window_output_size


def _operands_in_result_type(instr, args):
    """dot/convolution may name a preferred result type: convert the operands to it first,
    then compute in it (f16 in f32, rounded once at the end, like XLA's CPU backend)."""
    dst = instr.shape.element_type
    converted = [convert_array(x, operand_type(instr, i), dst) for i, x in enumerate(args)]
    compute = np.float32 if dst == "f16" else instr.shape.dtype
    return [np.asarray(x, compute) for x in converted]


def matmul_layout(instr, a_shape, b_shape):
    """A dot as one batched matmul: the operand permutations and (batch, m, k, n) such that
    ``transpose(a, lhs_perm).reshape(batch, m, k) @ transpose(b, rhs_perm).reshape(batch, k, n)``
    reshaped to the dot's result dims is the dot (shared with the device runtimes)."""
    at = instr.attrs
    lb, rb = list(at.get("lhs_batch_dims", ())), list(at.get("rhs_batch_dims", ()))
    lc, rc = list(at.get("lhs_contracting_dims", ())), list(at.get("rhs_contracting_dims", ()))
    lf = [d for d in range(len(a_shape)) if d not in lb and d not in lc]
    rf = [d for d in range(len(b_shape)) if d not in rb and d not in rc]

    def size(shape, dims):      # (math.prod: np.prod of a short list cost 10x, per dot per new size)
        return math.prod(int(shape[d]) for d in dims)

    return lb + lf + lc, rb + rc + rf, (size(a_shape, lb), size(a_shape, lf), size(a_shape, lc),
                                        size(b_shape, rf))


def _dot(instr, args, interp):
    a, b = _operands_in_result_type(instr, args)
    lhs_perm, rhs_perm, (batch, m, k, n) = matmul_layout(instr, a.shape, b.shape)
    lhs = np.transpose(a, lhs_perm).reshape(batch, m, k)
    rhs = np.transpose(b, rhs_perm).reshape(batch, k, n)
    out = np.matmul(lhs, rhs)  # ints wrap, pred is or-of-ands
    return out.reshape(instr.shape.dims)


def _convolution(instr, args, interp):
    """General convolution: operands in canonical (batch, feature, spatial...) order, input
    dilated and padded, then one einsum per kernel offset over a strided window slice."""
    x, k = _operands_in_result_type(instr, args)
    dn = instr.attrs["dim_labels"]
    window = instr.attrs.get("window") or Window(tuple(WindowDim(args[1].shape[d]) for d in dn.kernel_spatial))
    groups = instr.attrs.get("feature_group_count", 1)
    batch_groups = instr.attrs.get("batch_group_count", 1)
    if groups > 1 and batch_groups > 1:
        raise fail(instr, "feature_group_count and batch_group_count cannot both exceed 1")
    x = np.transpose(x, [dn.input_batch, dn.input_feature, *dn.input_spatial])
    k = np.transpose(k, [dn.kernel_output_feature, dn.kernel_input_feature, *dn.kernel_spatial])
    reversed_axes = [2 + i for i, w in enumerate(window.dims) if w.reversal]
    if reversed_axes:
        k = np.flip(k, reversed_axes)
    out_spatial = [window_output_size(x.shape[2 + i], w) for i, w in enumerate(window.dims)]
    if 0 in out_spatial:  # also covers negative padding that crops everything away
        return np.zeros(instr.shape.dims, x.dtype)
    x = pad_array(x, x.dtype.type(0), [PadDim(0, 0), PadDim(0, 0)] +
                  [PadDim(w.pad_low, w.pad_high, w.base_dilation - 1) for w in window.dims])
    n, c = x.shape[:2]
    o, i = k.shape[:2]
    spatial = x.shape[2:]
    if batch_groups > 1:
        # Output feature group g reads input batch group g (batch split group-major).
        xg = x.reshape(batch_groups, n // batch_groups, c, *spatial)
        spec = "gnc...,goc->ngo..."
        acc = np.zeros((n // batch_groups, batch_groups, o // batch_groups, *out_spatial), x.dtype)
    else:
        # Output feature group g reads input feature group g.
        xg = x.reshape(n, groups, c // groups, *spatial)
        spec = "ngc...,goc->ngo..."
        acc = np.zeros((n, groups, o // groups, *out_spatial), x.dtype)
    kg = k.reshape(max(groups, batch_groups), o // max(groups, batch_groups), i, *k.shape[2:])
    for offsets in np.ndindex(*k.shape[2:]):
        sl = tuple(slice(off * w.window_dilation, off * w.window_dilation + (size - 1) * w.stride + 1, w.stride)
                   for off, w, size in zip(offsets, window.dims, out_spatial))
        acc = acc + np.einsum(spec, xg[(slice(None),) * 3 + sl], kg[(Ellipsis,) + offsets])
    out = acc.reshape(acc.shape[0], o, *out_spatial)
    order = [dn.output_batch, dn.output_feature, *dn.output_spatial]
    return np.transpose(out, np.argsort(order))


# --- LAPACK custom calls (JAX's CPU linear algebra) ---------------------------------------------

_UPLO = {76: "L", 85: "U"}  # ASCII codes, as jaxlib passes them


def lapack_uplo(instr) -> str:
    config = instr.attrs.get("backend_config")
    text = getattr(config, "text", config) or ""
    match = re.search(r"uplo\s*=\s*(\d+)", str(text))
    code = int(match.group(1)) if match else 76
    if code not in _UPLO:
        raise fail(instr, f"backend_config uplo = {code} is neither 76 ('L') nor 85 ('U')")
    return _UPLO[code]


SOLVE_TARGET = "nbxla_linalg_solve"
# A dot of slices whose lengths depend on a loop index (``A[i, :j] @ A[:j, j]``), the operands
# passed whole (see masked_dot).
MASKED_DOT_TARGET = "nbxla_masked_dot"
# LAPACK's Cholesky through XLA's FFI, as JAX's CPU lowering names it (nbxla emits it too).
POTRF_TARGETS = ("lapack_spotrf_ffi", "lapack_dpotrf_ffi")


def linalg_solve(instr, args, interp):
    """``nbxla_linalg_solve(a, b)``: ``np.linalg.solve`` (LAPACK's gesv through NumPy) on
    square matrices ``a[..., n, n]`` and right-hand sides ``b[..., n, k]``, both in the
    result's dtype; a singular matrix raises NumPy's LinAlgError."""
    a, b = args
    if a.ndim < 2 or a.shape[-1] != a.shape[-2] or b.shape[-2:-1] != a.shape[-1:]:
        raise fail(instr, f"{SOLVE_TARGET} needs a[..., n, n] and b[..., n, k], got {list(a.shape)}, {list(b.shape)}")
    return np.linalg.solve(a, b).astype(instr.shape.dtype, copy=False)


def masked_dot(instr, args, interp):
    """``nbxla_masked_dot(lhs, rhs, lo_0, hi_0, lo_1, hi_1, ...)``: the dot (its
    ``lhs_contracting_dims`` / ``rhs_contracting_dims``, no batch dims) of ``lhs`` and ``rhs``
    with each axis listed in ``dimensions`` (numbered over lhs's axes, then rhs's) zeroed
    outside ``[lo_k, hi_k)`` (bounds clamped to the axis).  Why a call and not
    ``select(mask, x, 0)`` before a ``dot``: the backends run it at the slices' true lengths
    (a BLAS call on the sub-matrix), where the select costs a copy of the whole operand and
    the dot its full length."""
    lhs, rhs = (np.array(x) for x in args[:2])
    axes = masked_dot_axes(instr)
    for k, axis in enumerate(axes):
        x = lhs if axis < lhs.ndim else rhs
        axis = axis if axis < lhs.ndim else axis - lhs.ndim
        lo, hi = masked_dot_bounds(args[2 + 2 * k], args[3 + 2 * k], x.shape[axis])
        index = [slice(None)] * x.ndim
        index[axis] = np.r_[0:lo, hi:x.shape[axis]].astype(np.int64)
        x[tuple(index)] = 0
    return _dot(instr, [lhs, rhs], interp)


def masked_dot_axes(instr) -> tuple:
    axes = tuple(instr.attrs.get("dimensions", ()))
    ranks = instr.operands[0].shape.rank + instr.operands[1].shape.rank
    if len(instr.operands) != 2 + 2 * len(axes) or any(not 0 <= a < ranks for a in axes) \
            or instr.attrs.get("lhs_batch_dims") or instr.attrs.get("rhs_batch_dims"):
        raise fail(instr, f"{MASKED_DOT_TARGET} needs (lhs, rhs, lo, hi per axis in dimensions), "
                          "no batch dims")
    return axes


def masked_dot_bounds(lo, hi, n: int) -> tuple[int, int]:
    """[lo, hi) clamped to an axis of length n (empty when hi <= lo)."""
    lo, hi = min(max(int(lo), 0), n), min(max(int(hi), 0), n)
    return lo, max(lo, hi)


def lapack_potrf(instr, args, interp):
    """Cholesky factorisation of a matrix or batch (``lapack_{s,d}potrf_ffi``).

    Returns (factor, info) like LAPACK: the factor fills the ``uplo`` triangle, the other
    triangle keeps the input (the buffer is updated in place); info is 0 on success.  On
    failure info is the order of the first leading minor that is not positive definite and
    the factor is all NaN (LAPACK leaves a partial factor, which JAX masks with NaN anyway).
    """
    (a,) = args
    expected = {"lapack_spotrf_ffi": np.float32, "lapack_dpotrf_ffi": np.float64}
    target = instr.attrs.get("custom_call_target")
    if a.dtype != expected[target] or a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise fail(instr, f"{target} needs square {np.dtype(expected[target])} matrices, got {a.dtype}{list(a.shape)}")
    lower = lapack_uplo(instr) == "L"
    size = a.shape[-1]
    mats = a.reshape(-1, size, size)
    info = np.zeros(len(mats), np.int32)
    other = _triangle(size, not lower, diagonal=False)
    factors = []
    for b, m in enumerate(mats):
        # NumPy's cholesky reads one triangle only (LAPACK's potrf with uplo L, or U for
        # upper=True), as the custom call does: the other may hold anything, and is kept.
        try:
            chol = np.linalg.cholesky(m, upper=not lower)
        except np.linalg.LinAlgError:
            t = np.where(_triangle(size, lower), m, 0)
            info[b] = _first_failing_minor(t + t.T - np.diag(np.diag(m)))
            chol = np.full_like(m, np.nan)
        else:
            np.copyto(chol, m, where=other)
        factors.append(chol)
    factor = factors[0] if len(factors) == 1 else np.stack(factors)
    return factor.reshape(a.shape), info.reshape(a.shape[:-2])


@functools.lru_cache(maxsize=32)
def _triangle(size: int, lower: bool, diagonal: bool = True) -> np.ndarray:
    """The mask of a square matrix's lower (or upper) triangle, with or without the diagonal:
    made once per size (making it took longer than factorising a 200 x 200 matrix)."""
    mask = np.tri(size, k=0 if diagonal else -1, dtype=bool)
    mask = mask if lower else mask.T.copy()
    mask.flags.writeable = False
    return mask


def _first_failing_minor(sym: np.ndarray) -> int:
    """Smallest k whose leading k x k minor is not positive definite (monotone in k)."""
    lo, hi = 1, sym.shape[0]
    while lo < hi:
        mid = (lo + hi) // 2
        try:
            np.linalg.cholesky(sym[:mid, :mid])
            lo = mid + 1
        except np.linalg.LinAlgError:
            hi = mid
    return lo


def _fft(instr, args, interp):
    """NumPy's FFT over the trailing ``fft_length`` axes (computed in double precision, then
    rounded to the result type); IFFT and IRFFT are normalized by 1/n as in XLA."""
    (x,) = args
    lengths = tuple(instr.attrs["fft_length"])
    axes = tuple(range(x.ndim - len(lengths), x.ndim))
    kind = instr.attrs["fft_type"]
    if x.size == 0:
        return np.zeros(instr.shape.dims, instr.shape.dtype)
    if kind == "FFT":
        return np.fft.fftn(x, axes=axes)
    if kind == "IFFT":
        return np.fft.ifftn(x, axes=axes)
    if kind == "RFFT":
        return np.fft.rfftn(x, axes=axes)
    return np.fft.irfftn(x, s=lengths, axes=axes)


LINALG_RULES = {"dot": _dot, "convolution": _convolution, "fft": _fft}
