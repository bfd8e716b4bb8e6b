"""Small functions of bnmem.attacks on their edges: input coercion, empty and degenerate cases.

The attacks against slow references, the TPR-at-FPR boundary and the score invariants are in
tests/test_attacks.py; these pin what those leave open (found by `make mutate`).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from bnmem.attacks.keep import first_k_references, split_references
from bnmem.attacks.lira import Gaussian, fit_gaussian, global_threshold
from bnmem.attacks.metrics import checked_scores, roc, tpr_at_fpr
from bnmem.errors import BnmemError


def test_first_k_references_is_stable_for_many_models():
    """Among hundreds of qualifying models the lowest indices come first (a non-stable sort reorders ties)."""
    member = np.random.default_rng(0).random((300, 7)) < 0.5
    got = first_k_references(member, 100)
    for j in range(member.shape[1]):
        np.testing.assert_array_equal(got[:, j], np.flatnonzero(member[:, j])[:100])


def test_split_references_accepts_zero_one_matrices():
    keep = np.random.default_rng(1).random((6, 20)) < 0.5
    keep[:, 0] = [1, 1, 1, 0, 0, 0]  # every column has both sides
    keep[:, 1] = [0, 0, 0, 1, 1, 1]
    want = split_references(keep)
    got = split_references(keep.astype(np.int64))
    for w, g in zip(want, got):
        np.testing.assert_array_equal(w, g)


def test_split_references_without_examples_is_empty():
    idx_in, idx_out = split_references(np.zeros((4, 0), dtype=bool))
    for a in (idx_in, idx_out):
        assert a.shape == (0, 0) and a.dtype == np.intp


def test_zero_spread_reference_makes_points_above_the_mean_impossible():
    g = Gaussian(mean=np.array([0.0]), std=np.array([0.0]))
    assert g.log_sf(np.array([1.0]))[0] < -1e10 and g.log_sf(np.array([-1.0]))[0] == pytest.approx(0.0)


def test_fit_gaussian_per_example_by_default_in_float64():
    stats = np.random.default_rng(2).normal(size=(5, 3, 2)).astype(np.float32)
    g = fit_gaussian(stats)
    s64 = stats.astype(np.float64)
    np.testing.assert_array_equal(g.mean, np.median(s64, axis=0))
    np.testing.assert_array_equal(g.std, np.std(s64, axis=0))
    assert fit_gaussian(stats, fix_variance=True).std == np.std(s64)
    with pytest.raises(BnmemError, match="at least one reference"):
        fit_gaussian(np.zeros((0, 3, 2)))


def test_target_statistics_are_averaged_in_float64():
    phi = np.random.default_rng(3).normal(size=(50, 3)).astype(np.float32)
    np.testing.assert_array_equal(global_threshold(phi), phi.astype(np.float64).mean(axis=1))


def test_roc_keeps_infinite_float32_scores_ordered():
    scores = np.array([np.inf, 0.5, -np.inf, 0.2], dtype=np.float32)
    members = np.array([True, False, False, True])
    f32 = roc(scores, members)
    f64 = roc(scores.astype(np.float64), members)
    for a, b in zip(f32, f64):
        np.testing.assert_array_equal(a, b)


def test_roc_one_class_and_bad_shapes():
    for members in ([True, True, True], [False, False, False]):
        fpr, tpr = roc(np.array([0.1, 0.2, 0.3]), np.array(members))
        assert fpr.shape == (0,) and tpr.shape == (0,)
    with pytest.raises(BnmemError, match="must be equal 1-D shapes"):
        roc(np.array([0.1, 0.2, 0.3]), np.array([True, False]))
    with pytest.raises(BnmemError, match="must be equal 1-D shapes"):
        roc(np.zeros((2, 2)), np.zeros((2, 2), dtype=bool))


def test_tpr_at_fpr_without_a_point_below_the_level_is_nan():
    assert math.isnan(tpr_at_fpr(np.array([0.5, 1.0]), np.array([0.5, 1.0]), 1e-3))
    assert math.isnan(tpr_at_fpr(np.zeros(0), np.zeros(0), 1e-2))


def test_labels_one_past_the_last_class_are_refused():
    from bnmem.attacks.scores import lira_statistic

    logits = np.zeros((2, 3, 1, 4))
    with pytest.raises(BnmemError):
        lira_statistic(logits, np.array([0, 1, 4]))


def test_loss_from_phi_is_float64_for_float32_input():
    from bnmem.attacks.scores import loss_from_phi

    phi = np.array([30.0, 0.0, -3.0], dtype=np.float32)
    got = loss_from_phi(phi)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, np.logaddexp(0.0, -phi.astype(np.float64)))


def test_checked_scores_makes_float64_and_bool_and_refuses_unequal_shapes():
    s, m = checked_scores(np.array([1, 2, 3], dtype=np.int32), np.array([0, 1, 2]), 1)
    assert s.dtype == np.float64 and m.dtype == np.bool_ and m.tolist() == [False, True, True]
    assert s.flags.c_contiguous and m.flags.c_contiguous
    with pytest.raises(BnmemError, match="must be equal 1-D shapes"):
        checked_scores(np.zeros(3), np.zeros(4, dtype=bool), 1)
    with pytest.raises(BnmemError, match="must be equal 2-D shapes"):
        checked_scores(np.zeros(3), np.zeros(3, dtype=bool), 2)
    with pytest.raises(BnmemError, match="NaN"):
        checked_scores(np.array([0.0, np.nan]), np.zeros(2, dtype=bool), 1)
