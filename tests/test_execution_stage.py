"""The CPU backend's ``execution`` stage says how every instruction runs."""

import numpy as np

import nbxla
from nbxla.compiler import compile_module
from nbxla.hlo.parser import parse_hlo
from nbxla.runtime.cache import CompilationCache

WHILE = """
HloModule counted
cond {
  s = (s32[], f32[8]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(5)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  s = (s32[], f32[8]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  x = f32[8] get-tuple-element(s), index=1
  one = s32[] constant(1)
  j = s32[] add(i, one)
  y = f32[8] tanh(x)
  half = f32[] constant(0.5)
  h = f32[8] broadcast(half), dimensions={}
  z = f32[8] multiply(y, h)
  ROOT t = (s32[], f32[8]) tuple(j, z)
}
ENTRY main {
  x = f32[8] parameter(0)
  zero = s32[] constant(0)
  s = (s32[], f32[8]) tuple(zero, x)
  w = (s32[], f32[8]) while(s), condition=cond, body=body
  ROOT r = f32[8] get-tuple-element(w), index=1
}
"""


def test_control_flow_programs_and_kernels_are_described():
    c = compile_module(parse_hlo(WHILE), "cpu")
    text = c.stage("execution")
    assert "execution" in c.stages
    assert "entry %main" in text and "program %cond" in text and "program %body" in text
    assert "%w: host loop over compiled program(s) %cond, %body" in text
    assert "native kernel nbxla_" in text and "evaluator rule" not in text
    x = np.linspace(-1, 1, 8, dtype=np.float32)
    want = compile_module(parse_hlo(WHILE), "evaluator").executable.run([x])[0]
    np.testing.assert_allclose(c.executable.run([x])[0], want, rtol=1e-6)


def test_library_calls_threads_and_the_arena_are_described():
    f = nbxla.jit(lambda a, b: (np.sort(a @ b, axis=1), np.exp(a).sum()), cache=CompilationCache())
    rng = np.random.default_rng(0)
    f(rng.random((300, 400), dtype=np.float32), rng.random((400, 500), dtype=np.float32))
    text = f.last_compilation.stage("execution")
    assert "library call: np.matmul (NumPy's BLAS)" in text
    assert "library call: NumPy's stable argsort/lexsort" in text
    assert "+ _finish" in text


def test_interpreted_ops_say_why():
    text = """
HloModule t
ENTRY main {
  x = f32[4] parameter(0)
  ROOT y = f32[4] custom-call(x), custom_call_target="no_such_target"
}"""
    c = compile_module(parse_hlo(text), "cpu")
    assert "%y: evaluator rule" in c.stage("execution")
