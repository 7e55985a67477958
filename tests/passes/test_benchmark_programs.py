"""The programs of ``benchmarks/programs.py`` (small size): each compiles, gives NumPy's
results, runs nothing on the reference evaluator (no ``InterpretedWarning``), and its kernel
count has the shape fusion promises.  Counts and agreement only; never timings."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import nbxla
from benchmarks.programs import PROGRAMS, _agree, kernel_stats
from nbxla.errors import InterpretedWarning

# Most kernels a program may become (time loops: per step; the rest: in all).
KERNELS = {"eos": 1, "arc_distance": 1, "isoneutral": 2, "hdiff": 1, "doitgen": 1, "batched_einsum": 2, "gemm": 2, "gemver": 5, "atax": 2, "bicg": 2}
PER_STEP = {"jacobi2d": (50, 2), "heat3d": (40, 2), "fdtd2d": (40, 4)}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_compiles_natively_and_agrees_with_numpy(name):
    program = PROGRAMS[name]("small")
    f = nbxla.jit(program.fn)
    with warnings.catch_warnings():
        warnings.simplefilter("error", InterpretedWarning)
        got = f(*program.inputs)
    assert _agree(program.fn(*program.inputs), got)
    kernels, interpreted = kernel_stats(f.last_compilation)
    assert interpreted == 0
    if name in KERNELS:
        assert kernels <= KERNELS[name], f.last_compilation.stage("fusion_report")
    if name in PER_STEP:
        steps, per_step = PER_STEP[name]
        fusions = [i for i in f.last_compilation.optimized.entry.instructions if i.opcode == "fusion"]
        assert len(fusions) <= steps * per_step + 2


def test_inputs_are_not_mutated():
    program = PROGRAMS["jacobi2d"]("small")
    before = [np.copy(a) for a in program.inputs]
    nbxla.jit(program.fn)(*program.inputs)
    program.fn(*program.inputs)
    assert all(np.array_equal(a, b) for a, b in zip(before, program.inputs))
