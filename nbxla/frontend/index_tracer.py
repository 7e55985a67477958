"""Loop indices as traced scalars: ``IndexTracer`` keeps NumPy's Python-int promotion (weak) and
an affine form with a known range, which lets slices at the index become dynamic slices of a
known length (``dynamic.py``) and loops stay loops (``loops.py``)."""

from __future__ import annotations

import numpy as np

from .tracer import ScalarTracer, Tracer


def affine_key(v):
    if isinstance(v, IndexTracer) and v.base is not None:
        return ("a", id(v.base), v.coef, v.offset)
    if isinstance(v, Tracer):
        return ("id", id(v))
    return ("c", int(v))


def value_range(v):
    """(lowest, highest) value of a Python int or traced scalar; None when unknown."""
    if isinstance(v, IndexTracer):
        return v.range
    if isinstance(v, Tracer):
        return None
    if v is None:
        return None
    return (int(v), int(v))


class IndexTracer(ScalarTracer):
    """A loop index (or an affine function of one): weak in promotion, with a known range."""
    __slots__ = ("base", "coef", "offset", "range")
    weak = True

    def __init__(self, ctx, instr, value_range=None, base=None, coef=1, offset=0):
        super().__init__(ctx, instr)
        self.base = self if base is None and coef == 1 and offset == 0 else base
        self.coef, self.offset, self.range = coef, offset, value_range

    def _affine(self, instr, coef, offset, rng):
        return IndexTracer(self.ctx, instr, rng, self.base, coef, offset)

    def _shift(self, k: int, instr):
        rng = None if self.range is None else (self.range[0] + k, self.range[1] + k)
        return self._affine(instr, self.coef, self.offset + k, rng)

    def __add__(self, other):
        if is_int(other):
            return self._shift(int(other), np.add(plain(self), int(other)).instr)
        return np.add(self, other)

    __radd__ = __add__

    def __sub__(self, other):
        if is_int(other):
            return self._shift(-int(other), np.subtract(plain(self), int(other)).instr)
        return np.subtract(self, other)

    def __rsub__(self, other):
        if is_int(other):
            rng = None if self.range is None else (int(other) - self.range[1], int(other) - self.range[0])
            instr = np.subtract(int(other), plain(self)).instr
            return self._affine(instr, -self.coef, int(other) - self.offset, rng)
        return np.subtract(other, self)

    def __mul__(self, other):
        if is_int(other):
            k = int(other)
            rng = None if self.range is None else tuple(sorted((self.range[0] * k, self.range[1] * k)))
            return self._affine(np.multiply(plain(self), k).instr, self.coef * k, self.offset * k, rng)
        return np.multiply(self, other)

    __rmul__ = __mul__

    def __neg__(self):
        return self.__rsub__(0)

    def __mod__(self, other):
        # (Python's ``i % m`` lies in [0, m) for a positive int m, whatever i is: ``x[i % 4]``
        # then needs no bounds check)
        if is_int(other) and int(other) > 0:
            m = int(other)
            rng = self.range if self.range is not None and 0 <= self.range[0] and self.range[1] < m else (0, m - 1)
            return IndexTracer(self.ctx, np.remainder(plain(self), m).instr, rng)
        return np.remainder(self, other)

    def __index__(self):
        raise self._concrete("the loop index was used as a Python int (range(i), a list index, "
                             "a shape)")


def is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def plain(t: Tracer) -> Tracer:
    return Tracer(t.ctx, t.instr)


def weak_result(values) -> bool:
    """Do NumPy's rules see only Python ints here (so the result is a Python int too)?"""
    return any(isinstance(v, IndexTracer) for v in values) and \
        all(isinstance(v, IndexTracer) or is_int(v) and not isinstance(v, np.generic) for v in values)


class WeakScalar(ScalarTracer):
    """A Python float (or complex) that a rolled loop carries and changes (``t += dt``): traced
    as a float64 (complex128) scalar, which computes as the Python number does, and weak in
    promotion as the Python number is (``x32 * t`` stays float32, NEP 50)."""
    __slots__ = ()
    weak = True


def python_numbers_only(values) -> bool:
    """Do NumPy's rules see only Python numbers here, one of them traced (a loop index or a
    ``WeakScalar``)?  The result is then a Python number too: weak."""
    return any(isinstance(v, Tracer) and v.weak for v in values) and \
        all(isinstance(v, Tracer) and v.weak or isinstance(v, (int, float, complex))
            and not isinstance(v, (bool, np.generic)) for v in values)


def _python_result(result, operands):
    """Python's operators on Python numbers give Python numbers (``t + dt``, ``i / 2``), where
    ``np.add`` gives a NumPy scalar: a float or complex result of an operator on traced Python
    numbers stays weak."""
    if isinstance(result, Tracer) and not result.weak and result.dtype.kind in "fc" \
            and python_numbers_only(operands):
        return WeakScalar(result.ctx, result.instr)
    return result


def _keep_python_numbers(cls) -> None:
    for name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow"):
        for method in (f"__{name}__", f"__r{name}__"):
            op = getattr(cls, method)
            setattr(cls, method, (lambda op: lambda self, other: _python_result(op(self, other), (self, other)))(op))
        setattr(cls, f"__i{name}__", getattr(cls, f"__{name}__"))    # (immutable, as a Python number)
    for method in ("__neg__", "__pos__", "__abs__"):
        op = getattr(cls, method)
        setattr(cls, method, (lambda op: lambda self: _python_result(op(self), (self,)))(op))


_keep_python_numbers(IndexTracer)
_keep_python_numbers(WeakScalar)


def weak_scalar(ctx, instr) -> Tracer:
    """A traced Python number: an ``IndexTracer`` for an int, a ``WeakScalar`` otherwise."""
    return IndexTracer(ctx, instr) if instr.shape.element_type.startswith(("s", "u")) else WeakScalar(ctx, instr)
