"""The NumPy -> HLO lowering registry: the bottom of the frontend.

Rule modules register into these tables (``@implements(np.cumsum, method="cumsum")`` fills the
function and the array method in one line; ufunc rules go into ``UFUNCS``); the tracer and the
dispatch code look rules up here.  Nothing here imports a rule module, so the modules that
define rules can all import the tracer, and the tracer needs none of them: the Tracer's
operators, indexing and NumPy protocols reach their lowering through ``ENTRY_POINTS``, which the
rule modules fill when ``nbxla.frontend`` imports them.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

FUNCTIONS: dict[Callable, Callable] = {}     # np.func -> rule(*args, **kwargs)
UFUNCS: dict[np.ufunc, Callable] = {}        # ufunc -> rule(ctx, *operands cast and broadcast)
METHODS: dict[str, Callable] = {}            # array method name -> the NumPy function it forwards to
UFUNC_METHODS: dict[str, Callable] = {}      # "reduce", "accumulate", "outer", "at" -> handler
ENTRY_POINTS: dict[str, Callable] = {}       # "getitem", "apply_ufunc", ... -> the lowering

# Functions that cannot be compiled, with the reason shown to the user.
NOT_COMPILABLE = {
    "unique": "its output shape depends on the data",
    "nonzero": "its output shape depends on the data",
    "argwhere": "its output shape depends on the data",
    "flatnonzero": "its output shape depends on the data",
    "extract": "its output shape depends on the data",
    "compress": "its output shape depends on the data",
    "trim_zeros": "its output shape depends on the data",
    "unique_values": "its output shape depends on the data",
    "unique_counts": "its output shape depends on the data",
    "unique_inverse": "its output shape depends on the data",
    "unique_all": "its output shape depends on the data",
    "intersect1d": "its output shape depends on the data",
    "union1d": "its output shape depends on the data",
    "setdiff1d": "its output shape depends on the data",
    "setxor1d": "its output shape depends on the data",
    "bincount": "its output length depends on the largest value in the data",
    "histogram2d": "its bins depend on the data",
    "histogramdd": "its bins depend on the data",
    "histogram_bin_edges": "its bins depend on the data",
    "save": "it has side effects outside the computation",
    "savetxt": "it has side effects outside the computation",
}


def implements(*funcs, method: str | None = None):
    """Register the decorated rule for NumPy functions ``funcs``; ``method`` also makes it the
    array method of that name (``x.cumsum(...)`` forwards to ``np.cumsum(x, ...)``)."""
    def register(rule):
        for f in funcs:
            FUNCTIONS[f] = rule
        if method is not None:
            METHODS[method] = funcs[0]
        return rule
    return register


def ufunc_method(name: str):
    """Register the decorated handler for ``ufunc.<name>(...)`` ("reduce", "accumulate", ...)."""
    def register(fn):
        UFUNC_METHODS[name] = fn
        return fn
    return register


def entry_point(name: str):
    """Register the decorated function as the lowering the tracer reaches as ``name``."""
    def register(fn):
        ENTRY_POINTS[name] = fn
        return fn
    return register
