"""LAPACK custom calls of JAX's CPU lowering as library calls: LU factorization
(``lapack_?getrf_ffi``) through LAPACKE's ``?getrf``, Cholesky (``lapack_?potrf_ffi``) through
``?potrf``, triangular solves (``lapack_?trsm_ffi``)
through CBLAS's ``?trsm``, QR (``?geqrf`` and ``?orgqr`` / ``?ungqr``) and symmetric /
Hermitian eigenproblems (``?syevd`` / ``?heevd``) through LAPACKE, all from the OpenBLAS that NumPy loaded (its 64-bit-integer
``64_`` symbols, found as ``blas_threads`` finds the GEMMs).  Row-major calls on the logical
matrices, one per batch element.  The evaluator's rules (hlo/evaluator_lapack.py) are NumPy
algorithms written from LAPACK's definitions: the oracle these calls are checked against.

Without that library (NumPy built against another BLAS) the calls are not offered: the
instruction runs on the evaluator, with that reason.

``fft`` is here too: NumPy's pocketfft (``FftThunk``).
"""

from __future__ import annotations

import ctypes
import re

import numpy as np

from ..hlo.evaluator_lapack import (GEQRF_TARGETS, GETRF_TARGETS, ORGQR_TARGETS, SYEVD_TARGETS, TRSM_TARGETS,
                                    trsm_options)
from ..hlo.evaluator_linalg import POTRF_TARGETS, lapack_potrf, lapack_uplo
from ..hlo.ir import Instruction
from .blas_threads import LAPACK_THREADED_ELEMENTS, PolicyCall, openblas_libraries
from .cpu_kernels import data_pointer

_ROW_MAJOR = 101
_COLUMN_MAJOR = 102
_CBLAS = {"side": {"L": 141, "R": 142}, "uplo": {"U": 121, "L": 122},
          "trans_x": {"N": 111, "T": 112, "C": 113}, "diag": {"N": 131, "U": 132}}
_LETTER = {np.dtype(np.float32): "s", np.dtype(np.float64): "d",
           np.dtype(np.complex64): "c", np.dtype(np.complex128): "z"}
_found: dict[str, object] = {}


def _routine(name: str):
    """``name`` (e.g. ``LAPACKE_sgetrf``) with 64-bit integers from NumPy's OpenBLAS, or None."""
    if name not in _found:
        fn = None
        for lib in openblas_libraries():
            for prefix in ("scipy_", ""):
                fn = getattr(lib, f"{prefix}{name}64_", None)
                if fn is not None:
                    break
            if fn is not None:
                break
        _found[name] = fn
    return _found[name]


def lapack_thunk(instr: Instruction):
    """(thunk, None) for a LAPACK custom call this module runs; (None, why) when the library
    routine is missing; (None, None) for other targets."""
    target = instr.attrs.get("custom_call_target")
    if target in GETRF_TARGETS:
        letter = _LETTER[np.dtype(GETRF_TARGETS[target])]
        fn = _routine(f"LAPACKE_{letter}getrf")
        if fn is None:
            return None, f"{target}: LAPACKE_{letter}getrf (64-bit ints) is not in NumPy's BLAS library"
        return GetrfThunk(instr, fn), None
    if target in POTRF_TARGETS:
        return PotrfThunk(instr, _routine(f"LAPACKE_{target[7]}potrf")), None
    if target in TRSM_TARGETS:
        letter = _LETTER[np.dtype(TRSM_TARGETS[target])]
        fn = _routine(f"cblas_{letter}trsm")
        if fn is None:
            return None, f"{target}: cblas_{letter}trsm (64-bit ints) is not in NumPy's BLAS library"
        return TrsmThunk(instr, fn), None
    for targets, routine, make in ((GEQRF_TARGETS, "geqrf", GeqrfThunk), (ORGQR_TARGETS, "orgqr", OrgqrThunk),
                                   (SYEVD_TARGETS, "syevd", SyevdThunk)):
        if target in targets:
            letter = _LETTER[np.dtype(targets[target])]
            if letter in "cz":
                routine = {"orgqr": "ungqr", "syevd": "heevd"}.get(routine, routine)
            fn = _routine(f"LAPACKE_{letter}{routine}")
            if fn is None:
                return None, f"{target}: LAPACKE_{letter}{routine} (64-bit ints) is not in NumPy's BLAS library"
            return make(instr, fn), None
    return None, None


def _call(policy: PolicyCall, elements: int, work: int, fn, *args):
    """``fn(*args)``, a routine on a matrix of ``elements`` doing ``work`` multiply-adds: with
    OpenBLAS's thread count as ``policy`` (``blas_threads.threads_for_call``) says where
    OpenBLAS would thread it (its threads stall on busy cores: ``np.linalg.solve`` of 100 x 100
    took 4 ms, 0.4 ms of CPU, at load 13), else as it is."""
    if elements < LAPACK_THREADED_ELEMENTS:
        return fn(*args)
    return policy(work, fn, *args)


def _check(how: str, info: int) -> None:
    if info < 0:
        raise RuntimeError(f"{how}: argument {-info} was refused")


class GeqrfThunk:
    """(a, tau) per matrix from LAPACKE's geqrf."""

    def __init__(self, instr: Instruction, fn):
        self.policy = PolicyCall()
        self.how, self.fn = f"LAPACK {fn.__name__}", fn
        fn.restype = ctypes.c_int64
        fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64,
                       ctypes.c_void_p]
        self.dtype = instr.shape.elements[0].dtype

    def __call__(self, operands):
        (a,) = operands
        m, n = a.shape[-2:]
        k = min(m, n)
        out = np.array(a, self.dtype, order="C").reshape(-1, m, n)
        tau = np.zeros((out.shape[0], k), self.dtype)
        if m and n:
            for b in range(out.shape[0]):
                _check(self.how, _call(self.policy, m * n, m * n * k, self.fn, _ROW_MAJOR, m, n,
                                       out[b].ctypes.data, n, tau[b].ctypes.data))
        return out.reshape(a.shape), tau.reshape(a.shape[:-2] + (k,))


class OrgqrThunk:
    """Q's first n columns per matrix from LAPACKE's orgqr / ungqr."""

    def __init__(self, instr: Instruction, fn):
        self.policy = PolicyCall()
        self.how, self.fn = f"LAPACK {fn.__name__}", fn
        fn.restype = ctypes.c_int64
        fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p,
                       ctypes.c_int64, ctypes.c_void_p]
        self.dtype = instr.shape.dtype

    def __call__(self, operands):
        a, tau = operands
        m, n = a.shape[-2:]
        k = tau.shape[-1]
        out = np.array(a, self.dtype, order="C").reshape(-1, m, n)
        taus = np.ascontiguousarray(tau, self.dtype).reshape(-1, k)
        if m and n:
            for b in range(out.shape[0]):
                _check(self.how, _call(self.policy, m * n, m * n * k, self.fn, _ROW_MAJOR, m, n, k,
                                       out[b].ctypes.data, n, taus[b].ctypes.data))
        return out.reshape(a.shape)


class SyevdThunk:
    """(vectors, values, info) per matrix from LAPACKE's syevd / heevd (mode N: the input is
    returned as the first output, which LAPACK leaves unspecified: as the evaluator's rule)."""

    def __init__(self, instr: Instruction, fn):
        self.policy = PolicyCall()
        self.how, self.fn = f"LAPACK {fn.__name__}", fn
        fn.restype = ctypes.c_int64
        fn.argtypes = [ctypes.c_int, ctypes.c_char, ctypes.c_char, ctypes.c_int64, ctypes.c_void_p,
                       ctypes.c_int64, ctypes.c_void_p]
        config = str(getattr(instr.attrs.get("backend_config"), "text", instr.attrs.get("backend_config")) or "")
        mode = re.search(r"\bmode\s*=\s*(\d+)", config)
        uplo = re.search(r"\buplo\s*=\s*(\d+)", config)
        self.vectors = mode is None or int(mode.group(1)) == ord("V")
        self.uplo = bytes([int(uplo.group(1))]) if uplo else b"L"
        self.dtype = instr.shape.elements[0].dtype
        self.real = instr.shape.elements[1].dtype

    def __call__(self, operands):
        (a,) = operands
        n = a.shape[-1]
        work = np.array(a, self.dtype, order="C").reshape(-1, n, n)
        values = np.zeros((work.shape[0], n), self.real)
        info = np.zeros(work.shape[0], np.int32)
        jobz = b"V" if self.vectors else b"N"
        for b in range(work.shape[0] if n else 0):
            info[b] = _call(self.policy, n * n, 4 * n ** 3, self.fn, _ROW_MAJOR, jobz, self.uplo, n,
                            work[b].ctypes.data, n, values[b].ctypes.data)
            _check(self.how, int(info[b]))
        vectors = work if self.vectors else np.array(a, self.dtype)
        batch = a.shape[:-2]
        return vectors.reshape(a.shape), values.reshape(batch + (n,)), info.reshape(batch)


# Matrices smaller than this are factored by LAPACKE's row-major potrf with the call's own
# triangle (LAPACKE copies that triangle into a column-major buffer and back), larger ones in
# place as the column-major transpose with the other triangle.  OpenBLAS's unblocked
# factorization, which small matrices get, runs the lower triangle the faster, more than paying
# for the copies: thread CPU time on one BLAS thread, us, row-major / column-major (NumPy's
# cholesky): f64 50: 10.5 / 12.2 (12.4), 100: 36.0 / 42.6 (39.2), 127: 56 / 70 (61); f32 50:
# 9.3 / 9.9 (14.2), 100: 27.0 / 31.8 (39.4).  At 128 and 256 (power-of-two rows, whose copies
# and column walks collide in the cache) the row-major call is the slower (f64 128: 73 / 67,
# 256: 421 / 338); from 129 to 200 it wins again, but larger factorizations are blocked and
# threaded, and there the copies are not measured to pay: they stay column-major.
ROW_MAJOR_BELOW = 128


class PotrfThunk:
    """Cholesky (``lapack_?potrf_ffi``: ``np.linalg.cholesky``, JAX's ``jnp.linalg.cholesky``)
    by LAPACKE's potrf on a copy of the input, in place.  A row-major matrix read as
    column-major is its transpose, so the lower factor of the one is the upper factor of the
    other: no transposing copies (``np.linalg.cholesky`` makes them, and took 1.4-2x as long at
    200 x 200).  Small matrices are the exception (``ROW_MAJOR_BELOW``).  Where a matrix is
    not positive definite, or the routine is missing: the evaluator's rule (NumPy's cholesky),
    which gives the NaN factor and the failing minor."""

    # Its outputs are arrays of its own (a copy, a new info array, or the rule's new arrays):
    # an entry returning them needs no alias check on its results (cpu_executable.py).
    fresh_results = True

    def __init__(self, instr: Instruction, fn):
        self.policy = PolicyCall()
        self.instr, self.fn = instr, fn
        self.how = f"LAPACK {fn.__name__}" if fn is not None else "LAPACK potrf through np.linalg.cholesky"
        if fn is not None:
            fn.restype = ctypes.c_int64
            fn.argtypes = [ctypes.c_int, ctypes.c_char, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64]
        self.uplo = b"U" if lapack_uplo(instr) == "L" else b"L"        # (the transposed view's)
        self.row_major_uplo = lapack_uplo(instr).encode()
        self.dtype = instr.shape.elements[0].dtype      # (read once: a property computed per read)

    def _layout(self, n: int) -> tuple[int, bytes]:
        """(layout, uplo) of the call for an n x n matrix: see ROW_MAJOR_BELOW."""
        return (_ROW_MAJOR, self.row_major_uplo) if n < ROW_MAJOR_BELOW else (_COLUMN_MAJOR, self.uplo)

    def __call__(self, operands):
        (a,) = operands
        fn = self.fn
        if fn is None or a.dtype != self.dtype or a.ndim < 2 or a.shape[-1] != a.shape[-2]:
            return lapack_potrf(self.instr, operands, None)
        n = a.shape[-1]
        factor = np.array(a, order="C")
        layout, uplo = self._layout(n)
        if a.ndim == 2:
            # One matrix (the common case): its info straight from the call.  For a 50 x 50
            # matrix the batch loop's Python (np.ndindex, ``ctypes.data``, ``info.any()``) cost
            # about half as much again as potrf itself.
            if _call(self.policy, n * n, n ** 3 // 3, fn, layout, uplo, n, data_pointer(factor), max(n, 1)):
                return lapack_potrf(self.instr, operands, None)
            return factor, np.zeros((), np.int32)
        info = np.zeros(factor.shape[:-2], np.int32)
        for b, m in zip(np.ndindex(info.shape), factor.reshape(-1, n, n)):
            info[b] = _call(self.policy, n * n, n ** 3 // 3, fn, layout, uplo, n, data_pointer(m), max(n, 1))
        if info.any():
            return lapack_potrf(self.instr, operands, None)
        return factor, info


class GetrfThunk:
    """(lu, ipiv, info) per matrix from LAPACKE's getrf (ipiv 1-based, as LAPACK's)."""

    def __init__(self, instr: Instruction, fn):
        self.policy = PolicyCall()
        self.how = f"LAPACK {fn.__name__}"
        self.fn = fn
        fn.restype = ctypes.c_int64
        fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64,
                       ctypes.c_void_p]
        self.dtype = instr.shape.elements[0].dtype

    def __call__(self, operands):
        (a,) = operands
        m, n = a.shape[-2:]
        k = min(m, n)
        lu = np.array(a, self.dtype, order="C").reshape(-1, m, n)
        ipiv = np.zeros((lu.shape[0], k), np.int64)
        info = np.zeros(lu.shape[0], np.int32)
        if m and n:
            # (addresses by arithmetic: a view's ``.ctypes.data`` per matrix cost more than the
            # factorization of a small one)
            fn, lu_at, lu_step, ipiv_at, ipiv_step = self.fn, lu.ctypes.data, m * n * lu.itemsize, ipiv.ctypes.data, k * 8
            for b in range(lu.shape[0]):
                result = _call(self.policy, m * n, m * n * k // 3, fn, _ROW_MAJOR, m, n, lu_at + b * lu_step, n,
                               ipiv_at + b * ipiv_step)
                if result < 0:
                    raise RuntimeError(f"{self.how}: argument {-result} was refused")
                info[b] = result
        batch = a.shape[:-2]
        return lu.reshape(a.shape), ipiv.astype(np.int32).reshape(batch + (k,)), info.reshape(batch)


class TrsmThunk:
    """X with op(A) X = alpha B (side L) or X op(A) = alpha B (side R), from CBLAS's trsm."""

    def __init__(self, instr: Instruction, fn):
        self.policy = PolicyCall()
        self.how = f"BLAS {fn.__name__}"
        self.fn = fn
        opt = trsm_options(instr)
        self.flags = [_CBLAS[key][opt[key]] for key in ("side", "uplo", "trans_x", "diag")]
        self.dtype = instr.shape.dtype
        self.complex = self.dtype.kind == "c"
        scalar = ctypes.c_void_p if self.complex else \
            (ctypes.c_float if self.dtype == np.float32 else ctypes.c_double)
        fn.restype = None
        fn.argtypes = [ctypes.c_int] * 5 + [ctypes.c_int64, ctypes.c_int64, scalar, ctypes.c_void_p,
                                            ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64]
        self.one = np.array(1, self.dtype)
        self.one_arg = self.one.ctypes.data if self.complex else self.one.item()

    def __call__(self, operands):
        a, b = operands[:2]
        m, n = b.shape[-2:]
        k = a.shape[-1]
        if len(operands) > 2:
            alpha = np.array(operands[2], self.dtype).reshape(())
            # (complex alpha goes by pointer: ``alpha`` keeps its memory alive through the calls)
            alpha_arg = alpha.ctypes.data if self.complex else alpha.item()
        else:
            alpha = self.one
            alpha_arg = self.one_arg
        if a.shape[:-2] == b.shape[:-2]:
            batch = a.shape[:-2]
            mats = np.ascontiguousarray(a, self.dtype)
            x = np.array(b, self.dtype, order="C")
        else:
            batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
            mats = np.ascontiguousarray(np.broadcast_to(a, batch + a.shape[-2:]), self.dtype)
            x = np.array(np.broadcast_to(b, batch + (m, n)), self.dtype, order="C")
        if m and n:
            # (addresses by arithmetic: see GetrfThunk)
            fn, flags, item = self.fn, self.flags, x.itemsize
            a_at, x_at = mats.ctypes.data, x.ctypes.data
            for i in range(x.size // (m * n)):
                _call(self.policy, m * n, m * n * k // 2, fn, _ROW_MAJOR, *flags, m, n, alpha_arg,
                      a_at + i * k * k * item, k, x_at + i * m * n * item, n)
        return x.reshape(batch + (m, n))


class FftThunk:
    """``fft``: NumPy's pocketfft over the trailing ``fft_length`` axes (single precision for
    c64 / f32 operands, as XLA's DUCC FFT computes), the result in the instruction's type;
    IFFT and IRFFT normalized by 1/n, as XLA defines them."""
    how = "NumPy's pocketfft (np.fft)"

    def __init__(self, instr: Instruction):
        self.lengths = tuple(instr.attrs["fft_length"])
        self.kind = instr.attrs["fft_type"]
        self.dims, self.dtype = instr.shape.dims, instr.shape.dtype

    def __call__(self, operands):
        (x,) = operands
        if x.size == 0 or 0 in self.dims:
            return np.zeros(self.dims, self.dtype)
        axes = tuple(range(x.ndim - len(self.lengths), x.ndim))
        if self.kind == "FFT":
            y = np.fft.fftn(x, axes=axes)
        elif self.kind == "IFFT":
            y = np.fft.ifftn(x, axes=axes)
        elif self.kind == "RFFT":
            y = np.fft.rfftn(x, s=self.lengths, axes=axes)
        else:
            y = np.fft.irfftn(x, s=self.lengths, axes=axes)
        return np.ascontiguousarray(y, dtype=self.dtype)
