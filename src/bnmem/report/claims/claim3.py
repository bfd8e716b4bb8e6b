"""Claims 3a and 3b: LiRA membership-inference AUC is 3–5 points higher with BN (the lira lens).

Plans 3.0 and 4.0 grade the interval against the paper's stated minimum (at
least 3 points, 4 at a 5% outlier mix) and report "vs paper" (below / within /
above the paper's range) separately. Plan 5.0 puts the magnitude in the status
(:func:`grade_magnitude`): "larger than the paper" where the interval lies wholly
above the range, "smaller than the paper" where it lies above 0 and wholly below
the minimum; plan 4.0's status is recorded as the previous verdict.
"""

from __future__ import annotations

import math

import numpy as np

from bnmem.analysis_plan import (
    BN, CLEAN, CONVERGENCE, NOT_RUN, PAPERS_PROTOCOL, REPLICATE_UNIT, SAME_AS_PRIMARY, TEST_ABOVE,
    TEST_ACCURACY, UNCHANGED, Axis, ClaimPlan, Design, Display, Endpoint,
)
from bnmem.attacks import spec as attack_spec
from bnmem.names import LIRA
from bnmem.report.claims.core import (
    PLAN_ANALYSIS, Analysis, Claim, Evaluation, estimate, estimate_v2, grade, grade_magnitude, level, new_claim,
    not_run,
)
from bnmem.report.claims.shared import ATTACK_NAMES, cond, nanmean, where
from bnmem.report.results import (
    baselines, finite, fmt, lira_jackknife, lira_norms, lira_summary, outlier_mix, settings_of,
)
from bnmem.report.rundata import CellOutput, LensOutput, RunData
from bnmem.stats import PairedDiff, difference_stats, jackknife_interval

# Claim 3: "LiRA AUC rises by 3–5 points with BN (at least 3 and 4 points for 1% and 5% outlier mixtures)".
LIRA_RANGE = (0.03, 0.05)
LIRA_RANGE_BY_MIX = {0.01: (0.03, 0.05), 0.05: (0.04, 0.05)}
LIRA_SUBSET = "all"


def lira_range(mix: float | None) -> tuple[float, float]:
    """The paper's AUC-gain range (BN − none) for an outlier fraction (clean or unlisted: 3–5 points);
    its lower end is the paper's stated minimum."""
    if mix:
        for m, r in LIRA_RANGE_BY_MIX.items():
            if abs(mix - m) < 1e-9:
                return r
    return LIRA_RANGE


ESTIMAND_WHY_3 = (
    "the AUC gain of the released models: each arm trained with its own recipe to its validation plateau and "
    "attacked as released. Membership inference attacks the model a practitioner ships, so the comparison holds "
    "fixed that each arm is trained as well as it can be, not its test accuracy: matching utility would read BN "
    "at an earlier, under-trained checkpoint nobody releases. A judgement: the answer at equal test accuracy is "
    "row 3c's (beyond the paper)")
PANEL_3 = (("offline LiRA", "offline LiRA"), ("RMIA", "RMIA"), (TEST_ACCURACY, ""), (PAPERS_PROTOCOL, SAME_AS_PRIMARY))
# Claim 3's AUC differences read in points, as the paper states them.
POINTS = Display("{:+.1f}", scale=100, suffix="points")
AUC_AXIS = Axis("BN − none: membership-inference AUC, in points (0.01 AUC = 1 point)", per_coverdict=True)

CLAIMS = (
    ClaimPlan(
        "3a", "LiRA membership-inference AUC is 3–5 points higher with BN, with injected outliers",
        "LiRA AUC rises by 3–5 points with BN; at least 3 points at a 1% outlier mix and 4 points at 5%",
        "evidence", LIRA,
        "AUC of the attack on all training examples, leave-one-out over the shadow models (each model the target "
        "once), BN − no-norm paired by model index",
        "the final models (last epoch)",
        "per replicate the mean over targets of the paired AUC difference; mean over replicates",
        REPLICATE_UNIT + "; targets inside one replicate share reference models and data and are never treated "
                          "as independent",
        "Student t-interval over replicate means at the family level; with one replicate the delete-one-model "
        "jackknife when the lens wrote it, else no interval (inconclusive)",
        "null 0, direction +; the paper's stated minimum: 4 points at a 5% mix, 3 points otherwise; its range "
        "up to 5 points",
        "larger than the paper if the interval lies wholly above the paper's range (its lower end above 5 "
        "points); reproduced if it lies at or above the paper's minimum and reaches into the range; direction "
        "only if it lies above 0 but straddles the minimum; smaller than the paper if it lies above 0 and wholly "
        "below the minimum; inconclusive if it includes 0; contradicted if it lies below 0. 'Larger' and "
        "'smaller', which one setting decides, are tested at 1 − 0.05/k like 'contradicted' (an interval that "
        "shows them at 95% but not at 1 − 0.05/k reads reproduced, respectively direction only). 'vs paper' "
        "still says whether the interval lies below, overlaps (within) or lies above the paper's 3–5 (4–5) "
        "points. Online LiRA (the paper's attack) decides the row; offline LiRA and RMIA each get a verdict",
        "the paper states minimums (\"at least 3 and 4 points for 1% and 5% outlier mixtures\"): an effect above "
        "them supports the claim, and an interval that merely overlaps the range while reaching down to 0.2 "
        "points does not show it. Grading overlap rewarded imprecision (plan 2.0: [+0.2, +4.1] reproduced, "
        "[+5.5, +6.5] direction only). The paper also states an upper end (\"3–5 points\"): an interval wholly "
        "above it refutes that range as plainly as one wholly below the minimum, so the status says so (plan "
        "4.0 read the demo's +8.3 [+7.1, +9.5] and +8.9 [+6.4, +11.5] points 'reproduced' and said 'above' only "
        "in a side column)",
        coverdicts=("online LiRA", "offline LiRA", "RMIA"),
        alternatives=("online LiRA with a fixed variance", "online LiRA on the identity query view only (when the "
                      "lens wrote it)", "online LiRA on the outlier subset only (direction tested; the paper's "
                      "range is for all examples)"),
        previous_rule=UNCHANGED,
        planning=(Endpoint("", TEST_ABOVE, None, None, 0.01, "paper",
                    "the paper's range is 3–5 points; a true gain at its minimum could never be shown to clear "
                    "that minimum (power α), so the design is sized for the range's upper end; the SD, one AUC "
                    "point between replicates, is a declared guess (the demo's LiRA had not finished)"),),
        paper_range=lira_range,
        display=POINTS,
        estimand=CONVERGENCE,
        estimand_why=ESTIMAND_WHY_3,
        panel=PANEL_3,
        axis=AUC_AXIS,
    ),
    ClaimPlan(
        "3b", "LiRA membership-inference AUC is 3–5 points higher with BN, on clean data",
        "the LiRA gain appears also on clean data (3–5 points)",
        "evidence", LIRA,
        "as 3a, on a setting without injected outliers", "the final models",
        "as 3a", REPLICATE_UNIT, "as 3a", "null 0, direction +; the paper's minimum 3 points, range 3–5",
        "as 3a", "as 3a",
        coverdicts=("online LiRA", "offline LiRA", "RMIA"),
        alternatives=("online LiRA with a fixed variance", "online LiRA on the identity query view only (when the "
                      "lens wrote it)"),
        previous_rule=UNCHANGED,
        planning=(Endpoint("", TEST_ABOVE, None, None, 0.01, "paper", "as 3a"),),
        paper_range=lira_range,
        display=POINTS,
        estimand=CONVERGENCE,
        estimand_why=ESTIMAND_WHY_3,
        panel=PANEL_3,
        axis=AUC_AXIS,
        design=Design(CLEAN),
    ),
)
# Where a lira metrics.json keeps the attacks re-run on the identity query view alone (same schema).
IDENTITY_BLOCK = "identity_only"


def _target_diffs(lens: LensOutput, other: str, attack: str, subset: str, block: str | None = None
                  ) -> np.ndarray | None:
    """Per-target BN − other AUC differences (``block``: a variant of the results, e.g. identity-only views,
    stored under that key of metrics.json with the same norm -> attack -> subset schema)."""
    data = lens.data if block is None else lens.data.get(block)
    if not isinstance(data, dict):
        return None
    sa, sb = lira_summary(data, BN, attack, subset), lira_summary(data, other, attack, subset)
    if sa is None or sb is None:
        return None
    pa, pb = sa.get("auc_per_target"), sb.get("auc_per_target")
    if isinstance(pa, list) and isinstance(pb, list) and len(pa) == len(pb) and pa:
        return np.array([np.nan if finite(x) is None else x for x in pa], float) - \
            np.array([np.nan if finite(x) is None else x for x in pb], float)
    ma, mb = finite(sa.get("auc")), finite(sb.get("auc"))
    return np.array([math.nan if ma is None or mb is None else ma - mb])


def lira_estimate(reps: list[tuple[CellOutput, LensOutput]], other: str, attack: str, subset: str,
                  block: str | None = None, v2: bool = False) -> tuple[PairedDiff | None, np.ndarray | None]:
    """Replicates as the unit; one replicate: the lens's delete-one-model jackknife, else no interval."""
    groups = [g for g in (_target_diffs(lens, other, attack, subset, block) for _, lens in reps) if g is not None]
    if not groups:
        return None, None
    if len(groups) == 1 and block is None:
        jk = lira_jackknife(reps[0][1].data, other, attack, subset)
        g = groups[0][np.isfinite(groups[0])]
        if jk is not None and g.size:
            lv = 0.95 if v2 else level()
            return jackknife_interval(float(g.mean()), jk["leave_one_out"], unit="shadow models", level=lv), groups[0]
    est = estimate_v2(groups, "targets", False) if v2 else estimate(groups, "targets", False)
    return est, np.concatenate(groups)


def _detail(reps: list[tuple[CellOutput, LensOutput]], other: str, attack: str, targets: np.ndarray | None) -> str:
    sa = [lira_summary(lens.data, BN, attack, LIRA_SUBSET) or {} for _, lens in reps]
    sb = [lira_summary(lens.data, other, attack, LIRA_SUBSET) or {} for _, lens in reps]
    out = (f"AUC {BN} {fmt(nanmean([s.get('auc') for s in sa]))} vs {other} {fmt(nanmean([s.get('auc') for s in sb]))}"
           f"; TPR@0.1%FPR {fmt(nanmean([s.get('tpr_at_0.1pct_fpr') for s in sa]))} vs "
           f"{fmt(nanmean([s.get('tpr_at_0.1pct_fpr') for s in sb]))}")
    naive = difference_stats(targets, unit="targets") if targets is not None else None
    if naive is not None and naive.ci_low is not None:
        out += (f"; for comparison, an interval over the {naive.n} targets as if independent would be "
                f"[{naive.ci_low:+.3f}, {naive.ci_high:+.3f}] (not used: the targets share reference models)")
    return out


def _range_note(est: PairedDiff, paper: tuple[float, float]) -> str:
    if est.ci_low is None or est.ci_high is None:
        return ""
    return (f"interval [{est.ci_low * 100:+.1f}, {est.ci_high * 100:+.1f}] pts; the paper's minimum "
            f"{paper[0] * 100:g} pts, range {paper[0] * 100:g}–{paper[1] * 100:g} pts")


def _one(claim: Claim, setting, reps, other: str, deciding: bool, paper: tuple[float, float], clean: bool) -> None:
    cov, alts, primary = [], [], None
    primary_attack = attack_spec.the(attack_spec.PRIMARY)  # decides the row; every VERDICT attack gets a verdict
    for attack in attack_spec.playing(attack_spec.VERDICT):
        est, targets = lira_estimate(reps, other, attack, LIRA_SUBSET)
        if est is None:
            cov.append(Analysis(ATTACK_NAMES[attack], None, None, None, NOT_RUN, "",
                                f"no {attack} results on subset {LIRA_SUBSET!r}"))
            continue
        a = Analysis.of(ATTACK_NAMES[attack], est, grade_magnitude(est, paper), _range_note(est, paper), paper=paper)
        cov.append(a)
        if attack == primary_attack:
            primary = Analysis.of(PLAN_ANALYSIS, est, a.status,
                                  "; ".join(x for x in (a.note, _detail(reps, other, attack, targets)) if x),
                                  paper=paper)
    tail = f"{BN} − {other}"
    if primary is None:
        claim.evaluations.append(not_run(where(setting, tail), f"no {primary_attack} LiRA results on "
                                                              f"{LIRA_SUBSET!r}"))
        return
    fv, _ = lira_estimate(reps, other, "online_fixed_variance", LIRA_SUBSET)
    if fv is not None:
        alts.append(Analysis.of(ATTACK_NAMES["online_fixed_variance"], fv, grade_magnitude(fv, paper), paper=paper))
    ident, _ = lira_estimate(reps, other, primary_attack, LIRA_SUBSET, IDENTITY_BLOCK)
    if ident is not None:
        alts.append(Analysis.of("online LiRA, identity query view only", ident, grade_magnitude(ident, paper),
                                paper=paper))
    if not clean:
        out_est, _ = lira_estimate(reps, other, primary_attack, "outliers")
        if out_est is not None:
            alts.append(Analysis.of("online LiRA, outlier subset (direction only tested)", out_est, grade(out_est)))
    lens0 = reps[0][1]
    others = ", ".join(ATTACK_NAMES[a] for a in attack_spec.playing(attack_spec.VERDICT) if a != primary_attack)
    c = cond(setting, lens0, attack=f"{ATTACK_NAMES[primary_attack]} (+ {others})", subset=LIRA_SUBSET,
             **{k: (lens0.config or {}).get(k) for k in ("shadow_models", "views")
                if k not in lens0.conditions and k in (lens0.config or {})})
    claim.evaluations.append(Evaluation.from_analysis(where(setting, tail), primary, c, deciding, cov, alts,
                                                      ATTACK_NAMES[primary_attack], paper=paper))


def evaluate_one(run: RunData, clean: bool) -> Claim:
    """Claim 3a (with injected outliers) or 3b (clean data)."""
    claim = new_claim("3b" if clean else "3a", LIRA)  # in points, as the paper (DISPLAY)
    for setting in settings_of(run, LIRA):
        cell0 = setting.first
        if cell0.corrupted is None or cell0.corrupted == clean:
            if cell0.corrupted is None:
                claim.notes.append(f"{setting.label}: corruption unknown; not assigned to 3a/3b")
            continue
        reps = setting.lenses(LIRA)
        lens0 = reps[0][1]
        norms = lira_norms(lens0.data, lens0.conditions)
        if BN not in norms or len(norms) < 2:
            claim.evaluations.append(not_run(where(setting), f"norms {norms}: needs batch and another norm"))
            continue
        paper = lira_range(outlier_mix(cell0))
        for other, deciding in baselines(norms):
            _one(claim, setting, reps, other, deciding, paper, clean)
    return claim


def evaluate(run: RunData) -> list[Claim]:
    """Claims 3a and 3b."""
    return [evaluate_one(run, clean=False), evaluate_one(run, clean=True)]
