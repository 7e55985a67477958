"""A symbolic program's instances (an executable per size over the machine code compiled once):
the one the compile makes at the call's sizes (to refuse, while compiling, a runtime path that
needs a size as a number) serves that call, instead of being planned and built again."""

import numpy as np

import nbxla
import nbxla.symbolic_compile as symbolic_compile
import nbxla.symbolic_program as symbolic_program
from nbxla.runtime.cache import CompilationCache


def elementwise(x, y):
    return 3 * x ** 2 + y


def test_the_compiles_instance_serves_its_call_and_each_new_size_makes_one(monkeypatch):
    planned = []
    original = symbolic_program.plan_buffers
    monkeypatch.setattr(symbolic_program, "plan_buffers", lambda module: planned.append(1) or original(module))
    cache = CompilationCache()
    f = nbxla.jit(elementwise, cache=cache, dynamic=True)
    rng = np.random.default_rng(5)
    for n, plans in [(5, 1), (5, 1), (6, 2), (9, 3), (6, 3)]:
        x, y = rng.random((n, 8)), rng.random((n, 8))
        np.testing.assert_allclose(f(x, y), elementwise(x, y))
        assert len(planned) == plans, f"size {n}"
    assert cache.misses == 1
    program = cache.entries()[0].value
    assert program.instances == 3 and not program._premade
    assert "symbolic" in f.last_compilation.explanation         # (the record as the caller completed it)


def test_what_an_instance_binds_is_decided_once_per_program(monkeypatch):
    """Whether an instance binds every computation's shapes or the entry's alone depends on the
    program only (control flow, convolutions, fusions the evaluator runs): asked once, not per
    size (each answer scans every computation).  Results against NumPy at each size."""
    asked = []
    original = symbolic_compile.SymbolicProgram.has_convolutions
    monkeypatch.setattr(symbolic_compile.SymbolicProgram, "has_convolutions",
                        property(lambda self: asked.append(1) or original.fget(self)))
    f = nbxla.jit(elementwise, cache=CompilationCache(), dynamic=True)
    rng = np.random.default_rng(6)
    for n in [4, 5, 6, 7, 9, 12]:
        x, y = rng.random((n, 8)), rng.random((n, 8))
        np.testing.assert_allclose(f(x, y), elementwise(x, y))
    assert len(asked) == 1
