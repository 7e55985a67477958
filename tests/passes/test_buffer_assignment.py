"""Buffer assignment: no two live values share bytes, dead buffers are reused, elementwise kernels
update in place where that is legal, and donated parameters receive outputs.

The strongest check is ``run_with_plan``: it executes the entry computation kernel by kernel
with every value stored *where the plan puts it* (one byte arena, caller-owned parameter
arrays that donated outputs overwrite), and must give the evaluator's results.  A plan that
lets a value overwrite one still needed changes the answer.
"""

import os

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nbxla.frontend.trace import trace, tree_flatten
from nbxla.hlo import Builder, Computation, Instruction, Module, Shape
from nbxla.hlo.evaluator import evaluate, flatten
from nbxla.passes import BufferAssignment, optimize
from nbxla.passes.buffer_assignment import ALIGNMENT, plan_buffers
from nbxla.testing import compare_arrays

from tests.hlo_strategies import hlo_modules

EXAMPLES = int(os.environ.get("NBXLA_HYPOTHESIS_EXAMPLES", "0")) or None


# ---- helpers ------------------------------------------------------------------------------------

def traced(fn, *args):
    leaves, treedef = tree_flatten((args, {}))
    return trace(fn, leaves, treedef, name=fn.__name__).module


def leaves_of(shape, prefix=()):
    if not shape.is_tuple:
        return [(prefix, shape)]
    return [leaf for i, e in enumerate(shape.elements) for leaf in leaves_of(e, prefix + (i,))]


def value_name(instr, index):
    return instr.name + ("{" + ",".join(map(str, index)) + "}" if index else "")


def run_instruction(instr, operand_values):
    """Evaluate one instruction on the given operand values (a fusion runs its computation)."""
    comp = Computation("one")
    params = [comp.add(Instruction("parameter", o.shape, (), {"parameter_number": k}, f"p{k}"))
              for k, o in enumerate(instr.operands)]
    comp.add(Instruction(instr.opcode, instr.shape, params, instr.attrs, "it"))
    comp.root = comp.instructions[-1]
    return evaluate(comp, operand_values)


def run_with_plan(module, plan, args):
    """Execute the entry computation with every value living where ``plan`` says."""
    arena = np.zeros(plan.arena_bytes + ALIGNMENT, np.uint8)
    params = [np.array(a, copy=True) for a in args]          # caller-owned buffers
    constants = {}

    def place(name, shape):
        v = plan[name]
        if v.kind == "parameter":
            return params[v.parameter].reshape(-1).view(shape.dtype).reshape(shape.dims)
        if v.kind == "constant":
            owner = v.alias_of or name
            return constants[owner].reshape(-1).view(shape.dtype).reshape(shape.dims)
        assert v.offset % ALIGNMENT == 0 and v.offset + v.size <= plan.arena_bytes or v.size == 0
        count = shape.size
        return np.frombuffer(arena.data, shape.dtype, count, v.offset).reshape(shape.dims)

    def read(instr, index=()):
        shape = instr.shape
        for i in index:
            shape = shape.elements[i]
        if shape.is_tuple:
            return tuple(read(instr, index + (k,)) for k in range(len(shape.elements)))
        return np.array(place(value_name(instr, index), shape), copy=True)

    for instr in module.entry.instructions:
        leaves = leaves_of(instr.shape)
        if instr.opcode == "constant":
            constants[instr.name] = np.array(instr.literal, copy=True)
        elif instr.opcode != "parameter" and leaves and plan[value_name(instr, leaves[0][0])].alias_of is None:
            result = run_instruction(instr, [read(o) for o in instr.operands])
            for index, shape in leaves:
                value = result
                for i in index:
                    value = value[i]
                place(value_name(instr, index), shape)[...] = value
    outputs = flatten(read(module.entry.root))
    for k, (before, after) in enumerate(zip(args, params)):
        if k not in plan.donated:          # the caller's arrays are only written when donated
            np.testing.assert_array_equal(after, before)
    return outputs


def check_plan(module, plan, args):
    """Intervals x offsets never collide (except an in-place hand-over), and execution agrees."""
    bufs = [v for v in plan.buffers() if v.size]
    for v in bufs:
        assert v.offset % ALIGNMENT == 0 and v.offset + v.size <= plan.arena_bytes
    for i, a in enumerate(bufs):
        for b in bufs[i + 1:]:
            live_together = a.start <= b.end and b.start <= a.end
            share_bytes = a.offset < b.offset + b.size and b.offset < a.offset + a.size
            if live_together and share_bytes:
                handover = a.allocation == b.allocation and (a.end == b.start or b.end == a.start)
                assert handover, f"%{a.name} and %{b.name} overlap\n{plan.to_text()}"
    assert plan.arena_bytes <= sum(-(-v.size // ALIGNMENT) * ALIGNMENT for v in plan.buffers())
    want = flatten(evaluate(module, args))
    got = run_with_plan(module, plan, args)
    for g, w in zip(got, want):
        # Not bit-exact: NumPy may sum a strided view and a contiguous copy in different orders.
        ok, detail = compare_arrays(g, w)
        assert ok, f"{detail}\n{plan.to_text()}"


def optimized(fn, *args, donated=()):
    result = optimize(traced(fn, *args), donated_parameters=set(donated))
    return result.module, result.facts["buffer-assignment"]


# ---- properties ---------------------------------------------------------------------------------

@settings(max_examples=EXAMPLES or 200, deadline=None, derandomize=EXAMPLES is None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=hlo_modules(max_steps=20), donate=st.sets(st.integers(0, 3), max_size=2),
       fuse=st.booleans())
def test_random_plans_are_safe(case, donate, fuse):
    module, args = case
    if fuse:
        result = optimize(module, donated_parameters=donate)
        module, plan = result.module, result.facts["buffer-assignment"]
    else:
        plan = plan_buffers(module, donate)
    check_plan(module, plan, args)
    assert set(plan.donated) <= donate
    assert all(plan[v].kind == "parameter" and plan[v].parameter == k for k, v in plan.donated.items())


# ---- reuse, in place, donation ------------------------------------------------------------------

def dot_chain(x, w):
    h = x @ w
    h = h @ w
    h = h @ w
    h = h @ w
    return h @ w


def test_dead_buffers_are_reused_in_a_chain():
    x, w = np.ones((16, 16), np.float32), np.full((16, 16), 0.1, np.float32)
    module, plan = optimized(dot_chain, x, w)
    assert sum(i.opcode == "dot" for i in module.entry.instructions) == 5
    assert plan.bytes_without_reuse == 5 * 16 * 16 * 4
    assert plan.arena_bytes < plan.bytes_without_reuse
    assert plan.arena_bytes == 2 * 16 * 16 * 4       # two buffers, used alternately
    check_plan(module, plan, [x, w])


def exp_chain(x):
    a = np.exp(x)
    b = a + 1
    c = b * 2
    return c


def test_unfused_elementwise_chain_updates_in_place():
    x = np.linspace(-1, 1, 64, dtype=np.float32)
    module = traced(exp_chain, x)
    plan = BufferAssignment()
    assert plan.run(module) is False                 # it plans; it changes nothing
    plan = plan.report
    by_op = {i.opcode: i.name for i in module.entry.instructions}
    # exp(x) cannot overwrite the caller's x; a + 1 and b * 2 overwrite a and b.
    assert plan[by_op["exponential"]].note == ""
    assert plan[by_op["add"]].note == f"in place of %{by_op['exponential']}"
    assert plan[by_op["multiply"]].note == f"in place of %{by_op['add']}"
    assert len({plan[by_op[o]].offset for o in ("exponential", "add", "multiply")}) == 1
    check_plan(module, plan, [x])


def mlp(x, w, b):
    return np.maximum(x @ w + b, 0)


def test_dot_epilogue_writes_over_the_dot_result():
    x, w, b = np.ones((8, 32), np.float32), np.ones((32, 16), np.float32), np.ones(16, np.float32)
    module, plan = optimized(mlp, x, w, b)
    dot = next(i for i in module.entry.instructions if i.opcode == "dot")
    assert plan.in_place == [(module.entry.root.name, dot.name)]
    assert plan.arena_bytes == 8 * 16 * 4 < plan.bytes_without_reuse
    check_plan(module, plan, [x, w, b])


def transposed_epilogue(x, w):
    return (x @ w).T + 1


def test_no_in_place_when_the_kernel_reads_other_elements():
    x, w = np.ones((16, 16), np.float32), np.arange(256, dtype=np.float32).reshape(16, 16)
    module, plan = optimized(transposed_epilogue, x, w)
    assert any(i.opcode == "transpose" for i in module.entry.root.attrs["calls"].instructions)
    assert plan.in_place == []
    check_plan(module, plan, [x, w])


def sgd_step(w, g):
    return w - 0.1 * g


def test_never_in_place_into_a_parameter_unless_donated():
    w, g = np.ones((16, 16), np.float32), np.full((16, 16), 2, np.float32)
    module, plan = optimized(sgd_step, w, g)
    root = plan[module.entry.root.name]
    assert root.kind == "arena" and plan.in_place == [] and plan.donated == {}
    check_plan(module, plan, [w, g])


def test_donated_parameter_holds_the_output():
    w, g = np.ones((16, 16), np.float32), np.full((16, 16), 2, np.float32)
    module, plan = optimized(sgd_step, w, g, donated=[0])
    root = plan[module.entry.root.name]
    assert root.location == ("parameter", 0) and plan.donated == {0: root.name}
    assert plan.arena_bytes == 0
    assert "donated parameter 0" in plan.to_text()
    check_plan(module, plan, [w, g])


def step_and_keep_old(w, g):
    return w - 0.1 * g, w


def test_donation_refused_when_the_parameter_is_still_needed():
    w, g = np.ones((4, 4), np.float32), np.ones((4, 4), np.float32)
    module, plan = optimized(step_and_keep_old, w, g, donated=[0])
    assert plan.donated == {}
    check_plan(module, plan, [w, g])


def test_donation_refused_when_a_later_kernel_reads_the_parameter():
    b = Builder("late_reader")
    s = Shape("f32", (8, 8))
    w, g = b.parameter(s, "w"), b.parameter(s, "g")
    new_w = b.op("subtract", w, g)
    later = b.op("dot", new_w, w, lhs_contracting_dims=(1,), rhs_contracting_dims=(0,))
    module = Module("late_reader", b.build(b.op("tuple", new_w, later)))
    plan = plan_buffers(module, {0})
    assert plan.donated == {}
    args = [np.arange(64, dtype=np.float32).reshape(8, 8), np.ones((8, 8), np.float32)]
    check_plan(module, plan, args)


def test_aliases_share_their_operands_buffer():
    b = Builder("aliases")
    x = b.parameter(Shape("f32", (4, 6)), "x")
    e = b.op("exponential", x)
    r = b.reshape(e, (24,))
    n = b.op("negate", r)
    t = b.op("tuple", n, e)
    module = Module("aliases", b.build(t))
    plan = plan_buffers(module)
    assert plan[r.name].alias_of == e.name and plan[r.name].offset == plan[e.name].offset
    assert plan[e.name].end == plan.length           # e is an output: it lives out
    assert plan[n.name].note == ""                   # e is still live: no in-place
    check_plan(module, plan, [np.ones((4, 6), np.float32)])


def test_plan_text_and_compiler_stage():
    import nbxla
    f = nbxla.jit(mlp)
    x, w, b = np.ones((8, 32), np.float32), np.ones((32, 16), np.float32), np.ones(16, np.float32)
    text = f.get_compiler_ir(x, w, b)("buffer_assignment")
    lines = text.splitlines()
    assert lines[0].startswith("buffer assignment: arena 512 B with reuse, 1024 B without reuse")
    assert any("parameter 0 size 1024" in line and line.strip().startswith("%x:") for line in lines)
    assert any("offset 0 size 512 live [" in line and "in place of %dot" in line for line in lines)
    assert any("live [" in line and ", out]" in line for line in lines)


def test_one_view_answer_for_every_planner():
    """``hlo.aliasing`` decides what is a view: a row-major reshape or bitcast that keeps the
    element type names its operand's bytes; a bitcast that changes the element type is a kernel
    (its own buffer in the plan, a fresh array in the runtime), whoever asks."""
    from nbxla.hlo.aliasing import is_view
    from nbxla.runtime.thunks import structural_thunk
    b = Builder("views")
    x = b.parameter(Shape("f32", (4, 6)), "x")
    e = b.op("exponential", x)
    same = b.op("bitcast", e, shape=Shape("f32", (24,)))
    other = b.op("bitcast", e, shape=Shape("s32", (4, 6)))
    n = b.op("negate", same)
    module = Module("views", b.build(b.op("tuple", n, other)))
    assert is_view(same) and not is_view(other)
    assert structural_thunk(same) is not None and structural_thunk(other) is None
    plan = plan_buffers(module)
    assert plan[same.name].alias_of == e.name
    assert plan[other.name].alias_of is None and plan[other.name].kind == "arena"


def test_nested_computations_get_plans_of_their_own():
    """A loop's condition and body are planned by the same rules as the entry: the body's
    temporaries (two chained kernels) get arena places that never collide while live."""
    from nbxla.hlo import TupleShape
    state = TupleShape((Shape("s32"), Shape("f32", (16, 16))))
    cb = Builder("cond")
    st = cb.parameter(state)
    cond = cb.build(cb.compare(cb.op("get-tuple-element", st, index=0), cb.constant(3, "s32"), "LT"))
    bb = Builder("body")
    st = bb.parameter(state)
    x = bb.op("get-tuple-element", st, index=1)
    e = bb.op("exponential", x)
    n = bb.op("negate", e)
    m = bb.op("multiply", n, e)
    i = bb.op("add", bb.op("get-tuple-element", st, index=0), bb.constant(1, "s32"))
    body = bb.build(bb.op("tuple", i, m))
    b = Builder("main")
    p = b.parameter(Shape("f32", (16, 16)), "p")
    w = b.op("while", b.op("tuple", b.constant(0, "s32"), p), condition=cond, body=body)
    module = Module("loop", b.build(b.op("get-tuple-element", w, index=1)))
    plan = plan_buffers(module)
    assert set(plan.nested) == {"cond", "body"}
    inner = plan.nested["body"]
    assert inner.length == len(body.instructions)
    assert inner[x.name].alias_of is not None and inner[x.name].kind == "parameter"
    bufs = [v for v in inner.buffers() if v.size]
    assert {v.name for v in bufs} >= {e.name, n.name}
    for k, a in enumerate(bufs):
        assert a.offset % ALIGNMENT == 0 and a.offset + a.size <= inner.arena_bytes
        for o in bufs[k + 1:]:
            live_together = a.start <= o.end and o.start <= a.end
            share = a.offset < o.offset + o.size and o.offset < a.offset + a.size
            assert not (live_together and share) or a.allocation == o.allocation, inner.to_text()
    assert "nested computation %body" in plan.to_text()
    assert evaluate(module, [np.ones((16, 16), np.float32)]).shape == (16, 16)


# ---- outputs written into an operand's buffer (window updates, loop state) -----------------------

def _update_loop(read_after: bool):
    """main: t = exp(p); u = update_fusion(t, v, i) [writes a window of t]; a while whose state
    is (counter, u, p); ``read_after``: t is read again after the update (so not free)."""
    from nbxla.hlo import TupleShape
    from nbxla.hlo.attributes import SliceDim
    vec, one = Shape("f32", (8,)), Shape("f32", (1,))
    fb = Builder("fused_update")
    q0, q1, q2 = fb.parameter(vec, "q0"), fb.parameter(one, "q1"), fb.parameter(Shape("s32"), "q2")
    fused = fb.build(fb.op("dynamic-update-slice", q0, q1, q2))
    state = TupleShape((Shape("s32"), vec, vec))
    cb = Builder("cond")
    st = cb.parameter(state)
    cond = cb.build(cb.compare(cb.op("get-tuple-element", st, index=0), cb.constant(3, "s32"), "LT"))
    bb = Builder("body")
    st = bb.parameter(state)
    i = bb.op("get-tuple-element", st, index=0)
    x = bb.op("get-tuple-element", st, index=1)
    fixed = bb.op("get-tuple-element", st, index=2)
    window = bb.op("slice", fixed, slice=[SliceDim(0, 1, 1)])
    y = bb.op("fusion", x, window, i, kind="kLoop", calls=fused)        # updates x in place
    body = bb.build(bb.op("tuple", bb.op("add", i, bb.constant(1, "s32")), y, fixed))
    b = Builder("main")
    p = b.parameter(vec, "p")
    v = b.parameter(one, "v")
    t = b.op("exponential", p)
    u = b.op("fusion", t, v, b.constant(2, "s32"), kind="kLoop", calls=fused)
    w = b.op("while", b.op("tuple", b.constant(0, "s32"), u, p), condition=cond, body=body)
    out = b.op("get-tuple-element", w, index=1)
    root = b.op("tuple", out, b.op("negate", t)) if read_after else out
    return Module("update_loop", b.build(root)), u, w, y


def test_updates_and_loop_state_live_in_their_operands_buffers():
    """The plan says which outputs are written into an operand's buffer: a window update of a
    temporary that dies there, a loop's state leaves (the one the body passes through always,
    the updated one when its initial buffer dies at the loop), and, in the loop body (whose
    state is the loop's own), the update of the state leaf."""
    module, u, w, y = _update_loop(read_after=False)
    plan = plan_buffers(module)
    assert plan.operand_buffers == {u.name: (0,), w.name: (1, 2)}
    body = plan.nested["body"]
    assert body.loop_body and not plan.nested["cond"].loop_body
    assert body.operand_buffers == {y.name: (0,)}
    # (the counter leaf is a constant's buffer: never written in place; p is the caller's)
    assert plan.to_text() == plan_buffers(module).to_text()


def test_no_update_in_place_while_the_operand_is_still_read():
    module, u, w, _ = _update_loop(read_after=True)
    plan = plan_buffers(module)
    assert u.name not in plan.operand_buffers           # t is read after the update
    assert plan.operand_buffers[w.name] == (1, 2)       # u dies at the loop, p passes through


def test_a_body_planned_without_its_state_writes_no_state_in_place():
    from nbxla.passes.buffer_assignment import plan_computation
    module, _, _, y = _update_loop(read_after=False)
    body = plan_buffers(module).nested["body"].schedule
    comp = next(c for c in module.computations if c.name == "body")
    assert tuple(i.name for i in comp.instructions) == body
    assert plan_computation(comp).operand_buffers == {}
    assert plan_computation(comp, loop_body=True).operand_buffers == {y.name: (0,)}


def test_for_computation_finds_each_program_and_refuses_a_changed_one():
    """The AOT driver's programs take their plans from the module's plan; a computation changed
    after planning (the CPU runtime folds convolution epilogues) is planned again."""
    module, *_ = _update_loop(read_after=False)
    plan = plan_buffers(module)
    comps = {c.name: c for c in module.computations}
    assert plan.for_computation(module.entry) is plan
    assert plan.for_computation(comps["body"], loop_body=True) is plan.nested["body"]
    assert plan.for_computation(comps["body"]) is None              # planned as a loop body
    assert plan.for_computation(comps["cond"]) is plan.nested["cond"]
    donated = plan_buffers(module, donated_parameters={0})
    assert donated.for_computation(module.entry) is None            # the driver's programs donate nothing
    comps["body"].instructions.insert(0, comps["body"].instructions.pop())   # (a changed schedule)
    assert plan.for_computation(comps["body"], loop_body=True) is None


def test_the_aot_driver_writes_in_place_exactly_where_the_plan_says():
    """One answer: the driver's in-place steps are the plan's ``operand_buffers`` (a plan that
    says none gets none), and its programs use the module plan's nested plans."""
    from nbxla.codegen.aot_driver import Driver, _ProgramEmitter
    module, u, w, y = _update_loop(read_after=False)
    plan = plan_buffers(module)

    class Specs:         # (the kernel side is not under test: any spec will do)
        def __getattr__(self, name):
            from nbxla.codegen.toolkit import KernelSpec
            return lambda *a, **k: KernelSpec("k", "linear", 8, 1) if name != "constant" else "c"

    def in_place_steps(plan):
        driver = Driver("t", Specs(), 1 << 20, plan=plan)
        found, plans = {}, []
        original = _ProgramEmitter.emit

        def emit(self):
            program = original(self)
            plans.append(self.plan)
            found[self.comp.name] = {i.name for i in self.comp.instructions if id(i) in self.in_place}
            return program
        _ProgramEmitter.emit = emit
        try:
            driver.program(module.entry)
        finally:
            _ProgramEmitter.emit = original
        return found, plans

    found, plans = in_place_steps(plan)
    assert found["main"] == {u.name, w.name} and found["body"] == {y.name}
    assert plan in plans and plan.nested["body"] in plans and plan.nested["cond"] in plans
    plan.operand_buffers.clear()
    plan.nested["body"].operand_buffers.clear()
    found, _ = in_place_steps(plan)
    assert found["main"] == set() and found["body"] == set()


def test_an_update_in_its_operands_buffer_keeps_that_place_in_the_arena():
    """A window update written into its operand's buffer (``operand_buffers``) takes over the
    operand's arena place: same offset and allocation, and nothing computed while the update
    lives is placed over it (the operand dies at the update, but its bytes live on in it).
    Without the takeover, ``z`` below reused t's place and overwrote the updated array."""
    vec, one = Shape("f32", (64,)), Shape("f32", (1,))
    fb = Builder("fused_update")
    q0, q1, q2 = fb.parameter(vec, "q0"), fb.parameter(one, "q1"), fb.parameter(Shape("s32"), "q2")
    fused = fb.build(fb.op("dynamic-update-slice", q0, q1, q2))
    b = Builder("main")
    p = b.parameter(vec, "p")
    v = b.parameter(one, "v")
    t = b.op("exponential", p)
    u = b.op("fusion", t, v, b.constant(2, "s32"), kind="kLoop", calls=fused)
    z = b.op("negate", p)
    module = Module("update_then_more", b.build(b.op("multiply", u, b.op("sine", z))))
    plan = plan_buffers(module)
    assert plan.operand_buffers == {u.name: (0,)}
    assert (u.name, t.name) in plan.in_place
    assert (plan[u.name].offset, plan[u.name].allocation) == (plan[t.name].offset, plan[t.name].allocation)
    for name in (z.name,):
        zv, uv = plan[name], plan[u.name]
        assert zv.offset + zv.size <= uv.offset or uv.offset + uv.size <= zv.offset, plan.to_text()


def two_updates(w, g):
    a = w * 2 + g
    return a @ g, a


def test_donation_to_a_named_output_leaf():
    # jit's write-back names the output each argument receives ({parameter: output leaf}):
    # of two outputs of w's shape, the second one goes into w's buffer, not the first.
    w, g = np.ones((8, 8), np.float32), np.full((8, 8), 3, np.float32)
    for leaf in (0, 1):
        result = optimize(traced(two_updates, w, g), donated_parameters={0: leaf})
        module, plan = result.module, result.facts["buffer-assignment"]
        outputs = [plan[o.name].location for o in module.entry.root.operands]
        assert outputs[leaf] == ("parameter", 0) and outputs[1 - leaf][0] != "parameter"
        check_plan(module, plan, [w, g])
