"""The per-opcode tables cover the same set, the property groups name only real opcodes, and
docs/supported_numpy.md lists exactly what the frontend registry implements."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import nbxla.frontend  # noqa: F401  (registers every lowering rule)
from nbxla.codegen.elemental import _COMPLEX_FUNCTIONS, COMPLEX_RULES, ELEMENTAL_RULES, ElementalEmitter
from nbxla.frontend.registry import FUNCTIONS, UFUNCS
from nbxla.hlo import opcodes
from nbxla.hlo.evaluator import RULES
from nbxla.hlo.opcodes import ELEMENTWISE, OPCODES
from nbxla.hlo.placement import CPU_PLACEMENT, KINDS, TABLES, Placement, placement
from nbxla.hlo.shape_inference import SHAPE_RULE_OPCODES

DOCS = Path(__file__).resolve().parents[2] / "docs" / "supported_numpy.md"


def test_shape_rules_cover_the_opcodes():
    assert set(SHAPE_RULE_OPCODES) == set(OPCODES)


def test_evaluator_rules_cover_the_opcodes():
    assert set(RULES) == set(OPCODES)


def test_every_opcode_runs_on_the_cpu_somehow():
    """Each opcode is emitted elementally (inside fused kernels) or has a stated placement."""
    native = set(ELEMENTAL_RULES) | set(COMPLEX_RULES)
    assert native | set(CPU_PLACEMENT) == set(OPCODES)
    assert not set(ELEMENTAL_RULES) & set(CPU_PLACEMENT), "an opcode is either fused or placed"
    assert set(ELEMENTAL_RULES) <= set(OPCODES) and set(COMPLEX_RULES) <= set(OPCODES)


@pytest.mark.parametrize("backend", sorted(TABLES))
def test_every_opcode_has_a_placement_on_every_backend(backend):
    """CPU, CUDA and AOT each say how every opcode runs -- or refuse it with a reason -- and
    every handler the table names is a method of the backend that dispatches from it."""
    from nbxla.codegen.aot_driver import _ProgramEmitter
    from nbxla.runtime.cpu_executable import CpuExecutable
    from nbxla.runtime.cuda_executable import CudaExecutable
    runner = {"cpu": CpuExecutable, "cuda": CudaExecutable, "aot": _ProgramEmitter}[backend]
    table = TABLES[backend]
    assert set(table) == set(OPCODES)
    for op, p in table.items():
        for q in (p, p.otherwise):
            if q is None:
                continue
            assert q.kind in KINDS and q.how, (backend, op, q)
            if q.kind == "refused":
                assert len(q.how) > 20, f"{backend} refuses {op} without a reason"
            if q.kind not in ("data", "fused") and not (backend == "aot" and q.kind == "view"):
                assert q.handler and callable(getattr(runner, q.handler, None)), (backend, op, q)
        if p.kind in ("fused", "view") and op not in ("slice", "opt-barrier"):
            assert p.otherwise is not None, f"{backend}: how does {op} run alone / as no view?"


def test_placement_resolves_views_and_lone_fused_ops():
    from nbxla.hlo import Builder, Shape
    from nbxla.hlo.placement import AOT, CPU
    b = Builder("p")
    x = b.parameter(Shape("f32", (4, 6)))
    view = b.op("bitcast", x, shape=Shape("f32", (24,)))
    other = b.op("bitcast", x, shape=Shape("s32", (4, 6)))
    alone = b.op("add", x, x)
    assert placement(CPU, view).kind == "view" and placement(CPU, other).kind == "host"
    assert placement(AOT, other).kind == "kernel" and placement(CPU, alone).kind == "host"
    assert placement(AOT, alone).kind == "kernel"


def test_fusion_report_names_the_library_calls_the_cpu_table_places():
    assert {op for op, p in TABLES["cpu"].items() if p.kind == "library"} == \
        {"dot", "convolution", "sort", "custom-call", "topk", "fft"}


def test_every_opcode_is_differentiated_or_says_why_not():
    """The fourth table: a VJP rule, a zero gradient (integer-valued results), or a
    stated reason it cannot be differentiated."""
    from nbxla.autodiff.rules import NOT_DIFFERENTIABLE, VJP_RULES, ZERO_GRADIENT
    tables = [set(VJP_RULES), set(ZERO_GRADIENT), set(NOT_DIFFERENTIABLE)]
    assert set().union(*tables) == set(OPCODES)
    assert sum(len(t) for t in tables) == len(set().union(*tables)), "an opcode is in two tables"


def test_elementwise_opcodes_are_all_emitted_natively():
    assert ELEMENTWISE <= set(ELEMENTAL_RULES) | set(COMPLEX_RULES)


def test_codegen_rules_name_real_methods():
    for table in (ELEMENTAL_RULES, COMPLEX_RULES):
        for op, method in table.items():
            assert callable(getattr(ElementalEmitter, method, None)), (op, method)
    assert set(_COMPLEX_FUNCTIONS) <= ELEMENTWISE


@pytest.mark.parametrize("group", [name for name, v in vars(opcodes).items()
                                   if name.isupper() and isinstance(v, frozenset)])
def test_property_groups_name_only_opcodes(group):
    assert getattr(opcodes, group) <= OPCODES.keys()


def test_cost_notions_nest_as_documented():
    """The three cost notions differ on purpose (see their comments in hlo/opcodes.py)."""
    assert opcodes.COSTLY_TO_RECOMPUTE < opcodes.TRANSCENDENTAL < opcodes.EXPENSIVE


# ---- docs/supported_numpy.md against the frontend registry --------------------------------------

def _section(text: str, heading: str) -> str:
    """From ``heading`` to the next heading of the same or a higher level."""
    start = text.index(heading)
    level = len(heading) - len(heading.lstrip("#"))
    end = re.search(rf"^#{{1,{level}}} ", text[start + len(heading):], flags=re.M)
    return text[start:start + len(heading) + end.start() if end else len(text)]


def _names(text: str) -> set[str]:
    """Every word-like token inside backticks (``a b c`` lists and ``np.x`` spellings)."""
    words = set()
    for span in re.findall(r"`([^`]+)`", text):
        words.update(re.findall(r"[A-Za-z_][A-Za-z0-9_.]*", span))
    return words


def _numpy_object(name: str):
    obj = np
    for part in name.removeprefix("np.").split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def test_docs_list_every_registered_ufunc_and_function():
    supported = _section(DOCS.read_text(), "## Supported")
    documented = {_numpy_object(n) for n in _names(supported)} - {None}
    missing_ufuncs = sorted(u.__name__ for u in UFUNCS if u not in documented)
    missing_functions = sorted(getattr(f, "__name__", str(f)) for f in FUNCTIONS if f not in documented)
    assert not missing_ufuncs, f"ufuncs implemented but not in {DOCS.name}: {missing_ufuncs}"
    assert not missing_functions, f"functions implemented but not in {DOCS.name}: {missing_functions}"


def test_docs_list_nothing_the_registry_lacks():
    supported = _section(DOCS.read_text(), "## Supported")
    ufunc_rows = _section(supported, "### Operators and ufuncs")
    ufunc_rows = ufunc_rows[:ufunc_rows.index("| ufunc keywords")]
    for name in _names(ufunc_rows):
        obj = _numpy_object(name)
        if isinstance(obj, np.ufunc):
            assert obj in UFUNCS, f"{DOCS.name} lists np.{name}, which the frontend does not lower"
    for heading in ("### Reductions and statistics", "### Shapes, joining, selection",
                    "### Linear algebra and sorting"):
        listed = _section(supported, heading)
        while re.search(r"\([^()]*\)", listed):      # parameters in parentheses are not functions
            listed = re.sub(r"\([^()]*\)", "", listed)
        for name in _names(listed) - {n for n in _names(listed) if n.startswith("ndarray.")}:
            obj = _numpy_object(name)
            if callable(obj) and not isinstance(obj, type) and not isinstance(obj, np.ufunc):
                assert obj in FUNCTIONS, f"{DOCS.name} ({heading}) lists {name}, which has no rule"
