"""Every demo notebook runs top to bottom in a fresh kernel without errors.

Cells tagged ``raises-exception`` (the "what cannot be compiled" demos) must raise; every
other cell must not.  Kernels are the ``python3`` kernel of this Python (nbclient runs
``sys.executable``), started in ``demo_notebooks/``; they inherit the test session's private
NBXLA_CACHE_DIR (conftest), and run with ``NBXLA_FLAGS=--verify`` added: every jit function's
first call of each signature is checked against NumPy.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from nbxla.flags import switch_on

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "demo_notebooks").glob("*.ipynb"))
CELL_TIMEOUT_S = 120
NOTEBOOK_BUDGET_S = 60          # "runnable top to bottom in well under a minute"


def test_demo_notebooks_are_numbered_and_listed():
    numbers = [p.name[:3] for p in NOTEBOOKS]
    assert numbers[:7] == [f"{i:02d}_" for i in range(1, 8)]
    assert all(n[:2].isdigit() and n[2] == "_" for n in numbers) and len(set(numbers)) == len(numbers)
    listed = (NOTEBOOKS[0].parent / "README.md").read_text()
    assert all(f"`{p.name}`" in listed for p in NOTEBOOKS)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_without_errors(path, monkeypatch):
    monkeypatch.setenv("NBXLA_FLAGS", os.environ.get("NBXLA_FLAGS", ""))
    switch_on("verify")                 # (the kernel inherits the environment)
    nb = nbformat.read(path, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), \
        "demo notebooks are stored without outputs"
    client = nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                                     resources={"metadata": {"path": str(path.parent)}})
    start = time.perf_counter()
    client.execute()
    elapsed = time.perf_counter() - start
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        errors = [o for o in cell.outputs if o.output_type == "error"]
        if "raises-exception" in cell.metadata.get("tags", []):
            assert errors, f"cell {i} is tagged raises-exception but ran cleanly:\n{cell.source}"
            assert errors[0].ename.endswith("Error")
        else:
            assert not errors, f"cell {i} failed:\n{cell.source}\n{errors[0].ename}: {errors[0].evalue}"
    assert elapsed < NOTEBOOK_BUDGET_S, f"{path.name} took {elapsed:.0f} s"
