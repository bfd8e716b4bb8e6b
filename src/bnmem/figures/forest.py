"""The forest plot (forest.png): every claim's effect and 95% interval, one row per setting.

One small panel per claim (each on its own axis: the claims measure different
things), stacked in columns (each panel sized by its rows). A row is a point and its interval, coloured by
its status; the null (or the plan's threshold) is a dashed line; where the paper
states a range, that range is shaded behind the row. Rows that do not decide
(a robustness variant, another baseline) are drawn hollow. The legend sits under the column of panels with the
most room when it fits there, else in a row under the figure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

from bnmem.figures.save import save_figure  # sets the Agg backend first

from matplotlib.figure import Figure  # noqa: E402 - after the backend is set
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

PAPER_SHADE = "#8fd19e"


@dataclass
class ForestRow:
    """One estimate: label, value, 95% interval (None: no interval), status, and the paper's range."""

    label: str
    value: float | None
    low: float | None
    high: float | None
    status: str
    deciding: bool = True
    paper: tuple[float, float] | None = None


@dataclass
class ForestPanel:
    """One claim: its rows on one axis, the null (or threshold) line and the axis label."""

    title: str
    xlabel: str
    null: float
    null_label: str = "no effect"
    rows: list[ForestRow] = field(default_factory=list)


def _finite(v: float | None) -> bool:
    return v is not None and math.isfinite(v)


def _draw_panel(ax, panel: ForestPanel, colors: dict[str, str], labels: list[str]) -> None:
    """One claim's rows; ``labels`` are the row labels, wrapped (a label of k lines takes k row heights)."""
    units = [label.count("\n") + 1 for label in labels]
    total = sum(units)
    ys, top = [], float(total)
    for u in units:  # row centres, top to bottom
        ys.append(top - u / 2)
        top -= u
    xs: list[float] = [panel.null]
    for y, u, r in zip(ys, units, panel.rows):
        if r.paper is not None:
            half = u / 2 - 0.08
            ax.fill_betweenx([y - half, y + half], r.paper[0], r.paper[1], color=PAPER_SHADE, alpha=0.45, lw=0)
            xs += list(r.paper)
        if not _finite(r.value):
            ax.text(panel.null, y, "  not run", va="center", fontsize=7, color="#777777")
            continue
        c = colors.get(r.status, "#555555")
        if _finite(r.low) and _finite(r.high):
            ax.plot([r.low, r.high], [y, y], color=c, lw=2.2, solid_capstyle="butt")
            xs += [r.low, r.high]
        ax.plot([r.value], [y], "o", ms=6, color=c, mfc=c if r.deciding else "white", mew=1.6)
        xs.append(r.value)
    ax.axvline(panel.null, color="#222222", ls="--", lw=1)
    lo, hi = min(xs), max(xs)
    pad = 0.08 * (hi - lo) if hi > lo else 0.05 * (abs(lo) or 1.0)
    ax.set_xlim(lo - pad, hi + pad)
    ax.set_ylim(-0.1, total + 0.1)
    ax.set_yticks(ys)
    ax.set_yticklabels(labels, fontsize=LABEL_PT, linespacing=1.0)
    ax.tick_params(axis="x", labelsize=7, pad=1.5)
    ax.tick_params(axis="y", length=2, pad=2)
    ax.set_xlabel(panel.xlabel, fontsize=AXIS_PT, labelpad=1, linespacing=1.0)
    ax.grid(axis="x", color="#e5e5e5", lw=0.6)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


# Layout in inches: every panel gets room for its wrapped title, its rows and its x axis, so labels never
# overlap however many rows a claim has.
ROW_H = 0.13  # per row (labels at 7.5 pt)
TITLE_LINE_H = 0.16  # per line of the panel title (9 pt bold)
AXIS_H = 0.31  # tick labels and the x label
GAP_H = 0.05
LEGEND_H = 0.32  # the legend in one row under the figure
LEGEND_ROW_H = 0.18  # per row of entries of a legend in columns (8 pt)
LEGEND_PT = 8.0
LEGEND_KW = {"handlelength": 1.6, "handletextpad": 0.6, "columnspacing": 1.2}  # a legend in a column, in em
LABEL_PT, TITLE_PT, AXIS_PT = 7.5, 9.0, 7.0
XLABEL_LINE_H = 0.11  # per extra line of a wrapped x label


@lru_cache(maxsize=4096)
def _text_width(text: str, size: float, bold: bool = False) -> float:
    """Width in inches of ``text`` drawn at ``size`` points (matplotlib's own font metrics).

    Cached: laying out a forest wraps each label and title more than once (~900 calls, ~300 distinct
    strings in the demo's report), and each call lays the glyphs out anew (~3 ms)."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextToPath

    prop = FontProperties(size=size, weight="bold" if bold else "normal")
    return TextToPath().get_text_width_height_descent(text, prop, ismath=False)[0] / 72.0


def _wrap(text: str, width_in: float, size: float = TITLE_PT, bold: bool = True) -> list[str]:
    """``text`` wrapped at word boundaries into lines no wider than ``width_in`` (a longer word stays whole)."""
    lines: list[str] = []
    for word in text.split():
        if lines and _text_width(f"{lines[-1]} {word}", size, bold=bold) <= width_in:
            lines[-1] += f" {word}"
        else:
            lines.append(word)
    return lines or [""]


def _row_labels(panel: ForestPanel, width_in: float) -> list[str]:
    return ["\n".join(_wrap(r.label, width_in, LABEL_PT, bold=False)) for r in panel.rows]


def _ran(panel: ForestPanel) -> bool:
    return any(_finite(r.value) for r in panel.rows)


def _panel_height(panel: ForestPanel, width_in: float, label_in: float, axis_in: float) -> float:
    """Inches: the wrapped title, the rows and the x axis (its label wrapped to ``axis_in``); a claim that did
    not run: its title and one line."""
    title = len(_wrap(panel.title, width_in)) * TITLE_LINE_H
    if not _ran(panel):
        return title + ROW_H + GAP_H
    rows = sum(label.count("\n") + 1 for label in _row_labels(panel, label_in))
    xlabel = len(_wrap(panel.xlabel, axis_in, AXIS_PT, bold=False)) - 1
    return title + rows * ROW_H + AXIS_H + xlabel * XLABEL_LINE_H + GAP_H


def _columns(panels: list[ForestPanel], ncols: int, heights: list[float]) -> list[list[ForestPanel]]:
    """Split the panels, in order, into at most ``ncols`` contiguous columns with the lowest tallest column."""

    def best(i: int, k: int) -> tuple[float, list[int]]:
        # (tallest column, column sizes) for panels[i:] in k columns
        if k == 1 or len(panels) - i <= 1:
            return sum(heights[i:]), [len(panels) - i]
        out: tuple[float, list[int]] = (float("inf"), [])
        for j in range(i + 1, len(panels)):
            rest, sizes = best(j, k - 1)
            cand = max(sum(heights[i:j]), rest)
            if cand < out[0]:
                out = (cand, [j - i, *sizes])
        return out

    cols, i = [], 0
    for n in best(0, max(1, min(ncols, len(panels))))[1]:
        cols.append(panels[i:i + n])
        i += n
    return cols


def plot_forest(panels: list[ForestPanel], path: str | Path, colors: dict[str, str], width: float = 17.0,
                ncols: int = 3, note: str = "") -> None:
    """Draw the forest plot of ``panels`` into ``path`` (PNG).

    Args:
        panels: one per claim, in display order (empty rows: the claim shows "not run").
        path: output file.
        colors: status -> colour of its points and intervals (the legend lists those present).
        width: figure width in inches.
        ncols: columns of panels (fewer when there are fewer panels).
        note: a last legend entry (e.g. what every row shares and its label leaves out).
    """
    save_figure(forest_figure(panels, colors, width, ncols, note), path, dpi=100)


def forest_figure(panels: list[ForestPanel], colors: dict[str, str], width: float = 17.0, ncols: int = 3,
                  note: str = "") -> Figure:
    """The figure :func:`plot_forest` writes (same arguments, no path)."""
    panels = [p if p.rows else ForestPanel(p.title, p.xlabel, p.null, p.null_label,
                                           [ForestRow("not run", None, None, None, "not run")]) for p in panels]
    ncols = max(1, min(ncols, len(panels)))
    col_w = width / ncols
    # Row labels take at most half a column; a longer one wraps onto more lines (and rows).
    label_in = min(0.5 * col_w, max(_text_width(r.label, LABEL_PT) for p in panels for r in p.rows))
    label_w = max(_text_width(line, LABEL_PT) for p in panels for lab in _row_labels(p, label_in)
                  for line in lab.split("\n")) + 0.12
    w = col_w - label_w - 0.3  # the axes' width
    heights = {id(p): _panel_height(p, col_w - 0.4, label_in, w) for p in panels}
    cols = _columns(panels, ncols, [heights[id(p)] for p in panels])
    handles = _legend_handles(panels, colors, note)
    col_h = [sum(heights[id(p)] for p in c) for c in cols]
    # The legend goes, in two columns of entries, under the column of panels with the most room when it fits
    # there (the figure is no taller than its panels); else in one row under the whole figure.
    roomy = max(range(len(cols)), key=lambda k: max(col_h) - col_h[k])
    in_column = (max(col_h) - col_h[roomy] >= _legend_height(handles, 2)
                 and _legend_width(handles, 2) <= col_w - 0.1)
    height = max(col_h) + (0 if in_column else LEGEND_H)
    fig = Figure(figsize=(width, height))
    for k, col in enumerate(cols):
        x0 = k * col_w + label_w
        top = height
        for panel in col:
            lines = _wrap(panel.title, col_w - 0.4)
            labels = _row_labels(panel, label_in)
            h = sum(lab.count("\n") + 1 for lab in labels) * ROW_H
            top -= len(lines) * TITLE_LINE_H
            fig.text((k * col_w + 0.05) / width, top / height, "\n".join(lines), fontsize=TITLE_PT, fontweight="bold",
                     va="bottom", ha="left", linespacing=1.05)
            if not _ran(panel):  # no axis to draw: say so under the title
                fig.text((k * col_w + 0.2) / width, (top - ROW_H / 2) / height, "not run", fontsize=LABEL_PT,
                         color="#777777", va="center")
                top -= ROW_H + GAP_H
                continue
            ax = fig.add_axes([x0 / width, (top - h) / height, w / width, h / height])
            xlabel = _wrap(panel.xlabel, w, AXIS_PT, bold=False)
            _draw_panel(ax, replace(panel, xlabel="\n".join(xlabel)), colors, labels)
            top -= h + AXIS_H + (len(xlabel) - 1) * XLABEL_LINE_H + GAP_H
    if in_column:
        fig.legend(handles=handles, loc="lower left", bbox_to_anchor=((roomy * col_w + 0.05) / width, 0.0), ncols=2,
                   fontsize=LEGEND_PT, frameon=False, borderaxespad=0.0, **LEGEND_KW)
    else:
        fig.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 0.0), ncols=len(handles),
                   fontsize=LEGEND_PT, frameon=False)
    return fig


def _legend_handles(panels: list[ForestPanel], colors: dict[str, str], note: str) -> list:
    """The legend's entries: each status drawn, hollow points, the null line, the paper's shading, ``note``."""
    present = list(dict.fromkeys(r.status for p in panels for r in p.rows if _finite(r.value)))
    handles = [Line2D([], [], color=colors.get(s, "#555555"), marker="o", lw=2.2, label=s) for s in present]
    handles += [Line2D([], [], color="#555555", marker="o", mfc="white", lw=0, label="not deciding"),
                Line2D([], [], color="#222222", ls="--", lw=1, label="null / threshold"),
                Patch(color=PAPER_SHADE, alpha=0.45, label="paper's range")]
    if note:
        handles.append(Line2D([], [], lw=0, label=note))
    return handles


def _legend_height(handles: list, ncols: int) -> float:
    """Inches a legend of ``handles`` in ``ncols`` columns takes (matplotlib's default spacing at LEGEND_PT)."""
    return math.ceil(len(handles) / ncols) * LEGEND_ROW_H + 0.1


def _legend_width(handles: list, ncols: int) -> float:
    """Inches a legend of ``handles`` in ``ncols`` columns takes (matplotlib fills it column by column): per
    column the handle and its pad (:data:`LEGEND_KW`) and the widest label, and the space between columns."""
    em = LEGEND_PT / 72
    per = math.ceil(len(handles) / ncols)
    widest = [max(_text_width(h.get_label(), LEGEND_PT) for h in handles[k:k + per])
              for k in range(0, len(handles), per)]
    return sum(widest) + len(widest) * (LEGEND_KW["handlelength"] + LEGEND_KW["handletextpad"]) * em \
        + (len(widest) - 1) * LEGEND_KW["columnspacing"] * em + 0.15
