"""Outputs written straight into the caller's arrays (jit's in-place argument updates).

Why: a program that updates an argument (``A += np.outer(u, v)``) computed the new ``A`` into
memory of its own and ``jit`` then copied it into the caller's array: for a 3000x3000 f64 ``A``
that was a fresh 72 MB output written (its cache lines read for ownership first) and a 72 MB
copy read and written again -- more traffic than the update itself (npbench's gemver).  When
the buffer plan donates the argument's parameter to that output (``passes/buffer_assignment``:
nothing reads the old values after the output is written), the kernel writes the output into
the argument's own memory and there is nothing to copy back.

A step whose output goes there carries ``DonatedParameter`` as the offset of its place, where
arena places carry an int (``CpuExecutable._arena_outputs``).  The executable overwrites
those parameters' arrays, so only callers that give them up may run it: ``api.run_program``
(jit's write-back, after ``protect_aliases``) and the profiler, on copies.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .cpu_kernels import DotThunk, KernelThunk


class DonatedParameter(NamedTuple):
    number: int         # the entry parameter whose array the output is written into
    slot: int           # its value's slot in the entry program


def is_arena_place(place: tuple) -> bool:
    """Is this step output place a view of the arena (else a donated parameter's array)?"""
    return not isinstance(place[0], DonatedParameter)


def uses_arena(places: list | None) -> bool:
    return places is not None and any(is_arena_place(p) for p in places)


def donated_output(plan, entry, instr, thunk, slot: dict, donating: set) -> list | None:
    """[(DonatedParameter, dims, dtype)] for a one-output kernel or BLAS call of ``entry`` whose
    output the buffer ``plan`` writes into a donated parameter's buffer (added to
    ``donating``), else None; ``slot`` maps the entry's instructions (by id) to value slots."""
    if plan is None or not plan.donated or instr.shape.is_tuple or \
            not isinstance(thunk, (KernelThunk, DotThunk)) or getattr(thunk, "tuple_result", False):
        return None
    v = plan.values.get(instr.name)
    if v is None or v.kind != "parameter" or plan.donated.get(v.parameter) != instr.name:
        return None
    param = next(p for p in entry.parameters if p.parameter_number == v.parameter)
    donating.add(v.parameter)
    return [(DonatedParameter(v.parameter, slot[id(param)]), instr.shape.dims, instr.shape.dtype)]


def describe_places(places: list | None) -> str:
    """Where a step's outputs go, for the ``execution`` stage."""
    if not places:
        return ""
    return " -> arena" if uses_arena(places) else f" -> into parameter {places[0][0].number}'s array (donated)"


def protect_aliases(inputs: list, donated) -> list:
    """``inputs`` with each donated parameter's array replaced by a copy where its memory may
    overlap another input's (``f(A, A[0])``): the program reads the other input after the
    output overwrote the donated one, which the plan assumed nobody could see.  The output then
    lands in the copy and the caller writes it back as before."""
    for number in donated:
        arr = inputs[number]
        if not isinstance(arr, np.ndarray):
            continue
        for k, other in enumerate(inputs):
            if k != number and isinstance(other, np.ndarray) and np.may_share_memory(arr, other):
                inputs = list(inputs)
                inputs[number] = arr.copy()
                break
    return inputs
