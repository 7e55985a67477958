"""Fusions holding a dot, as XLA and JAX print them: dot + bias + relu (``kind=kOutput``),
XLA:CPU's dot-only ``kCustom`` fusions, small batched dots with an epilogue in a loop fusion.

Small products keep their fusion and run as one native dot kernel (codegen/dot_kernels.py);
large ones, and fusions in another form, are split by the imported-fusions pass into a BLAS
call and an epilogue kernel.  Both sides of the threshold are checked against the reference
evaluator on the module as written, and neither runs anything on the evaluator.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from nbxla.compiler import compile_module
from nbxla.hlo.evaluator import evaluate, flatten
from nbxla.hlo.parser import parse_hlo
from nbxla.passes.fused_dots import SMALL_DOT_WORK
from nbxla.testing import compare_arrays

RNG = np.random.default_rng(11)
NUMPY_TYPES = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "bf16": ml_dtypes.bfloat16,
               "s32": np.int32, "s8": np.int8, "c64": np.complex64, "c128": np.complex128}


def sample(t: str, dims) -> np.ndarray:
    if t[0] == "s":
        return RNG.integers(-5, 6, dims).astype(NUMPY_TYPES[t])
    if t[0] == "c":
        return (RNG.standard_normal(dims) + 1j * RNG.standard_normal(dims)).astype(NUMPY_TYPES[t])
    return RNG.standard_normal(dims).astype(NUMPY_TYPES[t])


def interpreted(executable) -> dict:
    """What runs on the reference evaluator (fusions and standalone ops, with the reason)."""
    native = executable.native
    return {**native.interpreted, **native.interpreted_ops}


def run_and_check(text: str, inputs: list, rtol=None):
    """The compiled module's results against the evaluator's on the module as written; returns
    the compilation.  Fails when anything ran on the evaluator.  f32 sums of tens of products
    of unit normals, added in another order than NumPy's BLAS, differ by a few ulps of the
    terms (not of a sum that cancels): f32 outputs get an absolute tolerance of 1e-5."""
    comp = compile_module(parse_hlo(text), "cpu")
    got = comp.executable.run(inputs)
    with np.errstate(all="ignore"):
        want = flatten(evaluate(parse_hlo(text), inputs))
    assert not interpreted(comp.executable), interpreted(comp.executable)
    assert_no_evaluator_steps(comp.executable.native)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        w = np.asarray(w)
        atol = 1e-5 if w.dtype == np.float32 else None
        ok, detail = compare_arrays(np.asarray(g), w, rtol=rtol, atol=atol)
        assert ok, detail
    return comp


def assert_no_evaluator_steps(native) -> None:
    """Every step of every program of the executable (its thunks, as ``describe`` lists them
    for the execution stage) is a kernel, a library call, a view or control flow: none runs
    an evaluator rule."""
    steps = [line for line in native.describe().splitlines() if line.startswith("  %")]
    assert not [line for line in steps if "evaluator" in line], native.describe()


def how_fusions_run(comp) -> dict[str, str]:
    return comp.pipeline.facts["imported-fusions"]


def dot_fusion_module(lhs: tuple, rhs: tuple, out: tuple, dnums: str, types=("f32", "f32", "f32"),
                      epilogue: str = "relu", kind: str = "kOutput") -> tuple[str, list]:
    """A module whose entry is one fusion: dot(p0, p1) with ``dnums`` and an epilogue:
    "none", "relu" (+ bias p2 along the last dim, then max with 0), "tanh2" (tanh(2 * dot))."""
    lt, rt, ot = types
    def shape(t, dims):
        return f"{t}[{','.join(map(str, dims))}]"
    L, R, O = shape(lt, lhs), shape(rt, rhs), shape(ot, out)
    params = [f"p0: {L}", f"p1: {R}"]
    body = [f"  %p0 = {L} parameter(0)", f"  %p1 = {R} parameter(1)",
            f"  %dot.1 = {O} dot({L} %p0, {R} %p1), {dnums}"]
    inputs = [sample(lt, lhs), sample(rt, rhs)]
    if epilogue == "none":
        body[-1] = body[-1].replace("  %dot.1", "  ROOT %dot.1")
    elif epilogue == "relu":
        B = shape(ot, out[-1:])
        params.append(f"p2: {B}")
        inputs.append(sample(ot, out[-1:]))
        body += [f"  %p2 = {B} parameter(2)",
                 f"  %bias = {O} broadcast({B} %p2), dimensions={{{len(out) - 1}}}",
                 f"  %add = {O} add({O} %dot.1, {O} %bias)",
                 f"  %zero = {ot}[] constant(0)",
                 f"  %zeros = {O} broadcast({ot}[] %zero), dimensions={{}}",
                 f"  ROOT %relu = {O} maximum({O} %add, {O} %zeros)"]
    elif epilogue == "tanh2":
        body += [f"  %two = {ot}[] constant({'(2, 0)' if ot[0] == 'c' else 2})",
                 f"  %twos = {O} broadcast({ot}[] %two), dimensions={{}}",
                 f"  %mul = {O} multiply({O} %dot.1, {O} %twos)",
                 f"  ROOT %tanh = {O} tanh({O} %mul)"]
    names = [p.split(":")[0] for p in params]
    text = "\n".join([
        "HloModule fused_dot",
        "",
        f"%fused_computation ({', '.join(params)}) -> {O} {{", *body, "}",
        "",
        f"ENTRY %main ({', '.join(p.replace('p', 'a', 1) for p in params)}) -> {O} {{",
        *[f"  %{n.replace('p', 'a', 1)} = {p.split(': ')[1]} parameter({k})" for k, (n, p) in enumerate(zip(names, params))],
        f"  ROOT %fusion = {O} fusion({', '.join('%' + n.replace('p', 'a', 1) for n in names)}), "
        f"kind={kind}, calls=%fused_computation",
        "}",
    ])
    return text, inputs


MATMUL = "lhs_contracting_dims={1}, rhs_contracting_dims={0}"
BATCHED = "lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}"


def test_kOutput_dot_bias_relu_small_runs_as_one_native_kernel():
    text, inputs = dot_fusion_module((8, 32), (32, 16), (8, 16), MATMUL)
    comp = run_and_check(text, inputs)
    assert how_fusions_run(comp)["fusion"].startswith("kept")
    assert "dot" in comp.executable.native.kernels.specs[comp.executable.native.kernel_symbols["fusion"]].style


def test_kOutput_dot_bias_relu_large_is_split_into_blas_and_epilogue():
    m, k, n = 64, 64, 64
    assert m * k * n > SMALL_DOT_WORK
    text, inputs = dot_fusion_module((m, k), (k, n), (m, n), MATMUL)
    comp = run_and_check(text, inputs)
    assert how_fusions_run(comp)["fusion"].startswith("split")
    assert "library call" in comp.stage("execution")


def test_threshold_both_sides_give_the_evaluators_answer():
    side = round(SMALL_DOT_WORK ** (1 / 3))
    for n, verdict in ((side, "kept"), (side + 1, "split")):
        text, inputs = dot_fusion_module((side, side), (side, n), (side, n), MATMUL, epilogue="tanh2")
        comp = run_and_check(text, inputs)
        assert how_fusions_run(comp)["fusion"].startswith(verdict), (n, how_fusions_run(comp))


@pytest.mark.parametrize("batch, m, k, n", [(64, 8, 16, 8), (3, 5, 7, 9), (128, 4, 4, 4), (2, 1, 33, 1)])
def test_batched_small_dots_in_a_loop_fusion(batch, m, k, n):
    text, inputs = dot_fusion_module((batch, m, k), (batch, k, n), (batch, m, n), BATCHED,
                                     epilogue="tanh2", kind="kLoop")
    comp = run_and_check(text, inputs)
    assert how_fusions_run(comp)["fusion"].startswith("kept")


@pytest.mark.parametrize("lhs, rhs, out, dnums", [
    # contracting the lhs's first dim (x.T @ w)
    ((32, 8), (32, 16), (8, 16), "lhs_contracting_dims={0}, rhs_contracting_dims={0}"),
    # matrix @ vector: the row's last dim is an lhs dim, the rhs does not vary along it
    ((12, 20), (20,), (12,), "lhs_contracting_dims={1}, rhs_contracting_dims={0}"),
    # vector . vector: a 0-d result
    ((40,), (40,), (), "lhs_contracting_dims={0}, rhs_contracting_dims={0}"),
    # batch as the last output dim (no free dims): both operands vary along the row
    ((6, 10), (6, 10), (6,), "lhs_batch_dims={0}, lhs_contracting_dims={1}, rhs_batch_dims={0}, "
                             "rhs_contracting_dims={1}"),
    # two contracting dims, batch dims not leading
    ((4, 3, 5, 2), (3, 2, 4, 6), (3, 5, 6),
     "lhs_batch_dims={1}, lhs_contracting_dims={0,3}, rhs_batch_dims={0}, rhs_contracting_dims={2,1}"),
    # a row longer than one accumulator chunk (256 columns): chunks and a remainder
    ((2, 3), (3, 600), (2, 600), MATMUL),
    # x @ w^T with a long row: the rhs strided along the row, too large to pack: inner products
    ((6, 40), (300, 40), (6, 300), "lhs_contracting_dims={1}, rhs_contracting_dims={1}"),
    # q @ k^T per batch element: the rhs packed on the stack per batch element
    ((5, 7, 12), (5, 9, 12), (5, 7, 9), "lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, "
                                        "rhs_contracting_dims={2}"),
    # the same with the contraction not minor (packed, strided reads while packing)
    ((5, 12, 7), (5, 12, 9), (5, 7, 9), "lhs_batch_dims={0}, lhs_contracting_dims={1}, rhs_batch_dims={0}, "
                                        "rhs_contracting_dims={1}"),
])
def test_dimension_numbers(lhs, rhs, out, dnums):
    text, inputs = dot_fusion_module(lhs, rhs, out, dnums, epilogue="none", kind="kCustom")
    run_and_check(text, inputs)


@pytest.mark.parametrize("types, rtol", [
    (("bf16", "bf16", "f32"), None), (("bf16", "bf16", "bf16"), None), (("f16", "f16", "f16"), 4e-3),
    (("f64", "f64", "f64"), None), (("s32", "s32", "s32"), None), (("s8", "s8", "s32"), None),
])
def test_element_types(types, rtol):
    text, inputs = dot_fusion_module((6, 24), (24, 10), (6, 10), MATMUL, types=types)
    run_and_check(text, inputs, rtol=rtol)


@pytest.mark.parametrize("t", ["c64", "c128"])
@pytest.mark.parametrize("lhs, rhs, out, dnums", [
    ((3, 3), (3, 3), (3, 3), MATMUL),                                   # columns
    ((7, 5), (5, 13), (7, 13), MATMUL),                                 # sizes off any vector width
    ((12, 20), (20,), (12,), MATMUL),                                   # matrix @ vector
    ((40,), (40,), (), "lhs_contracting_dims={0}, rhs_contracting_dims={0}"),
    ((2, 64), (200, 64), (2, 200), "lhs_contracting_dims={1}, rhs_contracting_dims={1}"),   # inner
    ((5, 7, 12), (5, 9, 12), (5, 7, 9), "lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, "
                                        "rhs_contracting_dims={2}"),                       # packed
])
@pytest.mark.parametrize("epilogue", ["none", "tanh2"])
def test_complex_dots_run_as_one_native_kernel(t, lhs, rhs, out, dnums, epilogue):
    """Complex products in every loop form of the kernel, with and without an epilogue,
    against the evaluator (complex sums in another order than NumPy's: to rounding)."""
    text, inputs = dot_fusion_module(lhs, rhs, out, dnums, types=(t,) * 3, epilogue=epilogue, kind="kOutput")
    comp = run_and_check(text, inputs, rtol=1e-4 if t == "c64" else 1e-12)
    assert how_fusions_run(comp)["fusion"].startswith("kept")


def test_complex_dot_of_real_operands_is_split():
    """The kernel converts operands between real types only: a c64 dot of f32 operands is split."""
    text, inputs = dot_fusion_module((4, 6), (6, 5), (4, 5), MATMUL, types=("f32", "f32", "c64"), epilogue="none")
    from nbxla.passes.fused_dots import dot_epilogue_refusal
    assert "f32 and f32 operands" in dot_epilogue_refusal(parse_hlo(text).computation("fused_computation"))


def test_large_integer_dot_stays_native():
    """No library call takes s32 products: a large one keeps its native kernel."""
    text, inputs = dot_fusion_module((40, 40), (40, 40), (40, 40), MATMUL, types=("s32",) * 3)
    comp = run_and_check(text, inputs)
    assert how_fusions_run(comp)["fusion"].startswith("kept")


def test_fusion_in_another_form_is_split():
    """The dot's result read transposed: not the kernel's form, so split (still native)."""
    text = """
HloModule transposed_epilogue
%fused (p0: f32[6,8], p1: f32[8,5]) -> f32[5,6] {
  %p0 = f32[6,8] parameter(0)
  %p1 = f32[8,5] parameter(1)
  %dot = f32[6,5] dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %t = f32[5,6] transpose(%dot), dimensions={1,0}
  ROOT %e = f32[5,6] exponential(%t)
}
ENTRY %main (a: f32[6,8], b: f32[8,5]) -> f32[5,6] {
  %a = f32[6,8] parameter(0)
  %b = f32[8,5] parameter(1)
  ROOT %f = f32[5,6] fusion(%a, %b), kind=kOutput, calls=%fused
}
"""
    comp = run_and_check(text, [sample("f32", (6, 8)), sample("f32", (8, 5))])
    assert how_fusions_run(comp)["f"].startswith("split")


def test_multi_output_fusion_with_computed_operands():
    """Operands computed inside the fusion (a transpose and a convert), the dot exported
    beside its epilogue (a tuple root), and a second fusion reading both."""
    text = """
HloModule multi_output
%fused (p0: f32[16,4,8], p1: f16[4,16,8]) -> (f32[4,8,8], f32[4,8,8]) {
  %p0 = f32[16,4,8] parameter(0)
  %t = f32[4,8,16] transpose(%p0), dimensions={1,2,0}
  %p1 = f16[4,16,8] parameter(1)
  %c = f32[4,16,8] convert(%p1)
  %dot = f32[4,8,8] dot(%t, %c), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
  %s = f32[4,8,8] logistic(%dot)
  ROOT %tuple = (f32[4,8,8], f32[4,8,8]) tuple(%dot, %s)
}
ENTRY %main (a: f32[16,4,8], b: f16[4,16,8]) -> f32[4,8,8] {
  %a = f32[16,4,8] parameter(0)
  %b = f16[4,16,8] parameter(1)
  %f = (f32[4,8,8], f32[4,8,8]) fusion(%a, %b), kind=kOutput, calls=%fused
  %g0 = f32[4,8,8] get-tuple-element(%f), index=0
  %g1 = f32[4,8,8] get-tuple-element(%f), index=1
  ROOT %r = f32[4,8,8] subtract(%g0, %g1)
}
"""
    comp = run_and_check(text, [sample("f32", (16, 4, 8)), sample("f16", (4, 16, 8))])
    assert how_fusions_run(comp)["f"].startswith("kept")


def test_xla_cpu_output_with_metadata_and_backend_config():
    """As XLA:CPU prints its dot fusions (jaxlib 0.10: a dot-only kCustom fusion with a
    backend_config, then a kLoop epilogue), stack frame tables and all."""
    text = """HloModule jit__lambda, is_scheduled=true, entry_computation_layout={(f32[64,8,16]{2,1,0}, f32[64,16,8]{2,1,0})->f32[64,8,8]{2,1,0}}

%fused_computation (param_0: f32[64,8,16], param_1: f32[64,16,8]) -> f32[64,8,8] {
  %param_0 = f32[64,8,16]{2,1,0} parameter(0)
  %param_1 = f32[64,16,8]{2,1,0} parameter(1)
  ROOT %dot_general.0 = f32[64,8,8]{2,1,0} dot(%param_0, %param_1), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}, metadata={op_name="jit(<lambda>)/bij,bjk->bik/dot_general" stack_frame_id=2}
}

%fused_computation.1 (param_0.2: f32[64,8,8]) -> f32[64,8,8] {
  %param_0.2 = f32[64,8,8]{2,1,0} parameter(0)
  %constant.0 = f32[] constant(2)
  %mul.1 = f32[64,8,8]{2,1,0} broadcast(%constant.0), dimensions={}
  %mul.0 = f32[64,8,8]{2,1,0} multiply(%param_0.2, %mul.1)
  ROOT %tanh.0 = f32[64,8,8]{2,1,0} tanh(%mul.0)
}

ENTRY %main.1 (a.1: f32[64,8,16], c.1: f32[64,16,8]) -> f32[64,8,8] {
  %a.1 = f32[64,8,16]{2,1,0} parameter(0), metadata={op_name="a"}
  %c.1 = f32[64,16,8]{2,1,0} parameter(1), metadata={op_name="c"}
  %ynn_fusion = f32[64,8,8]{2,1,0} fusion(%a.1, %c.1), kind=kCustom, calls=%fused_computation, backend_config={"fusion_config":{"kind":"__ynn_fusion"},"outer_dimension_partitions":[]}
  ROOT %multiply_tanh_fusion = f32[64,8,8]{2,1,0} fusion(%ynn_fusion), kind=kLoop, calls=%fused_computation.1
}
"""
    comp = run_and_check(text, [sample("f32", (64, 8, 16)), sample("f32", (64, 16, 8))])
    assert how_fusions_run(comp)["ynn_fusion"].startswith("kept")


def test_header_less_module_with_a_fused_dot_parses_and_runs():
    """XLA's test files start at the first computation: no ``HloModule`` line."""
    text, inputs = dot_fusion_module((8, 32), (32, 16), (8, 16), MATMUL)
    body = text.split("\n", 1)[1]
    assert not body.lstrip().startswith("HloModule")
    run_and_check(body, inputs)
    # and a module that is only its entry computation
    run_and_check("ENTRY %e (a: f32[3,4]) -> f32[4,3] {\n  %a = f32[3,4] parameter(0)\n"
                  "  ROOT %t = f32[4,3] transpose(%a), dimensions={1,0}\n}\n", [sample("f32", (3, 4))])


def test_the_evaluator_step_check_sees_an_interpreted_op(monkeypatch):
    """The check above can fail: an op with no kernel or library call (a custom call whose
    only implementation is a NumPy function registered for the evaluator) is seen."""
    from nbxla.hlo.evaluator import CUSTOM_CALL_TARGETS
    monkeypatch.setitem(CUSTOM_CALL_TARGETS, "test_twice", lambda instr, args, interp: args[0] * 2)
    text = ("HloModule f\nENTRY %e (a: f32[8]) -> f32[8] {\n  %a = f32[8] parameter(0)\n"
            "  ROOT %f = f32[8] custom-call(%a), custom_call_target=\"test_twice\"\n}\n")
    with pytest.warns(Warning):
        comp = compile_module(parse_hlo(text), "cpu")
    with pytest.raises(AssertionError):
        assert_no_evaluator_steps(comp.executable.native)


# ---- register blocking: rows of one batch element accumulated as vectors ---------------------

def _blocked(comp) -> bool:
    """Did the dot kernel take the register-blocked path (a vector fused multiply-add)?"""
    return "llvm.fmuladd.v" in comp.stage("llvm_ir")


@pytest.mark.parametrize("batch, m, k, n, t, epilogue, blocked", [
    (4, 16, 8, 16, "f32", "none", True),          # the dot is the output: rows stored as vectors
    (3, 13, 5, 16, "f32", "tanh2", True),         # 13 rows: a block of 8, the rest one by one
    (2, 9, 4, 64, "f32", "relu", True),           # 64 columns = BLOCKED_ROW_BYTES: blocks of 3 rows
    (2, 9, 4, 65, "f32", "relu", False),          # one column more: the scalar-slot loop
    (3, 8, 5, 32, "f64", "tanh2", True),
    (5, 1, 7, 16, "f32", "none", False),          # one row per batch element: nothing to block
])
def test_register_blocked_batched_dots(batch, m, k, n, t, epilogue, blocked):
    from nbxla.codegen import dot_kernels
    assert (n * {"f32": 4, "f64": 8}[t] <= dot_kernels.BLOCKED_ROW_BYTES) == (n != 65)
    text, inputs = dot_fusion_module((batch, m, k), (batch, k, n), (batch, m, n), BATCHED, types=(t, t, t),
                                     epilogue=epilogue, kind="kLoop")
    comp = run_and_check(text, inputs)
    assert _blocked(comp) == blocked


@pytest.mark.parametrize("packed", [False, True])
def test_register_blocks_with_rows_split_anywhere(monkeypatch, packed):
    # The runtime splits the rows (batch elements, when packed) over threads at any row:
    # blocks never cross a batch element or the end of a chunk.
    from nbxla.runtime import cpu_kernels
    monkeypatch.setattr(cpu_kernels, "PARALLEL_THRESHOLD", 1)
    monkeypatch.setattr(cpu_kernels, "worker_count", lambda: 3)
    rhs, dnums = ((6, 16, 7), "lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, "
                              "rhs_contracting_dims={2}") if packed else ((6, 7, 16), BATCHED)
    text, inputs = dot_fusion_module((6, 11, 7), rhs, (6, 11, 16), dnums, epilogue="tanh2", kind="kLoop")
    comp = run_and_check(text, inputs)
    assert _blocked(comp)


def test_q_at_k_transposed_is_register_blocked_on_the_packed_copy():
    dnums = "lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={2}"
    text, inputs = dot_fusion_module((8, 16, 32), (8, 16, 32), (8, 16, 16), dnums, epilogue="tanh2", kind="kLoop")
    assert _blocked(run_and_check(text, inputs))


def _split(comp) -> bool:
    """Does the fusion's dot kernel run split over the pool (``KernelThunk.parallel``)?"""
    line = next(l for l in comp.executable.native.describe().splitlines() if l.startswith("  %fusion:"))
    assert "dot over" in line, line
    return "split over" in line


@pytest.mark.parametrize("batch, epilogue, split", [
    (128, "none", False),      # 4.2M multiply-adds, ~90 us on one core: the pool's start costs more
    (192, "none", False),      # 6.3M: just below PARALLEL_THRESHOLD at DOT_MAC_COST a multiply-add
    (256, "none", True),       # 8.4M: past it
    (192, "tanh2", True),      # 6.3M and 196K tanh: the epilogue's per-element work counts too
])
def test_dot_kernels_split_by_multiply_adds_at_their_cost(batch, epilogue, split):
    """The threading decision counts a dot kernel's multiply-adds at ``DOT_MAC_COST`` units
    each (plus its epilogue per output element), not one unit each: a fused dot of a few
    million multiply-adds, a few tens of microseconds, stays on the calling thread; both
    sides give the evaluator's answer."""
    from nbxla.runtime import cpu_kernels
    m = k = n = 32
    # (per output element: its store, and tanh2's multiply and tanh)
    per_output = 1 + (cpu_kernels.CHEAP_OP_COST + cpu_kernels.TRANSCENDENTAL_COST if epilogue == "tanh2" else 0)
    cost = cpu_kernels.DOT_MAC_COST * batch * m * k * n + batch * m * n * per_output
    assert (cost >= cpu_kernels.PARALLEL_THRESHOLD) == split
    text, inputs = dot_fusion_module((batch, m, k), (batch, k, n), (batch, m, n), BATCHED, epilogue=epilogue,
                                     kind="kLoop")
    comp = run_and_check(text, inputs)
    assert _split(comp) == split


@pytest.mark.parametrize("batch, m, k, n, t, epilogue, packed", [
    (3, 13, 5, 16, "f32", "relu", False),     # a block of 8 rows, then 5 left over
    (4, 8, 32, 32, "f32", "relu", False),     # a block of 6 (two vectors a row), then 2
    (2, 7, 3, 32, "f64", "none", False),      # f64: a block of 3 (four vectors a row), twice, then 1
    (3, 11, 7, 16, "f32", "none", True),      # q @ k^T on the packed copy: 8, then 3
])
def test_rows_left_over_from_the_blocks_are_vector_rows(batch, m, k, n, t, epilogue, packed):
    """Rows that do not fill a register block are computed as blocks of one row (vector
    accumulators), not in the scalar-slot loop, which stored every multiply-add: no scalar
    fused multiply-add is left in the kernel (epilogues without one: tanh's polynomial has
    its own), and the values are the evaluator's."""
    dnums = "lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={2}" \
        if packed else BATCHED
    rhs = (batch, n, k) if packed else (batch, k, n)
    text, inputs = dot_fusion_module((batch, m, k), rhs, (batch, m, n), dnums, types=(t, t, t), epilogue=epilogue,
                                     kind="kLoop")
    comp = run_and_check(text, inputs)
    assert _blocked(comp)
    # (the scalar intrinsic, quoted or not, as llvmlite prints it: "llvm.fmuladd.f32")
    assert f'llvm.fmuladd.{t}"' not in comp.stage("llvm_ir").replace(f"llvm.fmuladd.{t}(", f'llvm.fmuladd.{t}"(')
