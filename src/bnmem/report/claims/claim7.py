"""Claim 7: the feedback loop — outliers drive γ up in trained networks, raising (γ/σ)².

Primary (plan 4.0): per model, over the measured epochs before the outliers are
fitted and the BN layers that are not scale-invariant, the outliers' push on
|γ| per unit of their all-parameter gradient norm against everyone's
(:func:`push_excess`; ``gamma_sigma.json["push"]``, :mod:`bnmem.measure.gamma_push`);
per replicate the mean over its models. Each example's push is the gradient of
its own loss. Layers another BN follows are scale-invariant in (γ, β) (their
radial cosine is ≈ 0): flagged, shown per layer, never deciding. Shown too:
the same after the outliers are fitted (its own verdict), each layer alone,
and |γ|/σ at the end in a corrupted setting minus the clean one (co-verdict).
A run whose lens recorded no own-loss pushes (before plan 4.0) reads "not run".
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bnmem.analysis_plan import FIT_LEVEL, GS_SIGMA, PUSH_INVARIANT_COS
from bnmem.names import GAMMA_SIGMA
from bnmem.report.claims.core import (
    PLAN_ANALYSIS, Analysis, Claim, Evaluation, estimate, grade, new_claim, not_run, stats_of,
)
from bnmem.report.claims.shared import cond, previous, where
from bnmem.report.results import Setting, finite, fmt, layer_rows, replicate_of, settings_of
from bnmem.report.rundata import LensOutput, RunData
from bnmem.report.tables import Table

IDS = ("7",)
COVERDICT = "|γ|/σ corrupted − clean, paired by replicate"
AFTER_FIT = f"after the fit (outliers' training accuracy ≥ {FIT_LEVEL:.0%})"
PUSH_VERSION = 2  # the lens's own-loss record (bnmem.measure.gamma_push.PUSH_VERSION)
V3 = "plan 3.0's statistic (row attribution; invalid where a BN follows)"
NO_PUSH = ("gamma_sigma.json has no per-example γ pushes of each example's own loss (a gamma-sigma lens from "
           "before plan 4.0, or run with gamma_push off): rerun the lens")


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
    lens = setting.first.lenses.get(GAMMA_SIGMA)
    recipe = (lens.conditions.get("recipe") if lens else None) or c.get("recipe")
    return repr((c.get("dataset"), c.get("arch"), recipe))


def _per_replicate(setting: Setting) -> dict[int, float]:
    out = {}
    for cell, lens in setting.lenses(GAMMA_SIGMA):
        v = list(model_gamma_sigma(lens.data).values())
        if v:
            out[replicate_of(cell)] = float(np.mean(v))
    return out


def _coverdict(corrupted: Setting, clean: Setting) -> Analysis:
    a, b = _per_replicate(corrupted), _per_replicate(clean)
    common = sorted(set(a) & set(b))
    est = stats_of([a[r] - b[r] for r in common], "replicates") if common else None
    shown = ", ".join(f"r{r}: {a[r]:.2f} vs {b[r]:.2f}" for r in common)
    return Analysis.of(COVERDICT, est, grade(est), f"mean layer median |γ|/σ, corrupted vs clean: {shown}")


# --- the statistic (pure arithmetic on the lens's per-epoch records) ---------------------------------


def window(epochs: list[dict[str, Any]], fitted: bool | None) -> list[dict[str, Any]]:
    """The measured epochs before the outliers' fit (``fitted`` False: their training accuracy in the pass
    below FIT_LEVEL), after it (True), or all (None)."""
    if fitted is None:
        return list(epochs)
    return [e for e in epochs if e.get("outlier_acc") is not None and (e["outlier_acc"] >= FIT_LEVEL) == fitted]


def push_excess(epochs: list[dict[str, Any]], layers: list[str]) -> dict[str, float] | None:
    """One model's claim-7 statistic over some measured epochs and BN layers (ratios of sums over both).

    With P_O, P the outliers' and everyone's summed push on |γ| and G_O, G their summed all-parameter gradient
    norms: excess = (P_O/G_O − P/G) / |P/G|, the outliers' push per unit of gradient norm over everyone's,
    minus 1; it equals (P_O/P)/(G_O/G) − 1 (their share of the push over their share of the gradient norm)
    whenever the total push is up, and keeps its sign (outliers push |γ| up more than their gradient predicts)
    when it is not. None without pushes, gradient norms or a nonzero total push.
    """
    p_o = sum(e["layers"][n]["outlier"] for e in epochs for n in layers if n in e["layers"])
    p = sum(e["layers"][n]["all"] for e in epochs for n in layers if n in e["layers"])
    g_o = sum(e["grad_norm_outlier"] for e in epochs)
    g = sum(e["grad_norm_all"] for e in epochs)
    if not epochs or g_o <= 0 or g <= 0 or p == 0:
        return None
    rate = p / g
    return {"excess": (p_o / g_o - rate) / abs(rate), "push_share": p_o / p, "grad_share": g_o / g,
            "push": p, "epochs": len(epochs)}


def _models(setting: Setting) -> list[tuple[int, dict[str, dict[str, Any]]]]:
    """Per replicate (in order) its models' push records (seed -> record) from lenses of plan 4.0."""
    out = []
    for cell, lens in setting.lenses(GAMMA_SIGMA):
        push = lens.data.get("push") or {}
        if push.get("version") == PUSH_VERSION and push.get("per_seed"):
            out.append((replicate_of(cell), push["per_seed"]))
    return out


def radial_cos(models: list[tuple[int, dict[str, dict[str, Any]]]]) -> dict[str, float]:
    """Per BN layer the largest |radial cosine| over every model and measured epoch."""
    out: dict[str, float] = {}
    for _, seeds in models:
        for rec in seeds.values():
            for e in rec["epochs"]:
                for n, r in e["layers"].items():
                    c = finite(r.get("radial_cos"))
                    out[n] = max(out.get(n, 0.0), abs(c) if c is not None else np.inf)
    return out


def scale_invariant(cos: dict[str, float]) -> list[str]:
    """The layers whose (γ, β) the loss is scale-invariant in: radial cosine below the plan's bound always."""
    return [n for n, c in cos.items() if c < PUSH_INVARIANT_COS]


def push_groups(models: list[tuple[int, dict[str, dict[str, Any]]]], layers: list[str], fitted: bool | None
                ) -> list[np.ndarray]:
    """Per replicate the per-model excess over ``layers`` in the window (models without one left out)."""
    out = []
    for _, seeds in models:
        vals = [push_excess(window(rec["epochs"], fitted), layers) for rec in seeds.values()]
        arr = np.array([v["excess"] for v in vals if v is not None and np.isfinite(v["excess"])])
        if arr.size:
            out.append(arr)
    return out


def _graded(name: str, groups: list[np.ndarray], note: str = "", valid: bool = True) -> Analysis:
    est = estimate(groups, "seeds", True) if groups else None
    shown = ", ".join(f"{g.mean():+.3f}" for g in groups)
    return Analysis.of(name, est, grade(est), "; ".join(x for x in (note, f"per replicate: {shown}" if shown
                                                                      else "no model measured") if x), valid)


def _v3(models: list[tuple[int, dict[str, dict[str, Any]]]]) -> list[np.ndarray]:
    out = []
    for _, seeds in models:
        arr = np.array([v for rec in seeds.values() if (v := finite(rec.get("v3_excess_share"))) is not None])
        if arr.size:
            out.append(arr)
    return out


def _analyses(models: list, layers: list[str], flagged: list[str], cos: dict[str, float]) -> list[Analysis]:
    """The robustness panel: all measured epochs; each layer alone (scale-invariant ones shown, not counted);
    plan 3.0's statistic (shown, not counted)."""
    out = [_graded("all measured epochs", push_groups(models, layers, None))]
    for n in cos:
        inv = n in flagged
        note = f"max |radial cos| {cos[n]:.1e}" + (": scale-invariant in (γ, β), described, not counted" if inv
                                                    else "")
        out.append(_graded(f"layer {n} alone, before the fit", push_groups(models, [n], False), note, not inv))
    out.append(_graded(V3, _v3(models), "the median over channels of the outliers' share of the push minus "
                                        "their share of the data", valid=False))
    return out


def _evaluation(s: Setting, lens: LensOutput, models: list, partner: Setting | None) -> Evaluation:
    cos = radial_cos(models)
    flagged = scale_invariant(cos)
    layers = [n for n in cos if n not in flagged]
    if not layers:
        return not_run(where(s), "every BN layer is scale-invariant in (γ, β) (another BN follows each): "
                                 "no layer can decide", cond(s, lens))
    cov = [_graded(AFTER_FIT, push_groups(models, layers, True))]
    cov += [_coverdict(s, partner)] if partner is not None else []
    primary = _graded(PLAN_ANALYSIS, push_groups(models, layers, False),
                      f"deciding layers {', '.join(layers)}; scale-invariant (described, not deciding): "
                      f"{', '.join(flagged) or 'none'}; before the fit (outliers' training accuracy < "
                      f"{FIT_LEVEL:.0%})")
    return Evaluation.from_analysis(where(s, "outliers' γ push per unit gradient, before the fit"), primary,
                                    cond(s, lens), True, cov, _analyses(models, layers, flagged, cos),
                                    "")


def evaluate(run: RunData) -> list[Claim]:
    """Claim 7 in every corrupted setting that ran the gamma-sigma lens."""
    claim = new_claim("7", "gamma_sigma", "{:+.3f}")
    settings = settings_of(run, GAMMA_SIGMA)
    clean = {_base(s): s for s in settings if s.first.corrupted is False}
    for s in settings:
        if s.first.corrupted is not True:
            continue
        lens: LensOutput = s.lenses(GAMMA_SIGMA)[0][1]
        partner = clean.get(_base(s))
        models = _models(s)
        if models:
            ev = _evaluation(s, lens, models, partner)
            claim.evaluations.append(ev)
            old = next((a for a in ev.analyses if a.name == V3), None)
            if old is not None:
                previous(claim, ev.where, old.value, old.status)
            continue
        claim.evaluations.append(not_run(where(s), NO_PUSH, cond(s, lens)))
        if partner is not None:
            shown = Evaluation.from_analysis(where(s, f"co-verdict vs {partner.label}"), _coverdict(s, partner),
                                             cond(s, lens), deciding=False)
            shown.note = "shown, not deciding (the primary is not measured): " + shown.note
            claim.evaluations.append(shown)
    if not claim.evaluations:
        claim.evaluations.append(not_run("—", "no corrupted setting ran the gamma-sigma lens"))
    return [claim]


def push_table(s: Setting) -> Table | None:
    """Claim 7 per BN layer in one corrupted setting: scale-invariance, and the excess before and after the
    outliers' fit (mean [interval] over replicates, at 95%)."""
    models = _models(s)
    if not models:
        return None
    cos = radial_cos(models)
    flagged = scale_invariant(cos)
    rows = []
    for n in cos:
        cells = []
        for fitted in (False, True):
            a = _graded("", push_groups(models, [n], fitted))
            cells.append("—" if a.value is None else f"{a.value:+.3f}" + (
                "" if a.ci_low is None else f" [{a.ci_low:+.3f}, {a.ci_high:+.3f}]") + f" ({a.status})")
        shares = [push_excess(window(rec["epochs"], False), [n]) for _, seeds in models for rec in seeds.values()]
        shares = [v for v in shares if v is not None]
        rows.append([n, "yes" if n in flagged else "no", f"{cos[n]:.1e}", *cells,
                     fmt(np.mean([v["push_share"] for v in shares]) if shares else None, ".3f"),
                     fmt(np.mean([v["grad_share"] for v in shares]) if shares else None, ".3f")])
    return Table(f"Claim 7 per BN layer — {s.label}",
                 ["layer", "scale-invariant", "max |radial cos|", "excess before the fit", "excess after the fit",
                  "outliers' push share (before)", "outliers' gradient-norm share (before)"], rows,
                 "excess = the outliers' push on |γ| per unit of their gradient norm over everyone's, minus 1 (0: "
                 "in proportion to their gradients); per model over the window's measured epochs, mean over seeds "
                 "per replicate, t-interval over replicates (95%, not family-adjusted). Scale-invariant layers "
                 f"(radial cosine always below {PUSH_INVARIANT_COS:g}) are described here and never decide.")


def push_tables(run: RunData) -> list[Table]:
    """:func:`push_table` of every corrupted setting that recorded own-loss pushes."""
    return [t for s in settings_of(run, GAMMA_SIGMA) if s.first.corrupted is True
            if (t := push_table(s)) is not None]
