"""Window updates written and read back in one computation (a loop body's ``c[:, :, k] = u``,
then ``c[:, :, k]`` and ``c[:, :, k - 1]`` read, then ``c[:, :, k] = ...`` again): facts and the
rewrite the simplifier uses to forward the reads and write the window once.

The rewrites must keep the in-place kernels of the updates (``buffer_assignment``: an update
writes into its operand's buffer only where nothing reads the old value after it).  A read
moved from the update's result to something computed before it (the update's value, the
array under it) is free to run before the update -- but fusion may recompute that something
inside a later kernel, which then reads the old array after the update overwrote it, and the
update copies its operand instead (Cholesky's rolled inner update: 0.18 -> 16 ms at 120x120
when the read-back forwarded a value that reads the matrix).  Hence:

* a read-back is forwarded only where the update's value reads no array that an update of
  this computation overwrites (``reads_overwritten``);
* a read beside an update (another window, provably apart) is moved under it only together
  with merging that update into the one that covers it (``write_covered_windows_once``): the
  first update dies, the array under it has one writer again, and the moved read is a read
  of that writer's operand, as ``c[k] = f(c[k - 1])`` always was.
"""

from __future__ import annotations

from ..hlo.aliasing import updated_parameter
from ..hlo.ir import Computation, Instruction
from .counter_ranges import windows_apart

# Largest number of instructions ``reads_overwritten`` walks before answering "maybe" (yes).
READ_WALK_LIMIT = 4096


def same_values(a: list[Instruction], b: list[Instruction]) -> bool:
    """Are ``a`` and ``b`` the same values one by one (before CSE has merged them): the same
    instructions, equal scalar constants, or reshapes of the same value to the same shape?"""
    def same(x, y):
        if x is y:
            return True
        if x.opcode != y.opcode or x.shape != y.shape:
            return False
        if x.opcode == "constant":
            return x.shape.rank == 0 and x.literal.tolist() == y.literal.tolist()
        return x.opcode == "reshape" and same(x.operands[0], y.operands[0])
    return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))


def _array_key(instr: Instruction):
    """One key per array value: the same element of a tuple parameter (a loop's state) read by
    two ``get-tuple-element``s (before CSE merged them) is one array."""
    if instr.opcode == "get-tuple-element" and instr.operands[0].opcode == "parameter":
        return ("state", id(instr.operands[0]), instr.attrs["index"])
    return id(instr)


def overwritten_arrays(comp: Computation) -> set:
    """Keys of the arrays an update in ``comp`` may overwrite in place: the operand of a
    ``dynamic-update-slice`` or ``scatter``, the updated operand of an update fusion, the
    kept operand of an array ``select`` (a box update, ``A[i + 1:, i + 1:] -= ...``)."""
    found = set()
    for instr in comp.instructions:
        op = instr.opcode
        if op in ("dynamic-update-slice", "scatter"):
            found.add(_array_key(instr.operands[0]))
        elif op == "select" and instr.shape.rank and len(instr.operands) == 3:
            found.add(_array_key(instr.operands[2]))
        elif op == "fusion":
            k = updated_parameter(instr.attrs["calls"])
            if k is not None:
                found.add(_array_key(instr.operands[k]))
    return found


def reads_overwritten(value: Instruction, comp: Computation) -> bool:
    """Does ``value`` read (through anything it is computed from) an array that an update of
    ``comp`` overwrites?  Yes also where the walk is too long to tell."""
    overwritten = overwritten_arrays(comp)
    seen, stack = set(), [value]
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if len(seen) > READ_WALK_LIMIT or _array_key(x) in overwritten:
            return True
        stack.extend(x.operands)
    return False


def _covers(outer: Instruction, inner: Instruction) -> bool:
    """Does update ``outer`` write exactly the window update ``inner`` wrote (same sizes, same
    start values, one array shape: both clamp alike)?"""
    return inner.operands[1].shape.dims == outer.operands[1].shape.dims \
        and same_values(inner.operands[2:], outer.operands[2:])


def _read_beside(read: Instruction, update: Instruction, comp: Computation, counters: dict) -> bool:
    """Is ``read`` a window of ``update``'s result that misses the updated window at every
    step (``counter_ranges``: both starts known unclamped)?"""
    return read.opcode == "dynamic-slice" and read.operands[0] is update \
        and read.operands.count(update) == 1 and windows_apart(
            read.operands[1:], read.attrs["dynamic_slice_sizes"], update.operands[2:],
            update.operands[1].shape.dims, update.shape.dims, comp, counters)


def is_read_back(read: Instruction, update: Instruction) -> bool:
    """Is ``read`` the window ``update`` wrote, read back (same sizes, same start values: both
    clamp each start into [0, n - size] of one n, so they place the same window)?  One
    position of an axis only, as for static slices in ``simplify._slice_through``."""
    return read.opcode == "dynamic-slice" and read.operands[0] is update \
        and update.opcode == "dynamic-update-slice" and 1 in update.operands[1].shape.dims \
        and tuple(read.attrs["dynamic_slice_sizes"]) == update.operands[1].shape.dims \
        and same_values(update.operands[2:], read.operands[1:])


def write_covered_windows_once(comp: Computation, counters: dict) -> bool:
    """A window written twice (``c[:, k] = u; c[:, k] = c[:, k] * v``): the second update covers
    the first, so it may write over the array under the first instead, where nothing but the
    second reads the first -- after moving reads of other windows of the first (``c[:, k - 1]``,
    apart at every step) to the array under it and taking the first's value for its read-backs
    (also a value that reads the array: its one writer's value reads it then, ``c[k] =
    f(c[k])``), and only if that leaves the second the first's one reader.  Then the first dies and one update, one kernel, writes the window over the
    array under both.  Were the first still read, both would stay alive, the array would have
    two writers and neither could run in place; a read moved without the merge would read the
    old array after the first update (``window_writes``' docstring).  On the live graph: a read
    the simplifier's rules replaced (a read-back) no longer counts."""
    live = comp.post_order()
    users: dict[int, list[Instruction]] = {id(i): [] for i in live}
    for instr in live:
        for o in dict.fromkeys(instr.operands):
            users[id(o)].append(instr)
    changed = False
    for outer in live:
        inner = outer.operands[0] if outer.opcode == "dynamic-update-slice" else None
        if inner is None or inner.opcode != "dynamic-update-slice" or inner is comp.root \
                or outer.operands.count(inner) != 1 or not _covers(outer, inner):
            continue
        readers = [u for u in users[id(inner)] if u is not outer]
        backs = [r for r in readers if is_read_back(r, inner)]
        beside = [r for r in readers if r not in backs]
        if any(r is comp.root for r in backs) \
                or not all(_read_beside(r, inner, comp, counters) for r in beside):
            continue
        under, value = inner.operands[0], inner.operands[1]
        for r in backs:
            for user in users[id(r)]:
                user.operands = [value if o is r else o for o in user.operands]
            users[id(value)] = users[id(value)] + users[id(r)]
            users[id(r)] = []
        for r in beside:
            r.operands = [under] + list(r.operands[1:])
        outer.operands = [under] + list(outer.operands[1:])
        users[id(inner)] = []
        users[id(under)] = [u for u in users[id(under)] if u is not inner] + beside + [outer]
        changed = True
    return changed
