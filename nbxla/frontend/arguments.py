"""How a Python function takes its arguments: keyword calls made positional, so that ``jit``
and auto mode take one fast path for ``f(x, y)`` and ``f(**args)`` (the way benchmark suites
call kernels)."""

from __future__ import annotations

import inspect


def positional_parameters(signature: inspect.Signature | None) -> list | None:
    """[(name, default)] of a signature whose parameters may all be passed by position
    (keyword calls are then made positional: one fast path for both), else None."""
    params = signature.parameters.values() if signature is not None else ()
    if params and all(p.kind is p.POSITIONAL_OR_KEYWORD for p in params):
        return [(p.name, p.default) for p in params]
    return None


def as_positional(parameters: list, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """``(args, kwargs)`` with the keywords (and the defaults after them) moved into ``args``
    by position; unchanged where they do not fit (the call then goes the general way, and
    errors as Python's would)."""
    rest = parameters[len(args):]
    if len(kwargs) > len(rest) or sum(k in kwargs for k, _ in rest) != len(kwargs) or \
            any(k not in kwargs and d is inspect.Parameter.empty for k, d in rest):
        return args, kwargs
    return args + tuple(kwargs[k] if k in kwargs else d for k, d in rest), {}
