"""The privacy–utility frontier figure of the defenses lens.

One panel per example subset (all examples; the outliers when there are any):
x = clean test accuracy, y = the declared privacy risk (online LiRA AUC by
default), one point per variant with its 95% interval over replicates as bars,
and the Pareto front (computed by the lens) drawn as a
staircase through its points. DP variants are squares labelled with their ε;
variants with the γ/σ regularizer are orange, the others in their norm's colour.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt

from bnmem.figures.save import NORM_COLORS, save_figure, tight_layout  # sets the Agg backend first


def plot_frontier(panels: list[dict[str, Any]], path: str | Path, title: str = "") -> None:
    """Draw frontier panels into ``path`` (PNG).

    Args:
        panels: one dict per panel: ``title``, ``risk_label``, ``points`` (objects with ``name``,
            ``accuracy``, ``risk``, ``accuracy_ci``, ``risk_ci``, ``epsilon``), ``front`` (names on the
            Pareto front, most accurate first), ``norms`` (name -> norm) and ``regularized`` (the names
            trained with the γ/σ regularizer).
        path: the figure file.
        title: the figure's title (its conditions).
    """
    fig, axes = plt.subplots(1, len(panels), figsize=(6.2 * len(panels), 4.6), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        pts, front = panel["points"], panel["front"]
        for p in pts:
            if p.accuracy != p.accuracy or p.risk != p.risk:  # nan: not measured
                continue
            color = ("tab:orange" if p.name in panel["regularized"]
                     else NORM_COLORS.get(panel["norms"][p.name], "black"))
            xerr = None if p.accuracy_ci is None else [[p.accuracy - p.accuracy_ci[0]], [p.accuracy_ci[1] - p.accuracy]]
            yerr = None if p.risk_ci is None else [[p.risk - p.risk_ci[0]], [p.risk_ci[1] - p.risk]]
            ax.errorbar(p.accuracy, p.risk, xerr=xerr, yerr=yerr, fmt="s" if p.epsilon is not None else "o",
                        color=color, mfc=color if p.name in front else "white", ms=8, capsize=3)
            label = p.name if p.epsilon is None else f"{p.name} (ε={p.epsilon:.2g})"
            ax.annotate(label, (p.accuracy, p.risk), textcoords="offset points", xytext=(6, 5), fontsize=8)
        if front:
            by = {p.name: p for p in pts}
            xs, ys = [], []
            # Staircase from the most accurate to the least risky front point.
            for i, n in enumerate(front):
                if i:
                    xs.append(by[n].accuracy)
                    ys.append(ys[-1])
                xs.append(by[n].accuracy)
                ys.append(by[n].risk)
            ax.plot(xs, ys, color="gray", lw=1.2, ls="--", zorder=0, label="Pareto front (means)")
            ax.legend(fontsize=8, loc="best")
        ax.set(xlabel="clean test accuracy (higher is better)", ylabel=panel["risk_label"] + " (lower is better)",
               title=panel["title"])
        # Accuracy, AUC and TPR live in [0, 1]: wide intervals (few replicates) must not stretch the axes beyond.
        lo, hi = ax.get_xlim()
        ax.set_xlim(max(lo, -0.02), min(hi, 1.02))
        lo, hi = ax.get_ylim()
        ax.set_ylim(max(lo, -0.02), min(hi, 1.02))
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title, fontsize=9)
    tight_layout(fig)
    save_figure(fig, path)
