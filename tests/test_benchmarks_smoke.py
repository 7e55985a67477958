"""Smoke tests of benchmarks/cpu_workloads.py and hlo_modules.py: they run and print their tables.

Timings are never asserted (the machine may be busy); only that the script completes with
``--quick`` (small sizes; numexpr and JAX are used when installed, skipped otherwise) and
that nbxla's results agree with NumPy's (the ``check`` column).
"""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "cpu_workloads.py"


def _table_rows(out: str) -> list[str]:
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("workload")) + 2   # + rule
    end = next((i for i in range(start, len(lines))     # a blank line or the footnotes end it
                if not lines[i].strip() or lines[i].startswith("*")), len(lines))
    return lines[start:end]


def _run(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)


def test_quick_run_prints_the_table():
    proc = _run("--quick")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    out = proc.stdout
    header = next((line for line in out.splitlines() if line.startswith("workload")), None)
    assert header is not None, out
    for column in ("NumPy", "numexpr", "JAX", "nbxla", "xNumPy", "xJAX", "GB/s", "%BW", "check"):
        assert column in header.split(), header
    names = [row.split()[0] for row in _table_rows(out)]
    for workload in ("running", "sum_xyz", "softmax", "layernorm", "blackscholes", "lstm", "chain20"):
        assert workload in names, (workload, names)
    assert "bandwidth" in out and "peak extra memory" in out
    for row in _table_rows(out):        # nbxla computed NumPy's answer and did not fail
        check = row.split("  ")[-1]
        assert "nbxla" not in check, row


def test_only_selects_workloads():
    proc = _run("--quick", "--only", "chain20", "--repeats", "1")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert [row.split()[0] for row in _table_rows(proc.stdout)] == ["chain20"], proc.stdout


def test_gpu_benchmark_script_runs_on_the_emulator():
    """The GPU benchmark's own logic, checked without a GPU (no timings asserted)."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, str(root / "benchmarks" / "gpu_workloads.py"),
                          "--device", "cuda-emulator", "--quick"], capture_output=True, text=True,
                         timeout=300, cwd=root, env=dict(os.environ, PYTHONPATH=str(root)))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "running" in out.stdout and "sum_xyz" in out.stdout



def test_reduction_workloads_run_and_agree_with_numpy():
    proc = _run("--quick", "--reductions", "--only", "sum_middle,mean_hw,sum_columns,argmax", "--repeats", "1")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    rows = _table_rows(proc.stdout)
    names = {row.split()[0] for row in rows}
    assert names == {"sum_middle", "mean_hw", "sum_columns", "argmax_all", "argmax_rows", "argmax_columns"}
    assert all(row.split()[-1] == "ok" for row in rows), proc.stdout


def test_hlo_modules_quick_run_agrees_and_runs_nothing_on_the_evaluator():
    """benchmarks/hlo_modules.py --quick: every module's result agrees with NumPy's (and JAX's
    when installed), and nbxla's executable runs nothing on the reference evaluator."""
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "hlo_modules.py"), "--quick"],
                          capture_output=True, text=True, timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    rows = [line for line in proc.stdout.splitlines()[1:] if line.strip()]
    assert len(rows) >= 10, proc.stdout
    for row in rows:
        assert row.endswith("ok / none"), row


def test_peers_runs_nbxla_and_interrupts_a_first_call_over_the_limit():
    """peers.py's own run (contenders the machine lacks are shown as not run), and its limit on a
    first call: a contender whose first call runs past it is left out of that program, by name."""
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "peers.py"), "--only", "eos,crc16",
                           "--repeats", "1", "--budget", "0.001", "--contenders", "nbxla"],
                          capture_output=True, text=True, timeout=240, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    rows = {line.split()[0]: line.split() for line in proc.stdout.splitlines() if line.split()}
    assert "eos" in rows and "crc16" in rows and "nbxla" in proc.stdout.split("geometric-mean")[1]
    import os
    import time
    sys.path.insert(0, str(REPO))
    environment = dict(os.environ)
    try:
        from benchmarks import peers      # (its import sets NBXLA_CACHE_DIR=off for its own runs:
    finally:                              # put this process's environment back)
        os.environ.clear()
        os.environ.update(environment)
    try:
        with peers._time_limit(0.2):
            time.sleep(5)
    except peers.FirstCallTooLong as e:
        assert str(e) == "first call over 0 s"
    else:
        raise AssertionError("the first-call limit did not interrupt")
