"""Claim 6: the γ/σ regularizer cuts memorization at little utility cost (the mitigate lens).

Plan 3.0: the regularized variant (λ, τ) is selected on the selection replicate
(never reported) by validation accuracy and the declared criterion; the cut
and the test-accuracy drop are evaluated on the other replicates only; the cost
is a non-inferiority test on the drop interval's upper end.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from bnmem.analysis_plan import (
    BN, CONTRADICTED, DIRECTION_ONLY, INCONCLUSIVE, LENS_MITIGATE, MITIGATE_CUT, MITIGATE_SELECTION_REPLICATE,
    MITIGATE_TEST_DROP, NOT_RUN, PREVIOUS_VERSION, REPRODUCED,
)
from bnmem.report.claims.core import (
    PLAN_ANALYSIS, Analysis, Claim, Evaluation, estimate, estimate_v2, grade, grade_v2, new_claim, not_run,
)
from bnmem.report.claims.shared import ATTACK_NAMES, cond, where
from bnmem.report.results import (
    finite, mitigate_at, mitigate_key, mitigate_seeds, mitigate_variants, replicate_of, settings_of, variant_lira,
)
from bnmem.report.rundata import CellOutput, LensOutput, RunData
from bnmem.stats import PairedDiff

IDS = ("6",)
Reps = list[tuple[CellOutput, LensOutput]]


def regularized(variants: dict[str, dict[str, Any]]) -> list[tuple[float, str, dict[str, Any]]]:
    """(λ, variant name, record) of the regularized BN variants, by λ."""
    out = []
    for name, v in variants.items():
        lam = finite(v.get("gs_reg"))
        if v.get("norm") == BN and lam is not None and lam > 0:
            out.append((lam, name, v))
    return sorted(out, key=lambda t: (t[0], finite(t[2].get("gs_tau")) or 0.0))


def status_of(cut: PairedDiff | None, drop: PairedDiff | None) -> str:
    """Plan 3.0: the cut graded against its stated minimum; the drop a non-inferiority test (upper end)."""
    base = grade(cut, minimum=MITIGATE_CUT)
    if base in (NOT_RUN, INCONCLUSIVE, CONTRADICTED):
        return base
    if drop is None or drop.ci_high is None:
        return INCONCLUSIVE  # the cost is untested
    if drop.ci_high > MITIGATE_TEST_DROP:
        return DIRECTION_ONLY
    return base


def status_v2(cut: PairedDiff | None, drop: PairedDiff | None) -> str:
    """Plan 2.0's rule (shown as the previous verdict): it read the drop's *lower* end."""
    base = grade_v2(cut, paper=(MITIGATE_CUT, 1.0))
    if base == REPRODUCED and drop is not None and drop.ci_low is not None and drop.ci_low > MITIGATE_TEST_DROP:
        return DIRECTION_ONLY
    if base == REPRODUCED and (drop is None or drop.ci_low is None):
        return INCONCLUSIVE
    return base


def select_variant(lens: LensOutput, key: str) -> tuple[str | None, str]:
    """The declared criterion on one (selection) replicate: among the regularized variants whose validation
    accuracy is at least plain BN's minus 1 point, the lowest corrupted-subset training accuracy (ties: the
    smaller λ); none eligible: the highest validation accuracy. Without validation accuracies: the middle of
    the λ grid (declared before the results)."""
    variants = mitigate_variants(lens.data)
    regs = regularized(variants)
    if not regs:
        return None, "no regularized variant"
    val = (lens.data.get("selection") or {}).get("val_acc") or {}
    bn_val = finite(val.get(BN))
    scored = [(finite(val.get(name)), lam, name, v) for lam, name, v in regs]
    if bn_val is None or any(s[0] is None for s in scored):
        return regs[(len(regs) - 1) // 2][1], "no validation accuracies: the middle of the declared λ grid"
    eligible = [s for s in scored if s[0] >= bn_val - MITIGATE_TEST_DROP]
    if not eligible:
        best = max(scored, key=lambda s: (s[0], -s[1]))
        return best[2], "no variant within 1 point of BN's validation accuracy: the highest validation accuracy"
    mem = [(mitigate_at(v, "final", key), lam, name) for _, lam, name, v in eligible]
    mem = [(m if m is not None else math.inf, lam, name) for m, lam, name in mem]
    return min(mem)[2], "validation-eligible, lowest corrupted-subset training accuracy"


def groups_for(reps: Reps, name: str, key: str) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per replicate, per seed: the cut (BN − reg)/mean BN and the test drop BN − reg of variant ``name``."""
    cuts, drops = [], []
    for _, lens in reps:
        variants = mitigate_variants(lens.data)
        bn, reg = variants.get(BN), variants.get(name)
        if bn is None or reg is None:
            continue
        a, b = np.array(mitigate_seeds(bn, "final", key)), np.array(mitigate_seeds(reg, "final", key))
        ta, tb = np.array(mitigate_seeds(bn, "final", "test_acc")), np.array(mitigate_seeds(reg, "final", "test_acc"))
        mem_bn = np.nanmean(a) if a.size and np.isfinite(a).any() else math.nan
        if a.size == b.size and a.size and mem_bn > 0:
            cuts.append((a - b) / mem_bn)
        if ta.size == tb.size and ta.size:
            drops.append(ta - tb)
    return cuts, drops


def _pts(est: PairedDiff) -> str:
    if not math.isfinite(est.mean):
        return "—"
    ci = "" if est.ci_low is None else f" [{est.ci_low * 100:+.2f}, {est.ci_high * 100:+.2f}]"
    return f"{est.mean * 100:+.2f} pt{ci}"


def activity(reg: dict[str, Any]) -> str:
    """How active the penalty was, from what the lens recorded."""
    gs = ((reg.get("gamma_sigma") or {}).get("final") or reg.get("gamma_sigma") or {}).get("running") or {}
    frac = finite(gs.get("frac_above_1"))
    parts = [f"at the end {frac:.0%} of BN channels have |γ|/σ above 1" if frac is not None else ""]
    hist = reg.get("penalty")
    if isinstance(hist, dict):
        share, above = finite(hist.get("loss_share_mean")), finite(hist.get("frac_above_tau_mean"))
        if share is not None:
            parts.append(f"penalty share of the loss {share:.1%} (mean over training)")
        if above is not None:
            parts.append(f"channels above τ during training {above:.0%} (mean)")
    else:
        parts.append("the fraction above τ during training and the penalty's share of the loss are not "
                     "recorded by this run's mitigate lens")
    return "penalty activity: " + "; ".join(p for p in parts if p)


def _evaluate_setting(claim: Claim, setting, reps: Reps) -> None:
    lens0 = reps[0][1]
    variants = mitigate_variants(lens0.data)
    bn, regs = variants.get(BN), regularized(variants)
    if bn is None or not regs:
        claim.evaluations.append(not_run(where(setting), "mitigate results lack plain BN or a regularized BN"))
        return
    key = mitigate_key(variants)
    mem_bn = mitigate_at(bn, "final", key)
    if mem_bn is None or mem_bn <= 0:
        why = ("no corrupted subset in this setting (clean data)" if mem_bn is None else
               f"plain BN memorized none of the corrupted subset ({key} 0): nothing to cut")
        claim.evaluations.append(not_run(where(setting), why))
        return
    sel = [(c, lens) for c, lens in reps if replicate_of(c) == MITIGATE_SELECTION_REPLICATE]
    held = [(c, lens) for c, lens in reps if replicate_of(c) != MITIGATE_SELECTION_REPLICATE]
    in_sample = not sel or not held
    sel_cell, sel_lens = (sel or reps)[0]
    name, how = select_variant(sel_lens, key)
    evaluated = reps if in_sample else held
    cut_g, drop_g = groups_for(evaluated, name, key)
    cut, drop = estimate(cut_g, "seeds", True), estimate(drop_g, "seeds", True)
    status = status_of(cut, drop)
    lam = finite(variants[name].get("gs_reg"))
    note = (f"variant {name} (λ={lam:g}) selected on replicate {replicate_of(sel_cell)} ({how})"
            + ("; IN-SAMPLE: one replicate, nothing held out" if in_sample else
               f"; evaluated on replicates {[replicate_of(c) for c, _ in held]}")
            + f"; test-accuracy drop {_pts(drop)} (non-inferiority margin {MITIGATE_TEST_DROP * 100:g} pt); "
            + activity(variants[name]))
    primary = Analysis.of(PLAN_ANALYSIS, cut, status, note, paper=(MITIGATE_CUT, 1.0))
    cov = [Analysis.of("memorization cut", cut, status, paper=(MITIGATE_CUT, 1.0))]
    cov += [a for a in (_privacy(evaluated, name, attack) for attack in ("online", "rmia")) if a is not None]
    alts = []
    for x, other, _ in regs:
        if other != name:
            c2, d2 = groups_for(evaluated, other, key)
            ce, de = estimate(c2, "seeds", True), estimate(d2, "seeds", True)
            alts.append(Analysis.of(f"λ={x:g} ({other})", ce, status_of(ce, de), f"test drop {_pts(de)}"))
    old_cut, old_drop, old_name = _v2(reps, lens0, key)
    if old_cut is not None:
        alts.append(Analysis.of(f"plan {PREVIOUS_VERSION} selection ({old_name}, every replicate)", old_cut,
                                status_of(old_cut, old_drop), valid=False))
    c = cond(setting, lens0, regularizer_lambda=lam, lambda_selection=how, gs_tau=variants[name].get("gs_tau"),
             selection_replicate=replicate_of(sel_cell), evaluation_replicates=[replicate_of(x) for x, _ in evaluated])
    ev = Evaluation.from_analysis(
        where(setting, f"BN vs BN + γ/σ regularizer λ={lam:g}"), primary, c, True, cov if len(cov) > 1 else [],
        alts, "memorization cut" if len(cov) > 1 else "", paper=(MITIGATE_CUT, 1.0))
    ev.spreads["drop"] = (drop.n, drop.sd)  # the cost test's endpoint: its power needs its own spread
    claim.evaluations.append(ev)
    # The previous plan's (3.0) verdict is this rule at 1 − α/k: the claims driver records it (no previous()).


def _v2(reps: Reps, lens0: LensOutput, key: str) -> tuple[PairedDiff | None, PairedDiff | None, str]:
    """Plan 2.0: the lens's own selected λ (replicate 0's choice) on every replicate, all reported."""
    variants = mitigate_variants(lens0.data)
    regs = regularized(variants)
    sel = finite(lens0.data.get("selected_lambda"))
    named = next((n for x, n, _ in regs if sel is not None and abs(x - sel) < 1e-12), None)
    name = named or regs[(len(regs) - 1) // 2][1]
    cuts, drops = groups_for(reps, name, key)
    if not cuts:
        return None, None, name
    return estimate_v2(cuts, "seeds", True), estimate_v2(drops, "seeds", True), name


def _privacy(reps: Reps, reg_name: str, attack: str) -> Analysis | None:
    """The AUC reduction BN − BN+reg of one attack (targets paired by model index), direction graded;
    None when the lens measured no per-target AUCs for both."""
    groups = []
    for _, lens in reps:
        variants = mitigate_variants(lens.data)
        a, b = variant_lira(variants.get(BN) or {}, attack), variant_lira(variants.get(reg_name) or {}, attack)
        pa, pb = (a or {}).get("auc_per_target"), (b or {}).get("auc_per_target")
        if isinstance(pa, list) and isinstance(pb, list) and len(pa) == len(pb) and pa:
            groups.append(np.array([np.nan if finite(x) is None else x for x in pa], float)
                          - np.array([np.nan if finite(x) is None else x for x in pb], float))
    if not groups:
        return None
    est = estimate(groups, "targets", False)
    return Analysis.of(f"privacy: {ATTACK_NAMES[attack]} AUC reduction", est, grade(est))


def evaluate(run: RunData) -> list[Claim]:
    """Claim 6 in every setting that ran the mitigate lens."""
    claim = new_claim("6", LENS_MITIGATE, "{:.0%}")
    for setting in settings_of(run, LENS_MITIGATE):
        _evaluate_setting(claim, setting, setting.lenses(LENS_MITIGATE))
    return [claim]
