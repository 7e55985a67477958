"""Typed instruction attributes and the one table that says how each is spelled in text.

An instruction keeps its attributes in a dict, in text order.  ``ATTRIBUTE_KINDS`` maps an
attribute name to its kind; the parser and the printer both read this table, so a new
attribute is added in one place.  Attributes nbxla does not interpret (``sharding``,
``frontend_attributes``, ``backend_config``...) are kept as ``RawAttr`` text and printed back
unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class RawAttr:
    """An attribute kept verbatim (its text after ``name=``)."""
    text: str

    def to_text(self) -> str:
        return self.text


@dataclass(frozen=True)
class SliceDim:
    start: int
    limit: int
    stride: int = 1

    def to_text(self) -> str:
        s = f"[{self.start}:{self.limit}"
        return s + (f":{self.stride}]" if self.stride != 1 else "]")


@dataclass(frozen=True)
class PadDim:
    low: int
    high: int
    interior: int = 0

    def to_text(self) -> str:
        s = f"{self.low}_{self.high}"
        return s + (f"_{self.interior}" if self.interior else "")


@dataclass(frozen=True)
class WindowDim:
    size: int
    stride: int = 1
    pad_low: int = 0
    pad_high: int = 0
    base_dilation: int = 1      # "lhs_dilate" in text
    window_dilation: int = 1    # "rhs_dilate" in text
    reversal: bool = False


@dataclass(frozen=True)
class Window:
    dims: tuple[WindowDim, ...]

    def to_text(self) -> str:
        d = self.dims
        if not d:
            return "{}"
        parts = ["size=" + "x".join(str(w.size) for w in d)]
        if any(w.stride != 1 for w in d):
            parts.append("stride=" + "x".join(str(w.stride) for w in d))
        if any(w.pad_low or w.pad_high for w in d):
            parts.append("pad=" + "x".join(f"{w.pad_low}_{w.pad_high}" for w in d))
        if any(w.base_dilation != 1 for w in d):
            parts.append("lhs_dilate=" + "x".join(str(w.base_dilation) for w in d))
        if any(w.window_dilation != 1 for w in d):
            parts.append("rhs_dilate=" + "x".join(str(w.window_dilation) for w in d))
        if any(w.reversal for w in d):
            parts.append("rhs_reversal=" + "x".join(str(int(w.reversal)) for w in d))
        return "{" + " ".join(parts) + "}"


@dataclass(frozen=True)
class ConvDimensionNumbers:
    """Which dimension plays which role in a convolution (``dim_labels=b01f_01io->b01f``)."""
    input_batch: int
    input_feature: int
    input_spatial: tuple[int, ...]
    kernel_input_feature: int
    kernel_output_feature: int
    kernel_spatial: tuple[int, ...]
    output_batch: int
    output_feature: int
    output_spatial: tuple[int, ...]

    def to_text(self) -> str:
        def labels(rank, named, spatial):
            out = ["?"] * rank
            for ch, dim in named.items():
                out[dim] = ch
            for i, dim in enumerate(spatial):
                out[dim] = str(i)
            return "".join(out)
        n = len(self.input_spatial) + 2
        return (labels(n, {"b": self.input_batch, "f": self.input_feature}, self.input_spatial) + "_"
                + labels(n, {"i": self.kernel_input_feature, "o": self.kernel_output_feature},
                         self.kernel_spatial) + "->"
                + labels(n, {"b": self.output_batch, "f": self.output_feature}, self.output_spatial))

    @classmethod
    def from_text(cls, text: str) -> "ConvDimensionNumbers":
        """Parse ``b01f_01io->b01f``; raises ValueError on a malformed label string."""
        lhs_rhs, _, out = text.partition("->")
        lhs, _, rhs = lhs_rhs.partition("_")

        def roles(labels, named):
            pos = {}
            spatial = {}
            for i, ch in enumerate(labels):
                if ch in named:
                    if ch in pos:
                        raise ValueError(f"label {ch!r} repeated in {labels!r}")
                    pos[ch] = i
                elif ch.isdigit():
                    spatial[int(ch)] = i
                else:
                    raise ValueError(f"unexpected label {ch!r} in {labels!r}")
            if set(pos) != set(named) or sorted(spatial) != list(range(len(spatial))):
                raise ValueError(f"labels {labels!r} must contain {'/'.join(named)} and spatial digits 0..n-1")
            return pos, tuple(spatial[k] for k in sorted(spatial))

        if not (lhs and rhs and out) or not (len(lhs) == len(rhs) == len(out)):
            raise ValueError(f"dim_labels {text!r} must look like b01f_01io->b01f")
        (li, ls), (ki, ks), (oi, os_) = roles(lhs, "bf"), roles(rhs, "io"), roles(out, "bf")
        return cls(li["b"], li["f"], ls, ki["i"], ki["o"], ks, oi["b"], oi["f"], os_)


@dataclass(frozen=True)
class Metadata:
    """``metadata={op_name="..." source_file="..." source_line=3 stack_frame_id=2}``."""
    fields: tuple[tuple[str, object], ...] = field(default_factory=tuple)

    def get(self, key, default=None):
        return dict(self.fields).get(key, default)

    def to_text(self) -> str:
        parts = []
        for k, v in self.fields:
            parts.append(f"{k}={v}" if isinstance(v, int) else f'{k}="{escape(str(v))}"')
        return "{" + " ".join(parts) + "}"


def escape(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


# Attribute name -> kind.  Kinds: int, ints, bool, enum (bare word), string (quoted),
# computation, computations, slice, padding, window, dim_labels, metadata.
# Anything not listed is kept as RawAttr.
ATTRIBUTE_KINDS: dict[str, str] = {
    **dict.fromkeys(["iota_dimension", "index", "index_vector_dim", "feature_group_count",
                     "batch_group_count", "exponent_bits", "mantissa_bits", "k"], "int"),
    **dict.fromkeys(["dimensions", "slice_sizes", "dynamic_slice_sizes", "lhs_batch_dims",
                     "rhs_batch_dims", "lhs_contracting_dims", "rhs_contracting_dims",
                     "offset_dims", "collapsed_slice_dims", "start_index_map",
                     "operand_batching_dims", "start_indices_batching_dims",
                     "update_window_dims", "inserted_window_dims",
                     "scatter_dims_to_operand_dims", "input_batching_dims",
                     "scatter_indices_batching_dims", "fft_length"], "ints"),
    **dict.fromkeys(["is_stable", "indices_are_sorted", "unique_indices", "largest"], "bool"),
    **dict.fromkeys(["direction", "type", "kind", "algorithm", "api_version", "fft_type"], "enum"),
    "custom_call_target": "string",
    **dict.fromkeys(["to_apply", "calls", "condition", "body", "true_computation",
                     "false_computation", "select", "scatter"], "computation"),
    **dict.fromkeys(["branch_computations", "called_computations"], "computations"),
    "slice": "slice",
    "padding": "padding",
    "window": "window",
    "dim_labels": "dim_labels",
    "metadata": "metadata",
}

# Attributes holding called computations, in the order XLA lists them.
COMPUTATION_ATTRS = tuple(k for k, v in ATTRIBUTE_KINDS.items() if v in ("computation", "computations"))

# Attributes an instruction of these opcodes cannot do without (XLA's parser requires them
# too); the parser refuses text that leaves one out, at its line, rather than let a pass or
# the code generator look it up later and fail with a bare KeyError.
REQUIRED_ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "broadcast": ("dimensions",), "transpose": ("dimensions",), "reverse": ("dimensions",),
    "concatenate": ("dimensions",), "reduce": ("dimensions", "to_apply"),
    "sort": ("dimensions", "to_apply"), "get-tuple-element": ("index",), "fusion": ("calls",),
    "slice": ("slice",), "compare": ("direction",), "while": ("condition", "body"),
    "call": ("to_apply",), "map": ("to_apply",), "reduce-window": ("window", "to_apply"),
    "select-and-scatter": ("window", "select", "scatter"), "scatter": ("to_apply",),
    "pad": ("padding",), "iota": ("iota_dimension",), "dynamic-slice": ("dynamic_slice_sizes",),
    "fft": ("fft_type", "fft_length"), "reduce-precision": ("exponent_bits", "mantissa_bits"),
    "convolution": ("dim_labels",),
}


def attribute_to_text(name: str, value) -> str:
    """The text after ``name=`` for a typed attribute value."""
    kind = ATTRIBUTE_KINDS.get(name)
    if isinstance(value, RawAttr) or kind is None:
        return value.to_text() if hasattr(value, "to_text") else str(value)
    if kind == "int":
        return str(value)
    if kind == "ints":
        return "{" + ",".join(map(str, value)) + "}"
    if kind == "bool":
        return "true" if value else "false"
    if kind == "enum":
        return str(value)
    if kind == "string":
        return f'"{escape(value)}"'
    if kind == "computation":
        return "%" + value.name
    if kind == "computations":
        return "{" + ", ".join("%" + c.name for c in value) + "}"
    if kind == "slice":
        return "{" + ", ".join(s.to_text() for s in value) + "}"
    if kind == "padding":
        return "x".join(p.to_text() for p in value) if value else "{}"
    if kind in ("window", "metadata"):
        return value.to_text()
    if kind == "dim_labels":
        return value.to_text()
    raise AssertionError(f"attribute kind {kind} has no printer")  # table and printer disagree
