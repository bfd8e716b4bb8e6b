"""The declared analysis plan: for every claim of the paper, how bnmem decides it.

For each claim the plan states the metric, the checkpoints it uses, the
statistic, the unit of replication, the interval method, the thresholds and the
paper's number it is compared with. The plan is versioned: a rule that changes
gets a changelog entry saying what changed and why, and the report prints the
verdict under the previous version's rule next to the current one, so a reader
can see whether a verdict moved because the data or because the rule changed.

The rules were written from the paper's statements and general statistical
practice (replication criteria, interval estimation with the independent unit
of the experiment), not from which choice passes on a given run. The report
(:mod:`bnmem.report.claims`) implements them; ``docs/analysis-plan.md`` is this
module rendered by :func:`render_markdown` (a test keeps the two equal).

Statuses (:data:`STATUSES`), tested against the interval, never the mean alone:

* ``reproduced``: the interval excludes the null on the paper's side and, where
  the paper states a magnitude, overlaps the paper's range (the paper's number is
  consistent with ours; the "original effect inside the replication interval"
  criterion of replication studies);
* ``direction only``: the interval excludes the null on the paper's side but
  lies entirely outside the paper's range (e.g. +8 points for a 3–5-point claim);
* ``inconclusive``: the interval includes the null, or there is no interval
  (a single pair, a single replicate without a valid within-replicate interval);
* ``contradicted``: the interval excludes the null on the other side;
* ``not run``: the run has no measurement for it.
"""

from __future__ import annotations

from dataclasses import dataclass

PLAN_VERSION = "2.0"
PREVIOUS_VERSION = "1.1"

REPRODUCED = "reproduced"
DIRECTION_ONLY = "direction only"
INCONCLUSIVE = "inconclusive"
CONTRADICTED = "contradicted"
NOT_RUN = "not run"
STATUSES = (REPRODUCED, DIRECTION_ONLY, INCONCLUSIVE, CONTRADICTED, NOT_RUN)
# A derivation check (claim 5a) is not evidence for a claim: it passes or fails.
CHECK_PASSED = "check passed"
CHECK_FAILED = "check failed"
CHECK_STATUSES = (CHECK_PASSED, CHECK_FAILED, NOT_RUN)
# The previous plan's two-valued statuses (shown next to the current verdict).
PREVIOUS_REPRODUCED = "reproduced"
PREVIOUS_NOT_REPRODUCED = "not reproduced"

# Lens kinds as the report's run reader names them: one place, so a rename is one edit.
LENS_MEMORIZE = "memorize"
LENS_GRADNORMS = "gradnorms"
LENS_LIRA = "lira"
LENS_GAMMA_SIGMA = "gamma-sigma"
LENS_MITIGATE = "mitigate"
LENS_THEORY = "theory"

LEVEL = 0.95
BN = "batch"
BASELINE = "none"

# Claim 3: "LiRA AUC rises by 3–5 points with BN (at least 3 and 4 points for 1% and 5% outlier mixtures)".
LIRA_RANGE = (0.03, 0.05)
LIRA_RANGE_BY_MIX = {0.01: (0.03, 0.05), 0.05: (0.04, 0.05)}
LIRA_ATTACKS = ("online", "offline", "rmia")  # each gets a verdict; online is the paper's attack
LIRA_PRIMARY_ATTACK = "online"
LIRA_SUBSET = "all"
# Claim 2: the fit level at which BN and no-norm are compared in the matched-fit analysis.
FIT_LEVEL = 0.5
GRAD_DEFINITIONS = ("eval", "batch")  # each gets a verdict; eval is the project's declared definition
# Claim 4: "most" = more than half; the median interval needs at least this many models at 95%.
GS_MAJORITY = 0.5
GS_MIN_MODELS = 6
GS_SIGMA = "running"
# Claim 5: tolerance on the relative error of the (γ/σ)² prediction.
THEORY_TOL = 0.10
# Claim 6: the regularizer must cut corrupted-subset accuracy by ≥ half at ≤ 1 point of test accuracy.
MITIGATE_CUT = 0.5
MITIGATE_TEST_DROP = 0.01


def lira_range(mix: float | None) -> tuple[float, float]:
    """The paper's AUC-gain range (BN − none) for an outlier fraction (clean or unlisted: 3–5 points)."""
    if mix:
        for m, r in LIRA_RANGE_BY_MIX.items():
            if abs(mix - m) < 1e-9:
                return r
    return LIRA_RANGE


@dataclass(frozen=True)
class ClaimPlan:
    """How one claim is decided.

    Attributes:
        id: claim id ("1", "2", "3a", ...).
        title: the claim as the checklist states it.
        paper: the paper's statement and number it is compared with.
        kind: "evidence" or "derivation check".
        lens: the lens kind that measures it.
        metric: what is measured.
        checkpoints: which epochs / checkpoints the metric uses.
        statistic: how per-unit numbers become one number.
        unit: the unit of replication.
        interval: the interval method.
        thresholds: the null, the direction and the paper's range.
        rule: the status rule in words.
        coverdicts: analyses that get their own verdict, shown in the claim row with their agreement.
        alternatives: the robustness panel's alternative analyses.
        previous_rule: the rule under :data:`PREVIOUS_VERSION` (its verdict is shown too).
    """

    id: str
    title: str
    paper: str
    kind: str
    lens: str
    metric: str
    checkpoints: str
    statistic: str
    unit: str
    interval: str
    thresholds: str
    rule: str
    coverdicts: tuple[str, ...] = ()
    alternatives: tuple[str, ...] = ()
    previous_rule: str = ""


@dataclass(frozen=True)
class Change:
    """One changelog entry."""

    version: str
    claims: tuple[str, ...]
    what: str
    why: str
    after_seeing_data: bool = False


_REPLICATE_UNIT = ("the replicate: an independent repeat of the experiment with its own data-corruption seed, "
                   "keep-matrix seed and model seeds (`replicates:` in a study; cells `<id>-r<k>`)")
_REPLICATE_INTERVAL = ("95% Student t-interval over the replicate means (n − 1 df; from 10 replicates a seeded "
                       "10 000-resample percentile bootstrap). With one replicate: the t-interval over its seeds, "
                       "which are independent models given the data (the interval is then conditional on one "
                       "corruption draw, and says so). One pair in all: no interval, so inconclusive")
_GRADED = ("reproduced if the interval lies above 0; contradicted if it lies below 0; inconclusive otherwise "
           "(no magnitude is stated by the paper, so there is no 'direction only')")

PLAN: dict[str, ClaimPlan] = {
    "1": ClaimPlan(
        "1", "BN models memorize corrupted / OOD training samples faster and further",
        "BN models fit corrupted/OOD samples faster and further on every dataset and architecture (no magnitude "
        "stated)",
        "evidence", LENS_MEMORIZE,
        "training accuracy on the corrupted subset (flipped labels, or OOD inputs), BN model in eval mode",
        "every epoch; the statistic is the area under the memorization curve divided by the number of epochs "
        "(\"faster and further\" in one number)",
        "per pair (seed) BN − no-norm; mean over the seeds of a replicate; mean over replicates",
        _REPLICATE_UNIT, _REPLICATE_INTERVAL,
        "null 0, direction +; every cell and corrupted subset is a separate evaluation; the claim row shows the "
        "least supportive one", _GRADED,
        alternatives=("final-epoch accuracy instead of the area", "t-interval over all seeds pooled across "
                      "replicates (treats seeds of one replicate as independent)"),
        previous_rule="reproduced if the 95% t-interval over seeds lies above 0 in every cell (no replicates)",
    ),
    "2": ClaimPlan(
        "2", "Gradient norms of corrupted samples shift up under BN (relative to clean samples)",
        "gradient-norm distributions of noisy samples shift up under BN (no magnitude stated)",
        "evidence", LENS_GRADNORMS,
        "per-sample gradient L2 norm over all parameters; per model the log of the corrupted/clean ratio of "
        "median norms (relative) and the log corrupted median alone (absolute); under the eval definition "
        "(running statistics, the project's declared definition) and the training-mode (batch) definition",
        "every declared checkpoint: the area under the log-ratio curve over all checkpoints (trapezoid over "
        "epochs, divided by the epoch span), every checkpoint shown",
        "per pair (seed) BN − no-norm of the area; mean over seeds; mean over replicates",
        _REPLICATE_UNIT, _REPLICATE_INTERVAL,
        "null 0, direction +", _GRADED + "; the eval definition decides the row, the batch definition gets its "
                                          "own verdict and the row states whether they agree",
        coverdicts=("eval definition", "batch definition"),
        alternatives=("each checkpoint alone (every checkpoint shown)", "last checkpoint",
                      "absolute: log corrupted median, BN − no-norm", "matched fit level: each norm at the "
                      f"checkpoint where its corrupted-subset training accuracy is closest to {FIT_LEVEL:.0%} (the "
                      "accuracy the gradnorms lens recorded at the checkpoint, else the memorize lens's curve of "
                      "the same models)",
                      "memorization-phase checkpoints (plan 1.1's rule)"),
        previous_rule="adopted after the first demo: log noisy/clean ratio, eval definition only, "
                      "averaged over the 'memorization phase' checkpoints (after epoch 1, up to half of training); "
                      "reproduced if the t-interval over seeds lies above 0 in every cell",
    ),
    "3a": ClaimPlan(
        "3a", "LiRA membership-inference AUC is 3–5 points higher with BN, with injected outliers",
        "LiRA AUC rises by 3–5 points with BN; at least 3 points at a 1% outlier mix and 4 points at 5%",
        "evidence", LENS_LIRA,
        "AUC of the attack on all training examples, leave-one-out over the shadow models (each model the target "
        "once), BN − no-norm paired by model index",
        "the final models (last epoch)",
        "per replicate the mean over targets of the paired AUC difference; mean over replicates",
        _REPLICATE_UNIT + "; targets inside one replicate share reference models and data and are never treated "
                          "as independent",
        "95% t-interval over replicate means; with one replicate the delete-one-model jackknife when the lens "
        "wrote it, else no interval (inconclusive)",
        "null 0, direction +; the paper's range: 4–5 points at a 5% mix, 3–5 points otherwise",
        "reproduced if the interval lies above 0 and overlaps the paper's range; direction only if above 0 but "
        "entirely below or above the range; contradicted if below 0; inconclusive otherwise. Online LiRA (the "
        "paper's attack) decides the row; offline LiRA and RMIA each get a verdict and the row states agreement",
        coverdicts=("online LiRA", "offline LiRA", "RMIA"),
        alternatives=("online LiRA with a fixed variance", "online LiRA on the identity query view only (when the "
                      "lens wrote it)", "online LiRA on the outlier subset only (direction tested; the paper's "
                      "range is for all examples)"),
        previous_rule="online LiRA only; 95% interval over targets (treated as independent) above 0 AND the mean "
                      "≥ 3 points; one bar for every outlier mix",
    ),
    "3b": ClaimPlan(
        "3b", "LiRA membership-inference AUC is 3–5 points higher with BN, on clean data",
        "the LiRA gain appears also on clean data (3–5 points)",
        "evidence", LENS_LIRA,
        "as 3a, on a cell without injected outliers", "the final models",
        "as 3a", _REPLICATE_UNIT, "as 3a", "null 0, direction +; the paper's range 3–5 points", "as 3a",
        coverdicts=("online LiRA", "offline LiRA", "RMIA"),
        alternatives=("online LiRA with a fixed variance", "online LiRA on the identity query view only (when the "
                      "lens wrote it)"),
        previous_rule="as 3a under plan 1.1",
    ),
    "4": ClaimPlan(
        "4", "Measured |γ|/σ exceeds 1 in most BN channels",
        "measured γ/σ > 1 in most layers (no number beyond 'most')",
        "evidence", LENS_GAMMA_SIGMA,
        "per trained BN model, the fraction of BN channels with |γ|/σ > 1, σ = sqrt(running_var + eps); "
        "convolutional BN layers decide (the (γ/σ)² factor is derived for a convolutional channel), fully "
        "connected BN layers get their own verdict; a model whose BN layer types are not recorded is judged "
        "on all its BN layers together",
        "the final epoch",
        "the median over models of the per-model fraction",
        "the trained model (every seed of every replicate); the claim is a property of each trained model",
        "distribution-free 95% interval for the median: order statistics [x_(k), x_(n−k+1)] (sign-test "
        f"inversion); needs at least {GS_MIN_MODELS} models, fewer: no interval (inconclusive). Each bound is an "
        "order statistic, so more channels above 1 can never lower it: the rule is monotone",
        f"null {GS_MAJORITY} ('most'), direction +",
        f"reproduced if the interval lies above {GS_MAJORITY}; contradicted if below; inconclusive otherwise",
        coverdicts=("convolutional BN layers", "fully connected BN layers"),
        alternatives=("all BN layers together", "batch σ (the training-mode statistics)",
                      "plan 1.1's statistic: fraction of layers whose median |γ|/σ is above 1"),
        previous_rule="fraction of layers whose median |γ|/σ is above 1, per seed; reproduced if the t-interval "
                      "lower bound is above 0.5 (not monotone: [0.75, 0.75, 0.75] passed and [0.75, 1.0, 0.75] "
                      "failed)",
    ),
    "5a": ClaimPlan(
        "5a", "Toy model: with batch statistics frozen, the BN step is the plain step at learning rate η(γ/σ)² "
              "(a check of the derivation, not evidence for the claim)",
        "BN multiplies an outlier's per-step margin growth by (γ/σ)²",
        "derivation check", LENS_THEORY,
        "median relative error |measured − (γ/σ)²| / (γ/σ)² of the BN / matched no-norm margin-growth ratio",
        "every step of the simulation", "median over outliers and steps", "one deterministic simulation",
        "none (deterministic)", f"tolerance {THEORY_TOL:.0%}",
        f"check passed if the error is below {THEORY_TOL:.0%}, else check failed. With frozen statistics the "
        "identity holds by the chain rule, so the error measures only curvature: the check guards the "
        "simulation code and counts as no evidence",
        previous_rule=f"'reproduced' if the error is below {THEORY_TOL:.0%} (counted as evidence)",
    ),
    "5b": ClaimPlan(
        "5b", "Toy model, real BN step (batch statistics move): (γ/σ)² predicts the margin growth",
        "BN multiplies an outlier's per-step margin growth by (γ/σ)²",
        "evidence", LENS_THEORY,
        "relative error of the measured margin-growth ratio against (γ/σ)²; the fair counterfactual steps "
        "(w, γ, β) under BN against (w̃, c̃) of the plain model started from the BN model's effective weights, "
        "when theory.json has it (else the w-only comparison)",
        "the steps the simulation records",
        "per seed and outlier kind the median relative error; the median over those",
        "the simulation seed (× outlier kind)",
        "95% t-interval over seeds; one simulation: no interval (inconclusive)",
        f"tolerance {THEORY_TOL:.0%} (an equivalence claim)",
        f"reproduced if the interval lies below {THEORY_TOL:.0%}; contradicted if it lies above; inconclusive "
        "otherwise",
        previous_rule=f"reproduced if the one simulation's median relative error is below {THEORY_TOL:.0%}",
    ),
    "6": ClaimPlan(
        "6", "The γ/σ regularizer reduces memorization at little utility cost",
        "the regularizer mitigates memorization and privacy risk at little cost in accuracy (here: ≥ half of "
        "the corrupted-subset accuracy removed at ≤ 1 point of test accuracy)",
        "evidence", LENS_MITIGATE,
        "relative cut in corrupted-subset accuracy (BN − BN+reg) / BN and the test-accuracy change, at the λ "
        "selected on the validation split (without one: the middle of the declared λ grid, chosen before the "
        "results); LiRA AUC of the regularized model shown next to BN and no-norm when measured",
        "the last epoch (the released model)",
        "per pair (seed) the cut; mean over seeds; mean over replicates",
        _REPLICATE_UNIT, _REPLICATE_INTERVAL,
        f"null 0, direction +; the paper's range: a cut of {MITIGATE_CUT:.0%}–100% with a test drop of at most "
        f"{MITIGATE_TEST_DROP * 100:g} point",
        "reproduced if the cut's interval lies above 0 and overlaps the range and the test drop's interval "
        "reaches ≤ 1 point; direction only if the cut is above 0 but its interval lies below 50% or the test "
        "drop's interval lies above 1 point; contradicted if the cut's interval lies below 0; inconclusive "
        "otherwise",
        coverdicts=("memorization cut (decides)", "privacy: online LiRA AUC reduction BN − BN+reg, per target "
                    "paired by model index, replicates as the unit, direction graded (when the lens ran LiRA)",
                    "privacy: RMIA AUC reduction, the same way"),
        alternatives=("every other λ of the grid",),
        previous_rule="the λ with the best result on the test set; reproduced if its mean cut ≥ 50% and mean "
                      "test drop ≤ 1 point (λ chosen on the test set)",
    ),
}

CHANGELOG: tuple[Change, ...] = (
    Change("1.0", ("1", "2", "3a", "3b", "4", "5a", "5b", "6"),
           "First rules: two statuses (reproduced / not reproduced); intervals over seeds or LiRA targets; claim 2 "
           "on the noisy/clean ratio averaged over all checkpoints.", "initial release"),
    Change("1.1", ("2",),
           "Claim 2 decided on the 'memorization phase' checkpoints (after epoch 1, up to half of training).",
           "adopted after the first demo, whose late checkpoint went the other way; with the demo's checkpoints "
           "(1, 5, 20) the rule decides on epoch 5 alone", after_seeing_data=True),
    Change("2.0", ("1", "2", "3a", "3b", "4", "5a", "5b", "6"),
           "Plan rewritten from the paper's statements and statistical practice: graded statuses tested against "
           "the interval; replicates as the unit of replication (LiRA targets never independent); per-mix LiRA "
           "bars; claim 2 over all declared checkpoints (area under the log-ratio curve), both gradient "
           "definitions, matched fit level; claim 3 per attack with agreement; claim 4 on channels, conv and FC "
           "separately, with a monotone rule; claim 5a a derivation check; claim 6 at a λ not chosen on the test "
           "set; a robustness panel for every claim.",
           "1.1's claim-2 rule was chosen after seeing the data; 1.x intervals treated LiRA targets as "
           "independent (about 2× too narrow), decided a single pair on its point estimate, tested the 3-point "
           "bar on the mean, and the claim-4 rule was not monotone"),
)


def render_markdown() -> str:
    """The plan as ``docs/analysis-plan.md``."""
    lines = [
        "# Analysis plan",
        "",
        f"Plan version **{PLAN_VERSION}** (previous: {PREVIOUS_VERSION}). The report prints this version, and for "
        "every claim whose rule changed since the previous version it prints the verdict under the previous rule "
        "too. Generated from `bnmem.analysis_plan` (edit the module, then regenerate with "
        "`python -c \"from bnmem.analysis_plan import render_markdown; print(render_markdown(), end='')\" > "
        "docs/analysis-plan.md`).",
        "",
        "## Statuses",
        "",
        "Every status is decided on a 95% interval, never on the mean alone:",
        "",
        "- **reproduced**: the interval excludes the null on the paper's side and, where the paper states a "
        "magnitude, overlaps the paper's range (the paper's number is consistent with the measurement);",
        "- **direction only**: the interval excludes the null on the paper's side but lies entirely outside the "
        "paper's range (e.g. +8 points for a 3–5-point claim);",
        "- **inconclusive**: the interval includes the null, or there is no valid interval (a single pair; one "
        "replicate of LiRA without a model-level jackknife);",
        "- **contradicted**: the interval excludes the null on the other side;",
        "- **not run**: nothing measured it.",
        "",
        "A claim measured in several cells (settings) shows its least supportive setting in the checklist "
        "(contradicted, then inconclusive, then direction only, then reproduced; ties: the smallest lower bound). "
        "The baseline is the model without normalization (`none`); other norms are shown but do not decide. "
        "The toy model's frozen-statistics identity (5a) is a derivation check: *check passed* / *check failed*, "
        "never counted as evidence.",
        "",
        "## Unit of replication",
        "",
        "A replicate is an independent repeat of an experiment: its own data-corruption seed, keep-matrix seed "
        "and model seeds (a study's `replicates: R`; cells `<id>-r<k>`). The report groups cells whose conditions "
        "are equal except the replicate into one setting. Intervals are over replicate means. Inside one "
        "replicate, models trained with different seeds are independent given the data, so with a single "
        "replicate the interval is over seeds and is stated to be conditional on one corruption draw. LiRA "
        "targets of one replicate share reference models and data: they are never treated as independent; one "
        "replicate of LiRA has an interval only from a delete-one-model jackknife.",
        "",
        "## Robustness panel",
        "",
        "For each claim the report re-decides the verdict under every reasonable alternative analysis choice "
        "listed below (and under the co-verdicts' choices), and the claim row says how many of them agree with "
        "the plan's verdict (k of n). A setting run with a recipe other than the paper's shared one (e.g. a "
        "learning rate selected per norm on the validation split) is a robustness variant of every claim it "
        "measures: shown in the panel as `recipe <name>`, never deciding.",
        "",
        "## Claims",
        "",
    ]
    for p in PLAN.values():
        lines += [f"### {p.id}. {p.title}", "", f"*{p.kind}*; measured by the `{p.lens}` lens.", ""]
        rows = [("paper", p.paper), ("metric", p.metric), ("checkpoints", p.checkpoints),
                ("statistic", p.statistic), ("unit of replication", p.unit), ("interval", p.interval),
                ("thresholds", p.thresholds), ("rule", p.rule)]
        if p.coverdicts:
            rows.append(("own verdicts", "; ".join(p.coverdicts)))
        if p.alternatives:
            rows.append(("robustness panel", "; ".join(p.alternatives)))
        rows.append((f"rule under plan {PREVIOUS_VERSION}", p.previous_rule))
        lines += ["| | |", "|---|---|"] + [f"| {k} | {v.replace('|', '/')} |" for k, v in rows] + [""]
    lines += ["## Changelog", ""]
    for c in CHANGELOG:
        flag = " **Adopted after seeing results.**" if c.after_seeing_data else ""
        lines.append(f"- **{c.version}** (claims {', '.join(c.claims)}): {c.what} Why: {c.why}.{flag}")
    return "\n".join(lines) + "\n"

