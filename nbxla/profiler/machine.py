"""This machine's limits, measured once: read and copy bandwidth, peak vector flops.

A profile compares every kernel with them (the roofline).  They are measured by a tiny
calibration (about a second) on as many threads as the compiled kernels use, and kept
as JSON in the cache directory (``NBXLA_CACHE_DIR``), keyed by the CPU (name, features,
threads): a restarted kernel reads them back.  With the cache directory off they are
measured once per process.

* read bandwidth: NumPy sums of disjoint chunks of a 128 MiB array, one chunk per thread
  (a sum is one read per element and little arithmetic);
* copy bandwidth: ``np.copyto`` of disjoint chunks of 64 MiB (read + write bytes counted,
  as the fusion report counts a kernel's bytes);
* peak vector flops: 512x512 and 1024x1024 float32 GEMMs through NumPy's BLAS (2 flops per
  multiply-add, as the fusion report counts a dot), the best a vectorized FMA loop reaches.

The best of a few repeats counts: others using the machine only ever slow a run down.  And
since no kernel runs above the machine's limits, a profile that sees a large kernel (beyond
the caches) go faster than them raises them (``raise_limits``): a calibration made while the
machine was busy corrects itself.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace

import numpy as np

from ..codegen.cpu import target_fingerprint
from ..runtime.cpu_kernels import worker_count
from ..runtime.persistent_cache import default_directory

FILE = "machine_limits.json"
FORMAT = 1
REPEATS = 5


@dataclass(frozen=True)
class MachineLimits:
    read_gbs: float           # GB/s reading (1 GB = 1e9 bytes)
    copy_gbs: float           # GB/s read + written by a copy
    peak_gflops: float        # GFLOP/s of a float32 GEMM
    threads: int              # threads the calibration (and the kernels) ran on
    fingerprint: str = ""

    @property
    def ridge(self) -> float:
        """Flops per byte where the roofs meet: below it a kernel is bound by memory."""
        return self.peak_gflops / self.read_gbs

    def bandwidth_for(self, bytes_read: float, bytes_written: float) -> float:
        """The roof for a kernel's mix of traffic: a copy's bandwidth where it writes, the
        read bandwidth for what it only reads (a reduction)."""
        total = bytes_read + bytes_written
        if total <= 0:
            return self.read_gbs
        share = min(1.0, 2 * bytes_written / total)     # a copy reads and writes equal bytes
        return share * self.copy_gbs + (1 - share) * self.read_gbs


_measured: MachineLimits | None = None


def _best(fn, repeats: int = REPEATS) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _chunks(arr: np.ndarray, parts: int) -> list[np.ndarray]:
    return [c for c in np.array_split(arr, parts) if c.size]


def measure(read_mib: int = 128, copy_mib: int = 64, gemm: int = 1024) -> MachineLimits:
    """Measure the limits now (see the module docstring)."""
    threads = worker_count()
    src = np.ones((read_mib << 20) // 4, np.float32)
    with ThreadPoolExecutor(threads) as pool:
        parts = _chunks(src, threads)
        read_s = _best(lambda: list(pool.map(np.add.reduce, parts)))
        half = src[:(copy_mib << 20) // 4]
        dst = np.empty_like(half)
        pairs = list(zip(_chunks(dst, threads), _chunks(half, threads)))
        np.copyto(dst, half)                            # (touch the pages once)
        copy_s = _best(lambda: list(pool.map(lambda p: np.copyto(*p), pairs)))
    del src, dst
    peak = 0.0
    for n in (gemm // 2, gemm):                         # (the smaller one dodges a busy moment)
        a = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
        a @ a                                           # (BLAS's threads start)
        peak = max(peak, 2 * n ** 3 / _best(lambda: a @ a) / 1e9)
    return MachineLimits(read_gbs=read_mib * (1 << 20) / read_s / 1e9,
                         copy_gbs=2 * copy_mib * (1 << 20) / copy_s / 1e9,
                         peak_gflops=peak, threads=threads, fingerprint=_fingerprint())


def _fingerprint() -> str:
    return f"{target_fingerprint()}|threads={worker_count()}|numpy={np.__version__}"


def _path() -> str | None:
    directory = default_directory()
    return os.path.join(directory, FILE) if directory else None


def machine_limits(refresh: bool = False) -> MachineLimits:
    """The limits: from memory, else from the cache directory, else measured (and kept)."""
    global _measured
    if _measured is not None and not refresh:
        return _measured
    path, fingerprint = _path(), _fingerprint()
    if path and not refresh:
        try:
            with open(path) as f:
                data = json.load(f)
            if data.get("format") == FORMAT and data.get("fingerprint") == fingerprint:
                data.pop("format")
                _measured = MachineLimits(**data)
                return _measured
        except (OSError, ValueError, TypeError):
            pass                                        # missing or stale: measure again
    _measured = measure()
    if path:
        _save(path, dict(asdict(_measured), format=FORMAT))
    return _measured


def _save(path: str, data: dict) -> None:
    directory = os.path.dirname(path)
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory)
        with os.fdopen(fd, "w") as f:
            json.dump(data, f)
        os.replace(tmp, path)
    except OSError:
        pass                                            # read-only cache: measured per process


def raise_limits(limits: MachineLimits, *, read_gbs: float = 0.0, copy_gbs: float = 0.0,
                 peak_gflops: float = 0.0) -> MachineLimits:
    """The limits raised to what a large kernel was seen to reach (a calibration made while
    others loaded the machine is too low, and no kernel runs above the machine's limit); the
    raised limits are kept like measured ones."""
    global _measured
    raised = replace(limits, read_gbs=max(limits.read_gbs, read_gbs),
                     copy_gbs=max(limits.copy_gbs, copy_gbs),
                     peak_gflops=max(limits.peak_gflops, peak_gflops))
    if raised != limits:
        _measured = raised
        path = _path()
        if path:
            _save(path, dict(asdict(raised), format=FORMAT))
    return raised
