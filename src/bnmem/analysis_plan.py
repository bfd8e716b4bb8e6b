"""The declared analysis plan: for every claim of the paper, how bnmem decides it.

For each claim the plan states the metric, the checkpoints it uses, the statistic, the unit of replication,
the interval method, the thresholds, the paper's number it is compared with, and why (a quote of the paper's
claim, or the statistical reason). The plan is versioned (:mod:`bnmem.plan_history`): a rule that changes gets
a changelog entry saying what changed, why, and whether results had been seen; the report prints every claim's
verdict under the previous version's rule next to the current one, so a reader can see whether a verdict moved
because of the data or because of the rule. The statuses (:data:`STATUSES`, always tested against the
interval) are defined in the plan's text, :func:`_statuses_section`.

Each claim's entry lives in its own module, beside its rule: a module of :data:`CLAIMS_PACKAGE` that declares
``CLAIMS`` (its :class:`ClaimPlan` s, each with its constants, planning effect, display, forest-plot axis and
design branch). This module finds those modules at run time (:func:`claim_modules`, as the lens registry loads
a lens module) and assembles :data:`PLAN` from them; it imports none of them, so the lenses can read the
measurement constants here. The whole plan is rendered as markdown by :func:`render_markdown`
(``docs/analysis-plan.md`` is that text; a test keeps the two equal) and fingerprinted by :func:`plan_sha256`.
``bnmem plan`` prints both, ``bnmem run`` records version and hash in study.json before its first job, and the
report's headline says whether the plan that decides equals the one recorded.
"""

from __future__ import annotations

import hashlib
import importlib
import pkgutil
import math
import re
from collections.abc import Iterator, Mapping, MutableMapping
from functools import lru_cache
from types import ModuleType

from bnmem.claim_spec import (  # noqa: F401  (re-exported: what a claim module declares)
    CLEAN, CORRUPTED, EVERY_SETTING, ONCE_PER_STUDY, PAPER_MINIMUM, PAPER_UPPER, PILOT_SD_BOUND, POWER_TARGET,
    TEST_ABOVE, TEST_BAND, TEST_BELOW, TEST_EXACT, TEST_LAYERS, UNDERPOWERED_BELOW, Axis, ClaimPlan, Design, Display,
    Endpoint,
)
from bnmem.names import BATCH_NORM, NO_NORM
from bnmem.plan_history import (  # noqa: F401  (re-exported: the plan's version is read here)
    CHANGELOG, EXPLORATORY_SEEN, PLAN_VERSION, PREVIOUS_VERSION, REVIEWS, SEEN_STUDIES, Change,
)

# The key of a study's study.json that records {"version", "sha256"} of the plan before its first job.
RECORD_KEY = "analysis_plan"
# The key of study.json under which `bnmem run --confirmatory` records the seeds it derived from the plan's hash.
CONFIRMATORY_KEY = "confirmatory"

REPRODUCED = "reproduced"
DIRECTION_ONLY = "direction only"
INCONCLUSIVE = "inconclusive"
CONTRADICTED = "contradicted"
NOT_RUN = "not run"
# Plan 5.0, claims 3a/3b (a stated range): the interval lies wholly above the range, or above 0 and wholly below
# its stated minimum.
LARGER = "larger than the paper"
SMALLER = "smaller than the paper"
STATUSES = (REPRODUCED, LARGER, DIRECTION_ONLY, SMALLER, INCONCLUSIVE, CONTRADICTED, NOT_RUN)
# A derivation check (claim 5a) is not evidence for a claim: it passes or fails.
CHECK_PASSED = "check passed"
CHECK_FAILED = "check failed"
CHECK_STATUSES = (CHECK_PASSED, CHECK_FAILED, NOT_RUN)
# Plan 1.x's two-valued statuses (still readable in old reports and tests).
PREVIOUS_REPRODUCED = "reproduced"
PREVIOUS_NOT_REPRODUCED = "not reproduced"
# The descriptive comparison with the paper's stated range ("vs paper").
VS_BELOW, VS_WITHIN, VS_ABOVE = "below", "within", "above"

LEVEL = 0.95
# Family-wise error of one claim row over its k deciding settings. 'Reproduced' needs every deciding setting
# (an intersection-union test: each at 95%, no adjustment); 'contradicted' needs one (a union: each at 1 − α/k).
FAMILY_ALPHA = 0.05
MULTIPLICITY = "intersection-union for reproduced; Bonferroni for contradicted"
BN = BATCH_NORM
BASELINE = NO_NORM

# Row 3c (beyond the paper): the lira lens's matched-fit option and the low-FPR operating point it records (a lens
# sits below the claim modules, so these stay here). The attacks that each get a verdict and the one that decides
# are the attacks' roles VERDICT and PRIMARY (bnmem.attacks.spec); tests pin them to claim 3's coverdicts.
MATCHED_FIT_OPTION = "matched_fit"
MATCH_FPR = 0.001
BEYOND_PAPER = "beyond the paper (exploratory)"
# Claims 2 and 7: the fit level below which a checkpoint is "before the corrupted subset is fitted".
FIT_LEVEL = 0.5
# Claims 4 and 7: the σ of |γ|/σ that decides (running statistics, what BN divides by in eval mode).
GS_SIGMA = "running"
# Claim 6: the test-accuracy margin (≤ 1 point); the mitigate lens's validation gate screens against it.
MITIGATE_TEST_DROP = 0.01
# Claim 7: clean examples (a fixed seeded sample) whose gradient norms are measured; every outlier is.
PUSH_NORM_SAMPLE = 128
# Claim 6 (plan 4.0, kept as the previous selection and a robustness row): the validation gate admitted a variant
# unless its validation drop exceeded the 1-point margin by more than this many standard errors (one-sided 95%).
MITIGATE_GATE_Z = 1.645
# Claim 6 (plan 5.0): the validation gate is a screen with an indifference zone from the claim's margin (1 point,
# a cost that is acceptable) to MITIGATE_GATE_COST (3 points, "several points", a cost it must catch); a variant
# passes when its validation drop is at most the zone's midpoint, so both errors are Φ(−1 point / se).
MITIGATE_GATE_COST = 0.03
MITIGATE_GATE_THRESHOLD = (MITIGATE_TEST_DROP + MITIGATE_GATE_COST) / 2
GATE_RULES = ("6.0", "5.0", "4.0")
# Claim 6 (plan 6.0): the λ grid every study selects from unless it declares its own (the mitigate lens's default):
# six values over 2.5 decades around plan 5.0's {1, 10}, so the gate has cheap variants to admit (plan 5.0's
# {1, 10} chose λ = 1 in 118 of 120 replicates of the decisive study, 37 of them by the fallback).
MITIGATE_LAMBDAS = (0.1, 0.3, 1.0, 3.0, 10.0, 30.0)


def mitigate_gate_passes(drop: float, se: float, rule: str = "5.0") -> bool:
    """Whether claim 6's validation gate admits a variant whose validation drop (BN − variant, per image averaged
    over the selection seeds, then over images) is ``drop`` with standard error ``se``, under plan ``rule``'s gate
    (6.0: drop ≤ the claim's 1-point margin; 5.0: drop ≤ the indifference zone's midpoint; 4.0: drop ≤ 1 point +
    1.645 se). The mitigate lens records its own choice under 5.0's; the report decides under the plan's."""
    if rule == "4.0":
        return bool(drop <= MITIGATE_TEST_DROP + MITIGATE_GATE_Z * se)
    if rule == "6.0":
        return bool(drop <= MITIGATE_TEST_DROP)
    return bool(drop <= MITIGATE_GATE_THRESHOLD)


def mitigate_gate_power(se: float, cost: float = MITIGATE_GATE_COST, rule: str = "5.0") -> float:
    """The chance that claim 6's gate excludes a variant whose true validation cost is ``cost`` when its drop is
    estimated with standard error ``se`` (normal approximation of the mean over images)."""
    if not (se > 0 and math.isfinite(se)):
        return math.nan
    bound = (MITIGATE_TEST_DROP + MITIGATE_GATE_Z * se if rule == "4.0" else MITIGATE_TEST_DROP if rule == "6.0"
             else MITIGATE_GATE_THRESHOLD)
    return 0.5 * math.erfc((bound - cost) / (se * math.sqrt(2)))


def family_level(k: int) -> float:
    """The interval level at which each of k settings is tested for 'contradicted' (one setting suffices, so
    Bonferroni keeps the row's chance of a false 'contradicted' at FAMILY_ALPHA / 2 one-sided)."""
    return 1.0 - FAMILY_ALPHA / max(1, k)


# Plan 6.0: the estimands a claim's robustness panel names: what is held fixed when BN is compared with the
# baseline. A claim module declares its primary (ClaimPlan.estimand) and its panel (ClaimPlan.panel).
SAME_EPOCH = "same epoch"
CLEAN_PROGRESS = "matched clean progress"
TEST_ACCURACY = "matched test accuracy"
CORRUPTED_FIT = "matched corrupted-subset fit"
CONVERGENCE = "at convergence"
PAPERS_PROTOCOL = "paper's protocol"
IDENTIFIABLE_LAYERS = "BN layers whose γ scale is identifiable"
EVERY_LAYER = "every BN layer"
# A panel entry whose estimand is, in the runs this code makes, the primary's own number (one shared recipe: the
# paper's protocol; claims 4 and 7 until the identifiable-layer rule is wired: the layers plan 5.0 decided on).
SAME_AS_PRIMARY = "="
# Plan 6.0: a row whose primary and an alternative lie on opposite sides of the null, each interval excluding it,
# in the same setting: the primary still decides the verdict, and the row says so.
DEPENDS = "depends on what is held fixed"
# Plan 6.0's fair arms: each norm's recipe selected on the validation split (bnmem.train.recipe runs it; the
# study selects once per setting, bnmem.study.recipes).
# Candidate learning rates relative to the shared one (declared before any selection was run): two octaves
# either side, in factors of 2, the usual coarse learning-rate sweep; the shared rate is the middle one, so
# the paper's choice is always a candidate and either arm can move away from it in both directions.
LR_FACTORS = (0.25, 0.5, 1.0, 2.0, 4.0)

# The plateau rule (early stopping on validation accuracy, as Keras' and Lightning's EarlyStopping and
# Prechelt's "Early stopping - but when?" (1998) frame it): training stops at the first epoch e at which the
# best validation accuracy so far has not improved by at least the minimum delta for PLATEAU_PATIENCE
# consecutive epochs, provided e >= PLATEAU_MIN_EPOCHS; otherwise at the cap.
#
# Patience: 5 epochs, within the 3-10 of common practice (Lightning's default is 3, Keras examples use 3-10):
# long enough that one epoch's noise on a small validation split does not end training, short enough that the
# models trained past their best are not trained much past it.
PLATEAU_PATIENCE = 5
# Minimum delta: one validation example (1/n_val of accuracy; mean over the selection seeds), the smallest
# improvement the split can show. A fixed delta in accuracy would be below one example on a small split (every
# fluctuation counts) or many examples on a large one.
PLATEAU_MIN_DELTA_EXAMPLES = 1
# Minimum epochs: 10. An unnormalized network often sits near chance for its first epochs before it starts to
# learn; a patience window there would stop it before it has learned anything. 10 is 2 patience windows.
PLATEAU_MIN_EPOCHS = 10
# Cap: this many times the shared recipe's epochs (``max_epochs`` overrides it). The shared recipe's epochs are
# the study's statement of a full training run; twice that gives a slow arm room to reach its plateau while
# bounding the cost at twice the paper's protocol. A candidate that reaches the cap stops there ("cap").
PLATEAU_CAP_FACTOR = 2
# The criterion's window: a candidate's score is its mean validation accuracy over its last this many epochs up to
# the stopping epoch (the plateau it stopped on). On a small split one epoch's accuracy moves by several
# examples from epoch to epoch; the plateau's mean estimates the level the stopping epoch's model sits at with
# less of that noise, and the learning rate is chosen by it.
SCORE_WINDOW = PLATEAU_PATIENCE
# Scores within this of the best are tied (float noise only: accuracies are multiples of 1/(seeds * n_val)).
TIE_TOLERANCE = 1e-9
STOP_PLATEAU = "plateau"
STOP_CAP = "cap"
# Which epoch's model is used: the stopping epoch's (the last one trained), not the best epoch's. Every model of
# an arm (its memorization runs, its shadow models) then trains the same fixed number of epochs and is used as
# trained, like the released model of a practitioner's early-stopped run; the attack's shadow models mimic the
# target's training exactly, and no per-model choice looks at validation data. The stopping epoch is at most
# PLATEAU_PATIENCE epochs after the best one by construction (its accuracy may lie below the best).
MODEL_USED = "the stopping epoch's (the last epoch trained)"
CRITERION = (f"mean validation accuracy over the last {SCORE_WINDOW} epochs up to the stopping epoch of the "
             "plateau rule (mean over the selection seeds, eval-mode BN; a diverged run counts as 0); the highest "
             "wins, ties go to the learning rate closest to the shared one in log scale, then the smaller; the "
             "selected recipe is its learning rate and stopping epoch")
OWN_RECIPE = (
    "each norm's own recipe selected on the clean validation split: its learning rate from the grid of the shared "
    f"one × {', '.join(f'{f:g}' for f in LR_FACTORS)}, each candidate trained until its validation accuracy "
    f"plateaus (the plateau rule: training stops at the first epoch, not before epoch {PLATEAU_MIN_EPOCHS}, at "
    f"which the best validation accuracy so far has not improved by at least {PLATEAU_MIN_DELTA_EXAMPLES} "
    f"validation example for {PLATEAU_PATIENCE} consecutive epochs; at the latest at {PLATEAU_CAP_FACTOR}× the "
    f"shared recipe's epochs). The criterion: {CRITERION}. The model used: {MODEL_USED}. The selection runs once "
    "per setting on replicate 0's data (`bnmem.train.recipe`, `bnmem.study.recipes`); its recipes are recorded in "
    "study.json and shown in the report's conditions")
IDENTIFIABLE_RULE = (
    "a BN layer's γ scale is identifiable unless every path from its output to the logits reaches another BN "
    "through positively homogeneous operations only (ReLU, max-pooling, bias-free linear maps and convolutions): "
    "there, scaling its γ and β by c > 0 scales what the next BN normalizes away and leaves every logit "
    "unchanged. The rule walks the model's graph (`bnmem.models`, the identifiable-layer module) and is held "
    "against a numerical oracle: every BN layer of every registered architecture, γ and β scaled by c = 3 in "
    "float64, the logits compared at 1e-9; the decision helpers restricted to these layers are "
    "`bnmem.report.claims.identifiable`")

# Text the claim modules' plan entries share.
REPLICATE_UNIT = ("the replicate: an independent repeat of the experiment with its own data-corruption seed, "
                  "keep-matrix seed and model seeds (`replicates:` in a study; cells `<id>-r<k>`)")
REPLICATE_INTERVAL = ("Student t-interval over the replicate means (n − 1 df, at every n): at 95% for "
                      "'reproduced' and 'direction only', at 1 − 0.05/k over the claim's k deciding settings for "
                      "'contradicted'. With one "
                      "replicate: the t-interval over its seeds, which are independent models given the data "
                      "(conditional on one corruption draw, and said so). One pair in all: no interval, so "
                      "inconclusive")
# Plan 5.0, claims 1 and 2: how the baseline is read at the BN model's progress.
MATCHED_PROGRESS = (
    "Matched clean-training progress: for a BN checkpoint t with clean-subset training accuracy a = clean_BN(t), "
    "the no-norm model is read at t' = the first (fractional) epoch its clean training accuracy curve reaches a, "
    "linearly interpolated between its recorded epochs. A BN checkpoint whose clean accuracy the baseline never "
    "reaches in its run, or had already passed at its first recorded epoch (the crossing was not measured), is "
    "left out: the grid is the range of progress both models reach.")
# A rule plan 6.0 kept: its verdict under the previous plan is the current one.
UNCHANGED = f"the same rule (unchanged in plan {PLAN_VERSION})"
GRADED = ("reproduced if the interval lies above 0; contradicted if it lies below 0; inconclusive otherwise "
          "(the paper states no magnitude, so there is no 'direction only')")
WHY_T = ("a mean over few independent units: the t-interval has its nominal coverage at every n for "
         "normal-ish units, where the percentile bootstrap covers 0.88 at n = 10")

# --- the claim registry ----------------------------------------------------------------------------------------
# The package whose modules declare the claims: each of its modules that defines ``CLAIMS`` (a tuple of
# ClaimPlan) is a claim module, which also holds the claim's rule (``evaluate(run)``). It sits in the report
# layer, beside the code that reads runs; this module finds it at run time and imports none of it statically, so
# the lenses (below the report) can read the constants above. A claim module reads no PLAN at import time.
CLAIMS_PACKAGE = "bnmem.report.claims"


def claim_order(cid: str) -> tuple[int, str]:
    """The paper's order of a claim id: its number, then its letter ('3a' < '3c' < '4' < '10')."""
    m = re.match(r"(\d+)(.*)", cid)
    return (int(m.group(1)), m.group(2)) if m else (1 << 30, cid)


@lru_cache(maxsize=None)
def claim_modules() -> tuple[ModuleType, ...]:
    """Every claim module of :data:`CLAIMS_PACKAGE` (a module declaring ``CLAIMS``), in the paper's order."""
    package = importlib.import_module(CLAIMS_PACKAGE)
    found = []
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{CLAIMS_PACKAGE}.{info.name}")
        if getattr(module, "CLAIMS", None):
            found.append(module)
    return tuple(sorted(found, key=lambda m: claim_order(m.CLAIMS[0].id)))


class _Plans(MutableMapping[str, ClaimPlan]):
    """Claim id -> its :class:`ClaimPlan`, in the paper's order, read from the claim modules on first use (a test
    may replace an entry: the plan's text is rendered from this mapping)."""

    def __init__(self) -> None:
        self._plans: dict[str, ClaimPlan] | None = None

    def _all(self) -> dict[str, ClaimPlan]:
        if self._plans is None:
            plans: dict[str, ClaimPlan] = {}
            for module in claim_modules():
                for p in module.CLAIMS:
                    if p.id in plans:
                        raise ValueError(f"claim {p.id} is declared twice ({module.__name__})")
                    plans[p.id] = p
            self._plans = {cid: plans[cid] for cid in sorted(plans, key=claim_order)}
        return self._plans

    def __getitem__(self, cid: str) -> ClaimPlan:
        return self._all()[cid]

    def __setitem__(self, cid: str, plan: ClaimPlan) -> None:
        self._all()[cid] = plan

    def __delitem__(self, cid: str) -> None:
        del self._all()[cid]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())

    def __repr__(self) -> str:
        return f"PLAN({list(self)})"


class _Planning(Mapping[str, tuple[Endpoint, ...]]):
    """Claim id -> the endpoints its "reproduced" needs (:attr:`ClaimPlan.planning`), for the claims that have
    any: a view of :data:`PLAN`."""

    def __getitem__(self, cid: str) -> tuple[Endpoint, ...]:
        eps = PLAN[cid].planning
        if not eps:
            raise KeyError(cid)
        return eps

    def __iter__(self) -> Iterator[str]:
        return (cid for cid, p in PLAN.items() if p.planning)

    def __len__(self) -> int:
        return sum(1 for _ in self)


# Every claim of the plan, in the paper's order (from the claim modules).
PLAN: MutableMapping[str, ClaimPlan] = _Plans()
# Claim id -> the endpoints its "reproduced" needs, in every deciding setting (intersection–union). A claim
# without endpoints (5a, a derivation check; 3c, beyond the paper) has no power. The planning effects are the
# paper's magnitudes where it states one, else a declared smallest effect of interest (declared before any power
# was computed, and not moved since). The planning SDs (used only without a pilot run) are the largest SD of
# replicate means the demo showed per claim (its 3 replicates; plan 4.0's code on the demo's stage-1 results,
# LiRA unfinished): seen data, which is why a pilot's own spreads replace them. Plan 5.0 re-derived claim 7's for
# its new statistic; claims 1 and 2's still describe plan 4.0's same-epoch statistics (the demo's
# matched-progress spreads were not computed when 5.0 was written: a design without a pilot says so, and any
# pilot replaces them).
PLANNING: Mapping[str, tuple[Endpoint, ...]] = _Planning()


def refresh_claims() -> None:
    """Find the claim modules again (a module added to :data:`CLAIMS_PACKAGE` after the first look: a test's)."""
    claim_modules.cache_clear()
    PLAN._plans = None  # type: ignore[attr-defined]


def reproduced_level() -> float:
    """The level of the interval that decides "reproduced" (plan 4.0: 95%, no adjustment: an
    intersection–union test over the settings is valid at α)."""
    return LEVEL


def _planning_section() -> list[str]:
    lines = [
        "## Power and planning effects",
        "",
        f"A design's power is the chance that the rule reads *reproduced* when the truth is the planning effect "
        f"below, with the interval at {reproduced_level():.0%}. A claim measured in several settings needs every "
        f"one to pass, so its power is the product of theirs (exact for independent settings, a lower bound "
        f"otherwise). `bnmem design` computes it prospectively, before any data decide: against the declared "
        f"planning effect, with each setting's SD the declared planning SD or, given a pilot run, the one-sided "
        f"{PILOT_SD_BOUND:.0%} upper confidence bound on the pilot's SD, s·sqrt((n − 1)/χ²_{{{1 - PILOT_SD_BOUND:.2f}, "
        f"n−1}}) (a 3-replicate SD is uncertain by a factor of about 4 either way). Plan 5.0: a report shows no "
        f"power figure beside a decided row (reproduced, contradicted, larger or smaller than the paper): power "
        f"describes a design, not a result, and mixing a declared effect with a 2-df spread beside a verdict "
        f"misled (issue 36: 'reproduced' beside 'power 0.00'). An undecided row (inconclusive, direction only) "
        f"gives the smallest true effect its achieved n could have detected with {POWER_TARGET:.0%} power at the "
        f"spread it observed (claims decided by one one-sided t-test: 1, 2, 3a, 3b, 7), and the replicates "
        f"{POWER_TARGET:.0%} power at the planning effect would need; an *inconclusive* row whose power is below "
        f"{UNDERPOWERED_BELOW:.0%} says so (*underpowered*): it says nothing about the paper. An observed SD of 0 "
        "is an observed spread, never the declared one. The planning effects (declared with plan 4.0, issue 26, "
        "after the demo's results had been seen) are the paper's magnitudes or smallest effects of interest, never "
        "the demo's estimates; the planning SDs are the demo's spreads (only a design without a pilot uses them).",
        "",
    ]
    for cid, eps in PLANNING.items():
        lines += [f"- **{cid}**: " + " ".join(e.text() for e in eps)]
    return lines + [""]


def _statuses_section() -> list[str]:
    return [
        "## Statuses",
        "",
        "Every status is decided on the interval, never on the mean alone:",
        "",
        "- **reproduced**: the interval lies above the null on the paper's side and, where the paper states a "
        "minimum magnitude, at or above that minimum; where the paper predicts a band (claim 5b), inside it;",
        "- **direction only**: the interval lies above the null on the paper's side but reaches below the paper's "
        "stated minimum (or fails another stated condition, e.g. claim 6's cost margin);",
        "- **inconclusive**: the interval includes the null, or there is no valid interval (a single pair; one "
        "replicate of LiRA without a model-level jackknife);",
        "- **contradicted**: the interval lies below the null (the other side), or wholly outside a predicted "
        "band (claim 5b: an interval straddling an edge of the band is inconclusive);",
        "- **not run**: nothing measured it.",
        "",
        "Where the paper states a range (claims 3a/3b: 3–5 points), plan 5.0 puts the magnitude in the status:",
        "",
        "- **larger than the paper**: the interval lies wholly above the paper's range (its lower end above the "
        "range's upper end): the paper's minimum is cleared and its upper end refuted;",
        "- **smaller than the paper**: the interval lies above the null but wholly below the paper's stated "
        "minimum: the direction holds and the stated magnitude is refuted (an interval straddling the minimum "
        "stays *direction only*).",
        "",
        "A row shows its least supportive setting in this order: contradicted, smaller than the paper, "
        "inconclusive, direction only, larger than the paper, reproduced ('smaller' refutes a stated magnitude "
        "with an interval, so it ranks below 'inconclusive', which shows nothing; 'larger' clears the stated "
        "minimum, so it ranks above 'direction only'). One setting decides 'larger' or 'smaller' for the row, "
        "so, like 'contradicted', they are tested at 1 − 0.05/k. In the report's colours: reproduced green, "
        "larger than the paper olive, direction only amber, smaller than the paper orange, inconclusive blue, "
        "contradicted red.",
        "",
        "Where the paper states a magnitude, **vs paper** says whether the interval lies *below* the paper's "
        "range, overlaps it (*within*) or lies *above* it: a description, not a verdict.",
        "",
        "## Intervals and multiplicity",
        "",
        f"Means get a Student t-interval at every n ({LEVEL:.0%}; the percentile bootstrap is shown, never "
        "deciding: at n = 10 it covers about 0.88 for a nominal 0.95); claim 4 combines one-sided per-layer "
        "t-tests by a partial-conjunction test and shows the pivotal layer's bounds (its plan entry says why). A claim measured in k "
        "settings (each setting × corrupted subset, and for claim 2 each gradient definition) shows its least "
        "supportive one. Its row reads 'reproduced' (or 'direction only') only if every deciding setting does: "
        "an intersection–union test, whose false-positive rate is at most that of one setting whatever their "
        f"dependence, so each setting is tested at {LEVEL:.0%} with no adjustment (a Bonferroni adjustment there "
        "only costs power: claim 3a at n = 3, 0.52 with it against 0.85 without). Its row reads 'contradicted' "
        "if any one setting does: a union of k tests, so each setting is tested for 'contradicted' at "
        f"1 − {FAMILY_ALPHA:g}/k (Bonferroni), which keeps the chance of a false 'contradicted' row at "
        f"{FAMILY_ALPHA / 2:.1%} whatever their dependence. An interval shown at a level other than "
        f"{LEVEL:.0%} is one that was tested for 'contradicted' (or 'larger' / 'smaller than the paper'). Ties: "
        "contradicted, then smaller than the paper, inconclusive, direction only, larger than the paper, reproduced; "
        "among equals the smallest lower bound. The baseline is the model without normalization "
        "(`none`); other norms are shown but do not decide. The toy model's frozen-statistics identity (5a) is a "
        "derivation check (*check passed* / *check failed*), never evidence.",
        "",
    ]


def _general_sections() -> list[str]:
    return [
        "## Unit of replication",
        "",
        "A replicate is an independent repeat of an experiment: its own data-corruption seed, keep-matrix seed "
        "and model seeds (a study's `replicates: R`; cells `<id>-r<k>`). The report groups cells whose conditions "
        "are equal except the replicate into one setting. Intervals are over replicate means. Inside one "
        "replicate, models trained with different seeds are independent given the data, so with a single "
        "replicate the interval is over seeds and is stated to be conditional on one corruption draw. LiRA "
        "targets of one replicate share reference models and data: they are never treated as independent.",
        "",
        "## The question, its estimands and the paper's protocol (plan 6.0)",
        "",
        "The paper concludes that practitioners should weigh BN's optimization benefits against its privacy "
        "costs. The question this plan answers is therefore what BN costs in memorization and leakage at the "
        "same utility, each arm trained as well as it can be: the default recipe of a study, of `bnmem design` "
        f"and of the demo is {OWN_RECIPE}. The paper's protocol (one shared recipe for both arms, compared at "
        f"the same epochs) is a named secondary analysis, '{PAPERS_PROTOCOL}'; in a run that trains every norm "
        "with one shared recipe it is the primary's own number, and the report says so. Every claim declares "
        "one primary estimand before any data of a confirmatory run (what is held fixed when BN is compared "
        "with the baseline), with its reason from that question; where the choice is a judgement the claim's "
        f"entry says so. Claims 4 and 7 are decided on {IDENTIFIABLE_LAYERS} (rule: {IDENTIFIABLE_RULE}); the "
        "other layers are described, never deciding.",
        "",
        "## Robustness panel",
        "",
        "For each claim the report re-decides the verdict under the alternative analysis choices listed below "
        "and the co-verdicts. Analyses with the same numbers (e.g. the last checkpoint and the checkpoint it is) "
        "are counted once under all their names. Analyses the plan calls invalid (seeds pooled across replicates; "
        "claim 2's analyses using checkpoints after the fit; claim 4's t-interval) are shown and not counted. Agreement is counted twice: on direction (the interval's side of the null) "
        "and, for claims with a stated magnitude, on the status itself. Until the report reads the per-norm recipe "
        "as the primary (the recipe module's wiring), a setting run with a recipe other than the paper's shared "
        "one is a robustness variant of every claim it measures: shown as `recipe <name>`, never deciding. Plan "
        "6.0 names each row by the estimand it holds fixed (same epoch, matched clean progress, "
        "matched test accuracy, matched corrupted-subset fit, at convergence, the paper's protocol, each attack: "
        "online and offline LiRA, RMIA): summary.csv has one row per claim for its verdict (`role` verdict, its "
        "primary `estimand`) and one per panel row (`role` robustness), and an estimand the run did not measure "
        f"reads 'not run'. When, in one deciding setting, two counted analyses lie on opposite sides of the null "
        f"(one on the paper's side, one contradicted), each interval excluding it, the row says '{DEPENDS}' and "
        "names them; the primary still decides the verdict and the headline.",
        "",
        "## Preregistration",
        "",
        "`bnmem plan` prints this document and the SHA-256 of its full text (every rule, threshold, checkpoint "
        "and interval). `bnmem run` records the plan version and hash in study.json before its first job; the "
        "report's headline says whether the plan that decides is the one recorded, and if not shows the recorded "
        "version and decides under the current plan. Recording the hash proves only that the rules did not move "
        "during the run: training is deterministic, so rerunning data and seeds whose results were seen adds no "
        "fresh evidence. A run is therefore called **confirmatory** only when its seeds could not have been seen "
        f"when the plan was written: `bnmem run --confirmatory` derives every seed from the plan's hash and records "
        f"them under `{CONFIRMATORY_KEY}` in study.json, and the report checks that the recorded hash is the plan "
        "that decides. Every other run is **exploratory**, and a run of a study whose results were seen while "
        f"this plan was written ({', '.join(SEEN_STUDIES)}) says, in full, in the headline, summary.md and "
        f"summary.csv: \"{EXPLORATORY_SEEN}\".",
        "",
        "A seed derived from a hash can be re-rolled by changing what is hashed: one character of the plan, or of "
        "the code that decides. From plan 5.0 a confirmatory run therefore (i) derives its seeds from the plan's "
        "hash *and* the hash of the deciding source (`bnmem.provenance.DECIDING_SOURCES`: the claim modules "
        "`report/claims/`, `stats.py`, this plan's modules (`analysis_plan.py`, `claim_spec.py`, "
        "`plan_history.py`), and the measurement modules the claims read: "
        "`measure/`, the lenses, the toy model `theory/`, `attacks/`; SHA-256 over each file's relative path, "
        "length and bytes in path order), so the deciding code cannot be changed under seeds already drawn; "
        "(ii) is refused, in one line, outside a git checkout and on a modified one (tracked files changed, or "
        "untracked files under `src/` or `studies/`), so its plan, code and seeds come from a commit, which "
        "study.json records with the source hash and the start time; (iii) appends every start, and every "
        "resume of the same run directory, to the attempts log `docs/confirmatory-attempts.jsonl` before its "
        "first job (time, study name and file hash, plan version and hash, source hash, commit, run directory, "
        "executor and workers), a file kept beside this plan and committed with the project, which may only be "
        "appended to (a checkout whose log lost committed lines is refused); and (iv) names in its report "
        "(summary.md, the HTML page's first lines) how many confirmatory starts of the same study under the same "
        "plan the log holds and which one this run is, and whether the deciding source is still the one its "
        "seeds came from. This prevents quiet re-rolls: a re-roll by editing the plan or the code is a commit, "
        "and an attempt on this checkout is a line of the log that the report counts. It does not prevent an "
        "attempt run on another checkout whose log line was never committed, a run on a fork, or a log edited "
        "in a commit of its own (visible in the history, not to the report); the log is as complete as the "
        "commits it travels with, and a reader should ask for the repository's history with the report.",
        "",
    ]


def render_markdown() -> str:
    """The plan as ``docs/analysis-plan.md`` (its SHA-256 is :func:`plan_sha256`)."""
    lines = [
        "# Analysis plan",
        "",
        f"Plan version **{PLAN_VERSION}** (previous: {PREVIOUS_VERSION}). The report prints this version and every "
        "claim's verdict under the previous plan's rule too. Generated from `bnmem.analysis_plan` (edit the "
        "module, then regenerate with `bnmem plan --markdown-only > docs/analysis-plan.md`).",
        "",
        *_statuses_section(),
        *_general_sections(),
        *_planning_section(),
        "## Claims",
        "",
    ]
    for p in PLAN.values():
        lines += [f"### {p.id}. {p.title}", "", f"*{p.kind}*; measured by the `{p.lens}` lens.", ""]
        rows = [("paper", p.paper)]
        if p.estimand:
            rows.append(("primary estimand", f"{p.estimand}: {p.estimand_why}"))
        if p.panel:
            rows.append(("estimand panel", "; ".join(label for label, _ in p.panel)))
        rows += [("metric", p.metric), ("checkpoints", p.checkpoints),
                ("statistic", p.statistic), ("unit of replication", p.unit), ("interval", p.interval),
                ("thresholds", p.thresholds), ("rule", p.rule), ("why", p.why)]
        if p.measurable:
            rows.append(("not measured yet", p.measurable))
        if p.coverdicts:
            rows.append(("own verdicts", "; ".join(p.coverdicts)))
        if p.alternatives:
            rows.append(("robustness panel", "; ".join(p.alternatives)))
        rows.append((f"rule under plan {PREVIOUS_VERSION}", p.previous_rule))
        lines += ["| | |", "|---|---|"] + [f"| {k} | {v.replace('|', '/')} |" for k, v in rows] + [""]
    lines += ["## Changelog", ""]
    for c in CHANGELOG:
        flag = f" **Adopted after seeing results** ({c.seen})." if c.after_seeing_data else ""
        lines.append(f"- **{c.version}** (claims {', '.join(c.claims)}): {c.what} Why: {c.why}.{flag}")
    for version, issue, points in reversed(REVIEWS):
        lines += ["", f"## How plan {version} answers the review (issue {issue})", ""]
        lines += [f"{n}. {text}." for n, text in points]
    return "\n".join(lines) + "\n"


def plan_sha256() -> str:
    """SHA-256 (hex) of the plan's full text, :func:`render_markdown` in UTF-8."""
    return hashlib.sha256(render_markdown().encode("utf-8")).hexdigest()


def plan_record() -> dict[str, str]:
    """What a run records before its first job: ``{"version", "sha256"}``."""
    return {"version": PLAN_VERSION, "sha256": plan_sha256()}
