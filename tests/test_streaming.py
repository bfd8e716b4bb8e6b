"""The streaming leave-one-out evaluator against the in-memory oracle, and its building blocks."""

from __future__ import annotations

import numpy as np
import pytest

from bnmem.attacks import (
    ALL,
    AttackInputs,
    evaluate_inputs,
    evaluate_stream,
    keep_matrix,
    lira_statistic,
)
from bnmem.attacks.phi import ArrayPhi, LogitsPhi, NpyPhi, write_phi
from bnmem.attacks.result import thin_curve
from bnmem.errors import BnmemError
from test_attacks import synthetic

EVERY = list(ALL) + ["rmia_offline"]


def assert_same(oracle: dict, stream: dict, attacks=EVERY, atol: float = 1e-9, score_rtol: float = 1e-12) -> None:
    """Equal to rounding, the project's tolerance: every metric of every attack and subset to ``atol`` (1e-9),
    and each target's scores to ``score_rtol`` (1e-12) relative, normwise (:func:`assert_scores_close`).
    Where the two read different φ (hi + lo against float64) ``score_rtol`` is that difference's."""
    for attack in attacks:
        assert_scores_close(stream["scores"][attack], oracle["scores"][attack], score_rtol, attack)
        for sub, summary in oracle["metrics"][attack].items():
            for key in ("auc", "balanced_acc", "tpr_at_0.1pct_fpr", "tpr_at_1pct_fpr", "eps_lb"):
                a = np.array(summary[f"{key}_per_target"])
                b = np.array(stream["metrics"][attack][sub][f"{key}_per_target"])
                np.testing.assert_allclose(b, a, rtol=0, atol=atol, err_msg=f"{attack} {sub} {key}")


def assert_scores_close(got, want, rtol: float = 1e-12, what: str = "") -> None:
    """Per target (row), max |got − want| ≤ rtol · max |want|: relative to the row's scale, not entrywise.
    An entry near 0 is often a mean over views of terms of order 1 that cancel; any other order of the same
    operations reproduces it to the terms' rounding, not to its own, so an entrywise relative bound would
    test the cancellation, not the code. Infinities must match exactly."""
    got, want = np.asarray(got, float), np.asarray(want, float)
    assert got.shape == want.shape, what
    finite = np.isfinite(want)
    np.testing.assert_array_equal(got[~finite], want[~finite], err_msg=what)
    diff = np.where(finite, np.abs(got - want), 0.0).reshape(len(want), -1).max(axis=1, initial=0.0)
    scale = np.where(finite, np.abs(want), 0.0).reshape(len(want), -1).max(axis=1, initial=0.0)
    assert (diff <= rtol * scale).all(), (what, float(np.max(diff / np.maximum(scale, 1e-300))))


# ---------------------------------------------------------------- building blocks


def test_thin_curve_keeps_ends_and_low_fpr_points() -> None:
    fpr = np.concatenate([[0.0], np.sort(np.random.default_rng(1).random(50_000)), [1.0]])
    tpr = np.sqrt(fpr)
    f, t = thin_curve(fpr, tpr, max_points=400)
    assert f.size <= 402 and f[0] == 0 and f[-1] == 1
    assert np.isin(f, fpr).all() and np.array_equal(t, np.sqrt(f))  # points of the curve, not interpolated
    assert (f[(f > 0) & (f < 1e-3)]).size >= 10  # the log axis keeps its low-FPR detail


# ---------------------------------------------------------------- streaming == oracle


@pytest.mark.parametrize("n_models, n_views, block, params", [
    (8, 3, 37, {}),  # k = 3 references per side (odd: median is one value)
    (6, 1, 64, {"a": 0.3, "gamma": 1.5}),  # k = 2 (even: mean of the two middle values)
    (10, 2, None, {"gamma": 0.8}),
    (4, 2, 7, {"a": 0.5}),  # one reference per side: zero spread
])
@pytest.mark.parametrize("with_population", [False, True])
def test_stream_equals_oracle_on_synthetic(n_models, n_views, block, params, with_population) -> None:
    logits, keep, labels = synthetic(n_models, 160, n_views=n_views, seed=n_models)
    phi = lira_statistic(logits, labels)
    pop = None
    if with_population:
        pop = phi[:, :40] + np.random.default_rng(3).normal(0, 0.3, (n_models, 40, n_views))
    subsets = {"outliers": np.arange(160) < 30, "inliers": np.arange(160) >= 30}
    oracle = evaluate_inputs(AttackInputs.from_phi(phi, keep, pop), subsets, EVERY, params)
    stream = evaluate_stream(phi, keep, subsets, EVERY, params, population_phi=pop, block=block)
    assert_same(oracle, stream)
    assert stream["settings"].get("rmia_offline_a_per_target") == oracle["settings"].get("rmia_offline_a_per_target")


def test_stream_equals_oracle_with_unbalanced_keep_and_target_subset() -> None:
    logits, keep, labels = synthetic(12, 200, n_views=2, seed=4)
    keep = np.random.default_rng(1).random(keep.shape) < 0.5
    phi = lira_statistic(logits, labels)
    oracle = evaluate_inputs(AttackInputs.from_phi(phi, keep), None, EVERY, {}, targets=[0, 5, 11])
    stream = evaluate_stream(phi, keep, None, EVERY, {}, targets=[0, 5, 11], block=33)
    assert "unbalanced" in stream["settings"]["evaluator"]
    assert_same(oracle, stream)


def test_stream_scores_alone_are_the_full_evaluations_scores() -> None:
    """``metrics=False`` (a threshold fitted on reference models reads scores only) skips the metrics, not the
    scores: the same arrays for every attack, RMIA's offline a selection included."""
    logits, keep, labels = synthetic(10, 150, n_views=2, seed=7)
    phi = lira_statistic(logits, labels)
    full = evaluate_stream(phi, keep, None, EVERY, {}, block=40)
    alone = evaluate_stream(phi, keep, None, EVERY, {}, block=40, metrics=False)
    assert set(alone) == {"scores", "members", "targets"} and set(alone["scores"]) == set(EVERY)
    for attack in EVERY:
        np.testing.assert_array_equal(alone["scores"][attack], full["scores"][attack], err_msg=attack)
    np.testing.assert_array_equal(alone["members"], full["members"])


def test_stream_reads_npy_and_legacy_logits_blockwise(tmp_path) -> None:
    logits, keep, labels = synthetic(6, 150, n_views=2, seed=9)
    np.save(tmp_path / "logits.npy", logits)
    legacy = LogitsPhi(tmp_path / "logits.npy", labels)
    # φ derived per block is the float64 φ of the whole array.
    assert np.array_equal(legacy.read(0, 150), lira_statistic(logits, labels))
    write_phi(tmp_path / "phi.npy", legacy, block=16)
    phi64 = lira_statistic(logits, labels)
    hi, lo = np.load(tmp_path / "phi.npy"), np.load(tmp_path / "phi_lo.npy")
    assert hi.dtype == lo.dtype == np.float32 and np.array_equal(hi, phi64.astype(np.float32))
    # hi + lo reproduces float64 φ far below float32 rounding.
    np.testing.assert_allclose(NpyPhi(tmp_path / "phi.npy").read(0, 150), phi64, rtol=1e-13, atol=1e-13)
    assert np.abs(hi - phi64).max() > 1e-9  # (float32 alone would not)
    from bnmem.attacks import evaluate_attacks

    oracle = evaluate_attacks(logits, keep, labels, attacks=EVERY)
    assert_same(oracle, evaluate_stream(legacy, keep, attacks=EVERY, block=20))
    # The stored φ (hi + lo) gives the logits path's results.
    assert_same(oracle, evaluate_stream(NpyPhi(tmp_path / "phi.npy"), keep, attacks=EVERY, block=20),
                score_rtol=1e-9)  # φ to |φ|·2^-48, amplified by LiRA's division by the spread
    # Without the residual (a phi.npy alone) it still evaluates, at float32 precision.
    (tmp_path / "phi_lo.npy").unlink()
    from_hi = evaluate_stream(NpyPhi(tmp_path / "phi.npy"), keep, attacks=EVERY, block=20)
    assert_same(evaluate_inputs(AttackInputs.from_phi(hi, keep), attacks=EVERY), from_hi)


def test_stream_rejects_bad_inputs() -> None:
    logits, keep, labels = synthetic(4, 50)
    phi = lira_statistic(logits, labels)
    with pytest.raises(BnmemError, match="unknown attack"):
        evaluate_stream(phi, keep, attacks=["lira"])
    with pytest.raises(BnmemError, match="keep"):
        evaluate_stream(phi, keep[:3])
    with pytest.raises(BnmemError, match="at least 4 models"):
        evaluate_stream(phi[:2], keep_matrix(2, 50, 0), attacks=["online"])
    with pytest.raises(BnmemError, match="NaN"):
        ArrayPhi(np.full((2, 3, 1), np.nan))
    # A population that shares an identity with a candidate is refused.
    with pytest.raises(AssertionError, match="scored examples"):
        evaluate_stream(phi, keep, attacks=["rmia"], population_phi=phi[:, :5], population_ids=np.arange(5))
