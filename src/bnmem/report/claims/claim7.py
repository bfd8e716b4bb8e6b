"""Claim 7: the feedback loop — outliers drive γ up in trained networks, raising (γ/σ)².

Primary (plan 5.0): per model, over the measured epochs before the outliers are
fitted and the BN layers that are not scale-invariant, the linear contrast
r_O − r_C of the outliers' push on |γ| per unit of their all-parameter gradient
norm (r_O = P_O/G_O) and the clean examples' (r_C = (P − P_O)/(G − G_O))
(:func:`push_contrast`; ``gamma_sigma.json["push"]``, :mod:`bnmem.measure.gamma_push`);
per replicate the mean over its models. Plan 4.0's ratio (P_O/G_O − P/G)/|P/G|
(:func:`push_excess`) divides by what is left of the total push after the
outliers' and the clean examples' pushes nearly cancel, so it is not monotone in
the outliers' push: it is the previous verdict and a description, never
counted. Each example's push is the gradient of its own loss. Layers another BN
follows are scale-invariant in (γ, β) (their
radial cosine is ≈ 0): flagged, shown per layer, never deciding. Shown too:
the same after the outliers are fitted (its own verdict), each layer alone,
and |γ|/σ at the end in a corrupted setting minus the clean one (co-verdict).
A run whose lens recorded no own-loss pushes (before plan 4.0) reads "not run".
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bnmem.analysis_plan import (
    FIT_LEVEL, GRADED, GS_SIGMA, IDENTIFIABLE_LAYERS, NOT_RUN, PUSH_NORM_SAMPLE, REPLICATE_INTERVAL, REPLICATE_UNIT,
    SAME_AS_PRIMARY, TEST_ABOVE, UNCHANGED, Axis, ClaimPlan, Endpoint,
)
from bnmem.names import GAMMA_SIGMA
from bnmem.report.claims import identifiable
from bnmem.report.claims.core import (
    PLAN_ANALYSIS, Analysis, Claim, Evaluation, estimate, grade, new_claim, not_run, stats_of,
)
from bnmem.report.claims.shared import cond, previous, where
from bnmem.report.results import Setting, finite, fmt, layer_rows, replicate_of, settings_of
from bnmem.report.rundata import LensOutput, RunData
from bnmem.report.tables import Table

# A BN layer whose radial cosine |Σ(γ·∂L/∂γ + β·∂L/∂β)| / (‖(γ, β)‖·‖∇‖) stays below this at every measured
# epoch of every model is scale-invariant in (γ, β) (another BN follows; BN's eps leaves ~1e-5).
PUSH_INVARIANT_COS = 1e-3

CLAIMS = (ClaimPlan(
    "7", "Feedback loop: outliers drive γ up in trained networks, raising (γ/σ)²",
    "outlier samples disproportionately drive the growth of γ, which raises (γ/σ)² and speeds memorization "
    "further (no magnitude stated)",
    "evidence", GAMMA_SIGMA,
    "primary: each example's push on |γ_c| is −sign(γ_c)·∂ℓ_i/∂γ_c, the gradient of its OWN loss through the "
    "batch statistics (training mode, the training batch size: the gradient the optimizer follows), summed "
    "over the channels of a BN layer and over the outliers (P_O) and all examples (P); the all-parameter "
    "gradient norm ‖∇θ ℓ_i‖ of the same pass summed over the outliers (G_O) and all examples (G; clean "
    "examples from a fixed seeded sample of "
    f"{PUSH_NORM_SAMPLE}, scaled up: G − G_O estimates the clean examples' sum without bias, while P and P_O "
    "are exact sums). Per model the linear contrast r_O − r_C: r_O = P_O/G_O, the outliers' push on |γ| per "
    "unit of their gradient norm, and r_C = (P − P_O)/(G − G_O), the clean examples'. Plan 4.0's ratio "
    "(P_O/G_O − P/G)/|P/G| is shown beside it as a description only. Layers "
    "whose radial cosine |Σ(γ·∂L/∂γ + β·∂L/∂β)| / (‖(γ, β)‖·‖∇‖) stays below "
    f"{PUSH_INVARIANT_COS:g} (scale-invariant in (γ, β): another BN follows before the loss) are described "
    "per layer and never decide; the other layers are pooled (sums over them). Co-verdicts: the same after "
    "the fit; |γ|/σ at the end (per model the mean over BN layers of the layer's median channel |γ|/σ), "
    "corrupted setting − clean setting, paired by replicate",
    "primary: the measured epochs (every epoch by default) before the outliers are fitted: their training "
    f"accuracy in the same pass (batch statistics) below {FIT_LEVEL:.0%}, sums over those epochs standing in "
    "for sums over training steps (a model with no such epoch is left out); co-verdicts: the measured epochs "
    "at or after the fit, and the final epoch",
    "primary: per model the contrast r_O − r_C above; mean over seeds per replicate; mean over replicates; "
    "co-verdict |γ|/σ: per replicate the mean over seeds",
    REPLICATE_UNIT + "; the co-verdict pairs replicate k of a corrupted setting with replicate k of the clean "
                      "setting of the same dataset, architecture and recipe",
    REPLICATE_INTERVAL,
    "null 0 (the outliers push |γ| as much per unit of gradient norm as the clean examples do), direction +",
    GRADED + ". Flipped labels and OOD inputs are separate settings: the row shows the least supportive, and "
              "the headline names each setting's verdict when they differ. The toy model's version of the loop "
              "stays in the theory lens (shown, not deciding)",
    "the paper's words: outliers \"disproportionately drive the growth of γ\". Outliers have larger gradients "
    "(claim 2), so a share of the push above their share of the data restates claim 2; above their share of "
    "the gradient norm it is about γ. The feedback loop acts while the outliers are being fitted. In a "
    "scale-invariant layer the gradient is orthogonal to (γ, β): its net push is ≈ 0 and |γ| grows only at "
    "second order: a step of size η along g ⟂ (γ, β) grows ‖(γ, β)‖² by η²‖g‖². That term is described, "
    "never deciding, and the outliers' share of it is not measured (the pass sums the gradients over "
    "batches before any square, so the outliers' own ‖g_O‖² per step is not recorded); the per-layer table "
    "names the scale-invariant layers beside the deciding ones. The contrast is linear in the outliers' push "
    "(slope 1/G_O at a fixed clean push), so a larger push never reads as a smaller effect; plan 4.0's ratio "
    "divided by |P/G|, what is left after the outliers' and the clean examples' pushes nearly cancel (in the "
    "demo the outliers' push was −0.96 to −1.22 times P), so scaling one replicate's outlier push by 1.2 / "
    "1.5 / 1.8 / 1.9 moved it from −4.6 to −6.7 / −14.9 / −275 / −69 (issue 36). Comparing with the clean "
    "examples rather than with everyone keeps the outliers out of their own reference. Row i of "
    "∂(Σ_j ℓ_j)/∂y (plan 3.0) is ∂ℓ_i/∂y only where no BN follows the layer",
    coverdicts=(f"after the fit (outliers' training accuracy ≥ {FIT_LEVEL:.0%})",
                "|γ|/σ corrupted − clean, paired by replicate"),
    alternatives=("all measured epochs", "each BN layer alone, before the fit (scale-invariant layers shown, "
                  "not counted)", "plan 4.0's ratio (P_O/G_O − P/G)/|P/G| (shown, not counted: a description, "
                  "not monotone in the outliers' push)",
                  "plan 3.0's statistic (shown, not counted: invalid where a BN follows)"),
    previous_rule=UNCHANGED,
    planning=(Endpoint("", TEST_ABOVE, 0.05, 0.0, 0.022, "smallest effect of interest",
               "plan 5.0's contrast r_O − r_C; the paper states no magnitude. 0.05 push on |γ| per unit of "
               "all-parameter gradient norm more for the outliers than for the clean examples is the smallest "
               "'disproportionate' drive worth reporting (the per-example push per unit norm of one layer lies "
               "within about ±1, and a twentieth of that is a difference a reader would notice). The SD, 0.022, "
               "is the larger spread of replicate means seen in the demo under plan 4.0's measurement (issue "
               "36's re-derivation at n = 3: flip −0.158 [−0.213, −0.103], SD 0.022; OOD −0.063 [−0.075, "
               "−0.051], SD 0.005): seen data, which is why a pilot's own spreads replace it"),),
    estimand=IDENTIFIABLE_LAYERS + ", before the fit",
    estimand_why=("the outliers' push on |γ| per unit gradient norm minus the clean examples', summed over the "
                  "epochs before the outliers are fitted, on BN layers whose γ scale is identifiable (the rule: the "
                  "plan's section on estimands): in a layer whose γ scale is not identifiable a push on |γ| does "
                  "not change the function. The radial cosine's set (plan 5.0's) is a cross-check: the row names any "
                  "layer where the two disagree, and where they do, plan 5.0's verdict on its own set is the "
                  "previous verdict. A run recorded before the gamma-sigma lens recorded the flag is decided on the "
                  "radial cosine's set, and the row says so"),
    panel=(("layers not flagged scale-invariant (plan 5.0)", SAME_AS_PRIMARY), ("after the fit", "after the fit"),
           ("all measured epochs", "all measured epochs"),
           ("|γ|/σ corrupted − clean", "|γ|/σ corrupted")),
    axis=Axis("outliers' push on |γ| per unit gradient norm over everyone's − 1 (before the fit)", 0.0,
              "in proportion to their gradients"),
),)

V4 = "plan 4.0's ratio (P_O/G_O − P/G)/|P/G| (a description: not monotone in the outliers' push)"
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


def _sums(epochs: list[dict[str, Any]], layers: list[str]) -> tuple[float, float, float, float]:
    """(P_O, P, G_O, G) summed over the epochs and the layers."""
    p_o = sum(e["layers"][n]["outlier"] for e in epochs for n in layers if n in e["layers"])
    p = sum(e["layers"][n]["all"] for e in epochs for n in layers if n in e["layers"])
    g_o = sum(e["grad_norm_outlier"] for e in epochs)
    g = sum(e["grad_norm_all"] for e in epochs)
    return p_o, p, g_o, g


def push_contrast(epochs: list[dict[str, Any]], layers: list[str]) -> dict[str, float] | None:
    """One model's plan-5.0 claim-7 statistic over some measured epochs and BN layers (ratios of sums).

    P_O and P are the outliers' and every example's summed push on |γ| (exact: the pass sums every example's
    own-loss gradient); G_O is the outliers' summed all-parameter gradient norm (every outlier measured) and G
    everyone's (G_O plus the clean sample's sum scaled up to all clean examples: an unbiased estimate). So
    P − P_O is the clean examples' push and G − G_O their estimated gradient-norm sum, and

        contrast = r_O − r_C,  r_O = P_O / G_O,  r_C = (P − P_O) / (G − G_O),

    the outliers' push per unit of gradient norm minus the clean examples'. It is linear in P_O at fixed clean
    push (slope 1/G_O > 0), so it never decreases when the outliers push more. None without epochs, or with no
    outlier or no clean gradient norm.
    """
    p_o, p, g_o, g = _sums(epochs, layers)
    g_c = g - g_o
    if not epochs or g_o <= 0 or g_c <= 0:
        return None
    r_o, r_c = p_o / g_o, (p - p_o) / g_c
    return {"contrast": r_o - r_c, "r_outlier": r_o, "r_clean": r_c, "push_share": p_o / p if p else float("nan"),
            "grad_share": g_o / g, "push": p, "epochs": len(epochs)}


def push_excess(epochs: list[dict[str, Any]], layers: list[str]) -> dict[str, float] | None:
    """One model's claim-7 statistic over some measured epochs and BN layers (ratios of sums over both).

    With P_O, P the outliers' and everyone's summed push on |γ| and G_O, G their summed all-parameter gradient
    norms: excess = (P_O/G_O − P/G) / |P/G|, the outliers' push per unit of gradient norm over everyone's,
    minus 1; it equals (P_O/P)/(G_O/G) − 1 (their share of the push over their share of the gradient norm)
    whenever the total push is up, and keeps its sign (outliers push |γ| up more than their gradient predicts)
    when it is not. None without pushes, gradient norms or a nonzero total push. Plan 4.0's statistic (plan
    5.0: the previous verdict and a description): its denominator |P/G| is what is left after the outliers'
    and the clean examples' pushes nearly cancel, so it is not monotone in P_O.
    """
    p_o, p, g_o, g = _sums(epochs, layers)
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


CONTRAST, RATIO = "contrast", "excess"  # the statistics push_groups can compute


def push_groups(models: list[tuple[int, dict[str, dict[str, Any]]]], layers: list[str], fitted: bool | None,
                stat: str = CONTRAST) -> list[np.ndarray]:
    """Per replicate the per-model statistic (plan 5.0's contrast, or plan 4.0's ratio ``"excess"``) over
    ``layers`` in the window (models without one left out)."""
    fn = push_contrast if stat == CONTRAST else push_excess
    out = []
    for _, seeds in models:
        vals = [fn(window(rec["epochs"], fitted), layers) for rec in seeds.values()]
        arr = np.array([v[stat] for v in vals if v is not None and np.isfinite(v[stat])])
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
    plan 4.0's ratio and plan 3.0's statistic (shown, not counted)."""
    out = [_graded("all measured epochs", push_groups(models, layers, None))]
    out.append(_graded(V4, push_groups(models, layers, False, RATIO), "before the fit, the deciding layers",
                       valid=False))
    for n in cos:
        inv = n in flagged
        note = f"max |radial cos| {cos[n]:.1e}" + (": scale-invariant in (γ, β), described, not counted" if inv
                                                    else "")
        out.append(_graded(f"layer {n} alone, before the fit", push_groups(models, [n], False), note, not inv))
    out.append(_graded(V3, _v3(models), "the median over channels of the outliers' share of the push minus "
                                        "their share of the data", valid=False))
    return out


def _evaluation(s: Setting, lens: LensOutput, models: list, partner: Setting | None,
                v5: list[tuple[str, float | None, str, bool]] | None = None) -> Evaluation:
    cos = radial_cos(models)
    # Plan 6.0: the deciding layers are those whose γ scale the model's graph says is identifiable (recorded by
    # the gamma-sigma lens); runs from before the flag fall back on plan 5.0's radial-cosine flag.
    split = identifiable.claim7_layers(models, cos, scale_invariant(cos))
    layers, flagged = list(split.deciding), list(split.described)
    old_flagged = scale_invariant(cos)
    old_layers = [n for n in cos if n not in old_flagged]
    if not layers:
        return not_run(where(s), "every BN layer is scale-invariant in (γ, β) (another BN follows each): "
                                 "no layer can decide", cond(s, lens))
    cov = [_graded(AFTER_FIT, push_groups(models, layers, True))]
    cov += [_coverdict(s, partner)] if partner is not None else []
    disagree = (f"; the radial cosine disagrees on {', '.join(split.disagree)}" if split.disagree else "")
    primary = _graded(PLAN_ANALYSIS, push_groups(models, layers, False),
                      f"deciding layers {', '.join(layers)} (by the {split.source}); scale-invariant "
                      f"(described, not deciding): {', '.join(flagged) or 'none'}{disagree}; before the fit (outliers' "
                      f"training accuracy < "
                      f"{FIT_LEVEL:.0%}); r_O − r_C: the outliers' push on |γ| per unit gradient norm minus the "
                      "clean examples'")
    if v5 is not None:  # plan 5.0 decided on the radial cosine's layers: its verdict, (where, value, status, differs)
        if not old_layers:
            value, status = None, NOT_RUN
        else:
            was = primary if old_layers == layers else _graded(PLAN_ANALYSIS, push_groups(models, old_layers, False))
            value, status = was.value, was.status
        v5.append((where(s, "outliers' − clean examples' γ push per unit gradient norm, before the fit"), value,
                   status, old_layers != layers))
    return Evaluation.from_analysis(where(s, "outliers' − clean examples' γ push per unit gradient norm, before "
                                             "the fit"), primary,
                                    cond(s, lens), True, cov, _analyses(models, layers, flagged, cos),
                                    "")


def evaluate(run: RunData) -> list[Claim]:
    """Claim 7 in every corrupted setting that ran the gamma-sigma lens."""
    claim = new_claim("7", "gamma_sigma", "{:+.3f}")
    v5: list[tuple[str, float | None, str, bool]] = []
    settings = settings_of(run, GAMMA_SIGMA)
    clean = {_base(s): s for s in settings if s.first.corrupted is False}
    for s in settings:
        if s.first.corrupted is not True:
            continue
        lens: LensOutput = s.lenses(GAMMA_SIGMA)[0][1]
        partner = clean.get(_base(s))
        models = _models(s)
        if models:
            ev = _evaluation(s, lens, models, partner, v5)
            claim.evaluations.append(ev)
            continue
        claim.evaluations.append(not_run(where(s), NO_PUSH, cond(s, lens)))
        if partner is not None:
            shown = Evaluation.from_analysis(where(s, f"co-verdict vs {partner.label}"), _coverdict(s, partner),
                                             cond(s, lens), deciding=False)
            shown.note = "shown, not deciding (the primary is not measured): " + shown.note
            claim.evaluations.append(shown)
    if not claim.evaluations:
        claim.evaluations.append(not_run("—", "no corrupted setting ran the gamma-sigma lens"))
    if any(differs for *_, differs in v5):  # plan 5.0's layer set gave another row somewhere: its verdicts shown
        for where_, value, status, _ in v5:
            previous(claim, where_, value, status)
    return [claim]


def push_table(s: Setting) -> Table | None:
    """Claim 7 per BN layer in one corrupted setting: scale-invariance, the contrast r_O − r_C before and after
    the outliers' fit (mean [interval] over replicates, at 95%), r_O and r_C before the fit, and plan 4.0's
    ratio (a description)."""
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
        win = [window(rec["epochs"], False) for _, seeds in models for rec in seeds.values()]
        con = [v for w in win if (v := push_contrast(w, [n])) is not None]
        rat = [v["excess"] for w in win if (v := push_excess(w, [n])) is not None]

        def mean(vals: list[float]) -> str:
            return fmt(float(np.mean(vals)) if vals else None, "+.3f")

        rows.append([n, "yes" if n in flagged else "no", f"{cos[n]:.1e}", *cells,
                     mean([v["r_outlier"] for v in con]), mean([v["r_clean"] for v in con]), mean(rat),
                     fmt(np.mean([v["grad_share"] for v in con]) if con else None, ".3f")])
    return Table(f"Claim 7 per BN layer — {s.label}",
                 ["layer", "scale-invariant", "max |radial cos|", "r_O − r_C before the fit",
                  "r_O − r_C after the fit", "r_O (before)", "r_C (before)", "plan 4.0 ratio (before)",
                  "outliers' gradient-norm share (before)"], rows,
                 "r_O, r_C = the outliers' and the clean examples' push on |γ| per unit of their all-parameter "
                 "gradient norm (0: no push); per model over the window's measured epochs, mean over seeds per "
                 "replicate, t-interval over replicates (95%, not family-adjusted). Plan 4.0's ratio "
                 "(P_O/G_O − P/G)/|P/G| is a description (not monotone in the outliers' push). Scale-invariant "
                 f"layers (radial cosine always below {PUSH_INVARIANT_COS:g}) are described here and never decide: "
                 "their |γ| grows only at second order (η²‖g‖² per step, g ⟂ (γ, β)), from every example's "
                 "gradient; the outliers' share of that term is not measured (the pass sums the gradients over "
                 "batches before any square).")


def push_tables(run: RunData) -> list[Table]:
    """:func:`push_table` of every corrupted setting that recorded own-loss pushes."""
    return [t for s in settings_of(run, GAMMA_SIGMA) if s.first.corrupted is True
            if (t := push_table(s)) is not None]
