"""f32 arrays rounded to bf16 by a native loop (``codegen/bf16_rounding.py``): the
library calls that compute bf16 operations in f32 (convolutions through BLAS or nbxla's GEMM
kernels, ``cpu_library``) round their results here.  Why: ml_dtypes' ``astype(bfloat16)`` is a
scalar loop, ~0.8 ns an element on the benchmark machine: 1.7 ms of a 2.4 ms bf16 1x1
convolution 16 -> 96 features on 150x150 (MobileNet v2's first expansion).  Rounding is to
nearest even, NaNs to the quiet NaN of their sign: ml_dtypes' (and the evaluator's) answer.
Small arrays keep ``astype`` (a ctypes call costs more than rounding a few thousand values)."""

from __future__ import annotations

import ctypes
import threading

import ml_dtypes
import numpy as np

from ..codegen.bf16_rounding import emit_rounding_kernel
from ..codegen.cpu import compile_helper_kernel

# Elements from which the native loop is used.
NATIVE_MIN_ELEMENTS = 4096
_NAME = "nbxla_round_f32_to_bf16"
_KERNEL = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
_found: list = []
_lock = threading.Lock()


def _kernel():
    with _lock:
        if not _found:
            compiled = compile_helper_kernel(_NAME, emit_rounding_kernel)
            _found.append((_KERNEL(compiled.addresses[_NAME]), compiled))
    return _found[0][0]


def round_to_bf16(values: np.ndarray) -> np.ndarray:
    """``values`` (f32) as a new bf16 array of the same shape."""
    if values.dtype != np.float32 or values.size < NATIVE_MIN_ELEMENTS:
        return values.astype(ml_dtypes.bfloat16)
    src = np.ascontiguousarray(values)
    out = np.empty(values.shape, ml_dtypes.bfloat16)
    _kernel()((ctypes.c_void_p * 2)(src.ctypes.data, out.ctypes.data), 0, src.size)
    return out
