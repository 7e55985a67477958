"""HLO text that once failed unclearly (issue 28): each is refused with an NbxlaError naming
the HLO line and what to do."""

from __future__ import annotations

import pytest

from nbxla.__main__ import main
from nbxla.errors import HloParseError
from nbxla.hlo.parser import parse_hlo

_UNKNOWN_CUSTOM_CALL = """HloModule m

ENTRY %main (x: f32[4]) -> f32[4] {
  %x = f32[4]{0} parameter(0)
  ROOT %c = f32[4]{0} custom-call(f32[4]{0} %x), custom_call_target="my_unknown_target"
}
"""


@pytest.mark.parametrize("backend", ["cpu", "evaluator"])
def test_run_hlo_names_the_line_of_an_unknown_custom_call(backend, tmp_path, capsys):
    path = tmp_path / "m.hlo"
    path.write_text(_UNKNOWN_CUSTOM_CALL)
    assert main(["run-hlo", "--backend", backend, str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:5:" in err and "'my_unknown_target'" in err and "CUSTOM_CALL_TARGETS" in err


_SCATTER = """HloModule m

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(f32[] %a, f32[] %b)
}

ENTRY %main (x: f32[4,3], i: s32[2,1], u: f32[2,3]) -> f32[4,3] {
  %x = f32[4,3]{1,0} parameter(0)
  %i = s32[2,1]{1,0} parameter(1)
  %u = f32[2,3]{1,0} parameter(2)
  ROOT %s = f32[4,3]{1,0} scatter(f32[4,3]{1,0} %x, s32[2,1]{1,0} %i, f32[2,3]{1,0} %u), DIMS, to_apply=%add
}
"""


@pytest.mark.parametrize("dims", [
    "update_window_dims={5}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1",
    "update_window_dims={1}, inserted_window_dims={7}, scatter_dims_to_operand_dims={0}, index_vector_dim=1",
    "update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={9}, index_vector_dim=1",
    "update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={-1}, index_vector_dim=1",
    "update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=5",
    "update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0,1,2}, index_vector_dim=1",
])
def test_scatter_dimension_numbers_out_of_range_are_refused_at_their_line(dims):
    with pytest.raises(HloParseError, match=r"^m.hlo:13:\d+: %s: scatter"):
        parse_hlo(_SCATTER.replace("DIMS", dims), "m.hlo")


# ---- fuzz family: a required attribute left out (was a KeyError in a pass or the code generator) --

_MISSING_ATTRIBUTE = """HloModule m

ENTRY %main (x: f32[9]) -> f32[9] {
  %x = f32[9]{0} parameter(0)
  %c = f32[] constant(2)
  %b = f32[9]{0} BROADCAST
  %r = f32[9]{0} REVERSE
  ROOT %s = f32[9]{0} add(f32[9]{0} %b, f32[9]{0} %r)
}
"""


@pytest.mark.parametrize("line, broadcast, reverse", [
    (6, "broadcast(f32[] %c)", "reverse(f32[9]{0} %x), dimensions={0}"),
    (7, "broadcast(f32[] %c), dimensions={}", "reverse(f32[9]{0} %x)"),
])
def test_a_missing_required_attribute_is_refused_at_its_line(line, broadcast, reverse):
    text = _MISSING_ATTRIBUTE.replace("BROADCAST", broadcast).replace("REVERSE", reverse)
    with pytest.raises(HloParseError, match=rf"^m.hlo:{line}:\d+: %\w: \w+ needs the attribute\(s\) dimensions"):
        parse_hlo(text, "m.hlo")
