"""The report's power display (report/power.py) against expectations written by hand or from scipy.

Each test kills mutants that survived tests/test_report_power.py (issue 39, fourth pass): the exact strings
of :class:`ClaimPower`'s text methods, the minimum detectable effect where its bracket matters, and how an
evaluated claim's settings, basis, unit and cache are read. Claims here are small stand-ins with the
attributes report/power.py reads, so each figure is set by hand.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import scipy.optimize as spo
import scipy.stats as sps

from bnmem.analysis_plan import DIRECTION_ONLY, INCONCLUSIVE, REPRODUCED
from bnmem.report.power import ClaimPower, SettingDesign, claim_power, min_detectable, power_of, \
    settings_of_claim, unit_of


def _cp(**kw) -> ClaimPower:
    base = dict(cid="3a", power=0.52, n=3, needed=4, unit="replicates", basis="observed spread", status="")
    return ClaimPower(**{**base, **kw})


# --- ClaimPower's text -----------------------------------------------------------------------------------

def test_needed_text_reads_more_than_the_cap_when_none():
    assert _cp(needed=None).needed_text() == "more than 1000 replicates needed"
    assert _cp(needed=9, unit="seeds").needed_text() == "~9 seeds needed"


def test_mde_text_exact_and_singular_unit():
    assert _cp(mde=None).mde_text() == ""
    assert _cp(mde=math.inf).mde_text() == ""
    assert _cp(mde=0.12).mde_text() == "80% power at 3 replicates only for an effect ≥ +0.120 (observed spread)"
    assert _cp(mde=0.12, n=1).mde_text() == \
        "80% power at 1 replicate only for an effect ≥ +0.120 (observed spread)"
    assert _cp(mde=0.12, n=2).mde_text().startswith("80% power at 2 replicates only")
    assert _cp(mde=0.12, n=1, unit="seeds").mde_text().startswith("80% power at 1 seed only")
    assert _cp(mde=-0.5, fmt_effect=lambda v: f"{v:.1f} pts").mde_text().endswith("≥ -0.5 pts (observed spread)")


@pytest.mark.parametrize("kw, expected", [
    ({}, "0.52 at 3 rep. (observed SD) · 80%: ~4"),
    ({"unit": "seeds", "basis": "declared planning SD for the claim's number", "needed": None},
     "0.52 at 3 seeds (declared SD) · 80%: > 1000"),
    ({"basis": "the paper's SD"}, "0.52 at 3 rep. (the paper's SD) · 80%: ~4"),
    ({"basis": ""}, "0.52 at 3 rep. · 80%: ~4"),
    ({"status": REPRODUCED}, "—"),
    ({"mde": 0.12}, "0.52 at 3 rep. (observed SD) · 80%: ~4 · detects ≥ +0.120 at 80%"),
    ({"mde": math.nan}, "0.52 at 3 rep. (observed SD) · 80%: ~4"),
])
def test_short_text_exact(kw, expected):
    assert _cp(**kw).short_text() == expected


def test_text_of_an_undecided_row_without_an_mde_shows_its_power():
    assert _cp(status=INCONCLUSIVE, mde=None).text() == \
        "power 0.52 at 3 replicates (observed spread); ~4 replicates needed for the planning effect"
    assert _cp(status=INCONCLUSIVE, mde=0.12).text() == ("80% power at 3 replicates only for an effect ≥ +0.120 "
                                                         "(observed spread); ~4 replicates needed for the planning effect")


# --- min_detectable: the noncentral t solved by scipy -------------------------------------------------------

def _mde_scipy(n: int, sd: float, threshold: float, alpha: float = 0.025, target: float = 0.8) -> float:
    """The effect at which P(noncentral t > t crit) = target, by root finding on scipy's noncentral t."""
    crit = sps.t.ppf(1 - alpha, n - 1)
    f = lambda d: sps.nct.sf(crit, n - 1, d * math.sqrt(n) / sd) - target  # noqa: E731
    return threshold + spo.brentq(f, 1e-9, 1e4 * sd, xtol=1e-14 * sd)


def test_min_detectable_with_a_spread_far_above_the_planning_sd():
    """3 units at SD 20 (the plan's SD for 3a is 0.01): the effect lies ~80 above the threshold, so the bracket
    must scale with the observed SD (1000 SD), not with the plan's SD or 1/SD."""
    s = SettingDesign(3, {"": 20.0}, paper=(0.04, 0.05))
    expected = _mde_scipy(3, 20.0, 0.04)
    assert expected > 50
    assert min_detectable("3a", [s]) == pytest.approx(expected, rel=1e-7)


def test_min_detectable_at_the_declared_sd_where_none_was_observed():
    """Settings without an observed SD (missing or NaN) use the plan's declared SD for 3a, 0.01."""
    s1 = SettingDesign(4, {"": None}, paper=(0.04, 0.05))
    s2 = SettingDesign(4, {"": math.nan}, paper=(0.04, 0.05))
    got = min_detectable("3a", [s1, s2])
    # both settings at the plan's SD 0.01: power is the product, so each must reach sqrt(0.8)
    assert got == pytest.approx(_mde_scipy(4, 0.01, 0.04, target=math.sqrt(0.8)), rel=1e-7)


def test_min_detectable_is_none_where_it_does_not_apply():
    s = SettingDesign(3, {"": 0.02, "drop": 0.01}, paper=(0.04, 0.05))
    assert min_detectable("3a", []) is None
    assert min_detectable("5b", [s]) is None  # a band
    assert min_detectable("6", [s]) is None  # two endpoints
    assert min_detectable("no such claim", [s]) is None


def _layers_mde_scipy(n: int, sd: float, layers: int, alpha: float = 0.025, target: float = 0.8) -> float:
    """Claim 4's minimum detectable mean log ratio, written out: u = ⌊L/2⌋ + 1 layers must pass a one-sided t-test
    at α/(L − u + 1); with every layer at effect d each passes with the noncentral t's tail q(d), so the power is
    P(Binomial(L, q(d)) ≥ u), solved for 0.8 by root finding."""
    u = layers // 2 + 1
    crit = sps.t.ppf(1 - alpha / (layers - u + 1), n - 1)

    def f(d: float) -> float:
        q = sps.nct.sf(crit, n - 1, d * math.sqrt(n) / sd)
        return sps.binom.sf(u - 1, layers, q) - target

    return spo.brentq(f, 1e-9, 1e3 * sd, xtol=1e-14 * sd)


def test_min_detectable_of_claim_4_solves_the_partial_conjunction_power():
    """Claim 4's row (the decisive study's ResNet-20 shape: 14 replicates, 12 layers, SD 0.06) states the smallest
    common log |γ|/σ its partial-conjunction test detects at 80%, and shows it as the ratio its number is."""
    s = SettingDesign(14, {"": 0.06}, layers=12)
    expected = _layers_mde_scipy(14, 0.06, 12)
    assert 0.03 < expected < 0.12
    assert min_detectable("4", [s]) == pytest.approx(expected, rel=1e-7)
    e = _e(n=14, sd=0.06, conditions={"replicates": list(range(14)), "n_layers": 12}, paper=None)
    claim = SimpleNamespace(id="4", status=INCONCLUSIVE, fmt="{:.2f}".format, deciding=lambda: [e])
    p = claim_power(claim)
    assert p.mde == pytest.approx(math.exp(expected), rel=1e-7)
    assert p.mde_text() == (f"80% power at 14 replicates only for an effect ≥ {math.exp(expected):.2f} |γ|/σ in "
                            "every layer (observed spread)")
    assert claim_power(SimpleNamespace(**{**vars(claim), "status": REPRODUCED})).mde is None


# --- reading an evaluated claim ----------------------------------------------------------------------------

def _e(n=3, sd=0.02, spreads=None, conditions=None, paper=(0.04, 0.05), tests=1):
    return SimpleNamespace(n=n, sd=sd, spreads=spreads or {}, conditions=conditions or {}, paper=paper,
                           tests=tests)


def _claim(cid, evals, status=INCONCLUSIVE):
    return SimpleNamespace(id=cid, status=status, fmt=None, deciding=lambda: evals)


def test_unit_of():
    assert unit_of(_e(conditions={"replicates": [0, 1]})) == "replicates"
    assert unit_of(_e(conditions={"replicates": [0]})) == "seeds"
    assert unit_of(_e()) == "seeds"


def test_settings_of_claim_reads_spreads_layers_and_seeds():
    e1 = _e(n=5, sd=0.1, spreads={"drop": (0.3, 0.07, 0.9)}, conditions={"n_seeds": 3, "n_layers": 6}, tests=2)
    e2 = _e(n=2, sd=None)
    got = settings_of_claim(_claim("6", [e1, e2]))
    assert got == [SettingDesign(5, {"": 0.1, "drop": 0.07}, (0.04, 0.05), 2, 6, 3),
                   SettingDesign(2, {"": None}, (0.04, 0.05), 1, 4, 1)]


def test_claim_power_of_a_claim_without_a_declared_test():
    p = claim_power(_claim("derivation", [_e()]))
    assert p.cid == "derivation" and p.power is None


def test_claim_power_basis_unit_settings_and_mde():
    reps = {"replicates": [0, 1, 2]}
    p = claim_power(_claim("3a", [_e(conditions=reps), _e(n=4, conditions=reps)], status=DIRECTION_ONLY))
    assert (p.cid, p.basis, p.unit, p.settings, p.n) == ("3a", "observed spread", "replicates", 2, 3)
    assert p.mde is not None and p.mde > 0.04
    seeds = claim_power(_claim("3a", [_e(sd=None)]))
    assert seeds.unit == "seeds" and seeds.basis == "declared planning SD for the claim's number"
    assert claim_power(_claim("3a", [_e(sd=math.nan)])).basis == "declared planning SD for the claim's number"
    both = claim_power(_claim("6", [_e(sd=None), _e(sd=None)]))
    assert both.basis == "declared planning SD for the claim's number, drop"
    decided = claim_power(_claim("3a", [_e(conditions=reps)], status=REPRODUCED))
    assert decided.mde is None and decided.power is not None


def test_power_of_is_computed_once_and_kept_on_the_claim():
    c = _claim("3a", [_e()])
    first = power_of(c)
    assert power_of(c) is first and c.__dict__["_power"] is first
    kept = _cp(power=0.11)
    c2 = _claim("3a", [_e()])
    c2.__dict__["_power"] = kept
    assert power_of(c2) is kept
