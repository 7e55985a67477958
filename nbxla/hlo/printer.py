"""Print modules in XLA's HLO text form.

    HloModule m, entry_computation_layout={(f32[8]{0})->f32[8]{0}}

    ENTRY %main (x: f32[8]) -> f32[8] {
      %x = f32[8]{0} parameter(0)
      ROOT %neg = f32[8]{0} negate(f32[8]{0} %x)
    }

``print_module(parse_hlo(text))`` is stable, and ``parse_hlo(print_module(m))`` equals ``m``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .attributes import Metadata, attribute_to_text
from .shapes import is_complex, is_float, is_low_precision, to_numpy_dtype

if TYPE_CHECKING:                       # (ir prints itself through this module)
    from .ir import Computation, Instruction, Module

# Attributes stored on instructions but printed inside the parentheses, not as name=value.
INTERNAL_ATTRS = ("parameter_number", "literal", "elided")

# Constants with more elements than this print in full only where the text must read back
# (``print_module`` by default): printing a 100 000-element constant (an ``np.empty`` output
# made a constant by the writes into it) takes about a second, and keys and per-pass records
# printed it several times per compilation.
LARGE_CONSTANT_ELEMENTS = 1024


@dataclass(frozen=True)
class PrintOptions:
    operand_shapes: bool = True   # "add(f32[8]{0} %x, ...)" as XLA prints by default
    metadata: bool = True
    debug_sections: bool = True   # FileNames / StackFrames tables exported by JAX
    # Large constants: "full" (reads back), "digest" (a hash of the bytes: for keys, equal text
    # exactly when the values are equal) or "elide" ("{...}", as XLA's dumps print them).
    large_constants: str = "full"


def print_module(module: Module, options: PrintOptions = PrintOptions()) -> str:
    header = f"HloModule {module.name}"
    header_attrs = dict(module.header)
    if module.entry is not None:
        header_attrs.setdefault("entry_computation_layout", _entry_layout(module.entry))
    for key, value in header_attrs.items():
        header += f", {key}={value}"
    parts = [header]
    if options.debug_sections:
        for section, rows in module.debug_sections.items():
            parts.append("\n".join([section] + [f"{i} {rest}" for i, rest in rows]))
    ordered = [c for c in module.computations if c is not module.entry]
    if module.entry is not None:
        ordered.append(module.entry)
    parts += [print_computation(c, c is module.entry, options) for c in ordered]
    return "\n\n".join(parts) + "\n"


def _entry_layout(entry: Computation) -> str:
    params = ", ".join(str(s) for s in entry.parameter_shapes)
    return "{(" + params + ")->" + str(entry.result_shape) + "}"


def print_computation(comp: Computation, is_entry: bool = False,
                      options: PrintOptions = PrintOptions()) -> str:
    params = ", ".join(f"{p.name}: {p.shape.to_text(with_layout=False)}" for p in comp.parameters)
    head = ("ENTRY " if is_entry else "") + \
        f"%{comp.name} ({params}) -> {comp.result_shape.to_text(with_layout=False)} {{"
    lines = [head]
    for instr in comp.instructions:
        lines.append("  " + ("ROOT " if instr is comp.root else "") + print_instruction(instr, options))
    lines.append("}")
    return "\n".join(lines)


def print_instruction(instr: Instruction, options: PrintOptions = PrintOptions()) -> str:
    if instr.opcode == "parameter":
        inside = str(instr.parameter_number)
    elif instr.opcode == "constant":
        inside = _constant_text(instr, options.large_constants)
    elif options.operand_shapes:
        inside = ", ".join(f"{op.shape} %{op.name}" for op in instr.operands)
    else:
        inside = ", ".join(f"%{op.name}" for op in instr.operands)
    text = f"%{instr.name} = {instr.shape} {instr.opcode}({inside})"
    attrs = {k: v for k, v in instr.attrs.items() if k not in INTERNAL_ATTRS}
    if instr.location is not None and "metadata" not in attrs:
        loc = instr.location
        attrs["metadata"] = Metadata((("source_file", loc.file), ("source_line", loc.line)))
    if not options.metadata:
        attrs.pop("metadata", None)
    for key, value in attrs.items():
        text += f", {key}={attribute_to_text(key, value)}"
    return text


def _constant_text(instr: Instruction, large: str) -> str:
    literal = instr.literal
    if instr.attrs.get("elided") and large != "digest":
        return "{...}"              # (stand-in values nobody accepted: see hlo/elided.py)
    if large == "full" or np.size(literal) <= LARGE_CONSTANT_ELEMENTS:
        return format_literal(literal, instr.shape.element_type)
    if large == "elide":
        return "{...}"
    data = np.ascontiguousarray(literal)
    return "{sha256:" + hashlib.sha256(str(data.dtype).encode() + data.tobytes()).hexdigest() + "}"


def format_scalar(value, element_type: str) -> str:
    if element_type == "pred":
        return "true" if value else "false"
    if is_complex(element_type):
        return f"({format_scalar(value.real, 'f64')}, {format_scalar(value.imag, 'f64')})"
    if is_float(element_type):
        v = value
        if np.isnan(v):
            return "-nan" if np.signbit(v) else "nan"
        if np.isinf(v):
            return "-inf" if v < 0 else "inf"
        if is_low_precision(element_type):
            v = _shortest(v, element_type)
        mag = abs(float(v))
        if mag != 0 and (mag >= 1e16 or mag < 1e-5):
            return np.format_float_scientific(v, unique=True, trim="-")
        return np.format_float_positional(v, unique=True, trim="-")
    return str(int(value))


def _shortest(value, element_type: str) -> np.float64:
    """The number with the fewest significant digits that reads back as the same bf16 / f8
    value (NumPy's shortest-repr formatting knows only its own float types): 0.1, not the
    0.10009765625 that bf16 holds."""
    dtype = to_numpy_dtype(element_type)
    for digits in range(1, 10):
        short = np.float64(f"{float(value):.{digits}g}")
        if short.astype(dtype) == value:
            return short
    return np.float64(value)          # (not reached: 9 digits tell any f32 value apart)


def format_literal(literal: np.ndarray, element_type: str) -> str:
    """A constant's value: ``3``, ``{1, 2, 3}``, ``{{1, 2}, {3, 4}}``."""
    arr = np.asarray(literal)
    if arr.ndim == 0:
        return format_scalar(arr[()], element_type)

    def nested(a):
        if a.ndim == 1:
            return "{" + ", ".join(format_scalar(x, element_type) for x in a) + "}"
        return "{" + ", ".join(nested(sub) for sub in a) + "}"
    return nested(arr)
