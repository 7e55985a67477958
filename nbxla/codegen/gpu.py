"""The CUDA target: LLVM IR kernels for NVPTX built around the elemental emitter, and PTX.

Every fusion becomes one ``__global__`` kernel (two for a two-phase reduction) whose
arguments are the fusion's parameters then its outputs, as pointers to row-major contiguous
buffers (``i8`` for ``pred``).  The elemental emitter (``elemental.py``, unchanged) computes
values; this module only decides which thread computes which index, the way XLA:GPU does:

* ``elementwise``: a grid-stride loop over the flat output index
  (``i = ctaid*ntid + tid; i < n; i += ntid*nctaid``).  When every operand is read at the
  output's own index or is a scalar (the linear case), a thread takes chunks of W
  consecutive elements, W = 16 bytes / the widest element (4 f32, 2 f64, 8 f16): one 16-byte
  load per operand (``ld.global.nc.v4.b32``), W copies of the element code, one 16-byte
  store per output, and then the < W tail elements one by one.  The chunk loop runs only if
  every buffer it touches is aligned to a chunk, checked in the kernel at run time (a
  sliced CuPy view passed in place may be unaligned; the check is a few integer operations
  per thread, and one kernel serves both cases); otherwise the scalar loop does everything.
  Index-mapped operands (transposes, broadcasts, slices) are read through the emitter's index
  arithmetic, one element at a time.
* ``row-warp`` / ``row-block`` (the reduced dimensions include the minor-most one): one warp
  per row for rows of at most ``ROW_WARP_MAX`` elements, else one block per row.  Lanes
  stride through the row (consecutive lanes read consecutive elements), combine with a
  butterfly of ``shfl.sync.bfly`` (every lane ends with the row's value), and in block mode
  warps combine through shared memory.  Fusions with several reductions over the same row
  (softmax, layer norm) run them in turn, each one seeing the earlier ones' row values; the
  row-shaped outputs are then written by the same threads.
* ``column`` (the minor-most dimension is kept): a block is a grid of row lanes x column
  lanes (``ColumnLayout``); consecutive column lanes read consecutive kept indices
  (coalesced), with fewer than 32 columns a warp covers several consecutive rows; the row
  lanes split the reduced range and meet in shared memory.
* ``column-split`` (few columns, many rows: the column tiles alone would leave the GPU idle):
  ``k`` deals (column tile, row chunk) units to blocks, each writing one partial per column
  to scratch; ``k_finish`` combines each column's chunks in chunk order and computes the
  epilogue.  Two phases rather than atomics: the result does not depend on block timing.
* ``full-reduce`` (everything reduced from elementwise work): two kernels.  ``k`` reduces a
  grid-stride share per thread (W-element chunks with 16-byte loads, as above), then the
  block (shuffles + shared memory) and writes one 8-byte slot per reduction per block;
  ``k_finish`` (one block) combines the blocks' slots and computes the epilogue.
* Multi-output fusions write every output from the same loop.

Reductions start every thread from the reducer's identity and combine the fusion's init
value once at the end (exact even for a non-identity init).  f16 sums and products are
accumulated in f32.  Thread ids are read once at kernel entry; all index math is 64-bit.

Transcendentals: the elemental emitter's polynomial code (``transcendentals.py``) is plain
IR NVPTX selects (error bounds in its docstring); the two libm calls it still makes (cbrt,
and atan2 in complex functions) get device bodies from ``gpu_math``.  ``frem`` is lowered by LLVM's NVPTX back end as
``x - trunc(x/y)*y`` (exact only while the quotient is below 2**24 (f32) / 2**53 (f64)).

``compile_gpu`` emits the module, optimizes it at O3 for the NVPTX target machine and prints
PTX (llvmlite's built-in NVPTX back end: no GPU, driver or CUDA toolkit needed).

Kept whole (over the 700-line rule on purpose): the kernel styles above share this module's
private scaffolding -- ``_Kernel`` (thread ids, shuffles, shared memory, stride loops),
``_Reducer`` and the scratch-slot layout -- and mirror one another's launch arithmetic; split
by style, those internals would become cross-module names that only this target uses.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field

import llvmlite.binding as llvm
from llvmlite import ir

from ..errors import UnsupportedError
from ..hlo.ir import Computation, Instruction
from ..hlo.low_precision import involves_low_precision
from ..hlo.shapes import is_complex, is_float
from . import gpu_math
from .elemental import (I1, I32, I64, I8, const_i64, delinearize, ElementalEmitter, linear_index,
                        llvm_type, storage_type)
from .toolkit import (ancestors, counted_loop, entry_alloca, expand_index, full_reduction_plan, is_linear,
                      kernel_outputs, LinearEmitter, product, reducer_opcode, ReductionPlan, squeeze_dims)

TRIPLE = "nvptx64-nvidia-cuda"
DEFAULT_ARCH = "sm_80"
WARP = 32
BLOCK = 256                 # threads per block of every kernel (the maxntid annotation)
ROW_WARP_MAX = 512          # rows up to this long get one warp each, longer ones a block
FULL_REDUCE_BLOCKS = 1024   # at most this many partial slots per reduction
FULL_REDUCE_PER_THREAD = 8  # elements per thread before another block is worth it
VECTOR_BYTES = 16           # widest global load/store (ld.global.v4.f32, v2.f64, ...)
COLUMN_FILL_BLOCKS = 1024   # column reductions with fewer tiles split their rows up to this many blocks
COLUMN_CHUNK_MIN_ROWS = 512 # ... but give each block at least this many rows
_F32 = ir.FloatType()


@dataclass
class GpuKernelSpec:
    """How the runtime launches one kernel, or two (blocks of ``block`` threads, 1-D grids).

    Two-phase styles (``finish_name`` set): the first kernel gets the parameters and a scratch
    buffer of ``scratch_bytes(grid)`` bytes, the finish kernel the parameters, the outputs, the
    scratch and ``finish_args(grid)``, on ``finish_grid(...)`` blocks.
    """
    name: str
    style: str                # elementwise, row-warp, row-block, column, column-split, full-reduce
    units: int                # work items of the grid-stride loop (elements, rows, tiles)
    units_per_block: int      # items one block covers per grid step
    n_params: int
    n_outputs: int
    block: int = BLOCK
    finish_name: str | None = None      # full-reduce, column-split: the second kernel
    slots: int = 0                      # 8-byte partial slots: per block (full-reduce) or in all (column-split)
    finish_units: int = 1               # column-split: (tile, row chunk) units of the finish kernel

    def grid(self, max_blocks: int = 1 << 16) -> int:
        """Blocks to launch: enough to cover the work once, at most ``max_blocks``."""
        cap = min(FULL_REDUCE_BLOCKS, max_blocks) if self.style == "full-reduce" else max_blocks
        return max(1, min(-(-self.units // self.units_per_block), cap))

    def scratch_bytes(self, grid: int) -> int:
        """The partial results' buffer: a slot per block (full-reduce) or per row chunk and column."""
        return 8 * self.slots * (grid if self.style == "full-reduce" else 1)

    def finish_grid(self, max_blocks: int = 1 << 16) -> int:
        return 1 if self.style == "full-reduce" else max(1, min(self.finish_units, max_blocks))

    def finish_args(self, grid: int) -> list[int]:
        """Integer arguments after the scratch: how many blocks wrote partials (full-reduce)."""
        return [grid] if self.style == "full-reduce" else []


# ---- kernel scaffolding --------------------------------------------------------------------------

def _declare(module: ir.Module, name: str, ret: ir.Type, args: list) -> ir.Function:
    fn = module.globals.get(name)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ret, args), name)
    return fn


class _Kernel:
    """One ``__global__`` function: typed buffer pointers, special registers, GPU primitives."""

    def __init__(self, module: ir.Module, name: str, in_shapes: list, out_shapes: list,
                 extra: tuple = ()):
        self.module = module
        types = [storage_type(s.element_type).as_pointer() for s in in_shapes + out_shapes]
        fn = ir.Function(module, ir.FunctionType(ir.VoidType(), types + list(extra)), name)
        for k, arg in enumerate(fn.args[:len(types)]):
            arg.name = f"in{k}" if k < len(in_shapes) else f"out{k - len(in_shapes)}"
            arg.add_attribute("noalias")     # outputs are fresh buffers: nothing aliases
        self.fn = fn
        self.shapes = list(in_shapes) + list(out_shapes)
        self.n_in = len(in_shapes)
        self.b = ir.IRBuilder(fn.append_basic_block("entry"))
        self._invariant = module.add_metadata([])
        md = module.add_metadata([fn, ir.MetaDataString(module, "kernel"), ir.Constant(I32, 1)])
        module.add_named_metadata("nvvm.annotations", md)
        md = module.add_metadata([fn, ir.MetaDataString(module, "maxntid"), ir.Constant(I32, BLOCK)])
        module.add_named_metadata("nvvm.annotations", md)
        self.tid, self.ctaid, self.ntid, self.nctaid = (self._sreg(r) for r in ("tid", "ctaid", "ntid", "nctaid"))

    def _sreg(self, reg: str) -> ir.Value:
        fn = _declare(self.module, f"llvm.nvvm.read.ptx.sreg.{reg}.x", I32, [])
        return self.b.zext(self.b.call(fn, []), I64, name=reg)

    # buffers
    def _read(self, k: int, ptr, **kw) -> ir.Value:
        v = self.b.load(ptr, **kw)
        if k < self.n_in:
            # Inputs never change during a kernel: NVPTX reads invariant loads through the
            # non-coherent cache (ld.global.nc).  (llvmlite cannot mark arguments readonly.)
            v.set_metadata("invariant.load", self._invariant)
        return v

    def _from_storage(self, k: int, v) -> ir.Value:
        return self.b.icmp_unsigned("!=", v, ir.Constant(I8, 0)) if self.shapes[k].element_type == "pred" else v

    def load(self, k: int, offset) -> ir.Value:
        return self._from_storage(k, self._read(k, self.b.gep(self.fn.args[k], [offset])))

    def store(self, k: int, offset, value) -> None:
        b = self.b
        if self.shapes[k].element_type == "pred":
            value = b.zext(value, I8)
        b.store(value, b.gep(self.fn.args[k], [offset]))

    def load_linear(self, k: int, index: list, dims) -> ir.Value:
        return self.load(k, linear_index(self.b, index, dims))

    # 16-byte accesses: ``width`` consecutive elements from ``base`` (an element index), the
    # first one at an address aligned to the whole chunk.
    def load_chunk(self, k: int, base, width: int) -> list[ir.Value]:
        """The chunk's elements, as loads whose ``align`` says where the chunk starts.  Not one
        ``<W x T>`` load: O3 (VectorCombine) splits such a load into scalar ones and drops its
        ``!invariant.load``; NVPTX's load/store vectorizer merges these back into one
        ``ld.global.nc.v4`` (or ``.v2.b64``) using the alignment.  Checked on the PTX by tests."""
        b, size = self.b, self.shapes[k].dtype.itemsize
        lanes = []
        for lane in range(width):
            ptr = b.gep(self.fn.args[k], [base if lane == 0 else b.add(base, const_i64(lane))])
            align = width * size if lane == 0 else math.gcd(width * size, lane * size)
            lanes.append(self._from_storage(k, self._read(k, ptr, name=f"in{k}.{lane}", align=align)))
        return lanes

    def store_chunk(self, k: int, base, values: list) -> None:
        """One ``<W x T>`` store of the chunk's values (stores stay vectors through O3)."""
        b = self.b
        width = len(values)
        vty = ir.VectorType(storage_type(self.shapes[k].element_type), width)
        ptr = b.bitcast(b.gep(self.fn.args[k], [base]), vty.as_pointer())
        align = width * self.shapes[k].dtype.itemsize
        vector = ir.Constant(vty, ir.Undefined)
        for lane, v in enumerate(values):
            v = b.zext(v, I8) if self.shapes[k].element_type == "pred" else v
            vector = b.insert_element(vector, v, ir.Constant(I32, lane))
        b.store(vector, ptr, align=align)

    def aligned(self, buffers, width: int) -> ir.Value:
        """i1: every buffer's address is a multiple of ``width`` elements (a run-time check:
        an offset view of a CuPy allocation is a valid, unaligned operand)."""
        b = self.b
        misaligned = const_i64(0)
        for k in sorted(set(buffers)):
            mask = width * self.shapes[k].dtype.itemsize - 1
            misaligned = b.or_(misaligned, b.and_(b.ptrtoint(self.fn.args[k], I64), const_i64(mask)))
        return b.icmp_unsigned("==", misaligned, const_i64(0), name="aligned")

    # GPU primitives
    def barrier(self) -> None:
        self.b.call(_declare(self.module, "llvm.nvvm.barrier0", ir.VoidType(), []), [])

    def shfl_bfly(self, v: ir.Value, lane_mask: int) -> ir.Value:
        """``__shfl_xor_sync(0xffffffff, v, lane_mask)`` for any scalar type (split to i32s)."""
        b = self.b
        fn = _declare(self.module, "llvm.nvvm.shfl.sync.bfly.i32", I32, [I32, I32, I32, I32])

        def shfl32(x):
            return b.call(fn, [ir.Constant(I32, -1), x, ir.Constant(I32, lane_mask), ir.Constant(I32, 31)])
        ty = v.type
        if isinstance(ty, ir.IntType) and ty.width == 32:
            return shfl32(v)
        if isinstance(ty, ir.FloatType):
            return b.bitcast(shfl32(b.bitcast(v, I32)), ty)
        if isinstance(ty, ir.DoubleType) or (isinstance(ty, ir.IntType) and ty.width == 64):
            bits = b.bitcast(v, I64) if isinstance(ty, ir.DoubleType) else v
            lo = shfl32(b.trunc(bits, I32))
            hi = shfl32(b.trunc(b.lshr(bits, const_i64(32)), I32))
            out = b.or_(b.zext(lo, I64), b.shl(b.zext(hi, I64), const_i64(32)))
            return b.bitcast(out, ty) if isinstance(ty, ir.DoubleType) else out
        if isinstance(ty, ir.HalfType):
            i16 = ir.IntType(16)
            return b.bitcast(b.trunc(shfl32(b.zext(b.bitcast(v, i16), I32)), i16), ty)
        if isinstance(ty, ir.IntType) and ty.width < 32:
            return b.trunc(shfl32(b.zext(v, I32)), ty)
        raise UnsupportedError(f"no warp shuffle for {ty}")

    def shared(self, name: str, ty: ir.Type, n: int):
        """A per-block shared-memory array ``[n x ty]`` (addrspace 3)."""
        st = I8 if ty == I1 else ty
        g = self.module.globals.get(name)
        if g is None:
            arr = ir.ArrayType(st, n)
            g = ir.GlobalVariable(self.module, arr, name, addrspace=3)
            g.linkage = "internal"
            g.initializer = ir.Constant(arr, ir.Undefined)
            g.align = 8
        return g

    def shared_store(self, g, index, value):
        b = self.b
        if value.type == I1:
            value = b.zext(value, I8)
        b.store(value, b.gep(g, [const_i64(0), index]))

    def shared_load(self, g, index, ty):
        v = self.b.load(self.b.gep(g, [const_i64(0), index]))
        return self.b.trunc(v, I1) if ty == I1 else v


def _stride_loop(b: ir.IRBuilder, start, end, step, name: str, body) -> None:
    """``for (i = start; i < end; i += step) body(i)`` (grid- and block-stride loops)."""
    counted_loop(b, start, end, name, body, step)


def _if(b: ir.IRBuilder, cond, name: str, body) -> None:
    then = b.append_basic_block(f"{name}.then")
    after = b.append_basic_block(f"{name}.end")
    b.cbranch(cond, then, after)
    b.position_at_end(then)
    body()
    b.branch(after)
    b.position_at_end(after)


# ---- linear loops: contiguous operands, 16-byte vector accesses ----------------------------------

def vector_width(shapes) -> int:
    """Elements per 16-byte access of the widest array among ``shapes`` (4 for f32, 2 for f64,
    8 for f16); 1 when there is nothing to vectorize (only scalars, or complex elements)."""
    arrays = [s for s in shapes if s.rank]
    if not arrays or any(is_complex(s.element_type) for s in arrays):
        return 1
    return max(1, VECTOR_BYTES // max(s.dtype.itemsize for s in arrays))


class _LinearReads:
    """The parameter reads of a linear kernel, where every array is read at the flat index i.

    Outside a chunk, ``load`` reads one element.  Inside a chunk (``width`` consecutive
    elements from ``base``), each array parameter the kernel uses was read once for the whole
    chunk (``_Kernel.load_chunk``: one 16-byte load in the PTX), and ``load`` at the current
    lane's index takes that lane's element.  Scalars are read at 0 either way.  The width
    fits 16 bytes of the widest array read or written.
    """

    def __init__(self, k: _Kernel, params: list, roots: list[Instruction], written: list):
        self.k, self.params = k, params
        used = {i.parameter_number for i in ancestors(roots) if i.opcode == "parameter"}
        self.arrays = sorted(p for p in used if params[p].shape.rank)
        self.width = vector_width([params[p].shape for p in self.arrays] + list(written))
        self._chunk: dict[int, list[ir.Value]] = {}
        self._lane, self._lane_index = 0, None

    def load(self, p: int, index: list) -> ir.Value:
        if not index or not self.params[p].shape.rank:
            return self.k.load(p, const_i64(0))
        if index[0] is self._lane_index and p in self._chunk:
            return self._chunk[p][self._lane]
        return self.k.load(p, index[0])

    def begin_chunk(self, base) -> None:
        self._chunk = {p: self.k.load_chunk(p, base, self.width) for p in self.arrays}

    def lane(self, base, lane: int) -> ir.Value:
        """The flat index of ``lane`` in the chunk at ``base``; loads at it come from the chunk."""
        self._lane = lane
        self._lane_index = base if lane == 0 else self.k.b.add(base, const_i64(lane))
        return self._lane_index

    def end_chunk(self) -> None:
        self._chunk, self._lane_index = {}, None


def _linear_grid_loop(k: _Kernel, reads: _LinearReads, n: int, out_slots: list[int], body, name: str) -> None:
    """Grid-stride loop over the flat indices [0, n).  ``body(i)`` emits one element's work and
    returns the values to store at i in the buffers ``out_slots``.

    With a vector width W > 1, thread t (of T) first takes the chunks t, t+T, ... of W
    consecutive elements: one 16-byte load per array operand, W copies of the element code,
    one 16-byte store per output; then the < W elements after the last whole chunk one by one.
    The vector loop runs only when every buffer it touches is aligned to W elements (checked
    at run time, once per thread); otherwise its trip count is 0 and the scalar loop does all.
    """
    b = k.b
    W = reads.width
    first = b.add(b.mul(k.ctaid, k.ntid), k.tid)
    step = b.mul(k.ntid, k.nctaid)
    scalar_start = first
    if W > 1 and n >= W:
        aligned = k.aligned(reads.arrays + out_slots, W)
        chunks = b.select(aligned, const_i64(n // W), const_i64(0), name="chunks")

        def chunk_body(c):
            base = b.mul(c, const_i64(W))
            reads.begin_chunk(base)
            lanes = [body(reads.lane(base, lane)) for lane in range(W)]
            reads.end_chunk()
            for s, slot in enumerate(out_slots):
                k.store_chunk(slot, base, [values[s] for values in lanes])
        _stride_loop(b, first, chunks, step, f"{name}.chunk", chunk_body)
        scalar_start = b.add(b.mul(chunks, const_i64(W)), first)

    def scalar_body(i):
        for slot, value in zip(out_slots, body(i)):
            k.store(slot, i, value)
    _stride_loop(b, scalar_start, const_i64(n), step, name, scalar_body)


# ---- reducers ------------------------------------------------------------------------------------

class _Reducer:
    """A recognized reducer on one element type: identity, combine, accumulator type."""

    def __init__(self, r: Instruction, em: ElementalEmitter):
        self.instr, self.em = r, em
        self.op = reducer_opcode(r)
        if r.shape.is_tuple or self.op is None:
            raise UnsupportedError("variadic or custom reducers have no native code path yet")
        self.t = r.shape.element_type
        self.ty = llvm_type(self.t)
        self.acc_ty = _F32 if self.t == "f16" and self.op in ("add", "multiply") else self.ty
        self.acc_t = "f32" if self.acc_ty != self.ty else self.t

    def identity(self) -> ir.Constant:
        t, ty, op = self.acc_t, self.acc_ty, self.op
        if t == "pred":
            return ir.Constant(I1, 1 if op in ("multiply", "minimum", "and") else 0)
        if op in ("add", "or", "xor"):
            return ir.Constant(ty, 0.0 if is_float(t) else 0)
        if op == "multiply":
            return ir.Constant(ty, 1.0 if is_float(t) else 1)
        if op == "and":
            return ir.Constant(ty, -1)
        big = op == "minimum"
        if is_float(t):
            return ir.Constant(ty, float("inf") if big else float("-inf"))
        w = ty.width
        if t[0] == "u":
            return ir.Constant(ty, (1 << w) - 1 if big else 0)
        return ir.Constant(ty, (1 << (w - 1)) - 1 if big else -(1 << (w - 1)))

    def widen(self, b, x):
        return b.fpext(x, self.acc_ty) if self.acc_ty != self.ty else x

    def combine(self, b, acc, x):
        t, op = self.acc_t, self.op
        if t == "pred":
            return b.and_(acc, x) if op in ("multiply", "minimum", "and") else b.or_(acc, x)
        if op == "add":
            return b.fadd(acc, x) if is_float(t) else b.add(acc, x)
        if op == "multiply":
            return b.fmul(acc, x) if is_float(t) else b.mul(acc, x)
        if op in ("and", "or"):
            return getattr(b, op + "_")(acc, x)
        is_max = op == "maximum"
        if is_float(t):
            return self.em.intrinsic("llvm.maximum" if is_max else "llvm.minimum", acc.type, [acc, x])
        cmp = b.icmp_signed if t[0] == "s" else b.icmp_unsigned
        return b.select(cmp(">" if is_max else "<", x, acc), x, acc)

    def finish(self, b, total):
        """combine(init, total), narrowed to the element type."""
        init = self.widen(b, self.em.value(self.instr.operands[1], []))
        v = self.combine(b, init, total)
        return b.fptrunc(v, self.ty) if self.acc_ty != self.ty else v


def _warp_allreduce(k: _Kernel, red: _Reducer, v):
    for off in (16, 8, 4, 2, 1):
        v = red.combine(k.b, v, k.shfl_bfly(v, off))
    return v


def _block_allreduce(k: _Kernel, red: _Reducer, v, sh):
    """Every thread of the block gets the combination of all threads' ``v`` (same bits)."""
    b = k.b
    v = _warp_allreduce(k, red, v)
    lane = b.and_(k.tid, const_i64(WARP - 1))
    warp = b.lshr(k.tid, const_i64(5))
    _if(b, b.icmp_unsigned("==", lane, const_i64(0)), "wlead", lambda: k.shared_store(sh, warp, v))
    k.barrier()
    acc = entry_alloca(b, red.acc_ty)
    b.store(red.identity(), acc)
    _stride_loop(b, const_i64(0), b.lshr(k.ntid, const_i64(5)), const_i64(1), "wsum",
                 lambda w: b.store(red.combine(b, b.load(acc), k.shared_load(sh, w, red.acc_ty)), acc))
    total = b.load(acc)
    k.barrier()                 # the shared slots may be written again after this
    return total


def _accumulate(k: _Kernel, em, red: _Reducer, start, end, step, index_of, name):
    """This thread's combination of the reduce's operand over indices start, start+step, ..."""
    b = k.b
    acc = entry_alloca(b, red.acc_ty)
    b.store(red.identity(), acc)
    x_instr = red.instr.operands[0]

    def body(j):
        em.reset_memo()
        x = red.widen(b, em.value(x_instr, index_of(j)))
        b.store(red.combine(b, b.load(acc), x), acc)
    _stride_loop(b, start, end, step, name, body)
    em.reset_memo()
    return b.load(acc)


# ---- kernels -------------------------------------------------------------------------------------

def _emit_elementwise(module, name, comp: Computation) -> list[GpuKernelSpec]:
    outputs = kernel_outputs(comp)
    params = comp.parameters
    dims = outputs[0].shape.dims
    if any(product(o.shape.dims) != product(dims) for o in outputs):
        raise UnsupportedError("a multi-output loop fusion with outputs of different sizes")
    k = _Kernel(module, name, [p.shape for p in params], [o.shape for o in outputs])
    b = k.b
    n = product(dims)
    out_slots = [len(params) + j for j in range(len(outputs))]
    if is_linear(comp.instructions, dims):
        reads = _LinearReads(k, params, outputs, [o.shape for o in outputs])
        em = LinearEmitter(b, comp, reads.load)

        def body(i):
            em.reset_memo()
            return [em.value(out, [i]) for out in outputs]
        _linear_grid_loop(k, reads, n, out_slots, body, "i")
        b.ret_void()
        units = -(-n // reads.width)        # a thread per chunk of `width` elements
        return [GpuKernelSpec(name, "elementwise", units, BLOCK, len(params), len(outputs))]
    # Index-mapped operands (transposes, broadcasts, slices): element reads are gathers.
    em = ElementalEmitter(b, comp, lambda p, idx: k.load_linear(p, idx, params[p].shape.dims))

    def gather_body(i):
        em.reset_memo()
        full = delinearize(b, i, dims)
        for slot, out in zip(out_slots, outputs):
            k.store(slot, i, em.value(out, full if out.shape.dims == dims else delinearize(b, i, out.shape.dims)))
    _stride_loop(b, b.add(b.mul(k.ctaid, k.ntid), k.tid), const_i64(n), b.mul(k.ntid, k.nctaid), "i", gather_body)
    b.ret_void()
    return [GpuKernelSpec(name, "elementwise", n, BLOCK, len(params), len(outputs))]


def _output_kinds(plan, outputs):
    outer, rows = [], []
    for j, out in enumerate(outputs):
        if out.shape.dims == plan.in_dims and plan.in_dims:
            rows.append((j, out))
        elif squeeze_dims(out.shape.dims) == squeeze_dims(plan.outer_dims):
            outer.append((j, out))
        else:
            raise UnsupportedError("a reduction fusion output outside the reduced and input spaces")
    return outer, rows


def _write_outer_outputs(k: _Kernel, em, plan, outer_outs, first, outer_index, lead) -> None:
    """One thread (``lead``) writes the outputs in the reduced space for this outer index."""
    if not outer_outs:
        return
    b = k.b

    def write():
        em.reset_memo()
        for j, out in outer_outs:
            idx = expand_index(outer_index, plan.outer_dims, out.shape.dims)
            k.store(first + j, linear_index(b, idx, out.shape.dims), em.value(out, idx))
        em.reset_memo()
    _if(b, lead, "lead", write)


def _row_style(plan) -> bool:
    """Do the reduced dimensions include the minor-most non-trivial one?"""
    nontrivial = [d for d, n in enumerate(plan.in_dims) if n != 1]
    return not nontrivial or nontrivial[-1] in plan.reduced


def _emit_rows(module, name, comp, plan, outputs, params) -> list[GpuKernelSpec]:
    R, O = product(plan.red_dims), product(plan.outer_dims)
    warp_mode = R <= ROW_WARP_MAX
    k = _Kernel(module, name, [p.shape for p in params], [o.shape for o in outputs])
    b = k.b
    reduced: dict[int, ir.Value] = {}
    em = ElementalEmitter(b, comp, lambda p, idx: k.load_linear(p, idx, params[p].shape.dims), reduced)
    reducers = [_Reducer(r, em) for r in plan.reduces]
    outer_outs, row_outs = _output_kinds(plan, outputs)
    if warp_mode:
        lane, group = b.and_(k.tid, const_i64(WARP - 1)), b.lshr(k.tid, const_i64(5))
        per_block, width = b.lshr(k.ntid, const_i64(5)), const_i64(WARP)
    else:
        lane, group, per_block, width = k.tid, const_i64(0), const_i64(1), k.ntid
    start = b.add(b.mul(k.ctaid, per_block), group)
    step = b.mul(k.nctaid, per_block)
    shared = [None if warp_mode else k.shared(f"{name}_sh{n}", red.acc_ty, BLOCK // WARP)
              for n, red in enumerate(reducers)]

    def row_body(row):
        reduced.clear()
        em.reset_memo()
        outer_index = delinearize(b, row, plan.outer_dims)

        def index_of(j):
            return plan.merge(outer_index, delinearize(b, j, plan.red_dims))
        for n, red in enumerate(reducers):
            v = _accumulate(k, em, red, lane, const_i64(R), width, index_of, f"r{n}")
            v = _warp_allreduce(k, red, v) if warp_mode else _block_allreduce(k, red, v, shared[n])
            reduced[id(red.instr)] = red.finish(b, v)
        em.reset_memo()
        _write_outer_outputs(k, em, plan, outer_outs, len(params), outer_index, b.icmp_unsigned("==", lane, const_i64(0)))
        if row_outs:
            def write(j):
                em.reset_memo()
                idx = index_of(j)
                for jj, out in row_outs:
                    k.store(len(params) + jj, linear_index(b, idx, plan.in_dims), em.value(out, idx))
            _stride_loop(b, lane, const_i64(R), width, "w", write)
            em.reset_memo()
    _stride_loop(b, start, const_i64(O), step, "row", row_body)
    b.ret_void()
    style = "row-warp" if warp_mode else "row-block"
    return [GpuKernelSpec(name, style, O, BLOCK // WARP if warp_mode else 1, len(params), len(outputs))]


# ---- column reductions ---------------------------------------------------------------------------

@dataclass(frozen=True)
class ColumnLayout:
    """How a column reduction's R (reduced) x O (kept) elements are dealt to threads.

    A block is a grid of ntid/width row lanes x ``width`` column lanes: thread t takes column
    lane t % width and row lane t / width.  ``width`` is 32 (a warp reads 32 consecutive kept
    indices of one row: coalesced), or with fewer columns the power of two >= O, so that a
    warp reads 32/width consecutive rows instead of leaving lanes idle.  Unit u of the
    grid-stride loop is tile u % tiles (``width`` columns) of row chunk u / tiles.  With
    ``chunks`` > 1 the rows are split among blocks: each unit writes partial values, and a
    finish kernel combines every column's chunks in chunk order (deterministic: no atomics).
    """
    rows: int
    columns: int
    width: int
    chunks: int = 1

    @property
    def tiles(self) -> int:
        return -(-self.columns // self.width)

    @property
    def chunk_rows(self) -> int:
        return -(-self.rows // self.chunks)


def column_layout(rows: int, columns: int, splittable: bool = True) -> ColumnLayout:
    """Split the rows only when the tiles alone would leave a large GPU mostly idle (fewer than
    ``COLUMN_FILL_BLOCKS`` blocks' worth) and every chunk keeps >= ``COLUMN_CHUNK_MIN_ROWS``."""
    width = WARP
    while width > 1 and width // 2 >= columns:
        width //= 2
    layout = ColumnLayout(rows, columns, width)
    if not splittable or not 0 < layout.tiles < COLUMN_FILL_BLOCKS:
        return layout
    chunks = min(-(-COLUMN_FILL_BLOCKS // layout.tiles), rows // COLUMN_CHUNK_MIN_ROWS)
    if chunks < 2:
        return layout
    return ColumnLayout(rows, columns, width, -(-rows // -(-rows // chunks)))    # no empty chunk


def _splittable(plan) -> bool:
    """Can the reductions be computed per row chunk and combined afterwards?  Not when a
    reduction's operand uses another reduction's value (it needs the final value first), nor
    for complex values (partials are 8-byte slots)."""
    feeding = {id(i) for i in ancestors([r.operands[0] for r in plan.reduces])}
    return not feeding & {id(r) for r in plan.reduces} and \
        not any(is_complex(r.shape.element_type) for r in plan.reduces)


@dataclass
class _ColumnUnit:
    """One (column tile, row chunk) unit as this thread sees it."""
    o: ir.Value                 # this thread's column (0 when past the last one)
    valid: ir.Value             # i1: o is a real column
    chunk: ir.Value             # the row chunk
    outer_index: list           # o in the kept dimensions


class _ColumnLanes:
    """This thread's place in the block's row lanes x column lanes (see ``ColumnLayout``)."""

    def __init__(self, k: _Kernel, layout: ColumnLayout):
        b = k.b
        shift = const_i64(layout.width.bit_length() - 1)
        self.k, self.layout = k, layout
        self.column = b.and_(k.tid, const_i64(layout.width - 1), name="column_lane")
        self.row = b.lshr(k.tid, shift, name="row_lane")
        self.rows = b.lshr(k.ntid, shift, name="row_lanes")

    def for_units(self, chunks: int, outer_dims, body) -> None:
        """Grid-stride loop over the (tile, row chunk) units, ``chunks`` row chunks per tile,
        tile-minor (neighbouring blocks read neighbouring columns); ``body(unit)``."""
        b, layout = self.k.b, self.layout
        tiles = const_i64(layout.tiles)

        def unit(u):
            tile, chunk = (u, const_i64(0)) if chunks == 1 else (b.urem(u, tiles), b.udiv(u, tiles))
            o = b.add(b.mul(tile, const_i64(layout.width)), self.column)
            valid = b.icmp_signed("<", o, const_i64(layout.columns))
            o = b.select(valid, o, const_i64(0))
            body(_ColumnUnit(o, valid, chunk, delinearize(b, o, outer_dims)))
        _stride_loop(b, self.k.ctaid, const_i64(layout.tiles * chunks), self.k.nctaid, "unit", unit)

    def chunk_rows(self, unit: _ColumnUnit) -> tuple:
        """(first, end): this thread's rows of the unit's chunk are first, first + row lanes,
        ... < end (end is 0 past the last column: nothing is read or written there)."""
        b, layout = self.k.b, self.layout
        if layout.chunks == 1:
            lo, hi = const_i64(0), const_i64(layout.rows)
        else:
            lo = b.mul(unit.chunk, const_i64(layout.chunk_rows))
            hi = b.add(lo, const_i64(layout.chunk_rows))
            hi = b.select(b.icmp_signed("<", hi, const_i64(layout.rows)), hi, const_i64(layout.rows))
        return b.add(lo, self.row), b.select(unit.valid, hi, const_i64(0))

    def lead(self, unit: _ColumnUnit) -> ir.Value:
        """i1: this thread writes its column's results (row lane 0)."""
        return self.k.b.and_(unit.valid, self.k.b.icmp_unsigned("==", self.row, const_i64(0)))

    def combine(self, red: _Reducer, v, sh):
        """Every thread gets its column's combination of all row lanes' values (in row-lane
        order: every thread of a column computes the same bits)."""
        k, b = self.k, self.k.b
        k.shared_store(sh, k.tid, v)
        k.barrier()
        acc = entry_alloca(b, red.acc_ty)
        b.store(red.identity(), acc)
        width = const_i64(self.layout.width)
        _stride_loop(b, const_i64(0), self.rows, const_i64(1), "lanes", lambda r: b.store(
            red.combine(b, b.load(acc), k.shared_load(sh, b.add(b.mul(r, width), self.column), red.acc_ty)), acc))
        total = b.load(acc)
        k.barrier()                 # the shared slots may be written again after this
        return total


class _ColumnKernel:
    """One column kernel's emitter, reducers, lanes and shared arrays."""

    def __init__(self, k: _Kernel, comp, plan, layout: ColumnLayout, params, reduced=None):
        self.k, self.plan = k, plan
        self.em = ElementalEmitter(k.b, comp, lambda p, idx: k.load_linear(p, idx, params[p].shape.dims), reduced)
        self.reducers = [_Reducer(r, self.em) for r in plan.reduces]
        self.lanes = _ColumnLanes(k, layout)
        self.shared = [k.shared(f"{k.fn.name}_sh{n}", red.acc_ty, BLOCK) for n, red in enumerate(self.reducers)]

    def input_partial(self, n: int, unit: _ColumnUnit):
        """This thread's combination of reduction n's operand over its rows of the chunk."""
        b, plan = self.k.b, self.plan
        first, end = self.lanes.chunk_rows(unit)
        return _accumulate(self.k, self.em, self.reducers[n], first, end, self.lanes.rows,
                           lambda j: plan.merge(unit.outer_index, delinearize(b, j, plan.red_dims)), f"c{n}")


def _scratch_slot(b, chunk, o, n: int, layout: ColumnLayout, nred: int):
    """Where a split column reduction keeps chunk's partial of reduction n for column o."""
    return b.add(b.mul(b.add(b.mul(chunk, const_i64(layout.columns)), o), const_i64(nred)), const_i64(n))


def _emit_column_results(k: _Kernel, comp, plan, layout, outputs, params, partial, write_chunks: int) -> None:
    """Body of a kernel that finishes the reductions per column and writes the outputs: the
    single column kernel (``partial`` reads the input rows), or the finish kernel of a split
    one (``partial`` reads the chunks' slots).  ``partial(ck, n, unit)`` is this thread's
    share of reduction n.  With ``write_chunks`` > 1 a tile's row chunks are separate units,
    each writing the row-shaped outputs of its own rows."""
    b = k.b
    reduced: dict[int, ir.Value] = {}
    ck = _ColumnKernel(k, comp, plan, layout, params, reduced)
    em, lanes = ck.em, ck.lanes
    outer_outs, row_outs = _output_kinds(plan, outputs)

    def unit_body(unit):
        reduced.clear()
        em.reset_memo()
        for n, red in enumerate(ck.reducers):   # in order: a later operand may use an earlier result
            reduced[id(red.instr)] = red.finish(b, lanes.combine(red, partial(ck, n, unit), ck.shared[n]))
        em.reset_memo()
        lead = lanes.lead(unit)
        if write_chunks > 1:
            lead = b.and_(lead, b.icmp_unsigned("==", unit.chunk, const_i64(0)))
        _write_outer_outputs(k, em, plan, outer_outs, len(params), unit.outer_index, lead)
        if row_outs:
            def write(j):
                em.reset_memo()
                idx = plan.merge(unit.outer_index, delinearize(b, j, plan.red_dims))
                for jj, out in row_outs:
                    k.store(len(params) + jj, linear_index(b, idx, plan.in_dims), em.value(out, idx))
            first, end = lanes.chunk_rows(unit)
            _stride_loop(b, first, end, lanes.rows, "w", write)
            em.reset_memo()
    lanes.for_units(write_chunks, plan.outer_dims, unit_body)
    b.ret_void()


def _emit_columns(module, name, comp, plan, outputs, params) -> list[GpuKernelSpec]:
    layout = column_layout(product(plan.red_dims), product(plan.outer_dims), _splittable(plan))
    if layout.chunks > 1:
        return _emit_split_columns(module, name, comp, plan, layout, outputs, params)
    k = _Kernel(module, name, [p.shape for p in params], [o.shape for o in outputs])
    _emit_column_results(k, comp, plan, layout, outputs, params, lambda ck, n, unit: ck.input_partial(n, unit), 1)
    return [GpuKernelSpec(name, "column", layout.tiles, 1, len(params), len(outputs))]


def _emit_split_columns(module, name, comp, plan, layout, outputs, params) -> list[GpuKernelSpec]:
    """Few columns, many rows: ``k`` gives each (tile, row chunk) unit to a block, which writes
    one partial per column and reduction to scratch (``_scratch_slot``); ``k_finish``
    combines each column's chunks in chunk order (the block's row lanes share them) and writes
    the outputs -- one unit per tile, or per (tile, chunk) when there are row-shaped outputs."""
    n_in, nred = len(params), len(plan.reduces)
    k = _Kernel(module, name, [p.shape for p in params], [], (I8.as_pointer(),))
    b = k.b
    scratch = k.fn.args[n_in]
    scratch.add_attribute("noalias")
    ck = _ColumnKernel(k, comp, plan, layout, params)

    def unit_body(unit):
        ck.em.reset_memo()
        for n, red in enumerate(ck.reducers):
            total = ck.lanes.combine(red, ck.input_partial(n, unit), ck.shared[n])
            slot = _scratch_slot(b, unit.chunk, unit.o, n, layout, nred)
            _if(b, ck.lanes.lead(unit), f"slot{n}",
                lambda red=red, slot=slot, total=total: _store_slot(b, scratch, slot, red, total))
    ck.lanes.for_units(layout.chunks, plan.outer_dims, unit_body)
    b.ret_void()

    fin_name = name + "_finish"
    f = _Kernel(module, fin_name, [p.shape for p in params], [o.shape for o in outputs], (I8.as_pointer(),))
    scratch_in = f.fn.args[n_in + len(outputs)]

    def slots_partial(ck, n, unit):
        b, red, lanes = f.b, ck.reducers[n], ck.lanes
        acc = entry_alloca(b, red.acc_ty)
        b.store(red.identity(), acc)

        def add_chunk(j):
            slot = _scratch_slot(b, j, unit.o, n, layout, nred)
            b.store(red.combine(b, b.load(acc), _load_slot(b, scratch_in, slot, red)), acc)
        chunks = b.select(unit.valid, const_i64(layout.chunks), const_i64(0))
        _stride_loop(b, lanes.row, chunks, lanes.rows, f"p{n}", add_chunk)
        return b.load(acc)
    write_chunks = layout.chunks if _output_kinds(plan, outputs)[1] else 1
    _emit_column_results(f, comp, plan, layout, outputs, params, slots_partial, write_chunks)
    return [GpuKernelSpec(name, "column-split", layout.tiles * layout.chunks, 1, n_in, len(outputs),
                          finish_name=fin_name, slots=layout.chunks * layout.columns * nred,
                          finish_units=layout.tiles * write_chunks)]


# ---- full reductions -----------------------------------------------------------------------------

def _slot_pointer(b, scratch, slot, red: _Reducer):
    """An 8-byte partial-result slot of ``scratch`` (pred partials are stored as i8)."""
    st = I8 if red.acc_ty == I1 else red.acc_ty
    return b.bitcast(b.gep(scratch, [b.mul(slot, const_i64(8))]), st.as_pointer())


def _store_slot(b, scratch, slot, red: _Reducer, v) -> None:
    b.store(b.zext(v, I8) if red.acc_ty == I1 else v, _slot_pointer(b, scratch, slot, red))


def _load_slot(b, scratch, slot, red: _Reducer):
    v = b.load(_slot_pointer(b, scratch, slot, red))
    return b.trunc(v, I1) if red.acc_ty == I1 else v


def _emit_full(module, name, comp, plan, outputs, params) -> list[GpuKernelSpec]:
    n_in = len(params)
    N = product(plan.in_dims)
    nred = len(plan.reduces)
    # phase 1: k(params..., scratch): per-block partials
    k = _Kernel(module, name, [p.shape for p in params], [], (I8.as_pointer(),))
    b = k.b
    scratch = k.fn.args[n_in]
    scratch.add_attribute("noalias")
    operands = [r.operands[0] for r in plan.reduces]
    reads = _LinearReads(k, params, operands, [])
    em = LinearEmitter(b, comp, reads.load)
    reducers = [_Reducer(r, em) for r in plan.reduces]
    accs = []
    for red in reducers:
        acc = entry_alloca(b, red.acc_ty)
        b.store(red.identity(), acc)
        accs.append(acc)

    def body(i):
        em.reset_memo()
        for red, acc in zip(reducers, accs):
            x = red.widen(b, em.value(red.instr.operands[0], [i]))
            b.store(red.combine(b, b.load(acc), x), acc)
        return []
    _linear_grid_loop(k, reads, N, [], body, "i")
    em.reset_memo()
    for n, (red, acc) in enumerate(zip(reducers, accs)):
        v = _block_allreduce(k, red, b.load(acc), k.shared(f"{name}_sh{n}", red.acc_ty, BLOCK // WARP))
        slot = b.add(b.mul(k.ctaid, const_i64(nred)), const_i64(n))

        _if(b, b.icmp_unsigned("==", k.tid, const_i64(0)), f"slot{n}",
            lambda v=v, slot=slot, red=red: _store_slot(b, scratch, slot, red, v))
    b.ret_void()

    # phase 2: k_finish(params..., outputs..., scratch, i64 nparts), one block
    fin_name = name + "_finish"
    f = _Kernel(module, fin_name, [p.shape for p in params], [o.shape for o in outputs], (I8.as_pointer(), I64))
    b = f.b
    scratch, nparts = f.fn.args[n_in + len(outputs)], f.fn.args[n_in + len(outputs) + 1]
    reduced: dict[int, ir.Value] = {}
    em = ElementalEmitter(b, comp, lambda p, idx: f.load(p, const_i64(0)), reduced)
    reducers = [_Reducer(r, em) for r in plan.reduces]
    for n, red in enumerate(reducers):
        acc = entry_alloca(b, red.acc_ty)
        b.store(red.identity(), acc)

        def part(j, n=n, red=red, acc=acc):
            slot = b.add(b.mul(j, const_i64(nred)), const_i64(n))
            b.store(red.combine(b, b.load(acc), _load_slot(b, scratch, slot, red)), acc)
        _stride_loop(b, f.tid, nparts, f.ntid, f"p{n}", part)
        v = _block_allreduce(f, red, b.load(acc), f.shared(f"{fin_name}_sh{n}", red.acc_ty, BLOCK // WARP))
        reduced[id(red.instr)] = red.finish(b, v)
    em.reset_memo()

    def write_outputs():
        em.reset_memo()
        for j, out in enumerate(outputs):
            f.store(n_in + j, const_i64(0), em.value(out, [const_i64(0)] * out.shape.rank))
    _if(b, b.icmp_unsigned("==", f.tid, const_i64(0)), "out", write_outputs)
    b.ret_void()
    return [GpuKernelSpec(name, "full-reduce", N, BLOCK * FULL_REDUCE_PER_THREAD, len(params), len(outputs),
                          finish_name=fin_name, slots=nred)]


def _emit_reduction(module, name, comp: Computation) -> list[GpuKernelSpec]:
    plan = ReductionPlan(comp)
    plan.require_recognized()
    outputs, params = kernel_outputs(comp), comp.parameters
    _output_kinds(plan, outputs)
    if full_reduction_plan(comp) is not None:
        return _emit_full(module, name, comp, plan, outputs, params)
    if _row_style(plan):
        return _emit_rows(module, name, comp, plan, outputs, params)
    return _emit_columns(module, name, comp, plan, outputs, params)


def emit_gpu_kernel(module: ir.Module, name: str, comp: Computation) -> GpuKernelSpec:
    """Emit the kernel(s) of one fusion into ``module``; returns how to launch them."""
    for instr in comp.instructions:
        if any(involves_low_precision(s) for s in [instr.shape] + [o.shape for o in instr.operands]):
            # (the CPU kernels' bf16 loads and stores, bf16.py, are not wired into these yet)
            raise UnsupportedError(f"bf16 / f8 values (%{instr.name}) have no CUDA code path yet")
    if any(i.opcode == "reduce" for i in comp.instructions):
        return _emit_reduction(module, name, comp)[0]
    return _emit_elementwise(module, name, comp)[0]


# ---- compiling to PTX ----------------------------------------------------------------------------

_lock = threading.RLock()
_machines: dict[str, object] = {}
# Architectures LLVM's NVPTX back end knows, newest first (a device newer than all of them gets
# the newest; PTX is forward compatible through the driver's JIT).
KNOWN_ARCHS = ("sm_120", "sm_100", "sm_90", "sm_89", "sm_87", "sm_86", "sm_80")


def arch_for_capability(major: int, minor: int) -> str:
    cc = major * 10 + minor
    for arch in KNOWN_ARCHS:
        if int(arch[3:]) <= cc:
            return arch
    return DEFAULT_ARCH


def nvptx_target_machine(arch: str = DEFAULT_ARCH):
    with _lock:
        tm = _machines.get(arch)
        if tm is None:
            try:
                llvm.initialize_all_targets()
                llvm.initialize_all_asmprinters()
            except Exception:          # pragma: no cover - older/newer llvmlite spellings
                pass
            tm = _machines[arch] = llvm.Target.from_triple(TRIPLE).create_target_machine(cpu=arch, opt=3)
        return tm


@dataclass
class GpuKernels:
    """PTX for a module's fusions, with the IR it came from."""
    specs: dict[str, GpuKernelSpec]
    llvm_ir: str
    llvm_ir_optimized: str
    ptx: str
    arch: str
    unsupported: dict[str, str] = field(default_factory=dict)   # fusion -> why it is interpreted


def emit_gpu_module(module_name: str, fusions: list[tuple[str, Computation]]):
    """The (unoptimized) NVPTX LLVM module for ``fusions``, the specs, and what was left out."""
    ir_module = ir.Module(name=module_name)
    ir_module.triple = TRIPLE
    specs, unsupported = {}, {}
    for name, comp in fusions:
        trial = ir.Module(name="trial")
        trial.triple = TRIPLE
        try:
            emit_gpu_kernel(trial, name, comp)        # alone first: a failure leaves no trace
            gpu_math.define_device_functions(trial)
        except UnsupportedError as e:
            unsupported[name] = str(e)
            continue
        specs[name] = emit_gpu_kernel(ir_module, name, comp)
    gpu_math.define_device_functions(ir_module)
    return ir_module, specs, unsupported


def compile_gpu(module_name: str, fusions: list[tuple[str, Computation]], arch: str = DEFAULT_ARCH) -> GpuKernels:
    ir_module, specs, unsupported = emit_gpu_module(module_name, fusions)
    with _lock:
        tm = nvptx_target_machine(arch)
        ir_module.data_layout = str(tm.target_data)
        text = str(ir_module)
        mod = llvm.parse_assembly(text)
        mod.verify()
        pto = llvm.create_pipeline_tuning_options(speed_level=3)
        pb = llvm.create_pass_builder(tm, pto)
        pb.getModulePassManager().run(mod, pb)
        optimized = str(mod)
        ptx = tm.emit_assembly(mod)
    return GpuKernels(specs, text, optimized, ptx, arch, unsupported)


# ---- ptxas (checking PTX without a GPU) ----------------------------------------------------------

@dataclass
class PtxasResult:
    arch: str
    ok: bool
    log: str
    registers: dict[str, int]          # kernel -> registers per thread
    spills: dict[str, tuple[int, int]]  # kernel -> (spill store bytes, spill load bytes)


def find_ptxas() -> str | None:
    return shutil.which("ptxas")


def run_ptxas(ptx: str, arch: str = "sm_80", ptxas: str | None = None) -> PtxasResult:
    """Assemble ``ptx`` for ``arch`` with ``ptxas -v``; registers and spills per kernel."""
    ptxas = ptxas or find_ptxas()
    if ptxas is None:
        raise FileNotFoundError("ptxas not found on PATH")
    with tempfile.TemporaryDirectory(prefix="nbxla-ptx-") as d:
        src = os.path.join(d, "k.ptx")
        with open(src, "w") as fh:
            fh.write(ptx)
        p = subprocess.run([ptxas, f"-arch={arch}", "-v", src, "-o", os.path.join(d, "k.cubin")],
                           capture_output=True, text=True, timeout=300)
    log = p.stdout + p.stderr
    registers, spills, current = {}, {}, None
    for line in log.splitlines():
        m = re.search(r"Compiling entry function '([^']+)'", line)
        if m:
            current = m.group(1)
        m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and current:
            spills[current] = (int(m.group(1)), int(m.group(2)))
        m = re.search(r"Used (\d+) registers", line)
        if m and current:
            registers[current] = int(m.group(1))
    return PtxasResult(arch, p.returncode == 0 and "error" not in log.lower(), log, registers, spills)
