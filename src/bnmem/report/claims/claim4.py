"""Claim 4: measured |γ|/σ exceeds 1 in most BN layers (the gamma-sigma lens).

The plan decides on the paper's unit, the layer (every BN layer: convolutional
and fully connected alike), with replicates as the unit of replication; the
fractions of channels above 1 (all, convolutional, fully connected) are shown
as descriptions. A model's fraction of layers above 1 takes a few discrete
values (LeNet: 0, ¼, ½, ¾, 1), so plan 4.0's interval is distribution-free for a
mean in [0, 1] (:func:`bnmem.stats.replicated_bounded_mean`); plan 3.0's
t-interval, whose error rate fails on such values (zero spread reads as
certainty), is kept as the previous verdict.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from bnmem.analysis_plan import CONTRADICTED, GS_MAJORITY, GS_SIGMA, INCONCLUSIVE, REPRODUCED
from bnmem.names import GAMMA_SIGMA
from bnmem.report.claims.core import (
    PLAN_ANALYSIS, Analysis, Claim, Evaluation, estimate, grade, level, new_claim, not_run,
)
from bnmem.report.claims.shared import cond, previous, where
from bnmem.report.results import finite, layer_rows, layer_type, settings_of
from bnmem.report.rundata import RunData
from bnmem.stats import (
    PairedDiff, bounded_mean_intervals, difference_stats, median_interval, replicated_bounded_mean, replicated_difference,
)

IDS = ("4",)
LAYER_BY_LAYER = "layer by layer: the fraction of layers shown above 1 (each layer's log |γ|/σ, t over replicates)"


def model_fractions(data: dict[str, Any], mode: str, types: set[str | None]) -> dict[str, float]:
    """Seed -> fraction of channels with |γ|/σ > 1 over the BN layers whose type is in ``types``
    (layer fractions weighted by their channel counts)."""
    above: dict[str, float] = {}
    total: dict[str, float] = {}
    for row in layer_rows(data, mode):
        if layer_type(row) not in types:
            continue
        n = finite(row.get("n_channels")) or 0
        for s, v in (row.get("per_seed") or {}).items():
            f = finite((v or {}).get("frac_above_1"))
            if f is not None and n > 0:
                above[str(s)] = above.get(str(s), 0.0) + f * n
                total[str(s)] = total.get(str(s), 0.0) + n
    return {s: above[s] / total[s] for s in above if total[s] > 0}


def model_layer_fractions(data: dict[str, Any], mode: str) -> dict[str, float]:
    """Seed -> fraction of its BN layers (every type) whose median channel |γ|/σ is above 1."""
    seeds: dict[str, list[bool]] = {}
    rows = layer_rows(data, mode)
    for r in rows:
        for s, v in (r.get("per_seed") or {}).items():
            m = finite((v or {}).get("median_ratio"))
            if m is not None:
                seeds.setdefault(str(s), []).append(m > 1.0)
    return {s: float(np.mean(v)) for s, v in seeds.items() if len(v) == len(rows)}


def median_estimate(values: Sequence[float], unit: str = "models") -> PairedDiff:
    """Median of per-model values with the distribution-free median interval (plan 2.0's claim-4 statistic)."""
    x = np.array([v for v in values if finite(v) is not None], dtype=float)
    if x.size == 0:
        return difference_stats([], unit=unit)
    ci = median_interval(x)
    med = float(np.median(x))
    if ci is None:
        return PairedDiff(med, None, None, int(x.size), unit, f"no interval: {x.size} {unit}",
                          min=float(x.min()), max=float(x.max()), note=f"only {x.size} {unit}: too few for a 95% "
                                                                       "distribution-free interval")
    return PairedDiff(med, ci[0], ci[1], int(x.size), unit,
                      f"95% distribution-free interval for the median over {x.size} {unit} (order statistics)",
                      min=float(x.min()), max=float(x.max()))


def _descriptions(reps: list, typed: set[str | None]) -> str:
    """Channel fractions (all, conv, FC): descriptions, not verdicts."""
    parts = []
    groups = [("all channels", {"conv", "fc", None})]
    if "conv" in typed:
        groups += [("convolutional channels", {"conv"}), ("fully connected channels", {"fc"})]
    for name, types in groups:
        vals = [v for _, lens in reps for v in model_fractions(lens.data, GS_SIGMA, types).values()]
        if vals:
            parts.append(f"{name} above 1: {np.mean(vals):.0%} (mean over models)")
    return "described, not deciding: " + "; ".join(parts) if parts else ""


def layer_fraction_estimate(groups: Sequence[np.ndarray]) -> tuple[PairedDiff, str]:
    """Plan 4.0's decision on per-replicate arrays of per-model layer fractions: the distribution-free
    interval for a mean in [0, 1] over replicates, at the current level, graded against 'more than half'."""
    est = replicated_bounded_mean(groups, "seeds", level())
    return est, grade(est, null=GS_MAJORITY)


def layer_fraction_reproduced(studies: Sequence[Sequence[np.ndarray]]) -> np.ndarray:
    """:func:`layer_fraction_estimate`'s "reproduced" for many studies at once (claim 4's power simulation):
    bool [studies]. Each study is its per-replicate arrays of finite per-model layer fractions, every study
    with the same number of replicates and every replicate with the same number of models (as simulated);
    the same arithmetic, one sort over all studies (tested against the one-study rule)."""
    arr = np.asarray(studies, dtype=np.float64)  # [studies, replicates, models]
    # Two or more replicates: the interval over replicate means; one: over its models (replicated_bounded_mean).
    x = arr.mean(axis=-1) if arr.shape[1] >= 2 else arr[:, 0, :]
    low, _ = bounded_mean_intervals(x, level())
    return low > GS_MAJORITY  # grade: reproduced when the interval lies above the null (no minimum)


def per_layer(reps: list, mode: str) -> Analysis | None:
    """The layer-by-layer analysis (a robustness row): per BN layer, the t-interval over replicates of the mean
    over seeds of log(median channel |γ|/σ), each at 1 − α/L (Bonferroni over the L layers, so every layer's
    verdict holds at once); 'most' is shown when more than half the layers lie above 1, refuted when at least
    half lie below 1. Its value is the fraction of layers shown above 1 (no interval)."""
    names = [r["name"] for r in layer_rows(reps[0][1].data, mode)]
    if not names:
        return None
    lv = 1.0 - (1.0 - level()) / len(names)
    above, below, parts = 0, 0, []
    for name in names:
        groups = []
        for _, lens in reps:
            row = next((r for r in layer_rows(lens.data, mode) if r["name"] == name), {})
            vals = [finite((v or {}).get("median_ratio")) for v in (row.get("per_seed") or {}).values()]
            groups.append(np.log([v for v in vals if v is not None and v > 0]))
        est = replicated_difference(groups, "seeds", True, level=lv)
        if est.ci_low is None:
            parts.append(f"{name}: no interval")
            continue
        above += est.ci_low > 0
        below += est.ci_high < 0
        parts.append(f"{name} |γ|/σ {math.exp(est.mean):.2f} [{math.exp(est.ci_low):.2f}, {math.exp(est.ci_high):.2f}]")
    n = len(names)
    status = (REPRODUCED if above > n / 2 else CONTRADICTED if below >= n / 2 else INCONCLUSIVE)
    return Analysis(LAYER_BY_LAYER, above / n, None, None, status,
                    f"per layer a t-interval over replicates at {lv:.4g} (Bonferroni over {n} layers)",
                    f"{above} of {n} layers shown above 1, {below} below: " + "; ".join(parts))


def _layer_groups(reps: list, mode: str) -> list[np.ndarray]:
    return [np.array(list(model_layer_fractions(lens.data, mode).values())) for _, lens in reps]


def evaluate(run: RunData) -> list[Claim]:
    """Claim 4 in every setting that ran the gamma-sigma lens."""
    claim = new_claim("4", "gamma_sigma")  # the HTML section id
    for setting in settings_of(run, GAMMA_SIGMA):
        reps = setting.lenses(GAMMA_SIGMA)
        rows0 = layer_rows(reps[0][1].data, GS_SIGMA)
        if not rows0:
            claim.evaluations.append(not_run(where(setting), "no per-layer γ/σ in gamma_sigma.json"))
            continue
        typed = {layer_type(r) for r in rows0}
        groups = _layer_groups(reps, GS_SIGMA)
        est, status = layer_fraction_estimate(groups)
        n_layers = len(rows0)
        per_rep = ", ".join(f"{float(np.mean(g)) * n_layers:.1f} of {n_layers}" for g in groups if g.size)
        primary = Analysis.of(PLAN_ANALYSIS, est, status,
                              f"BN layers with median |γ|/σ > 1 per replicate (mean over seeds): {per_rep}; "
                              + _descriptions(reps, typed))
        alts = [a for a in (per_layer(reps, GS_SIGMA),) if a is not None]
        if layer_rows(reps[0][1].data, "batch"):
            b, b_status = layer_fraction_estimate(_layer_groups(reps, "batch"))
            alts.append(Analysis.of("batch σ", b, b_status))
        v3 = estimate(groups, "seeds", True)  # plan 3.0: t over replicates, invalid on a few discrete values
        v3_status = grade(v3, null=GS_MAJORITY)
        alts.append(Analysis.of("plan 3.0: t-interval over replicates (invalid on a fraction of a few layers)",
                                v3, v3_status, valid=False))
        old = _v2(reps, typed)
        alts.append(Analysis.of("plan 2.0: median convolutional-channel fraction over models",
                                old, grade(old, null=GS_MAJORITY), valid=False))
        c = cond(setting, reps[0][1], sigma=GS_SIGMA, layers="every BN layer", n_layers=n_layers,
                 n_seeds=max((g.size for g in groups), default=0))
        claim.evaluations.append(Evaluation.from_analysis(where(setting), primary, c, True, [], alts))
        previous(claim, where(setting), v3.mean if math.isfinite(v3.mean) else None, v3_status)
    return [claim]


def _v2(reps: list, typed: set[str | None]) -> PairedDiff:
    """Plan 2.0: the median over all models of the convolutional channel fraction (all types if untyped)."""
    types = {"conv"} if "conv" in typed else {"conv", "fc", None}
    return median_estimate([v for _, lens in reps for v in model_fractions(lens.data, GS_SIGMA, types).values()])

