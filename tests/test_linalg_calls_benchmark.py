"""Smoke test of benchmarks/linalg_calls.py: it runs and prints one row per call, each with
nbxla's result agreeing with NumPy's.  Timings are never asserted."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_prints_a_checked_row_per_call():
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "linalg_calls.py"), "--sizes", "5",
                           "--rounds", "1", "--calls", "2", "--clock", "cpu"],
                          capture_output=True, text=True, timeout=240, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    rows = [line for line in proc.stdout.splitlines() if line.endswith(("ok", "DIFFERS"))]
    names = [row[:24].strip() for row in rows]
    assert names == [f"{call} 5 {t}" for t in ("float64", "float32")
                     for call in ("cholesky", "solve vec", "solve 4 rhs", "inv")], proc.stdout
    assert all(row.endswith("ok") for row in rows), proc.stdout
    assert "OpenBLAS" in proc.stdout or "core" in proc.stdout, proc.stdout
