"""The CPU target: LLVM IR for a module's fusions -> optimized x86 machine code, in process.

Compiled for the host CPU's name and features at O3 with LLVM's loop and SLP vectorizers
(llvmlite's new pass manager), and loaded with MCJIT.  The LLVM IR before and after
optimization and the assembly are kept for ``%xla_ir stage=llvm_ir|llvm_ir_opt|asm``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import llvmlite.binding as llvm
from llvmlite import ir

from ..errors import UnsupportedError
from ..hlo.ir import Computation
from .loops import KernelSpec, emit_kernel

_lock = threading.RLock()
_target_machine = None


def _new_target_machine():
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    return llvm.Target.from_default_triple().create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(),
        opt=3, jit=True)


def host_target_machine():
    """A shared target machine for optimizing and printing assembly (never given to a JIT
    engine: an engine takes ownership of its target machine and frees it with itself)."""
    global _target_machine
    with _lock:
        if _target_machine is None:
            _target_machine = _new_target_machine()
        return _target_machine


@dataclass
class CompiledKernels:
    """Machine code for a set of kernels; keeps the JIT engine (and so the code) alive."""
    specs: dict[str, KernelSpec]
    addresses: dict[str, int]
    llvm_ir: str
    llvm_ir_optimized: str
    unsupported: dict[str, str] = field(default_factory=dict)   # fusion -> why it is interpreted
    engine: object = None
    _asm: str | None = None

    @property
    def asm(self) -> str:
        """The assembly, printed on first request (it costs a second code generation)."""
        if self._asm is None:
            with _lock:
                mod = llvm.parse_assembly(self.llvm_ir_optimized)
                self._asm = host_target_machine().emit_assembly(mod)
        return self._asm


def compile_kernels(module_name: str, fusions: list[tuple[str, Computation]]) -> CompiledKernels:
    """Emit, optimize and load one kernel per fusion; fusions that cannot be emitted natively
    are listed in ``unsupported`` with the reason (the runtime interprets those)."""
    ir_module = ir.Module(name=module_name)
    ir_module.triple = llvm.get_process_triple()
    specs, unsupported = {}, {}
    for name, comp in fusions:
        trial = ir.Module(name="trial")
        trial.triple = ir_module.triple
        try:
            emit_kernel(trial, name, comp)       # emit alone first: failures leave no trace
        except UnsupportedError as e:
            unsupported[name] = str(e)
            continue
        specs[name] = emit_kernel(ir_module, name, comp)
    with _lock:
        tm = host_target_machine()
        ir_module.data_layout = str(tm.target_data)
        text = str(ir_module)
        mod = llvm.parse_assembly(text)
        mod.verify()
        pto = llvm.create_pipeline_tuning_options(speed_level=3)
        pto.loop_vectorization = True
        pto.slp_vectorization = True
        pb = llvm.create_pass_builder(tm, pto)
        pb.getModulePassManager().run(mod, pb)
        optimized = str(mod)
        engine = llvm.create_mcjit_compiler(mod, _new_target_machine())
        engine.finalize_object()
        addresses = {name: engine.get_function_address(name) for name in specs}
        for spec in specs.values():
            if spec.finish_name:
                addresses[spec.finish_name] = engine.get_function_address(spec.finish_name)
    return CompiledKernels(specs, addresses, text, optimized, unsupported, engine)
