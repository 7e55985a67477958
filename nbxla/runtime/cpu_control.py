"""Control flow on the CPU backend: ``while``, ``conditional`` and ``call`` as host-driven
loops and branches over compiled programs of their computations (see cpu_executable)."""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..hlo import Module
from ..hlo.ir import Computation, Instruction, program_callees
from .cpu_kernels import KernelThunk, data_pointer


class KernelCondition:
    """A condition that picks parts of its one parameter and feeds them to one native kernel
    producing a pred scalar: per iteration only the operand pointers are set and the kernel
    called (the pointer array and the result scalar live as long as the loop)."""

    def __init__(self, kernel: KernelThunk, pickers: list[Callable]):
        self.kernel, self.pickers = kernel, pickers

    def predicate(self) -> Callable:
        fn, extent, pickers = self.kernel.fn, self.kernel.extent, self.pickers
        result = np.empty((), np.bool_)
        ptrs = self.kernel.pointer_array()
        ptrs[len(pickers)] = data_pointer(result)

        def holds(state) -> bool:
            for k, pick in enumerate(pickers):
                ptrs[k] = data_pointer(pick(state))
            fn(ptrs, 0, extent)
            return result[()]
        return holds


def kernel_condition(program) -> KernelCondition | None:
    """The condition ``program`` as a KernelCondition, or None when it is not of that form."""
    paths: dict[int, tuple] = {}
    comp = program.computation
    steps = {out: (thunk, operands) for thunk, operands, out, _ in program.steps}
    for slot, instr in enumerate(comp.instructions):
        if instr.opcode == "parameter":
            paths[slot] = ()
        elif instr.opcode == "get-tuple-element" and steps[slot][1][0] in paths:
            paths[slot] = paths[steps[slot][1][0]] + (instr.attrs["index"],)
        elif instr is not comp.root:
            return None
    thunk, operands = steps.get(program.root, (None, ()))
    if not isinstance(thunk, KernelThunk) or thunk.parallel or thunk.outputs != [((), np.dtype(np.bool_))] \
            or not all(k in paths for k in operands):
        return None
    return KernelCondition(thunk, [_picker(paths[k]) for k in operands])


def _picker(path: tuple) -> Callable:
    if len(path) == 1:
        index = path[0]
        return lambda state: state[index]

    def pick(state):
        for index in path:
            state = state[index]
        return state
    return pick


class WhileThunk:
    """``while``: the condition and body programs run from the host until the condition fails."""

    def __init__(self, condition, body):
        self.make_predicate = condition.predicate_factory()
        self.body = body

    def __call__(self, operands):
        holds, run_body = self.make_predicate(), self.body.run
        state = operands[0]
        while holds(state):
            state = run_body([state])
        return state


class ConditionalThunk:
    """``conditional``: one branch program, chosen by a pred (true, false) or an index (an
    out-of-range index runs the last branch, as in XLA)."""

    def __init__(self, instr: Instruction, branches: list):
        self.branches = branches
        self.indexed = "branch_computations" in instr.attrs

    def __call__(self, operands):
        if self.indexed:
            index = int(operands[0])
            if not 0 <= index < len(self.branches):
                index = len(self.branches) - 1
        else:
            index = 0 if bool(operands[0]) else 1
        return self.branches[index].run([operands[1 + index]])


class OwnedResult:
    """Wraps a control-flow thunk of the entry: its result may be its operand (a loop that
    does not run, a branch that passes its input on) or a nested constant; those leaves are
    copied, so that nothing the entry overwrites later (the arena, donated inputs) or the
    caller keeps aliases them."""

    def __init__(self, thunk: Callable, callees: list):
        self.thunk = thunk
        self.constants = [lit for p in callees for lit in p.reachable_literals()]

    def __call__(self, operands):
        foreign = flatten_leaves(tuple(operands)) + self.constants
        return _copy_shared(self.thunk(operands), foreign)


def _copy_shared(value, foreign: list[np.ndarray]):
    if isinstance(value, tuple):
        return tuple(_copy_shared(v, foreign) for v in value)
    if any(np.may_share_memory(value, f) for f in foreign):
        return value.copy()
    return value


def program_computations(module: Module, native: frozenset = frozenset()) -> list[Computation]:
    """The entry and every computation reached from it through while/conditional/call (not
    through the instructions whose ids are in ``native``: loops compiled whole elsewhere)."""
    order, seen = [], set()

    def visit(comp):
        if id(comp) not in seen:
            seen.add(id(comp))
            order.append(comp)
            for instr in comp.instructions:
                if id(instr) not in native:
                    for callee in program_callees(instr):
                        visit(callee)
    visit(module.entry)
    return order


def program_computations_of(instr: Instruction) -> list[Computation]:
    """The computations ``instr`` runs as programs, and those they run, transitively."""
    order, stack = [], list(program_callees(instr))
    while stack:
        comp = stack.pop()
        if all(comp is not c for c in order):
            order.append(comp)
            stack += [c for i in comp.instructions for c in program_callees(i)]
    return order


def flatten_leaves(value) -> list[np.ndarray]:
    if isinstance(value, tuple):
        return [leaf for v in value for leaf in flatten_leaves(v)]
    return [np.asarray(value)]
