"""Mutants of HLO text for the mutation fuzzer (tests/hlo/test_mutation_fuzz.py).

Each mutation is a small, plausible corruption of a real module: a number changed, an
element type swapped, an operand dropped, an opcode replaced, a line deleted or doubled,
parameter numbers collided, a window stride of 0, dimension numbers out of range, a
computation calling itself, deeply nested tuple shapes, dimensions beyond memory, text cut
short, bytes that are not UTF-8, an attribute left out.  ``mutate(text, rng)`` applies one,
chosen by ``rng``.
"""

from __future__ import annotations

import random
import re

_INT = re.compile(r"(?<![\w.%])\d+(?![\w.])")
_TYPE = re.compile(r"\b(pred|s8|s16|s32|s64|u8|u16|u32|u64|f16|f32|f64|c64|c128)\[")
_TYPES = ["pred", "s8", "s32", "s64", "u8", "u32", "f16", "f32", "f64", "c64"]
_OPERAND = re.compile(r",\s*(?:[a-z0-9\[\]{},]+\s+)?%[\w.\-]+")
_OPCODE = re.compile(r"= (?:[a-z0-9\[\]{},()\s]+?) ([a-z][a-z\-]*)\(")
_OPCODES = ["add", "multiply", "subtract", "divide", "maximum", "minimum", "power", "and", "or",
            "negate", "abs", "exponential", "log", "sqrt", "copy", "convert", "reshape", "transpose",
            "reduce", "broadcast", "select", "compare", "tuple", "slice", "concatenate", "gather",
            "scatter", "dot", "iota", "sort", "while", "call", "remainder", "atan2", "clamp"]
_SHAPE = re.compile(r"\b(?:pred|s8|s16|s32|s64|u8|u16|u32|u64|f16|f32|f64|c64|c128)\[[\d,]*\](?:\{[\d,]*\})?")
_DIMS_ATTR = re.compile(r"\b(dimensions|offset_dims|collapsed_slice_dims|start_index_map|index_vector_dim|"
                        r"update_window_dims|inserted_window_dims|scatter_dims_to_operand_dims|"
                        r"lhs_contracting_dims|rhs_contracting_dims|lhs_batch_dims|rhs_batch_dims|"
                        r"slice_sizes)=\{?([\d,]*)\}?")


def _sub_one(pattern, text, rng, repl):
    matches = list(pattern.finditer(text))
    if not matches:
        return None
    m = rng.choice(matches)
    return text[:m.start()] + repl(m) + text[m.end():]


def _number(text, rng):
    return _sub_one(_INT, text, rng, lambda m: str(rng.choice([0, 1, 2, 3, int(m.group()) + 1,
                                                               int(m.group()) * 7 + 5, 2 ** 31, 2 ** 40])))


def _element_type(text, rng):
    return _sub_one(_TYPE, text, rng, lambda m: rng.choice(_TYPES) + "[")


def _drop_operand(text, rng):
    return _sub_one(_OPERAND, text, rng, lambda m: "")


def _opcode(text, rng):
    def repl(m):
        whole = m.group()
        i = whole.rfind(m.group(1) + "(")
        return whole[:i] + rng.choice(_OPCODES) + "("
    return _sub_one(_OPCODE, text, rng, repl)


def _line(text, rng, duplicate):
    lines = text.splitlines(keepends=True)
    inner = [i for i, line in enumerate(lines) if "=" in line]
    if not inner:
        return None
    i = rng.choice(inner)
    lines[i:i + 1] = [lines[i], lines[i]] if duplicate else []
    return "".join(lines)


def _parameter_number(text, rng):
    return _sub_one(re.compile(r"parameter\((\d+)\)"), text, rng,
                    lambda m: f"parameter({rng.choice([0, 1, 7, int(m.group(1)) + 1])})")


def _stride_zero(text, rng):
    out = _sub_one(re.compile(r"stride=[\dx]+"), text, rng,
                   lambda m: "stride=" + "x".join("0" for _ in m.group()[7:].split("x")))
    return out or _sub_one(re.compile(r"\[(\d+):(\d+)(?::\d+)?\]"), text, rng,
                           lambda m: f"[{m.group(1)}:{m.group(2)}:0]")


def _dimension_numbers(text, rng):
    def repl(m):
        values = [v for v in m.group(2).split(",") if v] or ["0"]
        k = rng.randrange(len(values))
        values[k] = str(rng.choice([-1, 5, 9, 64, int(values[k]) + 1]))
        braced = "{" in m.group()
        return f"{m.group(1)}=" + ("{" + ",".join(values) + "}" if braced else values[0])
    return _sub_one(_DIMS_ATTR, text, rng, repl)


def _recursive(text, rng):
    comps = re.findall(r"^%?([\w.\-]+)\s*(?:\([^\n]*\))?[^\n]*\{\s*$", text, re.M)
    target = re.search(r"(to_apply|calls|body|condition)=%?([\w.\-]+)", text)
    if not comps or target is None:
        return None
    # Make the called computation call the one that calls it (or itself).
    return text.replace(f"{target.group(1)}={target.group(2) if not text[target.start(2) - 1] == '%' else '%' + target.group(2)}",
                        f"{target.group(1)}=%{rng.choice(comps)}", 1)


def _nested_tuple(text, rng):
    depth = rng.choice([40, 400, 3000])
    return _sub_one(_SHAPE, text, rng, lambda m: "(" * depth + m.group() + ")" * depth)


def _huge_dims(text, rng):
    return _sub_one(re.compile(r"\b(f32|f64|s32)\[(\d+)"), text, rng,
                    lambda m: f"{m.group(1)}[{rng.choice([10 ** 12, 2 ** 40, 2 ** 62])}")


def _drop_attribute(text, rng):
    """An attribute left out (``broadcast(...)`` without ``dimensions``): found by issue 28's
    fuzzing as a KeyError in the passes, now refused by the parser at its line."""
    return _sub_one(re.compile(r",\s*\w+=(?:\{[^}]*\}|[^,\s)]+)"), text, rng, lambda m: "")


def _truncate(text, rng):
    return text[:rng.randrange(1, max(2, len(text)))]


MUTATIONS = [_number, _element_type, _drop_operand, _opcode, lambda t, r: _line(t, r, False),
             lambda t, r: _line(t, r, True), _parameter_number, _stride_zero, _dimension_numbers,
             _recursive, _nested_tuple, _huge_dims, _truncate, _drop_attribute]


def mutate(text: str, rng: random.Random) -> bytes:
    """One mutant of ``text`` as bytes (one in 20 also gets bytes that are not UTF-8)."""
    for _ in range(10):
        out = rng.choice(MUTATIONS)(text, rng)
        if out is not None and out != text:
            break
    else:
        out = text + "\n"
    data = out.encode()
    if rng.random() < 0.05:
        at = rng.randrange(len(data) + 1)
        data = data[:at] + b"\xff\xfe" + data[at:]
    return data
