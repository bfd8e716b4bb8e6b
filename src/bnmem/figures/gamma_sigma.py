"""γ/σ per BN layer over training, and every channel's final ratio."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def plot_gamma_sigma(result: dict[str, Any], path: Path, title: str = "") -> None:
    """Per layer: median |γ|/σ and fraction of channels above 1 over epochs (running σ solid,
    batch σ dashed), and the final per-channel ratios (running σ, all seeds)."""
    from matplotlib.ticker import ScalarFormatter

    import matplotlib.pyplot as plt

    from bnmem.figures.save import save_figure, tight_layout

    layers, epochs = result["layers"], result["epochs"]
    colors = plt.get_cmap("viridis")(np.linspace(0, 0.9, max(len(layers), 1)))
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(15, 4))
    for color, layer in zip(colors, layers):
        for mode, style in (("running", "-"), ("batch", "--")):
            c = result["curves"][mode][layer]
            label = f"{layer} ({mode} σ)" if mode == "running" else None
            ax1.plot(epochs, c["median_ratio"], style, color=color, label=label, marker="." if len(epochs) < 4 else None)
            ax2.plot(epochs, c["frac_above_1"], style, color=color, marker="." if len(epochs) < 4 else None)
    ax1.axhline(1.0, color="gray", lw=0.8)
    ax1.set(xlabel="epoch", ylabel="median |γ|/σ over channels", title="per-layer median |γ|/σ (dashed: batch σ)")
    ax2.set(xlabel="epoch", ylabel="fraction of channels with |γ|/σ > 1", ylim=(-0.02, 1.02),
            title="channels that amplify")
    for i, (color, layer) in enumerate(zip(colors, layers)):
        ratios = np.concatenate([s["final"]["running"]["layers"][layer]["ratio"]
                                 for s in result["per_seed"].values()])
        jitter = np.random.default_rng(i).uniform(-0.25, 0.25, ratios.size)
        ax3.scatter(i + jitter, ratios, s=6, color=color, alpha=0.6)
    ax3.axhline(1.0, color="gray", lw=0.8)
    ax3.set_yscale("log")
    # plain numbers on the log axis (the ratios span well under a decade)
    ax3.yaxis.set_major_formatter(ScalarFormatter())
    ax3.yaxis.set_minor_formatter(ScalarFormatter())
    ax3.set_xticks(range(len(layers)), layers, rotation=45, ha="right", fontsize=8)
    ax3.set(ylabel="|γ|/σ (running σ)", title=f"final epoch ({epochs[-1] if epochs else '-'}), every channel")
    for ax in (ax1, ax2, ax3):
        ax.grid(alpha=0.3)
    ax1.legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=10)
    tight_layout(fig)
    save_figure(fig, path)
