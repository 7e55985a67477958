"""Large host buffers, recycled.

Why: glibc hands out blocks above 32 MiB (and often above 128 KiB) with a fresh ``mmap`` and
returns them with ``munmap`` when freed, so every call that writes a large output (or a
large arena) pays a page fault and the kernel's zero-fill for every 4 KiB page before the
first store lands.  Measured here: ``x * 2`` into a fresh 64 MiB output took 18 ms against
3.8 ms into a warm one.  XLA keeps its own allocator for the same reason.

``empty(dims, dtype)`` (or a maker from ``allocator``) returns an ndarray whose memory is owned by a ``PooledBlock``; when the
last array (or view) using the block dies, the block goes back to a free list keyed by size
instead of to the operating system.  Free memory held is bounded (``MAX_FREE_BYTES``) and can
be given back with ``release()``.  Small requests go straight to ``np.empty``.
"""

from __future__ import annotations

import math
import os
from collections import deque
from functools import partial
from typing import Callable

import numpy as np

# From glibc's first mmap threshold up.  Blocks between it and 1 MiB faulted too: once one
# is freed, glibc serves that size from the heap, but freeing a kernel's several outputs at
# the top of the heap passes the trim threshold (twice that size) and the heap shrinks, so
# the next call faulted its pages in again (an isoneutral step's six 340 KiB outputs: 480
# faults, 0.97 ms against 0.41 ms into recycled memory).
MIN_POOLED_BYTES = 128 << 10
ALIGNMENT = 64


def _physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 << 30


# Free blocks kept for reuse, at most: an eighth of the machine's memory, and 2 GiB.
MAX_FREE_BYTES = min(2 << 30, _physical_memory() // 8)
# Free blocks kept per size: a multi-output kernel gives several outputs of one size per call
# (the byte bound above is what limits the memory held).
_BLOCKS_PER_SIZE = 16

# size -> deque of free raw blocks.  deque append/pop and dict.setdefault are atomic under
# the GIL, so a block can come back from a finalizer on any thread without a lock (a lock
# taken in ``__del__`` could deadlock against the thread that triggered the collection).
_free: dict[int, deque] = {}
_free_bytes = [0]          # approximate under threads (the bound is a soft one)


class PooledBlock:
    """Owns one raw block; arrays made by ``empty`` name it as their base.  NumPy collapses
    view chains to the owning object, so the block lives exactly as long as any array that
    uses its memory, and returns to the free list after the last one."""

    __slots__ = ("raw", "size", "__array_interface__")

    def __init__(self, raw: tuple, size: int, dims: tuple, typestr: str):
        # (``raw``: the block and its aligned address, found once when it was allocated:
        # reading an array's address costs 1-2 us, a third of a small program's call)
        self.raw, self.size = raw, size
        self.__array_interface__ = {"shape": dims, "typestr": typestr,
                                    "data": (raw[1], False), "version": 3}

    def __del__(self):
        if _free_bytes[0] + self.size > MAX_FREE_BYTES:
            return                                          # freed normally
        blocks = _free.setdefault(self.size, deque())
        if len(blocks) < _BLOCKS_PER_SIZE:
            blocks.append(self.raw)
            _free_bytes[0] += self.size


def allocator(dims, dtype) -> Callable[[], np.ndarray]:
    """A maker of uninitialized C-contiguous arrays of one shape, for thunks that allocate
    the same outputs on every call: plain ``np.empty`` for small ones (dispatch overhead
    matters there), the pool for large ones."""
    dims, dtype = _shape(dims), np.dtype(dtype)
    nbytes = math.prod(dims) * dtype.itemsize
    if nbytes < MIN_POOLED_BYTES:
        return partial(np.empty, dims, dtype)
    return partial(_pooled, dims, dtype, _typestr(dtype), -(-nbytes // 4096) * 4096)


def _shape(dims) -> tuple:
    return (int(dims),) if isinstance(dims, (int, np.integer)) else tuple(dims)


def empty(dims, dtype) -> np.ndarray:
    """An uninitialized C-contiguous array, 64-byte aligned when pooled."""
    dims, dtype = _shape(dims), np.dtype(dtype)
    nbytes = math.prod(dims) * dtype.itemsize
    if nbytes < MIN_POOLED_BYTES:
        return np.empty(dims, dtype)
    return _pooled(dims, dtype, _typestr(dtype), -(-nbytes // 4096) * 4096)   # (pages: near sizes share a list)


def _typestr(dtype: np.dtype) -> str:
    """The array interface's name for ``dtype``: its own where NumPy reads it back as the same
    type, raw bytes of its size otherwise (ml_dtypes' f8 types call themselves '<f1', which
    NumPy cannot read; bf16 '<V2'), viewed as ``dtype`` once made."""
    try:
        if np.dtype(dtype.str) == dtype:
            return dtype.str
    except TypeError:
        pass
    return f"|V{dtype.itemsize}"


def _pooled(dims: tuple, dtype: np.dtype, typestr: str, size: int) -> np.ndarray:
    raw = None
    blocks = _free.get(size)
    if blocks:
        try:
            raw = blocks.pop()
            _free_bytes[0] -= size
        except IndexError:                             # another thread took the last one
            raw = None
    if raw is None:
        block = np.empty(size + ALIGNMENT, np.uint8)
        address = block.ctypes.data
        raw = (block, address + -address % ALIGNMENT)
    arr = np.asarray(PooledBlock(raw, size, dims, typestr))
    return arr if arr.dtype == dtype else arr.view(dtype)


def memory_owner(arr: np.ndarray):
    """The object that owns ``arr``'s memory: the array at the end of its chain of views, or
    the non-array object (a ``PooledBlock``, an mmap, bytes) that array was made from."""
    while isinstance(arr.base, np.ndarray):
        arr = arr.base
    return arr if arr.base is None else arr.base


def free_bytes() -> int:
    """Memory held in free blocks (not in use by any array)."""
    return sum(size * len(blocks) for size, blocks in list(_free.items()))


def release() -> int:
    """Give every free block back to the system; returns the bytes released."""
    released = 0
    for size, blocks in list(_free.items()):
        while blocks:
            try:
                blocks.pop()
            except IndexError:
                break
            released += size
            _free_bytes[0] -= size
    return released
