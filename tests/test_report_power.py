"""Power where the verdict is read: summary.csv, summary.md, the headline and the forest plot of a run."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from synthetic_runs import lira_run

from bnmem.analysis_plan import CONTRADICTED, DIRECTION_ONLY, INCONCLUSIVE, LARGER, PLANNING, REPRODUCED
from bnmem.power import power_above
from bnmem.report.claims import evaluate_claims
from bnmem.report.forest import forest_panels
from bnmem.report.headline import headline_rows
from bnmem.report.power import SettingDesign, design_power, endpoint_power, power_of
from bnmem.report.summary import claim_rows


def _claim(run, cid):
    return next(c for c in evaluate_claims(run) if c.id == cid)


def _lira(means: list[float], spread: float = 0.002, targets: int = 8):
    """Replicates whose per-target AUC differences average exactly ``means`` (a 5% label-noise mix)."""
    rng = np.random.default_rng(5)
    reps = []
    for m in means:
        d = rng.normal(0.0, spread, targets)
        reps.append(d - d.mean() + m)
    return lira_run(reps)


def test_power_is_the_noncentral_t_at_the_runs_n_and_observed_spread():
    means = [0.040, 0.052, 0.046]  # straddles the 4-point minimum at a 5% mix: direction only, undecided
    claim = _claim(_lira(means), "3a")
    assert claim.status == DIRECTION_ONLY
    p = power_of(claim)
    sd = float(np.std(means, ddof=1))
    # 5% mix: the paper's minimum 4 points is the threshold, the range's upper end 5 points the planning effect
    assert p.power == pytest.approx(power_above(3, sd, 0.05, 0.04, 0.025), rel=1e-9)
    assert p.n == 3 and p.unit == "replicates" and p.basis == "observed spread"
    need = p.needed
    assert power_above(need, sd, 0.05, 0.04, 0.025) >= 0.8 > power_above(need - 1, sd, 0.05, 0.04, 0.025)
    # the smallest effect 3 replicates detect with 80% power: the noncentral t solved for the effect
    assert power_above(3, sd, p.mde, 0.04, 0.025) == pytest.approx(0.8, abs=1e-6)
    assert power_above(3, sd, p.mde * 0.99, 0.04, 0.025) < 0.8
    row = next(r for r in claim_rows([claim]) if r["id"] == "3a")
    assert row["power"] == f"{p.power:.3f}" and row["n_for_80"] == str(need) and row["power_n"] == "3"
    assert float(row["min_effect_80"]) == pytest.approx(p.mde, rel=1e-5)
    assert p.text().startswith("80% power at 3 replicates only for an effect ≥ +") and "points" in p.text()
    assert f"~{need} replicates needed for the planning effect" in p.text()


def test_decided_rows_show_no_power():
    """Plan 5.0: power describes a design; beside a decided status it says nothing (issue 36: claim 2 read
    'reproduced' beside 'power 0.00')."""
    for means, status in (([0.046, 0.052, 0.049], REPRODUCED), ([0.1, 0.11, 0.105], LARGER),
                          ([-0.05, -0.06, -0.055], CONTRADICTED)):
        claim = _claim(_lira(means), "3a")
        assert claim.status == status
        p = power_of(claim)
        assert p.power is not None and not p.shown and p.text() == "—" and p.short_text() == "—"
        row = next(r for r in claim_rows([claim]) if r["id"] == "3a")
        assert row["power"] == row["n_for_80"] == row["min_effect_80"] == "" and row["verdict"] == status
        assert next(h for h in headline_rows([claim]) if h["id"] == "3a")["power"] == "—"


def test_an_observed_sd_of_zero_is_observed_not_declared():
    """Three replicates that agree exactly: SD 0 is the observed spread (report/power.py read 0 as missing)."""
    claim = _claim(_lira([0.001, 0.001, 0.001], spread=0.0), "3a")
    assert claim.decisive.sd == 0
    assert power_of(claim).basis == "observed spread"


def test_an_underpowered_inconclusive_row_says_so_and_an_adequate_one_does_not():
    weak = _claim(_lira([0.03, -0.02, 0.01]), "3a")  # spread 2.5 points: the design cannot see 5 points
    assert weak.status == INCONCLUSIVE
    p = power_of(weak)
    assert p.power < 0.5
    expected = f"inconclusive (underpowered: power {p.power:.2f}; ~{p.needed} replicates needed)"
    assert next(r for r in claim_rows([weak]) if r["id"] == "3a")["verdict"] == expected
    assert next(h for h in headline_rows([weak]) if h["id"] == "3a")["verdict"] == expected
    panel = next(f for f in forest_panels([weak]) if f.title.startswith("3a"))
    assert "UNDERPOWERED" in panel.title and any(r.label.endswith("[underpowered]") for r in panel.rows)
    # the same null result with a tight spread: adequate power, plainly inconclusive
    tight = _claim(_lira([0.001, -0.0005, 0.0002]), "3a")
    assert tight.status == INCONCLUSIVE and power_of(tight).power >= 0.5
    assert next(r for r in claim_rows([tight]) if r["id"] == "3a")["verdict"] == INCONCLUSIVE
    panel = next(f for f in forest_panels([tight]) if f.title.startswith("3a"))
    assert "UNDERPOWERED" not in panel.title


def test_every_setting_must_pass_so_the_power_is_the_product():
    ep = PLANNING["1"][0]
    a, b = SettingDesign(3, {"": 0.02}), SettingDesign(3, {"": 0.04})
    both = design_power("1", [a, b])
    assert both == pytest.approx(power_above(3, 0.02, ep.effect, 0.0, 0.025) * power_above(3, 0.04, ep.effect, 0.0,
                                                                                            0.025))
    assert design_power("1", [dataclasses.replace(a, tests=2)]) == pytest.approx(
        power_above(3, 0.02, ep.effect, 0.0, 0.025) ** 2)  # claim 2: both definitions must pass
    assert design_power("5a", [a]) is None  # a derivation check has no power


def test_claim_6_needs_the_cut_and_the_cost_and_a_missing_spread_falls_back_to_the_declared_one():
    cut, drop = PLANNING["6"]
    s = SettingDesign(4, {"": 0.1, "drop": None})
    expected = power_above(4, 0.1, cut.effect, cut.threshold, 0.025) * endpoint_power(drop, 4, drop.sd, s)
    assert design_power("6", [s]) == pytest.approx(expected)
    assert endpoint_power(drop, 4, None, s) == endpoint_power(drop, 4, drop.sd, s)


def test_plan_4_claim_4_power_is_simulated_through_the_rule_and_holds_its_level_at_the_null(monkeypatch):
    """Plan 4.0's claim-4 endpoint (a TEST_EXACT simulation of its layer-fraction rule). Plan 5.0's claim 4 is
    computed through the partial-conjunction rule: tests/test_claim4_layers.py."""
    import bnmem.report.power as rp
    from bnmem.analysis_plan import TEST_EXACT, Endpoint

    monkeypatch.setattr(rp, "SIM_RUNS", 300)
    ep = Endpoint("", TEST_EXACT, 0.75, 0.5, 0.22, "smallest effect of interest", "plan 4.0's")
    s = SettingDesign(10, {"": 0.05}, layers=4, seeds=2)
    at_null = endpoint_power(dataclasses.replace(ep, effect=0.5), 10, 0.05, s)
    assert at_null <= 0.025 + 3 * math.sqrt(0.025 * 0.975 / 300)
    strong = endpoint_power(dataclasses.replace(ep, effect=0.9), 16, 0.05, dataclasses.replace(s, layers=19))
    assert strong > 0.8
    # more layers per model make the same planning effect easier to see (binomial noise shrinks)
    few = endpoint_power(dataclasses.replace(ep, effect=0.9), 10, 0.05, s)
    many = endpoint_power(dataclasses.replace(ep, effect=0.9), 10, 0.05, dataclasses.replace(s, layers=19))
    assert many > few + 0.1


def test_reproduced_rows_keep_their_status_text():
    claim = _claim(_lira([0.1, 0.11, 0.105]), "3a")
    assert claim.status == LARGER  # plan 5.0: wholly above the paper's 3–5 points
    assert next(r for r in claim_rows([claim]) if r["id"] == "3a")["verdict"] == LARGER
    claim = _claim(_lira([0.046, 0.052, 0.049]), "3a")
    assert claim.status == REPRODUCED
    assert next(r for r in claim_rows([claim]) if r["id"] == "3a")["verdict"] == REPRODUCED


@pytest.mark.parametrize("replicates,seeds,layers", [(1, 3, 4), (2, 1, 4), (3, 2, 4), (9, 3, 4), (12, 1, 19), (20, 2, 4)])
def test_claim_4_simulation_decides_every_study_as_the_one_study_rule_does(replicates, seeds, layers):
    """layer_fraction_reproduced (all simulated studies at once) against layer_fraction_estimate study by study,
    at both levels the report reads, on draws that land on both sides of the rule; and the batched power
    equals power_simulated with the one-study rule (the same draws)."""
    from bnmem.analysis_plan import reproduced_level
    from bnmem.report.claims.claim4 import GS_MIN_REPLICATES
    from bnmem.power import power_simulated, power_simulated_all
    from bnmem.report.claims.claim4 import layer_fraction_estimate, layer_fraction_reproduced
    from bnmem.report.claims.core import at_level

    def draw(rng, k):
        p = rng.beta(6.0, 1.5, k)
        return [rng.binomial(layers, pi, size=seeds) / layers for pi in p]

    rng = np.random.default_rng(replicates * 100 + seeds)
    studies = [draw(rng, replicates) for _ in range(300)]
    for lv in (0.95, reproduced_level()):
        with at_level(lv):
            fast = layer_fraction_reproduced(studies)
            slow = np.array([layer_fraction_estimate(g)[1] == REPRODUCED for g in studies])
        np.testing.assert_array_equal(fast, slow)
    if replicates >= GS_MIN_REPLICATES:  # fewer can never read reproduced (the interval's price)
        assert 0 < slow.sum() < len(slow)  # both decisions occur

    def decide(groups):
        with at_level(reproduced_level()):
            return layer_fraction_estimate(groups)[1] == REPRODUCED

    def decide_all(all_groups):
        with at_level(reproduced_level()):
            return layer_fraction_reproduced(all_groups)

    assert power_simulated_all(decide_all, draw, replicates, runs=200, seed=5) == \
        power_simulated(decide, draw, replicates, runs=200, seed=5)


@pytest.mark.parametrize("between", [0.0, 0.1])
def test_claim_4_study_draw_is_one_binomial_call_per_replicate(between):
    """layer_fraction_draw's one binomial call gives the draws of the former call per replicate, and leaves the
    generator where they left it."""
    from bnmem.report.power import _beta_draw, layer_fraction_draw

    for k, layers, seeds in [(1, 4, 1), (3, 4, 2), (7, 19, 3)]:
        fast_rng, slow_rng = np.random.default_rng(11), np.random.default_rng(11)
        for _ in range(5):
            fast = layer_fraction_draw(fast_rng, k, 0.7, between, layers, seeds)
            p = _beta_draw(slow_rng, 0.7, between, k)
            slow = [slow_rng.binomial(layers, pi, size=seeds) / layers for pi in p]
            np.testing.assert_array_equal(fast, np.array(slow))
        assert fast_rng.random() == slow_rng.random()


def test_the_sd_check_skips_one_replicate_intervals_reads_every_setting_and_keeps_quiet_within_the_bound():
    """Plan 6.0's observed-SD check, setting by setting: an interval over one replicate's seeds is not the
    replicate spread the design's SD stands for (skipped, and the settings after it still read); a setting within
    its bound adds nothing; no setting above its bound gives no line at all."""
    from bnmem.report.claims.core import Evaluation, new_claim
    from bnmem.report.power import power_check

    bound = PLANNING["1"][0].sd

    def claim(*settings):
        c = new_claim("1", "x")
        for where, sd, reps in settings:
            c.evaluations.append(Evaluation(where, 0.02, -0.01, 0.05, INCONCLUSIVE, "t", "", n=len(reps), sd=sd,
                                            conditions={"replicates": list(reps)}))
        return c

    text = power_check(claim(("one", 3 * bound, (0,)), ("calm", 0.5 * bound, (0, 1, 2)),
                             ("wide", 3 * bound, (0, 1, 2))))
    assert text.startswith("observed SD above the design's bound (wide: SD ")
    assert "one:" not in text and "calm:" not in text
    assert "power at the observed SD " in text and " the declared SD gives at the same n" in text
    assert power_check(claim(("calm", 0.5 * bound, (0, 1, 2)), ("one", 3 * bound, (0,)))) == ""


def test_only_claim_4s_effects_are_ratios_said_of_every_layer():
    """Claim 4's test reads the mean log |γ|/σ: its effect is shown as the ratio, in every layer; every other
    claim's effect is its own number in its own format, and a claim without a minimum detectable effect has none."""
    from bnmem.report.claims.core import new_claim
    from bnmem.report.power import _effect_format, on_number_scale

    assert on_number_scale("4", math.log(1.25)) == pytest.approx(1.25) and on_number_scale("4", None) is None
    assert on_number_scale("1", 0.02) == 0.02
    one, four = new_claim("1", "x"), new_claim("4", "x")
    assert _effect_format(one)(0.02) == one.fmt(0.02) and "|γ|/σ" not in _effect_format(one)(0.02)
    assert _effect_format(four)(1.25) == f"{four.fmt(1.25)} |γ|/σ in every layer"
