"""Stencil kernels (reads of an array at shifted positions, written into another array) run
their vector loops: every loop kernel's loads and stores are marked as not aliasing
(``codegen/loops``), so LLVM's vectorizer adds no run-time overlap check.  Such a check covers
each buffer's whole footprint -- a stencil reads a row before and a row after its array -- and
failed whenever the buffer plan put two arrays next to each other in its arena, sending the
kernel to its scalar loop (channel flow's right-hand side and pressure stencil ran 3x slower).
The results must stay NumPy's: in the loop of a time-stepping program too, where the arena
places the new state right beside the old one."""

from __future__ import annotations

import re

import numpy as np
import pytest

import nbxla


def fresh_stencil(u, v):
    """Into zeros: an interior window and two periodic boundary columns (a chain of updates)."""
    b = np.zeros_like(u)
    b[1:-1, 1:-1] = (u[1:-1, 2:] - u[1:-1, :-2]) / 3.0 + (v[2:, 1:-1] - v[:-2, 1:-1]) ** 2
    b[1:-1, -1] = (u[1:-1, 0] - u[1:-1, -2]) / 3.0 + (v[2:, -1] - v[:-2, -1]) ** 2
    b[1:-1, 0] = (u[1:-1, 1] - u[1:-1, -1]) / 3.0 + (v[2:, 0] - v[:-2, 0]) ** 2
    return b


def copied_stencil(p, b):
    """Into a copy of an argument the caller keeps (the copy's buffer is new)."""
    q = p.copy()
    q[1:-1, 1:-1] = 0.25 * (p[1:-1, 2:] + p[1:-1, :-2] + p[2:, 1:-1] + p[:-2, 1:-1]) - b[1:-1, 1:-1]
    return q


def relaxed(p, b):
    """A time loop: each step's stencil reads the state and writes the next one, then copies
    its boundary rows (NumPy's ``pn = p.copy(); p[1:-1, 1:-1] = f(pn)``)."""
    for _ in range(6):
        pn = p.copy()
        p[1:-1, 1:-1] = 0.25 * (pn[1:-1, 2:] + pn[1:-1, :-2] + pn[2:, 1:-1] + pn[:-2, 1:-1]) - b[1:-1, 1:-1]
        p[1:-1, -1] = 0.5 * (pn[1:-1, 0] + pn[1:-1, -2]) - b[1:-1, -1]
        p[1:-1, 0] = 0.5 * (pn[1:-1, 1] + pn[1:-1, -1]) - b[1:-1, 0]
        p[-1, :] = p[-2, :]
        p[0, :] = p[1, :]


def _kernels(text: str) -> list[str]:
    """The optimized IR's kernel functions (not the native loop's or an entry's driver)."""
    return [k for k in text.split("define ")[1:] if not k.split("(")[0].endswith("_objects")]


@pytest.mark.parametrize("fn", [fresh_stencil, copied_stencil], ids=lambda f: f.__name__)
def test_stencil_kernels_vectorize_without_overlap_checks(fn):
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((40, 40)) for _ in range(2)]
    compiled = nbxla.jit(fn, device="cpu")
    np.testing.assert_allclose(compiled(*args), fn(*args), rtol=1e-13, atol=1e-13)
    text = compiled.last_compilation.stage("llvm_ir_optimized")
    stencils = [k for k in _kernels(text) if "dynamic_update_slice" in k.split("(")[0]]
    assert stencils, "no update kernel compiled"
    for kernel in stencils:
        assert re.search(r"<\d+ x double>", kernel), kernel[:300]
        assert "found.conflict" not in kernel and "diff.check" not in kernel, kernel[:300]


@pytest.mark.parametrize("n", [12, 33])
def test_a_time_loop_of_stencils_matches_numpy(n):
    rng = np.random.default_rng(n)
    p, b = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    want, got = p.copy(), p.copy()
    relaxed(want, b)
    nbxla.jit(relaxed, device="cpu")(got, b)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_each_inlined_kernel_gets_alias_scopes_of_its_own():
    """A kernel's "inputs do not alias outputs" holds within one call only.  Inlined twice into
    one function (a native loop's steps), the first call's stores and the second call's loads
    must not be declared apart: LLVM clones a kernel's scopes for each place it inlines it,
    which it can only do for self-referencing (distinct) scope nodes."""
    from llvmlite import binding as llvm, ir

    from nbxla.codegen.cpu import host_target_machine, optimize_module
    from nbxla.codegen.elemental import const_i64
    from nbxla.codegen.toolkit import KernelBuffers, counted_loop, kernel_function
    from nbxla.hlo.shapes import Shape

    module = ir.Module("scopes")
    shape = Shape("f64", (64,))
    fn, b = kernel_function(module, "twice")           # out[i] = 2 * in[i], marked
    fn.linkage = "internal"
    bufs = KernelBuffers(b, fn.args[0], [shape, shape], first_output=1)
    counted_loop(b, fn.args[1], fn.args[2], "i",
                 lambda i: bufs.store(b, 1, i, b.fmul(bufs.load(b, 0, i), ir.Constant(ir.DoubleType(), 2.0))))
    b.ret_void()
    ptr = ir.IntType(8).as_pointer()
    step = ir.Function(module, ir.FunctionType(ir.VoidType(), [ptr, ptr, ptr]), "two_steps")
    b = ir.IRBuilder(step.append_basic_block("entry"))
    for src, dst in ((0, 1), (1, 2)):                  # x -> y, then y -> z
        slots = b.alloca(ptr, 2)
        b.store(step.args[src], b.gep(slots, [const_i64(0)]))
        b.store(step.args[dst], b.gep(slots, [const_i64(1)]))
        b.call(fn, [slots, const_i64(0), const_i64(64)])
    b.ret_void()
    module.triple = llvm.get_process_triple()
    tm = host_target_machine()
    module.data_layout = str(tm.target_data)
    parsed = llvm.parse_assembly(str(module))
    parsed.verify()
    optimize_module(parsed, tm)
    text = str(parsed)
    body = text[text.index("@two_steps"):]
    body = body[:body.index("\n}")]
    assert "call " not in body.replace("call void @llvm", ""), "the kernel was not inlined"
    scopes = set(re.findall(r"!alias\.scope (![0-9]+)", body))
    assert len(scopes) >= 2, f"both inlined copies share the alias scopes {scopes}"
