"""Claim 7: the feedback loop — outliers drive γ up in trained networks, raising (γ/σ)².

The primary statistic (the outliers' share of each γ's growth from per-sample
γ-gradients summed over training steps) is not measured by any lens yet, so the
row reads "not run" (the plan says so). The co-verdict is shown, not deciding:
|γ|/σ at the end in a corrupted setting minus the clean setting of the same
dataset, architecture and recipe, paired by replicate.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bnmem.analysis_plan import GS_SIGMA, LENS_GAMMA_SIGMA, PLAN
from bnmem.report.claims.core import Analysis, Claim, Evaluation, grade, new_claim, not_run, stats_of
from bnmem.report.claims.shared import cond, where
from bnmem.report.results import Setting, finite, layer_rows, replicate_of, settings_of
from bnmem.report.rundata import Lens, RunData

IDS = ("7",)
COVERDICT = "|γ|/σ corrupted − clean, paired by replicate"
# Conditions that may differ between the corrupted and the clean setting compared.
_CORRUPTION_KEYS = ("label_noise", "ood", "ood_source", "ood_from", "heldout_classes")


def model_gamma_sigma(data: dict[str, Any]) -> dict[str, float]:
    """Seed -> the mean over its BN layers of the layer's median channel |γ|/σ (running σ, final epoch)."""
    vals: dict[str, list[float]] = {}
    for row in layer_rows(data, GS_SIGMA):
        for s, v in (row.get("per_seed") or {}).items():
            m = finite((v or {}).get("median_ratio"))
            if m is not None:
                vals.setdefault(str(s), []).append(m)
    return {s: float(np.mean(v)) for s, v in vals.items() if v}


def _base(setting: Setting) -> str:
    c = setting.first.conditions
    lens = setting.first.lenses.get(LENS_GAMMA_SIGMA)
    recipe = (lens.conditions.get("recipe") if lens else None) or c.get("recipe")
    return repr((c.get("dataset"), c.get("arch"), recipe))


def _per_replicate(setting: Setting) -> dict[int, float]:
    out = {}
    for cell, lens in setting.lenses(LENS_GAMMA_SIGMA):
        v = list(model_gamma_sigma(lens.data).values())
        if v:
            out[replicate_of(cell)] = float(np.mean(v))
    return out


def _coverdict(corrupted: Setting, clean: Setting) -> tuple[Analysis, str]:
    a, b = _per_replicate(corrupted), _per_replicate(clean)
    common = sorted(set(a) & set(b))
    est = stats_of([a[r] - b[r] for r in common], "replicates") if common else None
    shown = ", ".join(f"r{r}: {a[r]:.2f} vs {b[r]:.2f}" for r in common)
    return Analysis.of(COVERDICT, est, grade(est), f"mean layer median |γ|/σ, corrupted vs clean: {shown}"), shown


def evaluate(run: RunData) -> list[Claim]:
    """Claim 7: not run (no per-sample γ-gradient measurement yet), the corrupted-vs-clean co-verdict shown."""
    claim = new_claim("7", "gamma_sigma", "{:+.2f}")
    settings = settings_of(run, LENS_GAMMA_SIGMA)
    clean = {_base(s): s for s in settings if s.first.corrupted is False}
    why = PLAN["7"].measurable
    for s in settings:
        if s.first.corrupted is not True:
            continue
        lens: Lens = s.lenses(LENS_GAMMA_SIGMA)[0][1]
        claim.evaluations.append(not_run(where(s), why, cond(s, lens)))
        partner = clean.get(_base(s))
        if partner is None:
            continue
        cov, _ = _coverdict(s, partner)
        shown = Evaluation.from_analysis(where(s, f"co-verdict vs {partner.label}"), cov, cond(s, lens),
                                         deciding=False)
        shown.note = "shown, not deciding (the primary is not measured): " + shown.note
        claim.evaluations.append(shown)
    if not claim.evaluations:
        claim.evaluations.append(not_run("—", why + "; and no corrupted gamma-sigma setting in this run"))
    return [claim]

