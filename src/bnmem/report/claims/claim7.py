"""Claim 7: the feedback loop — outliers drive γ up in trained networks, raising (γ/σ)².

Primary: the outliers' share of the per-example pushes on |γ| minus their share
of the data (``gamma_sigma.json["push"]``, :mod:`bnmem.measure.gamma_push`),
per replicate the mean over its models. Co-verdict: |γ|/σ at the end in a
corrupted setting minus the clean setting of the same dataset, architecture and
recipe, paired by replicate. A run whose gamma-sigma lens recorded no pushes
(older versions) reads "not run" and shows the co-verdict, not deciding.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bnmem.analysis_plan import GS_SIGMA, LENS_GAMMA_SIGMA
from bnmem.report.claims.core import (
    PLAN_ANALYSIS, Analysis, Claim, Evaluation, estimate, grade, new_claim, not_run, stats_of,
)
from bnmem.report.claims.shared import cond, where
from bnmem.report.results import Setting, finite, fmt, layer_rows, replicate_of, settings_of
from bnmem.report.rundata import LensOutput, RunData

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


def push_groups(setting: Setting) -> list[np.ndarray]:
    """Per replicate, the per-model excess shares its gamma-sigma lens recorded."""
    out = []
    for _, lens in setting.lenses(LENS_GAMMA_SIGMA):
        per_seed = ((lens.data.get("push") or {}).get("per_seed") or {})
        vals = [finite((v or {}).get("excess_share")) for v in per_seed.values()]
        vals = [v for v in vals if v is not None]
        if vals:
            out.append(np.array(vals))
    return out


NO_PUSH = ("gamma_sigma.json has no per-example γ pushes (a gamma-sigma lens from before plan 3.0, or run with "
           "gamma_push off): rerun the lens")


def evaluate(run: RunData) -> list[Claim]:
    """Claim 7 in every corrupted setting that ran the gamma-sigma lens."""
    claim = new_claim("7", "gamma_sigma", "{:+.3f}")
    settings = settings_of(run, LENS_GAMMA_SIGMA)
    clean = {_base(s): s for s in settings if s.first.corrupted is False}
    for s in settings:
        if s.first.corrupted is not True:
            continue
        lens: LensOutput = s.lenses(LENS_GAMMA_SIGMA)[0][1]
        partner = clean.get(_base(s))
        cov = [_coverdict(s, partner)[0]] if partner is not None else []
        groups = push_groups(s)
        if groups:
            est = estimate(groups, "seeds", True)
            frac = finite((lens.data.get("push") or {}).get("outlier_fraction"))
            note = (f"outliers' share of the push on |γ| minus their share of the data ({fmt(frac, '.1%')}); "
                    "per replicate: " + ", ".join(f"{g.mean():+.3f}" for g in groups))
            primary = Analysis.of(PLAN_ANALYSIS, est, grade(est), note)
            claim.evaluations.append(Evaluation.from_analysis(where(s, "outliers' share of the γ push"), primary,
                                                              cond(s, lens), True, cov, [],
                                                              "outliers' share of the γ push" if cov else ""))
            continue
        claim.evaluations.append(not_run(where(s), NO_PUSH, cond(s, lens)))
        if cov:
            shown = Evaluation.from_analysis(where(s, f"co-verdict vs {partner.label}"), cov[0], cond(s, lens),
                                             deciding=False)
            shown.note = "shown, not deciding (the primary is not measured): " + shown.note
            claim.evaluations.append(shown)
    if not claim.evaluations:
        claim.evaluations.append(not_run("—", "no corrupted setting ran the gamma-sigma lens"))
    return [claim]
