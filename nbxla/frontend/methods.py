"""Array methods and attributes of ``Tracer``, each spelled as the NumPy function it is."""

from __future__ import annotations

import numpy as np

from . import functions as F
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
    return emit(self.ctx, "real", self) if self.dtype.kind == "c" else self


def _imag(self):
    if self.dtype.kind == "c":
        return emit(self.ctx, "imag", self)
    return np.zeros_like(self)


_FORWARD = {   # method name -> NumPy function taking the array first
    "sum": np.sum, "prod": np.prod, "mean": np.mean, "var": np.var, "std": np.std,
    "max": np.max, "min": np.min, "argmax": np.argmax, "argmin": np.argmin, "any": np.any,
    "all": np.all, "cumsum": np.cumsum, "cumprod": np.cumprod, "clip": np.clip, "dot": np.dot,
    "swapaxes": np.swapaxes, "squeeze": np.squeeze, "ravel": np.ravel, "round": np.round,
    "argsort": np.argsort, "take": np.take, "repeat": np.repeat, "trace": np.trace,
    "diagonal": np.diagonal, "nonzero": np.nonzero, "conj": np.conjugate,
    "conjugate": np.conjugate, "copy": np.copy,
}

for _name, _func in _FORWARD.items():
    setattr(Tracer, _name, (lambda f: lambda self, *a, **k: f(self, *a, **k))(_func))

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
