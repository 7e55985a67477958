"""Reference rules for the opcodes that apply a called computation to elements: reduce,
reduce-window, select-and-scatter, sort (and top-k) and scatter.

The called computation decides the result, so the general path always runs it (through
``Interpreter.map``, on whole arrays at once when it is elementwise).  A reducer that is a
single recognised binary op on its two parameters takes a NumPy fast path instead.
"""

from __future__ import annotations

import numpy as np

from .attributes import PadDim
from .evaluator_common import arange_along
from .evaluator_data import full_start_indices, index_vectors, pad_array
from .evaluator_elementwise import total_order_key
from .reducers import reducer_op
from . import shapes as S

# Reducers with a NumPy ufunc (on pred, add is "or" and multiply is "and", as in XLA).
_UFUNCS = {"add": np.add, "multiply": np.multiply, "maximum": np.maximum,
           "minimum": np.minimum, "and": np.bitwise_and, "or": np.bitwise_or,
           "xor": np.bitwise_xor}


def recognized_binary(comp) -> str | None:
    """The opcode if ``comp`` is ``(a, b) -> op(a, b)`` (``hlo/reducers.py``) for a ufunc-backed
    ``op``, else None."""
    op = reducer_op(comp)
    if op not in _UFUNCS:
        return None
    if op in ("maximum", "minimum") and S.is_complex(comp.root.shape.element_type):
        return None  # the general path reports that complex numbers have no order
    return op


def _as_list(value) -> list:
    return list(value) if isinstance(value, tuple) else [value]


def _from_list(values: list):
    return values[0] if len(values) == 1 else tuple(values)


# --- reduce ---------------------------------------------------------------------------------

def _reduce(instr, args, interp):
    n = len(args) // 2
    inputs, inits = args[:n], args[n:]
    dims = tuple(sorted(instr.attrs.get("dimensions", ())))
    comp = instr.attrs["to_apply"]
    x = inputs[0]
    kept = tuple(s for i, s in enumerate(x.shape) if i not in dims)
    count = int(np.prod([x.shape[d] for d in dims], dtype=np.int64))
    if count == 0:
        return _from_list([np.broadcast_to(init, kept) for init in inits])
    op = recognized_binary(comp) if n == 1 else None
    if op is not None:
        ufunc = _UFUNCS[op]
        folded = ufunc.reduce(x, axis=dims, dtype=x.dtype) if dims else x
        return ufunc(inits[0], folded)  # the init value enters once, as in XLA's evaluator
    # General path: acc = f(acc, x_i) over the reduced elements in row-major order, every
    # kept position at once.
    moved = [np.moveaxis(v, dims, range(len(dims))).reshape((count,) + kept) for v in inputs]
    acc = [np.broadcast_to(init, kept) for init in inits]
    for i in range(count):
        acc = _as_list(interp.map(comp, acc + [m[i] for m in moved]))
    return _from_list(acc)


# --- reduce-window ----------------------------------------------------------------------------

def _reduce_window(instr, args, interp):
    """Each window offset is one strided slice of the padded input, combined into the
    accumulators.  Padding and base-dilation holes are skipped (not combined with the init
    value), as XLA's evaluator and CPU emitter do; window reversal is ignored (it only
    changes the order in which a window's elements are combined)."""
    n = len(args) // 2
    inputs, inits = args[:n], args[n:]
    window = instr.attrs["window"].dims
    comp = instr.attrs["to_apply"]
    out_shape = (instr.shape.elements[0] if instr.shape.is_tuple else instr.shape).dims
    acc = [np.broadcast_to(init, out_shape) for init in inits]
    if 0 in out_shape:
        return _from_list(acc)
    op = recognized_binary(comp) if n == 1 else None
    axis = prefix_axis(window, inputs[0].shape) if op is not None else None
    if axis is not None:
        # A prefix window (cumsum, cumprod, running max): one accumulate, O(n) rather than
        # one slice per window position, O(n^2).
        scan = _UFUNCS[op].accumulate(inputs[0], axis=axis, dtype=inputs[0].dtype)
        return _UFUNCS[op](inits[0], scan)
    pads = [PadDim(w.pad_low, w.pad_high, w.base_dilation - 1) for w in window]
    padded = [pad_array(x, init, pads) for x, init in zip(inputs, inits)]
    holes = any(w.pad_low or w.pad_high or w.base_dilation > 1 for w in window)
    valid = pad_array(np.ones(inputs[0].shape, bool), False, pads) if holes else None
    for sl in _window_slices(window, out_shape):
        values = [p[sl] for p in padded]
        if op is not None:
            new = [_UFUNCS[op](acc[0], values[0])]
        else:
            new = _as_list(interp.map(comp, acc + values))
        if valid is not None:
            inside = valid[sl]
            new = [np.where(inside, v, a) for v, a in zip(new, acc)]
        acc = new
    return _from_list(acc)


def _window_slices(window, out_shape):
    """For each window offset, the slice of the padded input its elements come from."""
    for offsets in np.ndindex(*[w.size for w in window]):
        yield tuple(slice(k * w.window_dilation, k * w.window_dilation + (o - 1) * w.stride + 1, w.stride)
                    for k, w, o in zip(offsets, window, out_shape))


def _select_and_scatter(instr, args, interp):
    """Each window picks one operand element -- the first in row-major window order that
    ``select(picked, candidate)`` keeps against every later candidate, padding never picked --
    and the window's source value is combined into the result there with ``scatter``
    (result initialized to the init value, windows applied in row-major order)."""
    operand, source, init = args
    window = instr.attrs["window"].dims
    out = np.array(np.broadcast_to(init, operand.shape)).reshape(-1)
    if source.size == 0 or operand.size == 0:
        return out.reshape(operand.shape)
    pads = [PadDim(w.pad_low, w.pad_high, w.base_dilation - 1) for w in window]
    padded = pad_array(operand, operand.dtype.type(0), pads)
    position = pad_array(np.arange(operand.size).reshape(operand.shape), -1, pads)  # -1: padding
    picked_value, picked = np.zeros(source.shape, operand.dtype), np.full(source.shape, -1)
    for sl in _window_slices(window, source.shape):
        value, where = padded[sl], position[sl]
        keeps = np.asarray(interp.map(instr.attrs["select"], [picked_value, value]), bool)
        take = (where >= 0) & ((picked < 0) | ~keeps)
        picked_value, picked = np.where(take, value, picked_value), np.where(take, where, picked)
    chosen = picked >= 0
    targets, values = picked[chosen], source[chosen]
    scatter = instr.attrs["scatter"]
    if recognized_binary(scatter) == "add":
        np.add.at(out, targets, values)
    else:
        _apply_in_rounds([out], targets, [values], _combiner(scatter, 1, interp))
    return out.reshape(operand.shape)


def prefix_axis(window, shape) -> int | None:
    """The axis of a window that covers, at each position, everything before it (size n,
    low padding n-1, stride 1) and nothing along the other axes; None for other windows."""
    axis = None
    for d, (w, n) in enumerate(zip(window, shape)):
        plain = w.stride == 1 and w.base_dilation == 1 and w.window_dilation == 1 and not w.reversal
        if plain and w.size == 1 and w.pad_low == w.pad_high == 0:
            continue
        if plain and axis is None and n > 1 and w.size == n and w.pad_low == n - 1 and w.pad_high == 0:
            axis = d
            continue
        return None
    return axis


# --- sort -----------------------------------------------------------------------------------

def _sort(instr, args, interp):
    return _from_list(sort_by_comparator(instr.attrs["to_apply"], args, instr.attrs["dimensions"][0], interp))


def sort_by_comparator(comp, args, axis, interp) -> list[np.ndarray]:
    """Stable bottom-up merge sort along one axis, all rows at once.

    Merging two sorted runs needs, for each element, how many elements of the other run go
    before it; that count comes from a binary search in the other run, vectorized over every
    element of every row.  The comparator therefore runs O(log^2 n) times on whole arrays.
    """
    if args[0].ndim == 0:
        return list(args)
    moved = [np.moveaxis(a, axis, -1) for a in args]
    shape = moved[0].shape
    n = shape[-1]
    rows = int(np.prod(shape[:-1], dtype=np.int64))
    flat = [m.reshape(rows, n) for m in moved]
    row = np.arange(rows)[:, None]
    perm = np.broadcast_to(np.arange(n), (rows, n))  # sorted position -> original index

    def less(lhs, rhs):  # comparator on original indices, per row
        operands = []
        for f in flat:
            operands += [f[row, lhs], f[row, rhs]]
        return np.asarray(interp.map(comp, operands), bool)

    j = np.arange(n)
    width = 1
    while width < n:
        base = j // (2 * width) * (2 * width)
        in_left = j - base < width
        # Search range in the other run: the right run may be short (or empty) at the end.
        other_start = np.where(in_left, base + width, base)
        other_len = np.where(in_left, np.clip(n - (base + width), 0, width), width)
        lo = np.zeros((rows, n), np.int64)
        hi = np.broadcast_to(other_len, (rows, n)).copy()
        me = perm
        for _ in range(int(width).bit_length()):
            active = lo < hi
            mid = (lo + hi) // 2
            probe = perm[row, np.clip(other_start + mid, 0, n - 1)]
            # A left element a moves past b in the right run if b < a; a right element b
            # moves past a in the left run unless b < a (equal elements keep their order).
            b_before_a = less(np.where(in_left, probe, me), np.where(in_left, me, probe))
            go_right = np.where(in_left, b_before_a, ~b_before_a) & active
            lo = np.where(go_right, mid + 1, lo)
            hi = np.where(active & ~go_right, mid, hi)
        new_pos = np.where(in_left, j + lo, j - width + lo)
        # (a comparator that is no strict weak order may send two elements to one place and
        # none to another: that place keeps the position it held, never an undefined one --
        # as the native sort kernel does, codegen/sort_kernel.py)
        new_perm = np.array(perm, np.int64)
        new_perm[row, new_pos] = perm
        perm = new_perm
        width *= 2
    return [np.moveaxis(f[row, perm].reshape(shape), -1, axis) for f in flat]


def _topk(instr, args, interp):
    """The k largest (``largest=false``: smallest) elements along the last axis, best first,
    with their positions; floats ordered as IEEE totalOrder (NaN above +inf, -0 below +0),
    equal elements by position."""
    (x,) = args
    k = instr.attrs["k"]
    key = total_order_key(x) if x.dtype.kind == "f" else x.astype(np.int64 if x.dtype.kind == "b" else x.dtype)
    if instr.attrs.get("largest", True):
        key = ~key                         # reverses integer order exactly (no overflow)
    order = np.argsort(key, axis=-1, kind="stable")[..., :k]
    return np.take_along_axis(x, order, axis=-1), order.astype(np.int32)


def topk_custom_call(instr, args, interp):
    """XLA:CPU's ``TopK`` custom call: sort ``(x, positions)`` along the last axis with the
    comparator it calls, keep the first k of each row."""
    (x,) = args
    values_shape = instr.shape.elements[0]
    k = values_shape.dims[-1]
    positions = np.broadcast_to(arange_along(x.shape[-1], x.ndim - 1, x.ndim), x.shape).astype(np.int32)
    comparator = instr.attrs["called_computations"][0]
    values, order = sort_by_comparator(comparator, [x, positions], x.ndim - 1, interp)
    return values[..., :k], order[..., :k]


# --- scatter ---------------------------------------------------------------------------------

def _scatter(instr, args, interp):
    """Updates are applied one at a time in row-major order of the updates (scatter
    dimensions outer, window inner): out[i] = combiner(out[i], update).  An update whose
    whole window does not fit inside the operand is skipped, as XLA does."""
    n = (len(args) - 1) // 2
    operands, indices, updates = args[:n], args[n], args[n + 1:]
    a = instr.attrs
    comp = a["to_apply"]
    rank = operands[0].ndim
    window_dims = tuple(a.get("update_window_dims", ()))
    inserted = tuple(a.get("inserted_window_dims", ()))
    input_batching = tuple(a.get("input_batching_dims", ()))
    ivd = a.get("index_vector_dim", indices.ndim)
    vectors = index_vectors(indices, ivd)
    starts = full_start_indices(vectors, rank, a.get("scatter_dims_to_operand_dims", ()),
                                input_batching, a.get("scatter_indices_batching_dims", ()),
                                ivd, indices.ndim)
    scatter_dims = [d for d in range(updates[0].ndim) if d not in window_dims]
    ups = [np.transpose(u, scatter_dims + list(window_dims)) for u in updates]
    nscatter = len(scatter_dims)
    scatter_shape, window_shape = ups[0].shape[:nscatter], ups[0].shape[nscatter:]
    # Operand dimensions the window covers, in increasing order, and the window extent of each.
    covered = [d for d in range(rank) if d not in inserted and d not in input_batching]
    extent = [1] * rank
    for k, d in enumerate(covered):
        extent[d] = window_shape[k]
    fits = np.all((starts >= 0) & (starts <= np.subtract(operands[0].shape, extent)), axis=-1)
    nw = len(window_shape)
    full = []
    for d in range(rank):
        index = starts[..., d].reshape(scatter_shape + (1,) * nw)
        if d in covered:
            k = covered.index(d)
            index = index + arange_along(window_shape[k], nscatter + k, nscatter + nw)
        full.append(np.broadcast_to(index, scatter_shape + window_shape))
    keep = np.broadcast_to(fits.reshape(scatter_shape + (1,) * nw), scatter_shape + window_shape)
    targets = np.ravel_multi_index([f[keep] for f in full], operands[0].shape) if rank else \
        np.zeros(int(keep.sum()), np.int64)
    values = [u[keep] for u in ups]
    outs = [np.array(o).reshape(-1) for o in operands]
    if recognized_binary(comp) == "add":
        np.add.at(outs[0], targets, values[0])  # unbuffered: repeated targets accumulate in order
    else:
        _apply_in_rounds(outs, targets, values, _combiner(comp, n, interp))
    return _from_list([o.reshape(operands[0].shape) for o in outs])


def _combiner(comp, n, interp):
    """(current values, update values) -> new values; "replace" skips running the computation."""
    root = comp.root
    replaced = [root] if n == 1 else (root.operands if root.opcode == "tuple" else [])
    params = comp.parameters
    if len(replaced) == n and all(r is params[n + i] for i, r in enumerate(replaced)):
        return lambda current, update: update
    return lambda current, update: _as_list(interp.map(comp, current + update))


def _apply_in_rounds(outs, targets, values, combine):
    """Apply updates sequentially per target, vectorized across targets: round r applies
    each target's r-th update (in update order), so no round writes a target twice."""
    if targets.size == 0:
        return
    order = np.argsort(targets, kind="stable")
    sorted_targets = targets[order]
    group_start = np.r_[True, sorted_targets[1:] != sorted_targets[:-1]]
    first = np.maximum.accumulate(np.where(group_start, np.arange(targets.size), 0))
    rank = np.empty(targets.size, np.int64)
    rank[order] = np.arange(targets.size) - first
    for r in range(int(rank.max()) + 1):
        chosen = rank == r
        t = targets[chosen]
        new = combine([o[t] for o in outs], [v[chosen] for v in values])
        for o, v in zip(outs, new):
            o[t] = v


REDUCE_RULES = {"reduce": _reduce, "reduce-window": _reduce_window, "sort": _sort,
                "scatter": _scatter, "select-and-scatter": _select_and_scatter, "topk": _topk}
