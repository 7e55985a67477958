"""tree_flatten answers plain leaves (floats, ints, arrays) without the array-holder test, which
cost a dataclass check per leaf on every call at a new size of a function reading a dict of
coefficients; objects and containers are flattened as before."""

from dataclasses import dataclass

import importlib

import numpy as np

import nbxla
from nbxla.frontend.trace import LEAF, tree_flatten
from nbxla.runtime.cache import CompilationCache

trace_module = importlib.import_module("nbxla.frontend.trace")   # (the package's ``trace`` is the function)


def test_plain_leaves_skip_the_array_holder_test(monkeypatch):
    asked = []
    real = trace_module.is_array_holder
    monkeypatch.setattr(trace_module, "is_array_holder", lambda v, d=0: asked.append(type(v)) or real(v, d))
    coefficients = {f"c{k}": float(k) for k in range(50)}
    x = np.ones(3)
    leaves, treedef = tree_flatten(((x, 2, True, None, np.float32(1)), coefficients))
    assert asked == []
    assert leaves[:5] == [x, 2, True, None, np.float32(1)] and leaves[5:] == list(coefficients.values())
    assert tree_flatten(1.5) == ([1.5], LEAF)


@dataclass
class Layer:
    w: np.ndarray
    scale: float


class Floaty(float):
    """A float subclass: not a plain leaf type (answered by the full test, still one leaf)."""


def test_objects_and_subclasses_flatten_as_before():
    w = np.ones((2, 2))
    leaves, treedef = tree_flatten((Layer(w, 2.0), Floaty(3.0)))
    assert leaves[0] is w and leaves[1] == 2.0 and type(leaves[2]) is Floaty
    assert treedef.children[0].kind == "object"


COEFFICIENTS = {(i, j): 1.0 / (1 + i + 2 * j) for i in range(6) for j in range(6)}


def polynomial(x):
    total = 0.0 * x
    for (i, j), c in COEFFICIENTS.items():
        total = total + c * x ** i * (x + 1) ** j
    return total


def test_a_function_reading_a_dict_of_coefficients_serves_every_size():
    cache = CompilationCache()
    f = nbxla.jit(polynomial, cache=cache)
    for n in (1, 2, 5, 9, 17, 33):
        x = np.random.default_rng(n).random((n, 8)) * 0.5
        np.testing.assert_allclose(f(x), polynomial(x), rtol=1e-10)
    assert cache.misses <= 2
