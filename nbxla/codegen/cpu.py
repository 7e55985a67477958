"""The CPU target: LLVM IR for a module's fusions -> optimized x86 machine code, in process.

Compiled for the host CPU's name and features at O3 with LLVM's loop and SLP vectorizers
(llvmlite's new pass manager), and loaded with MCJIT.  The LLVM IR before and after
optimization and the assembly are kept for ``%xla_ir stage=llvm_ir|llvm_ir_opt|asm``.
"""

from __future__ import annotations

import functools
import hashlib
import os
import threading
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Protocol

import llvmlite.binding as llvm
from llvmlite import ir

from ..compile_clock import stage
from ..errors import UnsupportedError
from ..hlo.ir import Computation
from . import math_calls
from .kernels import emit_kernel
from .libcalls import ensure_registered
from .object_keys import global_name, object_key, renamed, with_module_id
from .updates import emit_in_place_update
from .toolkit import KernelSpec, no_unrolling


_lock = threading.RLock()
_target_machine = None


def _new_lock_after_fork() -> None:
    global _lock                # (a parent thread may have held it mid-compile: see runtime.cache)
    _lock = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_lock_after_fork)


@functools.lru_cache(maxsize=1)
def _host_cpu() -> tuple[str, str]:
    """(name, features) of the host CPU: asked once (0.4-0.7 ms a time, and every module's
    engine takes a target machine of its own)."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    return llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()


def _new_target_machine(opt: int = 3):
    name, features = _host_cpu()
    return llvm.Target.from_default_triple().create_target_machine(cpu=name, features=features, opt=opt, jit=True)


def host_target_machine():
    """A shared target machine for optimizing and printing assembly (never given to a JIT
    engine: an engine takes ownership of its target machine and frees it with itself)."""
    global _target_machine
    with _lock:
        if _target_machine is None:
            _target_machine = _new_target_machine()
        return _target_machine


def jit_engine(mod):
    """An MCJIT engine holding the machine code of the parsed LLVM module ``mod``, optimized
    as kernels are; the code lives as long as the engine (runtime/dual_gemv.py's
    hand-written kernel)."""
    ensure_registered(_new_target_machine)
    with _lock:
        tm = host_target_machine()
        mod.data_layout = str(tm.target_data)
        mod.verify()
        optimize_module(mod, tm)
        engine = llvm.create_mcjit_compiler(mod, _new_target_machine())
        with machine_code():
            engine.finalize_object()
    return engine


def object_engine(mod=None, obj: bytes | None = None, glue: bool = False):
    """(an MCJIT engine, its object code) for an optimized parsed module ``mod``, or for object
    code ``obj`` compiled earlier that way (loaded as given: no module, no LLVM passes).  The
    code lives as long as the engine (the native loops' libraries made without a C compiler).
    ``glue``: ``mod`` is straight-line glue (runtime/fastcall.py's trampolines: loads, checks,
    one call), compiled by LLVM's fast instruction selector (-O0 code generation): 2 ms against
    6.5-8 ms at -O3 per trampoline, each a part of every process's first call, for no
    measurable difference per call (benchmarks/small_calls.py)."""
    captured: list[bytes] = []
    ensure_registered(_new_target_machine)
    with _lock:
        if obj is None:
            engine = llvm.create_mcjit_compiler(mod, _new_target_machine(0 if glue else 3))
            engine.set_object_cache(notify_func=lambda m, buf: captured.append(bytes(buf)))
        else:
            engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), _new_target_machine())
            engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
        with machine_code():
            engine.finalize_object()
    return engine, obj if obj is not None else captured[0]


@dataclass
class CompiledKernels:
    """Machine code for a set of kernels; keeps the JIT engine (and so the code) alive."""
    specs: dict[str, KernelSpec]
    addresses: dict[str, int]
    llvm_ir: str
    llvm_ir_optimized: str
    unsupported: dict[str, str] = field(default_factory=dict)   # fusion -> why it is interpreted
    engine: object = None
    object_code: bytes | None = None
    from_cache: bool = False
    engines: list = field(default_factory=list)
    # The kernels compiled light (their loops not unrolled: ``light_kernel``), by name
    light: frozenset = frozenset()
    _asm: str | None = None

    @property
    def asm(self) -> str:
        """The assembly, printed on first request (it costs a second code generation)."""
        if self._asm is None:
            with machine_code():
                mod = llvm.parse_assembly(self.llvm_ir_optimized)
                self._asm = host_target_machine().emit_assembly(mod)
        return self._asm


@functools.lru_cache(maxsize=1)
def target_fingerprint() -> str:
    """What compiled code depends on besides the module: code generator source, LLVM, the CPU.
    (Computed once per process, from the sources as loaded: 1.5 ms a call, once per compile.)"""
    here = os.path.dirname(os.path.abspath(__file__))
    digest = hashlib.sha256()
    for name in sorted(os.listdir(here)):
        if name.endswith((".py", ".c")):
            with open(os.path.join(here, name), "rb") as f:
                digest.update(name.encode() + f.read())
    digest.update(repr((llvm.llvm_version_info, llvm.get_process_triple(), llvm.get_host_cpu_name(),
                        llvm.get_host_cpu_features().flatten())).encode())
    return digest.hexdigest()


class ObjectStore(Protocol):
    """Where compiled object code is kept between processes (see runtime.persistent_cache)."""

    def load(self, key: str) -> tuple[dict, bytes] | None: ...

    def save(self, key: str, meta: dict, obj: bytes) -> None: ...


def compile_kernels(module_name: str, fusions: list[tuple[str, Computation]],
                    store: ObjectStore | None = None, key: str | None = None,
                    object_data_offset: int | None = None, emitted: "EmittedKernels | None" = None,
                    light: frozenset = frozenset(), in_place: frozenset = frozenset()) -> CompiledKernels:
    """Machine code for one kernel per fusion.  With ``object_data_offset``, kernels also get an
    entry point taking array objects (see ``_emit_object_entry``).  ``emitted``: these fusions'
    IR as ``emit_llvm_ir`` gave it (emitted already to compare it: not emitted again).
    ``light``: the names of the fusions whose loops are not unrolled (LIGHT_KERNEL_ELEMENTS).
    ``in_place``: the names of update fusions whose kernel writes only the window into the
    updated operand's buffer (``updates.emit_in_place_update``: the caller passes that buffer
    as the output)."""
    light = frozenset() if emitted is not None else frozenset(light)   # (emitted: as it was emitted)
    if not fusions and (emitted is None or not emitted.specs):
        # (nothing to compile -- a program of library calls, conv2d's: an MCJIT engine and a
        # target machine for an empty module took 3-4 ms of its first call)
        return CompiledKernels({}, {}, _empty_module_text(module_name), _empty_module_text(module_name), {})
    try:
        kernels = _compile_kernels(module_name, fusions, store, key, object_data_offset, emitted, light, in_place)
        kernels.light = light
        return kernels
    except RuntimeError:
        pass
    # LLVM rejected the module (a code generator bug): compile the kernels one by one, so
    # only the broken one is interpreted, and say so in the record.
    parts = []
    for name, comp in fusions:
        try:
            parts.append(_compile_kernels(f"{module_name}_{name}", [(name, comp)], None, None,
                                          object_data_offset, light=light, in_place=in_place))
        except RuntimeError as e:
            parts.append(CompiledKernels({}, {}, "", "", {name: f"internal code generation error: {e}"}))
    merged = CompiledKernels({}, {}, "", "", {})
    for p in parts:
        merged.specs.update(p.specs)
        merged.addresses.update(p.addresses)
        merged.unsupported.update(p.unsupported)
        merged.llvm_ir += p.llvm_ir
        merged.llvm_ir_optimized += p.llvm_ir_optimized
    merged.engines = [p.engine for p in parts]          # keep every engine's code alive
    merged.light = light
    return merged


def _empty_module_text(name: str) -> str:
    ir_module = ir.Module(name=name)
    ir_module.triple = llvm.get_process_triple()
    ir_module.data_layout = str(host_target_machine().target_data)
    return str(ir_module)


def _compile_kernels(module_name: str, fusions: list[tuple[str, Computation]],
                     store: ObjectStore | None, key: str | None,
                     object_data_offset: int | None = None, emitted=None,
                     light: frozenset = frozenset(), in_place: frozenset = frozenset()) -> CompiledKernels:
    """Emit, optimize and load one kernel per fusion; fusions that cannot be emitted natively
    are listed in ``unsupported`` with the reason (the runtime interprets those).

    With a ``store`` and ``key``, object code compiled earlier for the same key is loaded
    instead of running LLVM's optimizer and code generator again.
    """
    cached = store.load(key) if store is not None and key else None
    if cached is not None:
        meta, obj = cached
        specs = {name: KernelSpec(**spec) for name, spec in meta["specs"].items()}
        return _load(specs, meta["unsupported"], meta["llvm_ir"], meta["llvm_ir_optimized"], obj)
    if emitted is not None:
        text, specs, unsupported = emitted.text, dict(emitted.specs), dict(emitted.unsupported)
    else:
        with stage("llvm-ir"):
            ir_module, specs, unsupported = _emit_module(module_name, fusions, object_data_offset, light, in_place)
    if not specs:           # (every kernel refused: no LLVM module and engine of nothing)
        return CompiledKernels({}, {}, _empty_module_text(module_name), _empty_module_text(module_name), unsupported)
    with _lock:
        tm = host_target_machine()
        with stage("llvm-ir"):
            if emitted is None:
                ir_module.data_layout = str(tm.target_data)
                text = str(ir_module)
            else:
                text = _with_data_layout(text, str(tm.target_data))
    # The same kernels compiled before under other names (object_keys.py): their machine code.
    symbols = list(specs)
    code_key = object_key(text, symbols, target_fingerprint()) if store is not None else None
    found = store.load(code_key) if code_key else None
    if found is not None and len(found[0].get("symbols", ())) == len(symbols):
        meta, obj = found
        optimized = with_module_id(renamed(meta["llvm_ir_optimized"], meta["symbols"], symbols), text)
        return _load(specs, unsupported, text, optimized, obj,
                     compiled_name=lambda name: global_name(name, symbols, meta["symbols"]))
    with _lock:
        tm = host_target_machine()
        with stage("llvm-optimize"):
            mod = llvm.parse_assembly(text)
            mod.verify()
            optimize_module(mod, tm)
            optimized = str(mod)
    kernels = _load(specs, unsupported, text, optimized, None, mod)
    if store is not None and key and kernels.object_code is not None:
        store.save(key, {"specs": {n: asdict(s) for n, s in specs.items()}, "unsupported": unsupported,
                         "llvm_ir": text, "llvm_ir_optimized": optimized}, kernels.object_code)
    if code_key and kernels.object_code is not None:
        store.save(code_key, {"symbols": symbols, "llvm_ir_optimized": optimized}, kernels.object_code)
    return kernels


def compile_helper_kernel(name: str, emit, pipeline: str = "full", store: ObjectStore | None = None,
                          key: str | None = None) -> CompiledKernels:
    """Machine code for one kernel emitted outside the dispatcher (the runtime's helper kernels:
    ``runtime/conv_blocks.py``'s patch GEMM): ``emit(ir_module, name)`` returns its spec.
    ``pipeline``: which of the LLVM ``PIPELINES`` optimizes it.  With a ``store`` and ``key``
    (which must name everything the kernel's code depends on besides ``target_fingerprint``),
    object code compiled earlier is loaded instead, and new code is kept there."""
    cached = store.load(key) if store is not None and key else None
    if cached is not None:
        meta, obj = cached
        return _load({name: KernelSpec(**meta["spec"])}, {}, meta["llvm_ir"], meta["llvm_ir_optimized"], obj)
    kernels = _compile_helper_kernel(name, emit, pipeline)
    if store is not None and key and kernels.object_code is not None:
        store.save(key, {"spec": asdict(kernels.specs[name]), "llvm_ir": kernels.llvm_ir,
                         "llvm_ir_optimized": kernels.llvm_ir_optimized}, kernels.object_code)
    return kernels


def _compile_helper_kernel(name: str, emit, pipeline: str) -> CompiledKernels:
    with stage("llvm-ir"):
        ir_module = ir.Module(name=name)
        ir_module.triple = llvm.get_process_triple()
        spec = emit(ir_module, name)
    with _lock:
        tm = host_target_machine()
        with stage("llvm-ir"):
            ir_module.data_layout = str(tm.target_data)
            text = str(ir_module)
        with stage("llvm-optimize"):
            mod = llvm.parse_assembly(text)
            mod.verify()
            optimize_module(mod, tm, pipeline)
            optimized = str(mod)
    return _load({name: spec}, {}, text, optimized, None, mod)


# LLVM pipelines (``optimize_module``): "full", O3 with the loop and SLP vectorizers and the
# unroller (loops of "light" kernels opt out of the unroller: see ``light_kernel``);
# "hand-vectorized", for kernels emitted as vector operations, register-blocked, their short
# loops unrolled and their pointers stepped as emitted (the patch GEMM's ``stepping_loop``):
# only SROA (their accumulators are allocas), instcombine and simplifycfg (and, as all machine
# code here, no loop strength reduction: ``machine_code``).  What they lose to the missing
# passes, measured
# side by side on twelve patch-GEMM geometries (LeNet-5's, conv2d's, benchmarks/conv.py's
# native ones, f64 with window dilation) against O3 less the unroller and vectorizers and with
# LSR: nothing beyond the noise (run times 0.96-1.05x; the inner loop's code is the same: one
# kernel-row load and a broadcast FMA per position, two pointer steps, a counter); LLVM's time
# per kernel fell by about half (conv2d's 5x5 3 -> 16: 57 -> 19 ms; LSR alone took 12 ms of it
# to find nothing better, O3's function passes another 10).  Results bit for bit the same.
PIPELINES = ("full", "hand-vectorized")

# Elements (of any one operand, result or instruction of a kernel) up to which a kernel of the
# entry computation is "light": its loops are not unrolled (toolkit.no_unrolling).  Why: the
# unroller doubled the code LLVM then optimizes and emits (LeNet-5's seven small kernels:
# 140 -> 69 ms of LLVM) and made no kernel of this size measurably faster: side by side,
# conv2d, LeNet-5, eos, arc-distance, isoneutral, hdiff, jacobi-2d, heat-3d, gemver and
# fdtd-2d at their small sizes (kernels of up to 64K elements) ran within 3% without it.
# Kernels of loop bodies, which run once per iteration, are never light.
LIGHT_KERNEL_ELEMENTS = 1 << 16


def optimize_module(mod, tm, pipeline: str = "full") -> None:
    """One of the ``PIPELINES`` on the parsed module ``mod``, in place (also used by AOT)."""
    if pipeline not in PIPELINES:
        raise ValueError(f"unknown LLVM pipeline {pipeline!r}; one of {', '.join(PIPELINES)}")
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    if pipeline == "hand-vectorized":
        passes = llvm.create_new_module_pass_manager()
        passes.add_sroa_pass()
        passes.add_instruction_combine_pass()
        passes.add_simplify_cfg_pass()
        passes.run(mod, llvm.create_pass_builder(tm, pto))
        _link_math_bodies(mod, tm)
        return
    pto.loop_vectorization = pto.slp_vectorization = pipeline != "hand-vectorized"
    pto.loop_unrolling = pipeline == "full"
    # No interleaving (unrolling vector loops 4x): measured side by side, it made no kernel
    # faster (memory-bound loops gain nothing; layernorm's row loops got 20-50% slower)
    # and doubled the compile time of transcendental-heavy kernels (softmax 62 -> 40 ms).
    # Loops that gain from it ask per loop (toolkit.counted_loop's interleave: reductions'
    # accumulators, and compute_bound.interleave_count's transcendental kernels).
    pto.loop_interleaving = False
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    _link_math_bodies(mod, tm)


def _link_math_bodies(mod, tm) -> None:
    """The bodies of the transcendentals ``mod``'s optimized kernels call (``math_calls``: their
    vector widths are known only now), optimized as kernels are and linked in."""
    bodies = math_calls.called_bodies(mod)
    if bodies is not None:
        optimize_module(bodies, tm, "hand-vectorized")
        math_calls.link_bodies(mod, bodies)


def light_kernel(comp: Computation) -> bool:
    """Is the kernel of ``comp`` (a fusion's computation, or a standalone op's) light, its
    loops not unrolled: no instruction, operand or result of more than LIGHT_KERNEL_ELEMENTS
    elements (a reduce-window's results counted with their window), and no dot, convolution
    or sort (their work is not bounded by their sizes)?  The caller asks for the kernels of
    the entry only."""
    def elements(shape) -> int | None:
        total = 0
        for leaf in (shape.leaves() if shape.is_tuple else [shape]):
            size = leaf.size
            if not isinstance(size, int):       # (an unknown dimension: no bound)
                return None
            total += size
        return total
    for instr in comp.instructions:
        if instr.opcode in ("dot", "convolution", "sort", "custom-call", "while", "call", "conditional"):
            return False
        touched = [elements(instr.shape)] + [elements(o.shape) for o in instr.operands]
        if any(n is None for n in touched):
            return False
        if instr.opcode == "reduce-window":         # (each result reads a window)
            window = 1
            for w in getattr(instr.attrs.get("window"), "dims", ()):
                window *= w.size
            touched.append(touched[0] * window)
        if max(touched) > LIGHT_KERNEL_ELEMENTS:
            return False
    return True


def _emit_module(module_name: str, fusions: list[tuple[str, Computation]],
                 object_data_offset: int | None, light: frozenset = frozenset(),
                 in_place: frozenset = frozenset()):
    """The LLVM module of every fusion that can be emitted natively, their specs, and the
    reason for each one that cannot.  A kernel that fails half-way leaves a broken function
    behind, so the module is emitted again without it (failures are rare: emitting each
    kernel alone first would double the emission time of every module)."""
    unsupported: dict[str, str] = {}
    while True:
        ir_module = ir.Module(name=module_name)
        ir_module.triple = llvm.get_process_triple()
        specs = {}
        try:
            for name, comp in fusions:
                if name in unsupported:
                    continue
                current = name
                with no_unrolling(name in light):
                    emit = emit_in_place_update if name in in_place else emit_kernel
                    spec = specs[name] = emit(ir_module, name, comp)
                if object_data_offset is None:
                    continue
                if spec.style == "full-reduce":
                    spec.object_entry = _emit_full_reduction_entry(ir_module, spec, len(comp.parameters),
                                                                   _buffer_count(comp), object_data_offset)
                else:
                    # (a kernel reading sizes at run time takes their array last: RunSizes)
                    spec.object_entry = _emit_object_entry(ir_module, name, _buffer_count(comp) + bool(spec.sizes),
                                                           object_data_offset)
        except UnsupportedError as e:
            unsupported[current] = str(e)
            continue
        return ir_module, specs, unsupported


@dataclass
class EmittedKernels:
    """Kernels' LLVM IR before optimization, their specs, and the fusions that cannot be emitted."""
    text: str
    specs: dict[str, KernelSpec]
    unsupported: dict[str, str]


def emit_llvm_ir(module_name: str, fusions: list[tuple[str, Computation]],
                 object_data_offset: int | None = None, light: frozenset = frozenset(),
                 in_place: frozenset = frozenset()) -> EmittedKernels:
    """The LLVM IR text (unoptimized) and the specs of the kernels, as ``compile_kernels``
    would compile them, without compiling."""
    with stage("llvm-ir"):
        ir_module, specs, unsupported = _emit_module(module_name, fusions, object_data_offset, light, in_place)
        return EmittedKernels(str(ir_module), specs, unsupported)


def _with_data_layout(text: str, layout: str) -> str:
    """``text`` (emitted without a data layout) with ``layout``, as ``_compile_kernels`` sets it."""
    lines = text.split("\n")
    for k, line in enumerate(lines):
        if line.startswith("target datalayout"):
            lines[k] = f'target datalayout = "{layout}"'
            return "\n".join(lines)
    at = next((k for k, line in enumerate(lines) if line.startswith("target triple")), 0)
    lines.insert(at + 1, f'target datalayout = "{layout}"')
    return "\n".join(lines)


@contextmanager
def machine_code():
    """Hold ``_lock`` while LLVM generates machine code inside the block, without loop strength
    reduction (LSR).  Why: LSR took 35-50% of the code generator's time on small kernels and
    60-85% on kernels of many addresses per iteration (tiled transposes: 238 -> 48 ms each,
    in-place updates in loops: 120 -> 12 ms; vadv's two modules at npbench S 917 -> 306 ms,
    2/3 of its first call's LLVM time), and made nothing measurably faster (x86 addresses
    take base + index * scale as they are): side by side in one process, LSR on against off,
    vadv and scattering_self_energies at S, benchmarks/loop_programs.py and programs.py
    --size small ran within the noise of a loaded machine (CPU-time ratios 0.97-1.05 where
    re-measured; identical code measured 0.9-1.1 there).  The switch is LLVM's global
    ``-disable-lsr`` option: it is set for the block only and cleared after, so that other
    users of LLVM in the process (numba) keep their pipelines."""
    with _lock:
        llvm.set_option("nbxla", "-disable-lsr=true")
        try:
            yield
        finally:
            llvm.set_option("nbxla", "-disable-lsr=false")


def _load(specs, unsupported, text, optimized, obj: bytes | None, mod=None,
          compiled_name=lambda name: name) -> CompiledKernels:
    """JIT-load the optimized module; with ``obj``, its machine code is taken as given.
    ``compiled_name``: a global's name in ``obj`` (compiled for kernels of other names)."""
    captured: list[bytes] = []
    ensure_registered(_new_target_machine)
    with _lock, stage("machine-code"):
        if mod is None:
            mod = llvm.parse_assembly(optimized)
        engine = llvm.create_mcjit_compiler(mod, _new_target_machine())
        engine.set_object_cache(notify_func=lambda m, buf: captured.append(bytes(buf)),
                                getbuffer_func=lambda m: obj)
        with machine_code():
            engine.finalize_object()
        addresses = {name: engine.get_function_address(compiled_name(name)) for name in specs}
        for spec in specs.values():
            for extra in (spec.finish_name, spec.object_entry):
                if extra:
                    addresses[extra] = engine.get_function_address(compiled_name(extra))
    kernels = CompiledKernels(specs, addresses, text, optimized, unsupported, engine)
    kernels.object_code = obj if obj is not None else (captured[0] if captured else None)
    kernels.from_cache = obj is not None
    return kernels


def _buffer_count(comp: Computation) -> int:
    """A kernel's buffers: the computation's parameters, then one per output array."""
    root = comp.root
    return len(comp.parameters) + (len(root.shape.elements) if root.shape.is_tuple else 1)


_I8P = ir.IntType(8).as_pointer()
_I64 = ir.IntType(64)


def _object_entry_function(module: ir.Module, name: str, buffers: int):
    """``name_objects(PyObject* array_0, ..., PyObject* array_n-1, i64 begin, i64 end)``, its
    builder, and a function giving the data pointer of array ``k``."""
    entry = ir.Function(module, ir.FunctionType(ir.VoidType(), [_I8P] * buffers + [_I64, _I64]),
                        name + "_objects")
    b = ir.IRBuilder(entry.append_basic_block("entry"))

    def data(k: int, data_offset: int):
        return b.load(b.bitcast(b.gep(entry.args[k], [ir.Constant(_I64, data_offset)]), _I8P.as_pointer()))
    return entry, b, data


def _pointer_array(b: ir.IRBuilder, pointers: list):
    array = b.alloca(ir.ArrayType(_I8P, len(pointers)))
    for k, p in enumerate(pointers):
        b.store(p, b.gep(array, [ir.Constant(_I64, 0), ir.Constant(ir.IntType(32), k)]))
    return b.bitcast(array, _I8P.as_pointer())


def _emit_object_entry(module: ir.Module, name: str, buffers: int, data_offset: int) -> str:
    """``name_objects(PyObject* array_0, ..., PyObject* array_n-1, i64 begin, i64 end)``: reads
    each NumPy array's data pointer at ``data_offset`` in the array object, and calls ``name``.

    Why: calling a small kernel from Python is dominated by dispatch; handing ctypes the
    arrays themselves skips building a pointer array and reading every data pointer in
    Python (the runtime checks the offset on a probe array and passes only exact ndarrays)."""
    entry, b, data = _object_entry_function(module, name, buffers)
    kernel = module.get_global(name)
    kernel.attributes.add("noinline")       # one copy of the kernel's code, not two
    pointers = [data(k, data_offset) for k in range(buffers)]
    b.call(kernel, [_pointer_array(b, pointers), entry.args[-2], entry.args[-1]])
    b.ret_void()
    return entry.name


def _emit_full_reduction_entry(module: ir.Module, spec, params: int, buffers: int, data_offset: int) -> str:
    """A full reduction in one call, for ranges too small to split: ``name_objects`` (as
    above; ``begin`` is ignored) reduces ``[0, end)`` into partial slots on its stack and
    finishes them.  Two kernel calls and a scratch array from Python cost 4 us of the 6.6 us
    that ``np.max`` of a 16x16 array took."""
    entry, b, data = _object_entry_function(module, spec.name, buffers)
    scratch = b.bitcast(b.alloca(ir.ArrayType(_I64, max(1, spec.scratch_slots))), _I8P)
    pointers = [data(k, data_offset) for k in range(buffers)]
    partial, finish = module.get_global(spec.name), module.get_global(spec.finish_name)
    partial.attributes.add("noinline")
    b.call(partial, [_pointer_array(b, pointers[:params] + [scratch]), ir.Constant(_I64, 0), entry.args[-1]])
    b.call(finish, [_pointer_array(b, pointers + [scratch]), ir.Constant(_I64, 1), ir.Constant(_I64, 0)])
    b.ret_void()
    return entry.name
