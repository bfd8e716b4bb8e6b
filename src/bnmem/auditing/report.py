"""The audit's answer: a risk level from the measured attacks, one plain paragraph, findings, recommendations.

The level rests on the membership attacks over the shadow copies (:mod:`bnmem.auditing.leakage`):
for each group — the whole training set, the known outliers, the most-exposed examples — the
strongest headline attack's pooled AUC and its 95% interval; a group's level is read from the
*lower* end of that interval (:data:`AUC_MODERATE`, :data:`AUC_ELEVATED`), and the audit's level is
the highest group's. The BN-specific signals (|γ|/σ, where the largest gradient norms sit) and
the accuracy findings (:mod:`bnmem.auditing.findings`) explain the level; they no longer set it.
Without shadow models nothing is measured, and the level says so.

Every recommendation names a command or API that exists (``tests/test_audit_headline.py`` checks
each backticked one against the CLI and the importable names).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bnmem.attacks import spec as attack_spec
from bnmem.auditing.calibration import calibration
from bnmem.auditing.findings import LEVELS, band, bn_summary, explaining_findings, pct
from bnmem.auditing.leakage import strongest
from bnmem.names import METRICS_FILE

# Lower end of the 95% interval of a group's pooled AUC at which its leakage is moderate / elevated.
AUC_MODERATE, AUC_ELEVATED = 0.55, 0.60
# ... and at which the group is called identifiable in the headline.
AUC_IDENTIFIABLE = 0.80
NOT_MEASURED = "not measured"
# Each attack's label, as its spec declares it (bnmem.attacks.spec).
ATTACK_NAMES = attack_spec.LABELS
GROUPS = ("outliers", "most_exposed", "all")
# The λ the recommendations suggest trying first (a starting point; the comparison measures it).
SUGGESTED_LAMBDA = 0.1


def group_name(result: dict[str, Any], group: str, n: int) -> str:
    """'the 24 files listed as mislabeled', 'the 20 most-exposed examples', 'the whole training set (360)'."""
    d = result["data"]
    if group == "all":
        return f"the whole training set ({n} examples)"
    if group == "most_exposed":
        return f"the {n} most-exposed examples (largest gradient norms on your model)"
    if "mislabeled_in_test" in d:  # an image folder audited with --mislabeled
        return f"the {n} files listed as mislabeled"
    kinds = [k for k, key in (("mislabeled", "n_noisy"), ("out-of-distribution", "n_ood")) if d.get(key)]
    return f"the {n} known outliers ({' and '.join(kinds) or 'flagged'})"


def group_findings(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Per group: the strongest headline attack, its level (from the lower AUC bound) and a sentence."""
    mem = result.get("membership")
    if not mem or "leakage" not in mem:
        return []
    found = []
    for group in GROUPS:
        best = strongest(mem["leakage"], group)
        if best is None:
            continue
        attack, g = best
        lo, hi = g["ci"]["auc"]
        level = band(lo, AUC_MODERATE, AUC_ELEVATED)
        words = ("identifiable" if lo >= AUC_IDENTIFIABLE else "partly identifiable" if lo >= AUC_ELEVATED
                 else "slightly detectable" if lo >= AUC_MODERATE else "barely distinguishable from non-members")
        name = group_name(result, group, g["n_examples"])
        text = (f"{name[0].upper()}{name[1:]}: {words}. {ATTACK_NAMES[attack]} over {mem['shadow_models']} shadow "
                f"copies: AUC {g['auc']:.2f} [{lo:.2f}, {hi:.2f}], {pct(g['tpr_at_1pct_fpr'])} "
                f"[{pct(g['ci']['tpr_at_1pct_fpr'][0])}, {pct(g['ci']['tpr_at_1pct_fpr'][1])}] of members found at "
                "1% false positives.")
        found.append({"group": group, "attack": attack, "level": level, "level_point_auc": band(
                          g["auc"], AUC_MODERATE, AUC_ELEVATED), "words": words, "name": name,
                      "auc": g["auc"], "auc_ci": [lo, hi], "text": text, "cautions": g["cautions"]})
    return found


def bn_share(result: dict[str, Any]) -> str:
    """How much of the leakage BN explains: measured with the regularizer comparison, else what the signals say."""
    cmp = result.get("gs_reg_comparison")
    if cmp:
        without, with_ = cmp["without"]["auc"], cmp["with"]["auc"]
        parts = [f"{g.replace('_', '-')} AUC goes {without['online'][g]['auc']:.2f} → {with_['online'][g]['auc']:.2f}"
                 for g in ("outliers", "all") if g in with_.get("online", {}) and g in without.get("online", {})]
        acc = f"{pct(cmp['without']['shadow_accuracy']['test'])} → {pct(cmp['with']['shadow_accuracy']['test'])}"
        return (f"How much BN explains, measured on your data and architecture: with the γ/σ regularizer "
                f"(λ = {cmp['lambda']:g}), online LiRA's {', '.join(parts)}, and the shadow copies' test accuracy "
                f"{acc}.")
    summary = bn_summary(result)
    if summary is None:
        return "The model has no BatchNorm statistics to blame: BN explains none of this."
    masks = result["gradient_norms"].get("masks") or {}
    by = masks.get("by_subset") or {}
    ratio = ""
    if "clean" in by and any(k in by for k in ("noisy", "ood")):
        out = by.get("noisy") or by.get("ood")
        if by["clean"].get("median"):
            times = out["median"] / by["clean"]["median"]
            ratio = f"; the known outliers' gradient norms are {times:.0f}× the others'"
    return (f"BN plausibly amplifies it: {pct(summary['frac_above_1'])} of BN channels have |γ|/σ > 1, and BN scales "
            f"an outlier's margin growth by (γ/σ)²{ratio}. Its share is not measured here; "
            f"--compare-gs-reg {SUGGESTED_LAMBDA:g} measures it.")


def eps_lb_sentence(eps_lb: float, eps_max: float | None = None) -> str:
    """The empirical ε lower bound in one plain sentence, with what it does and does not mean."""
    worst = f" (largest over the shadow copies {eps_max:.2f})" if eps_max is not None else ""
    return (f"Empirical ε lower bound {eps_lb:.2f}{worst}: from online LiRA's hits and false alarms, any "
            "(ε, δ = 1/N) differential-privacy guarantee for this training recipe would need ε at least this "
            "large (95% confidence per copy); it is a floor set by one attack, not a privacy guarantee.")


def epsilon_sentence(result: dict[str, Any]) -> str:
    """The headline's ε sentence, when online LiRA's results on the whole set carry an empirical ε lower bound."""
    online = ((result.get("membership") or {}).get("attacks") or {}).get("online", {}).get("all", {})
    return f" {eps_lb_sentence(online['eps_lb'], online.get('eps_lb_max'))}" if online.get("eps_lb") is not None else ""


def _numbers(g: dict[str, Any]) -> str:
    return f"AUC {g['auc']:.2f} [{g['auc_ci'][0]:.2f}, {g['auc_ci'][1]:.2f}]"


def headline(result: dict[str, Any], groups: list[dict[str, Any]]) -> str:
    """One plain paragraph: who is identifiable, how confidently, how much BN explains."""
    if not groups:
        return ("Membership leakage was not measured (no shadow models): the findings below are indirect signs. "
                "Rerun with --shadow-models 16 to measure who in the training set an attacker can identify.")
    mem = result["membership"]
    exposed = [g for g in groups if g["group"] != "all" and g["level"] != "low"]
    whole = next((g for g in groups if g["group"] == "all"), None)
    text = []
    if exposed:
        who = "; and ".join(f"{g['name']}, {g['words']} ({_numbers(g)}, {ATTACK_NAMES[g['attack']]})"
                            for g in exposed)
        lead = "Who is identifiable" if any(g["level"] == "elevated" for g in exposed) else "Who stands out"
        text.append(f"{lead}: {who}.")
    else:
        text.append("No group tested here stands out: known outliers and most-exposed examples leak no more "
                    "than the rest." if len(groups) > 1 else "No group was tested beyond the whole set.")
    if whole:
        typical = "Typical training examples" if exposed else "The training set as a whole"
        text.append(f"{typical} {'are' if exposed else 'is'} {whole['words']}: {_numbers(whole)} over "
                    f"{whole['name']}.")
    text.append(f"(Attacks over {mem['shadow_models']} shadow copies of your recipe; 95% intervals.)")
    cautious = any(g["cautions"] for g in groups)
    return " ".join([*text, bn_share(result)]) + epsilon_sentence(result) + (
        " Some of these numbers rest on few scores (see Cautions)." if cautious else "")


def recommendations(result: dict[str, Any], level: str) -> list[str]:
    """Advice that can be followed: each names a command, a flag of ``bnmem audit`` or an importable API."""
    recs = []
    bn = bn_summary(result) is not None
    if level in ("moderate", "elevated") or (level == NOT_MEASURED and bn):
        if bn:
            recs.append("Add the γ/σ regularizer to your own training loop: `from bnmem import GammaSigmaPenalty` "
                        "(README, 'The γ/σ regularizer in your own loop'); measure its privacy gain and accuracy "
                        f"cost on your data first with `bnmem audit --compare-gs-reg {SUGGESTED_LAMBDA:g} "
                        "--shadow-models 8` (plus this audit's flags).")
            recs.append("Or replace BatchNorm with `torch.nn.GroupNorm` or `torch.nn.LayerNorm`, retrain, and "
                        "audit again with `bnmem audit`.")
        if result["data"].get("outliers_known") or result["gradient_norms"]["top_k"]:
            recs.append("Review the identifiable examples before release: the known outliers and the largest "
                        "gradient norms (audit.json, gradient_norms → top_k, with file names) are the ones an "
                        "attacker singles out; relabel or remove them and retrain.")
    if not result.get("membership"):
        recs.append("Measure the membership leakage directly: rerun with `bnmem audit --shadow-models 16` "
                    "(plus this audit's flags).")
    elif result["membership"]["shadow_models"] < 16:
        recs.append("Narrow the intervals: `bnmem audit --shadow-models 16` (more shadow copies, more reference "
                    "scores per example).")
    return recs


def risk_summary(result: dict[str, Any]) -> dict[str, Any]:
    """The audit's answer from its measured sections.

    Args:
        result: the audit result so far (norm_layers, gamma_sigma, gradient_norms, accuracy,
            membership, optionally gs_reg_comparison).

    Returns:
        ``{"level", "basis", "headline", "groups", "findings", "finding_levels", "finding_kinds",
        "indicator_level", "cautions", "recommendations", "note"}``: ``level`` is low|moderate|elevated
        from the attacks, or "not measured" without shadow models.
    """
    groups = group_findings(result)
    explain = explaining_findings(result)
    level = max((g["level"] for g in groups), key=LEVELS.index) if groups else NOT_MEASURED
    # The earlier rule read the thresholds off the point AUC; it is kept beside the current one (see
    # the README's "Audit rules and their history") so a reader sees what the change did.
    level_point = max((g["level_point_auc"] for g in groups), key=LEVELS.index) if groups else NOT_MEASURED
    indicators = max((lvl for lvl, _ in explain), key=LEVELS.index, default="low")
    cautions = list(dict.fromkeys(f"{g['name']}: {c}" for g in groups for c in g["cautions"]))
    return {
        "level": level,
        "level_point_auc": level_point,
        "basis": (f"membership attacks over {result['membership']['shadow_models']} shadow copies (each group's "
                  f"level from the lower end of its AUC interval; from the point AUC, the earlier rule: "
                  f"{level_point})" if groups
                  else f"nothing measured: no shadow models (the indirect signs alone rate {indicators})"),
        "headline": headline(result, groups),
        "groups": groups,
        "findings": [g["text"] for g in groups] + [f for _, f in explain],
        "finding_levels": [g["level"] for g in groups] + [lvl for lvl, _ in explain],
        "finding_kinds": ["measured"] * len(groups) + ["explains"] * len(explain),
        "indicator_level": indicators,
        "cautions": cautions,
        "calibration": calibration(result),
        "recommendations": recommendations(result, level),
        "note": "levels: attacks from the lower end of the 95% interval of the pooled AUC (thresholds "
                f"{AUC_MODERATE}, {AUC_ELEVATED}); explaining signals are rules of thumb from the study (BN scales "
                "outliers' margin growth by (γ/σ)²), not calibrated guarantees; thresholds in bnmem.auditing",
    }


def frontier_citation(path: str | Path) -> dict[str, Any]:
    """What a finished defenses run says a practitioner should use instead of BN, for the recommendations.

    Args:
        path: a defenses lens folder, or any folder above one (a study run directory).

    Returns:
        ``{"path", "conditions", "text"}``; ``text`` cites the run and its plain-language frontier reading.

    Raises:
        BnmemError: no finished defenses results under ``path``.
    """
    import json

    from bnmem.errors import BnmemError
    from bnmem.frontier import recommendation

    root = Path(path)
    candidates = [root / METRICS_FILE] if (root / METRICS_FILE).is_file() else []
    candidates += sorted(root.rglob(METRICS_FILE)) if root.is_dir() else []
    for f in candidates:
        try:
            doc = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and doc.get("lens") == "defenses":
            c = doc.get("conditions", {})
            where = ", ".join(str(c[k]) for k in ("dataset", "arch") if c.get(k))
            text = (f"What to use instead (the defenses frontier measured in {f.parent}"
                    f"{' on ' + where if where else ''}; it applies to this model only as far as its data and "
                    f"architecture resemble that setting): {recommendation(doc)}")
            return {"path": str(f.parent), "conditions": c, "text": text}
    raise BnmemError(f"{root} holds no finished defenses results (a metrics.json with \"lens\": \"defenses\"); "
                     "run bnmem run studies/defenses.yaml first")
