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
