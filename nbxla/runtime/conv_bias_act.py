"""Dense convolutions with their bias and activation: a loop fusion that consumes a dense
convolution as ``act(conv + broadcast(bias))`` is computed by the convolution's own native
kernel, the bias added to each position's sums and the clamp applied in registers
(``codegen/patch_gemm.py``), so that the output is written once.

Why: TensorFlow's Conv2D + BiasAdd + Relu and JAX's ``relu(conv + b)`` otherwise run the
convolution, then a loop kernel that reads the whole output back and writes it again --
for a first layer (7x7 3 -> 64 on 224x224, stride 2) 0.39 of 2.26 ms, where XLA:CPU's fused
epilogue costs 0.09 ms.

The fold itself is ``conv_epilogue``'s (the fusion takes the convolution's operands and the
convolution leaves the program); this module says which dense convolutions and which fusions
it takes, and runs the folded fusion as a library call.  Recognized epilogues, all in the
convolution's element type (f32, f64 or bf16), ``x`` the convolution or ``x + bias``:

* ``x + broadcast(bias)``, the bias a rank-1 parameter of the fusion or a constant, broadcast
  along the output feature dimension (either operand order);
* ``maximum(x, c)`` (relu), ``minimum(x, c)``, ``minimum(maximum(x, lo), hi)`` and the other
  nesting, ``clamp(lo, x, hi)`` (relu6) with scalar constants ``c``, ``lo <= hi`` (either
  operand order of maximum / minimum).

bf16 (TensorFlow's mixed precision, XLA's benchmark models): the kernel computes in f32 and
rounds as the evaluator and XLA:CPU do -- the convolution's sum to bf16, the bias sum to bf16
again -- and the clamp of bf16 values by bf16 constants is exact; the result is stored once.

Taken: convolutions that the blocked path runs in nbxla's kernel (``conv_blocks.takes_native``).
Those it runs on BLAS, and the per-tap GEMMs (``conv_gemm``), keep the separate loop kernel:
NumPy applying the epilogue to each BLAS block on its thread measured no faster and took
more CPU time (see ``conv_blocks``, "The store").
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
import numpy as np

from ..hlo.ir import Computation, Instruction
from ..hlo.low_precision import widen_shape
from .bf16_arrays import round_to_bf16
from .conv_blocks import blocked_refusal, BlockedConvolution, takes_native

_TYPES = {"f32", "f64", "bf16"}


@dataclass(frozen=True)
class BiasActivation:
    """The epilogue of one folded convolution."""
    bias_parameter: int | None      # the fusion's parameter holding the bias (None: constant or none)
    bias_constant: np.ndarray | None
    lower: float | None             # clamp bounds (None: unbounded)
    upper: float | None
    bf16: bool = False              # the convolution and its epilogue on bf16 (see the docstring)

    @property
    def has_bias(self) -> bool:
        return self.bias_parameter is not None or self.bias_constant is not None


def takes_dense(conv: Instruction) -> bool:
    """Does the blocked path's native kernel take the dense convolution ``conv`` with an
    epilogue?"""
    types = {conv.shape.element_type} | {o.shape.element_type for o in conv.operands}
    wide = widened(conv)
    return len(types) == 1 and types <= _TYPES and conv.attrs.get("feature_group_count", 1) == 1 and \
        conv.attrs.get("batch_group_count", 1) == 1 and blocked_refusal(wide) is None and takes_native(wide)


def widened(conv: Instruction):
    """``conv`` as the f32 convolution the kernel computes (a bf16 one's operands widened)."""
    if conv.shape.element_type != "bf16":
        return conv
    return SimpleNamespace(opcode="convolution", name=conv.name, attrs=conv.attrs, shape=widen_shape(conv.shape),
                           operands=[SimpleNamespace(shape=widen_shape(o.shape)) for o in conv.operands])


def dense_convolution(comp: Computation) -> Instruction | None:
    """The dense convolution a folded fusion computation holds (None: none, or not dense)."""
    convs = [i for i in comp.instructions if i.opcode == "convolution"]
    if len(convs) != 1 or convs[0].attrs.get("feature_group_count", 1) != 1:
        return None
    return convs[0]


def bias_activation(comp: Computation, conv: Instruction) -> BiasActivation | None:
    """The recognized epilogue of ``comp`` (which holds ``conv``), or None."""
    t, dims = conv.shape.element_type, conv.shape.dims
    if comp.root.shape.is_tuple or comp.root.shape.element_type != t or comp.root.shape.dims != dims:
        return None
    v, lower, upper = comp.root, None, None
    if v.opcode == "clamp":
        lower, upper = _scalar(v.operands[0], t), _scalar(v.operands[2], t)
        if lower is None or upper is None:
            return None
        v = v.operands[1]
    else:
        # up to two nested maximum / minimum with a scalar constant, at most one of each
        for _ in range(2):
            if not (v.opcode == "maximum" and lower is None or v.opcode == "minimum" and upper is None):
                break
            split = _with_scalar(v, t)
            if split is None:
                return None
            if v.opcode == "maximum":
                lower, v = split
            else:
                upper, v = split
    if lower is not None and upper is not None and not lower <= upper:
        return None
    if v.shape.dims != dims or v.shape.element_type != t:
        return None
    bf16 = t == "bf16"
    if v is conv:
        return BiasActivation(None, None, lower, upper, bf16)
    if v.opcode != "add" or not any(o is conv for o in v.operands) or v.operands[0] is v.operands[1]:
        return None
    b = v.operands[1] if v.operands[0] is conv else v.operands[0]
    feature = conv.attrs["dim_labels"].output_feature
    if b.opcode != "broadcast" or tuple(b.attrs.get("dimensions", ())) != (feature,) or \
            b.operands[0].shape.element_type != t or b.operands[0].shape.dims != (dims[feature],):
        return None
    source = b.operands[0]
    if source.opcode == "parameter":
        return BiasActivation(source.parameter_number, None, lower, upper, bf16)
    if source.opcode == "constant":
        return BiasActivation(None, np.ascontiguousarray(source.literal, dtype=source.shape.dtype), lower, upper,
                              bf16)
    return None


def _with_scalar(instr: Instruction, t: str) -> tuple[float, Instruction] | None:
    """(the scalar constant, the other operand) of a binary op with one, or None."""
    for k in (0, 1):
        bound = _scalar(instr.operands[k], t)
        if bound is not None:
            return bound, instr.operands[1 - k]
    return None


def _scalar(instr: Instruction, t: str) -> float | None:
    """The value of a broadcast rank-0 constant of type ``t`` (None: not one, or NaN)."""
    if instr.opcode != "broadcast" or instr.operands[0].opcode != "constant" or instr.operands[0].shape.dims:
        return None
    if instr.shape.element_type != t:
        return None
    value = float(np.asarray(instr.operands[0].literal))
    return None if value != value else value


class ConvolutionWithEpilogue:
    """A fusion holding a dense convolution (of two of its parameters) and its recognized
    epilogue, run by the blocked path's native kernel (the library call of such a fusion)."""

    def __init__(self, fusion: Instruction):
        comp = fusion.attrs["calls"]
        conv = dense_convolution(comp)
        self.epilogue = bias_activation(comp, conv) if conv is not None else None
        if conv is None or self.epilogue is None or not takes_dense(conv) or \
                any(o.opcode != "parameter" for o in conv.operands):
            raise ValueError(f"fusion %{fusion.name} is no dense convolution with a bias / activation "
                             "epilogue (conv_epilogue folds only those)")
        self.operand_at = [o.parameter_number for o in conv.operands]
        self.inner = BlockedConvolution(widened(conv), self.epilogue)
        self.bf16 = self.epilogue.bf16
        weights = fusion.operands[self.operand_at[1]]
        if weights.opcode == "constant":
            self.inner.fix_kernel(weights.literal)
        e = self.epilogue
        parts = (["bias"] if e.has_bias else []) + ([f"max {e.lower:g}"] if e.lower is not None else []) + \
            ([f"min {e.upper:g}"] if e.upper is not None else [])
        self.how = f"{self.inner.how}, {', '.join(parts) or 'nothing'} applied in its kernel"

    def __call__(self, operands: list[np.ndarray]) -> np.ndarray:
        e = self.epilogue
        bias = operands[e.bias_parameter] if e.bias_parameter is not None else e.bias_constant
        # (bf16 operands are widened by the blocked path's own copies; its f32 result holds
        # bf16 values already, rounded in the kernel: the conversion is exact)
        result = self.inner([operands[k] for k in self.operand_at], bias)
        return round_to_bf16(result) if self.bf16 else result
