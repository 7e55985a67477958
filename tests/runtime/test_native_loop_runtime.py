"""The native loops' support code (aot_runtime.c) compiled once and linked into each loop
library (codegen/aot.py: compile_runtime_object; runtime/native_loops.py: support_object):
kept per process and in the persistent cache; a library built with it computes what one with
the support code compiled in does."""

from __future__ import annotations

import ctypes
import os
import shutil

import numpy as np
import pytest

from nbxla.codegen import aot
from nbxla.compiler import compile_module
from nbxla.hlo.parser import parse_hlo
from nbxla.runtime import native_loops
from nbxla.runtime.cpu_kernels import PARALLEL_THRESHOLD
from nbxla.runtime.persistent_cache import PersistentCache

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")

# A loop whose body has a dot: a step of the support code (C), not a loop compiled in LLVM.
DOT_LOOP = """HloModule dotloop
cond {
  p = (s32[], f64[4,4], f64[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(5)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  p = (s32[], f64[4,4], f64[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  a = f64[4,4] get-tuple-element(p), index=1
  x = f64[4] get-tuple-element(p), index=2
  one = s32[] constant(1)
  j = s32[] add(i, one)
  y = f64[4] dot(a, x), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT t = (s32[], f64[4,4], f64[4]) tuple(j, a, y)
}
ENTRY e {
  a = f64[4,4] parameter(0)
  x = f64[4] parameter(1)
  z = s32[] constant(0)
  s = (s32[], f64[4,4], f64[4]) tuple(z, a, x)
  w = (s32[], f64[4,4], f64[4]) while(s), condition=cond, body=body
  ROOT r = f64[4] get-tuple-element(w), index=2
}
"""


def _library(tmp_path, name: str, runtime_object) -> ctypes.CDLL:
    module = compile_module(parse_hlo(DOT_LOOP), "cpu").optimized
    path = str(tmp_path / name)
    aot.compile_shared_library({"f": module.entry}, path, parallel_threshold=PARALLEL_THRESHOLD,
                               runtime_object=runtime_object)
    return ctypes.CDLL(path)


def _call(lib, a, x):
    out = np.empty(4)
    lib.f.restype = ctypes.c_int
    assert lib.f(ctypes.c_void_p(a.ctypes.data), ctypes.c_void_p(x.ctypes.data),
                 ctypes.c_void_p(out.ctypes.data)) == 0
    return out


def test_a_library_linked_with_the_compiled_support_code_computes_the_same(tmp_path):
    rng = np.random.default_rng(0)
    a, x = rng.random((4, 4)) / 4, rng.random(4)
    want = x
    for _ in range(5):
        want = a @ want
    separate = _library(tmp_path, "separate.so", aot.compile_runtime_object)
    together = _library(tmp_path, "together.so", None)
    np.testing.assert_allclose(_call(separate, a, x), want, rtol=1e-12)
    np.testing.assert_allclose(_call(together, a, x), want, rtol=1e-12)


def test_the_support_code_is_compiled_once_and_kept_in_the_persistent_cache(tmp_path, monkeypatch):
    store = PersistentCache(str(tmp_path / "cache"))
    monkeypatch.setattr(native_loops, "_RUNTIME_OBJECTS", [])
    compiled = []

    def compile_once(names):
        compiled.append(set(names))
        return aot.compile_runtime_object(names)
    monkeypatch.setattr(native_loops, "compile_runtime_object", compile_once)
    first = native_loops.support_object(store, {"nbxla_gemm_f64", "nbxla_parallel"})
    assert first and any(name.startswith("aot-runtime-") for name in os.listdir(tmp_path / "cache"))
    assert native_loops.support_object(store, {"nbxla_gemm_f64"}) == first      # (a subset: this one)
    monkeypatch.setattr(native_loops, "_RUNTIME_OBJECTS", [])
    assert native_loops.support_object(store, {"nbxla_gemm_f64", "nbxla_parallel"}) == first  # (from disk)
    assert len(compiled) == 1
    # A routine not compiled yet: a new object with it and every routine needed before.
    native_loops.support_object(store, {"nbxla_sort"})
    assert compiled[-1] == {"nbxla_gemm_f64", "nbxla_parallel", "nbxla_sort"}


def test_the_routines_a_driver_calls_are_found_by_the_interfaces_names():
    """Every routine the interface of aot_runtime.c declares is matched by the pattern that
    picks the routines a driver needs (one missing would be static: a link error)."""
    import re
    with open(aot.RUNTIME_C) as f:
        interface = f.read().split("/* ---- end of interface ---- */")[0]
    declared = set(re.findall(r"NBXLA_API\((nbxla_\w+)\)", interface))
    for family in ("gemm", "conv"):
        for t in ("f32", "f64", "c64", "c128", "s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64"):
            declared |= {f"nbxla_{family}_{t}"} | ({f"nbxla_gemm_{t}_prepacked"} if family == "gemm" else set())
    declared |= {f"nbxla_masked_dot_{t}" for t in ("f32", "f64", "c64", "c128")}
    assert all(aot._RUNTIME_API.fullmatch(name) for name in declared), \
        sorted(n for n in declared if not aot._RUNTIME_API.fullmatch(n))
    assert not aot._RUNTIME_API.fullmatch("nbxla_k_add_fusion_3") and not aot._RUNTIME_API.fullmatch("nbxla_p1")
