"""The HLO opcode vocabulary, spelled as in XLA's text form, and every property of an opcode
that more than one layer reads.

Every opcode listed here has a shape rule (``shape_inference.SHAPE_RULE_OPCODES``), a reference
rule (``evaluator.RULES``) and a way to run on the CPU: an elemental codegen rule
(``codegen.elemental.ELEMENTAL_RULES``) when it can sit inside a fused kernel, and an entry in
each backend's placement table (``hlo/placement.py``: CPU, CUDA, AOT -- how it runs there, or
why it cannot; ``placement.CPU_PLACEMENT`` is the prose derived from the CPU table).
``tests/hlo/test_opcode_tables.py`` checks that these tables cover the same set, so adding an
opcode means: its record here, a shape rule, an evaluator rule, a codegen rule, its placements,
an autodiff (VJP) rule or the reason it has none, and the frontend line that produces it.

Properties are named groups (frozensets) beside the records, one comment per notion: passes,
emitters and reports import them from here instead of keeping lists of their own.
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


# ---- properties read by several layers ---------------------------------------------------------

ELEMENTWISE = frozenset(op for op, info in OPCODES.items() if info.elementwise)

# Counted as transcendental in flop reports (XLA's cost analysis counts these separately from
# plain arithmetic): a libm-style polynomial or iteration per element.
TRANSCENDENTAL = frozenset({
    "exponential", "exponential-minus-one", "log", "log-plus-one", "tanh", "logistic", "power",
    "sqrt", "rsqrt", "cbrt", "sine", "cosine", "tan", "atan2", "erf"})

# Not duplicated into several consumers by fusion (XLA's IsExpensive): the transcendentals plus
# integer/float division and remainder (tens of cycles each) and reductions (a whole row per
# element).  Duplicating a cheap op costs less than a round trip through memory; these cost more.
EXPENSIVE = TRANSCENDENTAL | {"divide", "remainder", "reduce"}

# Worth storing and reading back rather than computing again inside one kernel (a row kernel
# keeps softmax's exp in the output buffer).  Narrower than TRANSCENDENTAL on purpose: sqrt,
# rsqrt and cbrt are one or a few vector instructions, cheaper than a reload.
COSTLY_TO_RECOMPUTE = TRANSCENDENTAL - {"sqrt", "rsqrt", "cbrt"}

# Computes nothing: names a value, reinterprets a buffer, or is a literal.  Never a kernel.
NOT_KERNELS = frozenset({"parameter", "constant", "tuple", "get-tuple-element", "bitcast", "reshape"})

# Moves or selects data without arithmetic: zero flops in reports (their cost is bytes).
DATA_MOVEMENT = NOT_KERNELS | {
    "broadcast", "transpose", "slice", "concatenate", "pad", "reverse", "copy", "iota",
    "dynamic-slice", "dynamic-update-slice", "gather"}

# May sit inside a loop fusion: elementwise ops and the data movement an elemental emitter reads
# through by index arithmetic, plus reduce (row and column kernels).
FUSIBLE = ELEMENTWISE | {
    "broadcast", "reshape", "transpose", "slice", "concatenate", "pad", "iota", "reverse",
    "constant", "bitcast", "reduce", "dynamic-slice", "dynamic-update-slice", "gather"}

# Same code for every element type: they move or choose values and never do arithmetic on them,
# so complex operands need no complex rule.
TYPE_AGNOSTIC = frozenset({
    "parameter", "constant", "broadcast", "reshape", "bitcast", "copy", "transpose", "slice",
    "reverse", "concatenate", "pad", "dynamic-slice", "gather", "dynamic-update-slice", "select",
    "tuple"})

# Element i of the result depends only on element i of each operand of the same element count
# (shapes may differ by a reshape): a kernel made of these indexes every buffer by one flat index.
LINEAR_INDEXABLE = frozenset({
    "parameter", "constant", "convert", "reshape", "bitcast", "copy", "select", "clamp", "compare"})

# Binary reducers / scatter combiners with a native accumulator: the called computation is this
# one op applied to (accumulator, value).
NATIVE_COMBINERS = frozenset({"add", "multiply", "maximum", "minimum", "and", "or"})

# Run as a kernel of their own when not fused (the runtime hands the code generator a computation
# of this one instruction over parameters).  A convolution the kernel refuses (dense ones) runs
# as a library call instead.
OWN_KERNEL = frozenset({"scatter", "reduce-window", "select-and-scatter", "convolution", "rng-bit-generator"})

# Run the computations they call as whole programs (every other caller applies its computation
# to scalars: a reducer, a comparator, a combiner).
PROGRAM_CALLERS = frozenset({"while", "conditional", "call", "fusion"})

# Two instructions with the same operands and attributes may still differ (random bits, external
# calls, loop state) or are not worth comparing: common-subexpression elimination leaves them.
NEVER_CSE = frozenset({"parameter", "rng-bit-generator", "custom-call", "while", "conditional"})

# Constant folding leaves them: folding would not shrink the program (literals, broadcasts of a
# scalar, iotas), would change its meaning (random bits, custom calls), or needs programs run.
NEVER_FOLD = frozenset({"parameter", "constant", "iota", "broadcast", "rng-bit-generator",
                        "custom-call", "while", "conditional", "call", "fusion", "tuple",
                        "get-tuple-element"})

for _group in (TRANSCENDENTAL, EXPENSIVE, NOT_KERNELS, DATA_MOVEMENT, FUSIBLE,
               TYPE_AGNOSTIC, LINEAR_INDEXABLE, NATIVE_COMBINERS, OWN_KERNEL, PROGRAM_CALLERS,
               NEVER_CSE, NEVER_FOLD):
    assert _group <= OPCODES.keys(), _group - OPCODES.keys()
