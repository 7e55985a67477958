"""Which binary op a reducer is, and that op's identity: one recognizer for the code generator,
the evaluator, autodiff and the Dask planner (each then keeps the ops it can do something with).

A reducer (the computation a ``reduce``, ``reduce-window`` or ``scatter`` applies) is *recognized*
when it is ``(a, b) -> op(a, b)``: two scalar parameters and a root ``op`` whose two operands are
those two parameters (in either order -- every op here is commutative).  Anything else (a
variadic argmax reducer, ``a + 2*b``) is a custom reducer, run as written.
"""

from __future__ import annotations

import numpy as np

from .ir import Computation
from . import shapes as S

# The binary ops a reducer may be, all associative and commutative (on pred, add is "or" and
# multiply is "and", as in XLA).
REDUCER_OPS = frozenset({"add", "multiply", "maximum", "minimum", "and", "or", "xor"})
# Applying them twice to the same value changes nothing (so a start value may enter once per
# block, as a blocked reduction does).
IDEMPOTENT = frozenset({"maximum", "minimum", "and", "or"})


def reducer_op(comp: Computation) -> str | None:
    """The opcode if ``comp`` is ``(a, b) -> op(a, b)`` for an op of ``REDUCER_OPS``, else None."""
    params, root = comp.parameters, comp.root
    if len(params) != 2 or root.opcode not in REDUCER_OPS or len(root.operands) != 2:
        return None
    if {id(o) for o in root.operands} != {id(p) for p in params}:
        return None
    return root.opcode


def returns_second(comp: Computation) -> bool:
    """Is ``comp`` ``(a, b) -> b`` (a scatter that replaces)?"""
    params = comp.parameters
    return len(params) == 2 and comp.root is params[1]


def identity(op: str, element_type: str):
    """The value ``x`` with ``op(x, y) == y`` for every ``y`` of ``element_type`` (a NumPy
    scalar of that type)."""
    dtype = S.to_numpy_dtype(element_type)
    bitwise = element_type == "pred" or S.is_integral(element_type)
    if op == "add" or (op in ("or", "xor") and bitwise):
        return dtype.type(0) if element_type != "pred" else np.bool_(False)
    if op in ("multiply", "and"):
        if element_type == "pred":
            return np.bool_(True)
        if op == "multiply":
            return dtype.type(1)
        if S.is_integral(element_type):                 # all bits set
            return dtype.type(-1) if S.is_signed(element_type) else dtype.type(np.iinfo(dtype).max)
    elif op in ("maximum", "minimum") and not S.is_complex(element_type):
        if S.is_float(element_type):
            return dtype.type(-np.inf if op == "maximum" else np.inf)
        if element_type == "pred":
            return np.bool_(op == "minimum")
        info = np.iinfo(dtype)
        return dtype.type(info.min if op == "maximum" else info.max)
    raise ValueError(f"{op} has no identity on {element_type}")


def is_identity(op: str, value, element_type: str) -> bool:
    """Is every element of ``value`` ``op``'s identity for ``element_type``?"""
    return bool(np.all(np.asarray(value) == identity(op, element_type)))
