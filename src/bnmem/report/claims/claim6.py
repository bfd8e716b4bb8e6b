"""Claim 6: the γ/σ regularizer cuts memorization at little utility cost (the mitigate lens).

Plan 4.0: inside every replicate the mitigate lens selects the regularized
variant (λ, τ) on selection seeds that are never evaluated (nested selection,
``selection.nested``). Plan 5.0's validation gate is a screen with an
indifference zone (:func:`bnmem.analysis_plan.mitigate_gate_passes`: drop ≤ 2
points); the report re-applies the declared criterion to the lens's records
(each variant's gate drop and standard error, its selection score) under the
5.0 gate and under plan 4.0's (1 point + 1.645 standard errors), so a run of
either lens is decided under 5.0 and shows 4.0's selection too; each replicate
then contributes the cut and the test-accuracy drop of its own selected
variant on its evaluation seeds. The cost is a non-inferiority test on the
drop interval's upper end, and the claim is contradicted when the drop's lower
end exceeds the margin. The note says, per replicate, whether the criterion or
the fallback chose. Runs whose lens predates nested selection are evaluated as
plan 3.0 did (replicate 0 selects, the others are evaluated) and say so.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from bnmem.analysis_plan import (
    BN, CONTRADICTED, DIRECTION_ONLY, INCONCLUSIVE, MITIGATE_GATE_COST, MITIGATE_GATE_THRESHOLD, MITIGATE_GATE_Z,
    MITIGATE_LAMBDAS, MITIGATE_TEST_DROP, NOT_RUN, PAPERS_PROTOCOL, PREVIOUS_VERSION, REPLICATE_INTERVAL,
    REPLICATE_UNIT, REPRODUCED, SAME_AS_PRIMARY, TEST_ABOVE, TEST_BELOW, UNCHANGED, Axis, ClaimPlan, Design, Display,
    Endpoint, mitigate_gate_passes, mitigate_gate_power,
)
from bnmem.names import MITIGATE
from bnmem.report.claims.core import (
    PLAN_ANALYSIS, Analysis, Claim, Evaluation, estimate, estimate_v2, grade, grade_v2, new_claim, not_run,
)
from bnmem.report.claims.shared import ATTACK_NAMES, cond, previous, where
from bnmem.report.results import (
    finite, mitigate_at, mitigate_key, mitigate_seeds, mitigate_variants, replicate_of, settings_of, variant_lira,
)
from bnmem.report.rundata import CellOutput, LensOutput, RunData
from bnmem.stats import PairedDiff

# The regularizer must cut corrupted-subset accuracy by ≥ half (at ≤ 1 point of test accuracy: MITIGATE_TEST_DROP).
MITIGATE_CUT = 0.5
# Plan 3.0 (shown as the previous verdict): λ and τ were selected on this replicate, never reported.
MITIGATE_SELECTION_REPLICATE = 0

CLAIMS = (ClaimPlan(
    "6", "The γ/σ regularizer reduces memorization at little utility cost",
    "the regularizer mitigates memorization and privacy risk at little cost in accuracy (here: ≥ half of "
    "the corrupted-subset accuracy removed at ≤ 1 point of test accuracy)",
    "evidence", MITIGATE,
    "relative cut in corrupted-subset accuracy (BN − BN+reg) / BN and the test-accuracy drop BN − BN+reg, at "
    "the λ (and τ) selected inside each replicate (nested selection): the mitigate lens trains plain BN and "
    "every regularized variant also on selection seeds (the seeds after the evaluation seeds; same data, "
    "never evaluated) and applies the declared criterion there: among the regularized variants that pass the "
    f"validation gate, the lowest corrupted-subset training accuracy, ties to the smaller λ. The λ grid (plan "
    f"6.0, the mitigate lens's default and the decisive design's): {', '.join(f'{x:g}' for x in MITIGATE_LAMBDAS)}, "
    "six values over 2.5 decades around plan 5.0's {1, 10}. The gate (plan 6.0) is a paired per-image screen at "
    "the claim's own margin: per validation image the mean over selection seeds of (BN right − variant right); a "
    f"variant passes when the mean of these, its validation drop, is at most {MITIGATE_TEST_DROP * 100:g} point "
    "(the claim's margin). None passes: the smallest validation drop (the fallback; the report "
    "names, per replicate, whether the criterion or the fallback chose, and the gate's power to exclude a "
    f"{MITIGATE_GATE_COST * 100:g}-point cost at the standard error it had). The report re-applies the "
    "criterion to the lens's records (each variant's validation drop, its standard error and its selection "
    "score), so a run of plan 4.0's lens is decided under this gate too. Each replicate "
    "is then evaluated on its evaluation seeds at its own selected variant. The mitigate lens's LiRA shadow "
    "models take the replicate's own keep-matrix seed, like every other seed. The penalty's activity "
    "(fraction of channels above τ during training, the penalty's share of the loss) is shown when the lens "
    "recorded it",
    "the last epoch (the released model)",
    "per pair (evaluation seed) the cut and the drop; mean over seeds; mean over replicates (every replicate)",
    REPLICATE_UNIT, REPLICATE_INTERVAL,
    f"cut: null 0, direction +, the stated minimum {MITIGATE_CUT:.0%}; drop: non-inferiority margin "
    f"{MITIGATE_TEST_DROP * 100:g} point (upper bound), contradicted above it (lower bound)",
    f"reproduced if the cut's interval lies at or above {MITIGATE_CUT:.0%} and the drop's interval lies at or "
    f"below {MITIGATE_TEST_DROP * 100:g} point; contradicted if the drop's interval lies above "
    f"{MITIGATE_TEST_DROP * 100:g} point (the cost is shown to exceed the margin) or the cut's interval lies "
    "below 0; direction only if the cut's interval lies above 0 but one of the two conditions for "
    "reproduced fails; inconclusive if the cut's interval includes 0 or the drop has no interval. A run whose "
    f"lens did not select inside each replicate is evaluated as plan 3.0 did (replicate "
    f"{MITIGATE_SELECTION_REPLICATE} selects, the others are evaluated) and the row says so",
    "\"little cost in accuracy\" is a non-inferiority claim: its interval's upper end must lie within the "
    "margin (a wide interval must not make passing easier), and a drop shown above the margin refutes it. "
    "Choosing λ by the reported outcome on the same models inflates the cut (winner's curse), so λ is chosen "
    "on models that are never evaluated; choosing it inside every replicate lets every replicate contribute "
    "an evaluation (plan 3.0's held-out replicate left 1 df at 3 replicates: a drop interval of about ±75 "
    "points). The gate selects, it does not test the claim: the selection seeds are never evaluated, so a gate that "
    "admits a costly variant makes 'reproduced' harder (the test-set drop then fails its margin), never "
    "easier, and one that excludes a cheap variant costs cut, not validity. Its two errors are therefore "
    "weighed alike: with the threshold at the midpoint of the indifference zone from 1 to 3 points, a 3-point "
    "cost passes and a 1-point cost is excluded each with probability Φ(−1 point / se). Plan 4.0's gate "
    "excluded a variant only when the split showed its cost above 1 point at one-sided 95% (1 point + 1.645 "
    "standard errors), which on digits' validation split cannot happen for a cost of a few points: the "
    "demo's 90 images give a per-image SD of the paired difference up to 0.40 for a near-free variant (16% "
    "of images discordant; the demo's records, seen), a standard error of 4.2 points, and a bound of 7.9 "
    "points; it admitted variants whose validation drop was 4.1–9.6 points. Power to exclude a 3-point cost "
    "(normal approximation, per-image SD 0.40 with one selection seed; with S seeds between 0.40/√S, seed "
    "noise only, and 0.40, image effects only): at 90 validation images and one selection seed (the demo and "
    "the decisive study as declared, val_fraction 0.1) 0.59 under this gate against 0.12 under plan 4.0's; "
    "at 269 images (val_fraction 0.3) and 3 selection seeds 0.66–0.76 against 0.20–0.41; at 449 images "
    "(val_fraction 0.5, the most digits allows) and 5 seeds 0.70–0.88 against 0.28–0.77. No split of "
    "digits gives it 0.8 without many selection seeds, so the report states the gate's power per replicate "
    "at the standard error it had, and a study that can afford it declares a larger validation split and "
    "more selection seeds for the mitigate lens (`mitigate: {selection_seeds: 3, data: {val_fraction: "
    "0.3}}`). Not adopted: deciding the 1-point margin on the paired per-image differences of the test set, "
    "pooled over the evaluated models: it would be decidable at a few replicates, but its unit is the test "
    "image given the trained models, so it licenses only 'these trained models lose at most 1 point on "
    "images like these', not 'the regularizer costs at most 1 point' (the seed-to-seed spread of a model's "
    "test accuracy, the larger part of the demo's per-replicate drop SD, would be left out). Plan 6.0 (adopted "
    "after the decisive study chose λ = 1 in 118 of 120 replicates, 37 of them by the fallback) declares six λ "
    "and gates at the margin itself: a grid of two values under a 2-point screen left no real selection; a "
    "variant the validation split shows costing more than the claim allows is not one a practitioner would "
    "pick, and the small λ give the gate near-free variants to admit (a variant whose predictions barely differ "
    "from BN's has a validation drop near 0 with a small standard error), so fallbacks should be rare: expected "
    "below 10% in the decisive design, not yet measured; the report names each fallback",
    coverdicts=("memorization cut (decides)", "privacy: online LiRA AUC reduction BN − BN+reg, per target "
                "paired by model index, replicates as the unit, direction graded (when the lens ran LiRA)",
                "privacy: RMIA AUC reduction, the same way"),
    alternatives=("every λ of the grid on every replicate (fixed λ, no selection)",
                  f"plan 3.0's selection: replicate {MITIGATE_SELECTION_REPLICATE} selects (its evaluation "
                  "seeds' validation accuracy, a fixed 1-point gate), the other replicates are evaluated",
                  f"plan 4.0's selection: the same nested criterion with the gate 1 point + {MITIGATE_GATE_Z:g} "
                  "standard errors",
                  f"plan 5.0's selection: the gate at {MITIGATE_GATE_THRESHOLD * 100:g} points, the midpoint of "
                  f"the indifference zone from the {MITIGATE_TEST_DROP * 100:g}-point margin to a "
                  f"{MITIGATE_GATE_COST * 100:g}-point cost (the previous verdict)"),
    previous_rule=("the same statistics, thresholds and nested selection, with plan 5.0's validation gate: a "
                   f"variant passes when its validation drop is at most {MITIGATE_GATE_THRESHOLD * 100:g} points (the "
                   f"midpoint between the {MITIGATE_TEST_DROP * 100:g}-point margin and a "
                   f"{MITIGATE_GATE_COST * 100:g}-point cost)"),
    planning=(Endpoint("", TEST_ABOVE, 0.75, MITIGATE_CUT, 0.06, "smallest effect of interest",
               "the paper says the regularizer cuts memorization; a cut of three quarters is the smallest one "
               "that clears the stated half with room"),
      Endpoint("drop", TEST_BELOW, 0.0, MITIGATE_TEST_DROP, 0.03, "paper",
               "no cost at all (a drop of 0) must pass the 1-point margin"),),
    paper_range=lambda mix: (MITIGATE_CUT, 1.0),
    display=Display("{:.0%}", bounds=(-math.inf, 1.0)),  # a cut is at most all
    estimand="at the selected λ",
    estimand_why=("BN against BN + the γ/σ regularizer, both with BN's own recipe, λ selected inside each "
                  "replicate on the validation split, the cut and the test-accuracy cost of the released models: "
                  "the claim is a practitioner's trade-off, so both numbers are read where a practitioner would "
                  "stop training"),
    panel=((PAPERS_PROTOCOL, SAME_AS_PRIMARY), ("each λ of the grid", "λ="), ("plan 4.0's selection",
           "plan 4.0 selection"), ("privacy: online LiRA", "privacy: online LiRA"), ("privacy: RMIA", "privacy: RMIA")),
    axis=Axis("cut in corrupted-subset accuracy by the γ/σ regularizer (fraction of BN's)"),
    design=Design(held_out_selection=True),
),)

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
    """Plan 4.0: the cut graded against its stated minimum; the drop a non-inferiority test (upper end), and
    contradicted when its lower end exceeds the margin (the cost is shown to be more than "little")."""
    base = grade(cut, minimum=MITIGATE_CUT)
    if base == NOT_RUN:
        return base
    if drop is not None and drop.ci_low is not None and drop.ci_low > MITIGATE_TEST_DROP:
        return CONTRADICTED
    return _status_v3(base, drop)


def status_v3(cut: PairedDiff | None, drop: PairedDiff | None) -> str:
    """Plan 3.0's rule: as 4.0 but without 'contradicted' on the drop."""
    return _status_v3(grade(cut, minimum=MITIGATE_CUT), drop)


def _status_v3(base: str, drop: PairedDiff | None) -> str:
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
    """Plan 3.0's criterion on one (selection) replicate, on its evaluation seeds' validation accuracies: among the regularized variants whose validation
    accuracy is at least plain BN's minus 1 point, the lowest corrupted-subset training accuracy (ties: the
    smaller λ); none eligible: the highest validation accuracy. Without validation accuracies: the middle of
    the λ grid (declared before the results)."""
    variants = mitigate_variants(lens.data)
    regs = regularized(variants)
    if not regs:
        return None, "no regularized variant"
    val = (lens.data.get("selection") or {}).get("val_acc") or {}

    def val_of(name: str) -> float | None:
        recorded = mitigate_at(variants.get(name) or {}, "final", "val_acc")
        return recorded if recorded is not None else finite(val.get(name))

    bn_val = val_of(BN)
    scored = [(val_of(name), lam, name, v) for lam, name, v in regs]
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


def gate_choice(lens: LensOutput, rule: str = "6.0") -> tuple[str, bool] | None:
    """The declared criterion re-applied to one replicate's selection records under plan ``rule``'s validation
    gate: (the variant, whether the fallback chose); None without nested selection records (a gate drop and
    standard error per regularized variant).

    Among the variants the gate admits, the lowest selection score (memorization on the selection seeds), ties
    to the smaller λ, then τ; none admitted: the smallest validation drop (the lens's own rule)."""
    sel = lens.data.get("selection") or {}
    gate, score = sel.get("gate") or {}, sel.get("score") or {}
    regs = regularized(mitigate_variants(lens.data))
    if not sel.get("nested") or not regs:
        return None
    rows = []
    for lam, name, v in regs:
        g = gate.get(name) or {}
        drop, se = finite(g.get("drop")), finite(g.get("se"))
        if drop is None:
            return None
        tau = finite(v.get("gs_tau")) or 0.0
        ok = mitigate_gate_passes(drop, se if se is not None else float("inf"), rule)
        rows.append((ok, finite(score.get(name)), drop, lam, tau, name))
    eligible = [r for r in rows if r[0] and r[1] is not None]
    if eligible:
        return min(eligible, key=lambda r: (r[1], r[3], r[4]))[5], False
    return min(rows, key=lambda r: (r[2], r[3], r[4]))[5], True


def nested_choices(reps: Reps, rule: str = "6.0") -> list[tuple[int, str, bool]] | None:
    """Per replicate (its index, the variant the declared criterion selects on its selection seeds under plan
    ``rule``'s gate, whether the fallback chose); None unless every replicate's lens selected inside it (plan
    4.0's nested selection)."""
    out = []
    for cell, lens in reps:
        choice = gate_choice(lens, rule)
        if choice is None or choice[0] not in mitigate_variants(lens.data):
            return None
        out.append((replicate_of(cell), choice[0], choice[1]))
    return out


def _lam(lens: LensOutput, name: str) -> float | None:
    return finite((mitigate_variants(lens.data).get(name) or {}).get("gs_reg"))


def gate_powers(reps: Reps, rule: str = "6.0") -> list[float]:
    """Per replicate and regularized variant: the chance its validation gate (plan ``rule``) excludes a variant
    costing :data:`MITIGATE_GATE_COST`, at the standard error the gate had."""
    out = []
    for _, lens in reps:
        for g in ((lens.data.get("selection") or {}).get("gate") or {}).values():
            se = finite((g or {}).get("se"))
            if se is not None and se > 0:
                out.append(mitigate_gate_power(se, rule=rule))
    return out


def _choices_text(reps: Reps, choices: list[tuple[int, str, bool]]) -> str:
    """'r0: λ=10 by the criterion; r1: λ=1 by the FALLBACK (...)', with the validation gate's power."""
    parts = []
    for (_, lens), (r, name, fallback) in zip(reps, choices):
        how = "by the FALLBACK (no variant passed the validation gate)" if fallback else "by the criterion"
        parts.append(f"r{r}: {name} (λ={_lam(lens, name):g}) {how}")
    text = "selected inside every replicate on selection seeds never evaluated: " + "; ".join(parts)
    now, v5 = gate_powers(reps), gate_powers(reps, "5.0")
    if now:
        text += (f" (the validation gate, drop ≤ {MITIGATE_TEST_DROP * 100:g} pt, had power "
                 f"{min(now):.2f}–{max(now):.2f} to exclude a {MITIGATE_GATE_COST * 100:g}-point cost at its standard "
                 f"errors; plan 5.0's gate, drop ≤ {MITIGATE_GATE_THRESHOLD * 100:g} pt, {min(v5):.2f}–{max(v5):.2f})")
    return text


def _held_out(reps: Reps, key: str) -> tuple[str, str, Reps, list[int]]:
    """Plan 3.0's design, for runs whose lens did not select inside each replicate: the variant chosen on
    the selection replicate, the note, the evaluated replicates and the selection replicate."""
    sel = [(c, lens) for c, lens in reps if replicate_of(c) == MITIGATE_SELECTION_REPLICATE]
    held = [(c, lens) for c, lens in reps if replicate_of(c) != MITIGATE_SELECTION_REPLICATE]
    in_sample = not sel or not held
    sel_cell, sel_lens = (sel or reps)[0]
    name, how = select_variant(sel_lens, key)
    evaluated = reps if in_sample else held
    note = (f"variant {name} (λ={_lam(sel_lens, name):g}) selected on replicate {replicate_of(sel_cell)} ({how})"
            + ("; IN-SAMPLE: one replicate, nothing held out" if in_sample else
               f"; evaluated on replicates {[replicate_of(c) for c, _ in held]}"))
    return str(name), note, evaluated, [replicate_of(sel_cell)]


def _estimates(reps: Reps, names: list[str], key: str) -> tuple[PairedDiff, PairedDiff]:
    """The cut and the drop, each replicate at its own variant (``names`` in replicate order)."""
    cuts, drops = [], []
    for rep, name in zip(reps, names):
        c, d = groups_for([rep], name, key)
        cuts += c
        drops += d
    return estimate(cuts, "seeds", True), estimate(drops, "seeds", True)


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
    choices = nested_choices(reps)
    if choices is not None:
        evaluated, names, how, sel_reps = reps, [n for _, n, _ in choices], _choices_text(reps, choices), []
    else:
        name, how, evaluated, sel_reps = _held_out(reps, key)
        how += "; this run's mitigate lens did not select inside each replicate (it predates plan 4.0)"
        names = [name] * len(evaluated)
    cut, drop = _estimates(evaluated, names, key)
    status = status_of(cut, drop)
    lams = [_lam(lens, n) for (_, lens), n in zip(evaluated, names)]
    lam_text = f"λ={lams[0]:g}" if len(set(lams)) == 1 else "λ selected per replicate (" + ", ".join(
        f"{x:g}" for x in lams) + ")"
    note = (how + f"; test-accuracy drop {_pts(drop)} (non-inferiority margin {MITIGATE_TEST_DROP * 100:g} pt; "
            "contradicted when its lower end exceeds it); " + activity(variants.get(names[0]) or bn))
    primary = Analysis.of(PLAN_ANALYSIS, cut, status, note, paper=(MITIGATE_CUT, 1.0))
    cov = [Analysis.of("memorization cut", cut, status, paper=(MITIGATE_CUT, 1.0))]
    cov += [a for a in (_privacy(evaluated, names, attack) for attack in ("online", "rmia")) if a is not None]
    alts = [Analysis.of(f"λ={x:g} ({other}), every replicate", ce, status_of(ce, de), f"test drop {_pts(de)}")
            for x, other, _ in regs for ce, de in [_estimates(reps, [other] * len(reps), key)]]
    old = _previous_rule(reps, lens0, key)
    if old is not None and (choices is not None or PREVIOUS_VERSION != "3.0"):
        alts.append(old[3])  # under 3.0's design without nested selection it would repeat the primary
    if PREVIOUS_VERSION != "3.0" and choices is not None:  # plan 3.0's design stays a robustness row
        name3, _, ev3, _ = _held_out(reps, key)
        c3, d3 = _estimates(ev3, [name3] * len(ev3), key)
        alts.append(Analysis.of(f"plan 3.0 selection ({name3} on replicate {MITIGATE_SELECTION_REPLICATE}, the "
                                "others evaluated)", c3, status_of(c3, d3), f"test drop {_pts(d3)}"))
    if PREVIOUS_VERSION != "4.0" and (v4 := _gate_v4(reps, key)) is not None:
        alts.append(Analysis.of("plan 4.0 selection (validation gate 1 pt + 1.645 standard errors)", v4[0],
                                status_of(v4[0], v4[1]), f"test drop {_pts(v4[1])}"))
    c = cond(setting, lens0, regularizer_lambda=lams[0] if len(set(lams)) == 1 else None,
             lambda_selection="nested: per replicate on its selection seeds" if choices is not None else how,
             gs_tau=variants[names[0]].get("gs_tau") if names[0] in variants else None,
             selection_replicate=sel_reps[0] if sel_reps else None,
             evaluation_replicates=[replicate_of(x) for x, _ in evaluated])
    ev = Evaluation.from_analysis(
        where(setting, f"BN vs BN + γ/σ regularizer {lam_text}"), primary, c, True, cov if len(cov) > 1 else [],
        alts, "memorization cut" if len(cov) > 1 else "", paper=(MITIGATE_CUT, 1.0))
    ev.spreads["drop"] = (drop.n, drop.sd)  # the cost test's endpoint: its power needs its own spread
    claim.evaluations.append(ev)
    if old is not None:
        previous(claim, ev.where, old[0], old[1])  # plan 5.0's gate: the previous plan's verdict


def _gate_v4(reps: Reps, key: str) -> tuple[PairedDiff, PairedDiff, list[str]] | None:
    """Plan 4.0's nested selection (its gate: 1 pt + 1.645 standard errors): the cut, the drop and the variants."""
    choices = nested_choices(reps, "4.0")
    if choices is None:
        return None
    names = [n for _, n, _ in choices]
    cut, drop = _estimates(reps, names, key)
    return cut, drop, names


def _previous_rule(reps: Reps, lens0: LensOutput, key: str) -> tuple[float | None, str, str, Analysis] | None:
    """The verdict under :data:`PREVIOUS_VERSION`'s rule: (value, status, variant, the analysis as a panel row);
    None when it cannot be computed."""
    if PREVIOUS_VERSION == "5.0":
        choices = nested_choices(reps, "5.0")
        if choices is None:
            return None
        names = [n for _, n, _ in choices]
        cut, drop = _estimates(reps, names, key)
        name = names[0] if len(set(names)) == 1 else ", ".join(names)
        label = f"plan 5.0 selection (validation gate: drop ≤ {MITIGATE_GATE_THRESHOLD * 100:g} pt)"
        st = status_of(cut, drop)
    elif PREVIOUS_VERSION == "4.0":
        old = _gate_v4(reps, key)
        if old is None:
            return None
        cut, drop, names = old
        name = names[0] if len(set(names)) == 1 else ", ".join(names)
        label = "plan 4.0 selection (validation gate 1 pt + 1.645 standard errors)"
        st = status_of(cut, drop)
    elif PREVIOUS_VERSION == "3.0":
        name, _, evaluated, _ = _held_out(reps, key)
        cut, drop = _estimates(evaluated, [name] * len(evaluated), key)
        label = f"plan 3.0 selection ({name} on replicate {MITIGATE_SELECTION_REPLICATE}, the others evaluated)"
        st = status_v3(cut, drop)
    else:
        old_cut, old_drop, name = _v2(reps, lens0, key)
        if old_cut is None:
            return None
        cut, st = old_cut, status_v2(old_cut, old_drop)
        label = f"plan {PREVIOUS_VERSION} selection ({name}, every replicate)"
        drop = old_drop
    value = cut.mean if math.isfinite(cut.mean) else None
    return value, st, name, Analysis.of(label, cut, status_of(cut, drop), f"test drop {_pts(drop)}",
                                        valid=PREVIOUS_VERSION in ("3.0", "4.0", "5.0"))


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


def _privacy(reps: Reps, names: list[str], attack: str) -> Analysis | None:
    """The AUC reduction BN − BN+reg of one attack (targets paired by model index; each replicate at its own
    selected variant ``names``), direction graded; None when the lens measured no per-target AUCs for both."""
    groups = []
    for (_, lens), reg_name in zip(reps, names):
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
    claim = new_claim("6", MITIGATE)
    for setting in settings_of(run, MITIGATE):
        _evaluate_setting(claim, setting, setting.lenses(MITIGATE))
    return [claim]
