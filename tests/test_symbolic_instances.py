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


def test_run_symbolic_at_the_last_size_and_at_others():
    """``run_symbolic`` reuses the last call's runner while the sizes stay the same: results at
    alternating sizes against NumPy, and a size below the program's least still refused after
    a call at a size it serves."""
    import pytest
    from nbxla.hlo.parser import parse_hlo
    from nbxla.hlo.shapes import SymbolicDimensionError
    from nbxla.symbolic_compile import compile_symbolic_module, run_symbolic
    program = compile_symbolic_module(parse_hlo(
        "HloModule t\nENTRY e { p = f32[b,8]{1,0} parameter(0)\n c = f32[] constant(3)\n"
        " k = f32[b,8]{1,0} broadcast(c), dimensions={}\n ROOT m = f32[b,8]{1,0} multiply(p, k) }"))
    rng = np.random.default_rng(7)
    for n in [5, 5, 9, 5, 9, 9]:
        x = rng.random((n, 8), dtype=np.float32)
        np.testing.assert_allclose(np.asarray(run_symbolic(program, [x])[0]), 3 * x, rtol=1e-6)
    with pytest.raises(SymbolicDimensionError, match="specialised"):
        run_symbolic(program, [np.ones((1, 8), np.float32)])
