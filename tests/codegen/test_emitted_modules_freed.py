"""The LLVM IR modules a compile emits (llvmlite's Python objects: every instruction and constant
of every kernel) are freed once nothing holds the compiled program: a notebook session or a
test worker compiles thousands of programs, and each kept module grew the process's memory and
the garbage collector's work (codegen/toolkit's alias scopes once kept every module alive)."""

from __future__ import annotations

import gc

import llvmlite.ir
import numpy as np

import nbxla
from nbxla.runtime.cache import CompilationCache


def _modules_alive() -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, llvmlite.ir.Module))


def _compile_and_drop(k: int) -> None:
    x = np.linspace(-1.0, 1.0, 24 * (k + 1), dtype=np.float32).reshape(k + 1, 24)
    f = nbxla.jit(lambda a: np.tanh(a * (k + 2.0)).sum(axis=1) + a.max(), cache=CompilationCache())
    np.testing.assert_allclose(f(x), np.tanh(x * (k + 2.0)).sum(axis=1) + x.max(), rtol=1e-5)


def test_emitted_ir_modules_are_freed_with_their_program():
    _compile_and_drop(0)                # (the code generator's lazily made globals, once)
    before = _modules_alive()
    for k in range(1, 6):               # (other programs: no compile cache serves them)
        _compile_and_drop(k)
    assert _modules_alive() <= before, "IR modules of dropped programs are still alive"
