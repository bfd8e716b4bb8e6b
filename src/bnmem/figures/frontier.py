"""The privacy–utility frontier figure of the defenses lens.

One panel per example subset (all examples; the outliers when there are any):
x = clean test accuracy, y = the declared privacy risk (online LiRA AUC by
default), one point per variant with its 95% interval over replicates as bars,
and the Pareto front (:func:`bnmem.lenses.frontier.pareto_front`) drawn as a
staircase through its points. DP variants are squares labelled with their ε.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt

from bnmem.figures.save import NORM_COLORS, save_figure  # sets the Agg backend first


def plot_frontier(result: dict[str, Any], path: str | Path) -> None:
    """Draw the frontier of a defenses result (``run_defenses``'s dict) into ``path`` (PNG)."""
    from bnmem.lenses.defenses import front_points, risk_name
    from bnmem.lenses.frontier import pareto_front

    subsets = ["all"] + (["outliers"] if result["subset_sizes"].get("outliers") else [])
    fig, axes = plt.subplots(1, len(subsets), figsize=(6.2 * len(subsets), 4.6), squeeze=False)
    for ax, sub in zip(axes[0], subsets):
        pts = front_points(result, sub)
        front = pareto_front({p.name: (p.accuracy, p.risk) for p in pts})
        for p in pts:
            if p.accuracy != p.accuracy or p.risk != p.risk:  # nan: not measured
                continue
            v = result["variants"][p.name]
            color = NORM_COLORS.get(v["norm"], "black")
            if v.get("gs_lambda"):
                color = "tab:orange"
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
        ax.set(xlabel="clean test accuracy (higher is better)", ylabel=risk_name(result, sub) + " (lower is better)",
               title=f"privacy vs utility, {'all examples' if sub == 'all' else 'outliers'}")
        # Accuracy, AUC and TPR live in [0, 1]: wide intervals (few replicates) must not stretch the axes beyond.
        lo, hi = ax.get_xlim()
        ax.set_xlim(max(lo, -0.02), min(hi, 1.02))
        lo, hi = ax.get_ylim()
        ax.set_ylim(max(lo, -0.02), min(hi, 1.02))
        ax.grid(alpha=0.3)
    c = result["conditions"]
    fig.suptitle(f"{c['dataset']} {c['arch']}, label noise {c['label_noise']}, OOD {c['ood']}; "
                 f"{c['shadow_models']} shadow models, {c['replicates']} replicates (bars: 95% t-interval); "
                 "filled: on the front", fontsize=9)
    fig.tight_layout()
    save_figure(fig, path)
