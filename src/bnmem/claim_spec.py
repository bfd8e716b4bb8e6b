"""What a claim module declares (``CLAIMS`` in :data:`bnmem.analysis_plan.CLAIMS_PACKAGE`): each claim's
plan entry (:class:`ClaimPlan`: its rule in words, and why), the endpoints its design is sized for
(:class:`Endpoint`, with the tests :mod:`bnmem.power` computes the power of), how its number is shown
(:class:`Display`), its forest-plot panel (:class:`Axis`) and how `bnmem design` lays it out in a study
(:class:`Design`). Pure declarations: :mod:`bnmem.analysis_plan` assembles and renders them."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Display:
    """How a claim's number is shown (the page, summary.md, the forest plot, `bnmem compare`); summary.csv keeps
    the plan's unit.

    Attributes:
        value_format: the format of the shown number (after ``scale``).
        scale, suffix: a factor and a unit word (claim 3: AUC differences in points, as the paper states them).
        bounds: the range the quantity can take (a fraction's interval is clipped to it).
    """

    value_format: str = "{:+.3f}"
    scale: float = 1.0
    suffix: str = ""
    bounds: tuple[float, float] = (-math.inf, math.inf)


@dataclass(frozen=True)
class Axis:
    """A claim's panel of the report's forest plot: the x-axis label, the null (or threshold, or for 5b the
    prediction) and its name; ``per_coverdict``: its deciding settings get one row per co-verdict (claim 3: per
    attack), its robustness variants the plan's own analysis only."""

    label: str
    null: float = 0.0
    null_label: str = "no effect"
    per_coverdict: bool = False


# Which of a study's settings decide a claim (`bnmem design`): its corrupted settings, its clean ones, every one,
# or one per study (the toy model, its seeds the unit).
CORRUPTED, CLEAN, EVERY_SETTING, ONCE_PER_STUDY = "corrupted", "clean", "all", "study"


@dataclass(frozen=True)
class Design:
    """How `bnmem design` lays a claim out in a study (its power is computed per deciding setting).

    Attributes:
        settings: :data:`CORRUPTED`, :data:`CLEAN`, :data:`EVERY_SETTING` or :data:`ONCE_PER_STUDY`.
        tests: the tests each setting must pass, from the options of the claim's lens (claim 2: one per gradient
            definition); None: one.
        per_layer: the power simulation needs the architecture's BN layer count (claim 4).
        held_out_selection: without nested selection one replicate selects and is not evaluated (claim 6).
    """

    settings: str = CORRUPTED
    tests: Callable[[dict[str, Any]], int] | None = None
    per_layer: bool = False
    held_out_selection: bool = False


# --- design: the test each claim's rule is, and the effect its design must detect -------------------------
# Tests (bnmem.power computes each one's power; bnmem.report.power reads the declarations below).
TEST_ABOVE = "above"  # one-sided t: the interval's lower end above a threshold (the null, or the paper's minimum)
TEST_BELOW = "below"  # one-sided t: the interval's upper end below a margin (non-inferiority)
TEST_BAND = "band"  # equivalence: the whole interval inside a band
TEST_EXACT = "exact"  # the rule's own decision on discrete outcomes, simulated from a planning model
TEST_LAYERS = "layers"  # claim 4: the partial-conjunction test over L layers, computed through the rule
POWER_TARGET = 0.8
# Plan 5.0: `bnmem design --pilot` sizes a study on this one-sided upper confidence bound of each pilot SD
# (s·sqrt((n − 1)/χ²_{0.20, n−1})): a 3-replicate SD is uncertain by a factor of ~4 either way, so its point
# value would size the study on luck.
PILOT_SD_BOUND = 0.8
UNDERPOWERED_BELOW = 0.5
PAPER_MINIMUM = "the paper's stated minimum"
PAPER_UPPER = "the upper end of the paper's range"


@dataclass(frozen=True)
class Endpoint:
    """One number a claim's "reproduced" requires, the test on it, and the effect the design is sized for.

    Attributes:
        name: "" for the claim's decisive number; else the :attr:`Evaluation.spreads` key (claim 6's "drop").
        test: :data:`TEST_ABOVE`, :data:`TEST_BELOW`, :data:`TEST_BAND` or :data:`TEST_EXACT`.
        effect: the planning effect (the true value the design must detect), or None for :data:`PAPER_UPPER`.
        threshold: what the interval must clear (the null, a margin), or None for :data:`PAPER_MINIMUM`.
        sd: the declared standard deviation of one unit's value (a replicate's mean), used without a pilot.
        source: "paper" (the paper's stated magnitude) or "smallest effect of interest" (declared).
        why: the reason for the planning effect and SD.
        band: the band of a :data:`TEST_BAND` endpoint.
    """

    name: str
    test: str
    effect: float | None
    threshold: float | None
    sd: float
    source: str
    why: str
    band: tuple[float, float] | None = None

    def text(self) -> str:
        """One line of docs/analysis-plan.md."""
        eff = PAPER_UPPER if self.effect is None else f"{self.effect:g}"
        if self.test == TEST_BAND:
            against = f"interval inside [{self.band[0]:g}, {self.band[1]:g}]" if self.band else "band"
        elif self.test == TEST_LAYERS:
            against = "partial-conjunction p below 0.05 for more than half of the layers"
        else:
            side = "lower end above" if self.test in (TEST_ABOVE, TEST_EXACT) else "upper end below"
            thr = PAPER_MINIMUM if self.threshold is None else f"{self.threshold:g}"
            against = f"{side} {thr}"
        what = {TEST_ABOVE: "one-sided t-test", TEST_BELOW: "one-sided t-test (non-inferiority)",
                TEST_BAND: "equivalence (the interval inside the band)",
                TEST_EXACT: "the rule's own decision on simulated discrete outcomes",
                TEST_LAYERS: "per-layer one-sided t-tests combined by the partial-conjunction test, computed "
                             "through the rule"}.get(self.test, self.test)
        return (f"{self.name or 'its number'}: {what} ({against}); planning effect {eff} ({self.source}); "
                f"planning SD of a unit {self.sd:g}. {self.why[:1].upper() + self.why[1:]}.")


@dataclass(frozen=True)
class ClaimPlan:
    """How one claim is decided.

    Attributes:
        id: claim id ("1", "2", "3a", ...).
        title: the claim as the checklist states it.
        paper: the paper's statement and number it is compared with.
        kind: "evidence", "derivation check", or :data:`BEYOND_PAPER` (a row the paper does not claim).
        lens: the lens kind that measures it.
        metric: what is measured.
        checkpoints: which epochs / checkpoints the metric uses.
        statistic: how per-unit numbers become one number.
        unit: the unit of replication.
        interval: the interval method.
        thresholds: the null, the direction, the paper's minimum and range.
        rule: the status rule in words.
        why: the justification: the paper's words, or the statistical reason.
        coverdicts: analyses that get their own verdict, shown in the claim row with their agreement.
        alternatives: the robustness panel's alternative analyses.
        previous_rule: the rule under :data:`PREVIOUS_VERSION` (its verdict is shown too).
        measurable: "" when bnmem measures the primary statistic; else why the row reads "not run".
        paper_range: the paper's stated range of the claim's number at an outlier mix (None: clean), where
            the paper states one (the forest plot shades it; a planning effect given as the paper's reads it).
        planning: the endpoints its "reproduced" needs, in every deciding setting (intersection–union), with
            the effect its design is sized for; none: no power (a derivation check, a row beyond the paper).
        display: how its number is shown.
        axis: its forest-plot panel (None: the claim's metric, null 0).
        design: how `bnmem design` lays it out in a study.
        estimand: plan 6.0: the primary estimand's label (what is held fixed when BN is compared with the
            baseline), one of the panel's labels (:mod:`bnmem.analysis_plan`'s ``SAME_EPOCH`` ...).
        estimand_why: what the primary estimand holds fixed and why, from the paper's question (and where the
            choice is a judgement, that it is one).
        panel: the robustness panel's estimands: (label, the text of the rule's analysis that measures it, "" for
            none yet), shown beside the primary; one the run did not measure reads "not run".
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
    why: str
    coverdicts: tuple[str, ...] = ()
    alternatives: tuple[str, ...] = ()
    previous_rule: str = ""
    measurable: str = ""
    estimand: str = ""
    estimand_why: str = ""
    panel: tuple[tuple[str, str], ...] = ()

    paper_range: Callable[[float | None], tuple[float, float] | None] | None = None
    planning: tuple[Endpoint, ...] = ()
    display: Display = Display()
    axis: Axis | None = None
    design: Design = Design()
