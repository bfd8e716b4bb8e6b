"""Claim 7's per-example pushes on BN's γ against autograd on one example's own loss (float64), the
scale-invariance flag, the statistic, and the claim's evaluation on hand-made records."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from bnmem.config import DataConfig, ModelConfig
from bnmem.data import load_dataset
from bnmem.measure.gamma_push import _batch_order, affine_bn_layers, gamma_pushes, per_example_grads
from bnmem.measure.predict import bn_query_mode


@pytest.fixture(scope="module")
def setup():
    from bnmem.train.trainer import seeded_model

    ds = load_dataset(DataConfig(dataset="digits", label_noise=0.1, train_size=48, seed=0))
    model = seeded_model(ModelConfig(arch="lenet", norm="batch"), ds, 0).double()
    with torch.no_grad():  # γ of both signs (the sign convention is exercised) and β away from 0
        for _, m in affine_bn_layers(model):
            m.weight.copy_(torch.linspace(-1.5, 1.5, m.num_features, dtype=torch.float64))
            m.bias.copy_(torch.linspace(0.3, -0.2, m.num_features, dtype=torch.float64))
    return ds, model


def _own_loss_oracle(model, xb, yb, i):
    """The slow oracle: one backward of example i's own loss alone (batch statistics of the whole batch);
    per BN layer −sign(γ)·∂ℓ_i/∂γ, and ‖∇θ ℓ_i‖ over every parameter."""
    layers = affine_bn_layers(model)
    params = [p for p in model.parameters() if p.requires_grad]
    with bn_query_mode(model, "batch"):
        loss_i = F.cross_entropy(model(xb), yb, reduction="none")[i]
        grads = torch.autograd.grad(loss_i, params)
    by_id = {id(p): g for p, g in zip(params, grads)}
    push = {n: (-torch.sign(m.weight.detach()) * by_id[id(m.weight)]).numpy() for n, m in layers}
    return push, float(torch.sqrt(sum(g.pow(2).sum() for g in grads)))


def _batches(ds, batch_size):
    return [torch.as_tensor(b) for b in _batch_order(ds.n_train, batch_size, 0)]


@pytest.mark.parametrize("method", ["stacked", "rows"])
def test_one_examples_push_behind_a_bn_is_the_gradient_of_its_own_loss(setup, method):
    """norm1 is followed by three more BN layers: the lens's push of one outlier (the outlier group reduced to
    that example; both paths of the pass) and the per-row path both equal autograd on that example's loss alone,
    in every layer; the batch is one of two normalization batches."""
    ds, model = setup
    x, y = ds.x_train.double(), ds.y_train
    b = _batches(ds, 24)[1]
    pos = int(np.flatnonzero(ds.is_outlier[b.numpy()])[0])
    oracle, norm = _own_loss_oracle(model, x[b], y[b], pos)
    mask = np.zeros(ds.n_train, dtype=bool)
    mask[int(b[pos])] = True
    rec = gamma_pushes(model, x, y, mask, batch_size=24, norm_sample=None, method=method)
    rows = per_example_grads(model, x[b], y[b], [pos])
    for n, _ in affine_bn_layers(model):
        assert np.abs(oracle[n]).max() > 1e-3  # a test that can fail: the push is not zero
        np.testing.assert_allclose(rec["layers"][n]["outlier"], oracle[n], rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(rows["push"][n][0], oracle[n], rtol=1e-9, atol=1e-12)
    assert rec["grad_norm"]["outlier"] == pytest.approx(norm, rel=1e-9)
    assert rows["grad_norm"][0] == pytest.approx(norm, rel=1e-9)


def test_plan_3_row_attribution_differs_from_the_oracle_where_a_bn_follows(setup):
    """The planted bug: row i of ∂(Σ_j ℓ_j)/∂y credited to example i. Behind a BN (norm1..3) it is far from
    example i's own gradient; in the last BN layer (nothing couples the examples after it) it is the same."""
    ds, model = setup
    x, y = ds.x_train.double(), ds.y_train
    b = _batches(ds, ds.n_train)[0]
    pos = int(np.flatnonzero(ds.is_outlier[b.numpy()])[0])
    oracle, _ = _own_loss_oracle(model, x[b], y[b], pos)
    mask = np.zeros(ds.n_train, dtype=bool)
    mask[int(b[pos])] = True
    rec = gamma_pushes(model, x, y, mask, batch_size=ds.n_train)
    names = [n for n, _ in affine_bn_layers(model)]
    for n in names[:-1]:
        gap = np.abs(np.array(rec["layers"][n]["outlier_rows"]) - oracle[n]).max()
        assert gap > 0.1 * np.abs(oracle[n]).max(), n
    np.testing.assert_allclose(rec["layers"][names[-1]]["outlier_rows"], oracle[names[-1]], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("method", ["stacked", "rows"])
def test_group_sums_gradient_norms_and_untouched_model(setup, method):
    """Everyone's push is −sign(γ)·∂(Σ_i ℓ_i)/∂γ summed over the batches; the gradient-norm sums are the sums of
    the per-example norms; the model's weights, buffers, gradients and mode and the RNG are unchanged."""
    ds, model = setup
    x, y = ds.x_train.double(), ds.y_train
    state = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()
    model.train()
    rec = gamma_pushes(model, x, y, ds.is_outlier, batch_size=24, norm_sample=None, method=method)
    for k, v in model.state_dict().items():
        assert torch.equal(v, state[k]), k
    assert torch.equal(torch.get_rng_state(), rng) and model.training and all(m.training for m in model.modules())
    assert all(p.grad is None for p in model.parameters())
    layers = affine_bn_layers(model)
    expect = {n: 0.0 for n, _ in layers}
    norms = np.zeros(ds.n_train)
    for b in _batches(ds, 24):
        with bn_query_mode(model, "batch"):
            loss = F.cross_entropy(model(x[b]), y[b], reduction="sum")
            grads = torch.autograd.grad(loss, [m.weight for _, m in layers])
        for (n, m), g in zip(layers, grads):
            expect[n] = expect[n] + (-torch.sign(m.weight.detach()) * g).numpy()
        norms[b.numpy()] = per_example_grads(model, x[b], y[b])["grad_norm"]
    for n, _ in layers:
        np.testing.assert_allclose(rec["layers"][n]["all"], expect[n], rtol=1e-9, atol=1e-12)
    assert rec["grad_norm"]["outlier"] == pytest.approx(norms[ds.is_outlier].sum(), rel=1e-9)
    assert rec["grad_norm"]["clean_sampled"] == pytest.approx(norms[~ds.is_outlier].sum(), rel=1e-9)
    sampled = gamma_pushes(model, x, y, ds.is_outlier, batch_size=24, norm_sample=5)["grad_norm"]
    assert sampled["n_clean_sampled"] == 5 and 0 < sampled["clean_sampled"] < rec["grad_norm"]["clean_sampled"]


def _flat(rec: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in rec.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}/"))
        else:
            out[prefix + k] = np.asarray(v, dtype=float) if v is not None else None
    return out


@pytest.mark.parametrize("batch_size,norm_sample", [(24, None), (16, 7), (48, 5)])
def test_stacked_pass_equals_the_per_group_pass_in_float64(setup, batch_size, norm_sample):
    """ORACLE for the fast path: every number of the stacked pass (one batched backward per batch) equals the
    per-group pass (a batched backward per group plus one Jacobian row per example) to float64 round-off; the
    radial component, ≈ 0 by scale invariance, to round-off of its scale ‖(γ, β)‖·‖∇‖."""
    ds, model = setup
    x, y = ds.x_train.double(), ds.y_train
    fast = _flat(gamma_pushes(model, x, y, ds.is_outlier, batch_size, seed=3, norm_sample=norm_sample,
                              method="stacked"))
    slow = _flat(gamma_pushes(model, x, y, ds.is_outlier, batch_size, seed=3, norm_sample=norm_sample, method="rows"))
    assert fast.keys() == slow.keys() and fast["outlier_acc"] == slow["outlier_acc"]
    for k, v in slow.items():
        if k.endswith("radial"):
            layer = k.rsplit("/", 1)[0]
            scale = slow[f"{layer}/param_norm"] * slow[f"{layer}/grad_norm"]
            assert abs(fast[k] - v) <= 1e-12 * scale, k
        elif k not in ("outlier_acc", "version"):
            assert np.abs(v).max() > 0 or k.startswith("grad_norm/n_"), k  # a comparison that can fail
            np.testing.assert_allclose(fast[k], v, rtol=1e-10, atol=1e-14, err_msg=k)


def test_stacked_self_check_falls_back_on_a_wrong_answer(setup, monkeypatch):
    """The per-call check of one example's norm against the per-row path catches a wrong stacked result (here:
    norms doubled): auto warns and measures by the per-group path; an explicit 'stacked' raises."""
    from bnmem.measure import batch_rows
    from bnmem.measure.ghost import GhostUnsupported

    ds, model = setup
    x, y = ds.x_train.double(), ds.y_train
    expect = gamma_pushes(model, x, y, ds.is_outlier, batch_size=24, method="rows")
    real = batch_rows.StackedRows.sq_norms
    monkeypatch.setattr(batch_rows.StackedRows, "sq_norms", lambda self: 4 * real(self))
    with pytest.warns(UserWarning, match="stacked rows not applicable"):
        got = gamma_pushes(model, x, y, ds.is_outlier, batch_size=24)
    assert got == expect
    with pytest.raises(GhostUnsupported, match="disagree"):
        gamma_pushes(model, x, y, ds.is_outlier, batch_size=24, method="stacked")


def test_a_model_the_stacked_path_does_not_cover_takes_the_per_group_path():
    """A LayerNorm has no per-row identity in batch_rows: auto takes the per-group path without a warning,
    an explicit 'stacked' is refused with one clear line, an unknown method too."""
    import warnings

    from torch import nn

    from bnmem.errors import BnmemError

    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 12), nn.BatchNorm1d(12), nn.LayerNorm(12), nn.ReLU(),
                          nn.Linear(12, 10)).double()
    x, y = torch.randn(20, 1, 8, 8, dtype=torch.float64), torch.arange(20) % 10
    mask = np.arange(20) % 5 == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        auto = gamma_pushes(model, x, y, mask, batch_size=10)
    assert auto == gamma_pushes(model, x, y, mask, batch_size=10, method="rows")
    with pytest.raises(BnmemError, match="stacked path does not cover"):
        gamma_pushes(model, x, y, mask, batch_size=10, method="stacked")
    with pytest.raises(BnmemError, match="unknown push method"):
        gamma_pushes(model, x, y, mask, batch_size=10, method="fast")


def test_auto_takes_the_stacked_path_only_where_it_was_measured_faster():
    """LeNet and an MLP on 8x8 digits: stacked; ResNet-20 on 8x8 (3x3 kernels: its dense convs cost 7x the conv):
    the per-group path. Forced onto ResNet-20 (a first conv without bias, residual adds, 19 BN layers), the
    stacked path still equals the per-group path in float64."""
    from bnmem.measure.batch_rows import stacked_pays
    from bnmem.models import build_model

    torch.manual_seed(0)
    x = torch.randn(16, 1, 8, 8, dtype=torch.float64)
    assert stacked_pays(build_model("lenet", (1, 8, 8), 10, "batch"), x)
    assert stacked_pays(build_model("mlp", (1, 8, 8), 10, "batch"), x)
    resnet = build_model("resnet20", (1, 8, 8), 10, "batch").double()
    assert not stacked_pays(resnet, x)
    with torch.no_grad():  # away from the initialization's symmetric values
        for p in resnet.parameters():
            p.add_(0.05 * torch.randn_like(p))
    y, mask = torch.arange(16) % 10, np.arange(16) % 4 == 0
    fast = _flat(gamma_pushes(resnet, x, y, mask, batch_size=8, method="stacked"))
    slow = _flat(gamma_pushes(resnet, x, y, mask, batch_size=8, method="rows"))
    for k, v in slow.items():
        if not k.endswith("radial") and k not in ("outlier_acc", "version"):
            np.testing.assert_allclose(fast[k], v, rtol=1e-9, atol=1e-14, err_msg=k)


def test_a_real_sgd_step_moves_abs_gamma_with_the_push_sign(setup):
    """The sign convention: a small SGD step on the summed loss changes |γ_c| with the sign of the total push."""
    ds, model = setup
    import copy

    x, y = ds.x_train.double(), ds.y_train
    rec = gamma_pushes(model, x, y, ds.is_outlier, batch_size=ds.n_train)
    stepped = copy.deepcopy(model)
    b = _batches(ds, ds.n_train)[0]
    with bn_query_mode(stepped, "batch"):
        loss = F.cross_entropy(stepped(x[b]), y[b], reduction="sum")
        stepped.zero_grad()
        loss.backward()
    with torch.no_grad():
        for (n, m), (_, s) in zip(affine_bn_layers(model), affine_bn_layers(stepped)):
            s.weight -= 1e-6 * s.weight.grad
            change = (s.weight.abs() - m.weight.abs()).numpy()
            push = np.array(rec["layers"][n]["all"])
            big = np.abs(push) > 1e-6
            assert big.any() and np.all(np.sign(change[big]) == np.sign(push[big])), n


def test_scale_invariance_flag_fires_on_inner_layers_not_on_the_last(setup):
    """Layers another BN follows (norm1..3) have a radial cosine ≈ 0 (BN's eps leaves ~1e-5); the last
    (norm4) does not; the report's flag follows the plan's bound."""
    from bnmem.report.claims.claim7 import scale_invariant

    ds, model = setup
    rec = gamma_pushes(model, ds.x_train.double(), ds.y_train, ds.is_outlier, batch_size=24)
    cos = {n: abs(r["radial"]) / (r["param_norm"] * r["grad_norm"]) for n, r in rec["layers"].items()}
    assert scale_invariant(cos) == ["norm1", "norm2", "norm3"]
    assert cos["norm4"] > 1e-2 and max(cos[n] for n in ("norm1", "norm2", "norm3")) < 1e-4


def test_push_excess_arithmetic():
    from bnmem.report.claims.claim7 import push_excess, window

    def ep(acc, p_o, p, g_o=10.0, g=100.0):
        return {"outlier_acc": acc, "layers": {"a": {"outlier": p_o, "all": p}, "b": {"outlier": 99.0, "all": 1.0}},
                "grad_norm_outlier": g_o, "grad_norm_all": g}

    eps = [ep(0.1, 1.3, 10.0), ep(0.2, 1.3, 10.0), ep(0.9, 0.5, 10.0)]
    before = push_excess(window(eps, False), ["a"])
    # P_O = 2.6, P = 20, G_O = 20, G = 200: share 0.13 over share 0.1, minus 1
    assert before["excess"] == pytest.approx(0.3) and before["push_share"] == pytest.approx(0.13)
    assert push_excess(window(eps, True), ["a"])["excess"] == pytest.approx(-0.5)
    # total push down, outliers push up: the excess stays positive (their push per gradient exceeds everyone's)
    assert push_excess([ep(0.1, 1.0, -10.0)], ["a"])["excess"] == pytest.approx((0.1 + 0.1) / 0.1)
    assert push_excess([], ["a"]) is None and push_excess([ep(0.1, 1.0, 0.0)], ["a"]) is None


def test_push_contrast_arithmetic():
    """r_O − r_C by hand: P_O = 2.6, P = 20, G_O = 20, G = 200 over two epochs: r_O = 0.13, r_C = 17.4 / 180."""
    from bnmem.report.claims.claim7 import push_contrast, window

    def ep(acc, p_o, p, g_o=10.0, g=100.0):
        return {"outlier_acc": acc, "layers": {"a": {"outlier": p_o, "all": p}, "b": {"outlier": 99.0, "all": 1.0}},
                "grad_norm_outlier": g_o, "grad_norm_all": g}

    eps = [ep(0.1, 1.3, 10.0), ep(0.2, 1.3, 10.0), ep(0.9, 0.5, 10.0)]
    v = push_contrast(window(eps, False), ["a"])
    assert v["r_outlier"] == pytest.approx(0.13) and v["r_clean"] == pytest.approx(17.4 / 180)
    assert v["contrast"] == pytest.approx(0.13 - 17.4 / 180)
    assert push_contrast(eps[:1], ["a", "b"])["contrast"] == pytest.approx(100.3 / 10 - (11.0 - 100.3) / 90)
    # no clean gradient norm (every example an outlier) or no outlier norm: undefined
    assert push_contrast([ep(0.1, 1.0, 2.0, 10.0, 10.0)], ["a"]) is None and push_contrast([], ["a"]) is None


def _scaled_outlier_push(data: dict, add: float = 0.0, factor: float = 1.0) -> dict:
    """A copy of a gamma_sigma.json whose outliers push factor × P_O + add (per record of every layer), the
    clean examples' push unchanged (``all`` moves with the outliers')."""
    import copy

    out = copy.deepcopy(data)
    for rec in out["push"]["per_seed"].values():
        for e in rec["epochs"]:
            for lay in e["layers"].values():
                new = factor * lay["outlier"] + add
                lay["all"] += new - lay["outlier"]
                lay["outlier"] = new
    return out


def _claim7_value(datas: list[dict], stat: str | None = None) -> float:
    """The claim-7 row's decisive value through the report's evaluation, or (``stat``) a panel row's."""
    from synthetic_runs import make_cell, make_run

    from bnmem.names import GAMMA_SIGMA
    from bnmem.report.claims import claim7, evaluate_rule

    claim = evaluate_rule(claim7, make_run([make_cell("flip", r, {GAMMA_SIGMA: d}) for r, d in enumerate(datas)]))[0]
    ev = claim.deciding()[0]
    if stat is None:
        return ev.value
    return next(a for a in ev.analyses if a.name == stat).value


def test_claim_7_statistic_is_monotone_and_linear_in_the_outliers_push():
    """Issue 36: plan 4.0's ratio moved from −4.6 to −275 and back to −69 as one replicate's outlier push grew,
    because its denominator is what is left after the outliers' and the clean examples' pushes nearly cancel.
    The demo's pattern here: outliers push |γ| down by about the clean examples' push. Through the report's
    own evaluation, plan 5.0's contrast never decreases as the outliers' push grows (by a shift) and is linear
    in a scale factor on it; the twin (plan 4.0's ratio, the same records and code path) fails the same check."""
    from bnmem.report.claims import claim7

    # per model P = 10 (norm4), P_O = 1 + excess: the clean examples push ~ +19, the outliers ~ −9
    datas = [_push_data([-10.0 + 0.2 * r, -9.8 - 0.1 * r], 0.05, 0.0) for r in range(3)]
    # the outliers' push moves by −14..−6: P = 10 + shift passes through the near-cancellation (P ≈ 0)
    shifts = np.linspace(-14.0, -6.0, 40)
    primary = [_claim7_value([_scaled_outlier_push(d, add=a) for d in datas]) for a in shifts]
    twin = [_claim7_value([_scaled_outlier_push(d, add=a) for d in datas], claim7.V4) for a in shifts]
    assert np.all(np.diff(primary) >= -1e-12) and primary[-1] > primary[0]
    # the twin: plan 4.0's ratio decreases somewhere as the outliers' push grows
    assert np.any(np.diff(twin) < -1e-6)
    factors = np.array([0.5, 1.0, 1.2, 1.5, 1.8, 1.9, 2.5])
    lin = np.array([_claim7_value([_scaled_outlier_push(d, factor=f) for d in datas]) for f in factors])
    fit = np.polyfit(factors, lin, 1)
    assert np.allclose(np.polyval(fit, factors), lin, rtol=0, atol=1e-9 * max(1.0, np.abs(lin).max()))
    ratio = np.array([_claim7_value([_scaled_outlier_push(d, factor=f) for d in datas], claim7.V4)
                      for f in factors])
    rfit = np.polyfit(factors, ratio, 1)
    assert not np.allclose(np.polyval(rfit, factors), ratio, rtol=0, atol=1e-3 * np.abs(ratio).max())


def _push_data(excess: list[float], label_noise: float, ood: float, after: float = 0.0, v3: float = 0.05) -> dict:
    """gamma_sigma.json with own-loss push records: norm4 (not invariant) with the given before-fit excess per
    seed and ``after`` after the fit; norm1 scale-invariant with a huge outlier push that must not decide."""
    def epoch(acc, exc):
        return {"epoch": 1, "outlier_acc": acc, "grad_norm_outlier": 10.0, "grad_norm_all": 100.0,
                "layers": {"norm1": {"outlier": 42.0, "all": 1e-4, "outlier_rows": 42.0, "radial_cos": 1e-6},
                           "norm4": {"outlier": 1.0 + exc, "all": 10.0, "outlier_rows": 1.0, "radial_cos": 0.2}}}

    per_seed = {str(s): {"epochs": [epoch(0.1, e), epoch(0.9, after)], "v3_excess_share": v3 + 0.01 * s}
                for s, e in enumerate(excess)}
    final = {"norm1": {"n_channels": 6, "layer_type": "conv", "median_ratio": 1.2,
                       "per_seed": {str(s): {"median_ratio": 1.2, "frac_above_1": 1.0} for s in range(len(excess))}}}
    return {"final": {"running": final}, "conditions": {"norms": ["batch"], "label_noise": label_noise, "ood": ood},
            "push": {"version": 2, "outlier_fraction": 0.05, "per_seed": per_seed}}


def test_claim_7_flip_and_ood_disagree_the_split_is_visible():
    """Flip pushes γ up beyond its gradient share, OOD below it: the row is the least supportive (OOD,
    contradicted), the headline names both, the scale-invariant layer never decides, and plan 3.0's verdict is
    recorded as the previous one."""
    from synthetic_runs import make_cell, make_run

    from bnmem.analysis_plan import CONTRADICTED, REPRODUCED
    from bnmem.names import GAMMA_SIGMA
    from bnmem.report.claims import claim7
    from bnmem.report.forest import split_verdicts

    cells = [make_cell("flip", r, {GAMMA_SIGMA: _push_data([0.30 + 0.01 * r, 0.32], 0.05, 0.0, v3=-0.2 - 0.01 * r)})
             for r in range(3)]
    for r in range(3):
        c = make_cell("ood", r, {GAMMA_SIGMA: _push_data([-0.30 - 0.01 * r, -0.28], 0.0, 0.05, v3=0.2 + 0.01 * r)},
                      label_noise=0.0)
        c.conditions["ood"] = 0.05
        cells.append(c)
    claim = claim7.evaluate(make_run(cells))[0]
    flip, ood = claim.deciding()

    def contrast(exc):  # norm4 before the fit: P_O = 1 + exc, P = 10, G_O = 10, G = 100
        return (1 + exc) / 10 - (10 - 1 - exc) / 90

    expected = np.mean([np.mean([contrast(0.30 + 0.01 * r), contrast(0.32)]) for r in range(3)])
    assert flip.value == pytest.approx(expected) and flip.status == REPRODUCED
    ratio = next(a for a in flip.analyses if a.name == claim7.V4)  # plan 4.0's ratio: shown, not counted
    assert ratio.value == pytest.approx(np.mean([0.31, 0.315, 0.32])) and not ratio.valid
    assert ood.status == CONTRADICTED and claim.status == CONTRADICTED
    assert "deciding layers norm4" in flip.note and "scale-invariant (described, not deciding): norm1" in flip.note
    layer1 = next(a for a in flip.analyses if a.name.startswith("layer norm1"))
    assert not layer1.valid and "scale-invariant" in layer1.note
    split = split_verdicts(claim)
    assert "label noise 0.05" in split and "ood 0.05" in split.lower() and REPRODUCED in split
    # plan 6.0 kept 5.0's contrast: no previous verdict of its own (the report shows the current ones)
    assert claim.previous == []
    v3 = next(a for a in flip.analyses if a.name == claim7.V3)  # plan 3.0's statistic still shown
    assert v3.value == pytest.approx(np.mean([-0.195, -0.205, -0.215])) and not v3.valid
    from bnmem.report.summary import render_markdown

    assert f"- Claim 7: {split}" in render_markdown(make_run(cells), [claim], {})
    table = claim7.push_tables(make_run(cells))
    assert len(table) == 2 and [r[1] for r in table[0].rows] == ["yes", "no"]
    assert "not measured" in table[0].caption


def test_claim_7_not_run_when_only_invariant_layers_or_old_records():
    from synthetic_runs import make_cell, make_run

    from bnmem.analysis_plan import NOT_RUN
    from bnmem.names import GAMMA_SIGMA
    from bnmem.report.claims import claim7

    data = _push_data([0.1, 0.2], 0.05, 0.0)
    for rec in data["push"]["per_seed"].values():
        for e in rec["epochs"]:
            del e["layers"]["norm4"]
    claim = claim7.evaluate(make_run([make_cell("flip", r, {GAMMA_SIGMA: data}) for r in range(2)]))[0]
    assert claim.status == NOT_RUN and "scale-invariant" in claim.not_run_reason()
    old = _push_data([0.1, 0.2], 0.05, 0.0)
    old["push"].pop("version")
    claim = claim7.evaluate(make_run([make_cell("flip", r, {GAMMA_SIGMA: old}) for r in range(2)]))[0]
    assert claim.status == NOT_RUN and "own loss" in claim.not_run_reason()


def test_gamma_sigma_lens_records_the_pushes(tmp_path):
    from bnmem.config import TrainConfig
    from bnmem.lenses.gamma_sigma import GammaSigmaConfig, run_gamma_sigma

    cfg = GammaSigmaConfig(data=DataConfig(dataset="digits", label_noise=0.1, train_size=120), seeds=[0],
                           train=TrainConfig(epochs=2, lr=0.05), push_norm_sample=16)
    res = run_gamma_sigma(cfg, tmp_path / "gs", progress=False)
    push = res["push"]
    assert push["outlier_fraction"] == pytest.approx(0.1, abs=0.02) and push["version"] == 2
    rec = push["per_seed"]["0"]
    assert [e["epoch"] for e in rec["epochs"]] == [1, 2] and rec["v3_excess_share"] is not None
    e = rec["epochs"][0]
    assert set(e["layers"]) == {"norm1", "norm2", "norm3", "norm4"} and 0 <= e["outlier_acc"] <= 1
    assert 0 < e["grad_norm_outlier"] < e["grad_norm_all"]
    assert abs(e["layers"]["norm1"]["radial_cos"]) < 1e-3 < abs(e["layers"]["norm4"]["radial_cos"])
    from bnmem.report.build import build_report

    rep = build_report(tmp_path / "gs")
    html = rep.html.read_text(encoding="utf-8")
    assert "Claim 7 per BN layer" in html and "max |radial cos|" in html
    c7 = next(c for c in rep.claims if c.id == "7")
    assert "deciding layers norm4" in c7.evaluations[0].note
