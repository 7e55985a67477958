"""What runs inside a dask worker: compile a shipped kernel once, then run it per block.

A task carries a ``KernelSpec`` (optimized HLO text and its hash).  Each worker process keeps
the executables it built in ``_EXECUTABLES`` (its own compilation cache; the CPU backend's
persistent disk cache is shared too when the workers see the same ``NBXLA_CACHE_DIR``), so a
kernel compiles once per worker and a second call compiles nothing.  ``compile_count()``
says how many it built (tests and the benchmark ask every worker with ``Client.run``).
"""

from __future__ import annotations

import hashlib
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from ..compiler import compile_module
from ..hlo import Builder, Module, Shape, from_numpy_dtype, scalar_computation
from ..hlo.parser import parse_hlo
from ..hlo.printer import print_module
from ..hlo.shapes import SymbolicDimensionError
from ..hlo.symbolic import bind_module, bind_symbols, module_is_symbolic
from ..symbolic_compile import compile_symbolic_module, run_symbolic
from .kernels import KernelSpec

_EXECUTABLES: dict[str, object] = {}
_LOCK = threading.Lock()
_STATS = {"compiles": 0, "compile_s": 0.0, "runs": 0, "run_s": 0.0}


def compile_count() -> int:
    return _STATS["compiles"]


def stats() -> dict:
    """Compiles and kernel runs in this process, with their total seconds."""
    return dict(_STATS)


def warm(specs: list[KernelSpec]) -> int:
    """Compile every kernel this worker does not have yet; how many it compiled."""
    before = _STATS["compiles"]
    for spec in specs:
        executable(spec)
    return _STATS["compiles"] - before


def executable(spec: KernelSpec):
    exe = _EXECUTABLES.get(spec.key)
    if exe is None:
        with _LOCK:
            exe = _EXECUTABLES.get(spec.key)
            if exe is None:
                start = time.perf_counter()
                exe = _compiled(parse_hlo(spec.text, f"<{spec.key}>"))
                _STATS["compile_s"] += time.perf_counter() - start
                _STATS["compiles"] += 1
                _EXECUTABLES[spec.key] = exe
    return exe


def _compiled(module):
    """An executable of a block's module; one with unknown dimensions (blocks of several sizes:
    ``kernels.shared_block_kernels``) compiles once for every size where it can."""
    if not module_is_symbolic(module):
        return compile_module(module, "cpu").executable
    try:
        return _AnySize(module, compile_symbolic_module(module))
    except SymbolicDimensionError:
        return _AnySize(module, None)


class _AnySize:
    """Runs a block module with unknown dimensions: the symbolic program's instance for the
    block's sizes, or (sizes 0 and 1, or a module the symbolic compile refused) a compile of
    the concrete module per size, counted as a compile."""

    def __init__(self, module, program):
        self.module, self.program, self.per_size = module, program, {}

    def run(self, inputs: list) -> list:
        if self.program is not None:
            try:
                return run_symbolic(self.program, inputs)
            except SymbolicDimensionError:
                pass
        values = tuple(sorted(bind_symbols(self.module, inputs).items()))
        exe = self.per_size.get(values)
        if exe is None:
            with _LOCK:
                exe = self.per_size.get(values)
                if exe is None:
                    start = time.perf_counter()
                    exe = compile_module(bind_module(self.module, dict(values)), "cpu").executable
                    _STATS["compile_s"] += time.perf_counter() - start
                    _STATS["compiles"] += 1
                    self.per_size[values] = exe
        return exe.run(inputs)


def _run(spec: KernelSpec, inputs: list) -> list[np.ndarray]:
    exe = executable(spec)
    start = time.perf_counter()
    outs = exe.run([np.ascontiguousarray(x) for x in inputs])
    _STATS["run_s"] += time.perf_counter() - start
    _STATS["runs"] += 1
    return [np.asarray(o) for o in outs]


@dataclass(frozen=True)
class BlockCall:
    """One block of a stage: the kernel, and how to slice each whole NumPy leaf for it."""
    spec: KernelSpec
    leaf_slices: tuple              # per trailing input: a tuple of slices
    single: bool = False            # one output: the block itself (no tuple to pick from)

    def __call__(self, *inputs):
        n_blocks = len(inputs) - len(self.leaf_slices)
        args = list(inputs[:n_blocks]) + [leaf[s] for leaf, s in zip(inputs[n_blocks:], self.leaf_slices)]
        outs = _run(self.spec, args)
        return outs[0] if self.single else tuple(outs)


@dataclass(frozen=True)
class StageCall:
    """A stage run through ``da.blockwise``: the first argument's (broadcast) block number
    picks the block's call."""
    calls: dict                     # block number -> BlockCall

    def __call__(self, number, *inputs):
        return self.calls[int(np.asarray(number).flat[0])](*inputs)


@dataclass(frozen=True)
class Combine:
    """dask.array.reduction's combine/aggregate: partials reduced over their leading axes by a
    compiled reduce with the original reducer (and its init).  ``specs`` holds the kernels
    made on the client for the shapes the tree will have ((shape, keepdims) -> spec)."""
    opcode: str
    init: object                    # a NumPy scalar
    n_axes: int
    specs: dict = field(default_factory=dict, compare=False)

    def __call__(self, x, axis=None, keepdims=False, **_):
        x = np.asarray(x)
        spec = self.specs.get((x.shape, bool(keepdims))) or combine_spec(
            self.opcode, np.asarray(self.init), x.shape, x.dtype, self.n_axes, keepdims)
        return _run(spec, [x])[0]


def identity(x, axis=None, keepdims=True, **_):
    """The per-chunk step of the tree reduction: a partial is already reduced."""
    return x


_COMBINE_SPECS: dict[tuple, KernelSpec] = {}


def combine_spec(opcode, init, shape, dtype, n_axes, keepdims) -> KernelSpec:
    """The kernel reducing ``n_axes`` leading axes of partials of ``shape`` with ``opcode``."""
    key = (opcode, init.item(), tuple(shape), np.dtype(dtype).str, n_axes, keepdims)
    spec = _COMBINE_SPECS.get(key)
    if spec is None:
        et = from_numpy_dtype(dtype)
        b = Builder("nbxla_combine")
        p = b.parameter(Shape(et, tuple(shape)), "partials")
        red = b.reduce(p, b.constant(init, et), range(n_axes), scalar_computation(opcode, et))
        if keepdims:
            red = b.reshape(red, (1,) * n_axes + tuple(shape[n_axes:]))
        elif red.opcode == "parameter":
            red = b.op("copy", red)
        text = print_module(Module("nbxla_combine", b.build(red)))
        spec = KernelSpec(hashlib.sha1(text.encode()).hexdigest()[:16], text, 1)
        _COMBINE_SPECS[key] = spec
    return spec
