"""Shared test helpers: where the external corpus lives."""

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CORPUS_HLO = REPO.parent / "shared" / "corpus" / "hlo"


def corpus_files(pattern: str) -> list:
    """Corpus files matching ``pattern``, or one skipped parameter when the corpus is absent."""
    files = sorted(CORPUS_HLO.glob(pattern))
    if not files:
        return [pytest.param(None, marks=pytest.mark.skip(reason=f"HLO corpus not found at {CORPUS_HLO}"))]
    return files
