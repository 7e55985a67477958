"""The values a counted loop's counter takes in its body, and the ranges of scalar indices
built from it: facts for rewrites whose exactness depends on where a dynamic start lies (a
start known inside ``[0, n - size]`` is not clamped).

Only ``i = c0; while i < c1: i += 1`` (``loop_dots.counted_loop``) whose body no other loop
runs: there the body sees ``i`` in ``[c0, c1 - 1]`` and nothing else."""

from __future__ import annotations

from ..hlo import Module
from ..hlo.ir import Computation, Instruction
from .loop_dots import counted_loop
from .pipeline import computation_uses, loop_owns_its_computations


def loop_counters(module: Module) -> dict[int, tuple[int, int, int]]:
    """{id(body): (state index of the counter, lowest value, highest value)} of the module's
    counted loops that run at least once."""
    uses, found = computation_uses(module), {}
    for comp in module.computations:
        for loop in comp.instructions:
            if loop.opcode != "while" or not loop_owns_its_computations(loop, uses):
                continue
            counted = counted_loop(loop)
            if counted is not None and counted[2] > 0 and isinstance(counted[1], int):
                k, start, trips = counted
                found[id(loop.attrs["body"])] = (k, start, start + trips - 1)
    return found


def index_form(x: Instruction, comp: Computation, counters: dict) -> tuple[object, int, int, int] | None:
    """``x`` (a scalar integer) as (base, offset, lowest, highest): ``base + offset`` with base
    the loop counter (``"counter"``) or nothing (``None``, a constant), and the range of its
    values; None where unknown."""
    if x.shape.rank != 0 or x.shape.element_type[0] not in "su":
        return None
    if x.opcode == "constant":
        v = int(x.literal.reshape(-1)[0])
        return None, v, v, v
    counter = counters.get(id(comp))
    if counter is not None and x.opcode == "get-tuple-element" and x.operands[0] is comp.parameters[0] \
            and x.attrs["index"] == counter[0]:
        return "counter", 0, counter[1], counter[2]
    if x.opcode in ("add", "subtract"):
        a, b = (index_form(o, comp, counters) for o in x.operands)
        if a is None or b is None:
            return None
        if x.opcode == "add":
            if a[0] is not None and b[0] is not None:
                return None
            return a[0] or b[0], a[1] + b[1], a[2] + b[2], a[3] + b[3]
        if b[0] is not None:
            return None
        return a[0], a[1] - b[1], a[2] - b[3], a[3] - b[2]
    return None


def windows_apart(read: list, read_sizes, write: list, write_sizes, dims, comp: Computation, counters) -> bool:
    """Do a window read at ``read`` (start instructions, ``read_sizes``) and one written at
    ``write`` miss each other along some axis of an array of ``dims``, wherever the starts
    fall?  Only where both starts are known inside ``[0, n - size]`` (neither is clamped)."""
    for r, a, w, b, n in zip(read, read_sizes, write, write_sizes, dims):
        fr, fw = index_form(r, comp, counters), index_form(w, comp, counters)
        if fr is None or fw is None or fr[2] < 0 or fr[3] > n - a or fw[2] < 0 or fw[3] > n - b:
            continue
        if fr[3] + a <= fw[2] or fw[3] + b <= fr[2]:
            return True                 # (the ranges themselves lie apart)
        if fr[0] == fw[0] and fr[0] is not None:
            gap = fr[1] - fw[1]         # read start - write start, the same at every step
            if gap >= b or gap <= -a:
                return True
    return False
