"""bnmem.attacks.result: what both evaluators accept and return (hand-computed cases)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bnmem.attacks.result import (
    ALL, AVAILABLE, NEEDS_IN, NEEDS_OUT, check_keep, check_references, check_request, check_targets, evaluation_result,
    settings, summarize,
)
from bnmem.attacks.rmia import RMIAParams
from bnmem.errors import BnmemError


def test_every_attack_that_reads_references_is_available():
    assert NEEDS_IN <= NEEDS_OUT <= set(AVAILABLE) and set(ALL) <= set(AVAILABLE)


def test_summarize_skips_nan_targets_in_mean_std_and_count():
    per = [{"auc": 0.6, "balanced_acc": 0.5, "tpr_at_0.1pct_fpr": 0.0, "tpr_at_1pct_fpr": 0.1},
           {"auc": math.nan, "balanced_acc": math.nan, "tpr_at_0.1pct_fpr": math.nan, "tpr_at_1pct_fpr": math.nan},
           {"auc": 0.8, "balanced_acc": 0.7, "tpr_at_0.1pct_fpr": 0.2, "tpr_at_1pct_fpr": 0.3}]
    s = summarize(per)
    assert s["auc"] == pytest.approx(0.7) and s["auc_std"] == pytest.approx(math.sqrt(0.02))
    assert s["n_targets"] == 2 and len(s["auc_per_target"]) == 3 and math.isnan(s["auc_per_target"][1])
    one = summarize(per[:1])
    assert one["auc"] == 0.6 and math.isnan(one["auc_std"])


def test_requests_are_checked_with_one_clear_error():
    params, attacks, masks = check_request({"gamma": 2.0}, ["loss"], {"odd": [0, 1, 0]}, 3)
    assert params == RMIAParams(gamma=2.0) and attacks == ["loss"] and list(masks) == ["all", "odd"]
    assert masks["odd"].dtype == bool and masks["all"].all()
    with pytest.raises(BnmemError, match="unknown attack"):
        check_request(None, ["lira"], None, 3)
    with pytest.raises(BnmemError, match="unknown RMIA parameter"):
        check_request({"beta": 1}, ["rmia"], None, 3)
    with pytest.raises(BnmemError, match="boolean mask of shape"):
        check_request(None, ["loss"], {"bad": [0, 2, 1]}, 3)
    assert check_keep([[1, 0], [0, 1]], (2, 2)).dtype == bool
    with pytest.raises(BnmemError, match="keep must be"):
        check_keep([[1, 0]], (2, 2))
    assert check_targets(None, 3) == [0, 1, 2] and check_targets([np.int64(2)], 3) == [2]
    with pytest.raises(BnmemError, match=r"\[3\] out of range for 3 models"):
        check_targets([3], 3)


def test_references_are_required_only_by_the_attacks_that_read_them():
    check_references(["loss", "global_threshold"], 0, 0, 3)  # no reference model read
    check_references(["offline"], 0, 1, 3)  # OUT side only
    with pytest.raises(BnmemError, match="^target 2: .* among the other 3 models, .*at least 4 models"):
        check_references(["offline"], 1, 0, 3, target=2)
    with pytest.raises(BnmemError, match="among the other 5 models of a target"):
        check_references(["online"], np.array([1, 0]), np.array([1, 1]), 5)


def test_result_dict_has_per_subset_metrics_curves_and_settings():
    scores = {"loss": np.array([[0.9, 0.8, 0.1, 0.2], [0.1, 0.9, 0.8, 0.2]])}
    members = np.array([[True, True, False, False], [False, True, True, False]])
    masks = {"all": np.ones(4, bool), "first": np.array([True, True, True, False])}
    st = settings(RMIAParams(), "legacy", (2, 4, 1), rmia_a="fixed", evaluator="x", extra=[1])
    assert list(st) == ["rmia", "rmia_a", "rmia_population", "n_models", "n_examples", "n_views", "evaluator", "extra"]
    res = evaluation_result(scores, members, [0, 1], masks, st)
    assert res["metrics"]["loss"]["all"]["auc"] == 1.0  # both targets' members score above their non-members
    assert res["subset_sizes"] == {"all": 4, "first": 3} and res["settings"] is st
    assert len(res["curves"]["loss"]["first"]["per_target"]) == 2
    lean = evaluation_result(scores, members, [0, 1], masks, st, per_target_curves=False, pooled_points=2)
    assert list(lean["curves"]["loss"]["all"]) == ["pooled"] and lean["metrics"] == res["metrics"]
