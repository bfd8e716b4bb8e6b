"""roc_summaries (every target's metrics and ε inputs per subset: the compiled walk, or without numba the
per-row oracles) against sklearn's roc_curve through roc and the class searches, and evaluation_result against
the per-target loop it replaced: equal to rounding (1e-12) on random inputs with ties, infinities, tiny rows and
rows without both classes."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bnmem.attacks.epsilon import _point_bound, _rank_counts, _sorted_classes, epsilon_summary, rank_grid
from bnmem.attacks.metrics import metrics_from_roc, roc
from bnmem.attacks.per_target import roc_summaries
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


def _same(a: float, b: float, rel: float = 0.0) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b or abs(a - b) <= rel * max(abs(a), abs(b), 1.0)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_roc_summaries_are_the_per_row_oracles(seed, kernels_on):
    """Per subset and row: the metrics of sklearn's curve of the row (to 1e-12), the counts above each rank
    threshold as the class searches find them (exactly) and the point bound of every threshold (to 1e-12)."""
    rng = np.random.default_rng(seed)
    for scores, members in _cases(seed):
        n = scores.shape[1]
        masks = {"all": np.ones(n, bool), "some": rng.uniform(size=n) < 0.4}
        deltas = rng.choice([0.0, 1e-3, 0.1], scores.shape[0])
        got = roc_summaries(scores, members, masks, deltas)
        for sub, mask in masks.items():
            per_row, counts = got[sub]
            for i in range(scores.shape[0]):
                want = metrics_from_roc(*roc(scores[i, mask], members[i, mask]))
                assert all(_same(float(per_row[k][i]), want[k], 1e-12) for k in want), (sub, i, per_row, want)
                s_in, s_out = _sorted_classes(scores[i, mask], members[i, mask])
                assert (counts.n_in[i], counts.n_out[i]) == (s_in.size, s_out.size)
                at = slice(counts.offsets[i], counts.offsets[i + 1])
                if not (s_in.size and s_out.size):
                    assert at.start == at.stop and math.isnan(counts.points[i])
                    continue
                tp, fp = _rank_counts(s_in, s_out, rank_grid(s_out.size), rank_grid(s_in.size))
                np.testing.assert_array_equal(counts.tp[at], tp)
                np.testing.assert_array_equal(counts.fp[at], fp)
                assert _same(float(counts.points[i]), _point_bound(s_in, s_out, float(deltas[i])), 1e-12)


def test_metrics_from_roc_still_integrates_a_falling_curve_as_sklearn_does():
    fpr, tpr = np.array([1.0, 0.5, 0.0]), np.array([1.0, 0.8, 0.0])
    assert metrics_from_roc(fpr, tpr)["auc"] == pytest.approx(0.65)


def test_roc_summaries_refuse_what_roc_refuses():
    with pytest.raises(BnmemError, match="NaN"):
        roc_summaries(np.array([[0.1, np.nan]]), np.array([[True, False]]), {"all": np.ones(2, bool)}, np.ones(1))
    with pytest.raises(BnmemError, match="2-D"):
        roc_summaries(np.zeros(3), np.zeros(3, bool), {}, np.ones(1))


def _oracle(scores, members, targets, masks, per_target_curves=True):
    """evaluation_result's metrics and curves the per-target way: sklearn's curve of each row and of the pool."""
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
        assert _same(a, b, 1e-12), (a, b)
    else:
        assert a == b


@pytest.mark.parametrize("seed", [0, 1])
def test_evaluation_result_matches_the_per_target_loop(seed, kernels_on):
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
