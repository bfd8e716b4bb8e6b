"""Row 3c (beyond the paper): LiRA at matched fit, and the low-FPR operating point fitted on shadow models only.

The threshold is checked against a brute-force search over every candidate threshold; the row is decided on
synthetic lira runs through the report's own driver (evaluate_rule).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from bnmem.analysis_plan import BEYOND_PAPER, CONTRADICTED, INCONCLUSIVE, NOT_RUN, PLAN, REPRODUCED
from bnmem.attacks.shadow_threshold import precision_at_prior, rates_at, shadow_threshold
from bnmem.names import LIRA
from bnmem.report.claims import claim3c, evaluate_rule

from synthetic_runs import lira_data, make_cell, make_run


# ---------------------------------------------------------------- the shadow-fitted threshold


def oracle_threshold(z: np.ndarray, fpr: float) -> float:
    """Brute force: among every candidate threshold (each reference score, and −∞), the smallest whose
    false-positive rate on the reference non-members (score > t) is at most ``fpr``."""
    feasible = [t for t in np.concatenate([[-np.inf], z]) if np.mean(z > t) <= fpr]
    return float(min(feasible))


def test_shadow_threshold_is_the_smallest_feasible_one():
    rng = np.random.default_rng(0)
    for _ in range(300):
        n = int(rng.integers(1, 3000))
        z = rng.normal(0, 1, n)
        if rng.random() < 0.5:
            z = np.round(z, 1)  # ties
        fpr = float(rng.choice([0.001, 0.01, 0.1, 0.5]))
        t = shadow_threshold(z, fpr)
        assert t == oracle_threshold(z, fpr)
        assert np.mean(z > t) <= fpr
        # the target's rates read at the threshold, never fitted on its scores
        scores, members = rng.normal(0.5, 1, 200), rng.random(200) < 0.5
        tpr, f = rates_at(scores, members, t)
        assert tpr == pytest.approx(np.mean(scores[members] > t)) and f == pytest.approx(np.mean(scores[~members] > t))
    assert shadow_threshold(np.array([]), 0.001) == math.inf  # no reference: nothing flagged


def test_precision_at_a_one_percent_prior():
    assert precision_at_prior(0.5, 0.001, 0.01) == pytest.approx(0.01 * 0.5 / (0.01 * 0.5 + 0.99 * 0.001))
    assert precision_at_prior(0.2, 0.2, 0.5) == pytest.approx(0.5)  # no better than chance at a 50% prior
    assert math.isnan(precision_at_prior(0.0, 0.0))


# ---------------------------------------------------------------- the matching rule


def test_matching_rule():
    epochs = [1, 2, 3, 4, 5]
    bn = np.array([0.80, 0.90, 0.93, 0.95, 0.96])
    base = np.array([0.30, 0.60, 0.85, 0.92, 0.935])
    assert claim3c.matched_epochs(epochs, bn, base) == (2, 4)  # BN's epoch 3 (0.93) is within 1 point of 0.935
    # the baseline fits better: roles swapped, BN read at its final epoch
    assert claim3c.matched_epochs(epochs, base, bn) == (4, 2)
    # the better-fitting arm jumps over the band (0.90 → 0.97 around the baseline's 0.935): not matched
    assert claim3c.matched_epochs([1, 2, 3], np.array([0.5, 0.9, 0.97]), np.array([0.3, 0.8, 0.935])) is None
    assert claim3c.matched_epochs([1, 2, 3], np.array([0.5, 0.926, 0.97]), np.array([0.3, 0.8, 0.935])) == (1, 2)


# ---------------------------------------------------------------- the row through the report


def matched_block(rng, auc_gain_at: dict[int, float], targets: int = 6, epochs: int = 5,
                  bn_acc=(0.80, 0.90, 0.93, 0.95, 0.96), base_acc=(0.30, 0.60, 0.85, 0.92, 0.935)) -> dict:
    """A lira matched_fit block: the baseline's AUC rises 1 point per epoch; at epoch e (1-based) BN's AUC is
    the baseline's final AUC + auc_gain_at[e] (default 0) (+ noise)."""
    base_auc = 0.55 + 0.01 * np.arange(epochs)[:, None] + rng.normal(0, 0.002, (epochs, targets))
    bn_auc = base_auc[-1][None, :] + np.array([auc_gain_at.get(e + 1, 0.0) for e in range(epochs)])[:, None] + \
        rng.normal(0, 0.003, (epochs, targets))

    def norm(acc, auc):
        accs = np.array(acc)[:, None] + rng.normal(0, 0.001, (epochs, targets))
        return {"test_acc": accs.tolist(), "online": {"auc_per_target": auc.tolist(),
                                                       "tpr_at_0.1pct_fpr_shadow": np.full((epochs, targets), 0.02).tolist(),
                                                       "fpr_at_shadow_threshold": np.full((epochs, targets), 0.001).tolist()}}

    return {"epochs": list(range(1, epochs + 1)), "batch": norm(bn_acc, bn_auc), "none": norm(base_acc, base_auc)}


def lira_matched_run(rng, gains: list[dict[int, float]], **kw) -> object:
    cells = []
    for r, gain in enumerate(gains):
        d = np.zeros(6)
        data = lira_data({"online": 0.6 + d + 0.08}, {"online": 0.6 + d})  # a same-epoch gain of 8 points
        data["matched_fit"] = matched_block(rng, gain, **kw)
        cells.append(make_cell("digits-lenet-noise", r, {LIRA: data}))
    return make_run(cells)


def row(run):
    return evaluate_rule(claim3c, run)[0]


def test_row_3c_reads_the_matched_epochs_not_the_final_ones():
    rng = np.random.default_rng(1)
    # BN matches the baseline's final 0.935 at its epoch 3: there it leaks 2 points more (reproduced) ...
    up = lira_matched_run(rng, [{3: 0.02, 5: 0.08}] * 3)
    c = row(up)
    assert c.kind == BEYOND_PAPER == PLAN["3c"].kind and c.status == REPRODUCED
    blocks = [cell.lenses[LIRA].data["matched_fit"] for cell in up.cells]
    per_rep = [np.mean(np.array(b["batch"]["online"]["auc_per_target"][2]) -
                       np.array(b["none"]["online"]["auc_per_target"][4])) for b in blocks]
    assert c.decisive.value == pytest.approx(np.mean(per_rep)) and "over 3 paired replicates" in c.decisive.method
    note = c.decisive.note
    assert "exploratory" in note and "batch epoch 3" in note and "none epoch 5" in note
    assert "TPR 2.00% at 0.1% FPR" in note and f"{precision_at_prior(0.02, 0.001):.1%}" in note
    # ... and where the gain at the matched epoch is negative, the same-epoch +8 points do not save it
    down = row(lira_matched_run(rng, [{3: -0.02, 5: 0.08}] * 3))
    assert down.status == CONTRADICTED
    assert row(lira_matched_run(rng, [{3: 0.0, 5: 0.08}] * 3)).status == INCONCLUSIVE


def test_row_3c_leaves_out_unmatched_replicates_and_says_so():
    rng = np.random.default_rng(2)
    run = lira_matched_run(rng, [{3: 0.02}] * 3)
    # replicate 2: BN never comes within a point of the baseline's final accuracy
    blk = run.cells[2].lenses[LIRA].data["matched_fit"]
    # BN: 0.80, 0.90, 0.99, 0.99, 0.99 against the baseline's final 0.95: it jumps over 0.94–0.96
    blk["batch"]["test_acc"] = [[a] * 6 for a in (0.80, 0.90, 0.99, 0.99, 0.99)]
    blk["none"]["test_acc"] = [[a] * 6 for a in (0.30, 0.60, 0.85, 0.92, 0.95)]
    c = row(run)
    assert c.decisive.n == 2 and "1 of 3 replicates left out: not matched" in c.decisive.note


def test_row_3c_is_not_run_without_the_matched_fit_queries():
    from synthetic_runs import lira_run

    c = row(lira_run([np.full(6, 0.05)] * 3))
    assert c.status == NOT_RUN and "matched_fit" in c.not_run_reason()
