"""Short loops found cheap to unroll, remembered while one program is traced.

A loop of at most ``--unroll_max`` steps is traced once rolled to count the kernels each step
would add (``loops._Loop.run``); when that is within budget it is unrolled, traced step by
step.  In a nest of loops every enclosing trace (an outer loop's rolled attempt, its retrace
with the checks or types it learned, each unrolled step) reaches the inner loop again and
traced it rolled again, for the same answer: scattering_self_energies (npbench S, eight
nested loops) traced its innermost two-step loop's body 51 times, a third of them only to
count.  ``key`` names what the answer depends on -- the body's code and line, the range, and
the kind of every value the body can see (its state and the variables it reads from enclosing
functions: traced or not, shape, dtype, Python values themselves) -- so a loop reached again
with the same key is unrolled at once.  Unrolling is what Python does: a wrong reuse could
cost speed, never change a result.
"""

from __future__ import annotations

import numpy as np

from .control import UNDEFINED
from .tracer import Tracer


def key(body, lineno: int, r: range, state: tuple) -> tuple | None:
    """The key of the loop ``for i in r`` at ``lineno`` running ``body`` over ``state``; None
    when some value it sees has no kind to compare (then the loop is counted again)."""
    code = getattr(body, "__code__", None)
    if code is None:
        return None
    try:
        closure = tuple(cell.cell_contents for cell in (body.__closure__ or ()))
    except ValueError:                  # (a variable not bound yet)
        return None
    kinds = _kinds(tuple(state) + closure, depth=0)
    return None if kinds is None else (code, lineno, r.start, r.stop, r.step, kinds)


_PLAIN = (bool, int, float, complex, str, bytes, type(None))


def _kinds(values, depth: int):
    out = []
    for v in values:
        if v is UNDEFINED:              # (a name the body binds before reading it)
            out.append(("undefined",))
        elif isinstance(v, Tracer):
            out.append(("traced", tuple(v.shape), str(v.dtype)))
        elif isinstance(v, np.ndarray):
            out.append(("array", id(v), v.shape, v.dtype.str))
        elif isinstance(v, _PLAIN) or isinstance(v, np.generic):
            out.append((type(v), v))
        elif isinstance(v, (tuple, list)) and depth < 2:
            inner = _kinds(v, depth + 1)
            if inner is None:
                return None
            out.append((type(v), inner))
        elif callable(v) or isinstance(v, type(np)):
            out.append(("object", id(v)))
        else:
            return None
    return tuple(out)
