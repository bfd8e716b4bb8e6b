"""The memorization-curve figure (memorization.png)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bnmem.figures.save import NORM_COLORS, save_figure  # sets the Agg backend first

import matplotlib.pyplot as plt  # noqa: E402 - after the backend is set


def _band(ax, curves: list[list], color: str, label: str, style: str = "-") -> None:
    arr = np.array([[np.nan if v is None else v for v in c] for c in curves], dtype=float)
    if np.all(np.isnan(arr)):
        return
    epochs = np.arange(1, arr.shape[1] + 1)
    mean = np.nanmean(arr, axis=0)
    ax.plot(epochs, mean, style, color=color, label=label)
    if arr.shape[0] > 1:
        ax.fill_between(epochs, np.nanmin(arr, axis=0), np.nanmax(arr, axis=0), color=color, alpha=0.15)


def plot_memorization(metrics: dict, path: str | Path, title: str = "") -> None:
    """Outlier-subset accuracy vs epoch per norm (mean line, min–max band over seeds),
    with test accuracy in a second panel."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for norm, m in metrics.items():
        color = NORM_COLORS.get(norm, None) or "black"
        seeds = m["per_seed"]
        _band(ax1, [s["noisy_acc"] for s in seeds.values()], color, f"{norm}: noisy (flipped label)")
        _band(ax1, [s["ood_acc"] for s in seeds.values()], color, f"{norm}: OOD", "--")
        _band(ax2, [s["test_acc"] for s in seeds.values()], color, f"{norm}: test")
        _band(ax2, [s["clean_acc"] for s in seeds.values()], color, f"{norm}: clean train", ":")
    ax1.set(xlabel="epoch", ylabel="accuracy on the corrupted subset", ylim=(-0.02, 1.02),
            title="memorization of corrupted samples")
    ax2.set(xlabel="epoch", ylabel="accuracy", ylim=(-0.02, 1.02), title="clean train / test accuracy")
    if not ax1.lines:  # clean data: say so instead of drawing an empty panel
        ax1.text(0.5, 0.5, "no corrupted subset\n(clean data)", ha="center", va="center",
                 transform=ax1.transAxes, color="gray")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    save_figure(fig, path)
