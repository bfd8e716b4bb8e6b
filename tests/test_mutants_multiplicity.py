"""Multiplicity beyond one evaluation (issue 39): the family size k, the family level 1 − 0.05/k, the two passes
and their combination (evaluations, co-verdicts, the previous plan's verdicts), and claim 4's family-level pass
over several settings (intersection–union at one-sided 0.025 for 'reproduced', Bonferroni 0.025/k for
'contradicted').

Every expected value is computed here from its definition (scipy's one-sample t-test, the t quantile, hand
arithmetic), never by the production functions, and each fixture sits where the right rule and a one-token slip
of it (α for α/k, k counted from the wrong evaluations, the wrong pass kept, ≤ for <) disagree. No training;
each test takes well under a second.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from scipy import stats as sps

from bnmem.analysis_plan import (
    CHECK_FAILED, CHECK_PASSED, CLEAN_PROGRESS, CONTRADICTED, CONVERGENCE, CORRUPTED_FIT, DEPENDS,
    DIRECTION_ONLY, INCONCLUSIVE, LARGER, NOT_RUN, PAPERS_PROTOCOL, PLAN_VERSION, REPRODUCED,
    SAME_EPOCH, SMALLER, TEST_ACCURACY, family_level,
)
from bnmem.names import GAMMA_SIGMA
from bnmem.report.claims import claim2, claim4, evaluate_rule
from bnmem.report.claims import layer_test as lt
from bnmem.report.claims.core import (
    Analysis, Claim, Evaluation, PreviousVerdict, at_level, combine, direction, first_sentence,
    grade_magnitude, level, new_claim, not_run, vs_paper, weakest,
)
from bnmem.stats import PairedDiff

from synthetic_runs import make_cell, make_run


# ---------------------------------------------------------------- the family level and k


def test_family_level_is_one_minus_005_over_k_for_every_k():
    assert family_level(0) == 0.95  # no deciding test: the 95% pass alone
    for k in (1, 2, 3, 5, 12):
        assert family_level(k) == pytest.approx(1 - 0.05 / k, abs=1e-15)


def _ev(where: str, status: str, lo: float | None = None, hi: float | None = None, value: float | None = None,
        deciding: bool = True, tests: int = 1, **kw) -> Evaluation:
    v = value if value is not None else (None if lo is None or hi is None else (lo + hi) / 2)
    return Evaluation(where, v, lo, hi, status, deciding=deciding, tests=tests, **kw)


def _claim(*evs: Evaluation, cid: str = "1") -> Claim:
    c = Claim(cid, "t", "m", "r", "s")
    c.evaluations = list(evs)
    return c


def test_k_counts_the_tests_of_the_deciding_evaluations_that_ran():
    c = _claim(_ev("a", REPRODUCED, 0.1, 0.3, tests=2),  # claim 2: two gradient definitions in one setting
               _ev("b", INCONCLUSIVE, -0.1, 0.3),
               _ev("c", REPRODUCED, 0.1, 0.3, tests=3, deciding=False),  # a robustness variant: not counted
               _ev("d", NOT_RUN, tests=4))  # did not run: not counted
    assert c.family_size() == 3
    assert [e.where for e in c.deciding()] == ["a", "b"]
    assert _claim().family_size() == 0


def test_the_least_supportive_is_by_rank_then_by_the_lowest_lower_end():
    a, b = _ev("a", REPRODUCED, 0.30, 0.5, value=0.05), _ev("b", REPRODUCED, 0.10, 0.5, value=0.3)
    assert weakest([a, b]).where == "b" and weakest([b, a]).where == "b"  # the lower end, not the value
    c = _ev("c", DIRECTION_ONLY, 0.40, 0.9)
    assert weakest([a, b, c]).where == "c"  # the rank decides before the bound
    no_interval = _ev("n", REPRODUCED, value=0.05)  # no interval: its value stands for its lower end
    assert weakest([a, no_interval]).where == "n"
    nothing = _ev("x", REPRODUCED, value=None)  # no number at all: after every number
    nan = _ev("y", REPRODUCED, value=math.nan)
    assert weakest([nothing, a]).where == "a" and weakest([nan, a]).where == "a"
    unknown = _ev("u", "some future status", 0.9, 1.0)  # an unknown status ranks as inconclusive
    assert weakest([unknown, c]).where == "u" and weakest([unknown, _ev("i", INCONCLUSIVE, 0.5, 1)]).where == "i"


# ---------------------------------------------------------------- combine: which pass decides


def _pair(s95: str, sfam: str, name: str = "x") -> tuple[Analysis, Analysis]:
    return (Analysis(name, 0.5, 0.1, 0.9, s95, method="95"), Analysis(name, 0.5, 0.0, 1.0, sfam, method="fam"))


@pytest.mark.parametrize("s95, sfam, expected, from_family", [
    (REPRODUCED, INCONCLUSIVE, REPRODUCED, False),  # 'reproduced' is decided at 95% (intersection–union)
    (DIRECTION_ONLY, INCONCLUSIVE, DIRECTION_ONLY, False),
    (CONTRADICTED, INCONCLUSIVE, INCONCLUSIVE, True),  # 'contradicted' must hold at 1 − α/k
    (CONTRADICTED, CONTRADICTED, CONTRADICTED, True),
    (INCONCLUSIVE, CONTRADICTED, CONTRADICTED, True),  # either pass reading contradicted hands over
    (LARGER, LARGER, LARGER, True),  # a magnitude status the family level confirms
    (LARGER, REPRODUCED, REPRODUCED, False),  # ... not confirmed: what the 95% interval supports
    (SMALLER, SMALLER, SMALLER, True),
    (SMALLER, DIRECTION_ONLY, DIRECTION_ONLY, False),
    (SMALLER, CONTRADICTED, DIRECTION_ONLY, False),  # a magnitude status: only its own confirmation counts
])
def test_combine_keeps_the_95_pass_unless_contradicted_or_a_confirmed_magnitude(s95, sfam, expected, from_family):
    fam_level = family_level(4)
    a95, afam = _pair(s95, sfam)
    c95 = _claim(Evaluation("s", 0.5, 0.1, 0.9, s95, method="95", coverdicts=[a95], analyses=[_pair(s95, sfam)[0]]))
    cfam = _claim(Evaluation("s", 0.5, 0.0, 1.0, sfam, method="fam", coverdicts=[afam],
                             analyses=[_pair(s95, sfam)[1]]))
    out = combine(c95, cfam, fam_level)
    e = out.evaluations[0]
    assert e.status == expected and e.method == ("fam" if from_family else "95")
    assert e.level == (fam_level if from_family else 0.95)
    assert (e.ci_low, e.ci_high) == ((0.0, 1.0) if from_family else (0.1, 0.9))
    for a in (e.coverdicts[0], e.analyses[0]):  # co-verdicts and the robustness rows by the same rule
        assert a.status == expected and a.method == ("fam" if from_family else "95")
    assert out.level == fam_level


def test_combine_matches_co_verdicts_by_name_and_evaluations_by_place():
    fam_level = family_level(2)
    c95 = _claim(Evaluation("s0", 0.5, -0.9, -0.1, CONTRADICTED, coverdicts=[
        Analysis("online", 0.5, -0.9, -0.1, CONTRADICTED), Analysis("rmia", 0.5, -0.9, -0.1, CONTRADICTED),
        Analysis("only here", 0.5, 0.1, 0.9, LARGER)]),
        Evaluation("s1", 0.5, -0.9, -0.1, CONTRADICTED))
    cfam = _claim(Evaluation("s0", 0.5, -1.0, 0.1, INCONCLUSIVE, coverdicts=[
        Analysis("rmia", 0.5, -1.0, -0.05, CONTRADICTED), Analysis("online", 0.5, -1.0, 0.1, INCONCLUSIVE)]),
        Evaluation("other place", 0.5, -1.0, 0.1, INCONCLUSIVE))
    out = combine(c95, cfam, fam_level)
    e0, e1 = out.evaluations
    assert e0.status == INCONCLUSIVE and e0.level == fam_level
    assert [(a.name, a.status, a.ci_high) for a in e0.coverdicts] == [
        ("online", INCONCLUSIVE, 0.1), ("rmia", CONTRADICTED, -0.05),
        ("only here", LARGER, 0.9)]  # no family twin: kept as it is
    # the second evaluation's family twin is another place: its 95% verdict stands, at 95%
    assert e1.status == CONTRADICTED and e1.level == 0.95 and e1.ci_high == -0.1
    assert out.status == INCONCLUSIVE or out.status == CONTRADICTED
    assert out.decisive is e1


# ---------------------------------------------------------------- both passes through evaluate_rule


class _FakeModule:
    """A rule module whose claims' intervals are mean ± z·se at the pass's level (level() read at call time):
    per claim a list of (where, mean, se, tests). Records each pass's level."""

    def __init__(self, claims, previous=None):
        self.claims, self.previous, self.levels = claims, previous or {}, []

    def evaluate(self, run):
        self.levels.append(level())
        z = sps.norm.ppf(1 - (1 - level()) / 2)
        out = []
        for i, settings in enumerate(self.claims):
            evs = []
            for where, mean, se, tests in settings:
                lo, hi = mean - z * se, mean + z * se
                status = REPRODUCED if lo > 0 else CONTRADICTED if hi < 0 else INCONCLUSIVE
                evs.append(Evaluation(where, mean, lo, hi, status, tests=tests))
            c = _claim(*evs, cid=str(i + 1))
            c.previous = [PreviousVerdict(*p) for p in self.previous.get(i, [])]
            out.append(c)
        return out


def test_the_family_pass_runs_at_1_minus_005_over_k_with_k_from_the_tests():
    # z at 95%: 1.960; at 1 − 0.05/3: 2.394. Setting "b": −0.45 ± z·0.2 is below 0 at 95% (upper −0.058) but not at
    # 1 − 0.05/3 (upper +0.029): the row is inconclusive with k = 3 (two tests in "a", one in "b") and would be
    # contradicted with k counted as 2 settings (1 − 0.05/2: z 2.241, upper −0.002).
    assert -0.45 + 1.96 * 0.2 < 0 < -0.45 + sps.norm.ppf(1 - 0.05 / 6) * 0.2
    assert -0.45 + sps.norm.ppf(1 - 0.05 / 4) * 0.2 < 0
    m = _FakeModule([[("a", 1.0, 0.1, 2), ("b", -0.45, 0.2, 1)]])
    (c,) = evaluate_rule(m, None)
    assert m.levels == [0.95, pytest.approx(1 - 0.05 / 3, abs=1e-15)]
    a, b = c.evaluations
    assert a.status == REPRODUCED and a.level == 0.95 and a.ci_low == pytest.approx(1.0 - 1.959964 * 0.1, abs=1e-6)
    assert b.status == INCONCLUSIVE and b.level == pytest.approx(1 - 0.05 / 3)
    assert b.ci_high == pytest.approx(-0.45 + sps.norm.ppf(1 - 0.05 / 6) * 0.2)
    assert c.status == INCONCLUSIVE and c.level == pytest.approx(1 - 0.05 / 3) and c.row()["k"] == 3
    assert c.row()["level"] == pytest.approx(1 - 0.05 / 3)
    # previous verdicts (none recorded: the current rule's) go through the same multiplicity
    assert [(p.where, p.status) for p in c.previous] == [("a", REPRODUCED), ("b", INCONCLUSIVE)]


def test_one_deciding_test_is_one_pass_and_each_claim_its_own_k():
    m = _FakeModule([[("only", -0.45, 0.2, 1)], [("p", 1.0, 0.1, 1), ("q", -0.9, 0.2, 1)]])
    first, second = evaluate_rule(m, None)
    # k = 1: no second pass for the first claim; its 95% 'contradicted' stands, at 95%
    assert first.status == CONTRADICTED and first.level == 0.95 and first.evaluations[0].level == 0.95
    assert [(p.where, p.value, p.status) for p in first.previous] == [("only", -0.45, CONTRADICTED)]
    # the second claim (k = 2) is re-evaluated from its own place in the module's list, at 1 − 0.05/2
    assert m.levels == [0.95, pytest.approx(0.975, abs=1e-15)]
    q = second.evaluations[1]
    assert q.status == CONTRADICTED and q.level == pytest.approx(0.975)
    assert q.ci_high == pytest.approx(-0.9 + sps.norm.ppf(1 - 0.0125) * 0.2)
    assert second.status == CONTRADICTED and second.level == pytest.approx(0.975)


def test_the_previous_verdicts_take_the_family_twin_where_either_reads_contradicted():
    prev = {0: [("a", 0.3, REPRODUCED), ("b", -0.2, CONTRADICTED), ("c", -0.1, INCONCLUSIVE)]}

    class Module(_FakeModule):
        def evaluate(self, run):
            out = super().evaluate(run)
            if level() != 0.95:  # at the family level the previous rule reads differently
                out[0].previous = [PreviousVerdict("a", 0.31, INCONCLUSIVE), PreviousVerdict("b", -0.21, INCONCLUSIVE),
                                   PreviousVerdict("c", -0.11, CONTRADICTED)]
            return out

    m = Module([[("x", 1.0, 0.1, 1), ("y", 1.0, 0.1, 1)]], prev)
    (c,) = evaluate_rule(m, None)
    assert [(p.where, p.value, p.status) for p in c.previous] == [
        ("a", 0.3, REPRODUCED),  # neither contradicted: the 95% verdict
        ("b", -0.21, INCONCLUSIVE),  # contradicted at 95% only: the family twin
        ("c", -0.11, CONTRADICTED)]  # contradicted at the family level: the family twin
    assert c.previous_status == CONTRADICTED

    # a twin at another place, or missing, never replaces a verdict
    class Shifted(_FakeModule):
        def evaluate(self, run):
            out = super().evaluate(run)
            if level() != 0.95:
                out[0].previous = [PreviousVerdict("z", 0.0, INCONCLUSIVE)]
            return out

    (c2,) = evaluate_rule(Shifted([[("x", 1.0, 0.1, 1), ("y", 1.0, 0.1, 1)]], prev), None)
    assert [(p.where, p.value, p.status) for p in c2.previous] == [
        ("a", 0.3, REPRODUCED), ("b", -0.2, CONTRADICTED), ("c", -0.1, INCONCLUSIVE)]


# ---------------------------------------------------------------- claim 4 over several settings

def gs_exact_run(settings):
    """Claim-4 runs with exactly the given units: per setting (arch, [per layer, per replicate] log ratios), one
    seed per replicate (so a layer's units are its replicates' log ratios); a setting with no layers has no
    per-layer γ/σ (not run)."""
    cells = []
    for k, (arch, units) in enumerate(settings):
        units = np.asarray(units, dtype=float)
        n = units.shape[1] if units.size else 2
        for r in range(n):
            final = {f"bn{i}": {"n_channels": 8, "layer_type": "conv", "median_ratio": 1.0, "per_seed": {
                "0": {"median_ratio": float(np.exp(units[i, r])), "frac_above_1": float(units[i, r] > 0)}}}
                for i in range(units.shape[0])} if units.size else {}
            noise = 0.01 * (k + 1)
            data = {"final": {"running": final}, "conditions": {"norms": ["batch"], "label_noise": noise}}
            cell = make_cell(f"g{arch}", r, {GAMMA_SIGMA: data}, label_noise=noise, seeds=[0])
            cell.conditions["arch"] = arch
            cells.append(cell)
    return make_run(cells)


def p_less(x) -> float:
    return float(sps.ttest_1samp(np.asarray(x, dtype=float), 0.0, alternative="less").pvalue)


def p_greater(x) -> float:
    return float(sps.ttest_1samp(np.asarray(x, dtype=float), 0.0, alternative="greater").pvalue)


UP = [[2.0, 2.1, 2.2]] * 4  # four layers far above 1: reproduced at any level used here


def _below(shift: float) -> list[list[float]]:
    """Four layers (u' = 2 of L = 4: p' = 3·p⁻ of the second-strongest): two below 1 by ``shift`` with a fixed
    spread, two far above."""
    x = [-shift - 0.1, -shift, -shift + 0.1]
    return [x, x, [2.0, 2.1, 2.2], [2.0, 2.1, 2.2]]


def _shift_for(p_prime: float) -> float:
    """The shift at which p' = 3·p⁻ equals ``p_prime`` (n = 3, sd 0.1: se = 0.1/√3)."""
    t = -sps.t.ppf(p_prime / 3, 2)
    return t * 0.1 / math.sqrt(3)


def test_claim_4_contradicted_needs_0025_over_k_and_not_run_settings_do_not_count():
    # p' = 0.02: below one-sided 0.025 (contradicted in one setting) but above 0.025/2
    b = _below(_shift_for(0.02))
    assert 3 * p_less(b[0]) == pytest.approx(0.02)
    alone = evaluate_rule(claim4, gs_exact_run([("lenet", b)]))[0]
    assert alone.status == CONTRADICTED and alone.family_size() == 1 and alone.decisive.level == 0.95
    # beside a setting that reproduces (k = 2), the family pass at 0.025/2 does not confirm it
    two = evaluate_rule(claim4, gs_exact_run([("alexnet", UP), ("lenet", b), ("vgg", [])]))[0]
    assert two.family_size() == 2  # the setting without per-layer γ/σ did not run
    assert [e.status for e in two.evaluations] == [REPRODUCED, INCONCLUSIVE, NOT_RUN]
    assert two.status == INCONCLUSIVE and two.evaluations[1].level == pytest.approx(0.975)
    assert two.evaluations[0].level == 0.95


def test_claim_4_contradicted_at_0025_over_k_shows_the_family_level_bound():
    # p' = 0.01: below 0.025/2 (contradicted with k = 2) but above 0.025/3 (not with k = 3)
    b = _below(_shift_for(0.01))
    x = np.asarray(b[0])
    two = evaluate_rule(claim4, gs_exact_run([("alexnet", UP), ("lenet", b)]))[0]
    assert two.status == CONTRADICTED and two.decisive.where.startswith("digits · lenet")
    d = two.decisive
    # the pivotal layer's upper bound at one-sided 0.025/2 / (L − u' + 1) = 0.0125/3, on the ratio scale
    half = sps.t.ppf(1 - 0.0125 / 3, 2) * x.std(ddof=1) / math.sqrt(3)
    assert d.ci_high == pytest.approx(math.exp(x.mean() + half), rel=1e-9) and d.ci_high < 1
    assert d.level == pytest.approx(0.975) and two.row()["k"] == 2
    # what the row says: the family level's one-sided α split as the test splits it, and both p-values
    assert d.method.endswith("lower bound at one-sided 0.0125/2, upper bound at 0.0125/3") and "over 3 replicates" in d.method
    p_minus = p_less(x)
    assert d.note.startswith(f"p = 1 that more than half of the 4 layers (≥ 3) are above 1, p' = {3 * p_minus:.3g} "
                             "that at least half (≥ 2) are below 1; 2 of 4 layers shown above 1; pivotal layer bn")
    assert "; BN layers with median |γ|/σ > 1 per replicate (mean over seeds): " in d.note  # the note follows

    three = evaluate_rule(claim4, gs_exact_run([("alexnet", UP), ("lenet", b), ("vgg", UP)]))[0]
    assert three.family_size() == 3 and three.status == INCONCLUSIVE
    assert three.decisive.level == pytest.approx(1 - 0.05 / 3)


def test_claim_4_reproduced_is_decided_at_0025_in_every_setting_without_bonferroni():
    # a setting whose p for "more than half above 1" is 0.02 (u = 3 of 4: p = 2·p⁺ of the third-strongest):
    # reproduced at one-sided 0.025 though not at 0.025/2; with a second reproducing setting the row is reproduced
    t = -sps.t.ppf(0.01, 2)
    s = t * 0.1 / math.sqrt(3)
    x = [s - 0.1, s, s + 0.1]
    a = [x, x, x, [-2.0, -2.1, -2.2]]
    assert 2 * p_greater(x) == pytest.approx(0.02)
    two = evaluate_rule(claim4, gs_exact_run([("lenet", a), ("alexnet", UP)]))[0]
    assert two.status == REPRODUCED and [e.status for e in two.evaluations] == [REPRODUCED, REPRODUCED]
    d = two.decisive  # the least supportive: the lenet setting, its lower bound at 0.025 / (L − u + 1) = 0.0125
    half = sps.t.ppf(1 - 0.0125, 2) * 0.1 / math.sqrt(3)
    assert d.where.startswith("digits · lenet") and d.level == 0.95
    assert d.ci_low == pytest.approx(math.exp(s - half), rel=1e-9) and d.ci_low > 1
    # the same setting where one layer fewer is above 1 ("half", not "more than half") is not reproduced
    half_up = evaluate_rule(claim4, gs_exact_run([("lenet", [x, x, [-2.0, -2.1, -2.2], [-2.0, -2.1, -2.2]])]))[0]
    assert half_up.status == CONTRADICTED  # exactly half below 1, clearly: 'at least half below'


ALPHA = (1.0 - 0.95) / 2.0  # one-sided α as floats compute it (0.025000000000000022): a p equal to it is not below it


@pytest.mark.parametrize("p_above, p_below, expected", [
    (0.0249, 0.9, REPRODUCED), (ALPHA, 0.9, INCONCLUSIVE), (0.9, 0.0249, CONTRADICTED), (0.9, ALPHA, INCONCLUSIVE),
    (0.01, 0.01, REPRODUCED)])
def test_layer_status_at_95_and_at_the_family_level(p_above, p_below, expected):
    t = lt.layer_test("l", [0.1, 0.2, 0.3])
    d = lt.LayerDecision((t,), p_above, p_below, t, None, None)
    assert claim4.layer_status(d) == expected
    with at_level(family_level(2)):  # one-sided 0.0125
        assert claim4.layer_status(d) == (expected if min(p_above, p_below) < 0.0125 else INCONCLUSIVE)


# ---------------------------------------------------------------- the layer test's own numbers


def test_layer_test_numbers_by_hand():
    t = lt.layer_test("l", [0.1, 0.2, 0.6, math.nan, None])  # non-finite units are dropped
    assert t.n == 3 and t.mean == pytest.approx(0.3)
    sd = math.sqrt(((0.1 - 0.3) ** 2 + (0.2 - 0.3) ** 2 + (0.6 - 0.3) ** 2) / 2)  # n − 1
    assert t.sd == pytest.approx(sd) and t.se == pytest.approx(sd / math.sqrt(3))
    assert t.p_plus == pytest.approx(p_greater([0.1, 0.2, 0.6])) and t.p_plus + t.p_minus == pytest.approx(1.0)
    assert t.bound(0.05, upper=True) == pytest.approx(0.3 + sps.t.ppf(0.95, 2) * sd / math.sqrt(3))
    assert t.bound(0.05, upper=False) == pytest.approx(0.3 - sps.t.ppf(0.95, 2) * sd / math.sqrt(3))
    lo, hi = t.interval(0.9)
    assert (lo, hi) == (pytest.approx(t.bound(0.05, False)), pytest.approx(t.bound(0.05, True)))
    two = lt.layer_test("l", [0.0, 1.0])  # two units are enough
    assert two.defined and two.p_plus == pytest.approx(0.25)  # t = 1 with 1 df: P(T > 1) = 1/4
    one = lt.layer_test("l", [0.4])
    assert one.n == 1 and one.mean == 0.4 and math.isnan(one.sd) and math.isnan(one.se) and not one.defined
    empty = lt.layer_test("l", [])
    assert empty.n == 0 and math.isnan(empty.mean)


def test_partial_conjunction_edges():
    assert lt.partial_conjunction([0.01, 0.02], 0) == 1.0 and lt.partial_conjunction([0.01, 0.02], 3) == 1.0
    assert lt.partial_conjunction([0.01, 0.02], 2) == pytest.approx(0.02)  # L − u + 1 = 1
    assert lt.partial_conjunction([0.01, 0.02], 1) == pytest.approx(0.02)  # 2 · 0.01
    assert lt.partial_conjunction([0.6, 0.9], 1) == 1.0  # 1.2, capped at 1
    assert lt.partial_conjunction([math.inf, 0.2, 0.1], 2) == pytest.approx(0.4)  # a non-finite p counts as 1


def test_pivot_and_the_shown_count_by_hand():
    # four layers with p⁺ ordered b < a < d < c; u = 3: the pivot is d; u' = 2 on p⁻ (ordered c < d < a < b): d too
    units = {"a": [0.5, 0.6, 0.7], "b": [0.9, 1.0, 1.1], "c": [-0.7, -0.6, -0.5], "d": [0.05, 0.1, 0.3]}
    tests = [lt.layer_test(n, u) for n, u in units.items()]
    d = lt.decide_layers(tests, 0.05)
    assert d.pivot.name == "d" and d.layers == 4
    pd = p_greater(units["d"])
    assert d.p_above == pytest.approx(min(1.0, 2 * pd))
    assert d.p_below == pytest.approx(min(1.0, 3 * p_less(units["d"])))
    x = np.asarray(units["d"])
    se = x.std(ddof=1) / math.sqrt(3)
    assert d.low == pytest.approx(x.mean() - sps.t.ppf(1 - 0.05 / 2, 2) * se)
    assert d.high == pytest.approx(x.mean() + sps.t.ppf(1 - 0.05 / 3, 2) * se)
    # shown above 1 at α: the largest v with every partial-conjunction p for 1..v below α
    pp = sorted(p_greater(u) for u in units.values())
    expected = 0
    for v in range(1, 5):
        if min(1.0, (4 - v + 1) * pp[v - 1]) < 0.05 and expected == v - 1:
            expected = v
    assert d.shown_above(0.05) == expected and expected == 2
    est = d.estimate("replicates")
    assert est.mean == pytest.approx(math.exp(x.mean())) and est.ci_low == pytest.approx(math.exp(d.low))
    assert est.ci_high == pytest.approx(math.exp(d.high)) and est.n == 3 and est.sd == pytest.approx(x.std(ddof=1))
    # ties in p are broken by name (a stable pivot)
    same = [lt.layer_test(n, [0.1, 0.2, 0.3]) for n in ("z", "y", "x")]
    assert lt.decide_layers(same, 0.05).pivot.name == "y"  # u = 2 of 3: the second name in order
    # an undefined layer (no spread) counts as p = 1: it is never the strongest
    flat = lt.layer_test("a0", [0.2, 0.2, 0.2])
    mixed = lt.decide_layers([flat, lt.layer_test("b", [0.5, 0.6, 0.7])], 0.05)
    assert mixed.pivot.name == "a0" and mixed.high is not None  # the refutation's pivot is "b", defined
    est = mixed.estimate("replicates")
    assert est.ci_low is None and est.ci_high is None  # one missing end: no interval shown at all
    # an undefined test counts as p = 1 exactly: it ties with a p of 1 and the name decides
    one = lt.LayerTest("b", 3, -9.0, 0.1, 1.0, 0.0)
    undefined = lt.LayerTest("a", 1, 0.3, math.nan, math.nan, math.nan)
    assert lt._pivot([one, undefined], 1, True).name == "a"


@pytest.mark.parametrize("p_plus, shown", [([0.9, 0.5, 0.7], 0), ([1e-6, 0.5, 0.9], 1), ([1e-6, 0.01, 0.9], 2),
                                           ([1e-6, 1e-5, 0.01], 3)])
def test_the_shown_count_by_hand(p_plus, shown):
    """v = the largest count with (L − u + 1)·p_(u) < α for every u ≤ v (L = 3, α = 0.05): 3·p₁, 2·p₂, p₃."""
    tests = tuple(lt.LayerTest(f"l{i}", 3, 0.1, 0.1, p, 1 - p) for i, p in enumerate(p_plus))
    d = lt.LayerDecision(tests, 1.0, 1.0, tests[0], None, None)
    assert d.shown_above(0.05) == shown


def test_partial_conjunction_power_by_hand():
    # L = 4: u = 3, each layer at α/2; power = P(Binomial(4, q) ≥ 3)
    q = float(sps.nct.sf(sps.t.ppf(1 - 0.025 / 2, 4), 4, 0.2 * math.sqrt(5) / 0.3))
    expected = 4 * q ** 3 * (1 - q) + q ** 4
    assert lt.partial_conjunction_power(5, 0.3, 0.2, 4, 0.025) == pytest.approx(expected, rel=1e-9)
    # L = 3: u = 2, each at α/2; P(≥ 2 of 3)
    q3 = float(sps.nct.sf(sps.t.ppf(1 - 0.025 / 2, 2), 2, 0.2 * math.sqrt(3) / 0.3))
    assert lt.partial_conjunction_power(3, 0.3, 0.2, 3, 0.025) == pytest.approx(3 * q3 ** 2 * (1 - q3) + q3 ** 3)
    assert lt.partial_conjunction_power(2, 0.3, 0.2, 1, 0.025) == pytest.approx(
        float(sps.nct.sf(sps.t.ppf(0.975, 1), 1, 0.2 * math.sqrt(2) / 0.3)))  # one layer, n = 2
    assert lt.partial_conjunction_power(5, 0.0, 0.2, 4, 0.025) == 1.0  # no spread: every layer passes
    assert lt.partial_conjunction_power(5, 0.0, 0.0, 4, 0.025) == 0.0  # ... unless the effect is not above 0
    assert lt.partial_conjunction_power(5, 0.3, 0.2, 0, 0.025) == 0.0
    assert lt.partial_conjunction_power(5, None, 0.2, 4, 0.025) == 0.0
    assert lt.partial_conjunction_power(5, math.inf, 0.2, 4, 0.025) == 0.0


def test_every_rule_is_evaluated_in_the_papers_order_with_its_own_multiplicity():
    from bnmem.report.claims import evaluate_claims, rule_ids

    b = _below(_shift_for(0.02))
    claims = evaluate_claims(gs_exact_run([("alexnet", UP), ("lenet", b)]))
    assert [c.id for c in claims] == rule_ids()
    four = next(c for c in claims if c.id == "4")
    assert four.status == INCONCLUSIVE and four.family_size() == 2 and four.level == pytest.approx(0.975)
    assert all(c.status == NOT_RUN for c in claims if c.id != "4")  # no other lens ran


def test_claim_4_at_one_replicate_says_its_units_are_seeds_and_batch_sigma_is_a_named_row():
    x = [[0.5, 0.6, 0.7, 0.8]] * 3  # three layers, one replicate of four seeds, all above 1
    cells = []
    final = {f"bn{i}": {"n_channels": 8, "layer_type": "conv", "median_ratio": 1.0, "per_seed": {
        str(s): {"median_ratio": float(np.exp(x[i][s])), "frac_above_1": 1.0} for s in range(4)}} for i in range(3)}
    data = {"final": {"running": final, "batch": final}, "conditions": {"norms": ["batch"], "label_noise": 0.01}}
    cell = make_cell("glenet", 0, {GAMMA_SIGMA: data}, label_noise=0.01, seeds=[0, 1, 2, 3])
    cell.conditions["arch"] = "lenet"
    cells.append(cell)
    claim = evaluate_rule(claim4, make_run(cells))[0]
    e = claim.decisive
    assert claim.status == REPRODUCED and e.n == 4
    assert "over 4 seeds per layer" in e.method and e.method.endswith("; one replicate: over its seeds, conditional "
                                                                      "on its corruption draw")
    batch = [a for a in e.analyses if a.name == "batch σ"]
    assert len(batch) == 1 and batch[0].status == REPRODUCED
    assert batch[0].note.endswith("shown above 1; pivotal layer bn1")  # its own text, nothing appended


def test_combine_with_a_shorter_family_pass_keeps_the_95_verdicts_as_they_are():
    c95 = _claim(Evaluation("s0", 0.5, 0.1, 0.9, REPRODUCED), Evaluation("s1", 0.5, 0.2, 0.9, LARGER))
    cfam = _claim(Evaluation("s0", 0.5, -0.1, 1.1, INCONCLUSIVE))
    out = combine(c95, cfam, family_level(2))
    assert [(e.status, e.level) for e in out.evaluations] == [(REPRODUCED, 0.95), (LARGER, 0.95)]


def test_a_co_verdict_aggregated_over_settings_is_its_weakest_run_and_valid_only_if_valid_everywhere():
    """Over the deciding settings, a co-verdict is the least supportive of the settings where it ran (one where it
    did not run does not pull it to "not run"), and it counts only if it is valid in every setting."""
    absent = Analysis("online", None, None, None, NOT_RUN, valid=False)
    ran = Analysis("online", 0.5, 0.1, 0.9, REPRODUCED)
    fine = Analysis("offline", 0.4, 0.1, 0.8, REPRODUCED)
    c = _claim(Evaluation("s0", 0.5, 0.1, 0.9, REPRODUCED, coverdicts=[absent, fine]),
               Evaluation("s1", 0.5, 0.1, 0.9, REPRODUCED, coverdicts=[ran, fine]))
    online, offline = c.coverdicts()
    assert (online.name, online.status, online.value, online.valid) == ("online", REPRODUCED, 0.5, False)
    assert offline == fine and offline.valid is True


def _claim_2_setting(where: str, coverdicts: tuple[str, ...] = ()) -> Evaluation:
    """One setting of claim 2 whose alternatives disagree: the primary and the matched fit below 0 (each
    interval excluding it), the same-epoch window above."""
    def an(name, value, low, high, status):
        return Analysis(name, value, low, high, status, "t", "", True, n=6, sd=0.5)

    primary = (-0.25, -0.6, -0.1, CONTRADICTED)
    return Evaluation.from_analysis(
        where, an("plan", *primary), {"label_noise": 0.0, "ood": 0.05}, True,
        [an("eval definition", *primary)] + [an(n, 0.3, 0.1, 0.5, REPRODUCED) for n in coverdicts],
        [an(f"eval: {claim2.EARLY_V4}", 2.04, 1.2, 2.9, REPRODUCED),
         an("eval: matched fit level (50% ± 0.15)", -0.42, -0.8, -0.05, CONTRADICTED)])


def test_what_is_held_fixed_names_every_estimand_on_each_side_in_every_setting():
    c = Claim("2", "t", "m", "r", "s")
    c.evaluations = [_claim_2_setting("A"), _claim_2_setting("B")]
    side = f"{SAME_EPOCH} (+) vs {CLEAN_PROGRESS}, eval definition, {CORRUPTED_FIT} (−)"
    assert c.held_fixed() == f"{DEPENDS}: A: {side}; B: {side}"
    assert c.agreement_text() == "2 of 3 analyses agree on direction · agree: eval definition contradicted"
    c.evaluations = [_claim_2_setting("A", coverdicts=("other",))]
    assert c.agreement_text().endswith(" · disagree: eval definition contradicted; other reproduced")


def test_a_claims_numbers_as_text_with_and_without_a_unit_and_when_missing():
    """The display the report, CSV and checklist share: the unit said once, never after a dash, no trailing space
    without a unit; an interval missing either end is a dash; a not-run claim says why, or that its lens is absent."""
    points, plain = new_claim("3a", "x"), new_claim("1", "x")
    assert points.fmt(0.034) == "+3.4 points" and points.fmt(None) == "—" and points.fmt(float("nan")) == "—"
    assert plain.fmt(0.02) == "+0.020"
    assert points.ci_text(0.01, 0.05) == "[+1.0, +5.0] points" and plain.ci_text(0.01, 0.05) == "[+0.010, +0.050]"
    assert points.ci_text(None, 0.05) == points.ci_text(0.01, None) == "—"
    assert plain.not_run_reason() == "the lens that measures it is not in this run"
    plain.evaluations = [not_run("A", "no outliers"), not_run("B", ""), not_run("C", "no outliers"),
                         Evaluation("D", 0.5, 0.1, 0.9, REPRODUCED, note="ran")]
    assert plain.not_run_reason() == "no outliers"


def test_an_estimate_as_a_panel_row_and_against_the_papers_range():
    """`Analysis.of` keeps the estimate's numbers, method, notes (its own and the estimate's, joined) and the
    comparison with the paper's range, which touches at its ends ("within"); no estimate keeps only the status."""
    def est(low, high, mean=0.5, note="few pairs"):
        return PairedDiff(mean, low, high, 6, "replicates", "t-interval", note=note, sd=0.2)

    assert vs_paper(est(0.1, 0.2), None) == "" and vs_paper(None, (0.3, 0.5)) == ""
    assert vs_paper(est(None, 0.2), (0.3, 0.5)) == vs_paper(est(0.1, None), (0.3, 0.5)) == ""
    assert vs_paper(est(0.1, 0.2), (0.3, 0.5)) == "below" and vs_paper(est(0.6, 0.9), (0.3, 0.5)) == "above"
    assert vs_paper(est(0.1, 0.3), (0.3, 0.5)) == vs_paper(est(0.5, 0.9), (0.3, 0.5)) == "within"
    a = Analysis.of("x", est(0.1, 0.2), REPRODUCED, note="mine", paper=(0.3, 0.5))
    assert (a.name, a.value, a.ci_low, a.ci_high, a.status, a.method, a.note, a.valid, a.vs_paper, a.n, a.sd) == (
        "x", 0.5, 0.1, 0.2, REPRODUCED, "t-interval", "mine; few pairs", True, "below", 6, 0.2)
    assert Analysis.of("x", est(0.1, 0.2, mean=float("nan"), note=""), REPRODUCED).value is None
    assert Analysis.of("x", est(0.1, 0.2, note=""), REPRODUCED).note == ""
    empty = Analysis.of("y", None, NOT_RUN, note="why")
    assert (empty.name, empty.value, empty.ci_low, empty.status, empty.method, empty.note, empty.valid) == (
        "y", None, None, NOT_RUN, "", "why", True)
    assert first_sentence("Alpha is 1 − 0.05/k. Then more.") == "Alpha is 1 − 0.05/k"
    assert first_sentence("One. Two. Three") == "One" and first_sentence("No end.") == "No end"
    assert first_sentence("Plain") == "Plain" and first_sentence(". Lead") == ""


def test_claim_4_without_the_identifiable_flag_decides_on_every_layer_and_shows_its_other_rows():
    """A run from before plan 6.0's flag: decided on every BN layer, and it says so; its panel rows (Anderson's
    bound, plan 3.0's t and plan 2.0's median, both invalid), its conditions, and a setting with no per-layer
    γ/σ not run with its reason."""
    claim = evaluate_rule(claim4, gs_exact_run([("lenet", UP), ("vgg", [])]))[0]
    assert claim.section == "gamma_sigma"
    e, absent = claim.evaluations
    assert absent.status == NOT_RUN and absent.note == "no per-layer γ/σ in gamma_sigma.json"
    assert {k: e.conditions[k] for k in ("sigma", "layers", "n_layers", "n_seeds")} == {
        "sigma": "running", "layers": "every BN layer", "n_layers": 4, "n_seeds": 1}
    assert "BN layers with median |γ|/σ > 1 per replicate (mean over seeds): 4.0 of 4, 4.0 of 4, 4.0 of 4; " in e.note
    assert e.note.endswith("; this run recorded no identifiable-layer flag (a gamma-sigma lens from before plan 6.0): "
                           "decided on every BN layer (plan 5.0's set)")
    rows = {a.name: a for a in e.analyses}
    every = rows[claim4.EVERY_LAYER_ANALYSIS + " (the primary here)"]
    assert every.status == REPRODUCED and every.valid and every.value == e.value
    assert rows[claim4.PLAN4_ANDERSON].value is not None
    v3 = rows["plan 3.0: t-interval over replicates (invalid on a fraction of a few layers)"]
    assert (v3.status, v3.valid, v3.value) == (REPRODUCED, False, pytest.approx(1.0))
    v2 = rows["plan 2.0: median convolutional-channel fraction over models"]
    assert v2.valid is False and v2.note == "only 3 models: too few for a 95% distribution-free interval"


# ---------------------------------------------------------------- the robustness panel by estimand (plan 6.0)


def _claim_2_panel(*extra: Evaluation, same_fit: bool = False) -> Claim:
    """Claim 2 in one setting (:func:`_claim_2_setting`): the plan's row merged with its eval-definition co-verdict,
    the same-epoch window, the matched fit (with the same-epoch window's numbers when ``same_fit``)."""
    e = _claim_2_setting("A")
    if same_fit:
        early = e.analyses[0]
        e.analyses[1] = replace(early, name="eval: matched fit level (50% ± 0.15)")
    c = Claim("2", "t", "m", "r", "s")
    c.evaluations = [e, *extra]
    return c


def test_the_panel_names_each_row_by_the_estimand_claim_2s_plan_declares():
    """Primary under its estimand, alternatives under theirs, '=' as the primary's numbers, the rest not run."""
    rows = _claim_2_panel().panel()
    assert [lab for lab, _ in rows] == [CLEAN_PROGRESS, SAME_EPOCH, CORRUPTED_FIT, TEST_ACCURACY, CONVERGENCE,
                                        PAPERS_PROTOCOL]
    by = dict(rows)
    assert by[CLEAN_PROGRESS].name == "plan = eval definition"
    assert (by[SAME_EPOCH].value, by[SAME_EPOCH].status) == (2.04, REPRODUCED)
    assert (by[CORRUPTED_FIT].value, by[CORRUPTED_FIT].status) == (-0.42, CONTRADICTED)
    for lab in (TEST_ACCURACY, CONVERGENCE):  # declared, not measured by this run
        a = by[lab]
        assert (a.name, a.value, a.ci_low, a.ci_high, a.status, a.note) == (
            lab, None, None, None, NOT_RUN, "not measured by this run")
    paper = by[PAPERS_PROTOCOL]  # '=': the primary's own number in this run
    assert (paper.name, paper.value, paper.ci_low, paper.ci_high, paper.status, paper.note) == (
        PAPERS_PROTOCOL, -0.25, -0.6, -0.1, CONTRADICTED, "the primary's own number in this run")


def test_a_declared_estimand_merged_into_another_row_is_shown_with_that_rows_numbers():
    """The matched fit with the same-epoch numbers: merged into that row, and its estimand says so."""
    rows = _claim_2_panel(same_fit=True).panel()
    by = dict(rows)
    assert by[SAME_EPOCH].name == f"eval: {claim2.EARLY_V4} = eval: matched fit level (50% ± 0.15)"
    fit = by[CORRUPTED_FIT]
    assert (fit.name, fit.value, fit.ci_low, fit.ci_high, fit.status, fit.note) == (
        CORRUPTED_FIT, 2.04, 1.2, 2.9, REPRODUCED, f"the same numbers as '{SAME_EPOCH}'")
    assert [lab for lab, _ in rows].count(CORRUPTED_FIT) == 1


def test_a_recipe_variant_of_a_declared_estimand_is_that_estimands_row():
    """'recipe paper's protocol' is the paper's-protocol row (not the primary's number); an undeclared recipe
    variant keeps its own name."""
    paper = Evaluation("A", 0.7, 0.4, 1.0, REPRODUCED, variant="recipe " + PAPERS_PROTOCOL, deciding=False)
    other = Evaluation("A", 0.9, 0.6, 1.2, REPRODUCED, variant="recipe per-norm", deciding=False)
    rows = _claim_2_panel(paper, other).panel()
    labels = [lab for lab, _ in rows]
    assert labels.count(PAPERS_PROTOCOL) == 1 and "recipe per-norm" in labels
    by = dict(rows)
    assert (by[PAPERS_PROTOCOL].value, by[PAPERS_PROTOCOL].name) == (0.7, "recipe " + PAPERS_PROTOCOL)
    assert by["recipe per-norm"].value == 0.9


def test_a_claim_without_a_plan_entry_shows_its_primary_as_primary_and_the_rest_by_name():
    """No plan entry: the primary is 'primary', every other analysis its own name, nothing declared to add."""
    alt = Analysis("alt", 0.2, -0.1, 0.5, INCONCLUSIVE)
    c = _claim(Evaluation("A", 0.5, 0.1, 0.9, REPRODUCED, analyses=[alt]), cid="no such claim")
    assert [(lab, a.name) for lab, a in c.panel()] == [("primary", "plan"), ("alt", "alt")]
    assert c.estimand_of(Analysis("plan = x", 0.5, 0.1, 0.9, REPRODUCED)) == "primary"


def test_the_estimand_of_an_analysis_by_claim_2s_plan_entry():
    """The primary (alone or merged) is the declared estimand; an alternative takes the label whose text its name
    contains; an undeclared one keeps its name."""
    c = _claim_2_panel()
    of = lambda name: c.estimand_of(Analysis(name, 0.1, 0.0, 0.2, REPRODUCED))  # noqa: E731
    assert of("plan") == of("plan = eval definition") == CLEAN_PROGRESS
    assert of("eval: matched fit level (50% ± 0.15)") == CORRUPTED_FIT
    assert of(f"eval: {claim2.EARLY_V4}") == SAME_EPOCH
    assert of("eval definition") == "eval definition" and of("planned") == "planned"


def test_an_analysis_label_for_display():
    """The plan's own row is 'plan 6.0 (<primary co-verdict>)' (its merged names kept); others their name, marked
    when invalid."""
    c = _claim_2_panel()
    c.evaluations[0].primary = "eval definition"
    row = lambda name, valid=True: Analysis(name, 0.1, 0.0, 0.2, REPRODUCED, valid=valid)  # noqa: E731
    assert PLAN_VERSION == "6.0"
    assert c.label(row("plan")) == "plan 6.0 (eval definition)"
    assert c.label(row("plan = eval definition")) == "plan 6.0 (eval definition) = eval definition"
    assert c.label(row("alt")) == "alt" and c.label(row("planned")) == "planned"
    assert c.label(row("alt", valid=False)) == "alt (invalid: shown, not counted)"
    bare = _claim(Evaluation("A", 0.5, 0.1, 0.9, REPRODUCED))  # no co-verdict is the primary
    assert bare.label(row("plan")) == "plan 6.0" and bare.label(row("plan = x")) == "plan 6.0 = x"


def test_same_numbers_means_equal_value_and_interval_to_rounding():
    """Equal (or both missing) value, lower and upper end; any one differing, or missing on one side only, is not."""
    base = Analysis("a", 0.5, 0.1, 0.9, REPRODUCED)
    same = lambda v, lo, hi: base.same_numbers(Analysis("b", v, lo, hi, INCONCLUSIVE))  # noqa: E731
    assert same(0.5, 0.1, 0.9) and same(0.5 * (1 + 1e-13), 0.1, 0.9)
    assert Analysis("n", None, None, None, NOT_RUN).same_numbers(Analysis("m", None, None, None, NOT_RUN))
    assert not same(0.6, 0.1, 0.9) and not same(0.5, 0.2, 0.9) and not same(0.5, 0.1, 1.0)
    assert not same(0.5 * (1 + 1e-10), 0.1, 0.9)  # beyond rounding: another number
    zero = Analysis("z", 0.0, -0.2, 0.2, REPRODUCED)
    assert zero.same_numbers(Analysis("y", 1e-16, -0.2, 0.2, REPRODUCED))  # zero to rounding
    assert not same(None, 0.1, 0.9) and not same(0.5, None, 0.9) and not same(0.5, 0.1, None)
    assert not Analysis("n", None, 0.1, 0.9, REPRODUCED).same_numbers(base)


def test_an_evaluation_as_a_panel_row_keeps_every_number():
    """`as_analysis`: the evaluation's numbers, status, method, note, validity, paper comparison, n and sd."""
    e = Evaluation("A", 0.5, 0.1, 0.9, REPRODUCED, "t-interval", "few", False, "above", 7, 0.3)
    assert e.as_analysis() == Analysis("plan", 0.5, 0.1, 0.9, REPRODUCED, "t-interval", "few", False, "above", 7, 0.3)
    assert e.as_analysis("v").name == "v"


def test_effect_text_is_value_interval_and_the_unit_once():
    """'value [low, high] unit'; the value alone (with its unit) when either end is missing; '—' for no value."""
    points, plain = new_claim("3a", "x"), new_claim("1", "x")
    assert points.effect_text(0.034, 0.01, 0.05) == "+3.4 [+1.0, +5.0] points"
    assert plain.effect_text(0.02, 0.01, 0.05) == "+0.020 [+0.010, +0.050]"
    assert points.effect_text(0.034, None, 0.05) == points.effect_text(0.034, 0.01, None) == "+3.4 points"
    assert points.effect_text(None, 0.01, 0.05) == points.effect_text(math.nan, 0.01, 0.05) == "—"
    assert points.effect_text(None, None, None) == "—"


def test_direction_of_each_status():
    """'+' for the paper's side, '−' against it, '0' undecided, None not run."""
    for s in (REPRODUCED, LARGER, DIRECTION_ONLY, SMALLER, CHECK_PASSED):
        assert direction(s) == "+", s
    assert direction(CONTRADICTED) == direction(CHECK_FAILED) == "−"
    assert direction(INCONCLUSIVE) == "0" and direction(NOT_RUN) is None


def test_magnitude_grade_at_the_edges_of_the_papers_range():
    """Larger only with the lower end above the range; smaller only wholly below the minimum; touching or
    straddling the minimum stays direction only."""
    def est(lo, hi):
        return PairedDiff((lo + hi) / 2, lo, hi, 6, "replicates", "t")

    paper = (0.03, 0.10)
    assert grade_magnitude(est(0.10, 0.2), paper) == REPRODUCED  # lower end at the top of the range
    assert grade_magnitude(est(0.11, 0.2), paper) == LARGER
    assert grade_magnitude(est(0.01, 0.02), paper) == SMALLER
    assert grade_magnitude(est(0.01, 0.03), paper) == DIRECTION_ONLY  # touching the minimum
    assert grade_magnitude(est(0.01, 0.04), paper) == DIRECTION_ONLY  # straddling it
