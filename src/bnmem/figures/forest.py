"""The forest plot (forest.png): every claim's effect and 95% interval, one row per setting.

One small panel per claim (each on its own axis: the claims measure different
things), stacked in two columns. A row is a point and its interval, coloured by
its status; the null (or the plan's threshold) is a dashed line; where the paper
states a range, that range is shaded behind the row. Rows that do not decide
(a robustness variant, another baseline) are drawn hollow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
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


def _draw_panel(ax, panel: ForestPanel, colors: dict[str, str]) -> None:
    n = len(panel.rows)
    ys = list(range(n))[::-1]
    xs: list[float] = [panel.null]
    for y, r in zip(ys, panel.rows):
        if r.paper is not None:
            ax.fill_betweenx([y - 0.42, y + 0.42], r.paper[0], r.paper[1], color=PAPER_SHADE, alpha=0.45, lw=0)
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
    ax.set_ylim(-0.6, n - 0.4)
    ax.set_yticks(ys)
    ax.set_yticklabels([r.label for r in panel.rows], fontsize=8)
    ax.tick_params(axis="x", labelsize=7.5)
    ax.set_xlabel(panel.xlabel, fontsize=7.5, labelpad=1)
    ax.set_title(panel.title, fontsize=9.5, loc="left", fontweight="bold", pad=3)
    ax.grid(axis="x", color="#e5e5e5", lw=0.6)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def _columns(panels: list[ForestPanel]) -> list[list[ForestPanel]]:
    """Split the panels, in order, into two columns of about equal height."""
    weights = [len(p.rows) + 2.2 for p in panels]
    total, acc = sum(weights), 0.0
    for i, w in enumerate(weights):
        if acc + w / 2 > total / 2:
            return [panels[:i] or panels[:1], panels[i:] if i else panels[1:]]
        acc += w
    return [panels, []]


def plot_forest(panels: list[ForestPanel], path: str | Path, colors: dict[str, str], width: float = 14.0) -> None:
    """Draw the forest plot of ``panels`` into ``path`` (PNG).

    Args:
        panels: one per claim, in display order (empty rows: the claim shows "not run").
        path: output file.
        colors: status -> colour of its points and intervals (the legend lists those present).
        width: figure width in inches.
    """
    panels = [p if p.rows else ForestPanel(p.title, p.xlabel, p.null, p.null_label,
                                           [ForestRow("not run", None, None, None, "not run")]) for p in panels]
    cols = [c for c in _columns(panels) if c]
    height = max(sum(len(p.rows) + 2.2 for p in c) for c in cols) * 0.165 + 0.6
    fig = Figure(figsize=(width, height), layout="constrained")
    subs = fig.subfigures(1, len(cols), wspace=0.04) if len(cols) > 1 else [fig]
    for sub, col in zip(subs, cols):
        axes = sub.subplots(len(col), 1, gridspec_kw={"height_ratios": [len(p.rows) + 0.6 for p in col]},
                            squeeze=False)[:, 0]
        for ax, panel in zip(axes, col):
            _draw_panel(ax, panel, colors)
    present = list(dict.fromkeys(r.status for p in panels for r in p.rows if _finite(r.value)))
    handles = [Line2D([], [], color=colors.get(s, "#555555"), marker="o", lw=2.2, label=s) for s in present]
    handles += [Line2D([], [], color="#555555", marker="o", mfc="white", lw=0, label="not deciding"),
                Line2D([], [], color="#222222", ls="--", lw=1, label="null / threshold"),
                Patch(color=PAPER_SHADE, alpha=0.45, label="paper's range")]
    fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), fontsize=8, frameon=False)
    save_figure(fig, path, dpi=100)
