"""Which values name memory that already exists: one answer for every planner and backend.

A *view* writes nothing: ``tuple`` and ``get-tuple-element`` name their operands' buffers, and a
``reshape`` or ``bitcast`` of a row-major array (no layout on either side) that keeps the element
type is the same bytes read with other dimensions.  The buffer plan gives views no memory of their
own (their readers keep the operand's buffer alive), the AOT driver passes the operand's pointer
on, and the JIT runtimes hand out a NumPy ``reshape`` of the operand.

A ``bitcast`` that changes the element type (same width, HLO allows it) is *not* a view here: it
is a kernel that converts bits (the elemental emitter's rule), since a NumPy ``reshape`` cannot
change a dtype and a runtime that shared the bytes would hand out an array of the wrong type.

Beyond views, an output may be *written into* an operand's buffer: a fusion updating a window
of one operand (``updated_parameter``), a one-operand scatter (``scatters_in_place``) and a ``while`` keeping its state in its initial state's
buffers (every leaf the body passes through, ``passed_through``, and the others where the
initial leaf dies at the loop).  Which of those may happen is the buffer plan's decision
(``BufferPlan.operand_buffers``); the facts it decides from are here.
"""

from __future__ import annotations

from .iota_masks import box_bounds
from .ir import Computation, Instruction

# Opcodes that never write new memory, whatever their shapes.
NAMING_OPCODES = frozenset({"tuple", "get-tuple-element"})
# Opcodes that are views under ``is_byte_view``'s conditions, and kernels otherwise.
REINTERPRETING_OPCODES = frozenset({"reshape", "bitcast"})


def is_byte_view(instr: Instruction) -> bool:
    """Is ``instr`` a ``reshape``/``bitcast`` that reads its operand's bytes unchanged?"""
    if instr.opcode not in REINTERPRETING_OPCODES or instr.shape.is_tuple:
        return False
    source = instr.operands[0].shape
    return (not source.is_tuple and instr.shape.layout is None and source.layout is None
            and instr.shape.element_type == source.element_type)


def is_view(instr: Instruction) -> bool:
    """Does ``instr`` only name existing memory (a tuple, a tuple element, a byte view)?"""
    return instr.opcode in NAMING_OPCODES or is_byte_view(instr)


def view_source(instr: Instruction, index: tuple[int, ...] = ()) -> tuple[Instruction, tuple[int, ...]]:
    """The operand and leaf index whose buffer leaf ``index`` of the view ``instr`` is."""
    if instr.opcode == "tuple":
        return instr.operands[index[0]], index[1:]
    if instr.opcode == "get-tuple-element":
        return instr.operands[0], (instr.attrs["index"],) + index
    if is_byte_view(instr):
        return instr.operands[0], index
    raise ValueError(f"%{instr.name} ({instr.opcode}) is not a view: it writes memory of its own")


# ---- outputs that can live in an operand's buffer -------------------------------------------------
# Structural facts only: whether the operand's buffer is free to take is the buffer plan's answer
# (``passes/buffer_assignment``: ``BufferPlan.operand_buffers``).

def updated_parameter(comp: Computation) -> int | None:
    """The number of the parameter ``comp`` updates in place, or None: a fusion of it can write
    only the update's window into that operand's buffer (``codegen/updates.py``).  Its root is
    a non-empty ``dynamic-update-slice`` of that parameter, or a box update: ``select(box,
    new, parameter)`` with ``box`` true exactly on a box of indices (``hlo/iota_masks``: a
    slice of index-dependent length written, ``A[i + 1:, i + 1:] -= ...``), outside which the
    output is the parameter unchanged."""
    root = comp.root
    if root.opcode == "select":
        return box_updated_parameter(root)
    chain = update_chain(comp)
    return None if chain is None else chain[0].operands[0].parameter_number


def update_chain(comp: Computation) -> list[Instruction] | None:
    """The ``dynamic-update-slice`` instructions ``comp``'s root is made of, innermost first:
    ``[root]`` for one update of a parameter, or a chain ``dus_n(... dus_1(param, u_1) ..., u_n)``
    (walls set one after another: ``p[:, -1] = p[:, -2]; p[0, :] = p[1, :]``) that can be
    written window after window into the parameter's buffer.  Every start is a constant, and
    the value before link ``j`` (the parameter, or link ``j - 1``) is read only by link ``j``
    itself or by ``slice`` instructions outside the windows of links ``j .. k - 1`` for every
    later link ``k`` whose update uses them: when link ``k`` is written, the buffer holds
    those values still.  (Reads inside link ``k``'s own window are the kernel's business:
    ``codegen/updates._emit_chain`` computes such a link into a temporary first.)  None for any
    other root."""
    chain = [comp.root]
    while chain[-1].opcode == "dynamic-update-slice" and chain[-1].operands[0].opcode == "dynamic-update-slice":
        chain.append(chain[-1].operands[0])
    chain.reverse()
    if any(d.opcode != "dynamic-update-slice" or 0 in d.operands[1].shape.dims
           or len(d.operands) != 2 + d.shape.rank for d in chain) or chain[0].operands[0].opcode != "parameter":
        return None
    if len(chain) == 1:
        return chain
    if any(constant_starts(d) is None for d in chain):
        return None
    for r, j, links in chain_reads(comp, chain):
        for k in links:
            if k > j and not (r.opcode == "slice" and all(outside_window(r, chain[m], r.operands[0])
                                                          for m in range(j, k))):
                return None
    return chain


def chain_reads(comp: Computation, chain: list[Instruction]):
    """(reader, j, links) for each instruction reading the value before link ``j`` (the
    parameter for 0, else link ``j - 1``), other than link ``j`` through its operand 0:
    ``links`` the numbers of the links whose update depends on the reader."""
    values = {id(chain[0].operands[0]): 0} | {id(d): j + 1 for j, d in enumerate(chain[:-1])}
    uses: dict[int, set[int]] = {}          # instruction id -> links whose update reads it
    for k, d in enumerate(chain):
        stack = [d.operands[1]]
        while stack:
            instr = stack.pop()
            if k in uses.setdefault(id(instr), set()) or id(instr) in values:
                continue
            uses[id(instr)].add(k)
            stack.extend(instr.operands)
    link_number = {id(d): k for k, d in enumerate(chain)}
    for instr in comp.instructions:
        k = link_number.get(id(instr))
        for o in dict.fromkeys(instr.operands[1:] if k is not None else instr.operands):
            if id(o) in values:
                yield instr, values[id(o)], {k} if k is not None else uses.get(id(instr), set())


def constant_starts(update: Instruction) -> list[int] | None:
    """The clamped start indices of a ``dynamic-update-slice`` whose starts are constants, or None."""
    starts = []
    for s, n, u in zip(update.operands[2:], update.shape.dims, update.operands[1].shape.dims):
        if s.opcode != "constant" or s.shape.rank != 0:
            return None
        starts.append(min(max(int(s.literal), 0), n - u))
    return starts


def outside_window(r: Instruction, update: Instruction, target: Instruction | None = None) -> bool:
    """Whether ``r`` is a ``slice`` of ``target`` (default: the array ``update`` writes into;
    ``update`` a ``dynamic-update-slice`` with constant starts) whose elements all lie outside
    the window: apart along at least one dimension."""
    target = update.operands[0] if target is None else target
    if r.opcode != "slice" or r.operands.count(target) != 1:
        return False
    starts = constant_starts(update)
    return starts is not None and any(sl.limit <= start or sl.start >= start + u for sl, start, u in
                                      zip(r.attrs["slice"], starts, update.operands[1].shape.dims))


def scatters_in_place(instr: Instruction) -> bool:
    """Is ``instr`` a one-operand ``scatter`` (not fused), which may write into its operand's
    buffer: its kernel copies the operand into the output only where they differ
    (``codegen/scatter.py``), and reads the indices and updates from buffers of their own."""
    return instr.opcode == "scatter" and len(instr.operands) == 3 and not instr.shape.is_tuple \
        and instr.operands.count(instr.operands[0]) == 1


def box_updated_parameter(root: Instruction) -> int | None:
    """For ``select(box, new, parameter)`` of an array (see ``updated_parameter``): the
    parameter's number; else None."""
    if root.opcode != "select" or root.shape.is_tuple or not root.shape.rank or 0 in root.shape.dims:
        return None
    predicate, _, old = root.operands
    if old.opcode != "parameter" or old.shape != root.shape or predicate.shape.dims != root.shape.dims \
            or box_bounds(predicate) is None:
        return None
    return old.parameter_number


def returned_unchanged(body: Computation) -> set[int]:
    """The state elements (tuple elements, nested tuples included) a loop body returns as it got
    them: root operand k is element k of the parameter."""
    root, (param,) = body.root, body.parameters
    if root.opcode != "tuple":
        return set()
    return {k for k, o in enumerate(root.operands)
            if o.opcode == "get-tuple-element" and o.operands[0] is param and o.attrs["index"] == k}


def passed_through(body: Computation) -> set[int]:
    """The state elements a loop body returns as it got them (no step of the body can write
    them in place either: the root reads them).  Only for a state of arrays (no nested tuples):
    callers number the state's buffers by element."""
    if any(e.is_tuple for e in body.parameters[0].shape.elements):
        return set()
    return returned_unchanged(body)
