"""Malformed HLO gives an HloParseError with file:line:column, and run-hlo exits 2 with a
message: never another exception, a hang or a run that exhausts memory (issue 19)."""

import numpy as np
import pytest

from nbxla.__main__ import main
from nbxla.errors import HloParseError
from nbxla.hlo.evaluator import evaluate
from nbxla.hlo.parser import parse_hlo

ADD = """HloModule m
ENTRY e {
  x = f32[4] parameter(0)
  y = f32[4] parameter(1)
  ROOT s = f32[4] add(x, y)
}
"""

REDUCER = """r {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
"""


def _error(text, line):
    with pytest.raises(HloParseError) as info:
        parse_hlo(text, "m.hlo")
    assert info.value.line == line, str(info.value)
    assert str(info.value).startswith(f"m.hlo:{line}:")
    return str(info.value)


def test_duplicate_parameter_numbers_are_rejected():
    msg = _error(ADD.replace("parameter(1)", "parameter(0)"), 4)
    assert "both parameter(0)" in msg


def test_parameter_numbers_must_be_dense():
    _error(ADD.replace("parameter(1)", "parameter(5)"), 4)


def test_missing_operand_is_rejected_at_its_line():
    msg = _error(ADD.replace("add(x, y)", "add(x)"), 5)
    assert "operand" in msg


def test_mismatched_dtypes_are_rejected():
    _error(ADD.replace("y = f32[4]", "y = s32[4]"), 5)


def test_non_utf8_text_names_line_and_column():
    data = ADD.encode().replace(b"add(", b"a\xffdd(")
    with pytest.raises(HloParseError, match="not UTF-8") as info:
        parse_hlo(data, "m.hlo")
    assert info.value.line == 5


def test_deeply_nested_tuple_shape_is_refused():
    shape = "(" * 5000 + "f32[4]" + ")" * 5000
    msg = _error(ADD.replace("x = f32[4]", f"x = {shape}"), 3)
    assert "nested deeper" in msg


def test_recursive_computation_is_refused():
    text = """HloModule m
r {
  a = f32[] parameter(0)
  ROOT c = f32[] call(a), to_apply=r
}
ENTRY e {
  x = f32[] parameter(0)
  ROOT c = f32[] call(x), to_apply=r
}
"""
    assert "recursive" in _error(text, 4)


def test_stride_zero_window_and_slice_are_rejected():
    window = "HloModule m\n" + REDUCER + """ENTRY e {
  x = f32[8] parameter(0)
  z = f32[] constant(0)
  ROOT w = f32[4] reduce-window(x, z), window={size=2 stride=0}, to_apply=r
}
"""
    _error(window, 10)
    sliced = """HloModule m
ENTRY e {
  x = f32[8] parameter(0)
  ROOT s = f32[4] slice(x), slice={[0:8:0]}
}
"""
    _error(sliced, 4)


@pytest.mark.parametrize("attr", ["offset_dims={5}", "collapsed_slice_dims={7}", "start_index_map={-1}",
                                  "index_vector_dim=9", "slice_sizes={1,99}"])
def test_invalid_gather_dimension_numbers_are_rejected(attr):
    good = {"offset_dims": "offset_dims={1}", "collapsed_slice_dims": "collapsed_slice_dims={0}",
            "start_index_map": "start_index_map={0}", "index_vector_dim": "index_vector_dim=1",
            "slice_sizes": "slice_sizes={1,10}"}
    good[attr.split("=")[0]] = attr
    text = f"""HloModule m
ENTRY e {{
  x = f32[4,10] parameter(0)
  i = s32[5,1] parameter(1)
  ROOT g = f32[5,10] gather(x, i), {", ".join(good.values())}
}}
"""
    _error(text, 5)


def test_valid_module_still_parses_and_runs():
    module = parse_hlo(ADD)
    out = evaluate(module, [np.ones(4, np.float32), np.ones(4, np.float32)])
    np.testing.assert_array_equal(out, np.full(4, 2, np.float32))


@pytest.mark.parametrize("text,needle", [
    (ADD.replace("f32[4]", "f32[1000000000000]"), "too large for random inputs"),
    (ADD.replace("parameter(1)", "parameter(0)"), "both parameter(0)"),
    ("HloModule m\nENTRY e {\n  x = f32[4] parameter(0)\n  ROOT y = f32[4] bogus-op(x)\n}\n", "m.hlo:4:"),
])
def test_run_hlo_exits_2_with_a_message(tmp_path, capsys, text, needle):
    path = tmp_path / "m.hlo"
    path.write_text(text)
    rc = main(["run-hlo", str(path)])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("error:") and needle in err.replace(str(tmp_path) + "/", ""), err


def test_run_hlo_non_utf8_exits_2(tmp_path, capsys):
    path = tmp_path / "m.hlo"
    path.write_bytes(ADD.encode() + b"\xff")
    assert main(["run-hlo", str(path)]) == 2
    assert "not UTF-8" in capsys.readouterr().err


def test_evaluator_refuses_duplicate_parameter_numbers_in_a_built_module():
    from nbxla.errors import EvaluationError
    module = parse_hlo(ADD.replace("parameter(1)", "parameter(0)"), verify=False)
    with pytest.raises(EvaluationError, match=r"parameter numbers \[0, 0\]"):
        evaluate(module, [np.ones(4, np.float32), np.ones(4, np.float32)])
