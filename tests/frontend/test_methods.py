"""Every array method and attribute the frontend promises, on a Tracer, against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import nbxla
from tests.frontend_util import check, jit

X = (np.arange(12.0).reshape(3, 4) % 5) - 2

METHODS = {
    "sum": lambda a: (a.sum(), a.sum(0), a.sum(axis=1, keepdims=True), a.sum(dtype=np.float32)),
    "mean": lambda a: (a.mean(), a.mean(axis=0)),
    "max": lambda a: (a.max(), a.max(axis=1)),
    "min": lambda a: (a.min(), a.min(0, keepdims=True)),
    "prod": lambda a: (a.prod(), a.prod(axis=1)),
    "var": lambda a: (a.var(), a.var(axis=0, ddof=1)),
    "std": lambda a: (a.std(), a.std(1)),
    "argmax": lambda a: (a.argmax(), a.argmax(axis=1)),
    "argmin": lambda a: (a.argmin(), a.argmin(0)),
    "any": lambda a: (a.any(), a.any(axis=0)),
    "all": lambda a: (a.all(), a.all(1)),
    "cumsum": lambda a: (a.cumsum(), a.cumsum(axis=1)),
    "cumprod": lambda a: a.cumprod(0),
    "reshape": lambda a: (a.reshape(4, 3), a.reshape((2, -1)), a.reshape(-1)),
    "transpose": lambda a: (a.transpose(), a.transpose(1, 0), a.transpose((1, 0))),
    "T": lambda a: a.T,
    "mT": lambda a: a.mT,
    "swapaxes": lambda a: a.swapaxes(0, 1),
    "astype": lambda a: (a.astype(np.int32), a.astype("float32"), a.astype(bool)),
    "clip": lambda a: (a.clip(-1, 1), a.clip(0)),
    "dot": lambda a: a.dot(a.T),
    "flatten": lambda a: a.flatten(),
    "ravel": lambda a: a.ravel(),
    "squeeze": lambda a: a[None].squeeze(),
    "round": lambda a: (a / 3).round(2),
    "take": lambda a: a.take([0, 5]),
    "repeat": lambda a: a.repeat(2, axis=0),
    "trace": lambda a: a.trace(),
    "diagonal": lambda a: a.diagonal(),
    "argsort": lambda a: a.argsort(kind="stable"),
    "copy": lambda a: a.copy(),
    "conj": lambda a: a.conj(),
    "real": lambda a: (a.real, a.imag),
    "attributes": lambda a: (a.shape, a.ndim, a.dtype, a.size, a.itemsize, a.nbytes, len(a)),
}


@pytest.mark.parametrize("name", list(METHODS))
def test_method(name):
    check(METHODS[name], X)


def test_in_place_methods():
    def f(a):
        b = a.copy()
        b.sort(axis=0)
        c = a.copy()
        c.fill(7)
        return b, c
    check(f, X)


@pytest.mark.parametrize("name", ["item", "tolist"])
def test_item_and_tolist_need_values(name):
    with pytest.raises(nbxla.ConcretizationError, match=f".{name}\\(\\) of a traced array"):
        jit(lambda a: getattr(a, name)())(X)
