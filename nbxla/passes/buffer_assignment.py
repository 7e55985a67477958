"""Buffer assignment: where every array value of the entry computation lives while it runs.

After fusion the entry computation is a list of kernels and library calls in the order they
will run (this order is the schedule; ``update_order.py`` runs the other readers of an array
before the kernel that updates it in place, where they do not need the update).  Each array value they produce needs memory from the
moment it is written until its last reader has run.  The plan places all such values in one
arena, reusing the memory of dead values (best fit by size, offsets aligned to 64 bytes), so
the arena is usually much smaller than the sum of all values.

* **Parameters** are owned by the caller and are never placed in the arena; **constants**
  are part of the executable.
* **Aliases** need no memory of their own: the views of ``hlo/aliasing.py`` (``tuple``,
  ``get-tuple-element``, a row-major ``reshape``/``bitcast`` keeping the element type) name
  existing buffers.  Their readers keep the underlying buffer alive.
* **In-place updates**: an elementwise kernel (a ``kLoop`` fusion, or an unfused elementwise
  op) may write its output over an operand that dies at that kernel, when the operand has the
  output's byte size and dimensions, is not a parameter, and is read only elementwise (output
  element *j* depends on operand element *j* only), so no element is overwritten before it is
  read.
  An update fusion written into its operand's buffer (``operand_buffers`` below) takes over
  that operand's place in the arena the same way, whatever it reads: its kernel writes only
  the window and takes care of reads of the window itself (``codegen/updates.py``).
* **Donation** (input/output aliasing): when the caller donates parameter *k*
  (``donated_parameters``), an output of the same shape may be written into that parameter's
  buffer, as long as nothing reads the parameter afterwards -- the notebook pattern
  ``w = w - lr * g`` then updates ``w`` without a new allocation.  Donating is the *runtime's*
  decision: it may only donate an array when no other reference to the old array can observe
  the change (a separate issue); this pass only plans for what it is told.

* **Outputs in an operand's buffer** (``operand_buffers``), for a backend with window-update
  kernels and loops that keep their state in place (the AOT driver, which also builds the JIT's
  native loops): a fusion updating a window of one operand writes into that operand's buffer,
  and a ``while`` keeps each state leaf in its initial leaf's buffer -- always for a leaf the
  body passes through, else when that buffer is free after the step: nothing living in it is
  read later or is a result, and it is a temporary (or, in a loop body, the loop's state).
  The structural facts are ``hlo/aliasing.py``'s.  The arena above follows this answer for the
  update fusions (the JIT's entry runs them in place too: ``runtime/window_updates.py``), not
  for the loops.

The entry computation is planned with the caller's donations; every computation its control flow
runs (a ``while``'s condition and body, a ``conditional``'s branches, a ``call``'s callee, and
theirs in turn) gets a plan of its own in ``BufferPlan.nested``, by the same rules: its
parameters are the caller's buffers, its temporaries live in its own arena; a ``while`` body's
parameter is the loop's state (``loop_body``).  The JIT's CPU runtime places the entry's kernel
outputs by the entry plan; the AOT driver (AOT objects and the JIT's native loops) takes every
program's lifetimes and in-operand outputs from these plans (``BufferPlan.for_computation``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..hlo import Module, Shape
from ..hlo.aliasing import is_byte_view, is_view, passed_through, scatters_in_place, updated_parameter, view_source
from ..hlo.ir import Computation, Instruction, program_callees
from .pipeline import Pass

ALIGNMENT = 64


def _align(n: int) -> int:
    return -(-n // ALIGNMENT) * ALIGNMENT


@dataclass
class ValueAssignment:
    """Where one array value lives (see ``BufferPlan``)."""
    name: str                          # instruction name, ``name{i}`` for a tuple element
    shape: Shape
    kind: str                          # "arena", "parameter", "constant"
    offset: int | None                 # arena offset (arena) or None
    size: int                          # bytes
    start: int                         # index of the defining instruction
    end: int                           # index of the last reader; the plan's ``length`` for outputs
    parameter: int | None = None       # kind "parameter": its number
    note: str = ""                     # "in place of X", "donated parameter k"
    allocation: int | None = None      # arena values sharing memory share this id
    alias_of: str | None = None        # the value whose buffer this one names (no memory of its own)

    @property
    def location(self):
        """``(offset, size)`` in the arena, ``("parameter", k)``, or ``("constant", name)``."""
        if self.kind == "arena":
            return (self.offset, self.size)
        if self.kind == "parameter":
            return ("parameter", self.parameter)
        return ("constant", self.alias_of or self.name)


@dataclass
class BufferPlan:
    """Every array value of the entry computation and where it lives, in schedule order."""
    values: dict[str, ValueAssignment] = field(default_factory=dict)
    arena_bytes: int = 0                    # bytes allocated with reuse
    bytes_without_reuse: int = 0            # the sum of all values the kernels produce (unaligned)
    length: int = 0                         # instructions in the schedule ("live out" = length)
    in_place: list[tuple[str, str]] = field(default_factory=list)    # (value, operand it overwrote)
    donated: dict[int, str] = field(default_factory=dict)           # parameter -> output value
    nested: dict[str, "BufferPlan"] = field(default_factory=dict)   # by computation name
    # Instruction name -> the output leaves (flat numbers) written into the buffer of the operand
    # leaf they update (see the module docstring): (0,) for a window-update fusion, the kept
    # state leaves for a while.
    operand_buffers: dict[str, tuple[int, ...]] = field(default_factory=dict)
    # What was planned: the computation's instruction names in schedule order, its donated
    # parameters, and whether it was planned as a loop body (its state writable in place).
    schedule: tuple[str, ...] = ()
    donated_parameters: frozenset = frozenset()
    loop_body: bool = False

    def __getitem__(self, name: str) -> ValueAssignment:
        return self.values[name]

    def location(self, name: str):
        return self.values[name].location

    def buffers(self) -> list[ValueAssignment]:
        """The values that own arena memory (not aliases, parameters or constants)."""
        return [v for v in self.values.values() if v.kind == "arena" and v.alias_of is None]

    def for_computation(self, comp: Computation, loop_body: bool = False) -> "BufferPlan | None":
        """The plan of ``comp`` among this one and its nested plans, planned as ``loop_body``
        and without donations (the AOT driver's programs), or None -- also when the
        computation changed after planning (the CPU runtime folds convolution epilogues)."""
        schedule = tuple(i.name for i in comp.instructions)
        for plan in (self, self.nested.get(comp.name)):
            if plan is not None and plan.schedule == schedule and plan.loop_body == loop_body \
                    and not plan.donated_parameters:
                return plan
        return None

    def to_text(self) -> str:
        lines = [f"buffer assignment: arena {self.arena_bytes} B with reuse, "
                 f"{self.bytes_without_reuse} B without reuse "
                 f"({len(self.in_place)} in-place, {len(self.donated)} donated)"]
        for v in self.values.values():
            where = {"arena": f"offset {v.offset}", "parameter": f"parameter {v.parameter}",
                     "constant": "constant"}[v.kind]
            end = "out" if v.end >= self.length else str(v.end)
            note = v.note or (f"alias of %{v.alias_of}" if v.alias_of else "")
            note = f"  ({note})" if note else ""
            lines.append(f"  %{v.name}: {v.shape.to_text(False)} {where} size {v.size} "
                         f"live [{v.start}, {end}]{note}")
        for name, inner in self.nested.items():
            lines.append(f"nested computation %{name}: " + inner.to_text())
        return "\n".join(lines)


class _Allocation:
    def __init__(self, ident: int, offset: int, size: int, end: int):
        self.ident, self.offset, self.size, self.end = ident, offset, size, end


class Arena:
    """A best-fit allocator over one growing arena, with a free list of (offset, size): the one
    placement every planner uses (the entry's plan here, each AOT program's temporaries)."""

    def __init__(self):
        self.free: list[list[int]] = []
        self.top = 0

    def alloc(self, size: int) -> int:
        size = _align(size)
        fits = [c for c in self.free if c[1] >= size]
        if fits:
            best = min(fits, key=lambda c: (c[1], c[0]))
            offset = best[0]
            best[0] += size
            best[1] -= size
            if best[1] == 0:
                self.free.remove(best)
            return offset
        if self.free and self.free[-1][0] + self.free[-1][1] == self.top:
            last = self.free.pop()           # grow the arena from its free tail
            self.top = last[0] + size
            return last[0]
        offset, self.top = self.top, self.top + size
        return offset

    def release(self, offset: int, size: int) -> None:
        size = _align(size)
        self.free.append([offset, size])
        self.free.sort()
        merged: list[list[int]] = []
        for chunk in self.free:
            if merged and merged[-1][0] + merged[-1][1] == chunk[0]:
                merged[-1][1] += chunk[1]
            else:
                merged.append(chunk)
        self.free = merged


def place_by_lifetime(steps) -> tuple[dict, int]:
    """Offsets for buffers that live from the step that writes them to their last reader.
    ``steps`` lists, per step in schedule order, the ``(key, size, last step)`` of the buffers it
    writes; each is placed when written and its memory is reused after its last step.  Returns
    ``({key: offset}, arena size)``."""
    arena = Arena()
    offsets: dict = {}
    ending: dict[int, list] = {}
    for i, written in enumerate(steps):
        for key, size, last in written:
            offsets[key] = arena.alloc(size)
            ending.setdefault(max(last, i), []).append((offsets[key], size))
        for offset, size in ending.pop(i, ()):
            arena.release(offset, size)
    return offsets, arena.top


def leaf_paths(shape, prefix=()) -> list[tuple[tuple[int, ...], Shape]]:
    if not shape.is_tuple:
        return [(prefix, shape)]
    out = []
    for i, e in enumerate(shape.elements):
        out.extend(leaf_paths(e, prefix + (i,)))
    return out


def value_name(instr: Instruction, index: tuple[int, ...]) -> str:
    return instr.name + ("{" + ",".join(map(str, index)) + "}" if index else "")


def _reads_elementwise(instr: Instruction, operand_index: int) -> bool:
    """Does ``instr`` read operand ``operand_index`` only at the index it writes?"""
    out = instr.shape
    operand = instr.operands[operand_index]
    if out.is_tuple or operand.shape.is_tuple or operand.shape.dims != out.dims:
        return False
    if instr.opcode == "fusion":
        if instr.attrs.get("kind") != "kLoop":
            return False
        body = instr.attrs["calls"]
        params = [p for p in body.parameters if p.parameter_number == operand_index]
        users = body.users()
        stack, seen = list(params), set()
        while stack:
            v = stack.pop()
            if id(v) in seen:
                continue
            seen.add(id(v))
            for u in users[v]:
                if not u.is_elementwise or u.shape.is_tuple or u.shape.dims != out.dims:
                    return _read_where_written(body, operand_index)
                stack.append(u)
        return True
    return instr.is_elementwise


def _read_where_written(body, parameter_number: int) -> bool:
    """Is parameter ``parameter_number`` of a fused computation read only at the index the
    kernel writes?  The walk carries, from the root, the offset between the written index and
    the index each value is read at: a slice adds its start, an update's window subtracts its
    (constant) start from the update's reads.  ``B[1:-1] = B[1:-1] + f(A)`` reads ``B`` at
    offset 0 only (in place is safe); ``B[1:-1] = B[:-2]`` does not."""
    root = body.root
    if root.shape.is_tuple:
        return False
    stack, seen = [(root, (0,) * root.shape.rank)], set()
    while stack:
        instr, offset = stack.pop()
        if (id(instr), offset) in seen:
            continue
        seen.add((id(instr), offset))
        op = instr.opcode
        if op == "parameter":
            if instr.parameter_number == parameter_number and any(offset):
                return False
        elif op == "constant" or instr.shape.rank == 0 or \
                (op == "broadcast" and instr.operands[0].shape.rank == 0):
            continue
        elif op == "slice" and all(s.stride == 1 for s in instr.attrs["slice"]):
            stack.append((instr.operands[0], tuple(o + s.start for o, s in zip(offset, instr.attrs["slice"]))))
        elif op == "dynamic-update-slice" and all(s.opcode == "constant" for s in instr.operands[2:]):
            base, update = instr.operands[:2]
            starts = [min(max(int(s.literal.reshape(())), 0), n - u)
                      for s, n, u in zip(instr.operands[2:], instr.shape.dims, update.shape.dims)]
            stack.append((base, offset))
            stack.append((update, tuple(o - s for o, s in zip(offset, starts))))
        elif instr.is_elementwise and not instr.shape.is_tuple:
            stack += [(o, offset) for o in instr.operands]
        elif _reaches_parameter(instr, parameter_number):
            return False
    return True


def _reaches_parameter(instr, parameter_number: int) -> bool:
    stack, seen = [instr], set()
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        if v.opcode == "parameter" and v.parameter_number == parameter_number:
            return True
        stack += v.operands
    return False


class BufferAssignment(Pass):
    """Plans the entry computation's memory; changes nothing in the module."""
    name = "buffer-assignment"

    def __init__(self, donated_parameters=frozenset()):
        # (a set of parameter numbers, or {parameter: output leaf} for outputs named per parameter)
        self.donated_parameters = dict(donated_parameters) if isinstance(donated_parameters, dict) \
            else set(donated_parameters)
        self.report: BufferPlan | None = None

    def run(self, module: Module) -> bool:
        self.report = plan_buffers(module, self.donated_parameters)
        return False


def plan_buffers(module: Module, donated_parameters=frozenset()) -> BufferPlan:
    """The entry's plan (``donated_parameters`` are the caller's to overwrite), with a plan for
    every computation its control flow runs in ``nested``."""
    plan = plan_computation(module.entry, donated_parameters)
    bodies = {id(i.attrs["body"]) for c in module.computations for i in c.instructions if i.opcode == "while"}
    stack = [c for i in module.entry.instructions for c in program_callees(i)]
    while stack:
        comp = stack.pop(0)
        if comp.name not in plan.nested:
            plan.nested[comp.name] = plan_computation(comp, loop_body=id(comp) in bodies)
            stack += [c for i in comp.instructions for c in program_callees(i)]
    return plan


def plan_computation(comp: Computation, donated_parameters=frozenset(), loop_body: bool = False) -> BufferPlan:
    """One computation's plan (see the module docstring); ``loop_body``: ``comp`` is a
    ``while`` body, whose parameter leaves are the loop's state (``operand_buffers`` may write
    into them)."""
    instrs = comp.instructions
    n = len(instrs)
    plan = BufferPlan(length=n, schedule=tuple(i.name for i in instrs),
                      donated_parameters=frozenset(donated_parameters), loop_body=loop_body)
    plan.operand_buffers = operand_buffers(comp, loop_body)
    # buffer[(id(instr), index)] -> the name of the value that owns the memory.
    buffer: dict[tuple[int, tuple], str] = {}
    values: dict[str, ValueAssignment] = {}
    defined_by: dict[str, Instruction] = {}

    def new_value(instr, index, shape, kind, i, **kw) -> ValueAssignment:
        name = value_name(instr, index)
        a = ValueAssignment(name, shape, kind, None, shape.byte_size, i, i, **kw)
        values[name] = a
        defined_by[name] = instr
        buffer[(id(instr), index)] = name
        return a

    def alias(instr, index, shape, source: str, i: int) -> None:
        name = value_name(instr, index)
        values[name] = ValueAssignment(name, shape, "alias", None, values[source].size, i, i,
                                       alias_of=source)
        buffer[(id(instr), index)] = source

    # 1. values, aliases and last uses
    last_use: dict[str, int] = {}
    for i, instr in enumerate(instrs):
        op = instr.opcode
        if op == "parameter":
            for index, shape in leaf_paths(instr.shape):
                new_value(instr, index, shape, "parameter", i, parameter=instr.parameter_number)
        elif op == "constant":
            new_value(instr, (), instr.shape, "constant", i)
        elif is_view(instr):
            for index, shape in leaf_paths(instr.shape):
                source, at = view_source(instr, index)
                alias(instr, index, shape, buffer[(id(source), at)], i)
        else:
            for index, shape in leaf_paths(instr.shape):
                new_value(instr, index, shape, "arena", i)
            for o in instr.operands:
                for index, _ in leaf_paths(o.shape):
                    last_use[buffer[(id(o), index)]] = i
    for index, _ in leaf_paths(comp.root.shape):
        last_use[buffer[(id(comp.root), index)]] = n       # outputs live out
    for name, a in values.items():
        if a.alias_of is None:
            a.end = max(a.end, last_use.get(name, a.start))

    plan.bytes_without_reuse = sum(v.size for v in values.values()
                                   if v.kind == "arena" and v.alias_of is None)

    # 2. donation: an output written into a donated parameter's buffer (a mapping names the
    # output leaf each parameter is for: jit's write-back of an argument the program updates)
    leaves = [buffer[(id(comp.root), index)] for index, _ in leaf_paths(comp.root.shape)]
    outputs = list(dict.fromkeys(leaves))
    params = {p.parameter_number: p for p in comp.parameters}
    for k in sorted(donated_parameters):
        p = params.get(k)
        if p is None or p.shape.is_tuple:
            continue
        pv = values[p.name]
        if pv.end >= n:                 # the parameter itself is an output
            continue
        wanted = donated_parameters.get(k) if isinstance(donated_parameters, dict) else None
        if wanted is not None and not 0 <= wanted < len(leaves):
            raise ValueError(f"buffer assignment: parameter {k} is donated to output leaf {wanted}, "
                             f"but the entry has {len(leaves)} output leaves")
        for out in outputs if wanted is None else [leaves[wanted]]:
            if out in plan.donated.values():
                continue
            v = values[out]
            if v.kind != "arena" or v.note or not v.shape.compatible(p.shape):
                continue
            writer = defined_by[out]
            if pv.end > v.start:        # read after the output is written
                continue
            if pv.end == v.start and not all(_reads_elementwise(writer, j)
                                             for j, o in enumerate(writer.operands)
                                             if not o.shape.is_tuple and buffer.get((id(o), ())) == p.name):
                continue
            v.kind, v.parameter, v.note = "parameter", k, f"donated parameter {k}"
            plan.donated[k] = out
            break

    # 3. the arena: allocate in schedule order, free after each value's last reader
    arena = Arena()
    allocations: dict[str, _Allocation] = {}
    idents = iter(range(1 << 62))
    ending: dict[int, list[_Allocation]] = {}
    for i, instr in enumerate(instrs):
        for index, _ in leaf_paths(instr.shape) if instr.opcode not in ("parameter", "constant") else ():
            name = value_name(instr, index)
            v = values.get(name)
            if v is None or v.kind != "arena" or buffer[(id(instr), index)] != name:
                continue
            victim = _updated_operand(instr, plan.operand_buffers, values, allocations, buffer, i) \
                or _in_place_victim(instr, index, values, allocations, buffer, i)
            if victim is not None:
                a = allocations[victim]
                ending[a.end].remove(a)
                a.end = v.end
                ending.setdefault(a.end, []).append(a)
                v.note = f"in place of %{victim}"
                plan.in_place.append((name, victim))
            elif v.size == 0:
                v.offset = 0
                continue
            else:
                a = _Allocation(next(idents), arena.alloc(v.size), v.size, v.end)
                ending.setdefault(a.end, []).append(a)
            v.offset, v.allocation = a.offset, a.ident
            allocations[name] = a
        for a in ending.pop(i, []):
            arena.release(a.offset, a.size)
    for v in values.values():            # an alias lives where its owner lives, as long
        if v.alias_of is not None:
            owner = values[v.alias_of]
            v.kind, v.offset, v.parameter = owner.kind, owner.offset, owner.parameter
            v.allocation, v.end = owner.allocation, owner.end
    plan.arena_bytes = arena.top
    plan.values = values
    return plan


def _updated_operand(instr, operand_buffers, values, allocations, buffer, i) -> str | None:
    """For a window-update fusion that ``operand_buffers`` writes into its operand's buffer: the
    value owning that buffer, whose arena place the output then takes over (so that nothing
    else is placed there while the updated array lives), or None."""
    if instr.opcode != "fusion" or instr.name not in operand_buffers:
        return None
    target = instr.operands[updated_parameter(instr.attrs["calls"])]
    name = buffer[(id(target), ())]
    a = allocations.get(name)
    if a is None or a.end != i or a.size != values[value_name(instr, ())].size:
        return None
    return name


def _in_place_victim(instr, index, values, allocations, buffer, i) -> str | None:
    """A dying operand buffer that ``instr`` may overwrite with its output, or None."""
    if index or instr.shape.is_tuple or instr.shape.byte_size == 0:
        return None
    if not (instr.opcode == "fusion" or instr.is_elementwise):
        return None
    out = values[value_name(instr, index)]
    by_buffer: dict[str, list[int]] = {}
    for j, o in enumerate(instr.operands):
        for oi, _ in leaf_paths(o.shape):
            by_buffer.setdefault(buffer[(id(o), oi)], []).append(j)
    for name, positions in by_buffer.items():
        v = values[name]
        a = allocations.get(name)
        if v.kind != "arena" or a is None or a.end != i or a.size != out.size or v.size != out.size:
            continue
        if all(_reads_elementwise(instr, j) for j in positions):
            return name
    return None


def operand_buffers(comp: Computation, loop_body: bool = False) -> dict[str, tuple[int, ...]]:
    """``BufferPlan.operand_buffers`` of ``comp``.  A walk in schedule order over *buffers*:
    each parameter leaf, constant and new output leaf is one; views name their operand's, and
    an output written into an operand's buffer names that one, so that what lives in a buffer
    includes earlier updates made in place.  Per buffer the walk keeps the last step reading
    anything that lives in it, and whether a result does."""
    instrs = comp.instructions
    last_reader = [-1] * len(instrs)               # per instruction (by position)
    position = {id(i): n for n, i in enumerate(instrs)}
    for n, instr in enumerate(instrs):
        for o in instr.operands:
            last_reader[position[id(o)]] = n
    kinds: list[str] = []                          # per buffer: "parameter", "constant", "temporary"
    last_read: list[int] = []                      # per buffer
    holds_result: list[bool] = []                  # per buffer
    home: dict[int, list[int]] = {}                # per instruction: its leaves' buffers
    found: dict[str, tuple[int, ...]] = {}

    def new(kind: str) -> int:
        kinds.append(kind)
        last_read.append(-1)
        holds_result.append(False)
        return len(kinds) - 1

    def free_after(buf: int, here: int) -> bool:
        """Nothing living in ``buf`` is a result or read after step ``here``, and ``buf`` is a
        temporary (or, in a loop body, the loop's state)."""
        if kinds[buf] != "temporary" and not (kinds[buf] == "parameter" and loop_body):
            return False
        return not holds_result[buf] and last_read[buf] <= here

    for here, instr in enumerate(instrs):
        op = instr.opcode
        count = len(leaf_paths(instr.shape))
        if op in ("parameter", "constant"):
            leaves = [new(op) for _ in range(count)]
        elif op == "tuple":
            leaves = [b for o in instr.operands for b in home[id(o)]]
        elif op == "get-tuple-element":
            elements = instr.operands[0].shape.elements
            index = instr.attrs["index"]
            start = sum(len(leaf_paths(e)) for e in elements[:index])
            leaves = home[id(instr.operands[0])][start:start + count]
        elif is_byte_view(instr):
            leaves = home[id(instr.operands[0])]
        else:
            leaves = [new("temporary") for _ in range(count)]
            k = updated_parameter(instr.attrs["calls"]) if op == "fusion" else 0 if scatters_in_place(instr) else None
            if k is not None:
                target = instr.operands[k]
                (buf,) = home[id(target)]
                others = [b for o in instr.operands if o is not target for b in home[id(o)]]
                if instr.operands.count(target) == 1 and buf not in others and free_after(buf, here):
                    leaves, found[instr.name] = [buf], (0,)
            elif op == "while":
                initial = home[id(instr.operands[0])]
                fixed = passed_through(instr.attrs["body"])
                kept = tuple(k for k, b in enumerate(initial)
                             if k in fixed or initial.count(b) == 1 and free_after(b, here))
                if kept:
                    leaves = [initial[k] if k in kept else b for k, b in enumerate(leaves)]
                    found[instr.name] = kept
        home[id(instr)] = leaves
        for buf in leaves:
            last_read[buf] = max(last_read[buf], last_reader[here])
            holds_result[buf] = holds_result[buf] or instr is comp.root
    return found
