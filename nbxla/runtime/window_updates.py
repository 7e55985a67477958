"""Window updates in the JIT's entry: a fusion whose root is a ``dynamic-update-slice`` of one
of its operands (``a[2:-2, 2:-2, :, 1] = ...``) writes only the window.

The elemental kernel of such a fusion computes every element of the output: the window from
the update, the rest by copying the operand element by element (a select per element, over
rows as short as the array's last axis).  pyhpc's TKE step updated a third of 4-D arrays
this way eight times per call, about 2 ms of its 5 ms of compiled work.  Here the fusion's
kernel is the in-place one (``codegen/updates.emit_in_place_update``, the AOT driver's), run
on a buffer that already holds the operand:

* **in place** -- the buffer plan writes the output into the operand's buffer
  (``BufferPlan.operand_buffers``: the operand dies at the update, nothing living in that
  buffer is read later) and the arena gives both one place: only the window is written;
* **copy, then the window** -- otherwise (a parameter the caller still owns, an operand read
  after the update, no plan): the operand copied into the output's memory (one ``memcpy``),
  then only the window is written -- where the window is at most half the array; a larger one
  keeps the elemental kernel (``COPY_WINDOW_FRACTION``).

An operand is updated in place only where the runtime made its memory itself (a kernel's or
BLAS's output, or a view of one): a value the plan calls a temporary may, at run time, be an
array an evaluator rule returned, which can be the caller's input.
"""

from __future__ import annotations

import ctypes
import math

import numpy as np

from ..hlo.aliasing import is_byte_view, update_chain, updated_parameter
from ..hlo.ir import Instruction, Module
from ..passes.buffer_assignment import operand_buffers
from .cpu_kernels import (KERNEL_TYPE, PARALLEL_THRESHOLD, DotThunk, FullReductionThunk, KernelThunk, data_pointer,
                          element_cost, run_split)
from . import host_memory


# Where the operand cannot be updated in place, its copy plus the window beats the elemental
# kernel (which writes every element, selecting between the update and the operand) when the
# window is at most this part of the array.  Measured: a 4-D array updated in one of 3 columns
# (TKE) 0.20-0.32 ms against 0.28-0.37 ms; a 64K-element vector updated but for its two ends
# 0.030 ms against 0.015 ms (the copy is then a second pass over everything).
COPY_WINDOW_FRACTION = 0.5


def window_update_fusions(module: Module) -> frozenset[int]:
    """The ids of the entry's fusions that run as window updates: rooted at a non-empty update
    of one of their parameters, with every dimension known (the in-place kernel reads no
    run-time sizes), and either written into the operand's buffer (the entry's
    ``operand_buffers``: the plan the executable gets says the same) or updating at most
    ``COPY_WINDOW_FRACTION`` of it."""
    reusable = None
    found = set()
    for instr in module.entry.instructions:
        if instr.opcode != "fusion" or instr.shape.is_tuple:
            continue
        comp = instr.attrs["calls"]
        if getattr(comp, "unknown_axes", None) or updated_parameter(comp) is None:
            continue
        written = sum(math.prod(d.operands[1].shape.dims) for d in update_chain(comp) or [comp.root])
        window = written / max(1, math.prod(instr.shape.dims))
        if window > COPY_WINDOW_FRACTION:
            if reusable is None:
                reusable = operand_buffers(module.entry)
            if instr.name not in reusable:
                continue
        found.add(id(instr))
    return frozenset(found)


def in_place_symbols(module: Module, compiled) -> frozenset:
    """The kernel symbols (of ``(symbol, instruction)`` pairs) emitted as window updates
    (``compile_kernels``' ``in_place``)."""
    updates = window_update_fusions(module)
    return frozenset(symbol for symbol, instr in compiled if id(instr) in updates)


def made_by_run(instr: Instruction, thunk, made: set[int]) -> bool:
    """Is the entry value of ``instr`` (run by ``thunk``) memory the run made itself: a kernel's
    or BLAS's output, or a view of one (``made``: the ids of the earlier such values)?"""
    if isinstance(thunk, (KernelThunk, FullReductionThunk, DotThunk, WindowUpdateThunk)):
        return True
    if instr.opcode == "get-tuple-element":
        source = instr.operands[0]
        if source.opcode == "tuple":
            source = source.operands[instr.attrs["index"]]
        return id(source) in made
    return is_byte_view(instr) and id(instr.operands[0]) in made


def live_out_update_places(plan) -> frozenset:
    """The arena allocations (``ValueAssignment.allocation``) that window updates write a result
    into in place: the arrays living there get memory of their own, as results do."""
    if plan is None:
        return frozenset()
    found = set()
    for name in plan.operand_buffers:
        v = plan.values.get(name)
        if v is not None and v.kind == "arena" and v.end >= plan.length and v.allocation is not None:
            found.add(v.allocation)
    return frozenset(found)


class WindowUpdateThunk:
    """Runs an in-place update kernel: into the updated operand's own array (``reuse``), or into
    a copy of it (the output's place in the arena when given, else fresh memory)."""

    def __init__(self, instr: Instruction, address: int, extent: int, work_per_unit: int, reuse: bool):
        self.fn = KERNEL_TYPE(address)
        self.target = updated_parameter(instr.attrs["calls"])
        self.reuse = reuse
        self.make = host_memory.allocator(instr.shape.dims, instr.shape.dtype)
        self.pointer_array = ctypes.c_void_p * (len(instr.operands) + 1)
        self.extent = extent
        self.parallel = extent >= 2 and extent * work_per_unit * element_cost(instr) >= PARALLEL_THRESHOLD
        self.tuple_result = False
        self.how = "in its operand's buffer" if reuse else "into a copy of its operand"

    def __call__(self, operands: list[np.ndarray], outs: list | None = None):
        target = operands[self.target]
        if self.reuse:
            out = target
        else:
            out = outs[0] if outs else self.make()
            np.copyto(out, target)
        ptrs = self.pointer_array(*[data_pointer(a) for a in operands], data_pointer(out))
        if self.parallel:
            run_split(self.fn, ptrs, self.extent)
        else:
            self.fn(ptrs, 0, self.extent)
        return out
