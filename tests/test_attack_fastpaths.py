"""The attack evaluation's fast paths against slow, obviously-correct oracles (loops, float64, numpy/sklearn):
leave-one-out medians and spreads from per-example summaries, the fixed-variance spreads from shifted sums,
the ε point bound from ROC corners, the pooled curve from merged rows, and the vectorized softplus."""

from __future__ import annotations

import numpy as np
import pytest

from bnmem.attacks import AttackInputs, evaluate_inputs, evaluate_stream, lira_statistic
from bnmem.attacks.epsilon import _point_bound, _sorted_classes, epsilon_ranked
from bnmem.attacks.loo import EXACT_BELOW, Side
from bnmem.attacks.metrics import rank_rows, roc
from bnmem.attacks.scores import loss_from_phi
from test_attacks import synthetic
from test_streaming import assert_same


def _targets(c: int, b: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Removed positions [T, B] and references left [T]: targets that remove a random position per example
    (their own value or the last one; k = C − 1) and one that removes nothing (k = C)."""
    pos = np.concatenate([rng.integers(0, c, (5, b)), np.full((1, b), c - 1), np.full((1, b), c)])
    k = np.array([c - 1] * 6 + [c])
    return pos, k


@pytest.mark.parametrize("c", [2, 3, 4, 5, 8, 9])
def test_side_median_and_spread_equal_numpy_on_the_remaining_values(c):
    rng = np.random.default_rng(c)
    b, v = 11, 3
    vals = np.round(rng.normal(0, 1, (c, b, v)), 1)  # ties on purpose
    pos, k = _targets(c, b, rng)
    removed = vals[np.minimum(pos, c - 1), np.arange(b)[None, :]]  # [T, B, V]; unread where nothing is removed
    side = Side.of(vals)
    med, sd = side.median(removed, k), side.spread(removed, k, pos)
    for t in range(pos.shape[0]):
        for j in range(b):
            rest = np.delete(vals[:, j], pos[t, j], axis=0) if pos[t, j] < c else vals[:, j]
            assert np.array_equal(med[t, j], np.median(rest, axis=0))  # bit for bit
            np.testing.assert_allclose(sd[t, j], np.std(rest, axis=0), rtol=1e-13, atol=1e-15)


def test_side_spread_is_exact_where_the_removed_value_carried_the_spread():
    rng = np.random.default_rng(0)
    c, b = 16, 4
    vals = rng.normal(0, 1, (c, b, 1))
    vals[3, :, 0] = 1e7  # a diverged model: nearly all of the M2
    pos = np.full((1, b), 3)
    removed = vals[3][None]
    sd = Side.of(vals).spread(removed, np.array([c - 1]), pos)
    want = np.std(np.delete(vals, 3, axis=0), axis=0)
    np.testing.assert_allclose(sd[0], want, rtol=1e-12)
    # The subtraction alone would have cancelled away most digits here (so the exact path is what is tested).
    side = Side.of(vals)
    d = removed[0] - side.mean
    naive = np.sqrt(np.maximum(side.m2 - d * d * c / (c - 1), 0) / (c - 1))
    assert (side.m2 - d * d * c / (c - 1) < side.m2 * EXACT_BELOW).all()
    assert np.max(np.abs(naive / want - 1)) > 1e-6


def test_fixed_variance_spreads_do_not_cancel_under_a_large_offset():
    logits, keep, labels = synthetic(8, 120, n_views=2, seed=5)
    phi = lira_statistic(logits, labels) + 1e5  # Σv² − (Σv)²/n without a shift would lose ~10 digits
    attacks = ["online_fixed_variance", "offline_fixed_variance"]
    oracle = evaluate_inputs(AttackInputs.from_phi(phi, keep), None, attacks)
    assert_same(oracle, evaluate_stream(phi, keep, None, attacks, block=31), attacks=attacks)


def _rows(seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = []
    for n in (2, 5, 40, 301):
        members = rng.uniform(size=(4, n)) < 0.5
        members[0, :2] = [True, False]
        cont = rng.normal(size=(4, n))
        tied = rng.integers(0, 4, size=(4, n)).astype(np.float64)
        inf = cont.copy()
        inf[rng.uniform(size=inf.shape) < 0.1] = np.inf
        inf[rng.uniform(size=inf.shape) < 0.1] = -np.inf
        out += [(s, members) for s in (cont, tied, inf)]
    return out


@pytest.mark.parametrize("seed", [0, 1])
def test_point_bounds_from_roc_corners_equal_the_per_threshold_oracle(seed):
    for scores, members in _rows(seed):
        deltas = np.full(scores.shape[0], 1e-3)
        got = epsilon_ranked(rank_rows(scores, members), deltas)
        for i in range(scores.shape[0]):
            s_in, s_out = _sorted_classes(scores[i], members[i])
            if s_in.size and s_out.size:
                assert got[i].eps_point == _point_bound(s_in, s_out, 1e-3)  # bit for bit


@pytest.mark.parametrize("seed", [0, 1])
def test_pooled_curve_from_merged_rows_is_roc_of_all_scores(seed):
    for scores, members in _rows(seed):
        merged = rank_rows(scores, members).merged()
        for mask in (np.ones(scores.shape[1], bool), np.arange(scores.shape[1]) % 3 == 0):
            fpr, tpr = merged.subset(mask).curves()[0]
            ofpr, otpr = roc(scores[:, mask].ravel(), members[:, mask].ravel())
            np.testing.assert_array_equal(fpr, ofpr)
            np.testing.assert_array_equal(tpr, otpr)


def test_loss_from_phi_is_logaddexp_to_rounding():
    phi = np.concatenate([np.linspace(-800, 800, 20001), [0.0, -0.0, 1e-300, -1e-300, 36.7, -36.7]])
    got, want = loss_from_phi(phi), np.logaddexp(0.0, -phi)
    np.testing.assert_allclose(got, want, rtol=4e-16, atol=0)
    assert loss_from_phi(np.array([0.0]))[0] == np.log(2.0)
