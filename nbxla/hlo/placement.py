"""How each opcode runs, per backend: one table each for the CPU jit runtime, the CUDA runtime and
the AOT driver, which dispatch from it (XLA's emitters have one handler per opcode; here the
handler is named in the table, so an opcode without one is a refusal with its reason, never a
fall-through).

Kinds, for every table:

* ``data``: no work -- the caller's array (``parameter``) or a literal of the executable.
* ``view``: no work -- a name for memory that exists (``hlo/aliasing.py``); an instruction of a
  view opcode that is no view there (a ``reshape`` with a layout, a ``bitcast`` that changes the
  element type) runs as the table's ``otherwise`` says.
* ``fused``: runs inside a fused kernel (the fusion pass wraps it); standing alone it runs as
  ``otherwise`` says.
* ``kernel``: a compiled kernel of its own (a fusion, a scatter, a reduce-window).
* ``library``: a call into a library routine (BLAS, LAPACK, NumPy's sort, aot_runtime.c).
* ``control``: runs called computations as programs (a loop, a branch, a call).
* ``host``: the reference evaluator's rule, in Python (the runtime says so where it happens).
* ``refused``: this backend cannot run it; ``how`` is the reason given to the user.

``handler`` names the method of the backend's executable (or program emitter) that runs the
kind; ``tests/hlo/test_opcode_tables.py`` checks every opcode has an entry in every table and that
the handlers exist.  ``CPU_PLACEMENT`` (the prose the docs and reports quote) is derived here.
"""

from __future__ import annotations

from dataclasses import dataclass

from .aliasing import is_view
from .ir import Instruction
from .opcodes import FUSIBLE, OPCODES

KINDS = ("data", "view", "fused", "kernel", "library", "control", "host", "refused")


@dataclass(frozen=True)
class Placement:
    kind: str
    how: str                                # for reports (and the reason, when refused)
    handler: str | None = None              # the backend's method that runs it
    otherwise: "Placement | None" = None    # a view opcode that is no view / a fused op alone


def placement(table: dict[str, Placement], instr: Instruction) -> Placement:
    """How ``instr`` runs under ``table``, conditions resolved (a view opcode that is no view, a
    fused op standing alone)."""
    p = table[instr.opcode]
    if p.otherwise is not None and (p.kind == "fused" or not is_view(instr)):
        return p.otherwise
    return p


def _table(common: dict[str, Placement], fused: Placement, rest: Placement) -> dict[str, Placement]:
    """Every opcode: ``common`` first, the fusible ones as ``fused``, all else ``rest``."""
    out = {}
    for op in OPCODES:
        out[op] = common.get(op) or (fused if op in FUSIBLE or OPCODES[op].elementwise else rest)
    return out


# ---- the CPU jit runtime (runtime/cpu_executable.py: CpuExecutable) -------------------------------

_CPU_HOST = Placement("host", "evaluator rule", "_host_thunk")
_CPU_VIEW = Placement("view", "no work (a view or a name)", "_view_thunk", otherwise=_CPU_HOST)

CPU: dict[str, Placement] = _table({
    "parameter": Placement("data", "program input"),
    "constant": Placement("data", "a literal of the executable", "_constant_thunk"),
    "tuple": _CPU_VIEW, "get-tuple-element": _CPU_VIEW, "reshape": _CPU_VIEW, "bitcast": _CPU_VIEW,
    "slice": Placement("view", "a copy of a NumPy view", "_view_thunk"),
    "complex": Placement("fused", "fused (complex rules)", otherwise=_CPU_HOST),
    "reduce": Placement("fused", "fused: row, column or full-reduction kernel", otherwise=_CPU_HOST),
    "fusion": Placement("kernel", "kernel", "_kernel_thunk"),
    "reduce-window": Placement("kernel", "own kernel", "_kernel_thunk"),
    "scatter": Placement("kernel", "own kernel", "_kernel_thunk"),
    # (a compiled kernel runs first whatever the kind: fusion decides which dots and convolutions
    # get one -- ``_kernel_symbols`` in runtime/cpu_executable.py)
    "dot": Placement("library", "library call: NumPy's BLAS (np.matmul); a native dot kernel when "
                                "fused with its epilogue and small, or on types BLAS lacks "
                                "(integers, f16)", "_library_thunk"),
    "convolution": Placement("library", "own kernel (depthwise / few inputs per group), else "
                                        "library call: BLAS GEMM", "_library_thunk"),
    "sort": Placement("library", "library call: NumPy's argsort/lexsort (a native merge-sort kernel "
                                 "for comparators it cannot read, and for NaN keys under a plain "
                                 "float comparison)", "_library_thunk"),
    "custom-call": Placement("library", "library call for LAPACK targets (solve, Cholesky, LU, "
                                        "triangular solve, QR, eigh) and TopK; evaluator: the "
                                        "registered target's NumPy implementation for the rest",
                             "_library_thunk"),
    "while": Placement("control", "host loop over compiled programs", "_control_thunk"),
    "conditional": Placement("control", "host branch over compiled programs", "_control_thunk"),
    "call": Placement("control", "runs the called compiled program", "_control_thunk"),
    "rng-bit-generator": Placement("kernel", "own kernel: XLA's ThreeFry / Philox bits", "_kernel_thunk"),
    "select-and-scatter": Placement("kernel", "own kernel", "_kernel_thunk"),
    "fft": Placement("library", "library call: NumPy's pocketfft (np.fft)", "_library_thunk"),
    "topk": Placement("library", "library call: NumPy's stable argsort on total-order keys (also "
                                 "XLA's TopK custom call)", "_library_thunk"),
    "opt-barrier": Placement("view", "no work: its operand passes through", "_view_thunk"),
}, fused=Placement("fused", "inside a fused kernel", otherwise=_CPU_HOST), rest=_CPU_HOST)

# How an opcode without an elemental codegen rule runs on the CPU (the prose docs quote): the
# fusible opcodes have one, except ``reduce`` (row/column/full-reduction kernels) and ``complex``
# (complex rules).
CPU_PLACEMENT: dict[str, str] = {op: p.how for op, p in CPU.items()
                                 if not (op in FUSIBLE or OPCODES[op].elementwise)
                                 or op in ("complex", "reduce")}


# ---- the CUDA runtime (runtime/cuda_executable.py: CudaExecutable) --------------------------------

CUDA_ON_HOST = Placement("host", "runs on the host through the reference evaluator (operands copied "
                                 "to the host and back: slow)", "_host_thunk")
_CUDA_VIEW = Placement("view", "no work (a view or a name)", "_view_thunk", otherwise=CUDA_ON_HOST)

CUDA: dict[str, Placement] = _table({
    "parameter": Placement("data", "program input"),
    "constant": Placement("data", "a literal copied to the device once", "_constant_thunk"),
    "tuple": _CUDA_VIEW, "get-tuple-element": _CUDA_VIEW, "reshape": _CUDA_VIEW, "bitcast": _CUDA_VIEW,
    "slice": Placement("view", "a copy of a device view (small slices the fusion pass left alone)",
                       "_view_thunk"),
    "fusion": Placement("kernel", "a PTX kernel (LLVM NVPTX)", "_kernel_thunk"),
    "dot": Placement("library", "cuBLAS through CuPy (float types; the host otherwise)",
                     "_library_thunk"),
}, fused=Placement("fused", "inside a fused kernel", otherwise=CUDA_ON_HOST), rest=CUDA_ON_HOST)


# ---- the AOT driver (codegen/aot_driver.py: _ProgramEmitter) ---------------------------------------

_AOT_KERNEL = Placement("kernel", "a kernel of the object file", "_kernel")
_AOT_VIEW = Placement("view", "no work: the operand's buffer", None, otherwise=_AOT_KERNEL)


def _aot_library(routine: str, handler: str) -> Placement:
    return Placement("library", f"aot_runtime.c: {routine}", handler)


def _aot_refused(why: str) -> Placement:
    return Placement("refused", why, "_refused")


AOT: dict[str, Placement] = _table({
    "parameter": Placement("data", "in[k]: the caller's array"),
    "constant": Placement("data", "a global of the object file"),
    "tuple": _AOT_VIEW, "get-tuple-element": _AOT_VIEW, "reshape": _AOT_VIEW, "bitcast": _AOT_VIEW,
    "fusion": _AOT_KERNEL, "scatter": _AOT_KERNEL, "reduce-window": _AOT_KERNEL,
    "dot": _aot_library("GEMM (packed panels, converted operands)", "_dot"),
    "convolution": _aot_library("im2col + GEMM (depthwise ones: a kernel of the object file)",
                                "_convolution_step"),
    "sort": _aot_library("merge sort with the compiled comparator", "_sort"),
    "topk": _aot_library("top-k selection", "_topk"),
    "select-and-scatter": _aot_library("select-and-scatter", "_select_and_scatter"),
    "fft": _aot_library("FFT", "_fft"),
    "custom-call": _aot_library("LAPACK's Cholesky, XLA's TopK (other targets refused)",
                                "_custom_call"),
    "while": Placement("control", "a C loop over the condition's and body's functions", "_while"),
    "conditional": Placement("control", "a C switch over the branches' functions", "_conditional"),
    "call": Placement("control", "a call of the callee's function", "_call_step"),
    # (the bits are a pure function of the state operand: the jit's own kernel, in the object)
    "rng-bit-generator": _AOT_KERNEL,
    "opt-barrier": _aot_refused("no object-file step for an optimization barrier yet"),
}, fused=Placement("fused", "inside a fused kernel", otherwise=_AOT_KERNEL),
    rest=_aot_refused("no native implementation"))

TABLES = {"cpu": CPU, "cuda": CUDA, "aot": AOT}
