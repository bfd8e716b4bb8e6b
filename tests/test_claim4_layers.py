"""Claim 4 under plan 5.0: per-layer one-sided t-tests combined by the partial-conjunction test.

The statistic functions are checked against scipy and against the test's definition; the claim is decided on
synthetic gamma_sigma runs through the report's own driver (evaluate_rule: both passes, combine, the least
supportive setting); the null simulations run that driver too, with a planted-bug twin each.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from bnmem.analysis_plan import CONTRADICTED, INCONCLUSIVE, REPRODUCED
from bnmem.names import GAMMA_SIGMA
from bnmem.report.claims import claim4, evaluate_rule
from bnmem.report.claims import layer_test as lt
from bnmem.stats import PairedDiff

from synthetic_runs import make_cell, make_run

STRONG = 10.0  # a layer far from 1 (log ratio ±10): its p is ≈ 0 even at n = 2


def gs_layers_run(rng, settings, n: int, seeds: int = 2, rep_sd: float = 0.03, seed_sd: float = 0.03):
    """Claim-4 runs: per setting (label-noise level; its own architecture name) the true mean log(median
    |γ|/σ) of each BN layer; per replicate a normal replicate effect per layer, per model normal seed noise."""
    cells = []
    for k, (arch, means) in enumerate(settings):
        mu = np.asarray(means, dtype=float)
        for r in range(n):
            rep = mu + rng.normal(0, rep_sd, mu.size)
            vals = rep[None, :] + rng.normal(0, seed_sd, (seeds, mu.size))
            final = {f"bn{i}": {"n_channels": 8, "layer_type": "conv", "median_ratio": 1.0, "per_seed": {
                str(s): {"median_ratio": float(np.exp(vals[s, i])), "frac_above_1": float(vals[s, i] > 0)}
                for s in range(seeds)}} for i in range(mu.size)}
            noise = 0.01 * (k + 1)
            data = {"final": {"running": final}, "conditions": {"norms": ["batch"], "label_noise": noise}}
            cell = make_cell(f"g{arch}", r, {GAMMA_SIGMA: data}, label_noise=noise)
            cell.conditions["arch"] = arch
            cells.append(cell)
    return make_run(cells)


def claim_of(run):
    return evaluate_rule(claim4, run)[0]


# ---------------------------------------------------------------- the statistic


def test_layer_test_is_the_one_sided_t_test():
    rng = np.random.default_rng(1)
    for n in (2, 3, 5, 10):
        for _ in range(20):
            x = rng.normal(rng.normal(0, 0.5), 0.3, n)
            t = lt.layer_test("l", x)
            assert t.p_plus == pytest.approx(sps.ttest_1samp(x, 0, alternative="greater").pvalue, rel=1e-9)
            assert t.p_minus == pytest.approx(sps.ttest_1samp(x, 0, alternative="less").pvalue, rel=1e-9)
            lo, hi = t.interval(0.9)
            ref = sps.t.interval(0.9, n - 1, loc=x.mean(), scale=sps.sem(x))
            assert (lo, hi) == (pytest.approx(ref[0]), pytest.approx(ref[1]))
    # no test without two units or without spread (never a zero-width certainty)
    assert not lt.layer_test("l", [0.3]).defined and not lt.layer_test("l", [0.2, 0.2, 0.2]).defined
    assert lt.layer_test("l", [0.2, 0.2, 0.2]).bound(0.05, upper=False) is None


def test_u_and_the_partial_conjunction_p_match_their_definitions():
    assert [lt.u_above(L) for L in (1, 2, 3, 4, 21)] == [1, 2, 2, 3, 11]
    assert [lt.u_below(L) for L in (1, 2, 3, 4, 21)] == [1, 1, 2, 2, 11]
    rng = np.random.default_rng(2)
    for _ in range(300):
        L = int(rng.integers(1, 25))
        p = rng.uniform(0, 0.2, L) ** rng.uniform(0.5, 3)
        u = int(rng.integers(1, L + 1))
        pc = lt.partial_conjunction(p, u)
        assert pc == pytest.approx(min(1.0, (L - u + 1) * sorted(p)[u - 1]))
        for alpha in (0.05, 0.05 / 3, 0.01):  # p < α exactly when at least u tests pass at α/(L − u + 1)
            assert (pc < alpha) == (int(np.sum(p < alpha / (L - u + 1))) >= u)
    assert lt.partial_conjunction([0.01, math.nan, 0.02], 3) == 1.0  # an undefined test counts as p = 1


def test_the_pivotal_bounds_read_as_the_test_does():
    """Lower bound above 0 ⇔ p < α; upper bound below 0 ⇔ p' < α; the same layer decides both sides."""
    rng = np.random.default_rng(3)
    for _ in range(400):
        L, n = int(rng.integers(1, 22)), int(rng.integers(2, 8))
        mus = rng.normal(0, 0.3, L)
        tests = [lt.layer_test(f"l{i}", rng.normal(m, 0.2, n)) for i, m in enumerate(mus)]
        for alpha in (0.05, 0.05 / 2):
            d = lt.decide_layers(tests, alpha)
            assert (d.low > 0) == (d.p_above < alpha) and (d.high < 0) == (d.p_below < alpha)
            assert d.low <= d.pivot.mean <= d.high
            v = d.shown_above(alpha)
            assert (v >= lt.u_above(L)) <= (d.p_above < alpha)  # the count never claims more than the test


def test_the_decision_is_monotone_in_each_layer():
    """Raising one layer's units never lowers the evidence for 'most above 1' nor raises it for 'half below'."""
    rng = np.random.default_rng(10)
    for _ in range(200):
        L, n = int(rng.integers(1, 22)), int(rng.integers(2, 6))
        units = rng.normal(rng.normal(0, 0.3, (L, 1)), 0.2, (L, n))
        before = lt.decide_layers([lt.layer_test(f"l{i}", u) for i, u in enumerate(units)], 0.05)
        units[int(rng.integers(L))] += rng.uniform(0, 1)
        after = lt.decide_layers([lt.layer_test(f"l{i}", u) for i, u in enumerate(units)], 0.05)
        assert after.p_above <= before.p_above + 1e-12 and after.p_below >= before.p_below - 1e-12


def test_partial_conjunction_power_matches_a_simulation_of_the_rule():
    """The design's power (a binomial over independent layers) against the production decision simulated."""
    rng = np.random.default_rng(4)
    for L, n, effect, sd in ((4, 3, 0.3, 0.1), (21, 3, 0.18, 0.1), (4, 5, 0.05, 0.1), (21, 10, 0.0, 0.1)):
        draws = 1500
        hits = sum(lt.decide_layers([lt.layer_test("l", rng.normal(effect, sd, n)) for _ in range(L)],
                                    0.05).p_above < 0.05 for _ in range(draws))
        exact = lt.partial_conjunction_power(n, sd, effect, L, 0.05)
        assert abs(hits / draws - exact) <= 4 * math.sqrt(max(exact * (1 - exact), 1e-4) / draws) + 1e-3
    assert lt.partial_conjunction_power(3, 0.1, 0.0, 4, 0.05) < 0.01  # every layer at 1: far below α
    assert lt.partial_conjunction_power(1, 0.1, 1.0, 4, 0.05) == 0.0


def test_design_power_for_claim_4_goes_through_the_rule():
    import dataclasses

    from bnmem.analysis_plan import PLANNING, TEST_LAYERS
    from bnmem.report.power import SettingDesign, endpoint_power

    ep = PLANNING["4"][0]
    assert ep.test == TEST_LAYERS and ep.threshold == 0.0
    s = SettingDesign(3, {"": 0.1}, layers=21)
    assert endpoint_power(ep, 3, 0.1, s) == pytest.approx(lt.partial_conjunction_power(3, 0.1, ep.effect, 21, 0.025))
    assert endpoint_power(ep, 10, 0.1, s) > endpoint_power(ep, 3, 0.1, s)
    assert endpoint_power(dataclasses.replace(ep, effect=0.0), 10, 0.1, s) < 0.05


# ---------------------------------------------------------------- constructed studies through the report


def test_contradicted_when_every_model_has_at_most_half_its_layers_above_1():
    """LeNet (4 layers, 2 above 1 in every model) and ResNet-20 (21 layers, 10 above) as two settings, n = 3:
    the layers below 1 are clearly below, so 'at least half below 1' is shown in each: contradicted (tested at
    0.05/k). Plan 4.0's rule could not read contradicted at n = 3 (its previous verdict: inconclusive)."""
    lenet = [0.3, 0.3, -1.0, -1.0]
    resnet = [0.3] * 10 + [-1.0] * 11
    run = gs_layers_run(np.random.default_rng(5), [("lenet", lenet), ("resnet20", resnet)], 3)
    claim = claim_of(run)
    assert claim.status == CONTRADICTED and claim.family_size() == 2
    for e in claim.deciding():
        assert e.status == CONTRADICTED and e.ci_high < 1 and e.level == pytest.approx(1 - 0.05 / 2)
        assert "p' = " in e.note and e.conditions["n_layers"] in (4, 21)
    v4 = next(a for a in claim.robustness() if a.name.startswith("plan 4.0"))
    assert v4.status == INCONCLUSIVE  # Anderson's bound at n = 3 (a robustness row)
    assert claim.previous_status == claim.status  # plan 6.0 kept 5.0's rule
    # each model with exactly half its layers above 1 — the demo's flip shape — is contradicted too
    half = gs_layers_run(np.random.default_rng(6), [("lenet", [0.3, 0.3, -1.0, -1.0])], 3)
    assert claim_of(half).status == CONTRADICTED


def test_reproduced_when_19_of_21_layers_are_clearly_above_1():
    means = [1.0] * 19 + [-1.0] * 2
    run = gs_layers_run(np.random.default_rng(7), [("resnet20", means)], 3)
    claim = claim_of(run)
    d = claim.decisive
    assert claim.status == REPRODUCED and d.ci_low > 1 and d.n == 3 and d.conditions["n_layers"] == 21
    assert "over 3 replicates" in d.method and "19 of 21 layers shown above 1" in d.note
    v4 = next(a for a in claim.robustness() if a.name.startswith("plan 4.0"))
    assert v4.status == INCONCLUSIVE  # Anderson's bound cannot exceed ½ at n = 3 (a robustness row)
    # the same layers at one replicate: the test is over its seeds, and says so
    one = claim_of(gs_layers_run(np.random.default_rng(8), [("resnet20", means)], 1, seeds=4))
    assert one.status == REPRODUCED and "conditional on its corruption draw" in one.decisive.method
    # the per-layer table of the claim's section: one row per layer, the production p-values
    tables = claim4.layer_tables(run)
    assert len(tables) == 1 and len(tables[0].rows) == 21 and tables[0].header[-2:] == ["p⁺", "p⁻"]
    names, units, _ = claim4.layer_units(run.cells and [(c, c.lenses[GAMMA_SIGMA]) for c in run.cells],
                                         "running")
    assert tables[0].rows[0][4] == f"{lt.layer_test(names[0], units[0]).p_plus:.3g}"


def test_no_spread_is_no_evidence():
    """Every replicate identical (a synthetic artefact): no layer has a test, so the row is inconclusive."""
    run = gs_layers_run(np.random.default_rng(9), [("lenet", [1.0] * 4)], 3, rep_sd=0.0, seed_sd=0.0)
    claim = claim_of(run)
    assert claim.status == INCONCLUSIVE and claim.decisive.ci_low is None


# ---------------------------------------------------------------- nulls through the report, with twins
#
# A rule's null rate is asserted at most NULL_MAX of NULL_DRAWS. The nominal rate is 2.5% (one-sided, the
# level of the other claims' two-sided 95% intervals). Derivation: with N = 1,240 draws and the check "at most
# 44 hits" (3.5%), a rule at twice the nominal rate (5%) passes with P(Binomial(1240, 0.05) ≤ 44) = 0.0088, so it
# fails with probability ≥ 0.99; a rule at its nominal 2.5% fails with P(Binomial(1240, 0.025) > 44) = 0.0098
# (fixed seeds make each run deterministic). 1,240 is the fewest draws (in steps of 20) for which such a
# threshold exists with both error probabilities ≤ 0.01.
NOMINAL = 0.025
NULL_DRAWS = 1240
NULL_MAX = 44


def test_null_threshold_derivation():
    assert sps.binom.cdf(NULL_MAX, NULL_DRAWS, 2 * NOMINAL) <= 0.01
    assert sps.binom.sf(NULL_MAX, NULL_DRAWS, NOMINAL) <= 0.01


@pytest.fixture
def deciding_path_only(monkeypatch):
    """The null simulations decide thousands of runs: the robustness rows (which never decide a row) are
    replaced by a constant; the deciding path (units, tests, partial conjunction, both passes, combine, the
    least supportive setting) is the production code."""
    stub = PairedDiff(0.5, None, None, 1, "seeds", "")
    monkeypatch.setattr(claim4, "_anderson", lambda groups: (stub, INCONCLUSIVE))
    monkeypatch.setattr(claim4, "per_layer", lambda reps, mode: None)
    monkeypatch.setattr(claim4, "_v2", lambda reps, typed: stub)
    monkeypatch.setattr(claim4, "_descriptions", lambda reps, typed: "")
    monkeypatch.setattr(claim4, "estimate", lambda *a: stub)


def _null_rates(settings, n: int, seed: int, draws: int = NULL_DRAWS) -> dict[str, int]:
    rng = np.random.default_rng(seed)
    statuses = [claim_of(gs_layers_run(rng, settings, n, seeds=1, rep_sd=0.1, seed_sd=0.0)).status
                for _ in range(draws)]
    return {s: statuses.count(s) for s in (REPRODUCED, CONTRADICTED)}


def reproduced_null(L: int) -> list[tuple[str, list[float]]]:
    """k = 2: the least favourable null for 'more than half above 1' in one setting (u − 1 layers far above,
    the other L − u + 1 exactly at 1: the row can be reproduced only through a false layer; rate ≈ 1 −
    (1 − α/m)^m ≤ α), and a setting far above 1 in every layer."""
    u = L // 2 + 1
    return [("lenet", [STRONG] * (u - 1) + [0.0] * (L - u + 1)), ("alexnet", [STRONG] * L)]


def contradicted_null(L: int) -> list[tuple[str, list[float]]]:
    """k = 2 settings, each the least favourable null for 'at least half below 1' (u' − 1 layers far below, the
    rest exactly at 1): each reads contradicted at ≈ α/k, the row at ≈ α."""
    ub = (L + 1) // 2
    return [(a, [-STRONG] * (ub - 1) + [0.0] * (L - ub + 1)) for a in ("lenet", "alexnet")]


@pytest.mark.parametrize("L,n", [(4, 2), (4, 3), (4, 5), (4, 10), (21, 3)])
def test_claim_4_nulls_through_the_report(deciding_path_only, L, n):
    repro = _null_rates(reproduced_null(L), n, 100 + n + L)
    assert repro[REPRODUCED] <= NULL_MAX, repro
    contra = _null_rates(contradicted_null(L), n, 200 + n + L)
    assert contra[CONTRADICTED] <= NULL_MAX, contra


def test_claim_4_null_twin_without_the_bonferroni_factor_fails(deciding_path_only, monkeypatch):
    """The planted bug: p = p_(u) without the (L − u + 1) factor. At LeNet's L = 4 the least favourable null
    then reads reproduced at 1 − (1 − α)² ≈ 4.9% (α = 0.025), about twice the nominal rate: the same check rejects it."""
    monkeypatch.setattr(lt, "partial_conjunction",
                        lambda p, u: float(np.sort(np.where(np.isfinite(p), p, 1.0))[u - 1]))
    assert _null_rates(reproduced_null(4), 3, 103 + 4)[REPRODUCED] > NULL_MAX


def test_claim_4_null_twin_with_u_off_by_one_fails(deciding_path_only, monkeypatch):
    """The planted bug: u = ⌊L/2⌋ ('at least half above' instead of 'more than half'). The least favourable
    null then has u layers far above and reads reproduced almost always."""
    monkeypatch.setattr(lt, "u_above", lambda L: L // 2)
    assert _null_rates(reproduced_null(4), 3, 103 + 4, draws=100)[REPRODUCED] > NULL_MAX
