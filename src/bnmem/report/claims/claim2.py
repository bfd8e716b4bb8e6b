"""Claim 2: corrupted samples' gradient norms shift up under BN, relative to clean ones (the gradnorms lens).

Plan 5.0's primary compares the norms at matched clean-training progress
(:mod:`bnmem.report.claims.progress`): per pair (seed), over BN's gradnorm
checkpoints at which BN has fitted less than half of the corrupted subset and
whose clean training accuracy the baseline reaches, BN's log corrupted/clean
median-norm ratio minus the baseline's, linearly interpolated between its two
checkpoints that bracket the epoch its clean accuracy first equals BN's. A model
near chance on its clean data has a ratio near 1 by construction, so plan 4.0's
same-epoch window (checkpoints before either norm fitted half the corrupted
subset; its robustness row and the previous verdict) let any faster learner
read "reproduced". Both gradient definitions must agree for the row to be
reproduced. The clean-accuracy curves are the memorize lens's (the same models:
same data, initial weights and batch order).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np

from bnmem.analysis_plan import (
    BN, CLEAN_PROGRESS, CONVERGENCE, CORRUPTED_FIT, FIT_LEVEL, GRADED, INCONCLUSIVE, MATCHED_PROGRESS,
    PAPERS_PROTOCOL, REPLICATE_INTERVAL, REPLICATE_UNIT, REPRODUCED, SAME_AS_PRIMARY, SAME_EPOCH, TEST_ABOVE,
    TEST_ACCURACY, UNCHANGED, Axis, ClaimPlan, Design, Display, Endpoint,
)
from bnmem.names import GRADNORMS, MEMORIZE
from bnmem.report.claims.core import (
    PLAN_ANALYSIS, Analysis, Claim, Evaluation, estimate, grade, new_claim, not_run, weakest,
)
from bnmem.report.claims.progress import curve_epochs, first_reach, value_at
from bnmem.report.claims.shared import bn_comparison, cond, log_of, where
from bnmem.report.results import Setting, baselines, finite, gradnorm_checkpoints, settings_of
from bnmem.report.rundata import CellOutput, LensOutput, RunData

GRAD_DEFINITIONS = ("eval", "batch")  # both decide claim 2's row (they must agree)

EARLY_V4 = "early window at the same epoch (plan 4.0)"
MATCHED_TEST = "matched test accuracy (progress read on the memorize lens's test-accuracy curves)"

CLAIMS = (ClaimPlan(
    "2", "Gradient norms of corrupted samples shift up under BN (relative to clean samples)",
    "gradient-norm distributions of noisy samples shift up under BN (no magnitude stated)",
    "evidence", GRADNORMS,
    "per-sample gradient L2 norm over all parameters; per model the log of the corrupted/clean ratio of "
    "median norms; under the eval definition (running statistics) and the training-mode (batch) definition, "
    "the gradient the optimizer follows",
    "BN's declared gradnorm checkpoints t at which BN has fitted less than half of the corrupted subset (its "
    f"corrupted-subset training accuracy below {FIT_LEVEL:.0%}: the accuracy the gradnorms lens recorded "
    f"there, else the memorize lens's curve of the same models) and whose clean accuracy the baseline "
    f"reaches. {MATCHED_PROGRESS} The baseline's log ratio is linearly interpolated at t' between its two "
    "gradnorm checkpoints that bracket t' (t' outside its measured checkpoints: that t is left out). The "
    "clean-accuracy curves are the memorize lens's (it trains the same models: same data, initial weights and "
    "batch order). Studies declare dense early checkpoints (the demo: epochs 1, 2, 3, 4, 5, 10, 20; the "
    "lens's default 1, 2, 3, epochs/6, epochs/3, the end). A pair with no matched checkpoint is left out; "
    "no pair at all: not run",
    "per pair the mean over its matched checkpoints of BN's log-ratio minus the baseline's at t'; mean over "
    "seeds; mean over replicates",
    REPLICATE_UNIT, REPLICATE_INTERVAL + ". Both definitions count as settings in k",
    "null 0, direction +",
    GRADED + ", for each definition; the row is the less supportive of the two: reproduced only if both "
              "gradient definitions are reproduced",
    "the paper explains faster memorization by the outliers' larger gradients while they are being fitted; "
    "once BN has fitted them their gradients shrink, so checkpoints after BN's fit measure the consequence of "
    "claim 1, not its cause. A model near chance on its clean data has a corrupted/clean ratio near 1 by "
    "construction (it has learned neither), so comparing it at the same epoch with a BN model that has "
    "learned its clean data lets any faster learner read 'reproduced' (issue 36: during plan 4.0's window "
    "the no-norm model's clean training accuracy was 0.10–0.42 against BN's 0.82–0.95). At matched clean "
    "progress both models have learned the same share of their clean data, and the window is BN's own fit of "
    "the corrupted subset. The training-mode gradient is the one the optimizer follows, so a row decided by "
    "the eval definition alone could report a shift that never drove training",
    coverdicts=("eval definition", "batch definition"),
    alternatives=("early window at the same epoch (plan 4.0's statistic: the checkpoints at which both norms "
                  f"have fitted less than {FIT_LEVEL:.0%} of the corrupted subset)",
                  "area under the log-ratio curve over all checkpoints (plan 2.0's statistic; shown, not "
                  "counted: it uses checkpoints after the fit)",
                  "each checkpoint alone (identical analyses counted once; a checkpoint at which any pair has "
                  f"a norm at or above {FIT_LEVEL:.0%} fit is after the fit: shown, not counted)",
                  "absolute: log corrupted median, BN − no-norm, early checkpoints",
                  "matched test accuracy (plan 6.0): the primary's statistic with progress read on each model's "
                  "test accuracy, where the memorize lens recorded the curve",
                  f"matched fit level: each norm at its checkpoint whose fit is closest to {FIT_LEVEL:.0%}, "
                  "only where both lie within ±0.15 of it (the caliper)"),
    previous_rule=UNCHANGED,
    planning=(Endpoint("", TEST_ABOVE, 0.1, 0.0, 0.14, "smallest effect of interest",
               "the paper states no magnitude; a 10% larger corrupted/clean gradient-norm ratio (0.1 in log) "
               "is the smallest shift worth explaining memorization by (plan 5.0: at matched clean progress; "
               "the SD is still plan 4.0's same-epoch statistic's, seen in the demo)"),),
    display=Display("{:+.2f}"),
    estimand=CLEAN_PROGRESS,
    estimand_why=("BN's corrupted/clean gradient-norm log ratio minus the baseline's at equal clean training "
                  "progress, over BN's own fit of the corrupted subset, each arm with its own recipe: the paper "
                  "explains faster memorization by larger outlier gradients while they are being fitted, so the "
                  "window is BN's fit, and holding the clean progress fixed compares two models that have learned "
                  "the same share of their clean data. A judgement: the answer changes with what is held fixed "
                  "(the changelog of 6.0), so the panel shows the same epoch and the matched corrupted-subset fit "
                  "beside it"),
    panel=((SAME_EPOCH, EARLY_V4), (CORRUPTED_FIT, "matched fit level"), (TEST_ACCURACY, "matched test accuracy"),
           (CONVERGENCE, ""),
           (PAPERS_PROTOCOL, SAME_AS_PRIMARY)),
    axis=Axis("BN − none: log gradient-norm ratio corrupted / clean"),
    design=Design(tests=lambda options: len(options.get("definitions") or GRAD_DEFINITIONS)),
),)

Reps = list[tuple[CellOutput, LensOutput]]
CALIPER = 0.15  # matched-fit alternative: both checkpoints within ±0.15 of FIT_LEVEL
NO_MATCH = ("no pair has a checkpoint before BN fitted {fit} of the {sub} whose clean training accuracy the "
            "baseline reaches between its gradnorm checkpoints (or no clean-accuracy curve: the memorize lens)")


def memorization_phase(epochs: list[int], total: int | None) -> list[int]:
    """Plan 1.1's checkpoints: after epoch 1 and up to half of training (all after epoch 1 if none)."""
    after_first = [e for e in epochs if e > 1]
    if total:
        early = [e for e in after_first if e <= total / 2]
        if early:
            return early
    return after_first or epochs


def area_under(epochs: Sequence[float], values: np.ndarray) -> np.ndarray:
    """Trapezoid area of ``values`` [..., n_checkpoints] over ``epochs``, divided by the epoch span
    (the curve's mean height); one checkpoint: its value. NaN where any checkpoint is NaN."""
    values = np.asarray(values, dtype=float)
    e = np.asarray(epochs, dtype=float)
    if e.size == 1:
        return values[..., 0]
    widths = np.diff(e)
    mids = (values[..., 1:] + values[..., :-1]) / 2
    return (mids * widths).sum(axis=-1) / (e[-1] - e[0])


def _has_checkpoints(v: Any) -> bool:
    return isinstance(v, dict) and any(isinstance(d, dict) and any(str(k).startswith("epoch_") for k in d)
                                       for d in v.values())


def _series(lens: LensOutput, norm: str, definition: str, epochs: list[int], field_of: Callable[[dict], float]
            ) -> dict[str, np.ndarray]:
    """seed -> values over ``epochs`` of one per-seed field."""
    ck = dict(gradnorm_checkpoints(lens.data[norm].get(definition, {})))
    out: dict[str, list[float]] = {}
    for i, e in enumerate(epochs):
        for s, rec in ((ck.get(e) or {}).get("per_seed") or {}).items():
            out.setdefault(str(s), [math.nan] * len(epochs))[i] = field_of(rec or {})
    return {s: np.array(v) for s, v in out.items()}


def fit_levels(cell: CellOutput, lens: LensOutput, norm: str, definition: str, sub: str, epochs: list[int]
               ) -> dict[str, np.ndarray]:
    """seed -> corrupted-subset training accuracy at each checkpoint: what the gradnorms lens recorded
    there, else the memorization curve of the same (norm, seed) from the cell's memorize lens (it trains
    the same models: same data, initial weights and batch order)."""
    own = _series(lens, norm, definition, epochs, lambda r: finite(r.get(f"{sub}_acc")) or math.nan)
    mem = cell.lenses.get(MEMORIZE)
    curves = ((mem.data.get(norm) or {}).get("per_seed") or {}) if mem is not None else {}
    out = {}
    for s in set(own) | set(str(k) for k in curves):
        fits = own.get(s)
        if fits is None or not np.isfinite(fits).any():
            vals = (curves.get(s) or {}).get(f"{sub}_acc")
            if not isinstance(vals, list):
                continue
            curve = [math.nan if finite(v) is None else float(v) for v in vals]
            fits = np.array([curve[e - 1] if 0 < e <= len(curve) else math.nan for e in epochs])
        out[s] = fits
    return out


def clean_curves(cell: CellOutput, norm: str, progress: str = "clean_acc") -> dict[str, np.ndarray]:
    """seed -> clean-subset training accuracy after every epoch (the cell's memorize lens; {} without it);
    ``progress``: another per-epoch curve of it (plan 6.0's panel: "test_acc")."""
    mem = cell.lenses.get(MEMORIZE)
    curves = ((mem.data.get(norm) or {}).get("per_seed") or {}) if mem is not None else {}
    out = {}
    for s, rec in curves.items():
        vals = (rec or {}).get(progress)
        if isinstance(vals, list) and vals:
            out[str(s)] = np.array([math.nan if finite(v) is None else float(v) for v in vals])
    return out


def _own_epochs(lens: LensOutput, norm: str, definition: str) -> list[int]:
    return sorted(e for e, _ in gradnorm_checkpoints(lens.data[norm].get(definition, {})))


def progress_matched(ts: Sequence[int], bn_ratio: np.ndarray, bn_fit: np.ndarray, bn_clean: np.ndarray,
                     base_ts: Sequence[int], base_ratio: np.ndarray, base_clean: np.ndarray) -> tuple[float, int]:
    """One pair's plan-5.0 statistic: over BN's checkpoints ``ts`` with corrupted fit ``bn_fit`` below FIT_LEVEL,
    BN's log ratio minus the baseline's (at its checkpoints ``base_ts``) interpolated at the epoch its clean
    curve ``base_clean`` (after every epoch) first reaches BN's clean accuracy at t (``bn_clean``, per epoch);
    the mean over the matched checkpoints and their number ((NaN, 0) without one)."""
    diffs = []
    for i, t in enumerate(ts):
        if not (bn_fit[i] < FIT_LEVEL) or not math.isfinite(bn_ratio[i]) or not 0 < t <= len(bn_clean):
            continue
        t_base = first_reach(curve_epochs(base_clean), base_clean, float(bn_clean[t - 1]))
        u = value_at(base_ts, base_ratio, t_base)
        if math.isfinite(u):
            diffs.append(bn_ratio[i] - u)
    return (float(np.mean(diffs)), len(diffs)) if diffs else (math.nan, 0)


def _progress_groups(reps: Reps, other: str, sub: str, definition: str, progress: str = "clean_acc"
                     ) -> tuple[list[np.ndarray], list[int]]:
    """Per replicate the per-seed plan-5.0 statistic, and every pair's matched checkpoints (``progress``: the
    memorize curve progress is read on)."""
    key = f"{sub}_clean_median_ratio"
    out, counts = [], []
    for cell, lens in reps:
        if other not in lens.data or definition not in lens.data[other] or definition not in lens.data[BN]:
            continue
        eps = {n: _own_epochs(lens, n, definition) for n in (BN, other)}
        rel = {n: _series(lens, n, definition, eps[n], lambda r: log_of(r.get(key))) for n in (BN, other)}
        fit = fit_levels(cell, lens, BN, definition, sub, eps[BN])
        clean = {n: clean_curves(cell, n, progress) for n in (BN, other)}
        seeds = sorted(set(rel[BN]) & set(rel[other]))
        vals = []
        for s in seeds:
            if s not in fit or s not in clean[BN] or s not in clean[other]:
                vals.append(math.nan)
                counts.append(0)
                continue
            v, m = progress_matched(eps[BN], rel[BN][s], fit[s], clean[BN][s], eps[other], rel[other][s],
                                    clean[other][s])
            vals.append(v)
            counts.append(m)
        if vals:
            out.append(np.array(vals))
    return out, counts


def _groups(reps: Reps, other: str, sub: str, definition: str
            ) -> tuple[list[int], dict[str, list[np.ndarray]], list[str]]:
    """Checkpoints and, per statistic, one array of per-seed BN − other values per replicate."""
    key = f"{sub}_clean_median_ratio"
    first = reps[0][1]
    epochs = sorted(set(e for e, _ in gradnorm_checkpoints(first.data[BN].get(definition, {})))
                    & set(e for e, _ in gradnorm_checkpoints(first.data[other].get(definition, {}))))
    out: dict[str, list[np.ndarray]] = {"early": [], "area": [], "absolute": [], "matched": [], "early_mask": [],
                                        **{f"checkpoint {e}": [] for e in epochs}}
    shown = []
    for cell, lens in reps:
        if other not in lens.data or definition not in lens.data[other]:
            continue
        rel = {n: _series(lens, n, definition, epochs, lambda r: log_of(r.get(key))) for n in (BN, other)}
        ab = {n: _series(lens, n, definition, epochs, lambda r: log_of(r.get(f"median_{sub}"))) for n in (BN, other)}
        fits = {n: fit_levels(cell, lens, n, definition, sub, epochs) for n in (BN, other)}
        seeds = sorted(set(rel[BN]) & set(rel[other]))
        if not seeds:
            continue
        d = np.array([rel[BN][s] - rel[other][s] for s in seeds])  # [seeds, checkpoints]
        da = np.array([ab[BN][s] - ab[other][s] for s in seeds])
        nan = np.full(len(epochs), math.nan)
        fb = np.array([fits[BN].get(s, nan) for s in seeds])
        fo = np.array([fits[other].get(s, nan) for s in seeds])
        early = (fb < FIT_LEVEL) & (fo < FIT_LEVEL)  # NaN fits compare False: never early
        out["early_mask"].append(early)
        out["early"].append(np.array([np.nanmean(np.where(m, row, np.nan)) if m.any() else math.nan
                                      for m, row in zip(early, d)]))
        out["absolute"].append(np.array([np.nanmean(np.where(m, row, np.nan)) if m.any() else math.nan
                                         for m, row in zip(early, da)]))
        out["area"].append(area_under(epochs, d))
        out["matched"].append(_matched(np.array([rel[BN][s] for s in seeds]), np.array([rel[other][s] for s in seeds]),
                                       fb, fo))
        for i, e in enumerate(epochs):
            out[f"checkpoint {e}"].append(d[:, i])
        shown.append(f"{cell.id}: " + ", ".join(
            f"ep {e}: {np.nanmean(d[:, i]):+.2f} ({int(early[:, i].sum())}/{len(seeds)} early)"
            for i, e in enumerate(epochs)))
    return epochs, out, shown


def post_fit(epochs: list[int], masks: list[np.ndarray]) -> set[int]:
    """The checkpoints after the fit: those at which some pair of some replicate has a norm at or above
    FIT_LEVEL (or no fit level); ``masks`` per replicate [seeds, checkpoints], True where both are below."""
    return {e for i, e in enumerate(epochs) if not masks or not all(m[:, i].all() for m in masks)}


def _matched(bn: np.ndarray, ot: np.ndarray, fb: np.ndarray, fo: np.ndarray) -> np.ndarray:
    """Per seed: BN's log ratio at its checkpoint nearest FIT_LEVEL minus the other's at its own, only
    when both lie within the caliper (else NaN). Arrays are [seeds, checkpoints]."""
    out = []
    for rb, ro, a, b in zip(bn, ot, fb, fo):
        if not (np.isfinite(a).any() and np.isfinite(b).any()):
            out.append(math.nan)
            continue
        i, j = int(np.nanargmin(np.abs(a - FIT_LEVEL))), int(np.nanargmin(np.abs(b - FIT_LEVEL)))
        ok = abs(a[i] - FIT_LEVEL) <= CALIPER and abs(b[j] - FIT_LEVEL) <= CALIPER
        out.append(rb[i] - ro[j] if ok else math.nan)
    return np.array(out)


def evaluate(run: RunData) -> list[Claim]:
    """Claim 2 in every setting that ran the gradnorms lens."""
    claim = new_claim("2", GRADNORMS)
    for setting in settings_of(run, GRADNORMS):
        reps = setting.lenses(GRADNORMS)
        lens0 = reps[0][1]
        norms, subsets = bn_comparison(claim, setting, lens0, _has_checkpoints)
        if norms is None:
            continue
        available = lens0.conditions.get("definitions") or list(lens0.data[BN])
        definitions = [d for d in GRAD_DEFINITIONS if d in available]
        if not definitions:
            claim.evaluations.append(not_run(where(setting), f"no eval or batch gradient definition in {available}"))
            continue
        for other, deciding in baselines(norms):
            for sub, sub_name in subsets:
                ev, _, _ = _evaluation(setting, reps, other, sub, sub_name, definitions, deciding)
                claim.evaluations.append(ev)
    return [claim]


def _evaluation(setting: Setting, reps: Reps, other: str, sub: str, sub_name: str,
                definitions: list[str], deciding: bool) -> tuple[Evaluation, str | None, float | None]:
    """The evaluation, with the row's verdict under plan 4.0 (its same-epoch early window) and its value."""
    cov: list[Analysis] = []
    alts: list[Analysis] = []
    old: list[Analysis] = []
    notes, epochs_all = [], []
    for d in definitions:
        epochs, groups, shown = _groups(reps, other, sub, d)
        epochs_all = epochs_all or epochs
        prog, counts = _progress_groups(reps, other, sub, d)
        has = any(np.isfinite(g).any() for g in prog)
        est = estimate(prog, "seeds", True) if has else None
        left = sum(1 for c in counts if c == 0)
        grid = (f"matched checkpoints per pair {min(counts)}–{max(counts)}" if counts else "no pair") + (
            f", {left} pair(s) without one left out" if left else "")
        cov.append(Analysis.of(f"{d} definition", est, grade(est),
                               grid if est else NO_MATCH.format(fit=f"{FIT_LEVEL:.0%}", sub=sub_name)))
        notes.append(f"{d} definition ({grid}), log {sub}/clean median-ratio difference at the same epoch: "
                     + " | ".join(shown))
        early = estimate(groups["early"], "seeds", True) if any(np.isfinite(g).any() for g in groups["early"]) \
            else None
        by_test, _ = _progress_groups(reps, other, sub, d, "test_acc")
        if any(np.isfinite(g).any() for g in by_test):  # plan 6.0's panel, where the memorize lens recorded it
            t_est = estimate(by_test, "seeds", True)
            alts.append(Analysis.of(f"{d}: {MATCHED_TEST}", t_est, grade(t_est)))
        early_a = Analysis.of(f"{d}: {EARLY_V4}", early, grade(early),
                              "" if early else f"no checkpoint before {FIT_LEVEL:.0%} fit (or no fit levels)")
        old.append(early_a)
        alts.append(early_a)
        # Plan 4.0: analyses using checkpoints after the fit measure claim 1's consequence: shown, not counted.
        late = post_fit(epochs, groups["early_mask"])
        area = estimate(groups["area"], "seeds", True)
        alts.append(Analysis.of(f"{d}: area over all checkpoints (plan 2.0)", area, grade(area),
                                valid=not late))
        for e in epochs:
            ce = estimate(groups[f"checkpoint {e}"], "seeds", True)
            alts.append(Analysis.of(f"{d}: checkpoint {e} only", ce, grade(ce),
                                    "after the fit in this setting" if e in late else "", valid=e not in late))
        if early is not None:
            ab = estimate(groups["absolute"], "seeds", True)
            alts.append(Analysis.of(f"{d}: absolute log corrupted median (early checkpoints)", ab, grade(ab)))
        if any(np.isfinite(g).any() for g in groups["matched"]):
            mf = estimate(groups["matched"], "seeds", True)
            alts.append(Analysis.of(f"{d}: matched fit level ({FIT_LEVEL:.0%} ± {CALIPER:g})", mf, grade(mf)))
    c = cond(setting, reps[0][1], gradient_definition=", ".join(definitions), checkpoints=epochs_all)
    tail = f"{BN} − {other}, {sub_name}"
    old_status, old_value = _row_status(old)
    ran = [a for a in cov if a.value is not None]
    if not ran:
        ev = not_run(where(setting, tail), NO_MATCH.format(fit=f"{FIT_LEVEL:.0%}", sub=sub_name), c)
        ev.analyses = alts
        return ev, old_status, old_value
    decider = weakest(ran)  # reproduced only if every definition is
    status = _row_status(cov)[0] or decider.status
    agree = len({a.status for a in cov}) == 1
    note = ("; ".join(notes) + f"; definitions {'agree' if agree else 'disagree'}: "
            + ", ".join(f"{a.name} {a.status}" for a in cov))
    primary = Analysis(PLAN_ANALYSIS, decider.value, decider.ci_low, decider.ci_high, status,
                       decider.method, note, n=decider.n, sd=decider.sd)
    ev = Evaluation.from_analysis(where(setting, tail), primary, c, deciding, cov, alts, decider.name)
    ev.tests = len(definitions)
    return ev, old_status, old_value


def _row_status(per_definition: list[Analysis]) -> tuple[str | None, float | None]:
    """The row's status from its definitions' verdicts (the least supportive; reproduced needs every definition
    to have run) and the deciding value; (None, None) when none ran."""
    ran = [a for a in per_definition if a.value is not None]
    if not ran:
        return None, None
    decider = weakest(ran)
    status = decider.status
    if len(ran) < len(per_definition) and status == REPRODUCED:
        status = INCONCLUSIVE  # a definition without a statistic cannot agree
    return status, decider.value
