"""The notebook layer: magics, display objects and the dashboard.  It only calls the public API."""

from .display import BenchReport, CacheTable, Comparison, StageView, bench
from .magics import XlaMagics, register


def last_compilation():
    """The Compilation that ran last (a %%xla cell or an @nbxla.jit call), or None."""
    from ..runtime.cache import DEFAULT_CACHE
    from .dashboard import last_compilation
    return last_compilation(DEFAULT_CACHE)[0]


__all__ = ["XlaMagics", "register", "StageView", "CacheTable", "Comparison", "BenchReport", "bench",
           "last_compilation"]
