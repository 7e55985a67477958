"""Column reductions over few columns (``x.sum(axis=0)`` of an N x 3 array), split across threads.

The column kernel in column_reductions.py keeps one accumulator per column and walks the rows; with a
handful of columns its inner loop is a few elements long, so it neither vectorizes nor
splits across threads (its parallel range is the columns).  Here the input is read as flat
*groups* of ``k`` whole rows (``W = k * C`` contiguous elements), with one accumulator per
position in the group: the inner loop is W long and vectorizes, and position j always
belongs to column ``j % C``.  The groups are split across threads like a full reduction:

* ``partial`` reduces groups [begin, end) into W slots of the scratch buffer passed after
  the parameters (float32 sums in blocks, totalled in double, as everywhere else);
* ``finish`` (begin = number of chunks) combines, per column, its k slots of every chunk and
  the rows left over after the last whole group, then computes the epilogue (a mean's
  division) into the output.

Applies when the reduced input is elementwise work on full-shape arrays, scalars and row
vectors broadcast along the rows (``(x - mean)**2``); other column reductions keep the
column_reductions.py kernel.
"""

from __future__ import annotations

import math

from llvmlite import ir

from ..hlo.ir import Computation
from ..hlo.opcodes import LINEAR_INDEXABLE
from ..hlo.shapes import compute_type, is_complex
from .elemental import const_i64, delinearize, ElementalEmitter, linear_index, llvm_type
from .run_sizes import RunSize
from .toolkit import (BLOCK, ancestors, combine_values, counted_loop, entry_alloca, expand_index,
                      is_linear, kernel_function, kernel_outputs, KernelBuffers, KernelSpec, LinearEmitter,
                      load_at, narrow_float, partial_type, product, reducer_opcode, squeeze_dims)

MAX_COLUMNS = 32          # beyond this, the column kernel's inner loop is long enough
MIN_ELEMENTS = 1 << 14    # below this, one call of the column kernel is cheaper than two


def group_width(columns: int) -> int:
    """W: a multiple of the column count and of 16 (a full AVX-512 float vector), >= 128."""
    unit = math.lcm(columns, 16)
    return unit * max(1, -(-128 // unit))


def applies(comp: Computation, plan) -> bool:
    """For a column plan (see column_reductions.column_plan): few columns, many rows, an input that is
    linear-indexable but for row-vector broadcasts."""
    (r,) = plan.reduces
    columns, rows = product(plan.outer_dims), product(plan.red_dims)
    if isinstance(columns, RunSize):      # (groups are sized by the column count: when compiled)
        return False
    if not 1 <= columns <= MAX_COLUMNS or columns * rows < MIN_ELEMENTS:
        return False
    if rows < 2 * group_width(columns) // columns or is_complex(r.shape.element_type):
        return False
    return _grouped_input(comp, r, plan) is not None


def _grouped_input(comp: Computation, r, plan) -> list | None:
    """The row-vector broadcasts in the reduced input (``x - mean`` with ``mean`` of shape
    (C,)), when everything else is linear-indexable and the vectors themselves are; else None.

    In a group of whole rows, position j always belongs to column j % C: a row vector's values
    over a group form one fixed tile of W values, filled once per kernel call."""
    feeding = {id(i) for i in ancestors([r.operands[0]])}
    prefix = [i for i in comp.instructions if id(i) in feeding]
    columns = plan.outer_dims                    # (the kept axes are the trailing ones)
    kept_axes = tuple(range(len(plan.reduced), len(plan.in_dims)))
    rows_bc = [i for i in prefix if i.opcode == "broadcast" and i.shape.dims == plan.in_dims
               and i.operands[0].shape.dims == columns and tuple(i.attrs["dimensions"]) == kept_axes]
    vector_parts = {id(a) for bc in rows_bc for a in ancestors([bc.operands[0]])}
    rest = [i for i in prefix if id(i) not in vector_parts and i not in rows_bc]
    vectors = [i for i in prefix if id(i) in vector_parts]
    if not is_linear(rest, plan.in_dims) or not all(_row_vector_value(i, columns) for i in vectors):
        return None
    return rows_bc


def _row_vector_value(instr, columns) -> bool:
    """Can ``instr`` (in a row vector's expression) be read at a flat column index?  Size-1
    dims do not matter (keepdims means are (1, C))."""
    if instr.shape.rank == 0 and instr.opcode in ("constant", "parameter"):
        return True
    if instr.opcode == "broadcast" and instr.operands[0].shape.rank == 0:
        return True
    return squeeze_dims(instr.shape.dims) == squeeze_dims(columns) and \
        (instr.is_elementwise or instr.opcode in LINEAR_INDEXABLE)


class _GroupEmitter(LinearEmitter):
    """The linear emitter, with row-vector broadcasts read from their tiles at the position
    in the group (``group_base`` is the flat index of the group's first element)."""

    def __init__(self, *args, tiles: dict):
        super().__init__(*args)
        self.tiles = tiles
        self.group_base = None

    def _broadcast(self, instr, index):
        tile = self.tiles.get(id(instr))
        if tile is None:
            return super()._broadcast(instr, index)
        return self.b.load(self.b.gep(tile, [self.b.sub(index[0], self.group_base)]))


def emit_grouped_column_reduction(module: ir.Module, name: str, comp: Computation, plan) -> KernelSpec:
    (r,) = plan.reduces
    (out,) = kernel_outputs(comp)
    params = comp.parameters
    columns, rows = product(plan.outer_dims), product(plan.red_dims)
    width = group_width(columns)
    per_group = width // columns
    groups = rows // per_group
    opcode, t = reducer_opcode(r), compute_type(r.shape.element_type)
    ty, pty = llvm_type(t), partial_type(r)
    blocked = pty != ty                         # float sums: f32 blocks, double totals
    slots = 2 * width if blocked else width

    # ---- partial: groups [begin, end) -> W totals (then W f32 block sums) in the scratch ----
    fn, b = kernel_function(module, name)
    bufs = KernelBuffers(b, fn.args[0], [p.shape for p in params])
    scratch = b.load(b.gep(fn.args[0], [const_i64(len(params))]))
    totals = b.bitcast(scratch, pty.as_pointer())
    accs = b.bitcast(b.gep(scratch, [const_i64(8 * width)]), ty.as_pointer()) if blocked else totals
    tiles = {id(bc): entry_alloca(b, ir.ArrayType(llvm_type(bc.shape.element_type), width))
             for bc in _grouped_input(comp, r, plan)}
    em = _GroupEmitter(b, comp, lambda k, index: bufs.load(
        b, k, index[0] if index and params[k].shape.rank else const_i64(0)), tiles=tiles)
    init = em.value(r.operands[1], [])

    def fill(ptr, value):
        counted_loop(b, const_i64(0), const_i64(width), "fill", lambda j: b.store(value, b.gep(ptr, [j])))

    for bc in _grouped_input(comp, r, plan):
        tile = b.bitcast(tiles[id(bc)], llvm_type(bc.shape.element_type).as_pointer())
        tiles[id(bc)] = tile

        def fill_tile(j, bc=bc, tile=tile):
            em.reset_memo()
            b.store(em.value(bc.operands[0], [b.urem(j, const_i64(columns))]), b.gep(tile, [j]))
        counted_loop(b, const_i64(0), const_i64(width), "tile", fill_tile)

    def accumulate(lo, hi):
        def group(g):
            base = b.mul(g, const_i64(width))
            em.group_base = base

            def position(j):
                em.reset_memo()
                x = em.value(r.operands[0], [b.add(base, j)])
                slot = b.gep(accs, [j])
                b.store(combine_values(b, em, opcode, t, b.load(slot), x), slot)
            counted_loop(b, const_i64(0), const_i64(width), "pos", position)
        counted_loop(b, lo, hi, "grp", group)

    if blocked:
        fill(totals, ir.Constant(pty, 0.0))
        per_block = max(1, BLOCK // width)

        def block(k):
            lo = b.add(fn.args[1], b.mul(k, const_i64(per_block)))
            hi = b.add(lo, const_i64(per_block))
            hi = b.select(b.icmp_signed(">", hi, fn.args[2]), fn.args[2], hi)
            fill(accs, ir.Constant(ty, 0.0))
            accumulate(lo, hi)

            def add_block(j):
                total = b.gep(totals, [j])
                b.store(b.fadd(b.load(total), b.fpext(b.load(b.gep(accs, [j])), pty)), total)
            counted_loop(b, const_i64(0), const_i64(width), "tot", add_block)
        count = b.sdiv(b.add(b.sub(fn.args[2], fn.args[1]), const_i64(per_block - 1)), const_i64(per_block))
        counted_loop(b, const_i64(0), count, "blk", block)
    else:
        fill(totals, init)                      # (an identity, as XLA requires of reduce inits)
        accumulate(fn.args[1], fn.args[2])
    b.ret_void()

    # ---- finish: per column, the chunks' slots and the leftover rows, then the epilogue ----
    fin, b = kernel_function(module, name + "_finish")
    fin.attributes.add("minsize")               # a few hundred scalar steps: compile for size
    fin.attributes.add("optsize")
    bufs = KernelBuffers(b, fin.args[0], [p.shape for p in params] + [out.shape])
    scratch = b.load(b.gep(fin.args[0], [const_i64(len(params) + 1)]))
    reduced: dict = {}
    em = ElementalEmitter(b, comp, lambda k, index: load_at(b, bufs, k, params[k].shape.dims, index), reduced)
    wide_t = "f64" if blocked else t
    acc = entry_alloca(b, pty)

    def column(c):
        em.reset_memo()
        first = em.value(r.operands[1], [])
        b.store(b.fpext(first, pty) if blocked else first, acc)

        def chunk(p):
            base = b.bitcast(b.gep(scratch, [b.mul(p, const_i64(8 * slots))]), pty.as_pointer())

            def slot(k):
                part = b.load(b.gep(base, [b.add(b.mul(k, const_i64(columns)), c)]))
                b.store(combine_values(b, em, opcode, wide_t, b.load(acc), part), acc)
            counted_loop(b, const_i64(0), const_i64(per_group), "slot", slot)
        counted_loop(b, const_i64(0), fin.args[1], "chunk", chunk)

        def leftover(row):
            em.reset_memo()
            x = em.value(r.operands[0], plan.merge(delinearize(b, c, plan.outer_dims),
                                                   delinearize(b, row, plan.red_dims)))
            b.store(combine_values(b, em, opcode, wide_t, b.load(acc), b.fpext(x, pty) if blocked else x), acc)
        counted_loop(b, const_i64(groups * per_group), const_i64(rows), "left", leftover)
        em.reset_memo()
        reduced.clear()
        reduced[id(r)] = narrow_float(b, b.load(acc), ty) if blocked else b.load(acc)
        index = expand_index(delinearize(b, c, plan.outer_dims), plan.outer_dims, out.shape.dims)
        bufs.store(b, len(params), linear_index(b, index, out.shape.dims), em.value(out, index))
    counted_loop(b, const_i64(0), const_i64(columns), "col", column)
    b.ret_void()
    return KernelSpec(name, "full-reduce", groups, width, name + "_finish", slots)

