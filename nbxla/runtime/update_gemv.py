"""A matrix kernel and the vector-matrix product of its output in one pass over the matrix:
``M = kernel(...)`` (an elementwise fusion over rows or elements, e.g. ``A + outer(u1, v1) + outer(u2, v2)``)
then ``s = y @ M`` (or ``M.T @ y``), computed block of rows by block of rows, each block's part of ``y @ M``
taken while the block is still in the core's L2.

Why: the two ran as two passes, the kernel writing ``M`` to memory and the GEMV reading it
back.  For npbench's gemver at N=3000 (a 72 MB matrix) that GEMV pass was a third of the
program's traffic (read A and write A', read A' for ``y @ A'``, read A' for ``A' @ x``).  The
blocks are split over the pool's threads as the kernel's own split would be; each block's
product goes into its own row of a partial-sums matrix, summed in block order at the end, so
the result does not depend on which thread took which block.

Found by ``straight_line.py`` (``update_product_steps``); the product is NumPy's BLAS GEMV
on the block (one OpenBLAS thread inside the pool's threads), the kernel the fusion's own.
"""

from __future__ import annotations

import numpy as np

from . import host_memory
from .blas_threads import controls as blas_thread_controls
from .cpu_kernels import DotThunk, KernelThunk, data_pointer, run_split, worker_count
from .donation import uses_arena

# Matrices from this size on (half the L3 of the 2-core VM this was measured on): smaller ones
# stay in the caches between the two passes anyway, and the blocks' calls cost about what the
# pass saves (programs.py's gemver at N=1000, 8 MB, one core: 0.54 ms blocked against 0.53 ms
# in two passes; npbench's gemver at N=3000, 72 MB: 46 against 54 ms).
MIN_MATRIX_BYTES = 16 << 20
# Bytes of one block of rows: half of a core's L2 (1 MiB here), so that the GEMV reads the
# rows the kernel just wrote from L2.
BLOCK_BYTES = 1 << 19


def update_product_steps(ops: list, steps: list, params: list, taken: set) -> dict:
    """{kernel step: (GEMV step, its vector's slot)} for each kernel whose matrix output a later ``vector @
    matrix`` GEMV reads, the vector made before the kernel runs (the GEMV then runs with it,
    at the kernel's place); ``taken``: steps already spoken for (GEMV pairs)."""
    made_at = {k: -1 for k, _ in params}
    for n, (_, _, out, _) in enumerate(steps):
        made_at[out] = n
    found = {}
    for d, (thunk, operands, out, places) in enumerate(steps):
        sides = _vector_and_matrix(ops[d])
        # (the product is made earlier than the plan placed it: into an array of its own, so a
        # donated parameter's array, still read until then, is not for it)
        if d in taken or not isinstance(thunk, DotThunk) or sides is None or thunk.split is not None \
                or (places is not None and not uses_arena(places)):
            continue
        vector, matrix = (operands[k] for k in sides)
        n = made_at.get(matrix, -1)
        if n < 0 or n in taken or n in found or made_at.get(vector, 0) >= n:
            continue
        kernel, instr = steps[n][0], ops[n]
        shape = instr.shape
        if isinstance(kernel, KernelThunk) and not kernel.tuple_result and shape.rank == 2 \
                and _units_per_row(kernel, shape.dims) is not None and shape.byte_size >= MIN_MATRIX_BYTES \
                and shape.element_type == ops[d].shape.element_type and shape.element_type in ("f32", "f64"):
            found[n] = (d, vector)
    return found


def may_pair(matrix, users: list) -> bool:
    """Might the value ``matrix`` (its users ``users``) be a kernel's output that this blocked pass
    takes with a later ``vector @ matrix``?  (Asked before the steps exist: by the GEMM
    epilogue fold, which leaves such an update to the kernel and this pass.)"""
    shape = matrix.shape
    if shape.is_tuple or shape.rank != 2 or shape.element_type not in ("f32", "f64") \
            or shape.byte_size < MIN_MATRIX_BYTES:
        return False
    for user in users:
        sides = _vector_and_matrix(user)
        if sides is not None and user.operands[sides[1]] is matrix:
            return True
    return False


def _vector_and_matrix(dot) -> tuple[int, int] | None:
    """(vector operand, matrix operand) of a dot that is ``vector @ matrix`` -- written so, or
    as ``matrix.T @ vector`` --, else None."""
    if dot.opcode != "dot" or dot.attrs.get("lhs_batch_dims") or dot.attrs.get("rhs_batch_dims") \
            or tuple(dot.attrs.get("lhs_contracting_dims", ())) != (0,) \
            or tuple(dot.attrs.get("rhs_contracting_dims", ())) != (0,):
        return None
    ranks = tuple(o.shape.rank for o in dot.operands)
    return {(1, 2): (0, 1), (2, 1): (1, 0)}.get(ranks)


def _units_per_row(kernel: KernelThunk, dims: tuple) -> int | None:
    """How many of the kernel's range units make one row of its ``rows x cols`` output (a
    "rows" kernel runs over rows, a "linear" one over elements), or None for other kernels."""
    rows, cols = dims
    if kernel.style == "rows" and kernel.extent == rows:
        return 1
    if kernel.style == "linear" and kernel.extent == rows * cols:
        return cols
    return None


def blocked_update_product(kernel: KernelThunk):
    """``run(operands, matrix, vector, product)``: the kernel over ``operands`` into ``matrix``
    (rows x cols, C-contiguous) and ``product[:] = vector @ matrix``, block by block."""
    rows, cols = kernel.outputs[0][0]
    unit = _units_per_row(kernel, (rows, cols))
    itemsize = np.dtype(kernel.outputs[0][1]).itemsize
    block = max(1, min(rows, BLOCK_BYTES // max(1, cols * itemsize)))
    blocks = -(-rows // block)
    bounds = [min(rows, c * block) for c in range(blocks + 1)]
    split = kernel.parallel and worker_count() > 1 and blocks > 1
    make_partial = host_memory.allocator((blocks, cols), kernel.outputs[0][1])
    blas = blas_thread_controls()

    def run(operands, matrix, vector, product):
        ptrs = kernel.pointer_array(*[data_pointer(a) for a in operands], data_pointer(matrix),
                                    *[data_pointer(a) for a in kernel.sizes])
        partial = make_partial()

        def blocks_of(_, first, last):
            for c in range(first, last):
                lo, hi = bounds[c], bounds[c + 1]
                kernel.fn(ptrs, lo * unit, hi * unit)
                np.matmul(vector[lo:hi], matrix[lo:hi], out=partial[c])
        if not split:
            blocks_of(None, 0, blocks)
        else:
            saved = blas[0]() if blas is not None else 1
            if saved > 1:
                blas[1](1)          # (one OpenBLAS thread per block: the blocks are the threads' work)
            try:
                run_split(blocks_of, None, blocks)
            finally:
                if saved > 1:
                    blas[1](saved)
        np.add.reduce(partial, axis=0, out=product)
        return matrix
    return run
