"""Loops over output positions whose body is one fixed-size window reduction become one
``convolution`` (a reduce-add of window times weights) or one ``reduce-window``.

Why: NumPy code writes a convolution as a loop nest over output positions (npbench's conv2d,
and LeNet built from it),
``out[:, i, j, :] = np.sum(x[:, i:i+K, j:j+K, :, None] * w[None], axis=(1, 2, 3))``, and max
pooling as ``out[:, i, j, :] = np.max(x[:, 2*i:2*i+2, 2*j:2*j+2, :], axis=(1, 2))``.  Rolled,
every step is a small reduction kernel behind a host round trip; unrolled, hundreds of them
for LLVM to compile.  The whole nest is exactly XLA's ``convolution`` (a library call: BLAS
GEMMs, or one patch-GEMM kernel per geometry) or ``reduce-window`` (one kernel).

Recognized: a nest of counted ``while`` loops (counter from a constant by 1 below a constant,
at least one step each) that pass their state on unchanged except the counter and one array
``out``; an outer loop's body only runs the next loop on ``out``; the innermost writes
``out = dynamic-update-slice(out, reshape(E(R)), starts)`` where, per loop, one dimension
starts at that loop's counter plus a constant and is 1 wide, and every other start is a
constant; ``E`` is a chain of elementwise ops (none, a convert, a bias added, a mean's divide, a
relu) whose other operands are constant scalars or broadcasts of invariants, applied to the
whole result afterwards; and ``R`` reads only loop invariants and the counters, as one of

* ``reduce-add(multiply(broadcast(dynamic-slice(X)), broadcast(W)))`` -> ``convolution``;
* ``reduce(dynamic-slice(X))`` with a recognized reducer -> ``reduce-window``,

where the slice of ``X`` starts at ``stride * counter + constant`` (stride >= 1) in one
dimension per loop and at a constant elsewhere, never clamped (the windows of all steps lie
inside ``X``).  Then no step reads what another writes, and the nest is the window operation
over all positions at once, written into ``out``'s initial value.  Anything else is left as it
is (the loop runs as before).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod

import numpy as np

from ..hlo import Builder, Module, Shape
from ..hlo.aliasing import returned_unchanged
from ..hlo.attributes import ConvDimensionNumbers, SliceDim, Window, WindowDim
from ..hlo.ir import Computation, Instruction
from ..hlo.reducers import reducer_op
from ..hlo import shapes as S
from .loop_dots import counted_loop
from .pipeline import Pass, instruction_ids, rename_new_instructions

# (what a loop's state element holds, seen from the innermost body)
_OUT = ("out",)


class WindowLoops(Pass):
    name = "window-loops"

    def run(self, module: Module) -> bool:
        before, changed = instruction_ids(module), False
        for comp in module.computations_post_order():
            for loop in [i for i in comp.instructions if i.opcode == "while"]:
                if loop.parent is comp and _rewrite_nest(comp, loop):
                    changed = True
        if changed:
            rename_new_instructions(module, before)
        return changed


@dataclass
class _Nest:
    levels: list[tuple[int, int]] = field(default_factory=list)   # (counter start, trips) per loop
    out_index: int = -1                   # the outer loop's state element that is ``out``
    body: Computation | None = None       # the innermost body
    values: dict = field(default_factory=dict)   # its state element -> what it holds
    update: Instruction | None = None     # the innermost dynamic-update-slice


def _is_element(x: Instruction, param: Instruction) -> bool:
    return x.opcode == "get-tuple-element" and x.operands[0] is param


def _loop_nest(loop: Instruction) -> _Nest | None:
    """The nest under ``loop`` when it has the recognized form (see the module docstring)."""
    init = loop.operands[0]
    if init.opcode != "tuple":
        return None
    nest = _Nest()
    # what each state element of the current loop holds: ("iv", level), _OUT, ("inv", instr)
    values = {e: ("inv", op) for e, op in enumerate(init.operands)}
    while True:
        found = counted_loop(loop)
        if found is None or found[2] < 1 or loop.operands[0].opcode != "tuple":
            return None
        counter, start, trips = found
        body = loop.attrs["body"]
        root, (param,) = body.root, body.parameters
        if root.opcode != "tuple":
            return None
        kept = returned_unchanged(body)
        written = [e for e in range(len(root.operands)) if e != counter and e not in kept]
        if len(written) != 1:
            return None
        (m,) = written
        if nest.levels:
            if values.get(m) != _OUT or any(v == _OUT for e, v in values.items() if e != m):
                return None
        else:
            nest.out_index = m
        values = dict(values)
        values[counter], values[m] = ("iv", len(nest.levels)), _OUT
        nest.levels.append((start, trips))
        new = root.operands[m]
        if new.opcode == "dynamic-update-slice" and _is_element(new.operands[0], param) \
                and new.operands[0].attrs["index"] == m:
            nest.body, nest.values, nest.update = body, values, new
            return nest
        if new.opcode != "get-tuple-element" or new.operands[0].opcode != "while":
            return None
        inner = new.operands[0]
        inner_found = counted_loop(inner)
        if inner_found is None or inner.operands[0].opcode != "tuple":
            return None
        inner_values = {}
        for e, op in enumerate(inner.operands[0].operands):
            if e == inner_found[0]:
                continue
            if _is_element(op, param):
                inner_values[e] = values[op.attrs["index"]]
            elif op.opcode == "constant":
                inner_values[e] = ("inv", op)
            else:
                return None
        if inner_values.get(new.attrs["index"]) != _OUT:
            return None
        loop, values = inner, inner_values


def _affine(x: Instruction, param: Instruction, values: dict):
    """``x`` (an integer scalar of the innermost body) as ({loop level: coefficient}, constant),
    or None when it is not affine in the counters."""
    if x.shape.is_tuple or x.shape.rank != 0 or not S.is_integral(x.shape.element_type):
        return None
    if x.opcode == "constant":
        return {}, int(x.literal)
    if _is_element(x, param):
        v = values.get(x.attrs["index"])
        if v is None or v == _OUT:
            return None
        if v[0] == "iv":
            return {v[1]: 1}, 0
        c = v[1]
        return ({}, int(c.literal)) if c.opcode == "constant" and c.shape.rank == 0 else None
    if x.opcode == "convert":
        return _affine(x.operands[0], param, values)
    if x.opcode in ("add", "subtract", "multiply"):
        a, b = (_affine(o, param, values) for o in x.operands)
        if a is None or b is None:
            return None
        if x.opcode == "multiply":
            if a[0] and b[0]:
                return None
            (c, k), scale = (a, b[1]) if a[0] else (b, a[1])
            return {lv: n * scale for lv, n in c.items()}, k * scale
        sign = 1 if x.opcode == "add" else -1
        coeffs = dict(a[0])
        for lv, n in b[0].items():
            coeffs[lv] = coeffs.get(lv, 0) + sign * n
        return {lv: n for lv, n in coeffs.items() if n}, a[1] + sign * b[1]
    return None


def _invariant(x: Instruction, param: Instruction, values: dict) -> Instruction | None:
    """The value outside the nest that ``x`` (read in the innermost body) always holds."""
    if x.opcode == "constant":
        return x
    if _is_element(x, param):
        v = values.get(x.attrs["index"])
        if v is not None and v[0] == "inv":
            return v[1]
    return None


@dataclass
class _Window:
    """The sliced operand ``X`` of the innermost body: per dimension of the slice, its static
    range in ``X`` over all steps and, for the dimensions that move with a loop, (level, stride)."""
    source: Instruction
    ranges: list[tuple[int, int]]
    moving: dict[int, tuple[int, int]]      # slice dimension -> (loop level, stride)


def _window(ds: Instruction, nest: _Nest) -> _Window | None:
    param = nest.body.parameters[0]
    if ds.opcode != "dynamic-slice":
        return None
    source = _invariant(ds.operands[0], param, nest.values)
    if source is None:
        return None
    sizes = ds.attrs["dynamic_slice_sizes"]
    ranges, moving = [], {}
    for d, start in enumerate(ds.operands[1:]):
        found = _affine(start, param, nest.values)
        if found is None:
            return None
        coeffs, const = found
        if not coeffs:
            lo, hi = const, const + sizes[d]
        elif len(coeffs) == 1:
            ((level, stride),) = coeffs.items()
            if stride < 1 or any(m[0] == level for m in moving.values()):
                return None
            first, trips = nest.levels[level]
            lo = stride * first + const
            hi = lo + stride * (trips - 1) + sizes[d]
            moving[d] = (level, stride)
        else:
            return None
        if lo < 0 or hi > source.shape.dims[d]:
            return None                 # (clamped at some step: not a plain window)
        ranges.append((lo, hi))
    if len(moving) != len(nest.levels):
        return None
    return _Window(source, ranges, moving)


def _placement(nest: _Nest):
    """(dimension of ``out`` per loop level, constant offsets of the rest, the reduced value R)
    from the innermost update, or None."""
    param = nest.body.parameters[0]
    dus = nest.update
    out, update = dus.operands[0].shape, dus.operands[1]
    at_level, offsets = {}, []
    for d, start in enumerate(dus.operands[2:]):
        found = _affine(start, param, nest.values)
        if found is None:
            return None
        coeffs, const = found
        if not coeffs:
            offsets.append(const)
            if const < 0 or const + update.shape.dims[d] > out.dims[d]:
                return None
            continue
        if len(coeffs) != 1 or update.shape.dims[d] != 1:
            return None
        ((level, n),) = coeffs.items()
        first, trips = nest.levels[level]
        if n != 1 or level in at_level.values():
            return None
        offsets.append(first + const)
        if first + const < 0 or first + const + trips > out.dims[d]:
            return None
        at_level[d] = level
    # (a convert on either side of the reshape: an f64 sum written into an f32 output)
    shaped = update.operands[0] if update.opcode == "convert" else update
    if len(at_level) != len(nest.levels) or shaped.opcode != "reshape":
        return None
    kept = [n for d, n in enumerate(update.shape.dims) if d not in at_level]
    if list(shaped.operands[0].shape.dims) != kept:
        return None
    # elementwise ops between the reduction and the update, each with one operand from it
    # and the others constants or broadcasts of invariants (a bias, a mean's count, a relu)
    epilogue, reduced = [], shaped.operands[0]
    while reduced.opcode != "reduce":
        if not reduced.is_elementwise or reduced.shape.is_tuple:
            return None
        main = [k for k, o in enumerate(reduced.operands) if _side(o, nest) is None]
        if len(main) != 1:
            return None
        epilogue.append((reduced, main[0]))
        reduced = reduced.operands[main[0]]
    return at_level, offsets, reduced, epilogue[::-1]


def _side(x: Instruction, nest: _Nest):
    """(the invariant, its dimension -> dimension of R) when ``x`` is a constant scalar or a
    broadcast of an invariant, else None."""
    param = nest.body.parameters[0]
    if x.opcode == "constant" and x.shape.rank == 0:
        return x, ()
    if x.opcode == "broadcast":
        source = _invariant(x.operands[0], param, nest.values)
        if source is not None and not source.shape.is_tuple:
            return source, tuple(x.attrs.get("dimensions", ()))
    return None


def _rewrite_nest(comp: Computation, loop: Instruction) -> bool:
    nest = _loop_nest(loop)
    if nest is None:
        return False
    users = [i for i in comp.instructions if loop in i.operands]
    if loop is comp.root or any(u.opcode != "get-tuple-element" for u in users):
        return False
    placed = _placement(nest)
    if placed is None:
        return False
    at_level, offsets, reduced, epilogue = placed
    if len(reduced.operands) != 2:
        return False
    b = Builder(f"{comp.name}.window_loops")
    b.location = loop.location
    made = _as_convolution(b, comp, reduced, nest) or _as_reduce_window(b, comp, reduced, nest)
    if made is None:
        return False
    value, labels = made
    # ``value`` has one dimension per label: ("level", l) for the positions of loop l, ("kept", r)
    # for dimension r of R; ``out``'s order puts the levels at their update dimensions.
    out_shape = nest.update.shape
    order, r = [], 0
    for d in range(out_shape.rank):
        if d in at_level:
            order.append(labels.index(("level", at_level[d])))
        else:
            order.append(labels.index(("kept", r)))
            r += 1
    if order != list(range(len(order))):
        value = b.op("transpose", value, dimensions=tuple(order))
    # R's dimension r is out's r-th dimension that no loop moves along
    at_kept = [d for d in range(out_shape.rank) if d not in at_level]
    for op, main in epilogue:
        operands = []
        for k, o in enumerate(op.operands):
            if k == main:
                operands.append(value)
                continue
            source, dims = _side(o, nest)
            operands.append(b.broadcast(_materialize(b, source, comp), value.shape.dims,
                                        tuple(at_kept[r] for r in dims)))
        attrs = {k: v for k, v in op.attrs.items()}
        value = b.op(op.opcode, *operands, shape=value.shape.with_type(op.shape.element_type), **attrs)
    if value.shape.element_type != out_shape.element_type:
        value = b.convert(value, out_shape.element_type)
    initial = _materialize(b, loop.operands[0].operands[nest.out_index], comp)
    if tuple(value.shape.dims) != tuple(out_shape.dims):
        starts = [b.constant(np.int64(o)) for o in offsets]
        value = b.op("dynamic-update-slice", initial, value, *starts)
    # the loop's results: ``out`` is the new value, the counter its last value, the rest as given
    counter, start, trips = counted_loop(loop)
    final_counter = b.constant(np.asarray(start + trips, S.to_numpy_dtype(
        loop.operands[0].operands[counter].shape.element_type)))
    replacements = {}
    for u in users:
        e = u.attrs["index"]
        replacements[id(u)] = value if e == nest.out_index else final_counter if e == counter \
            else _materialize(b, loop.operands[0].operands[e], comp)
    at = comp.instructions.index(loop)
    for instr in b.instructions:
        instr.parent = comp
    comp.instructions[at:at] = b.instructions
    for u in users:
        comp.replace_all_uses(u, replacements[id(u)])
    comp.instructions = [i for i in comp.instructions if i is not loop and id(i) not in replacements]
    return True


def _materialize(b: Builder, value: Instruction, comp: Computation) -> Instruction:
    """``value`` usable in ``comp``: itself, or a copy of a constant from a loop body (the
    only values from inside the nest that ``_invariant`` admits)."""
    if value.parent is comp or value.opcode != "constant":
        return value
    return b.op("constant", shape=value.shape, literal=value.literal)


def _sliced(b: Builder, window: _Window, comp_value: Instruction) -> Instruction:
    dims = comp_value.shape.dims
    if all(lo == 0 and hi == n for (lo, hi), n in zip(window.ranges, dims)):
        return comp_value
    return b.op("slice", comp_value, slice=tuple(SliceDim(lo, hi) for lo, hi in window.ranges))


def _broadcast_source(x: Instruction):
    """(operand, its dimension -> dimension of x) of a broadcast, or x itself."""
    if x.opcode == "broadcast":
        return x.operands[0], tuple(x.attrs.get("dimensions", ()))
    return x, tuple(range(x.shape.rank))


def _as_convolution(b: Builder, comp: Computation, reduced: Instruction, nest: _Nest):
    """reduce-add(multiply(broadcast(window), broadcast(W))) as a ``convolution``: (value, labels)."""
    product, init = reduced.operands
    param = nest.body.parameters[0]
    init_value = _invariant(init, param, nest.values)
    if reducer_op(reduced.attrs["to_apply"]) != "add" or init_value is None \
            or init_value.opcode != "constant" or np.any(init_value.literal != 0) \
            or product.opcode != "multiply":
        return None
    sides = [_broadcast_source(o) for o in product.operands]
    for flip in (False, True):
        (ds, ds_map), (w, w_map) = sides[::-1] if flip else sides
        window = _window(ds, nest)
        weights = _invariant(w, param, nest.values)
        if window is not None and weights is not None:
            break
    else:
        return None
    t = reduced.shape.element_type
    if t not in ("f32", "f64") or ds.shape.element_type != t or weights.shape.element_type != t:
        return None
    rank, reduce_dims = product.shape.rank, set(reduced.attrs["dimensions"])
    of_ds = {p: a for a, p in enumerate(ds_map)}
    of_w = {p: k for k, p in enumerate(w_map)}
    batch, feature, out_feature, spatial = [], [], [], {}
    for p in range(rank):
        a, k = of_ds.get(p), of_w.get(p)
        if a is not None and k is not None:
            if p not in reduce_dims:
                return None
            if a in window.moving:
                level, stride = window.moving[a]
                if ds.shape.dims[a] != weights.shape.dims[k]:
                    return None
                spatial[level] = (a, k, stride)
            else:
                feature.append((a, k))
        elif a is not None:
            if p in reduce_dims or a in window.moving:
                return None
            batch.append(a)
        elif k is not None:
            if p in reduce_dims:
                return None
            out_feature.append(k)
        else:
            return None
    levels = range(len(nest.levels))
    if sorted(spatial) != list(levels):
        return None
    x = _sliced(b, window, _materialize(b, window.source, comp))
    w_value = _materialize(b, weights, comp)
    # x -> [batch, spatial..., feature]; w -> [spatial..., feature, out feature]
    x_order = batch + [spatial[lv][0] for lv in levels] + [a for a, _ in feature]
    x = _transposed(b, x, x_order)
    n_b = prod(x.shape.dims[d] for d in batch)
    n_c = prod(x.shape.dims[a] for a, _ in feature)
    spatial_sizes = [x.shape.dims[len(batch) + i] for i in levels]
    x = _reshaped(b, x, [n_b] + spatial_sizes + [n_c])
    w_order = [spatial[lv][1] for lv in levels] + [k for _, k in feature] + out_feature
    w_value = _transposed(b, w_value, w_order)
    n_f = prod(weights.shape.dims[k] for k in out_feature)
    w_value = _reshaped(b, w_value, [weights.shape.dims[spatial[lv][1]] for lv in levels] + [n_c, n_f])
    d = len(nest.levels)
    labels = ConvDimensionNumbers(0, d + 1, tuple(range(1, d + 1)), d, d + 1, tuple(range(d)),
                                  0, d + 1, tuple(range(1, d + 1)))
    conv = b.op("convolution", x, w_value, shape=Shape(t, [n_b] + [nest.levels[lv][1] for lv in levels] + [n_f]),
                window=Window(tuple(WindowDim(w_value.shape.dims[lv], stride=spatial[lv][2]) for lv in levels)),
                dim_labels=labels)
    # back to [batch dims..., positions..., out feature dims...]
    split = [ds.shape.dims[a] for a in batch] + [nest.levels[lv][1] for lv in levels] + \
        [weights.shape.dims[k] for k in out_feature]
    value = _reshaped(b, conv, split)
    # R keeps the product's unreduced dimensions in order: batch and out-feature ones
    kept = [p for p in range(rank) if p not in reduce_dims]
    label_of = {("b", of_ds[p]): ("kept", r) for r, p in enumerate(kept) if p in of_ds}
    label_of.update({("f", of_w[p]): ("kept", r) for r, p in enumerate(kept) if p not in of_ds})
    labels_out = [label_of[("b", a)] for a in batch] + [("level", lv) for lv in levels] + \
        [label_of[("f", k)] for k in out_feature]
    return value, labels_out


def _as_reduce_window(b: Builder, comp: Computation, reduced: Instruction, nest: _Nest):
    """reduce(window) with a recognized reducer as a ``reduce-window``: (value, labels)."""
    ds, init = reduced.operands
    param = nest.body.parameters[0]
    init_value = _invariant(init, param, nest.values)
    window = _window(ds, nest)
    if window is None or init_value is None or init_value.opcode != "constant" \
            or reducer_op(reduced.attrs["to_apply"]) is None or ds.shape.element_type != reduced.shape.element_type:
        return None
    reduce_dims = set(reduced.attrs["dimensions"])
    if any(a not in reduce_dims for a in window.moving):
        return None
    x = _sliced(b, window, _materialize(b, window.source, comp))
    dims, labels, r = [], [], 0
    for a, size in enumerate(ds.shape.dims):
        if a in window.moving:
            level, stride = window.moving[a]
            dims.append(WindowDim(size, stride=stride))
            labels.append(("level", level))
        elif a in reduce_dims:
            dims.append(WindowDim(size))          # (the whole range: one position, dropped below)
        else:
            dims.append(WindowDim(1))
            labels.append(("kept", r))
            r += 1
    value = b.op("reduce-window", x, _materialize(b, init_value, comp), window=Window(tuple(dims)),
                 to_apply=reduced.attrs["to_apply"])
    value = _reshaped(b, value, [n for a, n in enumerate(value.shape.dims)
                                 if a in window.moving or a not in reduce_dims])
    return value, labels


def _transposed(b: Builder, x: Instruction, order: list[int]) -> Instruction:
    return x if order == list(range(x.shape.rank)) else b.op("transpose", x, dimensions=tuple(order))


def _reshaped(b: Builder, x: Instruction, dims: list[int]) -> Instruction:
    return x if list(x.shape.dims) == list(dims) else b.reshape(x, tuple(dims))
