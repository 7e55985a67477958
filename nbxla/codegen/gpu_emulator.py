"""Running the GPU kernels' own IR on the host: indexing, bounds and reductions checked without a GPU.

The emulator takes the *unoptimized NVPTX LLVM IR* that ``gpu.compile_gpu`` turns into PTX
and compiles it for the host CPU after three mechanical substitutions, nothing else:

* ``llvm.nvvm.read.ptx.sreg.{tid,ctaid,ntid,nctaid}.x`` become calls to host functions that
  return the calling emulated thread's ids;
* ``llvm.nvvm.shfl.sync.bfly.i32`` and ``llvm.nvvm.barrier0`` become calls to host functions
  implementing them with real synchronization (below);
* ``addrspace(3)`` (shared memory) becomes ordinary memory: one copy per module, which is
  right because the blocks of a launch run one after another.

Design: every thread of a block is a host thread, and warp and block primitives are real
rendezvous points.  ``shfl.sync.bfly`` publishes the lane's value in its warp's exchange
array, waits for all 32 lanes (a barrier), reads lane ``lane ^ mask``, and waits again
before the array is reused; ``bar.sync`` waits for every thread of the block.  So a kernel
runs with the exact warp width (32) and the exact data exchange of the hardware; what is not
reproduced is timing (any interleaving the hardware could produce between two
synchronization points may or may not happen here).  A shuffle or barrier that not every
lane/thread reaches (divergent control flow around it, which hangs or is undefined on a
GPU) shows up as a timeout, reported as an ``EmulationError``.  Warp size 1 was rejected: the
kernels' butterfly (offsets 16..1) would combine a lane with itself and double-count.

Elementwise kernels use no warp or block primitive, so their (block, thread) pairs run one
after another on the calling thread, which is much faster; the primitives raise there.
Launches use small blocks (64 threads: two warps) and at most a few blocks, so grid-stride
loops, several warps per block and the block-level combination all run on small inputs.
Two-phase kernels (full and split column reductions) run both phases, with the scratch
buffer the runtime would allocate.  Buffers are real host addresses, so the kernels' run-time
alignment checks (16-byte chunk loads) see aligned fresh arrays and unaligned offset views.
Speed is that of Python callbacks (about a microsecond per primitive): use small arrays.
"""

from __future__ import annotations

import ctypes
import re
import threading

import llvmlite.binding as llvm
import numpy as np

from ..errors import NbxlaError
from .gpu import WARP, GpuKernels

EMU_BLOCK = 64           # threads per emulated block (two warps)
EMU_MAX_BLOCKS = 3       # blocks per emulated launch (grid-stride loops do the rest)
BARRIER_TIMEOUT_S = 30.0


class EmulationError(NbxlaError, RuntimeError):
    """A GPU kernel misbehaved under host emulation (divergent barrier, bad launch, ...)."""


_state = threading.local()
_lock = threading.RLock()


class _Warp:
    def __init__(self):
        self.values = [0] * WARP
        self.barrier = threading.Barrier(WARP, timeout=BARRIER_TIMEOUT_S)


class _Block:
    def __init__(self, threads: int):
        self.barrier = threading.Barrier(threads, timeout=BARRIER_TIMEOUT_S)
        self.warps = [_Warp() for _ in range(threads // WARP)]
        self.errors: list[str] = []


def _fail(why: str) -> None:
    errors = getattr(_state, "errors", None)
    if errors is not None:
        errors.append(why)


def _sreg(field):
    def read():
        return getattr(_state, field, 0)
    return read


def _shfl(mask, value, lane_mask, clamp):
    block = getattr(_state, "block", None)
    if block is None:
        _fail("warp shuffle in a kernel emulated without warps (elementwise style)")
        return value
    lane, warp = _state.tid % WARP, block.warps[_state.tid // WARP]
    try:
        warp.values[lane] = value
        warp.barrier.wait()
        src = lane ^ lane_mask
        out = warp.values[src] if src <= (clamp & 31) else value
        warp.barrier.wait()
        return out
    except threading.BrokenBarrierError:
        _fail(f"warp shuffle not reached by every lane (thread {_state.tid} of block {_state.ctaid})")
        return value


def _barrier():
    block = getattr(_state, "block", None)
    if block is None:
        _fail("bar.sync in a kernel emulated without blocks (elementwise style)")
        return
    try:
        block.barrier.wait()
    except threading.BrokenBarrierError:
        _fail(f"bar.sync not reached by every thread (thread {_state.tid} of block {_state.ctaid})")


_SREG_T = ctypes.CFUNCTYPE(ctypes.c_int32)
_CALLBACKS = {
    "nbxla_emu_tid": _SREG_T(_sreg("tid")),
    "nbxla_emu_ctaid": _SREG_T(_sreg("ctaid")),
    "nbxla_emu_ntid": _SREG_T(_sreg("ntid")),
    "nbxla_emu_nctaid": _SREG_T(_sreg("nctaid")),
    "nbxla_emu_shfl": ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32,
                                       ctypes.c_int32)(_shfl),
    "nbxla_emu_barrier": ctypes.CFUNCTYPE(None)(_barrier),
}
_registered = False


def _register_callbacks() -> None:
    global _registered
    with _lock:
        if not _registered:
            for name, cb in _CALLBACKS.items():
                llvm.add_symbol(name, ctypes.cast(cb, ctypes.c_void_p).value)
            _registered = True


_RENAMES = [
    (r'@"?llvm\.nvvm\.read\.ptx\.sreg\.(tid|ctaid|ntid|nctaid)\.x"?', r"@nbxla_emu_\1"),
    (r'@"?llvm\.nvvm\.shfl\.sync\.bfly\.i32"?', "@nbxla_emu_shfl"),
    (r'@"?llvm\.nvvm\.barrier0"?', "@nbxla_emu_barrier"),
]


def host_ir(nvptx_ir: str) -> str:
    """The kernels' NVPTX IR with the GPU primitives renamed to host callbacks."""
    text = re.sub(r'^target (triple|datalayout) = .*$', "", nvptx_ir, flags=re.M)
    for pattern, repl in _RENAMES:
        text = re.sub(pattern, repl, text)
    text = text.replace(" addrspace(3)", "")
    # The callbacks are ordinary functions now: keep LLVM from treating them as readnone
    # intrinsics (their declarations carry no attributes in llvmlite's output anyway).
    return f'target triple = "{llvm.get_process_triple()}"\n' + text


class HostKernels:
    """GPU kernels compiled for the host; ``launch`` runs one over an emulated grid."""

    def __init__(self, kernels: GpuKernels):
        _register_callbacks()
        self.kernels = kernels
        self.text = host_ir(kernels.llvm_ir)
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        with _lock:
            mod = llvm.parse_assembly(self.text)
            mod.verify()
            # host CPU features: f16 conversions are instructions (F16C), not libcalls MCJIT lacks
            tm = llvm.Target.from_default_triple().create_target_machine(
                cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(), opt=1, jit=True)
            self.engine = llvm.create_mcjit_compiler(mod, tm)
            self.engine.finalize_object()
        self._functions: dict[str, object] = {}

    def _function(self, name: str, args: list):
        key = (name, tuple(type(a) is int for a in args))
        fn = self._functions.get(key)
        if fn is None:
            addr = self.engine.get_function_address(name)
            if not addr:
                raise EmulationError(f"no kernel {name} in the module")
            types = [ctypes.c_int64 if type(a) is int else ctypes.c_void_p for a in args]
            fn = self._functions[key] = ctypes.CFUNCTYPE(None, *types)(addr)
        return fn

    def launch(self, name: str, grid: int, block: int, args: list, lockstep: bool = True) -> None:
        """Run kernel ``name`` on ``grid`` blocks of ``block`` threads.  ``args``: NumPy arrays
        (passed as pointers) and Python ints (i64).  ``lockstep=False`` runs threads one by one
        (only for kernels without shuffles or barriers)."""
        if block % WARP:
            raise EmulationError(f"block of {block} threads: emulated blocks are whole warps")
        values = [a if type(a) is int else a.ctypes.data for a in args]
        fn = self._function(name, args)
        errors: list[str] = []
        if not lockstep:
            _state.errors, _state.block, _state.ntid, _state.nctaid = errors, None, block, grid
            try:
                for c in range(grid):
                    for t in range(block):
                        _state.ctaid, _state.tid = c, t
                        fn(*values)
            finally:
                _state.errors = None
        else:
            for c in range(grid):
                blk = _Block(block)

                def thread(t, c=c, blk=blk):
                    _state.errors, _state.block = errors, blk
                    _state.tid, _state.ctaid, _state.ntid, _state.nctaid = t, c, block, grid
                    fn(*values)
                    _state.errors = _state.block = None
                threads = [threading.Thread(target=thread, args=(t,), daemon=True) for t in range(block)]
                for th in threads:
                    th.start()
                for th in threads:
                    th.join()
        if errors:
            raise EmulationError(f"kernel {name}: {errors[0]} ({len(errors)} problem(s))")

    def run_thread(self, name: str, args: list, tid: int, ctaid: int, ntid: int, nctaid: int) -> None:
        """Run one thread of a launch of ``nctaid`` blocks of ``ntid`` threads, alone: what it
        writes shows which elements that thread owns (kernels without shuffles or barriers)."""
        errors: list[str] = []
        _state.errors, _state.block = errors, None
        _state.tid, _state.ctaid, _state.ntid, _state.nctaid = tid, ctaid, ntid, nctaid
        try:
            self._function(name, args)(*[a if type(a) is int else a.ctypes.data for a in args])
        finally:
            _state.errors = None
        if errors:
            raise EmulationError(f"kernel {name}: {errors[0]}")


def run_fusion(host: HostKernels, name: str, operands: list[np.ndarray], out_shapes: list,
               block: int = EMU_BLOCK, max_blocks: int = EMU_MAX_BLOCKS) -> list[np.ndarray]:
    """Run the kernel(s) of fusion ``name`` on host arrays the way the CUDA runtime launches them."""
    spec = host.kernels.specs[name]
    operands = [a if a.flags.c_contiguous else np.array(a, order="C") for a in map(np.asarray, operands)]
    outs = [np.empty(dims, dtype) for dims, dtype in out_shapes]
    grid = spec.grid(max_blocks)
    if spec.finish_name:
        scratch = np.zeros(spec.scratch_bytes(grid), np.uint8)
        host.launch(spec.name, grid, block, operands + [scratch])
        host.launch(spec.finish_name, spec.finish_grid(max_blocks), block,
                    operands + outs + [scratch] + spec.finish_args(grid))
    else:
        host.launch(spec.name, grid, block, operands + outs, lockstep=spec.style != "elementwise")
    return outs
