"""A ``while`` loop's step run in Python, saved to be undone (``loops.while_loop``): when the
step makes the loop's condition traced, the loop is rolled from before it (its body traced,
optimized and compiled once, not peeled once more into the entry)."""

from __future__ import annotations

import numpy as np

from .control import Snapshot, tracers_in

# NumPy array bytes in a loop's state up to which every step run in Python keeps a copy to be
# undone (``StepUndo``).  Why a bound: the copies cost as much as the step's own work or more
# (npbench's mandelbrot2, 80 steps over seven 250 000-element arrays made in the function:
# 1.5 s of its 3.4 s first call went to copies no step needed), and only the step that makes
# the condition traced is ever undone -- almost always the first (``err = 1.0; while err >
# tol: ... err = traced``).  Without the copy that step stays and the loop is rolled after it:
# the same result, traced from one step later.
UNDO_COPY_BYTES = 1 << 20


def undo_affordable(steps: int, state: tuple) -> bool:
    """Keep a copy of this Python step's state to undo it?  Always for the first step; later
    steps only while the state's NumPy arrays are small (``UNDO_COPY_BYTES``)."""
    if steps == 0:
        return True
    held = 0
    for v in state:
        if isinstance(v, np.ndarray):
            held += v.nbytes
            if held > UNDO_COPY_BYTES:
                return False
    return True


class StepUndo:
    """What one step of a loop run in Python may change in the trace, saved to be undone: the
    Tracers the state reaches and its lists, dicts and NumPy arrays (``Snapshot``), and the
    context's run-time checks, promoted arrays, views and logs (a discarded step's values
    must not become outputs or be read in its place).  Its instructions stay, dead."""

    def __init__(self, ctx, state: tuple):
        found: dict = {}
        tracers_in(state, found)
        self.ctx, self.snapshot = ctx, Snapshot(state, list(found.values()))
        self.builder, self.start, self.end = ctx.builder, len(ctx.builder.instructions), None
        self.saved = (len(ctx.checks), len(ctx.loop_decisions), dict(ctx.promoted), dict(ctx.views),
                      dict(ctx.ambiguous), None if ctx.size_observations is None else len(ctx.size_observations))

    def restore(self) -> None:
        if self.end is None:
            self.end = len(self.builder.instructions)
        self.snapshot.restore()
        ctx, (checks, decisions, promoted, views, ambiguous, observed) = self.ctx, self.saved
        del ctx.checks[checks:]
        del ctx.loop_decisions[decisions:]
        ctx.promoted, ctx.views, ctx.ambiguous = dict(promoted), dict(views), dict(ambiguous)
        if observed is not None:
            del ctx.size_observations[observed:]

    def drop_instructions(self) -> None:
        """Remove the undone step's instructions from the computation, but for those that
        later instructions use and its constants (the context hands out cached ones again):
        dead, they would still be copied, verified and simplified before dead code
        elimination drops them."""
        b, start, end = self.builder, self.start, self.end
        if self.ctx.builder is not b or end is None or end > len(b.instructions):
            return
        step = {id(i): i for i in b.instructions[start:end]}
        used = [o for i in b.instructions[end:] for o in i.operands if id(o) in step]
        used += [i for i in step.values() if i.opcode == "constant"]
        kept: set[int] = set()
        while used:
            instr = used.pop()
            if id(instr) not in kept:
                kept.add(id(instr))
                used += [o for o in instr.operands if id(o) in step]
        b.instructions[start:end] = [i for i in b.instructions[start:end]
                                     if id(i) in kept or i.opcode == "parameter"]
