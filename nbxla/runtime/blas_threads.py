"""NumPy's OpenBLAS, found in the process: its ``cblas_?gemm`` for the native loops'
run-time-sized dots (``gemm_addresses``) and linear solves (``gesv_addresses``), and its
thread count, as follows.

The thread count of each call (``threads_for_call``; ``NBXLA_BLAS_ONE_THREAD`` overrides):
* products under ``TWO_THREADS_PAY`` multiply-adds run on one OpenBLAS thread: two threads
  gain nothing there even on idle cores (measured below), and stall on busy ones;
* larger ones get as many threads as other processes leave cores free
  (``machine_load.free_cores``, sampled at most every 0.1 s): on idle cores that is
  OpenBLAS's own count, so dots thread exactly as NumPy's do (one thread lost 0.43x on gemm,
  0.66x on atax, ``benchmarks/programs.py`` medium, quiet); on busy cores one thread.
``NBXLA_BLAS_ONE_THREAD=1``: always one OpenBLAS thread (large products split over the pool);
``=0``: always OpenBLAS's own count (NumPy's behaviour, whatever the load).
Why: on cores shared with other work OpenBLAS's threads stall, as follows.

OpenBLAS splits a GEMM across its threads once ``m*n*k`` passes a fixed threshold (about a
quarter million multiply-adds; GEMV far sooner), and a call waits for all of them.  When the
cores are busy (other processes, other notebooks) a thread waits for the scheduler: measured
here with the two cores shared, a 500x600x550 GEMM took 23 ms threaded and 4.7 ms on one
thread, a 1800x2200 GEMV 7.6 ms against 1.4 ms, and calls came in multiples of the 4 ms
scheduler tick (JAX, on its own pool: 5.4 and 2.6 ms); ``transformer_block_f32_s64_d128``
(``benchmarks/hlo_text_vs_xla.py``) took 240 ms at load 8.6 against XLA's 1.1 ms.  So such
calls run with OpenBLAS on one thread (``controls``).  With ``NBXLA_BLAS_ONE_THREAD=1``, and
for batches of products, large products (``SPLIT_PRODUCT``) are split into row, column or
batch blocks over nbxla's pool (``cpu_kernels.run_split``), whose chunks never wait for a
thread that has not started: on idle cores the blocks run in parallel, on busy ones the
caller does most of them.
The thread count found is restored after each call (the user's threadpoolctl settings stay).
Two kinds of product, where OpenBLAS's threads meet often for little work, run on one thread
whenever the cores are busy (split over the pool when large, ``SPLIT_PRODUCT``) and on
OpenBLAS's threads when the cores are idle (thin GEMMs judged by their whole work, a batch's
products one by one): batches of threaded-size products (attention's heads: 8 of 128x64 @
64x128 f32 133 us threaded on idle cores, 181 us on one thread; ``hlo_text_vs_xla``'s
attention_bf16 0.89x XLA, quiet, with one thread always), and thin GEMMs, a small output over
a deep contraction (``cpu_kernels.THIN_OUTPUT``; an MLP's 8 rows against a 30000x2000 weight
spent 8x the CPU time of one thread, threaded, on the shared cores).  Except batches of
``SPLIT_PRODUCT`` and more: split over the pool, on one thread each, whatever the load.

The OpenBLAS that NumPy loaded is found by its exported ``*openblas_set_num_threads*``
symbol in the libraries mapped into the process (Linux); elsewhere, or with another BLAS,
calls run unchanged.
"""

from __future__ import annotations

import ctypes
import os
from typing import Callable

from . import machine_load

# Multiply-adds above which OpenBLAS threads a GEMM (65536 * GEMM_MULTITHREAD_THRESHOLD, 4 in
# its builds): smaller calls are left alone (no thread count to change, no ctypes calls).
OPENBLAS_THREADED = 65536 * 4
# Multiply-adds from which a product is split over the pool: large enough that one core takes
# several scheduler ticks (a 32M multiply-add GEMM ~2.5 ms), so a block whose thread is
# descheduled for a tick costs less than the split gains.  Smaller ones ran fastest on one
# thread whenever the cores were shared (1800x2200 GEMV: 1.3-2 ms one thread, 3-6 ms split,
# 8-24 ms OpenBLAS-threaded); on idle cores they give up at most the second core.
SPLIT_PRODUCT = 32_000_000


# OpenBLAS threads a GEMV from this many matrix elements (2304 * GEMM_MULTITHREAD_THRESHOLD in
# its interface/gemv.c), far below its GEMM threshold.
OPENBLAS_THREADED_GEMV = 2304 * 4
# Multiply-adds below which two OpenBLAS threads do not pay even on idle cores (quiet 2-core
# VM, min of 5 samples, one thread / two: f32 GEMM 64x64x64 6.4 / 6.4 us, 96^3 16.4 / 16.3,
# 128^3 42.8 / 31.7; f64 96^3 32.1 / 31.9, 128^3 88.9 / 56.9; GEMV 512x512 f32 17.2 / 16.4,
# f64 27.4 / 27.1): those products run on one thread whatever the load, so that a burst of
# load between two samples of it cannot stall them.
TWO_THREADS_PAY = 1_000_000


def policy_mode() -> str:
    """``NBXLA_BLAS_ONE_THREAD``: "1" one OpenBLAS thread always ("one"), "0" OpenBLAS's own
    count always ("openblas"), unset (or anything else) the default policy ("auto")."""
    value = os.environ.get("NBXLA_BLAS_ONE_THREAD", "").strip()
    return "one" if value == "1" else "openblas" if value == "0" else "auto"


def one_thread_enabled() -> bool:
    return policy_mode() == "one"


def threads_for_call(work: int, mode: str) -> int:
    """The OpenBLAS thread count for a call of ``work`` multiply-adds (one the caller knows
    OpenBLAS would thread): 0 keeps OpenBLAS's own count, else at most this many."""
    if mode == "openblas":
        return 0
    if mode == "one" or work < TWO_THREADS_PAY:
        return 1
    return max(1, int(machine_load.free_cores() + 0.5))

# OpenBLAS's LAPACK threads a factorization or solve from this many matrix elements (getrf,
# getrs: ``m * n < 10000`` runs on one thread in its interface/lapack): smaller calls are left
# alone, with no thread-count calls around them.
LAPACK_THREADED_ELEMENTS = 10_000


class PolicyCall:
    """``call(work, fn, *args)``: ``fn(*args)``, a BLAS or LAPACK routine (or NumPy's call of
    one) doing ``work`` multiply-adds, with OpenBLAS's thread count as ``threads_for_call``
    says for it, restored after.  The setting is read when the caller is built."""

    def __init__(self):
        self.mode = policy_mode()
        self.controls = controls() if self.mode != "openblas" else None

    def __call__(self, work: int, fn, *args):
        if self.controls is None:
            return fn(*args)
        want = threads_for_call(work, self.mode)
        get, set_ = self.controls
        threads = get()
        if want >= threads:
            return fn(*args)
        set_(want)
        try:
            return fn(*args)
        finally:
            set_(threads)


_NAMES = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads",
          "openblas_set_num_threads64_", "openblas_set_num_threads")
_controls: list = []          # [(get, set)] once looked up; [None] when there is none


def openblas_libraries() -> list[ctypes.CDLL]:
    """The OpenBLAS libraries mapped into the process (NumPy's), opened; empty elsewhere."""
    try:
        import numpy as np  # noqa: F401  (NumPy's BLAS must be loaded first)
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "openblas" in line.lower() and ".so" in line}
    except OSError:
        return []
    libs = []
    for path in sorted(paths):
        try:
            libs.append(ctypes.CDLL(path))
        except OSError:
            continue
    return libs


def _find() -> tuple[Callable, Callable] | None:
    for lib in openblas_libraries():
        for name in _NAMES:
            setter = getattr(lib, name, None)
            getter = getattr(lib, name.replace("set_num", "get_num"), None)
            if setter is not None and getter is not None:
                setter.argtypes, setter.restype, getter.restype = [ctypes.c_int], None, ctypes.c_int
                return getter, setter
    return None


_gemms: list = []


def gemm_addresses() -> tuple[int, int, int, int] | None:
    """Addresses of ``cblas_dgemm``, ``cblas_sgemm``, ``cblas_dgemv`` and ``cblas_sgemv`` of
    NumPy's OpenBLAS built with 64-bit integers (the ``64_`` symbols: the native loops pass
    int64 sizes), or None."""
    if not _gemms:
        found = None
        for lib in openblas_libraries():
            for prefix in ("scipy_cblas_", "cblas_"):
                fns = [getattr(lib, f"{prefix}{name}64_", None) for name in ("dgemm", "sgemm", "dgemv", "sgemv")]
                if all(f is not None for f in fns):
                    found = tuple(ctypes.cast(f, ctypes.c_void_p).value for f in fns)
                    break
            if found:
                break
        _gemms.append(found)
    return _gemms[0]


_gesvs: list = []


def gesv_addresses() -> tuple[int, int, int, int] | None:
    """Addresses of ``LAPACKE_{s,d,c,z}gesv`` of NumPy's OpenBLAS with 64-bit integers (the
    native loops' linear solves), or None."""
    if not _gesvs:
        found = None
        for lib in openblas_libraries():
            for prefix in ("scipy_LAPACKE_", "LAPACKE_"):
                fns = [getattr(lib, f"{prefix}{t}gesv64_", None) for t in "sdcz"]
                if all(f is not None for f in fns):
                    found = tuple(ctypes.cast(f, ctypes.c_void_p).value for f in fns)
                    break
            if found:
                break
        _gesvs.append(found)
    return _gesvs[0]


def controls() -> tuple[Callable, Callable] | None:
    """(get, set) of OpenBLAS's thread count, or None when NumPy's BLAS is not OpenBLAS."""
    if not _controls:
        _controls.append(_find())
    return _controls[0]
