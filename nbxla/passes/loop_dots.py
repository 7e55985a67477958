"""Loop-invariant products hoisted out of ``while`` loops: one GEMM before the loop instead of a
matrix-vector product per step.

Why: correlation and covariance fill a matrix row by row,
``for i in range(M): cov[i, i:M] = data[:, i] @ data[:, i:M]``, with ``data`` unchanged by
the loop.  Step ``i`` is a GEMV over the window (memory-bound: the window is read once per
step, a quarter gigabyte for M=500, N=600), exactly as NumPy runs it; all the steps together
are rows of ``data.T @ data``, which one GEMM computes at compute-bound speed (about twice
the multiply-adds, read from cache).  XLA itself would not see this (its loops keep their
dots); JAX users write ``data.T @ data`` by hand.

Recognized, in the body of a ``while`` whose counter ``i`` runs from a constant by 1 below a
constant: ``nbxla_masked_dot(reshape(dynamic-slice(Y, ...)), X, lo, hi)`` where ``Y`` and ``X``
are state the body passes on unchanged, the slice takes the whole of ``Y`` but one position
``i`` along one axis, the dot contracts the rest with ``X``'s first axis, and the masks are
on ``X``'s free axis only.  It becomes row ``i`` of ``G = dot(Y, X)`` (computed before the
loop, carried as one more state element), masked to ``[lo, hi)``.  Only loops that use most
rows of ``G`` are rewritten (trip count at least half of them): a short loop keeps its GEMVs.
"""

from __future__ import annotations

import numpy as np

from ..hlo import Module, Shape, TupleShape
from ..hlo.builder import unique_name
from ..hlo.aliasing import returned_unchanged
from ..hlo.evaluator_linalg import MASKED_DOT_TARGET
from ..hlo.ir import Computation, Instruction
from .pipeline import Pass, computation_uses, instruction_ids, loop_owns_its_computations, rename_new_instructions


class LoopInvariantDots(Pass):
    name = "loop-invariant-dots"

    def run(self, module: Module) -> bool:
        before, changed = instruction_ids(module), False
        uses = computation_uses(module)
        for comp in module.computations_post_order():
            for loop in [i for i in comp.instructions if i.opcode == "while"]:
                if not loop_owns_its_computations(loop, uses):
                    continue
                while _hoist_one(comp, loop):
                    changed = True
        if changed:
            rename_new_instructions(module, before)
        return changed


def _new(comp: Computation, opcode: str, shape, operands, location=None, **attrs) -> Instruction:
    i = Instruction(opcode, shape, list(operands), attrs, unique_name(opcode.replace("-", "_")), location)
    i.parent = comp
    return i


def counted_loop(loop: Instruction) -> tuple[int, int, int] | None:
    """(state index of the counter, its start, trip count) for a loop
    ``i = c0; while i < c1: i += 1`` (None for any other loop)."""
    cond, body, init = loop.attrs["condition"], loop.attrs["body"], loop.operands[0]
    root = cond.root
    if root.opcode != "compare" or root.attrs.get("direction") != "LT" or init.opcode != "tuple":
        return None
    i, limit = root.operands
    if i.opcode != "get-tuple-element" or i.operands[0] is not cond.parameters[0] or limit.opcode != "constant":
        return None
    k = i.attrs["index"]
    start = init.operands[k]
    step = body.root.operands[k] if body.root.opcode == "tuple" else None
    if start.opcode != "constant" or step is None or step.opcode != "add":
        return None
    ops = step.operands
    if not any(_is_state(o, body, k) for o in ops) or not any(o.opcode == "constant" and _scalar(o) == 1 for o in ops):
        return None
    return k, _scalar(start), max(0, _scalar(limit) - _scalar(start))


def _scalar(c: Instruction):
    return c.literal.reshape(-1)[0].item() if c.literal.size == 1 else None


def _is_state(x: Instruction, body: Computation, k: int | None = None) -> bool:
    return x.opcode == "get-tuple-element" and x.operands[0] is body.parameters[0] and \
        (k is None or x.attrs["index"] == k)


def _hoist_one(comp: Computation, loop: Instruction) -> bool:
    body = loop.attrs["body"]
    if body.root.opcode != "tuple" or loop.operands[0].opcode != "tuple" or loop is comp.root \
            or any(loop in i.operands and i.opcode != "get-tuple-element" for i in comp.instructions):
        return False        # (the state grows by one element: only its readers by index stay valid)
    found = counted_loop(loop)
    if found is None:
        return False
    counter, _, trips = found
    fixed = returned_unchanged(body)
    for call in body.instructions:
        match = _row_product(call, body, counter, fixed)
        if match is None:
            continue
        y_index, axis, x_index = match
        y, x = (loop.operands[0].operands[k] for k in (y_index, x_index))
        rows = y.shape.dims[axis]
        if 2 * trips < rows:
            continue
        _rewrite(comp, loop, call, y, axis, x)
        return True
    return False


def _row_product(call: Instruction, body: Computation, counter: int, fixed: set[int]):
    """(state index of Y, the sliced axis, state index of X) when ``call`` is a masked dot of
    Y's slice at the counter with the invariant X, masked on X's free axis only; else None."""
    if call.opcode != "custom-call" or call.attrs.get("custom_call_target") != MASKED_DOT_TARGET:
        return None
    lhs, rhs = call.operands[:2]
    if lhs.shape.rank != 1 or rhs.shape.rank != 2 or tuple(call.attrs.get("dimensions", ())) != (2,) \
            or tuple(call.attrs.get("rhs_contracting_dims", ())) != (0,) \
            or not _is_state(rhs, body) or rhs.attrs["index"] not in fixed or rhs.shape.element_type != call.shape.element_type:
        return None
    ds = lhs.operands[0] if lhs.opcode == "reshape" else None
    if ds is None or ds.opcode != "dynamic-slice" or not _is_state(ds.operands[0], body) \
            or ds.operands[0].attrs["index"] not in fixed or ds.shape.rank != 2 \
            or ds.operands[0].shape.element_type != call.shape.element_type:
        return None
    y = ds.operands[0]
    sizes, starts = ds.attrs["dynamic_slice_sizes"], ds.operands[1:]
    if len(starts) != 2:
        return None
    for axis in (0, 1):
        other = 1 - axis
        if sizes[axis] == 1 and sizes[other] == y.shape.dims[other] == rhs.shape.dims[0] \
                and _is_state(starts[axis], body, counter):
            return y.attrs["index"], axis, rhs.attrs["index"]
    return None


def _rewrite(comp: Computation, loop: Instruction, call: Instruction, y: Instruction, axis: int,
             x: Instruction) -> None:
    body, cond = loop.attrs["body"], loop.attrs["condition"]
    loc, t = call.location, call.shape.element_type
    rows, cols = y.shape.dims[axis], x.shape.dims[1]
    # Before the loop: G = Y (its axis ``axis`` free) @ X, one more element of the state.
    g = _new(comp, "dot", Shape(t, (rows, cols)), [y, x], loc,
             lhs_contracting_dims=(1 - axis,), rhs_contracting_dims=(0,))
    init = loop.operands[0]
    shape = TupleShape(tuple(loop.shape.elements) + (g.shape,))
    new_init = _new(comp, "tuple", shape, list(init.operands) + [g], loop.location)
    at = comp.instructions.index(loop)
    comp.instructions[at:at] = [g, new_init]
    loop.operands[0] = new_init
    loop.shape = shape
    (state,), (cstate,) = body.parameters, cond.parameters
    state.shape = cstate.shape = shape
    k = len(shape.elements) - 1
    # In the body: row i of G (passed on unchanged), zero outside the masks' [lo, hi).
    i = call.operands[0].operands[0].operands[1 + axis]
    gi = _new(body, "get-tuple-element", g.shape, [state], loc, index=k)
    zero_index = _constant(body, Shape(i.shape.element_type, ()), loc)
    row = _new(body, "dynamic-slice", Shape(t, (1, cols)), [gi, i, zero_index], loc, dynamic_slice_sizes=(1, cols))
    flat = _new(body, "reshape", Shape(t, (cols,)), [row], loc)
    iota = _new(body, "iota", Shape("s64", (cols,)), [], loc, iota_dimension=0)
    added = [gi, zero_index, row, flat, iota]
    tests = []
    for bound, direction in zip(call.operands[2:4], ("GE", "LT")):
        if bound.shape.element_type != "s64":
            bound = _new(body, "convert", Shape("s64", ()), [bound], loc)
            added.append(bound)
        wide = _new(body, "broadcast", Shape("s64", (cols,)), [bound], loc, dimensions=())
        tests.append(_new(body, "compare", Shape("pred", (cols,)), [iota, wide], loc, direction=direction))
        added += [wide, tests[-1]]
    mask = _new(body, "and", Shape("pred", (cols,)), tests, loc)
    zero = _constant(body, Shape(t, ()), loc)
    zeros = _new(body, "broadcast", Shape(t, (cols,)), [zero], loc, dimensions=())
    masked = _new(body, "select", call.shape, [mask, flat, zeros], loc)
    added += [mask, zero, zeros, masked]
    at = body.instructions.index(call)
    body.instructions[at:at] = added
    for user in body.instructions:
        user.operands = [masked if o is call else o for o in user.operands]
    body.root.operands = list(body.root.operands) + [gi]
    body.root.shape = shape
    body.instructions.remove(call)


def _constant(comp: Computation, shape: Shape, location) -> Instruction:
    """A zero of ``shape`` (a scalar)."""
    return _new(comp, "constant", shape, [], location, literal=np.zeros((), shape.dtype))
