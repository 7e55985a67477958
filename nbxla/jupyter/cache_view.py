"""The compilation cache as a table: one row per compiled program, and why it was compiled.

A ``CacheTable`` is a snapshot taken when it is made (an output in a notebook shows the
cache as it was when the cell ran); ``nbxla.dashboard()`` makes a new one after each cell.
"""

from __future__ import annotations

import time

from ..runtime.cache import DEFAULT_CACHE, CompilationCache, describe_leaf
from . import html as h

MIME = "application/vnd.nbxla.cache+json"


class CacheTable:
    def __init__(self, cache: CompilationCache | None = None):
        cache = DEFAULT_CACHE if cache is None else cache
        self.text = cache.table()
        self.totals = {"entries": len(cache.entries()), "hits": cache.hits, "misses": cache.misses,
                       "evictions": cache.evictions}
        self.rows = []
        for e in cache.entries():
            self.rows.append({
                "code": e.code_name,
                "inputs": [{"name": n, "value": describe_leaf(s)} for n, s in zip(e.leaf_names, e.signature)],
                "summary": e.summary(),
                "device": e.device,
                "hits": e.hits,
                "compile_ms": e.compile_seconds * 1e3,
                "created": e.created,
                "last_use": e.last_use,
                "explanation": e.explanation,
            })

    def to_text(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return self.text

    def to_json(self) -> dict:
        return {"version": 1, "totals": dict(self.totals), "entries": list(self.rows)}

    def to_html(self) -> str:
        t = self.totals
        head = (f'<div style="margin-bottom: 4px;"><b>nbxla compilation cache</b> '
                f'<span style="{h.MUTED}">· {t["entries"]} entries · {t["hits"]} hits · '
                f'{t["misses"]} misses · {t["evictions"]} evictions</span></div>')
        if not self.rows:
            return h.container(head + f'<div style="{h.MUTED}">empty: nothing compiled yet '
                               "(or the cache was cleared)</div>")
        rows = []
        for r in self.rows:
            inputs = "<br/>".join(f"<code>{h.esc(i['name'])}</code>: {h.esc(i['value'])}"
                                  for i in r["inputs"]) or f'<span style="{h.MUTED}">none</span>'
            first = r["explanation"] == "first compilation"
            why = h.esc(r["explanation"]).replace(" -&gt; ", " → ")
            rows.append([f"<code>{h.esc(r['code'])}</code>", inputs, h.esc(r["device"]),
                         str(r["hits"]), f"{r['compile_ms']:.1f}",
                         time.strftime("%H:%M:%S", time.localtime(r["last_use"])),
                         why if first else f'<span style="color: #b35900;">{why}</span>'])
        return h.container(head + h.table(
            ["code", "inputs (key)", "device", "hits", "compile ms", "last use", "why compiled"],
            rows, numeric={3, 4}))

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/plain": self.to_text(), "text/html": self.to_html(), MIME: self.to_json()}

