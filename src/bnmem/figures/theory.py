"""The toy-model figure (theory.png)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from bnmem.figures.save import save_figure, tight_layout

import matplotlib.pyplot as plt  # noqa: E402 - after save set the Agg backend


def plot_theory(
    sim: dict[str, Any],
    summary: dict[str, Any],
    counterfactual: dict[str, dict[int, dict[str, np.ndarray]]],
    path: str | Path,
) -> None:
    """Six panels, saved atomically: the w-only amplification (frozen = derivation check, live),
    outlier margins, γ with/without outliers, the first-order error against the probe
    learning rate, and claim 5b's counterfactual (ratio per step, and against (γ/σ)²).

    Args:
        sim: :func:`bnmem.theory.simulate` arrays (main seed).
        summary: :func:`bnmem.theory.summarize` of ``sim``.
        counterfactual: ``{kind: {seed: counterfactual_run arrays}}``.
        path: the PNG to write.
    """
    steps = sim["steps"]
    fig, axes = plt.subplots(2, 3, figsize=(18, 8.5))
    ax = axes[0, 0]
    amp = sim["amp_pred"]
    every = max(1, len(steps) // 40)  # markers every few steps so the lines stay visible
    ax.plot(steps, amp, "-", color="tab:red", lw=1.5, label="predicted (γ/σ)²")
    ax.plot(steps[::every], np.median(sim["ratio_frozen"], 1)[::every], "o", ms=4, mfc="none",
            color="tab:red", label="measured, stats frozen (derivation check)")
    ax.plot(steps, np.median(amp[:, None] * sim["rho"], 1), "-", color="tab:green", lw=1.5,
            label="predicted (γ/σ)²·ρ (stats move)")
    ax.plot(steps[::every], np.median(sim["ratio_live"], 1)[::every], "x", ms=4, color="tab:green",
            label="measured, real BN step on w")
    ax.plot(steps, np.median(sim["ratio_full"], 1), ":", color="tab:gray", label="measured, all params stepped")
    ax.set_yscale("symlog", linthresh=1.0)
    ax.set(xlabel="step", ylabel="Δm_BN / Δm_no-norm per step (median over outliers)",
           title="step on w only: BN vs matched no-norm (old 5a / 5b)")

    ax = axes[0, 1]
    for j in range(sim["margin_bn"].shape[1]):
        ax.plot(steps, sim["margin_bn"][:, j], color="tab:red", alpha=0.3, lw=0.8)
        ax.plot(steps, sim["margin_plain"][:, j], color="tab:blue", alpha=0.3, lw=0.8)
    ax.plot(steps, sim["margin_bn"].mean(1), color="tab:red", lw=2, label="BN (mean over outliers)")
    ax.plot(steps, sim["margin_plain"].mean(1), color="tab:blue", lw=2, label="no norm (mean)")
    ax.axhline(0, color="k", lw=0.5)
    ax.set(xlabel="step", ylabel="outlier margin m", title="outlier margins over training")

    ax = axes[1, 0]
    ax.plot(steps, sim["gamma"], color="tab:red", lw=2, label="γ, with outliers")
    ax.plot(steps, sim["gamma_control"], color="tab:orange", lw=2, label="γ, outliers replaced by clean")
    ax2 = ax.twinx()
    ax2.plot(steps, sim["gamma"] / sim["sigma"], "--", color="tab:red", label="γ/σ, with outliers")
    ax2.plot(steps, sim["gamma_control"] / sim["sigma_control"], "--", color="tab:orange",
             label="γ/σ, without")
    ax2.set_ylabel("γ/σ (dashed)")
    ax.set(xlabel="step", ylabel="γ (solid)", title="BN scale γ over training")
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=8, loc="upper left")

    ax = axes[1, 1]
    sw = summary["lr_sweep"]
    ax.loglog(sw["lrs"], sw["frozen_median_rel_error"], "o-", color="tab:red", label="frozen stats vs (γ/σ)²")
    ax.loglog(sw["lrs"], sw["live_vs_gamma_sigma_sq_rho_median_rel_error"], "s-", color="tab:green",
              label="real BN step vs (γ/σ)²·ρ")
    ax.loglog(sw["lrs"], sw["live_vs_gamma_sigma_sq_median_rel_error"], "x--", color="tab:gray",
              label="real BN step vs (γ/σ)²")
    ax.axvline(sim["lr"], color="k", lw=0.5, ls=":")
    ax.set(xlabel="probe learning rate", ylabel="median relative error",
           title="first-order prediction error vs step size")
    _plot_counterfactual(axes[0, 2], axes[1, 2], counterfactual)
    for a in axes.flat:
        if a is not axes[1, 0]:  # that one carries the twin axis's handles too
            a.legend(fontsize=8)
        a.grid(alpha=0.3)
    tight_layout(fig)
    save_figure(fig, path)


KIND_COLORS = {"flip": "tab:purple", "ood": "tab:olive"}


def _plot_counterfactual(ax_steps, ax_scatter, runs: dict[str, dict[int, dict[str, np.ndarray]]]) -> None:
    """Claim 5b: per-step median and IQR of the ratio over seeds × outliers per outlier kind,
    the median (γ/σ)²; and every (step, outlier, seed) point against its (γ/σ)²."""
    lo_all, hi_all = np.inf, 0.0
    for kind, by_seed in runs.items():
        color = KIND_COLORS.get(kind, "black")
        ratio = np.concatenate([r["ratio"] for r in by_seed.values()], axis=1)  # (steps+1, seeds*outliers)
        amp = np.stack([r["amp"] for r in by_seed.values()], axis=1)
        steps = np.arange(ratio.shape[0])
        q25, med, q75 = np.nanpercentile(ratio, [25, 50, 75], axis=1)
        n = len(by_seed)
        ax_steps.plot(steps, med, color=color, lw=1.5, label=f"{kind}: median BN/plain ({n} seeds)")
        ax_steps.fill_between(steps, q25, q75, color=color, alpha=0.2, label=f"{kind}: IQR")
        ax_steps.plot(steps, np.median(amp, axis=1), "--", color=color, lw=1, label=f"{kind}: median (γ/σ)²")
        a = np.broadcast_to(np.concatenate([r["amp"][:, None].repeat(r["ratio"].shape[1], 1)
                                            for r in by_seed.values()], axis=1), ratio.shape)
        ax_scatter.plot(a.ravel(), ratio.ravel(), ".", ms=1.5, alpha=0.3, color=color, label=kind)
        lo_all, hi_all = min(lo_all, float(a.min())), max(hi_all, float(a.max()))
    ax_steps.set_yscale("symlog", linthresh=1.0)
    ax_steps.set(xlabel="step", ylabel="Δm_BN / Δm_no-norm, one step",
                 title="claim 5b: (w,γ,β) step vs (w~,c~) step\nof the matched no-norm model")
    if np.isfinite(lo_all):
        xs = np.geomspace(lo_all, hi_all, 50)
        ax_scatter.plot(xs, xs, "k-", lw=1, label="ratio = (γ/σ)²")
        ax_scatter.fill_between(xs, xs / 2, xs * 2, color="gray", alpha=0.2, label="within a factor of 2")
    ax_scatter.set_xscale("log")
    ax_scatter.set_yscale("symlog", linthresh=1.0)
    ax_scatter.set(xlabel="(γ/σ)² at the BN state", ylabel="Δm_BN / Δm_no-norm",
                   title="claim 5b: every (step, outlier, seed) against (γ/σ)²")
