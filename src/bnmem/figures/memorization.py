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


def _has_values(curve) -> bool:
    return any(v is not None and np.isfinite(v) for v in curve)


def plot_memorization(metrics: dict, path: str | Path, title: str = "") -> None:
    """Outlier-subset accuracy vs epoch per norm (mean line, min–max band over seeds), with clean train / test
    accuracy in a second panel. On clean data (no corrupted subset) only the accuracy panel is drawn."""
    corrupted = any(_has_values(s[k]) for m in metrics.values() for s in m["per_seed"].values()
                    for k in ("noisy_acc", "ood_acc"))
    fig, axes = plt.subplots(1, 2 if corrupted else 1, figsize=(11, 4) if corrupted else (5.8, 4), squeeze=False)
    ax1, ax2 = (axes[0][0], axes[0][1]) if corrupted else (None, axes[0][0])
    for norm, m in metrics.items():
        color = NORM_COLORS.get(norm, None) or "black"
        seeds = m["per_seed"]
        if ax1 is not None:
            _band(ax1, [s["noisy_acc"] for s in seeds.values()], color, f"{norm}: noisy (flipped label)")
            _band(ax1, [s["ood_acc"] for s in seeds.values()], color, f"{norm}: OOD", "--")
        _band(ax2, [s["test_acc"] for s in seeds.values()], color, f"{norm}: test")
        _band(ax2, [s["clean_acc"] for s in seeds.values()], color, f"{norm}: clean train", ":")
    if ax1 is not None:
        ax1.set(xlabel="epoch", ylabel="accuracy on the corrupted subset", ylim=(-0.02, 1.02),
                title="memorization of corrupted samples")
    ax2.set(xlabel="epoch", ylabel="accuracy", ylim=(-0.02, 1.02),
            title="clean train / test accuracy" + ("" if corrupted else " (clean data: no corrupted subset)"))
    for ax in axes[0]:
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    save_figure(fig, path)
