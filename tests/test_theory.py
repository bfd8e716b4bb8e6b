"""The toy model of bnmem.theory: the (γ/σ)² derivation against measured one-step margin changes,
and claim 5b's counterfactual (BN's (w, γ, β) step vs the function-matched plain model's (w~, c~) step).

Tolerances: in the regime where the derivation's assumptions hold (batch statistics
frozen within the step, small learning rate) the median relative error of the
measured amplification vs (γ/σ)² must be below 5% (it is ~0.2% at the defaults);
the real BN step vs the refined prediction (γ/σ)²·ρ likewise.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from bnmem import io
from bnmem.errors import BnmemError
from bnmem.theory import (
    TheoryConfig,
    bn_forward,
    counterfactual_run,
    counterfactual_step,
    init_bn_params,
    live_projection_factor,
    make_toy_data,
    matched_plain_params,
    plain_forward,
    probe_state,
    ratio_stats,
    run_theory,
    simulate,
    smooth_margin,
    summarize,
)


@pytest.fixture(scope="module")
def default_run() -> tuple[TheoryConfig, dict, dict]:
    """One simulation at the default settings, shared by the trajectory tests (~2 s)."""
    cfg = TheoryConfig()
    sim = simulate(cfg)
    return cfg, sim, summarize(sim)


def _mid_training_state(cfg: TheoryConfig, steps: int = 30):
    """A BN state after a few GD steps (γ ≠ 1, σ moved), for single-state checks."""
    data = make_toy_data(cfg)
    p = init_bn_params(cfg)
    for _ in range(steps):
        q = {k: v.clone().requires_grad_(True) for k, v in p.items()}
        loss = F.cross_entropy(bn_forward(q, data.x, cfg.bn_eps)[0], data.y)
        grads = torch.autograd.grad(loss, list(q.values()))
        p = {k: (v - cfg.lr * g).detach() for (k, v), g in zip(q.items(), grads)}
    return data, p


def test_matched_plain_model_computes_the_bn_function() -> None:
    cfg = TheoryConfig()
    data, p = _mid_training_state(cfg)
    logits, mu, sigma = bn_forward(p, data.x, cfg.bn_eps)
    q = matched_plain_params(p, mu, sigma)
    assert torch.allclose(plain_forward(q, data.x), logits, rtol=0, atol=1e-12)


def test_frozen_ratio_converges_to_gamma_over_sigma_squared() -> None:
    """First order: the frozen-statistics ratio → (γ/σ)² as the probe lr → 0."""
    cfg = TheoryConfig()
    data, p = _mid_training_state(cfg)
    lrs = [1e-6, 1e-4, 1e-2]
    probe, _ = probe_state(p, data.x, data.y, data.outlier_idx, cfg.bn_eps, lrs, 1e-2)
    errs = [np.median(np.abs(probe.ratio_frozen[lr] - probe.amp_pred)) / probe.amp_pred for lr in lrs]
    assert errs[0] < 1e-5
    assert errs[0] < errs[1] < errs[2]
    assert probe.amp_pred > 1.0  # this toy sits in the amplifying regime γ/σ > 1


def test_rho_closed_form_matches_autograd_through_batch_statistics() -> None:
    """Oracle: ρ from the closed form vs the slow first-order ratio
    (∇_w m_BN · ∇_w L_BN) / ((γ/σ)² ∇_w̃ m̃ · ∇_w̃ L̃), all by autograd through real BN."""
    cfg = TheoryConfig(outlier_kind="ood", seed=3)
    data, p = _mid_training_state(cfg)
    x, y, idx = data.x, data.y, data.outlier_idx
    w = p["w"].clone().requires_grad_(True)
    bn = dict(p, w=w)
    logits, mu, sigma = bn_forward(bn, x, cfg.bn_eps)
    g_loss_bn = torch.autograd.grad(F.cross_entropy(logits, y), w, retain_graph=True)[0]
    q = matched_plain_params(p, mu.detach(), sigma.detach())
    wq = q["w"].clone().requires_grad_(True)
    logits_q = plain_forward(dict(q, w=wq), x)
    g_loss_plain = torch.autograd.grad(F.cross_entropy(logits_q, y), wq, retain_graph=True)[0]
    amp = float((p["gamma"] / sigma.detach()) ** 2)
    slow = []
    for j, i in enumerate(idx):
        gm_bn = torch.autograd.grad(smooth_margin(logits, y)[i], w, retain_graph=True)[0]
        gm_plain = torch.autograd.grad(smooth_margin(logits_q, y)[i], wq, retain_graph=True)[0]
        slow.append(float(gm_bn @ g_loss_bn) / (amp * float(gm_plain @ g_loss_plain)))
    xhat = (F.conv1d(x[:, None], p["w"].view(1, 1, -1)).squeeze(1) - mu.detach()) / sigma.detach()
    fast = live_projection_factor(x, y, idx, logits.detach(), p["A"], xhat)
    np.testing.assert_allclose(fast, slow, rtol=1e-8, atol=1e-12)


def test_measured_matches_predicted_at_small_lr(default_run) -> None:
    _, _, summary = default_run
    amp = summary["amplification"]
    assert amp["frozen_stats_median_rel_error"] < 0.05
    assert amp["live_vs_gamma_sigma_sq_rho_median_rel_error"] < 0.05
    assert amp["matched_state_max_logit_gap"] < 1e-10
    # With moving statistics (γ/σ)² alone is not the real step's ratio: record, don't hide.
    assert amp["live_vs_gamma_sigma_sq_median_rel_error"] > 0.5


def test_error_grows_with_probe_lr(default_run) -> None:
    """Where the first-order assumption leaves: error rises with the step size.

    The frozen probe's error is checked over the first factors only: it peaks and
    falls back for huge steps (see the module docstring)."""
    _, _, summary = default_run
    sw = summary["lr_sweep"]
    frozen = sw["frozen_median_rel_error"][:4]
    live = sw["live_vs_gamma_sigma_sq_rho_median_rel_error"]
    assert all(a < b for a, b in zip(frozen, frozen[1:]))
    assert all(a < b for a, b in zip(live, live[1:]))
    assert live[-1] > 10 * live[1]  # far from first order at the largest probe lr


def test_outliers_drive_gamma_up(default_run) -> None:
    _, sim, summary = default_run
    g = summary["gamma"]
    assert g["with_outliers_final"] > g["without_outliers_final"] + 0.1
    assert g["growth_ratio_with_vs_without"] > 1.2
    assert g["gamma_over_sigma_with_outliers_final"] > g["gamma_over_sigma_without_outliers_final"]
    start = g["higher_with_outliers_from_step"]
    assert start is not None and start < len(sim["gamma"]) // 2
    assert np.all(sim["gamma"][start:] > sim["gamma_control"][start:])


def test_bn_fits_outliers_further(default_run) -> None:
    _, _, summary = default_run
    m = summary["margins"]
    assert m["bn_final_mean"] > m["plain_final_mean"]
    assert m["bn_final_outlier_acc"] == 1.0


def test_run_theory_writes_parseable_files_deterministically(tmp_path) -> None:
    cfg = TheoryConfig(steps=40, lr=0.05, n_outliers=3, seed=1, counterfactual_seeds=2)
    s1 = run_theory(cfg, tmp_path / "a")
    run_theory(cfg.model_copy(update={"plot": False}), tmp_path / "b")
    doc_a = json.loads((tmp_path / "a" / "theory.json").read_text())
    doc_b = json.loads((tmp_path / "b" / "theory.json").read_text())
    doc_a["config"].pop("plot"), doc_b["config"].pop("plot")
    assert doc_a == doc_b
    assert doc_a["lens"] == "theory" and doc_a["schema_version"] == 1
    assert doc_a["claims"]["5a"]["role"] == "derivation check"
    assert doc_a["summary"] == json.loads(json.dumps(s1))
    per_step = doc_a["per_step"]
    assert len(per_step["step"]) == 41
    assert np.array(per_step["measured_frozen"]).shape == (41, 3)
    assert len(per_step["gamma_without_outliers"]) == 41
    cf = doc_a["counterfactual"]
    assert cf["conditions"]["seeds"] == [1, 2] and cf["conditions"]["outlier_kinds"] == ["flip", "ood"]
    assert np.array(cf["per_run"]["ood"]["2"]["ratio"]).shape == (41, 3)
    assert cf["by_kind"]["flip"]["pooled"]["n_points"] == 2 * 41 * 3
    png = (tmp_path / "a" / "theory.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (tmp_path / "b" / "theory.png").exists()
    assert io.is_done(tmp_path / "a") and io.is_done(tmp_path / "b")
    assert not list(tmp_path.glob("*/*.tmp"))


def test_run_theory_resumes_only_an_identical_finished_simulation(tmp_path, monkeypatch) -> None:
    import bnmem.theory.run as run_mod

    cfg = TheoryConfig(steps=8, n_per_class=6, counterfactual_seeds=1, plot=False)
    first = run_theory(cfg, tmp_path)
    calls = []
    real = run_mod.simulate
    monkeypatch.setattr(run_mod, "simulate", lambda c: calls.append(c) or real(c))
    assert run_theory(cfg, tmp_path) == first and calls == []  # finished, same settings: skipped
    (tmp_path / io.DONE).unlink()  # as if killed before the marker: redone
    assert run_theory(cfg, tmp_path) == first and len(calls) == 1
    other = cfg.model_copy(update={"lr": 0.01})
    run_theory(other, tmp_path)  # other settings: simulated again, the folder now holds them
    assert len(calls) == 2
    assert json.loads((tmp_path / "theory.json").read_text())["config"]["lr"] == 0.01
    with_plot = other.model_copy(update={"plot": True})
    run_theory(with_plot, tmp_path)  # the figure is missing: redone to draw it
    assert len(calls) == 3 and (tmp_path / "theory.png").exists()
    run_theory(other, tmp_path)  # plot off, same simulation: nothing to do
    assert len(calls) == 3


@pytest.mark.parametrize(
    "kw",
    [{"steps": 0}, {"lr": -1.0}, {"lr": float("nan")}, {"n_outliers": 0}, {"n_outliers": 60},
     {"outlier_kind": "x"}, {"kernel_size": 32}, {"counterfactual_seeds": 0}, {"stepz": 3}],
)
def test_bad_config_is_a_one_line_user_error(kw) -> None:
    with pytest.raises(BnmemError) as e:
        TheoryConfig.from_options(**kw)
    assert len(str(e.value).splitlines()) == 1 and next(iter(kw)) in str(e.value)


def test_divergence_is_a_user_error(tmp_path) -> None:
    with pytest.raises(BnmemError, match="diverged"):
        run_theory(TheoryConfig(steps=60, lr=50.0, plot=False), tmp_path)
    assert not io.is_done(tmp_path)


# ----------------------------------------------------------------- claim 5b: the fair counterfactual


@pytest.mark.parametrize("kind", ["flip", "ood"])
def test_counterfactual_models_agree_at_start_and_step_on_the_same_data(kind) -> None:
    """Oracle: the plain model built by hand from w~ = γw/σ, c~ = β − γμ/σ computes the BN
    function (1e-10, float64); stepping each model by hand on the same (x, y) gives the
    margin changes counterfactual_step reports."""
    cfg = TheoryConfig(outlier_kind=kind, seed=2)
    data, p = _mid_training_state(cfg)
    x, y, idx, lr = data.x, data.y, data.outlier_idx, cfg.lr
    h = F.conv1d(x[:, None], p["w"].view(1, 1, -1)).squeeze(1)
    mu, sigma = h.mean(), torch.sqrt(h.var(unbiased=False) + cfg.bn_eps)
    plain = {"w": p["gamma"] * p["w"] / sigma, "c": p["beta"] - p["gamma"] * mu / sigma, "A": p["A"], "b": p["b"]}
    bn_logits = bn_forward(p, x, cfg.bn_eps)[0]
    assert (plain_forward(plain, x) - bn_logits).abs().max() < 1e-10
    assert abs(p["gamma"] - 1) > 0.05  # a state where γ has moved, so the map is not trivial

    def stepped(params, keys, forward):
        leaves = {k: v.clone().requires_grad_(k in keys) for k, v in params.items()}
        g = torch.autograd.grad(F.cross_entropy(forward(leaves), y), [leaves[k] for k in keys])
        new = dict(params, **{k: params[k] - lr * gk for k, gk in zip(keys, g)})
        return smooth_margin(forward(new).detach(), y)[idx] - smooth_margin(forward(params), y)[idx]

    dm_bn = stepped(p, ("w", "gamma", "beta"), lambda q: bn_forward(q, x, cfg.bn_eps)[0])
    dm_plain = stepped(plain, ("w", "c"), lambda q: plain_forward(q, x))
    cf = counterfactual_step(p, x, y, idx, cfg.bn_eps, lr)
    assert cf.match_gap < 1e-10
    np.testing.assert_allclose(cf.dm_bn, dm_bn.numpy(), rtol=1e-9, atol=1e-13)
    np.testing.assert_allclose(cf.dm_plain, dm_plain.numpy(), rtol=1e-9, atol=1e-13)
    np.testing.assert_allclose(cf.ratio, (dm_bn / dm_plain).numpy(), rtol=1e-9)
    assert cf.amp == pytest.approx(float((p["gamma"] / sigma) ** 2), rel=1e-12)
    # Another batch gives other margin changes: the comparison really depends on the data it is given.
    other = make_toy_data(cfg.model_copy(update={"seed": 7}))
    cf_other = counterfactual_step(p, other.x, other.y, idx, cfg.bn_eps, lr)
    assert not np.allclose(cf_other.dm_plain, cf.dm_plain)


def test_counterfactual_first_order_terms_match_small_steps() -> None:
    """The w, γ, β terms of -η∇m·∇L predict the finite step as η → 0 (errors shrink ~linearly)."""
    cfg = TheoryConfig(seed=4)
    data, p = _mid_training_state(cfg)
    errs = []
    for lr in (1e-2, 1e-4, 1e-6):
        cf = counterfactual_step(p, data.x, data.y, data.outlier_idx, cfg.bn_eps, lr)
        assert cf.bn_terms.shape == (3, cfg.n_outliers) and cf.plain_terms.shape == (2, cfg.n_outliers)
        errs.append(np.max(np.abs(cf.dm_bn - cf.first_order_bn) / np.abs(cf.first_order_bn)))
    assert errs[2] < 1e-4 and errs[0] > errs[1] > errs[2]


@pytest.mark.parametrize("kind", ["flip", "ood"])
def test_counterfactual_closed_form_terms_match_the_per_outlier_backward_loop(kind) -> None:
    """Oracle: the forward-mode closed forms of the w, γ, β (and w~, c~) first-order terms vs
    one backward pass per outlier and model (the former code path), float64, at a few states
    of a short run; every other field is the same computation in both paths (bitwise)."""
    cfg = TheoryConfig(steps=6, seed=5, outlier_kind=kind, n_outliers=5)
    data = make_toy_data(cfg)
    p = init_bn_params(cfg)
    for step in range(cfg.steps + 1):
        fast = counterfactual_step(p, data.x, data.y, data.outlier_idx, cfg.bn_eps, cfg.lr)
        slow = counterfactual_step(p, data.x, data.y, data.outlier_idx, cfg.bn_eps, cfg.lr, loop=True)
        for name in ("bn_terms", "plain_terms", "first_order_bn", "first_order_plain"):
            a, b = getattr(fast, name), getattr(slow, name)
            assert np.all(np.abs(b) > 1e-9), name  # no term near 0, so the relative check is meaningful
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=0, err_msg=f"{name} at step {step}")
        for name in ("dm_bn", "dm_plain", "ratio", "ratio_w_only", "dm_bn_w", "dm_plain_w"):
            np.testing.assert_array_equal(getattr(fast, name), getattr(slow, name), err_msg=name)
        assert fast.amp == slow.amp and fast.match_gap == slow.match_gap
        q = {k: v.clone().requires_grad_(True) for k, v in p.items()}
        g = torch.autograd.grad(F.cross_entropy(bn_forward(q, data.x, cfg.bn_eps)[0], data.y), list(q.values()))
        p = {k: (v - cfg.lr * gk).detach() for (k, v), gk in zip(q.items(), g)}


def test_counterfactual_run_trains_exactly_as_plain_gradient_descent() -> None:
    """The run reuses the counterfactual's BN gradient for its training step: the states it
    measures are, bitwise, those of plain full-batch GD on the BN model."""
    cfg = TheoryConfig(steps=8, seed=6)
    run = counterfactual_run(cfg)
    data = make_toy_data(cfg)
    p = init_bn_params(cfg)
    for step in range(cfg.steps + 1):
        cf = counterfactual_step(p, data.x, data.y, data.outlier_idx, cfg.bn_eps, cfg.lr)
        assert run["amp"][step] == cf.amp
        np.testing.assert_array_equal(run["dm_bn"][step], cf.dm_bn)
        q = {k: v.clone().requires_grad_(True) for k, v in p.items()}
        g = torch.autograd.grad(F.cross_entropy(bn_forward(q, data.x, cfg.bn_eps)[0], data.y), list(q.values()))
        p = {k: (v - cfg.lr * gk).detach() for (k, v), gk in zip(q.items(), g)}


def test_counterfactual_w_only_ratio_is_the_old_live_probe() -> None:
    """The old comparison (w only, real BN step) computed by both paths agrees."""
    cfg = TheoryConfig(seed=1, outlier_kind="ood")
    data, p = _mid_training_state(cfg)
    probe, _ = probe_state(p, data.x, data.y, data.outlier_idx, cfg.bn_eps, [cfg.lr], cfg.lr)
    cf = counterfactual_step(p, data.x, data.y, data.outlier_idx, cfg.bn_eps, cfg.lr)
    np.testing.assert_allclose(cf.ratio_w_only, probe.ratio_live[cfg.lr], rtol=1e-9)
    assert cf.amp == pytest.approx(probe.amp_pred, rel=1e-12)


def test_counterfactual_run_follows_the_bn_trajectory() -> None:
    """Its (γ/σ)² per step is the main simulation's (same BN run, same states)."""
    cfg = TheoryConfig(steps=25, seed=3)
    run = counterfactual_run(cfg)
    sim = simulate(cfg)
    assert run["ratio"].shape == (26, cfg.n_outliers)
    np.testing.assert_allclose(run["amp"], sim["amp_pred"], rtol=1e-10)
    assert np.max(run["match_gap"]) < 1e-10


def test_ratio_stats_on_known_inputs() -> None:
    """Ratios equal to (γ/σ)² give error 0, all within a factor 2, Spearman 1; halving
    them leaves the fraction (0.5 is inside); a factor 4 takes every point out."""
    amp = np.array([2.0, 4.0, 8.0, 16.0])
    ratio = np.repeat(amp[:, None], 3, axis=1)
    ones = np.ones_like(ratio)
    run = {"ratio": ratio, "amp": amp, "ratio_w_only": 0 * ratio, "first_order_bn": ratio,
           "first_order_plain": ones, "bn_terms": np.stack([ratio / 2, ratio / 4, ratio / 4], axis=1),
           "plain_terms": np.stack([ones / 2, ones / 2], axis=1), "dm_bn": ratio, "dm_plain": ones}
    st = ratio_stats(run)
    assert st["median_rel_error_vs_gamma_sigma_sq"] == 0 and st["fraction_within_factor_2_of_gamma_sigma_sq"] == 1
    assert st["spearman_ratio_vs_gamma_sigma_sq"] == pytest.approx(1.0)
    assert st["ratio"]["min"] == 2 and st["ratio"]["max"] == 16 and st["fraction_negative"] == 0
    assert st["w_term_share_of_bn_growth_median"] == pytest.approx(0.5)
    assert st["old_w_only_median_rel_error_vs_gamma_sigma_sq"] == pytest.approx(1.0)
    assert st["descriptive"]["fraction_bn_grows_margin_more"] == 1
    assert st["descriptive"]["rho_median"] == pytest.approx(1.0)  # w term = amp x plain w term
    assert ratio_stats({**run, "ratio": ratio / 2})["fraction_within_factor_2_of_gamma_sigma_sq"] == 1
    assert ratio_stats({**run, "ratio": -ratio})["fraction_within_factor_2_of_gamma_sigma_sq"] == 0
    assert ratio_stats({**run, "ratio": ratio / 4})["fraction_within_factor_2_of_gamma_sigma_sq"] == 0


def test_counterfactual_decomposition_identities() -> None:
    """At the matched state the β term of BN's first-order growth equals the plain model's
    c~ term (same feature gradient), and BN's w term is (γ/σ)²·ρ times the plain w~ term,
    with ρ from the closed form (an independent computation)."""
    cfg = TheoryConfig(seed=2, outlier_kind="ood")
    data, p = _mid_training_state(cfg, steps=60)
    x, y, idx = data.x, data.y, data.outlier_idx
    cf = counterfactual_step(p, x, y, idx, cfg.bn_eps, cfg.lr)
    np.testing.assert_allclose(cf.bn_terms[2], cf.plain_terms[1], rtol=1e-9, atol=1e-15)
    logits, mu, sigma = bn_forward(p, x, cfg.bn_eps)
    xhat = (F.conv1d(x[:, None], p["w"].view(1, 1, -1)).squeeze(1) - mu) / sigma
    rho = live_projection_factor(x, y, idx, logits, p["A"], xhat)
    np.testing.assert_allclose(cf.bn_terms[0], cf.amp * rho * cf.plain_terms[0], rtol=1e-8, atol=1e-15)
