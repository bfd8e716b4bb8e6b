"""The audit as a markdown report (``audit.md``, also printed by ``bnmem audit``): the answer first, then the
measured sections it rests on."""

from __future__ import annotations

from typing import Any

from bnmem.auditing.findings import ci_text as _ci, pct
from bnmem.formatting import fmt
from bnmem.auditing.report import ATTACK_NAMES
from bnmem.formatting import count_text


def answer_lines(result: dict[str, Any]) -> list[str]:
    """Level, the headline paragraph, the calibration warning, findings with levels, cautions, advice."""
    risk = result["risk"]
    lines = [f"## Risk: {risk['level']}", "", f"_Basis: {risk['basis']}._", "", risk["headline"], ""]
    cal = risk.get("calibration")
    if cal and cal.get("warning"):
        lines += [f"**Warning:** {cal['warning']}", ""]
    lines += ["### Findings", "", "| level | kind | finding |", "|---|---|---|"]
    lines += [f"| **{lvl}** | {kind} | {text} |"
              for lvl, kind, text in zip(risk["finding_levels"], risk["finding_kinds"], risk["findings"])] + [""]
    if risk["cautions"]:
        lines += ["### Cautions", ""] + [f"- {c}" for c in risk["cautions"]] + [""]
    lines += ["### Recommendations", ""] + [f"- {r}" for r in risk["recommendations"]]
    return lines + ["", f"_{risk['note']}_", ""]


def shadow_lines(result: dict[str, Any]) -> list[str]:
    """The shadow copies beside the model, the recipe they used, and the attacks per group with intervals."""
    mem, cal = result.get("membership"), result["risk"].get("calibration")
    if not mem:
        return []
    lines = ["## Shadow copies and their recipe", "", "| | train accuracy | test accuracy |", "|---|---|---|",
             f"| your model | {pct(result['accuracy']['train_acc'])} | {pct(result['accuracy']['test_acc'])} |",
             f"| shadow copies (mean of {mem['shadow_models']}; train = their own half) | "
             f"{pct(mem['shadow_accuracy']['train_in'])} | {pct(mem['shadow_accuracy'].get('test'))} |", ""]
    if cal:
        lines += [f"Declared margin: {100 * cal['margin']:.0f} points of training accuracy.", ""]
    t = mem["train"]
    recipe = ", ".join(f"{k} {t[k]}" for k in ("epochs", "lr", "batch_size", "optimizer", "momentum", "weight_decay",
                                                "schedule", "augment", "gs_reg") if k in t)
    lines += [f"Recipe used: {recipe}." + (f" {mem['matched']['text']}" if mem.get("matched") else ""), ""]
    lines += ["## Membership inference (shadow copies)", "", mem["protocol"] + ".", "",
              "| group | examples | attack | AUC [95%] | TPR at 1% FPR [95%] | TPR at 0.1% FPR [95%] |",
              "|---|---|---|---|---|---|"]
    for attack, groups in mem.get("leakage", {}).items():
        for group, g in groups.items():
            lines.append(f"| {group} | {g['n_examples']} | {ATTACK_NAMES.get(attack, attack)} | "
                         f"{_ci(g['auc'], g['ci']['auc'])} | "
                         f"{_ci(g['tpr_at_1pct_fpr'], g['ci']['tpr_at_1pct_fpr'], True)} | "
                         f"{_ci(g['tpr_at_0.1pct_fpr'], g['ci']['tpr_at_0.1pct_fpr'], True)} |")
    lines += ["", "Pooled over the targets; intervals: bootstrap over examples. Per-target means of every attack:",
              "", "| attack | subset | AUC | TPR@1% FPR | TPR@0.1% FPR |", "|---|---|---|---|---|"]
    for attack, subs in mem["attacks"].items():
        for sub, v in subs.items():
            lines.append(f"| {attack} | {sub} | {v['auc']:.3f} | {pct(v['tpr_at_1pct_fpr'])} | "
                         f"{pct(v['tpr_at_0.1pct_fpr'])} |")
    lines += ["", f"Reinitialized: {mem['reinitialized_parameters']}; views: {len(mem['views'])}; "
                  f"BN queried in {mem['bn_mode_at_query']} mode.", ""]
    return lines + memorization_lines(mem.get("memorization_scores"))


def memorization_lines(scores: dict[str, Any] | None) -> list[str]:
    """Feldman–Zhang scores of the user's examples over the shadow copies: per subset and the most memorized."""
    if not scores:
        return []
    lines = ["## Per-example memorization scores (shadow copies)", "", f"mem(i) = {scores['definition']}.", "",
             "| subset | examples | mean mem | mem > 0.5 |", "|---|---|---|---|"]
    lines += [f"| {name} | {v['n']} | {fmt(v['mean'])} | {pct(v['frac_above_half'])} |"
              for name, v in scores["by_subset"].items() if v["n"]]
    top = scores["top_memorized"]
    files = top.get("file") or [None] * len(top["index"])
    lines += ["", "| rank | index | mem |", "|---|---|---|"]
    lines += [f"| {r + 1} | {i}" + (f" (`{f}`)" if f else "") + f" | {fmt(m)} |"
              for r, (i, m, f) in enumerate(zip(top["index"], top["mem"], files))]
    return lines + ["", "Descriptive: a score near 1 means the copies answer this example's label only when they "
                        "trained on it; the level above rests on the attacks.", ""]


def comparison_lines(result: dict[str, Any]) -> list[str]:
    """``--compare-gs-reg``: the shadow copies without and with the regularizer, side by side."""
    cmp = result.get("gs_reg_comparison")
    if not cmp:
        return []
    a, b = cmp["without"], cmp["with"]
    lines = [f"## γ/σ regularizer on your data and architecture (λ = {cmp['lambda']:g}, τ = {cmp['tau']:g})", "",
             f"| | without (λ = {a['gs_reg']:g}) | with (λ = {b['gs_reg']:g}) |", "|---|---|---|"]
    for attack in b["auc"]:
        for group in b["auc"][attack]:
            x, y = a["auc"].get(attack, {}).get(group), b["auc"][attack][group]
            lines.append(f"| {ATTACK_NAMES.get(attack, attack)} AUC, {group} | "
                         f"{_ci(x['auc'], x['ci']) if x else '-'} | {_ci(y['auc'], y['ci'])} |")
    for key, what in (("train_in", "shadow train accuracy (own half)"), ("test", "shadow test accuracy")):
        lines.append(f"| {what} | {pct(a['shadow_accuracy'].get(key))} | {pct(b['shadow_accuracy'].get(key))} |")
    return lines + ["", f"Accuracy cost: {cmp['cost_test_points']:.1f} points of test accuracy (negative: a gain). "
                        "Both sets share initial weights, halves and batch order (paired).", ""]


def model_lines(result: dict[str, Any]) -> list[str]:
    """Normalization layers and BN |γ|/σ per layer."""
    lines = ["## Normalization layers", ""]
    if not result["norm_layers"]:
        lines += ["None: this model has no normalization layers.", ""]
    else:
        lines += ["| layer | type | size |", "|---|---|---|"]
        lines += [f"| {r['name']} | {r['type']} | {r['size']} |" for r in result["norm_layers"]] + [""]
    gs = result.get("gamma_sigma")
    if not gs:
        return lines
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
    return lines + ["", "σ running = sqrt(running_var + eps); σ batch = std of the layer input over one training "
                        "batch (BN in training mode)."] + [f"Note: {n}" for n in gs.get("notes", [])] + [""]


def gradient_lines(result: dict[str, Any]) -> list[str]:
    """Per-sample gradient norms: subsets and the top examples."""
    gn = result["gradient_norms"]
    lines = ["## Per-sample gradient norms", "",
             f"L2 norm over all parameters of each example's loss gradient ({gn['definition']} definition, "
             f"{gn['method']}, float64; {gn['subset']}); median {fmt(gn['median'], '.4f')}.", ""]
    if gn.get("masks"):
        mk = gn["masks"]
        lines += [f"Top-{len(gn['top_k'])}: {mk['top_k_flagged']} known corrupted "
                  f"({pct(mk['top_k_fraction_flagged'])}; {pct(mk['fraction_flagged_overall'])} of the data)."]
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
    return lines + ["", "## Accuracy (eval mode)", "",
                    "| train | test | gap | clean train | flipped labels fit | OOD fit |", "|---|---|---|---|---|---|",
                    f"| {fmt(acc['train_acc'])} | {fmt(acc['test_acc'])} | {fmt(acc['gap'])} | "
                    f"{fmt(acc.get('clean_train_acc'))} | {fmt(acc.get('noisy_acc'))} | {fmt(acc.get('ood_acc'))} |",
                    ""]


def to_markdown(result: dict[str, Any]) -> str:
    """The audit as a short markdown report (also printed by ``bnmem audit``)."""
    m, d = result["model"], result["data"]
    lines = [f"# bnmem audit: {m['class']} ({m['format']}, {count_text(m['parameters'])} parameters)", ""]
    if m.get("file"):
        lines += [f"Model file: `{m['file']}` (sha256 {m['sha256'][:12]}…)", ""]
    known = ""
    if d.get("outliers_known"):
        known = (f", {d['n_noisy']} listed as mislabeled" if "mislabeled_in_test" in d
                 else f", {d['n_noisy']} flipped labels, {d['n_ood']} OOD")
    lines += [f"Data: {d['dataset']}, {d['n_train']} training / {d['n_test']} test examples{known}", ""]
    lines += answer_lines(result) + shadow_lines(result) + comparison_lines(result)
    lines += model_lines(result) + gradient_lines(result)
    return "\n".join(lines)
