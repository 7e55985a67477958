"""NumPy -> HLO tracing: ``Tracer``, the lowering rules, and function/cell tracing."""

from . import (float_to_int, functions, indexing, linalg, manipulation, methods, numeric,  # noqa: F401
               reductions, sorting, ufuncs)  # (importing registers the rules)
from .trace import TracedProgram, trace, tree_flatten, tree_unflatten
from .tracer import Tracer

methods.install()

__all__ = ["Tracer", "TracedProgram", "trace", "tree_flatten", "tree_unflatten"]
