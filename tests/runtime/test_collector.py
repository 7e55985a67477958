"""A compilation's cycle collections leave out the objects that existed before it
(runtime/collector.py), and the process's freeze state is as it was afterwards.

The freeze state is process-wide: a compilation running in another thread of the test
process (an in-process dask cluster's workers, left by earlier tests) changes it while a
test reads it.  Each scenario therefore runs in a fresh interpreter of its own."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PRELUDE = """
import gc
from nbxla.runtime.cache import CompilationCache
from nbxla.runtime.collector import older_objects_frozen

def compile_seeing_freeze(cache, seen, key="k"):
    def compile_fn():
        seen.append(gc.get_freeze_count())
        garbage = [[]]
        garbage[0].append(garbage)            # a cycle made during the compilation
        del garbage
        seen.append(gc.collect(0) >= 1)       # ... is still collected there
        return "value"
    return cache.get_or_compile(key, "code", "f", (), lambda: [], "cpu", compile_fn)
"""

SCENARIOS = {
    "a compilation freezes the older objects, then unfreezes them": """
cache, seen = CompilationCache(), []
compile_seeing_freeze(cache, seen)
assert seen[0] > 0, "the objects older than the compilation were not frozen"
assert seen[1], "a cycle made during the compilation was not collected"
assert gc.get_freeze_count() == 0
""",
    "objects the program froze stay frozen": """
keep = [object() for _ in range(10)]
gc.freeze()
frozen = gc.get_freeze_count()
cache, seen = CompilationCache(), []
compile_seeing_freeze(cache, seen)
assert seen[0] == frozen and gc.get_freeze_count() == frozen, (seen, frozen, gc.get_freeze_count())
""",
    "the freeze is released when the compilation fails": """
def compile_fn():
    raise ValueError("boom")
try:
    CompilationCache().get_or_compile("k", "code", "f", (), lambda: [], "cpu", compile_fn)
except ValueError:
    pass
else:
    raise AssertionError("the compilation's error was lost")
assert gc.get_freeze_count() == 0
""",
    "nested compilations and a disabled collector leave the state alone": """
with older_objects_frozen():
    outer = gc.get_freeze_count()
    with older_objects_frozen():          # (a compilation inside one: already frozen)
        assert gc.get_freeze_count() == outer
    assert gc.get_freeze_count() == outer > 0
assert gc.get_freeze_count() == 0
gc.disable()
try:
    with older_objects_frozen():
        assert gc.get_freeze_count() == 0
finally:
    gc.enable()
""",
    "jit results are unchanged and nothing stays frozen": """
import numpy as np, nbxla
f = nbxla.jit(lambda x: np.sin(x) * 2 + 1)
x = np.linspace(0, 1, 50)
np.testing.assert_allclose(f(x), np.sin(x) * 2 + 1)
assert gc.get_freeze_count() == 0
""",
}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_freeze_state(scenario):
    script = textwrap.dedent(PRELUDE) + SCENARIOS[scenario]
    root = str(Path(__file__).resolve().parents[2])      # (this checkout's nbxla, not an installed one)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          cwd=root, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
