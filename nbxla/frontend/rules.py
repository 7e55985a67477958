"""Lowering helpers shared by every rule module, and ufunc dispatch.

Dtypes are NumPy's own: a ufunc's loop is chosen with ``ufunc.resolve_dtypes``, which
implements NEP 50 (Python scalars are weak), so results have exactly the dtype eager NumPy
gives.  Operands are then cast, broadcast, and lowered to HLO that computes NumPy's answer,
including where HLO's own op differs (floor division, modulo, fmax, ...): those rules, one
per ufunc, are in ``ufuncs.py``; the array functions' rules are in the modules named for what
they cover (``manipulation.py``, ``reductions.py``, ``indexing.py``, ...).
"""

from __future__ import annotations

import numbers
from typing import Callable

import numpy as np

from ..hlo import Shape, from_numpy_dtype, scalar_computation
from .context import TraceContext
from .index_tracer import IndexTracer, python_numbers_only, weak_result
from .registry import (ENTRY_POINTS, FUNCTIONS, NOT_COMPILABLE, UFUNC_METHODS, UFUNCS, entry_point,
                       ufunc_method)
from .tracer import WRITE_INTO_NUMPY, WRITE_INTO_NUMPY_HINT, Tracer, View

# ---- helpers shared by all rules -------------------------------------------------------------

def find_context(values) -> TraceContext:
    for v in values:
        if isinstance(v, Tracer):
            return v.ctx
        if isinstance(v, (list, tuple)):
            for w in v:
                if isinstance(w, Tracer):
                    return w.ctx
    ctx = TraceContext.active.get()
    if ctx is None:
        raise AssertionError("a lowering rule was called outside a trace")
    return ctx


def wrap(ctx: TraceContext, instr) -> Tracer:
    return Tracer(ctx, instr)


def asarray(ctx: TraceContext, value, dtype=None) -> Tracer:
    """A Tracer for a Tracer, NumPy array or Python value (the latter become constants)."""
    if isinstance(value, Tracer):
        return convert(value, dtype) if dtype is not None else value
    if isinstance(value, (list, tuple)) and any(isinstance(v, Tracer) for v in value):
        return asarray(ctx, FUNCTIONS[np.stack]([asarray(ctx, v) for v in value]), dtype)
    arr = np.asarray(value, dtype=dtype)
    return wrap(ctx, ctx.constant(arr))


def emit(ctx: TraceContext, opcode: str, *operands: Tracer, shape=None, **attrs) -> Tracer:
    return wrap(ctx, ctx.emit(opcode, *(o.instr for o in operands), shape=shape, **attrs))


@entry_point("convert")
def convert(x: Tracer, dtype) -> Tracer:
    dtype = np.dtype(dtype)
    if x.dtype == dtype:
        return x
    if x.dtype.kind == "c" and dtype == np.bool_:     # NumPy: nonzero real or imaginary part
        zero = like(emit(x.ctx, "real", x), 0)
        return binop("or", compare(emit(x.ctx, "real", x), zero, "NE"),
                     compare(emit(x.ctx, "imag", x), zero, "NE"))
    if x.dtype.kind == "c" and dtype.kind != "c":
        x = emit(x.ctx, "real", x)      # NumPy drops the imaginary part (with a warning)
        if x.dtype == dtype:
            return x
    if x.dtype.kind == "f" and dtype.kind in "iu":      # NumPy's C cast out of range, not HLO's
        return ENTRY_POINTS["float_to_int"](x, dtype)     # (float_to_int.py, above this module)
    return emit(x.ctx, "convert", x, shape=Shape(from_numpy_dtype(dtype), x.shape))


@entry_point("broadcast_to")
def broadcast_to(x: Tracer, shape) -> Tracer:
    shape = tuple(shape)
    if x.shape == shape:
        return x
    try:
        np.broadcast_shapes(x.shape, shape)
        if len(x.shape) > len(shape):
            raise ValueError
    except ValueError:
        raise ValueError(f"operands could not be broadcast together: {x.shape} -> {shape}") from None
    offset = len(shape) - len(x.shape)
    keep = [i for i, n in enumerate(x.shape) if n == shape[i + offset]]
    if len(keep) != len(x.shape):                 # drop size-1 dims that get stretched
        x = reshape(x, [x.shape[i] for i in keep])
    return emit(x.ctx, "broadcast", x, shape=Shape(from_numpy_dtype(x.dtype), shape),
                dimensions=tuple(i + offset for i in keep))


def reshape(x: Tracer, shape) -> Tracer:
    shape = tuple(int(s) for s in shape)
    if x.shape == shape:
        return x
    return emit(x.ctx, "reshape", x, shape=Shape(from_numpy_dtype(x.dtype), shape))


def full(ctx: TraceContext, shape, value, dtype) -> Tracer:
    c = asarray(ctx, np.asarray(value, dtype=dtype))
    return broadcast_to(c, shape)


def scalar(ctx: TraceContext, value, dtype) -> Tracer:
    return asarray(ctx, np.asarray(value, dtype=dtype))


def like(x: Tracer, value) -> Tracer:
    """A constant broadcast to ``x``'s shape and dtype."""
    return full(x.ctx, x.shape, value, x.dtype)


def binop(opcode: str, a: Tracer, b: Tracer, **attrs) -> Tracer:
    return emit(a.ctx, opcode, a, b, **attrs)


def compare(a: Tracer, b: Tracer, direction: str) -> Tracer:
    return emit(a.ctx, "compare", a, b, direction=direction)


def select(p: Tracer, a: Tracer, b: Tracer) -> Tracer:
    return emit(a.ctx, "select", p, a, b)


def isnan(x):
    if x.dtype.kind not in "fc":
        return like_bool(x, False)
    if x.dtype.kind == "c":
        return binop("or", isnan(emit(x.ctx, "real", x)), isnan(emit(x.ctx, "imag", x)))
    return compare(x, x, "NE")


def like_bool(x, value):
    return full(x.ctx, x.shape, value, bool)


def reducer(opcode: str, dtype) -> object:
    return scalar_computation(opcode, from_numpy_dtype(dtype))


def make_view(base: Tracer, forward: Callable, backward: Callable | None, strides,
              key: tuple | None = None) -> Tracer:
    """A Tracer that reads ``forward(base)`` and writes back through ``backward``; ``key``:
    the basic NumPy index that makes the same view (see ``View.key``)."""
    value = forward(base)
    return Tracer(base.ctx, value.instr, View(base, forward, backward, tuple(strides), key))


# ---- ufunc dispatch --------------------------------------------------------------------------

def resolve_input(value):
    """The dtype NumPy's type resolution sees: Python scalars stay weak (NEP 50)."""
    if isinstance(value, Tracer):
        if value.weak:          # a rolled loop's index or carried Python float: Python's type
            return {"f": float, "c": complex}.get(value.dtype.kind, int)
        return value.dtype
    if isinstance(value, bool):
        return np.dtype(bool)
    if isinstance(value, numbers.Integral) and not isinstance(value, np.generic):
        return int
    if isinstance(value, numbers.Real) and not isinstance(value, np.generic):
        return float
    if isinstance(value, numbers.Complex) and not isinstance(value, np.generic):
        return complex
    return np.asarray(value).dtype


_PYTHON_SCALAR_DTYPES = {int: np.dtype(np.int64), float: np.dtype(np.float64), complex: np.dtype(np.complex128)}


@entry_point("apply_ufunc")
def apply_ufunc(ufunc: np.ufunc, method: str, inputs, kwargs):
    ctx = find_context(list(inputs) + list(kwargs.get("out") or ()))
    if method == "__call__":
        return _call_ufunc(ctx, ufunc, inputs, kwargs)
    handler = UFUNC_METHODS.get(method)
    if handler is None:
        raise ctx.not_compilable(f"np.{ufunc.__name__}.{method} is not supported by nbxla")
    return handler(ctx, ufunc, *inputs, **kwargs)


def _call_ufunc(ctx, ufunc, inputs, kwargs):
    out = kwargs.pop("out", None)
    where = kwargs.pop("where", True)
    dtype = kwargs.pop("dtype", None)
    casting = kwargs.pop("casting", "same_kind")
    if kwargs:
        raise ctx.not_compilable(f"np.{ufunc.__name__}: argument(s) {', '.join(kwargs)} are not supported")
    if ufunc is np.matmul:
        result = ENTRY_POINTS["matmul"](*inputs)
        return _store(ctx, ufunc, (result,), out, where) if out is not None else result
    rule = UFUNCS.get(ufunc)
    if rule is None:
        raise ctx.not_compilable(f"np.{ufunc.__name__} is not supported by nbxla",
                                 "see the supported-API table in docs/supported_numpy.md")
    # Raises NumPy's own TypeError where NumPy has no loop (e.g. bool subtraction).
    in_dtypes = tuple(resolve_input(v) for v in inputs) + (None,) * ufunc.nout
    python_only = python_numbers_only(inputs)
    if python_only:                # only Python numbers: NumPy's answer for 64-bit scalars
        in_dtypes = tuple(_PYTHON_SCALAR_DTYPES.get(d, d) for d in in_dtypes)
    if dtype is None:
        dtypes = ufunc.resolve_dtypes(in_dtypes)
    else:
        dtypes = ufunc.resolve_dtypes(in_dtypes, signature=(None,) * ufunc.nin + (np.dtype(dtype),) * ufunc.nout)
    if ufunc in _REAL_ONLY and any(np.dtype(dt).kind == "c" for dt in dtypes[:ufunc.nin]):
        raise ctx.not_compilable(f"np.{ufunc.__name__} of complex arrays is not supported by nbxla",
                                 "compute it outside the compiled code")
    if out is not None:
        _check_output_casting(ufunc, dtypes, out, casting)
    shape = np.broadcast_shapes(*(np.shape(v) if not isinstance(v, Tracer) else v.shape for v in inputs))
    if ufunc in _COMPARISONS:
        folded = _out_of_range_comparison(ctx, ufunc, inputs, shape)
        if folded is not None:
            return _store(ctx, ufunc, (folded,), out, where) if out is not None or where is not True \
                else folded
    operands = [broadcast_to(asarray(ctx, v, dt) if not isinstance(v, Tracer) else convert(v, dt), shape)
                for v, dt in zip(inputs, dtypes[:ufunc.nin])]
    results = rule(ctx, *operands)
    results = results if isinstance(results, tuple) else (results,)
    results = tuple(convert(r, dt) for r, dt in zip(results, dtypes[ufunc.nin:]))
    if weak_result(inputs):                     # (index arithmetic stays a Python int)
        results = tuple(IndexTracer(ctx, r.instr) if r.dtype.kind in "iu" else r for r in results)
    if out is not None or where is not True:
        return _store(ctx, ufunc, results, out, where)
    return results if ufunc.nout > 1 else results[0]


def _check_output_casting(ufunc, dtypes, out, casting) -> None:
    """NumPy's own error when a result cannot be cast into ``out=`` under ``casting``
    (np.add(int_a, 0.5, out=int_a) raises, it does not truncate): the same call on empty
    arrays of the same dtypes makes NumPy raise it."""
    outs = out if isinstance(out, tuple) else (out,)
    out_dtypes = [o.dtype if o is not None else dt for o, dt in zip(outs, dtypes[ufunc.nin:])]
    if all(np.can_cast(dt, o, casting=casting) for dt, o in zip(dtypes[ufunc.nin:], out_dtypes)):
        return
    ufunc(*(np.empty(0, dt) for dt in dtypes[:ufunc.nin]),
          out=tuple(np.empty(0, dt) for dt in out_dtypes), casting=casting)


# Ufuncs lowered with real-only formulas or orderings (NumPy orders complex numbers by real,
# then imaginary part; HLO compares them only for equality): complex inputs are refused.
_REAL_ONLY = frozenset([np.arccos, np.arccosh, np.arcsin, np.arcsinh, np.arctan, np.cosh, np.sinh,
                        np.log10, np.log2, np.rint, np.maximum, np.minimum, np.fmax, np.fmin,
                        np.greater, np.greater_equal, np.less, np.less_equal])
_COMPARISONS = (np.equal, np.not_equal, np.less, np.less_equal, np.greater, np.greater_equal)


def _out_of_range_comparison(ctx, ufunc, inputs, shape):
    """NumPy 2 compares integer arrays with Python ints outside their dtype's range
    (``u8 == 300`` is all False, ``u8 < 300`` all True) without converting the int: every
    element then compares the same way, so the answer is one constant NumPy gives us."""
    if len(inputs) != 2 or not any(_is_out_of_range(v, w) for v, w in (inputs, inputs[::-1])):
        return None
    probe = [np.zeros((), v.dtype) if isinstance(v, Tracer) else v for v in inputs]
    return full(ctx, shape, ufunc(*probe), bool)


def _is_out_of_range(value, other) -> bool:
    if not (isinstance(value, int) and not isinstance(value, bool) and isinstance(other, Tracer)
            and other.dtype.kind in "iu"):
        return False
    info = np.iinfo(other.dtype)
    return not info.min <= value <= info.max


def _store(ctx, ufunc, results, out, where):
    """``out=`` and ``where=``: write results into the given Tracers (in place)."""
    outs = out if isinstance(out, tuple) else (out,)
    stored = []
    for r, o in zip(results, outs):
        if o is None:
            if where is not True:
                raise ctx.not_compilable("where= without out= leaves elements uninitialised",
                                         "pass out= as well, or use np.where")
            stored.append(r)
            continue
        if not isinstance(o, Tracer):     # ``a += traced`` on a NumPy array, or out=a
            raise ctx.not_compilable(
                f"{WRITE_INTO_NUMPY} (out= of np.{ufunc.__name__}, or an in-place operator)",
                WRITE_INTO_NUMPY_HINT)
        if where is not True:
            mask = broadcast_to(asarray(ctx, where, bool), o.shape)
            r = select(mask, convert(broadcast_to(r, o.shape), o.dtype), o)
        o.assign(r)
        stored.append(o)
    return tuple(stored) if len(stored) > 1 else stored[0]


@ufunc_method("outer")
def _ufunc_outer(ctx, ufunc, a, b, **kwargs):
    a, b = asarray(ctx, a), asarray(ctx, b)
    a2 = reshape(a, a.shape + (1,) * b.ndim)
    return ufunc(a2, b, **kwargs)


@entry_point("apply_function")
def apply_function(func, args, kwargs):
    rule = FUNCTIONS.get(func)
    ctx = find_context(list(args) + list(kwargs.values()))
    if rule is None:
        name = getattr(func, "__name__", str(func))
        reason = NOT_COMPILABLE.get(name)
        module = getattr(func, "__module__", None) or "numpy"
        if module.startswith("numpy."):          # np.linalg.inv, np.fft.fft
            name = module.split(".", 1)[1].replace("_core.", "") + "." + name
        if reason:
            raise ctx.not_compilable(f"np.{name} cannot be compiled: {reason}",
                                     "compute it outside the compiled cell, or use a fixed-shape "
                                     "formulation (e.g. np.where with a mask)")
        raise ctx.not_compilable(f"np.{name} is not supported by nbxla",
                                 "see the supported-API table in docs/supported_numpy.md")
    return rule(*args, **kwargs)
