"""roc_rows (every target's ROC from one sort) against the per-row oracle (sklearn's roc_curve through roc),
and evaluation_result against the per-target loop it replaced: the same bits on random inputs with ties,
infinities, tiny rows and rows without both classes."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bnmem.attacks.epsilon import epsilon_summary
from bnmem.attacks.metrics import metrics_from_roc, roc, roc_rows
from bnmem.attacks.result import evaluation_result, summarize
from bnmem.errors import BnmemError


def _cases(seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """[rows, n] scores and members: continuous, heavily tied, with ±inf, tiny n, one-class rows."""
    rng = np.random.default_rng(seed)
    out = []
    for n in (1, 2, 3, 7, 40, 301):
        cont = rng.normal(size=(6, n))
        tied = rng.integers(0, 4, size=(6, n)).astype(np.float64)
        inf = cont.copy()
        inf[rng.uniform(size=inf.shape) < 0.1] = np.inf
        inf[rng.uniform(size=inf.shape) < 0.1] = -np.inf
        members = rng.uniform(size=(6, n)) < 0.5
        members[0] = True  # only members
        members[1] = False  # only non-members
        members[2, :] = np.arange(n) % 2 == 0  # both classes whenever n >= 2
        for s in (cont, tied, inf, np.zeros((6, n))):
            out.append((s, members.copy()))
    return out


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_roc_rows_is_roc_row_by_row_bit_for_bit(seed):
    for scores, members in _cases(seed):
        rows = roc_rows(scores, members)
        assert len(rows) == scores.shape[0]
        for i, (fpr, tpr) in enumerate(rows):
            ofpr, otpr = roc(scores[i], members[i])
            assert fpr.dtype == ofpr.dtype == np.float64
            np.testing.assert_array_equal(fpr, ofpr)
            np.testing.assert_array_equal(tpr, otpr)
            new, old = metrics_from_roc(fpr, tpr), metrics_from_roc(ofpr, otpr)
            assert all(_same(new[k], old[k]) for k in old), (new, old)


def test_metrics_from_roc_still_integrates_a_falling_curve_as_sklearn_does():
    fpr, tpr = np.array([1.0, 0.5, 0.0]), np.array([1.0, 0.8, 0.0])
    assert metrics_from_roc(fpr, tpr)["auc"] == pytest.approx(0.65)


def test_roc_rows_refuses_what_roc_refuses():
    with pytest.raises(BnmemError, match="NaN"):
        roc_rows(np.array([[0.1, np.nan]]), np.array([[True, False]]))
    with pytest.raises(BnmemError, match="2-D"):
        roc_rows(np.zeros(3), np.zeros(3, bool))


def _oracle(scores, members, targets, masks, per_target_curves=True):
    """evaluation_result's metrics and curves as the per-target loop computed them before roc_rows."""
    metrics, curves = {}, {}
    deltas = 1.0 / np.maximum(members.sum(axis=1), 1)
    for name, s in scores.items():
        metrics[name], curves[name] = {}, {}
        for sub, mask in masks.items():
            per_roc, per_target = [], []
            for i in range(len(targets)):
                c = roc(s[i, mask], members[i, mask])
                per_target.append(metrics_from_roc(*c))
                per_roc.append(c)
            metrics[name][sub] = summarize(per_target)
            metrics[name][sub].update(epsilon_summary(s[:, mask], members[:, mask], deltas))
            pooled = roc(s[:, mask].ravel(), members[:, mask].ravel())
            curves[name][sub] = {"per_target": per_roc, "pooled": pooled}
    return metrics, curves


def _assert_same(a, b):
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _assert_same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _assert_same(x, y)
    elif isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b)
        assert a.dtype == b.dtype
    elif isinstance(a, float):
        assert _same(a, b)
    else:
        assert a == b


@pytest.mark.parametrize("seed", [0, 1])
def test_evaluation_result_matches_the_per_target_loop(seed):
    rng = np.random.default_rng(seed)
    t, n = 5, 60
    members = rng.uniform(size=(t, n)) < 0.5
    members[:, :3] = True  # subset "first" has members only: no curve, nan metrics
    scores = {"cont": rng.normal(size=(t, n)), "tied": rng.integers(0, 3, size=(t, n)).astype(np.float64)}
    masks = {"all": np.ones(n, bool), "first": np.arange(n) < 3, "odd": np.arange(n) % 2 == 1,
             "empty": np.zeros(n, bool)}
    res = evaluation_result(scores, members, list(range(t)), masks, {})
    metrics, curves = _oracle(scores, members, list(range(t)), masks)
    _assert_same(res["metrics"], metrics)
    _assert_same(res["curves"], curves)
    # Without per-target curves the metrics are computed without building them: the same numbers.
    lean = evaluation_result(scores, members, list(range(t)), masks, {}, per_target_curves=False)
    _assert_same(lean["metrics"], metrics)
    assert all(list(c) == ["pooled"] for by_sub in lean["curves"].values() for c in by_sub.values())
    assert math.isnan(res["metrics"]["cont"]["first"]["auc"])
