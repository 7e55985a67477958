"""Smoke test of benchmarks/training.py: it runs with --quick and every contender's step
agrees with NumPy backprop (the ``check`` column); timings are never asserted."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_quick_run_checks_every_contender():
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "training.py"), "--quick"],
                          capture_output=True, text=True, timeout=240, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    rows = [line for line in proc.stdout.splitlines() if line.endswith(("ok", "MISMATCH"))]
    assert {r.split("  ")[0].strip() for r in rows} >= {"nbxla.jit", "grad compiled alone",
                                                        "eager (evaluator)", "NumPy backprop"}
    assert all(r.endswith("ok") for r in rows), proc.stdout
    assert "kernels in the optimized step" in proc.stdout
