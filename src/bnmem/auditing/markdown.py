"""The audit as a markdown report (``audit.md``, also printed by ``bnmem audit``): the answer first, then the
measured sections it rests on."""

from __future__ import annotations

from typing import Any

from bnmem.auditing.findings import ci_text as _ci, pct, tpr_text
from bnmem.auditing.leakage import FPRS, estimable
from bnmem.auditing.report import ATTACK_NAMES
from bnmem.formatting import count_text, eps_value, fmt

RECIPE_KEYS = ("epochs", "lr", "batch_size", "optimizer", "momentum", "weight_decay", "schedule", "augment", "gs_reg")


def answer_lines(result: dict[str, Any]) -> list[str]:
    """Level, the headline paragraph, the calibration warning, findings with levels, cautions, advice."""
    risk = result["risk"]
    lines = [f"## Risk: {risk['title']}", "", f"_Basis: {risk['basis']}._", "", risk["headline"], ""]
    if not (risk.get("target") or {"measured": True})["measured"]:  # what cannot be measured, and how to
        lines += [f"_{risk['target']['text']}_", ""]
    if risk.get("terms"):  # the jargon above, explained where it is shown
        lines += ["_Terms: " + "; ".join(f"**{k}**: {v}" for k, v in risk["terms"].items()) + "._", ""]
    cal = risk.get("calibration")
    if cal and cal.get("warning") and cal["warning"] != risk.get("blocker"):
        lines += [f"**Warning:** {cal['warning']}", ""]
    lines += [f"**Warning:** {w['text'][0].upper()}{w['text'][1:]}." for w in result.get("warnings") or []]
    lines += [""] if result.get("warnings") else []
    lines += ["### Findings", "", "| level | kind | finding |", "|---|---|---|"]
    lines += [f"| **{lvl}** | {kind} | {text} |"
              for lvl, kind, text in zip(risk["finding_levels"], risk["finding_kinds"], risk["findings"])] + [""]
    if risk["cautions"]:
        lines += ["### Cautions", ""] + [f"- {c}" for c in risk["cautions"]] + [""]
    lines += ["### Recommendations", ""] + [f"- {r}" for r in risk["recommendations"]]
    return lines + ["", f"_{risk['note']}_", ""]


def recipe_text(train: dict[str, Any]) -> str:
    """The recipe a set of copies trained with, every setting that shapes how they fit."""
    return ", ".join(f"{k} {train[k]}" for k in RECIPE_KEYS if k in train)


def shadow_lines(result: dict[str, Any], exposure: bool = True) -> list[str]:
    """The shadow copies beside the model, the recipe they used, the attacks per group with intervals and (unless
    ``exposure`` is False: the HTML renders it with links) the most exposed files."""
    mem, cal = result.get("membership"), result["risk"].get("calibration")
    if not mem:
        return []
    lines = ["## Shadow copies and their recipe", "", "| | train accuracy | test accuracy |", "|---|---|---|",
             f"| your model | {pct(result['accuracy']['train_acc'])} | {pct(result['accuracy']['test_acc'])} |",
             f"| shadow copies (mean of {mem['shadow_models']}; train = their own half) | "
             f"{pct(mem['shadow_accuracy']['train_in'])} | {pct(mem['shadow_accuracy'].get('test'))} |", ""]
    if cal:
        lines += [f"Declared margin: {100 * cal['margin']:.0f} points of training accuracy; the copies are "
                  f"{'within' if cal['assessed'] else 'outside'} it ({100 * cal['train_gap']:+.0f} points).", ""]
    steps = f" Training length: {mem['steps']['text']}." if mem.get("steps") else ""
    matched = f" {mem['matched']['text']}" if mem.get("matched") else ""
    if mem.get("train_fn"):
        lines += [f"Trained by: your training function `{mem['train_fn']['name']}` (bnmem's member split and seeds; "
                  f"its code identified by {mem['train_fn']['source_sha256'][:20]}).", ""]
    else:
        lines += [f"Recipe used: {recipe_text(mem['train'])}.{steps}{matched}", ""]
    return (lines + attack_lines(result, mem) + (exposure_lines(mem.get("exposure")) if exposure else [])
            + memorization_lines(mem.get("memorization_scores")))


def exposure_lines(section: dict[str, Any] | None) -> list[str]:
    """The most exposed training files (the first rows of exposure.csv)."""
    if not section:
        return []
    lines = [f"## Most exposed training files ({section['file']}: all {section['n']}, ranked)", "",
             f"{section['definition']}.", "", "| rank | file | group | log-LR [95%] | copies IN | gradient norm |",
             "|---|---|---|---|---|---|"]
    for r in section["top"]:
        name = f"`{r['path']}`" if r["path"] else str(r["index"])
        lines.append(f"| {r['rank']} | {name} | {r['group']} | {exposure_ci(r)} | {r['copies_in']} | "
                     f"{fmt(r['gradient_norm'])} |")
    return lines + [""]


def exposure_ci(r: dict[str, Any]) -> str:
    """'4.21 [1.10, 7.32]' (no interval with fewer than 2 copies IN)."""
    if r["log_lr"] is None:
        return "–"
    return f"{r['log_lr']:.2f}" + (f" [{r['log_lr_lo']:.2f}, {r['log_lr_hi']:.2f}]" if r["log_lr_lo"] is not None
                                   else "")


def attack_lines(result: dict[str, Any], mem: dict[str, Any]) -> list[str]:
    """The pooled attacks per group, ε in its place, and the per-target means (with what they cannot show)."""
    lines = ["## Membership inference (shadow copies)", "", mem["protocol"] + ".", "",
             "| group | examples | attack | AUC [95%] | TPR at 1% FPR [95%] | TPR at 0.1% FPR [95%] |",
             "|---|---|---|---|---|---|"]
    for attack, groups in mem.get("leakage", {}).items():
        for group, g in groups.items():
            lines.append(f"| {group} | {g['n_examples']} | {ATTACK_NAMES.get(attack, attack)} | "
                         f"{_ci(g['auc'], g['ci']['auc'])} | {tpr_text(g)} | {tpr_text(g, 'tpr_at_0.1pct_fpr')} |")
    eps = result["risk"].get("epsilon")
    lines += ["", "Pooled over the targets (one threshold over every copy's scores). AUC intervals: bootstrap over "
                  "examples; TPR intervals: exact (Clopper–Pearson) over the member scores; a TPR at an FPR needs at "
                  "least 1/FPR non-member scores.", ""] + ([eps["text"], ""] if eps else [])
    lines += ["Per-target means (each copy its own threshold, then averaged; with few non-members per copy a "
              "per-target TPR at a low FPR is not estimable, n/e, which is why it can differ from the pooled one):",
              "", "| attack | subset | AUC | TPR@1% FPR | TPR@0.1% FPR | ε lower bound |", "|---|---|---|---|---|---|"]
    sizes = mem.get("subset_sizes") or {}
    for attack, subs in mem["attacks"].items():
        for sub, v in subs.items():
            n_out = (sizes.get(sub) or result["data"]["n_train"]) // 2  # each example OUT for half of the copies
            tprs = [pct(v.get(k)) if estimable(n_out, f) else "n/e" for k, f in FPRS.items()]
            lines.append(f"| {attack} | {sub} | {v['auc']:.3f} | {tprs[0]} | {tprs[1]} | {fmt(v.get('eps_lb'))} |")
    return lines + ["", f"Reinitialized: {mem['reinitialized_parameters']}; views: {len(mem['views'])}; "
                        f"BN queried in {mem['bn_mode_at_query']} mode.", ""]


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
    """``--compare-gs-reg``: the paired AUC differences per group and attack, and the accuracy cost."""
    cmp = result.get("gs_reg_comparison")
    if not cmp:
        return []
    level_attack = {g["group"]: g["attack"] for g in result["risk"]["groups"]}
    lines = [f"## {cmp['title']} (λ = {cmp['lambda']:g}, τ = {cmp['tau']:g})", "",
             "| group | attack | AUC without | AUC with | difference [95%, paired] |", "|---|---|---|---|---|"]
    for attack, groups in cmp["auc"].items():
        for group, d in groups.items():
            mark = " (the level's attack)" if level_attack.get(group) == attack else ""
            lines.append(f"| {group} | {ATTACK_NAMES.get(attack, attack)}{mark} | {d['without']:.3f} | "
                         f"{d['with']:.3f} | {d['diff']:+.3f} [{d['ci'][0]:+.3f}, {d['ci'][1]:+.3f}] |")
    lines += ["", "| copies | train accuracy (own half) | test accuracy |", "|---|---|---|"]
    for arm, what in (("without", "without the regularizer"), ("with", f"with λ = {cmp['lambda']:g}")):
        a = cmp["shadow_accuracy"][arm]
        lines.append(f"| {what} | {pct(a['train_in'])} | {pct(a.get('test'))} |")
    cost = cmp["cost_test"]
    ci = f" [{cost['ci'][0]:.1f}, {cost['ci'][1]:.1f}]" if cost["ci"] else ""
    gap = cmp.get("calibration_gap")
    return lines + ["", f"Accuracy cost: {cost['points']:.1f}{ci} points of test accuracy (paired t-interval over "
                        "the copies; negative: a gain). Copy m of each set shares its initial weights, half and batch "
                        "order, and both sets are attacked with the same keep matrix. Regularized recipe: "
                        f"{recipe_text(cmp['train'])}." + (f" {cmp['matched']['text']}" if cmp.get("matched") else "")
                    + (f" The regularized copies are {100 * gap:+.0f} points from your model's training accuracy"
                       + (" (outside the margin: the gain is confounded with under-fitting)" if cmp["confounded"]
                          else "") + "." if gap is not None else ""), ""]


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
    for key, what in (("masks", "known corrupted"), ("rare", "listed as rare")):
        mk = gn.get(key)
        if not mk:
            continue
        above = (f"; {pct(mk['above_rest_percentile'])} of them above the others' {mk['rest_percentile']}th "
                 f"percentile" if mk.get("above_rest_percentile") is not None else "")
        lines += [f"Top-{len(gn['top_k'])}: {mk['top_k_flagged']} {what} "
                  f"({pct(mk['top_k_fraction_flagged'])}; {pct(mk['fraction_flagged_overall'])} of the data){above}."]
        lines += ["", "| subset | n | median | mean |", "|---|---|---|---|"]
        lines += [f"| {s} | {v['n']} | {fmt(v['median'], '.4f')} | {fmt(v['mean'], '.4f')} |"
                  for s, v in mk["by_subset"].items()] + [""]
    lines += ["| rank | index | grad norm | label | predicted | flagged |", "|---|---|---|---|---|---|"]
    lines += [f"| {i + 1} | {r['index']}" + (f" (`{r['file']}`)" if r.get("file") else "")
              + f" | {r['grad_norm']:.4f} | {r['label']} | {r['predicted']} | {r['flagged'] or '-'} |"
              for i, r in enumerate(gn["top_k"][:10])]
    if len(gn["top_k"]) > 10:
        lines.append(f"| … | ({len(gn['top_k']) - 10} more in audit.json) | | | | |")
    return lines + [""] + accuracy_lines(result["accuracy"])


def accuracy_lines(acc: dict[str, Any]) -> list[str]:
    """Train/test accuracy, and the fit of each kind of listed example that the data have."""
    cols = [("train", "train_acc"), ("test", "test_acc"), ("gap", "gap"), ("clean train", "clean_train_acc"),
            ("mislabeled fit (their given labels)", "noisy_acc"), ("OOD fit", "ood_acc"),
            ("rare classified correctly", "rare_acc")]
    cols = [(name, key) for name, key in cols if key in ("train_acc", "test_acc", "gap") or acc.get(key) is not None]
    return ["## Accuracy (eval mode)", "", "| " + " | ".join(n for n, _ in cols) + " |", "|" + "---|" * len(cols),
            "| " + " | ".join(fmt(acc.get(k)) for _, k in cols) + " |", ""]


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
    known += f", {d['n_rare']} listed as rare" if d.get("n_rare") else ""
    lines += [f"Data: {d['dataset']}, {d['n_train']} training / {d['n_test']} test examples{known}", ""]
    return "\n".join(lines + answer_lines(result) + detail_lines(result))


def one_run_lines(one: dict[str, Any] | None) -> list[str]:
    """The one-run audit of the recipe: the floor, beside the multi-run one, and its guesses per k."""
    if not one:
        return []
    lines = ["## One-run audit of the recipe (inserted canaries)", "", one["text"], "", f"Method: {one['method']}; "
             f"canaries: {one['canary_kind']}; {100 * one['in_canaries_fit']:.0f}% of the IN canaries are fitted "
             f"(the model prefers their random label); {one['seconds']:.0f} s.", "",
             "| k (each side) | guesses | correct | ε lower bound |", "|---|---|---|---|"]
    lines += [f"| {p['k']} | {p['guesses']} | {p['correct']} | {eps_value(p['eps_lb'])} |" for p in one["per_k"]]
    return lines + [""]


def detail_lines(result: dict[str, Any], exposure: bool = True) -> list[str]:
    """Everything after the answer (audit.html renders these same lines, so the two reports agree; it renders the
    exposure table itself, with links to the images: ``exposure=False``)."""
    return (target_lines(result) + shadow_lines(result, exposure) + slice_lines(result)
            + one_run_lines(result.get("one_run")) + comparison_lines(result) + model_lines(result)
            + gradient_lines(result))


def _leakage_rows(leakage: dict[str, dict[str, Any]], label: str) -> list[str]:
    return [f"| {name} | {g['member_scores']} / {g['nonmember_scores']} | {ATTACK_NAMES.get(attack, attack)} | "
            f"{_ci(g['auc'], g['ci']['auc'])} | {tpr_text(g)} | {tpr_text(g, 'tpr_at_0.1pct_fpr')} |"
            for attack, subs in leakage.items() for name, g in subs.items() if (name == "all") == (label == "all")]


LEAKAGE_HEADER = ["| candidates | member / non-member scores | attack | AUC [95%] | TPR at 1% FPR [95%] | "
                  "TPR at 0.1% FPR [95%] |", "|---|---|---|---|---|---|"]


def target_lines(result: dict[str, Any]) -> list[str]:
    """The target-model audit: the shipped model attacked on its members against the held-out files, whole and
    per slice (:mod:`bnmem.auditing.target`)."""
    sec = result.get("target")
    if not sec:
        return []
    lines = ["## Your model as shipped: members against held-out files", "", sec["protocol"] + ".", ""]
    if sec.get("rmia_population"):
        lines += [f"RMIA's population: {sec['rmia_population']}" + (f"; offline a = {sec['rmia_a']:g}, "
                  f"{sec['rmia_a_chosen']}" if "rmia_a" in sec else "") + ".", ""]
    lines += LEAKAGE_HEADER + _leakage_rows(sec["leakage"], "all") + [""]
    slices = _leakage_rows(sec["leakage"], "slices")
    if slices:
        lines += ["Per slice (class = the given label; correct = your model predicts it):", ""]
        lines += LEAKAGE_HEADER + slices + [""]
    lines += [f"- {k}: {v}" for k, v in sec["skipped"].items()] + ([""] if sec["skipped"] else [])
    return lines + [f"Your model's accuracy on the held-out files: {pct(sec['accuracy_held_out'])}.", ""]


def slice_lines(result: dict[str, Any]) -> list[str]:
    """The copies' attacks per slice, each slice's level from both ends of its interval (:mod:`bnmem.auditing.slices`)."""
    mem = result.get("membership") or {}
    sl, risk = mem.get("slices"), result["risk"].get("slices")
    if not sl:
        return []
    lines = ["## Slices (shadow copies)", "", f"Slices: {sl['definition']}.", ""]
    if risk:
        lines += [f"Counting the slices, the level is {risk['level']} (the groups': {result['risk']['level']}).", "",
                  "| slice | examples | attack | AUC [95%] | level |", "|---|---|---|---|---|"]
        lines += [f"| {g['group']} | {g['n_examples']} | {ATTACK_NAMES.get(g['attack'], g['attack'])} | "
                  f"{g['auc']:.3f} [{g['auc_ci'][0]:.3f}, {g['auc_ci'][1]:.3f}] | {g['level']} |" for g in risk["items"]]
        lines += [""]
    lines += LEAKAGE_HEADER + _leakage_rows(sl["leakage"], "slices") + [""]
    return lines + [f"- {k}: {v}" for k, v in sl["skipped"].items()] + ([""] if sl["skipped"] else [])
