"""Contractions, norms and solves: tensordot, outer, einsum, cross, linalg.norm, linalg.solve/inv,
linalg.cholesky.

Every contraction becomes one HLO ``dot`` per pair of operands (batch dims + contracting
dims), with ``reduce`` for indices summed within one operand and a final ``transpose`` into
the requested order — the same plan XLA's own einsum lowering uses.
"""

from __future__ import annotations

import string

import numpy as np

from .functions import dot_general, matmul, promote_arrays, transpose_value
from .reductions import normalize_axes, reduce
from .registry import implements
from ..errors import LinAlgCheckError
from ..hlo import Shape, TupleShape, from_numpy_dtype
from ..hlo.evaluator_linalg import SOLVE_TARGET
from .rules import asarray, broadcast_to, convert, emit, find_context, reshape
from .tracer import Tracer


def contract(a: Tracer, b: Tracer, contracting, batch=((), ())) -> Tracer:
    """``dot_general`` in the operands' common dtype; bools contract as logical or-of-ands."""
    a, b = promote_arrays([a, b])
    if a.dtype == np.bool_:
        return np.not_equal(contract(convert(a, np.int64), convert(b, np.int64), contracting, batch), 0)
    return dot_general(a, b, contracting, batch)


@implements(np.dot, method="dot")
def dot(a, b, out=None):
    ctx = find_context([a, b])
    a, b = asarray(ctx, a), asarray(ctx, b)
    if a.ndim == 0 or b.ndim == 0:
        result = np.multiply(a, b)
    elif b.ndim <= 2:
        # (np.dot on ml_dtypes arrays rounds the f32 sum of np.matmul to their type once)
        result = convert(matmul(a, b), np.result_type(a.dtype, b.dtype))
    else:   # dot(a, b)[i,j,k,m] = sum(a[i,j,:] * b[k,:,m])
        result = contract(a, b, ((a.ndim - 1,), (b.ndim - 2,)))
    if out is not None:
        out.assign(result)
        return out
    return result


@implements(np.vdot)
def vdot(a, b):
    ctx = find_context([a, b])
    a, b = asarray(ctx, a), asarray(ctx, b)
    a = reshape(a, (a.size,))
    return dot(np.conjugate(a) if a.dtype.kind == "c" else a, reshape(b, (b.size,)))


@implements(np.inner)
def inner(a, b):
    ctx = find_context([a, b])
    a, b = asarray(ctx, a), asarray(ctx, b)
    if a.ndim == 0 or b.ndim == 0:
        return np.multiply(a, b)
    return contract(a, b, ((a.ndim - 1,), (b.ndim - 1,)))


@implements(np.tensordot)
def tensordot(a, b, axes=2):
    ctx = find_context([a, b])
    a, b = asarray(ctx, a), asarray(ctx, b)
    if np.ndim(axes) == 0:
        n = int(axes)
        if n < 0:
            raise ValueError("tensordot: axes must be non-negative")
        axes_a, axes_b = tuple(range(a.ndim - n, a.ndim)), tuple(range(n))
    else:
        axes_a, axes_b = axes
        axes_a = tuple(np.atleast_1d(axes_a).tolist())
        axes_b = tuple(np.atleast_1d(axes_b).tolist())
    if len(axes_a) != len(axes_b):
        raise ValueError("shape-mismatch for sum")
    axes_a, axes_b = normalize_axes(axes_a, a.ndim), normalize_axes(axes_b, b.ndim)
    for i, j in zip(axes_a, axes_b):
        if a.shape[i] != b.shape[j]:
            raise ValueError("shape-mismatch for sum")
    return contract(a, b, (axes_a, axes_b))


@implements(np.outer)
def outer(a, b, out=None):
    ctx = find_context([a, b])
    a, b = asarray(ctx, a), asarray(ctx, b)
    result = np.multiply(reshape(a, (a.size, 1)), reshape(b, (1, b.size)))
    if out is not None:
        out.assign(result)
        return out
    return result


# ---- einsum ----------------------------------------------------------------------------------

def einsum_plan(subscripts: str, ndims: list[int]):
    """(labels per operand, output labels), with ellipses right-aligned like broadcasting."""
    subscripts = subscripts.replace(" ", "")
    lhs, arrow, out = subscripts.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ndims):
        raise ValueError("the number of operands does not match the einsum subscripts "
                         f"({len(ndims)} operands, {len(terms)} terms)")
    for ch in set(subscripts) - set(".,->"):
        if ch not in string.ascii_letters:
            raise ValueError(f"invalid subscript {ch!r} in einstein sum subscripts string")
    fresh = [c for c in string.ascii_letters if c not in subscripts]
    ell_rank = 0
    for term, nd in zip(terms, ndims):
        if "..." in term:
            ell_rank = max(ell_rank, nd - (len(term) - 3))
    ell = "".join(fresh[:ell_rank])          # right-aligned: an operand with fewer takes the tail
    labels = []
    for term, nd in zip(terms, ndims):
        if "..." in term:
            n = nd - (len(term) - 3)
            if n < 0:
                raise ValueError("einstein sum subscripts string contains too many subscripts "
                                 "for an operand")
            term = term.replace("...", ell[ell_rank - n:])
        if len(term) != nd:
            raise ValueError(f"einstein sum subscripts string {term!r} does not match the "
                             f"operand's {nd} dimensions")
        labels.append(term)
    if arrow:
        if "..." in out:
            out = out.replace("...", ell)
        elif ell_rank:
            raise ValueError("output has more dimensions than subscripts given in einstein sum, "
                             "but no '...' ellipsis provided to broadcast the extra dimensions.")
        if len(set(out)) != len(out):
            raise ValueError(f"einstein sum subscripts string includes output subscript "
                             f"{out!r} multiple times")
        for ch in out:
            if not any(ch in t for t in labels):
                raise ValueError(f"einstein sum subscripts string included output subscript "
                                 f"{ch!r} which never appeared in an input")
    else:
        counts = {}
        for t in labels:
            for ch in t:
                counts[ch] = counts.get(ch, 0) + 1
        out = ell + "".join(sorted(ch for ch, c in counts.items() if c == 1 and ch not in ell))
    return labels, out


@implements(np.einsum)
def einsum(subscripts, *operands, out=None, dtype=None, order="K", casting="safe",
           optimize=False):
    ctx = find_context(list(operands))
    if not isinstance(subscripts, str):
        raise ctx.not_compilable("np.einsum with the sublist (interleaved) form is not supported",
                                 "write the subscripts as a string, e.g. 'ij,jk->ik'")
    xs = [asarray(ctx, o) for o in operands]
    labels, out_labels = einsum_plan(subscripts, [x.ndim for x in xs])
    for term in labels:
        if len(set(term)) != len(term):
            raise ctx.not_compilable(
                f"np.einsum with a repeated index within one operand ({term!r}: a diagonal or "
                "trace) is not supported",
                "take the diagonal first with np.diagonal / np.trace, then contract")
    # Sizes per label; size-1 dims broadcast against the others, as in NumPy.
    size = {}
    for x, term in zip(xs, labels):
        for ch, n in zip(term, x.shape):
            if size.get(ch, 1) == 1:
                size[ch] = n
            elif n not in (1, size[ch]):
                raise ValueError(f"operands could not be broadcast together: subscript {ch!r} "
                                 f"has sizes {size[ch]} and {n}")
    result_dtype = np.result_type(*(x.dtype for x in xs)) if dtype is None else np.dtype(dtype)
    xs = [convert(x, result_dtype) for x in xs]
    xs = [broadcast_to(x, tuple(size[ch] for ch in term)) for x, term in zip(xs, labels)]
    terms = list(labels)

    def needed_elsewhere(i, ch):
        return ch in out_labels or any(ch in t for j, t in enumerate(terms) if j != i)

    def sum_out(x, term, keep):
        axes = tuple(d for d, ch in enumerate(term) if not keep(ch))
        if not axes:
            return x, term
        x = reduce(x, np.add if x.dtype != np.bool_ else np.logical_or, axes, dtype=x.dtype)
        return x, "".join(ch for ch in term if keep(ch))

    x, term = xs[0], terms[0]
    x, term = sum_out(x, term, lambda ch: needed_elsewhere(0, ch))
    terms[0] = term
    for i in range(1, len(xs)):
        y, yterm = sum_out(xs[i], terms[i], lambda ch, i=i: needed_elsewhere(i, ch))
        terms[i] = yterm
        later = set("".join(terms[i + 1:])) | set(out_labels)
        shared = [ch for ch in term if ch in yterm]
        batch = [ch for ch in shared if ch in later]
        summed = [ch for ch in shared if ch not in later]
        x = contract(x, y, ([term.index(c) for c in summed], [yterm.index(c) for c in summed]),
                     ([term.index(c) for c in batch], [yterm.index(c) for c in batch]))
        term = ("".join(batch) + "".join(c for c in term if c not in shared)
                + "".join(c for c in yterm if c not in shared))
        terms[0] = term
    x, term = sum_out(x, term, lambda ch: ch in out_labels)
    if len(xs) == 1:
        x = Tracer(ctx, x.instr)                  # einsum always returns a new array
    result = transpose_value(x, [term.index(ch) for ch in out_labels])
    if out is not None:
        out.assign(result)
        return out
    return result


# ---- cross -----------------------------------------------------------------------------------

@implements(np.cross)
def cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    ctx = find_context([a, b])
    a, b = asarray(ctx, a), asarray(ctx, b)
    if axis is not None:
        axisa = axisb = axisc = axis
    a = np.moveaxis(a, axisa, -1)
    b = np.moveaxis(b, axisb, -1)
    if a.shape[-1] != 3 or b.shape[-1] != 3:
        raise ctx.not_compilable("np.cross is supported for 3-vectors only",
                                 "for 2-vectors write a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]")
    a0, a1, a2 = a[..., 0], a[..., 1], a[..., 2]
    b0, b1, b2 = b[..., 0], b[..., 1], b[..., 2]
    c = np.stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], axis=-1)
    return np.moveaxis(c, -1, axisc)


# ---- norms -----------------------------------------------------------------------------------

def _abs_squared(x):
    if x.dtype.kind == "c":
        return np.add(np.square(x.real), np.square(x.imag))
    return np.multiply(x, x)


@implements(np.linalg.norm)
def norm(x, ord=None, axis=None, keepdims=False):
    x = asarray(find_context([x]), x)
    if x.dtype.kind not in "fc":
        x = convert(x, np.float64)
    ndim = x.ndim
    if axis is None:
        if ord is None or (ord in ("f", "fro") and ndim == 2) or (ord == 2 and ndim == 1):
            r = np.sqrt(np.sum(_abs_squared(x)))
            return reshape(r, (1,) * ndim) if keepdims else r
        axes = tuple(range(ndim))
    else:
        axes = normalize_axes(axis if isinstance(axis, tuple) else
                              (tuple(axis) if isinstance(axis, list) else axis), ndim)
    if len(axes) == 1:
        if isinstance(ord, str):
            raise ValueError(f"Invalid norm order '{ord}' for vectors")
        ax = axes
        if ord == np.inf:
            return np.max(np.abs(x), axis=ax, keepdims=keepdims)
        if ord == -np.inf:
            return np.min(np.abs(x), axis=ax, keepdims=keepdims)
        if ord == 0:
            return convert(np.sum(np.not_equal(x, 0), axis=ax, keepdims=keepdims),
                           np.empty(0, x.dtype).real.dtype)
        if ord == 1:
            return np.sum(np.abs(x), axis=ax, keepdims=keepdims)
        if ord is None or ord == 2:
            return np.sqrt(np.sum(_abs_squared(x), axis=ax, keepdims=keepdims))
        p = float(ord)
        return np.power(np.sum(np.power(np.abs(x), p), axis=ax, keepdims=keepdims), 1.0 / p)
    if len(axes) == 2:
        row, col = axes
        if ord is None or ord in ("f", "fro"):
            r = np.sqrt(np.sum(_abs_squared(x), axis=axes, keepdims=keepdims))
        elif ord in (1, -1, np.inf, -np.inf):
            if ord in (np.inf, -np.inf):
                row, col = col, row
            summed = np.sum(np.abs(x), axis=row)
            col_after = col - 1 if col > row else col
            pick = np.max if ord in (1, np.inf) else np.min
            r = pick(summed, axis=col_after)
            if keepdims:
                shape = list(x.shape)
                shape[axes[0]] = shape[axes[1]] = 1
                r = reshape(r, shape)
        elif ord in (2, -2, "nuc"):
            raise x.ctx.not_compilable(f"np.linalg.norm(ord={ord!r}) of a matrix needs singular "
                                       "values, which nbxla does not compute",
                                       "use ord='fro', 1 or np.inf, or compute it outside the cell")
        else:
            raise ValueError("Invalid norm order for matrices.")
        return r
    raise ValueError("Improper number of dimensions to norm.")


# ---- linear systems --------------------------------------------------------------------------

@implements(np.linalg.solve)
def solve(a, b):
    """``np.linalg.solve``: one custom call that the CPU backend runs through NumPy's LAPACK
    (gesv, partial pivoting), as XLA calls LAPACK for its decompositions.  NumPy 2's rule: b
    is a vector only when it is 1-D; batch dimensions broadcast."""
    ctx = find_context((a, b))
    a, b = asarray(ctx, a), asarray(ctx, b)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise np.linalg.LinAlgError("Last 2 dimensions of the array must be square")
    dtype = np.result_type(a.dtype, b.dtype)
    if dtype.kind in "biu":
        dtype = np.dtype(np.float64)
    elif dtype == np.float16:
        raise TypeError("array type float16 is unsupported in linalg")
    vector = b.ndim == 1
    if vector:
        b = reshape(b, (b.shape[0], 1))
    if b.shape[-2] != a.shape[-1]:
        raise ValueError(f"solve: Input operand 1 has a mismatch in its core dimension 0 "
                         f"(size {b.shape[-2]} is different from {a.shape[-1]})")
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = broadcast_to(convert(a, dtype), batch + a.shape[-2:])
    b = broadcast_to(convert(b, dtype), batch + b.shape[-2:])
    x = emit(ctx, "custom-call", a, b, shape=Shape(from_numpy_dtype(dtype), b.shape),
             custom_call_target=SOLVE_TARGET)
    return reshape(x, x.shape[:-1]) if vector else x


@implements(np.linalg.inv)
def inv(a):
    ctx = find_context((a,))
    a = asarray(ctx, a)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise np.linalg.LinAlgError("Last 2 dimensions of the array must be square")
    n = a.shape[-1]
    # (the identity in the solve's own type: an f64 one made f32 and complex64 inverses double)
    eye = np.eye(n, dtype=a.dtype if a.dtype.kind in "fc" else np.float64)
    return solve(a, broadcast_to(asarray(ctx, eye), a.shape))


@implements(np.linalg.cholesky)
def cholesky(a, /, *, upper=False):
    """``np.linalg.cholesky``: LAPACK's potrf as the custom call JAX emits for it
    (``lapack_{s,d}potrf_ffi``: the factor and LAPACK's info), the other triangle zeroed.  A
    matrix that is not positive definite raises NumPy's LinAlgError after the run (info)."""
    ctx = find_context((a,))
    a = asarray(ctx, a)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise np.linalg.LinAlgError("Last 2 dimensions of the array must be square")
    dtype = np.result_type(a.dtype, np.float64) if a.dtype.kind in "biu" else a.dtype
    if dtype == np.float16:
        raise TypeError("array type float16 is unsupported in linalg")
    if dtype.kind == "c":
        raise ctx.not_compilable("np.linalg.cholesky of a complex matrix cannot be compiled",
                                 "compute it outside the compiled code")
    a = convert(a, dtype)
    if a.size == 0:
        return a
    target = "lapack_spotrf_ffi" if dtype == np.float32 else "lapack_dpotrf_ffi"
    batch = a.shape[:-2]
    call = ctx.emit("custom-call", a.instr,
                shape=TupleShape((Shape(from_numpy_dtype(dtype), a.shape), Shape("s32", batch))),
                custom_call_target=target)
    factor = Tracer(ctx, ctx.emit("get-tuple-element", call, index=0))
    info = Tracer(ctx, ctx.emit("get-tuple-element", call, index=1))
    factor = np.tril(factor)            # potrf leaves the input there (an iota mask, not a constant)
    location = ctx.user_location()

    def fail(value):
        # (one value, read as is: ``max()`` of it cost a tenth of a small matrix's factorization)
        if (value.item() if value.size == 1 else value.max()) <= 0:
            return None
        return LinAlgCheckError("Matrix is not positive definite", location,
                                "np.linalg.cholesky needs a symmetric positive definite matrix")
    # (one matrix: its info is the value checked, no reduction over a batch to run)
    ctx.add_check(reshape(np.max(info) if batch else info, (1,)).instr, fail, ("max",))
    return np.swapaxes(factor, -1, -2) if upper else factor
