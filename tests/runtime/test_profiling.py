"""runtime/profiling: per-step timing of a CPU executable (exclusive and inclusive times, runs
of nested programs), and hooks that leave the executable exactly as it was."""

from __future__ import annotations

import numpy as np
import pytest

import nbxla
from nbxla.runtime.cpu_executable import CpuExecutable
from nbxla.runtime.profiling import profile_runs, timing_hooks


def body_loop(x, n):
    s = x
    for _ in range(n):
        s = np.sin(s) + x
    return s.sum()


@pytest.fixture
def host_loop(monkeypatch):
    monkeypatch.setenv("NBXLA_NATIVE_LOOPS", "0")
    f = nbxla.jit(body_loop)
    f.cache.clear()
    comp, inputs = f.compiled_inputs(np.ones(256, np.float32), 400)
    return comp, inputs


def test_nested_programs_count_their_runs_and_steps_their_time(host_loop):
    comp, inputs = host_loop
    cpu = comp.executable.native
    timed = profile_runs(cpu, inputs, min_runs=2, budget_s=0.0)
    assert timed.runs == 2
    (body,) = [name for name in timed.program_runs if name.startswith("body_line")]
    assert timed.program_runs[body] == 400                       # the trip count, per run
    entry = comp.optimized.entry.name
    (loop,) = [s for (p, n), s in timed.steps.items() if p == entry and n.startswith("while")]
    inside = sum(s.exclusive_s for (p, _), s in timed.steps.items() if p != entry)
    assert loop.calls == 1
    # the loop's inclusive time holds its body's steps; its exclusive time is the rest
    assert loop.inclusive_s == pytest.approx(loop.exclusive_s + inside, rel=1e-6)
    assert 0 < timed.steps_s <= timed.total_s
    body_steps = [s for (p, _), s in timed.steps.items() if p == body and s.calls]
    assert body_steps and all(s.calls == 400 for s in body_steps)


def test_hooks_restore_every_program(host_loop):
    comp, inputs = host_loop
    cpu = comp.executable.native
    before = {name: list(p.steps) for name, p in cpu.programs.items()}
    expected = cpu.run(inputs)
    with pytest.raises(RuntimeError):
        with timing_hooks(cpu):
            assert any("run" in vars(p) for p in cpu.programs.values())
            raise RuntimeError("a failing profile still restores the executable")
    assert {name: list(p.steps) for name, p in cpu.programs.items()} == before
    assert all("run" not in vars(p) for p in cpu.programs.values())
    np.testing.assert_array_equal(cpu.run(inputs)[0], expected[0])


def test_native_loops_are_split_through_a_host_driven_twin(monkeypatch):
    monkeypatch.setenv("NBXLA_NATIVE_LOOPS", "1")
    f = nbxla.jit(body_loop)
    f.cache.clear()
    comp, inputs = f.compiled_inputs(np.ones(256, np.float32), 400)
    cpu = comp.executable.native
    natives = [n for n, how in cpu.loops.items() if how.startswith("native:")]
    if not natives:
        pytest.skip(f"no native loop here: {cpu.loops}")
    twin = CpuExecutable(comp.optimized, cpu.plan, compile_loops=False)
    assert not twin.loops                                        # every loop host-driven
    timed = profile_runs(cpu, inputs, min_runs=2, budget_s=0.0, twin=lambda: twin)
    inner = timed.native_loops[natives[0]]
    assert any(count == 400 for count in inner.program_runs.values())
    np.testing.assert_allclose(twin.run(inputs)[0], cpu.run(inputs)[0], rtol=1e-6)
