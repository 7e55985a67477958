"""argmax / argmin along the innermost axis in vectorizable passes.

``np.argmax`` traces to a variadic reduce over (values, iota) whose reducer keeps the better
of two (value, index) pairs: the larger value (the smaller for argmin), NaN above every
number, the smaller index on ties.  Applied element by element (reductions.py's general path
for custom reducers) that is a chain of selects LLVM cannot vectorize: 10x slower than NumPy.

Folding such a reducer over a row gives the best pair under that order, which two passes
compute, both plain reductions that vectorize:

1. ``m``: the NaN-propagating max (min) of the row;
2. ``i``: the smallest position whose value matches ``m`` (equal, or NaN when ``m`` is NaN);

and the value output is the row's value at ``i`` (its exact bits).  A long row is read once,
chunk by chunk: a chunk's positions are searched only when its max beats the best so far.
The init pair only matters for an empty row (then the kernel is not used), provided it is
the order's identity.

Which reducers qualify is decided by running the reducer in the reference evaluator on every
combination of probe values and indices (NaN, infinities, signed zeros, ties, both index
orders) and comparing with the order above: the reducer's own text (JAX's or nbxla's
spelling) does not matter.
"""

from __future__ import annotations

import itertools

import numpy as np
from llvmlite import ir

from ..hlo.evaluator import Interpreter
from ..hlo.ir import Instruction
from ..hlo.shapes import is_float, is_integral, to_numpy_dtype
from .elemental import I1, I64, const_i64, llvm_type
from .run_sizes import at_least, RunSize
from .toolkit import counted_loop, entry_alloca, NanTrackingExtreme


def arg_reduction_kind(reduce: Instruction, plan) -> str | None:
    """"max" or "min" when ``reduce`` is an argmax/argmin this module can emit, else None."""
    # Along the innermost axis only: the row is read twice, from the cache; down a column
    # two strided passes cost more than the one select chain.
    if len(reduce.operands) != 4 or plan.reduced != (len(plan.in_dims) - 1,) or not all(plan.red_dims):
        return None
    values, indices, init_value, init_index = reduce.operands
    vt, it = values.shape.element_type, indices.shape.element_type
    if not (is_float(vt) or is_integral(vt)) or vt == "pred" or not is_integral(it) or it == "pred":
        return None
    if not _is_position(indices, plan.reduced[0]):
        return None
    for kind in ("max", "min"):
        if _behaves_as(reduce.attrs["to_apply"], kind, vt, it) and _is_identity(init_value, init_index, kind, vt):
            return kind
    return None


def _is_position(instr: Instruction, axis: int) -> bool:
    """Is ``instr`` the position along ``axis`` (an iota, or a broadcast 1-D iota)?"""
    if instr.opcode == "iota":
        return instr.attrs["iota_dimension"] == axis
    if instr.opcode == "broadcast" and instr.operands[0].opcode == "iota" and instr.operands[0].shape.rank == 1:
        return tuple(instr.attrs["dimensions"]) == (axis,)
    return False


def _is_identity(value: Instruction, index: Instruction, kind: str, vt: str) -> bool:
    if value.opcode != "constant" or index.opcode != "constant":
        return False
    v = np.asarray(value.literal)
    if is_float(vt):
        return bool(v == (-np.inf if kind == "max" else np.inf))
    info = np.iinfo(to_numpy_dtype(vt))
    return int(v) == (info.min if kind == "max" else info.max)


def _probe_values(vt: str) -> list:
    if is_float(vt):
        return [np.nan, -np.inf, -2.5, -0.0, 0.0, 1.0, 3.0, np.inf]
    info = np.iinfo(to_numpy_dtype(vt))
    return [info.min, info.min + 1, 0, 1, 7, info.max]


def _behaves_as(comp, kind: str, vt: str, it: str) -> bool:
    """Does the reducer pick the better (value, index) pair, on every probe combination?"""
    vtype, itype = to_numpy_dtype(vt), to_numpy_dtype(it)
    pairs = list(itertools.product(_probe_values(vt), [0, 1, 5]))
    combos = list(itertools.product(pairs, pairs))
    a = np.array([p[0][0] for p in combos], vtype)
    ai = np.array([p[0][1] for p in combos], itype)
    b = np.array([p[1][0] for p in combos], vtype)
    bi = np.array([p[1][1] for p in combos], itype)
    try:
        with np.errstate(all="ignore"):
            got_v, got_i = Interpreter().map(comp, [a, ai, b, bi])
    except Exception:        # noqa: BLE001 -- a reducer the evaluator cannot batch: not ours
        return False
    pick_a = _better_or_tie_first(a, ai, b, bi, kind)
    want_v, want_i = np.where(pick_a, a, b), np.where(pick_a, ai, bi)
    same_v = (np.asarray(got_v).view(np.uint8).reshape(len(combos), -1) ==
              want_v.view(np.uint8).reshape(len(combos), -1)).all(axis=1)
    return bool(np.all(same_v) and np.array_equal(np.asarray(got_i), want_i))


def _better_or_tie_first(a, ai, b, bi, kind):
    """Is (a, ai) at least as good as (b, bi): NaN first, then the value, then the index."""
    a_nan, b_nan = a != a, b != b
    better = (a > b) if kind == "max" else (a < b)
    better = (better & ~a_nan & ~b_nan) | (a_nan & ~b_nan)
    tie = (a == b) | (a_nan & b_nan)
    return better | (tie & (ai < bi))


# Rows longer than this are read once, in chunks of this many elements: the chunk's max (min)
# first, and its positions only when it beats the best so far (the chunk is still in L1).
CHUNK = 4096

# The search for the best value's position tests blocks of this many elements for a match
# before it looks for the position inside one.
SEARCH_BLOCK = 128


def emit_arg_reduction(b: ir.IRBuilder, em, plan, reduce: Instruction, outer_index, name: str,
                       kind: str) -> list:
    """(value, index) of the best pair along the reduced axis at ``outer_index``."""
    values = reduce.operands[0]
    vt, it = values.shape.element_type, reduce.operands[1].shape.element_type
    n = plan.red_dims[0]

    def value_at(j):
        em.reset_memo()
        return em.value(values, plan.merge(outer_index, [j]))

    def extreme(lo, hi, tag):
        """The NaN-propagating max (min) of positions [lo, hi), hi > lo."""
        if is_float(vt):
            acc = NanTrackingExtreme(b, vt, kind == "max", value_at(lo))
            counted_loop(b, b.add(lo, const_i64(1)), hi, name + tag, lambda j: acc.add(value_at(j)), interleave=4)
            return acc.result()
        slot = entry_alloca(b, llvm_type(vt))
        b.store(value_at(lo), slot)
        counted_loop(b, b.add(lo, const_i64(1)), hi, name + tag,
              lambda j: b.store(em.minmax(vt, value_at(j), b.load(slot), kind == "max"), slot),
              interleave=4)
        return b.load(slot)

    def first_match(lo, hi, m, tag):
        """The smallest position in [lo, hi) whose value matches ``m`` (hi if none).  Blocks
        are tested with a cheap vectorized "any match" until one holds a match; only that
        block is searched for the position (a vectorized min over positions)."""
        def matches(v):
            if not is_float(vt):
                return b.icmp_signed("==", v, m)
            return b.or_(b.fcmp_ordered("==", v, m),
                         b.and_(b.fcmp_unordered("uno", m, m), b.fcmp_unordered("uno", v, v)))
        slot, found = entry_alloca(b, I64), entry_alloca(b, I1)
        b.store(hi, slot)

        def position(j):
            candidate = b.select(matches(value_at(j)), j, hi)
            b.store(b.select(b.icmp_signed("<", candidate, b.load(slot)), candidate, b.load(slot)), slot)

        def block(k):
            with b.if_then(b.icmp_signed("==", b.load(slot), hi)):      # (not found yet)
                start = b.add(lo, b.mul(k, const_i64(SEARCH_BLOCK)))
                end = b.add(start, const_i64(SEARCH_BLOCK))
                end = b.select(b.icmp_signed(">", end, hi), hi, end)
                b.store(ir.Constant(I1, 0), found)
                counted_loop(b, start, end, name + tag + "a",
                      lambda j: b.store(b.or_(b.load(found), matches(value_at(j))), found))
                with b.if_then(b.load(found)):
                    counted_loop(b, start, end, name + tag, position)
        blocks = b.sdiv(b.add(b.sub(hi, lo), const_i64(SEARCH_BLOCK - 1)), const_i64(SEARCH_BLOCK))
        counted_loop(b, const_i64(0), blocks, name + tag + "b", block)
        return b.load(slot)

    if at_least(CHUNK, n, unknown=False):   # two passes over a row that stays in the cache
        m = extreme(const_i64(0), const_i64(n), "m")
        i = first_match(const_i64(0), const_i64(n), m, "i")
    else:
        best_value, best_index = entry_alloca(b, llvm_type(vt)), entry_alloca(b, I64)
        first_end = const_i64(CHUNK)
        if isinstance(n, RunSize):        # (a run-time length may be shorter than a chunk)
            first_end = b.select(b.icmp_signed("<", const_i64(n), first_end), const_i64(n), first_end)
        m0 = extreme(const_i64(0), first_end, "m")
        b.store(m0, best_value)
        b.store(first_match(const_i64(0), first_end, m0, "i"), best_index)

        def chunk(c):
            lo = b.mul(c, const_i64(CHUNK))
            hi = b.add(lo, const_i64(CHUNK))
            hi = b.select(b.icmp_signed(">", hi, const_i64(n)), const_i64(n), hi)
            cm = extreme(lo, hi, "cm")
            best = b.load(best_value)
            merged = em.minmax(vt, cm, best, kind == "max")
            if is_float(vt):              # strictly better: a tie keeps the earlier position
                better = b.and_(b.fcmp_unordered("!=", merged, best), b.fcmp_ordered("ord", best, best))
            else:
                better = b.icmp_signed("!=", merged, best)
            with b.if_then(better):
                b.store(cm, best_value)
                b.store(first_match(lo, hi, cm, "ci"), best_index)
        counted_loop(b, const_i64(1), const_i64(-(-n // CHUNK)), name + "c", chunk)
        i = b.load(best_index)
    index = b.trunc(i, llvm_type(it)) if llvm_type(it).width < 64 else i
    return [value_at(i), index]
