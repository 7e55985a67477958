"""Shared test helpers: where the external corpus lives."""

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings

# Property tests draw the same examples on every run (a CI result does not depend on luck);
# NBXLA_HYPOTHESIS_RANDOM=1 draws new ones, to look for bugs (with NBXLA_HYPOTHESIS_EXAMPLES
# for more of them in the random-graph tests).
settings.register_profile("nbxla", derandomize=os.environ.get("NBXLA_HYPOTHESIS_RANDOM") != "1")
settings.load_profile("nbxla")

# Compiled-code cache: private to this test session, never the user's ~/.cache.
os.environ.setdefault("NBXLA_CACHE_DIR", tempfile.mkdtemp(prefix="nbxla-test-cache-"))

from tests.ipython_util import shell  # noqa: E402,F401  (fixture for every folder; after the cache dir is set)

REPO = Path(__file__).resolve().parents[1]
CORPUS_HLO = REPO.parent / "shared" / "corpus" / "hlo"


def corpus_files(pattern: str) -> list:
    """Corpus files matching ``pattern``, or one skipped parameter when the corpus is absent."""
    files = sorted(CORPUS_HLO.glob(pattern))
    if not files:
        return [pytest.param(None, id="corpus-missing",
                             marks=pytest.mark.skip(reason=f"HLO corpus not found at {CORPUS_HLO}"))]
    return [pytest.param(f, id=f.name) for f in files]


# ---- CUDA backend: tests that need a real GPU (skipped with a reason when CuPy sees none) ----
def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: runs on a real NVIDIA GPU through CuPy (skipped without one)")


# ---- the slowest files first ----------------------------------------------------------------------
# pytest-xdist (``-n 2``) hands tests out in collection order and the run ends when its last
# worker does: a test of tens of seconds near the end (the browser test, a demo notebook, a
# benchmark script in a subprocess, a property test) ran there alone while the other worker
# idled.  These files start the run instead; the others follow in pytest's order, and each file's
# tests stay together and in order (module-scoped fixtures are made once).  Order only: every
# test runs, as before.  (Measured under ``--durations``: each has a test of 10 s or more.)
SLOW_FIRST = (
    "jupyter/test_browser.py",
    "test_benchmarks_smoke.py",
    "jupyter/test_notebooks.py",
    "dask/test_dask_chunkings.py",
    "dask/test_dask_cluster.py",
    "dask/test_dask_cells.py",          # (the dask files together: one worker, one local cluster
    "dask/test_dask_last_chunk.py",     # -- a session fixture -- where a second worker started
    "dask/test_dask_split.py",          # its own two processes)
    "test_dynamic_dims.py",
    "aot/test_aot_property.py",
    "codegen/test_property.py",
    "passes/test_fusion_scaling.py",
    "passes/test_property.py",
    "test_loop_benchmarks_smoke.py",
    "test_conv_benchmark_smoke.py",
    "aot/test_aot_benchmark_smoke.py",
    "autodiff/test_benchmark_smoke.py",
    "frontend/test_loop_programs_benchmark.py",
)


def pytest_collection_modifyitems(config, items):
    tests = Path(__file__).resolve().parent
    rank = {name: k for k, name in enumerate(SLOW_FIRST)}

    def place(item) -> int:
        try:
            return rank.get(Path(str(item.path)).resolve().relative_to(tests).as_posix(), len(rank))
        except ValueError:                  # (a test outside tests/)
            return len(rank)
    items.sort(key=place)                   # (stable: the rest keep their order)
