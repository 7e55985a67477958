"""``nbxla.dashboard()``: the cache table and the last compilation's stages, kept up to date.

Built from core ipywidgets only (``VBox``, ``Tab``, ``HTML``), so it works in Colab without a
custom widget manager.  It is an addition: every view it shows is also what ``%xla_cache``
and ``%xla_ir`` display on their own.  After each cell runs (IPython's ``post_run_cell``
event) every live dashboard re-reads the cache; the stages view is redrawn only when the
last compilation changed.
"""

from __future__ import annotations

import time

from ..runtime.cache import DEFAULT_CACHE, CompilationCache
from .cache_view import CacheTable
from .stage_view import StageView

_live: list["Dashboard"] = []
_latest: tuple[float, object, str | None] | None = None    # (when, compilation, source) from %%xla
_hooked_shells: set[int] = set()


def notify(compilation, source: str | None = None) -> None:
    """Tell the dashboards about a compilation that ran (the %%xla magic calls this)."""
    global _latest
    _latest = (time.time(), compilation, source)


def refresh_all(*_args) -> None:
    for board in list(_live):
        board.refresh()


def last_compilation(cache: CompilationCache):
    """The compilation that ran last: from a %%xla notice or the cache's most recent entry."""
    entries = cache.entries()               # least recently used first
    candidates = []
    if entries:
        value = entries[-1].value
        candidates.append((entries[-1].last_use, getattr(value, "compilation", value), None))
    if _latest is not None:
        candidates.append(_latest)
    return max(candidates, key=lambda c: c[0])[1:] if candidates else (None, None)


class Dashboard:
    def __init__(self, cache: CompilationCache | None = None):
        import ipywidgets as widgets
        self.cache = DEFAULT_CACHE if cache is None else cache
        self.cache_html = widgets.HTML()
        self.stages_html = widgets.HTML()
        self.status = widgets.HTML()
        tabs = widgets.Tab(children=[self.stages_html, self.cache_html])
        for i, title in enumerate(("last compilation", "compilation cache")):
            tabs.set_title(i, title)
        self.widget = widgets.VBox([self.status, tabs])
        self._shown = None
        self.refresh()

    def refresh(self) -> None:
        self.cache_html.value = CacheTable(self.cache).to_html()
        compilation, source = last_compilation(self.cache)
        if compilation is None:
            self.stages_html.value = "<i>nothing compiled yet: run a %%xla cell or an @nbxla.jit function</i>"
        elif compilation is not self._shown:
            self.stages_html.value = StageView(compilation, source=source).to_html()
            self._shown = compilation
        self.status.value = (f"<b>nbxla</b> <span style=\"color: #666;\">· updated "
                             f"{time.strftime('%H:%M:%S')} after each cell</span>")

    def close(self) -> None:
        if self in _live:
            _live.remove(self)
        self.widget.close()


def dashboard(cache: CompilationCache | None = None):
    """A live ipywidgets view: the compilation cache and the last compilation's stages."""
    board = Dashboard(cache)
    _live.append(board)
    try:
        from IPython import get_ipython
        shell = get_ipython()
    except ImportError:
        shell = None
    if shell is not None and id(shell) not in _hooked_shells:
        shell.events.register("post_run_cell", refresh_all)
        _hooked_shells.add(id(shell))
    board.widget.dashboard = board          # so the VBox leads back to refresh() and close()
    return board.widget
