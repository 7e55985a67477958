"""How many cases of a parametrize list the symbolic reruns take (``tests/symbolic_rerun.py``):
every one, or ``NBXLA_RERUN_CASES`` (a number, or ``all``); and what the reruns do once (a
module's check, a function's compile with unknown dimensions) rather than per case."""

import types

import numpy as np
import pytest

from tests.symbolic_rerun import _thinned, cases_wanted, check_symbolic, rerun, rerun_device


@pytest.mark.parametrize("setting, want", [("", 4), ("all", 0), ("ALL", 0), ("7", 7)])
def test_the_environment_sets_the_cases(monkeypatch, setting, want):
    monkeypatch.setenv("NBXLA_RERUN_CASES", setting)
    assert cases_wanted(4) == want


@pytest.mark.parametrize("setting", ["1", "some", "-3"])
def test_a_bad_setting_is_named(monkeypatch, setting):
    monkeypatch.setenv("NBXLA_RERUN_CASES", setting)
    with pytest.raises(ValueError, match="NBXLA_RERUN_CASES"):
        cases_wanted(4)


def test_a_cut_list_keeps_its_ends_and_the_original_keeps_every_case():
    @pytest.mark.parametrize("k", list(range(10)))
    def test_k(k):
        pass
    cut = _thinned(test_k, 4)
    (mark,) = cut.pytestmark
    assert mark.args[1] == [0, 3, 6, 9]
    assert test_k.pytestmark[0].args[1] == list(range(10))
    assert _thinned(test_k, 10) is test_k


def test_the_reruns_take_every_case_by_default(monkeypatch):
    monkeypatch.delenv("NBXLA_RERUN_CASES", raising=False)
    namespace = {}
    module = types.ModuleType("tests.listed")

    @pytest.mark.parametrize("k", list(range(10)))
    def test_k(k):
        pass
    module.test_k = test_k
    rerun(namespace, module)
    assert namespace["test_k__listed"].pytestmark[0].args[1] == list(range(10))
    monkeypatch.setenv("NBXLA_RERUN_CASES", "3")
    rerun(namespace, module)
    assert namespace["test_k__listed"].pytestmark[0].args[1] == [0, 4, 9]


# ---- what the reruns do once: a module's check, a function's compile ------------------------------

def _row_scale_module(by: int = 2):
    from nbxla.hlo.parser import parse_hlo
    return parse_hlo(f"""HloModule scale
ENTRY main {{
  p = f32[6,3] parameter(0)
  c = f32[] constant({by})
  b = f32[6,3] broadcast(c), dimensions={{}}
  ROOT m = f32[6,3] multiply(p, b)
}}""")


def test_the_same_module_is_checked_once_under_the_same_compiler_state(monkeypatch):
    import tests.rerun_memo as rerun_memo
    import tests.symbolic_rerun as symbolic_rerun
    from nbxla.codegen import column_reductions
    # (a first compile sets the code generator's globals made when first needed -- its target
    # machine -- a change of state that makes the next check of any module compile again)
    check_symbolic(_row_scale_module(3))
    compiles = []
    original = symbolic_rerun.compile_symbolic_module
    monkeypatch.setattr(symbolic_rerun, "compile_symbolic_module",
                        lambda *a, **k: (compiles.append(1), original(*a, **k))[1])
    monkeypatch.setattr(rerun_memo, "CHECKED", {})
    first, again = _row_scale_module(), _row_scale_module()     # (other instruction names)
    assert rerun_memo.canonical_text(first) == rerun_memo.canonical_text(again)
    assert check_symbolic(first) is None and check_symbolic(again) is None
    assert len(compiles) == 1
    monkeypatch.setattr(column_reductions, "COLUMN_BLOCK", 48)  # (what the code generator reads)
    assert check_symbolic(again) is None
    assert len(compiles) == 2


def test_a_function_jitted_again_at_the_same_call_compiles_once(monkeypatch):
    import nbxla
    import nbxla.api as api
    import tests.rerun_memo as rerun_memo
    from nbxla.runtime.cache import CompilationCache
    compiles = []
    original = api.compile_symbolic
    monkeypatch.setattr(api, "compile_symbolic", lambda *a, **k: (compiles.append(1), original(*a, **k))[1])
    monkeypatch.setattr(api, "find_or_compile", rerun_memo.sharing_find_or_compile)
    monkeypatch.setattr(rerun_memo, "COMPILED", {})

    def scaled(by):
        return lambda x: np.tanh(x) * by
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    twice = scaled(2.0)
    counts = []
    for fn, want in ((twice, np.tanh(x) * 2), (twice, np.tanh(x) * 2), (scaled(3.0), np.tanh(x) * 3)):
        got = nbxla.jit(fn, dynamic=True, cache=CompilationCache())(x)
        np.testing.assert_allclose(got, want, rtol=1e-6)
        counts.append(len(compiles))
    # (a compile for each set of unknown dimensions tried; the third closure holds another value)
    assert counts[0] >= 1 and counts[1] == counts[0] and counts[2] == 2 * counts[0]


def test_a_backend_tests_evaluator_stays_its_oracle():
    assert rerun_device("evaluator", None, evaluator_is_the_oracle=True) == ("evaluator", None)
    assert rerun_device("cpu", None, evaluator_is_the_oracle=True) == ("cpu", True)
    assert rerun_device("evaluator", None, evaluator_is_the_oracle=False) == ("cpu", True)
    assert rerun_device("cpu", False, evaluator_is_the_oracle=False) == ("cpu", False)
