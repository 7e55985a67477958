"""Small helpers shared by the evaluator's rule modules (kept here to avoid import cycles)."""

from __future__ import annotations

import numpy as np

from ..errors import EvaluationError


def label(instr) -> str:
    """``%name (opcode) at file:line`` — how evaluator errors point at an instruction."""
    text = f"%{instr.name} ({instr.opcode})"
    if instr.location is not None:
        return f"{text} at {instr.location}"
    metadata = instr.attrs.get("metadata")
    source = metadata.get("source_file") if hasattr(metadata, "get") else None
    if source:
        return f"{text} at {source}:{metadata.get('source_line', '?')}"
    return text


def fail(instr, message: str) -> EvaluationError:
    """An EvaluationError that names the instruction; ``raise fail(instr, "...")``."""
    return EvaluationError(f"while evaluating {label(instr)}: {message}")


def operand_type(instr, i: int = 0) -> str:
    return instr.operands[i].shape.element_type


def unsigned_of(dtype: np.dtype) -> np.dtype:
    """The unsigned integer dtype of the same width (to work on bit patterns)."""
    return np.dtype(f"u{np.dtype(dtype).itemsize}")


def signed_of(dtype: np.dtype) -> np.dtype:
    return np.dtype(f"i{np.dtype(dtype).itemsize}")


def as_index_array(indices: np.ndarray) -> np.ndarray:
    """Integer indices as int64; huge unsigned values saturate (they are clamped later anyway)."""
    indices = np.asarray(indices)
    if indices.dtype.kind == "u" and indices.dtype.itemsize == 8:
        indices = np.minimum(indices, np.uint64(np.iinfo(np.int64).max))
    return indices.astype(np.int64)


def arange_along(n: int, axis: int, ndim: int) -> np.ndarray:
    """``arange(n)`` shaped to broadcast along ``axis`` of an ``ndim``-dimensional array."""
    shape = [1] * ndim
    shape[axis] = n
    return np.arange(n).reshape(shape)
