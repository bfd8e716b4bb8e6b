"""Claim 1: BN models fit corrupted / OOD samples faster and further (the memorize lens).

The previous plan's (3.0) verdict is this rule at 1 − α/k on both sides; the claims driver records it."""

from __future__ import annotations

import numpy as np

from bnmem.analysis_plan import BN
from bnmem.names import MEMORIZE
from bnmem.report.claims.core import PLAN_ANALYSIS, Analysis, Claim, Evaluation, estimate, grade, new_claim
from bnmem.report.claims.shared import bn_comparison, cond, has_per_seed, last, nanmean, seed_diffs, where
from bnmem.report.results import baselines, finite, fmt, settings_of
from bnmem.report.rundata import RunData
from bnmem.stats import difference_stats

IDS = ("1",)


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
                area = [seed_diffs(lens, other, lambda r: nanmean(r.get(key))) for _, lens in ok]
                final = [seed_diffs(lens, other, lambda r: last(r.get(key))) for _, lens in ok]
                est = estimate(area, "seeds", True)
                fit = []
                for n in (BN, other):
                    fin = [finite((lens.data[n].get("final") or {}).get(key)) for _, lens in ok]
                    fit.append(f"{n}: final {sub} acc {fmt(nanmean(fin))}")
                primary = Analysis.of(PLAN_ANALYSIS, est, grade(est), "; ".join(fit))
                f_est = estimate(final, "seeds", True)
                pooled = difference_stats(np.concatenate(area) if area else [], unit="seeds")
                alts = [Analysis.of("final-epoch accuracy", f_est, grade(f_est)),
                        Analysis.of("seeds pooled across replicates", pooled, grade(pooled), valid=False)]
                tail = f"{BN} − {other}, {sub_name}"
                claim.evaluations.append(Evaluation.from_analysis(where(setting, tail), primary, cond(setting, lens0),
                                                                  deciding, analyses=alts))
    return [claim]
