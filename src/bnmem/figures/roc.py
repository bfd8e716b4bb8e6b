"""Log-log ROC figures of membership-inference attacks.

Low false-positive rates are what matter for membership inference (Carlini et
al. 2022), so both axes are logarithmic from 1e-5 to 1; the dashed diagonal is
a random guess. Several curves share one panel (e.g. BN vs no-BN for one
attack), or several panels share one figure.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, NullLocator

from bnmem.errors import BnmemError
from bnmem.figures.save import FIGURE_DPI, save_figure, tight_layout

Curve = tuple[Sequence[float], Sequence[float]]
AXIS_MIN = 1e-5
DECADES = np.logspace(-5, 0, 6)  # the panels' major ticks, AXIS_MIN to 1


def _loggable(fpr: np.ndarray, tpr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Move zeros, which log axes cannot show, just outside the visible range.

    A ROC curve that leaves (0, 0) along a straight segment (tied scores) is
    the line tpr = (b/a)·fpr, a line of slope 1 on log-log axes; the origin is
    replaced by a point on that line below the axis floor, so the segment is
    drawn where it really runs instead of fanning out from the corner. Other
    zeros (a vertical start at FPR 0, a flat start at TPR 0) are moved to the
    same floor, so they enter from the panel's edge.
    """
    floor = AXIS_MIN / 10.0
    fpr, tpr = fpr.copy(), tpr.copy()
    if fpr.size >= 2 and fpr[0] == 0 and tpr[0] == 0 and fpr[1] > 0 and tpr[1] > 0:
        t = floor / min(fpr[1], tpr[1])
        fpr[0], tpr[0] = t * fpr[1], t * tpr[1]
    return np.maximum(fpr, floor), np.maximum(tpr, floor)


def log_decades(ax: Axes) -> None:
    """Log scales on both axes of ``ax``, a fixed tick at each decade of the panel and no minor ticks.

    Matplotlib's automatic log locator places (and measures, at every layout pass) eight minor ticks
    per decade; the decades are what a reader reads, and the grid is drawn at them only.
    """
    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(FixedLocator(DECADES))
        axis.set_minor_locator(NullLocator())


def _draw_panel(ax, curves: Mapping[str, Curve], title: str) -> None:
    ax.plot([AXIS_MIN, 1.0], [AXIS_MIN, 1.0], ls="--", color="gray", lw=0.8)
    for label, (fpr, tpr) in curves.items():
        fpr = np.asarray(fpr, dtype=np.float64)
        tpr = np.asarray(tpr, dtype=np.float64)
        if fpr.shape != tpr.shape:
            raise BnmemError(f"curve {label!r}: fpr {fpr.shape} and tpr {tpr.shape} differ in shape")
        if fpr.size == 0:
            continue  # a subset without both classes has no curve
        fpr, tpr = _loggable(fpr, tpr)
        ax.plot(fpr, tpr, label=label, lw=1.2)
    log_decades(ax)
    ax.set_xlim(AXIS_MIN, 1.0)
    ax.set_ylim(AXIS_MIN, 1.0)
    ax.set_xlabel("False positive rate")
    ax.set_ylabel("True positive rate")
    ax.grid(alpha=0.3, which="major")
    if title:
        ax.set_title(title, fontsize=10)
    if curves:
        ax.legend(fontsize=7, loc="lower right")


def _save(fig: Figure, path: str | Path, dpi: int = 130) -> None:
    save_figure(fig, path, dpi=dpi)


def plot_roc(curves: Mapping[str, Curve], path: str | Path, title: str = "") -> None:
    """One log-log ROC panel with a line per curve, saved atomically.

    Args:
        curves: label -> ``(fpr, tpr)`` (e.g. ``"BN (AUC 0.62)" -> curve``).
        path: output file; its suffix picks the format (png, pdf, svg).
        title: panel title.

    Raises:
        BnmemError: a curve's fpr and tpr differ in shape, or the path is not writable.
    """
    fig = Figure(figsize=(4.2, 3.6))
    _draw_panel(fig.add_subplot(1, 1, 1), curves, title)
    _save(fig, path)


def plot_roc_panels(
    panels: Mapping[str, Mapping[str, Curve]], path: str | Path, title: str = "", ncols: int = 3
) -> None:
    """Several log-log ROC panels (e.g. one per attack) in one figure, saved atomically.

    Args:
        panels: panel title -> {label -> ``(fpr, tpr)``}.
        path: output file; its suffix picks the format.
        title: figure title.
        ncols: panels per row.

    Raises:
        BnmemError: no panels, mismatched curve shapes, or an unwritable path.
    """
    if not panels:
        raise BnmemError("plot_roc_panels needs at least one panel")
    ncols = max(1, min(ncols, len(panels)))
    nrows = -(-len(panels) // ncols)
    fig = Figure(figsize=(4.0 * ncols, 3.5 * nrows))
    for i, (panel_title, curves) in enumerate(panels.items()):
        _draw_panel(fig.add_subplot(nrows, ncols, i + 1), curves, panel_title)
    if title:
        fig.suptitle(title, fontsize=11)
    tight_layout(fig)
    _save(fig, path, dpi=FIGURE_DPI)  # many panels: the figures' common resolution


def plot_lira_roc(entries: Mapping[str, Mapping[str, Any]], path: str | Path, attacks: Sequence[str],
                  title: str = "") -> None:
    """The lira lens's ROC figure: one log-log panel per attack, every norm's pooled curve on all examples
    and on the outliers (a subset without both members and non-members has no curve).

    Args:
        entries: norm -> its lira entry (``attacks`` metrics and ``curves``, as the lens writes them).
        path: the figure file.
        attacks: the attacks to draw, one panel each.
        title: the figure's title (its conditions).
    """
    panels = {}
    for attack in attacks:
        curves = {}
        for norm, e in entries.items():
            for sub in ("all", "outliers"):
                auc = e["attacks"][attack][sub]["auc"]
                if e["curves"][attack][sub]["pooled"][0].size:
                    curves[f"{norm}, {sub} (mean AUC {auc:.3f})"] = e["curves"][attack][sub]["pooled"]
        panels[attack] = curves
    plot_roc_panels(panels, path, title=title, ncols=4)
