"""Two matrix-vector products of one matrix in one pass over it: ``s = r @ A`` and
``q = A @ p`` (the BiCG step; any pair of GEMVs that read the same matrix from both sides).

Why: two BLAS GEMVs read ``A`` twice, and at the sizes where a program is a few BLAS calls
the matrix sits in L2 and reading it is the whole cost: measured on a 210x190 f64 matrix,
the pair of NumPy products took 11.7 us, this kernel 6.6 us.  Eight rows at a time: each
``A[i, j]`` loaded once feeds both products, ``s[j]`` and ``p[j]`` are loaded once per eight
rows (the IR: ``codegen/gemv_pairs.py``).  Compiled once per element type and process.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Callable

import numpy as np

from ..codegen.gemv_pairs import LLVM_TYPES, module_ir
from .cpu_kernels import ARRAY_DATA_OFFSET, run_split, worker_count
from .fastcall import object_caller

_compiled: dict[tuple, tuple] = {}  # (element type, kind) -> (engine, ctypes entry); the engine keeps the code
_lock = threading.Lock()


def available(element_type: str) -> bool:
    """Can the kernel be made for this element type (f32, f64, on a Python whose array
    objects have NumPy's known layout)?"""
    return element_type in LLVM_TYPES and ARRAY_DATA_OFFSET is not None


def dual_gemv(element_type: str) -> Callable:
    """``fn(A, p, r, s, q, rows, cols)`` on C-contiguous arrays (``A`` of ``rows x cols``,
    ``s`` and ``q`` written), for an element type ``available`` accepts."""
    return _entries(element_type, "dual")[1]


def chained_gemv(element_type: str) -> Callable:
    """``fn(A, p, s, q, rows, cols)``: ``q = A @ p`` and then ``s = q @ A`` (ATAx), each row
    block's part of ``s`` added while the block is still in L1 (one pass over ``A`` from
    memory or L2), for an element type ``available`` accepts."""
    return _entries(element_type, "chained")[1]


def pair_caller(element_type: str, chained: bool, release: bool = False) -> Callable | None:
    """The kernel of ``dual_gemv`` (``chained``: of ``chained_gemv``) as a built-in function
    (runtime/fastcall.py) taking the same arrays and then an int64 array ``[rows, cols]``
    instead of the two ints: ``fn(A, p, r, s, q, dims)`` / ``fn(A, p, s, q, dims)``.  None where
    fast calls are not available.  Why: the ctypes call of the pair cost ~0.85 us, a tenth of
    a 190x210 ATAx call; the built-in one ~0.1 us.  Every argument must be an exact ndarray
    (else TypeError); shapes, dtypes and contiguity are the caller's to guarantee, as for
    ctypes.  ``release``: the GIL is released while it runs (large matrices)."""
    kind = "chained" if chained else "dual"
    engine = _entries(element_type, kind)[0]
    name = f"nbxla_{kind}_gemv_objects"
    return object_caller(engine.get_function_address(name), 0, 5 if chained else 6, release=release)


def _entries(element_type: str, kind: str) -> tuple:
    """(engine, ctypes entry) of the ``kind`` kernel for ``element_type``, compiled on first use
    (each kind apart: a program uses one, see ``gemv_pairs.module_ir``)."""
    with _lock:
        if (element_type, kind) not in _compiled:
            _compiled[element_type, kind] = _compile(LLVM_TYPES[element_type], kind)
    return _compiled[element_type, kind]


def _compile(t: str, kind: str):
    import llvmlite.binding as llvm
    from ..codegen.cpu import jit_engine
    mod = llvm.parse_assembly(module_ir(t, ARRAY_DATA_OFFSET, kind))
    mod.triple = llvm.get_process_triple()
    engine = jit_engine(mod)
    arrays = 5 if kind == "dual" else 4
    entry = ctypes.CFUNCTYPE(None, *[ctypes.py_object] * arrays, ctypes.c_int64, ctypes.c_int64)
    return engine, entry(engine.get_function_address(f"nbxla_{kind}_gemv"))


# Row blocks per thread of a split pair: each block writes its own partial ``s``, summed after.
BLOCKS_PER_THREAD = 4


def split_pair(kernel: Callable, chained: bool, A, p, r, s, q, rows: int, cols: int) -> None:
    """The pair of ``dual_gemv`` (``chained``: of ``chained_gemv``, ``r`` unused) over row blocks
    on the pool's threads: every block writes its rows of ``q`` and its own partial of ``s``,
    the partials are summed into ``s`` at the end (one more pass over ``blocks x cols`` values,
    small against the matrix).  For matrices large enough that one thread is the limit: the
    two GEMVs of NumPy each run on all cores."""
    blocks = max(1, min(rows, worker_count() * BLOCKS_PER_THREAD))
    bounds = [rows * i // blocks for i in range(blocks + 1)]
    partial = np.empty((blocks, cols), dtype=s.dtype)

    def run(_, first, last):
        for c in range(first, last):
            lo, hi = bounds[c], bounds[c + 1]
            if chained:
                kernel(A[lo:hi], p, partial[c], q[lo:hi], hi - lo, cols)
            else:
                kernel(A[lo:hi], p, r[lo:hi], partial[c], q[lo:hi], hi - lo, cols)
    run_split(run, None, blocks)
    np.add.reduce(partial, axis=0, out=s)
