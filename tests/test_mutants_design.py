"""`bnmem design` beyond its default path (issue 39): the pilot's SDs and their 80% chi-square upper bound, the
largest SD of the pilot's settings where the same setting was not measured, claim 6 with and without nested
selection, claim 4's simulated noise with several seeds; and the power formulas' remaining edges. Third pass (the
mutants mutmut had not reached): the proposal and the printed table written out by hand, the settings a study's
recipes, allotments, replicates and architectures give each claim, units_for's limit and target.

Expected values are computed here independently: the chi-square quantile in closed form (2 degrees of freedom:
−2·ln(1 − p)) or by bisection on its closed-form CDF (4 degrees of freedom), claim 4's simulation as a slow loop
with the one-study rule, the power of claim 6's two endpoints from the noncentral t directly. No training, no
run directory: the pilot is a list of stand-in claims with the attributes the design reads.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml
from scipy import stats as sps

from bnmem import design
from bnmem.analysis_plan import PLANNING, REPRODUCED, TEST_EXACT, Endpoint
from bnmem.power import _valid, power_above, power_all, units_needed
from bnmem.report.power import SettingDesign, design_power, endpoint_power, units_for
from bnmem.study import load_study

BOUND = " (80% upper bound on its SD)"


def chi2_q20_df2() -> float:
    """The 20% quantile of χ² with 2 df: its CDF is 1 − exp(−x/2), so x = −2·ln(0.8)."""
    return -2.0 * math.log(0.8)


def chi2_q20_df4() -> float:
    """The 20% quantile of χ² with 4 df, by bisection on its CDF 1 − exp(−x/2)·(1 + x/2)."""
    lo, hi = 0.0, 10.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if 1 - math.exp(-mid / 2) * (1 + mid / 2) < 0.2 else (lo, mid)
    return lo


def _e(arch: str, sd: float | None, n: int, replicates: int = 3, label_noise=0.05, ood=0.0, spreads=None):
    conds = {"arch": arch, "label_noise": label_noise, "ood": ood, "replicates": list(range(replicates))}
    return SimpleNamespace(conditions=conds, sd=sd, n=n, spreads=spreads or {})


def _c(cid: str, *evs):
    return SimpleNamespace(id=cid, deciding=lambda: list(evs))


# ---------------------------------------------------------------- the pilot's spreads


def test_the_pilot_sd_is_its_80_percent_chi_square_upper_bound():
    assert chi2_q20_df2() == pytest.approx(0.4462871, rel=1e-6)  # the table value
    assert chi2_q20_df4() == pytest.approx(1.648777, rel=1e-5)
    pilot = [_c("1", _e("lenet", 0.02, 3), _e("mlp", 0.05, 5, label_noise=None, ood=0.05)),
             _c("6", _e("lenet", 0.9, 3, spreads={"drop": (3, 0.01)}))]
    got = design._pilot_sds(pilot, "1")
    assert set(got) == {("lenet", 0.05, 0.0), ("mlp", 0.0, 0.05)}
    assert got[("lenet", 0.05, 0.0)][""] == pytest.approx(0.02 * math.sqrt(2 / chi2_q20_df2()), rel=1e-9)
    assert got[("mlp", 0.0, 0.05)][""] == pytest.approx(0.05 * math.sqrt(4 / chi2_q20_df4()), rel=1e-9)
    # an endpoint's spread is (n, sd): its bound uses its own n and SD
    six = design._pilot_sds(pilot, "6")[("lenet", 0.05, 0.0)]
    assert six["drop"] == pytest.approx(0.01 * math.sqrt(2 / chi2_q20_df2()), rel=1e-9)
    assert six[""] == pytest.approx(0.9 * math.sqrt(2 / chi2_q20_df2()), rel=1e-9)
    with_five = design._pilot_sds([_c("6", _e("lenet", 0.9, 3, spreads={"drop": (5, 0.01)}))], "6")
    assert with_five[("lenet", 0.05, 0.0)]["drop"] == pytest.approx(0.01 * math.sqrt(4 / chi2_q20_df4()), rel=1e-9)
    assert design._pilot_sds(None, "1") == {} and design._pilot_sds(pilot, "7") == {}


def test_an_interval_over_one_replicates_seeds_is_not_a_pilot_spread_except_for_the_toy_model():
    one_rep = _e("lenet", 0.02, 4, replicates=1)  # its n counts seeds, not replicates
    assert design._pilot_sds([_c("1", one_rep)], "1") == {}
    toy = design._pilot_sds([_c("5b", one_rep)], "5b")  # claim 5b's units are the toy model's seeds
    assert list(toy) == [("lenet", 0.05, 0.0)]
    assert toy[("lenet", 0.05, 0.0)][""] == pytest.approx(0.02 * math.sqrt(3 / sps.chi2.ppf(0.2, 3)), rel=1e-9)
    two = design._pilot_sds([_c("1", _e("lenet", 0.02, 2, replicates=2))], "1")  # two replicates are replicates
    assert two[("lenet", 0.05, 0.0)][""] == pytest.approx(0.02 * math.sqrt(1 / sps.chi2.ppf(0.2, 1)), rel=1e-9)


def _cell(arch: str, label_noise: float, ood: float):
    return SimpleNamespace(arch=arch, outliers=SimpleNamespace(label_noise=label_noise, ood=ood))


def test_a_setting_the_pilot_did_not_measure_takes_the_largest_sd_of_its_settings():
    observed = {("lenet", 0.05, 0.0): {"": 0.1, "drop": None}, ("mlp", 0.05, 0.0): {"": 0.3, "drop": 0.02},
                ("vgg", 0.0, 0.05): {"": 0.2, "drop": 0.04}}
    same, basis = design._sds_for(_cell("mlp", 0.05, 0.0), observed, ["", "drop"])
    assert same == {"": 0.3, "drop": 0.02} and basis == "pilot: same setting" + BOUND
    other, basis = design._sds_for(_cell("resnet20", 0.05, 0.0), observed, ["", "drop"])
    assert other == {"": 0.3, "drop": 0.04} and basis == "pilot: largest SD of its settings" + BOUND
    missing, _ = design._sds_for(_cell("resnet20", 0.05, 0.0), {("lenet", 0.05, 0.0): {"": 0.1}}, ["", "drop"])
    assert missing == {"": 0.1, "drop": None}  # no SD for an endpoint: the declared one (None)
    none, basis = design._sds_for(_cell("lenet", 0.05, 0.0), {}, ["", "drop"])
    assert none == {"": None, "drop": None} and basis == "declared planning SD"
    # the key is (arch, label noise, OOD): another noise level is another setting
    _, basis = design._sds_for(_cell("lenet", 0.01, 0.0), observed, [""])
    assert basis.startswith("pilot: largest")


# ---------------------------------------------------------------- claim 6 under nested selection


@pytest.mark.parametrize("nested, expected", [(True, [3, 1, 2]), (False, [2, 1, 1])])
def test_claim_6_holds_one_replicate_out_only_without_nested_selection(monkeypatch, nested, expected):
    monkeypatch.setattr(design, "_nested_selection", lambda: nested)
    assert [design._evaluated_units("6", n) for n in (3, 1, 2)] == expected
    assert design._evaluated_units("1", 3) == 3 and design._evaluated_units("4", 2) == 2


def test_nested_selection_is_what_the_mitigate_lens_declares():
    from bnmem.lenses import registry

    assert design._nested_selection() == ("selection_seeds" in registry.get("mitigate").config.model_fields)
    assert design._nested_selection() is True  # plan 5.0's mitigate lens selects λ inside every replicate


STUDY = {"name": "tiny", "data": {"dataset": "digits", "train_size": 120}, "train": {"epochs": 10, "batch_size": 32},
         "grid": {"norms": ["batch", "none"], "seeds": [0, 1], "replicates": 3,
                  "outliers": [{"label_noise": 0.05}, {"ood": 0.05}, {}]},
         "lenses": {"mitigate": {}, "gamma-sigma": {}}}


@pytest.fixture
def study(tmp_path: Path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(STUDY))
    return load_study(path)


def _claim6_power(n: int, settings: int) -> float:
    """Claim 6 by hand: per setting the cut's lower end above 0.5 and the drop's upper end below 0.01, each a
    one-sided t-test at 0.025 (the noncentral t), at the declared SDs; every setting must pass."""
    cut, drop = PLANNING["6"]
    crit = sps.t.ppf(0.975, n - 1)
    p_cut = sps.nct.sf(crit, n - 1, (cut.effect - cut.threshold) * math.sqrt(n) / cut.sd)
    p_drop = sps.nct.sf(crit, n - 1, (drop.threshold - drop.effect) * math.sqrt(n) / drop.sd)
    return float((p_cut * p_drop) ** settings)


@pytest.mark.parametrize("nested", [True, False])
def test_claim_6_design_under_nested_selection_and_without(monkeypatch, study, nested):
    monkeypatch.setattr(design, "_nested_selection", lambda: nested)
    d = design.claim_design(study, "6")
    n = 3 if nested else 2
    assert [s.n for s in d.settings] == [n, n]  # two corrupted settings; the clean one does not decide claim 6
    assert d.basis == "declared planning SD"
    assert d.power == pytest.approx(_claim6_power(n, 2), rel=1e-9)
    assert _claim6_power(d.needed, 2) >= 0.8 > _claim6_power(d.needed - 1, 2)
    # the proposal: the units 80% needs, plus the replicate that selects λ when selection is not nested
    doc, unreachable = design.proposal(STUDY, [d])
    assert unreachable == [] and doc["grid"]["replicates"] == d.needed + (0 if nested else 1)


def test_claim_4_design_counts_every_setting_its_layers_and_its_seeds(study):
    d = design.claim_design(study, "4")
    layers = design.bn_layers("lenet", "digits")
    assert layers == 4  # LeNet: two convolutional BN layers (BatchNorm2d) and two fully connected (BatchNorm1d)
    assert [(s.n, s.layers, s.seeds) for s in d.settings] == [(3, layers, 2)] * 3  # clean included
    from bnmem.report.claims.layer_test import partial_conjunction_power

    ep = PLANNING["4"][0]
    assert d.power == pytest.approx(partial_conjunction_power(3, ep.sd, ep.effect, layers, 0.025) ** 3, rel=1e-9)


def test_a_pilot_setting_changes_only_its_own_settings_power(tmp_path):
    """The pilot measured the flip setting (SD 0.04 over 3 replicates): that setting uses its 80% bound; the
    OOD setting, unmeasured, takes the largest bound of the pilot's settings; the design says both."""
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump({**STUDY, "lenses": {"memorize": {}}}))
    d = design.claim_design(load_study(path), "1", [_c("1", _e("lenet", 0.04, 3))])
    bound = 0.04 * math.sqrt(2 / chi2_q20_df2())
    assert [s.sds[""] for s in d.settings] == [pytest.approx(bound)] * 2
    assert d.basis == "pilot: largest SD of its settings" + BOUND + "; pilot: same setting" + BOUND
    ep = PLANNING["1"][0]
    assert d.power == pytest.approx(power_above(3, bound, ep.effect, 0.0, 0.025) ** 2, rel=1e-9)


# ---------------------------------------------------------------- claim 4's simulated noise with several seeds


def _slow_exact_power(effect: float, sd: float, n: int, layers: int, seeds: int, runs: int, seed: int) -> float:
    """Plan 4.0's claim-4 power as an obvious loop: per study, per replicate a probability from a beta with the
    between-replicate SD left after the binomial noise of layers × seeds, then seeds binomial layer counts; the
    one-study rule decides."""
    from bnmem.report.claims.claim4 import layer_fraction_estimate
    from bnmem.report.claims.core import at_level

    rng = np.random.default_rng(seed)
    between = math.sqrt(max(0.0, sd * sd - effect * (1 - effect) / (layers * seeds)))
    between2 = between * between
    hits = 0
    for _ in range(runs):
        if between2 <= 1e-12 or between2 >= effect * (1 - effect):
            p = np.full(n, effect)
        else:
            k = effect * (1 - effect) / between2 - 1
            p = rng.beta(effect * k, (1 - effect) * k, n)
        groups = [rng.binomial(layers, pi, size=seeds) / layers for pi in p]
        with at_level(0.95):
            hits += layer_fraction_estimate(groups)[1] == REPRODUCED
    return hits / runs


@pytest.mark.parametrize("seeds, sd", [(1, 0.1), (3, 0.1), (2, 0.15), (3, 0.2)])
def test_claim_4_simulation_with_several_seeds_against_a_slow_loop(monkeypatch, seeds, sd):
    import bnmem.report.power as rp

    monkeypatch.setattr(rp, "SIM_RUNS", 60)
    ep = Endpoint("", TEST_EXACT, 0.9, 0.5, 0.2, "smallest effect of interest", "plan 4.0's")
    s = SettingDesign(12, {"": sd}, layers=4, seeds=seeds)
    got = endpoint_power(ep, 12, sd, s)
    assert got == _slow_exact_power(0.9, sd, 12, 4, seeds, 60, rp.SIM_SEED) and 0.1 < got < 1.0
    assert rp.SIM_SEED == 26 and rp.sim_runs() == 60


def test_claim_4_simulation_reads_the_seeds_and_the_default_effect():
    import bnmem.report.power as rp

    ep = Endpoint("", TEST_EXACT, 0.9, 0.5, 0.2, "x", "x")
    # seeds shrink the binomial part of the observed SD, so the same observed SD leaves more between replicates
    a = rp._exact_power_cached(ep, 12, 0.1, 4, 1, 60)
    b = rp._exact_power_cached(ep, 12, 0.1, 4, 3, 60)
    assert a == _slow_exact_power(0.9, 0.1, 12, 4, 1, 60, 26) and b == _slow_exact_power(0.9, 0.1, 12, 4, 3, 60, 26)
    assert a != b
    more_layers = rp._exact_power_cached(ep, 12, 0.1, 8, 1, 60)
    assert more_layers == _slow_exact_power(0.9, 0.1, 12, 8, 1, 60, 26)
    no_effect = dataclasses.replace(ep, effect=None)  # no planning effect declared: three quarters of the layers
    got = rp._exact_power_cached(no_effect, 30, 0.1, 4, 2, 60)
    assert got == _slow_exact_power(0.75, 0.1, 30, 4, 2, 60, 26) and got > 0
    # seeds of 0 (unknown) count as one
    s0 = SettingDesign(12, {"": 0.1}, layers=4, seeds=0)
    assert rp._exact_power(ep, 12, 0.1, s0) == rp._exact_power_cached(ep, 12, 0.1, 4, 1, rp.sim_runs())


def test_beta_draw_by_hand():
    from bnmem.report.power import _beta_draw

    rng = np.random.default_rng(3)
    got = _beta_draw(rng, 0.75, 0.125, 5)  # k = 0.75·0.25/0.125² − 1 = 11 (exact in binary)
    np.testing.assert_array_equal(got, np.random.default_rng(3).beta(0.75 * 11, 0.25 * 11, 5))
    np.testing.assert_array_equal(_beta_draw(rng, 0.7, 0.0, 3), [0.7] * 3)  # no spread: constant
    np.testing.assert_array_equal(_beta_draw(rng, 0.75, 0.5, 2), [0.75] * 2)  # beyond what a beta allows (0.1875)
    np.testing.assert_array_equal(_beta_draw(rng, 0.5, 0.5, 2), [0.5] * 2)  # exactly at it (0.25 = 0.5·0.5)
    r1, r2 = np.random.default_rng(4), np.random.default_rng(4)
    _beta_draw(r1, 0.75, math.sqrt(0.18), 2)  # just inside it: a beta draw
    assert r1.random() != r2.random()


# ---------------------------------------------------------------- design power over settings and endpoints


def test_design_power_is_the_product_over_settings_endpoints_and_tests():
    ep = PLANNING["1"][0]
    s1, s2 = SettingDesign(3, {"": 0.02}, tests=2), SettingDesign(5, {"": 0.04})
    p1 = power_above(3, 0.02, ep.effect, 0.0, 0.025)
    p2 = power_above(5, 0.04, ep.effect, 0.0, 0.025)
    assert design_power("1", [s1, s2]) == pytest.approx(p1 ** 2 * p2, rel=1e-12)
    at4 = power_above(4, 0.02, ep.effect, 0.0, 0.025) ** 2 * power_above(4, 0.04, ep.effect, 0.0, 0.025)
    assert design_power("1", [s1, s2], n=4) == pytest.approx(at4, rel=1e-12)  # every setting at n
    assert design_power("1", [SettingDesign(3, {"": 0.02}, tests=0)]) == pytest.approx(p1)  # at least one test
    assert design_power("1", []) is None
    # a missing or infinite SD is the declared one
    assert design_power("1", [SettingDesign(3, {"": math.inf})]) == pytest.approx(
        power_above(3, ep.sd, ep.effect, 0.0, 0.025))
    # the units for 80%: the smallest n at which the product reaches it
    need = units_for("1", [s1, s2])
    prod = (lambda n: power_above(n, 0.02, ep.effect, 0.0, 0.025) ** 2 * power_above(n, 0.04, ep.effect, 0.0, 0.025))
    assert prod(need) >= 0.8 > prod(need - 1)
    assert units_for("5a", [s1]) is None and units_for("1", []) is None
    assert units_for("1", [SettingDesign(3, {"": 100.0})]) is None  # more than MAX_UNITS (1000)


def test_endpoint_power_uses_the_papers_range_where_the_plan_says():
    ep = PLANNING["3a"][0]  # effect = the range's upper end, threshold = its minimum
    s = SettingDesign(3, {"": 0.01}, paper=(0.03, 0.05))
    assert endpoint_power(ep, 3, 0.01, s) == pytest.approx(power_above(3, 0.01, 0.05, 0.03, 0.025), rel=1e-12)
    band = PLANNING["5b"][0]
    from bnmem.power import power_band

    assert endpoint_power(band, 6, 0.03, s) == pytest.approx(power_band(6, 0.03, 1.0, (0.9, 1.1), 0.025))
    with pytest.raises(ValueError):
        endpoint_power(dataclasses.replace(ep, test="nonsense"), 3, 0.01, s)


# ---------------------------------------------------------------- bnmem.power's remaining edges


def test_valid_needs_two_units_and_a_finite_sd():
    assert _valid(2, 0.0) and _valid(2, 1.0)
    assert not _valid(1, 1.0) and not _valid(2, None) and not _valid(2, math.inf) and not _valid(2, math.nan)


def test_power_above_by_hand():
    # n = 2 (1 df): the noncentral t with δ = (effect − θ)·√2/sd against t_{0.975, 1} = 12.7062
    assert sps.t.ppf(0.975, 1) == pytest.approx(12.7062, rel=1e-5)
    delta = (0.5 - 0.1) * math.sqrt(2) / 0.05
    assert power_above(2, 0.05, 0.5, 0.1, 0.025) == pytest.approx(float(sps.nct.sf(12.7062047, 1, delta)), rel=1e-6)
    # a normal approximation check at large n: δ = 0.25·√400/1 = 5, crit ≈ 1.966
    assert power_above(400, 1.0, 0.25, 0.0, 0.025) == pytest.approx(sps.norm.sf(1.966 - 5), abs=2e-3)
    assert power_above(3, 0.0, 0.1, 0.1, 0.025) == 0.0  # sd 0: the effect must clear the threshold strictly
    assert power_above(3, None, 0.1, 0.0, 0.025) == 0.0
    assert power_above(400, 1.0, 0.25, 0.0, 0.025) > power_above(400, 1.0, 0.25, 0.0, 0.005)


def test_power_all_is_the_plain_product():
    assert power_all([]) == 1.0  # no setting to fail
    assert power_all([0.5]) == 0.5 and power_all([0.5, 0.8, 0.9]) == pytest.approx(0.36)
    assert power_all(iter([0.0, 0.9])) == 0.0


def test_units_needed_from_a_start_and_by_bisection():
    calls = []

    def step(n):
        calls.append(n)
        return 1.0 if n >= 23 else 0.0

    assert units_needed(step, start=5) == 23 and min(calls) == 5
    assert units_needed(lambda n: 1.0 if n >= 5 else 0.0, start=5) == 5
    assert units_needed(lambda n: 0.9 if n >= 7 else 0.85, target=0.9) == 7
    assert units_needed(lambda n: 0.79 if n < 1000 else 0.81, limit=1000) == 1000
    assert units_needed(lambda n: 1.0 if n >= 3 else 0.0) == 3  # one doubling, then nothing to bisect


# ---------------------------------------------------------------- every claim's settings in one study

WIDE = {"name": "wide", "data": {"dataset": "digits", "train_size": 120}, "train": {"epochs": 10, "batch_size": 32},
        "grid": {"norms": ["batch", "none"], "seeds": [0, 1, 2], "replicates": 3,
                 "outliers": [{"label_noise": 0.05}, {"ood": 0.01}, {}]},
        "lenses": {"memorize": {}, "gradnorms": {"definitions": ["eval"]}, "lira": {"replicates": 2},
                   "theory": {"counterfactual_seeds": 4, "steps": 5, "plot": False}}}


def test_every_claims_settings_units_tests_and_paper_range(tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump(WIDE))
    study = load_study(path)
    rows = {d.cid: d for d in (design.claim_design(study, cid) for cid in ("1", "2", "3a", "3b", "3c", "4", "5a",
                                                                          "5b", "6"))}
    one = rows["1"]  # corrupted settings only: flip and OOD, 3 replicates each, one test
    assert [(s.n, s.tests, s.paper) for s in one.settings] == [(3, 1, None), (3, 1, None)]
    assert rows["2"].settings[0].tests == 1  # one gradient definition declared: one test per setting
    three_a = rows["3a"]  # the lira lens's allotment (2 replicates) and the paper's range for the mixture
    assert [(s.n, s.paper) for s in three_a.settings] == [(2, (0.04, 0.05)), (2, (0.03, 0.05))]
    assert [(s.n, s.paper) for s in rows["3b"].settings] == [(2, (0.03, 0.05))]  # the clean setting only
    assert rows["3c"].why_not == "exploratory (beyond the paper): no planning effect, no power"
    assert rows["5a"].why_not == "a derivation check: no power"
    assert rows["4"].why_not == "the study does not run the gamma-sigma lens"
    assert rows["6"].why_not == "the study does not run the mitigate lens"
    assert rows["3c"].settings == [] and rows["4"].settings == [] and rows["3c"].power is None
    toy = rows["5b"]  # the toy model once per study, its seeds the unit
    assert [s.n for s in toy.settings] == [4] and toy.unit == "seeds of the toy model"
    assert toy.basis == "declared planning SD" and toy.settings[0].sds == {"": None}
    pilot = design.claim_design(study, "5b", [_c("5b", _e("lenet", 0.02, 3, replicates=1), _e("mlp", 0.05, 3,
                                                                                                  replicates=1))])
    assert pilot.basis == "pilot" and pilot.settings[0].sds[""] == pytest.approx(0.05 * math.sqrt(2 / chi2_q20_df2()))
    # the default gradient definitions are two (eval and batch): both must pass in every setting
    both = {**WIDE, "lenses": {"gradnorms": {}}}
    path.write_text(yaml.safe_dump(both))
    assert [s.tests for s in design.claim_design(load_study(path), "2").settings] == [2, 2]
    # the toy model's default 5 seeds
    path.write_text(yaml.safe_dump({**WIDE, "lenses": {"theory": {}}}))
    assert [s.n for s in design.claim_design(load_study(path), "5b").settings] == [5]


# ---------------------------------------------------------------- third pass: the rest of `bnmem design`'s numbers


def test_a_one_replicate_evaluation_does_not_hide_the_pilot_settings_after_it():
    """A pilot's claim lists a setting measured over one replicate's seeds (not a spread of replicate means)
    before one measured over three replicates: the first is skipped, the second still read."""
    pilot = [_c("1", _e("mlp", 0.5, 4, replicates=1), _e("lenet", 0.02, 3), _e("vgg", 0.5, 4, replicates=1),
                _e("resnet20", 0.05, 5, ood=0.01))]
    got = design._pilot_sds(pilot, "1")
    assert set(got) == {("lenet", 0.05, 0.0), ("resnet20", 0.05, 0.01)}
    assert got[("resnet20", 0.05, 0.01)][""] == pytest.approx(0.05 * math.sqrt(4 / chi2_q20_df4()), rel=1e-9)


def _row(cid: str, needed: int | None, unit: str = "replicates", power: float | None = 0.5):
    return design.ClaimDesign(cid, [], unit=unit, power=power, needed=needed)


def test_the_proposal_by_hand_per_lens_the_largest_need_and_the_grid_the_largest_lens():
    """Per lens the most replicates any of its claims needs (at least 2), the grid's replicates the largest lens,
    a lens at the grid's count without an option of its own (a lens with no options, YAML's null, gains one), the
    toy model's seeds what 5b needs; the claims no
    number of units reaches listed; rows without power ignored. Every expected value written out by hand."""
    rows = [_row("3c", None, power=None),  # exploratory: no power, nothing to size
            _row("7", None),  # no number of units reaches it
            _row("5b", 7, unit="seeds of the toy model"),
            _row("3a", 6), _row("3b", 4),  # one lens (lira): the larger need
            _row("1", 1),  # memorize needs one replicate: a lens still gets two
            _row("4", 9)]  # gamma-sigma: the largest, so the grid's
    doc = {"name": "pilot", "grid": {"replicates": 3, "seeds": [0, 1]},
           "lenses": {"memorize": None, "lira": {"replicates": 2, "x": 1}, "gamma_sigma": {"replicates": 3},
                      "theory": {"steps": 5}}}
    before = yaml.safe_dump(doc)
    got, unreachable = design.proposal(doc, rows)
    assert unreachable == ["7"]
    assert got == {"name": "pilot-proposed", "grid": {"replicates": 9, "seeds": [0, 1]},
                   "lenses": {"memorize": {"replicates": 2}, "lira": {"replicates": 6, "x": 1}, "gamma_sigma": {},
                              "theory": {"steps": 5, "counterfactual_seeds": 7}}}
    assert yaml.safe_dump(doc) == before  # the study given is not changed


def test_the_proposal_without_replicate_rows_keeps_the_grid_and_reads_a_list_of_lenses():
    got, unreachable = design.proposal({"grid": {"replicates": 4}, "lenses": ["theory", "memorize"]},
                                       [_row("5b", 1, unit="seeds of the toy model")])
    # no claim sized in replicates: the grid's own count; the toy model at least two seeds
    assert unreachable == [] and got["grid"] == {"replicates": 4}
    assert got["lenses"] == {"theory": {"counterfactual_seeds": 2}, "memorize": {}}
    assert got["name"] == "study-proposed"
    # neither a grid nor lenses in the document: one replicate (the schema's default), no lens options
    bare, _ = design.proposal({"name": "bare"}, [])
    assert bare == {"name": "bare-proposed", "grid": {"replicates": 1}, "lenses": {}}


def test_the_printed_design_table_by_hand():
    """Claim, settings, the distinct n (sorted) with their unit, power to two decimals, units for 80% ('-' when no
    number reaches it), where the spreads came from; a row without power says why in the last cell only."""
    rows = [design.ClaimDesign("3c", [], why_not="exploratory"),
            design.ClaimDesign("1", [SettingDesign(3, {}), SettingDesign(2, {}), SettingDesign(3, {})],
                               basis="declared planning SD", power=0.4567, needed=12),
            design.ClaimDesign("5b", [SettingDesign(4, {})], unit="seeds of the toy model", basis="pilot",
                               power=0.996, needed=None)]
    assert design.design_table(rows) == [["3c", "-", "-", "-", "-", "exploratory"],
                                         ["1", "3", "2,3 replicates", "0.46", "12", "declared planning SD"],
                                         ["5b", "1", "4 seeds of the toy model", "1.00", "-", "pilot"]]
    assert [design.fmt_power(p) for p in (None, math.nan, math.inf, 0.456, 0.0)] == ["-", "-", "-", "0.46", "0.00"]


def test_fair_arms_cells_decide_and_the_papers_protocol_cells_do_not_hide_them(tmp_path):
    """A grid comparing recipes lists each setting's shared cells before its per-norm ones when asked in that
    order: only the fair-arms (per-norm) cells decide claim 1 (memorize takes a recipe), every one of them
    counted; claim 4 (gamma-sigma takes none) is designed on the paper's protocol's cells."""
    doc = {**STUDY, "data": {**STUDY["data"], "val_fraction": 0.1},
           "grid": {**STUDY["grid"], "recipes": ["shared", "per-norm"]}, "lenses": {"memorize": {}, "gamma-sigma": {}}}
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(doc))
    study = load_study(path)
    assert {c.recipe for _, cells in design._settings(study, "1") for c in cells} == {"per-norm"}
    assert {c.recipe for _, cells in design._settings(study, "4") for c in cells} == {"shared"}
    d = design.claim_design(study, "1")
    assert [s.n for s in d.settings] == [3, 3]  # flip and OOD, three fair-arms replicates each
    ep = PLANNING["1"][0]
    assert d.power == pytest.approx(power_above(3, ep.sd, ep.effect, 0.0, 0.025) ** 2, rel=1e-9)


def test_a_lens_allotted_to_one_arch_skips_the_others_settings_and_reads_each_mixtures_paper_range(tmp_path):
    """The lira lens runs on the MLP only: LeNet's settings (listed first) are skipped, the MLP's still decide; an
    OOD mixture of 5% reads the paper's range for 5% outliers (4 to 5 points), not the clean one (3 to 5)."""
    doc = {**STUDY, "grid": {**STUDY["grid"], "archs": ["lenet", "mlp"], "replicates": 2,
                             "outliers": [{"label_noise": 0.05}, {"ood": 0.05}, {"ood": 0.02}]},
           "lenses": {"lira": {"archs": ["mlp"]}}}
    path = tmp_path / "a.yaml"
    path.write_text(yaml.safe_dump(doc))
    d = design.claim_design(load_study(path), "3a")
    assert [(s.n, s.paper) for s in d.settings] == [(2, (0.04, 0.05)), (2, (0.04, 0.05)), (2, (0.03, 0.05))]


def test_one_replicate_per_setting_is_a_design_of_one_unit(tmp_path):
    """A grid of one replicate: every setting has one unit, which no t-test can use (power 0)."""
    path = tmp_path / "one.yaml"
    path.write_text(yaml.safe_dump({**STUDY, "grid": {**STUDY["grid"], "replicates": 1}, "lenses": {"memorize": {}}}))
    d = design.claim_design(load_study(path), "1")
    assert [s.n for s in d.settings] == [1, 1] and d.power == 0.0
    ep = PLANNING["1"][0]
    assert power_above(d.needed, ep.sd, ep.effect, 0.0, 0.025) ** 2 >= 0.8
    assert power_above(d.needed - 1, ep.sd, ep.effect, 0.0, 0.025) ** 2 < 0.8


def test_claim_4_design_reads_each_archs_own_layer_count(tmp_path):
    """ResNet-20 has 21 BN layers (one after the stem, two in each of its nine blocks, one in each of its two
    projection shortcuts), the MLP two (one per hidden layer): claim 4's rule counts layers, so its design must
    use each architecture's own count, not LeNet's four."""
    doc = {**STUDY, "grid": {**STUDY["grid"], "archs": ["resnet20", "mlp"], "outliers": [{}]},
           "lenses": {"gamma-sigma": {}}}
    path = tmp_path / "r20.yaml"
    path.write_text(yaml.safe_dump(doc))
    d = design.claim_design(load_study(path), "4")
    assert [(s.n, s.layers) for s in d.settings] == [(3, 1 + 2 * 9 + 2), (3, 2)]
    from bnmem.report.claims.layer_test import partial_conjunction_power

    ep = PLANNING["4"][0]
    assert d.power == pytest.approx(partial_conjunction_power(3, ep.sd, ep.effect, 21, 0.025)
                                    * partial_conjunction_power(3, ep.sd, ep.effect, 2, 0.025), rel=1e-9)


def test_units_for_stops_at_a_thousand_units_and_reads_its_target():
    """'n for 80%' reads 'more than 1000' beyond 1000 units (the report's limit, not bnmem.power's 10,000): claim 1
    at an SD of 1 needs about 3,100 replicates (normal approximation: ((1.96 + 0.84)·1/0.05)² ≈ 3,136)."""
    ep = PLANNING["1"][0]
    wide = [SettingDesign(3, {"": 1.0})]
    assert power_above(1000, 1.0, ep.effect, 0.0, 0.025) < 0.8 <= power_above(10_000, 1.0, ep.effect, 0.0, 0.025)
    assert units_for("1", wide) is None
    # another target: the smallest n whose power reaches it, found here by a plain scan
    s = [SettingDesign(3, {"": 0.03})]
    half = next(n for n in range(2, 200) if power_above(n, 0.03, ep.effect, 0.0, 0.025) >= 0.5)
    assert units_for("1", s, target=0.5) == half and half < units_for("1", s)


def test_a_lens_that_runs_but_measures_no_deciding_setting_says_so(tmp_path):
    """Claim 1 decides on corrupted settings only: a study of clean data runs the memorize lens but has none, and
    claim 3b (clean settings) none in a study of corrupted data. The row has no power and says why."""
    path = tmp_path / "clean.yaml"
    path.write_text(yaml.safe_dump({**STUDY, "grid": {**STUDY["grid"], "outliers": [{}]}, "lenses": {"memorize": {}}}))
    d = design.claim_design(load_study(path), "1")
    assert (d.cid, d.settings, d.power, d.needed) == ("1", [], None, None)
    assert design.design_table([d]) == [["1", "-", "-", "-", "-", "no setting of the study measures it"]]
    path.write_text(yaml.safe_dump({**STUDY, "grid": {**STUDY["grid"], "outliers": [{"ood": 0.05}]},
                                    "lenses": {"lira": {}}}))
    assert design.claim_design(load_study(path), "3b").why_not == "no setting of the study measures it"


def test_an_endpoint_reading_the_papers_range_without_one_has_no_effect_or_threshold():
    """Claim 3a's effect and threshold are the paper's range for the setting; a setting without a range has
    neither (NaN: unknown), rather than failing."""
    from bnmem.report.power import _limits

    assert _limits(PLANNING["3a"][0], (0.04, 0.05)) == (0.05, 0.04)
    effect, threshold = _limits(PLANNING["3a"][0], None)
    assert math.isnan(effect) and math.isnan(threshold)
    assert _limits(PLANNING["1"][0], (0.04, 0.05)) == (PLANNING["1"][0].effect, PLANNING["1"][0].threshold)


def test_bnmem_design_with_a_pilot_reads_its_spreads_and_refuses_a_missing_one(monkeypatch, tmp_path):
    """`bnmem design --pilot RUN`: every claim's row takes its spreads from the pilot's claims (the flip setting its
    own 80% bound, the others the largest), as claim_design does given them; a directory is read even without its
    study.json (the run loader says what it lacks); a path that is neither is refused in one line."""
    import bnmem.report.rundata as rundata
    from synthetic_runs import make_cell, make_run, memorize_data

    from bnmem.errors import BnmemError
    from bnmem.names import MEMORIZE
    from bnmem.report.claims import evaluate_claims

    rng = np.random.default_rng(3)
    cells = [make_cell("m", r, {MEMORIZE: memorize_data(0.6 + rng.normal(0, 0.03) + rng.normal(0, 0.01, (2, 3)),
                                                          np.full((2, 3), 0.5))}) for r in range(3)]
    loaded = []
    monkeypatch.setattr(rundata, "load_run", lambda d: loaded.append(d) or make_run(cells))
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump({**STUDY, "lenses": {"memorize": {}}}))
    study = load_study(path)
    rows = {r.cid: r for r in design.evaluate_design(study, tmp_path)}
    assert loaded == [tmp_path]
    one = rows["1"]
    assert one.basis == "pilot: largest SD of its settings" + BOUND + "; pilot: same setting" + BOUND
    expected = design.claim_design(study, "1", evaluate_claims(make_run(cells)))
    assert one.power == pytest.approx(expected.power, rel=1e-12) and one.needed == expected.needed
    assert one.power != pytest.approx(design.claim_design(study, "1").power)  # the declared SD gives another
    with pytest.raises(BnmemError, match="pilot run .*missing does not exist"):
        design.evaluate_design(study, tmp_path / "missing")
    assert loaded == [tmp_path]
