"""Smoke test of benchmarks/loop_programs.py: it runs on small sizes and nbxla agrees with
NumPy on every program it times (timings are never asserted) -- with the default flags, and
every program once more with every loop rolled (``--unroll_max=0``: the quick sizes leave some
time loops short enough to be unrolled)."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.frontend.test_loop_programs import CASES
from tests.frontend_util import UNROLL_OFF

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "loop_programs.py"


def _programs() -> dict:
    spec = importlib.util.spec_from_file_location("loop_programs_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)              # (its main() runs only as a script)
    return module.programs(quick=True)


@pytest.mark.parametrize("flags, only", [("", ["trisolv", "iir", "newton_sqrt", "histogram"]),
                                         (UNROLL_OFF, [])], ids=["unroll_default", "unroll_max0"])
def test_quick_run_agrees_with_numpy(flags, only):
    env = {**os.environ, "NBXLA_FLAGS": f"{os.environ.get('NBXLA_FLAGS', '')} {flags}".strip()}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--repeats", "1", "--only", ",".join(only)],
                          capture_output=True, text=True, timeout=300, cwd=REPO, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    rows = [line for line in proc.stdout.splitlines() if " first call " in line and "whiles" in line]
    assert len(rows) == len(only or _programs()), proc.stdout
    assert all(row.rstrip().endswith("ok") for row in rows), proc.stdout


def test_every_program_is_a_loop_program_kernel():
    """The benchmark's programs are kernels of test_loop_programs, which runs each with both
    unroll flags, and at trip counts 0, 1, 4, 5 and 16 (around the unroll threshold) where the
    trip count is the caller's to choose (not newton_sqrt's: a while until convergence)."""
    kernels = {case.fn for case in CASES.values()}
    missing = [name for name, (fn, _) in _programs().items() if fn not in kernels]
    assert not missing, f"add these to tests/frontend/test_loop_programs.py: {missing}"
