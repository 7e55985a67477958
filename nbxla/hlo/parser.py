"""Read HLO text: nbxla's own printed form and real modules exported by JAX / TensorFlow.

Accepted: optional ``%`` sigils, optional operand shapes, layouts (tiling suffixes skipped),
``/*index=5*/`` comments, metadata, frontend attributes, sharding, backend configs (kept
verbatim), the ``FileNames``/``FunctionNames``/``FileLocations``/``StackFrames`` tables
(used to give instructions source locations), forward references.  Anything malformed is an
``HloParseError`` that starts with ``file:line:column``; after parsing, every instruction's
written shape is checked against shape inference.
"""

from __future__ import annotations

import bisect
import difflib
import re

import numpy as np

from ..errors import HloParseError, HloShapeError, NbxlaError
from .elided import ELIDED, fill_values
from .attributes import (ATTRIBUTE_KINDS, REQUIRED_ATTRIBUTES, ConvDimensionNumbers, Metadata, PadDim,
                         RawAttr, SliceDim, Window, WindowDim)
from .ir import Computation, CycleError, Instruction, Module, SourceLocation
from .opcodes import COMPARISON_DIRECTIONS, FAMILIAR_NAMES, OPCODES, VARIADIC
from .shape_inference import infer_shape
from .shapes import ELEMENT_TYPES, Shape, SymDim, TupleShape, is_complex, is_float

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")
# An unknown dimension: a symbol, possibly a whole multiple of one (``b``, ``64*b``).
_SYMBOLIC_DIM = re.compile(r"(?:([0-9]+)\*)?([A-Za-z_][A-Za-z0-9_]*)")
MAX_TUPLE_DEPTH = 32         # deeper tuple shapes: refused (Python recursion would run out first)
_INT = re.compile(r"[+-]?\d+")
_DEBUG_SECTIONS = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")


def parse_hlo(text: str | bytes, filename: str = "<hlo>", verify: bool = True) -> Module:
    """Parse HLO module text into a ``Module`` (checking shapes unless ``verify=False``).

    Every problem is an ``HloParseError`` with ``file:line:column``: malformed text that
    trips anything else here (a nesting too deep for Python's stack, a value no attribute
    parser expected) is reported at the position the parser had reached."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as e:
            good = text[:e.start].decode("utf-8")
            line, column = good.count("\n") + 1, len(good) - (good.rfind("\n") + 1) + 1
            raise HloParseError(f"the file is not UTF-8 text (byte 0x{text[e.start]:02x} at offset "
                                f"{e.start}); HLO text is UTF-8", filename, line, column) from None
    parser = _Parser(text, filename)
    try:
        return parser.parse_module(verify)
    except NbxlaError:
        raise
    except RecursionError:
        raise parser.error("the text nests too deeply (tuple shapes, braces or parentheses) "
                           "for the parser") from None
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, ArithmeticError) as e:
        raise parser.error(f"malformed HLO here ({type(e).__name__}: {e})") from None


class _Parser:
    def __init__(self, text: str, filename: str):
        self.text, self.filename, self.pos = text, filename, 0
        self.line_starts = [0] + [m.end() for m in re.finditer(r"\n", text)]
        self.where: dict[int, int] = {}        # id(instruction or computation) -> text offset
        self.pending: list[tuple[Instruction, str, list[tuple[str, int]] | tuple[str, int]]] = []

    # ---- low-level cursor ---------------------------------------------------------------------

    def error(self, message: str, pos: int | None = None) -> HloParseError:
        pos = self.pos if pos is None else pos
        line = bisect.bisect_right(self.line_starts, pos)
        start = self.line_starts[line - 1]
        end = self.text.find("\n", start)
        source = self.text[start:end if end >= 0 else len(self.text)]
        return HloParseError(message, self.filename, line, pos - start + 1, source)

    def skip_ws(self) -> None:
        text, n = self.text, len(self.text)
        while self.pos < n:
            c = text[self.pos]
            if c in " \t\r\n":
                self.pos += 1
            elif text.startswith("/*", self.pos):
                end = text.find("*/", self.pos)
                if end < 0:
                    raise self.error("unterminated /* comment")
                self.pos = end + 2
            elif text.startswith("//", self.pos) or c == "#":
                end = text.find("\n", self.pos)
                self.pos = n if end < 0 else end
            else:
                return

    def peek(self, s: str) -> bool:
        self.skip_ws()
        return self.text.startswith(s, self.pos)

    def accept(self, s: str) -> bool:
        if self.peek(s):
            self.pos += len(s)
            return True
        return False

    def expect(self, s: str, what: str | None = None) -> None:
        if not self.accept(s):
            found = self.text[self.pos:self.pos + 12].split("\n")[0] or "end of text"
            raise self.error(f"expected {what or repr(s)}, found {found!r}")

    def name(self, what: str = "a name") -> str:
        self.skip_ws()
        self.accept("%")
        m = _NAME.match(self.text, self.pos)
        if not m:
            raise self.error(f"expected {what}")
        self.pos = m.end()
        return m.group()

    def integer(self, what: str = "an integer") -> int:
        self.skip_ws()
        m = _INT.match(self.text, self.pos)
        if not m:
            raise self.error(f"expected {what}")
        self.pos = m.end()
        return int(m.group())

    def dimension(self):
        """A dimension size: ``64``, or an unknown one, a size symbol ``b`` or ``64*b``."""
        self.skip_ws()
        m = _SYMBOLIC_DIM.match(self.text, self.pos)
        if m:
            self.pos = m.end()
            return SymDim(m.group(2), int(m.group(1)) if m.group(1) else 1)
        return self.integer("a dimension size")

    def raw_value(self) -> tuple[str, int]:
        """Text of an attribute value: up to a top-level comma, whitespace or closing bracket."""
        self.skip_ws()
        start, depth, i, text = self.pos, 0, self.pos, self.text
        while i < len(text):
            c = text[i]
            if c == '"':
                i = self._string_end(i)
                continue
            if c in "{([":
                depth += 1
            elif c in "})]":
                if depth == 0:
                    break
                depth -= 1
            elif depth == 0 and (c == "," or c.isspace()):
                break
            i += 1
        if depth:
            raise self.error("unbalanced brackets in attribute value", start)
        if i == start:
            raise self.error("expected an attribute value", start)
        self.pos = i
        return text[start:i], start

    def _string_end(self, i: int) -> int:
        j = i + 1
        while j < len(self.text):
            if self.text[j] == "\\":
                j += 2
                continue
            if self.text[j] == '"':
                return j + 1
            if self.text[j] == "\n":
                break
            j += 1
        raise self.error("unterminated string", i)

    # ---- module structure ---------------------------------------------------------------------

    def parse_module(self, verify: bool) -> Module:
        self.skip_ws()
        # The header line is optional, as in XLA's tools and test files (text that starts
        # with its computations); such a module is named after its ENTRY computation.
        named = self.accept("HloModule")
        if not named and not _NAME.match(self.text, self.pos) and not self.peek("%"):
            raise self.error("HLO text must start with 'HloModule <name>' or with a computation "
                             "(e.g. 'ENTRY %main (p: f32[4]) -> f32[4] {')")
        module = Module(self.name("a module name") if named else "")
        while named and self.accept(","):
            key = self.name("a module attribute")
            self.expect("=")
            module.header[key] = self.raw_value()[0]
        self.parse_debug_sections(module)
        entry = None
        while True:
            self.skip_ws()
            if self.pos >= len(self.text):
                break
            is_entry = self.accept("ENTRY")
            comp = self.parse_computation()
            module.add_computation(comp)
            if is_entry:
                if entry is not None:
                    raise self.error("a module has one ENTRY computation", self.where[id(comp)])
                entry = comp
        if not module.computations:
            raise self.error("module has no computations")
        module.entry = entry or module.computations[-1]
        if not named:
            module.name = module.entry.name
        self.resolve_computation_references(module)
        self.resolve_locations(module)
        if verify:
            self.verify(module)
        return module

    def parse_debug_sections(self, module: Module) -> None:
        while True:
            self.skip_ws()
            m = _NAME.match(self.text, self.pos)
            if not m or m.group() not in _DEBUG_SECTIONS:
                return
            self.pos = m.end()
            rows = []
            while True:
                self.skip_ws()
                row = re.compile(r"(\d+)[ \t]+([^\n]*)").match(self.text, self.pos)
                if not row:
                    break
                rows.append((int(row.group(1)), row.group(2).rstrip()))
                self.pos = row.end()
            module.debug_sections[m.group()] = rows

    def parse_computation(self) -> Computation:
        self.skip_ws()
        start = self.pos
        name = self.name("a computation name")
        comp = Computation(name)
        self.where[id(comp)] = start
        if self.peek("("):              # signature: (a: f32[2], b: s32[]) -> f32[2]
            self.expect("(")
            while not self.accept(")"):
                self.name("a parameter name")
                self.expect(":")
                self.shape()
                self.accept(",")
            self.expect("->")
            self.shape()
        self.expect("{", "'{' to open the computation body")
        names: dict[str, Instruction] = {}
        operand_names: dict[int, list[tuple[str, int]]] = {}
        root = None
        while not self.accept("}"):
            if self.pos >= len(self.text):
                raise self.error(f"computation %{name} is not closed with '}}'")
            is_root = self.accept("ROOT")
            instr, ops = self.parse_instruction()
            if instr.name in names:
                raise self.error(f"instruction name %{instr.name} is used twice in %{name}",
                                 self.where[id(instr)])
            names[instr.name] = instr
            operand_names[id(instr)] = ops
            comp.add(instr)
            if is_root:
                if root is not None:
                    raise self.error(f"computation %{name} has two ROOT instructions", self.where[id(instr)])
                root = instr
        if not comp.instructions:
            raise self.error(f"computation %{name} is empty", start)
        for instr in comp.instructions:
            resolved = []
            for op_name, pos in operand_names[id(instr)]:
                if op_name not in names:
                    raise self.error(f"operand %{op_name} of %{instr.name} is not defined in %{name}", pos)
                resolved.append(names[op_name])
            instr.operands = resolved
        comp.root = root or comp.instructions[-1]
        comp.instructions = self.dependency_order(comp)
        return comp

    def dependency_order(self, comp: Computation) -> list[Instruction]:
        """Keep text order where it is valid; move uses after definitions (forward refs)."""
        try:
            comp.sort_topologically()
        except CycleError as e:
            raise self.error(f"instruction %{e.instruction.name} depends on itself (cycle)",
                             self.where[id(e.instruction)]) from None
        return comp.instructions

    def parse_instruction(self) -> tuple[Instruction, list[tuple[str, int]]]:
        self.skip_ws()
        start = self.pos
        name = self.name("an instruction name")
        self.expect("=", f"'=' after instruction name %{name}")
        shape = self.shape()
        self.skip_ws()
        op_pos = self.pos
        opcode = self.name("an opcode")
        if opcode not in OPCODES:
            close = [FAMILIAR_NAMES[opcode]] if opcode in FAMILIAR_NAMES else \
                difflib.get_close_matches(opcode, OPCODES, n=3)
            hint = f"did you mean {' or '.join(close)}?" if close else \
                "nbxla.hlo.opcodes.OPCODES lists the supported opcodes"
            raise self.error(f"unknown opcode {opcode!r}; {hint}", op_pos)
        self.expect("(", f"'(' after opcode {opcode}")
        attrs: dict = {}
        operands: list[tuple[str, int]] = []
        if opcode == "parameter":
            attrs["parameter_number"] = self.integer("a parameter number")
            self.expect(")")
        elif opcode == "constant":
            attrs["literal"] = self.literal(shape, name)
            if attrs["literal"] is None:         # {...}: stand-in values, marked (see hlo/elided.py)
                attrs["literal"], attrs[ELIDED] = fill_values(name, shape), True
            self.expect(")")
        else:
            operands = self.operand_list()
        instr = Instruction(opcode, shape, (), attrs, name)
        self.where[id(instr)] = start
        while self.accept(","):
            key_pos = self.pos
            key = self.name("an attribute name")
            self.expect("=", f"'=' after attribute {key}")
            text, pos = self.raw_value()
            if key in instr.attrs:
                raise self.error(f"attribute {key} given twice", key_pos)
            instr.attrs[key] = self.attribute(instr, key, text, pos)
        return instr, operands

    def operand_list(self) -> list[tuple[str, int]]:
        operands = []
        if self.accept(")"):
            return operands
        while True:
            self.skip_ws()
            if self._at_shape():
                self.shape()     # operand shapes are optional and redundant
            self.skip_ws()
            pos = self.pos
            operands.append((self.name("an operand name"), pos))
            if self.accept(")"):
                return operands
            self.expect(",", "',' or ')' in the operand list")

    def _at_shape(self) -> bool:
        if self.text.startswith("(", self.pos):
            return True
        m = _NAME.match(self.text, self.pos)
        return bool(m) and m.group() in ELEMENT_TYPES and self.text.startswith("[", m.end())

    # ---- shapes -----------------------------------------------------------------------------

    def shape(self, depth: int = 0):
        self.skip_ws()
        start = self.pos
        if self.accept("("):
            if depth >= MAX_TUPLE_DEPTH:
                raise self.error(f"tuple shapes nested deeper than {MAX_TUPLE_DEPTH} levels are "
                                 "not supported", start)
            elements = []
            while not self.accept(")"):
                elements.append(self.shape(depth + 1))
                if not self.peek(")"):
                    self.expect(",", "',' or ')' in a tuple shape")
            return TupleShape(tuple(elements))
        m = _NAME.match(self.text, self.pos)
        if not m or m.group() not in ELEMENT_TYPES:
            raise self.error("expected a shape such as f32[8,8]{1,0}", start)
        self.pos = m.end()
        element_type = m.group()
        self.expect("[", "'[' after the element type")
        dims = []
        while not self.accept("]"):
            if self.peek("<=") or self.peek("?"):
                raise self.error("bounded dynamic dimensions (<=N, ?) are not supported; "
                                 "write an unknown dimension as a symbol (f32[b,64]) or "
                                 "export the module with static shapes")
            dims.append(self.dimension())
            if not self.peek("]"):
                self.expect(",", "',' or ']' in the dimensions")
        layout = None
        if self.text.startswith("{", self.pos):   # layout must follow immediately
            self.pos += 1
            layout = []
            while not self.accept("}"):
                if self.accept(":"):              # tiling / memory space: irrelevant here
                    depth = 1
                    while depth and self.pos < len(self.text):
                        depth += {"{": 1, "}": -1}.get(self.text[self.pos], 0)
                        self.pos += 1
                    break
                layout.append(self.integer("a layout dimension"))
                self.accept(",")
        try:
            return Shape(element_type, tuple(dims), tuple(layout) if layout is not None else None)
        except HloShapeError as e:
            raise self.error(str(e), start) from None

    # ---- literals -----------------------------------------------------------------------------

    def literal(self, shape, name: str = "") -> np.ndarray | None:
        """The constant's values, or None when they were elided (``{...}``)."""
        start = self.pos
        if shape.is_tuple:
            raise self.error("tuple constants are not supported; use a tuple of constants", start)
        values = self._literal_values()
        if values == ["..."]:
            if shape.is_tuple or any(not isinstance(d, int) for d in shape.dims):
                raise self.error(f"the elided constant %{name} ({{...}}) has a shape ({shape}) nbxla "
                                 "cannot fill; export it with its values", start)
            return None
        if len(values) != shape.size:
            raise self.error(f"constant has {len(values)} values but its shape {shape} "
                             f"holds {shape.size}", start)
        t = shape.element_type
        dtype = shape.dtype
        try:
            if t == "pred":
                arr = np.array([_pred(v) for v in values], dtype=bool)
            elif is_complex(t):
                arr = np.array([complex(_float(a), _float(b)) for a, b in values], dtype=dtype)
            elif is_float(t):
                arr = np.array([_float(v) for v in values], dtype=np.float64).astype(dtype)
            else:
                arr = np.array([int(v, 16) if "x" in v.lower() else int(v) for v in values], dtype=object)
                info = np.iinfo(dtype)
                if any(not info.min <= x <= info.max for x in arr):
                    raise ValueError(f"value out of range for {t}")
                arr = arr.astype(dtype)
        except (ValueError, TypeError) as e:
            raise self.error(f"bad constant for {shape}: {e}", start) from None
        return arr.reshape(shape.dims)

    def _literal_values(self):
        """Flatten a nested ``{...}`` literal into scalar tokens (pairs for complex)."""
        values: list = []
        depth = 0
        while True:
            self.skip_ws()
            if self.accept("{"):
                depth += 1
                continue
            if self.accept("}"):
                depth -= 1
                if depth < 0:
                    raise self.error("unbalanced '}' in constant")
            elif self.accept("..."):
                values.append("...")
            elif self.accept("("):             # complex: (re, im)
                re_part = self._scalar_token()
                self.expect(",")
                im_part = self._scalar_token()
                self.expect(")")
                values.append((re_part, im_part))
            elif depth == 0 and self.peek(")"):
                break
            else:
                values.append(self._scalar_token())
            if depth == 0:
                break
            self.accept(",")
        return values

    def _scalar_token(self) -> str:
        self.skip_ws()
        m = re.compile(r"[+-]?(nan|inf|true|false|0x[0-9a-fA-F]+|[0-9.]+(e[+-]?\d+)?)(\([^)]*\))?",
                       re.I).match(self.text, self.pos)
        if not m:
            raise self.error("expected a number in the constant")
        self.pos = m.end()
        return m.group()

    # ---- attributes ---------------------------------------------------------------------------

    def attribute(self, instr: Instruction, key: str, text: str, pos: int):
        kind = ATTRIBUTE_KINDS.get(key)
        try:
            if kind is None:
                return RawAttr(text)
            if kind == "int":
                return int(text)
            if kind == "ints":
                return _int_list(text)
            if kind == "bool":
                if text not in ("true", "false"):
                    raise ValueError("expected true or false")
                return text == "true"
            if kind == "enum":
                if key == "direction" and text not in COMPARISON_DIRECTIONS:
                    raise ValueError(f"direction must be one of {' '.join(COMPARISON_DIRECTIONS)}")
                return text
            if kind == "string":
                return _unquote(text)
            if kind == "computation":
                self.pending.append((instr, key, (text.lstrip("%"), pos)))
                return None
            if kind == "computations":
                names = [n.strip().lstrip("%") for n in _braced(text).split(",") if n.strip()]
                self.pending.append((instr, key, [(n, pos) for n in names]))
                return None
            if kind == "slice":
                return tuple(_slice_dim(s) for s in re.findall(r"\[([^\]]*)\]", _braced(text)))
            if kind == "padding":
                return tuple(PadDim(*map(int, p.split("_"))) for p in text.split("x")) \
                    if text != "{}" else ()
            if kind == "window":
                return _window(_braced(text))
            if kind == "dim_labels":
                return ConvDimensionNumbers.from_text(text)
            if kind == "metadata":
                return _metadata(_braced(text))
        except (ValueError, TypeError) as e:
            raise self.error(f"bad value for attribute {key}: {e}", pos) from None
        raise AssertionError(f"attribute kind {kind} has no parser")  # table/parser disagree

    def resolve_computation_references(self, module: Module) -> None:
        by_name = {c.name: c for c in module.computations}

        def lookup(name, pos):
            if name not in by_name:
                raise self.error(f"computation %{name} is not defined in this module", pos)
            return by_name[name]

        for instr, key, ref in self.pending:
            if isinstance(ref, list):
                instr.attrs[key] = tuple(lookup(n, p) for n, p in ref)
            else:
                instr.attrs[key] = lookup(*ref)

    def resolve_locations(self, module: Module) -> None:
        """Turn metadata (source_file/line or stack_frame_id) into SourceLocations."""
        tables = {name: dict(rows) for name, rows in module.debug_sections.items()}
        files, functions = tables.get("FileNames", {}), tables.get("FunctionNames", {})
        locations, frames = tables.get("FileLocations", {}), tables.get("StackFrames", {})

        def fields(text):
            return {k: v for k, v in re.findall(r"(\w+)=(\d+)", text)}

        for instr in module.instructions():
            meta = instr.attrs.get("metadata")
            if not isinstance(meta, Metadata):
                continue
            if meta.get("source_file") is not None and meta.get("source_line") is not None:
                instr.location = SourceLocation(meta.get("source_file"), int(meta.get("source_line")))
            elif meta.get("stack_frame_id") in frames:
                frame = fields(frames[meta.get("stack_frame_id")])
                loc = fields(locations.get(int(frame.get("file_location_id", -1)), ""))
                if "line" in loc:
                    instr.location = SourceLocation(
                        _unquote(files.get(int(loc.get("file_name_id", -1)), '"?"')), int(loc["line"]),
                        int(loc["column"]) if "column" in loc else None,
                        _unquote(functions.get(int(loc.get("function_name_id", -1)), '"?"')))

    # ---- verification -------------------------------------------------------------------------

    def verify(self, module: Module) -> None:
        """Check every instruction's written shape against shape inference, parameter
        numbers (0..n-1, each once) and that no computation calls itself."""
        reachable = module.computations_post_order()
        self.verify_no_recursion(module)
        for comp in reachable + [c for c in module.computations if c not in reachable]:
            numbers: dict[int, Instruction] = {}
            for p in comp.parameters:
                if p.parameter_number in numbers:
                    raise self.error(f"%{p.name} and %{numbers[p.parameter_number].name} are both "
                                     f"parameter({p.parameter_number}) of %{comp.name}",
                                     self.where.get(id(p), 0))
                numbers[p.parameter_number] = p
            if sorted(numbers) != list(range(len(numbers))):
                p = comp.parameters[-1]
                raise self.error(f"%{comp.name}'s parameter numbers {sorted(numbers)} are not "
                                 f"0..{len(numbers) - 1}", self.where.get(id(p), 0))
            for instr in comp.instructions:
                pos = self.where.get(id(instr), 0)
                arity = OPCODES[instr.opcode].arity
                if arity != VARIADIC and len(instr.operands) != arity:
                    raise self.error(f"{instr.opcode} takes {arity} operand(s), "
                                     f"%{instr.name} has {len(instr.operands)}", pos)
                missing = [a for a in REQUIRED_ATTRIBUTES.get(instr.opcode, ()) if a not in instr.attrs]
                if missing:
                    raise self.error(f"%{instr.name}: {instr.opcode} needs the attribute(s) "
                                     f"{', '.join(missing)} (e.g. {missing[0]}=...); add them as "
                                     "XLA writes them", pos)
                try:
                    inferred = infer_shape(instr.opcode, [o.shape for o in instr.operands],
                                           instr.attrs, declared=instr.shape)
                except HloShapeError as e:
                    raise self.error(f"%{instr.name}: {e}", pos) from None
                except (ValueError, TypeError, KeyError, IndexError, AttributeError, ArithmeticError) as e:
                    # Attributes shape inference could not even read (a tuple where an array
                    # belongs, a dimension number out of range): still this instruction's fault.
                    raise self.error(f"%{instr.name}: its operands and attributes do not fit "
                                     f"{instr.opcode} ({type(e).__name__}: {e})", pos) from None
                if not inferred.compatible(instr.shape):
                    raise self.error(f"%{instr.name} is written as {instr.shape} but "
                                     f"{instr.opcode} of its operands gives {inferred}", pos)


    def verify_no_recursion(self, module: Module) -> None:
        """HLO computations cannot call themselves, directly or through others."""
        state: dict[int, int] = {}               # 1: on the current path, 2: done

        def visit(comp) -> None:
            state[id(comp)] = 1
            for instr in comp.instructions:
                for callee in instr.called_computations:
                    if state.get(id(callee)) == 1:
                        raise self.error(f"%{instr.name} calls %{callee.name}, which is running "
                                         "already: HLO computations cannot be recursive",
                                         self.where.get(id(instr), 0))
                    if id(callee) not in state:
                        visit(callee)
            state[id(comp)] = 2
        for comp in module.computations:
            if id(comp) not in state:
                visit(comp)


# ---- attribute value parsers (pure functions over the value text) ------------------------------

def _braced(text: str) -> str:
    if not (text.startswith("{") and text.endswith("}")):
        raise ValueError(f"expected {{...}}, got {text!r}")
    return text[1:-1]


def _int_list(text: str) -> tuple[int, ...]:
    body = _braced(text).strip()
    return tuple(int(x) for x in body.split(",")) if body else ()


def _unquote(text: str) -> str:
    if len(text) < 2 or text[0] != '"' or text[-1] != '"':
        raise ValueError(f"expected a quoted string, got {text!r}")
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), text[1:-1])


def _slice_dim(text: str) -> SliceDim:
    parts = [int(p) for p in text.split(":")]
    if len(parts) not in (2, 3):
        raise ValueError(f"slice range [{text}] must be [start:limit] or [start:limit:stride]")
    return SliceDim(*parts)


def _window(body: str) -> Window:
    fields = dict(item.split("=", 1) for item in body.split())
    unknown = set(fields) - {"size", "stride", "pad", "lhs_dilate", "rhs_dilate", "rhs_reversal"}
    if unknown:
        raise ValueError(f"unknown window field(s) {', '.join(sorted(unknown))}")
    sizes = [int(s) for s in fields["size"].split("x")] if "size" in fields else []
    n = len(sizes)

    def per_dim(key, default, conv=int):
        if key not in fields:
            return [default] * n
        vals = [conv(v) for v in fields[key].split("x")]
        if len(vals) != n:
            raise ValueError(f"window {key} has {len(vals)} entries for {n} dimensions")
        return vals

    pads = per_dim("pad", (0, 0), lambda v: tuple(int(x) for x in v.split("_")))
    return Window(tuple(
        WindowDim(size, stride, lo, hi, base, win, bool(rev))
        for size, stride, (lo, hi), base, win, rev in zip(
            sizes, per_dim("stride", 1), pads, per_dim("lhs_dilate", 1),
            per_dim("rhs_dilate", 1), per_dim("rhs_reversal", 0))))


def _metadata(body: str) -> Metadata:
    items = []
    for m in re.finditer(r'(\w+)=("(?:[^"\\]|\\.)*"|[^\s]+)', body):
        key, value = m.group(1), m.group(2)
        items.append((key, _unquote(value) if value.startswith('"') else int(value)
                      if re.fullmatch(r"-?\d+", value) else value))
    return Metadata(tuple(items))


def _float(token: str) -> float:
    t = token.lower()
    base = re.sub(r"\(.*\)$", "", t)       # nan(0x7fc00000) payloads are dropped
    if base.lstrip("+-") == "nan":
        return -np.nan if base.startswith("-") else np.nan
    if base.lstrip("+-") in ("true", "false"):
        return float(base.lstrip("+-") == "true")
    return float(base)


def _pred(token) -> bool:
    if token in ("true", "false"):
        return token == "true"
    return bool(int(token))
