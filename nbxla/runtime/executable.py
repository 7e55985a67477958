"""Executables: a compiled module bound to the backend that runs it.

Backends register here by device name: ``cpu`` compiles fusions to machine code through
LLVM; ``evaluator`` runs the reference interpreter (for teaching and debugging).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..errors import UnsupportedError
from ..hlo import Module
from ..hlo.evaluator import evaluate, flatten


class Executable:
    """Runs one module; ``run(inputs)`` returns the flat list of its outputs."""

    def __init__(self, module: Module, backend: str, runner: Callable[[list], list]):
        self.module, self.backend = module, backend
        # ``run(inputs)``: the backend's runner itself (no extra call per run).
        self.run: Callable[[list], list[np.ndarray]] = runner
        # ``run_single(inputs)``: the one output array (a NumPy scalar when 0-d), where the
        # backend offers a shortcut for modules giving a single array (the jit fast path).
        self.run_single: Callable[[list], np.ndarray] | None = None
        # ``run_tuple(inputs)``: the outputs as a tuple, where the backend offers a shortcut for
        # modules whose root is a flat tuple of arrays (the jit fast path for ``return a, b``).
        self.run_tuple: Callable[[list], tuple] | None = None
        self.native = None      # the backend's own object (e.g. compiled kernels), if any
        self.stages: dict[str, str] = {}   # backend stages (llvm_ir, asm, ...) by name


def _evaluator_backend(module: Module) -> Executable:
    return Executable(module, "evaluator (reference interpreter)",
                      lambda inputs: flatten(evaluate(module, inputs)))


class _LazyStages(dict):
    """Stage name -> text, each produced on first access."""

    def __getitem__(self, name):
        value = super().__getitem__(name)
        if callable(value):
            value = value()
            self[name] = value
        return value


def _cpu_backend(module: Module, plan=None) -> Executable:
    from .cpu_executable import CpuExecutable
    return cpu_executable(CpuExecutable(module, plan))


def cpu_executable(cpu) -> Executable:
    """The ``Executable`` of a ``CpuExecutable`` (also one made over kernels compiled earlier)."""
    module = cpu.module
    executable = Executable(module, cpu.backend, cpu.run)
    executable.run_single = cpu.run_single
    executable.run_tuple = cpu.run_tuple
    executable.native = cpu
    executable.stages = _LazyStages({"llvm_ir": lambda: cpu.kernels.llvm_ir,
                                     "llvm_ir_optimized": lambda: cpu.kernels.llvm_ir_optimized,
                                     "asm": lambda: cpu.kernels.asm,
                                     "execution": cpu.describe})
    return executable


# ---- CUDA backend (nbxla/runtime/cuda_executable.py) -------------------------------------------
def _cuda_backend(module: Module, emulate: bool = False) -> Executable:
    """PTX compiled on any machine; running needs CuPy and a GPU (else a DeviceUnavailableError
    at run time).  ``cuda-emulator`` runs the same kernels' IR on the host (for testing)."""
    from .cuda_executable import CudaExecutable
    cuda = CudaExecutable(module, emulate=emulate)
    executable = Executable(module, cuda.backend, cuda.run)
    executable.native = cuda
    executable.stages = _LazyStages({"llvm_ir": lambda: cuda.kernels.llvm_ir,
                                     "llvm_ir_optimized": lambda: cuda.kernels.llvm_ir_optimized,
                                     "ptx": lambda: cuda.kernels.ptx})
    return executable


def _cuda_usable() -> bool:
    from .cuda_executable import cuda_available      # probes CuPy once; never raises
    return cuda_available()
# ---- end CUDA backend ----------------------------------------------------------------------------


BACKENDS: dict[str, Callable[[Module], Executable]] = {
    "cpu": _cpu_backend,
    "evaluator": _evaluator_backend,
    "cuda": _cuda_backend,
    "cuda-emulator": lambda module: _cuda_backend(module, emulate=True),   # CUDA backend
}


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if _cuda_usable() else "cpu"      # CUDA backend: a GPU CuPy can use
    if device not in BACKENDS:
        raise UnsupportedError(f"unknown device {device!r}; choose one of cpu, cuda, auto")
    return device


def build_executable(module: Module, device: str, plan=None) -> Executable:
    """An executable for ``device``; the CPU backend runs its kernels over ``plan`` (the
    buffer assignment) when given one."""
    backend = BACKENDS[resolve_device(device)]
    if backend is _cpu_backend:            # the one backend that executes over a plan so far
        return backend(module, plan)
    return backend(module)
