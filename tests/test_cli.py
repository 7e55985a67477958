"""``python -m nbxla``: run-hlo's exit codes and comparisons, and the demo."""

import re
import subprocess
import sys

import numpy as np
import pytest

from nbxla.__main__ import main

TINY = """\
HloModule tiny, entry_computation_layout={(f32[2,3]{1,0}, f32[2,3]{1,0})->(f32[2,3]{1,0}, f32[])}

add_f32 {
  lhs = f32[] parameter(0)
  rhs = f32[] parameter(1)
  ROOT add = f32[] add(lhs, rhs)
}

ENTRY main {
  x = f32[2,3]{1,0} parameter(0)
  y = f32[2,3]{1,0} parameter(1)
  prod = f32[2,3]{1,0} multiply(x, y)
  zero = f32[] constant(0)
  total = f32[] reduce(prod, zero), dimensions={0,1}, to_apply=add_f32
  ROOT out = (f32[2,3]{1,0}, f32[]) tuple(prod, total)
}
"""

X = np.arange(6, dtype=np.float32).reshape(2, 3)
Y = np.full((2, 3), 0.5, np.float32)


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "tiny.hlo"
    path.write_text(TINY)
    return path


def npz(tmp_path, name="case.npz", **arrays):
    path = tmp_path / name
    np.savez(path, **arrays)
    return str(path)


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_matching_outputs_pass(tiny, tmp_path, capsys):
    inputs = npz(tmp_path, in0=X, in1=Y, out0=X * Y, out1=np.float32((X * Y).sum()))
    code, out, err = run(capsys, "run-hlo", str(tiny), "--inputs", inputs)
    assert code == 0, out + err
    assert out.count("PASS") == 2 and "FAIL" not in out
    assert "f32[2,3]" in out


def test_wrong_outputs_fail(tiny, tmp_path, capsys):
    inputs = npz(tmp_path, in0=X, in1=Y, out0=X * Y, out1=np.float32(1.0))
    code, out, _ = run(capsys, "run-hlo", str(tiny), "--inputs", inputs)
    assert code == 1
    assert "out0 f32[2,3]: PASS" in out and "out1 f32[]: FAIL" in out


def test_output_count_mismatch_fails(tiny, tmp_path, capsys):
    inputs = npz(tmp_path, in0=X, in1=Y, out0=X * Y)
    code, out, _ = run(capsys, "run-hlo", str(tiny), "--inputs", inputs)
    assert code == 1
    assert "2 result(s) but 1 expected" in out


def test_without_inputs_random_values_are_used(tiny, capsys):
    code, out, _ = run(capsys, "run-hlo", str(tiny))
    assert code == 0
    assert "random inputs" in out
    assert "result 0: f32[2,3]" in out and "result 1: f32[]" in out


def test_inputs_of_the_wrong_shape_are_a_clear_error(tiny, tmp_path, capsys):
    inputs = npz(tmp_path, in0=X.T.copy(), in1=Y)
    code, _, err = run(capsys, "run-hlo", str(tiny), "--inputs", inputs)
    assert code == 2
    assert "in0 is f32[3,2] but parameter 0 (%x) is f32[2,3]" in err


def test_malformed_text_names_file_and_line(tmp_path, capsys):
    path = tmp_path / "bad.hlo"
    lines = TINY.splitlines()
    lines[12] = "  prod = f32[2,3]{1,0} frobnicate(x, y)"      # line 13
    path.write_text("\n".join(lines) + "\n")
    code, out, err = run(capsys, "run-hlo", str(path))
    assert code == 2
    assert re.search(re.escape(str(path)) + r":13:\d+", err), err
    assert "Traceback" not in err


def test_missing_file_is_a_clear_error(tmp_path, capsys):
    code, _, err = run(capsys, "run-hlo", str(tmp_path / "nope.hlo"))
    assert code == 2 and "cannot read" in err


def test_demo_runs_small(capsys):
    code, out, err = run(capsys, "demo", "--size", "64", "--repeats", "1")
    assert code == 0, out + err
    assert "== stage hlo ==" in out and "HloModule running_example" in out
    assert "== stage optimized_hlo ==" in out and "kind=kInput" in out
    assert "kernels: 6 before fusion -> 1 after" in out
    assert "match:" in out and "backend: cpu (LLVM)" in out


def test_module_entry_point_lists_commands():
    proc = subprocess.run([sys.executable, "-m", "nbxla", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0
    assert "run-hlo" in proc.stdout and "demo" in proc.stdout


# No header line (as in XLA's test files); bf16 in and out.
BF16_HEADERLESS = """\
%scale (p: bf16[4]) -> bf16[4] {
  %p = bf16[4]{0} parameter(0)
  %c = bf16[] constant(1.5)
  %b = bf16[4]{0} broadcast(%c), dimensions={}
  ROOT %m = bf16[4]{0} multiply(%p, %b)
}

ENTRY %main (x: bf16[4]) -> bf16[4] {
  %x = bf16[4]{0} parameter(0)
  ROOT %f = bf16[4]{0} fusion(%x), kind=kLoop, calls=%scale
}
"""


@pytest.mark.parametrize("backend", ["cpu", "evaluator"])
def test_bf16_module_without_header_with_ml_dtypes_npz(tmp_path, capsys, backend):
    """NumPy saves ml_dtypes arrays as raw bytes (|V2); run-hlo reads them as the parameter's
    and the result's bf16, and compares with bf16's tolerance (rtol 1e-2)."""
    import ml_dtypes
    path = tmp_path / "bf16.hlo"
    path.write_text(BF16_HEADERLESS)
    x = np.array([1, 2, 3, 4], ml_dtypes.bfloat16)
    good = npz(tmp_path, "good.npz", in0=x, out0=(x * ml_dtypes.bfloat16(1.5)))
    code, out, err = run(capsys, "run-hlo", str(path), "--inputs", good, "--backend", backend)
    assert code == 0, out + err
    assert "module main," in out and "out0 bf16[4]: PASS" in out and "rtol 0.01" in out
    bad = npz(tmp_path, "bad.npz", in0=x, out0=(x * ml_dtypes.bfloat16(1.53)))   # 2% off
    code, out, _ = run(capsys, "run-hlo", str(path), "--inputs", bad, "--backend", backend)
    assert code == 1 and "out0 bf16[4]: FAIL" in out
