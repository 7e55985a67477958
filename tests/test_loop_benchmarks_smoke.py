"""Smoke tests of benchmarks/compile_time.py and benchmarks/small_calls.py (issue 30): they run
at small sizes and nbxla's results agree with NumPy's.  Timings are never asserted; JAX is used
when installed, its columns left empty otherwise."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _run(script: str, *args: str) -> str:
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / script), *args],
                          capture_output=True, text=True, timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return proc.stdout


def test_compile_time_table_agrees_with_numpy():
    out = _run("compile_time.py", "--sizes", "small", "--only", "conv2d,azimint,correlation", "--repeats", "1",
               "--first-repeats", "1", "--breakdown")
    rows = [line for line in out.splitlines() if line.split() and line.split()[0] in ("conv2d", "azimint", "correlation")]
    assert len(rows) == 3, out
    assert all(row.endswith("ok") for row in rows), out
    assert "llvm-optimize" in out and "trace" in out, out       # (the --breakdown rows)


def test_small_calls_prints_the_chains_and_the_loop_driver():
    out = _run("small_calls.py", "--calls", "20", "--rounds", "1")
    for name in ("chain20", "chain10x2", "driver overhead per call", "per step"):
        assert name in out, out
    assert "(1 fused kernel)" in out, out          # the unrolled chain is one kernel
    assert "ctypes calls (before)" in out, out     # (the fastcall comparison, same process)


def test_small_calls_cpu_clock():
    out = _run("small_calls.py", "--calls", "20", "--rounds", "1", "--clock", "cpu")
    assert "driver overhead per call" in out, out
