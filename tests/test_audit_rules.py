"""The audit's deciding rules on cases where the right and a wrong rule disagree (issue 27, item 8).

* δ in the ε bound's TPR/FPR term: a heavy right tail of member scores makes that term decide, so a bound
  that dropped δ there would be larger; an explicit oracle computes the bound the slow way.
* the paired regularizer comparison: the same bootstrap draws in both arms (an unpaired interval would be
  several times wider on arms that differ by a little noise), and the accuracy cost's t-interval.
* the copies' length: the model's optimizer steps, counted as a DataLoader and as bnmem's trainer count them.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from bnmem.attacks.epsilon import epsilon_lower_bound, rank_grid
from bnmem.auditing.calibration import step_matched
from bnmem.auditing.compare import paired_auc, paired_cost
from bnmem.auditing.leakage import PooledScores, group_metrics
from bnmem.config import TrainConfig


def epsilon_oracle(scores: np.ndarray, members: np.ndarray, delta: float, level: float = 0.95,
                   delta_in_tpr_term: bool = True) -> float:
    """The bound the slow way: every grid threshold, counts by comparison, Clopper–Pearson from scipy's beta."""
    s_in, s_out = np.sort(scores[members]), np.sort(scores[~members])
    thresholds = [np.inf if k == 0 else s_out[::-1][k - 1] for k in rank_grid(s_out.size)]
    thresholds += [-np.inf if j == 0 else s_in[j - 1] for j in rank_grid(s_in.size)]
    alpha = (1 - level) / (2 * len(thresholds))
    best = 0.0
    for t in thresholds:
        tp, fp = int((s_in > t).sum()), int((s_out > t).sum())
        tpr_low = 0.0 if tp == 0 else stats.beta.ppf(alpha, tp, s_in.size - tp + 1)
        fpr_high = 1.0 if fp == s_out.size else stats.beta.ppf(1 - alpha, fp + 1, s_out.size - fp)
        d_a = delta if delta_in_tpr_term else 0.0
        if tpr_low - d_a > 0 and fpr_high > 0:
            best = max(best, math.log((tpr_low - d_a) / fpr_high))
        if 1 - fpr_high - delta > 0 and tpr_low < 1:
            best = max(best, math.log((1 - fpr_high - delta) / (1 - tpr_low)))
    return best


def heavy_right_tail(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """300 members and 1,000 non-members, N(0, 1) scores, except that 30% of the members score far above all."""
    rng = np.random.default_rng(seed)
    members = np.arange(1300) < 300
    scores = rng.normal(size=1300)
    scores[:90] += 20.0
    return scores, members


def test_delta_enters_the_tpr_fpr_term():
    scores, members = heavy_right_tail()
    delta = 0.1
    got = epsilon_lower_bound(scores, members, delta)
    assert got.term == "tpr/fpr"  # the low-FPR term decides here, not the complement term
    want = epsilon_oracle(scores, members, delta)
    assert got.eps_lb == pytest.approx(want, rel=1e-9)
    dropped = epsilon_oracle(scores, members, delta, delta_in_tpr_term=False)
    assert dropped > want + 0.3  # the case tells the two rules apart (measured: 3.26 against 2.63)


def test_paired_auc_uses_the_same_draws_in_both_arms():
    rng = np.random.default_rng(3)
    members = rng.random((4, 300)) < 0.5
    base = rng.normal(size=(4, 300)) + 0.6 * members
    shifted = base + 0.05 * rng.normal(size=base.shape)  # a regularizer that changes almost nothing
    d = paired_auc((base, members), (shifted, members), n_boot=200)
    one = PooledScores(base, members).metrics(np.ones(300))["auc"]
    assert d["without"] == pytest.approx(one, abs=1e-12) and d["diff"] == pytest.approx(d["with"] - d["without"])
    paired_width = d["ci"][1] - d["ci"][0]
    single_width = np.diff(group_metrics(base, members, n_boot=200)["ci"]["auc"])[0]
    assert paired_width < single_width / 3  # unpaired draws would give about √2 × the single width
    with pytest.raises(ValueError, match="keep matrix"):
        paired_auc((base, members), (shifted, ~members))


def test_accuracy_cost_is_a_paired_t_interval_over_the_copies():
    without = [{"test": a} for a in (0.80, 0.82, 0.79, 0.81)]
    with_ = [{"test": a} for a in (0.78, 0.79, 0.78, 0.80)]
    cost = paired_cost(without, with_, "test")
    d = 100 * (np.array([0.80, 0.82, 0.79, 0.81]) - np.array([0.78, 0.79, 0.78, 0.80]))
    half = stats.t.ppf(0.975, 3) * d.std(ddof=1) / 2
    assert cost["points"] == pytest.approx(d.mean()) and cost["ci"] == pytest.approx([d.mean() - half,
                                                                                     d.mean() + half])


@pytest.mark.parametrize("n, batch, epochs, want_steps, want_epochs", [
    (480, 64, 10, 80, 27),   # the model: 8 steps per epoch (last batch kept); a copy: 240 → 3 full
    (600, 64, 10, 100, 25),  # 10 per epoch; a copy: 300 → 4 full batches
    (100, 256, 3, 3, 3),     # one batch per epoch either way
])
def test_copies_take_the_models_optimizer_steps(n, batch, epochs, want_steps, want_epochs):
    cfg, steps = step_matched(TrainConfig(epochs=epochs, batch_size=batch), n)
    assert steps["model_steps"] == want_steps and cfg.epochs == steps["epochs"] == want_epochs
    assert steps["copy_steps"] >= want_steps and steps["copy_steps"] - want_steps < (n // 2) // min(batch, n // 2) + 1
