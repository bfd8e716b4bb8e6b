"""Claim 4: measured |γ|/σ exceeds 1 in most BN layers (the gamma-sigma lens).

Plan 6.0 decides on the BN layers whose γ scale is identifiable (the gamma-sigma lens's per-layer flag, from the
model's graph: :mod:`bnmem.models.identifiable`; :mod:`bnmem.report.claims.identifiable`), with plan 5.0's test;
every BN layer (plan 5.0's set) is the previous verdict and a panel row, and the effective step of the next
layer a described row. Plan 5.0 decides per BN layer (every BN layer: convolutional, fully connected and shortcut alike): per layer a
one-sided t-test over replicates of log(median channel |γ|/σ) (seeds averaged per replicate), combined by a
partial-conjunction test for "more than half of the layers above 1" and, for the refutation, "at least half
below 1" (:mod:`bnmem.report.claims.layer_test`). The row shows the pivotal layer's |γ|/σ with the test's
bounds; the per-layer table sits in the claim's section (:func:`layer_tables`). Plan 4.0's rule (Anderson's
distribution-free bound on each model's fraction of layers above 1) is the previous verdict and a robustness
row; plan 3.0's t-interval on that fraction and plan 2.0's channel median are shown, not counted. The
fractions of channels above 1 (all, convolutional, fully connected) are descriptions.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Sequence

import numpy as np

from bnmem.analysis_plan import (
    CONTRADICTED, EVERY_LAYER, EVERY_SETTING, GS_SIGMA, IDENTIFIABLE_LAYERS, INCONCLUSIVE, LEVEL, REPLICATE_UNIT,
    REPRODUCED, TEST_LAYERS, UNCHANGED, Axis, ClaimPlan, Design, Display, Endpoint,
)
from bnmem.names import GAMMA_SIGMA
from bnmem.report.claims import identifiable
from bnmem.report.claims.core import (
    PLAN_ANALYSIS, Analysis, Claim, Evaluation, estimate, grade, level, new_claim, not_run,
)
from bnmem.report.claims.layer_test import LayerDecision, decide_layers, layer_test, u_above, u_below
from bnmem.report.claims.shared import cond, previous, where
from bnmem.report.results import finite, layer_rows, layer_type, settings_of
from bnmem.report.rundata import RunData
from bnmem.report.tables import Table
from bnmem.stats import (
    PairedDiff, bounded_mean_intervals, difference_stats, median_interval, replicated_bounded_mean, replicated_difference,
)

# "Most" = more than half of the BN layers.
GS_MAJORITY = 0.5
# Plan 4.0: the fewest replicates at which its distribution-free 95% interval can lie above one half (a test
# recomputes it from bnmem.stats.bounded_mean_intervals).
GS_MIN_REPLICATES = 7
# Plan 5.0: the planning effect, every layer's mean log(median |γ|/σ) (|γ|/σ = 1.2).
GS_PLANNING_LOG_RATIO = 0.18

CLAIMS = (ClaimPlan(
    "4", "Measured |γ|/σ exceeds 1 in most BN layers",
    "measured γ/σ > 1 in most layers (no number beyond 'most')",
    "evidence", GAMMA_SIGMA,
    "per trained BN model and BN layer whose γ scale is identifiable (plan 6.0: the gamma-sigma lens records "
    "the graph rule's flag per layer; LeNet has 1 such layer of 4, the package's ResNet-20 12 of 21; every BN "
    "layer, convolutional, fully connected and shortcut alike, was plan 5.0's set and is a panel row), log of "
    "the layer's median channel |γ|/σ, σ = "
    "sqrt(running_var + eps). The fraction of channels above 1, and the convolutional / fully connected "
    "split, are shown as descriptions, not verdicts",
    "the final epoch",
    "per layer l and replicate the mean over its models (seeds) of the log ratio; per layer one-sided Student "
    "t-tests over the replicates (n − 1 df): p⁺_l for a mean above 0 (|γ|/σ above 1), p⁻_l for a mean below "
    "0. The L layers are combined by the partial-conjunction test of Benjamini and Heller (2008, Bonferroni "
    "combination): 'more than half of the L layers above 1' is u = ⌊L/2⌋ + 1 with p = min(1, (L − u + 1)·"
    "p⁺_(u)), p⁺_(u) the u-th smallest; its refutation 'at least half of the layers below 1' is u' = ⌈L/2⌉ "
    "with p' = min(1, (L − u' + 1)·p⁻_(u')). The number shown is the pivotal layer's |γ|/σ (geometric mean "
    "over replicates): the layer ranked u-th by its evidence, whose one-sided lower bound at α/(L − u + 1) "
    "lies above 1 exactly when p < α; since L − u' + 1 = u it is also the refutation's u'-th layer from the "
    "other end, and the upper bound shown is its bound at α/(L − u' + 1), below 1 exactly when p' < α. The "
    "note gives p, p' and how many layers the data show above 1 (the largest v whose partial-conjunction "
    "p-values for 1..v all lie below α: a lower confidence bound on the number of layers above 1). The "
    "per-layer table (mean |γ|/σ, 95% t-interval, p⁺, p⁻) sits in the claim's section. Each architecture "
    "(and each outlier setting) is its own setting",
    REPLICATE_UNIT,
    "one-sided t-tests per layer over replicate means (n − 1 df), combined as above: α = 0.025 for "
    "'reproduced' (every deciding setting: intersection–union), α = 0.025/k for 'contradicted' (Bonferroni "
    "over the k deciding settings): one-sided at the level of the other claims' two-sided 95% intervals. With one replicate: over its models (seeds), conditional on its "
    "corruption draw, and said so. A layer with fewer than 2 units or no spread has no test (its p counts "
    "as 1)",
    "null: at most half of the layers above 1 (for 'reproduced'); fewer than half below 1 (for "
    "'contradicted'); direction +",
    "reproduced if p < 0.025 in every deciding setting; contradicted if p' < 0.025/k in some deciding "
    "setting; inconclusive otherwise (0.025 one-sided is the level at which every other claim's two-sided "
    "95% interval decides a side)",
    "the paper: \"γ/σ > 1 in most layers\": the layer is its unit. The (γ/σ)² factor follows from the chain "
    "rule for any batch-normalized affine layer (a fully connected layer is a 1×1 convolution), so no layer "
    "type is set aside. Seeds of one replicate share its data, so the tests are over replicates. Plan 4.0 "
    "counted layers above 1 per model and bounded that fraction without a distribution (Anderson's bound); "
    "at n = 3 neither verdict was reachable whatever the data, 'reproduced' needed 7 replicates and "
    "'contradicted' 9 at k = 3, its power against its planning model was 0 at n = 7, and where every model "
    "has exactly half its layers above 1 (the demo's flip setting) 'contradicted' was unreachable at any n. "
    "A per-layer test on the continuous log ratio uses the size of each layer's ratio, not only its side "
    "of 1, and the partial-conjunction test is the standard valid test of 'at least u of L hypotheses "
    "false' under any dependence between layers (Bonferroni combination), so both verdicts are reachable "
    "at n = 3",
    alternatives=("plan 4.0's rule: per model the fraction of its layers whose median |γ|/σ is above 1, "
                  "Anderson's distribution-free bound over replicates, reproduced above 0.5 at 95%, "
                  "contradicted below at 1 − 0.05/k (also the previous verdict)",
                  "batch σ (the training-mode statistics), the same per-layer test",
                  "layer by layer: per BN layer the t-interval over replicates of log(median channel |γ|/σ) "
                  "(seeds averaged per replicate), each at 1 − α/L (Bonferroni over the L layers); 'most' "
                  "shown when more than half the layers lie above 1, refuted when at least half lie below 1",
                  "plan 3.0's t-interval over replicates (shown, not counted: invalid on a few discrete values)",
                  "plan 2.0's statistic: median over models of the convolutional channel fraction (order-"
                  "statistic interval; models as units; shown, not counted)"),
    previous_rule=UNCHANGED,
    planning=(Endpoint("", TEST_LAYERS, GS_PLANNING_LOG_RATIO, 0.0, 0.1, "smallest effect of interest",
               "'most layers' stated without a number; every layer's median channel |γ|/σ at 1.2 (log 0.18, a "
               "(γ/σ)² gradient factor of 1.44) is the smallest amplification worth reporting. The effect is "
               "the mean log ratio of every layer, the SD that of a replicate's mean log ratio of one layer, "
               "layers independent; power = P(at least u of L layers pass their one-sided t-test at "
               "0.025/(L − u + 1)), which is exactly the rule's p < 0.025 (a binomial over layers, computed). The "
               "SD of 0.1 is a declared guess: the demo's per-layer log ratios had not been summarized per "
               "replicate when it was set; what had been seen of them is the demo's flip setting at exactly 2 "
               "of 4 layers above 1 in every model, LeNet's convolutional layers below 1 and its fully "
               "connected layers above, and issue 36's partial-conjunction p = 0.013 on the clean setting at "
               "n = 3"),),
    display=Display("{:.2f}", bounds=(0.0, math.inf)),  # the pivotal layer's |γ|/σ (plan 5.0)
    estimand=IDENTIFIABLE_LAYERS,
    estimand_why=("per BN layer whose γ scale is identifiable (the rule: the plan's section on estimands), log "
                  "median |γ|/σ of the final model of BN's own recipe, the layers combined by the "
                  "partial-conjunction test. |γ|/σ stands for the (γ/σ)² factor only where γ's scale changes the "
                  "function: in a layer another BN follows through positively homogeneous operations, γ and β can "
                  "be scaled by any c > 0 without changing a logit, so its |γ|/σ is not a property of the trained "
                  "network. A run recorded before the gamma-sigma lens recorded the flag is decided on every BN "
                  "layer (plan 5.0's set, the panel's 'every BN layer'), and the row says so"),
    panel=((EVERY_LAYER, "every BN layer"), ("plan 4.0's layer fraction", "plan 4.0"), ("batch σ", "batch σ"),
           ("layer by layer", "layer by layer")),
    axis=Axis("|γ|/σ of the pivotal BN layer (ranked ⌊L/2⌋+1 of L by its evidence), with the partial-conjunction "
              "test's bounds", 1.0, "|γ|/σ = 1"),
    design=Design(EVERY_SETTING, per_layer=True),
),)

PLAN4_ANDERSON = ("plan 4.0: the fraction of layers above 1, Anderson's distribution-free bound over replicates "
                  "(reproduced at 95%, contradicted at 1 − 0.05/k)")
EVERY_LAYER_ANALYSIS = "every BN layer (plan 5.0's set)"
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


def layer_fraction_estimate(groups: Sequence[np.ndarray], lv: float | None = None) -> tuple[PairedDiff, str]:
    """Plan 4.0's decision on per-replicate arrays of per-model layer fractions: the distribution-free
    interval for a mean in [0, 1] over replicates, at ``lv`` (default: the pass's level), graded against
    'more than half'."""
    est = replicated_bounded_mean(groups, "seeds", level() if lv is None else lv)
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
    names, units, _ = layer_units(reps, mode)
    if not names:
        return None
    lv = 1.0 - (1.0 - level()) / len(names)
    above, below, parts = 0, 0, []
    for name, u in zip(names, units):
        lo, hi = layer_test(name, u).interval(lv)
        if lo is None or hi is None:
            parts.append(f"{name}: no interval")
            continue
        above += lo > 0
        below += hi < 0
        parts.append(f"{name} |γ|/σ {math.exp(float(np.mean(u))):.2f} [{math.exp(lo):.2f}, {math.exp(hi):.2f}]")
    n = len(names)
    status = (REPRODUCED if above > n / 2 else CONTRADICTED if below >= n / 2 else INCONCLUSIVE)
    return Analysis(LAYER_BY_LAYER, above / n, None, None, status,
                    f"per layer a t-interval over replicates at {lv:.4g} (Bonferroni over {n} layers)",
                    f"{above} of {n} layers shown above 1, {below} below: " + "; ".join(parts))


def _layer_groups(reps: list, mode: str) -> list[np.ndarray]:
    return [np.array(list(model_layer_fractions(lens.data, mode).values())) for _, lens in reps]


def layer_units(reps: list, mode: str) -> tuple[list[str], list[list[float]], str]:
    """Per BN layer (every layer of the first replicate, in its order), the units of its t-test: per replicate
    the mean over its models of log(median channel |γ|/σ); with one replicate, its models. Returns (names,
    units per layer, the unit word)."""
    names = [r["name"] for r in layer_rows(reps[0][1].data, mode)]
    by_rep = [{r["name"]: r for r in layer_rows(lens.data, mode)} for _, lens in reps]
    per_layer: list[list[float]] = []
    for name in names:
        groups = []
        for rows in by_rep:
            vals = [finite((v or {}).get("median_ratio")) for v in (rows.get(name, {}).get("per_seed") or {}).values()]
            groups.append([math.log(v) for v in vals if v is not None and v > 0])
        if len(groups) >= 2:
            per_layer.append([math.fsum(g) / len(g) for g in groups if g])
        else:
            per_layer.append(groups[0] if groups else [])
    return names, per_layer, "replicates" if len(reps) >= 2 else "seeds"


def layer_decision(reps: list, mode: str) -> tuple[LayerDecision, str]:
    """Plan 5.0's per-layer partial-conjunction decision at the pass's level (one-sided α = 1 − level)."""
    names, units, unit = layer_units(reps, mode)
    return decide_layers([layer_test(n, u) for n, u in zip(names, units)], (1.0 - level()) / 2.0), unit


def layer_status(d: LayerDecision) -> str:
    """Reproduced if the partial-conjunction p for "more than half above 1" is below α (this pass's
    1 − level); contradicted if the one for "at least half below 1" is; inconclusive otherwise."""
    alpha = (1.0 - level()) / 2.0  # one-sided, as the other claims' two-sided 95% intervals
    if d.p_above < alpha:
        return REPRODUCED
    if d.p_below < alpha:
        return CONTRADICTED
    return INCONCLUSIVE


def layer_analysis(name: str, reps: list, mode: str, note: str = "") -> Analysis:
    """The per-layer test as an analysis: the pivotal layer's |γ|/σ with the test's bounds."""
    d, unit = layer_decision(reps, mode)
    alpha = (1.0 - level()) / 2.0  # one-sided, as the other claims' two-sided 95% intervals
    L = d.layers
    ua, ub = u_above(L), u_below(L)
    est = d.estimate(unit)
    cond_ = "" if unit == "replicates" else "; one replicate: over its seeds, conditional on its corruption draw"
    method = (f"partial conjunction (Benjamini–Heller, Bonferroni) of one-sided t-tests over {est.n} {unit} per "
              f"layer (n − 1 df): the pivotal layer's (the {ua}-th of {L} by its evidence) lower bound at "
              f"one-sided {alpha:.3g}/{L - ua + 1}, upper bound at {alpha:.3g}/{L - ub + 1}{cond_}")
    text = (f"p = {d.p_above:.3g} that more than half of the {L} layers (≥ {ua}) are above 1, p' = "
            f"{d.p_below:.3g} that at least half (≥ {ub}) are below 1; {d.shown_above(alpha)} of {L} layers shown "
            f"above 1; pivotal layer {d.pivot.name}")
    a = Analysis.of(name, est, layer_status(d), "; ".join(x for x in (text, note) if x))
    a.method = method
    return a


def _anderson(groups: list[np.ndarray]) -> tuple[PairedDiff, str]:
    """Plan 4.0's rule (the previous verdict and a robustness row): Anderson's bound on the layer fraction,
    'reproduced' at 95%, 'contradicted' at this pass's level."""
    est95, s95 = layer_fraction_estimate(groups, LEVEL)
    estf, sf = layer_fraction_estimate(groups)
    return (estf, sf) if CONTRADICTED in (s95, sf) else (est95, s95)


def evaluate(run: RunData) -> list[Claim]:
    """Claim 4 in every setting that ran the gamma-sigma lens (each architecture its own setting)."""
    claim = new_claim("4", "gamma_sigma")  # the HTML section id
    for setting in settings_of(run, GAMMA_SIGMA):
        reps = setting.lenses(GAMMA_SIGMA)
        rows0 = layer_rows(reps[0][1].data, GS_SIGMA)
        if not rows0:
            claim.evaluations.append(not_run(where(setting), "no per-layer γ/σ in gamma_sigma.json"))
            continue
        typed = {layer_type(r) for r in rows0}
        groups = _layer_groups(reps, GS_SIGMA)
        n_layers = len(rows0)
        per_rep = ", ".join(f"{float(np.mean(g)) * n_layers:.1f} of {n_layers}" for g in groups if g.size)
        every = layer_analysis(PLAN_ANALYSIS, reps, GS_SIGMA,
                               f"BN layers with median |γ|/σ > 1 per replicate (mean over seeds): {per_rep}; "
                               + _descriptions(reps, typed))
        # Plan 6.0: decided on the layers whose γ scale is identifiable (the gamma-sigma lens's graph flag); every
        # BN layer (plan 5.0's set) is a panel row and the previous plan's verdict. A run recorded before the flag
        # existed is decided on every layer, and the note says so.
        split = identifiable.layer_split(reps, GS_SIGMA)
        if split.complete and split.identifiable:
            primary = replace(identifiable.claim4_identifiable(reps, layer_analysis, GS_SIGMA), name=PLAN_ANALYSIS)
            alts = [replace(every, name=EVERY_LAYER_ANALYSIS)]
            previous(claim, where(setting), every.value, every.status)
            layers = f"the {len(split.identifiable)} of {n_layers} BN layers whose γ scale is identifiable"
        else:
            why = ("no BN layer's γ scale is identifiable" if split.complete else
                   "this run recorded no identifiable-layer flag (a gamma-sigma lens from before plan 6.0)")
            primary = replace(every, note=f"{every.note}; {why}: decided on every BN layer (plan 5.0's set)")
            alts = [replace(every, name=EVERY_LAYER_ANALYSIS + " (the primary here)")]
            layers = "every BN layer"
        v4, v4_status = _anderson(groups)
        alts += [Analysis.of(PLAN4_ANDERSON, v4, v4_status), identifiable.effective_step_analysis(reps, GS_SIGMA)]
        alts += [a for a in (per_layer(reps, GS_SIGMA),) if a is not None]
        if layer_rows(reps[0][1].data, "batch"):
            alts.append(layer_analysis("batch σ", reps, "batch"))
        v3 = estimate(groups, "seeds", True)  # plan 3.0: t over replicates, invalid on a few discrete values
        alts.append(Analysis.of("plan 3.0: t-interval over replicates (invalid on a fraction of a few layers)",
                                v3, grade(v3, null=GS_MAJORITY), valid=False))
        old = _v2(reps, typed)
        alts.append(Analysis.of("plan 2.0: median convolutional-channel fraction over models",
                                old, grade(old, null=GS_MAJORITY), valid=False))
        c = cond(setting, reps[0][1], sigma=GS_SIGMA, layers=layers, n_layers=n_layers,
                 n_seeds=max((g.size for g in groups), default=0))
        claim.evaluations.append(Evaluation.from_analysis(where(setting), primary, c, True, [], alts))
    return [claim]


def layer_table(setting: Any) -> Table | None:
    """Claim 4's per-layer table of one setting: per BN layer the units, mean |γ|/σ (geometric mean over
    units) with its 95% t-interval, p⁺ and p⁻; the caption gives the partial-conjunction p-values."""
    reps = setting.lenses(GAMMA_SIGMA)
    names, units, unit = layer_units(reps, GS_SIGMA)
    if not names:
        return None
    tests = [layer_test(n, u) for n, u in zip(names, units)]
    d = decide_layers(tests, 1.0 - LEVEL)
    ex = (lambda v: "—" if v is None or not math.isfinite(v) else f"{math.exp(v):.2f}")
    pf = (lambda p: "—" if not math.isfinite(p) else f"{p:.3g}")
    rows = []
    for t in tests:
        lo, hi = t.interval(LEVEL)
        rows.append([t.name, str(t.n), ex(t.mean), "—" if lo is None else f"[{ex(lo)}, {ex(hi)}]",
                     pf(t.p_plus), pf(t.p_minus)])
    L = len(tests)
    caption = (f"Per BN layer, over {unit} (per replicate the mean over its models of log median channel |γ|/σ): "
               f"one-sided t-tests p⁺ (above 1) and p⁻ (below 1). Partial conjunction: p = {d.p_above:.3g} that "
               f"at least {u_above(L)} of {L} layers are above 1; p' = {d.p_below:.3g} that at least "
               f"{u_below(L)} are below 1.")
    return Table(f"Claim 4 per layer — {where(setting)}", ["layer", unit, "|γ|/σ", "95% t-interval", "p⁺", "p⁻"],
                 rows, caption)


def layer_tables(run: RunData) -> list[Table]:
    """:func:`layer_table` of every setting that ran the gamma-sigma lens."""
    return [t for s in settings_of(run, GAMMA_SIGMA) if (t := layer_table(s)) is not None]


def _v2(reps: list, typed: set[str | None]) -> PairedDiff:
    """Plan 2.0: the median over all models of the convolutional channel fraction (all types if untyped)."""
    types = {"conv"} if "conv" in typed else {"conv", "fc", None}
    return median_estimate([v for _, lens in reps for v in model_fractions(lens.data, GS_SIGMA, types).values()])

