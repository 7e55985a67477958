"""Display objects for notebooks: each renders as text, self-contained HTML and JSON.

Every object implements ``_repr_mimebundle_`` with ``text/plain`` (terminal IPython),
``text/html`` (inline styles only: no script, no CDN; renders in JupyterLab, Notebook 7,
VS Code, Colab, nbconvert and on GitHub) and a JSON type of nbxla's own for the JupyterLab
extension.  They read records (compilations, cache entries, timings) and never compile.

* ``StageView(compilation)`` — stages, highlighted HLO, source lines colored by kernel;
* ``CacheTable()`` — the compilation cache, one row per entry with why it was compiled;
* ``Comparison(timing, compilation)`` — ``%%xla --compare``: eager vs compiled, with a chart;
* ``BenchReport`` from ``bench(f, make_inputs, sizes)`` — ``%xla_bench`` over sizes.
"""

from .bench import BenchReport, bench
from .cache_view import CacheTable
from .compare_view import Comparison, machine_bandwidth
from .stage_view import StageView

MIMETYPES = {
    "stages": "application/vnd.nbxla.stages+json",
    "cache": "application/vnd.nbxla.cache+json",
    "comparison": "application/vnd.nbxla.comparison+json",
    "bench": "application/vnd.nbxla.bench+json",
}

__all__ = ["StageView", "CacheTable", "Comparison", "BenchReport", "bench", "machine_bandwidth",
           "MIMETYPES"]
