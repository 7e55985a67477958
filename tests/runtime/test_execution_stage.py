"""The CPU backend's ``execution`` stage says how every instruction runs."""

import shutil

import numpy as np
import pytest

import nbxla
from nbxla.compiler import compile_module
from nbxla.hlo.parser import parse_hlo
from nbxla.runtime.cache import CompilationCache

from tests.runtime.test_cpu_control_flow import COUNTED_LOOP, check


def test_control_flow_programs_and_kernels_are_described(monkeypatch):
    monkeypatch.setenv("NBXLA_NATIVE_LOOPS", "0")
    module = parse_hlo(COUNTED_LOOP % 5)
    c = compile_module(module, "cpu")
    text = c.stage("execution")
    assert "execution" in c.stages
    assert "entry %main" in text and "program %cond" in text and "program %body" in text
    assert "%w: host loop over compiled program(s) %cond, %body" in text
    assert "native kernel nbxla_" in text and "evaluator rule" not in text
    check(c.executable, module, [np.linspace(-1, 1, 16, dtype=np.float32), np.ones(16, np.float32)])


def test_native_loop_is_described():
    """(With a C compiler the loop is one C function; tests/runtime/test_native_loops.py)"""
    module = parse_hlo(COUNTED_LOOP % 5)
    c = compile_module(module, "cpu")
    if shutil.which("cc") is None:
        pytest.skip("no C compiler: loops stay host-driven")
    assert "%w: native loop: one C function runs %cond, %body" in c.stage("execution")
    check(c.executable, module, [np.linspace(-1, 1, 16, dtype=np.float32), np.ones(16, np.float32)])


def test_library_calls_threads_and_the_arena_are_described():
    f = nbxla.jit(lambda a, b: (np.sort(a @ b, axis=1), np.exp(a).sum()), cache=CompilationCache())
    rng = np.random.default_rng(0)
    f(rng.random((300, 400), dtype=np.float32), rng.random((400, 500), dtype=np.float32))
    text = f.last_compilation.stage("execution")
    assert "library call: GEMM (NumPy's BLAS" in text
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
