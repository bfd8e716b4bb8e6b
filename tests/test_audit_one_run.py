"""The one-run audit of a recipe (Steinke, Nasr & Jagielski 2023): the bound against an oracle, its validity under
the null, and on digits: a BN recipe gives a floor above 0, a DP-SGD recipe a floor at or below its ε, and the same
DP-SGD recipe with its noise removed a floor above its ε (an audit that can fail)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.optimize import brentq
from scipy.stats import binom

from bnmem.auditing.one_run import (
    audit_recipe_once,
    epsilon_floor,
    guesses,
    one_run_bound,
    p_value,
    plain_trainer,
)
from bnmem.config import DataConfig, ModelConfig, TrainConfig


def p_value_loop(m: int, r: int, v: int, eps: float, delta: float) -> float:
    """The paper's p-value term by term (no vectorization): tail + 2mδ · max_i P[v − i ≤ Bin < v] / i."""
    q = math.exp(eps) / (1 + math.exp(eps))
    tail = sum(binom.pmf(j, r, q) for j in range(v, r + 1))
    best = 0.0
    for i in range(1, v + 1):
        best = max(best, sum(binom.pmf(j, r, q) for j in range(v - i, v)) / i)
    return min(tail + 2 * m * delta * best, 1.0)


@pytest.mark.parametrize("m, r, v, eps, delta", [(100, 20, 18, 1.0, 1e-5), (1000, 200, 150, 0.5, 1e-4),
                                                 (50, 10, 10, 3.0, 0.0), (500, 100, 0, 2.0, 1e-5),
                                                 (200, 40, 39, 0.1, 1e-3)])
def test_p_value_matches_the_term_by_term_oracle(m, r, v, eps, delta):
    assert p_value(m, r, v, eps, delta) == pytest.approx(p_value_loop(m, r, v, eps, delta), rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("r, v", [(10, 10), (100, 90), (400, 300), (20, 14)])
def test_without_delta_the_floor_solves_the_binomial_tail(r, v):
    """δ = 0: ε* is where P[Bin(r, q(ε)) ≥ v] = β (root found independently by brentq)."""
    beta = 0.05
    want = brentq(lambda e: binom.sf(v - 1, r, math.exp(e) / (1 + math.exp(e))) - beta, 0, 20) \
        if binom.sf(v - 1, r, 0.5) < beta else 0.0
    assert epsilon_floor(1000, r, v, 0.0, beta) == pytest.approx(want, abs=1e-5)
    assert epsilon_floor(1000, r, v, 1e-5, beta) <= epsilon_floor(1000, r, v, 0.0, beta) + 1e-9  # δ only lowers it


def test_guesses_count_right_answers():
    scores = np.array([5.0, 4.0, 3.0, 2.0, 1.0, 0.0])
    inside = np.array([True, False, True, False, False, True])
    assert guesses(scores, inside, 1) == (2, 1)   # top 5.0 IN right; bottom 0.0 guessed OUT, wrong
    assert guesses(scores, inside, 2) == (4, 2)   # top: 5 right, 4 wrong; bottom: 0 wrong, 1 right


def test_the_floor_is_valid_when_the_scores_know_nothing():
    """Scores independent of the coins: the floor is above 0 in at most about β of the trials (β = 0.05; the
    Bonferroni correction makes it rarer still). 400 seeded trials of 200 canaries."""
    rng = np.random.default_rng(0)
    hits = sum(one_run_bound(rng.normal(size=200), rng.random(200) < 0.5)["eps_lb"] > 0 for _ in range(400))
    assert hits / 400 <= 0.05 + 0.02
    strong = rng.random(200) < 0.5
    assert one_run_bound(strong + 0.01 * rng.normal(size=200), strong)["eps_lb"] > 2.0  # a perfect attack


@pytest.fixture(scope="module")
def digits():
    from bnmem.data import load_dataset

    return load_dataset(DataConfig(dataset="digits"))


def test_a_non_private_bn_recipe_has_a_floor_above_zero(digits):
    from bnmem.train import seeded_model

    model = seeded_model(ModelConfig(arch="lenet", norm="batch"), digits, 0)
    res = audit_recipe_once(model, digits, plain_trainer(TrainConfig(epochs=30, batch_size=64), 0), 500)
    assert res["eps_lb"] > 1.0, res["per_k"]  # measured: 4.39 (all 400 guesses right at k = 200)
    assert res["in_canaries_fit"] > 0.9 and res["canaries"] == 500 and 200 < res["canaries_in"] < 300


def dp_run(digits):
    from bnmem.auditing.one_run import dp_trainer
    from bnmem.train import seeded_model
    from bnmem.train.dp import DPConfig

    model = seeded_model(ModelConfig(arch="lenet", norm="none"), digits, 0)
    dp = DPConfig(target_epsilon=1.0, lr=0.5, delta=1e-5)
    return audit_recipe_once(model, digits, dp_trainer(TrainConfig(epochs=30, batch_size=64), dp, 0), 500,
                             delta=1e-5)


@pytest.mark.slow
@pytest.mark.usefixtures("memoized_noise_multiplier")
def test_a_dp_sgd_recipe_stays_at_or_below_its_epsilon(digits):
    pytest.importorskip("opacus")
    res = dp_run(digits)
    eps = res["training"]["dp"]["epsilon"]
    assert eps == pytest.approx(1.0, abs=0.02) and res["training"]["dp"]["delta"] == res["delta"]
    assert res["eps_lb"] <= eps, res["per_k"]  # measured: 0.0


@pytest.mark.slow
@pytest.mark.usefixtures("memoized_noise_multiplier")
def test_the_audit_fails_a_dp_sgd_recipe_whose_noise_is_removed(digits, monkeypatch):
    """The planted bug of tests/test_dp_audit.py: no noise, while the accountant still reports ε ≈ 1."""
    pytest.importorskip("opacus")
    import opacus.optimizers.optimizer as opacus_optimizer

    monkeypatch.setattr(opacus_optimizer, "_generate_noise",
                        lambda std, reference, generator=None, secure_mode=False: torch.zeros_like(reference))
    res = dp_run(digits)
    assert res["training"]["dp"]["epsilon"] == pytest.approx(1.0, abs=0.02)
    assert res["eps_lb"] > res["training"]["dp"]["epsilon"], res["per_k"]  # measured: 2.98


def test_the_text_reads_both_floors_and_says_why_they_differ():
    from bnmem.auditing.one_run import one_run_text

    one = {"eps_lb": 4.39, "beta": 0.05, "delta": 1e-5, "canaries": 500, "canaries_in": 245, "correct": 400,
           "guesses": 400, "k": 200}
    multi = {"eps_lb": 0.0, "where": "online LiRA on the 20 examples with the largest gradient norms"}
    text = one_run_text(one, multi)
    assert "below ε = 4.39 holds" in text and "a floor, not an estimate of ε" in text
    assert "multi-run ε lower bound over the shadow copies is 0 (online LiRA on the 20" in text
    assert "they differ on whether ε > 0" in text and "the multi-run floor is the weaker" in text
    assert "they agree" in one_run_text(one, {**multi, "eps_lb": 1.8}) and "weaker" not in one_run_text(
        one, {**multi, "eps_lb": 1.8})
    zero = one_run_text({**one, "eps_lb": 0.0, "correct": 200}, {**multi, "eps_lb": 1.8})
    assert "does not mean the recipe is private" in zero and "the one-run floor is the weaker" in zero
    assert one_run_text(one, None).endswith("not an estimate of ε.")
