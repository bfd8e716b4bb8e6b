"""Nulls with teeth for claims 3a, 3b, 5b and 6: each rule's error rate at its null, computed exactly through the
report's own evaluation (:func:`bnmem.report.claims.evaluate_rule`), at n = 2, 3, 5 and 10 replicates with the
claim's k deciding settings (as the decisive study has them: 3a and 6 in k = 2 outlier settings, 3b and 5b in
k = 1), each with a planted-bug twin that the same check rejects.

Why exact, and how. A Monte-Carlo null needs many draws to have teeth: to reject a rule whose true rate is twice
its nominal 2.5% with probability ≥ 0.99 while passing a rule at exactly 2.5% with probability ≥ 0.99, the
acceptance threshold c and the number of draws D must satisfy P(Bin(D, 0.05) ≤ cD) ≤ 0.01 and
P(Bin(D, 0.025) > cD) ≤ 0.01, i.e. (normal approximation) √D ≥ z₀.₉₉ (√(0.025·0.975) + √(0.05·0.95)) / 0.025,
D ≥ 1,211 (exactly: D = 1,300 with c = 46/1,300 = 3.5%). At about 10 ms per evaluation through the report that is
13 s per configuration, over four minutes for these claims. Instead:

1. **The rule is a threshold in a t statistic.** Every rule here decides a setting on a Student t-interval over
   the replicates' values x (n ≥ 2): the status depends on x only through t = (x̄ − θ) / (s / √n), θ the null
   (the paper's minimum, the margin, the band's edge). The production evaluation's critical value c is found by
   bisection on runs built so that t is exactly the bisected value (a fixed standardized pattern scaled and
   shifted), and the reduction is *checked*: on 20 random runs per configuration (random patterns, scales, and t
   near c in every null setting), the production status must equal the threshold rule's, with no exception.
2. **The rate is then exact.** Under a normal null each null setting crosses with probability
   p = P(T_{n−1} > c), T Student's t with n − 1 df; the row's rate is p for 'reproduced' at the least
   favourable null (one setting at the null, the others far on the paper's side: an intersection–union row is
   reproduced only if that setting is) and 1 − (1 − p)^k for 'contradicted' with every setting at the null
   (independent settings; one suffices). The check: rate ≤ nominal (2.5%) + 10⁻⁶ (the bisection's precision).

A rule at twice its nominal rate fails this check with probability 1, not 0.99. The twins plant such bugs in
the production code (a 90% interval for 'reproduced', no Bonferroni on 'contradicted', a decision on the mean)
and assert that the same check fails; a rule that is not a threshold in t at all (an interval of fixed width that
ignores the spread) is rejected by the agreement step. The agreement step keeps the scales small where a
second edge could bind (5b's band: a scale at which the band's far edge never decides), so the t reduction is
exact there; with the far edge binding the rate could only be lower.

The claim-6 simulation that tests/test_claim_rules.py's claim-6 null used to point to lives here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
from scipy import stats as sps

from bnmem.analysis_plan import CONTRADICTED, LARGER, MITIGATE_TEST_DROP, REPRODUCED
from bnmem.report.claims.claim3 import lira_range
from bnmem.report.claims.claim5 import THEORY_TOL
from bnmem.report.claims.claim6 import MITIGATE_CUT
from bnmem.names import LIRA, MITIGATE
from bnmem.report.claims import claim3, claim5, claim6, evaluate_rule
from bnmem.report.claims.core import at_level

NOMINAL = 0.025  # one side of a 95% interval; 'contradicted' rows: Bonferroni keeps the row at this
NS = (2, 3, 5, 10)
AGREEMENT_DRAWS = 20


@pytest.fixture(autouse=True)
def _few_resamples(monkeypatch):
    # The bootstrap is shown next to the t-interval, never deciding: fewer resamples keep this fast.
    monkeypatch.setattr("bnmem.stats.N_RESAMPLES", 2)


# --- runs whose per-replicate statistic is exactly the given value -----------------------------------------


def lira_values_run(values: np.ndarray, clean: bool = False):
    """Claim 3: setting j's replicate r has BN − none AUC exactly values[j, r] on every target (3a: outlier mixes
    0.02 + 0.001 j, whose paper minimum is 3 points; 3b: clean data)."""
    from synthetic_runs import lira_data, make_cell, make_run

    cells = []
    for j, row in enumerate(values):
        mix = 0.0 if clean else 0.02 + 0.001 * j
        for r, v in enumerate(row):
            none = np.full(8, 0.6)
            cells.append(make_cell(f"l{j}", r, {LIRA: lira_data({"online": none + v}, {"online": none}, mix)}, mix))
    return make_run(cells)


def theory_values_run(values: np.ndarray):
    """Claim 5b: seed r's live kernel step is exactly values[0, r] × the frozen-statistics prediction."""
    from bnmem.report.rundata import LensOutput, RunData

    rng = np.random.default_rng(0)
    runs = []
    for seed, b in enumerate(values[0]):
        for kind in ("flip", "ood"):
            amp = 10 + rng.random(4)
            plain = rng.normal(0, 0.01, (4, 3))
            runs.append({"seed": seed, "outlier_kind": kind, "gamma_sigma_sq": amp.tolist(),
                         "dm_plain_w": plain.tolist(), "dm_bn_w": (b * amp[:, None] * plain).tolist()})
    data = {"summary": {"amplification": {}}, "config": {"seed": 0}, "counterfactual": {"runs": runs}}
    return RunData(Path("/s"), "study", "s", [], LensOutput("theory", Path("/s/theory"), data), None)


def mitigate_values_run(drops: np.ndarray, cuts: np.ndarray):
    """Claim 6: setting j's replicate r (nested selection of its one regularized variant, which passes the gate)
    has test-accuracy drop exactly drops[j, r] and memorization cut exactly cuts[j, r] on both evaluation seeds."""
    from synthetic_runs import NORMS, dataset_info, make_cell, make_run

    def stat(values):
        return {"mean": float(np.mean(values)), "per_seed": [float(v) for v in values]}

    def variant(lam, noisy, test):
        return {"norm": "batch", "gs_reg": lam, "final": {"noisy_acc": stat(noisy), "test_acc": stat(test)}}

    cells = []
    for j, (drow, crow) in enumerate(zip(drops, cuts)):
        noise = 0.05 + 0.01 * j
        for r, (d, c) in enumerate(zip(drow, crow)):
            doc = {"batch": variant(0.0, [0.6, 0.6], [0.95, 0.95]),
                   "batch+gs1": variant(1.0, [0.6 * (1 - c)] * 2, [0.95 - d] * 2),
                   "variants": ["batch", "batch+gs1"], "conditions": {"norms": NORMS, "label_noise": noise},
                   "dataset": dataset_info(noise),
                   "selection": {"nested": True, "variant": "batch+gs1", "fallback": False, "seeds": [2],
                                 "score": {"batch+gs1": 0.1}, "gate": {"batch+gs1": {"drop": 0.0, "se": 0.01}}}}
            cells.append(make_cell(f"m{j}", r, {MITIGATE: doc}, label_noise=noise, seeds=[0, 1]))
    return make_run(cells)


# --- the configurations ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NullCase:
    """One null configuration of one claim row.

    Attributes:
        module, index: the rule module and the position of the claim in its ``evaluate`` output.
        build: values [k, n] of the deciding statistic → a run.
        theta: the null value in the null settings.
        far: the value of the other settings (far on the paper's side), or None: every setting at the null.
        status: the status whose rate is tested.
        side: +1 when the status needs t above c (x̄ above θ), −1 when below.
        k: the claim's deciding settings.
        scale: the range of the replicate SDs drawn by the agreement step.
    """

    name: str
    module: object
    index: int
    build: Callable[[np.ndarray], object]
    theta: float
    far: float | None
    status: str
    side: int
    k: int
    scale: tuple[float, float] = (0.002, 0.02)

    def values(self, t: np.ndarray, z: np.ndarray, s: np.ndarray) -> np.ndarray:
        """Values [k, n] whose null settings have t statistics ``t`` (per setting), patterns z and SDs s."""
        n = z.shape[1]
        out = self.theta + s[:, None] * (z + t[:, None] / math.sqrt(n))
        if self.far is not None:
            out[1:] = self.far + 0.001 * z[1:]
        return out

    def decides(self, values: np.ndarray) -> bool:
        got = evaluate_rule(self.module, self.build(values))[self.index].status
        # plan 5.0 (3a/3b): 'larger than the paper' also clears the paper's minimum, the error this null counts
        return got == self.status or (self.status == REPRODUCED and got == LARGER)

    def nulls(self) -> int:
        return 1 if self.far is not None else self.k

    def rate(self, p: float) -> float:
        return p if self.far is not None else 1 - (1 - p) ** self.k


def _pattern(rng: np.random.Generator, k: int, n: int) -> np.ndarray:
    z = rng.normal(size=(k, n))
    z -= z.mean(axis=1, keepdims=True)
    return z / z.std(axis=1, ddof=1, keepdims=True)


CUT_HIGH = 0.9  # a cut far above the stated minimum (claim 6's drop nulls)
CASES = {
    "3a reproduced at the paper's minimum": NullCase(
        "3a", claim3, 0, lira_values_run, lira_range(0.02)[0], 0.10, REPRODUCED, +1, 2),
    "3a contradicted at 0": NullCase("3a", claim3, 0, lira_values_run, 0.0, None, CONTRADICTED, -1, 2),
    "3b reproduced at the paper's minimum": NullCase(
        "3b", claim3, 1, lambda v: lira_values_run(v, clean=True), lira_range(None)[0], None, REPRODUCED, +1, 1),
    "3b contradicted at 0": NullCase(
        "3b", claim3, 1, lambda v: lira_values_run(v, clean=True), 0.0, None, CONTRADICTED, -1, 1),
    "5b reproduced at the band's lower edge": NullCase(
        "5b", claim5, 1, theory_values_run, 1 - THEORY_TOL, None, REPRODUCED, +1, 1, scale=(0.0005, 0.002)),
    "5b contradicted at the band's lower edge": NullCase(
        "5b", claim5, 1, theory_values_run, 1 - THEORY_TOL, None, CONTRADICTED, -1, 1, scale=(0.0005, 0.002)),
    "6 reproduced at the cost margin": NullCase(
        "6", claim6, 0, lambda v: mitigate_values_run(v, CUT_HIGH + 0.01 * np.cos(np.arange(v.size)).reshape(v.shape)),
        MITIGATE_TEST_DROP, -0.05, REPRODUCED, -1, 2),
    "6 contradicted at the cost margin": NullCase(
        "6", claim6, 0, lambda v: mitigate_values_run(v, CUT_HIGH + 0.01 * np.cos(np.arange(v.size)).reshape(v.shape)),
        MITIGATE_TEST_DROP, None, CONTRADICTED, +1, 2),
    "6 reproduced at the cut's minimum": NullCase(
        "6", claim6, 0, lambda v: mitigate_values_run(-0.05 + 0.001 * np.cos(np.arange(v.size)).reshape(v.shape), v),
        MITIGATE_CUT, 0.9, REPRODUCED, +1, 2),
}


def critical_t(case: NullCase, n: int) -> float:
    """The production evaluation's critical t: bisection on runs whose null settings all have t = the bisected
    value (a fixed standardized pattern, SD the middle of the case's scale)."""
    z = _pattern(np.random.default_rng(1), case.k, n)
    s = np.full(case.k, math.sqrt(case.scale[0] * case.scale[1]))

    def crossed(t: float) -> bool:
        return case.decides(case.values(np.full(case.k, case.side * t), z, s))

    lo, hi = -5.0, 100.0
    assert not crossed(lo) and crossed(hi), "the status is not reached at large t, or reached at small t"
    for _ in range(24):  # t to 6e-6: the rate to below 1e-6
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if crossed(mid) else (mid, hi)
    return hi


def disagreements(case: NullCase, n: int, c: float, seed: int) -> int:
    """Random runs (patterns, SDs, and t near c in every null setting) on which the production status differs
    from the threshold rule 'some null setting has side · t > c'."""
    rng = np.random.default_rng(seed)
    bad = 0
    for _ in range(AGREEMENT_DRAWS):
        t = case.side * rng.uniform(c - 2, c + 2, case.k)
        s = np.exp(rng.uniform(math.log(case.scale[0]), math.log(case.scale[1]), case.k))
        v = case.values(t, _pattern(rng, case.k, n), s)
        bad += case.decides(v) != bool(np.any(case.side * t[: case.nulls()] > c))
    return bad


def null_rate(case: NullCase, n: int, seed: int = 0) -> tuple[float, int]:
    """(the row's exact rate of ``case.status`` under a normal null, the agreement step's disagreements)."""
    c = critical_t(case, n)
    return case.rate(float(sps.t.sf(c, n - 1))), disagreements(case, n, c, seed)


def passes(rate: float, bad: int) -> bool:
    """The check on :func:`null_rate`'s result: the production decision is a threshold in t, and its exact rate
    is at most the nominal one."""
    return bad == 0 and rate <= NOMINAL + 1e-6


# --- the nulls ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("name", list(CASES))
def test_null_rate_through_the_report_is_at_most_nominal(name, n):
    case = CASES[name]
    rate, bad = null_rate(case, n, seed=n)
    assert bad == 0, f"{name}: the production decision is not a threshold in t at n = {n}"
    assert passes(rate, bad), (name, n, rate)
    if case.status == REPRODUCED:  # the least favourable null sits on the edge: exactly nominal
        assert rate == pytest.approx(NOMINAL, abs=1e-6), (name, n, rate)


# --- the planted-bug twins: the same check fails --------------------------------------------------------------


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c.status == REPRODUCED])
def test_twin_reproduced_at_90_percent_fails(name):
    """The planted bug: 'reproduced' read off a 90% interval (one side 5%, twice nominal). Exact rate 5%: the
    check fails with certainty."""
    with at_level(0.90):
        rate, bad = null_rate(CASES[name], 3)
    assert bad == 0 and rate == pytest.approx(2 * NOMINAL, abs=1e-6)
    assert not passes(rate, bad)


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c.status == CONTRADICTED])
def test_twin_contradicted_without_bonferroni_fails(name, monkeypatch):
    """The planted bug: 'contradicted' tested at an unadjusted 90% (k = 1: 5% one-sided; k = 2: 1 − 0.95² ≈ 9.8%),
    at least twice nominal. The same check fails."""
    case = CASES[name]
    monkeypatch.setattr("bnmem.report.claims.family_level", lambda k: 0.90)
    if case.k == 1:
        with at_level(0.90):
            rate, bad = null_rate(case, 3)
    else:
        rate, bad = null_rate(case, 3)
    assert rate >= 2 * NOMINAL - 1e-6 and not passes(rate, bad)


def test_twin_deciding_on_the_point_estimate_fails(monkeypatch):
    """The planted bug: claim 6's cost read off the mean drop (no interval). It is a threshold in t at 0 (the mean
    at the margin), so the check's rate is one half at the margin."""
    from bnmem.report.claims import claim6 as c6

    real = c6.status_of

    def on_the_mean(cut, drop):
        if drop is not None and math.isfinite(drop.mean):
            from dataclasses import replace

            drop = replace(drop, ci_low=drop.mean, ci_high=drop.mean)
        return real(cut, drop)

    monkeypatch.setattr(c6, "status_of", on_the_mean)
    rate, bad = null_rate(CASES["6 reproduced at the cost margin"], 3)
    assert rate == pytest.approx(0.5, abs=1e-4) and not passes(rate, bad)


def test_twin_interval_ignoring_the_spread_fails_the_agreement_step(monkeypatch):
    """The planted bug: a fixed-width interval (± 0.5 points) in place of the t-interval. Its decision depends on
    the replicates' spread, not only on t, so the agreement step of the same check finds runs where it differs."""
    def fixed(samples, level=0.95):
        m = np.asarray(samples, dtype=float).mean(axis=-1)
        return m - 0.005, m + 0.005

    monkeypatch.setattr("bnmem.stats.t_intervals", fixed)
    rate, bad = null_rate(CASES["3a reproduced at the paper's minimum"], 3)
    assert bad > 0 and not passes(rate, bad)
