"""Tests of bnmem.attacks (and the ROC figure): fast paths against slow, obviously-correct ones."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
import scipy.special
import scipy.stats
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import roc_auc_score

from bnmem.attacks import (
    ALL,
    AttackInputs,
    RMIAParams,
    attack_metrics,
    cross_entropy,
    evaluate_attacks,
    keep_matrix,
    paired_keep_matrix,
    lira_offline,
    lira_online,
    lira_statistic,
    rmia_log_ratio,
    rmia_scores,
    roc,
    split_references,
    target_scores,
    true_class_prob,
)
from bnmem.errors import BnmemError


def synthetic(
    n_models: int,
    n_examples: int,
    n_views: int = 2,
    n_classes: int = 10,
    seed: int = 0,
    boost: float = 1.0,
    noise: float = 1.0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Logits whose true-class logit is (difficulty + boost·susceptibility·IN + per-model noise).

    Examples differ in difficulty (mean margin), in how much training on them
    raises their margin (susceptibility ~ Exp), and in how much their margin
    varies across models (noise scale ~ lognormal). ``boost=0`` is no signal:
    IN and OUT logits come from the same distribution.
    """
    rng = np.random.default_rng(seed)
    keep = keep_matrix(n_models, n_examples, seed)
    labels = rng.integers(0, n_classes, n_examples)
    base = rng.normal(0.0, 1.0, (n_examples, n_classes))
    margin = rng.normal(2.0, 2.0, n_examples)
    susceptibility = boost * rng.exponential(1.0, n_examples)
    spread = noise * rng.lognormal(0.0, 0.5, n_examples)
    logits = base[None, :, None, :] + rng.normal(0.0, 0.3, (n_models, n_examples, n_views, n_classes))
    true = margin + susceptibility * keep + spread * rng.normal(0.0, 1.0, (n_models, n_examples))
    logits[np.arange(n_models)[:, None], np.arange(n_examples)[None, :], :, labels[None, :]] += true[..., None]
    return logits.astype(np.float32), keep, labels


# ---------------------------------------------------------------- keep matrix


@pytest.mark.parametrize("n_models", [2, 4, 16, 64])
def test_keep_matrix_balanced_and_seeded(n_models: int) -> None:
    keep = keep_matrix(n_models, 500, seed=3)
    assert keep.shape == (n_models, 500) and keep.dtype == bool
    assert (keep.sum(axis=0) == n_models // 2).all()
    assert np.array_equal(keep, keep_matrix(n_models, 500, seed=3))
    assert not np.array_equal(keep, keep_matrix(n_models, 500, seed=4))
    # Each model trains on about half of the examples.
    assert np.all(np.abs(keep.mean(axis=1) - 0.5) < 0.1)


@pytest.mark.parametrize("n_models", [0, 1, 3, 7])
def test_keep_matrix_rejects_odd_models(n_models: int) -> None:
    with pytest.raises(BnmemError):
        keep_matrix(n_models, 10, seed=0)
    with pytest.raises(BnmemError):
        paired_keep_matrix(n_models, 10, seed=0)


@pytest.mark.parametrize("n_examples", [1, 2, 501])
def test_paired_keep_matrix_is_balanced_and_the_first_rows_of_any_larger_one(n_examples: int) -> None:
    """The audit's copies: every example IN for exactly half the models, and the matrix of M models the first M
    rows of the matrix of 2M (so a rerun with more copies keeps the copies it has)."""
    big = paired_keep_matrix(16, n_examples, seed=3)
    assert (big.sum(axis=0) == 8).all()
    assert (big[0::2] ^ big[1::2]).all()  # each pair: complementary halves
    assert (big[0::2].sum(axis=1) == n_examples // 2).all()
    for m in (2, 4, 8):
        assert np.array_equal(paired_keep_matrix(m, n_examples, seed=3), big[:m])
    assert n_examples < 3 or not np.array_equal(big, paired_keep_matrix(16, n_examples, seed=4))
    # pairs are drawn independently: two pairs' halves differ
    assert n_examples < 3 or not np.array_equal(big[0], big[2])


def test_split_references_takes_first_k_in_model_order() -> None:
    keep = np.array(
        [[1, 0, 1], [1, 1, 0], [0, 1, 1], [1, 0, 0], [0, 0, 1]],
        dtype=bool,
    )
    idx_in, idx_out = split_references(keep)
    # IN counts per column are 3, 2, 3 -> k_in = 2; OUT counts 2, 3, 2 -> k_out = 2.
    assert idx_in.tolist() == [[0, 1, 0], [1, 2, 2]]
    assert idx_out.tolist() == [[2, 0, 1], [4, 3, 3]]


# ---------------------------------------------------------------- statistics


def test_phi_exact_for_huge_logit_gaps() -> None:
    logits = np.array([1000.0, 0.0, 0.0])[None, None, None, :].repeat(3, axis=1)
    labels = np.array([0, 1, 2])
    phi = lira_statistic(logits, labels)[0, :, 0]
    # y = 0: log p_0 - log(p_1 + p_2) = 1000 - log 2, exactly.
    assert phi[0] == pytest.approx(1000.0 - math.log(2.0), rel=1e-15)
    # y = 1: 0 - log(e^1000 + 1) = -1000 - log1p(e^-1000) = -1000 in float64.
    assert phi[1] == pytest.approx(-1000.0, rel=1e-15)
    assert phi[2] == phi[1]
    assert np.isfinite(phi).all()
    loss = cross_entropy(logits, labels)[0, :, 0]
    assert loss[0] == pytest.approx(2.0 * math.exp(-1000.0), abs=1e-300)  # tiny but correct
    assert loss[1] == pytest.approx(1000.0, rel=1e-15)


def test_phi_matches_high_precision_on_extreme_logits() -> None:
    rng = np.random.default_rng(1)
    logits = (rng.normal(0, 1, (2, 20, 2, 5)) * rng.choice([1.0, 50.0, 800.0], (2, 20, 2, 1))).astype(np.float32)
    labels = rng.integers(0, 5, 20)
    phi = lira_statistic(logits, labels)
    loss = cross_entropy(logits, labels)
    with mpmath.workdps(60):
        _compare_with_mpmath(logits, labels, phi, loss)


def _compare_with_mpmath(logits: np.ndarray, labels: np.ndarray, phi: np.ndarray, loss: np.ndarray) -> None:
    for m in range(2):
        for j in range(20):
            for v in range(2):
                z = [mpmath.mpf(float(x)) for x in logits[m, j, v]]
                y = labels[j]
                others = mpmath.log(mpmath.fsum(mpmath.exp(z[c]) for c in range(5) if c != y))
                assert phi[m, j, v] == pytest.approx(float(z[y] - others), rel=1e-13, abs=1e-300)
                # -log p_y = log(1 + sum_{c != y} e^{z_c - z_y}); written with log1p so the
                # ~1e-150 loss of a dominant class is not cancelled away in log-sum-exp − z_y.
                rest = mpmath.fsum(mpmath.exp(z[c] - z[y]) for c in range(5) if c != y)
                assert loss[m, j, v] == pytest.approx(float(mpmath.log1p(rest)), rel=1e-13, abs=1e-300)


def test_phi_agrees_with_probability_formula_on_moderate_logits() -> None:
    logits, _, labels = synthetic(4, 50, n_views=2)
    phi = lira_statistic(logits, labels)
    p = scipy.special.softmax(logits.astype(np.float64), axis=-1)
    p_true = np.take_along_axis(p, labels[None, :, None, None].repeat(4, 0).repeat(2, 2), axis=-1)[..., 0]
    assert np.allclose(phi, np.log(p_true) - np.log(p.sum(-1) - p_true), rtol=1e-9, atol=1e-9)
    assert np.allclose(true_class_prob(logits, labels), p_true, rtol=1e-12)


def test_statistics_reject_bad_inputs() -> None:
    logits, _, labels = synthetic(2, 5)
    with pytest.raises(BnmemError):
        lira_statistic(logits[0], labels)
    with pytest.raises(BnmemError):
        lira_statistic(logits, labels[:4])
    with pytest.raises(BnmemError):
        lira_statistic(logits, labels + 10)
    bad = logits.copy()
    bad[1, 0, 0, 0] = np.nan
    with pytest.raises(BnmemError, match=r"model\(s\) \[1\]"):
        lira_statistic(bad, labels)


# ---------------------------------------------------------------- LiRA vs a slow reference


def slow_lira(phi: np.ndarray, keep: np.ndarray, target: int, kind: str) -> np.ndarray:
    """LiRA scores for one target, one example at a time, following the reference code's conventions.

    The other models are the shadows, in index order. Per example, collect the
    φ of the shadows that trained on it (IN) and of those that did not (OUT);
    cut every example's list to the shortest list over all examples (keeping
    the first ones); Gaussian centre = median, spread = np.std (ddof 0) + 1e-30,
    per view; average the per-view log terms. Returns higher = member.
    """
    shadows = [m for m in range(phi.shape[0]) if m != target]
    n_examples = phi.shape[1]
    ins = [[phi[m, j] for m in shadows if keep[m, j]] for j in range(n_examples)]
    outs = [[phi[m, j] for m in shadows if not keep[m, j]] for j in range(n_examples)]
    k_in = min(len(x) for x in ins)
    k_out = min(len(x) for x in outs)
    ins = [np.array(x[:k_in]) for x in ins]  # each [k_in, n_views]
    outs = [np.array(x[:k_out]) for x in outs]
    fixed = kind.endswith("fixed")
    std_in_global = np.std(np.stack(ins))
    std_out_global = np.std(np.stack(outs))
    scores = np.empty(n_examples)
    for j in range(n_examples):
        x = phi[target, j]
        mu_in, mu_out = np.median(ins[j], axis=0), np.median(outs[j], axis=0)
        sd_in = std_in_global if fixed else np.std(ins[j], axis=0)
        sd_out = std_out_global if fixed else np.std(outs[j], axis=0)
        sd_in, sd_out = sd_in + 1e-30, sd_out + 1e-30
        if kind.startswith("online"):
            per_view = scipy.stats.norm.logpdf(x, mu_in, sd_in) - scipy.stats.norm.logpdf(x, mu_out, sd_out)
        elif kind.startswith("offline_two_sided"):
            per_view = -scipy.stats.norm.logpdf(x, mu_out, sd_out)
        else:  # one-sided: -log Pr[Z_out > φ]
            per_view = -scipy.stats.norm.logsf(x, mu_out, sd_out)
        scores[j] = np.mean(per_view)
    return scores


@pytest.mark.parametrize("kind", ["online", "online_fixed", "offline", "offline_fixed", "offline_two_sided"])
def test_lira_matches_slow_reference(kind: str) -> None:
    logits, keep, labels = synthetic(10, 120, n_views=3, seed=5)
    inputs = AttackInputs.from_logits(logits, keep, labels)
    cols = np.arange(120)
    for target in range(10):
        refs = np.array([m for m in range(10) if m != target])
        idx_in, idx_out = split_references(keep[refs])
        phi_in = inputs.phi[refs][idx_in, cols]
        phi_out = inputs.phi[refs][idx_out, cols]
        t = inputs.phi[target]
        fixed = kind.endswith("fixed")
        if kind.startswith("online"):
            fast = lira_online(t, phi_in, phi_out, fix_variance=fixed)
        else:
            fast = lira_offline(t, phi_out, fix_variance=fixed, one_sided=kind != "offline_two_sided")
        slow = slow_lira(inputs.phi, keep, target, kind)
        assert np.allclose(fast, slow, rtol=1e-12, atol=1e-12)
        assert abs(roc_auc_score(keep[target], fast) - roc_auc_score(keep[target], slow)) <= 1e-9


def test_evaluate_matches_slow_reference_auc() -> None:
    logits, keep, labels = synthetic(8, 150, n_views=2, seed=6)
    phi = lira_statistic(logits, labels)
    result = evaluate_attacks(logits, keep, labels, attacks=["online", "offline", "online_fixed_variance"])
    for attack, kind in [("online", "online"), ("offline", "offline"), ("online_fixed_variance", "online_fixed")]:
        expected = [roc_auc_score(keep[t], slow_lira(phi, keep, t, kind)) for t in range(8)]
        got = result["metrics"][attack]["all"]["auc_per_target"]
        assert np.allclose(got, expected, rtol=0, atol=1e-9)


# ---------------------------------------------------------------- attack sanity


def test_no_signal_gives_chance_auc() -> None:
    logits, keep, labels = synthetic(8, 1000, boost=0.0, seed=7)
    result = evaluate_attacks(logits, keep, labels, attacks=list(ALL) + ["rmia_offline"])
    for attack, by_subset in result["metrics"].items():
        assert abs(by_subset["all"]["auc"] - 0.5) < 0.03, attack
        assert by_subset["all"]["balanced_acc"] < 0.56, attack


def test_planted_signal_gives_high_auc() -> None:
    logits, keep, labels = synthetic(16, 600, boost=8.0, noise=0.3, seed=8)
    result = evaluate_attacks(logits, keep, labels)
    m = result["metrics"]
    for attack in ("online", "online_fixed_variance", "offline", "offline_fixed_variance", "rmia"):
        assert m[attack]["all"]["auc"] > 0.95, attack
    # Reference models calibrate away per-example difficulty, so they beat the
    # reference-free attacks by a wide margin here.
    assert m["online"]["all"]["auc"] > m["global_threshold"]["all"]["auc"] + 0.05
    assert m["online"]["all"]["tpr_at_1pct_fpr"] > 0.5


def test_rmia_beats_online_lira_with_four_models_and_weak_signal() -> None:
    """With four models, leave-one-out leaves one IN and one OUT reference per example.

    Online LiRA then fits each Gaussian to a single value (zero spread; the
    score becomes "closer to the IN or the OUT reference"), which is mostly
    noise when the membership effect is small against the model-to-model
    spread. RMIA compares the target against the average of the two references
    and is far less noisy: the small-budget regime where the RMIA paper reports
    its gains. (With 32 models the same population favours online LiRA.)
    """
    aucs = {"online": [], "online_fixed_variance": [], "rmia": []}
    for seed in range(3):
        logits, keep, labels = synthetic(4, 1000, boost=1.0, noise=2.0, seed=seed)
        result = evaluate_attacks(logits, keep, labels, attacks=list(aucs))
        for attack in aucs:
            aucs[attack].append(result["metrics"][attack]["all"]["auc"])
    mean = {k: float(np.mean(v)) for k, v in aucs.items()}
    assert mean["rmia"] > mean["online"] + 0.02
    assert mean["rmia"] > mean["online_fixed_variance"] + 0.02


# ---------------------------------------------------------------- RMIA by hand


def test_rmia_scores_by_hand() -> None:
    # Target p(x|θ) = [0.9, 0.5, 0.2]; reference A = [0.8, 0.3, 0.5] (IN for x0, x2),
    # reference B = [0.4, 0.6, 0.3] (IN for x1). The target trained on x0 only,
    # so the population is {x1, x2}.
    p_target = np.log([0.9, 0.5, 0.2])
    p_a, p_b = np.log([0.8, 0.3, 0.5]), np.log([0.4, 0.6, 0.3])
    p_in = np.array([p_a[0], p_b[1], p_a[2]])[None]
    p_out = np.array([p_b[0], p_a[1], p_b[2]])[None]
    population = np.array([False, True, True])

    # Offline, a = 0.3: p(x) = (1.3 p_out + 0.7) / 2 = [0.61, 0.545, 0.545];
    # r = p(x|θ)/p(x) = [1.4754, 0.9174, 0.3670].
    log_r = rmia_log_ratio(p_target, p_out, None, RMIAParams(a=0.3, online=False))
    assert np.allclose(np.exp(log_r), [0.9 / 0.61, 0.5 / 0.545, 0.2 / 0.545], rtol=1e-12)
    # γ = 1: x0 beats both; x1 beats x2 plus half a count for itself (LR = 1, on
    # the threshold); x2 only the half count for itself.
    assert rmia_scores(log_r, population, 1.0).tolist() == [1.0, 0.75, 0.25]
    # γ = 2: x0/x1 = 1.61 < 2, x0/x2 = 4.02; x1/x2 = 2.5; x2 reaches 2 against nobody.
    assert rmia_scores(log_r, population, 2.0).tolist() == [0.5, 0.5, 0.0]

    # Online: p(x) = (p_in + p_out) / 2 = [0.6, 0.45, 0.4]; r = [1.5, 1.1111, 0.5].
    log_r = rmia_log_ratio(p_target, p_out, p_in, RMIAParams(online=True))
    assert np.allclose(np.exp(log_r), [1.5, 0.5 / 0.45, 0.5], rtol=1e-12)
    # γ = 1.5: x0/x1 = 1.35 no, x0/x2 = 3 yes; x1/x2 = 2.22 yes; x2 none.
    assert rmia_scores(log_r, population, 1.5).tolist() == [0.5, 0.5, 0.0]
    # γ = 0.5: x0/x1, x0/x2, x1/x2 all >= 0.5, self-pairs (1 >= 0.5) count; x2/x1 = 0.45 < 0.5.
    assert rmia_scores(log_r, population, 0.5).tolist() == [1.0, 1.0, 0.5]


def test_rmia_through_logits_matches_hand_values() -> None:
    # Two classes with logits [log p, log(1 - p)] give p(true) = p exactly.
    p = np.array([[0.9, 0.5, 0.2], [0.8, 0.3, 0.5], [0.4, 0.6, 0.3]])  # target, A, B
    logits = np.stack([np.log(p), np.log1p(-p)], axis=-1)[:, :, None, :]
    keep = np.array([[1, 0, 0], [1, 0, 1], [0, 1, 0]], dtype=bool)
    inputs = AttackInputs.from_logits(logits, keep, np.zeros(3, dtype=int))
    scores = target_scores(inputs, 0, ["rmia", "rmia_offline"], RMIAParams(gamma=1.5, a=0.3, online=True))
    assert scores["rmia"].tolist() == [0.5, 0.5, 0.0]
    # Offline r = [1.4754, 0.9174, 0.3670]; γ = 1.5: x0/x1 = 1.61 yes, x0/x2 = 4.02 yes, x1/x2 = 2.5 yes.
    assert scores["rmia_offline"].tolist() == [1.0, 0.5, 0.0]


def test_rmia_scores_match_pairwise_loops() -> None:
    rng = np.random.default_rng(9)
    log_r = rng.normal(0, 1, 300)
    log_r[:20] = log_r[20:40]  # exact ties
    population = rng.random(300) < 0.5
    for gamma in (0.7, 1.0, 1.3):
        fast = rmia_scores(log_r, population, gamma)
        z = np.flatnonzero(population)
        self_weight = 0.5 if gamma == 1.0 else float(gamma < 1.0)
        slow = [
            (sum(log_r[x] - log_r[j] >= np.log(gamma) for j in z if j != x) + self_weight * population[x]) / len(z)
            for x in range(300)
        ]
        assert np.array_equal(fast, slow)


def test_rmia_with_gamma_one_ranks_like_the_ratio() -> None:
    """At γ = 1 with the OUT set as population, RMIA's ROC is that of p(x|θ)/p(x) itself."""
    logits, keep, labels = synthetic(6, 400, seed=13)
    inputs = AttackInputs.from_logits(logits, keep, labels)
    cols = np.arange(400)
    for target in range(6):
        refs = np.array([m for m in range(6) if m != target])
        idx_in, idx_out = split_references(keep[refs])
        for online in (True, False):
            params = RMIAParams(a=0.3, online=online)
            log_r = rmia_log_ratio(
                inputs.log_p[target], inputs.log_p[refs][idx_out, cols], inputs.log_p[refs][idx_in, cols], params
            )
            name = "rmia" if online else "rmia_offline"
            score = target_scores(inputs, target, [name], params)[name]
            assert roc_auc_score(keep[target], score) == pytest.approx(roc_auc_score(keep[target], log_r), abs=1e-12)
            assert attack_metrics(score, keep[target]) == pytest.approx(attack_metrics(log_r, keep[target]))


def test_rmia_offline_a_one_is_plain_out_average() -> None:
    log_out = np.log([[0.2, 0.9], [0.4, 0.7]])
    log_r = rmia_log_ratio(np.log([0.5, 0.5]), log_out, None, RMIAParams(a=1.0, online=False))
    assert np.allclose(np.exp(log_r), [0.5 / 0.3, 0.5 / 0.8])
    with pytest.raises(BnmemError):
        RMIAParams(a=1.5)
    with pytest.raises(BnmemError):
        RMIAParams(gamma=0.0)


# ---------------------------------------------------------------- metrics


def test_metrics_match_sklearn_and_brute_force() -> None:
    rng = np.random.default_rng(10)
    members = rng.random(700) < 0.4
    scores = np.round(rng.normal(0, 1, 700) + 0.8 * members, 1)  # many ties
    m = attack_metrics(scores, members)
    assert m["auc"] == pytest.approx(roc_auc_score(members, scores), abs=1e-12)
    thresholds = np.concatenate([[np.inf], np.unique(scores)])
    tpr = np.array([(scores[members] >= t).mean() for t in thresholds])
    fpr = np.array([(scores[~members] >= t).mean() for t in thresholds])
    assert m["balanced_acc"] == pytest.approx(np.max((tpr + 1 - fpr) / 2), abs=1e-12)
    for key, level in (("tpr_at_0.1pct_fpr", 1e-3), ("tpr_at_1pct_fpr", 1e-2)):
        assert m[key] == pytest.approx(tpr[fpr <= level].max(), abs=1e-12)


def test_metrics_edge_cases() -> None:
    m = attack_metrics(np.array([0.1, 0.2]), np.array([True, True]))
    assert all(math.isnan(v) for v in m.values())
    perfect = attack_metrics(np.array([0.0, 1.0, 2.0, 3.0]), np.array([False, False, True, True]))
    assert perfect == {"auc": 1.0, "balanced_acc": 1.0, "tpr_at_0.1pct_fpr": 1.0, "tpr_at_1pct_fpr": 1.0}
    fpr, tpr = roc(np.array([np.inf, -np.inf, 0.0]), np.array([True, False, False]))
    assert fpr[0] == 0.0 and tpr[-1] == 1.0
    with pytest.raises(BnmemError):
        roc(np.array([np.nan, 1.0]), np.array([True, False]))


# ---------------------------------------------------------------- evaluate_attacks


def test_evaluate_attacks_structure() -> None:
    logits, keep, labels = synthetic(6, 200, seed=11)
    outliers = np.arange(200) < 30
    result = evaluate_attacks(
        logits, keep, labels, subsets={"outliers": outliers, "inliers": ~outliers}, rmia_params={"gamma": 1.0}
    )
    assert set(result["metrics"]) == set(ALL)
    assert result["targets"] == list(range(6))
    assert result["subset_sizes"] == {"all": 200, "outliers": 30, "inliers": 170}
    assert result["members"].shape == (6, 200)
    for attack in ALL:
        assert result["scores"][attack].shape == (6, 200)
        for subset in ("all", "outliers", "inliers"):
            s = result["metrics"][attack][subset]
            assert len(s["auc_per_target"]) == 6
            assert s["auc"] == pytest.approx(np.mean(s["auc_per_target"]))
            assert s["auc_std"] == pytest.approx(np.std(s["auc_per_target"], ddof=1))
            for key in ("balanced_acc", "tpr_at_0.1pct_fpr", "tpr_at_1pct_fpr"):
                assert f"{key}_std" in s and len(s[f"{key}_per_target"]) == 6
            curves = result["curves"][attack][subset]
            assert len(curves["per_target"]) == 6
            fpr, tpr = curves["pooled"]
            assert fpr[0] == 0 and fpr[-1] == 1 and tpr[-1] == 1
        # The per-target AUC is the AUC of that target's scores.
        t = 3
        assert result["metrics"][attack]["all"]["auc_per_target"][t] == pytest.approx(
            roc_auc_score(keep[t], result["scores"][attack][t])
        )
    sub = evaluate_attacks(logits, keep, labels, attacks=["online"], targets=[2, 5])
    assert sub["metrics"]["online"]["all"]["auc_per_target"] == [
        result["metrics"]["online"]["all"]["auc_per_target"][i] for i in (2, 5)
    ]


def test_evaluate_attacks_rejects_bad_inputs() -> None:
    logits, keep, labels = synthetic(4, 50)
    with pytest.raises(BnmemError, match="unknown attack"):
        evaluate_attacks(logits, keep, labels, attacks=["lira"])
    with pytest.raises(BnmemError, match="subset"):
        evaluate_attacks(logits, keep, labels, subsets={"outliers": np.ones(49, dtype=bool)})
    with pytest.raises(BnmemError, match="keep"):
        evaluate_attacks(logits, keep[:3], labels)
    with pytest.raises(BnmemError, match="unknown RMIA"):
        evaluate_attacks(logits, keep, labels, rmia_params={"beta": 1})
    two = keep_matrix(2, 50, seed=0)
    with pytest.raises(BnmemError, match="at least 4 models"):
        evaluate_attacks(logits[:2], two, labels, attacks=["online"])
    # Reference-free attacks work with any number of models: the loss attack's per-target AUC is
    # the AUC of minus the view-averaged cross-entropy (log-softmax in float64 here) against membership.
    res = evaluate_attacks(logits[:2], two, labels, attacks=["global_threshold", "loss"])
    assert set(res["metrics"]) == {"global_threshold", "loss"}
    z = logits[:2].astype(np.float64)
    ce = scipy.special.logsumexp(z, axis=-1) - np.take_along_axis(z, labels[None, :, None, None], -1)[..., 0]
    for t in range(2):
        want = roc_auc_score(two[t], -ce[t].mean(axis=1))
        assert res["metrics"]["loss"]["all"]["auc_per_target"][t] == pytest.approx(want, abs=1e-9)


# ---------------------------------------------------------------- figure


def test_plot_roc_writes_atomically(tmp_path) -> None:
    from bnmem.figures.roc import plot_roc, plot_roc_panels

    logits, keep, labels = synthetic(6, 200, seed=12)
    result = evaluate_attacks(logits, keep, labels, attacks=["online", "loss"])
    curves = {f"{a} (AUC {result['metrics'][a]['all']['auc']:.3f})": result["curves"][a]["all"]["pooled"]
              for a in ("online", "loss")}
    path = tmp_path / "figs" / "roc.png"
    plot_roc(curves, path, title="synthetic")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    plot_roc_panels({"online": curves, "empty": {}}, tmp_path / "panels.pdf", title="two panels")
    assert (tmp_path / "panels.pdf").read_bytes()[:4] == b"%PDF"
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == ["panels.pdf", "roc.png"]
    with pytest.raises(BnmemError):
        plot_roc({"bad": ([0.0, 1.0], [0.0])}, tmp_path / "bad.png")


# ---------------------------------------------------------------- RMIA with a separate population


def test_rmia_with_population_by_hand() -> None:
    """Three candidates, two population points, three models (target 0; A = 1, B = 2), one view.

    Re-derived by hand: p(x) online = ½(p_IN + p_OUT); every model is OUT for a
    population point, so p(z) = mean over the target's references A and B."""
    p = np.array([  # rows: target, A, B; columns: x0, x1, x2, z0, z1
        [0.9, 0.5, 0.2, 0.6, 0.3],
        [0.8, 0.3, 0.5, 0.4, 0.5],
        [0.4, 0.6, 0.3, 0.8, 0.1],
    ])
    keep = np.array([[1, 0, 0], [1, 0, 1], [0, 1, 0]], dtype=bool)
    logits = np.stack([np.log(p), np.log1p(-p)], axis=-1)[:, :, None, :]
    labels = np.zeros(5, dtype=int)
    res = evaluate_attacks(logits[:, :3], keep, labels[:3], attacks=["rmia", "rmia_offline"], targets=[0],
                           rmia_params={"a": 0.3}, population_logits=logits[:, 3:], population_labels=labels[3:])
    # Candidates (online): r = [0.9/0.6, 0.5/0.45, 0.2/0.4] = [1.5, 1.111, 0.5].
    # Population: p(z) = [0.6, 0.3] -> r_z = [1.0, 1.0].
    # γ = 1: fraction of z with r_x / r_z >= 1 -> [1, 1, 0].
    assert res["scores"]["rmia"][0].tolist() == [1.0, 1.0, 0.0]
    # Offline a = 0.3: p(x) = (1.3 p_OUT + 0.7)/2 with p_OUT = [B, A, B] = [0.4, 0.3, 0.3] -> [0.61, 0.545, 0.545];
    # r_x = [1.475, 0.917, 0.367]; p(z) = (1.3 [0.6, 0.3] + 0.7)/2 = [0.74, 0.545]; r_z = [0.811, 0.550].
    # r_x >= r_z: x0 both, x1 both, x2 none.
    assert res["scores"]["rmia_offline"][0].tolist() == [1.0, 1.0, 0.0]
    res = evaluate_attacks(logits[:, :3], keep, labels[:3], attacks=["rmia_offline"], targets=[0],
                           rmia_params={"a": 0.3, "gamma": 1.2}, population_logits=logits[:, 3:],
                           population_labels=labels[3:])
    # γ = 1.2: x0: 1.475/0.811 = 1.82, 1.475/0.550 = 2.68 -> 1; x1: 0.917/0.811 = 1.13 no, /0.550 = 1.67 -> ½.
    assert res["scores"]["rmia_offline"][0].tolist() == [1.0, 0.5, 0.0]
    assert res["settings"]["rmia_population"] == "separate population"


def test_rmia_population_must_not_hold_a_candidate() -> None:
    from bnmem.attacks import rmia_scores_against

    with pytest.raises(AssertionError, match="scored examples"):
        rmia_scores_against(np.zeros(3), np.zeros(2), 1.0, candidate_ids=np.arange(3), population_ids=[7, 2])
    assert rmia_scores_against(np.array([0.0, 1.0]), np.array([0.5]), 1.0, np.arange(2), np.array([2])).tolist() == [0, 1]


def test_offline_a_selected_on_a_stand_in_by_brute_force() -> None:
    """For target t the stand-in is model t+1; its references exclude t; a maximizes the stand-in's AUC.

    Recomputed here with plain loops over examples and models, independent of the vectorized code."""
    from bnmem.attacks import A_GRID, select_offline_a

    logits, keep, labels = synthetic(6, 80, n_views=2, seed=21, boost=2.0)
    pop_logits, _, pop_labels = synthetic(6, 30, n_views=2, seed=22)
    phi = lira_statistic(logits, labels)
    pop_phi = lira_statistic(pop_logits, pop_labels)
    p_x = (1 / (1 + np.exp(-phi))).mean(axis=2)  # view-averaged p_y [M, N]
    p_z = (1 / (1 + np.exp(-pop_phi))).mean(axis=2)
    target, m = 2, 6
    s = 3
    refs = [r for r in range(m) if r not in (target, s)]
    outs = [[r for r in refs if not keep[r, j]] for j in range(80)]
    k = min(len(o) for o in outs)
    best, best_auc = None, -1.0
    for a in A_GRID:
        r_x = np.array([p_x[s, j] / (0.5 * ((1 + a) * np.mean([p_x[r, j] for r in outs[j][:k]]) + 1 - a))
                        for j in range(80)])
        r_z = np.array([p_z[s, i] / (0.5 * ((1 + a) * np.mean([p_z[r, i] for r in refs]) + 1 - a))
                        for i in range(30)])
        score = np.array([np.mean(r_x[j] / r_z >= 1.0) for j in range(80)])
        auc = roc_auc_score(keep[s], score)
        if auc > best_auc + 1e-12:
            best, best_auc = a, auc
    chosen, aucs = select_offline_a(np.log(p_x), keep, target, 1.0, np.log(p_z))
    assert chosen == best
    assert max(aucs) == pytest.approx(best_auc, abs=1e-9)


def test_multi_view_offline_rmia_averages_probabilities_over_views() -> None:
    """Offline RMIA with three views against a slow formula: p(x|θ) = mean over views of p_y
    (a sum over views would not cancel in the offline p(x), which has the constant 1 − a)."""
    logits, keep, labels = synthetic(6, 60, n_views=3, seed=23)
    pop_logits, _, pop_labels = synthetic(6, 20, n_views=3, seed=24)
    res = evaluate_attacks(logits, keep, labels, attacks=["rmia_offline"], rmia_params={"a": 0.4},
                           population_logits=pop_logits, population_labels=pop_labels)
    soft = scipy.special.softmax(logits.astype(np.float64), axis=-1)
    p_x = np.take_along_axis(soft, labels[None, :, None, None].repeat(6, 0).repeat(3, 2), -1)[..., 0].mean(axis=2)
    psoft = scipy.special.softmax(pop_logits.astype(np.float64), axis=-1)
    p_z = np.take_along_axis(psoft, pop_labels[None, :, None, None].repeat(6, 0).repeat(3, 2), -1)[..., 0].mean(axis=2)
    for t in range(6):
        refs = [r for r in range(6) if r != t]
        outs = [[r for r in refs if not keep[r, j]] for j in range(60)]
        k = min(len(o) for o in outs)
        r_x = [p_x[t, j] / (0.5 * (1.4 * np.mean(p_x[outs[j][:k], j]) + 0.6)) for j in range(60)]
        r_z = [p_z[t, i] / (0.5 * (1.4 * np.mean(p_z[refs, i]) + 0.6)) for i in range(20)]
        slow = [np.mean([rx / rz >= 1.0 for rz in r_z]) for rx in r_x]
        np.testing.assert_allclose(res["scores"]["rmia_offline"][t], slow, rtol=0, atol=1e-12)


# ---------------------------------------------------------------- pinned metrics and properties


def test_tpr_at_fpr_counts_a_point_exactly_on_the_level() -> None:
    """A ROC with corners exactly at FPR 0.1% and 1% (1,000 non-members): the TPR there must count
    (FPR <= level). Non-members: one at 100, nine at 50..58, 990 at or below 0. Members: 30 at 200,
    20 at 95 (between the first and second non-member), 15 at 40 (just below the tenth), 35 at -20.
    Corners: (0, 0.30), (0.001, 0.30), (0.001, 0.50), (0.01, 0.50), (0.01, 0.65), ...
    With FPR < level the answers would be 0.30 and 0.50."""
    members = np.r_[np.ones(100, bool), np.zeros(1000, bool)]
    scores = np.r_[np.full(30, 200.0), np.full(20, 95.0), np.full(15, 40.0), np.full(35, -20.0),
                   100.0, np.arange(50.0, 59.0), np.linspace(-10, 0, 990)]
    fpr, tpr = roc(scores, members)
    assert (1e-3, 0.5) in set(zip(fpr.tolist(), tpr.tolist()))
    assert (1e-2, 0.65) in set(zip(fpr.tolist(), tpr.tolist()))
    m = attack_metrics(scores, members)
    assert m["tpr_at_0.1pct_fpr"] == 0.5
    assert m["tpr_at_1pct_fpr"] == 0.65


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.integers(4, 60))
def test_auc_of_negated_scores_is_one_minus_auc(seed: int, n: int) -> None:
    rng = np.random.default_rng(seed)
    members = rng.random(n) < 0.5
    members[:2] = [True, False]
    scores = np.round(rng.normal(0, 1, n), int(rng.integers(0, 3)))  # ties too
    assert attack_metrics(-scores, members)["auc"] == pytest.approx(1 - attack_metrics(scores, members)["auc"], abs=1e-12)


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 10_000), st.floats(-50, 50))
def test_every_attack_is_invariant_to_shifting_an_examples_logits(seed: int, scale: float) -> None:
    """Softmax (hence φ, p_y, the loss) does not change when a constant is added to all logits of one
    (model, example, view); so no attack score may change beyond rounding."""
    logits, keep, labels = synthetic(6, 40, n_views=2, seed=seed % 50)
    shift = np.random.default_rng(seed).normal(0, 1, logits.shape[:3] + (1,)) * scale
    base = evaluate_attacks(logits, keep, labels, attacks=list(ALL) + ["rmia_offline"], rmia_params={"a": 0.3})
    moved = evaluate_attacks(logits.astype(np.float64) + shift, keep, labels,
                             attacks=list(ALL) + ["rmia_offline"], rmia_params={"a": 0.3})
    for attack in base["scores"]:
        np.testing.assert_allclose(moved["scores"][attack], base["scores"][attack], rtol=1e-6, atol=1e-6,
                                   err_msg=attack)
