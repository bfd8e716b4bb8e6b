"""The privacy–utility figure of the mitigate lens (``privacy_utility.png``).

Three panels: memorization against clean test accuracy per variant, the
memorization curves over training, and (when shadow models were trained)
membership AUC against test accuracy. On clean data (no corrupted subset) the
two memorization panels are left out. Regularized BN variants are drawn in
oranges, apart from the norms' own colours.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import matplotlib.pyplot as plt

from bnmem.attacks import spec as attack_spec
from bnmem.figures.save import NORM_COLORS, save_figure, tight_layout  # sets the Agg backend first


def plot_privacy_utility(result: dict[str, Any], path: str | Path, key: str, title: str = "",
                         legacy_attack: str | None = None) -> None:
    """Memorization vs test accuracy per variant (filled: fixed epoch, hollow: last epoch; bars: seed
    min–max), memorization curves, and LiRA AUC vs test accuracy when measured.

    Args:
        result: the mitigate lens's results.
        path: the figure file.
        key: the memorized subset's accuracy (``noisy_acc`` or ``ood_acc``).
        title: the figure's title (its conditions).
        legacy_attack: the attack of a variant's LiRA record that has no per-attack ``attacks`` block
            (default: the attack playing :data:`~bnmem.attacks.spec.PRIMARY`).
    """
    if legacy_attack is None:
        legacy_attack = attack_spec.the(attack_spec.PRIMARY)
    names = result["variants"]
    has_lira = any("lira" in result[n] for n in names)
    # Clean data has no corrupted subset: its memorization panels would be empty, so they are left out.
    corrupted = any(v is not None and v == v for n in names for v in (result[n]["mean"].get(key) or []))
    n_panels = 2 * corrupted + has_lira or 1
    fig, axes = plt.subplots(1, n_panels, figsize=(5.4 * n_panels, 4.2), squeeze=False)
    axes = list(axes[0])
    color = _variant_colors(result)
    if corrupted:
        _tradeoff_panel(axes[0], result, key, color)
        _curves_panel(axes[1], result, key, color)
    if has_lira:
        _membership_panel(axes[-1], result, color, legacy_attack)
    for a in axes:
        a.grid(alpha=0.3)
        if a.get_legend_handles_labels()[0]:
            a.legend(fontsize=7)
        else:  # clean data without shadow models: nothing to draw
            a.text(0.5, 0.5, "no corrupted subset (clean data)\nand no shadow models", ha="center", va="center",
                   transform=a.transAxes, color="gray")
    if title:
        fig.suptitle(title, fontsize=10)
    tight_layout(fig)
    save_figure(fig, path)


def _curves_panel(ax: Any, result: dict[str, Any], key: str, color: Callable[[str], Any]) -> None:
    """Memorization (mean over seeds) per epoch and variant; dotted line at the fixed epoch."""
    for n in result["variants"]:
        curve = result[n]["mean"][key]
        ax.plot(range(1, len(curve) + 1), curve, color=color(n), label=n)
    ax.axvline(result["conditions"]["fixed_epoch"], color="gray", lw=0.8, ls=":")
    ax.set(xlabel="epoch", ylabel="memorization (mean over seeds)", ylim=(-0.02, 1.02),
           title="memorization over training")


def _variant_colors(result: dict[str, Any]) -> Callable[[str], Any]:
    """Each variant's colour: its norm's, or for regularized BN variants a shade of orange per λ (apart from
    plain BN's red and no-norm's blue)."""
    names = result["variants"]
    gs_names = [n for n in names if result[n]["gs_reg"] > 0]
    cmap = plt.get_cmap("Oranges")

    def color(n: str):
        if n in gs_names:
            return cmap(0.4 + 0.5 * gs_names.index(n) / max(len(gs_names) - 1, 1))
        return NORM_COLORS.get(result[n]["norm"], "black")

    return color


def _tradeoff_panel(ax: Any, result: dict[str, Any], key: str, color: Callable[[str], Any]) -> None:
    """Memorization against test accuracy per variant: filled at the fixed epoch, hollow at the last; bars: seed min–max."""
    for n in result["variants"]:
        m = result[n]
        for when, face in (("fixed_epoch", color(n)), ("final", "none")):
            x, y = m[when]["test_acc"], m[when][key]
            if x["mean"] is None or y["mean"] is None:
                continue
            ax.errorbar(x["mean"], y["mean"], xerr=[[x["mean"] - x["min"]], [x["max"] - x["mean"]]],
                        yerr=[[y["mean"] - y["min"]], [y["max"] - y["mean"]]], fmt="o", color=color(n),
                        mfc=face, ms=8, capsize=2, label=n if when == "fixed_epoch" else None)
        ax.annotate(n, (m["fixed_epoch"]["test_acc"]["mean"], m["fixed_epoch"][key]["mean"] or 0),
                    textcoords="offset points", xytext=(6, 4), fontsize=8)
    fe = result["conditions"]["fixed_epoch"]
    ax.set(xlabel="clean test accuracy", ylabel=f"{key.replace('_acc', '')} subset accuracy (memorization)",
           title=f"privacy vs utility (filled: epoch {fe}, hollow: last)")


def _membership_panel(ax: Any, result: dict[str, Any], color: Callable[[str], Any], legacy_attack: str) -> None:
    """Membership AUC against final test accuracy, for the variants with shadow models: one marker per attack
    playing :data:`~bnmem.attacks.spec.FIGURE` (online LiRA o, RMIA s)."""
    drawn = [attack_spec.get(a) for a in attack_spec.playing(attack_spec.FIGURE)]
    for n in result["variants"]:
        if "lira" not in result[n]:
            continue
        attacks = result[n]["lira"].get("attacks") or {legacy_attack: result[n]["lira"]}
        for attack, marker in ((spec.name, spec.marker) for spec in drawn):
            if attack in attacks and "all" in attacks[attack]:
                ax.scatter(result[n]["final"]["test_acc"]["mean"], attacks[attack]["all"]["auc"], color=color(n),
                           marker=marker, s=50, label=f"{n} ({attack})")
    chosen = (result.get("selection") or {}).get("variant")
    ax.set(xlabel="clean test accuracy (final)", ylabel="membership AUC (all examples)",
           title=" and ".join(f"{spec.figure_label} ({spec.marker})" for spec in drawn)
                 + f", {result['conditions']['lira_models']} shadow models"
                 + (f"; selected: {chosen}" if chosen else ""))
