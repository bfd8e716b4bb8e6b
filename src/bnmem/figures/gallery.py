"""The memorization gallery (mem_gallery.png) and the memorization-score distributions (mem_scores.png)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from bnmem.figures.save import NORM_COLORS, save_figure  # sets the Agg backend first

import matplotlib.pyplot as plt  # noqa: E402 - after the backend is set


def to_display(images: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """Normalized NCHW images back to [0, 1] pixels, NHWC (grey images keep one channel)."""
    x = np.asarray(images, dtype=np.float64) * np.asarray(std).reshape(1, -1, 1, 1)
    x = x + np.asarray(mean).reshape(1, -1, 1, 1)
    return np.clip(x, 0.0, 1.0).transpose(0, 2, 3, 1)


def plot_gallery(rows: dict[str, Sequence[tuple[np.ndarray, str]]], path: str | Path, title: str = "") -> None:
    """One row per norm: its most-memorized examples, each image with a caption.

    Args:
        rows: norm -> [(image HWC in [0, 1], caption), ...] (most memorized first).
        path: output file.
        title: figure title.
    """
    ncols = max((len(r) for r in rows.values()), default=1) or 1
    fig, axes = plt.subplots(len(rows) or 1, ncols, figsize=(1.6 * ncols, 2.0 * max(1, len(rows))), squeeze=False)
    for r, (norm, items) in enumerate(rows.items()):
        for c in range(ncols):
            ax = axes[r, c]
            ax.set_xticks([])
            ax.set_yticks([])
            if c >= len(items):
                ax.axis("off")
                continue
            img, caption = items[c]
            ax.imshow(img[..., 0] if img.shape[-1] == 1 else img, cmap="gray" if img.shape[-1] == 1 else None)
            ax.set_title(caption, fontsize=7)
        axes[r, 0].set_ylabel(norm, fontsize=9, color=NORM_COLORS.get(norm, "black"))
    if title:
        fig.suptitle(title, fontsize=9, y=1.03)
    save_figure(fig, path)


def plot_mem_distributions(scores: dict[str, dict[str, np.ndarray]], path: str | Path, title: str = "") -> None:
    """Histogram of memorization scores per subset (panels), one colour per norm.

    Args:
        scores: subset -> norm -> [n] scores of that subset's examples.
        path: output file.
        title: figure title.
    """
    subs = [s for s, per in scores.items() if any(np.isfinite(v).any() for v in per.values())]
    fig, axes = plt.subplots(1, max(1, len(subs)), figsize=(3.6 * max(1, len(subs)), 3.0), squeeze=False)
    bins = np.linspace(-1.0, 1.0, 41)
    for ax, sub in zip(axes[0], subs):
        for norm, v in scores[sub].items():
            v = v[np.isfinite(v)]
            ax.hist(v, bins=bins, histtype="step", density=True, color=NORM_COLORS.get(norm, "black"),
                    label=f"{norm} (n={v.size}, mean {v.mean():+.2f})" if v.size else norm)
        ax.axvline(0.5, color="grey", lw=0.8, ls=":")
        ax.set(title=sub, xlabel="memorization score", ylabel="density")
        ax.legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=9, y=1.03)
    save_figure(fig, path)
