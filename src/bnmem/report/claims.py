"""The paper's claims, each decided by the declared analysis plan (:mod:`bnmem.analysis_plan`).

A claim is evaluated once per setting it can be measured in (a setting groups
the replicate cells whose conditions differ only in the replicate; each BN vs
baseline pair and corrupted subset is its own evaluation). Each evaluation gets
a graded status from its interval (see the plan), its co-verdicts (e.g. each
attack of claim 3) and a robustness panel: the verdict under each alternative
analysis choice the plan lists. The claim's row shows the least supportive
deciding evaluation, "k of n analyses agree", and the verdict under the
previous plan version's rule.

The baseline of a BN comparison is the model without normalization (``none``);
other norms (group, layer) are evaluated and shown but do not decide, unless
``none`` is absent. Intervals: :mod:`bnmem.stats`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from bnmem.analysis_plan import (
    BN, CHECK_FAILED, CHECK_PASSED, CONTRADICTED, DIRECTION_ONLY, FIT_LEVEL, GRAD_DEFINITIONS, GS_MAJORITY,
    GS_MIN_MODELS, GS_SIGMA, INCONCLUSIVE, LENS_GAMMA_SIGMA, LENS_GRADNORMS, LENS_LIRA, LENS_MEMORIZE,
    LENS_MITIGATE, LIRA_ATTACKS, LIRA_PRIMARY_ATTACK, LIRA_SUBSET, MITIGATE_CUT, MITIGATE_TEST_DROP, NOT_RUN,
    PLAN, PLAN_VERSION, PREVIOUS_NOT_REPRODUCED, PREVIOUS_REPRODUCED, PREVIOUS_VERSION, REPRODUCED, STATUSES,
    THEORY_TOL, lira_range,
)
from bnmem.report.results import (
    Setting, baselines, corrupted_subsets, finite, fmt, gradnorm_checkpoints, layer_rows,
    layer_type, lira_jackknife, lira_norms, lira_summary, mitigate_at, mitigate_key, mitigate_seeds,
    mitigate_variants, norms_of, outlier_mix, settings_of, variant_lira,
)
from bnmem.report.rundata import CellOutput as Cell, LensOutput as Lens, RunData
from bnmem.stats import (
    PairedDiff, difference_stats, jackknife_interval, median_interval, pair_by_key, replicated_difference,
)

__all__ = ["Analysis", "Claim", "Evaluation", "STATUSES", "evaluate_claims", "grade", "conditions_text"]

# Least supportive first: a claim's row shows its weakest deciding evaluation.
RANK = {CONTRADICTED: 0, CHECK_FAILED: 0, INCONCLUSIVE: 1, DIRECTION_ONLY: 2, REPRODUCED: 3, CHECK_PASSED: 3}
PLAN_ANALYSIS = "plan"


def grade(est: PairedDiff | None, null: float = 0.0, paper: tuple[float, float] | None = None) -> str:
    """The plan's graded status of an estimate whose expected direction is up.

    Args:
        est: the estimate with its interval.
        null: the value of no effect.
        paper: the paper's range (low, high), or None when it states no magnitude.

    Returns:
        reproduced / direction only / inconclusive / contradicted / not run (see
        :mod:`bnmem.analysis_plan`): the interval, never the mean alone, decides.
    """
    if est is None or not math.isfinite(est.mean):
        return NOT_RUN
    if est.ci_low is None or est.ci_high is None:
        return INCONCLUSIVE
    lo, hi = est.ci_low, est.ci_high
    if lo > null:
        if paper is not None and (hi < paper[0] or lo > paper[1]):
            return DIRECTION_ONLY
        return REPRODUCED
    if hi < null:
        return CONTRADICTED
    return INCONCLUSIVE


@dataclass
class Analysis:
    """One analysis choice's verdict (a co-verdict, or a row of the robustness panel)."""

    name: str
    value: float | None
    ci_low: float | None
    ci_high: float | None
    status: str
    method: str = ""
    note: str = ""

    @classmethod
    def of(cls, name: str, est: PairedDiff | None, status: str, note: str = "") -> "Analysis":
        if est is None:
            return cls(name, None, None, None, status, "", note)
        v = est.mean if math.isfinite(est.mean) else None
        notes = "; ".join(x for x in (note, est.note) if x)
        return cls(name, v, est.ci_low, est.ci_high, status, est.method, notes)


@dataclass
class Evaluation(Analysis):
    """One measurement of a claim in one setting: the plan's analysis (``name`` is where it was measured,
    also as :attr:`where`) and its alternatives.

    Attributes:
        conditions: the conditions of the number.
        deciding: False for comparisons shown for information only (e.g. BN vs group norm).
        coverdicts: analyses with their own verdict (claim 3's attacks, claim 2's definitions...).
        analyses: the robustness panel's alternatives.
        primary: the name of the co-verdict that is the plan's own analysis (not counted twice).
        variant: set for a robustness variant of the whole experiment (e.g. "recipe per-norm"): it never
            decides and appears in the robustness panel under this name.
    """

    conditions: dict[str, Any] = field(default_factory=dict)
    deciding: bool = True
    coverdicts: list[Analysis] = field(default_factory=list)
    analyses: list[Analysis] = field(default_factory=list)
    primary: str = ""
    variant: str = ""

    @property
    def where(self) -> str:
        """What was compared, e.g. "digits · lenet · label noise 0.05 (3 replicates): batch − none"."""
        return self.name

    @classmethod
    def from_analysis(cls, where: str, a: Analysis, conditions: dict[str, Any], deciding: bool = True,
           coverdicts: list[Analysis] | None = None, analyses: list[Analysis] | None = None,
           primary: str = "") -> "Evaluation":
        return cls(where, a.value, a.ci_low, a.ci_high, a.status, a.method, a.note, conditions, deciding,
                   coverdicts or [], analyses or [], primary)

    def as_analysis(self, name: str = PLAN_ANALYSIS) -> Analysis:
        return Analysis(name, self.value, self.ci_low, self.ci_high, self.status, self.method, self.note)


@dataclass
class PreviousVerdict:
    """The verdict of one cell under the previous plan version's rule."""

    where: str
    value: float | None
    status: str


def _weakest(items: Sequence[Any]) -> Any:
    """The least supportive of evaluations/analyses (status rank, then the smallest lower bound)."""

    def key(e: Any) -> tuple[int, float]:
        low = e.ci_low if e.ci_low is not None else e.value
        return RANK.get(e.status, 1), (math.inf if low is None or not math.isfinite(low) else low)

    return min(items, key=key)


@dataclass
class Claim:
    """A claim of the paper, its plan, its evaluations and the previous rule's verdicts."""

    id: str
    title: str
    metric: str
    rule: str
    section: str  # anchor of the figure section that shows the evidence
    value_format: str = "{:+.3f}"
    evaluations: list[Evaluation] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    kind: str = "evidence"
    previous_rule: str = ""
    previous: list[PreviousVerdict] = field(default_factory=list)

    @property
    def decisive(self) -> Evaluation | None:
        """The evaluation the claim's row shows: the least supportive deciding one."""
        ran = [e for e in self.evaluations if e.deciding and e.status != NOT_RUN]
        return _weakest(ran) if ran else None

    @property
    def status(self) -> str:
        d = self.decisive
        return NOT_RUN if d is None else d.status

    @property
    def previous_status(self) -> str:
        """The verdict under plan :data:`PREVIOUS_VERSION` (reproduced only if every cell passed)."""
        ran = [p for p in self.previous if p.status != NOT_RUN]
        if not ran:
            return NOT_RUN
        return PREVIOUS_NOT_REPRODUCED if any(p.status == PREVIOUS_NOT_REPRODUCED for p in ran) \
            else PREVIOUS_REPRODUCED

    def _aggregate(self, pick: Callable[[Evaluation], list[Analysis]]) -> list[Analysis]:
        """Per analysis name, the least supportive over the deciding evaluations (first-seen order)."""
        by_name: dict[str, list[Analysis]] = {}
        for e in self.evaluations:
            if e.deciding and e.status != NOT_RUN:
                for a in pick(e):
                    by_name.setdefault(a.name, []).append(a)
        out = []
        for name, items in by_name.items():
            ran = [a for a in items if a.status != NOT_RUN]
            out.append(_weakest(ran) if ran else items[0])
        return out

    def coverdicts(self) -> list[Analysis]:
        """Each co-verdict (e.g. each attack), aggregated over settings."""
        return self._aggregate(lambda e: e.coverdicts)

    def robustness(self) -> list[Analysis]:
        """The robustness panel: the plan's verdict, each other co-verdict and each alternative, aggregated."""
        plan = self._aggregate(lambda e: [e.as_analysis()])
        seen = {PLAN_ANALYSIS} | {e.primary for e in self.evaluations if e.primary}
        rest = []
        variants: dict[str, list[Analysis]] = {}
        for e in self.evaluations:
            if e.variant and e.status != NOT_RUN:
                variants.setdefault(e.variant, []).append(e.as_analysis(e.variant))
        for a in self.coverdicts() + self._aggregate(lambda e: e.analyses) + [_weakest(v) for v in variants.values()]:
            if a.name not in seen:
                seen.add(a.name)
                rest.append(a)
        return plan + rest

    def label(self, a: Analysis) -> str:
        """An analysis's name for display: the plan's own is 'plan 2.0 (<the co-verdict it is>)'."""
        if a.name != PLAN_ANALYSIS:
            return a.name
        primary = next((e.primary for e in self.evaluations if e.primary), "")
        return f"plan {PLAN_VERSION}" + (f" ({primary})" if primary else "")

    def agreement(self) -> tuple[int, int]:
        """(k, n): of the n analyses that ran (plan, co-verdicts, alternatives), k agree with the verdict."""
        ran = [a for a in self.robustness() if a.status != NOT_RUN]
        return sum(a.status == self.status for a in ran), len(ran)

    def agreement_text(self) -> str:
        k, n = self.agreement()
        if n == 0:
            return "—"
        parts = [f"{k} of {n} analyses agree"]
        cov = self.coverdicts()
        if cov:
            same = len({a.status for a in cov if a.status != NOT_RUN}) <= 1
            parts.append(("agree: " if same else "disagree: ") + "; ".join(f"{a.name} {a.status}" for a in cov))
        return " · ".join(parts)

    def fmt(self, v: float | None) -> str:
        """A number in this claim's format; '—' for none."""
        if v is None or (isinstance(v, float) and not math.isfinite(v)):
            return "—"
        return self.value_format.format(v)

    def not_run_reason(self) -> str:
        """Why a claim has no deciding evaluation."""
        reasons = [e.note for e in self.evaluations if e.status == NOT_RUN and e.note]
        return "; ".join(dict.fromkeys(reasons)) or "the lens that measures it is not in this run"


def _new_claim(cid: str, section: str, value_format: str = "{:+.3f}") -> Claim:
    p = PLAN[cid]
    metric = f"{p.metric}; {p.statistic}"
    rule = f"{p.rule} [unit: {p.unit.split(':')[0]}; interval: {p.interval.split('.')[0]}]"
    return Claim(cid, p.title, metric, rule, section, value_format, kind=p.kind, previous_rule=p.previous_rule)


# ----------------------------------------------------------------- helpers


def _nanmean(values: Any) -> float:
    arr = np.array([np.nan if finite(v) is None else float(v) for v in (values or [])], dtype=float)
    return float(np.nanmean(arr)) if np.isfinite(arr).any() else math.nan


def _log(v: Any) -> float:
    f = finite(v)
    return math.nan if f is None or f <= 0 else math.log(f)


def _not_run(where: str, why: str, cond: dict[str, Any] | None = None) -> Evaluation:
    return Evaluation(where, None, None, None, NOT_RUN, "", why, cond or {})


# Conditions shown next to a number (a lens's full conditions are in the report's conditions section).
DISPLAY_KEYS = (
    "dataset", "arch", "norms", "seeds", "replicates", "label_noise", "ood", "ood_source", "epochs",
    "bn_mode_at_query", "shadow_models", "views", "keep_seed", "attack", "subset", "gradient_definition",
    "bn_mode", "checkpoints", "regularizer_lambda", "lambda_selection", "gs_tau", "sigma", "layers", "gs_reg",
    "model", "steps", "lr", "n_outliers", "outlier_kind", "seed", "recipe",
)
# A setting run with a recipe other than the paper's shared one (e.g. per-norm selected learning rates)
# is a robustness variant: shown in the panel, never deciding.
SHARED_RECIPE = "shared"


def _cond(setting: Setting, lens: Lens, **extra: Any) -> dict[str, Any]:
    """The conditions of one number: the setting's, the lens's own, and what the claim adds."""
    c = {**setting.first.conditions, **lens.conditions, "replicates": setting.replicates, **extra}
    if len(setting.cells) > 1:
        c.pop("seeds", None)  # differ per replicate; the cells table lists them
    return {k: c[k] for k in DISPLAY_KEYS if c.get(k) is not None}


def _where(setting: Setting, tail: str = "") -> str:
    n = len(setting.cells)
    head = f"{setting.label} ({n} replicate{'s' if n != 1 else ''})"
    return f"{head}: {tail}" if tail else head


def _pooled(groups: list[np.ndarray], unit: str) -> PairedDiff:
    """All pairs of all replicates as if independent (a robustness alternative only)."""
    return difference_stats(np.concatenate(groups) if groups else [], unit=unit)


def _previous_paired(where: str, diffs: Sequence[float], bar: float = 0.0,
                     mean_bar: float | None = None) -> PreviousVerdict:
    """Plan 1.1: interval over the cell's pairs above ``bar`` (a single pair: its value), mean ≥ mean_bar."""
    pd = difference_stats(diffs)
    if not math.isfinite(pd.mean):
        return PreviousVerdict(where, None, NOT_RUN)
    low = pd.ci_low if pd.ci_low is not None else pd.mean
    ok = low > bar and (mean_bar is None or pd.mean >= mean_bar)
    return PreviousVerdict(where, pd.mean, PREVIOUS_REPRODUCED if ok else PREVIOUS_NOT_REPRODUCED)


def _range_note(est: PairedDiff, paper: tuple[float, float] | None, scale: float = 1.0, unit: str = "") -> str:
    if paper is None or est.ci_low is None:
        return ""
    lo, hi = est.ci_low * scale, est.ci_high * scale
    pr = f"{paper[0] * scale:g}–{paper[1] * scale:g}{unit}"
    if hi < paper[0] * scale:
        return f"interval [{lo:+.1f}, {hi:+.1f}]{unit} lies below the paper's {pr}"
    if lo > paper[1] * scale:
        return f"interval [{lo:+.1f}, {hi:+.1f}]{unit} lies above the paper's {pr}"
    return f"interval [{lo:+.1f}, {hi:+.1f}]{unit} overlaps the paper's {pr}"


# ----------------------------------------------------------------- claim 1


def _has_per_seed(v: Any) -> bool:
    return isinstance(v, dict) and "per_seed" in v


def _seed_diffs(lens: Lens, other: str, value: Callable[[dict[str, Any]], float]) -> np.ndarray:
    a = {s: value(c) for s, c in lens.data[BN]["per_seed"].items()}
    b = {s: value(c) for s, c in lens.data[other]["per_seed"].items()}
    _, av, bv = pair_by_key(a, b)
    return av - bv


def _bn_comparison(claim: Claim, setting: Any, lens: Lens, has_data: Callable[[Any], bool]
                   ) -> tuple[list[str] | None, list[tuple[str, str]]]:
    """The norms and corrupted subsets a BN-vs-other claim compares in one setting, or (None, []) after
    recording why it cannot (BN or a second norm missing, or clean data)."""
    norms = norms_of(lens, has_data)
    subsets = corrupted_subsets(lens)
    if BN not in norms or len(norms) < 2:
        claim.evaluations.append(_not_run(_where(setting), f"norms {norms}: needs batch and another norm"))
        return None, []
    if not subsets:
        claim.evaluations.append(_not_run(_where(setting), "no corrupted subset in this setting (clean data)"))
        return None, []
    return norms, subsets


def claim_memorization(run: RunData) -> Claim:
    """Claim 1: BN fits corrupted/OOD samples faster and further."""
    claim = _new_claim("1", "memorization")
    for setting in settings_of(run, LENS_MEMORIZE):
        reps = setting.lenses(LENS_MEMORIZE)
        cell0, lens0 = reps[0]
        norms, subsets = _bn_comparison(claim, setting, lens0, _has_per_seed)
        if norms is None:
            continue
        for other, deciding in baselines(norms):
            for sub, sub_name in subsets:
                key = f"{sub}_acc"
                ok = [(c, lens) for c, lens in reps if other in lens.data and BN in lens.data]
                area = [_seed_diffs(lens, other, lambda r: _nanmean(r.get(key))) for _, lens in ok]
                final = [_seed_diffs(lens, other, lambda r: _last(r.get(key))) for _, lens in ok]
                est = replicated_difference(area, "seeds", True)
                fit = []
                for n in (BN, other):
                    fin = [finite((lens.data[n].get("final") or {}).get(key)) for _, lens in ok]
                    fit.append(f"{n}: final {sub} acc {fmt(_nanmean(fin))}")
                primary = Analysis.of(PLAN_ANALYSIS, est, grade(est), "; ".join(fit))
                f_est = replicated_difference(final, "seeds", True)
                pooled = _pooled(area, "seeds")
                alts = [Analysis.of("final-epoch accuracy", f_est, grade(f_est)),
                        Analysis.of("seeds pooled across replicates", pooled, grade(pooled))]
                tail = f"{BN} − {other}, {sub_name}"
                claim.evaluations.append(Evaluation.from_analysis(_where(setting, tail), primary, _cond(setting, lens0),
                                                       deciding, analyses=alts))
                if deciding:
                    for c, lens in ok:
                        claim.previous.append(_previous_paired(f"{c.describe()} [{c.id}], {sub_name}",
                                                               _seed_diffs(lens, other,
                                                                           lambda r: _nanmean(r.get(key)))))
    return claim


def _last(values: Any) -> float:
    vals = [finite(v) for v in (values or [])]
    vals = [v for v in vals if v is not None]
    return vals[-1] if vals else math.nan


# ----------------------------------------------------------------- claim 2


def memorization_phase(epochs: list[int], total: int | None) -> list[int]:
    """Plan 1.1's checkpoints: after epoch 1 and up to half of training (all after epoch 1 if none)."""
    after_first = [e for e in epochs if e > 1]
    if total:
        early = [e for e in after_first if e <= total / 2]
        if early:
            return early
    return after_first or epochs


def area_under(epochs: Sequence[float], values: np.ndarray) -> np.ndarray:
    """Trapezoid area of ``values`` [..., n_checkpoints] over ``epochs``, divided by the epoch span
    (the curve's mean height); one checkpoint: its value. NaN where any checkpoint is NaN."""
    values = np.asarray(values, dtype=float)
    e = np.asarray(epochs, dtype=float)
    if e.size == 1:
        return values[..., 0]
    widths = np.diff(e)
    mids = (values[..., 1:] + values[..., :-1]) / 2
    return (mids * widths).sum(axis=-1) / (e[-1] - e[0])


def _has_checkpoints(v: Any) -> bool:
    return isinstance(v, dict) and any(isinstance(d, dict) and any(str(k).startswith("epoch_") for k in d)
                                       for d in v.values())


def _series(lens: Lens, norm: str, definition: str, epochs: list[int], field_of: Callable[[dict], float]
            ) -> dict[str, np.ndarray]:
    """seed -> values over ``epochs`` of one per-seed field."""
    ck = dict(gradnorm_checkpoints(lens.data[norm].get(definition, {})))
    out: dict[str, list[float]] = {}
    for i, e in enumerate(epochs):
        for s, rec in ((ck.get(e) or {}).get("per_seed") or {}).items():
            out.setdefault(str(s), [math.nan] * len(epochs))[i] = field_of(rec or {})
    return {s: np.array(v) for s, v in out.items()}


def _fit_curve(cell: Cell, norm: str, seed: str, key: str) -> list[float] | None:
    """Per-epoch corrupted-subset training accuracy of (norm, seed) from the cell's memorize lens
    (it trains the same models: same data, initial weights and batch order)."""
    mem = cell.lenses.get(LENS_MEMORIZE)
    if mem is None:
        return None
    rec = ((mem.data.get(norm) or {}).get("per_seed") or {}).get(seed) or {}
    vals = rec.get(key)
    return [math.nan if finite(v) is None else float(v) for v in vals] if isinstance(vals, list) else None


def _matched_fit(cell: Cell, lens: Lens, other: str, definition: str, sub: str, epochs: list[int]
                 ) -> tuple[np.ndarray, str]:
    """Per seed: BN's log ratio at its checkpoint closest to FIT_LEVEL minus the other's at its own.

    The fit level at a checkpoint is the per-seed ``<subset>_acc`` the gradnorms lens recorded there,
    else the same (norm, seed)'s memorization curve from the cell's memorize lens.
    """
    key = f"{sub}_clean_median_ratio"
    lr = {n: _series(lens, n, definition, epochs, lambda r: _log(r.get(key))) for n in (BN, other)}
    own = {n: _series(lens, n, definition, epochs, lambda r: finite(r.get(f"{sub}_acc")) or math.nan)
           for n in (BN, other)}
    diffs, picks = [], []
    for s in sorted(set(lr[BN]) & set(lr[other])):
        chosen = []
        for n in (BN, other):
            fits = own[n].get(s)
            if fits is None or not np.isfinite(fits).any():
                curve = _fit_curve(cell, n, s, f"{sub}_acc")
                if curve is None:
                    return np.array([]), (f"no fit level for {n} seed {s}: the gradnorms checkpoints do not record "
                                          f"{sub}_acc and the cell's memorize lens has no such curve")
                fits = np.array([curve[e - 1] if e - 1 < len(curve) else math.nan for e in epochs])
            if not np.isfinite(fits).any():
                return np.array([]), "fit levels missing"
            i = int(np.nanargmin(np.abs(fits - FIT_LEVEL)))
            chosen.append((i, fits[i]))
        diffs.append(lr[BN][s][chosen[0][0]] - lr[other][s][chosen[1][0]])
        picks.append(f"seed {s}: {BN} epoch {epochs[chosen[0][0]]} (fit {chosen[0][1]:.2f}), {other} epoch "
                     f"{epochs[chosen[1][0]]} (fit {chosen[1][1]:.2f})")
    return np.array(diffs), "; ".join(picks)


def claim_gradnorms(run: RunData) -> Claim:
    """Claim 2: corrupted samples' gradient norms shift up under BN (relative to clean ones)."""
    claim = _new_claim("2", "gradnorms", "{:+.2f}")
    for setting in settings_of(run, LENS_GRADNORMS):
        reps = setting.lenses(LENS_GRADNORMS)
        cell0, lens0 = reps[0]
        norms, subsets = _bn_comparison(claim, setting, lens0, _has_checkpoints)
        if norms is None:
            continue
        available = lens0.conditions.get("definitions") or list(lens0.data[BN])
        definitions = [d for d in GRAD_DEFINITIONS if d in available]
        if not definitions:
            claim.evaluations.append(_not_run(_where(setting), f"no eval or batch gradient definition in {available}"))
            continue
        primary_def = definitions[0]
        for other, deciding in baselines(norms):
            for sub, sub_name in subsets:
                ev = _gradnorm_evaluation(setting, reps, other, sub, sub_name, definitions, primary_def, deciding)
                claim.evaluations.append(ev)
                if deciding:
                    claim.previous += _gradnorm_previous(reps, other, sub, sub_name)
    return claim


def _gradnorm_groups(reps: list[tuple[Cell, Lens]], other: str, sub: str, definition: str
                     ) -> tuple[list[int], dict[str, list[np.ndarray]], list[str]]:
    """Checkpoints and, per statistic, one array of per-seed BN − other values per replicate."""
    key = f"{sub}_clean_median_ratio"
    first = reps[0][1]
    epochs = sorted(set(e for e, _ in gradnorm_checkpoints(first.data[BN].get(definition, {})))
                    & set(e for e, _ in gradnorm_checkpoints(first.data[other].get(definition, {}))))
    out: dict[str, list[np.ndarray]] = {"area": [], "absolute": [], **{f"epoch {e}": [] for e in epochs}}
    shown = []
    for _, lens in reps:
        if other not in lens.data or definition not in lens.data[other]:
            continue
        rel = {n: _series(lens, n, definition, epochs, lambda r: _log(r.get(key))) for n in (BN, other)}
        ab = {n: _series(lens, n, definition, epochs, lambda r: _log(r.get(f"median_{sub}"))) for n in (BN, other)}
        seeds = sorted(set(rel[BN]) & set(rel[other]))
        if not seeds:
            continue
        d = np.array([rel[BN][s] - rel[other][s] for s in seeds])  # [seeds, checkpoints]
        da = np.array([ab[BN][s] - ab[other][s] for s in seeds])
        out["area"].append(area_under(epochs, d))
        out["absolute"].append(area_under(epochs, da))
        for i, e in enumerate(epochs):
            out[f"epoch {e}"].append(d[:, i])
        shown.append(", ".join(f"ep {e}: {np.nanmean(d[:, i]):+.2f}" for i, e in enumerate(epochs)))
    return epochs, out, shown


def _gradnorm_evaluation(setting: Setting, reps: list[tuple[Cell, Lens]], other: str, sub: str, sub_name: str,
                         definitions: list[str], primary_def: str, deciding: bool) -> Evaluation:
    cov, primary, alts = [], None, []
    epochs_all: list[int] = []
    note = ""
    for d in definitions:
        epochs, groups, shown = _gradnorm_groups(reps, other, sub, d)
        est = replicated_difference(groups["area"], "seeds", True)
        a = Analysis.of(f"{d} definition", est, grade(est))
        cov.append(a)
        if d != primary_def:
            continue
        epochs_all = epochs
        note = (f"{d} definition, log {sub}/clean median-ratio difference per checkpoint (mean over seeds, per "
                f"replicate): " + " | ".join(shown))
        primary = Analysis.of(PLAN_ANALYSIS, est, grade(est), note)
        for e in epochs:
            ce = replicated_difference(groups[f"epoch {e}"], "seeds", True)
            alts.append(Analysis.of(f"checkpoint {e} only", ce, grade(ce)))
        if epochs:
            last = replicated_difference(groups[f"epoch {epochs[-1]}"], "seeds", True)
            alts.append(Analysis.of("last checkpoint", last, grade(last)))
        ab = replicated_difference(groups["absolute"], "seeds", True)
        alts.append(Analysis.of("absolute: log corrupted median", ab, grade(ab)))
        matched, picks = [], []
        for cell, lens in reps:
            m, why = _matched_fit(cell, lens, other, d, sub, epochs)
            matched.append(m)
            picks.append(why)
        mf = replicated_difference(matched, "seeds", True) if any(m.size for m in matched) else None
        alts.append(Analysis.of(f"matched fit level ({FIT_LEVEL:.0%})", mf, grade(mf), " | ".join(picks)))
        phase = memorization_phase(epochs, reps[0][1].conditions.get("epochs"))
        ph_groups = [np.nanmean(np.array([groups[f"epoch {e}"][r] for e in phase]), axis=0)
                     for r in range(len(groups["area"]))] if phase and groups["area"] else []
        ph = replicated_difference(ph_groups, "seeds", True)
        alts.append(Analysis.of(f"memorization phase {phase} (plan {PREVIOUS_VERSION})", ph, grade(ph)))
    assert primary is not None
    bn_mode = (reps[0][1].conditions.get("bn_mode") or {}).get(primary_def, primary_def)
    cond = _cond(setting, reps[0][1], gradient_definition=primary_def, bn_mode=bn_mode, checkpoints=epochs_all)
    return Evaluation.from_analysis(_where(setting, f"{BN} − {other}, {sub_name}"), primary, cond, deciding,
                                    cov, alts,
                         f"{primary_def} definition")


def _gradnorm_previous(reps: list[tuple[Cell, Lens]], other: str, sub: str, sub_name: str
                       ) -> list[PreviousVerdict]:
    """Plan 1.1 per cell: eval definition, memorization-phase checkpoints, t over seeds."""
    out = []
    key = f"{sub}_clean_median_ratio"
    for cell, lens in reps:
        defs = lens.conditions.get("definitions") or list(lens.data[BN])
        d = "eval" if "eval" in defs else defs[0]
        ck_bn = dict(gradnorm_checkpoints(lens.data[BN].get(d, {})))
        ck_ot = dict(gradnorm_checkpoints((lens.data.get(other) or {}).get(d, {})))
        epochs = memorization_phase(sorted(set(ck_bn) & set(ck_ot)), lens.conditions.get("epochs"))
        per_seed: dict[str, list[float]] = {}
        for e in epochs:
            a = {s: _log(v.get(key)) for s, v in (ck_bn[e].get("per_seed") or {}).items()}
            b = {s: _log(v.get(key)) for s, v in (ck_ot[e].get("per_seed") or {}).items()}
            seeds, av, bv = pair_by_key(a, b)
            for s, x in zip(seeds, av - bv):
                per_seed.setdefault(s, []).append(x)
        out.append(_previous_paired(f"{cell.describe()} [{cell.id}], {sub_name}",
                                    [_nanmean(v) for _, v in sorted(per_seed.items())]))
    return out


# ----------------------------------------------------------------- claim 3


# Where a lira metrics.json keeps the attacks re-run on the identity query view alone (same schema).
IDENTITY_BLOCK = "identity_only"
ATTACK_NAMES = {"online": "online LiRA", "offline": "offline LiRA", "rmia": "RMIA",
                "online_fixed_variance": "online LiRA, fixed variance"}


def _target_diffs(lens: Lens, other: str, attack: str, subset: str, block: str | None = None
                  ) -> np.ndarray | None:
    """Per-target BN − other AUC differences (``block``: a variant of the results, e.g. identity-only views,
    stored under that key of metrics.json with the same norm -> attack -> subset schema)."""
    data = lens.data if block is None else lens.data.get(block)
    if not isinstance(data, dict):
        return None
    sa, sb = lira_summary(data, BN, attack, subset), lira_summary(data, other, attack, subset)
    if sa is None or sb is None:
        return None
    pa, pb = sa.get("auc_per_target"), sb.get("auc_per_target")
    if isinstance(pa, list) and isinstance(pb, list) and len(pa) == len(pb) and pa:
        return np.array([np.nan if finite(x) is None else x for x in pa], float) - \
            np.array([np.nan if finite(x) is None else x for x in pb], float)
    ma, mb = finite(sa.get("auc")), finite(sb.get("auc"))
    return np.array([math.nan if ma is None or mb is None else ma - mb])


def _lira_estimate(reps: list[tuple[Cell, Lens]], other: str, attack: str, subset: str,
                   block: str | None = None) -> tuple[PairedDiff | None, np.ndarray | None]:
    """Replicates as the unit; one replicate: the lens's delete-one-model jackknife, else no interval."""
    groups = [g for g in (_target_diffs(lens, other, attack, subset, block) for _, lens in reps) if g is not None]
    if not groups:
        return None, None
    if len(groups) == 1 and block is None:
        jk = lira_jackknife(reps[0][1].data, other, attack, subset)
        g = groups[0][np.isfinite(groups[0])]
        if jk is not None and g.size:
            return jackknife_interval(float(g.mean()), jk["leave_one_out"], unit="shadow models"), groups[0]
    return replicated_difference(groups, "targets", False), np.concatenate(groups)


def claim_lira(run: RunData, clean: bool) -> Claim:
    """Claim 3 (a: with injected outliers; b: clean data): LiRA AUC is 3–5 points higher with BN."""
    claim = _new_claim("3b" if clean else "3a", LENS_LIRA)
    for setting in settings_of(run, LENS_LIRA):
        cell0 = setting.first
        if cell0.corrupted is None or cell0.corrupted == clean:
            if cell0.corrupted is None:
                claim.notes.append(f"{setting.label}: corruption unknown; not assigned to 3a/3b")
            continue
        reps = setting.lenses(LENS_LIRA)
        lens0 = reps[0][1]
        norms = lira_norms(lens0.data, lens0.conditions)
        if BN not in norms or len(norms) < 2:
            claim.evaluations.append(_not_run(_where(setting), f"norms {norms}: needs batch and another norm"))
            continue
        paper = lira_range(outlier_mix(cell0))
        for other, deciding in baselines(norms):
            cov, alts, primary, naive_note = [], [], None, ""
            for attack in LIRA_ATTACKS:
                est, targets = _lira_estimate(reps, other, attack, LIRA_SUBSET)
                if est is None:
                    cov.append(Analysis(ATTACK_NAMES[attack], None, None, None, NOT_RUN, "",
                                        f"no {attack} results on subset {LIRA_SUBSET!r}"))
                    continue
                a = Analysis.of(ATTACK_NAMES[attack], est, grade(est, paper=paper),
                                _range_note(est, paper, 100, " pts"))
                cov.append(a)
                if attack == LIRA_PRIMARY_ATTACK:
                    naive = difference_stats(targets, unit="targets") if targets is not None else None
                    if naive is not None and naive.ci_low is not None:
                        naive_note = (f"for comparison, an interval over the {naive.n} targets as if independent "
                                      f"would be [{naive.ci_low:+.3f}, {naive.ci_high:+.3f}] (not used: the targets "
                                      "share reference models and data)")
                    sa = [lira_summary(lens.data, BN, attack, LIRA_SUBSET) or {} for _, lens in reps]
                    sb = [lira_summary(lens.data, other, attack, LIRA_SUBSET) or {} for _, lens in reps]
                    detail = (f"AUC {BN} {fmt(_nanmean([s.get('auc') for s in sa]))} vs {other} "
                              f"{fmt(_nanmean([s.get('auc') for s in sb]))}; TPR@0.1%FPR "
                              f"{fmt(_nanmean([s.get('tpr_at_0.1pct_fpr') for s in sa]))} vs "
                              f"{fmt(_nanmean([s.get('tpr_at_0.1pct_fpr') for s in sb]))}")
                    primary = Analysis.of(PLAN_ANALYSIS, est, a.status,
                                          "; ".join(x for x in (a.note, detail, naive_note) if x))
            if primary is None:
                claim.evaluations.append(_not_run(_where(setting, f"{BN} − {other}"),
                                                  f"no {LIRA_PRIMARY_ATTACK} LiRA results on {LIRA_SUBSET!r}"))
                continue
            fv, _ = _lira_estimate(reps, other, "online_fixed_variance", LIRA_SUBSET)
            if fv is not None:
                alts.append(Analysis.of(ATTACK_NAMES["online_fixed_variance"], fv, grade(fv, paper=paper)))
            ident, _ = _lira_estimate(reps, other, LIRA_PRIMARY_ATTACK, LIRA_SUBSET, IDENTITY_BLOCK)
            if ident is not None:
                alts.append(Analysis.of("online LiRA, identity query view only", ident, grade(ident, paper=paper)))
            if not clean:
                out_est, _ = _lira_estimate(reps, other, LIRA_PRIMARY_ATTACK, "outliers")
                if out_est is not None:
                    alts.append(Analysis.of("online LiRA, outlier subset (direction only tested)", out_est,
                                            grade(out_est)))
            cond = _cond(setting, lens0, attack=f"{ATTACK_NAMES[LIRA_PRIMARY_ATTACK]} (+ offline LiRA, RMIA)",
                         subset=LIRA_SUBSET,
                         **{k: (lens0.config or {}).get(k) for k in ("shadow_models", "views")
                            if k not in lens0.conditions and k in (lens0.config or {})})
            claim.evaluations.append(Evaluation.from_analysis(_where(setting, f"{BN} − {other}"), primary, cond,
                                                              deciding,
                                                   cov, alts, ATTACK_NAMES[LIRA_PRIMARY_ATTACK]))
            if deciding:
                for c, lens in reps:
                    d = _target_diffs(lens, other, LIRA_PRIMARY_ATTACK, LIRA_SUBSET)
                    if d is not None:
                        claim.previous.append(_previous_paired(f"{c.describe()} [{c.id}]", d, 0.0, 0.03))
    return claim


# ----------------------------------------------------------------- claim 4


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
    """Seed -> fraction of BN layers whose median |γ|/σ is above 1 (plan 1.1's statistic)."""
    seeds: dict[str, list[bool]] = {}
    rows = layer_rows(data, mode)
    for r in rows:
        for s, v in (r.get("per_seed") or {}).items():
            m = finite((v or {}).get("median_ratio"))
            if m is not None:
                seeds.setdefault(str(s), []).append(m > 1.0)
    return {s: float(np.mean(v)) for s, v in seeds.items() if len(v) == len(rows)}


def median_estimate(values: Sequence[float], unit: str = "models") -> PairedDiff:
    """Median of per-model values with the distribution-free median interval (monotone in the values)."""
    x = np.array([v for v in values if finite(v) is not None], dtype=float)
    if x.size == 0:
        return difference_stats([], unit=unit)
    ci = median_interval(x)
    med = float(np.median(x))
    if ci is None:
        return PairedDiff(med, None, None, int(x.size), unit,
                          f"no interval: {x.size} {unit}, a 95% median interval needs {GS_MIN_MODELS}",
                          min=float(x.min()), max=float(x.max()),
                          note=f"only {x.size} {unit}: too few for a 95% distribution-free interval")
    return PairedDiff(med, ci[0], ci[1], int(x.size), unit,
                      f"95% distribution-free interval for the median over {x.size} {unit} (order statistics)",
                      min=float(x.min()), max=float(x.max()))


def claim_gamma_sigma(run: RunData) -> Claim:
    """Claim 4: |γ|/σ > 1 in most BN channels."""
    claim = _new_claim("4", "gamma_sigma", "{:.2f}")  # the HTML section id
    for setting in settings_of(run, LENS_GAMMA_SIGMA):
        reps = setting.lenses(LENS_GAMMA_SIGMA)
        rows0 = layer_rows(reps[0][1].data, GS_SIGMA)
        if not rows0:
            claim.evaluations.append(_not_run(_where(setting), "no per-layer γ/σ in gamma_sigma.json"))
            continue
        typed = {layer_type(r) for r in rows0}

        def per_model(mode: str, types: set[str | None]) -> list[float]:
            return [v for _, lens in reps for v in model_fractions(lens.data, mode, types).values()]

        def analysis(name: str, values: list[float]) -> Analysis:
            if not values:
                return Analysis(name, None, None, None, NOT_RUN, "", "no such layers")
            est = median_estimate(values)
            return Analysis.of(name, est, grade(est, null=GS_MAJORITY))

        all_types = {"conv", "fc", None}
        if "conv" in typed:
            decide_types, decide_name = {"conv"}, "convolutional BN layers"
            note = "convolutional BN layers decide (what the theory describes)"
        else:
            decide_types, decide_name = all_types, "all BN layers"
            note = "layer types not recorded by the lens: all BN layers together decide"
        values = per_model(GS_SIGMA, decide_types)
        est = median_estimate(values)
        rng_note = f"per-model fractions {fmt(est.min, '.2f')}–{fmt(est.max, '.2f')}" if est.min is not None else ""
        primary = Analysis.of(PLAN_ANALYSIS, est, grade(est, null=GS_MAJORITY),
                              "; ".join(x for x in (note, rng_note) if x))
        cov = [analysis("convolutional BN layers", per_model(GS_SIGMA, {"conv"})),
               analysis("fully connected BN layers", per_model(GS_SIGMA, {"fc"}))] if "conv" in typed else []
        alts = [analysis("all BN layers together", per_model(GS_SIGMA, all_types))] if "conv" in typed else []
        if layer_rows(reps[0][1].data, "batch"):
            alts.append(analysis("batch σ", per_model("batch", decide_types)))
        alts.append(analysis(f"fraction of layers with median above 1 (plan {PREVIOUS_VERSION})",
                             [v for _, lens in reps for v in model_layer_fractions(lens.data, GS_SIGMA).values()]))
        cond = _cond(setting, reps[0][1], sigma=GS_SIGMA, layers=decide_name)
        claim.evaluations.append(Evaluation.from_analysis(_where(setting), primary, cond, True, cov, alts, decide_name))
        for c, lens in reps:
            fr = model_layer_fractions(lens.data, GS_SIGMA)
            if len(fr) >= 2:
                claim.previous.append(_previous_paired(f"{c.describe()} [{c.id}]", list(fr.values()), 0.5))
            elif fr:
                v = next(iter(fr.values()))
                claim.previous.append(PreviousVerdict(f"{c.describe()} [{c.id}]", v, PREVIOUS_REPRODUCED
                                                      if v > 0.5 else PREVIOUS_NOT_REPRODUCED))
    return claim


# ----------------------------------------------------------------- claim 5


def _theory_cond(t: Lens) -> dict[str, Any]:
    cfg = t.data.get("config") or {}
    return {"model": "toy: 1 conv channel + linear classifier, full-batch GD, float64",
            **{k: cfg[k] for k in ("steps", "lr", "n_outliers", "outlier_kind", "seed") if k in cfg}}


def counterfactual_errors(data: dict[str, Any]) -> dict[str, float] | None:
    """(seed, outlier kind) -> median relative error |ratio − (γ/σ)²| / (γ/σ)² of the fair counterfactual,
    from ``theory.json["counterfactual"]["runs"] = [{"seed", "outlier_kind", "ratio": [...],
    "gamma_sigma_sq": [...]}]``; None when theory.json has no counterfactual."""
    cf = data.get("counterfactual")
    runs = cf.get("runs") if isinstance(cf, dict) else None
    per_run = cf.get("per_run") if isinstance(cf, dict) else None
    if isinstance(per_run, dict):  # what bnmem.theory writes: per_run[kind][seed] = {"ratio", "gamma_sigma_sq", ...}
        runs = [{"seed": seed, "outlier_kind": kind, **r} for kind, by_seed in per_run.items()
                if isinstance(by_seed, dict) for seed, r in by_seed.items() if isinstance(r, dict)]
    if not isinstance(runs, list):
        return None
    out = {}

    def floats(v: Any) -> np.ndarray:
        arr = np.asarray(v if v is not None else [], dtype=object)
        return np.array([np.nan if finite(x) is None else x for x in arr.ravel()], float).reshape(arr.shape)

    for r in runs:
        if not isinstance(r, dict):
            continue
        ratio, pred = floats(r.get("ratio")), floats(r.get("gamma_sigma_sq"))
        if pred.ndim == 1 and ratio.ndim == 2 and len(pred) == len(ratio):
            pred = np.broadcast_to(pred[:, None], ratio.shape)  # one (γ/σ)² per step, one ratio per outlier
        ratio, pred = ratio.ravel(), np.asarray(pred).ravel()
        if ratio.size and ratio.size == pred.size:
            err = np.abs(ratio - pred) / np.abs(pred)
            if np.isfinite(err).any():
                out[f"{r.get('seed')}/{r.get('outlier_kind')}"] = float(np.nanmedian(err))
    return out or None


def claim_theory(run: RunData) -> list[Claim]:
    """Claim 5a (a derivation check) and 5b (the real BN step against (γ/σ)²)."""
    frozen = _new_claim("5a", "theory", "{:.1%}")
    live = _new_claim("5b", "theory", "{:.1%}")
    t = run.theory
    if t is None:
        return [frozen, live]
    amp = (t.data.get("summary") or {}).get("amplification") or {}
    cond = _theory_cond(t)
    where = "toy model simulation"
    fe = finite(amp.get("frozen_stats_median_rel_error"))
    if fe is None:
        frozen.evaluations.append(_not_run(where, "theory.json has no frozen-statistics error"))
    else:
        frozen.evaluations.append(Evaluation(
            where, fe, None, None, CHECK_PASSED if fe < THEORY_TOL else CHECK_FAILED,
            "one deterministic simulation (no interval)",
            "a check of the derivation, not evidence: with frozen batch statistics the BN step on w is the plain "
            "step at learning rate η(γ/σ)², so the error only measures curvature; predicted (γ/σ)² median "
            f"{fmt(amp.get('predicted_median'), '.2f')}, max relative error "
            f"{fmt(amp.get('frozen_stats_max_rel_error'))}",
            cond))
        frozen.previous.append(PreviousVerdict(where, fe, PREVIOUS_REPRODUCED if fe < THEORY_TOL
                                               else PREVIOUS_NOT_REPRODUCED))
    le = finite(amp.get("live_vs_gamma_sigma_sq_median_rel_error"))
    if le is not None:
        live.previous.append(PreviousVerdict(where, le, PREVIOUS_REPRODUCED if le < THEORY_TOL
                                             else PREVIOUS_NOT_REPRODUCED))
    errs = counterfactual_errors(t.data)
    if errs:
        est = difference_stats(list(errs.values()), unit="simulations (seed × outlier kind)")
        # An equivalence claim: the interval must lie below the tolerance.
        status = (NOT_RUN if not math.isfinite(est.mean) else INCONCLUSIVE if est.ci_low is None else
                  REPRODUCED if est.ci_high < THEORY_TOL else CONTRADICTED if est.ci_low > THEORY_TOL
                  else INCONCLUSIVE)
        note = ("fair counterfactual: (w, γ, β) under BN vs (w̃, c̃) of the plain model from the BN model's "
                "effective weights; per run median relative error: "
                + ", ".join(f"{k} {v:.0%}" for k, v in errs.items()))
        live.evaluations.append(Evaluation.from_analysis(where, Analysis.of(PLAN_ANALYSIS, est, status, note), cond))
    elif le is None:
        live.evaluations.append(_not_run(where, "theory.json has no live-step error"))
    else:
        live.evaluations.append(Evaluation(
            where, le, None, None, INCONCLUSIVE, "one simulation: no interval",
            "theory.json has no fair counterfactual over seeds (key 'counterfactual'); the w-only comparison of "
            f"one simulation has median relative error {le:.1%} against (γ/σ)², against (γ/σ)²·ρ "
            f"{fmt(amp.get('live_vs_gamma_sigma_sq_rho_median_rel_error'))}; one simulation cannot tell",
            cond))
    return [frozen, live]


# ----------------------------------------------------------------- claim 6


def _regularized(variants: dict[str, dict[str, Any]]) -> list[tuple[float, str, dict[str, Any]]]:
    out = []
    for name, v in variants.items():
        lam = finite(v.get("gs_reg"))
        if v.get("norm") == BN and lam is not None and lam > 0:
            out.append((lam, name, v))
    return sorted(out, key=lambda t: t[0])


def selected_lambda(lens: Lens, lambdas: list[float]) -> tuple[float, str]:
    """The λ the plan decides on: the lens's validation-selected one, else the middle of the declared grid."""
    sel = finite(lens.data.get("selected_lambda")) or finite(lens.conditions.get("selected_lambda"))
    if sel is not None and any(abs(sel - x) < 1e-12 for x in lambdas):
        return sel, "selected on the validation split"
    return lambdas[(len(lambdas) - 1) // 2], "no validation-selected λ: the middle of the declared grid"


def _mitigate_groups(reps: list[tuple[Cell, Lens]], lam: float, key: str
                     ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per replicate, per seed: the cut (BN − reg)/mean BN and the test drop BN − reg."""
    cuts, drops = [], []
    for _, lens in reps:
        variants = mitigate_variants(lens.data)
        bn = variants.get(BN)
        reg = next((v for x, _, v in _regularized(variants) if abs(x - lam) < 1e-12), None)
        if bn is None or reg is None:
            continue
        a, b = np.array(mitigate_seeds(bn, "final", key)), np.array(mitigate_seeds(reg, "final", key))
        ta, tb = np.array(mitigate_seeds(bn, "final", "test_acc")), np.array(mitigate_seeds(reg, "final", "test_acc"))
        mem_bn = np.nanmean(a) if a.size and np.isfinite(a).any() else math.nan
        if a.size == b.size and a.size and mem_bn > 0:
            cuts.append((a - b) / mem_bn)
        if ta.size == tb.size and ta.size:
            drops.append(ta - tb)
    return cuts, drops


def _pts(v: float) -> str:
    """An accuracy difference in points ('+0.50'), '—' when not finite."""
    return fmt(v * 100 if math.isfinite(v) else None, "+.2f")


def _mitigate_status(cut: PairedDiff, drop: PairedDiff) -> str:
    base = grade(cut, paper=(MITIGATE_CUT, 1.0))
    if base == REPRODUCED and drop.ci_low is not None and drop.ci_low > MITIGATE_TEST_DROP:
        return DIRECTION_ONLY
    if base == REPRODUCED and drop.ci_low is None:
        return INCONCLUSIVE
    return base


def claim_mitigation(run: RunData) -> Claim:
    """Claim 6: the γ/σ regularizer cuts memorization at little utility cost."""
    claim = _new_claim("6", LENS_MITIGATE, "{:.0%}")
    for setting in settings_of(run, LENS_MITIGATE):
        reps = setting.lenses(LENS_MITIGATE)
        lens0 = reps[0][1]
        variants = mitigate_variants(lens0.data)
        regs = _regularized(variants)
        bn = variants.get(BN)
        if bn is None or not regs:
            claim.evaluations.append(_not_run(_where(setting), "mitigate results lack plain BN or a regularized BN"))
            continue
        key = mitigate_key(variants)
        mem_bn = mitigate_at(bn, "final", key)
        if mem_bn is None:
            claim.evaluations.append(_not_run(_where(setting), "no corrupted subset in this setting (clean data)"))
            continue
        if mem_bn <= 0:
            claim.evaluations.append(_not_run(_where(setting), f"plain BN memorized none of the corrupted subset "
                                                               f"({key} 0): nothing to cut"))
            continue
        lambdas = [x for x, _, _ in regs]
        lam, how = selected_lambda(lens0, lambdas)
        results = {}
        for x in lambdas:
            cuts, drops = _mitigate_groups(reps, x, key)
            cut, drop = replicated_difference(cuts, "seeds", True), replicated_difference(drops, "seeds", True)
            results[x] = (cut, drop, _mitigate_status(cut, drop))
        cut, drop, status = results[lam]
        lira = []
        reg_name = next(n for x, n, _ in regs if x == lam)
        for name in (BN, reg_name, "none"):
            for attack in ("online", "rmia"):
                auc = finite((variant_lira(variants.get(name) or {}, attack) or {}).get("auc"))
                if auc is not None:
                    lira.append(f"{name} {ATTACK_NAMES[attack]} {auc:.3f}")
        cov = [Analysis.of("memorization cut", cut, status)] + [
            a for a in (_privacy_verdict(reps, reg_name, attack) for attack in ("online", "rmia")) if a is not None]
        note = (f"λ={lam:g} ({how}); test-accuracy drop {_pts(drop.mean)} "
                f"pt" + (f" [{drop.ci_low * 100:+.2f}, {drop.ci_high * 100:+.2f}]" if drop.ci_low is not None else "")
                + f"; BN {key} {mem_bn:.3f} (last epoch)" + (f"; LiRA AUC {', '.join(lira)}" if lira else
                                                               "; no LiRA AUC measured for the regularized model"))
        primary = Analysis.of(PLAN_ANALYSIS, cut, status, note)
        alts = [Analysis.of(f"λ={x:g}", c, s, f"test drop {_pts(d.mean)} pt")
                for x, (c, d, s) in results.items() if x != lam]
        cond = _cond(setting, lens0, regularizer_lambda=lam, lambda_selection=how,
                     gs_tau=lens0.conditions.get("gs_tau"))
        claim.evaluations.append(Evaluation.from_analysis(
            _where(setting, f"BN vs BN + γ/σ regularizer λ={lam:g}"), primary, cond, True,
            cov if len(cov) > 1 else [], alts, "memorization cut" if len(cov) > 1 else ""))
        for c, lens in reps:
            claim.previous.append(_mitigate_previous(c, lens, key))
    return claim


def _privacy_verdict(reps: list[tuple[Cell, Lens]], reg_name: str, attack: str) -> Analysis | None:
    """The AUC reduction BN − BN+reg of one attack (targets paired by model index), graded for direction
    (the paper states no size); None when the lens measured no per-target AUCs for both."""
    groups = []
    for _, lens in reps:
        variants = mitigate_variants(lens.data)
        a = variant_lira(variants.get(BN) or {}, attack)
        b = variant_lira(variants.get(reg_name) or {}, attack)
        pa, pb = (a or {}).get("auc_per_target"), (b or {}).get("auc_per_target")
        if isinstance(pa, list) and isinstance(pb, list) and len(pa) == len(pb) and pa:
            groups.append(np.array([np.nan if finite(x) is None else x for x in pa], float)
                          - np.array([np.nan if finite(x) is None else x for x in pb], float))
    if not groups:
        return None
    est = replicated_difference(groups, "targets", False)
    return Analysis.of(f"privacy: {ATTACK_NAMES[attack]} AUC reduction", est, grade(est))


def _mitigate_previous(cell: Cell, lens: Lens, key: str) -> PreviousVerdict:
    """Plan 1.1: the best λ on the test set passes if its mean cut ≥ 50% and mean test drop ≤ 1 point."""
    variants = mitigate_variants(lens.data)
    bn = variants.get(BN) or {}
    mem_bn, test_bn = mitigate_at(bn, "final", key), mitigate_at(bn, "final", "test_acc")
    where = f"{cell.describe()} [{cell.id}]"
    if not mem_bn or test_bn is None:
        return PreviousVerdict(where, None, NOT_RUN)
    best: tuple[bool, float] | None = None
    for _, _, rec in _regularized(variants):
        mem, test = mitigate_at(rec, "final", key), mitigate_at(rec, "final", "test_acc")
        if mem is None or test is None:
            continue
        cut = (mem_bn - mem) / mem_bn
        cand = (cut >= MITIGATE_CUT and test_bn - test <= MITIGATE_TEST_DROP, cut)
        best = cand if best is None or cand > best else best
    if best is None:
        return PreviousVerdict(where, None, NOT_RUN)
    return PreviousVerdict(where, best[1], PREVIOUS_REPRODUCED if best[0] else PREVIOUS_NOT_REPRODUCED)


# ----------------------------------------------------------------- all


def mark_variants(claim: Claim) -> Claim:
    """Evaluations of a non-shared recipe become robustness variants (shown, never deciding)."""
    for e in claim.evaluations:
        recipe = e.conditions.get("recipe")
        if recipe is not None and recipe != SHARED_RECIPE:
            e.deciding = False
            e.variant = f"recipe {recipe}"
    return claim


def evaluate_claims(run: RunData) -> list[Claim]:
    """Every claim of the paper, in the paper's order, decided by plan :data:`PLAN_VERSION`."""
    claims = [
        claim_memorization(run),
        claim_gradnorms(run),
        claim_lira(run, clean=False),
        claim_lira(run, clean=True),
        claim_gamma_sigma(run),
        *claim_theory(run),
        claim_mitigation(run),
    ]
    return [mark_variants(c) for c in claims]


def conditions_text(cond: dict[str, Any]) -> str:
    """'dataset=digits; arch=lenet; norms=batch,none; ...' for CSV and tables."""
    parts = []
    for k, v in cond.items():
        if isinstance(v, list):
            v = ",".join(str(x) for x in v)
        elif isinstance(v, dict):
            v = "; ".join(f"{a}: {b}" for a, b in v.items())
        parts.append(f"{k}={v}")
    return "; ".join(parts)


PLAN_INFO = {"version": PLAN_VERSION, "previous": PREVIOUS_VERSION}
