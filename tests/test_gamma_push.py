"""Per-example pushes on BN's γ (claim 7) against autograd in float64, and the lens's record of them."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from bnmem.config import DataConfig, ModelConfig
from bnmem.data import load_dataset
from bnmem.measure.gamma_push import gamma_pushes, outlier_excess_share
from bnmem.measure.predict import bn_query_mode
from bnmem.models.norms import batchnorm_layers


@pytest.fixture(scope="module")
def setup():
    from bnmem.train.trainer import seeded_model

    ds = load_dataset(DataConfig(dataset="digits", label_noise=0.1, train_size=64, seed=0))
    model = seeded_model(ModelConfig(arch="lenet", norm="batch"), ds, 0).double()
    with torch.no_grad():  # γ of both signs, so the sign convention is exercised
        for _, m in batchnorm_layers(model):
            m.weight.copy_(torch.linspace(-1.5, 1.5, m.num_features, dtype=torch.float64))
    return ds, model


def _grad(model, x, y, weight_idx=None):
    """∂(Σ_i ℓ_i)/∂γ per BN layer, batch statistics, over one batch (optionally only some examples' losses)."""
    with bn_query_mode(model, "batch"):
        logits = model(x)
        losses = F.cross_entropy(logits, y, reduction="none")
        loss = losses.sum() if weight_idx is None else losses[weight_idx].sum()
        layers = batchnorm_layers(model)
        grads = torch.autograd.grad(loss, [m.weight for _, m in layers])
    return {n: g for (n, _), g in zip(layers, grads)}


def test_all_examples_sum_to_the_gamma_gradient(setup):
    """Σ over examples of the per-example terms is the gradient of the summed loss (one batch = all)."""
    ds, model = setup
    x, y = ds.x_train.double(), ds.y_train
    state = {k: v.clone() for k, v in model.state_dict().items()}
    pushes = gamma_pushes(model, x, y, ds.is_outlier, batch_size=len(x))
    for k, v in model.state_dict().items():  # weights and running statistics untouched
        assert torch.equal(v, state[k]), k
    grad = _grad(model, x[torch.as_tensor(np.random.default_rng([0, 0x7A11]).permutation(len(x)))],
                 y[torch.as_tensor(np.random.default_rng([0, 0x7A11]).permutation(len(x)))])
    for (n, m) in batchnorm_layers(model):
        expect = (-torch.sign(m.weight.detach()) * grad[n]).numpy()
        np.testing.assert_allclose(pushes[n]["all"], expect, rtol=1e-9, atol=1e-12)


def test_last_layer_outlier_terms_are_their_own_gradient(setup):
    """After the last BN layer nothing couples examples, so the outliers' terms there are the gradient of the
    outliers' own losses (batch statistics fixed by the whole batch)."""
    ds, model = setup
    perm = torch.as_tensor(np.random.default_rng([0, 0x7A11]).permutation(ds.n_train))
    x, y = ds.x_train.double()[perm], ds.y_train[perm]
    outl = torch.as_tensor(ds.is_outlier)[perm]
    pushes = gamma_pushes(model, ds.x_train.double(), ds.y_train, ds.is_outlier, batch_size=ds.n_train)
    last, m = batchnorm_layers(model)[-1]
    grad = _grad(model, x, y, weight_idx=torch.nonzero(outl).ravel())
    np.testing.assert_allclose(pushes[last]["outlier"], (-torch.sign(m.weight.detach()) * grad[last]).numpy(),
                               rtol=1e-9, atol=1e-12)
    assert ds.is_outlier.sum() > 0


def test_excess_share_statistic():
    pushes = [{"a": {"outlier": [1.0, 2.0, -1.0], "all": [4.0, 4.0, 2.0]}},
              {"a": {"outlier": [1.0, 0.0, 0.0], "all": [4.0, 4.0, -5.0]}}]
    stat = outlier_excess_share(pushes, 0.1)
    # summed: outlier [2, 2, -1], all [8, 8, -3]; pushed up: first two, shares 0.25 and 0.25
    assert stat == {"excess_share": pytest.approx(0.15), "channels": 3, "channels_pushed_up": 2}
    assert outlier_excess_share([], 0.1) is None and outlier_excess_share(pushes, 0.0) is None


def test_claim_7_decides_on_the_recorded_pushes_with_replicates_as_the_unit():
    from synthetic_runs import make_cell, make_run

    from bnmem.analysis_plan import LENS_GAMMA_SIGMA, REPRODUCED
    from bnmem.report.claims import claim7

    def data(shares, label_noise):
        final = {"norm1": {"n_channels": 2, "layer_type": "conv", "median_ratio": 1.2,
                           "per_seed": {str(s): {"median_ratio": 1.2 + 0.1 * label_noise, "frac_above_1": 1.0}
                                        for s in range(len(shares))}}}
        return {"final": {"running": final}, "conditions": {"norms": ["batch"], "label_noise": label_noise},
                "push": {"outlier_fraction": 0.05, "per_seed": {str(s): {"excess_share": v}
                                                                 for s, v in enumerate(shares)}}}

    cells = [make_cell("noisy", r, {LENS_GAMMA_SIGMA: data([0.10 + 0.01 * r, 0.12], 0.05)}) for r in range(3)]
    cells += [make_cell("clean", r, {LENS_GAMMA_SIGMA: data([], 0.0)}, label_noise=0.0) for r in range(3)]
    claim = claim7.evaluate(make_run(cells))[0]
    d = claim.decisive
    assert d.value == pytest.approx(np.mean([0.11, 0.115, 0.12])) and "over 3 paired replicates" in d.method
    assert claim.status == REPRODUCED and [a.name for a in d.coverdicts] == ["|γ|/σ corrupted − clean, paired by "
                                                                             "replicate"]


def test_gamma_sigma_lens_records_the_pushes(tmp_path):
    from bnmem.config import TrainConfig
    from bnmem.lenses.gamma_sigma import GammaSigmaConfig, run_gamma_sigma

    cfg = GammaSigmaConfig(data=DataConfig(dataset="digits", label_noise=0.1, train_size=120), seeds=[0],
                           train=TrainConfig(epochs=2, lr=0.05))
    res = run_gamma_sigma(cfg, tmp_path / "gs", progress=False)
    push = res["push"]
    assert push["outlier_fraction"] == pytest.approx(0.1, abs=0.02)
    rec = push["per_seed"]["0"]
    assert rec["epochs"] == [1, 2] and rec["channels"] == 226 and rec["excess_share"] is not None
