"""Small BLAS calls on one thread.

OpenBLAS splits a GEMM across its threads once ``m*n*k`` passes a fixed threshold (about a
quarter million multiply-adds), and its threads spin waiting for each other.  For products of
a few million multiply-adds the second thread gains little on a quiet machine (100x120x110:
45 us on two threads, 50 us on one, measured here) and costs dearly on a busy one: with the two
cores shared, the same product took 390 us threaded and 81 us on one thread, and 22 ms in the
worst runs (the thread waited for a core).  XLA's CPU backend likewise runs small dots on the
calling thread.  ``single_threaded(call)`` runs ``call()`` with OpenBLAS limited to one thread,
and restores the count it found (the user's threadpoolctl settings stay in force).

The OpenBLAS that NumPy loaded is found by its exported ``*openblas_set_num_threads*``
symbol in the libraries mapped into the process (Linux); elsewhere, or with another BLAS,
calls run unchanged.
"""

from __future__ import annotations

import ctypes
from typing import Callable

# Multiply-adds per GEMM at or below which a call runs on one thread, and above which OpenBLAS
# threads a GEMM (65536 * GEMM_MULTITHREAD_THRESHOLD, 4 in its builds): only calls between the
# two are changed.
SMALL_PRODUCT = 2_000_000
OPENBLAS_THREADED = 65536 * 4

_NAMES = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads",
          "openblas_set_num_threads64_", "openblas_set_num_threads")
_controls: list = []          # [(get, set)] once looked up; [None] when there is none


def _find() -> tuple[Callable, Callable] | None:
    try:
        import numpy as np  # noqa: F401  (NumPy's BLAS must be loaded first)
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "openblas" in line.lower() and ".so" in line}
    except OSError:
        return None
    for path in sorted(paths):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for name in _NAMES:
            setter = getattr(lib, name, None)
            getter = getattr(lib, name.replace("set_num", "get_num"), None)
            if setter is not None and getter is not None:
                setter.argtypes, setter.restype, getter.restype = [ctypes.c_int], None, ctypes.c_int
                return getter, setter
    return None


def controls() -> tuple[Callable, Callable] | None:
    """(get, set) of OpenBLAS's thread count, or None when NumPy's BLAS is not OpenBLAS."""
    if not _controls:
        _controls.append(_find())
    return _controls[0]


def single_threaded(call: Callable):
    """``call()`` with OpenBLAS on one thread (as is, without OpenBLAS)."""
    found = controls()
    if found is None:
        return call()
    get, set_ = found
    threads = get()
    if threads <= 1:
        return call()
    set_(1)
    try:
        return call()
    finally:
        set_(threads)
