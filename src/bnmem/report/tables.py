"""The report's key tables, as plain data that both the HTML and the markdown render.

Each builder reads one lens's results (in the schema its runner writes) and
returns :class:`Table` objects; a lens whose results lack a field shows "—"
there rather than failing the whole report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bnmem.analysis_plan import BN
from bnmem.attacks import spec as attack_spec
from bnmem.formatting import EM_DASH, interval
from bnmem.report.results import (
    finite, fmt, gradnorm_checkpoints, layer_median, layer_rows, layer_type, lira_norms, lira_summary, mitigate_key,
    mitigate_variants, pct,
)
from bnmem.report.rundata import CellOutput, LensOutput
from bnmem.stats import difference_stats

LIRA_TABLE_SUBSETS = ("all", "outliers")


@dataclass
class Table:
    """A titled table of strings."""

    title: str
    header: list[str]
    rows: list[list[str]]
    caption: str = ""
    notes: list[str] = field(default_factory=list)
    preformatted: str | None = None  # text shown as is (a lens's own summary table), instead of rows


def memorization_table(cell: CellOutput, lens: LensOutput) -> Table:
    """Final accuracies and fit epochs per norm (means over seeds)."""
    d = lens.data
    norms = [n for n in (lens.conditions.get("norms") or []) if n in d] or [
        k for k, v in d.items() if isinstance(v, dict) and "per_seed" in v]
    rows = []
    for n in norms:
        fin = d[n].get("final") or {}
        fit = d[n].get("epochs_to_fit_noisy") or {}
        rows.append([n, str(len(d[n].get("per_seed") or {})), fmt(fin.get("noisy_acc")), fmt(fin.get("ood_acc")),
                     fmt(fin.get("clean_acc")), fmt(fin.get("test_acc")),
                     str((fit.get("50pct") or {}).get("mean_curve") or "—"),
                     str((fit.get("90pct") or {}).get("mean_curve") or "—")])
    epochs = epochs_text(lens.conditions.get("epochs"))
    return Table(
        f"Memorization — {cell.describe()}",
        ["norm", "seeds", "noisy acc", "OOD acc", "clean train acc", "test acc", "noisy 50% @ epoch",
         "noisy 90% @ epoch"],
        rows,
        f"final-epoch accuracies (epoch {epochs}), means over seeds; noisy acc is against the flipped label "
        "(memorization); fit epochs from the mean curve ('—': never reached)",
    )


def epochs_text(epochs: Any) -> str:
    """A lens's epochs: one number (the paper's protocol), or each norm's (fair arms: 'batch 10, none 19')."""
    if isinstance(epochs, dict):
        return ", ".join(f"{n} {e}" for n, e in epochs.items())
    return "?" if epochs is None else str(epochs)


def gradnorms_table(cell: CellOutput, lens: LensOutput) -> Table:
    """Median gradient norm per subset and the noisy/clean ratio, per norm and checkpoint."""
    d = lens.data
    cond = lens.conditions
    norms = [n for n in (cond.get("norms") or []) if n in d]
    rows = []
    for n in norms:
        for definition, per_def in d[n].items():
            if not isinstance(per_def, dict):
                continue
            for epoch, m in gradnorm_checkpoints(per_def):
                rows.append([n, definition, str(epoch), fmt((m.get("clean") or {}).get("median"), ".4g"),
                             fmt((m.get("noisy") or {}).get("median"), ".4g"),
                             fmt((m.get("ood") or {}).get("median"), ".4g"),
                             fmt(m.get("noisy_clean_median_ratio"), ".2f"), fmt(m.get("ood_clean_median_ratio"), ".2f")])
    return Table(
        f"Gradient norms — {cell.describe()}",
        ["norm", "definition", "epoch", "clean median", "noisy median", "OOD median", "noisy/clean",
         "OOD/clean"],
        rows,
        "medians of per-sample L2 gradient norms (float64, all parameters), seeds pooled; definition 'eval' = "
        "BN with running statistics",
    )


def lira_tables(cell: CellOutput, lens: LensOutput) -> list[Table]:
    """Attack metrics per norm with paired BN − other AUC differences, and shadow-model accuracy."""
    d = lens.data
    cond = lens.conditions
    norms = lira_norms(d, cond)
    others = [n for n in norms if n != BN] if BN in norms else []
    header = ["attack", "subset"] + [f"AUC {n}" for n in norms]
    header += [f"ΔAUC {BN}−{o} [targets' spread]" for o in others]
    header += [f"bal. acc {n}" for n in norms] + [f"TPR@0.1% {n}" for n in norms] + [f"TPR@1% {n}" for n in norms]
    rows = []
    for attack in attack_spec.shown_in(attack_spec.REPORT_TABLE):
        for sub in LIRA_TABLE_SUBSETS:
            summ = {n: lira_summary(d, n, attack, sub) for n in norms}
            # A subset without members and non-members (no outliers on clean data) has no metrics.
            if all(s is None or finite(s.get("auc")) is None for s in summ.values()):
                continue
            row = [attack, sub] + [fmt((summ[n] or {}).get("auc")) for n in norms]
            for o in others:
                pa, pb = (summ[BN] or {}).get("auc_per_target"), (summ[o] or {}).get("auc_per_target")
                if isinstance(pa, list) and isinstance(pb, list) and len(pa) == len(pb) and pa:
                    pd = difference_stats(np.array(pa, float) - np.array(pb, float), unit="targets")
                    row.append(interval(pd.mean, pd.ci_low, pd.ci_high, "+.3f", missing=EM_DASH))
                else:
                    row.append("—")
            row += [fmt((summ[n] or {}).get("balanced_acc")) for n in norms]
            row += [pct((summ[n] or {}).get("tpr_at_0.1pct_fpr")) for n in norms]
            row += [pct((summ[n] or {}).get("tpr_at_1pct_fpr")) for n in norms]
            rows.append(row)
    sizes = d.get("subset_sizes") or {}
    tables = [Table(
        f"Membership inference — {cell.describe()}",
        header, rows,
        f"leave-one-out over {cond.get('shadow_models', '?')} shadow models per norm (each model is the target "
        f"once); means over targets; BN queried in {cond.get('bn_mode_at_query', '?')} mode; "
        f"{sizes.get('all', '?')} examples, {sizes.get('outliers', '?')} outliers; ΔAUC paired by model index, "
        "its bracket the interval over this replicate's targets, which share reference models: descriptive "
        "only (the claims use replicates as the unit)",
    )]
    acc = d.get("accuracy")
    if isinstance(acc, dict):
        acc_rows = []
        for n in norms:
            a = acc.get(n) or {}

            def span(key: str) -> str:
                s = a.get(key) or {}
                return interval(s.get("mean"), s.get("min"), s.get("max"), missing=EM_DASH)

            acc_rows.append([n, span("train_in"), span("train_out"), span("test"), span("noisy_in")])
        tables.append(Table(f"Shadow-model accuracy — {cell.describe()}",
                            ["norm", "train IN", "train OUT", "test", "noisy IN (memorized)"], acc_rows,
                            "mean [min, max] over shadow models"))
    return tables


def gamma_sigma_table(cell: CellOutput, lens: LensOutput) -> Table:
    """Per-layer median |γ|/σ and fraction of channels above 1, running σ and batch σ."""
    running = layer_rows(lens.data, "running")
    batch = {r.get("name"): r for r in layer_rows(lens.data, "batch")} if "final" in lens.data else {}
    rows = []
    for r in running:
        b = batch.get(r.get("name"), {})
        rows.append([str(r.get("name", "?")), str(layer_type(r) or "—"), str(r.get("n_channels", "—")),
                     fmt(layer_median(r)),
                     fmt(r.get("frac_above_1"), ".2f"), fmt(layer_median(b)) if b else "—",
                     fmt(b.get("frac_above_1"), ".2f") if b else "—"])
    epochs = lens.data.get("epochs") or []
    return Table(f"γ/σ per BN layer — {cell.describe()}",
                 ["layer", "type", "channels", "median |γ|/σ (running σ)", "fraction > 1 (running σ)",
                  "median |γ|/σ (batch σ)", "fraction > 1 (batch σ)"], rows,
                 f"final epoch{f' ({epochs[-1]})' if epochs else ''}, means over seeds; running σ = "
                 "sqrt(running_var + eps) (eval mode), batch σ = std of the layer input over one fixed training batch")


def mitigation_table(cell: CellOutput, lens: LensOutput) -> Table:
    """Per variant: memorization at the fixed and last epoch, test accuracy, γ/σ, LiRA AUC."""
    variants = mitigate_variants(lens.data)
    key = mitigate_key(variants)
    fe = lens.conditions.get("fixed_epoch", "?")
    rows = []
    for name, v in variants.items():
        def mean(when: str, k: str) -> str:
            return fmt(((v.get(when) or {}).get(k) or {}).get("mean"))

        gs = ((v.get("gamma_sigma") or {}).get("final") or {}).get("running") or {}
        auc = ((v.get("lira") or {}).get("all") or {}).get("auc")
        rows.append([name, fmt(v.get("gs_reg"), "g"), mean("fixed_epoch", key), mean("final", key),
                     mean("final", "test_acc"), fmt(gs.get("median_ratio")), fmt(gs.get("frac_above_1"), ".2f"),
                     fmt(auc)])
    mem = key.replace("_acc", "")
    return Table(f"Mitigation — {cell.describe()}",
                 ["variant", "λ", f"{mem} acc @ epoch {fe}", f"{mem} acc (last)", "test acc (last)",
                  "median |γ|/σ (running)", "fraction > 1", "LiRA AUC (online, all)"], rows,
                 f"means over seeds; τ = {lens.conditions.get('gs_tau', '?')}; memorization = accuracy on the "
                 "corrupted subset against its training label; γ/σ over all BN channels at the last epoch")


def _step(v: Any) -> str:
    return "never" if v is None else str(v)


def theory_table(lens: LensOutput) -> Table:
    s = lens.data.get("summary") or {}
    amp, g, m = s.get("amplification") or {}, s.get("gamma") or {}, s.get("margins") or {}
    rows = [
        ["predicted (γ/σ)², median over steps", fmt(amp.get("predicted_median"), ".3f")],
        ["frozen statistics: median rel. error vs (γ/σ)²", fmt(amp.get("frozen_stats_median_rel_error"), ".4f")],
        ["frozen statistics: max rel. error", fmt(amp.get("frozen_stats_max_rel_error"), ".4f")],
        ["real BN step: median rel. error vs (γ/σ)² alone", fmt(amp.get("live_vs_gamma_sigma_sq_median_rel_error"), ".4f")],
        ["real BN step: median rel. error vs (γ/σ)²·ρ", fmt(amp.get("live_vs_gamma_sigma_sq_rho_median_rel_error"), ".4f")],
        ["ρ (BN's projection factor), median", fmt(amp.get("rho_median"), ".4f")],
        ["all-parameter step ratio BN / no-norm, median", fmt(amp.get("full_step_ratio_median"), ".3f")],
        ["γ growth with / without outliers", fmt(g.get("growth_ratio_with_vs_without"), ".3f")],
        ["outlier margin at the end, BN vs no-norm",
         f"{fmt(m.get('bn_final_mean'), '.2f')} vs {fmt(m.get('plain_final_mean'), '.2f')}"],
        ["first step with every outlier fitted, BN vs no-norm",
         f"{_step(m.get('bn_first_step_all_outliers_fit'))} vs {_step(m.get('plain_first_step_all_outliers_fit'))}"],
    ]
    cfg = lens.data.get("config") or {}
    return Table("Toy model (theory)", ["quantity", "value"], rows,
                 f"{cfg.get('steps', '?')} full-batch GD steps at lr {cfg.get('lr', '?')}, "
                 f"{cfg.get('n_outliers', '?')} {cfg.get('outlier_kind', '?')} outliers, seed {cfg.get('seed', '?')}")


def lens_summary_table(label: str, lens: LensOutput) -> Table | None:
    """The table a lens's command prints, for a lens the report has no dedicated section for."""
    from bnmem.lenses import registry, spec as specs

    # Read through the spec: a torch-free summary it names, else the summary of a lens whose module is
    # already loaded (a plugin or a test registered it); the report never imports a lens module.
    spec = specs.find(lens.kind)
    loaded = registry.loaded(lens.kind)
    summary = (specs.resolve(spec.summary_ref) if spec is not None and spec.summary_ref
               else loaded.summary if loaded is not None else None)
    if spec is None or summary is None:
        return None
    try:
        text = summary(lens.data)
    except Exception as e:  # noqa: BLE001 - a summary that cannot read these results must not sink the report
        text = f"(its summary could not be built from {lens.path}: {type(e).__name__}: {e})"
    return Table(title=f"{spec.title or spec.name} — {label}" if label else (spec.title or spec.name),
                 header=[], rows=[], preformatted=text)
