"""nbxla: an XLA-style compiler for NumPy code in notebooks."""

from .api import CompiledFunction, jit
from .errors import ConcretizationError, NbxlaError, NotCompilableError
from .runtime.cache import DEFAULT_CACHE as cache

__version__ = "0.1.0"

__all__ = ["jit", "CompiledFunction", "NbxlaError", "NotCompilableError", "ConcretizationError",
           "cache", "dashboard", "explain"]


def explain(fn, *args, **kwargs):
    """Run ``fn(*args, **kwargs)`` with auto-clustering and return the clustering report:
    clusters (ops, kernels, source lines, compile time, runs), graph breaks with their reasons
    and lines, and the fraction of array work that ran compiled (``nbxla.cluster.explain``)."""
    from .cluster import explain as run
    return run(fn, *args, **kwargs)


def dashboard(cache=None):
    """An ipywidgets view of the compilation cache and the last compilation's stages,
    updated after every cell (``nbxla.jupyter.dashboard``)."""
    from .jupyter.dashboard import dashboard as make
    return make(cache)


def load_ipython_extension(ipython):
    """``%load_ext nbxla``: register the %%xla, %xla_ir, %xla_cache and %xla_bench magics."""
    from .jupyter.magics import register
    register(ipython)
