"""Loop-major state: carry an array sliced one position at a time along a minor dim with that dim first.

Why: a loop over the last axis (``for k: c[:, :, k] = f(a[:, :, k + 1], c[:, :, k - 1])``, npbench's
vadv; deriche's column recurrences along the middle axis) works each step on a slice that takes one
position of a minor dim.  Row-major, that slice's elements lie a whole row (or plane) apart: every
element fetches its own cache line, so the step moves up to 64 / itemsize times the bytes it uses,
cannot vectorize, and the loop runs at a fraction of the memory's speed (below NumPy, which has the
same strided access but no more of it).

With the sliced dim ``d`` moved to the front, each step's slice is one contiguous block (moving the
size-1 dim of the slice is a reshape, no copy).  So for each array the loop carries (read-only
arrays included: a loop carries those unchanged) whose every use in the body is a
``dynamic-slice`` or ``dynamic-update-slice`` of size 1 in ``d`` (any sizes elsewhere), the pass:

* transposes it once before the loop (``d`` first) and carries that;
* rewrites each slice and update in the body to the moved order (indices permuted, a reshape
  between the moved slice and the shape its users expect);
* after the loop, gives readers the array back: the value it started from when the body returns
  it unchanged, else one transpose back.

It pays only when the loop's state is larger than a core's cache (else strided reads hit the
cache) and the steps' saved traffic beats the transposes': trips x (bytes the strided
slices fetch - bytes the contiguous ones fetch) against the transposes' read and write (counted
twice: a transpose moves each element through a tile, slower than a stream).  Loops whose trip
count is not static, whose state is used whole, whose condition reads the array, or where any
use is of another kind (the whole array in an op, the array written as an update) keep their
layout.  A transpose back that the next loop would transpose again is not made twice: the next
loop starts from the array before it.
"""

from __future__ import annotations

from math import ceil, prod

from ..hlo import Module
from ..hlo.builder import unique_name
from ..hlo.ir import Computation, Instruction
from ..hlo.shapes import Shape, TupleShape, bit_width
from .cse import CommonSubexpressionElimination
from .simplify import AlgebraicSimplifier, contiguous_run
from .pipeline import Pass, computation_uses, instruction_ids, loop_owns_its_computations, rename_new_instructions

CACHE_LINE = 64                 # bytes a strided read fetches per element run
# A loop whose whole state fits in a core's cache (about 1 MiB of L2) reads its strided slices
# from there, at little more than a contiguous read's cost: the transposes (kernels of their
# own, once per run of the loop: per step of an outer loop when nested) would cost more than
# they save (symm's inner loop over columns of 60 x 80 arrays ran 2x slower moved).
CACHED_STATE_BYTES = 1 << 20
TRANSPOSE_COST = 2              # a transpose's byte costs this many streamed bytes


class LoopLayouts(Pass):
    name = "loop-layouts"

    def run(self, module: Module) -> bool:
        before, changed = instruction_ids(module), False
        uses = computation_uses(module)
        for comp in module.computations_post_order():
            moved: dict[tuple[int, tuple[int, ...]], Instruction] = {}   # (array, perm) -> its transpose
            for loop in [i for i in comp.instructions if i.opcode == "while"]:
                if not loop_owns_its_computations(loop, uses):
                    continue
                changed |= _move_loop_state(comp, loop, moved)
        if changed:
            rename_new_instructions(module, before)
            _clean_up(module)
        return changed


def _new(comp: Computation, opcode: str, shape, operands, location=None, **attrs) -> Instruction:
    i = Instruction(opcode, shape, list(operands), attrs, unique_name(opcode.replace("-", "_")), location)
    i.parent = comp
    return i


def _users(comp: Computation) -> dict[int, list[Instruction]]:
    out: dict[int, list[Instruction]] = {}
    for instr in comp.instructions:
        for o in dict.fromkeys(instr.operands):
            out.setdefault(id(o), []).append(instr)
    return out


def _is_constant(x: Instruction) -> bool:
    return x.opcode == "constant"


def _slice_sizes(use: Instruction) -> tuple[int, ...]:
    return tuple(use.attrs["dynamic_slice_sizes"]) if use.opcode == "dynamic-slice" else \
        tuple(use.operands[1].shape.dims)


def _indices(use: Instruction) -> list[Instruction]:
    return use.operands[1:] if use.opcode == "dynamic-slice" else use.operands[2:]


def _sliced_uses(body: Computation, k: int, users) -> list[Instruction] | None:
    """The dynamic-slices and dynamic-update-slices of state element ``k`` in the body (the chain
    of updates included), or None when the element has any other use."""
    param, root = body.parameters[0], body.root
    values = [i for i in users.get(id(param), []) if i.opcode == "get-tuple-element" and i.attrs["index"] == k]
    if not values:
        return None
    chain, uses = {id(v) for v in values}, []
    for v in body.instructions:                       # definitions come before their users
        if id(v) not in chain:
            continue
        for u in users.get(id(v), []):
            if u is root:
                if [j for j, o in enumerate(root.operands) if o is v] != [k]:
                    return None
                continue
            if u.opcode not in ("dynamic-slice", "dynamic-update-slice") or u.operands[0] is not v \
                    or any(o is v for o in u.operands[1:]):
                return None
            uses.append(u)
            if u.opcode == "dynamic-update-slice":
                chain.add(id(u))
    if id(root.operands[k]) not in chain:
        return None
    return uses


def _moved_dim(shape: Shape, uses: list[Instruction]) -> int | None:
    """The dim every use takes one position of, at a loop-dependent index (the most minor such),
    when moving it first changes the layout; else None."""
    best = None
    for d in range(1, shape.rank):
        if prod(shape.dims[:d]) == 1:
            continue
        if all(_slice_sizes(u)[d] == 1 for u in uses) and any(not _is_constant(_indices(u)[d]) for u in uses):
            best = d
    return best


def _fetched_bytes(sizes, dims, itemsize: int) -> int:
    run = max(1, contiguous_run(sizes, dims))
    return prod(sizes) // run * CACHE_LINE * ceil(run * itemsize / CACHE_LINE)


def _pays(shape: Shape, uses, perm, trips: int, transposes: int) -> bool:
    itemsize = max(1, bit_width(shape.element_type) // 8)
    moved_dims = [shape.dims[p] for p in perm]
    saved = 0
    for u in uses:
        sizes = _slice_sizes(u)
        saved += _fetched_bytes(sizes, shape.dims, itemsize) - \
            _fetched_bytes([sizes[p] for p in perm], moved_dims, itemsize)
    cost = TRANSPOSE_COST * transposes * 2 * prod(shape.dims) * itemsize
    return trips * saved > cost


def _scalar_constant(x: Instruction) -> int | None:
    if x.opcode != "constant" or x.literal.size != 1 or x.shape.element_type[0] not in "su":
        return None
    return int(x.literal.reshape(-1)[0])


_SWAPPED = {"LT": "GT", "LE": "GE", "GT": "LT", "GE": "LE", "NE": "NE"}


def trip_count(loop: Instruction) -> int | None:
    """Iterations of ``i = c0; while i <op> c1: i += s`` (any comparison, a constant step of
    either sign, the counter on either side); None for any other loop."""
    cond, body, init = loop.attrs["condition"], loop.attrs["body"], loop.operands[0]
    test = cond.root
    if test.opcode != "compare" or init.opcode != "tuple" or body.root.opcode != "tuple":
        return None
    lhs, rhs = test.operands
    direction = test.attrs.get("direction")
    if rhs.opcode == "get-tuple-element":
        lhs, rhs, direction = rhs, lhs, _SWAPPED.get(direction)
    limit = _scalar_constant(rhs)
    if lhs.opcode != "get-tuple-element" or lhs.operands[0] is not cond.parameters[0] or limit is None:
        return None
    k = lhs.attrs["index"]
    start, step = _scalar_constant(init.operands[k]), body.root.operands[k]
    if start is None or step.opcode not in ("add", "subtract"):
        return None
    counter = [j for j, o in enumerate(step.operands) if o.opcode == "get-tuple-element"
               and o.operands[0] is body.parameters[0] and o.attrs["index"] == k]
    if len(counter) != 1 or (step.opcode == "subtract" and counter != [0]):
        return None
    s = _scalar_constant(step.operands[1 - counter[0]])
    if not s:
        return None
    s = -s if step.opcode == "subtract" else s
    span = limit - start
    if direction in ("LT", "LE") and s > 0:
        span += direction == "LE"
        return max(0, -(-span // s))
    if direction in ("GT", "GE") and s < 0:
        span -= direction == "GE"
        return max(0, -(-span // s))
    if direction == "NE" and span % s == 0 and span // s >= 0:
        return span // s
    return None


def _move_loop_state(comp: Computation, loop: Instruction, moved) -> bool:
    body, cond, init = loop.attrs["body"], loop.attrs["condition"], loop.operands[0]
    trips = trip_count(loop)
    if trips is None or init.opcode != "tuple" or body.root.opcode != "tuple" or loop is comp.root:
        return False
    if loop.shape.byte_size <= CACHED_STATE_BYTES:
        return False
    outer_users = _users(comp)
    if any(u.opcode != "get-tuple-element" for u in outer_users.get(id(loop), [])):
        return False
    body_users, cond_users = _users(body), _users(cond)
    if any(u.opcode != "get-tuple-element" for u in body_users.get(id(body.parameters[0]), [])) or \
            any(u.opcode != "get-tuple-element" for u in cond_users.get(id(cond.parameters[0]), [])):
        return False
    read_by_cond = {u.attrs["index"] for u in cond_users.get(id(cond.parameters[0]), []) if cond_users.get(id(u))}
    after = [u for u in outer_users.get(id(loop), [])]
    changed = False
    for k, shape in enumerate(loop.shape.elements):
        if shape.is_tuple or shape.rank < 2 or k in read_by_cond:
            continue
        uses = _sliced_uses(body, k, body_users)
        d = _moved_dim(shape, uses) if uses else None
        if d is None:
            continue
        perm = (d,) + tuple(j for j in range(shape.rank) if j != d)
        unchanged = body.root.operands[k].opcode == "get-tuple-element"
        live_after = any(g.attrs["index"] == k and outer_users.get(id(g)) for g in after)
        transposes = (not _moved_for_free(loop.operands[0].operands[k], perm, moved)) + (live_after and not unchanged)
        if not _pays(shape, uses, perm, trips, transposes):
            continue
        _rewrite_element(comp, loop, k, perm, uses, moved, after, outer_users, unchanged)
        body_users = _users(body)
        outer_users = _users(comp)
        changed = True
    return changed


def _inverse(perm) -> tuple[int, ...]:
    return tuple(perm.index(j) for j in range(len(perm)))


def _moved_for_free(x: Instruction, perm, moved) -> bool:
    """Is ``x`` with ``perm`` applied already at hand: the operand of a transpose back, a
    transpose made for an earlier loop, or one position updated in such an array?"""
    if x.opcode == "transpose" and tuple(x.attrs["dimensions"]) == _inverse(perm):
        return True
    if (id(x), perm) in moved or _scalar_broadcast(x):
        return True
    return _sinks(x, perm) and _moved_for_free(x.operands[0], perm, moved)


def _scalar_broadcast(x: Instruction) -> bool:
    return x.opcode == "broadcast" and x.operands[0].shape.rank == 0


def _sinks(x: Instruction, perm) -> bool:
    """Is ``x`` an update of one position of the moved dim (its transpose is the update of the
    array's transpose: the size-1 dim moves without a copy)?"""
    return x.opcode == "dynamic-update-slice" and x.operands[1].shape.dims[perm[0]] == 1


def _moved_value(comp: Computation, x: Instruction, perm, moved, before: Instruction) -> Instruction:
    """``x`` with ``perm`` applied, from what is at hand when it is, else one new transpose
    (placed before ``before``)."""
    if x.opcode == "transpose" and tuple(x.attrs["dimensions"]) == _inverse(perm):
        return x.operands[0]
    if (id(x), perm) in moved:
        return moved[(id(x), perm)]
    if _sinks(x, perm):
        # T(update(y, u at i)) = update(T(y), u reshaped, at i permuted): the size-1 dim moves freely.
        target = _moved_value(comp, x.operands[0], perm, moved, before)
        update, indices = x.operands[1], x.operands[2:]
        flat = _new(comp, "reshape", _permuted(update.shape, perm), [update], x.location)
        new = _new(comp, "dynamic-update-slice", target.shape, [target, flat] + [indices[p] for p in perm],
                   x.location)
    elif _scalar_broadcast(x):
        # (``np.empty``/``np.zeros`` state: the moved array is the same fill, no kernel)
        new = _new(comp, "broadcast", _permuted(x.shape, perm), [x.operands[0]], x.location, dimensions=())
        flat = None
    else:
        new = _new(comp, "transpose", _permuted(x.shape, perm), [x], x.location, dimensions=perm)
        flat = None
    at = comp.instructions.index(before)
    comp.instructions[at:at] = [flat, new] if flat is not None else [new]
    moved[(id(x), perm)] = new
    return new


def _permuted(shape: Shape, perm) -> Shape:
    return Shape(shape.element_type, [shape.dims[p] for p in perm])


def _rewrite_element(comp, loop, k, perm, uses, moved, after, outer_users, unchanged) -> None:
    body, cond, init = loop.attrs["body"], loop.attrs["condition"], loop.operands[0]
    inverse = _inverse(perm)
    shape = loop.shape.elements[k]
    new_shape = _permuted(shape, perm)
    # Before the loop: the array with d first.
    start = init.operands[k]
    first = _moved_value(comp, start, perm, moved, init)
    elements = list(loop.shape.elements)
    elements[k] = new_shape
    state = TupleShape(tuple(elements))
    new_init = _new(comp, "tuple", state, [first if j == k else o for j, o in enumerate(init.operands)], init.location)
    comp.instructions.insert(comp.instructions.index(loop), new_init)
    loop.operands[0] = new_init
    loop.shape = state
    for c in (body, cond):
        c.parameters[0].shape = state
        for g in c.instructions:
            if g.opcode == "get-tuple-element" and g.operands[0] is c.parameters[0] and g.attrs["index"] == k:
                g.shape = new_shape
    body.root.shape = state
    # In the body: every slice and update in the moved order.
    for u in uses:
        indices = _indices(u)
        moved_indices = [indices[p] for p in perm]
        if u.opcode == "dynamic-slice":
            old_shape = u.shape
            u.shape = _permuted(old_shape, perm)
            u.attrs["dynamic_slice_sizes"] = tuple(u.attrs["dynamic_slice_sizes"][p] for p in perm)
            u.operands = [u.operands[0]] + moved_indices
            back = _new(body, "reshape", old_shape, [u], u.location)
            for reader in body.instructions:
                if reader is not back and u in reader.operands:
                    reader.operands = [back if o is u else o for o in reader.operands]
            body.instructions.insert(body.instructions.index(u) + 1, back)
        else:
            update = u.operands[1]
            flat = _new(body, "reshape", _permuted(update.shape, perm), [update], u.location)
            body.instructions.insert(body.instructions.index(u), flat)
            u.shape = new_shape
            u.operands = [u.operands[0], flat] + moved_indices
    # After the loop: readers get the array in its own order.
    for g in after:
        if g.attrs["index"] != k:
            continue
        g.shape = new_shape
        if unchanged:
            replacement = start
        else:
            replacement = _new(comp, "transpose", shape, [g], loop.location, dimensions=inverse)
            comp.instructions.insert(comp.instructions.index(g) + 1, replacement)
        for reader in outer_users.get(id(g), []):
            if reader is not replacement:
                reader.operands = [replacement if o is g else o for o in reader.operands]
        if comp.root is g:
            comp.root = replacement


def _clean_up(module: Module) -> None:
    """Fold what the moves left behind: a transpose back sliced by an edge step outside the loop
    (the slice reads the moved array), duplicates."""
    AlgebraicSimplifier().run(module)
    CommonSubexpressionElimination().run(module)
