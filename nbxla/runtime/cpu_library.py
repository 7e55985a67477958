"""Library calls of the CPU backend: ``sort`` through NumPy's sorts, ``convolution`` as im2col + BLAS.

Both must compute exactly what the reference evaluator computes; what they cannot match
they leave to the evaluator's rule, saying why.

**sort.**  The evaluator runs a stable merge sort driven by the comparator computation.  A
comparator that orders by keys is recognized here and replaced by ``np.argsort(kind="stable")``
(``np.lexsort`` for several keys) plus ``np.take_along_axis`` for every operand.  A key is any
elementwise expression of the lhs parameters, compared (LT ascending, GT descending) with the
same expression of the rhs parameters: the plain parameter, JAX's NaN/zero canonicalization
(``select(x != x, nan, select(x == 0, 0, x))``), XLA's integer total-order key of the float
bits, ...  The expression is evaluated on whole arrays.  Recognized shapes of comparator:

* ``compare(K(lhs), K(rhs)), direction=LT|GT`` (any ``type``: TOTALORDER, SIGNED, UNSIGNED);
* nbxla's NaN-last form ``or(lt(l, r), and(isnan(r), not(isnan(l))))`` (and NaN-first);
* nbxla's pred form ``and(not(l), r)`` (false before true);
* JAX's lexicographic form ``or(lt(k0), and(eq(k0), <the same for k1, ...>))``.

A plain (non-total-order) float comparison is no strict weak order when NaNs occur, so the
evaluator's answer then depends on its algorithm: such a sort checks its keys for NaN on
each call and hands calls with NaNs to the evaluator's rule.

**convolution.**  (Depthwise and narrowly grouped ones run in their own native kernel,
``codegen/convolution.py``; these are the rest.)  Dense and grouped 2-D f32/f64 ones that
nbxla's patch-GEMM kernel takes run in it (``conv_blocks``).  Unstrided f32/f64 convolutions with enough
input features per group are a GEMM per kernel tap on the padded input (``conv_gemm.py``).
The others (any dim_labels, strides, padding including negative, lhs and rhs dilation,
reversal, feature or batch groups) gather patches of the padded, dilated input with
``sliding_window_view`` into one matrix and multiply it with the reshaped kernel in one
``np.matmul`` (one batched matmul over groups).  bf16 ones compute in f32 and round once.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Callable

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..hlo.attributes import PadDim, Window, WindowDim
from ..hlo.evaluator import RULES, Interpreter
from ..hlo.evaluator_common import signed_of, unsigned_of
from ..hlo.evaluator_data import pad_array
from ..hlo.evaluator_elementwise import total_order_key
from ..hlo.evaluator_linalg import (MASKED_DOT_TARGET, SOLVE_TARGET, masked_dot_axes,
                                    masked_dot_bounds)
from ..hlo.ir import Instruction, post_order
from ..hlo.low_precision import involves_low_precision, widen_shape, widen_value
from ..hlo.shape_inference import window_output_size
from ..hlo.shapes import Shape
from .bf16_arrays import round_to_bf16
from .conv_bias_act import ConvolutionWithEpilogue
from .conv_blocks import blocked_refusal, BlockedConvolution, prefers_per_tap
from .conv_epilogue import runs_as_library
from .conv_gemm import matmul_rows, wide_gemm_refusal, WideGemmConvolution
from .blas_threads import LAPACK_THREADED_ELEMENTS, PolicyCall
from .lapack_calls import FftThunk, lapack_thunk

__all__ = ["library_thunk", "sort_has_library_call", "sort_may_defer"]


def library_thunk(instr: Instruction, fallback: Callable) -> tuple[Callable | None, str | None]:
    """(thunk, None) for a sort, convolution or linear solve this module runs, else (None, why
    not; None when there is nothing more to say than that there is no library call).

    ``fallback`` (the evaluator's rule as a thunk) is what a sort uses for calls it cannot
    answer exactly (NaN keys under a plain float comparison)."""
    if instr.opcode == "sort":
        return _sort_thunk(instr, fallback)
    if instr.opcode == "convolution":
        return _convolution_thunk(instr)
    if instr.opcode == "fusion" and runs_as_library(instr):
        return ConvolutionWithEpilogue(instr), None
    if instr.opcode == "custom-call" and instr.attrs.get("custom_call_target") == SOLVE_TARGET:
        return _SolveThunk(instr), None
    if instr.opcode == "custom-call" and instr.attrs.get("custom_call_target") == MASKED_DOT_TARGET:
        return MaskedDotThunk(instr), None
    if instr.opcode == "custom-call" and instr.attrs.get("custom_call_target") == "TopK":
        return _top_k_thunk(instr, fallback)
    if instr.opcode == "custom-call":
        return lapack_thunk(instr)
    if instr.opcode == "topk":
        return _TopKOpThunk(instr), None
    if instr.opcode == "fft":
        return FftThunk(instr), None
    return None, None


class MaskedDotThunk:
    """``nbxla_masked_dot``: NumPy's BLAS on the masks' sub-matrices (their true lengths), the
    rest of the result zero."""
    how = "BLAS on the masked sub-matrices (np.dot)"

    def __init__(self, instr: Instruction):
        self.axes = masked_dot_axes(instr)
        self.lhs_rank = instr.operands[0].shape.rank
        self.contract = (instr.attrs["lhs_contracting_dims"][0], instr.attrs["rhs_contracting_dims"][0])
        self.dtype, self.dims = instr.shape.dtype, instr.shape.dims

    def __call__(self, operands):
        lhs, rhs = operands[:2]
        # [lo, hi) per axis of each operand: the whole axis, narrowed by its masks
        bounds = [[[0, n] for n in lhs.shape], [[0, n] for n in rhs.shape]]
        for k, axis in enumerate(self.axes):
            side, axis = (0, axis) if axis < self.lhs_rank else (1, axis - self.lhs_rank)
            lo, hi = masked_dot_bounds(operands[2 + 2 * k], operands[3 + 2 * k], (lhs, rhs)[side].shape[axis])
            b = bounds[side][axis]
            b[0], b[1] = max(b[0], lo), min(b[1], hi)
        lc, rc = self.contract           # (the contracted axis: where both operands' masks hold)
        both = [max(bounds[0][lc][0], bounds[1][rc][0]), min(bounds[0][lc][1], bounds[1][rc][1])]
        bounds[0][lc] = bounds[1][rc] = both
        windows = [tuple(slice(lo, max(lo, hi)) for lo, hi in side) for side in bounds]
        free = [w for d, w in enumerate(windows[0]) if d != lc] + [w for d, w in enumerate(windows[1]) if d != rc]
        out = np.zeros(self.dims, self.dtype)
        out[tuple(free)] = np.tensordot(lhs[windows[0]].astype(self.dtype, copy=False),
                                        rhs[windows[1]].astype(self.dtype, copy=False), axes=([lc], [rc]))
        return out


def _solve(a, b):
    return np.linalg.solve(a, b)


def _inverse(a, b):
    return np.linalg.inv(a)


class _SolveThunk:
    """``np.linalg.solve`` (LAPACK gesv) for nbxla's solve target; ``np.linalg.inv`` where the
    right-hand side is the identity constant (the frontend's ``inv``): the same gesv on an
    identity NumPy makes in C, without copying and transposing the constant (one BLAS
    thread, thread CPU time, load 13: f64 50 x 50 50.6 us against 53.2 through solve, f32
    100 x 100 232 against 242)."""

    def __init__(self, instr: Instruction):
        self.dtype = instr.shape.dtype
        self.policy = PolicyCall()          # (OpenBLAS's threads as for a BLAS call: blas_threads)
        rhs = instr.operands[1]
        self.inverse = rhs.opcode == "constant" and rhs.shape.rank == 2 and \
            rhs.shape.dims[0] == rhs.shape.dims[1] and np.array_equal(rhs.literal, np.eye(rhs.shape.dims[0]))
        self.solve = _inverse if self.inverse else _solve
        self.how = "LAPACK gesv through np.linalg." + ("inv" if self.inverse else "solve")

    def __call__(self, operands):
        a, b = operands
        n = a.shape[-1]
        if n * n < LAPACK_THREADED_ELEMENTS:
            x = self.solve(a, b)
        else:
            columns = b.shape[-1] if b.ndim == a.ndim else 1        # (per matrix: gesv's own work)
            x = self.policy(n ** 3 // 3 + n * n * columns, self.solve, a, b)
        return np.ascontiguousarray(x, dtype=self.dtype)


# ---- sort ---------------------------------------------------------------------------------------

class _NotRecognized(Exception):
    """The comparator is not a key order this module knows (the message says why)."""


@dataclass(frozen=True)
class _Key:
    """One sort key: ``expr`` over the comparator's lhs parameters, compared with ``kind``."""
    expr: Instruction
    descending: bool
    kind: str               # the compare's type attribute ("" for the default)
    nans: str = ""          # "last" / "first" for the NaN-clause form, else ""


# Ops a key expression may use: evaluated on whole arrays, they act elementwise.
_SCALAR_VIEWS = {"bitcast", "bitcast-convert", "copy", "reshape", "broadcast"}


def sort_has_library_call(instr: Instruction) -> bool:
    """Does NumPy's sort take this sort (its comparator a recognized order of keys)?  The
    others run in the native sort kernel (codegen/sort_kernel.py)."""
    return _sort_thunk(instr, None)[0] is not None


def sort_may_defer(instr: Instruction) -> bool:
    """Does NumPy's sort of this sort hand calls with NaN keys to its fallback (a key of floats
    under a plain comparison, which is no strict weak order with NaNs)?"""
    try:
        keys = _ordered_keys(instr.attrs["to_apply"].root)
    except _NotRecognized:
        return False
    return any(k.expr.shape.element_type in ("f16", "f32", "f64") and k.kind != "TOTALORDER" and not k.nans
               for k in keys)


def _sort_thunk(instr: Instruction, fallback: Callable):
    comparator = instr.attrs["to_apply"]
    try:
        keys = _ordered_keys(comparator.root)
        for key in keys:
            _check_key_expression(key.expr)
    except _NotRecognized as e:
        return None, f"sort comparator %{comparator.name} is not a recognized key order ({e}); " \
                     "it runs through the evaluator's merge sort"
    return _SortThunk(instr, keys, fallback), None


def _ordered_keys(node: Instruction) -> list[_Key]:
    """The keys, most significant first, of a comparator returning ``node``."""
    strict = _strict_order(node)
    if strict is not None:
        return [strict]
    if node.opcode == "or":
        for first, rest in _pairs(node.operands):
            key = _strict_order(first)
            if key is None or rest.opcode != "and" or key.nans:
                continue
            for equal, tail in _pairs(rest.operands):
                if _is_equality(equal, key):
                    return [key] + _ordered_keys(tail)
    raise _NotRecognized(f"%{node.name} ({node.opcode}) is neither a comparison of mirrored keys "
                         "nor a lexicographic or(less, and(equal, ...))")


def _pairs(operands):
    """Both orders of a commutative op's two operands."""
    a, b = operands
    return ((a, b), (b, a))


def _strict_order(node: Instruction) -> _Key | None:
    """The key of a comparator that orders by one key, or None."""
    if node.opcode == "compare" and node.attrs["direction"] in ("LT", "GT"):
        oriented = _oriented(*node.operands)
        if oriented is not None:
            expr, swapped = oriented
            return _Key(expr, (node.attrs["direction"] == "GT") != swapped, node.attrs.get("type", ""))
    if node.opcode == "and" and all(o.shape.element_type == "pred" for o in node.operands):
        for negated, plain in _pairs(node.operands):     # and(not(l), r): false before true
            if negated.opcode == "not":
                oriented = _oriented(negated.operands[0], plain)
                if oriented is not None:
                    return _Key(oriented[0], oriented[1], "")
    if node.opcode == "or":
        for less, nan_clause in _pairs(node.operands):
            key = _strict_order(less)
            if key is not None and key.kind in ("", "FLOAT") and less.opcode == "compare":
                placement = _nan_placement(nan_clause, key.expr)
                if placement:
                    return _Key(key.expr, key.descending, key.kind, placement)
    return None


def _oriented(a: Instruction, b: Instruction):
    """(lhs-side expression, whether a is the rhs side) when a and b are one key expression
    on mirrored parameters, else None."""
    if _mirrored(a, b):
        return a, False
    if _mirrored(b, a):
        return b, True
    return None


def _is_equality(node: Instruction, key: _Key) -> bool:
    return (node.opcode == "compare" and node.attrs["direction"] == "EQ"
            and node.attrs.get("type", "") == key.kind
            and any(_same(a, key.expr) and _mirrored(a, b) for a, b in _pairs(node.operands)))


def _nan_placement(clause: Instruction, expr: Instruction) -> str:
    """"last" for and(isnan(K(rhs)), not(isnan(K(lhs)))), "first" for the mirror, else ""."""
    if clause.opcode != "and":
        return ""
    for nan, other in _pairs(clause.operands):
        if other.opcode != "not" or not _is_nan_test(nan) or not _is_nan_test(other.operands[0]):
            continue
        tested, not_tested = nan.operands[0], other.operands[0].operands[0]
        if _same(not_tested, expr) and _mirrored(not_tested, tested):
            return "last"
        if _same(tested, expr) and _mirrored(tested, not_tested):
            return "first"
    return ""


def _is_nan_test(node: Instruction) -> bool:
    return (node.opcode == "compare" and node.attrs["direction"] == "NE"
            and node.operands[0] is node.operands[1] and node.attrs.get("type", "") in ("", "FLOAT"))


def _mirrored(a: Instruction, b: Instruction) -> bool:
    """Is ``b`` the expression ``a`` with every lhs parameter 2k replaced by rhs parameter 2k+1?"""
    return _structurally_equal(a, b, lambda pa, pb: pa % 2 == 0 and pb == pa + 1, {})


def _same(a: Instruction, b: Instruction) -> bool:
    return _structurally_equal(a, b, lambda pa, pb: pa == pb, {})


def _structurally_equal(a, b, params_match, memo) -> bool:
    known = memo.get((id(a), id(b)))
    if known is not None:
        return known
    if a.opcode != b.opcode or a.shape != b.shape or len(a.operands) != len(b.operands):
        result = False
    elif a.opcode == "parameter":
        result = params_match(a.parameter_number, b.parameter_number)
    elif a.opcode == "constant":
        la, lb = np.asarray(a.literal), np.asarray(b.literal)
        result = la.dtype == lb.dtype and la.shape == lb.shape and la.tobytes() == lb.tobytes()
    else:
        result = _semantic_attrs(a) == _semantic_attrs(b) and all(_structurally_equal(x, y, params_match, memo)
                                            for x, y in zip(a.operands, b.operands))
    memo[(id(a), id(b))] = result
    return result


def _semantic_attrs(instr: Instruction) -> dict:
    return {k: v for k, v in instr.attrs.items() if k != "metadata"}      # as CSE compares


def _check_key_expression(expr: Instruction) -> None:
    """Keys are computed on whole arrays: only scalar elementwise ops can be."""
    for node in post_order(expr):
        op = node.opcode
        if node.shape.is_tuple or node.shape.rank != 0:
            raise _NotRecognized(f"key operation %{node.name} is not on scalars")
        if op in ("parameter", "constant") or op in _SCALAR_VIEWS or node.is_elementwise:
            if op in ("bitcast", "bitcast-convert") and \
                    node.shape.dtype.itemsize != node.operands[0].shape.dtype.itemsize:
                raise _NotRecognized(f"%{node.name} changes the element width")
            continue
        raise _NotRecognized(f"key operation %{node.name} ({op}) is not elementwise")
    if expr.shape.element_type in ("c64", "c128") or involves_low_precision(expr.shape):
        raise _NotRecognized(f"keys of type {expr.shape.element_type} are not ordered here")


class _SortThunk:
    """A stable sort by recognized keys: one permutation, applied to every operand."""

    def __init__(self, instr: Instruction, keys: list[_Key], fallback: Callable):
        self.keys, self.fallback = keys, fallback
        self.axis = instr.attrs["dimensions"][0]
        self.tuple_result = instr.shape.is_tuple
        self.interpreter = Interpreter()

    def __call__(self, operands: list[np.ndarray]):
        if operands[0].ndim == 0:
            result = [o.copy() for o in operands]
        else:
            with np.errstate(all="ignore"):
                columns = self._sortable_columns(operands)
            if columns is None:             # NaNs under a plain float comparison
                return self.fallback(operands)
            if len(columns) > 1:
                perm = np.lexsort(columns[::-1], axis=self.axis)   # lexsort: last key first
            else:
                (column,) = columns
                # NumPy's default sort (vectorized quicksort) is ~10x faster than its stable
                # one; it gives the same result where no two elements tie on the key but
                # differ otherwise.
                kind = "stable" if self._tie_order_matters(operands, column) else "quicksort"
                if len(operands) == 1 and _same_array(column, operands[0]):
                    result = [np.sort(operands[0], axis=self.axis, kind=kind)]
                    return tuple(result) if self.tuple_result else result[0]
                perm = np.argsort(column, axis=self.axis, kind=kind)
            result = [np.take_along_axis(o, perm, self.axis) for o in operands]
        return tuple(result) if self.tuple_result else result[0]

    @staticmethod
    def _tie_order_matters(operands, column: np.ndarray) -> bool:
        """Could a stable sort differ from an unstable one here?  Not when the one operand is
        sorted by a key that equal values share: integer keys (a bijection of the value),
        float keys without zeros (-0 == +0) or NaNs (all tie).  (Sorts that need not be
        stable are sorted stably all the same: the results then match the evaluator's.)"""
        if len(operands) > 1:
            return True
        return column.dtype.kind == "f" and column.size > 0 and not np.min(np.abs(column)) > 0  # NaN: not > 0

    def _sortable_columns(self, operands) -> list[np.ndarray] | None:
        """Arrays whose stable ascending lexicographic order is the comparator's order."""
        columns = []
        for key in self.keys:
            values = _evaluate_key(key.expr, operands, self.interpreter)
            values = np.broadcast_to(values, operands[0].shape)
            ascending = _ascending_columns(values, key)
            if ascending is None:
                return None
            columns += ascending
        return columns


def _top_k_thunk(instr: Instruction, fallback: Callable):
    comparator = instr.attrs["called_computations"][0]
    try:
        keys = _ordered_keys(comparator.root)
        for key in keys:
            _check_key_expression(key.expr)
    except _NotRecognized as e:
        return None, f"TopK comparator %{comparator.name} is not a recognized key order ({e}); " \
                     "it runs through the evaluator's merge sort"
    return _TopKThunk(instr, keys, fallback), None


class _TopKThunk:
    """XLA:CPU's ``TopK`` custom call: the rows stably sorted by the comparator's recognized
    keys (as ``_SortThunk``), the first k kept with their positions.  NaN keys under a plain
    float comparison go to the evaluator's rule, as a sort's do."""
    how = "NumPy's stable argsort by the TopK comparator's keys, first k kept"

    def __init__(self, instr: Instruction, keys: list[_Key], fallback: Callable):
        self.keys, self.fallback = keys, fallback
        self.k = instr.shape.elements[0].dims[-1]
        self.interpreter = Interpreter()

    def __call__(self, operands: list[np.ndarray]):
        (x,) = operands
        columns = []
        with np.errstate(all="ignore"):
            for key in self.keys:
                values = np.broadcast_to(_evaluate_key(key.expr, [x], self.interpreter), x.shape)
                ascending = _ascending_columns(values, key)
                if ascending is None:
                    return self.fallback(operands)
                columns += ascending
        perm = np.lexsort(columns[::-1], axis=-1) if len(columns) > 1 else \
            np.argsort(columns[0], axis=-1, kind="stable")
        perm = np.ascontiguousarray(perm[..., :self.k])
        return np.take_along_axis(x, perm, -1), perm.astype(np.int32)


class _TopKOpThunk:
    """The ``topk`` op: its reference rule, which is already whole-array NumPy (total-order
    keys, one stable argsort per call): nothing to gain from a second copy."""
    how = "NumPy's stable argsort on total-order keys, first k kept"

    def __init__(self, instr: Instruction):
        self.instr, self.interpreter = instr, Interpreter()

    def __call__(self, operands):
        values, positions = RULES["topk"](self.instr, operands, self.interpreter)
        return np.ascontiguousarray(values), np.ascontiguousarray(positions)


def _same_array(a: np.ndarray, b: np.ndarray) -> bool:
    """Are ``a`` and ``b`` the same elements of the same memory (the key is the operand)?"""
    return a.dtype == b.dtype and a.shape == b.shape and a.strides == b.strides and \
        a.__array_interface__["data"][0] == b.__array_interface__["data"][0]


def _evaluate_key(expr: Instruction, operands, interp) -> np.ndarray:
    """The key expression on whole arrays (parameter 2k is operand k)."""
    values: dict[int, np.ndarray] = {}
    for node in post_order(expr):
        op, dtype = node.opcode, node.shape.dtype
        if op == "parameter":
            value = operands[node.parameter_number // 2]
        elif op == "constant":
            value = np.asarray(node.literal, dtype).reshape(())
        elif op in _SCALAR_VIEWS:
            value = values[id(node.operands[0])]
            value = value.view(dtype) if value.dtype != dtype else value
        else:
            value = np.asarray(RULES[op](node, [values[id(o)] for o in node.operands], interp))
        values[id(node)] = value if value.dtype == dtype else value.astype(dtype)
    return values[id(expr)]


def _ascending_columns(values: np.ndarray, key: _Key) -> list[np.ndarray] | None:
    """Columns sorting ascending (stable, lexicographic) like the key's comparison."""
    if values.dtype.kind == "f":
        if key.kind == "TOTALORDER":
            column = total_order_key(values)     # -NaN < -inf < ... < -0 < +0 < ... < +NaN
            return [~column if key.descending else column]
        if key.nans == "last" and not key.descending:
            return [values]                      # NumPy's own float order: NaNs last
        nan = np.isnan(values)
        if key.nans:
            # NaNs all equal, placed apart; the rest compare as floats (-0 == +0).
            rest = np.where(nan, 0, values)
            flag = nan if key.nans == "last" else ~nan
            return [flag, -rest if key.descending else rest]
        if nan.any():
            return None
        return [-values if key.descending else values]
    if key.kind == "UNSIGNED" and values.dtype.kind == "i":
        values = values.view(unsigned_of(values.dtype))
    elif key.kind == "SIGNED" and values.dtype.kind == "u":
        values = values.view(signed_of(values.dtype))
    return [~values if key.descending else values]     # ~ reverses ints and bools exactly


# ---- convolution --------------------------------------------------------------------------------

# Integer convolutions: exact in any order (wrapping sums are associative), so im2col + NumPy's
# integer matmul (no BLAS) gives the evaluator's bits.
_INTEGER_TYPES = {"s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64"}
_FLOAT_TYPES = {"f16", "bf16", "f8e4m3fn", "f8e5m2", "f32", "f64"}


def _convolution_thunk(instr: Instruction):
    operand_types = {o.shape.element_type for o in instr.operands}
    out_type = instr.shape.element_type
    types = operand_types | {out_type}
    if instr.attrs.get("feature_group_count", 1) > 1 and instr.attrs.get("batch_group_count", 1) > 1:
        return None, (f"convolution %{instr.name} has both feature_group_count and "
                      "batch_group_count above 1")
    if types <= _INTEGER_TYPES:
        # (the evaluator converts the operands to the result type first, as XLA does)
        return _ConvertedConvolution(instr, instr.shape.dtype, _ConvolutionThunk), None
    if types in ({"f32"}, {"f64"}):
        return _f32_or_f64_convolution(instr), None
    if types in ({"c64"}, {"c128"}):
        return _ConvolutionThunk(instr), None                # (im2col + NumPy's complex GEMM)
    if types in ({"bf16"}, {"bf16", "f32"}) and operand_types == {"bf16"}:
        return _WidenedConvolution(instr), None
    if types <= _FLOAT_TYPES:
        # Other float types and mixes (f16, f8, an f32 operand with a bf16 one): the operands
        # in the result type (as the evaluator and XLA convert them), then in f32 (f64 for an
        # f64 result), the result rounded once.  (f16: XLA's Eigen f16 convolution rounds its
        # sums in f16 instead; testing.py's f16 tolerance takes both.)
        compute = np.dtype(np.float64 if out_type == "f64" else np.float32)
        return _ConvertedConvolution(instr, compute, _f32_or_f64_convolution), None
    return None, (f"convolution %{instr.name} on {'/'.join(sorted(types))} runs through the "
                  "evaluator's rule (the library path takes integer, real float and complex types, "
                  "complex ones unmixed)")


class _ConvertedConvolution:
    """A convolution of the operands converted to the result's type and then to ``dtype`` (the
    second conversion exact: integers stay, floats widen to f32 / f64), the result converted
    to the instruction's type."""

    def __init__(self, instr: Instruction, dtype: np.dtype, make: Callable):
        t = _element_type_of(dtype)
        wide = SimpleNamespace(opcode="convolution", name=instr.name, attrs=instr.attrs,
                               shape=Shape(t, instr.shape.dims),
                               operands=[SimpleNamespace(shape=Shape(t, o.shape.dims)) for o in instr.operands])
        self.inner, self.compute, self.dtype = make(wide), dtype, instr.shape.dtype
        self.how = self.inner.how + ("" if dtype == self.dtype else f", in {t}")

    def __call__(self, operands: list[np.ndarray]) -> np.ndarray:
        result = self.inner([o.astype(self.dtype, copy=False).astype(self.compute, copy=False)
                             for o in operands])
        return result if result.dtype == self.dtype else result.astype(self.dtype)


def _element_type_of(dtype: np.dtype) -> str:
    return {"float32": "f32", "float64": "f64"}.get(dtype.name) or \
        {"i": "s", "u": "u"}[dtype.kind] + str(8 * dtype.itemsize)


def _f32_or_f64_convolution(instr):
    """Dense 2-D convolutions: a GEMM per tap (conv_gemm.py) or im2col by blocks
    (conv_blocks.py), by the cost rule ``prefers_per_tap``; grouped ones with enough features
    per group a GEMM per tap; the rest (batch groups, lhs dilation, thin groups, ...): im2col
    + one matmul."""
    per_tap, blocked = wide_gemm_refusal(instr) is None, blocked_refusal(instr) is None
    if per_tap and not (blocked and not prefers_per_tap(instr)):
        return WideGemmConvolution(instr)
    if blocked:
        thunk = BlockedConvolution(instr)
        weights = instr.operands[1]
        if getattr(weights, "opcode", None) == "constant":      # (a frozen model's weights)
            thunk.fix_kernel(weights.literal)
        return thunk
    return _ConvolutionThunk(instr)


class _WidenedConvolution:
    """A bf16 convolution as XLA:CPU computes it: operands widened to f32 (exactly), the f32
    convolution, the result rounded once to bf16 (or kept f32 when the result type is f32)."""

    def __init__(self, instr: Instruction):
        wide = SimpleNamespace(opcode="convolution", name=instr.name, attrs=instr.attrs,
                               shape=widen_shape(instr.shape),
                               operands=[SimpleNamespace(shape=widen_shape(o.shape)) for o in instr.operands])
        self.inner = _f32_or_f64_convolution(wide)
        if isinstance(self.inner, BlockedConvolution) and instr.operands[1].opcode == "constant":
            self.inner.fix_kernel(instr.operands[1].literal)      # (widened there, once)
        self.how, self.dtype = f"{self.inner.how}, in f32", instr.shape.dtype
        # Constant operands (a frozen model's weights) widened once, not on every call.
        self.widened = [widen_value(o.literal) if o.opcode == "constant" else None for o in instr.operands]
        # (the blocked path copies both operands into its own f32 buffers anyway: widened there)
        self.widens_itself = isinstance(self.inner, BlockedConvolution)

    def __call__(self, operands: list[np.ndarray]) -> np.ndarray:
        if self.widens_itself:
            operands = [o if w is None else w for o, w in zip(operands, self.widened)]
        else:
            operands = [widen_value(o) if w is None else w for o, w in zip(operands, self.widened)]
        result = self.inner(operands)
        return result if result.dtype == self.dtype else round_to_bf16(result)


class _ConvolutionThunk:
    """Convolution as im2col + matmul, computed in channels-last order: input (N, S..., C),
    kernel (KS..., I, O), patches (N, OS..., KS..., C), result (N, OS..., O)."""
    how = "im2col + one matmul (BLAS)"

    def __init__(self, instr: Instruction):
        dn = instr.attrs["dim_labels"]
        kernel_dims = instr.operands[1].shape.dims
        window = instr.attrs.get("window") or Window(tuple(WindowDim(kernel_dims[d]) for d in dn.kernel_spatial))
        self.dims, self.dtype = instr.shape.dims, instr.shape.dtype
        self.rank = len(dn.input_spatial)
        self.input_order = [dn.input_batch, *dn.input_spatial, dn.input_feature]
        self.kernel_order = [*dn.kernel_spatial, dn.kernel_input_feature, dn.kernel_output_feature]
        self.output_order = np.argsort([dn.output_batch, *dn.output_spatial, dn.output_feature])
        self.window = window.dims
        self.reversed = tuple(i for i, w in enumerate(window.dims) if w.reversal)
        self.padding = [PadDim(0, 0)] + [PadDim(w.pad_low, w.pad_high, w.base_dilation - 1)
                                         for w in window.dims] + [PadDim(0, 0)]
        self.pads = any(p != PadDim(0, 0) for p in self.padding)
        self.groups = instr.attrs.get("feature_group_count", 1)
        self.batch_groups = instr.attrs.get("batch_group_count", 1)

    def __call__(self, operands: list[np.ndarray]) -> np.ndarray:
        x = np.transpose(operands[0], self.input_order)
        k = np.transpose(operands[1], self.kernel_order)
        if self.reversed:
            k = np.flip(k, self.reversed)
        out_spatial = [window_output_size(n, w) for n, w in zip(x.shape[1:-1], self.window)]
        if 0 in out_spatial or 0 in self.dims:
            return np.zeros(self.dims, self.dtype)   # (negative padding may crop everything)
        if self.pads:
            x = pad_array(x, self.dtype.type(0), self.padding)
        patches = self._patches(x, out_spatial)
        if self.batch_groups > 1:
            out = self._batch_grouped(patches, k)
        else:
            out = self._feature_grouped(patches, k)
        return np.ascontiguousarray(np.transpose(out, self.output_order))

    def _patches(self, x: np.ndarray, out_spatial) -> np.ndarray:
        """(N, OS..., KS..., C): the input window of every output position, as a strided view."""
        r = self.rank
        spans = [(w.size - 1) * w.window_dilation + 1 for w in self.window]
        windows = sliding_window_view(x, spans, axis=tuple(range(1, r + 1)))  # (N, P..., C, span...)
        picks = (slice(None),) + tuple(slice(0, (n - 1) * w.stride + 1, w.stride)
                                       for n, w in zip(out_spatial, self.window)) + \
            (slice(None),) + tuple(slice(None, None, w.window_dilation) for w in self.window)
        windows = windows[picks]
        return np.transpose(windows, [0, *range(1, r + 1), *range(r + 2, 2 * r + 2), r + 1])

    def _feature_grouped(self, patches: np.ndarray, k: np.ndarray) -> np.ndarray:
        """Output feature group g reads input feature group g (groups = 1: one plain matmul)."""
        g, r = self.groups, self.rank
        n, out_spatial, c = patches.shape[0], patches.shape[1:r + 1], patches.shape[-1]
        rows, taps, o = n * int(np.prod(out_spatial)), int(np.prod(k.shape[:r])), k.shape[-1]
        if g == 1:
            # (contiguous: a strided patch view would send np.matmul to its non-BLAS loops)
            out = matmul_rows(np.ascontiguousarray(patches.reshape(rows, taps * c)), k.reshape(taps * c, o))
            return out.reshape(n, *out_spatial, o)
        # patches (rows, taps, g, c/g) -> (g, rows, taps*c/g); kernel (taps, c/g, g, o/g) likewise.
        cols = patches.reshape(rows, taps, g, c // g).transpose(2, 0, 1, 3).reshape(g, rows, taps * (c // g))
        kg = k.reshape(taps, c // g, g, o // g).transpose(2, 0, 1, 3).reshape(g, taps * (c // g), o // g)
        out = np.matmul(cols, kg)                                   # (g, rows, o/g)
        return out.transpose(1, 0, 2).reshape(n, *out_spatial, o)

    def _batch_grouped(self, patches: np.ndarray, k: np.ndarray) -> np.ndarray:
        """Output feature group g reads input batch group g (the batch split group-major)."""
        b, r = self.batch_groups, self.rank
        n, out_spatial, c = patches.shape[0], patches.shape[1:r + 1], patches.shape[-1]
        positions, taps, o = int(np.prod(out_spatial)), int(np.prod(k.shape[:r])), k.shape[-1]
        cols = patches.reshape(b, (n // b) * positions, taps * c)
        kg = k.reshape(taps * c, b, o // b).transpose(1, 0, 2)     # (b, taps*c, o/b)
        out = np.matmul(cols, kg)                                   # (b, n/b * positions, o/b)
        out = out.reshape(b, n // b, positions, o // b).transpose(1, 2, 0, 3)
        return out.reshape(n // b, *out_spatial, o)
