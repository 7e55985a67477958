"""The Graphviz view: well-formed DOT, every instruction drawn, fusions as clusters."""

import re
import shutil

import numpy as np
import pytest

from nbxla.hlo import Builder, Computation, Module, Shape, scalar_computation
from nbxla.hlo import graphviz
from nbxla.hlo.graphviz import render_svg, to_dot

F32 = Shape("f32", (4, 8))
_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"')


def outside_quotes(dot: str) -> str:
    """The DOT text with every quoted string removed; fails on an unterminated string."""
    rest = _QUOTED.sub('""', dot)
    assert rest.count('"') % 2 == 0 and '\\"' not in rest.replace('""', "")
    return rest


def labels(dot: str) -> list[str]:
    return [m.group(1) for m in re.finditer(r'label="((?:[^"\\]|\\.)*)"', dot)]


def dot_unescape(label: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), label)


def node_lines(dot: str) -> list[str]:
    return [line for line in dot.splitlines() if re.match(r"\s*n\d+ \[", line)]


def edge_lines(dot: str) -> list[str]:
    return [line for line in dot.splitlines() if "->" in outside_quotes(line)]


def check_balanced(dot: str) -> None:
    depth = 0
    for ch in outside_quotes(dot):
        depth += {"{": 1, "}": -1}.get(ch, 0)
        assert depth >= 0
    assert depth == 0
    assert dot.startswith("digraph ") and dot.rstrip().endswith("}")


def elementwise_module():
    b = Builder("main")
    x, y = b.parameter(F32, "x"), b.parameter(F32, "y")
    s = b.op("add", b.op("multiply", x, x), y)
    total = b.reduce(s, b.constant(0, "f32"), (0, 1), scalar_computation("add", "f32"))
    return Module("m", b.build(total))


def fused(name: str, opcode: str) -> Computation:
    b = Builder(name)
    p0, p1 = b.parameter(F32, "param_0"), b.parameter(F32, "param_1")
    return b.build(b.op("negate", b.op(opcode, p0, p1)))


def fusion_module():
    b = Builder("main")
    x, y = b.parameter(F32, "x"), b.parameter(F32, "y")
    f1 = b.op("fusion", x, y, kind="kLoop", calls=fused("fused_computation", "add"))
    f2 = b.op("fusion", f1, y, kind="kLoop", calls=fused("fused_computation.1", "multiply"))
    return Module("fusions", b.build(b.op("tuple", f2, x)))


def test_every_instruction_is_a_node_with_an_edge_per_operand():
    module = elementwise_module()
    dot = to_dot(module)
    check_balanced(dot)
    entry = module.entry
    assert len(node_lines(dot)) == len(entry.instructions)
    assert len(edge_lines(dot)) == sum(len(i.operands) for i in entry.instructions)
    text = "\n".join(labels(dot))
    for instr in entry.instructions:
        assert "%" + instr.name in text
    # The reducer is named, not expanded.
    reducer = entry.root.attrs["to_apply"]
    assert f"to_apply=%{reducer.name}" in text
    assert "%lhs" not in text


def test_parameters_and_root_are_marked():
    module = elementwise_module()
    nodes = node_lines(to_dot(module))
    params = [n for n in nodes if "parameter(" in n]
    assert len(params) == 2 and all("shape=ellipse" in n for n in params)
    roots = [n for n in nodes if "peripheries=2" in n]
    assert len(roots) == 1 and "ROOT %" + module.entry.root.name in roots[0]


def test_fusions_are_clusters_holding_their_fused_instructions():
    module = fusion_module()
    dot = to_dot(module)
    check_balanced(dot)
    assert len(re.findall(r"subgraph cluster_\w+ \{", dot)) == 2
    fusions = [i for i in module.entry.instructions if i.opcode == "fusion"]
    text = "\n".join(labels(dot))
    for f in fusions:
        assert f"%{f.name} = fusion kLoop" in text
        for instr in f.attrs["calls"].instructions:
            assert "%" + instr.name in text
    drawn = [i for i in module.entry.instructions if i.opcode != "fusion"]
    drawn += [i for f in fusions for i in f.attrs["calls"].instructions]
    assert len(node_lines(dot)) == len(drawn)
    # Every operand is an edge: into fused parameters for a fusion, else into the user.
    all_instrs = list(module.entry.instructions) + [i for f in fusions for i in f.attrs["calls"].instructions]
    assert len(edge_lines(dot)) == sum(len(i.operands) for i in all_instrs)
    # A fused root is marked as a root inside its cluster, and the entry ROOT once more.
    assert sum("peripheries=2" in n for n in node_lines(dot)) == 3


def test_fusion_output_feeds_its_users():
    module = fusion_module()
    dot = to_dot(module)
    ids = {m.group(2): m.group(1) for m in re.finditer(r'(n\d+) \[label="(?:ROOT )?%([\w.]+)', dot)}
    f1, f2 = [i for i in module.entry.instructions if i.opcode == "fusion"]
    f1_root = ids[f1.attrs["calls"].root.name]
    f2_param0 = ids[f2.attrs["calls"].parameters[0].name]
    assert f"{f1_root} -> {f2_param0}" in dot


def test_labels_are_escaped():
    b = Builder("main")
    x = b.parameter(F32, "x")
    target = 'weird"target{with}<angle>\\l|\nnewline'
    call = b.op("custom-call", x, shape=F32, custom_call_target=target)
    dot = to_dot(Module("esc", b.build(call)), title='title with "quotes"')
    check_balanced(dot)
    # Undoing DOT's escapes gives back the label text exactly: the HLO spelling of the target.
    shown = [dot_unescape(label) for label in labels(dot)]
    assert shown[0] == 'title with "quotes"'
    hlo_spelling = 'custom_call_target="weird\\"target{with}<angle>\\\\l|\\nnewline"'
    assert any(hlo_spelling in label.split("\n") for label in shown)


def test_constants_show_small_values_only():
    b = Builder("main")
    small = b.constant(np.array([1, 2, 3], np.int32))
    big = b.constant(np.arange(100, dtype=np.float32))
    b.op("tuple", small, big)
    text = "\n".join(labels(to_dot(b.build())))
    assert "{1, 2, 3}" in text
    assert "(100 values)" in text


def test_while_bodies_are_named_in_the_label():
    s32 = Shape("s32")
    cb = Builder("cond")
    p = cb.parameter(s32, "i")
    cond = cb.build(cb.compare(p, cb.constant(10, "s32"), "LT"))
    bb = Builder("body")
    q = bb.parameter(s32, "i")
    body = bb.build(bb.op("add", q, bb.constant(1, "s32")))
    b = Builder("main")
    loop = b.op("while", b.constant(0, "s32"), condition=cond, body=body)
    text = "\n".join(labels(to_dot(Module("loop", b.build(loop)))))
    assert "condition=%cond" in text and "body=%body" in text


def test_a_computation_can_be_drawn_alone():
    comp = fused("fused_computation", "add")
    dot = to_dot(comp)
    check_balanced(dot)
    assert dot.startswith('digraph "fused_computation"')


def test_render_svg_says_none_without_dot(monkeypatch):
    monkeypatch.setattr(graphviz.shutil, "which", lambda name: None)
    assert render_svg(to_dot(elementwise_module())) is None


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz `dot` is not installed")
def test_render_svg_with_dot():
    svg = render_svg(to_dot(fusion_module()))
    assert svg is not None and "<svg" in svg
