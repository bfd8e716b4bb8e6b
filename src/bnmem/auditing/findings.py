"""What explains the measured leakage: the BN-specific and indirect signals of an audit, one finding each.

The rules of thumb follow the study: BN multiplies an outlier's per-step margin growth by
(γ/σ)², so channels with |γ|/σ > 1 amplify the memorization of rare samples; large per-sample
gradient norms concentrate on samples the model has to memorize; a train-test gap and fitted
flipped labels show memorization. Each finding carries a level from its own threshold below
(heuristics for a first look, not calibrated guarantees). These findings *explain* the risk;
the level of the audit comes from the measured attacks (:mod:`bnmem.auditing.report`).
"""

from __future__ import annotations

from typing import Any

from bnmem.formatting import pct as fmt_pct

LEVELS = ("low", "moderate", "elevated")
# Fraction of BN channels with |γ|/σ > 1 (running σ) at which amplification is moderate / elevated.
GS_MODERATE, GS_ELEVATED = 0.2, 0.5
# Train-test accuracy gap (fraction) that is worth a mention / a concern.
GAP_MODERATE, GAP_ELEVATED = 0.03, 0.10
# The top-k gradient norms hold more than this / at least this many times more known outliers than the data.
ENRICH_MODERATE, ENRICH_ELEVATED = 1.5, 3.0
# Fraction of flipped / OOD labels the model fits (pure memorization).
FIT_MODERATE, FIT_ELEVATED = 0.2, 0.5


def band(value: float, moderate: float, elevated: float, strict_moderate: bool = False) -> str:
    """The level of ``value`` against two thresholds (``>=``; ``>`` for moderate when ``strict_moderate``)."""
    if value >= elevated:
        return "elevated"
    return "moderate" if (value > moderate if strict_moderate else value >= moderate) else "low"


def pct(v: float | None) -> str:
    """A fraction as a whole percentage, '-' when missing (:func:`bnmem.formatting.pct`, no decimals)."""
    return fmt_pct(v, 0)


def ci_text(v: float | None, ci: list[float] | None, percent: bool = False, missing: str = "-") -> str:
    """A value with its interval, as the audit's tables print it: ``0.997 [0.984, 1.000]`` or ``98% [94%, 100%]``
    (``missing`` where there is no value, e.g. a TPR not estimable from the non-members there are)."""
    if v is None or ci is None:
        return missing
    return f"{fine_pct(v)} [{fine_pct(ci[0])}, {fine_pct(ci[1])}]" if percent else f"{v:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]"


def fine_pct(v: float) -> str:
    """A percentage that keeps two significant digits below 1% (an interval's end of 0.19% is not '0%')."""
    return f"{100 * v:.2g}%" if 0 < v < 0.01 else pct(v)


def tpr_text(g: dict[str, Any], key: str = "tpr_at_1pct_fpr") -> str:
    """A group's TPR at an FPR with its exact interval, or why it is not estimable."""
    return ci_text(g.get(key), g["ci"].get(key), True, missing=(g.get("tpr_notes") or {}).get(key, "-"))


def spread_text(masks: dict[str, Any], what: str) -> str:
    """Where a flagged group sits among the gradient norms, robustly: medians side by side and the share of the
    group above the others' 95th percentile (5% would be no difference)."""
    by = masks.get("by_subset") or {}
    group = by.get("rare") or by.get("noisy") or by.get("ood") or by.get("outlier") or {}
    rest = by.get("others") or by.get("clean") or {}
    if masks.get("above_rest_percentile") is None or group.get("median") is None or rest.get("median") is None:
        return ""
    return (f"{what} median gradient norm is {group['median']:.3g} against {rest['median']:.3g} for the others, "
            f"and {pct(masks['above_rest_percentile'])} of them lie above the others' {masks['rest_percentile']}th "
            f"percentile ({masks['rest_percentile_value']:.3g}; {100 - masks['rest_percentile']}% would be no "
            "difference)")


def bn_summary(result: dict[str, Any]) -> dict[str, Any] | None:
    """The γ/σ summary the findings read (running σ, else batch σ), or None without BN statistics."""
    gs = result.get("gamma_sigma") or {}
    summary = (gs.get("running") or {}).get("summary") or (gs.get("batch") or {}).get("summary")
    if not any(r["batchnorm"] for r in result["norm_layers"]) or not summary:
        return None
    return summary if summary.get("frac_above_1") is not None else None


def norm_findings(result: dict[str, Any]) -> list[tuple[str, str]]:
    """The normalization layers and, for BN, the fraction of channels with |γ|/σ > 1."""
    layers = result["norm_layers"]
    bn = [r for r in layers if r["batchnorm"]]
    if not layers:
        return [("low", "No normalization layers: BN's (γ/σ)² amplification of outliers does not apply.")]
    if not bn:
        other = ", ".join(sorted({r["type"] for r in layers}))
        return [("low", f"Normalization without batch statistics ({other}): no BN (γ/σ)² amplification.")]
    summary = bn_summary(result)
    if summary is None:
        return []
    frac = summary["frac_above_1"]
    level = band(frac, GS_MODERATE, GS_ELEVATED)
    words = {"elevated": "amplifies the memorization of rare samples",
             "moderate": "somewhat amplifies rare samples' influence", "low": "little amplification"}[level]
    return [(level, f"BN present ({len(bn)} layer{'s' if len(bn) != 1 else ''}); {pct(frac)} of channels have "
                    f"|γ|/σ > 1 (median {summary['median_ratio']:.2f}) → {words}.")]


def gradient_findings(result: dict[str, Any]) -> list[tuple[str, str]]:
    """Where the largest per-sample gradient norms sit (known outliers and rare examples, each in its words)."""
    gn, found = result["gradient_norms"], []
    for key, what, why in (("masks", "known corrupted samples", "samples it can only memorize"),
                           ("rare", "examples listed as rare", "rare examples it fits one by one")):
        masks = gn.get(key)
        if not masks or masks.get("top_k_fraction_flagged") is None:
            continue
        level = band(masks.get("enrichment") or 0.0, ENRICH_MODERATE, ENRICH_ELEVATED, strict_moderate=True)
        spread = spread_text(masks, "their" if key == "masks" else "the rare examples'")
        tail = (f": the model's largest per-sample influence sits on {why}" if level != "low" else
                ": the largest per-sample influence does not concentrate on them")
        found.append((level, f"{masks['top_k_flagged']} of the top-{len(gn['top_k'])} gradient norms are {what} "
                             f"({pct(masks['top_k_fraction_flagged'])} vs {pct(masks['fraction_flagged_overall'])} of "
                             f"the data){tail}" + (f"; {spread}." if spread else ".")))
    if found:
        return found
    if gn["top_k"] and gn.get("top_k_mean_over_median"):
        return [("low", f"The top-{len(gn['top_k'])} gradient norms are {gn['top_k_mean_over_median']:.1f}x the "
                        "median: inspect those examples (audit.json lists them) for mislabeled or atypical samples.")]
    return []


def accuracy_findings(result: dict[str, Any]) -> list[tuple[str, str]]:
    """The train-test gap and the fit of flipped / OOD labels."""
    acc, found = result["accuracy"], []
    if acc.get("gap") is not None:
        level = band(acc["gap"], GAP_MODERATE, GAP_ELEVATED)
        found.append((level, f"Train accuracy {pct(acc['train_acc'])} vs test {pct(acc['test_acc'])} "
                             f"(gap {100 * acc['gap']:+.1f} points)" + (": the model fits its training set beyond "
                             "what generalizes, a membership signal." if level != "low" else ".")))
    mislabeled = "flipped labels" if "mislabeled_in_test" not in result["data"] else "files listed as mislabeled"
    for key, what in (("noisy_acc", mislabeled), ("ood_acc", "OOD samples' random labels")):
        if acc.get(key) is not None:
            found.append((band(acc[key], FIT_MODERATE, FIT_ELEVATED),
                          f"It fits {pct(acc[key])} of the {what} (to their given labels: pure memorization)."))
    if acc.get("rare_acc") is not None:  # correct labels: fitting them is learning, and for rare ones memorizing
        found.append(("low", f"It classifies {pct(acc['rare_acc'])} of the examples listed as rare correctly "
                             f"(training set overall {pct(acc['train_acc'])})."))
    return found


def explaining_findings(result: dict[str, Any]) -> list[tuple[str, str]]:
    """Every explaining finding, as ``(level, sentence)``."""
    return norm_findings(result) + gradient_findings(result) + accuracy_findings(result)
