"""Cases where the newest rules and a plausible one-token slip of them disagree (issue 39's planted-bug review).

Each expectation is computed by hand from the rule as documented (docs/analysis-plan.md, docs/audit.md, the
module docstrings), not by calling the code under test.
"""

from __future__ import annotations

import hashlib

import numpy as np

import pytest

from bnmem.auditing import level


# ------------------------------------------------------------------ the audit's two-ended level and its range

@pytest.mark.parametrize("auc, word", [(0.80, "identifiable"), (0.7999, "partly identifiable"),
                                       (0.60, "partly identifiable"), (0.5999, "slightly detectable"),
                                       (0.55, "slightly detectable"), (0.5499, "not distinguishable from non-members")])
def test_words_at_each_threshold(auc, word):
    assert level.words(auc) == word


def test_ends_text_floor_and_ceiling():
    assert level.ends_text(0.56, 0.57) == "slightly detectable"
    assert level.ends_text(0.54, 0.61) == "not shown to leak, possibly partly identifiable"
    assert level.ends_text(0.56, 0.81) == "at least slightly detectable, possibly identifiable"
    assert level.ends_text(0.55, 0.60) == "at least slightly detectable, possibly partly identifiable"


def test_level_range():
    assert level.level_range("moderate", "moderate") == "moderate"
    assert level.level_range("low", "elevated") == "low to elevated"


# ------------------------------------------------------------------ copies to narrow: copies * (half / room)^2, even

def test_copies_to_narrow_by_hand():
    # thresholds inside (0.52, 0.62]: 0.55 and 0.60; room = min(0.03, 0.02); half = max(0.06, 0.04)
    # need = 5 * (0.06 / 0.02)^2 = 45 -> rounded up to an even count: 46
    assert level.copies_to_narrow(0.58, 0.52, 0.62, 5) == 46
    # the upper threshold counts when hi equals it (lo < t <= hi) and sets the room here:
    # room = min(0.035, 0.015) = 0.015, half = max(0.065, 0.015); 4 * (0.065/0.015)^2 = 75.1 -> 76
    assert level.copies_to_narrow(0.585, 0.52, 0.60, 4) == 76
    # a lower end on a threshold is above it (lo < t): nothing spanned
    assert level.copies_to_narrow(0.565, 0.55, 0.58, 8) is None
    # a point within 0.005 of a threshold: no count settles it
    assert level.copies_to_narrow(0.552, 0.50, 0.58, 8) is None
    # only the upper threshold spanned: room = |0.63 - 0.60| = 0.03, half = max(0.04, 0.03):
    # 10 * (0.04/0.03)^2 = 17.8 -> 18
    assert level.copies_to_narrow(0.63, 0.59, 0.66, 10) == 18


def _group(attack_cis: dict[str, tuple[float, float, float]], shadow_models: int = 8) -> dict:
    leakage = {a: {"g": {"auc": auc, "ci": {"auc": [lo, hi]}, "n_examples": 30}}
               for a, (auc, lo, hi) in attack_cis.items()}
    return {"membership": {"leakage": leakage, "shadow_models": shadow_models}}


def test_group_level_takes_the_attack_with_the_highest_lower_bound_not_the_highest_point():
    result = _group({"lira": (0.66, 0.50, 0.80), "rmia": (0.62, 0.56, 0.68)}, shadow_models=6)
    g = level.group_level(result, "g")
    assert g["attack"] == "rmia" and g["auc_ci"] == [0.56, 0.68]
    assert (g["level_lower"], g["level_upper"], g["level"]) == ("moderate", "elevated", "moderate to elevated")
    assert g["level_point_auc"] == "elevated" and g["level_lower_bound"] == "moderate"
    # room = |0.62 - 0.60| = 0.02 (0.55 is below lo), half = max(0.06, 0.06): 6 * 9 = 54
    assert g["narrow_with"] == 54
    assert level.group_level(result, "other") is None


def test_group_level_settled_interval_has_no_copies_figure():
    g = level.group_level(_group({"lira": (0.57, 0.56, 0.58)}), "g")
    assert g["level"] == "moderate" and g["narrow_with"] is None


def test_audit_level_is_the_highest_of_each_end_over_groups():
    groups = [{"level_lower": "moderate", "level_upper": "moderate", "level_point_auc": "moderate",
               "level_lower_bound": "moderate", "auc_ci": [0.56, 0.59]},
              {"level_lower": "low", "level_upper": "elevated", "level_point_auc": "low",
               "level_lower_bound": "low", "auc_ci": [0.50, 0.70]}]
    out = level.audit_level(groups)
    assert out == {"level": "moderate to elevated", "level_lower": "moderate", "level_upper": "elevated",
                   "level_point_auc": "moderate", "level_lower_bound": "moderate"}
    assert set(level.audit_level([]).values()) == {level.NOT_MEASURED}


def test_level_setter_ranks_by_lower_level_then_lower_bound():
    a = {"level_lower": "moderate", "auc_ci": [0.56, 0.58]}
    b = {"level_lower": "low", "auc_ci": [0.54, 0.90]}
    c = {"level_lower": "moderate", "auc_ci": [0.57, 0.575]}
    assert level.level_setter([a, b]) is a  # a higher lower level wins over a higher upper end
    assert level.level_setter([a, c, b]) is c  # same lower level: the higher lower bound
    assert level.level_setter([]) is None


# ------------------------------------------------------------------ the confirmatory seed derivation

def _oracle(sha: str, *parts: object, bound: int) -> int:
    text = "bnmem-confirmatory:" + sha + "".join(f":{p}" for p in parts)
    return int(hashlib.sha256(text.encode()).hexdigest()[:16], 16) % bound


def test_confirmatory_seeds_match_an_independent_derivation():
    from bnmem.study import confirmatory as c

    sha = "ab" * 32
    seeds = c.replicate_seeds(sha, 3, 2)
    for k, s in enumerate(seeds):
        assert s.data == _oracle(sha, "data", k, bound=2**31)
        assert s.keep == _oracle(sha, "keep", k, bound=2**31)
        assert s.query == _oracle(sha, "query", k, bound=2**31)
        assert s.models == tuple(_oracle(sha, "model", k, j, bound=2**22) for j in range(2))
        assert s.record() == {"data_seed": s.data, "model_seeds": list(s.models), "keep_seed": s.keep,
                              "query_seed": s.query}
        assert s.lens_seeds() == {"keep_seed": s.keep, "query_seed": s.query}


def test_audit_level_and_group_level_return_exactly_their_documented_keys():
    empty = level.audit_level([])
    assert empty == {k: level.NOT_MEASURED for k in ("level", "level_lower", "level_upper", "level_point_auc",
                                                      "level_lower_bound")}
    result = _group({"lira": (0.57, 0.56, 0.58)}, shadow_models=8)
    metrics = result["membership"]["leakage"]["lira"]["g"]
    assert level.group_level(result, "g") == {
        "group": "g", "attack": "lira", "auc": 0.57, "auc_ci": [0.56, 0.58], "level_lower": "moderate",
        "level_upper": "moderate", "level": "moderate", "words": "slightly detectable",
        "level_point_auc": "moderate", "level_lower_bound": "moderate", "narrow_with": None, "metrics": metrics,
        "n_examples": 30}


# ------------------------------------------------------------------ power formulas and n for 80%

def _simulated_interval_ends(n: int, sd: float, effect: float, alpha: float, runs: int = 400_000, seed: int = 0):
    """The (1 − 2α) t-interval's ends over ``runs`` simulated studies of n normal units (vectorized)."""
    from scipy import stats as sps

    rng = np.random.default_rng(seed)
    mean = rng.normal(effect, sd / np.sqrt(n), runs)
    s = sd * np.sqrt(rng.chisquare(n - 1, runs) / (n - 1))
    half = sps.t.ppf(1 - alpha, n - 1) * s / np.sqrt(n)
    return mean - half, mean + half


@pytest.mark.parametrize("n, sd, effect, band, alpha", [(20, 0.3, 0.3, (0.1, 0.5), 0.05),
                                                        (12, 0.4, 0.25, (0.05, 0.7), 0.3)])
def test_band_power_on_an_asymmetric_band_matches_a_simulation(n, sd, effect, band, alpha):
    """A band not centred on 0 (lo + hi ≠ 0) and a large α (critical value < 1) tell the formula's signs apart."""
    from bnmem.power import power_band

    lo, hi = _simulated_interval_ends(n, sd, effect, alpha)
    simulated = float(np.mean((lo > band[0]) & (hi < band[1])))
    assert abs(power_band(n, sd, effect, band, alpha) - simulated) < 0.005  # 400k runs: SE < 0.0008


def test_band_power_edges():
    from bnmem.power import power_band

    assert power_band(1, 1.0, 0.0, (-1.0, 1.0), 0.05) == 0.0  # no interval from one unit
    assert power_band(10, 0.0, 0.0, (-1.0, 1.0), 0.05) == 1.0
    assert power_band(10, 0.0, -1.0, (-1.0, 1.0), 0.05) == 0.0  # on an end is not inside
    assert power_band(10, 0.0, 1.0, (-1.0, 1.0), 0.05) == 0.0
    assert power_band(10, 1.0, 0.0, (-0.1, 0.1), 0.05) < 0.01  # sd 1 is not sd 0


def test_non_inferiority_power_with_a_nonzero_effect_matches_a_simulation():
    from bnmem.power import power_below

    _, hi = _simulated_interval_ends(15, 1.0, -0.4, 0.05)
    assert abs(power_below(15, 1.0, -0.4, 0.2, 0.05) - float(np.mean(hi < 0.2))) < 0.005


def test_sd_upper_bound_by_the_chi_square_table():
    from bnmem.power import sd_upper_bound

    # chi-square 10% quantile with 9 df = 4.168159 (tables): 2 * sqrt(9 / 4.168159)
    assert sd_upper_bound(2.0, 10, 0.9) == pytest.approx(2.0 * np.sqrt(9 / 4.168159), rel=1e-6)
    assert sd_upper_bound(0.0, 10, 0.9) == 0.0
    # two units (one degree of freedom) are enough: chi-square 10% quantile with 1 df = 0.01579077
    assert sd_upper_bound(1.0, 2, 0.9) == pytest.approx(np.sqrt(1 / 0.01579077), rel=1e-5)
    assert sd_upper_bound(None, 10, 0.9) is None and sd_upper_bound(1.0, 1, 0.9) is None
    assert sd_upper_bound(float("inf"), 10, 0.9) is None


def test_units_needed_finds_the_first_n_at_the_target_exactly():
    from bnmem.power import units_needed

    assert units_needed(lambda n: 0.8 if n >= 37 else 0.5) == 37  # power equal to the target counts
    assert units_needed(lambda n: 0.8) == 2
    assert units_needed(lambda n: 1.0 if n >= 9 else 0.0, limit=10) == 9  # doubling passes the limit
    assert units_needed(lambda n: 1.0 if n >= 11 else 0.0, limit=10) is None
    assert units_needed(lambda n: 0.8 if n >= 10 else 0.5, limit=10) == 10  # the target at the limit itself


def test_simulated_power_defaults_are_2000_runs_from_seed_0():
    from bnmem.power import power_simulated, power_simulated_all

    def draw(rng, n):
        return rng.random(n)

    rng = np.random.default_rng(0)
    expected = sum(bool(rng.random(3)[0] < 0.5) for _ in range(2000)) / 2000
    assert power_simulated(lambda x: x[0] < 0.5, draw, 3) == expected
    assert power_simulated_all(lambda studies: np.array([s[0] < 0.5 for s in studies]), draw, 3) == expected
    assert power_simulated(lambda x: x[0] < 0.5, draw, 3, runs=10, seed=5) != expected
