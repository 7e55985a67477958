"""Native reduce-window kernels: pooling-style windows and prefix scans (cumsum, cummax, ...).

The semantics are the reference evaluator's (``_reduce_window`` in hlo/evaluator_reduce.py):
each output element starts from the init value and combines, in row-major order of the
window offsets, the window's input elements; padding and base-dilation holes are skipped
(never combined), and window reversal is ignored.  A reducer that is one recognized binary op
(add, multiply, maximum, minimum, and, or) is one instruction; any other reducer, and the
variadic ones (several inputs, a tuple result: an argmax pooling), are emitted inline on the
accumulators and the window's values, in the window kernel (the evaluator scans only single
recognized ops).

Two kernels, with the usual signature ``void kernel(i8** buffers, i64 begin, i64 end)`` over
buffers (inputs..., inits..., outputs...):

* ``window``: a unit of the parallel range is one block of an output row (all output dims
  but the last fix the row).  The block is set to the init value, then for each window
  offset the block is combined, in place, with the input elements under it.  The window
  loops are outside the column loop, so the innermost loop is a plain (strided) pass that
  LLVM vectorizes, and the block is small enough to stay in L1 across the window loops.
  Its bounds are computed per window offset so that no padding is ever loaded.
* ``scan``: a prefix window (size n along one axis, low padding n-1, size 1 elsewhere) is a
  running accumulator along that axis, O(n) instead of O(n^2).  Like the evaluator's
  ``ufunc.accumulate``, the running value starts at the first element and combines the next
  ones in order (so float sums round exactly as NumPy's do), and each output is
  ``init op running``.  Units are (index before the axis, block of lanes after it): the lanes
  of a block are independent scans, vectorized across the lanes.
"""

from __future__ import annotations

from llvmlite import ir

from ..errors import UnsupportedError
from ..hlo.attributes import WindowDim
# The evaluator's own test for a prefix window: the scan kernel is used exactly where the
# evaluator uses ``ufunc.accumulate``, so both combine the init value the same way.
from ..hlo.evaluator_reduce import prefix_axis
from ..hlo.ir import Computation, Instruction
from ..hlo.shapes import is_complex, is_float, SymbolicDimensionError
from .elemental import const_i64, delinearize, ElementalEmitter, llvm_type, row_major_strides
from .reductions import apply_scalar_computation
from .toolkit import (combine_values, counted_loop, entry_alloca, kernel_function, KernelBuffers,
                      KernelSpec, product, reducer_opcode, unknown_axes)


# Output columns per unit of a window kernel: 512 accumulators (2-8 KiB) stay in L1 while the
# window loops pass over them, and rows this long are still split across threads.
WINDOW_COLUMNS = 512
# Independent scans per unit of a scan kernel (a stack array of running values).
SCAN_LANES = 512

_INPUT, _INIT, _OUTPUT = "input", "init", "output"


def emit_reduce_window_kernel(module: ir.Module, name: str, comp: Computation) -> KernelSpec:
    """A computation whose root is ``reduce-window(inputs..., inits...)`` of its parameters."""
    rw = comp.root
    opcode = _native_reducer(rw)
    if opcode is None:
        # A custom or variadic reducer: the window kernel applies it inline, in the evaluator's
        # order (each output starts at the init values, then the window offsets in row-major
        # order); the evaluator uses ``accumulate`` only for single recognized ops.
        return _emit_windows(module, name, comp, rw, None)
    axis = prefix_axis(rw.attrs["window"].dims, rw.operands[0].shape.dims)
    if axis is not None and axis in unknown_axes(comp, rw.operands[0]):
        # (a window as long as an axis of unknown size: a prefix at this size only, a sliding
        # window at every other -- its attribute holds this size)
        raise SymbolicDimensionError(f"the window of %{rw.name} spans axis {axis} at this size only: it "
                                     f"depends on the size (%{rw.name}'s window attribute)")
    if axis is not None:
        return _emit_scan(module, name, comp, rw, opcode, axis)
    return _emit_windows(module, name, comp, rw, opcode)


def _native_reducer(rw: Instruction) -> str | None:
    """The opcode ``combine_values`` applies for this reduce-window, None for a custom or
    variadic reducer (applied inline), or UnsupportedError saying why there is no kernel."""
    if any(o.opcode != "parameter" for o in rw.operands):
        raise UnsupportedError("a fused reduce-window has no native code path yet")
    leaves = rw.shape.leaves() if rw.shape.is_tuple else [rw.shape]
    for leaf in leaves:
        llvm_type(leaf.element_type)              # raises for element types without code
    opcode = reducer_opcode(rw) if len(rw.operands) == 2 else None
    if opcode is None:
        if any(is_complex(leaf.element_type) for leaf in leaves):
            raise UnsupportedError("a complex reduce-window with a custom reducer has no native code path")
        return None
    t = rw.shape.element_type
    if is_complex(t) and opcode not in ("add", "multiply"):
        raise UnsupportedError(f"complex reduce-window with {opcode} has no native code path")
    if is_float(t) and opcode in ("and", "or"):
        raise UnsupportedError(f"reduce-window with {opcode} on {t} has no native code path")
    if t == "pred":
        # NumPy (and XLA) add booleans as "or"; combine_values's integer add would be xor on i1.
        return {"add": "or", "multiply": "and"}.get(opcode, opcode)
    return opcode


class _Kernel:
    """A kernel function over (inputs..., inits..., outputs...) with the emitter
    ``combine_values`` needs.  ``opcode`` None: the reducer computation is applied inline."""

    def __init__(self, module: ir.Module, name: str, comp: Computation, rw: Instruction, opcode: str | None):
        self.fn, self.b = kernel_function(module, name)
        n = len(rw.operands) // 2
        params = comp.parameters
        leaves = rw.shape.leaves() if rw.shape.is_tuple else [rw.shape]
        self.bufs = KernelBuffers(self.b, self.fn.args[0], [p.shape for p in params] + leaves)
        self.n = n
        self.slot = {_INPUT: [x.parameter_number for x in rw.operands[:n]],
                     _INIT: [i.parameter_number for i in rw.operands[n:]],
                     _OUTPUT: [len(params) + k for k in range(n)]}
        # Only its scalar helpers (minmax, complex parts) are used: loads are emitted here.
        self.em = ElementalEmitter(self.b, comp, lambda k, index: self.load(_INIT, const_i64(0)))
        self.opcode, self.t = opcode, leaves[0].element_type
        self.reducer = rw.attrs["to_apply"]
        self.begin, self.end = self.fn.args[1], self.fn.args[2]

    def load(self, buffer: str, offset, k: int = 0) -> ir.Value:
        return self.bufs.load(self.b, self.slot[buffer][k], offset)

    def loads(self, buffer: str, offset) -> list:
        return [self.load(buffer, offset, k) for k in range(self.n)]

    def store(self, offset, value, k: int = 0) -> None:
        self.bufs.store(self.b, self.slot[_OUTPUT][k], offset, value)

    def stores(self, offset, values) -> None:
        for k, v in enumerate(values):
            self.store(offset, v, k)

    def combine_all(self, accs: list, xs: list) -> list:
        """The reducer on (accumulators..., values...): one op, or the computation inline."""
        if self.opcode is None:
            return apply_scalar_computation(self.b, self.reducer, accs + xs)
        return [self.combine(accs[0], xs[0])]

    def combine(self, acc, x) -> ir.Value:
        """acc op x, with float sums and products rounded in exactly this order: combine_values
        marks them reassociable (right for reductions, whose order is free), and then x86's
        backend turns a scan's ``(run + x) + init`` into ``run + (x + init)``.  (Complex
        products go through combine_values: NumPy's formula, without reassociation flags.)"""
        b, t, op = self.b, self.t, self.opcode
        if is_float(t) and op in ("add", "multiply"):
            return b.fadd(acc, x) if op == "add" else b.fmul(acc, x)
        if is_complex(t) and op == "add":
            (p, q), (r, s) = self.em.parts(acc), self.em.parts(x)
            return self.em.pack(b.fadd(p, r), b.fadd(q, s))
        return combine_values(b, self.em, op, t, acc, x)

    def unit_block(self, unit, blocks: int, width: int, total: int):
        """(outer index, lo, hi) of a unit of ``blocks`` blocks of ``width`` per outer index."""
        b = self.b
        outer = b.udiv(unit, const_i64(blocks)) if blocks > 1 else unit
        lo = b.mul(b.urem(unit, const_i64(blocks)), const_i64(width)) if blocks > 1 else const_i64(0)
        hi = _min(b, b.add(lo, const_i64(width)), const_i64(total))
        return outer, lo, hi


def _min(b, x, y):
    return b.select(b.icmp_signed("<", x, y), x, y)


def _max(b, x, y):
    return b.select(b.icmp_signed(">", x, y), x, y)


def _empty_kernel(kernel: _Kernel, name: str, style: str) -> KernelSpec:
    kernel.b.ret_void()
    return KernelSpec(name, style, 0, 1)


# ---- pooling-style windows ------------------------------------------------------------------

class _Axis:
    """One dimension: output extent ``out``, input extent ``n`` and its window."""

    def __init__(self, out: int, n: int, w: WindowDim):
        self.out, self.n, self.w = out, n, w

    def input_position(self, b, o, k):
        """Position of (output o, window offset k) in the padded, base-dilated input."""
        w = self.w
        pos = b.add(b.mul(o, const_i64(w.stride)), b.mul(k, const_i64(w.window_dilation)))
        return b.sub(pos, const_i64(w.pad_low))

    def last_position(self) -> int:
        """The padded position of the last input element (negative when there is none)."""
        return (self.n - 1) * self.w.base_dilation


def _axes(rw: Instruction) -> list[_Axis]:
    dims = rw.attrs["window"].dims
    out = rw.shape.elements[0] if rw.shape.is_tuple else rw.shape
    axes = [_Axis(o, n, w) for o, n, w in zip(out.dims, rw.operands[0].shape.dims, dims)]
    # A rank-0 reduce-window is init op x: one axis of one element with a window of one.
    return axes or [_Axis(1, 1, WindowDim(1))]


def _emit_windows(module, name, comp, rw, opcode) -> KernelSpec:
    kernel = _Kernel(module, name, comp, rw, opcode)
    axes = _axes(rw)
    out_dims = [a.out for a in axes]
    rows, columns = product(out_dims[:-1]), out_dims[-1]
    if rows * columns == 0:
        return _empty_kernel(kernel, name, "window")
    width = min(WINDOW_COLUMNS, columns)
    blocks = -(-columns // width)
    b = kernel.b
    inits = kernel.loads(_INIT, const_i64(0))
    in_strides = row_major_strides([a.n for a in axes])

    def unit(u):
        row, lo, hi = kernel.unit_block(u, blocks, width, columns)
        out_row = b.mul(row, const_i64(columns))
        counted_loop(b, lo, hi, "fill", lambda c: kernel.stores(b.add(out_row, c), inits))
        outer = delinearize(b, row, out_dims[:-1])
        _over_window(kernel, axes, in_strides, outer, 0, const_i64(0),
                     lambda offset: _combine_columns(kernel, axes[-1], offset, out_row, lo, hi))

    counted_loop(b, kernel.begin, kernel.end, "unit", unit)
    b.ret_void()
    window_size = product([a.w.size for a in axes])
    return KernelSpec(name, "window", rows * blocks, max(1, width * window_size))


def _over_window(kernel, axes, in_strides, outer, d, offset, innermost) -> None:
    """Loops over the window offsets of the dims before the last, in row-major order; an
    offset that falls on padding or a dilation hole skips everything inside it.
    ``innermost(input offset of the row)`` emits the last dim's work."""
    if d == len(axes) - 1:
        innermost(offset)
        return
    b, axis = kernel.b, axes[d]

    def body(k):
        pos = axis.input_position(b, outer[d], k)
        valid, i = _input_index(b, axis, pos)
        with b.if_then(valid):
            inner = b.add(offset, b.mul(i, const_i64(in_strides[d])))
            _over_window(kernel, axes, in_strides, outer, d + 1, inner, innermost)
    counted_loop(b, const_i64(0), const_i64(axis.w.size), f"k{d}", body)


def _input_index(b, axis: _Axis, pos):
    """(is ``pos`` an input element, its input index)."""
    bd = axis.w.base_dilation
    valid = b.and_(b.icmp_signed(">=", pos, const_i64(0)),
                   b.icmp_signed("<=", pos, const_i64(axis.last_position())))
    if bd == 1:
        return valid, pos
    on_element = b.icmp_signed("==", b.srem(pos, const_i64(bd)), const_i64(0))
    return b.and_(valid, on_element), b.sdiv(pos, const_i64(bd))


def _combine_columns(kernel, axis: _Axis, row_offset, out_row, lo, hi) -> None:
    """For each window offset k of the last dim: out[c] = out[c] op in[c*stride + k*dilation
    - pad] over the columns c of [lo, hi) whose position is inside the input, a range
    computed up front so that the loop has no bounds test (and so vectorizes) and never
    loads padding."""
    b, w = kernel.b, axis.w
    stride = const_i64(w.stride)

    def per_offset(k):
        # position = c*stride + shift; inside when 0 <= position <= last_position
        shift = b.sub(b.mul(k, const_i64(w.window_dilation)), const_i64(w.pad_low))
        first = _ceil_div_nonneg(b, b.neg(shift), w.stride)
        beyond = b.sub(const_i64(axis.last_position()), shift)
        end = b.select(b.icmp_signed("<", beyond, const_i64(0)), const_i64(0),
                       b.add(b.sdiv(beyond, stride), const_i64(1)))

        def column(c):
            pos = b.add(b.mul(c, stride), shift)
            i = pos if w.base_dilation == 1 else b.sdiv(pos, const_i64(w.base_dilation))
            out_at = b.add(out_row, c)
            accs = kernel.loads(_OUTPUT, out_at)
            new = kernel.combine_all(accs, kernel.loads(_INPUT, b.add(row_offset, i)))
            if w.base_dilation > 1:
                # A hole between dilated elements: keep the accumulator (the load above was
                # of a real element, pos rounded down, so it stayed in bounds).
                hole = b.icmp_signed("!=", b.srem(pos, const_i64(w.base_dilation)), const_i64(0))
                new = [b.select(hole, a, v) for a, v in zip(accs, new)]
            kernel.stores(out_at, new)
        counted_loop(b, _max(b, first, lo), _min(b, end, hi), "c", column)
    counted_loop(b, const_i64(0), const_i64(w.size), "kc", per_offset)


def _ceil_div_nonneg(b, x, d: int):
    """ceil(x / d) for d > 0, clamped below at 0 (sdiv rounds toward zero, so negative x
    would round the wrong way)."""
    up = b.sdiv(b.add(x, const_i64(d - 1)), const_i64(d))
    return b.select(b.icmp_signed(">", x, const_i64(0)), up, const_i64(0))


# ---- prefix scans ---------------------------------------------------------------------------

def _emit_scan(module, name, comp, rw, opcode, axis: int) -> KernelSpec:
    kernel = _Kernel(module, name, comp, rw, opcode)
    dims = rw.shape.dims
    outer, n, inner = product(dims[:axis]), dims[axis], product(dims[axis + 1:])
    if outer * n * inner == 0:
        return _empty_kernel(kernel, name, "scan")
    lanes = min(SCAN_LANES, inner)
    blocks = -(-inner // lanes)
    b = kernel.b
    init = kernel.load(_INIT, const_i64(0))
    running = entry_alloca(b, ir.ArrayType(llvm_type(kernel.t), lanes))

    def unit(u):
        o, lo, hi = kernel.unit_block(u, blocks, lanes, inner)
        base = b.mul(o, const_i64(n * inner))

        def step(t, first: bool):
            row = b.add(base, b.mul(t, const_i64(inner)))

            def lane(j):
                slot = b.gep(running, [const_i64(0), b.sub(j, lo)])
                x = kernel.load(_INPUT, b.add(row, j))
                value = x if first else kernel.combine(b.load(slot), x)
                b.store(value, slot)
                kernel.store(b.add(row, j), kernel.combine(init, value))
            counted_loop(b, lo, hi, "lane0" if first else "lane", lane)

        step(const_i64(0), True)
        counted_loop(b, const_i64(1), const_i64(n), "t", lambda t: step(t, False))

    counted_loop(b, kernel.begin, kernel.end, "unit", unit)
    b.ret_void()
    return KernelSpec(name, "scan", outer * blocks, n * lanes)
