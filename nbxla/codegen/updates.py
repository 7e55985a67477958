"""In-place update kernels: a fusion whose root is a ``dynamic-update-slice`` of one of its
parameters, emitted to touch only the update's window.

The caller passes the same buffer as that parameter and as the output, so the rest of the array
is already in place and is neither read nor written: a loop's ``A[i, j] -= ...`` costs one
element, not a copy of ``A``.  The (clamped) start indices are computed once, before the loop.

Reads of the updated array inside the update are what could go wrong: writing element ``u`` of
the window must not change a value that a later element of the same window reads.  One pass
(compute an element, store it) is used when that cannot happen -- the window is one element,
or the array is read only through dynamic slices at the window itself, elementwise -- and
otherwise two: the whole update into a temporary (``malloc``), then the copy into the window.
"""

from __future__ import annotations

from llvmlite import ir

from ..hlo.aliasing import chain_reads, constant_starts, outside_window, update_chain
from ..hlo.ir import Computation, Instruction
from ..hlo.opcodes import ELEMENTWISE
from .elemental import ElementalEmitter, const_i64, linear_index
from .box_updates import emit_box_update
from .masked_ranges import clamped_range, iota_bounds
from .toolkit import (KernelBuffers, KernelSpec, compute_then_store, kernel_function, load_at, nest,
                      nest_ranges, product, single_unit)

@single_unit
def emit_in_place_update(module: ir.Module, name: str, comp: Computation) -> KernelSpec:
    """The kernel of ``comp`` (``hlo.aliasing.updated_parameter(comp)`` is not None) writing only the window;
    its output buffer must be the updated parameter's buffer.  A box update (root ``select(box,
    new, parameter)``) is ``box_updates``'."""
    root = comp.root
    if root.opcode == "select":
        return emit_box_update(module, name, comp, _libc)
    chain = update_chain(comp)
    if len(chain) > 1:
        return _emit_chain(module, name, comp, chain)
    target, update = root.operands[0], root.operands[1]
    params = comp.parameters
    shapes = [p.shape for p in params] + [root.shape]
    fn, b = kernel_function(module, name)
    bufs = KernelBuffers(b, fn.args[0], shapes)
    out = len(params)
    # The target is read through the output's pointer (the same buffer): with two pointers
    # to one buffer, LLVM's overlap check before the vectorized loop always failed and the
    # scalar loop ran; through one, a read at u before the store at u is a plain dependence.
    em = ElementalEmitter(b, comp, lambda k, index: load_at(b, bufs, out if params[k] is target else k,
                                                            params[k].shape.dims, index))
    starts = [em.clamped_start(s, [], n - u)
              for s, n, u in zip(root.operands[2:], root.shape.dims, update.shape.dims)]
    dims = update.shape.dims

    def store_window(index, value):
        at = [b.add(i, s) for i, s in zip(index, starts)]
        bufs.store(b, out, linear_index(b, at, root.shape.dims), value)

    if _one_pass(comp, root, target):
        def element(index):
            em.reset_memo()
            store_window(index, em.value(update, index))
        if not dims:
            element([])
            b.ret_void()
            return KernelSpec(name, "in-place", 1, 1)
        # Element u reads only position u of the target: rows of the window are independent,
        # so [begin, end) is a range of its first dimension and the caller may split it.
        ranges = [(fn.args[1], fn.args[2])] + [(const_i64(0), const_i64(n)) for n in dims[1:]]
        masked = _masked_window(root, update, target)
        if masked is not None:
            # (``C[:i, j] += ...``: outside its true range the update stores the window's own
            # values back; only the range is written)
            dim, found = masked
            ranges[dim] = clamped_range(b, em, found, *ranges[dim])
        nest_ranges(b, ranges, "w", element)
        b.ret_void()
        return KernelSpec(name, "in-place", dims[0], product(dims[1:]))
    else:
        compute_then_store(b, module, _libc, em, update, dims, lambda name, body: nest(b, dims, name, body),
                           store_window)
    b.ret_void()
    return KernelSpec(name, "in-place", 1, product(dims))      # (two passes: one call, [0, 1))


def _emit_chain(module: ir.Module, name: str, comp: Computation, chain: list[Instruction]) -> KernelSpec:
    """Windows written one after another into the target's buffer, innermost update first
    (``aliasing.update_chain``): every value of the chain an update reads is read from that
    buffer, which holds it still at the positions read.  A link whose update reads its own
    window (``p[1:-1, 1:-1] = f(p)`` before the walls) computes it into a temporary first."""
    target = chain[0].operands[0]
    params = comp.parameters
    fn, b = kernel_function(module, name)
    bufs = KernelBuffers(b, fn.args[0], [p.shape for p in params] + [comp.root.shape])
    out = len(params)
    dims = comp.root.shape.dims
    in_buffer = {id(d) for d in chain[:-1]}
    em = _ChainEmitter(b, comp, lambda k, index: load_at(b, bufs, out if params[k] is target else k,
                                                         params[k].shape.dims, index),
                       in_buffer, lambda index: load_at(b, bufs, out, dims, index))
    own_window = {k for r, _, links in chain_reads(comp, chain) for k in links
                  if not outside_window(r, chain[k], r.operands[0])}
    for k, link in enumerate(chain):
        update, starts = link.operands[1], constant_starts(link)

        def store_window(index, value, starts=starts):
            at = [b.add(i, const_i64(s)) for i, s in zip(index, starts)]
            bufs.store(b, out, linear_index(b, at, dims), value)
        if k not in own_window or (k == 0 and _one_pass(comp, link, target)):
            def element(index, update=update, store_window=store_window):
                em.reset_memo()
                store_window(index, em.value(update, index))
            nest(b, update.shape.dims, "c", element)
        else:
            compute_then_store(b, module, _libc, em, update, update.shape.dims,
                               lambda name, body, shape=update.shape.dims: nest(b, shape, name, body), store_window)
    b.ret_void()
    return KernelSpec(name, "in-place", 1, sum(product(d.operands[1].shape.dims) for d in chain))


class _ChainEmitter(ElementalEmitter):
    """An emitter that reads the chain's intermediate arrays from the target's buffer."""

    def __init__(self, b, comp, load, in_buffer: set[int], read_buffer):
        super().__init__(b, comp, load)
        self.in_buffer = in_buffer
        self.read_buffer = read_buffer

    def _emit(self, instr: Instruction, index: list) -> ir.Value:
        if id(instr) in self.in_buffer:
            return self.read_buffer(index)
        return super()._emit(instr, index)


def _masked_window(root: Instruction, update: Instruction, target: Instruction):
    """(dimension, range) when the update is ``select(lo <= iota < hi, new, window)`` with
    ``window`` the target's own values at the window (a slice of index-dependent length masked
    to full length): outside the range, storing it changes nothing.  Else None."""
    if update.opcode != "select":
        return None
    predicate, _, old = update.operands
    if not old.operands or old.operands[0] is not target or old.shape.dims != update.shape.dims:
        return None
    if old.opcode == "dynamic-slice":
        if not _same_starts(old.operands[1:], root.operands[2:]):
            return None
    elif old.opcode != "slice" or not _window_slice(old, root):
        return None
    return iota_bounds(predicate)


def _one_pass(comp: Computation, root: Instruction, target: Instruction) -> bool:
    """Whether computing and storing element by element is safe: the window is one element, or
    every read of ``target`` is a dynamic slice at the window's own start and size whose value
    reaches the update through elementwise ops only (element ``u`` reads only position ``u``)."""
    update = root.operands[1]
    if product(update.shape.dims) == 1:
        return True
    # (a slice that lies wholly outside the window reads values this kernel never writes:
    # ``p[-1, :] = p[-2, :]``)
    readers = [i for i in comp.instructions if i is not root and any(o is target for o in i.operands)
               and not outside_window(i, root)]
    if not all(r.operands[0] is target and r.operands.count(target) == 1 and
               (_window_slice(r, root) if r.opcode == "slice" else r.opcode == "dynamic-slice" and
                list(r.attrs.get("dynamic_slice_sizes", ())) == list(update.shape.dims) and
                _same_starts(r.operands[1:], root.operands[2:])) for r in readers):
        return False
    # Between those slices and the update: elementwise ops of the update's shape, and reshapes
    # that only add or drop dimensions of size 1 (``C[:i, j]``: a column read as a vector and
    # written back as [n, 1]), which keep every element at its position.
    tainted = {id(r) for r in readers}
    window = _squeezed(update.shape.dims)
    for instr in comp.instructions:
        if id(instr) in tainted or instr is root:
            continue
        if any(id(o) in tainted for o in instr.operands):
            if instr.opcode in ELEMENTWISE:
                if instr.shape.dims != update.shape.dims and \
                        not (_squeezed(instr.shape.dims) == window and
                             all(o.shape.dims == instr.shape.dims for o in instr.operands)):
                    return False
            elif instr.opcode not in ("reshape", "bitcast") or _squeezed(instr.shape.dims) != window:
                return False
            tainted.add(id(instr))
    return True


def _squeezed(dims) -> tuple:
    return tuple(n for n in dims if n != 1)


def _window_slice(r: Instruction, root: Instruction) -> bool:
    """Whether the ``slice`` ``r`` reads exactly the window ``root`` writes (constant starts,
    as ``A[1:, :] = A[1:, :] - ...`` traces): the window's own elements, in order."""
    starts = []
    for s in root.operands[2:]:
        if s.opcode != "constant" or s.shape.rank != 0:
            return False
        starts.append(int(s.literal))
    dims = root.operands[1].shape.dims
    return len(starts) == len(dims) and all(
        sl.stride == 1 and sl.start == start and sl.limit - sl.start == n
        for sl, start, n in zip(r.attrs["slice"], starts, dims))


def _same_starts(a: list[Instruction], b: list[Instruction]) -> bool:
    def same(x, y):
        return x is y or (x.opcode == y.opcode == "constant" and x.literal.tolist() == y.literal.tolist())
    return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))


def _libc(module: ir.Module, name: str, result: ir.Type, args: list[ir.Type]) -> ir.Function:
    found = module.globals.get(name)
    return found if found is not None else ir.Function(module, ir.FunctionType(result, args), name)
