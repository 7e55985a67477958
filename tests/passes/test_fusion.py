"""Structural tests of the optimizer on traced NumPy functions: how many kernels, of which kind,
reading what; the fusion heuristics; the fusion report; the per-pass history.  (The cleanup
passes on their own: test_simplify.py.)"""

import inspect

import numpy as np

import nbxla
from nbxla.frontend.trace import trace, tree_flatten
from nbxla.hlo import Builder, Module, Shape
from nbxla.hlo.evaluator import evaluate, flatten
from nbxla.hlo.ir import clone_module
from nbxla.passes import optimize, verify_module
from nbxla.passes.cse import eliminate_common_subexpressions
from nbxla.passes.report import fusion_report
from nbxla.testing import compare_arrays

f32 = np.float32


def traced(fn, *args):
    leaves, treedef = tree_flatten((args, {}))
    return trace(fn, leaves, treedef, name=fn.__name__).module


def optimized(fn, *args):
    """(module before, pipeline result), with the results checked against the evaluator."""
    module = traced(fn, *args)
    result = optimize(module)
    verify_module(result.module)
    result.module.entry.sort_topologically()          # raises on a cycle
    want, got = flatten(evaluate(module, list(args))), flatten(evaluate(result.module, list(args)))
    for g, w in zip(got, want):
        ok, detail = compare_arrays(g, w)
        assert ok, detail
    return module, result


def entry_ops(module):
    return [i.opcode for i in module.entry.instructions if i.opcode != "parameter"]


def kernels(module):
    return [i for i in module.entry.instructions
            if i.opcode not in ("parameter", "constant", "tuple", "get-tuple-element", "bitcast")]


def fused_ops(module):
    """Every opcode inside every fused computation, with repeats."""
    return [i.opcode for k in kernels(module) if k.opcode == "fusion"
            for i in k.attrs["calls"].instructions]


def line_of(fn, text):
    src, first = inspect.getsourcelines(fn)
    return first + next(k for k, line in enumerate(src) if text in line)


# ---- the running examples ------------------------------------------------------------------------

def seed(x, y):
    return np.mean(3 * x**2 + y)


def test_running_example_is_one_reduction_fusion_reading_x_and_y_once():
    x, y = np.random.default_rng(0).random((2, 16, 32), dtype=f32)
    _, result = optimized(seed, x, y)
    m = result.module
    (fusion,) = kernels(m)
    assert fusion.opcode == "fusion" and fusion.attrs["kind"] == "kInput"
    assert fusion is m.entry.root and fusion.shape == Shape("f32", ())
    params = m.entry.parameters
    assert fusion.operands == params                   # x and y, each read once
    assert "reduce" in fused_ops(m)


def sum_x_plus_yz(x, y, z):
    return np.sum(x + y * z)


def test_sum_of_elementwise_is_one_fusion():
    x, y, z = np.random.default_rng(1).random((3, 8, 64), dtype=f32)
    _, result = optimized(sum_x_plus_yz, x, y, z)
    (fusion,) = kernels(result.module)
    assert fusion.attrs["kind"] == "kInput" and len(fusion.operands) == 3
    assert set(map(id, fusion.operands)) == set(map(id, result.module.entry.parameters))


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def test_softmax_over_the_last_axis_is_at_most_two_kernels():
    x = np.random.default_rng(2).standard_normal((8, 128)).astype(f32)
    _, result = optimized(softmax, x)
    ks = kernels(result.module)
    assert len(ks) <= 2 and all(k.opcode == "fusion" for k in ks)
    assert len(ks) == 1                                  # today: one row-wise kernel
    assert fused_ops(result.module).count("exponential") == 1


def layernorm(x, g, b):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-5) * g + b


def test_layernorm_is_at_most_two_kernels():
    rng = np.random.default_rng(3)
    x, g, b = rng.standard_normal((16, 64)).astype(f32), rng.random(64, dtype=f32), rng.random(64, dtype=f32)
    _, result = optimized(layernorm, x, g, b)
    ks = kernels(result.module)
    assert len(ks) <= 2 and all(k.opcode == "fusion" for k in ks)
    assert len(ks) == 1
    assert fused_ops(result.module).count("reduce") == 2


def mlp_layer(x, w, b):
    return np.maximum(x @ w + b, 0)


def test_mlp_layer_is_a_library_dot_and_one_fused_epilogue():
    rng = np.random.default_rng(4)
    x, w, b = rng.random((8, 32), dtype=f32), rng.random((32, 16), dtype=f32), rng.random(16, dtype=f32)
    _, result = optimized(mlp_layer, x, w, b)
    dot, epilogue = kernels(result.module)
    assert dot.opcode == "dot" and epilogue.opcode == "fusion" and epilogue.attrs["kind"] == "kLoop"
    assert dot in epilogue.operands and epilogue is result.module.entry.root
    assert {"add", "maximum"} <= set(fused_ops(result.module))
    report = fusion_report(result.module, result.facts["fusion"])
    assert [k.kind for k in report.kernels] == ["library call: dot", "kLoop"]


def sigmoid(v):
    return 1 / (1 + np.exp(-v))


def lstm_cell(x, h, c, wx, wh, b):
    z = x @ wx + h @ wh + b
    n = h.shape[1]
    i, f, o = sigmoid(z[:, :n]), sigmoid(z[:, n:2 * n]), sigmoid(z[:, 2 * n:3 * n])
    g = np.tanh(z[:, 3 * n:])
    c2 = f * c + i * g
    return o * np.tanh(c2), c2


def test_lstm_gate_math_is_one_fusion_after_the_dots():
    rng = np.random.default_rng(5)
    args = [rng.standard_normal(s).astype(f32) for s in ((4, 8), (4, 16), (4, 16), (8, 64), (16, 64), (64,))]
    _, result = optimized(lstm_cell, *args)
    ks = kernels(result.module)
    assert [k.opcode for k in ks] == ["dot", "dot", "fusion"]
    (gates,) = [k for k in ks if k.opcode == "fusion"]
    assert all(d in gates.operands for d in ks[:2])
    ops = fused_ops(result.module)
    assert ops.count("tanh") == 2 and ops.count("exponential") == 3
    # nothing is computed twice inside the kernel (a duplicated producer that joined later too)
    body = clone_module(result.module).computation(gates.attrs["calls"].name)
    assert not eliminate_common_subexpressions(body)
    assert ops.count("add") == 2 + 3 + 1          # z's two adds, three sigmoids' 1 + e, f*c + i*g


# ---- heuristics ----------------------------------------------------------------------------------

def exp_into_two_dots(x, w):
    e = np.exp(x)
    return e @ w, w @ e


def test_expensive_producer_with_two_unfusible_users_is_computed_once():
    x, w = np.random.default_rng(6).random((2, 8, 8), dtype=f32)
    _, result = optimized(exp_into_two_dots, x, w)
    assert fused_ops(result.module).count("exponential") == 1
    assert [k.opcode for k in kernels(result.module)].count("dot") == 2


def exp_around_a_dot(x, w):
    e = np.exp(x)
    return (e @ w) + e


def cheap_around_a_dot(x, w):
    e = x * 2
    return (e @ w) + e


def test_expensive_producer_is_not_duplicated_and_the_refusal_says_why():
    x, w = np.random.default_rng(7).random((2, 8, 8), dtype=f32)
    _, result = optimized(exp_around_a_dot, x, w)
    assert fused_ops(result.module).count("exponential") == 1
    refusals = result.facts["fusion"].refusals
    assert any(r.producer.startswith("exponential") and "expensive" in r.reason and "cycle" in r.reason
               for r in refusals), refusals
    text = fusion_report(result.module, result.facts["fusion"]).to_text()
    assert "fusions refused:" in text and "not duplicated" in text


def test_cheap_producer_is_duplicated_into_its_consumers():
    x, w = np.random.default_rng(8).random((2, 8, 8), dtype=f32)
    _, result = optimized(cheap_around_a_dot, x, w)
    ks = kernels(result.module)
    assert [k.opcode for k in ks] == ["fusion", "dot", "fusion"]
    assert fused_ops(result.module).count("multiply") == 2    # recomputed in the epilogue
    assert ks[0] not in ks[2].operands                       # ... instead of read back


def two_reductions_exp(x):
    e = np.exp(x)
    return e.sum(axis=0), e.sum(axis=1)


def two_reductions_cheap(x):
    e = x * 2 + 1
    return e.sum(axis=0), e.sum(axis=1)


def test_reductions_over_different_axes_share_an_expensive_producer():
    x = np.random.default_rng(9).random((8, 16), dtype=f32)
    _, result = optimized(two_reductions_exp, x)
    assert fused_ops(result.module).count("exponential") == 1
    assert len(kernels(result.module)) == 2


def test_reductions_over_different_axes_each_recompute_a_cheap_producer():
    x = np.random.default_rng(10).random((8, 16), dtype=f32)
    _, result = optimized(two_reductions_cheap, x)
    ks = kernels(result.module)
    assert len(ks) == 2 and all(k.operands == result.module.entry.parameters for k in ks)
    assert fused_ops(result.module).count("multiply") == 2


def test_operand_cap_splits_a_kernel():
    from nbxla.passes.fusion import MAX_OPERANDS
    b = Builder("wide")
    s = Shape("f32", (4,))
    params = [b.parameter(s, f"p{i}") for i in range(MAX_OPERANDS + 8)]
    acc = params[0]
    for p in params[1:]:
        acc = b.op("add", acc, p)
    module = Module("wide", b.build(acc))
    result = optimize(module)
    verify_module(result.module)
    fusions = [k for k in kernels(result.module) if k.opcode == "fusion"]
    assert len(fusions) >= 2 and all(len(f.operands) <= MAX_OPERANDS for f in fusions)
    args = [np.full(4, i, f32) for i in range(len(params))]
    np.testing.assert_array_equal(evaluate(result.module, args), evaluate(module, args))


# ---- the fusion report ---------------------------------------------------------------------------

def test_fusion_report_lists_kernels_kinds_ops_lines_flops_and_bytes():
    f = nbxla.jit(seed)
    x, y = np.ones((16, 32), f32), np.ones((16, 32), f32)
    text = f.get_compiler_ir(x, y)("fusion_report")
    report = f.last_compilation.fusion_report
    assert report.kernels_after == 1 and report.kernels_before > 1
    (k,) = report.kernels
    assert k.kind == "kInput" and k.ops["reduce"] == 1 and k.ops["multiply"] >= 2
    line = line_of(seed, "np.mean")
    assert {loc.line for loc in k.source_lines} == {line}
    assert k.flops == 4 * 16 * 32 + 1 and k.transcendentals == 0
    assert (k.bytes_read, k.bytes_written) == (2 * 16 * 32 * 4, 4)
    assert text.splitlines()[0] == f"kernels: {report.kernels_before} before fusion -> 1 after"
    assert "[kInput]" in text and f":{line}" in text and "2049 flops" in text
    assert "reads 4096 B, writes 4 B" in text


def test_fusion_report_names_every_source_line_of_a_kernel():
    x = np.ones((8, 32), f32)
    _, result = optimized(softmax, x)
    (k,) = fusion_report(result.module, result.facts["fusion"]).kernels
    lines = {loc.line for loc in k.source_lines}
    assert lines == {line_of(softmax, "np.exp"), line_of(softmax, "return e /")}
    assert k.transcendentals == 8 * 32


# ---- the per-pass history ------------------------------------------------------------------------

def test_history_records_text_only_for_passes_that_changed_the_module():
    _, result = optimized(seed, np.ones((4, 4), f32), np.ones((4, 4), f32))
    names = [r.name for r in result.history]
    assert names == ["layouts", "call-inliner", "imported-fusions", "algsimp", "constant-folding", "cse",
                     "dot-rewrites", "while-state", "loop-invariant-dots", "window-loops", "loop-layouts", "dce", "float-normalization",
                     "fusion", "dce", "updates-after-readers",
                     "buffer-assignment"]
    for rec in result.history:
        assert (rec.text is not None) == rec.changed
    assert result.history[names.index("algsimp")].changed            # x**2 -> x*x
    assert result.history[names.index("fusion")].changed
    assert not result.history[-1].changed                            # buffer assignment only plans
    text = result.history_text()
    assert "// ---- after algsimp (changed" in text and "// ---- after buffer-assignment (no change" in text
    assert text.count("HloModule") == sum(r.changed for r in result.history)
    assert "fusion(" in text.split("// ---- after fusion")[1]


def test_reduction_kernels_do_not_take_outputs_from_other_spaces():
    """Found by the random-graph property test: a transpose of the input (shape [2,1]) as an
    extra output of a full reduction of that input ([1,2] -> []) was written at its first
    element only.  Such an output now stays out of the reduction kernel."""
    from nbxla.compiler import compile_module
    from nbxla.hlo.parser import parse_hlo
    text = """
HloModule t
add_f32 {
  lhs = f32[] parameter(0)
  rhs = f32[] parameter(1)
  ROOT s = f32[] add(lhs, rhs)
}
ENTRY main {
  x = f32[1,2] parameter(0)
  c = f32[] parameter(1)
  t = f32[2,1] transpose(x), dimensions={1,0}
  zero = f32[] constant(0)
  r = f32[] reduce(x, zero), dimensions={0,1}, to_apply=add_f32
  a = f32[] add(r, c)
  ROOT out = (f32[], f32[2,1]) tuple(a, t)
}"""
    args = [np.array([[0.5, -0.9]], np.float32), np.array(-1.8, np.float32)]
    cpu = compile_module(parse_hlo(text), "cpu")
    got = cpu.executable.run(args)
    np.testing.assert_allclose(got[0], 0.5 - 0.9 - 1.8, rtol=1e-6)
    np.testing.assert_array_equal(got[1], args[0].T)
    assert cpu.executable.native.interpreted == {}


def _stencil_steps(a, b, steps):
    for _ in range(steps):
        b[1:-1] = 0.33333 * (a[:-2] + a[1:-1] + a[2:])
        a[1:-1] = 0.33333 * (b[:-2] + b[1:-1] + b[2:])
    return a, b


def test_a_loop_of_stencil_updates_does_not_copy_values_into_a_kernel_again_and_again(monkeypatch):
    # Each update reads the previous one at three positions.  A value already copied into a
    # kernel is shared by its later readers: before, every request made a new copy (whose
    # operands were copied again): 598 copies at 3 steps, minutes of compile time at 5.
    from nbxla.codegen import elemental
    from nbxla.passes import fusion
    from nbxla.runtime.cache import CompilationCache
    copies = []
    duplicate = fusion._Fuser._duplicate
    monkeypatch.setattr(fusion._Fuser, "_duplicate", lambda self, p, g: copies.append(p) or duplicate(self, p, g))
    a = np.random.default_rng(0).random(50)
    counts = []
    for steps in (3, 6):
        copies.clear()
        f = nbxla.jit(lambda x, y: _stencil_steps(x.copy(), y.copy(), steps), cache=CompilationCache())
        got = f(a, a * 2)
        want = _stencil_steps(a.copy(), a * 2, steps)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-12)
        counts.append(len(copies))
        assert counts[0] < 100, counts                  # (before: 598 at 3 steps)
        # (Too many values per element for one kernel: such a fusion runs through the
        # evaluator, saying why, rather than emitting an exponentially large kernel.)
        interpreted = f.last_compilation.executable.native.interpreted
        assert all(f"more than {elemental.MAX_EMITTED_VALUES} values" in why for why in interpreted.values())
    assert counts[1] < 2.5 * counts[0], counts        # linear in the steps


def test_history_text_is_the_module_as_it_was_after_the_pass():
    """The history keeps a copy of the module after each changing pass and prints it only when
    asked: a later pass that rewrites the module in place must not show in an earlier pass's
    text, and each text is what printing the module right after its pass gave."""
    from nbxla.hlo.printer import print_module
    from nbxla.passes.pipeline import _HISTORY_TEXT, Pipeline

    printed = []

    class Rename:
        """Renames every instruction in place (and records the module's text right after)."""
        def __init__(self, suffix):
            self.name, self.suffix = f"rename{suffix}", suffix

        def run(self, module):
            for comp in module.computations:
                for instr in comp.instructions:
                    instr.name += self.suffix
            printed.append(print_module(module, _HISTORY_TEXT))
            return True

    module = traced(seed, np.ones((4, 4), f32), np.ones((4, 4), f32))
    result = Pipeline([Rename("_a"), Rename("_b")]).run(module)
    first, second = (r.text for r in result.history)
    assert first == printed[0] and second == printed[1]
    assert "_a_b" not in first and "_a_b" in second


# ---- constant arrays: copied into kernels while small, operands when large -------------------

def _scaled_by_table(n):
    table = (np.arange(n) % 7 + 1.0).astype(np.float64)      # (a NumPy array: a constant)

    def fn(x):
        return np.sin(x) * table + 1.0
    return fn


def _kernel_reads_constant(module):
    """(constants fused inside the kernel, constant operands of the kernel)."""
    (fusion,) = [i for i in module.entry.instructions if i.opcode == "fusion"]
    inside = [i for i in fusion.attrs["calls"].instructions if i.opcode == "constant" and i.shape.rank > 0]
    operands = [o for o in fusion.operands if o.opcode == "constant"]
    return inside, operands


def test_small_constant_array_is_copied_into_the_kernel():
    from nbxla.passes.fusion_model import INLINE_CONSTANT_ELEMENTS
    n = INLINE_CONSTANT_ELEMENTS
    x = np.linspace(0, 1, 2 * n).reshape(2, n)       # (rows: the rerun's unknown leading size)
    _, result = optimized(_scaled_by_table(n), x)
    inside, operands = _kernel_reads_constant(result.module)
    assert len(inside) == 1 and not operands


def test_large_constant_array_is_a_kernel_operand():
    # (a table of more elements than INLINE_CONSTANT_ELEMENTS is read from memory, not compiled
    # into the kernel's code; the results match the evaluator's either way, and the compiled
    # program NumPy's)
    from nbxla.passes.fusion_model import INLINE_CONSTANT_ELEMENTS
    n = INLINE_CONSTANT_ELEMENTS + 1
    x = np.linspace(0, 1, 2 * n).reshape(2, n)
    fn = _scaled_by_table(n)
    _, result = optimized(fn, x)
    inside, operands = _kernel_reads_constant(result.module)
    assert not inside and len(operands) == 1
    np.testing.assert_allclose(nbxla.jit(fn)(x), fn(x), rtol=1e-12)
