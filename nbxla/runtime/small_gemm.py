"""Dense 2-D convolutions with few output features as nbxla's own implicit-im2col GEMM kernel
(``codegen/patch_gemm.py``), for the blocked convolutions (``conv_blocks``).

Why not BLAS on gathered patches: OpenBLAS runs products with few columns well below its peak
(its micro-kernel and packing are sized for wide matrices: 1024x144 @ 144x32 ran at ~70
GFMA/s on one core of the benchmark machine, the register-blocked kernel at ~95), and the
gather of the patches itself cost about as much as the product (4x28x28, 32 -> 32 features,
3x3: 224 us gather, 302 us product).  The kernel reads each patch element from the padded
input in place, keeps a block of output positions as vector sums and multiplies with
broadcast fused multiply-adds.

A kernel is compiled once per convolution geometry (20-60 ms of LLVM, when the convolution's
thunk is made), kept for the process and in the persistent cache.
"""

from __future__ import annotations

import ctypes
import hashlib
import re
import threading

import numpy as np

from ..codegen.cpu import compile_helper_kernel, target_fingerprint
from ..codegen.patch_gemm import emit_patch_gemm, PatchGemm
from .cpu_kernels import data_pointer
from .persistent_cache import default_cache

_KERNEL = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
_POINTERS = ctypes.c_void_p * 3
_POINTERS_AND_BIAS = ctypes.c_void_p * 4
_TYPES = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}
_kernels: dict = {}
_lock = threading.Lock()


def element_type(dtype) -> str | None:
    """The kernel's name for ``dtype`` (None: it takes only f32 and f64)."""
    return _TYPES.get(np.dtype(dtype))


class PatchGemmKernel:
    """``out[u - begin] = conv rows u in [begin, end)`` for a padded channels-last input,
    an HWIO kernel reshaped to (KH * KW * C, O), and an output block (rows, OW, O); all
    contiguous."""

    def __init__(self, geometry: PatchGemm):
        with _lock:
            found = _kernels.get(geometry)
            if found is None:
                # (one kernel per helper module: the name need only be a valid symbol, and it is
                # the whole geometry: the key in the persistent cache too)
                name = "nbxla_patch_gemm_" + re.sub(r"\W", "_", "_".join(str(v) for v in _flat(geometry)))
                store = default_cache()
                key = hashlib.sha256(f"{target_fingerprint()},{name}".encode()).hexdigest() if store else None
                compiled = compile_helper_kernel(name, lambda m, n: emit_patch_gemm(m, n, geometry),
                                                 "hand-vectorized", store, key)
                found = _kernels[geometry] = (_KERNEL(compiled.addresses[name]), compiled)
        self.fn, self._compiled = found

    def __call__(self, x: np.ndarray, kernel: np.ndarray, out: np.ndarray, begin: int, end: int,
                 bias: np.ndarray | None = None) -> None:
        """(``bias``: the geometry's bias buffer, when it has one)"""
        # (data_pointer: ~0.1 us a buffer, where ``.ctypes.data`` took ~0.9: a small
        # convolution's call is mostly such overhead)
        pointers = _POINTERS(data_pointer(x), data_pointer(kernel), data_pointer(out)) if bias is None else \
            _POINTERS_AND_BIAS(data_pointer(x), data_pointer(kernel), data_pointer(out), data_pointer(bias))
        self.fn(pointers, begin, end)


def _flat(geometry: PatchGemm):
    for v in vars(geometry).values():
        yield from (v if isinstance(v, tuple) else (v,))
