"""Plan 6.0: after the run, each design-based power is checked against the observed SD: where a setting's
observed SD exceeds the planning SD the design was sized on, the row says so and gives the power at the observed
SD (the decisive study's flip-setting utility drop: 6.4 points observed against 2.45 assumed, power about 0.2
against the 0.88 stated)."""

from __future__ import annotations

import csv

import pytest

from bnmem.analysis_plan import INCONCLUSIVE, PLANNING
from bnmem.report.claims.core import Evaluation, new_claim
from bnmem.report.power import design_power, power_check, settings_of_claim
from bnmem.report.summary import render_csv

WHERE = "digits · lenet · label noise 0.05 (3 replicates): batch − none"


def claim_with(cid: str, sd: float, n: int = 3, spreads: dict | None = None, replicates=(0, 1, 2)):
    c = new_claim(cid, "x")
    e = Evaluation(WHERE, 0.02, -0.01, 0.05, INCONCLUSIVE, "t", "", n=n, sd=sd,
                   conditions={"replicates": list(replicates)}, spreads=spreads or {})
    c.evaluations.append(e)
    return c


def test_an_observed_sd_above_the_design_bound_is_reported_with_the_power_at_it():
    bound = PLANNING["1"][0].sd
    c = claim_with("1", 3 * bound)
    text = power_check(c)
    assert text.startswith("observed SD above the design's bound") and WHERE in text
    assert f"SD {3 * bound:.3g} > {bound:.3g}" in text
    p_obs = design_power("1", settings_of_claim(c))
    assert f"power at the observed SD {p_obs:.2f}" in text
    declared = design_power("1", [s.__class__(s.n, {"": bound}, s.paper, s.tests, s.layers, s.seeds)
                                  for s in settings_of_claim(c)])
    assert p_obs < declared and f"not the {declared:.2f}" in text
    row = next(csv.DictReader(render_csv([c], "", "0" * 64).splitlines()))
    assert row["power_check"] == text


@pytest.mark.parametrize("sd,replicates", [(0.5, (0, 1, 2)), (3.0, (0,))])
def test_no_line_where_the_observed_sd_is_within_the_bound_or_not_a_spread_of_replicates(sd, replicates):
    bound = PLANNING["1"][0].sd
    assert power_check(claim_with("1", sd * bound, replicates=replicates)) == ""


def test_claim_6_checks_its_cost_endpoint_too():
    """The flip setting's utility drop: the cost's SD exceeds its planning SD while the cut's does not."""
    cut, drop = PLANNING["6"]
    c = claim_with("6", 0.5 * cut.sd, n=5, spreads={"drop": (5, 0.064)})
    text = power_check(c)
    assert f"drop SD 0.064 > {drop.sd:.3g}" in text and ": SD " not in text  # the cut's SD is within its bound
