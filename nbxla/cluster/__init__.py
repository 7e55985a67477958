"""Auto-clustering: run any NumPy code, compile the parts that can be compiled.

``nbxla.jit(fn, mode="auto")``, ``%%xla --auto`` and ``NBXLA_FLAGS=--auto_jit``: a function or
cell that compiles whole with no Python side effect runs as one compiled program, checked
once against NumPy (``whole.py``, ``purity.py``); any other runs as ordinary Python, its
array work on stand-in arrays recorded into a pending
graph, which is compiled (and cached) or replayed eagerly whenever a concrete value is needed
(a graph break).  ``nbxla.explain(fn, *args)`` reports the clusters and the breaks.
See docs/auto_clustering.md.
"""

from ..api import register_mode
from .auto import AutoFunction, explain, run_cell
from .lazy import LazyArray
from .records import MIN_CLUSTER_WORK, MIN_REPLAYED_WORK
from .report import ClusterReport

register_mode("auto", AutoFunction)     # jit(fn, mode="auto"), NBXLA_FLAGS=--auto_jit

__all__ = ["AutoFunction", "explain", "run_cell", "LazyArray", "ClusterReport", "MIN_CLUSTER_WORK",
           "MIN_REPLAYED_WORK"]
