"""Claim 1: BN models fit corrupted / OOD samples faster and further (the memorize lens).

Plan 5.0's primary compares the two norms at matched clean-training progress
(:mod:`bnmem.report.claims.progress`): per pair (seed), the mean over BN's
recorded epochs of BN's corrupted-subset accuracy minus the baseline's at the
(fractional) epoch its clean training accuracy first reaches BN's. A model near
chance on its clean data has fitted nothing, so comparing it at the same epoch
with one that has learned its clean data measures speed, not memorization.
Plan 4.0's mean over epochs (the previous verdict) and the final epoch are
robustness rows."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from bnmem.analysis_plan import BN
from bnmem.names import MEMORIZE
from bnmem.report.claims.core import PLAN_ANALYSIS, Analysis, Claim, Evaluation, estimate, grade, new_claim
from bnmem.report.claims.progress import curve_epochs, matched_difference
from bnmem.report.claims.shared import (
    bn_comparison, cond, has_per_seed, last, nanmean, previous, seed_diffs, where,
)
from bnmem.report.results import baselines, finite, fmt, settings_of
from bnmem.report.rundata import LensOutput, RunData
from bnmem.stats import difference_stats, pair_by_key

IDS = ("1",)
AREA_V4 = "mean over epochs (plan 4.0)"
CLEAN = "clean_acc"


def _curve(rec: dict[str, Any], key: str) -> np.ndarray:
    vals = rec.get(key)
    if not isinstance(vals, list):
        return np.array([])
    return np.array([math.nan if finite(v) is None else float(v) for v in vals])


def matched_pair(bn: dict[str, Any], other: dict[str, Any], key: str) -> tuple[float, int]:
    """One seed's matched-progress difference of the ``key`` curve (BN − other) and its matched epochs."""
    cb, xb = _curve(bn, CLEAN), _curve(bn, key)
    co, xo = _curve(other, CLEAN), _curve(other, key)
    n = min(cb.size, xb.size)
    if n == 0 or co.size == 0 or xo.size == 0:
        return math.nan, 0
    return matched_difference(cb[:n], xb[:n], curve_epochs(co), co, curve_epochs(xo), xo)


def matched_diffs(lens: LensOutput, other: str, key: str) -> tuple[np.ndarray, list[int]]:
    """Per seed (paired by seed) the matched-progress BN − other difference, and each seed's matched epochs."""
    a = lens.data[BN]["per_seed"]
    b = lens.data[other]["per_seed"]
    keys, _, _ = pair_by_key({s: 0.0 for s in a}, {s: 0.0 for s in b})
    out = [matched_pair(a[s], b[s], key) for s in keys]
    return np.array([v for v, _ in out]), [m for _, m in out]


def evaluate(run: RunData) -> list[Claim]:
    """Claim 1 in every setting that ran the memorize lens."""
    claim = new_claim("1", "memorization")
    for setting in settings_of(run, MEMORIZE):
        reps = setting.lenses(MEMORIZE)
        lens0 = reps[0][1]
        norms, subsets = bn_comparison(claim, setting, lens0, has_per_seed)
        if norms is None:
            continue
        for other, deciding in baselines(norms):
            for sub, sub_name in subsets:
                key = f"{sub}_acc"
                ok = [(c, lens) for c, lens in reps if other in lens.data and BN in lens.data]
                matched, counts = [], []
                for _, lens in ok:
                    m, n = matched_diffs(lens, other, key)
                    matched.append(m)
                    counts += n
                area = [seed_diffs(lens, other, lambda r: nanmean(r.get(key))) for _, lens in ok]
                final = [seed_diffs(lens, other, lambda r: last(r.get(key))) for _, lens in ok]
                fit = []
                for n in (BN, other):
                    fin = [finite((lens.data[n].get("final") or {}).get(key)) for _, lens in ok]
                    clean = [finite((lens.data[n].get("final") or {}).get(CLEAN)) for _, lens in ok]
                    fit.append(f"{n}: final {sub} acc {fmt(nanmean(fin))}, clean acc {fmt(nanmean(clean))}")
                left_out = sum(1 for c in counts if c == 0)
                grid = (f"matched BN epochs per pair {min(counts)}–{max(counts)}" if counts else "no pair")
                grid += f"; {left_out} pair(s) with no matched epoch left out" if left_out else ""
                tail = f"{BN} − {other}, {sub_name}"
                a_est = estimate(area, "seeds", True)
                if not any(np.isfinite(m).any() for m in matched):
                    # No BN epoch whose clean accuracy the baseline reached: the primary cannot be made.
                    primary = Analysis(PLAN_ANALYSIS, None, None, None, "not run", "",
                                       "no pair has a BN epoch whose clean training accuracy the baseline reaches "
                                       "(or no clean-accuracy curve recorded); " + "; ".join(fit))
                else:
                    est = estimate(matched, "seeds", True)
                    primary = Analysis.of(PLAN_ANALYSIS, est, grade(est), "; ".join([grid, *fit]))
                f_est = estimate(final, "seeds", True)
                pooled = difference_stats(np.concatenate(matched) if matched else [], unit="seeds")
                alts = [Analysis.of(AREA_V4, a_est, grade(a_est)),
                        Analysis.of("final-epoch accuracy", f_est, grade(f_est)),
                        Analysis.of("seeds pooled across replicates (matched progress)", pooled, grade(pooled),
                                    valid=False)]
                ev = Evaluation.from_analysis(where(setting, tail), primary, cond(setting, lens0), deciding,
                                              analyses=alts)
                claim.evaluations.append(ev)
                if deciding:
                    previous(claim, ev.where, a_est.mean if math.isfinite(a_est.mean) else None, grade(a_est))
    return [claim]
