"""bnmem.formatting: the one number formatter (command tables, report, audit)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bnmem.formatting import DASH, EM_DASH, eps_value, finite, fmt, interval, mean_pm, pct
from bnmem.report import results

MISSING = [None, math.nan, np.float32("nan"), math.inf, -math.inf, "abc", [1.0], {}]


@pytest.mark.parametrize("v", MISSING)
def test_missing_numbers_print_the_dash_of_the_medium(v):
    assert finite(v) is None
    assert fmt(v) == DASH == "-" and fmt(v, missing=EM_DASH) == "—" and results.fmt(v) == "—"
    assert pct(v) == "-" and results.pct(v) == "—"
    assert interval(v, 0.1, 0.2) == "-" and mean_pm({"mean": v, "ci": [0.0, 1.0]}) == "-"


def test_numbers_in_their_format():
    assert finite("0.25") == 0.25 and finite(np.float64(2.0)) == 2.0 and finite(3) == 3.0
    assert fmt(0.12345) == "0.123" and fmt(np.float32(0.5), ".4f") == "0.5000" and fmt(1234.5, ".4g") == "1234"
    assert fmt(0.01, "+.3f") == "+0.010" and fmt(7, "g") == "7" and results.fmt(0.5, ".2f") == "0.50"
    assert pct(0.1234) == "12.3%" and pct(0.1234, 0) == "12%" and pct(0.1234, suffix="") == "12.3"
    assert results.pct(0.5) == "50.0%"


def test_interval_scales_and_marks_missing_bounds():
    assert interval(0.5, 0.4, 0.6) == "0.500 [0.400, 0.600]"
    assert interval(0.01234, -0.002, 0.03, "+.1f", scale=100) == "+1.2 [-0.2, +3.0]"
    assert interval(0.02, None, math.nan, "+.3f", missing=EM_DASH) == "+0.020 [—, —]"


def test_mean_pm_is_mean_plus_minus_half_the_interval():
    assert mean_pm({"mean": 0.5, "ci": [0.4, 0.7]}) == "0.500 ±0.150"
    assert mean_pm({"mean": 0.0123, "ci": [0.01, 0.02]}, 1, scale=100) == "1.2 ±0.5"
    assert mean_pm({"mean": 2.0, "ci": None}, 2) == "2.00" and mean_pm(None) == "-"


def test_a_positive_epsilon_never_prints_as_zero_and_infinity_is_named():
    assert eps_value(1.234) == "1.23" and eps_value(0.0) == "0.00" and eps_value(4.0, 1) == "4.0"
    assert eps_value(0.0032) == "0.0032" and eps_value(np.float32(0.004)) == "0.004" and eps_value(1e-7) == "1e-07"
    assert eps_value(0.0032, 3) == "0.003"  # enough digits: the fixed format stands
    assert eps_value(math.inf) == "∞" and eps_value(np.float64("inf")) == "∞"
    assert eps_value(-math.inf) == eps_value(math.nan) == eps_value(None) == DASH


def test_the_audit_texts_show_a_tiny_epsilon_floor_and_an_infinite_accountant_epsilon():
    from bnmem.auditing.one_run import one_run_text
    from bnmem.lenses.defenses_text import audit_text

    one = {"eps_lb": 0.0032, "beta": 0.05, "delta": 1e-5, "canaries": 500, "canaries_in": 245, "correct": 140,
           "guesses": 270, "k": 135}
    assert "guarantee below ε = 0.0032 holds" in one_run_text(one, None)
    res = {"variant_names": ["dp"], "variants": {"dp": {"epsilon": {"mean": math.inf},
                                                         "dp_audit": {"passed": True, "eps_lb_max": 0.002}}}}
    assert "is 0.002 (95% family-wise) against the accountant's ε = ∞:" in audit_text(res)
