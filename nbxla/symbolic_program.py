"""A program compiled once for every size of its unknown dimensions, run at a size.

``symbolic_compile.py`` compiles a ``SymbolicProgram``: the symbolic module, the first probe's
machine code and each kernel's sizes as expressions of the symbols.  This module is its run-time
side: at a new size an instance binds the symbols (the entry, or every computation where
control flow, a folded convolution or an interpreted fusion reads shapes), plans its buffers
and builds thunks over the machine code compiled once -- a few milliseconds, memoized per
size -- never LLVM again (except once, for the unrolled kernels, see ``_unrolled_kernels``).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace

import numpy as np

from .compiler import Compilation
from .frontend.trace import TracedProgram
from .hlo.shapes import SymDim, SymbolicDimensionError
from .hlo.symbolic import SizeProduct, bind_entry, bind_module, symbol_reader
from .passes.buffer_assignment import plan_buffers
from .codegen.cpu import LIGHT_KERNEL_ELEMENTS, compile_kernels
from .codegen.elemental import leading_unit_dims
from .codegen.run_sizes import smallest_sizes
from .runtime.cpu_executable import ARRAY_DATA_OFFSET, CpuExecutable, kernel_computations, kernel_llvm_ir
from .runtime.executable import cpu_executable
from .runtime.symbolic_loops import SymbolicLoops

_CONTROL = ("while", "conditional", "call")
# Instances (sizes) kept per symbolic program; each holds only thunks over shared machine code.
MAX_INSTANCES = 64


@dataclass
class SymbolicProgram:
    """One compilation serving every size of its symbols."""
    program: TracedProgram              # the first probe's trace (how values map in and out)
    compilation: Compilation            # record: symbolic hlo/optimized, first probe's executable
    symbols: dict[str, list[tuple[int, int]]]   # symbol -> (argument leaf, dim) that carry it
    extents: dict[str, "KernelSizes"]   # kernel symbol -> its sizes (ints or SymDims)
    # Sizes the program reads as values (a mean's count): extra trailing arguments, (k*b, dtype)
    sizes: list = field(default_factory=list)
    bounds: dict = field(default_factory=dict)     # symbol -> the largest size it serves
    lower: dict = field(default_factory=dict)      # symbol -> the smallest size it serves (1 or 2)
    instance_ms: float = 0.0            # time spent making instances (sizes), all together
    # The entry's loops compiled for every size (``runtime/symbolic_loops``), or why they run
    # from the host ("" when the program has none)
    loops: object = ""
    read_symbols: object = None         # (``run_symbolic``'s reader of the symbols' values)
    last_run: tuple | None = None       # (``run_symbolic``'s last sizes and their runner)
    # Executables made while compiling (``make_instance_now``), by sizes: the first instance at
    # those sizes takes one instead of planning and building it again
    _premade: dict = field(default_factory=dict)
    _whole_module: bool | None = None
    # Kernels compiled light, as the static compile before compiled them at its small size
    # (``earlier_light``), and the machine code of every kernel compiled unrolled, made for
    # the first instance at which a light kernel's work exceeds LIGHT_KERNEL_ELEMENTS
    light: frozenset = frozenset()
    _unrolled: object = None
    _instances: dict = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def values_of(self, leaves: list) -> dict[str, int]:
        return {name: np.shape(leaves[places[0][0]])[places[0][1]] for name, places in self.symbols.items()}

    def instance(self, values: dict[str, int]) -> Compilation:
        """The compilation record whose executable runs at these sizes (made once per size)."""
        key = tuple(sorted(values.items()))
        found = self._instances.get(key)
        if found is not None:
            return found
        with self._lock:            # (threads calling at a new size make it once)
            found = self._instances.get(key)
            return found if found is not None else self._new_instance(key, values)

    def make_instance_now(self, values: dict[str, int]) -> None:
        """Make the executable at ``values`` (the call's sizes) while compiling.  Why: an
        instance is made from the entry bound to the sizes over the symbolic fused
        computations; a runtime path that needs one of their sizes as a number (``the unknown
        size 800*b used as a number``) then refuses the compile -- the program is compiled for
        its concrete sizes -- instead of failing the call that runs it."""
        try:
            executable = self._executable_at(values)
        except SymbolicDimensionError as e:
            raise SymbolicDimensionError(f"the runtime needs a size as a number ({e})") from None
        # (the executable is kept, not the instance: the caller completes the compilation's
        # record -- its dimensions, guards -- which an instance copies when it is made; its
        # time is the compile's, not ``instance_ms``)
        self._premade[tuple(sorted(values.items()))] = executable

    def _new_instance(self, key: tuple, values: dict[str, int]) -> Compilation:
        start = time.perf_counter()
        base = self.compilation
        executable = self._premade.pop(key, None)
        if executable is None:
            executable = self._executable_at(values)
        found = replace(base, executable=executable, _stage_text={})
        self.instance_ms += (time.perf_counter() - start) * 1e3
        if len(self._instances) >= MAX_INSTANCES:
            self._instances.pop(next(iter(self._instances)))
        self._instances[key] = found
        return found

    def _executable_at(self, values: dict[str, int]):
        """The executable at these sizes: the entry bound to them, its buffers planned, its
        thunks over the machine code compiled once."""
        base = self.compilation
        # (control flow runs computations of its own, whose shapes the host's loop reads, and
        # a convolution folded into a fusion runs as a library call that reads the fusion's
        # shapes: those are bound too, not only the entry)
        # (and a fusion the evaluator runs reads its fused computation's shapes)
        module = (bind_module if self._binds_whole_module() else bind_entry)(base.optimized, values)
        kernels = base.executable.native.kernels
        specs = {name: self.extents[name].bind(spec, values) for name, spec in kernels.specs.items()}
        if self.light and any(specs[name].parallel_extent * max(1, specs[name].work_per_unit) > LIGHT_KERNEL_ELEMENTS
                              for name in self.light if name in specs):
            kernels = self._unrolled_kernels()
        loop_thunks = None
        if isinstance(self.loops, SymbolicLoops):
            loop_thunks, why = self.loops.thunks(module.entry, values)
            loop_thunks.update(why)
        elif self.loops:
            loop_thunks = {i.name: self.loops for i in module.entry.instructions if i.opcode == "while"}
        executable = cpu_executable(CpuExecutable(module, plan_buffers(module), kernels=replace(kernels, specs=specs),
                                                  symbols=base.executable.native.kernel_symbols,
                                                  loop_thunks=loop_thunks))
        if self.sizes:
            _give_sizes(executable, [np.asarray(size.bind(values), dtype) for size, dtype in self.sizes])
        return executable

    def _unrolled_kernels(self):
        """The program's kernels compiled as a static compile of large sizes compiles them (loops
        unrolled), once.  Why: the light kernels a static compile at a small size made (and the
        symbolic program took, or compiled alike) ran 0.91-0.95x a static compile of layernorm's
        rows at 4096 rows; the first probe's kernels are emitted again without ``light`` and
        compiled -- the same code otherwise, the same symbols."""
        if self._unrolled is None:
            probe = self.compilation.pipeline.module
            with smallest_sizes(self.lower), leading_unit_dims():
                emitted = kernel_llvm_ir(probe)
            distinct, _ = kernel_computations(probe)
            start = time.perf_counter()
            self._unrolled = compile_kernels(probe.name, distinct, None, None, ARRAY_DATA_OFFSET, emitted)
            self.compilation.timings_ms["codegen"] = self.compilation.timings_ms.get("codegen", 0.0) + \
                (time.perf_counter() - start) * 1e3
        return self._unrolled

    def _binds_whole_module(self) -> bool:
        """Does an instance bind every computation's shapes, not only the entry's?  (Asked once:
        the answer scans every computation, which was a tenth of making an instance.)"""
        if self._whole_module is None:
            self._whole_module = self.has_control_flow or self.has_convolutions or self.has_interpreted
        return self._whole_module

    @property
    def has_control_flow(self) -> bool:
        return any(i.opcode in _CONTROL for i in self.compilation.optimized.entry.instructions)

    @property
    def has_convolutions(self) -> bool:
        return any(i.opcode == "convolution" for c in self.compilation.optimized.computations
                   for i in c.instructions)

    @property
    def has_interpreted(self) -> bool:
        native = getattr(self.compilation.executable, "native", None)
        return bool(native is not None and (native.interpreted or native.interpreted_ops))

    @property
    def instances(self) -> int:
        return len(self._instances)


def _give_sizes(executable, sizes: list) -> None:
    """Make the executable's runners pass ``sizes`` as its trailing parameters
    (``lift_size_constants``), so that callers give only the arguments."""
    run, single, as_tuple = executable.run, executable.run_single, executable.run_tuple
    executable.run = lambda inputs: run(list(inputs) + sizes)
    executable.run_single = None if single is None else (lambda inputs: single(list(inputs) + sizes))
    executable.run_tuple = None if as_tuple is None else (lambda inputs: as_tuple(list(inputs) + sizes))


def _bind(extent, values):
    return extent.bind(values) if isinstance(extent, (SymDim, SizeProduct)) else extent


@dataclass(frozen=True)
class KernelSizes:
    """What of a kernel's spec depends on the sizes: its range, its work per unit of range (for
    the threading decision) and the sizes it reads when it runs; each an int or a ``SymDim``."""
    extent: object
    work_per_unit: object
    sizes: tuple = ()

    def bind(self, spec, values: dict[str, int]):
        return replace(spec, parallel_extent=_bind(self.extent, values),
                       work_per_unit=_bind(self.work_per_unit, values),
                       sizes=tuple(_bind(s, values) for s in self.sizes))


def run_symbolic(program: SymbolicProgram, inputs: list) -> list:
    """A module's ``SymbolicProgram`` (``compile_symbolic_module``) on arguments of any size >= 2
    of its symbols (``SymbolicDimensionError`` below: the caller compiles that size itself)."""
    if program.read_symbols is None:
        program.read_symbols = symbol_reader(program.compilation.hlo)
    values = program.read_symbols(inputs)
    last = program.last_run
    if last is not None and last[0] == values:
        # (calls at the size of the last call skip the bound check and the instance lookup:
        # 1.4 us over the executable's own run for a 24 us module, 0.94x its static compile)
        return last[1](inputs)
    if any(n < program.lower.get(name, 2) for name, n in values.items()):
        raise SymbolicDimensionError(f"sizes {values}: 0 and 1 are specialised")
    run = program.instance(values).executable.run
    program.last_run = (values, run)
    return run(inputs)
