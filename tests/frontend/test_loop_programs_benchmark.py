"""Smoke test of benchmarks/loop_programs.py: it runs on small sizes and nbxla agrees with
NumPy on every program it times (timings are never asserted)."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_quick_run_agrees_with_numpy():
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "loop_programs.py"), "--quick",
                           "--repeats", "1", "--only", "trisolv,iir,newton_sqrt,histogram"],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    rows = [line for line in proc.stdout.splitlines() if " first call " in line and "whiles" in line]
    assert len(rows) == 4, proc.stdout
    assert all(row.rstrip().endswith("ok") for row in rows), proc.stdout
