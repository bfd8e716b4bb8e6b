"""The audit's answer: a risk level from the measured attacks, one plain paragraph, findings, recommendations.

The level rests on the membership attacks over the shadow copies (:mod:`bnmem.auditing.leakage`),
read from both ends of each group's AUC interval (:mod:`bnmem.auditing.level`), and only when the
copies resemble the model (:mod:`bnmem.auditing.calibration`): otherwise "not assessed", with
the gap and the fix. The BN-specific signals (|γ|/σ, where the largest gradient norms sit) and the
accuracy findings (:mod:`bnmem.auditing.findings`) explain the level; they do not set it. Without
shadow models nothing is measured, and the level says so. The advice is in
:mod:`bnmem.auditing.advice`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bnmem.attacks import spec as attack_spec
from bnmem.auditing.advice import SUGGESTED_LAMBDA, comparison_sentence, recommendations
from bnmem.auditing.exposure import top_sentence
from bnmem.auditing.calibration import NOT_ASSESSED, calibration, level_blocker
from bnmem.auditing.findings import GS_MODERATE, LEVELS, bn_summary, explaining_findings, pct, spread_text, tpr_text
from bnmem.auditing.level import (
    AUC_ELEVATED,
    AUC_MODERATE,
    GROUPS,
    RULE,
    audit_level,
    group_level,
    level_setter,
)
from bnmem.formatting import eps_value
from bnmem.names import METRICS_FILE

# Each attack's label, as its spec declares it (bnmem.attacks.spec).
ATTACK_NAMES = attack_spec.LABELS


def group_name(result: dict[str, Any], group: str, n: int) -> str:
    """'the 24 files listed as mislabeled', 'the 6 examples listed as rare', 'the whole training set (360)'."""
    d = result["data"]
    if group == "all":
        return f"the whole training set ({n} examples)"
    if group == "most_exposed":
        return f"the {n} examples with the largest gradient norms on your model"
    if group == "rare":
        return f"the {n} {'files' if 'mislabeled_in_test' in d else 'examples'} listed as rare or atypical"
    if "mislabeled_in_test" in d:  # an image folder audited with --mislabeled
        return f"the {n} files listed as mislabeled"
    kinds = [k for k, key in (("mislabeled", "n_noisy"), ("out-of-distribution", "n_ood")) if d.get(key)]
    return f"the {n} known outliers ({' and '.join(kinds) or 'flagged'})"


def group_findings(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Per group: its attack, both levels, a sentence with both ends of the interval."""
    mem = result.get("membership")
    if not mem or "leakage" not in mem:
        return []
    found = []
    for group in GROUPS:
        g = group_level(result, group)
        if g is None:
            continue
        m = g.pop("metrics")
        name = group_name(result, group, g["n_examples"])
        lo, hi = g["auc_ci"]
        text = (f"{name[0].upper()}{name[1:]}: {g['words']} ({g['level']}). {ATTACK_NAMES[g['attack']]} over "
                f"{mem['shadow_models']} shadow copies: AUC {g['auc']:.2f} [{lo:.2f}, {hi:.2f}]; members found at "
                f"1% false positives: {tpr_text(m)}.")
        found.append({**g, "name": name, "text": text, "cautions": m["cautions"]})
    return found


def bn_share(result: dict[str, Any], groups: list[dict[str, Any]]) -> str:
    """What BN has to do with it: measured with the regularizer comparison, else what the signals say."""
    cmp = result.get("gs_reg_comparison")
    if cmp:
        measured = comparison_sentence(cmp, groups)
        return f"What the γ/σ regularizer changes on your data: {measured[0].lower()}{measured[1:]}"
    summary = bn_summary(result)
    if summary is None:
        return "The model has no BatchNorm statistics to blame: BN explains none of this."
    frac = summary["frac_above_1"]
    if frac < GS_MODERATE:
        return (f"BN is present but only {pct(frac)} of its channels have |γ|/σ > 1, so its (γ/σ)² amplification "
                "of outliers is unlikely to explain much here.")
    gn = result["gradient_norms"]
    masks = gn.get("masks") or gn.get("rare") or {}
    listed = "the listed files'" if "mislabeled_in_test" in result["data"] else "the listed examples'"
    spread = spread_text(masks, listed)
    return (f"BN plausibly amplifies it: {pct(frac)} of BN channels have |γ|/σ > 1, and BN scales an outlier's "
            f"margin growth by (γ/σ)²" + (f"; {spread}" if spread else "") + ". Its share is not measured here"
            + (f"; --compare-gs-reg {SUGGESTED_LAMBDA:g} measures what the γ/σ regularizer changes." if any(
                g["level_upper"] != "low" for g in groups) else "."))


def epsilon_finding(result: dict[str, Any], groups: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The empirical ε lower bound of the attack and group that set the level, read as a floor."""
    setter = level_setter(groups)
    attacks = (result.get("membership") or {}).get("attacks") or {}
    v = attacks.get(setter["attack"], {}).get(setter["group"], {}) if setter else {}
    if v.get("eps_lb") is None:
        return None
    eps, where = v["eps_lb"], f"{ATTACK_NAMES[setter['attack']]} on {setter['name']}"
    if eps > 0:
        worst = f", largest over the copies {eps_value(v['eps_lb_max'])}" if v.get("eps_lb_max") is not None else ""
        text = (f"No (ε, δ = 1/N) differential-privacy guarantee below ε = {eps_value(eps)} is possible for this "
                f"recipe: a floor from {where} (95% confidence per copy, mean over the copies{worst}), not an "
                "estimate of ε.")
    else:
        text = (f"Empirical ε lower bound 0 ({where}): no evidence against any ε; the attack's hits and false "
                "alarms stay within what chance allows at 95% confidence with these counts, which does not mean "
                "ε = 0.")
    return {"attack": setter["attack"], "group": setter["group"], "eps_lb": eps, "eps_lb_max": v.get("eps_lb_max"),
            "informative": eps > 0, "text": text}


def _numbers(g: dict[str, Any]) -> str:
    return f"AUC {g['auc']:.2f} [{g['auc_ci'][0]:.2f}, {g['auc_ci'][1]:.2f}], {ATTACK_NAMES[g['attack']]}"


def span_sentence(groups: list[dict[str, Any]], copies: int) -> str:
    """Where intervals span several levels: that the data cannot tell, and how many copies would narrow them."""
    spans = [g for g in groups if g["level_lower"] != g["level_upper"]]
    if not spans:
        return ""
    need = [g["narrow_with"] for g in spans if g["narrow_with"]]
    more = (f"; about {max(need)} shadow copies (rerun with --shadow-models {max(need)}) would narrow "
            f"{'them' if len(spans) > 1 else 'it'} to one level if the interval shrinks as 1/√copies (a group of few "
            "examples narrows more slowly)") if need and max(need) > copies else ""
    return (f"With {copies} copies the interval{'s' if len(spans) > 1 else ''} of "
            f"{', '.join(g['name'] for g in spans)} span{'' if len(spans) > 1 else 's'} more than one level, so the "
            f"level is a range, not its lower end{more}.")


# The headline's terms, each explained in a line where the audit shows it (audit.md, audit.html): only those the
# answer uses are listed.
TERMS = {
    "online LiRA": "the likelihood-ratio attack (Carlini et al. 2022): an example's score on the target copy "
                   "against its scores on the other copies that did and did not train on it",
    "RMIA": "relative membership inference (Zarifzadeh et al. 2024): the example's likelihood ratio on the target "
            "against population examples no copy trained on (the test split)",
    "loss threshold": "the simplest attack: a low loss on the target copy reads as member",
    "most exposed": "ranked by the membership log-likelihood ratio over the copies (exposure.csv, rank 1 = most "
                    "exposed); the examples with the largest gradient norms on your model are another group",
    "rule 3": "the current level rule: each group's level from both ends of the 95% interval of its AUC "
              "(README, 'Audit rules and their history')",
    "point AUC": "the AUC estimate itself, without its interval (rule 1 read the levels off it)",
    "ε": "the empirical ε lower bound: the smallest differential-privacy ε the attack's hits and false alarms "
         "are consistent with at 95% confidence; a floor, not an estimate of ε",
}


def terms_used(*texts: str) -> dict[str, str]:
    """The :data:`TERMS` that ``texts`` use, in the table's order."""
    joined = " ".join(texts)
    return {k: v for k, v in TERMS.items() if k in joined}


def setter_sentence(groups: list[dict[str, Any]]) -> str:
    """Which group sets the audit's level: the one with the highest lower level and, for a range, the one with
    the highest upper level (the others' intervals reach no higher)."""
    if not groups:
        return ""
    low = level_setter(groups)
    high = max(groups, key=lambda g: (LEVELS.index(g["level_upper"]), g["auc_ci"][1]))
    def short(g: dict[str, Any]) -> str:  # the group's name without its parenthesis, then its numbers
        return f"{g['name'].split(' (')[0]} ({_numbers(g)})"

    others = "; the other groups' intervals reach no higher" if len(groups) > 1 else ""
    if low is high or (low["level_lower"] == low["level_upper"] and low["level_upper"] == high["level_upper"]):
        return f"The level is set by {short(low)}{others}."
    return (f"The level's lower end ({low['level_lower']}) is set by {short(low)}, its upper end "
            f"({high['level_upper']}) by {short(high)}{others}.")


def headline(result: dict[str, Any], groups: list[dict[str, Any]], blocker: str | None,
             eps: dict[str, Any] | None) -> str:
    """One plain paragraph: who is identifiable (both ends), what the data cannot tell, what BN has to do with it."""
    if not groups:
        return ("Membership leakage was not measured (no shadow models): the findings below are indirect signs. "
                "Rerun this audit with --shadow-models 16 added to measure who in the training set an attacker can "
                "identify.")
    mem = result["membership"]
    if blocker:
        return (f"{blocker} So no risk level is given: the attack numbers below describe the copies' recipe as it "
                "ran, not your model.")
    standing = [g for g in groups if g["group"] != "all" and g["level_upper"] != "low"]
    whole = next((g for g in groups if g["group"] == "all"), None)
    text = []
    if standing:
        who = "; and ".join(f"{g['name']}, {g['words']} ({_numbers(g)})" for g in standing)
        lead = ("Who is identifiable" if any(g["level_lower"] == "elevated" for g in standing)
                else "Who may stand out")
        text.append(f"{lead}: {who}.")
    elif len(groups) > 1:
        text.append(f"No group tested here stands out: every interval's upper end is below AUC {AUC_MODERATE}, so "
                    "the data rule out that the known outliers or the examples with the largest gradient norms leak more than "
                    "slightly.")
    if whole:
        text.append(f"{'Typical training examples' if standing else 'The training set as a whole'}: {whole['words']} "
                    f"({_numbers(whole)}).")
    text.append(f"(Attacks over {mem['shadow_models']} shadow copies of your recipe; 95% intervals.)")
    text.append(setter_sentence(groups))
    spans = span_sentence(groups, mem["shadow_models"])
    cautious = any(g["cautions"] for g in groups)
    top = top_sentence(mem.get("exposure"))
    return " ".join([*text, *([top] if top else []), *([spans] if spans else []), bn_share(result, groups)]) + (
        f" {eps['text']}" if eps and eps["informative"] else "") + (
        " Some of these numbers rest on few scores (see Cautions)." if cautious else "")


def risk_summary(result: dict[str, Any]) -> dict[str, Any]:
    """The audit's answer from its measured sections.

    Args:
        result: the audit result so far (norm_layers, gamma_sigma, gradient_norms, accuracy, warnings,
            membership, optionally gs_reg_comparison).

    Returns:
        ``{"level", "title", "level_lower", "level_upper", "level_point_auc", "level_lower_bound", "rule",
        "basis", "headline", "groups", "epsilon", "findings", "finding_levels", "finding_kinds",
        "indicator_level", "cautions", "calibration", "recommendations", "note", "terms"}``: ``terms`` explains
        each term of :data:`TERMS` the answer uses; ``level`` is a level or a
        range of levels from the attacks, "not assessed" when the copies do not resemble the model, or
        "not measured" without shadow models.
    """
    groups = group_findings(result)
    explain = explaining_findings(result)
    cal = calibration(result)
    blocker = level_blocker(result, cal) if groups else None
    levels = audit_level(groups)
    if blocker:
        levels["level"] = NOT_ASSESSED
    eps = epsilon_finding(result, groups) if groups and not blocker else None
    indicators = max((lvl for lvl, _ in explain), key=LEVELS.index, default="low")
    cautions = list(dict.fromkeys(f"{g['name']}: {c}" for g in groups for c in g["cautions"]))
    title = levels["level"] + (" — the shadow copies do not resemble your model" if blocker and cal and
                               not cal["assessed"] else " — the model is at chance level" if blocker else "")
    basis = (f"membership attacks over {result['membership']['shadow_models']} shadow copies, each group's level "
             f"from both ends of its AUC interval (rule {RULE['version']}, {RULE['date']}); the earlier rules: "
             f"lower end only {levels['level_lower_bound']}, point AUC {levels['level_point_auc']}" if groups
             else f"nothing measured: no shadow models (the indirect signs alone rate {indicators})")
    risk = {**levels, "title": title, "rule": RULE, "basis": basis, "groups": groups, "epsilon": eps,
            "headline": headline(result, groups, blocker, eps),
            "findings": [g["text"] for g in groups] + [f for _, f in explain],
            "finding_levels": [NOT_ASSESSED if blocker else g["level"] for g in groups] + [lvl for lvl, _ in explain],
            "finding_kinds": ["measured"] * len(groups) + ["explains"] * len(explain),
            "indicator_level": indicators, "cautions": cautions, "calibration": cal, "blocker": blocker,
            "note": f"levels: attacks, from both ends of the 95% interval of the pooled AUC (thresholds "
                    f"{AUC_MODERATE}, {AUC_ELEVATED}); explaining signals are rules of thumb from the study (BN scales outliers' "
                    "margin growth by (γ/σ)²), not calibrated guarantees; thresholds in bnmem.auditing"}
    risk["recommendations"] = recommendations(result, risk)
    risk["terms"] = terms_used(risk["basis"], risk["headline"], *risk["findings"])
    return risk


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
