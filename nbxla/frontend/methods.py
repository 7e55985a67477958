"""Array methods and attributes of ``Tracer``, each spelled as the NumPy function it is."""

from __future__ import annotations

import numpy as np

from . import functions as F
from .index_tracer import weak_scalar
from .registry import METHODS
from .rules import emit
from .tracer import Tracer


def _shape_args(args):
    return args[0] if len(args) == 1 and isinstance(args[0], (tuple, list)) else args


def _reshape(self, *shape, order="C", copy=None):
    return F.np_reshape(self, _shape_args(shape), order, copy=copy)


def _transpose(self, *axes):
    return F.transpose(self, _shape_args(axes) if axes and axes != ((),) else None)


def _sort(self, axis=-1, kind=None, order=None):
    self.assign(np.sort(self, axis=axis, kind=kind))


def _fill(self, value):
    self.assign(np.full_like(self, value))


def _flatten(self, order="C"):
    return F.np_reshape(self, (-1,), order, copy=True)


def _real(self):
    return _same_weakness(self, emit(self.ctx, "real", self)) if self.dtype.kind == "c" else self


def _imag(self):
    if self.dtype.kind == "c":
        return _same_weakness(self, emit(self.ctx, "imag", self))
    return _same_weakness(self, np.zeros_like(self))


def _same_weakness(source, part):
    """A traced Python number's parts are Python numbers too (``z.real`` of a complex)."""
    return weak_scalar(part.ctx, part.instr) if source.weak else part


# Methods that forward to a ufunc or to a function that refuses with its own clear error (the
# rest come from ``implements(..., method=...)`` beside each rule).
_FORWARD_ELSEWHERE = {"conj": np.conjugate, "conjugate": np.conjugate, "nonzero": np.nonzero}


# Methods and attributes spelled here (rather than forwarded to one registered function).
_OWN_METHODS = ("reshape", "transpose", "astype", "sort", "fill", "flatten")
ARRAY_ATTRIBUTES = ("T", "mT", "real", "imag")


def install() -> None:
    """Attach every array method to Tracer; called once all rule modules have registered."""
    for name, func in {**METHODS, **_FORWARD_ELSEWHERE}.items():
        setattr(Tracer, name, (lambda f: lambda self, *a, **k: f(self, *a, **k))(func))


def array_method_names() -> tuple[str, ...]:
    """Every array method a Tracer lowers (``x.sum()``, ``x.reshape(...)``, ...): the registry's,
    the forwarded ones and those spelled here.  Stand-in arrays (auto mode) record exactly these."""
    return tuple(sorted({*METHODS, *_FORWARD_ELSEWHERE, *_OWN_METHODS}))


Tracer.reshape = _reshape
Tracer.transpose = _transpose
Tracer.T = property(lambda self: F.transpose(self))
Tracer.mT = property(lambda self: F.swapaxes(self, -1, -2))
Tracer.astype = F.astype
Tracer.sort = _sort
Tracer.fill = _fill
Tracer.flatten = _flatten
Tracer.real = property(_real)
Tracer.imag = property(_imag)
