"""Plan 6.0, claim 6: a declared λ grid of at least six values over at least two decades around plan 5.0's
{1, 10}, the mitigate lens's default, and a validation gate at the claim's own 1-point margin."""

from __future__ import annotations

import math

from bnmem.analysis_plan import (
    MITIGATE_GATE_THRESHOLD, MITIGATE_LAMBDAS, MITIGATE_TEST_DROP, PLAN, mitigate_gate_passes, mitigate_gate_power,
)


def test_the_grid_has_six_values_over_two_decades_around_1_and_10():
    grid = sorted(MITIGATE_LAMBDAS)
    assert len(set(grid)) >= 6 and math.log10(grid[-1] / grid[0]) >= 2
    assert grid[0] < 1 and grid[-1] > 10 and {1.0, 10.0} <= set(grid)
    assert ", ".join(f"{x:g}" for x in MITIGATE_LAMBDAS) in PLAN["6"].metric  # the plan states it


def test_the_mitigate_lens_selects_from_the_plans_grid_by_default():
    from bnmem.lenses.mitigate import MitigateConfig

    assert MitigateConfig().lambdas == list(MITIGATE_LAMBDAS)


def test_the_6_0_gate_is_the_claims_margin():
    assert MITIGATE_TEST_DROP == 0.01 < MITIGATE_GATE_THRESHOLD
    drop = (MITIGATE_TEST_DROP + MITIGATE_GATE_THRESHOLD) / 2  # 1.5 points: over the margin, under 5.0's screen
    assert not mitigate_gate_passes(drop, 0.01, "6.0") and mitigate_gate_passes(drop, 0.01, "5.0")
    assert mitigate_gate_passes(MITIGATE_TEST_DROP, 0.01, "6.0") and mitigate_gate_passes(0.0, 0.05, "6.0")
    # tighter than 5.0's screen: more power to exclude a 3-point cost at the same standard error
    assert mitigate_gate_power(0.02, rule="6.0") > mitigate_gate_power(0.02, rule="5.0")
    power = mitigate_gate_power(0.02, rule="6.0")
    assert abs(power - 0.5 * math.erfc((MITIGATE_TEST_DROP - 0.03) / (0.02 * math.sqrt(2)))) < 1e-15


def test_a_variant_over_the_margin_but_under_5_0s_screen_is_selected_by_5_0_only():
    """λ=10 loses 1.5 points on validation (standard error 0.5): plan 5.0's screen (≤ 2 pt) admits it and its
    criterion picks it (it memorizes least); plan 6.0's gate at the margin excludes it and picks λ=1. The row is
    decided at 6.0's choice; 5.0's is the previous verdict, shown."""
    import numpy as np
    from synthetic_runs import make_cell, make_run
    from test_mitigate import _nested_doc

    from bnmem.names import MITIGATE
    from bnmem.report.claims import claim6

    gate = {"batch+gs1": (0.0, 0.005), "batch+gs10": (0.015, 0.005)}
    cells = [make_cell("m", r, {MITIGATE: _nested_doc(r, 10.0, False, gate)}, seeds=[0, 1]) for r in range(3)]
    lens = cells[0].lenses[MITIGATE]
    assert claim6.gate_choice(lens) == ("batch+gs1", False) and claim6.gate_choice(lens, "5.0") == ("batch+gs10", False)
    claim = claim6.evaluate(make_run(cells))[0]
    d = claim.decisive
    assert "λ=1" in d.where
    bn, reg1 = np.array([0.6, 0.62]), np.array([0.2, 0.22])
    assert abs(d.value - np.mean((bn - reg1) / bn.mean())) < 0.02
    (prev,) = claim.previous
    assert prev.value is not None and prev.value > d.value + 0.1  # 5.0 chose λ=10, which cuts more
    assert any(a.name.startswith("plan 5.0 selection") for a in d.analyses)
