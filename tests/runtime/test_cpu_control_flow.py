"""while / conditional / call on the CPU backend: host-driven loops over compiled programs.

(Loops of the entry normally run natively, see test_native_loops.py; here ``NBXLA_NATIVE_LOOPS=0``
keeps them host-driven, the path taken without a C compiler.)

Modules are written as HLO text and compiled with the optimizer (``compile_module``, which
fuses loop bodies, conditions and branches) or, to keep hand-written fusions and ``call``s
as written, with ``build_executable`` alone.  The oracle is the evaluator on the same module.
Besides the values, the tests check that the nested fusions became native kernels (one LLVM
module for all programs) and that results never alias inputs, constants or arena buffers.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from nbxla.compiler import compile_module
from nbxla.hlo.evaluator import evaluate, flatten
from nbxla.hlo.parser import parse_hlo
from nbxla.runtime.executable import build_executable
from nbxla.testing import compare_arrays


@pytest.fixture(autouse=True)
def host_driven_loops(monkeypatch):
    monkeypatch.setenv("NBXLA_NATIVE_LOOPS", "0")


def check(executable, module, inputs):
    """Run on the CPU executable and the evaluator; return the CPU results."""
    got = executable.run(inputs)
    want = flatten(evaluate(module, inputs))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        ok, detail = compare_arrays(g, w)
        assert ok, detail
    return got


def compiled(text: str):
    """(compilation, the module the evaluator runs: the one before optimization)."""
    compilation = compile_module(parse_hlo(text), "cpu")
    return compilation, parse_hlo(text)


def nested_fusions(compilation) -> dict[str, list[str]]:
    """Fusion names per non-entry computation of the optimized module that runs as a program."""
    native = compilation.executable.native
    entry = compilation.optimized.entry.name
    return {name: [i.name for i in program.computation.instructions if i.opcode == "fusion"]
            for name, program in native.programs.items() if name != entry}


def assert_nested_fusions_native(compilation, expected_programs: set[str]):
    native = compilation.executable.native
    fusions = nested_fusions(compilation)
    assert set(fusions) == expected_programs
    names = [f for fs in fusions.values() for f in fs]
    assert names, "expected fusions inside the nested programs"
    assert native.interpreted == {} and native.interpreted_ops == {}
    for name in names:
        assert native.kernels.addresses.get(native.kernel_symbols[name]), name


# ---- while -----------------------------------------------------------------------------------

COUNTED_LOOP = """HloModule counted

body {
  p = (s32[], f32[16], f32[16]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[16] get-tuple-element(p), index=1
  bias = f32[16] get-tuple-element(p), index=2
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  c = f32[] constant(0.5)
  cb = f32[16] broadcast(c), dimensions={}
  m = f32[16] multiply(x, cb)
  s = f32[16] sine(x)
  fi = f32[] convert(i)
  small = f32[] constant(0.001)
  fs = f32[] multiply(fi, small)
  fib = f32[16] broadcast(fs), dimensions={}
  t = f32[16] multiply(s, cb)
  ti = f32[16] add(t, fib)
  a = f32[16] add(m, ti)
  x1 = f32[16] add(a, bias)
  ROOT next = (s32[], f32[16], f32[16]) tuple(i1, x1, bias)
}

cond {
  p = (s32[], f32[16], f32[16]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(%d)
  ROOT lt = pred[] compare(i, n), direction=LT
}

ENTRY main {
  x = f32[16] parameter(0)
  bias = f32[16] parameter(1)
  zero = s32[] constant(0)
  init = (s32[], f32[16], f32[16]) tuple(zero, x, bias)
  w = (s32[], f32[16], f32[16]) while(init), condition=cond, body=body
  count = s32[] get-tuple-element(w), index=0
  y = f32[16] get-tuple-element(w), index=1
  carried = f32[16] get-tuple-element(w), index=2
  ROOT out = (s32[], f32[16], f32[16]) tuple(count, y, carried)
}
"""


@pytest.mark.parametrize("iterations", [0, 1, 7, 100])
def test_counted_loop_with_fused_body_and_tuple_state(iterations):
    compilation, module = compiled(COUNTED_LOOP % iterations)
    x = np.linspace(-1, 1, 16, dtype=np.float32)
    bias = np.full(16, 0.25, np.float32)
    count, y, carried = check(compilation.executable, module, [x, bias])
    assert int(count) == iterations
    assert_nested_fusions_native(compilation, {"body", "cond"})
    # A loop that never runs returns its input state, a loop-invariant element its input:
    # either way the caller gets arrays of its own.
    for out in (y, carried):
        assert not np.shares_memory(out, x) and not np.shares_memory(out, bias)
    bias[:] = 7
    x[:] = 7
    assert carried[0] == 0.25 and (iterations or y[0] == -1)


def test_condition_of_one_fused_kernel_takes_the_direct_path():
    compilation, _ = compiled(COUNTED_LOOP % 3)
    native = compilation.executable.native
    make = native.programs["cond"].predicate_factory()
    holds = make()
    state = (np.array(2, np.int32), np.zeros(16, np.float32), np.zeros(16, np.float32))
    assert bool(holds(state)) is True
    assert bool(holds((np.array(3, np.int32),) + state[1:])) is False


def test_condition_evaluated_by_rules_when_not_fused():
    """Without the optimizer the condition's compare runs through the evaluator's rule."""
    module = parse_hlo(COUNTED_LOOP % 5)
    executable = build_executable(module, "cpu")
    count, _, _ = check(executable, module, [np.ones(16, np.float32), np.zeros(16, np.float32)])
    assert int(count) == 5


ARENA_LOOP = """HloModule arena

body {
  p = (s32[], f32[64]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[64] get-tuple-element(p), index=1
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  x1 = f32[64] add(x, x)
  ROOT next = (s32[], f32[64]) tuple(i1, x1)
}

cond {
  p = (s32[], f32[64]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  limit = s32[] constant(%d)
  ROOT lt = pred[] compare(i, limit), direction=LT
}

ENTRY main {
  x = f32[64] parameter(0)
  e = f32[64] exponential(x)
  zero = s32[] constant(0)
  init = (s32[], f32[64]) tuple(zero, e)
  w = (s32[], f32[64]) while(init), condition=cond, body=body
  y = f32[64] get-tuple-element(w), index=1
  cy = f32[64] cosine(y)
  c = f32[64] reverse(cy), dimensions={0}
  d = f32[] dot(c, c), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  db = f32[64] broadcast(d), dimensions={}
  r = f32[64] multiply(c, db)
  ROOT out = (f32[64], f32[64]) tuple(r, y)
}
"""


@pytest.mark.parametrize("iterations", [0, 2])
def test_loop_state_from_the_arena_is_not_overwritten_later(iterations):
    """The loop's input lives in the arena; with zero iterations its result *is* that input,
    whose arena memory the plan hands to a later kernel once the loop has read it (here a
    kernel reading the loop's result in reverse order: written over it, it would read its
    own output)."""
    text = ARENA_LOOP % iterations
    compilation, module = compiled(text)
    plan = compilation.pipeline.facts["buffer-assignment"]
    entry = compilation.optimized.entry
    loop_input = next(o for o in entry.instructions if o.opcode == "while").operands[0].operands[1]
    arena_values = [v for v in plan.values.values() if v.kind == "arena" and v.alias_of is None]
    reused = [v for v in arena_values if v.offset == plan[loop_input.name].offset and v.name != loop_input.name]
    assert reused, "the test needs a later kernel placed where the loop's input was"
    x = np.linspace(0.1, 1, 64).astype(np.float32)
    check(compilation.executable, module, [x])


NESTED_LOOPS = """HloModule nested

inner_body {
  p = (s32[], f32[8]) parameter(0)
  j = s32[] get-tuple-element(p), index=0
  x = f32[8] get-tuple-element(p), index=1
  one = s32[] constant(1)
  j1 = s32[] add(j, one)
  fj = f32[] convert(j)
  b = f32[8] broadcast(fj), dimensions={}
  x1 = f32[8] add(x, b)
  ROOT next = (s32[], f32[8]) tuple(j1, x1)
}

inner_cond {
  p = (s32[], f32[8]) parameter(0)
  j = s32[] get-tuple-element(p), index=0
  four = s32[] constant(4)
  ROOT lt = pred[] compare(j, four), direction=LT
}

outer_body {
  p = (s32[], f32[8]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[8] get-tuple-element(p), index=1
  zero = s32[] constant(0)
  start = (s32[], f32[8]) tuple(zero, x)
  w = (s32[], f32[8]) while(start), condition=inner_cond, body=inner_body
  y = f32[8] get-tuple-element(w), index=1
  half = f32[] constant(0.5)
  hb = f32[8] broadcast(half), dimensions={}
  y1 = f32[8] multiply(y, hb)
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  ROOT next = (s32[], f32[8]) tuple(i1, y1)
}

outer_cond {
  p = (s32[], f32[8]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  three = s32[] constant(3)
  ROOT lt = pred[] compare(i, three), direction=LT
}

ENTRY main {
  x = f32[8] parameter(0)
  zero = s32[] constant(0)
  init = (s32[], f32[8]) tuple(zero, x)
  w = (s32[], f32[8]) while(init), condition=outer_cond, body=outer_body
  ROOT y = f32[8] get-tuple-element(w), index=1
}
"""


def test_nested_loops_compile_every_level_into_one_module():
    compilation, module = compiled(NESTED_LOOPS)
    check(compilation.executable, module, [np.arange(8, dtype=np.float32)])
    assert_nested_fusions_native(compilation, {"outer_cond", "outer_body", "inner_cond", "inner_body"})
    native = compilation.executable.native
    # One LLVM module: every kernel's symbol is in the one IR text.
    assert all(f'define void @"{symbol}"(' in native.kernels.llvm_ir
               for symbol in native.kernel_symbols.values())


def test_loop_runs_concurrently_on_threads():
    compilation, module = compiled(COUNTED_LOOP % 50)
    bias = np.zeros(16, np.float32)
    inputs = [np.full(16, k / 10, np.float32) for k in range(8)]
    want = [flatten(evaluate(module, [x, bias]))[1] for x in inputs]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda x: compilation.executable.run([x, bias])[1], inputs))
    for g, w in zip(got, want):
        assert compare_arrays(g, w)[0]


# ---- conditional ---------------------------------------------------------------------------

INDEXED = """HloModule indexed

neg_exp {
  x = f32[16] parameter(0)
  e = f32[16] exponential(x)
  ROOT n = f32[16] negate(e)
}

twice {
  x = f32[16] parameter(0)
  two = f32[] constant(2)
  b = f32[16] broadcast(two), dimensions={}
  ROOT m = f32[16] multiply(x, b)
}

constant_branch {
  x = f32[16] parameter(0)
  ROOT c = f32[16] constant({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16})
}

ENTRY main {
  index = s32[] parameter(0)
  x = f32[16] parameter(1)
  ROOT r = f32[16] conditional(index, x, x, x), branch_computations={neg_exp, twice, constant_branch}
}
"""


@pytest.mark.parametrize("index", [0, 1, 2, 3, -1, 100])
def test_indexed_conditional_out_of_range_runs_the_last_branch(index):
    compilation, module = compiled(INDEXED)
    x = np.linspace(-1, 1, 16, dtype=np.float32)
    (got,) = check(compilation.executable, module, [np.array(index, np.int32), x])
    if index in (2, 3, -1, 100):
        # A constant branch: the caller gets a copy it may change freely.
        got[:] = 0
        (again,) = compilation.executable.run([np.array(index, np.int32), x])
        assert again[0] == 1
    native = compilation.executable.native
    assert native.interpreted == {} and native.interpreted_ops == {}
    assert set(nested_fusions(compilation)) == {"neg_exp", "twice", "constant_branch"}


PREDICATED = """HloModule predicated

add_reduce {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

on_true {
  p = (f32[16], f32[]) parameter(0)
  x = f32[16] get-tuple-element(p), index=0
  k = f32[] get-tuple-element(p), index=1
  kb = f32[16] broadcast(k), dimensions={}
  ROOT y = f32[16] multiply(x, kb)
}

on_false {
  x = f32[16] parameter(0)
  ROOT y = f32[16] tanh(x)
}

identity {
  x = f32[16] parameter(0)
  ROOT y = f32[16] copy(x)
}

ENTRY main {
  x = f32[16] parameter(0)
  zero = f32[] constant(0)
  total = f32[] reduce(x, zero), dimensions={0}, to_apply=add_reduce
  positive = pred[] compare(total, zero), direction=GT
  k = f32[] constant(3)
  pair = (f32[16], f32[]) tuple(x, k)
  r = f32[16] conditional(positive, pair, x), true_computation=on_true, false_computation=on_false
  passed = f32[16] conditional(positive, x, x), true_computation=identity, false_computation=identity
  ROOT out = (f32[16], f32[16]) tuple(r, passed)
}
"""


@pytest.mark.parametrize("sign", [1, -1])
def test_predicated_conditional(sign):
    compilation, module = compiled(PREDICATED)
    x = sign * np.linspace(0.1, 1, 16).astype(np.float32)
    r, passed = check(compilation.executable, module, [x])
    assert not np.shares_memory(passed, x)
    native = compilation.executable.native
    assert native.interpreted == {} and native.interpreted_ops == {}
    assert {"on_true", "on_false"} <= set(nested_fusions(compilation))


# ---- call (kept by building the executable without the optimizer, which inlines calls) ----

CALL = """HloModule calls

fused_scale {
  a = f32[8] parameter(0)
  c = f32[] constant(3)
  b = f32[8] broadcast(c), dimensions={}
  ROOT m = f32[8] multiply(a, b)
}

scale {
  x = f32[8] parameter(0)
  ROOT f_1 = f32[8] fusion(x), kind=kLoop, calls=fused_scale
}

fused_shift {
  a = f32[8] parameter(0)
  one = f32[] constant(1)
  b = f32[8] broadcast(one), dimensions={}
  ROOT s = f32[8] add(a, b)
}

ENTRY main {
  x = f32[8] parameter(0)
  y = f32[8] call(x), to_apply=scale
  f.1 = f32[8] fusion(y), kind=kLoop, calls=fused_shift
  z = f32[8] call(f.1), to_apply=scale
  ROOT out = (f32[8], f32[8]) tuple(y, z)
}
"""


def test_call_runs_its_computation_as_a_compiled_program():
    module = parse_hlo(CALL)
    executable = build_executable(module, "cpu")
    check(executable, module, [np.arange(8, dtype=np.float32)])
    native = executable.native
    assert set(native.programs) == {"main", "scale"}
    assert native.interpreted == {}
    # %f.1 (entry) and %f_1 (in %scale) would both be nbxla_f_1: the entry keeps that form.
    assert native.kernel_symbols["f.1"] == "nbxla_f_1"
    assert native.kernel_symbols["f_1"] != "nbxla_f_1"
    assert set(native.kernel_symbols.values()) == set(native.kernels.specs)


def test_records_list_nothing_interpreted_for_control_flow():
    compilation, module = compiled(COUNTED_LOOP % 10)
    native = compilation.executable.native
    assert "w" not in native.interpreted_ops and native.library_calls == {}
    assert {"main", "body", "cond"} == set(native.programs)


NESTED_REFUSED_FUSION = """HloModule nested_sort

less {
  l = f32[] parameter(0)
  r = f32[] parameter(1)
  ROOT lt = pred[] compare(l, r), direction=LT
}

fused_sort {
  a = f32[4,4] parameter(0)
  b = f32[4,4] parameter(1)
  s = f32[4,4] add(a, b)
  ROOT d = f32[4,4] sort(s), dimensions={1}, to_apply=less
}

fused_step {
  i = s32[] parameter(0)
  one = s32[] constant(1)
  ROOT i1 = s32[] add(i, one)
}

fused_test {
  i = s32[] parameter(0)
  three = s32[] constant(3)
  ROOT lt = pred[] compare(i, three), direction=LT
}

body {
  p = (s32[], f32[4,4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[4,4] get-tuple-element(p), index=1
  i1 = s32[] fusion(i), kind=kLoop, calls=fused_step
  x1 = f32[4,4] fusion(x, x), kind=kLoop, calls=fused_sort
  ROOT next = (s32[], f32[4,4]) tuple(i1, x1)
}

cond {
  p = (s32[], f32[4,4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  ROOT t = pred[] fusion(i), kind=kLoop, calls=fused_test
}

ENTRY main {
  x = f32[4,4] parameter(0)
  zero = s32[] constant(0)
  init = (s32[], f32[4,4]) tuple(zero, x)
  w = (s32[], f32[4,4]) while(init), condition=cond, body=body
  ROOT y = f32[4,4] get-tuple-element(w), index=1
}
"""


def test_nested_fusion_the_code_generator_refuses_is_listed_and_interpreted():
    module = parse_hlo(NESTED_REFUSED_FUSION)
    executable = build_executable(module, "cpu")
    check(executable, module, [np.eye(4, dtype=np.float32) * 0.5 + 0.1])
    native = executable.native
    assert set(native.interpreted) == {"x1"} and "sort" in native.interpreted["x1"]
    assert {"i1", "t"} <= set(native.kernel_symbols)
    assert all(native.kernel_symbols[n] in native.kernels.addresses for n in ("i1", "t"))
