"""Smoke test of benchmarks/conv.py: with ``--quick`` it runs every kind of case (depthwise,
pointwise, dense, dense with bias and relu, MobileNet block and body), nbxla's results agree with the NumPy reference
(and with JAX's where installed), and it prints its table.  Timings are never asserted."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_quick_run_prints_the_table_without_mismatches():
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "conv.py"), "--quick", "--repeats", "1"],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    out = proc.stdout
    assert "OPENBLAS_CORETYPE" in out and "xJAX" in out
    rows = [line for line in out.splitlines() if line.endswith("ok") or "MISMATCH" in line]
    assert len(rows) == 8 and "MISMATCH" not in out, out
    assert sum(r.startswith("relu(conv+b)") for r in rows) == 2        # dense conv + bias + relu, both layouts
    assert any(r.startswith("dw3x3") and "native kernel" in r for r in rows)
    # (a pointwise convolution is a library call: BLAS, or nbxla's GEMM kernel for few features)
    assert any(r.startswith("1x1") and ("BLAS" in r or "by nbxla's GEMM kernel" in r) for r in rows)
    # (the 13 depthwise convolutions' bias and relu6, and those of the 7 pointwise ones small
    # enough for nbxla's own GEMM kernel: runtime/conv_bias_act.py)
    assert any("MobileNet" in r and "20 epilogues folded" in r for r in rows), out
