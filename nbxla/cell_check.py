"""The oracle for a cell: run it eagerly with NumPy on copies, compare results and times.

Eager runs execute the cell's Python again (on copies of its input arrays, with ``print``
output silenced), so ``--verify`` and ``--compare`` repeat the cell's side effects on other
Python objects it touches.
"""

from __future__ import annotations

import contextlib
import io
import statistics
import time
from dataclasses import dataclass, field

from .errors import VerificationError
from .testing import differences
from .cell import CellResult, PreparedCell
from .frontend.cell_ast import DISPLAY
from .frontend.trace import is_array_leaf, tree_flatten, tree_unflatten


def _copies(prepared: PreparedCell) -> tuple[list, tuple]:
    leaves = [leaf.copy() if is_array_leaf(leaf) else leaf for leaf in prepared.inputs.leaves]
    values, _ = tree_unflatten(prepared.inputs.treedef, leaves)
    return leaves, values


def run_eager(prepared: PreparedCell, user_ns: dict, filename: str) -> tuple[dict, list]:
    """Run the cell with NumPy on copies of its inputs; returns (final namespace, input copies)."""
    leaves, values = _copies(prepared)
    ns = dict(user_ns)
    ns.update(zip(prepared.inputs.names, values))
    code = prepared.cell.analysis.code(filename)
    with contextlib.redirect_stdout(io.StringIO()):
        exec(code, ns)
    return ns, leaves


def verify(prepared: PreparedCell, result: CellResult, user_ns: dict, filename: str,
           eager: dict | None = None) -> list[str]:
    """Compare every traced output with eager NumPy's; raises VerificationError on a mismatch.
    ``eager``, if given, receives the eager run's namespace."""
    ns, leaves = run_eager(prepared, user_ns, filename)
    if eager is not None:
        eager.update(ns)
    cell, names = prepared.cell, prepared.inputs.leaf_names
    pairs = [(f"{names[i]} (written in place)", result.outputs[k], leaves[i])
             for i, k in cell.program.writebacks]              # (label, compiled, eager)
    checked = [(b.name, b, ns.get(b.name)) for b in cell.bindings if b.action != "delete"]
    if cell.display is not None:
        checked.append(("the displayed value", cell.display, ns.get(DISPLAY)))
    failures = []
    for label, b, want in checked:
        want_leaves, _ = tree_flatten(want)
        if len(want_leaves) != len(b.slots):
            failures.append(f"{label}: eager NumPy gives a {type(want).__name__} of another structure")
            continue
        for j, ((kind, v), w) in enumerate(zip(b.slots, want_leaves)):
            if kind == "out":
                pairs.append((label if len(b.slots) == 1 else f"{label} (leaf {j})", result.outputs[v], w))
    report, differ = differences(pairs)
    failures += differ
    if failures:
        raise VerificationError("--verify: the compiled cell differs from eager NumPy:\n  "
                                + "\n  ".join(failures))
    return report


@dataclass
class Timing:
    compiled_s: float
    numpy_s: float
    repeats: int
    backend: str
    compiled_samples: list[float] = field(default_factory=list)   # seconds, every repeat
    numpy_samples: list[float] = field(default_factory=list)

    @property
    def speedup(self) -> float:
        return self.numpy_s / self.compiled_s if self.compiled_s > 0 else float("inf")

    def __str__(self) -> str:
        return (f"compiled ({self.backend}): {self.compiled_s * 1e3:.3g} ms, "
                f"NumPy: {self.numpy_s * 1e3:.3g} ms, speedup {self.speedup:.2f}x "
                f"(median of {self.repeats} runs)")


def compare_times(prepared: PreparedCell, user_ns: dict, filename: str, repeats: int = 5,
                  budget_s: float = 2.0) -> Timing:
    """Median times of the compiled cell (no write-back) and of eager NumPy, interleaved."""
    compiled, eager = [], []
    code = prepared.cell.analysis.code(filename)
    start = time.perf_counter()
    while len(compiled) < repeats and (len(compiled) < 1 or time.perf_counter() - start < budget_s):
        t0 = time.perf_counter()
        prepared.run()
        compiled.append(time.perf_counter() - t0)
        _, values = _copies(prepared)               # fresh copies: the cell may write its inputs
        ns = dict(user_ns)
        ns.update(zip(prepared.inputs.names, values))
        with contextlib.redirect_stdout(io.StringIO()):
            t0 = time.perf_counter()
            exec(code, ns)
            eager.append(time.perf_counter() - t0)
    return Timing(statistics.median(compiled), statistics.median(eager), len(compiled),
                  prepared.compilation.backend, compiled, eager)
