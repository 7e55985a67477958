"""How many cases of a parametrize list the symbolic reruns take (``tests/symbolic_rerun.py``):
the rerun module's number, or ``NBXLA_RERUN_CASES`` (a number, or ``all``)."""

import pytest

from tests.symbolic_rerun import _thinned, cases_wanted


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
