"""The grading core of the claims: statuses, intervals, the least supportive setting, multiplicity.

Every claim module (:mod:`bnmem.report.claims`) turns lens results into
:class:`Evaluation` objects (one per setting it can be measured in) and leaves
the decisions to this module:

* :func:`grade` and :func:`grade_band` (plan 4.0; :func:`grade_band_v3` and
  :func:`grade_v2` are plans 3.0 and 2.0, shown next to them) turn an estimate
  with its interval into a status;
* :func:`vs_paper` describes the interval against the paper's range;
* :func:`estimate` makes the interval at the level :func:`at_level` sets. A claim
  with k deciding settings is evaluated twice, at 95% and at 1 − α/k
  (:func:`bnmem.analysis_plan.family_level`), and :func:`combine` keeps, for every
  evaluation and analysis, the 95% verdict unless either pass reads
  'contradicted': a row is reproduced only if every setting is (an
  intersection–union test, valid at α without adjustment), while a single
  setting can make it contradicted (a union, so α/k);
* :class:`Claim` picks the least supportive deciding evaluation and counts the
  robustness panel's agreement.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator, Sequence

from bnmem.analysis_plan import (
    CHECK_FAILED, CHECK_PASSED, CONTRADICTED, DEPENDS, DIRECTION_ONLY, INCONCLUSIVE, LARGER, LEVEL, NOT_RUN, PLAN,
    PLAN_VERSION, REPRODUCED, SAME_AS_PRIMARY, SMALLER, VS_ABOVE, VS_BELOW, VS_WITHIN,
)
from bnmem.stats import SMALL_N, PairedDiff, difference_stats, replicated_difference

# Least supportive first: a claim's row shows its weakest deciding evaluation. Plan 5.0's magnitude statuses
# (claims 3a/3b): "smaller than the paper" refutes the paper's stated magnitude with an interval, so it ranks
# between contradicted (which refutes the direction) and inconclusive (which shows nothing); "larger than the
# paper" clears the paper's minimum but refutes its upper end, so it ranks between direction only and reproduced.
RANK = {CONTRADICTED: 0, CHECK_FAILED: 0, SMALLER: 0.5, INCONCLUSIVE: 1, DIRECTION_ONLY: 2, LARGER: 2.5,
        REPRODUCED: 3, CHECK_PASSED: 3}
# The status a magnitude status falls back to where its family-level interval does not confirm it.
MAGNITUDE_FALLBACK = {LARGER: REPRODUCED, SMALLER: DIRECTION_ONLY}
PLAN_ANALYSIS = "plan"

_LEVEL: ContextVar[float] = ContextVar("bnmem_claim_level", default=LEVEL)


def level() -> float:
    """The interval level of the pass being evaluated (95%, or 1 − α/k for 'contradicted')."""
    return _LEVEL.get()


@contextmanager
def at_level(value: float) -> Iterator[None]:
    """Evaluate a claim with every interval at ``value`` (its family level)."""
    token = _LEVEL.set(value)
    try:
        yield
    finally:
        _LEVEL.reset(token)


def estimate(groups: Sequence[Sequence[float]], within_unit: str, within_independent: bool) -> PairedDiff:
    """The plan's estimate: replicates as the unit, t-interval at every n, at :func:`level`."""
    return replicated_difference(groups, within_unit, within_independent, level=level())


def estimate_v2(groups: Sequence[Sequence[float]], within_unit: str, within_independent: bool) -> PairedDiff:
    """Plan 2.0's estimate (shown as the previous verdict): 95%, the bootstrap from 10 units, no adjustment."""
    return replicated_difference(groups, within_unit, within_independent, level=LEVEL, bootstrap_from=SMALL_N)


def stats_of(values: Sequence[float], unit: str) -> PairedDiff:
    """The mean of independent units with its t-interval at :func:`level`."""
    return difference_stats(values, unit=unit, level=level())


def _usable(est: PairedDiff | None) -> bool:
    return est is not None and math.isfinite(est.mean)


def grade(est: PairedDiff | None, null: float = 0.0, minimum: float | None = None) -> str:
    """The status of an estimate whose expected direction is up (plans 3.0 and 4.0).

    Args:
        est: the estimate with its interval.
        null: the value of no effect.
        minimum: the paper's stated minimum magnitude, or None when it states none.

    Returns:
        reproduced (interval at or above the minimum, else above the null) / direction only (above the null,
        reaching below the minimum) / inconclusive (includes the null, or no interval) / contradicted (below
        the null) / not run.
    """
    if not _usable(est):
        return NOT_RUN
    assert est is not None
    if est.ci_low is None or est.ci_high is None:
        return INCONCLUSIVE
    lo, hi = est.ci_low, est.ci_high
    if lo > null:
        return REPRODUCED if minimum is None or lo >= minimum else DIRECTION_ONLY
    if hi < null:
        return CONTRADICTED
    return INCONCLUSIVE


def grade_magnitude(est: PairedDiff | None, paper: tuple[float, float]) -> str:
    """Plan 5.0's status of an estimate the paper states a range for (claims 3a/3b): :func:`grade` against the
    paper's minimum ``paper[0]``, and "larger than the paper" where the interval lies wholly above the range
    (lower end above ``paper[1]``), "smaller than the paper" where it lies above 0 but wholly below the minimum
    (an interval straddling the minimum stays "direction only")."""
    status = grade(est, minimum=paper[0])
    if status == REPRODUCED and est is not None and est.ci_low is not None and est.ci_low > paper[1]:
        return LARGER
    if status == DIRECTION_ONLY and est is not None and est.ci_high is not None and est.ci_high < paper[0]:
        return SMALLER
    return status


def grade_band(est: PairedDiff | None, band: tuple[float, float]) -> str:
    """Plan 4.0's status of an estimate the paper predicts to lie in ``band`` (claim 5b's slope 1 ± 10%): an
    equivalence test. Reproduced if the interval lies inside the band (closed); contradicted if it lies wholly
    outside it (either side: a slope of 0 and a slope of 2 both refute a prediction of 1); inconclusive only
    when it straddles an edge of the band, or without an interval."""
    if not _usable(est):
        return NOT_RUN
    assert est is not None
    if est.ci_low is None or est.ci_high is None:
        return INCONCLUSIVE
    if band[0] <= est.ci_low and est.ci_high <= band[1]:
        return REPRODUCED
    if est.ci_high < band[0] or est.ci_low > band[1]:
        return CONTRADICTED
    return INCONCLUSIVE


def grade_band_v3(est: PairedDiff | None, band: tuple[float, float], null: float = 0.0) -> str:
    """Plan 3.0's band status (shown as the previous verdict): reproduced inside the band, direction only if
    above the null but not inside it, inconclusive whenever the interval includes the null, even when it lies
    wholly outside the band."""
    status = grade(est, null)
    if status != REPRODUCED:
        return status
    assert est is not None and est.ci_low is not None and est.ci_high is not None
    return REPRODUCED if band[0] <= est.ci_low and est.ci_high <= band[1] else DIRECTION_ONLY


def grade_v2(est: PairedDiff | None, null: float = 0.0, paper: tuple[float, float] | None = None) -> str:
    """Plan 2.0's status: above the null and overlapping the paper's range (when it states one)."""
    status = grade(est, null)
    return DIRECTION_ONLY if status == REPRODUCED and vs_paper(est, paper) in (VS_BELOW, VS_ABOVE) else status


def vs_paper(est: PairedDiff | None, paper: tuple[float, float] | None) -> str:
    """"below" / "within" / "above": the interval against the paper's range ("within" = overlaps it);
    "" without a range or an interval. A description, not a verdict."""
    if paper is None or est is None or est.ci_low is None or est.ci_high is None:
        return ""
    if est.ci_high < paper[0]:
        return VS_BELOW
    if est.ci_low > paper[1]:
        return VS_ABOVE
    return VS_WITHIN


def direction(status: str) -> str | None:
    """The side of the null a status says the effect lies on: "+", "−", "0" (undecided), None (not run)."""
    if status in (REPRODUCED, LARGER, DIRECTION_ONLY, SMALLER, CHECK_PASSED):
        return "+"
    if status in (CONTRADICTED, CHECK_FAILED):
        return "−"
    return None if status == NOT_RUN else "0"


@dataclass
class Analysis:
    """One analysis choice's verdict (a co-verdict, or a row of the robustness panel).

    ``valid`` False: an analysis the plan calls invalid, shown but never counted in the agreement.
    ``n`` and ``sd``: the number of units the interval is over and their standard deviation (the spread
    :mod:`bnmem.report.power` computes a design's power from; 0 / None when unknown).
    """

    name: str
    value: float | None
    ci_low: float | None
    ci_high: float | None
    status: str
    method: str = ""
    note: str = ""
    valid: bool = True
    vs_paper: str = ""
    n: int = 0
    sd: float | None = None

    @classmethod
    def of(cls, name: str, est: PairedDiff | None, status: str, note: str = "", valid: bool = True,
           paper: tuple[float, float] | None = None) -> "Analysis":
        if est is None:
            return cls(name, None, None, None, status, "", note, valid)
        v = est.mean if math.isfinite(est.mean) else None
        notes = "; ".join(x for x in (note, est.note) if x)
        return cls(name, v, est.ci_low, est.ci_high, status, est.method, notes, valid, vs_paper(est, paper),
                   est.n, est.sd)

    def same_numbers(self, other: "Analysis") -> bool:
        """Whether two analyses are the same analysis under two names (equal value and interval)."""
        def close(a: float | None, b: float | None) -> bool:
            return (a is None and b is None) or (a is not None and b is not None and math.isclose(a, b, rel_tol=1e-12,
                                                                                                   abs_tol=1e-15))
        return close(self.value, other.value) and close(self.ci_low, other.ci_low) and close(self.ci_high,
                                                                                             other.ci_high)


@dataclass
class PreviousVerdict:
    """The verdict of one evaluation under the previous plan version's rule."""

    where: str
    value: float | None
    status: str


@dataclass
class Evaluation(Analysis):
    """One measurement of a claim in one setting: the plan's analysis (``name`` is where it was measured,
    also :attr:`where`) and its alternatives.

    Attributes:
        conditions: the conditions of the number.
        deciding: False for comparisons shown for information only (e.g. BN vs group norm).
        coverdicts: analyses with their own verdict (claim 3's attacks, claim 2's definitions...).
        analyses: the robustness panel's alternatives.
        primary: the name of the co-verdict that is the plan's own analysis (not counted twice).
        variant: set for a robustness variant of the whole experiment (e.g. "recipe per-norm"): it never
            decides and appears in the robustness panel under this name.
        paper: the paper's range (low, high) the number is compared with, or None.
        tests: how many tests this evaluation adds to the claim's family k (claim 2: 2 definitions).
        level: the level of the interval shown (95%, or 1 − α/k where 'contradicted' was tested).
        spreads: (units, their SD) of a second endpoint the status also tests, by the endpoint's name in
            :data:`bnmem.analysis_plan.PLANNING` (claim 6's test-accuracy "drop"); the primary's are n and sd.
    """

    conditions: dict[str, Any] = field(default_factory=dict)
    deciding: bool = True
    coverdicts: list[Analysis] = field(default_factory=list)
    analyses: list[Analysis] = field(default_factory=list)
    primary: str = ""
    variant: str = ""
    paper: tuple[float, float] | None = None
    tests: int = 1
    level: float = LEVEL
    spreads: dict[str, tuple[int, float | None]] = field(default_factory=dict)

    @property
    def where(self) -> str:
        """What was compared, e.g. "digits · lenet · label noise 0.05 (3 replicates): batch − none"."""
        return self.name

    @classmethod
    def from_analysis(cls, where: str, a: Analysis, conditions: dict[str, Any], deciding: bool = True,
                      coverdicts: list[Analysis] | None = None, analyses: list[Analysis] | None = None,
                      primary: str = "", paper: tuple[float, float] | None = None) -> "Evaluation":
        return cls(where, a.value, a.ci_low, a.ci_high, a.status, a.method, a.note, a.valid, a.vs_paper, a.n, a.sd,
                   conditions=conditions, deciding=deciding, coverdicts=coverdicts or [], analyses=analyses or [],
                   primary=primary, paper=paper)

    def as_analysis(self, name: str = PLAN_ANALYSIS) -> Analysis:
        return Analysis(name, self.value, self.ci_low, self.ci_high, self.status, self.method, self.note,
                        self.valid, self.vs_paper, self.n, self.sd)


def weakest(items: Sequence[Any]) -> Any:
    """The least supportive of evaluations/analyses (status rank, then the smallest lower bound)."""

    def key(e: Any) -> tuple[int, float]:
        low = e.ci_low if e.ci_low is not None else e.value
        return RANK.get(e.status, 1), (math.inf if low is None or not math.isfinite(low) else low)

    return min(items, key=key)


def not_run(where: str, why: str, cond: dict[str, Any] | None = None) -> Evaluation:
    """An evaluation that could not be made, with the reason."""
    return Evaluation(where, None, None, None, NOT_RUN, "", why, conditions=cond or {})


def merge_identical(items: list[Analysis]) -> list[Analysis]:
    """Analyses with the same numbers counted once, under all their names joined by ' = '."""
    out: list[Analysis] = []
    for a in items:
        twin = next((b for b in out if b.status == a.status and b.valid == a.valid and b.same_numbers(a)
                     and a.value is not None), None)
        if twin is None:
            out.append(Analysis(a.name, a.value, a.ci_low, a.ci_high, a.status, a.method, a.note, a.valid,
                                a.vs_paper, a.n, a.sd))
        else:
            twin.name = f"{twin.name} = {a.name}"
    return out


def _pick(at_95: Analysis, at_family: Analysis) -> bool:
    """Whether the family-level analysis decides: 'contradicted' is tested at 1 − α/k, and so are plan 5.0's
    'larger'/'smaller than the paper' where the family-level interval confirms them (one setting decides each)."""
    if at_95.status in MAGNITUDE_FALLBACK:
        return at_family.status == at_95.status
    return CONTRADICTED in (at_95.status, at_family.status)


def _unconfirmed(a: Analysis) -> Analysis:
    """A 95% analysis whose magnitude status its family-level twin does not confirm: the status its 95%
    interval supports without it (larger → reproduced, smaller → direction only)."""
    if a.status in MAGNITUDE_FALLBACK:
        a.status = MAGNITUDE_FALLBACK[a.status]
    return a


def _combine_list(at_95: list[Analysis], at_family: list[Analysis]) -> list[Analysis]:
    fam = {a.name: a for a in at_family}
    return [fam[a.name] if a.name in fam and _pick(a, fam[a.name]) else _unconfirmed(a) if a.name in fam else a
            for a in at_95]


def combine(at_95: "Claim", at_family: "Claim", family: float) -> "Claim":
    """Plan 4.0's multiplicity: ``at_95`` (every interval at 95%) with each evaluation, co-verdict and
    alternative replaced by its ``at_family`` twin (every interval at ``family`` = 1 − α/k) where either reads
    'contradicted' (plan 5.0: or where both read the same magnitude status; a 95% magnitude status the family
    level does not confirm falls back to reproduced / direction only). So 'reproduced' (every deciding setting must pass: an intersection–union test) is decided
    at 95%, and 'contradicted' (one setting suffices: a union of k tests) at 1 − α/k."""
    out = []
    fams = at_family.evaluations
    for i, a in enumerate(at_95.evaluations):
        f = fams[i] if i < len(fams) and fams[i].where == a.where else a  # the same code: the same evaluations
        e = f if _pick(a, f) else _unconfirmed(a) if f is not a else a
        if e is not a:
            e.level = family
        e.coverdicts = _combine_list(a.coverdicts, f.coverdicts)
        e.analyses = _combine_list(a.analyses, f.analyses)
        out.append(e)
    at_95.evaluations = out
    at_95.level = family
    return at_95


# The keys of :meth:`Claim.row` (stable; new keys are appended, never renamed).
ROW_KEYS = ("id", "title", "kind", "status", "effect", "ci_low", "ci_high", "level", "k", "paper_low", "paper_high",
            "vs_paper", "setting", "attack", "agreement_direction", "agreement_magnitude", "previous_status",
            "plan_version", "method", "note", "conditions")


@dataclass
class Claim:
    """A claim of the paper, its plan, its evaluations and the previous rule's verdicts."""

    id: str
    title: str
    metric: str
    rule: str
    section: str  # anchor of the figure section that shows the evidence
    value_format: str = "{:+.3f}"  # of the displayed number (after ``scale``)
    evaluations: list[Evaluation] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    kind: str = "evidence"
    previous_rule: str = ""
    previous: list[PreviousVerdict] = field(default_factory=list)
    level: float = LEVEL  # the level 'contradicted' is tested at: 1 − α/k
    # Display only (values, intervals and summary.csv keep the plan's unit): a factor and a unit word (claim 3:
    # AUC differences shown in points, as the paper states them), and the range the quantity can take (a
    # fraction's interval is shown inside [0, 1]).
    scale: float = 1.0
    suffix: str = ""
    bounds: tuple[float, float] = (-math.inf, math.inf)

    def deciding(self) -> list[Evaluation]:
        """The deciding evaluations that ran."""
        return [e for e in self.evaluations if e.deciding and e.status != NOT_RUN]

    def family_size(self) -> int:
        """k: the tests of the deciding evaluations that ran ('contradicted' is tested at 1 − α/k)."""
        return sum(e.tests for e in self.deciding())

    @property
    def decisive(self) -> Evaluation | None:
        """The evaluation the claim's row shows: the least supportive deciding one."""
        ran = self.deciding()
        return weakest(ran) if ran else None

    @property
    def status(self) -> str:
        d = self.decisive
        return NOT_RUN if d is None else d.status

    @property
    def previous_status(self) -> str:
        """The verdict under plan :data:`PREVIOUS_VERSION`: the least supportive of its verdicts."""
        ran = [p for p in self.previous if p.status != NOT_RUN]
        return min(ran, key=lambda p: RANK.get(p.status, 1)).status if ran else NOT_RUN

    @property
    def vs_paper(self) -> str:
        d = self.decisive
        return d.vs_paper if d else ""

    def _aggregate(self, pick: Callable[[Evaluation], list[Analysis]]) -> list[Analysis]:
        """Per analysis name, the least supportive over the deciding evaluations (first-seen order); valid only
        if it is valid in every setting (e.g. claim 2's checkpoint after the fit in one setting)."""
        by_name: dict[str, list[Analysis]] = {}
        for e in self.deciding():
            for a in pick(e):
                by_name.setdefault(a.name, []).append(a)
        out = []
        for items in by_name.values():
            ran = [a for a in items if a.status != NOT_RUN]
            pick_ = weakest(ran) if ran else items[0]
            valid = all(a.valid for a in items)
            out.append(pick_ if valid == pick_.valid else replace(pick_, valid=valid))
        return out

    def coverdicts(self) -> list[Analysis]:
        """Each co-verdict (e.g. each attack), aggregated over settings."""
        return self._aggregate(lambda e: e.coverdicts)

    def robustness(self) -> list[Analysis]:
        """The robustness panel: the plan's verdict, each other co-verdict and each alternative, aggregated;
        analyses with the same numbers merged into one row."""
        plan = self._aggregate(lambda e: [e.as_analysis()])
        seen = {PLAN_ANALYSIS} | {e.primary for e in self.evaluations if e.primary}
        rest = []
        variants: dict[str, list[Analysis]] = {}
        for e in self.evaluations:
            if e.variant and e.status != NOT_RUN:
                variants.setdefault(e.variant, []).append(e.as_analysis(e.variant))
        for a in self.coverdicts() + self._aggregate(lambda e: e.analyses) + [weakest(v) for v in variants.values()]:
            if a.name not in seen:
                seen.add(a.name)
                rest.append(a)
        return merge_identical(plan + rest)

    def _is_primary(self, a: Analysis) -> bool:
        return a.name == PLAN_ANALYSIS or a.name.startswith(PLAN_ANALYSIS + " = ")

    def estimand_of(self, a: Analysis) -> str:
        """The estimand an analysis holds fixed, as the claim's plan entry names it (else the analysis's name)."""
        plan = PLAN.get(self.id)
        if self._is_primary(a):
            return plan.estimand if plan is not None and plan.estimand else "primary"
        declared = plan.panel if plan is not None else ()
        return next((lab for lab, text in declared if text and text != SAME_AS_PRIMARY and text in a.name), a.name)

    def panel(self) -> list[tuple[str, Analysis]]:
        """Plan 6.0's robustness panel by estimand: (the estimand it holds fixed, its analysis). The primary first
        (the plan's declared estimand), then every analysis of :meth:`robustness` under the estimand the claim's
        plan entry names for it (else its own name), a declared estimand that is the primary's own number in this
        run (``SAME_AS_PRIMARY``: the paper's protocol where every arm trained with one shared recipe) as the
        primary's numbers, and every declared estimand the run did not measure as 'not run'."""
        plan = PLAN.get(self.id)
        declared = plan.panel if plan is not None else ()
        primary_label = (plan.estimand if plan is not None and plan.estimand else "primary")
        rows = [(self.estimand_of(a), a) for a in self.robustness()]
        # A declared estimand the run measured as a recipe variant (the paper's protocol beside fair arms:
        # mark_variants names it "recipe <estimand>") is that variant's row, not the primary's number.
        declared_labels = {lab for lab, _ in declared}
        rows = [(lab.removeprefix("recipe ") if lab.removeprefix("recipe ") in declared_labels else lab, a)
                for lab, a in rows]
        primary = next((a for lab, a in rows if lab == primary_label), None)
        shown = {lab for lab, _ in rows}
        for lab, text in declared:
            if lab in shown:
                continue
            merged = next(((lab2, a) for lab2, a in rows if text and text != SAME_AS_PRIMARY and text in a.name), None)
            if merged is not None:  # measured, with the same numbers as another row (merged into it)
                rows.append((lab, replace(merged[1], name=lab, note=f"the same numbers as '{merged[0]}'")))
            elif text == SAME_AS_PRIMARY and primary is not None:
                rows.append((lab, replace(primary, name=lab, note="the primary's own number in this run")))
            else:
                rows.append((lab, Analysis(lab, None, None, None, NOT_RUN, "", "not measured by this run")))
        return rows

    def held_fixed(self) -> str:
        """Plan 6.0: '' or "depends on what is held fixed: <setting>: A (+) vs B (−)" when, in one deciding
        setting, two counted analyses (valid, run: the primary, a co-verdict or an alternative) lie on opposite
        sides of the null, each interval excluding it (one on the paper's side, one contradicted). The primary
        still decides the verdict."""
        plan = PLAN.get(self.id)
        if plan is None or not plan.panel:
            return ""  # a derivation check or the toy model: no estimand choice
        parts = []
        for e in self.deciding():
            items = [e.as_analysis()] + list(e.coverdicts) + list(e.analyses)
            ran = [a for a in items if a.valid and a.status != NOT_RUN]
            plus = [a for a in ran if direction(a.status) == "+"]
            minus = [a for a in ran if direction(a.status) == "−"]
            if plus and minus:
                parts.append(f"{e.where}: " + ", ".join(dict.fromkeys(self.estimand_of(a) for a in plus))
                             + " (+) vs " + ", ".join(dict.fromkeys(self.estimand_of(a) for a in minus)) + " (−)")
        return f"{DEPENDS}: " + "; ".join(parts) if parts else ""

    def label(self, a: Analysis) -> str:
        """An analysis's name for display: the plan's own is 'plan 3.0 (<the co-verdict it is>)'."""
        if a.name != PLAN_ANALYSIS and not a.name.startswith(PLAN_ANALYSIS + " = "):
            return a.name + ("" if a.valid else " (invalid: shown, not counted)")
        primary = next((e.primary for e in self.evaluations if e.primary), "")
        return f"plan {PLAN_VERSION}" + (f" ({primary})" if primary else "") + a.name[len(PLAN_ANALYSIS):]

    def _counted(self) -> list[Analysis]:
        return [a for a in self.robustness() if a.status != NOT_RUN and a.valid]

    def agreement(self) -> tuple[int, int]:
        """(k, n): of the n valid distinct analyses that ran, k agree with the verdict's direction."""
        ran = self._counted()
        return sum(direction(a.status) == direction(self.status) for a in ran), len(ran)

    def magnitude_agreement(self) -> tuple[int, int] | None:
        """(k, n) agreeing on the status itself, for claims whose paper states a magnitude; else None."""
        if not any(e.paper for e in self.deciding()):
            return None
        ran = self._counted()
        return sum(a.status == self.status for a in ran), len(ran)

    def agreement_text(self) -> str:
        k, n = self.agreement()
        if n == 0:
            return "—"
        parts = [f"{k} of {n} analyses agree on direction"]
        mag = self.magnitude_agreement()
        if mag:
            parts.append(f"{mag[0]} of {mag[1]} on the status")
        cov = self.coverdicts()
        if cov:
            same = len({a.status for a in cov if a.status != NOT_RUN}) <= 1
            parts.append(("agree: " if same else "disagree: ") + "; ".join(f"{a.name} {a.status}" for a in cov))
        return " · ".join(parts)

    def _number(self, v: float | None) -> str:
        if v is None or (isinstance(v, float) and not math.isfinite(v)):
            return "—"
        return self.value_format.format(v * self.scale)

    def fmt(self, v: float | None) -> str:
        """A number in this claim's display format and unit; '—' for none."""
        text = self._number(v)
        return text if text == "—" or not self.suffix else f"{text} {self.suffix}"

    def ci_text(self, low: float | None, high: float | None) -> str:
        """An interval in the display format, clipped to the range the quantity can take; '—' for none."""
        if low is None or high is None:
            return "—"
        lo, hi = max(low, self.bounds[0]), min(high, self.bounds[1])
        return f"[{self._number(lo)}, {self._number(hi)}]" + (f" {self.suffix}" if self.suffix else "")

    def effect_text(self, v: float | None, low: float | None, high: float | None) -> str:
        """'value [low, high] unit' (the unit said once); '—' for no value."""
        if self._number(v) == "—":
            return "—"
        if low is None or high is None:
            return self.fmt(v)
        return f"{self._number(v)} {self.ci_text(low, high)}"

    def not_run_reason(self) -> str:
        """Why a claim has no deciding evaluation."""
        reasons = [e.note for e in self.evaluations if e.status == NOT_RUN and e.note]
        return "; ".join(dict.fromkeys(reasons)) or "the lens that measures it is not in this run"

    def row(self) -> dict[str, Any]:
        """The claim's row as plain data (the checklist, summary.csv and the forest plot read it).

        Keys (:data:`ROW_KEYS`; stable, new ones appended): ``id``, ``title``, ``kind`` ("evidence" or
        "derivation check"); ``status`` (the current plan); ``effect`` (the decisive evaluation's estimate, None
        when not run) with ``ci_low``/``ci_high`` (its interval, None without one) at ``level`` (95%, or the
        family level 1 − α/k over ``k`` deciding tests where 'contradicted' was tested); ``paper_low``/``paper_high`` (the paper's range,
        None without a stated magnitude) and ``vs_paper`` ("below"/"within"/"above"/""); ``setting`` (where the
        decisive number was measured, or why not run); ``attack`` (claim 3's deciding attack, else "");
        ``agreement_direction`` and ``agreement_magnitude`` ("k of n" or ""); ``previous_status`` (the verdict
        under the previous plan); ``plan_version``; ``method`` (the interval method); ``note``; ``conditions`` (dict).
        """
        d = self.decisive
        mag = self.magnitude_agreement()
        k, n = self.agreement()
        paper = d.paper if d else None
        return {
            "id": self.id, "title": self.title, "kind": self.kind, "status": self.status,
            "effect": d.value if d else None, "ci_low": d.ci_low if d else None, "ci_high": d.ci_high if d else None,
            "level": d.level if d else LEVEL, "k": self.family_size(),
            "paper_low": paper[0] if paper else None, "paper_high": paper[1] if paper else None,
            "vs_paper": self.vs_paper, "setting": d.where if d else self.not_run_reason(),
            "attack": d.conditions.get("attack", "") if d else "",
            "agreement_direction": f"{k} of {n}" if n else "", "agreement_magnitude": f"{mag[0]} of {mag[1]}"
            if mag and mag[1] else "", "previous_status": self.previous_status, "plan_version": PLAN_VERSION,
            "method": d.method if d else "", "note": d.note if d else "", "conditions": dict(d.conditions) if d else {},
        }


def first_sentence(text: str) -> str:
    """The text up to its first sentence end (". " or a final "."), never cutting inside a number such as
    "1 − 0.05/k" (plan 4.0's ``split('.')`` cut it to "1 − 0")."""
    end = text.find(". ")
    head = text if end < 0 else text[:end]
    return head[:-1] if head.endswith(".") else head


def new_claim(cid: str, section: str, value_format: str | None = None, **display: Any) -> Claim:
    """An empty claim with the plan's title, metric and rule, shown as its plan entry's display says
    (:attr:`bnmem.analysis_plan.ClaimPlan.display`; ``value_format`` and ``display``: ``scale``, ``suffix``,
    ``bounds`` override it)."""
    p = PLAN[cid]
    shown = p.display
    display = {"scale": shown.scale, "suffix": shown.suffix, "bounds": shown.bounds, **display}
    value_format = value_format or shown.value_format
    metric = f"{p.metric}; {p.statistic}"
    rule = f"{p.rule} [unit: {p.unit.split(':')[0]}; interval: {first_sentence(p.interval)}]"
    return Claim(cid, p.title, metric, rule, section, value_format, kind=p.kind, previous_rule=p.previous_rule,
                 **display)
