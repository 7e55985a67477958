"""Instructions, computations and modules.

The IR is a plain object graph: an ``Instruction`` holds its operands (other instructions of
the same computation), its shape and its attributes; a ``Computation`` holds its
instructions in a valid order (operands before users) and a root; a ``Module`` holds
computations, the entry one last.  Names are unique within a module.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from ..errors import HloVerificationError
from .attributes import ATTRIBUTE_KINDS, COMPUTATION_ATTRS
from .opcodes import OPCODES, VARIADIC
from .shapes import AnyShape

_COMPUTATION_KEYS = frozenset(COMPUTATION_ATTRS)


@dataclass(frozen=True)
class SourceLocation:
    """Where an instruction came from: a file (or notebook cell) and a line."""
    file: str
    line: int
    column: int | None = None
    function: str | None = None
    source: str | None = field(default=None, compare=False)   # the line's text, for messages

    def __str__(self) -> str:
        return f"{self.file}:{self.line}" + (f":{self.column}" if self.column else "")


class Instruction:
    """One HLO instruction.  ``attrs`` holds typed attributes (see ``attributes.py``)."""

    __slots__ = ("name", "opcode", "operands", "shape", "attrs", "location", "parent")

    def __init__(self, opcode: str, shape: AnyShape, operands: Iterable["Instruction"] = (),
                 attrs: dict | None = None, name: str | None = None,
                 location: SourceLocation | None = None):
        if opcode not in OPCODES:
            raise HloVerificationError(f"unknown opcode {opcode!r}")
        self.opcode = opcode
        self.shape = shape
        self.operands = list(operands)
        self.attrs = dict(attrs or {})
        self.name = name or opcode
        self.location = location
        self.parent: Computation | None = None

    @property
    def called_computations(self) -> list["Computation"]:
        # (most instructions call nothing: one C-level test of their few attributes instead
        # of ten lookups -- walks of a traced loop nest ask this ~50K times per compile)
        if _COMPUTATION_KEYS.isdisjoint(self.attrs):
            return []
        out = []
        for key in COMPUTATION_ATTRS:
            value = self.attrs.get(key)
            if value is None:
                continue
            out.extend(value if ATTRIBUTE_KINDS[key] == "computations" else [value])
        return out

    @property
    def is_elementwise(self) -> bool:
        return OPCODES[self.opcode].elementwise

    @property
    def parameter_number(self) -> int:
        return self.attrs["parameter_number"]

    @property
    def literal(self):
        """The value of a ``constant`` (a NumPy array)."""
        return self.attrs["literal"]

    def __repr__(self) -> str:
        return f"<{self.opcode} %{self.name}: {self.shape}>"


class Computation:
    """A list of instructions in dependency order with one ROOT."""

    def __init__(self, name: str, instructions: Iterable[Instruction] = (),
                 root: Instruction | None = None):
        self.name = name
        self.instructions: list[Instruction] = []
        for instr in instructions:
            self.add(instr)
        self.root = root if root is not None else (self.instructions[-1] if self.instructions else None)
        self.parent: Module | None = None

    def add(self, instr: Instruction) -> Instruction:
        instr.parent = self
        self.instructions.append(instr)
        return instr

    @property
    def parameters(self) -> list[Instruction]:
        params = [i for i in self.instructions if i.opcode == "parameter"]
        return sorted(params, key=lambda p: p.parameter_number)

    @property
    def parameter_shapes(self) -> list[AnyShape]:
        return [p.shape for p in self.parameters]

    @property
    def result_shape(self) -> AnyShape:
        return self.root.shape

    def users(self) -> dict[Instruction, list[Instruction]]:
        """Map from each instruction to the instructions that use it (in order, no repeats)."""
        users: dict[Instruction, list[Instruction]] = {i: [] for i in self.instructions}
        for instr in self.instructions:
            for op in dict.fromkeys(instr.operands):
                users[op].append(instr)
        return users

    def post_order(self) -> list[Instruction]:
        """Instructions reachable from the root (plus parameters), operands first."""
        order = post_order(self.root)
        seen = {id(i) for i in order}
        params = [p for p in self.parameters if id(p) not in seen]
        return params + order

    def sort_topologically(self) -> None:
        """Reorder instructions so operands come first, keeping the current order where valid.

        Raises ``CycleError`` (naming an instruction on the cycle) if there is none.
        """
        state: dict[int, int] = {}      # 1: on the stack, 2: placed
        order: list[Instruction] = []
        for start in self.instructions:
            if id(start) in state:
                continue
            stack = [(start, iter(start.operands))]
            state[id(start)] = 1
            while stack:
                instr, operands = stack[-1]
                for op in operands:
                    mark = state.get(id(op))
                    if mark == 1:
                        raise CycleError(op, f"%{self.name}: instruction %{op.name} depends on itself (cycle)")
                    if mark is None:
                        state[id(op)] = 1
                        stack.append((op, iter(op.operands)))
                        break
                else:
                    stack.pop()
                    state[id(instr)] = 2
                    order.append(instr)
        self.instructions = order

    def replace_all_uses(self, old: Instruction, new: Instruction) -> None:
        for instr in self.instructions:
            instr.operands = [new if op is old else op for op in instr.operands]
        if self.root is old:
            self.root = new

    def remove(self, instr: Instruction) -> None:
        self.instructions.remove(instr)
        instr.parent = None

    def __iter__(self) -> Iterator[Instruction]:
        return iter(self.instructions)

    def __repr__(self) -> str:
        return f"<Computation %{self.name}: {len(self.instructions)} instructions>"


class Module:
    """Computations (the entry last), module-level header attributes and debug tables."""

    def __init__(self, name: str, entry: Computation | None = None):
        self.name = name
        self.computations: list[Computation] = []
        self.entry: Computation | None = None
        self.header: dict[str, str] = {}          # raw header attributes (is_scheduled=true, ...)
        self.debug_sections: dict[str, list[tuple[int, str]]] = {}  # FileNames, StackFrames...
        if entry is not None:
            self.set_entry(entry)

    def add_computation(self, comp: Computation) -> Computation:
        names = self.computation_names()
        # (a set, not a scan: fusion adds thousands of computations to unrolled programs;
        # a hit is confirmed by a scan, as a computation may have been renamed since)
        if comp.name in names and any(c.name == comp.name for c in self.computations):
            raise HloVerificationError(f"module {self.name} already has a computation named {comp.name}")
        comp.parent = self
        self.computations.append(comp)
        names.add(comp.name)
        self._names_of[2] = len(self.computations)
        return comp

    def computation_names(self) -> set[str]:
        """The computations' names, rebuilt whenever ``computations`` was replaced or changed
        length behind ``add_computation``'s back."""
        cached = getattr(self, "_names_of", None)
        if cached is None or cached[0] is not self.computations or cached[2] != len(self.computations):
            cached = [self.computations, {c.name for c in self.computations}, len(self.computations)]
            self._names_of = cached
        return cached[1]

    def set_entry(self, entry: Computation) -> None:
        """Make ``entry`` the entry computation, adding it and every computation it calls."""
        for comp in _callees_post_order(entry):
            if comp not in self.computations:
                self.add_computation(comp)
        self.entry = entry

    def computation(self, name: str) -> Computation:
        for comp in self.computations:
            if comp.name == name:
                return comp
        raise KeyError(name)

    def computations_post_order(self) -> list[Computation]:
        """Every computation reachable from the entry, callees before callers."""
        return _callees_post_order(self.entry)

    def instructions(self) -> Iterator[Instruction]:
        for comp in self.computations:
            yield from comp.instructions

    def make_names_unique(self) -> None:
        """Rename instructions and computations so that every name is unique in the module."""
        taken: set[str] = set()
        for comp in self.computations:
            comp.name = _fresh(comp.name, taken)
        for instr in self.instructions():
            instr.name = _fresh(instr.name, taken)

    def __str__(self) -> str:
        from .printer import print_module
        return print_module(self)

    def __repr__(self) -> str:
        return f"<Module {self.name}: {len(self.computations)} computations>"


def _fresh(name: str, taken: set[str]) -> str:
    if name not in taken:
        taken.add(name)
        return name
    base = re.sub(r"\.\d+$", "", name)
    for n in itertools.count(1):
        candidate = f"{base}.{n}"
        if candidate not in taken:
            taken.add(candidate)
            return candidate
    raise AssertionError("unreachable")


def program_callees(instr: Instruction) -> list[Computation]:
    """The computations ``instr`` runs as programs of their own (a ``while``'s condition and
    body, a ``conditional``'s branches, a ``call``'s callee); not reducers, comparators or
    fusion bodies, which are parts of one kernel."""
    at = instr.attrs
    if instr.opcode == "while":
        return [at["condition"], at["body"]]
    if instr.opcode == "conditional":
        return list(at["branch_computations"]) if "branch_computations" in at else \
            [at["true_computation"], at["false_computation"]]
    if instr.opcode == "call":
        return [at["to_apply"]]
    return []


def post_order(root: Instruction) -> list[Instruction]:
    """Instructions reachable from ``root``, operands before users (iterative: deep graphs)."""
    order, seen, stack = [], set(), [(root, False)]
    while stack:
        instr, expanded = stack.pop()
        if expanded:
            order.append(instr)
            continue
        if id(instr) in seen:
            continue
        seen.add(id(instr))
        stack.append((instr, True))
        stack.extend((op, False) for op in reversed(instr.operands) if id(op) not in seen)
    return order


def _callees_post_order(root: Computation) -> list[Computation]:
    order: list[Computation] = []
    seen: set[int] = set()

    def visit(comp: Computation) -> None:
        if id(comp) in seen:
            return
        seen.add(id(comp))
        for instr in comp.instructions:
            for callee in instr.called_computations:
                visit(callee)
        order.append(comp)

    visit(root)
    return order


class CycleError(HloVerificationError):
    def __init__(self, instr: Instruction, message: str):
        self.instruction = instr
        super().__init__(message)


def check_operand_count(instr: Instruction) -> None:
    arity = OPCODES[instr.opcode].arity
    if arity != VARIADIC and len(instr.operands) != arity:
        raise HloVerificationError(
            f"{instr.opcode} %{instr.name} takes {arity} operand(s) but has {len(instr.operands)}")


def clone_module(module: Module) -> Module:
    """A deep copy (instructions, computations, attributes) sharing nothing mutable."""
    comp_map: dict[int, Computation] = {}
    for comp in module.computations:
        comp_map[id(comp)] = Computation(comp.name)

    def remap(value):
        if isinstance(value, Computation):
            return comp_map[id(value)]
        if isinstance(value, tuple) and value and all(isinstance(v, Computation) for v in value):
            return tuple(comp_map[id(v)] for v in value)
        return value

    clone = Module(module.name)
    for comp in module.computations:
        new = comp_map[id(comp)]
        instr_map: dict[int, Instruction] = {}
        for instr in comp.instructions:
            copy = Instruction(instr.opcode, instr.shape, [instr_map[id(o)] for o in instr.operands],
                               {k: remap(v) for k, v in instr.attrs.items()}, instr.name, instr.location)
            instr_map[id(instr)] = copy
            new.add(copy)
        new.root = instr_map[id(comp.root)]
        clone.add_computation(new)
    clone.entry = comp_map[id(module.entry)]
    clone.header = dict(module.header)
    clone.debug_sections = {k: list(v) for k, v in module.debug_sections.items()}
    return clone
