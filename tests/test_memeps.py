"""Memorization scores and empirical ε lower bounds: estimators against hand computations and oracles."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import beta

from bnmem.attacks.epsilon import clopper_pearson, epsilon_lower_bound, epsilon_summary, rank_grid
from bnmem.attacks.memscore import (
    confidence_values,
    leave_one_model_out,
    mem_scores,
    mem_scores_loop,
    subset_summary,
    top1_values,
    top_k_overlap,
)
from bnmem.errors import BnmemError


# ---------------------------------------------------------------- ε lower bound

def _hand_eps(scores, members, delta, level):
    """Every threshold of the family by hand: count, bound with scipy's beta quantiles, take both terms."""
    s_in = [s for s, m in zip(scores, members) if m]
    s_out = [s for s, m in zip(scores, members) if not m]
    n_in, n_out = len(s_in), len(s_out)
    by_out = sorted(s_out, reverse=True) + [-math.inf]  # rank k: above the (k+1)-th largest non-member
    by_in = [-math.inf] + sorted(s_in)  # rank j: above the j-th smallest member
    thresholds = [by_out[k] for k in rank_grid(n_out)] + [by_in[j] for j in rank_grid(n_in)]
    a = (1 - level) / (2 * len(thresholds))
    best = 0.0
    for t in thresholds:
        tp = sum(s > t for s in s_in)
        fp = sum(s > t for s in s_out)
        lo = 0.0 if tp == 0 else beta.ppf(a, tp, n_in - tp + 1)
        hi = 1.0 if fp == n_out else beta.ppf(1 - a, fp + 1, n_out - fp)
        if lo - delta > 0:
            best = max(best, math.log((lo - delta) / hi))
        if 1 - hi - delta > 0 and lo < 1:
            best = max(best, math.log((1 - hi - delta) / (1 - lo)))
    return best


def test_rank_grid_is_geometric_from_both_ends():
    g = rank_grid(450)
    assert g[0] == 0 and g[-1] == 450 and list(g[:8]) == list(range(8)) and list(g[-8:]) == list(range(443, 451))
    inner = g[(g > 8) & (g < 225)]
    assert (np.diff(inner) >= 1).all() and (inner[1:] / inner[:-1] <= 1.34).all()
    assert 40 <= g.size <= 60 and rank_grid(10).tolist() == list(range(11))


def test_clopper_pearson_matches_scipy_beta():
    k = np.arange(0, 21)
    lo = clopper_pearson(k, 20, 0.01, upper=False)
    hi = clopper_pearson(k, 20, 0.01, upper=True)
    assert lo[0] == 0.0 and hi[-1] == 1.0
    np.testing.assert_allclose(lo[1:], beta.ppf(0.01, k[1:], 21 - k[1:]), rtol=1e-12)
    np.testing.assert_allclose(hi[:-1], beta.ppf(0.99, k[:-1] + 1, 20 - k[:-1]), rtol=1e-12)
    # k = 0 upper bound in closed form: 1 − α^(1/n)
    assert hi[0] == pytest.approx(1 - 0.01 ** (1 / 20), rel=1e-10)


def test_eps_matches_hand_computation():
    rng = np.random.default_rng(3)
    members = rng.random(120) < 0.5
    scores = np.round(members * 2.5 + rng.normal(size=120), 1)  # rounded: ties on purpose
    for delta in (0.0, 1e-3, 0.05):
        got = epsilon_lower_bound(scores, members, delta)
        assert got.eps_lb == pytest.approx(_hand_eps(scores, members, delta, 0.95), rel=1e-9, abs=1e-12)
        assert got.eps_lb > 0.5  # strong signal: the check above is not 0 == 0
        assert got.n_thresholds == rank_grid((~members).sum()).size + rank_grid(members.sum()).size


def test_eps_perfect_separation_closed_form():
    # n members all above n non-members: at k = 0, tp = n, fp = 0, so with a = 0.05/(2K)
    # TPR_low = a^(1/n) and FPR_high = 1 − a^(1/n); δ = 0 makes both terms equal.
    n = 50
    scores = np.r_[np.ones(n), np.zeros(n)]
    members = np.r_[np.ones(n, bool), np.zeros(n, bool)]
    a = 0.05 / (2 * 2 * rank_grid(n).size)
    r = a ** (1 / n)
    got = epsilon_lower_bound(scores, members, 0.0)
    assert got.eps_lb == pytest.approx(math.log(r / (1 - r)), rel=1e-9)
    assert (got.tp, got.fp, got.n_in, got.n_out) == (n, 0, n, n)
    assert got.eps_point == math.inf


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000), st.integers(4, 80), st.floats(0.0, 3.0), st.sampled_from([0.0, 1e-4, 0.02]))
def test_eps_lb_never_exceeds_point_estimate_bound(seed, n, signal, delta):
    rng = np.random.default_rng(seed)
    members = rng.random(n) < 0.5
    members[0], members[1] = True, False
    scores = members * signal + rng.normal(size=n)
    got = epsilon_lower_bound(scores, members, delta)
    assert 0.0 <= got.eps_lb <= got.eps_point


def test_no_signal_gives_zero_in_95pct_of_draws():
    zeros = 0
    for seed in range(200):
        rng = np.random.default_rng(seed)
        members = rng.random(400) < 0.5
        zeros += epsilon_lower_bound(rng.normal(size=400), members, 1e-3).eps_lb == 0.0
    assert zeros >= 190


def test_eps_summary_aggregates_targets_and_default_delta():
    rng = np.random.default_rng(1)
    members = rng.random((3, 60)) < 0.5
    scores = members * 3.0 + rng.normal(size=(3, 60))
    out = epsilon_summary(scores, members)
    per = [epsilon_lower_bound(scores[i], members[i], 1 / members[i].sum()).eps_lb for i in range(3)]
    assert out["eps_lb_per_target"] == pytest.approx(per)
    assert out["eps_lb"] == pytest.approx(np.mean(per))
    assert out["eps_lb_settings"]["delta"] == pytest.approx([1 / members[i].sum() for i in range(3)])
    assert len(out["eps_lb_counts"]["tp"]) == 3


def test_eps_bad_input_is_one_clear_error():
    with pytest.raises(BnmemError):
        epsilon_lower_bound(np.zeros(3), np.zeros(4, bool), 0.0)
    with pytest.raises(BnmemError):
        epsilon_lower_bound(np.zeros(3), np.zeros(3, bool), 1.5)


# ---------------------------------------------------------------- memorization scores

def _keep(m, n, seed=0):
    rng = np.random.default_rng(seed)
    return np.argsort(rng.random((m, n)), axis=0) < m // 2


def test_constructed_memorizer_gives_one_and_identical_gives_zero():
    m, n, v, classes = 8, 30, 3, 10
    keep = _keep(m, n)
    given_y = np.arange(n) % classes
    original = (given_y + 1) % classes
    # IN: the model answers the given (flipped) label; OUT: the original one.
    pred = np.where(keep[:, :, None], given_y[None, :, None], original[None, :, None]).repeat(v, axis=2)
    r = mem_scores(top1_values(pred, given_y), keep)
    np.testing.assert_array_equal(r["mem"], np.ones(n))
    # Newcombe by hand: Wilson at p = 1 (p = 0) with n = 4 has lower (upper) end 4/(4+z²) (z²/(4+z²)).
    z2 = 1.959963984540054 ** 2
    gap = 1 - 4 / (4 + z2)
    np.testing.assert_allclose(r["ci_low"], 1 - math.sqrt(2) * gap, rtol=1e-12)
    np.testing.assert_allclose(r["ci_high"], 1.0, rtol=1e-12)
    same = np.broadcast_to(given_y[None, :, None], pred.shape)
    np.testing.assert_array_equal(mem_scores(top1_values(same, given_y), keep)["mem"], np.zeros(n))
    phi = np.random.default_rng(2).normal(size=(1, n, v)).repeat(m, axis=0)  # identical φ IN and OUT
    np.testing.assert_allclose(mem_scores(confidence_values(phi), keep)["mem"], 0.0, atol=1e-15)


def test_vectorized_equals_loop_and_leave_one_out():
    rng = np.random.default_rng(5)
    m, n = 9, 40
    keep = rng.random((m, n)) < 0.5
    keep[0], keep[1] = True, False  # every example IN and OUT at least once
    values = confidence_values(rng.normal(size=(m, n, 4)) * 3)
    np.testing.assert_allclose(mem_scores(values, keep)["mem"], mem_scores_loop(values, keep), rtol=1e-12)
    loo = leave_one_model_out(values, keep)
    for k in range(m):
        rest = [i for i in range(m) if i != k]
        np.testing.assert_allclose(loo[k], mem_scores_loop(values[rest], keep[rest]), rtol=1e-12)


def test_confidence_is_sigmoid_of_phi():
    phi = np.array([[[0.0, 40.0, -40.0]]])
    assert confidence_values(phi)[0, 0] == pytest.approx((0.5 + 1 / (1 + math.exp(-40)) + 1 / (1 + math.exp(40))) / 3)


def test_interval_contains_estimate_and_narrows_with_models():
    rng = np.random.default_rng(0)
    values = (rng.random((64, 50)) < 0.7).astype(float)
    wide = mem_scores(values[:8], _keep(8, 50))
    narrow = mem_scores(values, _keep(64, 50))
    for r in (wide, narrow):
        assert (r["ci_low"] <= r["mem"]).all() and (r["mem"] <= r["ci_high"]).all()
    assert (narrow["ci_high"] - narrow["ci_low"]).mean() < (wide["ci_high"] - wide["ci_low"]).mean()


def test_subset_summary_and_top_k_overlap():
    mem = np.array([0.9, 0.1, 0.6, np.nan, 0.2])
    s = subset_summary(mem, {"all": np.ones(5, bool), "odd": np.array([0, 1, 0, 1, 0], bool)})
    assert s["all"] == {"mean": pytest.approx(0.45), "frac_above_half": 0.5, "n": 4}
    assert s["odd"]["n"] == 1 and s["odd"]["frac_above_half"] == 0.0
    assert top_k_overlap(mem, mem, 2) == 1.0
    assert top_k_overlap(mem, np.array([0.0, 1.0, 0.0, 0.0, 0.9]), 2) == 0.0
    assert top_k_overlap(mem, np.array([0.95, 1.0, 0.0, 0.0, 0.0]), 2) == 0.5


# ---------------------------------------------------------------- the lira lens

@pytest.fixture(scope="module")
def tiny_lira(tmp_path_factory):
    from bnmem.config import DataConfig, TrainConfig
    from bnmem.lenses.lira import LiraConfig, run_lira

    out = tmp_path_factory.mktemp("memeps_lira")
    cfg = LiraConfig(data=DataConfig(dataset="digits", label_noise=0.05, seed=0), norms=["batch", "none"],
                     shadow_models=6, chunk_size=6, train=TrainConfig(epochs=4))
    return out, run_lira(cfg, out, progress=False)


def test_lira_saves_scores_with_indices_and_a_memorization_block(tiny_lira):
    out, res = tiny_lira
    for norm in ("batch", "none"):
        saved = np.load(out / norm / "mem_scores.npz")
        keep = np.load(out / norm / "keep.npy")
        phi = np.load(out / norm / "phi.npy").astype(np.float64) + np.load(out / norm / "phi_lo.npy")
        np.testing.assert_array_equal(saved["index"], np.arange(keep.shape[1]))
        slow = mem_scores_loop(1 / (1 + np.exp(-phi)).mean(axis=2), keep)
        np.testing.assert_allclose(saved["mem_conf"], slow, rtol=1e-9, atol=1e-12)
        assert (saved["mem_conf_low"] <= saved["mem_conf"]).all() and (saved["n_in"] == 3).all()
        pred = np.load(out / norm / "pred.npy")  # the query records predicted classes per model, example, view
        assert pred.dtype == np.int16 and pred.shape == phi.shape
        np.testing.assert_allclose(saved["mem_top1"], mem_scores_loop(top1_values(pred, saved["labels"]), keep),
                                   rtol=1e-12)
    block = res["memorization"]
    assert set(block["by_norm"]["batch"]["conf"]) == {"all", "clean", "flipped", "ood"}
    assert block["by_norm"]["batch"]["conf"]["flipped"]["n"] == 45
    p = block["paired"]["batch-none"]["conf"]["all"]
    assert p["ci_low"] <= p["mean"] <= p["ci_high"] and p["unit"] == "models"
    for fig in ("mem_gallery.png", "mem_scores.png"):
        assert (out / fig).stat().st_size > 5_000
    eps = res["batch"]["online"]["all"]
    assert len(eps["eps_lb_per_target"]) == 6 and all(e >= 0 for e in eps["eps_lb_per_target"])


def test_report_shows_memorization_scores_and_eps_lb_as_descriptive_tables(tiny_lira, tmp_path):
    from bnmem.report.build import build_report

    out, res = tiny_lira
    rep = build_report(out, tmp_path)
    md = rep.markdown.read_text()
    assert "Per-example memorization scores (descriptive)" in md and "Empirical ε lower bounds (descriptive)" in md
    assert res["memorization"]["variants"] == ["top1", "conf"]  # the report shows top-1 when predictions exist
    jack = res["memorization"]["paired"]["batch-none"]["top1"]["flipped"]
    assert f"{jack['mean']:+.3f} [{jack['ci_low']:+.3f}, {jack['ci_high']:+.3f}] (jackknife over models)" in md
    eps = res["batch"]["online"]["outliers"]["eps_lb"]
    assert f"| batch | online | outliers | {eps:.2f} |" in md
    html = rep.html.read_text()
    assert 'alt="lira: mem_gallery.png"' in html and 'alt="lira: mem_scores.png"' in html
    assert not any("ε" in c.title or "Feldman" in c.title for c in rep.claims)  # descriptive: no verdict


def test_predictions_match_the_query_accuracy_and_old_queries_are_redone_with_phi_unchanged(tiny_lira, tmp_path):
    import json
    import shutil

    from bnmem.executors.local import LocalExecutor
    from bnmem.lenses.lira import LiraConfig
    from bnmem.shadow.memscores import norm_mem_scores
    from bnmem.shadow.query import query_models

    out, _ = tiny_lira
    norm_dir = tmp_path / "batch"
    shutil.copytree(out / "batch", norm_dir)
    info = json.loads((norm_dir / "query.json").read_text())
    pred, keep = np.load(norm_dir / "pred.npy"), np.load(norm_dir / "keep.npy")
    labels = np.load(norm_dir / "labels.npy")
    ident = info["settings"]["views"].index("identity")
    for m in range(keep.shape[0]):
        assert info["accuracy"]["train_in"][m] == pytest.approx((pred[m, keep[m], ident] == labels[keep[m]]).mean())
    # A directory queried before predictions were recorded: no pred.npy, and "pred" not in the stored list.
    before = {f: (norm_dir / f).read_bytes() for f in ("phi.npy", "phi_lo.npy", "population_phi.npy")}
    (norm_dir / "pred.npy").unlink()
    info["settings"]["stored"].remove("pred")
    (norm_dir / "query.json").write_text(json.dumps(info))
    for marker in (norm_dir / "query").glob("*.json"):  # the chunk markers an earlier query left
        chunk = json.loads(marker.read_text())
        chunk["settings"]["stored"].remove("pred")
        marker.write_text(json.dumps(chunk))
    old = norm_mem_scores(norm_dir)
    assert np.isnan(old["mem_top1"]).all() and np.isfinite(old["mem_conf"]).all()
    cfg = LiraConfig.model_validate(json.loads((out / "config.json").read_text()))
    query_models(cfg, "batch", norm_dir, LocalExecutor(progress=False))
    np.testing.assert_array_equal(np.load(norm_dir / "pred.npy"), pred)
    assert all((norm_dir / f).read_bytes() == b for f, b in before.items())


def test_report_interval_uses_replicates_as_the_unit_when_there_are_several(tiny_lira, tmp_path):
    import shutil

    from bnmem.report.memeps import _paired_cell, _per_example_diffs
    from bnmem.stats import replicated_difference

    out, res = tiny_lira
    second = tmp_path / "r1"
    for norm in ("batch", "none"):
        (second / norm).mkdir(parents=True)
        shutil.copy(out / norm / "mem_scores.npz", second / norm / "mem_scores.npz")
    with np.load(second / "batch" / "mem_scores.npz") as z:  # a second replicate: BN memorizes 0.1 more
        arrays = {k: z[k] for k in z.files}
    arrays["mem_top1"] = arrays["mem_top1"] + 0.1
    np.savez(second / "batch" / "mem_scores.npz", **arrays)
    blocks = [(out, res["memorization"]), (second, res["memorization"])]
    diffs = [_per_example_diffs(path, "batch", "none", "top1") for path, _ in blocks]
    text = _paired_cell(diffs, blocks, "batch", "none", "top1", "all")
    d0 = np.load(out / "batch" / "mem_scores.npz")["mem_top1"] - np.load(out / "none" / "mem_scores.npz")["mem_top1"]
    pd = replicated_difference([d0, d0 + 0.1], within_unit="examples", within_independent=False)
    assert pd.n == 2 and pd.mean == pytest.approx(d0.mean() + 0.05)
    assert text == f"{pd.mean:+.3f} [{pd.ci_low:+.3f}, {pd.ci_high:+.3f}] (2 replicates)"


def test_lira_summary_table_has_eps_lb_per_norm(tiny_lira):
    from bnmem.lenses.lira.run import summary_table

    out, res = tiny_lira
    text = summary_table(res)
    assert "ε_lb batch" in text and "ε_lb none" in text
    row = next(line for line in text.splitlines() if line.split()[:2] == ["online", "all"])
    assert row.split()[-2:] == [f"{res[n]['online']['all']['eps_lb']:.2f}" for n in ("batch", "none")]
