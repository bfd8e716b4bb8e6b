"""Tests that kill the claim-rule mutants that survived the issue-50 probe (each was checked by planting it).

- claim 4, plan 4.0's robustness row: :func:`layer_fraction_estimate` must pass the pass's level (or the one
  it is given) to ``replicated_bounded_mean``; dropped, the family-level pass ran silently at 95%.
- claim 7's window: an epoch whose outliers' training accuracy is exactly ``FIT_LEVEL`` is after the fit
  (``>=``); real runs with few outliers hit 0.5 exactly.
- row 3c's matching: the better-fitting arm is read at its *earliest* epoch inside the band, so a plateau
  with two epochs in the band picks the first.
"""

from __future__ import annotations

import numpy as np
import pytest

from bnmem.analysis_plan import FIT_LEVEL, family_level
from bnmem.report.claims.claim3c import MATCH_TOLERANCE, matched_epochs
from bnmem.report.claims.claim4 import layer_fraction_estimate
from bnmem.report.claims.claim7 import window
from bnmem.report.claims.core import at_level
from bnmem.stats import replicated_bounded_mean

# Three replicates of per-model layer fractions (4 layers, 3 seeds), mostly above one half.
GROUPS = [np.array([0.75, 0.75, 1.0]), np.array([0.75, 1.0, 1.0]), np.array([0.5, 0.75, 0.75])]


@pytest.mark.parametrize("lv", [0.9, family_level(3), 0.99])
def test_claim4_layer_fraction_uses_the_level_it_is_given(lv):
    est, _ = layer_fraction_estimate(GROUPS, lv)
    want = replicated_bounded_mean(GROUPS, "seeds", lv)
    at_95 = replicated_bounded_mean(GROUPS, "seeds", 0.95)
    assert (est.ci_low, est.ci_high) == (want.ci_low, want.ci_high)
    assert (want.ci_low, want.ci_high) != (at_95.ci_low, at_95.ci_high)  # the level shows in the interval


def test_claim4_layer_fraction_uses_the_pass_level_in_the_family_pass():
    """In the 'contradicted' pass (every interval at 1 − 0.05/k) the plan-4.0 row's interval is that wide."""
    lv = family_level(3)
    with at_level(lv):
        est, _ = layer_fraction_estimate(GROUPS)
    want = replicated_bounded_mean(GROUPS, "seeds", lv)
    assert (est.ci_low, est.ci_high) == (want.ci_low, want.ci_high)
    assert est.ci_low < layer_fraction_estimate(GROUPS)[0].ci_low  # wider than the 95% pass's


def _epoch(acc: float) -> dict:
    return {"outlier_acc": acc}


def test_claim7_an_epoch_at_exactly_the_fit_level_is_after_the_fit():
    epochs = [_epoch(0.25), _epoch(FIT_LEVEL), _epoch(0.75)]
    assert [e["outlier_acc"] for e in window(epochs, fitted=False)] == [0.25]
    assert [e["outlier_acc"] for e in window(epochs, fitted=True)] == [FIT_LEVEL, 0.75]
    assert len(window(epochs, None)) == 3


def test_claim3c_reads_the_better_fitting_arm_at_its_earliest_epoch_in_the_band():
    """A plateau: BN's epochs 2 and 3 both lie within the tolerance of the baseline's final accuracy."""
    epochs = [1, 2, 3, 4]
    base = np.array([0.40, 0.55, 0.65, 0.80])
    bn = np.array([0.60, 0.80, 0.80 + MATCH_TOLERANCE / 2, 0.95])
    assert matched_epochs(epochs, bn, base) == (1, 3)
    # Roles swapped (the baseline fits better): the baseline's earliest epoch in the band.
    assert matched_epochs(epochs, base, bn) == (3, 1)
