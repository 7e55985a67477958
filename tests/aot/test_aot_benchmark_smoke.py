"""Smoke test of benchmarks/aot.py: it runs with --quick and every result matches NumPy.
Timings are never asserted."""

import subprocess
import sys
from pathlib import Path

from .aot_util import needs_cc

REPO = Path(__file__).resolve().parents[2]


@needs_cc
def test_quick_run_prints_the_table():
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "aot.py"), "--quick"], capture_output=True,
                          text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith(("running_", "softmax_"))]
    assert [r.split()[0] for r in rows] == ["running_small", "running_large", "softmax_small", "softmax_large"]
    assert all(r.rstrip().endswith("ok") for r in rows), proc.stdout
