"""Evaluator rules for the LAPACK custom calls JAX emits on the CPU (XLA's typed FFI):
LU factorization (``lapack_?getrf_ffi``: ``jnp.linalg.solve``, ``det``, ``inv``, ``lu``),
triangular solves (``lapack_?trsm_ffi``: ``solve_triangular``, the second half of a solve),
QR (``?geqrf`` + ``?orgqr`` / ``?ungqr``: ``jnp.linalg.qr``) and symmetric / Hermitian
eigenproblems (``?syevd`` / ``?heevd``: ``eigh``).

getrf, trsm, geqrf and orgqr are the oracle's own NumPy algorithms, written from LAPACK's
definitions (not calls into LAPACK); syevd is NumPy's eigh.  The CPU runtime calls LAPACK
itself (runtime/lapack_calls.py) and is checked against them.  Batch dimensions lead; matrices are the two minor dimensions (logical order: the
operands' column-major layouts are gone after layout normalization).
"""

from __future__ import annotations

import re

import numpy as np

from .evaluator_common import fail

GETRF_TARGETS = {"lapack_sgetrf_ffi": np.float32, "lapack_dgetrf_ffi": np.float64,
                 "lapack_cgetrf_ffi": np.complex64, "lapack_zgetrf_ffi": np.complex128}
TRSM_TARGETS = {"lapack_strsm_ffi": np.float32, "lapack_dtrsm_ffi": np.float64,
                "lapack_ctrsm_ffi": np.complex64, "lapack_ztrsm_ffi": np.complex128}


def lapack_getrf(instr, args, interp):
    """``(lu, ipiv, info)`` as LAPACK's getrf gives them: partial pivoting by the first largest
    magnitude in each column (|re| + |im| for complex, as LAPACK's i?amax), ``ipiv`` 1-based
    (row k was swapped with row ipiv[k] - 1), L below the diagonal (unit diagonal implied), U on
    and above; ``info`` the first zero pivot's 1-based column, else 0 (the factorization goes
    on past it, as LAPACK's does)."""
    (a,) = args
    target = instr.attrs.get("custom_call_target")
    dtype = GETRF_TARGETS[target]
    if a.dtype != dtype or a.ndim < 2:
        raise fail(instr, f"{target} needs {np.dtype(dtype)} matrices, got {a.dtype}{list(a.shape)}")
    m, n = a.shape[-2:]
    k = min(m, n)
    lu = np.array(a, dtype).reshape(-1, m, n)
    ipiv = np.zeros((lu.shape[0], k), np.int32)
    info = np.zeros(lu.shape[0], np.int32)
    for b, mat in enumerate(lu):
        for j in range(k):
            column = mat[j:, j]
            size = np.abs(column.real) + np.abs(column.imag) if np.iscomplexobj(column) else np.abs(column)
            p = j + int(np.argmax(size))
            ipiv[b, j] = p + 1
            if mat[p, j] != 0:
                if p != j:
                    mat[[j, p]] = mat[[p, j]]
                mat[j + 1:, j] /= mat[j, j]
            elif info[b] == 0:
                info[b] = j + 1
            mat[j + 1:, j + 1:] -= np.outer(mat[j + 1:, j], mat[j, j + 1:])
    batch = a.shape[:-2]
    return lu.reshape(a.shape), ipiv.reshape(batch + (k,)), info.reshape(batch)


_CODES = {"side": {76: "L", 82: "R"}, "uplo": {76: "L", 85: "U"},
          "trans_x": {78: "N", 84: "T", 67: "C"}, "diag": {78: "N", 85: "U"}}
_DEFAULTS = {"side": 76, "uplo": 76, "trans_x": 78, "diag": 78}


def trsm_options(instr) -> dict[str, str]:
    """side (L/R), uplo (L/U), trans_x (N/T/C), diag (N/U) from the backend_config, whose
    values are ASCII codes (``{diag = 85 : ui8, side = 76 : ui8, ...}``, as jaxlib passes them)."""
    config = instr.attrs.get("backend_config")
    text = str(getattr(config, "text", config) or "")
    options = {}
    for key, codes in _CODES.items():
        match = re.search(rf"\b{key}\s*=\s*(\d+)", text)
        code = int(match.group(1)) if match else _DEFAULTS[key]
        if code not in codes:
            raise fail(instr, f"backend_config {key} = {code} is none of "
                              f"{', '.join(f'{c} ({v!r})' for c, v in codes.items())}")
        options[key] = codes[code]
    return options


def lapack_trsm(instr, args, interp):
    """``X`` with ``op(A) X = alpha B`` (side L) or ``X op(A) = alpha B`` (side R), ``op`` the
    transpose or conjugate transpose that ``trans_x`` names, only the ``uplo`` triangle of A
    read (its diagonal taken as ones for ``diag`` = U); ``alpha`` is a third operand when
    present, else 1.  Substitution row by row, over every right-hand side at once."""
    target = instr.attrs.get("custom_call_target")
    dtype = TRSM_TARGETS[target]
    a, b = (np.asarray(x) for x in args[:2])
    if a.dtype != dtype or b.dtype != dtype or a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise fail(instr, f"{target} needs a square {np.dtype(dtype)} matrix and {np.dtype(dtype)} "
                          f"right-hand sides, got {a.dtype}{list(a.shape)}, {b.dtype}{list(b.shape)}")
    opt = trsm_options(instr)
    n = a.shape[-1]
    lower = opt["uplo"] == "L"
    tri = np.tril(a) if lower else np.triu(a)
    if opt["diag"] == "U":
        tri = tri.copy()
        tri[..., range(n), range(n)] = 1
    if opt["trans_x"] != "N":
        tri = np.swapaxes(tri, -1, -2)
        tri = tri.conj() if opt["trans_x"] == "C" else tri
        lower = not lower
    rhs = np.array(b, dtype)
    if len(args) > 2:
        rhs = rhs * np.asarray(args[2], dtype)
    if opt["side"] == "R":            # X M = B  <=>  M^T X^T = B^T
        tri, rhs, lower = np.swapaxes(tri, -1, -2), np.swapaxes(rhs, -1, -2), not lower
    if tri.shape[-1] != rhs.shape[-2]:
        raise fail(instr, f"{target}: a {list(a.shape)} does not fit b {list(b.shape)} on side {opt['side']}")
    x = np.zeros(np.broadcast_shapes(tri.shape[:-2], rhs.shape[:-2]) + rhs.shape[-2:], dtype)
    rows = range(n) if lower else range(n - 1, -1, -1)
    for i in rows:
        done = slice(0, i) if lower else slice(i + 1, n)
        value = rhs[..., i, :] - np.einsum("...k,...kj->...j", tri[..., i, done], x[..., done, :])
        x[..., i, :] = value / tri[..., i, i][..., None]
    if opt["side"] == "R":
        x = np.swapaxes(x, -1, -2)
    return np.ascontiguousarray(x)


# ---- QR (jnp.linalg.qr: geqrf, then orgqr / ungqr) and symmetric eigenproblems (eigh) -------

_TYPES = {"s": np.float32, "d": np.float64, "c": np.complex64, "z": np.complex128}
GEQRF_TARGETS = {f"lapack_{t}geqrf_ffi": dtype for t, dtype in _TYPES.items()}
ORGQR_TARGETS = {"lapack_sorgqr_ffi": np.float32, "lapack_dorgqr_ffi": np.float64,
                 "lapack_cungqr_ffi": np.complex64, "lapack_zungqr_ffi": np.complex128}
SYEVD_TARGETS = {"lapack_ssyevd_ffi": np.float32, "lapack_dsyevd_ffi": np.float64,
                 "lapack_cheevd_ffi": np.complex64, "lapack_zheevd_ffi": np.complex128}


def _check_matrices(instr, a, targets) -> np.dtype:
    target = instr.attrs.get("custom_call_target")
    dtype = np.dtype(targets[target])
    if a.dtype != dtype or a.ndim < 2:
        raise fail(instr, f"{target} needs {dtype} matrices, got {a.dtype}{list(a.shape)}")
    return dtype


def _reflector(alpha, x):
    """LAPACK's ?larfg: (beta, tau, v) with H^H (alpha, x) = (beta, 0), H = I - tau (1, v)(1, v)^H."""
    xnorm = float(np.linalg.norm(x)) if x.size else 0.0
    if xnorm == 0 and np.imag(alpha) == 0:
        return alpha, alpha.dtype.type(0), np.zeros_like(x)
    beta = -np.copysign(np.sqrt(abs(alpha) ** 2 + xnorm ** 2), np.real(alpha))
    tau = (beta - alpha) / beta
    return alpha.dtype.type(beta), alpha.dtype.type(tau), (x / (alpha - beta)).astype(alpha.dtype)


def lapack_geqrf(instr, args, interp):
    """``(a, tau)`` as LAPACK's geqrf: R on and above the diagonal, the Householder vectors of
    the reflectors H_j = I - tau_j v_j v_j^H below it (v_j[j] = 1 implied)."""
    (a,) = args
    dtype = _check_matrices(instr, a, GEQRF_TARGETS)
    m, n = a.shape[-2:]
    k = min(m, n)
    out = np.array(a, dtype).reshape(-1, m, n)
    taus = np.zeros((out.shape[0], k), dtype)
    for b, mat in enumerate(out):
        for j in range(k):
            beta, tau, v = _reflector(mat[j, j], mat[j + 1:, j])
            taus[b, j] = tau
            mat[j, j], mat[j + 1:, j] = beta, v
            if j + 1 < n and tau != 0:
                full = np.concatenate([[dtype.type(1)], v])
                # H^H applied from the left: A -= conj(tau) v (v^H A)
                rest = mat[j:, j + 1:]
                rest -= np.conj(tau) * np.outer(full, full.conj() @ rest)
    return out.reshape(a.shape), taus.reshape(a.shape[:-2] + (k,))


def lapack_orgqr(instr, args, interp):
    """LAPACK's orgqr / ungqr: the first n columns of Q = H_1 ... H_k from geqrf's output."""
    a, tau = args
    dtype = _check_matrices(instr, a, ORGQR_TARGETS)
    m, n = a.shape[-2:]
    k = tau.shape[-1]
    mats, taus = np.asarray(a, dtype).reshape(-1, m, n), np.asarray(tau, dtype).reshape(-1, k)
    out = np.empty_like(mats)
    for b in range(mats.shape[0]):
        q = np.eye(m, n, dtype=dtype)
        for j in range(k - 1, -1, -1):
            full = np.concatenate([[dtype.type(1)], mats[b, j + 1:, j]])
            q[j:, :] -= taus[b, j] * np.outer(full, full.conj() @ q[j:, :])
        out[b] = q
    return out.reshape(a.shape)


def lapack_syevd(instr, args, interp):
    """``(vectors, values, info)`` as LAPACK's syevd / heevd reading the ``uplo`` triangle:
    eigenvalues ascending, eigenvectors as columns (NumPy's eigh, which calls that LAPACK
    routine; an eigenvector is defined up to a unit factor, and NumPy's call picks another sign
    or phase than XLA's for some matrices: compare eigenvectors up to one).  With mode N (values only) the first output is unspecified by LAPACK: the input
    is returned."""
    (a,) = args
    dtype = _check_matrices(instr, a, SYEVD_TARGETS)
    config = str(getattr(instr.attrs.get("backend_config"), "text", instr.attrs.get("backend_config")) or "")
    mode = re.search(r"\bmode\s*=\s*(\d+)", config)
    vectors = mode is None or int(mode.group(1)) == ord("V")
    lower = _CODES["uplo"].get(int(m.group(1)) if (m := re.search(r"\buplo\s*=\s*(\d+)", config)) else 76) == "L"
    n = a.shape[-1]
    mats = np.asarray(a, dtype).reshape(-1, n, n)
    values = np.zeros((mats.shape[0], n), np.real(np.zeros((), dtype)).dtype)
    vecs = np.array(mats)
    for b, mat in enumerate(mats):
        w, v = np.linalg.eigh(mat, UPLO="L" if lower else "U")
        values[b] = w
        if vectors:
            vecs[b] = v
    batch = a.shape[:-2]
    return vecs.reshape(a.shape), values.reshape(batch + (n,)), np.zeros(batch, np.int32)
