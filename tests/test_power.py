"""Power of the claims' tests (bnmem.power) against a Monte Carlo simulation of the same test.

The simulation draws normal replicate values, builds the interval with the report's own t-interval code
(bnmem.stats.t_intervals) and applies the rule; the analytic power must lie within 4 Monte Carlo standard
errors (fixed seed). Each check has a twin that a planted bug fails.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from bnmem.power import power_above, power_all, power_band, power_below, power_simulated, units_needed
from bnmem.stats import t_intervals

RUNS = 20_000


def _mc(n: int, sd: float, effect: float, level: float, rule, seed: int = 1) -> float:
    rng = np.random.default_rng(seed)
    x = rng.normal(effect, sd, size=(RUNS, n))
    lo, hi = t_intervals(x, level)
    return float(np.mean(rule(lo, hi)))


def _close(analytic: float, simulated: float) -> bool:
    se = math.sqrt(max(analytic * (1 - analytic), 1e-4) / RUNS)
    return abs(analytic - simulated) <= 4 * se + 1e-9


@pytest.mark.parametrize("n, sd, effect, threshold, level", [
    (3, 0.04, 0.05, 0.0, 0.95), (3, 0.01, 0.05, 0.04, 0.95), (5, 0.02, 0.03, 0.0, 0.99), (2, 0.5, 1.0, 0.0, 0.95),
    (11, 0.3, 0.25, 0.0, 0.95)])
def test_one_sided_power_matches_a_simulation_of_the_interval_rule(n, sd, effect, threshold, level):
    alpha = (1 - level) / 2
    sim = _mc(n, sd, effect, level, lambda lo, hi: lo > threshold)
    assert _close(power_above(n, sd, effect, threshold, alpha), sim)
    # planted bug: the two-sided α instead of the one-sided one is a different (larger) power
    assert not _close(power_above(n, sd, effect, threshold, 1 - level), sim)


def test_non_inferiority_power_matches_the_upper_end_rule():
    sim = _mc(7, 0.007, 0.0, 0.95, lambda lo, hi: hi < 0.01)
    assert _close(power_below(7, 0.007, 0.0, 0.01, 0.025), sim)
    assert not _close(power_above(7, 0.007, 0.0, 0.01, 0.025), sim)  # planted bug: the wrong side


@pytest.mark.parametrize("n, sd, effect", [(3, 0.05, 1.0), (4, 0.08, 1.02), (10, 0.15, 1.0), (2, 0.02, 0.95)])
def test_band_power_matches_a_simulation_of_the_equivalence_rule(n, sd, effect):
    band = (0.9, 1.1)
    sim = _mc(n, sd, effect, 0.95, lambda lo, hi: (lo > band[0]) & (hi < band[1]))
    assert _close(power_band(n, sd, effect, band, 0.025), sim)
    # planted bug: the two-sided α for each one-sided test (a 90% interval) overstates the power
    assert not _close(power_band(n, sd, effect, band, 0.05), sim)


def test_intersection_union_is_the_product_for_independent_settings():
    rng = np.random.default_rng(3)
    n, sd = 3, [0.02, 0.03]
    both = np.ones(RUNS, dtype=bool)
    for s in sd:
        lo, _ = t_intervals(rng.normal(0.05, s, size=(RUNS, n)), 0.95)
        both &= lo > 0.0
    analytic = power_all(power_above(n, s, 0.05, 0.0, 0.025) for s in sd)
    assert _close(analytic, float(both.mean()))
    assert not _close(power_above(n, min(sd), 0.05, 0.0, 0.025), float(both.mean()))  # one setting only


def test_power_edges_and_units_needed():
    assert power_above(1, 0.1, 1.0, 0.0, 0.025) == 0.0  # one unit: no interval
    assert power_above(3, 0.0, 0.1, 0.0, 0.025) == 1.0 and power_above(3, 0.0, -0.1, 0.0, 0.025) == 0.0
    assert power_above(50, 0.1, 0.0, 0.0, 0.025) == pytest.approx(0.025, abs=1e-9)  # at the null: α
    n = units_needed(lambda k: power_above(k, 0.1, 0.05, 0.0, 0.025))
    assert power_above(n, 0.1, 0.05, 0.0, 0.025) >= 0.8 > power_above(n - 1, 0.1, 0.05, 0.0, 0.025)
    assert units_needed(lambda k: power_above(k, 0.1, 0.0, 0.0, 0.025), limit=200) is None


def test_simulated_power_of_an_exact_rule():
    """A sign test over replicates (reproduced if all n values exceed 0.5): power = p^n exactly."""
    p = 0.8
    sim = power_simulated(lambda x: bool(np.all(x > 0.5)), lambda rng, n: rng.random(n) < p, 4, runs=RUNS)
    assert _close(p ** 4, sim)
