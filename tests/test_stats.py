"""bnmem.stats: paired differences, the bootstrap and t intervals, and which one decides.

The interval levels themselves are pinned against explicit resampling in
tests/test_oracles.py; shift/scale equivariance is in tests/test_properties.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from bnmem import stats
from bnmem.stats import SMALL_N, bootstrap_mean_ci, difference_stats, pair_by_key, paired_difference, t_interval




def test_constant_differences_give_zero_width_intervals():
    for n in (3, 25):
        pd = paired_difference(np.full(n, 0.7), np.full(n, 0.6))
        assert pd.mean == pytest.approx(0.1)
        assert pd.ci_low == pytest.approx(0.1, abs=1e-12) and pd.ci_high == pytest.approx(0.1, abs=1e-12)
        assert pd.boot_low == pd.boot_high and pd.t_low == pytest.approx(pd.t_high)


def test_symmetric_noise_interval_contains_zero():
    rng = np.random.default_rng(1)
    e = rng.normal(size=20)
    d = np.concatenate([e, -e])  # mean exactly 0, symmetric
    for pd in (difference_stats(d, unit="targets"), difference_stats(d[:6] - d[:6].mean())):
        assert pd.ci_low < 0 < pd.ci_high
    assert abs(difference_stats(d).mean) < 1e-12


def test_bootstrap_is_seeded_and_deterministic():
    x = np.random.default_rng(0).normal(0.03, 0.05, size=40)
    assert bootstrap_mean_ci(x, seed=3) == bootstrap_mean_ci(x, seed=3)
    assert bootstrap_mean_ci(x, seed=3) != bootstrap_mean_ci(x, seed=4)
    assert difference_stats(x, unit="targets") == difference_stats(x, unit="targets")
    lo, hi = bootstrap_mean_ci(x)
    se = x.std(ddof=1) / np.sqrt(x.size)
    # percentile bootstrap ≈ mean ± 1.96 se for a roughly normal sample
    assert lo == pytest.approx(x.mean() - 1.96 * se, abs=0.4 * se)
    assert hi == pytest.approx(x.mean() + 1.96 * se, abs=0.4 * se)


def test_t_interval_known_case_and_small_n_method():
    lo, hi = t_interval([1.0, 2.0, 3.0])
    half = 4.302652729911275 / np.sqrt(3)  # t_{0.975, 2} · sd / sqrt(n), sd = 1
    assert (lo, hi) == (pytest.approx(2 - half), pytest.approx(2 + half))
    pd = difference_stats([1.0, 2.0, 3.0])
    assert "t-interval" in pd.method and "3 paired seeds" in pd.method
    assert (pd.ci_low, pd.ci_high) == (pytest.approx(lo), pytest.approx(hi))
    assert pd.min == 1.0 and pd.max == 3.0
    # the bootstrap over 3 values cannot leave [min, max]: narrower than the t-interval
    assert 1.0 <= pd.boot_low and pd.boot_high <= 3.0 and pd.boot_low > pd.ci_low
    many = difference_stats(np.arange(SMALL_N, dtype=float), unit="targets")
    assert "t-interval" in many.method and many.ci_low == many.t_low  # plan 3.0: t at every n
    old = difference_stats(np.arange(SMALL_N, dtype=float), unit="targets", bootstrap_from=SMALL_N)
    assert "percentile bootstrap" in old.method and old.ci_low == old.boot_low  # plan 2.0's rule, kept


def test_degenerate_samples():
    one = difference_stats([0.2])
    assert one.ci_low is None and one.n == 1 and "no interval" in one.note
    none = difference_stats([])
    assert none.n == 0 and np.isnan(none.mean)
    nan = paired_difference([0.5, np.nan, 0.7, 0.6], [0.4, 0.3, np.nan, 0.5])
    assert nan.n == 2 and "2 pair(s)" in nan.note
    with pytest.raises(ValueError):
        paired_difference([1, 2], [1])


def test_constants_are_the_documented_plan():
    # The declared analysis plan: 95% intervals, 10,000 seeded resamples (shown); plan 2.0 bootstrapped from 10.
    assert (stats.LEVEL, stats.N_RESAMPLES, stats.SEED, stats.SMALL_N) == (0.95, 10_000, 0, 10)


def test_non_finite_values_are_dropped_before_resampling():
    x = np.array([0.1, np.nan, 0.4, np.inf, 0.2, -np.inf, 0.9])
    assert bootstrap_mean_ci(x, n_resamples=200) == bootstrap_mean_ci([0.1, 0.4, 0.2, 0.9], n_resamples=200)
    assert t_interval(x) == t_interval([0.1, 0.4, 0.2, 0.9])
    assert bootstrap_mean_ci([1.0, np.nan]) is None and t_interval([np.inf, 2.0]) is None
    assert bootstrap_mean_ci([[1.0, 2.0], [3.0, 4.0]], n_resamples=50) == bootstrap_mean_ci([1.0, 2.0, 3.0, 4.0],
                                                                                           n_resamples=50)


def test_zero_width_bootstrap_for_a_constant_sample_only():
    assert bootstrap_mean_ci([0.3] * 7) == (0.3, 0.3)
    lo, hi = bootstrap_mean_ci([0.3] * 6 + [0.31])
    assert lo < hi


@pytest.mark.parametrize("n", [SMALL_N - 1, SMALL_N])
def test_small_n_boundary_chooses_the_interval(n):
    d = np.linspace(-0.2, 0.5, n)
    now = difference_stats(d, unit="targets")
    assert (now.ci_low, now.ci_high) == (now.t_low, now.t_high)
    assert now.method == f"95% Student t-interval over {n} paired targets" and now.note == ""
    pd = difference_stats(d, unit="targets", bootstrap_from=SMALL_N)  # plan 2.0's switch
    if n < SMALL_N:
        assert (pd.ci_low, pd.ci_high) == (pd.t_low, pd.t_high)
    else:
        assert (pd.ci_low, pd.ci_high) == (pd.boot_low, pd.boot_high)
        assert pd.method == f"95% percentile bootstrap over {n} paired targets (10000 resamples, seed 0)"
        assert pd.note == ""
    assert pd.n == n and pd.unit == "targets"
    assert (pd.min, pd.max) == (pytest.approx(-0.2), pytest.approx(0.5))


def test_paired_difference_passes_its_settings_through():
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=30), rng.normal(size=30)
    pd = paired_difference(a, b, unit="targets", level=0.8, n_resamples=300, seed=5)
    assert pd == difference_stats(a - b, unit="targets", level=0.8, n_resamples=300, seed=5)
    assert pd.method == "80% Student t-interval over 30 paired targets"
    assert (pd.boot_low, pd.boot_high) == bootstrap_mean_ci(a - b, level=0.8, n_resamples=300, seed=5)
    assert (pd.t_low, pd.t_high) == t_interval(a - b, level=0.8)
    assert paired_difference([2, 3], [1, 1]).unit == "seeds"


def test_degenerate_samples_text_and_fields():
    one = difference_stats([0.2], unit="seeds")
    assert one.method == "single pair: no confidence interval"
    assert one.note == "1 pair (seed) only: no interval; decided on the point estimate"
    assert (one.mean, one.n, one.ci_high, one.boot_low, one.t_low, one.min, one.max) == (0.2, 1, None, None, None,
                                                                                        0.2, 0.2)
    assert difference_stats([0.2], unit="x").note.startswith("1 pair (x) only")
    none = difference_stats([np.nan, np.nan], unit="targets")
    assert (none.n, none.ci_low, none.ci_high, none.method, none.unit) == (0, None, None, "no pairs", "targets")
    assert math.isnan(none.mean) and none.note == "2 pair(s) without a finite value on both sides dropped"
    dropped = difference_stats([0.1, np.nan, 0.3, 0.2])
    assert dropped.note == "1 pair(s) without a finite value on both sides dropped"
    assert dropped.to_dict()["n"] == 3 and set(dropped.to_dict()) >= {"mean", "ci_low", "method", "note"}
    with pytest.raises(ValueError, match="differ in length: 2 vs 1"):
        paired_difference([1, 2], [1])


def test_pair_by_key_aligns_common_keys_numerically():
    keys, a, b = pair_by_key({"10": 1.0, "2": 2.0, "x": 3.0, "-1": None, "only_a": 9.0},
                             {"2": 0.5, "10": 0.25, "x": None, "-1": 4.0, "only_b": 8.0})
    assert keys == ["-1", "2", "10", "x"]
    np.testing.assert_array_equal(a, [np.nan, 2.0, 1.0, 3.0])
    np.testing.assert_array_equal(b, [4.0, 0.5, 0.25, np.nan])
    assert pair_by_key({}, {"1": 1.0})[0] == []
    keys, _, _ = pair_by_key({1: 1.0, 3: 2.0, 20: 0.0}, {20: 1.0, 3: 1.0, 1: 1.0})
    assert keys == [1, 3, 20]


def test_low_precision_and_unsigned_inputs_are_computed_in_float64():
    x16 = np.random.default_rng(4).normal(0.1, 1.0, 12).astype(np.float16)
    x64 = x16.astype(np.float64)
    assert bootstrap_mean_ci(x16, n_resamples=300) == bootstrap_mean_ci(x64, n_resamples=300)
    assert difference_stats(x16).mean == difference_stats(x64).mean == float(x64.mean())
    # Unsigned counts: 1 − 3 is −2, not a wrapped-around 254.
    pd = paired_difference(np.array([1, 5, 2], dtype=np.uint8), np.array([3, 1, 2], dtype=np.uint8))
    assert (pd.min, pd.max, pd.mean) == (-2.0, 4.0, pytest.approx(2 / 3))


def test_pair_by_key_orders_names_and_leaves_look_alikes_as_names():
    names = {k: 1.0 for k in ("delta", "alpha", "echo", "charlie", "bravo", "foxtrot", "X1", "-")}
    keys, _, _ = pair_by_key(names, names)
    assert keys == ["-", "X1", "alpha", "bravo", "charlie", "delta", "echo", "foxtrot"]


def test_replicated_difference_over_replicates_one_replicate_and_none():
    """Replicates are the unit from two on (level and bootstrap passed on, the sizes said in the method); one
    replicate gives an interval over its pairs only when they are independent (said in the note), else none; no
    replicate is the empty estimate."""
    rd = stats.replicated_difference
    groups = [[0.1, 0.3], [0.2, 0.4, float("nan"), 0.6], [0.5, 0.7, 0.9]]
    means = [float(np.mean(g)) for g in ([0.1, 0.3], [0.2, 0.4, 0.6], [0.5, 0.7, 0.9])]
    got = rd(groups, "seeds", True, level=0.9, bootstrap_from=2)
    want = difference_stats(means, unit="replicates", level=0.9, bootstrap_from=2)
    assert {**got.to_dict(), "method": ""} == {**want.to_dict(), "method": ""}
    assert got.unit == "replicates" and got.n == 3 and got.sd is not None
    assert got.method == f"{want.method}; each replicate the mean over its seeds (2–3)"
    two = rd([[0.1, 0.3], [0.5, 0.7]], "targets", False)
    assert two.n == 2 and two.ci_low is not None and two.method.endswith("; each replicate the mean over its 2 targets")
    assert rd([[], [float("nan")]], "seeds", True).to_dict() == difference_stats([], unit="replicates").to_dict()

    one = rd([[], [0.1, 0.2, 0.6]], "seeds", True, level=0.9, bootstrap_from=2)
    inner = difference_stats([0.1, 0.2, 0.6], unit="seeds", level=0.9, bootstrap_from=2)
    assert {**one.to_dict(), "note": ""} == {**inner.to_dict(), "note": ""}
    assert one.note == "; ".join(x for x in (inner.note, "one replicate: the interval is over its seeds and "
                                             "conditional on its data-corruption draw") if x)
    shared = rd([[0.1, 0.2, 0.6]], "targets", False)
    why = ("one replicate whose targets share reference models, so they are not independent and no interval over "
           "them is valid")
    assert (shared.mean, shared.ci_low, shared.ci_high, shared.n, shared.unit) == (pytest.approx(0.3), None, None, 1,
                                                                                  "replicates")
    assert shared.method == shared.note == f"no interval: {why}"
    assert (shared.min, shared.max) == (0.1, 0.6)
    single = rd([[0.4]], "seeds", True)
    assert single.ci_low is None and single.note == "no interval: a single pair (seeds)" and single.n == 1


def test_difference_stats_has_an_sd_from_two_units():
    assert difference_stats([0.1, 0.3]).sd == pytest.approx(math.sqrt(0.02))
    assert difference_stats([0.1]).sd is None


def test_jackknife_of_the_mean_is_the_t_interval_of_the_units():
    """For the mean, the delete-one jackknife se is sd/√n, so the interval is the units' Student t-interval."""
    y = np.array([0.9, 0.2, 0.5, 0.7, 0.1])
    n = y.size
    loo = [(y.sum() - v) / (n - 1) for v in y]
    pd = stats.jackknife_interval(float(y.mean()), loo)
    se = y.std(ddof=1) / math.sqrt(n)
    half = 2.7764451051977987 * se  # t_{0.975, 4}
    assert (pd.mean, pd.ci_low, pd.ci_high) == (pytest.approx(0.48), pytest.approx(0.48 - half),
                                                 pytest.approx(0.48 + half))
    assert (pd.ci_low, pd.ci_high) == tuple(pytest.approx(v) for v in t_interval(y))
    assert (pd.n, pd.unit, pd.min, pd.max) == (5, "models", pytest.approx(min(loo)), pytest.approx(max(loo)))
    assert pd.method == f"95% delete-one-model jackknife over 5 models (t with 4 df, se {se:.3g})"


def test_jackknife_hand_computed_se_level_and_unit_text():
    """se² = (n − 1)/n · Σ(θ_i − θ̄)², t_{n−1} at the asked level; the method names the unit (singular)."""
    loo = [1.0, 2.0, 3.0, 4.0]  # mean 2.5, Σ squares 5
    se = math.sqrt(3 / 4 * 5)
    pd = stats.jackknife_interval(10.0, loo, unit="replicates", level=0.9)
    half = 2.3533634348018264 * se  # t_{0.95, 3}
    assert (pd.mean, pd.ci_low, pd.ci_high) == (10.0, pytest.approx(10 - half), pytest.approx(10 + half))
    assert (pd.n, pd.unit, pd.min, pd.max) == (4, "replicates", 1.0, 4.0)
    assert pd.method == f"90% delete-one-replicate jackknife over 4 replicates (t with 3 df, se {se:.3g})"
    two = stats.jackknife_interval(0.0, [1.0, 3.0], unit="data")  # smallest n with an interval; unit without s
    half2 = 12.706204736174698 * math.sqrt(1 / 2 * 2)  # t_{0.975, 1}
    assert (two.ci_low, two.ci_high) == (pytest.approx(-half2), pytest.approx(half2))
    assert two.method.startswith("95% delete-one-data jackknife over 2 data (t with 1 df, se 1)")


def test_jackknife_without_two_values_or_a_finite_statistic_has_no_interval():
    """Fewer than 2 finite leave-one-out values, or a non-finite full statistic: the estimate without interval."""
    for full, loo, n in ((0.4, [0.3, np.nan], 1), (0.4, [], 0), (np.nan, [0.1, 0.2, 0.3], 3)):
        pd = stats.jackknife_interval(full, loo)
        assert pd.mean == full or (math.isnan(pd.mean) and math.isnan(full))
        assert (pd.ci_low, pd.ci_high, pd.n, pd.unit) == (None, None, n, "models")
        assert pd.method == "jackknife: fewer than 2 leave-one-out values" and pd.note == "no interval"
    assert stats.jackknife_interval(0.4, [0.3], unit="targets").unit == "targets"


def _anderson(values, level):
    """Anderson's bound written out: Σ (x_(i+1) − x_(i))·max(0, 1 − i/n − ε), x_(0) = 0; mirrored on 1 − x."""
    from scipy import stats as sps

    n = len(values)
    eps = float(sps.ksone.ppf(0.5 + level / 2, n))

    def low(v):
        total, prev = 0.0, 0.0
        for i, xi in enumerate(sorted(v)):
            total += (xi - prev) * max(0.0, 1.0 - i / n - eps)
            prev = xi
        return total

    return low(values), 1.0 - low([1.0 - v for v in values])


def test_bounded_mean_intervals_rows_match_the_written_out_bound():
    """Each row's interval is Anderson's bound on it (lower end and the mirrored upper end), rows independent."""
    rows = np.array([[0.25, 1.0, 0.5, 0.0, 0.75], [0.1, 0.9, 0.2, 0.3, 0.6], [1.0, 1.0, 0.0, 0.5, 0.25]])
    for level in (0.95, 0.8):
        lo, hi = stats.bounded_mean_intervals(rows, level)
        for r, row in enumerate(rows):
            want = _anderson(list(row), level)
            assert (lo[r], hi[r]) == (pytest.approx(want[0], abs=1e-12), pytest.approx(want[1], abs=1e-12))
            assert 0.0 <= lo[r] <= row.mean() <= hi[r] <= 1.0
    lo, hi = stats.bounded_mean_intervals(np.ones((2, 3)))
    assert lo == pytest.approx([0.29, 0.29], abs=0.005) and hi == pytest.approx([1.0, 1.0])  # the docstring's case
    lo, hi = stats.bounded_mean_intervals(np.zeros((1, 3)))
    assert lo == pytest.approx([0.0]) and hi == pytest.approx([1 - 0.2924], abs=0.001)  # mirrored


def test_bounded_mean_intervals_of_low_precision_input_are_float64():
    """float16 fractions give the interval of their float64 values (1 − x is not rounded to float16)."""
    x16 = np.array([[0.1, 0.2, 0.3, 0.15, 0.05, 0.33, 0.41, 0.27, 0.12, 0.09]], dtype=np.float16)  # 1 − x > ½
    lo, hi = stats.bounded_mean_intervals(x16)
    want = _anderson([float(v) for v in x16[0]], 0.95)
    assert (lo[0], hi[0]) == (pytest.approx(want[0], abs=1e-12), pytest.approx(want[1], abs=1e-12))


def test_bounded_mean_fields_and_level():
    """bounded_mean: the sample mean, Anderson's interval at the asked level, n, unit, min/max, sd (ddof 1)."""
    x = [0.2, 0.9, 0.4, 0.5]
    pd = stats.bounded_mean(x, "seeds", level=0.9)
    lo, hi = _anderson(x, 0.9)
    assert (pd.mean, pd.ci_low, pd.ci_high) == (pytest.approx(0.5), pytest.approx(lo, abs=1e-12),
                                                 pytest.approx(hi, abs=1e-12))
    assert (pd.n, pd.unit, pd.min, pd.max) == (4, "seeds", 0.2, 0.9)
    assert pd.sd == pytest.approx(math.sqrt(((0.3 ** 2) + 0.4 ** 2 + 0.1 ** 2 + 0) / 3))
    assert pd.method == ("90% distribution-free interval for a mean in [0, 1] over 4 seeds "
                         "(Anderson's bound: one-sided Kolmogorov–Smirnov band)")
    two = stats.bounded_mean([0.0, 1.0], "layers")
    assert two.sd == pytest.approx(math.sqrt(0.5)) and two.n == 2


def test_bounded_mean_of_one_value_and_of_none():
    """One value: an interval (valid at every n ≥ 1) and no sd; no finite value: nan and no interval."""
    one = stats.bounded_mean([1.0, np.nan], "seeds")
    assert (one.mean, one.n, one.sd, one.min, one.max) == (1.0, 1, None, 1.0, 1.0)
    assert (one.ci_low, one.ci_high) == (pytest.approx(1 - 0.975), pytest.approx(1.0))  # ε = 0.975 at n = 1
    none = stats.bounded_mean([np.nan], "seeds")
    assert math.isnan(none.mean) and (none.ci_low, none.ci_high, none.n, none.unit, none.method) == (
        None, None, 0, "seeds", "no values")
    assert none.note == "" and none.sd is None


def test_replicated_bounded_mean_over_replicates_one_replicate_and_none():
    """From 2 replicates: bounded_mean over replicate means; one: over its units (said in the note); none: empty."""
    rbm = stats.replicated_bounded_mean
    got = rbm([[0.0, 0.5], [1.0, np.nan], [0.25, 0.25, 1.0]], "seeds", level=0.9)
    means = [0.25, 1.0, 0.5]
    lo, hi = _anderson(means, 0.9)
    assert (got.mean, got.ci_low, got.ci_high) == (pytest.approx(0.5833333333333334), pytest.approx(lo, abs=1e-12),
                                                   pytest.approx(hi, abs=1e-12))
    assert (got.n, got.unit, got.note) == (3, "replicates", "")
    assert got.method == ("90% distribution-free interval for a mean in [0, 1] over 3 replicates (Anderson's bound: "
                          "one-sided Kolmogorov–Smirnov band); each replicate the mean over its seeds")
    two = rbm([[0.2], [0.6, 0.8]], "layers")
    assert (two.n, two.unit, two.mean) == (2, "replicates", pytest.approx(0.45))

    one = rbm([[np.nan], [0.2, 0.9, 0.4]], "layers", level=0.9)
    lo, hi = _anderson([0.2, 0.9, 0.4], 0.9)
    assert (one.mean, one.ci_low, one.ci_high) == (pytest.approx(0.5), pytest.approx(lo, abs=1e-12),
                                                   pytest.approx(hi, abs=1e-12))
    assert (one.n, one.unit) == (3, "layers")
    assert one.method.startswith("90% distribution-free") and "over 3 layers" in one.method
    assert one.note == "one replicate: the interval is over its layers and conditional on its data-corruption draw"

    none = rbm([[], [np.nan]], "seeds", level=0.9)
    assert math.isnan(none.mean) and (none.n, none.unit, none.method, none.ci_low) == (0, "replicates", "no values",
                                                                                       None)


def _sign_test_k(n, level):
    """The largest k with 1 − 2·P(Bin(n, ½) ≤ k − 1) ≥ level, from exact binomial sums (None if no k)."""
    best = None
    for k in range(1, n // 2 + 1):
        if 1 - 2 * sum(math.comb(n, j) for j in range(k)) / 2 ** n >= level:
            best = k
    return best


@pytest.mark.parametrize(("n", "level", "k"), [(5, 0.95, None), (6, 0.95, 1), (9, 0.95, 2), (10, 0.95, 2),
                                               (20, 0.95, 6), (30, 0.95, 10), (10, 0.2, 5), (9, 0.4, 4),
                                               (6, 0.96875, 1), (3, 0.7, 1)])
def test_median_interval_is_the_sign_test_order_statistics(n, level, k):
    """[x_(k), x_(n−k+1)] with k the largest whose coverage 1 − 2·P(Bin(n, ½) ≤ k − 1) reaches the level."""
    assert _sign_test_k(n, level) == k  # the table is the rule (6 at 0.96875: coverage exactly the level)
    x = np.random.default_rng(n).permutation(np.arange(1.0, n + 1))  # x_(i) = i
    got = stats.median_interval(np.append(x, np.nan), level)
    assert got == (None if k is None else (float(k), float(n - k + 1)))


def test_paired_summary_is_paired_difference_in_the_lens_shape():
    """per-target a − b, and mean, deciding interval, n, method and note as paired_difference over targets."""
    a, b = [0.9, 0.7, 0.8, 0.6], [0.5, 0.6, 0.4, 0.6]
    got = stats.paired_summary(a, b, level=0.8)
    assert set(got) == {"per_target", "mean", "ci", "level", "n", "method", "note"}
    assert got["per_target"] == pytest.approx([0.4, 0.1, 0.4, 0.0])
    d = np.array([0.4, 0.1, 0.4, 0.0])
    half = 1.6377443536962102 * d.std(ddof=1) / 2  # t_{0.9, 3}: the 80% Student t-interval
    assert got["mean"] == pytest.approx(0.225) and got["ci"] == [pytest.approx(0.225 - half),
                                                               pytest.approx(0.225 + half)]
    assert (got["level"], got["n"]) == (0.8, 4)
    assert got["method"] == "80% Student t-interval over 4 paired targets" and got["note"] == ""
    one = stats.paired_summary([0.9, np.nan], [0.5, 0.5])
    assert one["n"] == 1 and all(math.isnan(v) for v in one["ci"])  # fewer than 2 pairs: [nan, nan]
    assert one["note"] == ("1 pair(s) without a finite value on both sides dropped; "
                           "1 pair (target) only: no interval; decided on the point estimate")


def test_paired_summary_treats_a_missing_value_as_no_pair():
    """None (a target without a value) is nan after float64 conversion: its pair is dropped, not an error."""
    got = stats.paired_summary([0.9, None, 0.8], [0.5, 0.5, None])
    assert got["n"] == 1 and got["mean"] == pytest.approx(0.4) and math.isnan(got["per_target"][1])


def test_one_replicate_at_exactly_two_pairs_and_one_shared_target():
    """Two independent pairs already give an interval; two shared targets give none (they are not independent),
    one shared target is 'a single pair'; no replicate at another level is the empty estimate at that level."""
    rd = stats.replicated_difference
    pair = rd([[0.1, 0.3]], "seeds", True, level=0.9)
    assert pair.ci_low is not None and pair.unit == "seeds" and pair.n == 2
    shared = rd([[0.1, 0.3]], "targets", False)
    assert shared.ci_low is None and shared.note.startswith("no interval: one replicate whose targets share")
    assert rd([[0.4]], "targets", False).note == "no interval: a single pair (targets)"
    assert rd([], "seeds", True, level=0.9).to_dict() == difference_stats([], unit="replicates", level=0.9).to_dict()
