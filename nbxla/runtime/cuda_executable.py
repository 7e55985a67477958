"""The CUDA executable: PTX kernels launched by CuPy, thunks over the entry computation.

Compiling never needs a GPU: the fusions become PTX through LLVM's NVPTX back end
(``codegen.gpu``), so the ``llvm_ir``/``llvm_ir_optimized``/``ptx`` stages exist on any
machine.  Running needs CuPy and a GPU it can use; without them ``run`` raises
``DeviceUnavailableError`` (an ``NbxlaError``) that says why.

At run time (a GPU present):

* the PTX is loaded once per executable with CuPy (``cuModuleLoadData``: the driver JITs it
  for the device); every fusion thunk launches its kernel(s) on CuPy arrays, with the launch
  dimensions its spec derives from the shape (grid capped at 32 blocks per SM: the kernels
  loop grid-stride);
* ``dot`` on floating-point operands runs through ``cupy.matmul`` (cuBLAS) as one batched
  matmul, and the fused epilogue that consumes it is the next kernel;
* every buffer (outputs, temporaries, the partial results of two-phase reductions) comes from
  CuPy's memory pool (256-byte aligned); C-contiguous operands are passed in place, so an
  offset view may be unaligned: the kernels check alignment before their 16-byte accesses;
* inputs given as NumPy arrays are copied to the device once per call, at the start (CuPy
  arrays are used in place);
* **outputs stay on the device**: ``run`` returns CuPy arrays.  Ask for NumPy arrays with
  ``CudaExecutable.run(inputs, host=True)``, ``executable.native.host_outputs = True`` or the
  environment variable ``NBXLA_CUDA_OUTPUTS=host``;
* every other instruction (sort, gather, scatter, while, integer dot, fusions the code
  generator cannot emit, ...) is *slow but correct*: its operands are copied to the host, the
  reference evaluator's rule runs, and the result is copied back.  ``interpreted`` lists
  them, with the reason, for the compilation record.

``CudaExecutable(module, emulate=True)`` runs the same thunks on NumPy arrays with every
kernel executed by the host emulator (``codegen.gpu_emulator``): the device code's indexing,
bounds checks and reduction structure, tested without a GPU.
"""

from __future__ import annotations

import functools
import os
from typing import Callable

import numpy as np

from ..codegen.gpu import DEFAULT_ARCH, GpuKernels, arch_for_capability, compile_gpu
from ..errors import NbxlaError
from ..hlo import Module
from ..hlo.evaluator import Interpreter
from ..hlo.evaluator_linalg import matmul_layout
from ..hlo.ir import Instruction
from ..hlo.placement import CUDA, CUDA_ON_HOST, placement
from .thunks import structural_thunk

BLOCKS_PER_SM = 32
_FLOAT_DOT = {"f16", "f32", "f64"}


class DeviceUnavailableError(NbxlaError, RuntimeError):
    """``device='cuda'`` was asked to run on a machine where CuPy sees no usable GPU."""


@functools.lru_cache(maxsize=1)
def cuda_status() -> tuple[bool, str, dict]:
    """(usable, reason, device info) -- probed once; never raises."""
    try:
        import cupy
    except Exception as e:              # not installed, or broken install
        return False, f"CuPy is not importable ({type(e).__name__}: {e}); install cupy-cuda12x", {}
    try:
        count = cupy.cuda.runtime.getDeviceCount()
        if count < 1:
            return False, "CuPy sees no CUDA device", {}
        props = cupy.cuda.runtime.getDeviceProperties(0)
        info = {"name": props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"]),
                "major": int(props["major"]), "minor": int(props["minor"]),
                "sm_count": int(props["multiProcessorCount"])}
        cupy.zeros(1).sum()             # the driver and a context really work
    except Exception as e:
        return False, f"CuPy sees no usable GPU ({type(e).__name__}: {str(e).strip()})", {}
    return True, f"{info['name']} (compute capability {info['major']}.{info['minor']})", info


def cuda_available() -> bool:
    return cuda_status()[0]


# ---- devices: where buffers live and how kernels run ---------------------------------------------

class _CupyDevice:
    def __init__(self, kernels: GpuKernels, info: dict):
        import cupy
        from cupy.cuda import function
        self.xp = cupy
        self.module = function.Module()
        self.module.load(kernels.ptx.encode() + b"\0")
        self.functions: dict[str, object] = {}
        self.max_blocks = max(1, info.get("sm_count", 80) * BLOCKS_PER_SM)

    def function(self, name):
        fn = self.functions.get(name)
        if fn is None:
            fn = self.functions[name] = self.module.get_function(name)
        return fn

    def to_device(self, a):
        return _contiguous(self.xp, self.xp.asarray(a))

    def to_host(self, a):
        return self.xp.asnumpy(a) if isinstance(a, self.xp.ndarray) else np.asarray(a)

    def empty(self, dims, dtype):
        return self.xp.empty(dims, dtype)          # from CuPy's memory pool

    def launch(self, name, grid, block, args, lockstep=True):
        args = tuple(np.int64(a) if type(a) is int else a for a in args)
        self.function(name)((grid,), (block,), args)


class _EmulatedDevice:
    def __init__(self, kernels: GpuKernels):
        from ..codegen.gpu_emulator import EMU_BLOCK, EMU_MAX_BLOCKS, HostKernels
        self.xp = np
        self.host = HostKernels(kernels)
        self.max_blocks, self.block = EMU_MAX_BLOCKS, EMU_BLOCK

    def to_device(self, a):
        return _contiguous(np, np.asarray(a))

    def to_host(self, a):
        return np.asarray(a)

    def empty(self, dims, dtype):
        return np.empty(dims, dtype)

    def launch(self, name, grid, block, args, lockstep=True):
        self.host.launch(name, grid, self.block, args, lockstep)


# ---- the executable --------------------------------------------------------------------------------

class CudaExecutable:
    def __init__(self, module: Module, emulate: bool = False):
        self.module, self.emulate = module, emulate
        entry = module.entry
        fusions = [(i.name.replace(".", "_").replace("-", "_"), i) for i in entry.instructions
                   if i.opcode == "fusion"]
        usable, reason, info = (False, "emulated", {}) if emulate else cuda_status()
        self.usable, self.reason, self.info = usable, reason, info
        arch = arch_for_capability(info["major"], info["minor"]) if usable else DEFAULT_ARCH
        self.kernels: GpuKernels = compile_gpu(module.name, [(n, i.attrs["calls"]) for n, i in fusions], arch)
        self._kernel_of = {id(instr): name for name, instr in fusions}
        self.interpreted = dict(self.kernels.unsupported)
        for instr in entry.instructions:
            if self._placement(instr).kind == "host":
                self.interpreted[instr.name] = f"{instr.opcode} {CUDA_ON_HOST.how}"
        self.backend = ("cuda (LLVM NVPTX, emulated on the host)" if emulate else
                        f"cuda (LLVM NVPTX {arch} -> PTX, CuPy)")
        self.host_outputs = emulate or os.environ.get("NBXLA_CUDA_OUTPUTS", "device") == "host"
        self._device = None
        self._plan = None
        self._literal_ids: set[int] = set()

    # -- building --------------------------------------------------------------------------------
    @staticmethod
    def _device_dot(instr: Instruction) -> bool:
        return instr.opcode == "dot" and instr.shape.element_type in _FLOAT_DOT and \
            all(o.shape.element_type == instr.shape.element_type for o in instr.operands)

    def _ensure_device(self):
        if self._device is None:
            if self.emulate:
                self._device = _EmulatedDevice(self.kernels)
            else:
                if not self.usable:
                    raise DeviceUnavailableError(
                        f"device 'cuda' cannot run here: {self.reason}.  The module was compiled "
                        f"(stages llvm_ir, llvm_ir_optimized and ptx are available: "
                        f"get_compiler_ir(...)(stage='ptx'), %xla_ir ptx); run it with device='cpu', "
                        f"or on a machine with an NVIDIA GPU and CuPy")
                try:
                    self._device = _CupyDevice(self.kernels, self.info)
                except Exception as e:
                    raise DeviceUnavailableError(f"device 'cuda': loading the PTX failed "
                                                 f"({type(e).__name__}: {e})") from e
            self._plan = self._schedule()
        return self._device

    def _placement(self, instr: Instruction):
        """The CUDA table's placement (``hlo/placement.py``), a dot the device cannot take on
        the host."""
        how = placement(CUDA, instr)
        if how.kind == "library" and not self._device_dot(instr):
            return CUDA_ON_HOST
        return how

    def _thunk(self, instr: Instruction) -> Callable:
        name = self._kernel_of.get(id(instr))
        if name is not None and name in self.kernels.specs:
            return self._kernel_thunk(instr, name)
        how = self._placement(instr)
        if how.handler is None or how.kind == "kernel":
            return self._host_thunk(instr)
        return getattr(self, how.handler)(instr)

    def _kernel_thunk(self, instr: Instruction, name: str) -> Callable:
        return _KernelThunk(self._device, instr, self.kernels.specs[name])

    def _constant_thunk(self, instr: Instruction) -> Callable:
        lit = self._device.to_device(instr.literal)
        self._literal_ids.add(id(lit))
        return lambda ops: lit

    def _view_thunk(self, instr: Instruction) -> Callable:
        return structural_thunk(instr) or self._host_thunk(instr)

    def _library_thunk(self, instr: Instruction) -> Callable:
        return functools.partial(_dot, self._device, instr)      # (only device dots get here)

    def _host_thunk(self, instr: Instruction) -> Callable:
        dev = self._device
        interp = Interpreter()

        def on_host(ops, instr=instr):
            host = [_tree(dev.to_host, o) for o in ops]
            with np.errstate(all="ignore"):
                value = interp.apply(instr, host)
            return _tree(dev.to_device, value)
        return on_host

    def _schedule(self):
        slot, params, steps = {}, [], []
        for instr in self.module.entry.instructions:
            slot[id(instr)] = len(slot)
            if instr.opcode == "parameter":
                params.append((slot[id(instr)], instr.parameter_number))
            else:
                steps.append((self._thunk(instr), [slot[id(o)] for o in instr.operands], slot[id(instr)]))
        return len(slot), params, steps, slot[id(self.module.entry.root)]

    # -- running ---------------------------------------------------------------------------------
    def run(self, inputs: list, host: bool | None = None) -> list:
        dev = self._ensure_device()
        size, params, steps, root = self._plan
        values = [None] * size
        for k, number in params:
            values[k] = dev.to_device(inputs[number])        # NumPy inputs: one copy each
        for thunk, operands, out in steps:
            values[out] = thunk([values[k] for k in operands])
        # Results never alias inputs, cached constants or each other's storage (views).
        shared = {id(values[k]) for k, _ in params} | self._literal_ids
        leaves = []
        for leaf in _flatten(values[root]):
            if leaf.base is not None or id(leaf) in shared:
                leaf = leaf.copy()
            else:
                shared.add(id(leaf))     # (one result twice in the root tuple: copied again)
            leaves.append(leaf)
        if self.host_outputs if host is None else host:
            return [dev.to_host(leaf) for leaf in leaves]
        return leaves


class _KernelThunk:
    def __init__(self, dev, instr: Instruction, spec):
        self.dev, self.spec = dev, spec
        shapes = instr.shape.elements if instr.shape.is_tuple else [instr.shape]
        self.outputs = [(s.dims, s.dtype) for s in shapes]
        self.tuple_result = instr.shape.is_tuple
        self.grid = spec.grid(dev.max_blocks)
        self.finish_grid = spec.finish_grid(dev.max_blocks)

    def __call__(self, operands):
        dev, spec = self.dev, self.spec
        operands = [_contiguous(dev.xp, o) for o in operands]
        outs = [dev.empty(dims, dtype) for dims, dtype in self.outputs]
        if spec.finish_name:            # two phases: partial results in scratch, then the finish
            scratch = dev.empty((spec.scratch_bytes(self.grid),), np.uint8)
            dev.launch(spec.name, self.grid, spec.block, operands + [scratch])
            dev.launch(spec.finish_name, self.finish_grid, spec.block,
                       operands + outs + [scratch] + spec.finish_args(self.grid))
        else:
            dev.launch(spec.name, self.grid, spec.block, operands + outs,
                       lockstep=spec.style != "elementwise")
        return tuple(outs) if self.tuple_result else outs[0]


def _dot(dev, instr: Instruction, ops):
    """dot as one batched matmul on the device (cuBLAS under cupy.matmul)."""
    xp = dev.xp
    a, b = ops
    lhs_perm, rhs_perm, (batch, m, k, n) = matmul_layout(instr, a.shape, b.shape)
    compute = np.float32 if instr.shape.element_type == "f16" else instr.shape.dtype
    lhs = xp.transpose(a, lhs_perm).reshape(batch, m, k).astype(compute, copy=False)
    rhs = xp.transpose(b, rhs_perm).reshape(batch, k, n).astype(compute, copy=False)
    out = xp.matmul(lhs, rhs).astype(instr.shape.dtype, copy=False)
    return _contiguous(xp, out.reshape(instr.shape.dims))


def _contiguous(xp, a):
    """C-contiguous, keeping 0-d arrays 0-d (``ascontiguousarray`` makes them 1-d)."""
    return a if a.flags.c_contiguous else xp.array(a, order="C")


def _tree(fn, value):
    if isinstance(value, tuple):
        return tuple(_tree(fn, v) for v in value)
    return fn(value)


def _flatten(value) -> list:
    if isinstance(value, tuple):
        return [leaf for v in value for leaf in _flatten(v)]
    return [value]

