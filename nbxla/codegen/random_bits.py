"""``rng-bit-generator`` as a native kernel: XLA's ThreeFry-2x32 and Philox-4x32 bits.

The bits are the reference evaluator's (``_rng_bit_generator`` in hlo/evaluator_data.py, which
gives XLA's CPU and GPU bits), element by element: each output element finds the counter block
its word comes from and runs the block's rounds (a block's words are recomputed by each of its
elements: ThreeFry's 20 and Philox's 10 rounds are a few dozen integer ops, and no element waits
for another, so the range splits across threads freely).

* ThreeFry (``rng_three_fry``): key = the two halves of state[0], counter = state[1] + block.
  A 64-bit result takes one block per element (low word first).  A 32-bit result splits one
  axis -- the first of even length, else the longest -- into pairs of entries: entries 2m and
  2m+1 along it are the two words of the block at position m of the half-length shape.  (With
  sizes known only when the kernel runs, that axis is chosen when it runs.)
* Philox (``rng_philox``, ``rng_default``): key = the halves of state[0], a 128-bit counter with
  low half state[1] + block and high half state[0] (or state[2] for a longer state) plus the
  carry; each block gives 4 words (2 64-bit ones) to the flattened result in order.

Results narrower than 32 bits are the low bits of the 32-bit words.  The new state is state[1]
advanced by the number of blocks used, written by the unit that starts at element 0.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir

from ..errors import UnsupportedError
from ..hlo.ir import Computation
from .elemental import const_i64
from .toolkit import counted_loop, kernel_function, KernelBuffers, KernelSpec, product, RunSizes, unknown_leaf_axes

_I32, _I64 = ir.IntType(32), ir.IntType(64)
_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def _u32(v: int):
    return ir.Constant(_I32, v & 0xFFFFFFFF)


def _halves(b, word):
    return b.trunc(word, _I32), b.trunc(b.lshr(word, const_i64(32)), _I32)


def _join(b, low, high):
    return b.or_(b.zext(low, _I64), b.shl(b.zext(high, _I64), const_i64(32)))


def threefry2x32(b: ir.IRBuilder, key, x0, x1):
    """Threefry-2x32, 20 rounds (Random123), on i32 values."""
    k0, k1 = key
    ks = (k0, k1, b.xor(b.xor(k0, k1), _u32(0x1BD11BDA)))
    x0, x1 = b.add(x0, ks[0]), b.add(x1, ks[1])
    for block in range(5):
        for r in _ROTATIONS[block % 2]:
            x0 = b.add(x0, x1)
            x1 = b.xor(b.or_(b.shl(x1, _u32(r)), b.lshr(x1, _u32(32 - r))), x0)
        x0 = b.add(x0, ks[(block + 1) % 3])
        x1 = b.add(b.add(x1, ks[(block + 2) % 3]), _u32(block + 1))
    return x0, x1


def philox4x32(b: ir.IRBuilder, key, counter):
    """Philox-4x32, 10 rounds (Random123), on i32 values."""
    k0, k1 = key
    c0, c1, c2, c3 = counter
    for _ in range(10):
        p0 = b.mul(b.zext(c0, _I64), const_i64(0xD2511F53))
        p1 = b.mul(b.zext(c2, _I64), const_i64(0xCD9E8D57))
        hi0, hi1 = b.trunc(b.lshr(p0, const_i64(32)), _I32), b.trunc(b.lshr(p1, const_i64(32)), _I32)
        c0, c1, c2, c3 = b.xor(b.xor(hi1, c1), k0), b.trunc(p1, _I32), b.xor(b.xor(hi0, c3), k1), b.trunc(p0, _I32)
        k0, k1 = b.add(k0, _u32(0x9E3779B9)), b.add(k1, _u32(0xBB67AE85))
    return c0, c1, c2, c3


def _pick(b, index, words):
    """words[index] for a run-time index (a select chain: LLVM turns it into a switch)."""
    value = words[0]
    for k, w in enumerate(words[1:], 1):
        value = b.select(b.icmp_unsigned("==", index, ir.Constant(index.type, k)), w, value)
    return value


def emit_rng_kernel(module: ir.Module, name: str, comp: Computation) -> KernelSpec:
    rng = comp.root
    state_shape, bits_shape = rng.shape.elements
    algorithm = str(rng.attrs.get("algorithm", "rng_default")).lower()
    if algorithm not in ("rng_three_fry", "rng_philox", "rng_default"):
        raise UnsupportedError(f"rng-bit-generator algorithm {algorithm} has no native code path")
    width = bits_shape.dtype.itemsize * 8
    if bits_shape.dtype.kind not in "iu" or rng.operands[0].shape.dtype.itemsize != 8:
        raise UnsupportedError("rng-bit-generator with a non-integer result or a state that is not "
                               "64-bit words has no native code path")
    words = int(product(state_shape.dims))
    if words < 2 or rng.operands[0].opcode != "parameter":
        raise UnsupportedError("rng-bit-generator needs a u64 state of at least two words (key, counter)")
    dims = list(bits_shape.dims)
    size = int(product(dims))
    wide = width == 64

    fn, b = kernel_function(module, name)
    param = rng.operands[0].parameter_number
    bufs = KernelBuffers(b, fn.args[0], [p.shape for p in comp.parameters] + [state_shape, bits_shape])
    out_state, out_bits = len(comp.parameters), len(comp.parameters) + 1
    state = [bufs.load(b, param, const_i64(k)) for k in range(words)]
    key = _halves(b, state[0])

    unknown = unknown_leaf_axes(comp, rng, 1)
    run_sizes = ()
    if unknown and algorithm == "rng_three_fry" and not wide:
        # (ThreeFry's narrow layout pairs elements along an axis chosen by the sizes' parity:
        # the axis, and the shape around it, chosen when the kernel runs from the sizes read)
        sizes = RunSizes(b, fn.args[0], out_bits + 1)
        run_dims = [sizes.size(n) if d in unknown else const_i64(n) for d, n in enumerate(dims)]
        run_sizes = tuple(sizes.values)
        blocks, element = _threefry_run_layout(b, run_dims, state, key)
    elif algorithm == "rng_three_fry":
        blocks, element = _threefry_layout(b, dims, wide, state, key)
    else:
        blocks, element = _philox_layout(b, size, wide, state, key, words)
    if not unknown:
        blocks = const_i64(blocks)
    elif not run_sizes:
        # (bits of a batch of unknown size: element e's block depends on e alone, so only the
        # counter's advance needs the size, read when the kernel runs)
        per_block = 1 if algorithm == "rng_three_fry" else 2 if wide else 4
        size_v = RunSizes(b, fn.args[0], out_bits + 1).size(size)
        blocks = b.udiv(b.add(size_v, const_i64(per_block - 1)), const_i64(per_block))
        run_sizes = (size,)

    def body(e):
        value = element(e)
        if width < value.type.width:
            value = b.trunc(value, ir.IntType(width))
        bufs.store(b, out_bits, e, value)

    if size:
        counted_loop(b, fn.args[1], fn.args[2], "e", body)
    # the new state: the counter advanced by the blocks used (written once, by the first unit)
    first = b.icmp_unsigned("==", fn.args[1], const_i64(0))
    with b.if_then(first):
        for k in range(words):
            value = b.add(state[1], blocks) if k == 1 else state[k]
            bufs.store(b, out_state, const_i64(k), value)
    b.ret_void()
    return KernelSpec(name, "random", max(size, 1), 64, sizes=run_sizes)


def _threefry_layout(b, dims: list, wide: bool, state, key):
    """(blocks used, element e -> its word (i32 or i64)) for ThreeFry."""
    if wide:
        def element(e):
            x0, x1 = _halves(b, b.add(state[1], e))
            y0, y1 = threefry2x32(b, key, x0, x1)
            return _join(b, y0, y1)
        return int(product(dims)), element
    shape = dims or [1]
    even = [d for d, k in enumerate(shape) if k % 2 == 0]
    axis = even[0] if even else int(np.argmax(shape))
    outer, n, inner = int(product(shape[:axis])), shape[axis], int(product(shape[axis + 1:]))
    half = -(-n // 2)

    def element(e):
        # e = (o * n + j) * inner + i; its block is (o * half + j // 2) * inner + i, word j % 2
        i = b.urem(e, const_i64(inner))
        rest = b.udiv(e, const_i64(inner))
        j = b.urem(rest, const_i64(n))
        o = b.udiv(rest, const_i64(n))
        block = b.add(b.mul(b.add(b.mul(o, const_i64(half)), b.lshr(j, const_i64(1))), const_i64(inner)), i)
        x0, x1 = _halves(b, b.add(state[1], block))
        y0, y1 = threefry2x32(b, key, x0, x1)
        return b.select(b.icmp_unsigned("==", b.and_(j, const_i64(1)), const_i64(0)), y0, y1)
    return outer * half * inner, element


def _threefry_run_layout(b, dims: list, state, key):
    """``_threefry_layout``'s narrow case over sizes known when the kernel runs (``dims``: i64
    values, some read from the sizes array): the paired axis is the first of even length,
    else the first longest, chosen by selects in the entry block (once per call); the element's
    block is then computed with the chosen axis's outer, length and inner sizes.  The code is
    the same for every size: nothing of the probe's sizes is compiled in."""
    dims = dims or [const_i64(1)]
    rank = len(dims)
    zero, one = const_i64(0), const_i64(1)
    even_axis = const_i64(rank)                 # (rank: no axis of even length)
    for d in reversed(range(rank)):
        is_even = b.icmp_unsigned("==", b.and_(dims[d], one), zero)
        even_axis = b.select(is_even, const_i64(d), even_axis)
    longest, longest_axis = dims[0], zero
    for d in range(1, rank):
        longer = b.icmp_unsigned(">", dims[d], longest)
        longest_axis = b.select(longer, const_i64(d), longest_axis)
        longest = b.select(longer, dims[d], longest)
    axis = b.select(b.icmp_unsigned("==", even_axis, const_i64(rank)), longest_axis, even_axis)
    outer, n, inner = one, zero, one
    for d in range(rank):
        outer = b.mul(outer, b.select(b.icmp_unsigned("<", const_i64(d), axis), dims[d], one))
        n = b.select(b.icmp_unsigned("==", const_i64(d), axis), dims[d], n)
        inner = b.mul(inner, b.select(b.icmp_unsigned(">", const_i64(d), axis), dims[d], one))
    half = b.lshr(b.add(n, one), one)

    def element(e):
        i = b.urem(e, inner)
        rest = b.udiv(e, inner)
        j = b.urem(rest, n)
        o = b.udiv(rest, n)
        block = b.add(b.mul(b.add(b.mul(o, half), b.lshr(j, one)), inner), i)
        x0, x1 = _halves(b, b.add(state[1], block))
        y0, y1 = threefry2x32(b, key, x0, x1)
        return b.select(b.icmp_unsigned("==", b.and_(j, one), zero), y0, y1)
    return b.mul(b.mul(outer, half), inner), element


def _philox_layout(b, size: int, wide: bool, state, key, words: int):
    """(blocks used, element e -> its word) for Philox."""
    per_block = 2 if wide else 4

    def element(e):
        block = b.udiv(e, const_i64(per_block))
        low = b.add(state[1], block)
        carry = b.zext(b.icmp_unsigned("<", low, state[1]), _I64)
        high = b.add(state[0] if words == 2 else state[2], carry)
        c = philox4x32(b, key, (*_halves(b, low), *_halves(b, high)))
        which = b.urem(e, const_i64(per_block))
        if wide:
            return _pick(b, which, [_join(b, c[0], c[1]), _join(b, c[2], c[3])])
        return _pick(b, which, list(c))
    return -(-size // per_block), element
