"""The native loops' support code (aot_runtime.c's routines, an object of their own) and driver
compiled on threads while LLVM optimizes the loops' kernels (aot_support.SupportInBackground):
started before LLVM's optimizer runs and linked after, the jit's result unchanged; a failure is
raised where the object is waited for; routines other than those started are compiled when
asked for, another driver by _link itself."""

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


def test_the_c_compiles_while_llvm_optimizes_the_loop(monkeypatch):
    """LLVM's optimizer waits (up to 60 s) for both C compiles to have begun: done one after
    the other, as before, it would wait in vain."""
    monkeypatch.setenv("NBXLA_CACHE_DIR", "off")
    monkeypatch.setattr(native_loops, "_RUNTIME_OBJECTS", [])     # (compiled afresh here)
    begun = {"support": threading.Event(), "driver": threading.Event()}
    compile_support, compile_driver = aot.compile_runtime_object, aot.driver_object

    def support(names):
        begun["support"].set()
        return compile_support(names)

    def driver(c_source):
        begun["driver"].set()
        return compile_driver(c_source)
    monkeypatch.setattr(native_loops, "compile_runtime_object", support)
    monkeypatch.setattr(aot, "driver_object", driver)
    optimize, waited = aot.optimize_module, []

    def optimize_meanwhile(*args, **kwargs):
        waited.append({what: event.wait(60) for what, event in begun.items()})
        return optimize(*args, **kwargs)
    monkeypatch.setattr(aot, "optimize_module", optimize_meanwhile)
    linked = []
    run_tool = aot.run_tool
    monkeypatch.setattr(aot, "run_tool", lambda cmd, what: (linked.append(what), run_tool(cmd, what))[1])
    rng = np.random.default_rng(3)
    G = rng.random((400, 3, 3)) + 1j * rng.random((400, 3, 3))
    H = rng.random((400, 3, 3)) + 1j * rng.random((400, 3, 3))
    f = nbxla.jit(complex_products)
    np.testing.assert_allclose(f(G, H), complex_products(G, H), rtol=1e-12)
    assert waited == [{"support": True, "driver": True}]
    assert "linking the driver" in linked


def _driver_calling(*routines):
    return "/* interface */\n" + GENERATED + "\n" + "".join(f"  {r}(a, b, c);\n" for r in routines)


def test_a_failed_compile_is_raised_where_it_is_waited_for():
    def fail(what):
        def compile_it(arg):
            raise AotError(f"{what} failed (exit 1)")
        return compile_it
    support = SupportInBackground(fail("compiling the support code"), fail("compiling the driver"))
    c_source = _driver_calling("nbxla_gemm_c128")
    support.start(c_source)
    with pytest.raises(AotError, match="compiling the support code failed"):
        support({"nbxla_gemm_c128"})
    with pytest.raises(AotError, match="compiling the driver failed"):
        support.driver_object(c_source)


def test_other_routines_than_those_started_are_compiled_when_asked_for():
    asked = []
    support = SupportInBackground(lambda names: (asked.append(set(names)), b"obj %d" % len(asked))[1])
    support.start(_driver_calling("nbxla_gemm_c128", "nbxla_k_add_fusion_3"))
    assert support({"nbxla_gemm_c128"}) == b"obj 1"       # (the kernel is no support routine)
    assert support({"nbxla_sort"}) == b"obj 2"
    assert asked == [{"nbxla_gemm_c128"}, {"nbxla_sort"}]
    assert support_routines(_driver_calling("nbxla_gemm_f64")) == {"nbxla_gemm_f64"}
    never_started = SupportInBackground(lambda names: b"now", lambda c_source: b"driver")
    assert never_started({"nbxla_gemm_f64"}) == b"now"
    assert never_started.driver_object(_driver_calling("nbxla_gemm_f64")) is None   # (_link compiles it)
    driver = SupportInBackground(lambda names: b"obj", lambda c_source: b"driver " + c_source[-12:].encode())
    driver.start(_driver_calling("nbxla_sort"))
    assert driver.driver_object(_driver_calling("nbxla_sort")) == b"driver " + _driver_calling("nbxla_sort")[-12:].encode()
    assert driver.driver_object(_driver_calling("nbxla_gemm_f64")) is None    # (another driver)
