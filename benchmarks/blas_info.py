"""Which OpenBLAS kernel a benchmark runs, and the environment pins that choose an older one.

This machine's environment may pin OpenBLAS to an older core type (``OPENBLAS_CORETYPE``,
``OPENBLAS_L2_SIZE``): measured here, one thread of an 8000x120 @ 120x120 f64 GEMM took 8.7 ms
with ``OPENBLAS_CORETYPE=Haswell`` and 6.2 ms with the SkylakeX kernel OpenBLAS picks for this
CPU by itself, so a pinned run compares NumPy's and nbxla's BLAS calls with a slower GEMM than
JAX's own.  ``unpin_openblas`` must run before NumPy is imported (OpenBLAS reads the variables
when it loads); ``openblas_kernel`` says which kernel ran.
"""

from __future__ import annotations

import os
from pathlib import Path

PINS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def unpin_openblas() -> dict[str, str]:
    """Remove the pins from the environment; the values that were set."""
    return {k: os.environ.pop(k) for k in PINS if k in os.environ}


def openblas_kernel() -> str:
    """Which OpenBLAS (and core type) NumPy runs: threadpoolctl, else the core name NumPy's
    bundled OpenBLAS reports, else NumPy's build config."""
    import numpy as np
    try:
        from threadpoolctl import threadpool_info
        infos = [i for i in threadpool_info() if i.get("internal_api") == "openblas"]
        if infos:
            i = infos[0]
            return f"OpenBLAS {i.get('version')} core {i.get('architecture')} threads {i.get('num_threads')}"
    except ImportError:
        pass
    try:
        import ctypes
        import glob
        for path in glob.glob(np.__path__[0] + ".libs/*openblas*"):
            lib = ctypes.CDLL(path)
            for symbol in ("scipy_openblas_get_corename64_", "scipy_openblas_get_corename", "openblas_get_corename"):
                if hasattr(lib, symbol):
                    f = getattr(lib, symbol)
                    f.restype = ctypes.c_char_p
                    return f"{Path(path).name}: core {f().decode()}"
    except OSError:
        pass
    try:
        config = np.show_config(mode="dicts")
        blas = config.get("Build Dependencies", {}).get("blas", {})
        return f"{blas.get('name')} {blas.get('version')} (core type unknown: no threadpoolctl)"
    except Exception:       # (older NumPy: no dict mode)
        return "unknown"


def describe(unpinned: dict[str, str]) -> str:
    """One line for a benchmark's header: the kernel, and the pins removed (if any)."""
    pins = f"unset here (were {unpinned})" if unpinned else "not set"
    return f"{openblas_kernel()}; {'/'.join(PINS)}: {pins}"
