"""The notebook display objects: mimebundles, well-formed and escaped HTML, the HLO lexer,
the charts, the dashboard.  (Rendering only: nothing here times anything.)"""

from __future__ import annotations

import base64
import json
import re
from html.parser import HTMLParser

import numpy as np
import pytest
from IPython.utils.capture import capture_output
from pygments.token import Keyword, Name, Number, String

import nbxla
from nbxla.compiler import compile_module
from nbxla.cell_check import Timing
from nbxla.hlo import graphviz
from nbxla.hlo.parser import parse_hlo
from nbxla.jupyter import display as views
from nbxla.jupyter.hlo_lexer import HloLexer
from nbxla.jupyter.html import highlight_hlo_lines
from nbxla.runtime.cache import CompilationCache

from tests.ipython_util import run

VOID = {"br", "img", "input", "hr", "meta", "wbr", "col", "area", "source", "link"}

EVIL = '<script>alert("x")</script>'
EVIL_FILE = "<img src=x onerror=alert(1)>&co.py"
EVIL_HLO = f"""HloModule evil_module

ENTRY %main (x: f32[4], y: f32[4]) -> f32[4] {{
  %x = f32[4]{{0}} parameter(0)
  %y = f32[4]{{0}} parameter(1)
  %m = f32[4]{{0}} multiply(f32[4]{{0}} %x, f32[4]{{0}} %y), metadata={{op_name="{EVIL.replace('"', "'")}" source_file="{EVIL_FILE}" source_line=3}}
  ROOT %a = f32[4]{{0}} add(f32[4]{{0}} %m, f32[4]{{0}} %x), metadata={{op_name="a&b <i>" source_file="{EVIL_FILE}" source_line=4}}
}}
"""


class _Checker(HTMLParser):
    """Records tag balance errors and every tag and attribute seen."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack, self.errors, self.tags, self.attrs, self.text = [], [], set(), [], []

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        self.attrs += attrs
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.tags.add(tag)
        self.attrs += attrs

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes <{self.stack[-1] if self.stack else None}>")
        else:
            self.stack.pop()

    def handle_data(self, data):
        self.text.append(data)


def check_html(markup: str) -> _Checker:
    """Well-formed (balanced tags), self-contained (no script, no remote resources)."""
    checker = _Checker()
    checker.feed(markup)
    checker.close()
    assert not checker.errors, checker.errors[:5]
    assert not checker.stack, f"unclosed: {checker.stack[:5]}"
    assert not checker.tags & {"script", "iframe", "link", "object", "embed", "style"}
    for name, value in checker.attrs:
        assert not name.startswith("on"), name
        if name in ("src", "href"):
            assert value.startswith("data:"), value
    return checker


def check_bundle(obj, mime: str) -> dict:
    bundle = obj._repr_mimebundle_()
    assert {"text/plain", "text/html", mime} <= set(bundle)
    assert isinstance(bundle["text/plain"], str) and bundle["text/plain"]
    json.dumps(bundle[mime])                                   # JSON-serializable as is
    check_html(bundle["text/html"])
    return bundle


@pytest.fixture
def softmax_compilation():
    @nbxla.jit(cache=CompilationCache())
    def softmax(x):
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    softmax(np.ones((8, 16), np.float32))
    return softmax.last_compilation


def test_stage_view_bundle_has_every_stage_and_the_kernels(softmax_compilation):
    c = softmax_compilation
    bundle = check_bundle(views.StageView(c), views.MIMETYPES["stages"])
    data = bundle[views.MIMETYPES["stages"]]
    assert data["stage_order"] == list(c.stages)
    assert data["stages"]["hlo"] == c.stage("hlo")
    assert data["kernels_after"] == len(data["kernels"]) == len(c.fusion_report.kernels)
    kernel = data["kernels"][0]
    assert {"name", "kind", "bytes_read", "bytes_written", "flops", "color", "lines"} <= set(kernel)
    texts = [line["text"].strip() for line in data["source"]["lines"]]
    assert texts == ["e = np.exp(x - x.max(axis=1, keepdims=True))",
                     "return e / e.sum(axis=1, keepdims=True)"]
    html = bundle["text/html"]
    for stage in c.stages:                                 # one collapsible section each
        assert f'padding: 2px 0;">{stage} <span' in html
    assert "K1" in html and kernel["color"] in html and "FLOP/byte" in html
    assert "kernels: " in bundle["text/plain"] and "stages: hlo" in bundle["text/plain"]


def test_source_lines_are_colored_by_their_kernel(softmax_compilation):
    view = views.StageView(softmax_compilation)      # no source given: rebuilt from locations
    lines = view.source["lines"]
    assert lines and all(line["text"] is not None for line in lines if line["kernels"])
    owned = [line for line in lines if line["kernels"]]
    assert owned, "every softmax line does work in some kernel"
    colors = {k["name"]: k["color"] for k in view.kernels}
    html = view._source_html()
    for line in owned:
        assert colors[line["kernels"][0]] in html


def test_single_stage_view_is_the_stage_text(softmax_compilation):
    view = views.StageView(softmax_compilation, ["optimized_hlo"])
    bundle = check_bundle(view, views.MIMETYPES["stages"])
    assert bundle["text/plain"] == softmax_compilation.stage("optimized_hlo")
    with pytest.raises(nbxla.NbxlaError, match="unknown stage 'nope'"):
        views.StageView(softmax_compilation, ["nope"])


def test_html_escapes_names_and_metadata_from_hlo_files():
    compilation = compile_module(parse_hlo(EVIL_HLO), "cpu")
    bundle = check_bundle(views.StageView(compilation), views.MIMETYPES["stages"])
    html = bundle["text/html"]
    assert "<script" not in html and "<img src=x" not in html and "<i>" not in html
    assert "&lt;script&gt;" in html and "&lt;img src=x onerror=alert(1)&gt;&amp;co.py" in html
    checker = check_html(html)
    text = "".join(checker.text)               # what a reader sees: the names, literally
    assert "<script>alert('x')</script>" in text and EVIL_FILE in text and "a&b <i>" in text
    assert bundle[views.MIMETYPES["stages"]]["source"]["file"] == EVIL_FILE


def test_the_graph_is_an_svg_image_when_dot_exists_and_a_note_otherwise(softmax_compilation, monkeypatch):
    view = views.StageView(softmax_compilation, ["optimized_hlo_dot"])
    if graphviz.shutil.which("dot"):
        html = view.to_html()
        check_html(html)
        match = re.search(r'src="data:image/svg\+xml;base64,([^"]+)"', html)
        assert match and b"<svg" in base64.b64decode(match.group(1))
    monkeypatch.setattr(graphviz.shutil, "which", lambda name: None)
    html = views.StageView(softmax_compilation, ["optimized_hlo_dot"]).to_html()
    check_html(html)
    assert "is not installed" in html and "digraph" in html and "data:image/svg" not in html


def test_hlo_lexer_tokenizes_opcodes_shapes_names_attributes():
    text = ('%fused (p: f32[8]) -> f32[8] {\n'
            '  ROOT %r = f32[8,8]{1,0} add(f32[8,8]{1,0} %a, pred[] %b), kind=kLoop, '
            'metadata={op_name="x<y"} // note\n  %c = f32[] constant(1.5)\n}')
    tokens = [(t, v) for t, v in HloLexer().get_tokens(text) if v.strip()]
    kinds = {v: t for t, v in tokens}
    assert kinds["add"] in Name.Function
    assert kinds["f32"] in Keyword.Type and kinds["[8,8]"] in Keyword.Type and kinds["{1,0}"] in Keyword.Type
    assert kinds["pred"] in Keyword.Type
    assert kinds["%r"] in Name.Variable and kinds["ROOT"] in Keyword
    assert kinds["kind"] in Name.Attribute and kinds["kLoop"] in Name.Constant
    assert kinds['"x<y"'] in String
    assert kinds["1.5"] in Number
    lines = highlight_hlo_lines(text)
    assert len(lines) == text.count("\n") + 1
    assert "x&lt;y" in lines[1] and "<y" not in lines[1].replace("<span", "")


def test_cache_table_rows_and_explanations():
    cache = CompilationCache()
    f = nbxla.jit(lambda x, n: x * n, cache=cache)
    f(np.ones(3, np.float32), 2)
    f(np.ones(3, np.float32), 2)
    f(np.ones(5, np.float32), 2)
    bundle = check_bundle(views.CacheTable(cache), views.MIMETYPES["cache"])
    data = bundle[views.MIMETYPES["cache"]]
    assert data["totals"] == {"entries": 2, "hits": 1, "misses": 2, "evictions": 0}
    # (the second size makes x's dimension symbolic, size 1 included where its trace is the same
    # program: docs/unknown_dimensions.md)
    assert [e["explanation"] for e in data["entries"]] == [
        "first compilation", "x.shape[0] -> b: one compilation for every size >= 1 (symbolic; x: f32[3] -> f32[b])"]
    assert "x: f32[3] → f32[b]" in bundle["text/html"]
    assert bundle["text/plain"] == cache.table()
    check_bundle(views.CacheTable(CompilationCache()), views.MIMETYPES["cache"])   # empty


def test_compare_displays_a_chart_with_the_speedup(shell):
    shell.user_ns["x"] = np.linspace(0, 1, 64, dtype=np.float32)
    result, out = run(shell, "%%xla --compare\ny = np.sum(3 * x**2 + 1)")
    assert result.success, out
    assert re.search(r"speedup [\d.]+x \(median of \d+ runs\)", out) and "GB/s" in out
    compilation = shell.magics_manager.registry["XlaMagics"].last_compilation
    timing = Timing(1e-3, 3e-3, 3, "cpu", [1e-3, 1.1e-3, 0.9e-3], [3e-3] * 3)
    comparison = views.Comparison(timing, compilation, bandwidth=10e9)
    bundle = check_bundle(comparison, views.MIMETYPES["comparison"])
    png = re.search(r'src="data:image/png;base64,([^"]+)"', bundle["text/html"])
    assert png and base64.b64decode(png.group(1)).startswith(b"\x89PNG")
    data = bundle[views.MIMETYPES["comparison"]]
    assert data["speedup"] == pytest.approx(3.0) and len(data["compiled_ms"]) == 3
    assert "3.00× faster" in bundle["text/html"]


def test_compare_output_in_the_notebook_has_the_png(shell):
    shell.user_ns["x"] = np.ones(32, np.float32)
    with capture_output() as out:
        shell.run_cell("%%xla --compare\ny = x + 1", store_history=True)
    htmls = [o.data["text/html"] for o in out.outputs if views.MIMETYPES["comparison"] in o.data]
    assert len(htmls) == 1 and "data:image/png;base64," in htmls[0]


def test_bench_report_over_sizes(shell):
    run(shell, "import nbxla\n@nbxla.jit\ndef f(a, b):\n    return np.sum(a * b + 1)\n"
               "def inputs(n):\n    return np.ones(n, np.float32), np.ones(n, np.float32)\n")
    result, out = run(shell, "r = %xla_bench -o -r 2 f inputs 16 2**8")
    assert result.success, out
    report = shell.user_ns["r"]
    assert [row["size"] for row in report.rows] == [16, 256]
    bundle = check_bundle(report, views.MIMETYPES["bench"])
    assert "data:image/png;base64," in bundle["text/html"]
    assert "2/2 done" in out                                  # the progress line, finished
    result, out = run(shell, "%xla_bench f inputs oops")
    assert not result.success and "size 'oops'" in out


def test_magics_display_the_views(shell):
    shell.user_ns["x"] = np.arange(4.0)
    with capture_output() as out:
        shell.run_cell("%%xla --stage all\ny = x * 2", store_history=True)
        shell.run_cell("%xla_ir optimized_hlo", store_history=True)
        shell.run_cell("%xla_cache", store_history=True)
    mimes = [next(m for m in o.data if m.startswith("application/vnd.nbxla")) for o in out.outputs]
    assert mimes == [views.MIMETYPES["stages"]] * 2 + [views.MIMETYPES["cache"]]
    source = out.outputs[0].data[views.MIMETYPES["stages"]]["source"]["lines"]
    assert [line["text"] for line in source] == ["%%xla --stage all", "y = x * 2"]
    assert source[1]["kernels"] and not source[0]["kernels"]


def test_dashboard_builds_and_follows_the_last_compilation(shell):
    pytest.importorskip("ipywidgets")
    board = nbxla.dashboard()
    assert board.__class__.__name__ == "VBox"
    shell.user_ns["x"] = np.arange(3.0)
    run(shell, "%%xla\ny = x + 41")
    board.dashboard.refresh()
    tab = board.children[1]
    stages_html, cache_html = (w.value for w in tab.children)
    assert "y = x + 41" in stages_html and "first compilation" in cache_html
    check_html(stages_html)
    board.dashboard.close()
