"""Loops whose sin/cos/tan take the cheap argument reduction where every argument allows it.

Why: a kernel is one branch-free loop body that LLVM vectorizes, so a per-element choice
between the Cody-Waite reduction (valid below ``BOUNDED_TRIG_LIMIT``, ~25 flops) and
Payne-Hanek (every finite argument, ~100 instructions and three gathers) would compute both.
Great-circle distances spent most of their time in Payne-Hanek for angles in [0, pi].  As
SLEEF's vector functions test a whole vector, this versions the loop a block at a time: a
first pass over the block computes only the trig arguments and ORs together "some |x| is not
below the limit" (a vectorized reduction; NaN and inf count as not below), then the block
runs either the body with the bounded reductions or the full one.  Arguments are recomputed
by the check, so only kernels whose trig arguments are cheap (no transcendental, no
division) are versioned; others keep the full form everywhere.
"""

from __future__ import annotations

from typing import Callable

from llvmlite import ir

from ..hlo.ir import Computation, Instruction
from ..hlo.opcodes import EXPENSIVE
from ..hlo.shapes import is_complex
from .elemental import ElementalEmitter, const_i64
from .toolkit import ancestors, counted_loop, entry_alloca
from .transcendentals import BOUNDED_TRIG_LIMIT

TRIG_OPCODES = ("sine", "cosine", "tan")
# Elements per check: the block's operands are read twice (check, then body), the second
# time from L1 (512 doubles per operand: 4 KiB).
BLOCK = 512
# Instructions the check may recompute per element (loads, index arithmetic, adds...).
MAX_ARGUMENT_OPS = 24
_I8 = ir.IntType(8)


def versioned_trig(comp: Computation) -> list[Instruction]:
    """The real sin/cos/tan instructions of ``comp`` whose arguments are cheap to compute
    twice, or [] when the loop should not be versioned (none, or an argument too costly)."""
    trig = [i for i in comp.instructions
            if i.opcode in TRIG_OPCODES and not is_complex(i.shape.element_type)]
    if not trig:
        return []
    work = ancestors([i.operands[0] for i in trig])
    if any(i.opcode in EXPENSIVE for i in work):
        return []
    if sum(i.opcode not in ("parameter", "constant") for i in work) > MAX_ARGUMENT_OPS:
        return []
    return trig


def emit_versioned_loop(b: ir.IRBuilder, begin, end, trig: list[Instruction],
                        make_emitter: Callable[[], ElementalEmitter],
                        make_body: Callable[[frozenset], Callable],
                        index: Callable[[ir.Value], list] = lambda i: [i], interleave: int = 1) -> None:
    """``for i in [begin, end)`` by blocks of ``BLOCK``: the check over the block (arguments
    of ``trig`` from a fresh ``make_emitter()`` at element ``index(i)``: the flat index, or a
    row's index and the column), then the block's elements by ``make_body(bounded)(i)``,
    ``bounded`` the ids of ``trig`` when every argument in the block is below the limit,
    else empty.  ``interleave``: vector iterations in flight in the bounded loop (the full one,
    with Payne-Hanek's reductions, keeps one: it runs only for huge arguments, and interleaving
    it would double the kernel's compile time)."""
    flag = entry_alloca(b, _I8)
    bounded = frozenset(id(t) for t in trig)

    def block(start):
        stop = b.select(b.icmp_signed("<", b.sub(end, start), const_i64(BLOCK)), end,
                        b.add(start, const_i64(BLOCK)))
        b.store(ir.Constant(_I8, 0), flag)
        em = make_emitter()

        def check(i):
            em.reset_memo()
            outside = ir.Constant(ir.IntType(1), 0)
            for t in trig:
                x = em.value(t.operands[0], index(i))
                # (every finite half is below the limit, which half cannot hold)
                limit = ir.Constant(x.type, float("inf") if isinstance(x.type, ir.HalfType) else BOUNDED_TRIG_LIMIT)
                inside = b.fcmp_ordered("<", em.intrinsic("llvm.fabs", x.type, [x]), limit)
                outside = b.or_(outside, b.not_(inside))
            b.store(b.or_(b.load(flag), b.zext(outside, _I8)), flag)
        counted_loop(b, start, stop, "check", check)
        with b.if_else(b.icmp_unsigned("!=", b.load(flag), ir.Constant(_I8, 0))) as (full, cheap):
            with full:
                counted_loop(b, start, stop, "full", make_body(frozenset()), vectorize=False)
            with cheap:
                counted_loop(b, start, stop, "bounded", make_body(bounded), interleave=interleave, widen_math=True)
    counted_loop(b, begin, end, "block", block, step=const_i64(BLOCK))

