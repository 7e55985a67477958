"""What a loop kernel that computes more than it moves is given: the widest SIMD vectors,
fused multiply-adds, and several vector iterations in flight.

Wide vectors.  LLVM tunes AVX-512 CPUs of the Skylake-server to Rocket Lake line to vectorize
with 256-bit registers ("prefer-256-bit"), for fear of the clock slow-down 512-bit
instructions used to cost.  For memory-bound kernels the width does not matter; for kernels
whose elements cost tens of flops (sin, exp, pow, an equation of state's polynomials) it is
twice the work per instruction: measured on this host's Rocket Lake (one thread, 100K
doubles) sin 226 -> 174 us, pow 495 -> 356 us, exp 106 -> 90 us, log 132 -> 112 us, where
torch's SLEEF kernels (512-bit) take 124, 488, 101 and 130 us.  The width never changes an
element's value (a loop kernel has no sums across elements).

Fused multiply-adds.  XLA:CPU lets LLVM fuse every multiply into the add that uses it ("Always
allow FMA fusion. This increases precision instead of decreasing it"): one rounding instead of
two.  Here the kernels are checked bit for bit against the evaluator (NumPy's separately
rounded operations), so only two kinds of loop kernel contract: those with an approximated
transcendental (their values differ from the evaluator's in the last bits anyway) and wide
formulas (``CONTRACT_WORK`` and up), where it halves the instruction count: an equation of
state's 493 vector adds and multiplies per 8 elements became 270 fused ones (532 -> 451 us).

Iterations in flight.  A kernel with an approximated transcendental is one long dependency
chain per element (a division, a reduction, a Horner polynomial, the next function...): the
great-circle distance's chain is ~250 cycles deep over ~400 instructions per vector of 8, so
the CPU's reorder window holds little more than one iteration and the kernel runs at the
chain's latency, not at its throughput.  Such loops ask LLVM's vectorizer to interleave
(``INTERLEAVE``) independent vector iterations, whose chains then overlap (interleaving is
off for the rest: memory-bound loops gain nothing from it, see ``cpu.optimize_module``).
Measured on this host (one thread, 100K-200K doubles): arc distance 1.10 -> 0.82 ms, Black-
Scholes 1.42 -> 1.04 ms; 2 in flight gave 0.87 and 1.21 ms.  Kernels without one stay at 1
(an equation of state's polynomial loop got 5% slower at 4: spills).
"""

from __future__ import annotations

import llvmlite.binding as llvm
from llvmlite import ir

from ..hlo.ir import Computation
from ..hlo.division import is_expensive
from ..hlo.opcodes import COSTLY_TO_RECOMPUTE, TRANSCENDENTAL
from .run_sizes import at_least

# Work per element (an add = 1, a divide 4, a transcendental 16: the runtime's measure of when
# a kernel is worth splitting across threads) from which a kernel asks for 512-bit vectors:
# one transcendental, or a formula of a dozen divides / a few dozen flops.
WIDE_VECTOR_WORK = 16
# ... and from which its multiplies and adds may fuse even without a transcendental.
CONTRACT_WORK = 64
_TRANSCENDENTAL_WORK, _EXPENSIVE_WORK = 16, 4

_HOST_HAS_AVX512 = bool(llvm.get_host_cpu_features().get("avx512f", False))
_WIDE = '"prefer-vector-width"="512"'


class _WideFunctionAttributes(ir.values.FunctionAttributes):
    """llvmlite's function attributes, plus the string attribute that sets the vector width
    (llvmlite only accepts the attributes it knows by name)."""
    _known = ir.values.FunctionAttributes._known | {_WIDE}


def element_work(comp: Computation) -> int:
    work = 0
    for i in comp.instructions:
        if i.opcode in TRANSCENDENTAL:
            work += _TRANSCENDENTAL_WORK
        elif is_expensive(i):
            work += _EXPENSIVE_WORK
        elif i.is_elementwise:
            work += 1
    return work


def prefer_wide_vectors(fn: ir.Function, comp: Computation, host_avx512: bool | None = None) -> bool:
    """Give ``fn`` (the kernel of ``comp``) 512-bit vectors where the host has them and the
    kernel's work per element is at least ``WIDE_VECTOR_WORK``; whether it did."""
    if not (_HOST_HAS_AVX512 if host_avx512 is None else host_avx512):
        return False
    if element_work(comp) < WIDE_VECTOR_WORK:
        return False
    attributes = _WideFunctionAttributes(fn.attributes)
    attributes.add(_WIDE)
    fn.attributes = attributes
    return True


def prefers_wide_vectors(fn: ir.Function) -> bool:
    """Was ``fn`` given 512-bit vectors (``prefer_wide_vectors``)?"""
    return _WIDE in fn.attributes


# Vector iterations in flight for a kernel with an approximated transcendental (see above) ...
INTERLEAVE = 4
# ... where its loop runs at least this many elements (a row of 30 would skip the interleaved
# vector loop entirely and run in the remainder loops).
INTERLEAVE_MIN_EXTENT = 256


def interleave_count(comp: Computation, extent: int | None = None) -> int:
    """Vector iterations of ``comp``'s element loop to keep in flight: ``INTERLEAVE`` for a
    kernel with an approximated transcendental (a long dependency chain per element) whose
    loop is ``extent`` (None: long, a flat loop split into chunks) elements long, else 1."""
    if extent is not None and not at_least(extent, INTERLEAVE_MIN_EXTENT):    # (a run-time extent: long)
        return 1
    if any(i.opcode in COSTLY_TO_RECOMPUTE for i in comp.instructions):
        return INTERLEAVE
    return 1


def contraction_flags(comp: Computation) -> tuple:
    """The fast-math flags for ``comp``'s f32/f64 adds, subtracts and multiplies in a loop
    kernel: ("contract",) for a kernel with an approximated transcendental or a wide formula
    (see above), else none."""
    if any(i.opcode in COSTLY_TO_RECOMPUTE for i in comp.instructions) or element_work(comp) >= CONTRACT_WORK:
        return ("contract",)
    return ()
