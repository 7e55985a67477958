"""The native loops' support code (aot_runtime.c's routines, an object of their own) compiled
on a thread while LLVM optimizes the loops' kernels (aot_support.SupportInBackground): started
before LLVM's optimizer runs, the jit's result unchanged; a failure is raised where the object
is waited for; routines other than those started are compiled when asked for."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import nbxla
from nbxla.codegen import aot
from nbxla.codegen.aot_support import GENERATED, SupportInBackground, support_routines
from nbxla.errors import AotError
from nbxla.runtime import native_loops


def complex_products(G, H):
    acc = np.zeros(G.shape[1:], dtype=G.dtype)
    for a in range(G.shape[0]):          # (long enough to roll: a native loop calling the C GEMM)
        acc = acc + G[a] @ H[a]
    return acc


def test_the_support_code_compiles_while_llvm_optimizes_the_loop(monkeypatch):
    monkeypatch.setenv("NBXLA_CACHE_DIR", "off")
    monkeypatch.setattr(native_loops, "_RUNTIME_OBJECTS", [])     # (compiled afresh here)
    events = []
    support_done = threading.Event()
    compile_support = aot.compile_runtime_object

    def support(names):
        events.append("support started")
        try:
            return compile_support(names)
        finally:
            support_done.set()
    monkeypatch.setattr(native_loops, "compile_runtime_object", support)
    optimize = aot.optimize_module

    def optimize_then_note(*args, **kwargs):
        events.append("llvm optimizes")
        return optimize(*args, **kwargs)
    monkeypatch.setattr(aot, "optimize_module", optimize_then_note)
    rng = np.random.default_rng(3)
    G = rng.random((400, 3, 3)) + 1j * rng.random((400, 3, 3))
    H = rng.random((400, 3, 3)) + 1j * rng.random((400, 3, 3))
    f = nbxla.jit(complex_products)
    np.testing.assert_allclose(f(G, H), complex_products(G, H), rtol=1e-12)
    assert support_done.is_set()
    assert events[:2] == ["support started", "llvm optimizes"], events


def _driver_calling(*routines):
    return "/* interface */\n" + GENERATED + "\n" + "".join(f"  {r}(a, b, c);\n" for r in routines)


def test_a_failed_support_compile_is_raised_where_it_is_waited_for():
    def fail(names):
        raise AotError("compiling the support code failed (exit 1)")
    support = SupportInBackground(fail)
    support.start(_driver_calling("nbxla_gemm_c128"))
    with pytest.raises(AotError, match="compiling the support code failed"):
        support({"nbxla_gemm_c128"})


def test_other_routines_than_those_started_are_compiled_when_asked_for():
    asked = []
    support = SupportInBackground(lambda names: (asked.append(set(names)), b"obj %d" % len(asked))[1])
    support.start(_driver_calling("nbxla_gemm_c128", "nbxla_k_add_fusion_3"))
    assert support({"nbxla_gemm_c128"}) == b"obj 1"       # (the kernel is no support routine)
    assert support({"nbxla_sort"}) == b"obj 2"
    assert asked == [{"nbxla_gemm_c128"}, {"nbxla_sort"}]
    assert support_routines(_driver_calling("nbxla_gemm_f64")) == {"nbxla_gemm_f64"}
    never_started = SupportInBackground(lambda names: b"now")
    assert never_started({"nbxla_gemm_f64"}) == b"now"
