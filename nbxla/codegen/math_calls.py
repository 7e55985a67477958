"""Transcendentals as functions of the LLVM module that the kernels call: one body each.

Why: ``transcendentals.py``'s functions are straight-line IR of 40-150 instructions, and
emitted inline they were copied wherever LLVM copies a loop body: the loop vectorizer's vector
body once per interleaved iteration (four for kernels with a transcendental,
``compute_bound.INTERLEAVE``), its vector epilogue and its scalar remainder; a trig kernel
versioned by ``trig_guard.py`` has a bounded and a full loop on top.  LLVM optimized and emitted
every copy: the great-circle distance (four trig calls and an atan2 per element) spent ~0.25 s
of its 0.30 s first call in LLVM on them.

How: a kernel's scalar code calls ``nbxla_math_<name>_<f32|f64>`` (declared: no memory access,
no unwinding), and the call names the function's vector variants by LLVM's vector-function ABI
(``"vector-function-abi-variant"="_ZGV_LLVM_N<VF>v_<scalar>(<scalar>_v<VF>_r<bits>)"``), so
the loop vectorizer calls a variant on whole vectors.  In loops that keep several vector
iterations in flight (``compute_bound.interleave_count``) the variant takes all of them: the
loop is vectorized that many times as wide instead of interleaved (``widened_loop``), so one
call computes four registers' worth side by side, as the interleaved inlined code did; elsewhere
the variants are one register wide.  The variants are declarations, kept alive by
``@llvm.compiler.used`` until the vectorizer has chosen; after the module's optimization
pipeline ``called_bodies`` emits the functions actually called -- the same ``transcendentals``
code on the scalar or vector type, so the values are bit for bit the inlined ones, with vector
constants loaded from one table (``vecmath.constants_from_memory``) -- in a module of their own,
which the caller optimizes lightly (SROA, instcombine, simplifycfg: the code is straight-line
and emitted tight; O3 took ~50 ms on the great-circle distance's eight bodies, these 6 ms) and
``link_bodies`` links in (internal).  A module thus holds one body per function, type and width
it calls, however many kernels and loop versions call it.

Inline still: kernels with few uses (``MIN_CALLED_USES``), sin/cos/tan sharing an operand
(``ElementalEmitter._trig``), constant arguments, ``half`` (computed in float by the inlined
code; ``<N x half>`` arguments have no settled calling convention), values that are vectors
already, and modules for other targets (the GPU backend's, whose device code has no calls).
"""

from __future__ import annotations

import contextvars
import re
from contextlib import contextmanager

import llvmlite.binding as llvm
from llvmlite import ir

from . import transcendentals as T
from .compute_bound import prefers_wide_vectors
from .vecmath import constants_from_memory

PREFIX = "nbxla_math_"

# name -> (arguments, emitter on a builder and scalar-or-vector values)
_EMITTERS = {
    "exp": (1, T.emit_exp), "expm1": (1, T.emit_expm1), "log": (1, T.emit_log),
    "log1p": (1, T.emit_log1p), "tanh": (1, T.emit_tanh), "logistic": (1, T.emit_logistic),
    "erf": (1, T.emit_erf), "pow": (2, T.emit_pow), "atan2": (2, T.emit_atan2),
    "sin": (1, T.emit_sin), "cos": (1, T.emit_cos), "tan": (1, T.emit_tan),
    # below trig_guard's limit only (the caller checked): Cody-Waite instead of Payne-Hanek
    "sin_bounded": (1, lambda b, x: T.emit_sin(b, x, bounded=True)),
    "cos_bounded": (1, lambda b, x: T.emit_cos(b, x, bounded=True)),
    "tan_bounded": (1, lambda b, x: T.emit_tan(b, x, bounded=True)),
}
_BITS = {"float": 32, "double": 64}

# A kernel calls the functions where its computation has at least this many uses of them (each
# sin/cos/tan counted twice: trig_guard gives it two loops, and its full form is the largest);
# below, it inlines them.  Why: a call keeps some cost in the vectorized loop (measured, one
# thread, 200K doubles: tanh 1.09x, expm1 + log1p 1.13x, exp 1.04x the inlined loop's time)
# for little compile time saved with one or two uses (tanh's first call 62 -> 61 ms), while
# a great-circle distance's nine saved 0.15 s of its 0.3 s at no cost in speed (0.96x).
MIN_CALLED_USES = 3
_USES = {"exponential": 1, "exponential-minus-one": 1, "log": 1, "log-plus-one": 1, "tanh": 1,
         "logistic": 1, "erf": 1, "power": 1, "atan2": 1, "sine": 2, "cosine": 2, "tan": 2}


def calls_pay(comp) -> bool:
    """Does the computation ``comp`` (a kernel's) use its transcendentals often enough to call
    them (``MIN_CALLED_USES``)?"""
    return sum(_USES.get(i.opcode, 0) for i in comp.instructions) >= MIN_CALLED_USES
_NAME = re.compile(rf"^{PREFIX}(\w+?)_f(32|64)(?:_v(\d+)_r(\d+))?$")
_CALLED = re.compile(rf"call [^\n]*?@({PREFIX}\w+)\(")


class _Attributes(ir.values.FunctionAttributes):
    """llvmlite's function attributes, plus those it does not know by name (``memory(none)``,
    ``willreturn``, quoted ``"key"="value"`` strings)."""

    def add(self, name):
        if name.startswith('"') or name in ("memory(none)", "willreturn"):
            return set.add(self, name)
        return super().add(name)


class _CallAttributes(ir.instructions.CallInstrAttributes):
    def add(self, name):
        if name.startswith('"'):
            return set.add(self, name)
        return super().add(name)


def outlines(module: ir.Module) -> bool:
    """Are ``module``'s transcendentals called rather than inlined: a module for the host
    (whose optimization links their bodies in: ``cpu.optimize_module``)."""
    return module.triple == llvm.get_process_triple()


# The calls made in the body of the innermost loop being emitted whose vector width they set
# (``widened_loop``), or None.
_loop_calls = contextvars.ContextVar("math_loop_calls", default=None)


def call(b: ir.IRBuilder, name: str, args: list, inline: bool = False) -> ir.Value:
    """``name`` (a key of ``_EMITTERS``) of ``args``: a call of the module's function, or the
    function's code inline (``inline``, or where it is not called: see the module docstring;
    and where an argument is a constant, which LLVM folds into the inlined code: ``x ** 3``'s
    pow was 1.3x slower called)."""
    arity, emit = _EMITTERS[name]
    ty = args[0].type
    bits = _BITS.get(str(ty))
    if inline or bits is None or not outlines(b.module) or any(isinstance(a, ir.Constant) for a in args):
        return emit(b, *args)
    width = 512 if prefers_wide_vectors(b.function) else 256
    scalar = f"{PREFIX}{name}_f{bits}"
    instr = b.call(_declare(b.module, scalar, ty, arity, width), args)
    pending = _loop_calls.get()
    if pending is not None:
        pending.append((instr, scalar, ty, arity, bits, width))
    else:
        _offer(b.module, instr, scalar, ty, arity, sorted({width // bits, width // 64}), width)
    return instr


@contextmanager
def widened_loop(in_flight: int):
    """Around the emission of a loop's body whose vectorized form should keep ``in_flight``
    vectors of each value in flight (``compute_bound.interleave_count``): yields a function
    that, after the body, gives the vector width the loop is to be vectorized at -- its math
    functions' vectors times ``in_flight`` (one call on four registers, as wide as the
    interleaved iterations, rather than four calls on one: a function's chain of dependent
    instructions then has three others beside it, as inlined interleaved code had; four
    separate calls ran exp 1.4x and tanh 1.25x slower) -- or None when the body calls none
    (and the loop keeps its interleave count)."""
    calls: list = []
    token = _loop_calls.set(calls)
    try:
        yield lambda: _widen(calls, in_flight)
    finally:
        _loop_calls.reset(token)


def _widen(calls: list, in_flight: int) -> int | None:
    if not calls:
        return None
    width = calls[0][5]
    vf = in_flight * width // max(bits for *_, bits, _ in calls)
    for instr, scalar, ty, arity, _, _ in calls:
        _offer(instr.parent.parent.module, instr, scalar, ty, arity, [vf], width)
    return vf


def _offer(module, instr, scalar: str, ty, arity: int, vfs: list[int], width: int) -> None:
    """Name the vector variants of ``scalar`` at widths ``vfs`` on the call ``instr``."""
    variants = []
    for vf in vfs:
        vector = _variant(scalar, vf, width)
        _keep(module, _declare(module, vector, ir.VectorType(ty, vf), arity, width))
        variants.append(f"_ZGV_LLVM_N{vf}{'v' * arity}_{scalar}({vector})")
    instr.attributes = _CallAttributes([f'"vector-function-abi-variant"="{",".join(variants)}"'])


def _variant(scalar: str, vf: int, width: int) -> str:
    """The name of ``scalar``'s variant on ``vf`` lanes in registers of ``width`` bits (the
    calling convention of a vector wider than 256 bits depends on the registers)."""
    return f"{scalar}_v{vf}_r{width}"


def _declare(module: ir.Module, name: str, ty: ir.Type, arity: int, width: int) -> ir.Function:
    fn = module.globals.get(name)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ty, [ty] * arity), name)
        fn.attributes = _Attributes(["nounwind", "willreturn", "memory(none)"] + _width_attributes(ty, width))
    return fn


def _width_attributes(ty: ir.Type, width: int) -> list[str]:
    """A vector function's registers, which decide how its vectors are passed: 512 bits where
    its callers prefer them (kernels given ``compute_bound.prefer_wide_vectors``), else the
    target's default, as for those callers."""
    if not isinstance(ty, ir.VectorType) or width != 512:
        return []
    return ['"min-legal-vector-width"="512"', '"prefer-vector-width"="512"']


def _keep(module: ir.Module, fn: ir.Function) -> None:
    """List ``fn`` in ``@llvm.compiler.used``: a declaration only named by a call's attribute
    is otherwise deleted before the loop vectorizer looks for it."""
    used = module.globals.get("llvm.compiler.used")
    ptr = ir.PointerType()
    if used is None:
        used = ir.GlobalVariable(module, ir.ArrayType(ptr, 0), "llvm.compiler.used")
        used.linkage = "appending"
        used.section = "llvm.metadata"
        used.initializer = ir.Constant(used.value_type, [])
    kept = list(used.initializer.constant)
    if any(k is fn for k in kept):
        return
    kept.append(fn)
    used.value_type = ir.ArrayType(ptr, len(kept))
    used.initializer = ir.Constant(used.value_type, kept)


def called_bodies(mod, optimized_text: str | None = None):
    """The bodies of the ``nbxla_math_`` functions that the optimized module ``mod`` calls, as
    a parsed (unoptimized) module for the same target, or None when it calls none."""
    if not any(f.is_declaration and f.name.startswith(PREFIX) for f in mod.functions):
        return None
    called = sorted(set(_CALLED.findall(optimized_text if optimized_text is not None else str(mod))))
    if not called:
        return None
    module = ir.Module(name="nbxla_math")
    module.triple = mod.triple
    module.data_layout = mod.data_layout
    with constants_from_memory(module):
        for name in called:
            _define(module, name)
    parsed = llvm.parse_assembly(str(module))
    parsed.verify()
    return parsed


def _define(module: ir.Module, name: str) -> None:
    match = _NAME.match(name)
    if match is None or match.group(1) not in _EMITTERS:
        raise ValueError(f"math_calls: {name!r} names no outlined transcendental")
    arity, emit = _EMITTERS[match.group(1)]
    ty = ir.FloatType() if match.group(2) == "32" else ir.DoubleType()
    if match.group(3):
        ty = ir.VectorType(ty, int(match.group(3)))
    fn = ir.Function(module, ir.FunctionType(ty, [ty] * arity), name)
    fn.attributes = _Attributes(["nounwind"] + _width_attributes(ty, int(match.group(4) or 0)))
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    if match.group(1) in ("sin", "cos", "tan") and not match.group(3):
        # (scalar full forms: trig_guard's cold loop calls several; one shares the reduction)
        parts = b.call(_trig_parts(module, ty), [fn.args[0]])
        q, s, c = (b.extract_value(parts, k) for k in range(3))
        b.ret(T.emit_trig_from_parts(b, match.group(1), fn.args[0], q, s, c))
        return
    b.ret(emit(b, *fn.args))


def _trig_parts(module: ir.Module, ty: ir.Type) -> ir.Function:
    """The module's function of sin/cos/tan's shared full-form work (``emit_trig_parts``):
    Payne-Hanek's reduction and both polynomials, once for the scalar sin, cos and tan."""
    name = f"{PREFIX}trig_parts_f{_BITS[str(ty)]}"
    fn = module.globals.get(name)
    if fn is None:
        parts_ty = ir.LiteralStructType([ir.IntType(64), ir.DoubleType(), ir.DoubleType()])
        fn = ir.Function(module, ir.FunctionType(parts_ty, [ty]), name)
        fn.attributes = _Attributes(["nounwind"])
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        value = ir.Constant(parts_ty, None)
        for k, v in enumerate(T.emit_trig_parts(b, fn.args[0])):
            value = b.insert_value(value, v, k)
        b.ret(value)
    return fn


def link_bodies(mod, bodies) -> None:
    """Link the optimized ``bodies`` (``called_bodies``) into ``mod``, internal to it."""
    names = [f.name for f in bodies.functions if not f.is_declaration]
    mod.link_in(bodies)
    for name in names:
        mod.get_function(name).linkage = "internal"
