"""The audit's recommendations, each conditioned on what was measured.

No BN advice without BN amplification (|γ|/σ > 1 in at least :data:`~bnmem.auditing.findings.GS_MODERATE`
of the channels) and a group that may leak; no relabelling advice for rare examples; the
regularizer comparison is quoted once it ran, suggested only before. Every recommendation names a
command, a flag of ``bnmem audit`` or an importable API, and every README pointer is an anchor that
resolves (``tests/test_audit_headline.py`` checks both).
"""

from __future__ import annotations

from typing import Any

from bnmem.attacks import spec as attack_spec
from bnmem.auditing.exposure import EXPOSURE_FILE
from bnmem.auditing.findings import GS_MODERATE, bn_summary, pct

README_LOOP = "README.md#audit-your-own-model-in-five-minutes"


# The λ the recommendations suggest trying first (a starting point; the comparison measures it).
SUGGESTED_LAMBDA = 0.1


def comparison_sentence(cmp: dict[str, Any], groups: list[dict[str, Any]]) -> str:
    """What --compare-gs-reg measured, on each group's own attack, with the paired intervals."""
    parts = []
    for g in groups:
        d = cmp["auc"].get(g["attack"], {}).get(g["group"])
        if d:
            parts.append(f"{g['name']} AUC {d['diff']:+.2f} [{d['ci'][0]:+.2f}, {d['ci'][1]:+.2f}] "
                         f"({attack_spec.LABELS[g['attack']]}, {d['without']:.2f} → {d['with']:.2f})")
    cost = cmp["cost_test"]
    ci = f" [{cost['ci'][0]:.1f}, {cost['ci'][1]:.1f}]" if cost["ci"] else ""
    confound = ""
    if cmp.get("confounded"):
        reached = pct(cmp["shadow_accuracy"]["with"]["train_in"])
        confound = (f" The regularized copies under-fit (training accuracy {reached}, "
                    f"{100 * abs(cmp['calibration_gap']):.0f} points below your model), so part of this gain is "
                    "under-fitting.")
    return (f"At λ = {cmp['lambda']:g} (paired copies, 95% intervals): {'; '.join(parts)}, for {cost['points']:.1f}"
            f"{ci} points of test accuracy.{confound}")


def bn_amplifies(result: dict[str, Any]) -> bool:
    """BN is present with |γ|/σ > 1 in enough channels to amplify outliers."""
    summary = bn_summary(result)
    return summary is not None and summary["frac_above_1"] >= GS_MODERATE


def regularizer_advice(result: dict[str, Any], risk: dict[str, Any]) -> list[str]:
    """The γ/σ regularizer and the BN alternatives: quoted from the comparison when it ran."""

    cmp = result.get("gs_reg_comparison")
    loop = (f"`from bnmem import GammaSigmaPenalty` in your own training loop (the snippet in {README_LOOP})")
    if cmp:
        measured = comparison_sentence(cmp, risk["groups"])
        helps = any(d["ci"][1] < 0 for a in cmp["auc"].values() for d in a.values())
        if helps and not cmp.get("confounded"):
            return [f"{measured} The regularizer lowers the leakage measurably: add it with {loop}, at the λ you "
                    "measured, and weigh the accuracy cost."]
        why = ("its gain is confounded with under-fitting" if cmp.get("confounded")
               else "no group's AUC difference excludes 0 at this λ")
        return [f"{measured} That does not show a gain ({why}): try another λ with --compare-gs-reg, or replace "
                "BatchNorm with `torch.nn.GroupNorm` or `torch.nn.LayerNorm`, retrain, and audit again."]
    return [f"Measure what the γ/σ regularizer changes on your data before adopting it: rerun this audit with "
            f"--compare-gs-reg {SUGGESTED_LAMBDA:g} added (paired copies; AUC differences and accuracy cost with "
            f"intervals); it is {loop}.",
            "Or replace BatchNorm with `torch.nn.GroupNorm` or `torch.nn.LayerNorm`, retrain, and audit again."]


def example_advice(result: dict[str, Any], risk: dict[str, Any]) -> list[str]:
    """What to do about the examples that stand out, by their kind."""
    standing = {g["group"]: g for g in risk["groups"] if g["level_upper"] != "low"}
    recs = []
    if "outliers" in standing:
        # The group is the data's own outlier masks (--mislabeled files, or an array's noisy/OOD masks), not the
        # top-k gradient norms; its level is the group's, so each example's own exposure is exposure.csv's.
        g = standing["outliers"]
        recs.append(f"Review {g['name']} before release: as a group they may stand out to a membership attacker "
                    f"(their level: {g['level']}); {EXPOSURE_FILE} ranks every training file by its own exposure "
                    "(theirs in the group outlier). Correct or remove them and retrain.")
    if "rare" in standing:
        recs.append("The examples listed as rare stand out to an attacker although their labels are right (keep them "
                    "as they are): collect more examples like them so they stop being rare, or limit what the model "
                    "memorizes (the γ/σ regularizer above, or differential privacy: see `bnmem audit --defenses`).")
    if "most_exposed" in standing and not recs:
        recs.append("Inspect the examples with the largest gradient norms (audit.json, gradient_norms → top_k): rare, atypical or "
                    "mislabeled ones stand out; list them with --mislabeled or --outliers to measure them as a group.")
    return recs


def recommendations(result: dict[str, Any], risk: dict[str, Any]) -> list[str]:
    """Advice that follows from the findings; each names a command, a flag of ``bnmem audit`` or an API."""
    if risk.get("blocker"):
        return ["Make the shadow copies resemble your model first (the warning says how), then read the level: "
                "until then the attack numbers describe a different recipe."]
    measured = bool(risk["groups"])
    may_leak = measured and risk["level_upper"] != "low"
    recs = []
    if bn_amplifies(result) and (may_leak or not measured):
        recs += regularizer_advice(result, risk)
    if measured:
        recs += example_advice(result, risk)
    if not result.get("membership"):
        recs.append("Measure the membership leakage directly: rerun this audit with --shadow-models 16 added.")
    elif risk["level_lower"] != risk["level_upper"]:
        need = max((g["narrow_with"] or 0 for g in risk["groups"]), default=0)
        more = max(need, 2 * result["membership"]["shadow_models"])
        recs.append(f"Narrow the range before deciding: rerun this audit with --shadow-models {more} "
                    "(more copies, more scores per example).")
    return recs
