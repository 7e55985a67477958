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
from nbxla.hlo.opcodes import CPU_PLACEMENT, ELEMENTWISE, OPCODES
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


def test_every_opcode_is_differentiated_or_says_why_not():
    """The fourth table: a transpose (VJP) rule, a zero gradient (integer-valued results), or a
    stated reason it cannot be differentiated."""
    from nbxla.autodiff.rules import NOT_DIFFERENTIABLE, TRANSPOSE_RULES, ZERO_GRADIENT
    tables = [set(TRANSPOSE_RULES), set(ZERO_GRADIENT), set(NOT_DIFFERENTIABLE)]
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
