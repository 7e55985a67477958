"""Reference rules for data movement and generation: broadcast, reshape, transpose, slices,
padding, concatenation, iota, bitcast, gather and rng-bit-generator."""

from __future__ import annotations

import numpy as np

from .evaluator_common import arange_along, as_index_array, fail


def _broadcast(instr, args, interp):
    (x,) = args
    dims = tuple(instr.attrs.get("dimensions", ()))
    out = instr.shape.dims
    # Order the operand's dimensions like their targets, then insert the missing ones as 1s.
    order = sorted(range(len(dims)), key=lambda i: dims[i])
    x = np.transpose(x, order)
    shape = [1] * len(out)
    for axis, i in enumerate(order):
        shape[dims[i]] = x.shape[axis]
    return np.broadcast_to(x.reshape(shape), out)


def _reshape(instr, args, interp):
    return np.reshape(args[0], instr.shape.dims)  # row-major, like XLA's logical reshape


def _transpose(instr, args, interp):
    return np.transpose(args[0], instr.attrs["dimensions"])


def _slice(instr, args, interp):
    return args[0][tuple(slice(s.start, s.limit, s.stride) for s in instr.attrs["slice"])]


def _reverse(instr, args, interp):
    dims = tuple(instr.attrs.get("dimensions", ()))
    return np.flip(args[0], dims) if dims else args[0]


def pad_array(x: np.ndarray, value, padding) -> np.ndarray:
    """XLA ``pad``: interior padding first, then low/high edges; negative edges crop."""
    out_shape = [p.low + p.high + n + max(n - 1, 0) * p.interior for n, p in zip(x.shape, padding)]
    out = np.full(out_shape, value, x.dtype)
    src, dst = [], []
    for n, m, p in zip(x.shape, out_shape, padding):
        step = p.interior + 1
        # Source element i lands at p.low + i*step; keep the i that land inside [0, m).
        first = 0 if p.low >= 0 else -(p.low // step)
        last = min(n - 1, (m - 1 - p.low) // step)
        if last < first:
            return out  # nothing of x survives the cropping
        src.append(slice(first, last + 1))
        dst.append(slice(p.low + first * step, p.low + last * step + 1, step))
    out[tuple(dst)] = x[tuple(src)]
    return out


def _pad(instr, args, interp):
    x, value = args
    return pad_array(x, value, instr.attrs["padding"])


def _start_indices(values) -> list[int]:
    """Scalar start operands, or the old form: one rank-1 vector of starts."""
    if len(values) == 1 and np.ndim(values[0]) == 1:
        return [int(v) for v in values[0]]
    return [int(v) for v in values]


def _clamped_starts(starts, sizes, dims) -> list[int]:
    # XLA clamps each start so that the whole slice fits: [0, dim - size].
    return [min(max(s, 0), d - z) for s, z, d in zip(starts, sizes, dims)]


def _dynamic_slice(instr, args, interp):
    x = args[0]
    sizes = instr.attrs["dynamic_slice_sizes"]
    starts = _clamped_starts(_start_indices(args[1:]), sizes, x.shape)
    return x[tuple(slice(s, s + z) for s, z in zip(starts, sizes))]


def _dynamic_update_slice(instr, args, interp):
    x, update = args[0], args[1]
    starts = _clamped_starts(_start_indices(args[2:]), update.shape, x.shape)
    out = np.array(x)
    out[tuple(slice(s, s + z) for s, z in zip(starts, update.shape))] = update
    return out


def _concatenate(instr, args, interp):
    return np.concatenate(args, axis=instr.attrs["dimensions"][0])


def _iota(instr, args, interp):
    dims, d = instr.shape.dims, instr.attrs["iota_dimension"]
    values = np.arange(dims[d]).astype(instr.shape.dtype)
    shape = [1] * len(dims)
    shape[d] = dims[d]
    return np.broadcast_to(values.reshape(shape), dims)


def _bitcast(instr, args, interp):
    """Reinterpret the physical buffer: the operand's bytes in its layout order, read back in
    the result's layout order (and element type, if that differs)."""
    (x,) = args
    src, dst = instr.operands[0].shape, instr.shape
    physical = np.ascontiguousarray(np.transpose(x, src.minor_to_major[::-1])).reshape(-1)
    if physical.dtype != dst.dtype:
        physical = physical.view(dst.dtype)
    major_to_minor = dst.minor_to_major[::-1]
    stored = physical.reshape([dst.dims[d] for d in major_to_minor])
    return np.transpose(stored, np.argsort(major_to_minor))


# --- gather ---------------------------------------------------------------------------------

def index_vectors(indices: np.ndarray, index_vector_dim: int) -> np.ndarray:
    """Indices with the index vector as the last axis (gather/scatter's batch shape first)."""
    indices = as_index_array(indices)
    if index_vector_dim == indices.ndim:  # implicit trailing dimension of size 1
        indices = indices[..., None]
    return np.moveaxis(indices, index_vector_dim, -1)


def full_start_indices(vectors, rank, start_map, operand_batching, indices_batching,
                       index_vector_dim, indices_rank):
    """Per batch position, the start index into every operand dimension.

    ``start_map`` scatters the index vector into operand dimensions; each operand batching
    dimension takes the position along its paired indices dimension.
    """
    batch_shape = vectors.shape[:-1]
    starts = np.zeros(batch_shape + (rank,), np.int64)
    for k, d in enumerate(start_map):
        starts[..., d] = vectors[..., k]
    batch_axes = [d for d in range(indices_rank) if d != index_vector_dim]
    for od, idim in zip(operand_batching, indices_batching):
        axis = batch_axes.index(idim)
        starts[..., od] = arange_along(batch_shape[axis], axis, len(batch_shape))
    return starts


def _gather(instr, args, interp):
    x, indices = args
    a = instr.attrs
    ivd = a.get("index_vector_dim", indices.ndim)
    offset_dims = tuple(a.get("offset_dims", ()))
    collapsed = tuple(a.get("collapsed_slice_dims", ()))
    operand_batching = tuple(a.get("operand_batching_dims", ()))
    sizes = tuple(a["slice_sizes"])
    vectors = index_vectors(indices, ivd)
    starts = full_start_indices(vectors, x.ndim, a.get("start_index_map", ()), operand_batching,
                                a.get("start_indices_batching_dims", ()), ivd, indices.ndim)
    # Gather clamps each start so that the whole slice is inside the operand.
    starts = np.clip(starts, 0, np.subtract(x.shape, sizes))
    batch_shape = starts.shape[:-1]
    nb, rank = len(batch_shape), x.ndim
    grid = []
    for d in range(rank):
        offset = arange_along(sizes[d], nb + d, nb + rank)
        grid.append(starts[..., d].reshape(batch_shape + (1,) * rank) + offset)
    sliced = x[tuple(grid)] if rank else np.broadcast_to(x, batch_shape)
    # Drop the collapsed / batching dimensions (size 1), then place offset dims where asked.
    kept = [sizes[d] for d in range(rank) if d not in collapsed and d not in operand_batching]
    sliced = sliced.reshape(batch_shape + tuple(kept))
    perm, batch_axis = [], iter(range(nb))
    for d in range(nb + len(offset_dims)):
        perm.append(nb + offset_dims.index(d) if d in offset_dims else next(batch_axis))
    return np.transpose(sliced, perm)


# --- random bits ------------------------------------------------------------------------------

_U32 = np.uint32
_MASK32 = np.uint64(0xFFFFFFFF)


def _halves(words: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) 32-bit halves of u64 values."""
    return (words & _MASK32).astype(_U32), (words >> np.uint64(32)).astype(_U32)


def _threefry2x32(key, x0, x1):
    """Threefry-2x32 with 20 rounds (Salmon et al., "Random123")."""
    k0, k1 = key
    ks = (k0, k1, k0 ^ k1 ^ _U32(0x1BD11BDA))
    rotations = ((13, 15, 26, 6), (17, 29, 16, 24))
    x0, x1 = x0 + ks[0], x1 + ks[1]
    for block in range(5):
        for r in rotations[block % 2]:
            x0 = x0 + x1
            x1 = ((x1 << _U32(r)) | (x1 >> _U32(32 - r))) ^ x0
        x0 = x0 + ks[(block + 1) % 3]
        x1 = x1 + ks[(block + 2) % 3] + _U32(block + 1)
    return x0, x1


def _philox4x32(key, c):
    """Philox-4x32 with 10 rounds (Random123)."""
    k0, k1 = key
    c0, c1, c2, c3 = c
    for _ in range(10):
        p0 = c0.astype(np.uint64) * np.uint64(0xD2511F53)
        p1 = c2.astype(np.uint64) * np.uint64(0xCD9E8D57)
        hi0, hi1 = (p0 >> np.uint64(32)).astype(_U32), (p1 >> np.uint64(32)).astype(_U32)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, p1.astype(_U32), hi0 ^ c3 ^ k1, p0.astype(_U32)
        k0, k1 = k0 + _U32(0x9E3779B9), k1 + _U32(0xBB67AE85)
    return c0, c1, c2, c3


def _threefry_bits(state, dims, wide):
    """XLA's ThreeFry generator: key = state[0], counters state[1] + i.  64-bit results take
    one block each (low word first).  32-bit results split one axis in two -- the first of
    even length, else the longest -- and take both words of a block next to each other
    along it: the first word in the first half of each pair of entries, the second in the
    other (an odd axis drops the last entry)."""
    if wide:
        n = int(np.prod(dims, dtype=np.int64))
        y0, y1 = _threefry2x32(_halves(state[0]), *_halves(state[1] + np.arange(n, dtype=np.uint64)))
        return (y0.astype(np.uint64) | (y1.astype(np.uint64) << np.uint64(32))).reshape(dims), n
    shape = tuple(dims) or (1,)
    even = [d for d, k in enumerate(shape) if k % 2 == 0]
    axis = even[0] if even else int(np.argmax(shape))
    half = shape[:axis] + (-(-shape[axis] // 2), 1) + shape[axis + 1:]
    n = int(np.prod(half, dtype=np.int64))
    y0, y1 = _threefry2x32(_halves(state[0]), *_halves(state[1] + np.arange(n, dtype=np.uint64)))
    pairs = np.concatenate([y0.reshape(half), y1.reshape(half)], axis + 1)
    pairs = pairs.reshape(shape[:axis] + (2 * half[axis],) + shape[axis + 1:])
    return np.take(pairs, np.arange(shape[axis]), axis).reshape(dims), n


def _philox_bits(state, dims, wide):
    """XLA's Philox generator: key = state[0]; a 128-bit counter whose low 64 bits are
    state[1] and high 64 bits state[0] (a two-word state) or state[2], plus i.  Each block
    gives four 32-bit words (or two 64-bit ones) to the flattened result in order."""
    size = int(np.prod(dims, dtype=np.int64))
    per_block = 2 if wide else 4
    n = -(-size // per_block)
    low = state[1] + np.arange(n, dtype=np.uint64)
    high = (state[0] if state.size == 2 else state[2]) + (low < state[1]).astype(np.uint64)   # carry
    words = _philox4x32(_halves(state[0]), (*_halves(low), *_halves(high)))
    if wide:
        words = [words[0].astype(np.uint64) | (words[1].astype(np.uint64) << np.uint64(32)),
                 words[2].astype(np.uint64) | (words[3].astype(np.uint64) << np.uint64(32))]
    return np.stack(words, -1).reshape(-1)[:size].reshape(dims), n


_GENERATORS = {"rng_three_fry": _threefry_bits, "rng_philox": _philox_bits, "rng_default": _philox_bits}


def _rng_bit_generator(instr, args, interp):
    """The bits XLA's CPU and GPU backends produce, bit for bit: ThreeFry or Philox (also
    for rng_default) keyed by state[0] and counting from state[1]; the new state is state[1]
    advanced by the number of blocks used.  8- and 16-bit results are the low bits of the
    32-bit ones."""
    (state,) = args
    _, bits_shape = instr.shape.elements
    algorithm = str(instr.attrs.get("algorithm", "rng_default")).lower()
    if bits_shape.element_type not in ("s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64"):
        raise fail(instr, f"rng-bit-generator output must be an integer type, not {bits_shape.element_type}")
    if algorithm not in _GENERATORS:
        raise fail(instr, f"unknown rng-bit-generator algorithm {algorithm}; expected one of "
                          f"{', '.join(_GENERATORS)}")
    words = np.asarray(state).astype(np.uint64).reshape(-1)
    if words.size < 2:
        raise fail(instr, "rng-bit-generator needs a u64 state of at least two words (key, counter)")
    wide = bits_shape.dtype.itemsize == 8
    with np.errstate(over="ignore"):
        bits, used = _GENERATORS[algorithm](words, bits_shape.dims, wide)
        new_state = words.copy()
        new_state[1] += np.uint64(used)
    bits = np.asarray(bits, np.uint64 if wide else _U32)
    if bits_shape.dtype.itemsize < 4:
        bits = bits.astype(np.dtype(f"u{bits_shape.dtype.itemsize}"))   # the low bits
    return new_state.reshape(np.shape(state)), bits.view(bits_shape.dtype).reshape(bits_shape.dims)


DATA_RULES = {
    "broadcast": _broadcast, "reshape": _reshape, "transpose": _transpose, "slice": _slice,
    "reverse": _reverse, "pad": _pad, "dynamic-slice": _dynamic_slice,
    "dynamic-update-slice": _dynamic_update_slice, "concatenate": _concatenate,
    "iota": _iota, "bitcast": _bitcast, "gather": _gather,
    "rng-bit-generator": _rng_bit_generator,
}
