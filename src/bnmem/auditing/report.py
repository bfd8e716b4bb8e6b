"""The plain-language part of ``bnmem audit``: risk findings and the markdown report.

The rules of thumb follow the study: BN multiplies an outlier's
per-step margin growth by (γ/σ)², so channels with |γ|/σ > 1 amplify the
memorization of rare samples; large per-sample gradient norms concentrate on
samples the model has to memorize; a train-test gap and a high LiRA AUC are the
direct signs of leakage. The thresholds below are heuristics for a first look,
not calibrated guarantees, and the report says so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bnmem.formatting import fmt, pct

LEVELS = ("low", "moderate", "elevated")
# Fraction of BN channels with |γ|/σ > 1 (running σ) at which amplification is moderate / elevated.
GS_MODERATE, GS_ELEVATED = 0.2, 0.5
# Train-test accuracy gap (fraction) that is worth a mention / a concern.
GAP_MODERATE, GAP_ELEVATED = 0.03, 0.10
# Online-LiRA AUC over the shadow copies (0.5 = chance).
AUC_MODERATE, AUC_ELEVATED = 0.55, 0.60
# The top-k gradient norms hold this many times more known outliers than the data does.
ENRICH_ELEVATED = 3.0
RECOMMEND = ("consider the γ/σ regularizer (--gs-reg λ, e.g. `bnmem mitigate` to pick λ), GroupNorm/LayerNorm "
             "or no normalization, and compare memorization and LiRA AUC with `bnmem run`")


def eps_lb_sentence(eps_lb: float, eps_max: float | None = None) -> str:
    """The empirical ε lower bound in one plain sentence, with what it does and does not mean."""
    worst = f" (largest over the shadow copies {eps_max:.2f})" if eps_max is not None else ""
    return (f"Empirical ε lower bound {eps_lb:.2f}{worst}: from online LiRA's hits and false alarms, any "
            "(ε, δ = 1/N) differential-privacy guarantee for this training recipe would need ε at least this "
            "large (95% confidence per copy); it is a floor set by one attack, not a privacy guarantee.")



def risk_summary(result: dict[str, Any]) -> dict[str, Any]:
    """Findings (one sentence each), an overall level and recommendations.

    Args:
        result: the audit result so far (norm_layers, gamma_sigma, gradient_norms,
            accuracy, membership).

    Returns:
        ``{"level": low|moderate|elevated, "findings": [...], "recommendations": [...], "note": ...}``.
    """
    findings: list[tuple[str, str]] = []  # (level, sentence)
    layers = result["norm_layers"]
    bn = [r for r in layers if r["batchnorm"]]
    other = sorted({r["type"] for r in layers if not r["batchnorm"]})
    if not layers:
        findings.append(("low", "No normalization layers: BN's (γ/σ)² amplification of outliers does not apply; "
                                "the gradient-norm and accuracy findings below still do."))
    elif not bn:
        findings.append(("low", f"Normalization without batch statistics ({', '.join(other)}): no BN "
                                "(γ/σ)² amplification measured here."))
    bn_level = "low"
    gs = result.get("gamma_sigma") or {}
    running = (gs.get("running") or {}).get("summary") or (gs.get("batch") or {}).get("summary")
    if bn and running and running.get("frac_above_1") is not None:
        frac = running["frac_above_1"]
        level = "elevated" if frac >= GS_ELEVATED else "moderate" if frac >= GS_MODERATE else "low"
        words = {"elevated": "elevated memorization of rare samples",
                 "moderate": "some amplification of rare samples' influence",
                 "low": "little amplification"}[level]
        bn_level = level
        findings.append((level, f"BN present ({len(bn)} layer{'s' if len(bn) != 1 else ''}); {pct(frac, 0)} of "
                                f"channels have |γ|/σ > 1 "
                                f"(median {running['median_ratio']:.2f}) → {words}."))
    gn = result["gradient_norms"]
    masks = gn.get("masks")
    if masks and masks.get("top_k_fraction_flagged") is not None:
        enrich = masks.get("enrichment") or 0.0
        level = "elevated" if enrich >= ENRICH_ELEVATED else "moderate" if enrich > 1.5 else "low"
        findings.append((level, f"{masks['top_k_flagged']} of the top-{len(gn['top_k'])} gradient norms are known "
                                f"corrupted samples ({pct(masks['top_k_fraction_flagged'], 0)} vs "
                                f"{pct(masks['fraction_flagged_overall'], 0)} of the data): the model's largest "
                                "per-sample influence sits on samples it can only memorize."))
    elif gn["top_k"] and gn.get("top_k_mean_over_median"):
        findings.append(("low", f"The top-{len(gn['top_k'])} gradient norms are "
                                f"{gn['top_k_mean_over_median']:.1f}x the median: inspect those examples "
                                "(audit.json lists them) for mislabeled or atypical samples."))
    acc = result["accuracy"]
    if acc.get("gap") is not None:
        gap = acc["gap"]
        level = "elevated" if gap >= GAP_ELEVATED else "moderate" if gap >= GAP_MODERATE else "low"
        findings.append((level, f"Train accuracy {pct(acc['train_acc'], 0)} vs test {pct(acc['test_acc'], 0)} "
                                f"(gap {100 * gap:+.1f} points)" + (": the model fits its training set beyond what "
                                "generalizes, a membership signal." if level != "low" else ".")))
    for key, what in (("noisy_acc", "flipped labels"), ("ood_acc", "OOD samples' random labels")):
        if acc.get(key) is not None:
            level = "elevated" if acc[key] >= 0.5 else "moderate" if acc[key] >= 0.2 else "low"
            findings.append((level, f"It fits {pct(acc[key], 0)} of the {what} (pure memorization)."))
    mem = result.get("membership")
    if mem:
        online = mem["attacks"]["online"]["all"]
        level = "elevated" if online["auc"] >= AUC_ELEVATED else "moderate" if online["auc"] >= AUC_MODERATE else "low"
        text = (f"LiRA over {mem['shadow_models']} shadow copies of this recipe: AUC {online['auc']:.3f}, "
                f"TPR {pct(online['tpr_at_1pct_fpr'], 0)} at 1% FPR")
        if "outliers" in mem["attacks"]["online"]:
            text += f"; on the corrupted samples AUC {mem['attacks']['online']['outliers']['auc']:.3f}"
        findings.append((level, text + "."))
        findings += [("low", eps_lb_sentence(online["eps_lb"], online.get("eps_lb_max")))] if "eps_lb" in online else []
    overall = max((lvl for lvl, _ in findings), key=LEVELS.index, default="low")
    recs = []
    if bn and bn_level != "low":
        recs.append(f"BN amplifies what this model memorizes: {RECOMMEND}.")
    elif overall != "low":
        recs.append("The model memorizes parts of its training set: consider regularization, more data or "
                    "removing mislabeled samples (the top gradient norms point at candidates).")
    if not mem:
        recs.append("For a direct membership-inference estimate, rerun with --shadow-models 16 (or more).")
    return {
        "level": overall,
        "findings": [f for _, f in findings],
        "finding_levels": [lvl for lvl, _ in findings],
        "recommendations": recs,
        "note": "rules of thumb from the study (BN scales outliers' margin growth by (γ/σ)²), not calibrated "
                "guarantees; thresholds in bnmem.auditing.report",
    }


def to_markdown(result: dict[str, Any]) -> str:
    """The audit as a short markdown report (also printed by ``bnmem audit``)."""
    m, d, risk = result["model"], result["data"], result["risk"]
    lines = [f"# bnmem audit: {m['class']} ({m['format']}, {m['parameters']:,} parameters)", ""]
    if m.get("file"):
        lines += [f"Model file: `{m['file']}` (sha256 {m['sha256'][:12]}…)", ""]
    lines += [f"Data: {d['dataset']}, {d['n_train']} training / {d['n_test']} test examples"
              + (f", {d['n_noisy']} flipped labels, {d['n_ood']} OOD" if d.get("outliers_known") else ""), ""]
    lines += [f"## Risk: {risk['level']}", ""] + [f"- {f}" for f in risk["findings"]] + [""]
    lines += [f"**Recommendation:** {r}" for r in risk["recommendations"]] + ["", f"_{risk['note']}_", ""]
    lines += ["## Normalization layers", ""]
    if not result["norm_layers"]:
        lines += ["None: this model has no normalization layers.", ""]
    else:
        lines += ["| layer | type | size |", "|---|---|---|"]
        lines += [f"| {r['name']} | {r['type']} | {r['size']} |" for r in result["norm_layers"]] + [""]
    gs = result.get("gamma_sigma")
    if gs:
        lines += ["## BN |γ|/σ per layer", ""]
        modes = [mode for mode in ("running", "batch") if mode in gs]
        header = "| layer | channels |" + "".join(f" median ({mode} σ) | frac > 1 ({mode} σ) |" for mode in modes)
        lines += [header, "|---|---|" + "---|---|" * len(modes)]
        for layer in gs[modes[0]]["layers"]:
            row = f"| {layer} | {gs[modes[0]]['layers'][layer]['n_channels']} |"
            for mode in modes:
                v = gs[mode]["layers"].get(layer, {})
                row += f" {fmt(v.get('median_ratio'))} | {fmt(v.get('frac_above_1'), '.2f')} |"
            lines.append(row)
        lines += ["", "σ running = sqrt(running_var + eps); σ batch = std of the layer input over one training "
                      "batch (BN in training mode)."] + [f"Note: {n}" for n in gs.get("notes", [])] + [""]
    gn = result["gradient_norms"]
    lines += ["## Per-sample gradient norms", "",
              f"L2 norm over all parameters of each example's loss gradient ({gn['definition']} definition, "
              f"{gn['method']}, float64; {gn['subset']}); median {fmt(gn['median'], '.4f')}.", ""]
    if gn.get("masks"):
        mk = gn["masks"]
        lines += [f"Top-{len(gn['top_k'])}: {mk['top_k_flagged']} known corrupted "
                  f"({pct(mk['top_k_fraction_flagged'], 0)}; {pct(mk['fraction_flagged_overall'], 0)} of the data)."]
        lines += ["", "| subset | n | median | mean |", "|---|---|---|---|"]
        lines += [f"| {s} | {v['n']} | {fmt(v['median'], '.4f')} | {fmt(v['mean'], '.4f')} |"
                  for s, v in mk["by_subset"].items()] + [""]
    lines += ["| rank | index | grad norm | label | predicted | flagged |", "|---|---|---|---|---|---|"]
    lines += [f"| {i + 1} | {r['index']}" + (f" (`{r['file']}`)" if r.get("file") else "")
              + f" | {r['grad_norm']:.4f} | {r['label']} | {r['predicted']} | {r['flagged'] or '-'} |"
              for i, r in enumerate(gn["top_k"][:10])]
    if len(gn["top_k"]) > 10:
        lines.append(f"| … | ({len(gn['top_k']) - 10} more in audit.json) | | | | |")
    acc = result["accuracy"]
    lines += ["", "## Accuracy (eval mode)", "", "| train | test | gap | clean train | flipped labels fit | OOD fit |",
              "|---|---|---|---|---|---|",
              f"| {fmt(acc['train_acc'])} | {fmt(acc['test_acc'])} | {fmt(acc['gap'])} | "
              f"{fmt(acc.get('clean_train_acc'))} | {fmt(acc.get('noisy_acc'))} | {fmt(acc.get('ood_acc'))} |", ""]
    mem = result.get("membership")
    if mem:
        lines += ["## Membership inference (shadow copies)", "", mem["protocol"] + ".", "",
                  "| attack | subset | AUC | TPR@1% FPR | TPR@0.1% FPR |", "|---|---|---|---|---|"]
        for attack, subs in mem["attacks"].items():
            for sub, v in subs.items():
                lines.append(f"| {attack} | {sub} | {v['auc']:.3f} | {pct(v['tpr_at_1pct_fpr'], 0)} | "
                             f"{pct(v['tpr_at_0.1pct_fpr'], 0)} |")
        lines += ["", f"Reinitialized: {mem['reinitialized_parameters']}; views: {len(mem['views'])}; "
                      f"BN queried in {mem['bn_mode_at_query']} mode.", ""]
    return "\n".join(lines)


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
    candidates = [root / "metrics.json"] if (root / "metrics.json").is_file() else []
    candidates += sorted(root.rglob("metrics.json")) if root.is_dir() else []
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
