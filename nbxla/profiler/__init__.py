"""Why is it (not) faster: run a compiled program with per-step timing and explain it.

    report = nbxla.profile(f)(x, y)      # f: a function or an nbxla.jit function
    print(report.to_text())              # in a notebook the report displays itself

The program runs a few times with a clock around every step (``runtime/profiling``); each
kernel is set against this machine's measured limits (``machine``) and its time is split over
the source lines of the operations it holds (``build``).  ``%%xla --profile`` does the same
for a cell, ``python -m nbxla profile FILE.py:FUNC --arg f32[...]`` in a terminal.
"""

from __future__ import annotations

import inspect
import weakref
from collections import Counter
from typing import Callable

import numpy as np

from ..compiler import Compilation
from ..errors import NbxlaError
from ..runtime.cpu_executable import CpuExecutable
from ..runtime.profiling import BUDGET_S, MIN_RUNS, profile_runs
from .build import build_profile
from .machine import MachineLimits, machine_limits
from .report import Profile

__all__ = ["profile", "profile_compilation", "profile_cell", "Profile", "MachineLimits", "machine_limits",
           "ProfileError"]


# Per executable with native loops, its host-driven twin (compiled once, while it lives).
_TWINS: "weakref.WeakKeyDictionary[CpuExecutable, CpuExecutable]" = weakref.WeakKeyDictionary()
# The attribute of a plain function profiled that holds its jit function.
JITTED = "__nbxla_profiled_jit__"


class ProfileError(NbxlaError):
    """What cannot be profiled (another backend than the CPU's)."""


def profile_compilation(comp: Compilation, inputs: list, *, name: str | None = None,
                        source_file: str = "", source_lines: list[tuple[int, str]] | None = None,
                        min_runs: int = MIN_RUNS, budget_s: float = BUDGET_S) -> Profile:
    """Profile ``comp``'s executable on ``inputs`` (its entry parameters, in order); the
    result is also kept as ``comp.profile`` (the ``profile`` stage)."""
    cpu = comp.executable.native
    if not isinstance(cpu, CpuExecutable):
        raise ProfileError(f"profiles time the CPU backend's steps; {comp.name} runs on {comp.backend}: "
                           "profile it with device='cpu'")

    def twin() -> CpuExecutable:        # its loops host-driven: their kernels timed one by one
        if cpu not in _TWINS:
            _TWINS[cpu] = CpuExecutable(comp.optimized, cpu.plan, compile_loops=False)
        return _TWINS[cpu]
    # (the runs write outputs into donated parameters' arrays: the caller's stay as they were)
    inputs = [np.array(a, copy=True) if k in cpu.donated else a for k, a in enumerate(inputs)]
    timed = profile_runs(cpu, inputs, min_runs=min_runs, budget_s=budget_s, twin=twin)
    report = build_profile(comp, timed, machine_limits(), name=name or comp.name,
                           source_file=source_file, source_lines=source_lines or [])
    comp.profile = report
    return report


def _function_source(fn: Callable) -> tuple[str, list[tuple[int, str]]]:
    try:
        code = fn.__code__
        lines, start = inspect.getsourcelines(fn)
    except (AttributeError, OSError, TypeError):
        return getattr(getattr(fn, "__code__", None), "co_filename", ""), []
    return code.co_filename, [(start + k, text.rstrip("\n")) for k, text in enumerate(lines)]


def profile(fn: Callable, *, device: str = "cpu", min_runs: int = MIN_RUNS,
            budget_s: float = BUDGET_S) -> Callable[..., Profile]:
    """``profile(f)(*args, **kwargs)``: compile ``f`` for these arguments (or reuse its
    compilation), run it ``min_runs`` times or more (while under ``budget_s`` seconds) with
    per-step timing, and return the ``Profile``.  ``f`` may be a plain function or an
    ``nbxla.jit`` function (then its cache and compilations are used)."""
    from ..api import CompiledFunction, jit
    compiled = fn if isinstance(fn, CompiledFunction) else getattr(fn, JITTED, None)
    if not isinstance(compiled, CompiledFunction) or compiled.device != device:
        compiled = jit(fn, device=device)
        try:                            # (kept on the function: profiling it again reuses the
            setattr(fn, JITTED, compiled)   # compilation, and both go when the function goes)
        except (AttributeError, TypeError):
            pass

    def run(*args, **kwargs) -> Profile:
        comp, inputs = compiled.compiled_inputs(*args, **kwargs)
        file, lines = _function_source(compiled.fn)
        return profile_compilation(comp, inputs, name=compiled.__name__, source_file=file,
                                   source_lines=lines, min_runs=min_runs, budget_s=budget_s)
    return run


def profile_cell(prepared, source: str, filename: str, *, name: str | None = None,
                 min_runs: int = MIN_RUNS, budget_s: float = BUDGET_S) -> Profile:
    """Profile a prepared ``%%xla`` cell (``cell.prepare_cell``); ``source`` is its text with
    line 1 the ``%%xla`` line, ``filename`` the name its lines were compiled under."""
    program = prepared.cell.program
    inputs = [prepared.inputs.leaves[i] for i in program.param_leaves]
    lines = list(enumerate(source.splitlines(), 1))
    return profile_compilation(prepared.compilation, inputs, name=name,
                               source_file=_cell_file(prepared.compilation, filename),
                               source_lines=lines, min_runs=min_runs, budget_s=budget_s)


def _cell_file(comp: Compilation, filename: str) -> str:
    """The name the cell's instructions carry as their file: ``filename``, or the label the
    notebook shows (``Cell In[5]``) when the cell was traced under that."""
    files = Counter(i.location.file for c in comp.hlo.computations for i in c.instructions
                    if i.location is not None)
    return filename if filename in files or not files else files.most_common(1)[0][0]
