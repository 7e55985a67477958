"""benchmarks/blas_info.py: the OpenBLAS pins are removed before NumPy loads, and the header of
benchmarks/programs.py says which kernel ran and which pins it removed."""

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.blas_info import PINS, openblas_kernel, unpin_openblas  # noqa: E402


def test_unpin_removes_the_pins_and_returns_what_was_set(monkeypatch):
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")
    monkeypatch.delenv("OPENBLAS_L2_SIZE", raising=False)
    assert unpin_openblas() == {"OPENBLAS_CORETYPE": "Haswell"}
    assert not any(k in os.environ for k in PINS)
    assert unpin_openblas() == {}


def test_the_kernel_line_is_text():
    assert isinstance(openblas_kernel(), str) and openblas_kernel()


def test_programs_script_unsets_a_pin_before_numpy_loads_and_says_so():
    env = dict(os.environ, OPENBLAS_CORETYPE="Haswell", PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "benchmarks/programs.py", "--only", "atax", "--size", "small",
                           "--no-jax", "--seconds", "0.05"], capture_output=True, text=True, timeout=240,
                          cwd=REPO, env=env)
    assert proc.returncode == 0, proc.stderr
    header = proc.stdout.splitlines()[0]
    assert "unset here (were {'OPENBLAS_CORETYPE': 'Haswell'})" in header, header
    assert "core Haswell" not in header, header
