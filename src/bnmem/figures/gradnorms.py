"""Per-sample gradient-norm ECDFs per checkpoint, norm and subset."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

# Subsets drawn, each with its own line style.
SUBSETS = ("clean", "noisy", "ood")


def plot_gradnorms(arr: np.ndarray, cfg: Any, ds: Any, path: Path) -> None:
    """ECDFs of the norms on a log axis: one panel per (definition, checkpoint), colour = norm,
    line style = subset (clean solid, noisy dashed, OOD dotted); seeds pooled."""
    from matplotlib.ticker import NullFormatter, NullLocator

    import matplotlib.pyplot as plt

    from bnmem.figures.save import NORM_COLORS, save_figure, tight_layout

    styles = {"clean": "-", "noisy": "--", "ood": ":"}
    rows, cols = len(cfg.definitions), len(cfg.at)
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 3.0 * rows), squeeze=False, sharey=True)
    masks = ds.masks()
    for k, d in enumerate(cfg.definitions):
        for c, epoch in enumerate(cfg.at):
            ax = axes[k][c]
            for i, norm in enumerate(cfg.norms):
                for s in SUBSETS:
                    v = arr[i, :, k, c][:, masks[s]].ravel()
                    v = np.sort(v[np.isfinite(v) & (v > 0)])
                    if v.size == 0:
                        continue
                    ax.step(v, np.arange(1, v.size + 1) / v.size, styles[s], where="post",
                            color=NORM_COLORS.get(norm, "black"), label=f"{norm}: {s}")
            ax.set_xscale("log")
            # A narrow range gets labelled minor ticks that overlap; decades are enough. Unlabelled minor
            # ticks are left out too: placing and measuring them was most of the figure's drawing time.
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.xaxis.set_minor_locator(NullLocator())
            ax.set(title=f"epoch {epoch}, {d} definition", xlabel="‖∇θ loss_i‖₂")
            ax.grid(alpha=0.3)
            if c == 0:
                ax.set_ylabel("fraction of examples ≤ x")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(f"per-sample gradient norms (float64): {cfg.data.dataset} {cfg.arch}, label noise "
                 f"{cfg.data.label_noise}, OOD {cfg.data.ood}, seeds {cfg.seeds}", fontsize=10)
    tight_layout(fig)
    save_figure(fig, path)
