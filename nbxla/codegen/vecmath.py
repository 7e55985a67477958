"""The shared steps of the vectorizable transcendentals (``transcendentals.py``): ``VecMath``, a
float/int instruction helper for one float type (scalar or vector) on one builder, the LLVM
intrinsics it calls, and the dispatch that computes ``half`` in ``float`` and rounds once."""

from __future__ import annotations

import contextvars
from contextlib import contextmanager

from llvmlite import ir

_F32, _F64, _F16 = ir.FloatType(), ir.DoubleType(), ir.HalfType()


def intrinsic(module: ir.Module, name: str, ty: ir.Type, nargs: int) -> ir.Function:
    if isinstance(ty, ir.VectorType):
        suffix = f"v{ty.count}{_scalar_suffix(ty.element)}"
    else:
        suffix = _scalar_suffix(ty)
    full = f"{name}.{suffix}"
    fn = module.globals.get(full)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ty, [ty] * nargs), full)
    return fn


def _scalar_suffix(ty: ir.Type) -> str:
    return {"half": "f16", "float": "f32", "double": "f64"}[str(ty)]


class VecMath:
    """Float/int helpers for one float type (scalar or vector) on one builder."""

    def __init__(self, b: ir.IRBuilder, ty: ir.Type):
        self.b = b
        self.ty = ty
        self.lanes = ty.count if isinstance(ty, ir.VectorType) else None
        st = ty.element if self.lanes else ty
        self.width = {"float": 32, "double": 64}[str(st)]
        self.mant = 23 if self.width == 32 else 52
        self.bias = 127 if self.width == 32 else 1023
        ity = ir.IntType(self.width)
        self.ity = ir.VectorType(ity, self.lanes) if self.lanes else ity
        self.module = b.module

    # constants
    def c(self, v: float) -> ir.Value:
        if self.lanes:
            pool = _pool.get()
            if pool is not None and v != 0.0:
                return pool.splat(self.b, self.ty, v)
            return ir.Constant(self.ty, [ir.Constant(self.ty.element, v)] * self.lanes)
        return ir.Constant(self.ty, v)

    def ci(self, v: int) -> ir.Constant:
        if self.lanes:
            el = self.ity.element
            return ir.Constant(self.ity, [ir.Constant(el, v)] * self.lanes)
        return ir.Constant(self.ity, v)

    # arithmetic
    def add(self, a, c): return self.b.fadd(a, c)
    def sub(self, a, c): return self.b.fsub(a, c)
    def mul(self, a, c): return self.b.fmul(a, c)
    def div(self, a, c): return self.b.fdiv(a, c)
    def neg(self, a): return self.b.fneg(a)

    def muladd(self, a, c, d):
        """a*c + d, fused where the target has FMA (rounding either way is accounted for)."""
        return self.b.call(intrinsic(self.module, "llvm.fmuladd", self.ty, 3), [a, c, d])

    def fma(self, a, c, d):
        """a*c + d with one rounding (exact-product tricks)."""
        return self.b.call(intrinsic(self.module, "llvm.fma", self.ty, 3), [a, c, d])

    def call1(self, name, a):
        return self.b.call(intrinsic(self.module, name, self.ty, 1), [a])

    def abs(self, a): return self.call1("llvm.fabs", a)
    def rint(self, a): return self.call1("llvm.rint", a)
    def trunc(self, a): return self.call1("llvm.trunc", a)

    def copysign(self, mag, sgn):
        return self.b.call(intrinsic(self.module, "llvm.copysign", self.ty, 2), [mag, sgn])

    def poly(self, x, coeffs):
        """coeffs[0] + x*coeffs[1] + ... by Horner's rule."""
        acc = self.c(coeffs[-1])
        for k in reversed(coeffs[:-1]):
            acc = self.muladd(acc, x, self.c(k))
        return acc

    def poly_v(self, x, coeffs):
        """Horner with coefficient values (already ir.Values)."""
        acc = coeffs[-1]
        for k in reversed(coeffs[:-1]):
            acc = self.muladd(acc, x, k)
        return acc

    # comparisons / selection
    def lt(self, a, c): return self.b.fcmp_ordered("<", a, c)
    def le(self, a, c): return self.b.fcmp_ordered("<=", a, c)
    def gt(self, a, c): return self.b.fcmp_ordered(">", a, c)
    def ge(self, a, c): return self.b.fcmp_ordered(">=", a, c)
    def eq(self, a, c): return self.b.fcmp_ordered("==", a, c)
    def ne_u(self, a, c): return self.b.fcmp_unordered("!=", a, c)
    def isnan(self, a): return self.b.fcmp_unordered("uno", a, a)
    def sel(self, cond, a, c): return self.b.select(cond, a, c)

    def min_c(self, a, hi):
        """min(a, hi) keeping NaN."""
        return self.sel(self.gt(a, self.c(hi)), self.c(hi), a)

    def max_c(self, a, lo):
        return self.sel(self.lt(a, self.c(lo)), self.c(lo), a)

    # bits
    def bits(self, a): return self.b.bitcast(a, self.ity)
    def from_bits(self, i): return self.b.bitcast(i, self.ty)

    def pow2(self, n):
        """2**n as a float for an integer n in the normal exponent range."""
        e = self.b.add(n, self.ci(self.bias))
        return self.from_bits(self.b.shl(e, self.ci(self.mant)))

    def int_to_float(self, n):
        return self.b.sitofp(n, self.ty)


def _with_type(ty, lanes, width):
    st = _F32 if width == 32 else _F64
    return ir.VectorType(st, lanes) if lanes else st


def widen(b: ir.IRBuilder, x: ir.Value, width: int) -> ir.Value:
    ty = x.type
    lanes = ty.count if isinstance(ty, ir.VectorType) else None
    return b.fpext(x, _with_type(ty, lanes, width))


def scalar_type(ty):
    return ty.element if isinstance(ty, ir.VectorType) else ty


def _via(b: ir.IRBuilder, x: ir.Value, compute, width: int) -> ir.Value:
    """Compute in float type ``width`` (32 or 64) and round back to x's type."""
    ty = x.type
    wide = widen(b, x, width)
    r = compute(VecMath(b, wide.type), wide)
    return b.fptrunc(r, ty)


def dispatch(b, x, f32_impl, f64_impl):
    st = str(scalar_type(x.type))
    if st == "half":
        return _via(b, x, f32_impl, 32)
    if st == "float":
        return f32_impl(VecMath(b, x.type), x)
    if st == "double":
        return f64_impl(VecMath(b, x.type), x)
    raise TypeError(f"no transcendental for {x.type}")


# ---- float constants of vector functions, from one table -----------------------------------------

_pool = contextvars.ContextVar("vecmath_constant_pool", default=None)


@contextmanager
def constants_from_memory(module: ir.Module):
    """Inside: vector float constants (but zeros) are loads from one table of ``module`` and
    splats.  For functions called in a loop (``math_calls``): constants cannot be hoisted out
    of a function, and LLVM's JIT code model gives each constant-pool operand its own 64-bit
    address (a ``movabs`` and a load each: twenty more instructions a call of tanh); from one
    table the address is formed once and each constant is a broadcast from an offset of it."""
    token = _pool.set(_ConstantPool(module))
    try:
        yield
    finally:
        _pool.reset(token)


class _ConstantPool:
    def __init__(self, module: ir.Module):
        self.module = module
        self.tables: dict[str, tuple[ir.GlobalVariable, list]] = {}
        self.splats: dict[tuple, ir.Value] = {}

    def splat(self, b: ir.IRBuilder, ty: ir.VectorType, v: float) -> ir.Value:
        key = (b.function.name, str(ty), v)
        if key not in self.splats:
            el = ty.element
            table, values = self._table(el)
            if v not in values:
                values.append(v)
                table.value_type = ir.ArrayType(el, len(values))
                table.initializer = ir.Constant(table.value_type, values)
            base_key = (b.function.name, str(el))
            if base_key not in self.splats:       # (the address, loaded once: see _table)
                self.splats[base_key] = b.load(self.tables[f"nbxla_math_constants_{el}"][2])
            scalar = b.load(b.gep(self.splats[base_key], [ir.Constant(ir.IntType(64), values.index(v))],
                                  inbounds=True))
            one = b.insert_element(ir.Constant(ty, None), scalar, ir.Constant(ir.IntType(32), 0))
            self.splats[key] = b.shuffle_vector(one, ir.Constant(ty, None),
                                                 ir.Constant(ir.VectorType(ir.IntType(32), ty.count), None))
        return self.splats[key]

    def _table(self, el: ir.Type):
        """The table of ``el`` constants, and a variable holding its address: a function loads
        the address from it, which LLVM cannot fold into each constant's operand (from the
        table itself it formed ``table+8``, ``table+16``... each with its own ``movabs``)."""
        name = f"nbxla_math_constants_{el}"
        if name not in self.tables:
            table = ir.GlobalVariable(self.module, ir.ArrayType(el, 0), name)
            table.linkage = "internal"            # (written by nothing, but not marked constant:
            table.align = 64                      # LLVM would fold the loads back into operands)
            address = ir.GlobalVariable(self.module, el.as_pointer(), name + "_address")
            address.linkage = "internal"
            address.initializer = table.bitcast(el.as_pointer())
            self.tables[name] = (table, [], address)
        return self.tables[name][:2]
