"""Row 3c (beyond the paper, exploratory): does BN's membership-inference gain survive at matched fit?

Reads the lira lens's ``matched_fit`` block (written when the lens is asked, ``lenses.lira.matched_fit``)::

    "matched_fit": {"epochs": [1, ..., E],
                    "<norm>": {"test_acc": [[acc of model m] per epoch],               # [E][M]
                               "online": {"auc_per_target": [[...] per epoch],            # [E][M]
                                          "tpr_at_0.1pct_fpr_shadow": [[...] per epoch],  # threshold fitted on
                                          "fpr_at_shadow_threshold": [[...] per epoch]}}} # the references only

and matches the two arms per replicate (:func:`matched_epochs`, the plan's rule), then decides on the
paired AUC differences BN@matched − baseline@matched, replicates as the unit.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from bnmem.analysis_plan import (
    BASELINE, BEYOND_PAPER, BN, CONVERGENCE, GRADED, MATCHED_FIT_OPTION, MATCH_FPR, REPLICATE_UNIT, TEST_ACCURACY,
    UNCHANGED, Axis, ClaimPlan, Display,
)
from bnmem.attacks import spec as attack_spec
from bnmem.attacks.shadow_threshold import precision_at_prior
from bnmem.names import LIRA
from bnmem.report.claims.core import PLAN_ANALYSIS, Analysis, Claim, Evaluation, estimate, grade, new_claim, not_run
from bnmem.report.claims.shared import cond, where
from bnmem.report.results import lira_norms, settings_of
from bnmem.report.rundata import RunData

# The test-accuracy tolerance of the match and the member prior reported beside the AUC.
MATCH_TOLERANCE = 0.01
MATCH_PRIOR = 0.01

CLAIMS = (ClaimPlan(
    "3c", "Beyond the paper: does BN's membership-inference gain survive at matched fit?",
    "not a claim of the paper: the question a critique of LiRA raises (attack success inflated by "
    "overconfident targets, by thresholds tuned on target data, by a 50% member prior); a BN vs no-norm "
    "gap at the same epoch could be BN's different fit rather than memorization",
    BEYOND_PAPER, LIRA,
    "online-LiRA AUC on all training examples, leave-one-out over the shadow models (each the target once, "
    "its references the other shadow models at the same epoch), BN − no-norm paired by model index, the two "
    f"arms at matched test accuracy. Measured when the lira lens is asked (`lenses.lira.{MATCHED_FIT_OPTION}: "
    "true`): it also queries its shadow models at every earlier epoch and records per epoch each model's "
    "test accuracy. Beside the AUC: the TPR at "
    f"{MATCH_FPR:.1%} FPR with the threshold fitted on the reference (shadow) models only, never on the "
    "target's scores (per target, the non-member scores of the other shadow models, each scored against "
    "references that exclude the target), and the precision at that threshold when "
    f"{MATCH_PRIOR:.0%} of the candidates are members: π·TPR / (π·TPR + (1 − π)·FPR), π = {MATCH_PRIOR:g}",
    "matching rule, per replicate: the less well-fitting arm (the lower mean shadow-model test accuracy at "
    "the final epoch; normally the baseline) is read at its final epoch; the other arm at the earliest "
    f"recorded epoch whose mean shadow-model test accuracy lies within {MATCH_TOLERANCE * 100:g} point of the "
    f"first arm's final mean test accuracy (|difference| ≤ {MATCH_TOLERANCE * 100:g} point). A replicate in "
    "which no epoch matches (the arm jumps over the band between two epochs) is left out, and the row says "
    "so; none left: not run",
    "per replicate the mean over targets of the paired AUC difference BN@matched − baseline@matched (each "
    "arm at its matched epoch); mean over replicates",
    REPLICATE_UNIT + "; targets inside one replicate share reference models and are never treated as "
                      "independent",
    "Student t-interval over replicate means (n − 1 df), at 95% for 'reproduced' and at 1 − 0.05/k for "
    "'contradicted'; one replicate: no interval (inconclusive)",
    "null 0, direction +, no magnitude",
    GRADED,
    "compare like with like: a model that fits its data better is easier to attack, so a gain measured at "
    "the same epoch mixes BN's memorization with its faster fit. Matching on test accuracy holds the fit "
    "fixed and asks whether BN still leaks more. The TPR at a low FPR with a threshold the attacker could "
    "have fitted (on its own shadow models) and the precision at a 1% member prior answer the critique's "
    "other two points. The row is exploratory until a run whose seeds the plan could not have seen (a "
    "confirmatory run) decides it",
    previous_rule=f"{UNCHANGED}; plan 5.0's text printed an unrendered placeholder where the tolerance belongs, "
                  f"the code used {MATCH_TOLERANCE * 100:g} point",
    measurable="the lira lens's per-epoch queries (the matched-fit option) are being built; until a run "
               "records them the row reads 'not run'",
    display=Display("{:+.1f}", scale=100, suffix="points"),
    estimand=TEST_ACCURACY,
    estimand_why=("BN − no-norm AUC with the better-fitting arm read where its test accuracy matches the other's "
                  "final one: does BN's membership-inference gain survive at the same utility? The question a "
                  "critique of LiRA asks; beyond the paper"),
    panel=((CONVERGENCE, ""),),
    axis=Axis("BN − none at matched test accuracy: online-LiRA AUC, in points (beyond the paper)"),
),)
EXPLORATORY = ("beyond the paper: exploratory until a run whose seeds the plan could not have seen (a "
               "confirmatory run) decides it")


def _grid(block: dict[str, Any], norm: str, *keys: str) -> np.ndarray | None:
    """An [E][M] array of the block (nan where missing), or None."""
    v: Any = block.get(norm)
    for k in keys:
        v = v.get(k) if isinstance(v, dict) else None
    if not isinstance(v, list) or not v:
        return None
    return np.array([[np.nan if x is None else float(x) for x in row] for row in v], dtype=np.float64)


def matched_epochs(epochs: list[int], acc_bn: np.ndarray, acc_base: np.ndarray, tol: float = MATCH_TOLERANCE
                   ) -> tuple[int, int] | None:
    """The plan's matching rule on per-epoch mean test accuracies: (index of BN's epoch, index of the
    baseline's). The arm with the lower final accuracy is read at its final epoch; the other at its earliest
    epoch whose accuracy lies within ``tol`` of that (|acc − target| ≤ tol). None when no epoch does (the arm
    jumps over the band between two recorded epochs). An arm's final epoch is its last recorded one (under
    fair arms each arm trains its own epochs; the shorter one's later rows are nan)."""
    last_bn, last_base = _last(acc_bn), _last(acc_base)
    if last_bn is None or last_base is None:
        return None
    if acc_bn[last_bn] >= acc_base[last_base]:
        target, other, read_bn = acc_base[last_base], acc_bn, True  # the usual case: BN fits better, read it earlier
    else:
        target, other, read_bn = acc_bn[last_bn], acc_base, False  # the baseline fits better: roles swapped
    hit = np.flatnonzero(np.abs(other - target) <= tol + 1e-12)
    if hit.size == 0:
        return None
    e = int(hit[0])
    return (e, last_base) if read_bn else (last_bn, e)


def _last(acc: np.ndarray) -> int | None:
    """The index of the last finite entry (None: none)."""
    idx = np.flatnonzero(np.isfinite(acc))
    return int(idx[-1]) if idx.size else None


def _replicate(data: dict[str, Any], other: str) -> dict[str, Any] | str:
    """One replicate's matched numbers, or why it has none."""
    block = data.get("matched_fit")
    if not isinstance(block, dict) or not block.get("epochs"):
        return f"no matched-fit queries (the lira lens's `{MATCHED_FIT_OPTION}` option was off)"
    epochs = [int(e) for e in block["epochs"]]
    acc_b, acc_o = _grid(block, BN, "test_acc"), _grid(block, other, "test_acc")
    attack = attack_spec.the(attack_spec.PRIMARY)  # the matched-fit block's attack (lenses.lira.matched_fit)
    auc_b, auc_o = _grid(block, BN, attack, "auc_per_target"), _grid(block, other, attack, "auc_per_target")
    if any(x is None for x in (acc_b, acc_o, auc_b, auc_o)):
        return f"matched-fit block lacks {BN} or {other} test accuracy or {attack} AUCs"
    assert acc_b is not None and acc_o is not None and auc_b is not None and auc_o is not None
    with warnings.catch_warnings():  # an epoch one arm did not train (fair arms) is all nan: its mean is nan
        warnings.simplefilter("ignore", RuntimeWarning)
        mb, mo = np.nanmean(acc_b, axis=1), np.nanmean(acc_o, axis=1)
    pick = matched_epochs(epochs, mb, mo)
    if pick is None:
        return (f"not matched: no epoch of the better-fitting arm comes within {MATCH_TOLERANCE * 100:g} point of "
                f"the other's final test accuracy ({BN} {_final(mb):.3f}, {other} {_final(mo):.3f})")
    eb, eo = pick
    out = {"diffs": auc_b[eb] - auc_o[eo], "epoch_bn": epochs[eb], "epoch_other": epochs[eo],
           "acc_bn": float(mb[eb]), "acc_other": float(mo[eo])}
    for norm, e, key in ((BN, eb, "bn"), (other, eo, "other")):
        tpr = _grid(block, norm, attack, "tpr_at_0.1pct_fpr_shadow")
        fpr = _grid(block, norm, attack, "fpr_at_shadow_threshold")
        if tpr is not None and fpr is not None:
            out[f"tpr_{key}"], out[f"fpr_{key}"] = float(np.nanmean(tpr[e])), float(np.nanmean(fpr[e]))
    return out


def _final(acc: np.ndarray) -> float:
    i = _last(acc)
    return math.nan if i is None else float(acc[i])


def _operating_points(reps: list[dict[str, Any]], other: str) -> str:
    parts = []
    for key, norm in (("bn", BN), ("other", other)):
        t = [r[f"tpr_{key}"] for r in reps if f"tpr_{key}" in r]
        f = [r[f"fpr_{key}"] for r in reps if f"fpr_{key}" in r]
        if t and f:
            tpr, fpr = float(np.mean(t)), float(np.mean(f))
            prec = precision_at_prior(tpr, fpr, MATCH_PRIOR)
            parts.append(f"{norm}: TPR {tpr:.2%} at {MATCH_FPR:.1%} FPR (threshold fitted on the shadow models; "
                         f"realized FPR {fpr:.2%}), precision at a {MATCH_PRIOR:.0%} member prior "
                         + ("— (nothing flagged)" if math.isnan(prec) else f"{prec:.1%}"))
    return "; ".join(parts)


def evaluate(run: RunData) -> list[Claim]:
    """Row 3c in every lira setting with BN and the baseline (no normalization)."""
    claim = new_claim("3c", LIRA)  # in points (DISPLAY)
    for setting in settings_of(run, LIRA):
        lenses = setting.lenses(LIRA)
        norms = lira_norms(lenses[0][1].data, lenses[0][1].conditions)
        tail = f"{BN}@matched − {BASELINE}@matched"
        if BN not in norms or BASELINE not in norms:
            claim.evaluations.append(not_run(where(setting), f"norms {norms}: needs {BN} and {BASELINE}"))
            continue
        reps = [_replicate(lens.data, BASELINE) for _, lens in lenses]
        used = [r for r in reps if isinstance(r, dict)]
        left = [r for r in reps if isinstance(r, str)]
        if not used:
            claim.evaluations.append(not_run(where(setting, tail), left[0] if left else "no replicate"))
            continue
        est = estimate([r["diffs"] for r in used], "targets", False)
        epochs = ", ".join(f"{BN} epoch {r['epoch_bn']} ({r['acc_bn']:.3f}) vs {BASELINE} epoch {r['epoch_other']} "
                           f"({r['acc_other']:.3f})" for r in used)
        note = "; ".join(x for x in (
            EXPLORATORY, f"matched test accuracy per replicate: {epochs}",
            f"{len(left)} of {len(reps)} replicates left out: {'; '.join(dict.fromkeys(left))}" if left else "",
            _operating_points(used, BASELINE)) if x)
        primary = Analysis.of(PLAN_ANALYSIS, est, grade(est), note)
        c = cond(setting, lenses[0][1], attack="online LiRA", subset="all")
        claim.evaluations.append(Evaluation.from_analysis(where(setting, tail), primary, c, True))
    return [claim]

