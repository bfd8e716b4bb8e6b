"""The HTML page's parts that hold no claim logic: its inline CSS, escaping, PNG figures as data URIs, and tables
(:mod:`bnmem.report.html` composes the page from them)."""

from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import Any

from bnmem.report.tables import Table

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


CSS = """
body { font-family: -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif; margin: 0; color: #1d232a;
       background: #f6f7f9; line-height: 1.45; font-size: 15px; }
main { max-width: 1400px; margin: 0 auto; padding: 10px 20px 48px; background: #fff; }
header { border-bottom: 3px solid #b22b2b; margin-bottom: 18px; }
h1 { font-size: 26px; margin: 8px 0 4px; }
h2 { font-size: 20px; margin: 30px 0 8px; border-bottom: 1px solid #dde1e6; padding-bottom: 4px; }
h3 { font-size: 16px; margin: 18px 0 6px; }
.sub { color: #59636e; margin: 0 0 10px; }
nav { font-size: 14px; margin: 6px 0 12px; }
nav a { margin-right: 12px; color: #1f5fa8; text-decoration: none; }
table { border-collapse: collapse; margin: 8px 0 6px; font-size: 13.5px; width: 100%; }
th, td { border: 1px solid #d5d9de; padding: 5px 8px; vertical-align: top; text-align: left; }
th { background: #eef1f4; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.status { display: inline-block; padding: 2px 9px; border-radius: 10px; font-weight: 600; font-size: 12.5px;
          white-space: nowrap; }
.s-reproduced { background: #d3efd9; color: #14532d; border: 1px solid #7cc48f; }
.s-direction-only { background: #fdf0c9; color: #6b4a00; border: 1px solid #e2bd55; }
.s-larger-than-the-paper { background: #e4f1cf; color: #3b5208; border: 1px solid #a4c566; }
.s-smaller-than-the-paper { background: #fde2c8; color: #7a3b00; border: 1px solid #e8a76a; }
.s-inconclusive { background: #e3ecf7; color: #23456e; border: 1px solid #94b1d6; }
.s-contradicted, .s-not-reproduced { background: #fbd9d9; color: #7a1010; border: 1px solid #e48a8a; }
.s-check-passed { background: #d6eef3; color: #0b4a57; border: 1px dashed #4fa3b5; }
.s-check-failed { background: #f3dcee; color: #6a1652; border: 1px dashed #c77bb0; }
.s-not-run { background: #e6e8eb; color: #4a525a; border: 1px solid #b9bfc6; }
tr.claim td.rule { color: #4a525a; font-size: 12.5px; }
.caption { color: #4a525a; font-size: 13px; margin: 4px 0 10px; }
.note { color: #4a525a; font-size: 12.5px; }
figure { margin: 10px 0 18px; }
figure img { max-width: 100%; border: 1px solid #e1e4e8; }
figcaption { color: #4a525a; font-size: 13px; margin-top: 4px; }
.notrun { background: #f1f2f4; border-left: 4px solid #b9bfc6; padding: 8px 12px; color: #4a525a; }
.problems { background: #fff6e0; border-left: 4px solid #e0a800; padding: 2px 12px; font-size: 13px; }
details.problems > summary { color: #6b4a00; font-size: 13px; }
.cond { font-size: 13px; }
details summary { cursor: pointer; color: #1f5fa8; margin: 6px 0; }
pre { background: #f4f5f7; padding: 8px; font-size: 12px; overflow-x: auto; white-space: pre-wrap; }
table.headline { table-layout: fixed; margin-top: 2px; }
table.headline th, table.headline td { vertical-align: middle; padding: 0 6px; font-size: 12.5px; line-height: 1.15;
                                       overflow-wrap: anywhere; }
table.headline td.note { font-size: 11.5px; }
table.headline td.num { white-space: normal; }
p.legend { font-size: 11.5px; color: #4a525a; margin: 2px 0 2px; line-height: 1.55; }
p.legend .legend-item { margin-right: 10px; white-space: nowrap; }
p.legend .status { font-size: 11.5px; padding: 0 7px; }
table.headline th:nth-child(1) { width: 96px; } table.headline th:nth-child(2) { width: 28px; }
table.headline th:nth-child(3) { width: 35%; } table.headline th:nth-child(4) { width: 15%; }
table.headline th:nth-child(6) { width: 14%; }  /* the rule column, when the claims' rule histories differ */
/* a claim's second line (power, split settings) runs across the table under its row */
table.headline tr.headline-more td { border-top-style: hidden; font-size: 11px; padding: 0 6px 1px; }
@media (max-width: 760px) {  /* a phone: each claim a block of lines, its cells labelled, nothing squeezed */
  table.headline, table.headline tbody, table.headline tr, table.headline td { display: block; width: auto; }
  table.headline thead, table.headline tr.headline-more td:first-child { display: none; }
  table.headline tr.headline { border-top: 1px solid #d5d9de; padding-top: 3px; }
  table.headline td { border: none; padding: 1px 4px; }
  table.headline td:nth-child(-n+2) { display: inline-block; }
  table.headline td.num { text-align: left; }
  table.headline td[data-label]::before { content: attr(data-label) ": "; color: #59636e; }
  p.legend .legend-item { white-space: normal; }
}
table.headline .status { font-size: 12px; padding: 1px 8px; white-space: normal; }  /* long statuses wrap */
p.run-label { margin: 2px 0; font-size: 13px; }
header h1 { margin: 0 0 2px; font-size: 20px; display: inline-block; margin-right: 18px; }
header nav { display: inline-block; }
header .sub { margin: 0 0 2px; font-size: 12px; line-height: 1.3; }
header nav { margin: 0 0 2px; font-size: 13px; }
header { margin-bottom: 4px; }
#headline h2, #forest h2 { display: none; }
figure.forest { margin: 4px 0 10px; }
div.figcell { display: inline-block; width: 49.5%; vertical-align: top; }
div.figcell.wide { display: block; width: 100%; }
figure img { height: auto; }
div.figcell h3 { font-size: 13.5px; margin: 10px 0 2px; }
div.figcell figure { margin: 2px 0 8px; }
figure.forest img { width: 100%; height: auto; border: none; }
figure.forest figcaption { font-size: 11.5px; margin-top: 0; line-height: 1.3; }
details { margin: 4px 0; }
details > summary { font-weight: 600; font-size: 15px; }
details details { margin-left: 14px; }
details details > summary { font-weight: 400; font-size: 13px; }
@media print {
  body { background: #fff; font-size: 11pt; }
  main { max-width: none; padding: 0; }
  nav { display: none; }
  figure, tr, .status { break-inside: avoid; }
  table.headline tr.headline { break-after: avoid; }  /* a claim's row stays with its power and split line */
  h2, h3 { break-after: avoid; }
  a { color: inherit; text-decoration: none; }
}
footer { color: #59636e; font-size: 12.5px; margin-top: 30px; border-top: 1px solid #dde1e6; padding-top: 8px; }
"""


def esc(text: Any) -> str:
    return html.escape(str(text), quote=True)


def png_bytes(path: Path) -> bytes | None:
    """The PNG at ``path`` as a compact palette PNG (:func:`bnmem.figures.save.compact_png`); None when it is
    missing or not a PNG."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if not data.startswith(PNG_MAGIC):
        return None
    from bnmem.figures.save import FIGURE_DPI, OLD_DPI, compact_png  # matplotlib's import only when embedding

    return compact_png(data, scale=FIGURE_DPI / OLD_DPI)  # a 32-bit PNG is an older bnmem's 110-dpi figure


def png_size(data: bytes) -> tuple[int, int]:
    """(width, height) in pixels from a PNG's header."""
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def png_data_uri(path: Path) -> str | None:
    """``data:image/png;base64,...`` of a PNG file (compacted); None when it is missing or not a PNG."""
    data = png_bytes(path)
    return None if data is None else data_uri(data)


def data_uri(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


def render_table(t: Table, cls: str = "") -> str:
    """A :class:`Table` as HTML (numbers right-aligned)."""
    out = [f"<h3>{esc(t.title)}</h3>"] if t.title else []
    if t.preformatted is not None:
        out.append(f"<pre>{esc(t.preformatted)}</pre>")
        return "\n".join(out)
    if not t.rows:
        out.append('<p class="notrun">no rows: the results file lacks these fields</p>')
        return "\n".join(out)
    out.append(f'<table class="{esc(cls)}"><thead><tr>' + "".join(f"<th>{esc(h)}</th>" for h in t.header)
               + "</tr></thead><tbody>")
    for row in t.rows:
        out.append("<tr>" + "".join(_cell(c) for c in row) + "</tr>")
    out.append("</tbody></table>")
    if t.caption:
        out.append(f'<p class="caption">{esc(t.caption)}</p>')
    return "\n".join(out)


def _cell(text: str) -> str:
    s = str(text)
    looks_numeric = bool(s) and (s[0].isdigit() or s[0] in "+-−—.") and len(s) < 40
    return f'<td class="num">{esc(s)}</td>' if looks_numeric else f"<td>{esc(s)}</td>"
