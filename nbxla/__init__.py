"""nbxla: an XLA-style compiler for NumPy code in notebooks."""

from .api import CompiledFunction, jit, register_array_adapter
from .autodiff import GradientTape, grad, value_and_grad
from . import cluster, random  # noqa: F401  (cluster registers mode="auto")
from .errors import ConcretizationError, NbxlaError, NotCompilableError
from .runtime.cache import DEFAULT_CACHE as cache

__version__ = "0.1.0"


# Dask arrays as arguments: nbxla/dask/ (an adapter above the api), imported on first use.
def _is_dask_collection(leaf) -> bool:
    return hasattr(type(leaf), "__dask_graph__")


def _call_on_dask(fn, args, kwargs):
    from .dask import call              # imports dask: only once a dask array shows up
    return call(fn, args, kwargs)


register_array_adapter(_is_dask_collection, _call_on_dask)

__all__ = ["jit", "CompiledFunction", "NbxlaError", "NotCompilableError", "ConcretizationError",
           "cache", "dashboard", "grad", "value_and_grad", "GradientTape", "random", "explain", "profile"]


def __getattr__(name):
    """``nbxla.aot`` without importing it first: loaded on first use, since it imports LLVM
    (llvmlite), which ``import nbxla`` does not."""
    if name == "aot":
        import importlib
        return importlib.import_module(".aot", __name__)
    raise AttributeError(f"module 'nbxla' has no attribute {name!r}")


def explain(fn, *args, **kwargs):
    """Run ``fn(*args, **kwargs)`` with auto-clustering and return the clustering report:
    clusters (ops, kernels, source lines, compile time, runs), graph breaks with their reasons
    and lines, and the fraction of array work that ran compiled (``nbxla.cluster.explain``)."""
    from .cluster import explain as run
    return run(fn, *args, **kwargs)


def profile(fn, **options):
    """``nbxla.profile(f)(*args)``: run ``f`` compiled with per-kernel timing and return the
    profile: time per kernel and per source line, each kernel against this machine's measured
    bandwidth and peak flops with a verdict, and the loop and fusion decisions per line
    (``nbxla.profiler``; in a notebook it shows the bars and the roofline)."""
    from .profiler import profile as make
    from .jupyter import profile_view  # noqa: F401  (registers the notebook view)
    return make(fn, **options)


def dashboard(cache=None):
    """An ipywidgets view of the compilation cache and the last compilation's stages,
    updated after every cell (``nbxla.jupyter.dashboard``)."""
    from .jupyter.dashboard import dashboard as make
    return make(cache)


def load_ipython_extension(ipython):
    """``%load_ext nbxla``: register the %%xla, %xla_ir, %xla_cache and %xla_bench magics."""
    from .jupyter.magics import register
    register(ipython)
