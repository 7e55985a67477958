"""Small HTML building blocks for the notebook views: escaping, highlighted HLO, inline images.

Every view is self-contained HTML with inline ``style`` attributes only: no ``<style>`` block,
no JavaScript, no external resources.  That is what survives the sanitizers of JupyterLab
(untrusted notebooks), GitHub and nbconvert, and what renders the same in VS Code and Colab.
Collapsible sections are ``<details>``, which needs no script either.

All text that comes from users or from HLO (instruction names, metadata strings, file names)
goes through ``esc``: HLO read from a file must never be able to inject markup.
"""

from __future__ import annotations

import base64
import html
import re

from pygments.token import Comment, Keyword, Name, Number, String

from .hlo_lexer import HloLexer

FONT = "font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; font-size: 13px;"
MONO = ("font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; "
        "font-size: 12px; line-height: 1.45;")
PRE = (MONO + " margin: 0; padding: 6px 8px; background: #f8f8f8; border: 1px solid #e4e4e4; "
       "border-radius: 4px; overflow: auto; max-height: 32em; white-space: pre; color: #222;")
MUTED = "color: #666;"

# One background per kernel, light enough for dark text; repeats after eight kernels.
KERNEL_COLORS = ("#cfe8ff", "#d5f5d0", "#ffe1c2", "#ecd9ff", "#fff3b0", "#ffd6e0", "#c9f2ef",
                 "#e3e3e3")

_TOKEN_STYLES = [           # most specific first; names and punctuation stay default black
    (Comment, "color:#6a737d;font-style:italic"),
    (Keyword.Type, "color:#005cc5"),
    (Keyword, "color:#d73a49;font-weight:bold"),
    (Name.Function, "color:#6f42c1;font-weight:bold"),
    (Name.Attribute, "color:#b35900"),
    (Name.Constant, "color:#22863a"),
    (String, "color:#032f62"),
    (Number, "color:#098658"),
]


def esc(text) -> str:
    """HTML-escape text, quotes included (safe in element content and attribute values)."""
    return html.escape(str(text), quote=True)


def _style_of(token) -> str | None:
    for kind, style in _TOKEN_STYLES:
        if token in kind:
            return style
    return None


def highlight_hlo_lines(text: str) -> list[str]:
    """HLO text as a list of HTML lines (one per text line), tokens styled inline.

    Adjacent tokens of the same style share one ``<span>``: highlighted HLO stays about
    three times the size of the text, not ten.
    """
    lines: list[str] = []
    current: list[tuple[str | None, str]] = []      # (style, text) runs of the current line

    def flush():
        lines.append("".join(f'<span style="{st}">{esc(t)}</span>' if st else esc(t)
                             for st, t in current))
        current.clear()

    for token, value in HloLexer(stripnl=False, ensurenl=False).get_tokens(text):
        style = None if value.isspace() else _style_of(token)
        for i, piece in enumerate(value.split("\n")):
            if i:
                flush()
            if not piece:
                continue
            if current and current[-1][0] == style:
                current[-1] = (style, current[-1][1] + piece)
            else:
                current.append((style, piece))
    flush()
    return lines


def pre(inner_html: str, extra_style: str = "") -> str:
    return f'<pre style="{PRE}{extra_style}">{inner_html}</pre>'


def plain_pre(text: str) -> str:
    return pre(esc(text))


def details(summary_html: str, body_html: str, open_: bool = False) -> str:
    """A collapsible section (``<details>``): works without CSS or script, nests fine."""
    return (f'<details{" open" if open_ else ""} style="margin: 4px 0;">'
            f'<summary style="cursor: pointer; font-weight: 600; padding: 2px 0;">{summary_html}</summary>'
            f'<div style="margin: 4px 0 8px 14px;">{body_html}</div></details>')


def table(header: list[str], rows: list[list[str]], numeric: set[int] = frozenset()) -> str:
    """An HTML table; cells are HTML already (escape before), columns in ``numeric`` right-aligned."""
    cell = "padding: 3px 8px; border-bottom: 1px solid #e4e4e4; vertical-align: top;"
    head = "".join(f'<th style="{cell} text-align: {"right" if i in numeric else "left"}; '
                   f'border-bottom: 2px solid #bbb;">{h}</th>' for i, h in enumerate(header))
    body = "".join(
        "<tr>" + "".join(f'<td style="{cell} text-align: {"right" if i in numeric else "left"};">{c}</td>'
                         for i, c in enumerate(row)) + "</tr>"
        for row in rows)
    return (f'<table style="border-collapse: collapse; {FONT}">'
            f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")


def img_data_uri(data: bytes, mime: str, alt: str, style: str = "max-width: 100%;") -> str:
    """An ``<img>`` carrying its picture inline (a data URI): no file, no network, no script.

    SVG shown this way cannot run script or inject markup into the page, whatever its text.
    """
    b64 = base64.b64encode(data).decode("ascii")
    return f'<img src="data:{mime};base64,{b64}" alt="{esc(alt)}" style="{style}"/>'


def container(inner_html: str) -> str:
    return f'<div style="{FONT} color: #222; max-width: 100%;">{inner_html}</div>'


def _in_thousands(n: float, units: tuple[str, ...], space: str) -> str:
    """``n`` in the largest of ``units`` (steps of 1000) that keeps it under 1000."""
    if abs(n) < 1000:
        return f"{n:.0f}{space}{units[0]}"
    for unit in units[1:]:
        n /= 1000
        if abs(n) < 1000 or unit == units[-1]:
            return f"{n:.3g}{space}{unit}"


def human_bytes(n: float) -> str:
    return _in_thousands(n, ("B", "KB", "MB", "GB"), " ")


def human_count(n: float) -> str:
    return _in_thousands(n, ("", "K", "M", "G"), "")


def human_ms(ms: float) -> str:
    if ms >= 1000:
        return f"{ms / 1000:.3g} s"
    if ms >= 0.1:
        return f"{ms:.3g} ms"
    return f"{ms * 1000:.3g} µs"


_INSTR_NAME = re.compile(r"^\s*(?:ROOT\s+)?%([\w.\-]+)\s*=")
_COMP_HEADER = re.compile(r"^\s*(?:ENTRY\s+)?%([\w.\-]+)\s*\(.*\{\s*$")


def hlo_line_owner(line: str) -> tuple[str | None, str | None]:
    """(instruction name, computation name) that a line of HLO text defines, if any."""
    m = _INSTR_NAME.match(line)
    if m:
        return m.group(1), None
    m = _COMP_HEADER.match(line)
    return (None, m.group(1)) if m else (None, None)
