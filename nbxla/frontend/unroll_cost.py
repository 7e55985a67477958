"""What a loop body traced once would cost unrolled, counted in kernels to compile (the part of
compile time that grows with the trip count: LLVM compiles every kernel at O3).

* ``size``: instructions of the body and of what it calls (the ``--unroll_budget`` count).
* ``kernels_per_step``: kernels each unrolled step adds that no fusion merges across steps:
  its reductions and other ops that are a kernel of their own (``KERNEL_OPS``), plus one per
  write that reads what the previous step wrote at other positions (a slice, a transpose, a
  dot of loop-carried state): then step ``k + 1`` cannot be fused into step ``k``'s kernel
  (Floyd-Warshall's ``min(path, add.outer(path[:, k], path[k]))``: 20 steps, 20 kernels and
  seconds of LLVM unrolled; rolled, one kernel).  A body that only maps elements of the state
  (``x = x * a + b``) costs nothing per step: unrolled steps fuse into one kernel.
* ``moving_windows``: reductions of a window that moves with the loop index
  (``np.max(x[:, 2*i:2*i+2], axis=1)``): unrolled, one kernel per step; rolled, the loop nest
  is one ``reduce-window`` or ``convolution`` (``passes/window_loops``), so such loops stay
  rolled at any trip count.
"""

from __future__ import annotations

from ..hlo.ir import Computation, Instruction

# Ops that are a kernel (or a loop) of their own in every unrolled step: no fusion merges
# them across steps, and each costs an LLVM compilation when their operands differ per step.
# (Dots are library calls, no compilation: not counted, except as a break in fusion below.)
KERNEL_OPS = frozenset({"reduce", "reduce-window", "select-and-scatter", "sort", "scatter",
                        "convolution", "while", "conditional", "fft", "custom-call"})
# Ops that read their operand at positions other than the element they produce: on carried
# state, the next step's kernel cannot be the previous step's.
_MOVING_READS = frozenset({"slice", "dynamic-slice", "gather", "transpose", "reverse", "concatenate",
                           "pad", "dot", "convolution", "reduce", "reduce-window", "sort", "fft"})


def size(comp: Computation) -> int:
    """Instructions of a computation and of those it calls."""
    return sum(1 + sum(size(c) for c in i.called_computations) for i in comp.instructions)


def _kernel_ops(comp: Computation) -> int:
    count = 0
    for i in comp.instructions:
        if i.opcode in KERNEL_OPS:
            count += 1
        if i.opcode in ("while", "conditional", "call"):
            count += sum(_kernel_ops(c) for c in i.called_computations)
    return count


def _state_elements(body: Computation) -> tuple[Instruction | None, dict[int, Instruction]]:
    """(the state parameter, {element k: its get-tuple-element}) of a loop body."""
    params = body.parameters
    if len(params) != 1 or not params[0].shape.is_tuple:
        return None, {}
    return params[0], {i.attrs["index"]: i for i in body.instructions
                       if i.opcode == "get-tuple-element" and i.operands[0] is params[0]}


def _reaching(body: Computation, sources: list[Instruction]) -> set[int]:
    """Ids of the body's instructions that depend on any of ``sources``."""
    reach = {id(s) for s in sources}
    for i in body.instructions:                     # (in dependency order)
        if any(id(o) in reach for o in i.operands):
            reach.add(id(i))
    return reach


def carried_moving_reads(body: Computation) -> int:
    """How many writes of the body read more than one element of state it changes at
    positions other than those they write (at least 1 when any such read exists; each such
    write starts a kernel of its own: channel flow's pressure step writes the interior, two
    boundary columns and two rows from the previous step's values)."""
    param, elements = _state_elements(body)
    root = body.root
    if param is None or root.opcode != "tuple":
        return 0
    changed = [g for k, g in elements.items()
               if k < len(root.operands) and root.operands[k] is not g and not g.shape.is_tuple
               and g.shape.rank > 0]
    reach = _reaching(body, changed)
    # (a read of one element -- ``A[i, j - 1]`` in Seidel's inner loop -- is recomputed, not
    # a kernel boundary: fusion takes chains of them)
    moving = [i for i in body.instructions
              if i.opcode in _MOVING_READS and not i.shape.is_tuple and i.shape.size > 1
              and any(id(o) in reach for o in i.operands)]
    if not moving:
        return 0
    moved = _reaching(body, moving)
    writes = sum(1 for i in body.instructions
                 if i.opcode == "dynamic-update-slice" and id(i.operands[1]) in moved)
    return max(writes, 1)


def kernels_per_step(body: Computation) -> int:
    return _kernel_ops(body) + carried_moving_reads(body)


def moving_windows(body: Computation, counter: int = 0) -> int:
    """Reductions in the body of a window that starts at the loop index (state element
    ``counter``): a dynamic-slice whose start depends on it feeds the reduction."""
    _, elements = _state_elements(body)
    index = elements.get(counter)
    if index is None:
        return 0
    moving = _reaching(body, [index])
    windows = {id(i) for i in body.instructions
               if i.opcode == "dynamic-slice" and any(id(o) in moving for o in i.operands[1:])}
    fed = _reaching(body, [i for i in body.instructions if id(i) in windows])
    return sum(1 for i in body.instructions
               if i.opcode in ("reduce", "reduce-window") and id(i.operands[0]) in fed)
