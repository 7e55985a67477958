"""The HLO opcode vocabulary, spelled as in XLA's text form.

Every opcode listed here has a shape rule (``shape_inference``), a reference rule
(``evaluator``) and, later, a codegen rule; ``tests/test_opcode_tables.py`` checks that the
tables cover the same set.
"""

from __future__ import annotations

from dataclasses import dataclass

VARIADIC = -1


@dataclass(frozen=True)
class OpcodeInfo:
    name: str
    arity: int            # number of operands, or VARIADIC
    elementwise: bool = False


UNARY_ELEMENTWISE = (
    "abs", "negate", "exponential", "exponential-minus-one", "log", "log-plus-one", "sqrt",
    "rsqrt", "cbrt", "tanh", "logistic", "sine", "cosine", "tan", "erf", "floor", "ceil",
    "round-nearest-even", "round-nearest-afz", "sign", "not", "is-finite", "popcnt",
    "count-leading-zeros", "real", "imag", "convert", "bitcast-convert", "reduce-precision",
    "copy",
)
BINARY_ELEMENTWISE = (
    "add", "subtract", "multiply", "divide", "remainder", "power", "maximum", "minimum",
    "and", "or", "xor", "atan2", "complex", "shift-left", "shift-right-arithmetic",
    "shift-right-logical", "compare",
)
TERNARY_ELEMENTWISE = ("select", "clamp")

# Opcodes that are not elementwise, with their operand count.
_OTHER = {
    "parameter": 0, "constant": 0, "iota": 0,
    "broadcast": 1, "reshape": 1, "transpose": 1, "slice": 1, "reverse": 1, "bitcast": 1,
    "pad": 2, "dynamic-slice": VARIADIC, "dynamic-update-slice": VARIADIC,
    "concatenate": VARIADIC, "reduce": VARIADIC, "reduce-window": VARIADIC, "dot": 2,
    "convolution": 2, "gather": 2, "scatter": VARIADIC, "sort": VARIADIC, "while": 1,
    "conditional": VARIADIC, "call": VARIADIC, "tuple": VARIADIC, "get-tuple-element": 1,
    "fusion": VARIADIC, "custom-call": VARIADIC, "rng-bit-generator": 1,
    "select-and-scatter": 3, "fft": 1, "topk": 1, "opt-barrier": 1,
}

OPCODES: dict[str, OpcodeInfo] = {}
for _name in UNARY_ELEMENTWISE:
    OPCODES[_name] = OpcodeInfo(_name, 1, True)
for _name in BINARY_ELEMENTWISE:
    OPCODES[_name] = OpcodeInfo(_name, 2, True)
for _name in TERNARY_ELEMENTWISE:
    OPCODES[_name] = OpcodeInfo(_name, 3, True)
for _name, _arity in _OTHER.items():
    OPCODES[_name] = OpcodeInfo(_name, _arity)

# Ops whose called computations are applied to scalars (the reducer / comparator).
COMPARISON_DIRECTIONS = ("EQ", "NE", "LT", "LE", "GT", "GE")
COMPARISON_TYPES = ("FLOAT", "TOTALORDER", "SIGNED", "UNSIGNED")

# Names people reach for (NumPy, JAX, MLIR) -> the HLO opcode; used for "did you mean" hints.
FAMILIAR_NAMES = {
    "exp": "exponential", "expm1": "exponential-minus-one", "log1p": "log-plus-one",
    "neg": "negate", "sub": "subtract", "mul": "multiply", "div": "divide", "rem": "remainder",
    "pow": "power", "max": "maximum", "min": "minimum", "sin": "sine", "cos": "cosine",
    "sigmoid": "logistic", "round": "round-nearest-even", "eq": "compare", "lt": "compare",
    "where": "select", "matmul": "dot", "dot_general": "dot", "concat": "concatenate",
    "gte": "get-tuple-element", "broadcast_in_dim": "broadcast", "convert_element_type": "convert",
}
