"""Library calls of the CPU backend: ``convolution`` as im2col + BLAS, linear solves, masked
dots, LAPACK/FFT custom calls; ``sort`` and ``TopK`` through NumPy's sorts (``sort_library.py``).

Both must compute exactly what the reference evaluator computes; what they cannot match
they leave to the evaluator's rule, saying why.

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

from types import SimpleNamespace
from typing import Callable

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..hlo.attributes import PadDim, Window, WindowDim
from ..hlo.evaluator_data import pad_array
from ..hlo.evaluator_linalg import (MASKED_DOT_TARGET, SOLVE_TARGET, masked_dot_axes,
                                    masked_dot_bounds)
from ..hlo.ir import Instruction
from ..hlo.low_precision import widen_shape, widen_value
from ..hlo.shape_inference import window_output_size
from ..hlo.shapes import Shape
from .bf16_arrays import round_to_bf16
from .conv_bias_act import ConvolutionWithEpilogue
from .conv_blocks import blocked_refusal, BlockedConvolution, prefers_per_tap
from .conv_epilogue import runs_as_library
from .conv_gemm import matmul_rows, wide_gemm_refusal, WideGemmConvolution
from .blas_threads import LAPACK_THREADED_ELEMENTS, PolicyCall
from .lapack_calls import FftThunk, lapack_thunk
from .sort_library import TopKOpThunk, sort_thunk, top_k_thunk

__all__ = ["library_thunk"]


def library_thunk(instr: Instruction, fallback: Callable) -> tuple[Callable | None, str | None]:
    """(thunk, None) for a sort, convolution or linear solve this module runs, else (None, why
    not; None when there is nothing more to say than that there is no library call).

    ``fallback`` (the evaluator's rule as a thunk) is what a sort uses for calls it cannot
    answer exactly (NaN keys under a plain float comparison)."""
    if instr.opcode == "sort":
        return sort_thunk(instr, fallback)
    if instr.opcode == "convolution":
        return _convolution_thunk(instr)
    if instr.opcode == "fusion" and runs_as_library(instr):
        return ConvolutionWithEpilogue(instr), None
    if instr.opcode == "custom-call" and instr.attrs.get("custom_call_target") == SOLVE_TARGET:
        return _SolveThunk(instr), None
    if instr.opcode == "custom-call" and instr.attrs.get("custom_call_target") == MASKED_DOT_TARGET:
        return MaskedDotThunk(instr), None
    if instr.opcode == "custom-call" and instr.attrs.get("custom_call_target") == "TopK":
        return top_k_thunk(instr, fallback)
    if instr.opcode == "custom-call":
        return lapack_thunk(instr)
    if instr.opcode == "topk":
        return TopKOpThunk(instr), None
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
