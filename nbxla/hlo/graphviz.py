"""Graphviz DOT view of a module: the picture behind stage ``optimized_hlo_dot``.

One node per instruction (name, opcode, shape), edges from operand to user.  A fusion is drawn
as a cluster holding its fused computation, as XLA's graph dumper does, so that what was fused
into one kernel is visible at a glance: the fusion's operands feed the fused parameters and
the fused root feeds the fusion's users.  Other called computations (a reduce's ``to_apply``,
a while's ``body``...) are named in the label, not expanded: they are small or already shown
elsewhere, and expanding them would bury the data flow.

Only the ``dot`` binary is optional (``render_svg``); producing the text never needs it.
"""

from __future__ import annotations

import shutil
import subprocess

import numpy as np

from ..errors import NbxlaError
from .attributes import COMPUTATION_ATTRS, attribute_to_text
from .ir import Computation, Instruction, Module
from .printer import format_literal

_MAX_LINE = 60          # longer label lines (big tuple shapes) are cut
_MAX_CONSTANT_VALUES = 8

# Node styles: parameters and ROOT must stand out, constants recede.
_PARAMETER = 'shape=ellipse, style=filled, fillcolor="#d6eaf8"'
_CONSTANT = 'shape=box, style="rounded,filled", fillcolor="#eeeeee"'
_ROOT = 'shape=box, style="rounded,filled,bold", fillcolor="#fdebd0", peripheries=2'
_PLAIN = 'shape=box, style=rounded'
_CLUSTER = 'style="rounded,filled"; fillcolor="#eafaf1"; color="#27ae60"'  # statements: ";" between


def quote(text: str) -> str:
    """A DOT double-quoted string whose text shows literally (newlines become line breaks).

    Backslashes are doubled first so that escapes such as ``\\l`` in user text are not
    interpreted; braces and angle brackets are literal in a quoted (non-record, non-HTML)
    label, which is why no node here uses ``shape=record``.
    """
    text = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + text.replace("\r", "").replace("\n", "\\n") + '"'


def to_dot(graph: Module | Computation, *, title: str | None = None) -> str:
    """DOT text for a module (its entry computation) or for one computation."""
    comp = graph.entry if isinstance(graph, Module) else graph
    drawer = _Drawer()
    drawer.computation(comp, depth=1)
    header = [
        f"digraph {quote(graph.name)} {{",
        "  rankdir=TB;",
        f"  label={quote(title if title is not None else graph.name)}; labelloc=t;",
        '  node [fontname="monospace", fontsize=10];',
        '  edge [fontname="monospace", fontsize=8];',
    ]
    return "\n".join(header + drawer.lines + ["}"]) + "\n"


class _Drawer:
    def __init__(self):
        self.lines: list[str] = []
        self.count = 0

    def fresh(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def computation(self, comp: Computation, depth: int) -> dict[Instruction, str]:
        """Emit ``comp``'s nodes and edges; return the node that carries each instruction's value."""
        pad = "  " * depth
        node_of: dict[Instruction, str] = {}
        for instr in comp.instructions:
            if instr.opcode == "fusion":
                node_of[instr] = self.fusion(instr, node_of, depth)
                continue
            node = self.fresh("n")
            style = _style(instr, is_root=instr is comp.root)
            self.lines.append(f"{pad}{node} [label={quote(_label(instr, instr is comp.root))}, {style}];")
            self.edges(instr.operands, [node] * len(instr.operands), node_of, pad)
            node_of[instr] = node
        return node_of

    def fusion(self, instr: Instruction, node_of: dict[Instruction, str], depth: int) -> str:
        pad = "  " * depth
        fused: Computation = instr.attrs["calls"]
        kind = instr.attrs.get("kind", "")
        self.lines.append(f"{pad}subgraph {self.fresh('cluster_')} {{")
        label = f"%{instr.name} = fusion {kind}\n{_clip(instr.shape.to_text(with_layout=False))}"
        self.lines.append(f"{pad}  label={quote(label)}; {_CLUSTER};")
        inner = self.computation(fused, depth + 1)
        self.lines.append(f"{pad}}}")
        params = fused.parameters
        self.edges(instr.operands, [inner[p] for p in params], node_of, pad)
        return inner[fused.root]

    def edges(self, operands, targets, node_of, pad) -> None:
        # Operand numbers matter for non-commutative ops; a single operand needs no label.
        numbered = len(operands) > 1
        for i, (op, target) in enumerate(zip(operands, targets)):
            attrs = f" [label={quote(str(i))}]" if numbered else ""
            self.lines.append(f"{pad}{node_of[op]} -> {target}{attrs};")


def _style(instr: Instruction, is_root: bool) -> str:
    if is_root:
        return _ROOT
    if instr.opcode == "parameter":
        return _PARAMETER
    if instr.opcode == "constant":
        return _CONSTANT
    return _PLAIN


def _label(instr: Instruction, is_root: bool) -> str:
    head = ("ROOT " if is_root else "") + "%" + instr.name
    opcode = instr.opcode
    if opcode == "parameter":
        opcode += f"({instr.parameter_number})"
    lines = [head, opcode, _clip(instr.shape.to_text(with_layout=False))]
    if instr.opcode == "constant":
        lines.append(_constant_text(instr))
    for key in ("direction", "custom_call_target"):
        if key in instr.attrs:
            lines.append(f"{key}={attribute_to_text(key, instr.attrs[key])}")
    for key in COMPUTATION_ATTRS:  # fusions never get here: they are drawn as clusters
        if key in instr.attrs:
            lines.append(_clip(f"{key}={attribute_to_text(key, instr.attrs[key])}"))
    return "\n".join(lines)


def _constant_text(instr: Instruction) -> str:
    """The value as the HLO text spells it, for small constants only."""
    literal = np.asarray(instr.literal)
    if literal.size > _MAX_CONSTANT_VALUES:
        return f"({literal.size} values)"
    return _clip(format_literal(literal, instr.shape.element_type))


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_LINE else text[:_MAX_LINE - 3] + "..."


def render_svg(dot_text: str, timeout: float = 60.0) -> str | None:
    """SVG text from Graphviz's ``dot``, or ``None`` when ``dot`` is not installed."""
    dot = shutil.which("dot")
    if dot is None:
        return None
    proc = subprocess.run([dot, "-Tsvg"], input=dot_text, capture_output=True, text=True,
                          timeout=timeout)
    if proc.returncode != 0:
        raise NbxlaError(f"Graphviz dot failed (exit {proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout
