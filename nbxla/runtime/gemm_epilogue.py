"""The CPU backend's GEMM epilogues: a dot that BLAS runs, whose only user is a loop fusion
computing ``alpha * (A @ B) + beta * C`` (``C`` an array of the result's shape, ``alpha`` and
``beta`` scalars: constants, 0-d parameters or products and sums of them; ``A @ B + C`` and
``alpha * (A @ B)`` alike), runs as ONE BLAS call, ``?gemm`` with that alpha and beta,
accumulating into the fusion's output after ``C`` is put there.

Why: NumPy's ``C[:] = alpha * A @ B + beta * C`` (npbench's gemm, k2mm) writes the product
to a temporary and makes three or four passes over ``C``; nbxla made one GEMM and one fused
pass (read the product and ``C``, write ``C``).  BLAS applies alpha as it stores and scales
``C`` by beta in one pass of its own, so the product's temporary and the fused pass go: when
the output is the caller's ``C`` (``C[:] = ...``, donated: ``donation.py``) or takes the
place of a ``C`` that dies there, ``C`` is updated in place; otherwise ``C`` is copied into
the output first, scaled by beta as it is copied, and the ?gemm adds with beta = 1 (one pass
over C in all, as in place).

Folded where the dot would be a BLAS GEMM (``DotThunk``: real or complex, one product,
``m > 1`` and ``n > 1``, not the native GEMM kernel's; not a large update that a later
``vector @ matrix`` reads, which ``update_gemv`` blocks with its kernel: measured on the shared
2-core VM, load 14, 3000x3000 ``A += U @ V`` then ``y @ A``: k=1 27 ms CPU folded against 24
blocked, k=3 20 against 29, no clear winner), with the result's own shape for
``C`` (a broadcast bias row is not folded: the copy-broadcast plus an accumulating GEMM moves
as much memory as the product's temporary and the fused pass).  The fold itself is
``fusion_fold``'s; an output that may overlap the product's operands when the call runs
(a view of the caller's ``C`` among them) is computed apart and copied in.  alpha or beta
zero at run time takes NumPy's arithmetic (BLAS would skip ``0 * NaN``).
"""

from __future__ import annotations

import ctypes
import math
from typing import NamedTuple

import numpy as np

from ..hlo import Module
from ..hlo.evaluator_linalg import matmul_layout
from ..hlo.ir import Computation, Instruction
from .conv_gemm import cblas_gemms, cblas_operand, ROW_MAJOR
from .blas_threads import openblas_libraries
from .cpu_kernels import DotThunk, run_split
from .fusion_fold import fold_producer, operands_survive, sole_loop_fusion_user, users_by_operand
from .native_dots import native_dot_refusal
from .thin_gemm import thin_gemm_refusal
from .update_gemv import may_pair

# A coefficient: a sum of terms, each a constant times the 0-d fusion parameters it names.
Coefficient = list[tuple[complex | float, tuple[int, ...]]]


class AffineGemm(NamedTuple):
    dot: Instruction                # the dot inside the fused computation
    alpha: Coefficient
    added: int | None               # the fused parameter number of C (None: no C)
    beta: Coefficient


def fold_gemm_epilogues(module: Module, plan=None) -> dict[str, bool]:
    """Fold every dot of the entry that BLAS would run into a consuming fusion of the form
    ``alpha * dot + beta * C``, in place.  Returns, for each fusion that took one, whether its
    output must have memory of its own (``fusion_fold.operands_survive``)."""
    folded = {}
    comp = module.entry
    users = users_by_operand(comp)
    for dot in [i for i in comp.instructions if i.opcode == "dot"]:
        if gemm_refusal(dot) is not None:
            continue
        fusion = sole_loop_fusion_user(comp, dot, users)
        if fusion is None or fusion.shape.is_tuple or fusion.shape.dims != dot.shape.dims \
                or fusion.shape.dtype != dot.shape.dtype:
            continue
        if may_pair(fusion, users.get(id(fusion), [])):
            continue        # (a large update a GEMV then reads: the kernel and GEMV share one pass)
        survive = operands_survive(plan, dot, fusion)
        if survive is not None and fold_producer(comp, dot, fusion, lambda c, d: affine_gemm(c) is not None):
            folded[fusion.name] = survive == "own output"
    return folded


# Multiply-adds from which the fold pays: below, its fixed cost per call (the coefficients read,
# the overlap checks, C copied into place: ~10 us) outweighs the pass over C it saves
# (programs.py gemm small, 100x110x120: 0.85x NumPy folded, 1.06x as GEMM + fused kernel).
FOLD_MIN_PRODUCT = 1 << 24


def gemm_refusal(dot: Instruction) -> str | None:
    """Why ``dot`` would not run as one plain BLAS ``?gemm`` (None: it would)."""
    shapes = [o.shape for o in dot.operands] + [dot.shape]
    if not DotThunk.applies(dot) or any(not isinstance(d, int) for s in shapes for d in s.dims):
        return "not a BLAS element type, or unknown dimensions"
    _, _, (batch, m, k, n) = matmul_layout(dot, shapes[0].dims, shapes[1].dims)
    if batch != 1 or m < 2 or n < 2 or k < 1:
        return "a batch of products, a matrix-vector product or an empty one"
    if m * k * n < FOLD_MIN_PRODUCT:
        return "a small product: the fold's fixed cost outweighs the pass it saves"
    if dot.shape.element_type in ("f32", "f64") and native_dot_refusal(dot) is None:
        return "nbxla's own GEMM kernel runs it"
    if thin_gemm_refusal(dot) is None:
        return "nbxla's thin-GEMM kernel runs it"
    return None


def affine_gemm(comp: Computation) -> AffineGemm | None:
    """``comp`` (a fused computation holding one dot over two parameters) as
    ``alpha * dot + beta * C``, or None when it is not of that form."""
    dots = [i for i in comp.instructions if i.opcode == "dot"]
    if comp.root.shape.is_tuple or len(dots) != 1 or gemm_refusal(dots[0]) is not None or \
            any(o.opcode != "parameter" for o in dots[0].operands):
        return None
    dot = dots[0]
    terms = _linear(comp.root, dot, {})
    if terms is None or dot.name not in terms or len(terms) > 2:
        return None
    added = next((p for p in terms if p != dot.name), None)
    return AffineGemm(dot, terms[dot.name], added, terms.get(added, []))


def _linear(node: Instruction, dot: Instruction, memo: dict) -> dict | None:
    """``node`` as {dot name or full-shape parameter number: its coefficient}, or None."""
    if id(node) in memo:
        return memo[id(node)]
    found = None
    if node is dot:
        found = {dot.name: [(1.0, ())]}
    elif node.shape.dims != dot.shape.dims or node.shape.dtype != dot.shape.dtype:
        found = None
    elif node.opcode == "parameter":
        found = {node.parameter_number: [(1.0, ())]}
    elif node.opcode in ("add", "subtract"):
        x, y = (_linear(o, dot, memo) for o in node.operands)
        if x is not None and y is not None:
            sign = -1.0 if node.opcode == "subtract" else 1.0
            found = dict(x)
            for key, coefficient in y.items():
                found[key] = found.get(key, []) + [(sign * c, ps) for c, ps in coefficient]
    elif node.opcode == "negate":
        x = _linear(node.operands[0], dot, memo)
        found = None if x is None else {key: [(-c, ps) for c, ps in v] for key, v in x.items()}
    elif node.opcode == "multiply":
        for vector, scalar in (node.operands, node.operands[::-1]):
            factor = _scalar(scalar)
            x = _linear(vector, dot, memo) if factor is not None else None
            if x is not None:
                found = {key: [(c * f, ps + qs) for c, ps in v for f, qs in factor] for key, v in x.items()}
                break
    memo[id(node)] = found
    return found


def _scalar(node: Instruction) -> Coefficient | None:
    """``node`` (one value everywhere: a 0-d constant or parameter, broadcast) as a coefficient."""
    while node.opcode == "broadcast" and node.operands[0].shape.rank == 0:
        node = node.operands[0]
    if node.shape.rank != 0:
        return None
    if node.opcode == "constant":
        value = np.asarray(node.literal)[()]
        return [(complex(value) if np.iscomplexobj(value) else float(value), ())]
    if node.opcode == "parameter":
        return [(1.0, (node.parameter_number,))]
    if node.opcode == "multiply":
        x, y = (_scalar(o) for o in node.operands)
        if x is not None and y is not None:
            return [(c * d, ps + qs) for c, ps in x for d, qs in y]
    if node.opcode == "negate":
        x = _scalar(node.operands[0])
        return None if x is None else [(-c, ps) for c, ps in x]
    return None


def runs_as_gemm(fusion: Instruction) -> bool:
    """Is ``fusion`` a GEMM folded with its scale-and-add (run by ``AccumulatingGemm``)?"""
    comp = fusion.attrs.get("calls")
    return fusion.opcode == "fusion" and comp is not None and any(i.opcode == "dot" for i in comp.instructions) \
        and affine_gemm(comp) is not None


def _value(coefficient: Coefficient, operands, dtype):
    total = sum(c * math.prod(operands[p][()] for p in ps) for c, ps in coefficient)
    return dtype.type(total)


class _ComplexGemms:
    """{np.complex64: cgemm, np.complex128: zgemm} from NumPy's OpenBLAS (alpha and beta by
    pointer), found once."""
    found: dict | None = None

    @classmethod
    def get(cls, dtype):
        if cls.found is None:
            cls.found = {}
            for lib in openblas_libraries():
                for prefix, suffix, integer in (("scipy_cblas_", "64_", ctypes.c_int64), ("cblas_", "64_", ctypes.c_int64),
                                                ("scipy_cblas_", "", ctypes.c_int), ("cblas_", "", ctypes.c_int)):
                    for letter, t in (("c", np.complex64), ("z", np.complex128)):
                        fn = getattr(lib, f"{prefix}{letter}gemm{suffix}", None)
                        if fn is None or t in cls.found:
                            continue
                        fn.restype = None
                        fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, integer, integer, integer,
                                       ctypes.c_void_p, ctypes.c_void_p, integer, ctypes.c_void_p, integer,
                                       ctypes.c_void_p, ctypes.c_void_p, integer]
                        cls.found[t] = fn
                if cls.found:
                    break
        return cls.found.get(dtype.type)


class AccumulatingGemm(DotThunk):
    """A fusion ``alpha * (A @ B) + beta * C`` holding its dot (``gemm_epilogue``): ``C`` put
    into the output (nothing to do when the output is ``C``'s memory), then one ``?gemm``
    with alpha and beta into it.  Operands: the fusion's (its parameters' order)."""

    def __init__(self, fusion: Instruction):
        form = affine_gemm(fusion.attrs["calls"])
        super().__init__(form.dot)
        self.form, self.dtype = form, fusion.shape.dtype
        self.lhs_at, self.rhs_at = (o.parameter_number for o in form.dot.operands)
        self.plain = False              # (never the straight-line runner's bare np.matmul)
        self.how = ("GEMM with alpha and beta: C scaled and the product added by one ?gemm"
                    if form.added is not None else "GEMM with alpha: the product scaled by ?gemm") + \
            " (no product temporary, no fused pass)"
        real = self.dtype.kind == "f"
        self.fn = cblas_gemms().get(self.dtype.type) if real else _ComplexGemms.get(self.dtype)
        self.real = real

    def _product(self, operands, outs, split):
        out = outs[0] if outs else self.make()
        form, dtype = self.form, self.dtype
        lhs, rhs = operands[self.lhs_at], operands[self.rhs_at]
        added = operands[form.added] if form.added is not None else None
        alpha = _value(form.alpha, operands, dtype)
        beta = _value(form.beta, operands, dtype) if added is not None else dtype.type(0)
        if self.lhs_perm is not None:
            lhs = np.transpose(lhs, self.lhs_perm)
        if self.rhs_perm is not None:
            rhs = np.transpose(rhs, self.rhs_perm)
        ls, rs, os_ = self.shapes
        lhs, rhs = lhs.reshape(ls), rhs.reshape(rs)
        if self.fn is None or alpha == 0 or (added is not None and beta == 0) or \
                not (np.isfinite(alpha) and np.isfinite(beta)) or \
                np.may_share_memory(out, lhs) or np.may_share_memory(out, rhs):
            # (NumPy's arithmetic: BLAS skips the product or C at a zero coefficient, and
            # an output over an operand would be read after it was written)
            result = alpha * np.matmul(lhs, rhs).reshape(out.shape)
            if added is not None:
                result += beta * added
            np.copyto(out, result)
            return out
        if added is not None and added.__array_interface__["data"][0] != out.__array_interface__["data"][0]:
            # C put into the output already scaled by beta, in the one pass the copy makes:
            # BLAS then adds with beta = 1, which skips its own pass over C (the same values:
            # beta * C rounded once either way).  gemm 500x550x600 (programs.py medium), one
            # thread: 6.33-6.39 ms copy + ?gemm with beta, 6.23-6.31 this way.
            if beta == 1:
                np.copyto(out, added)
            else:
                np.multiply(added, beta, out=out)
                beta = dtype.type(1)
        self._gemm(lhs, rhs, out.reshape(os_), alpha, beta, split)
        return out

    def _gemm(self, lhs, rhs, out, alpha, beta, split) -> None:
        """One ``?gemm``, or one per block of rows or columns over the pool (``DotThunk.call_plan``)."""
        if split is None:
            self._call(lhs, rhs, out, alpha, beta)
            return
        axis, extent, blocks = split
        if axis == "rows":
            def part(begin, end):
                self._call(lhs[begin:end], rhs, out[begin:end], alpha, beta)
        else:
            def part(begin, end):
                self._call(lhs, rhs[:, begin:end], out[:, begin:end], alpha, beta)
        run_split(lambda _, b, e: part(extent * b // blocks, extent * e // blocks), None, blocks)

    def _call(self, a, b, c, alpha, beta) -> None:
        m, k = a.shape
        n = b.shape[1]
        ta, lda, a = cblas_operand(a)
        tb, ldb, b = cblas_operand(b)
        ldc = max(c.strides[0] // c.itemsize, n)        # (a block of columns: the full row's)
        if self.real:
            self.fn(ROW_MAJOR, ta, tb, m, n, k, float(alpha), a.ctypes.data, lda, b.ctypes.data, ldb,
                    float(beta), c.ctypes.data, ldc)
            return
        scalars = np.array([alpha, beta], self.dtype)
        step = self.dtype.itemsize
        self.fn(ROW_MAJOR, ta, tb, m, n, k, scalars.ctypes.data, a.ctypes.data, lda, b.ctypes.data, ldb,
                scalars.ctypes.data + step, c.ctypes.data, ldc)
