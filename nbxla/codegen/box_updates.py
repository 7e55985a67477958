"""In-place box updates: a fusion rooted at ``select(box, new, A)`` (``A`` one of its
parameters, ``box`` an iota mask true on a box of indices: ``hlo/iota_masks``) writes ``new``
into the box of ``A``'s own buffer and leaves everything else as it is.

Why: the frontend writes a slice of index-dependent length (``A[i + 1:, i + 1:] -= np.outer(
A[i + 1:, i], A[i, i + 1:])``, LU's rank-1 update) as such a select over the whole array, so
the elemental kernel computed and stored every element of ``A`` in every step of the loop:
n^2 per step for a trailing box of (n - i)^2, three times the work over the loop, plus a
second buffer for the result.  Here only the box is computed, in place.

Reads of ``A`` inside ``new`` decide how.  Reads at the written element itself (elementwise,
``A[u] - ...``) are safe one element at a time, and so are reads of slices of ``A`` lying
outside the box (LU's pivot row and column), which the kernel never writes; the slices' and
the box's bounds are scalars of the step, so that is checked at run time.  Any other read, or
a slice that meets the box, gets two passes: the box computed into a temporary first, then
copied into ``A`` (NumPy's read-everything-then-write).
"""

from __future__ import annotations

from llvmlite import ir

from ..hlo.iota_masks import box_bounds
from ..hlo.ir import Computation, Instruction
from ..hlo.opcodes import ELEMENTWISE
from .elemental import ElementalEmitter, const_i64, linear_index
from .masked_ranges import clamped_range
from .toolkit import (KernelBuffers, KernelSpec, compute_then_store, kernel_function, load_at,
                      nest_ranges, product)

def emit_box_update(module: ir.Module, name: str, comp: Computation, libc) -> KernelSpec:
    """The kernel of ``comp`` (root ``select(box, new, parameter)``: ``aliasing.updated_parameter``)
    writing only the box; its output buffer must be the parameter's buffer.  ``libc(module,
    name, result, args)`` declares malloc and free."""
    root = comp.root
    predicate, new, target = root.operands
    params = comp.parameters
    dims = root.shape.dims
    fn, b = kernel_function(module, name)
    out = len(params)
    # Loads from inputs and stores to the output are marked as not aliasing (``KernelBuffers``'
    # first_output), which is true for the target's slices only where they lie apart from the
    # box: the one pass reads them through the parameter's pointer, and everything else of the
    # target (its element at the written index, every read of the two passes) through the
    # output's.  Why: LLVM's run-time overlap check before the vectorized row compared the
    # row with the column a rank-1 update reads (``A[r, i]``, interleaved with the rows in
    # memory), always failed, and the scalar loop ran (0.9 ns an element instead of 0.3).
    bufs = KernelBuffers(b, fn.args[0], [p.shape for p in params] + [root.shape], first_output=out)
    written = []                # [the element index of the one pass], while it is emitted

    def load(k, index):
        if params[k] is target and not (written and not _same_index(index, written[0])):
            k = out
        return load_at(b, bufs, k, params[k].shape.dims if k < out else dims, index)
    em = ElementalEmitter(b, comp, load)
    box = box_bounds(predicate)
    slices, one_pass = _target_reads(comp, root, target)
    # Rows split over threads only where every run takes the one pass (elements independent).
    split = one_pass and not slices
    first = (fn.args[1], fn.args[2]) if split else (const_i64(0), const_i64(dims[0]))
    ranges = [first] + [(const_i64(0), const_i64(n)) for n in dims[1:]]
    ranges = [clamped_range(b, em, box[d], *r) if d in box else r for d, r in enumerate(ranges)]

    def store(index, value):
        bufs.store(b, out, linear_index(b, index, dims), value)

    def direct():
        def element(index):
            em.reset_memo()
            written[:] = [index]
            value = em.value(new, index)
            written.clear()
            store(index, value)
        nest_ranges(b, ranges, "w", element)

    def through_temporary():
        compute_then_store(b, module, libc, em, new, dims, lambda name, body: nest_ranges(b, ranges, name, body),
                           store)

    if not one_pass:
        through_temporary()
    elif not slices:
        direct()
    else:
        apart = _slices_apart(b, em, slices, ranges, dims)
        with b.if_else(apart) as (then, otherwise):
            with then:
                direct()
            with otherwise:
                through_temporary()
    b.ret_void()
    if split:
        return KernelSpec(name, "in-place", dims[0], product(dims[1:]))
    return KernelSpec(name, "in-place", 1, product(dims))      # (one call, [0, 1))


def _same_index(a: list, b: list) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


def _target_reads(comp: Computation, root: Instruction, target: Instruction):
    """(the slices of ``target`` read, whether one pass can be safe): every other read of the
    target must be elementwise at the output's shape, its value reaching ``new`` through
    elementwise ops of that shape only (element ``u`` then reads only position ``u``)."""
    slices, tainted = [], set()
    for instr in comp.instructions:
        if instr is root:
            continue
        reads = [o for o in instr.operands if o is target or id(o) in tainted]
        if not reads:
            continue
        if instr.opcode in ("slice", "dynamic-slice") and instr.operands[0] is target \
                and target not in instr.operands[1:] and not any(id(o) in tainted for o in instr.operands):
            slices.append(instr)
        elif instr.opcode in ELEMENTWISE and instr.shape.dims == root.shape.dims \
                and all(o.shape.dims == root.shape.dims for o in reads):
            tainted.add(id(instr))
        else:
            return slices, False
    return slices, True


def _slices_apart(b, em: ElementalEmitter, slices: list[Instruction], ranges: list, dims) -> ir.Value:
    """An i1: every slice lies wholly outside the box (apart from it along some dimension), as
    the run's scalars place them; an empty box counts as apart."""
    apart = ir.Constant(ir.IntType(1), 1)
    for s in slices:
        if s.opcode == "slice":
            starts = [const_i64(sl.start) for sl in s.attrs["slice"]]
            sizes = [sl.limit - sl.start for sl in s.attrs["slice"]]
            if any(sl.stride != 1 for sl in s.attrs["slice"]):
                return ir.Constant(ir.IntType(1), 0)
        else:
            sizes = list(s.attrs["dynamic_slice_sizes"])
            starts = [em.clamped_start(o, [], n - z) for o, n, z in zip(s.operands[1:], dims, sizes)]
        this = ir.Constant(ir.IntType(1), 0)
        for (lo, hi), start, size in zip(ranges, starts, sizes):
            before = b.icmp_signed("<=", b.add(start, const_i64(size)), lo)
            after = b.icmp_signed(">=", start, hi)
            this = b.or_(this, b.or_(before, after))
        apart = b.and_(apart, this)
    empty = ir.Constant(ir.IntType(1), 0)
    for lo, hi in ranges:
        empty = b.or_(empty, b.icmp_signed(">=", lo, hi))
    return b.or_(apart, empty)
