"""Runs trained together (the grouped engine with per-epoch hooks) against their oracle: each run trained
alone by the plain ``train_model`` with the same hook.

float64 over 2 epochs: every parameter and buffer within 1e-9 relative (running variances reach 1e4), every
history value and hook measurement within 1e-9 (the two ways differ only in summation order inside kernels);
accuracies, epochs and learning rates exactly. One run per λ
(0, 1, 10) and two τ, so the per-model regularizer strengths and their activity records are exercised.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from bnmem import io
from bnmem.config import DataConfig, ModelConfig, TrainConfig
from bnmem.data import load_dataset
from bnmem.train import seeded_model, train_model
from bnmem.train.ensemble_runs import can_train_together, train_runs_together

TOL = 1e-9


@pytest.fixture(scope="module")
def ds64():
    ds = load_dataset(DataConfig(dataset="digits", label_noise=0.05, seed=0, train_size=240, val_fraction=0.1))
    return dataclasses.replace(ds, x_train=ds.x_train.double(), x_test=ds.x_test.double(),
                               x_val=ds.x_val.double())


def _hook(epoch: int, model) -> dict:
    """A measurement that reads the trained weights (γ of the first BN layer, or a conv weight norm)."""
    w = model.norm1.weight if hasattr(model.norm1, "weight") else model.conv1.weight
    return {"probe": float(w.detach().double().abs().sum()), "probe_epoch": epoch}


RUNS = [(3, 0.0, 1.0), (5, 1.0, 1.0), (3, 10.0, 1.0), (8, 1.0, 0.5)]  # (seed, λ, τ)


def _cfg(lam: float, tau: float) -> TrainConfig:
    return TrainConfig(epochs=2, batch_size=32, lr=0.05, momentum=0.9, weight_decay=5e-4, gs_reg=lam, gs_tau=tau,
                       schedule="cosine")


def _close(a, b, where: str) -> None:
    if isinstance(a, float) and isinstance(b, float):
        assert math.isclose(a, b, rel_tol=0, abs_tol=TOL), f"{where}: {a} vs {b}"
    else:
        assert a == b, f"{where}: {a} vs {b}"


@pytest.mark.parametrize("norm", ["batch", "none"])
def test_float64_runs_together_match_one_by_one(ds64, tmp_path, norm):
    mc = ModelConfig(arch="lenet", norm=norm)
    assert can_train_together(mc, ds64)
    runs = RUNS if norm == "batch" else [(s, 0.0, t) for s, _, t in RUNS[:2]]
    cfgs = [_cfg(lam, tau) for _, lam, tau in runs]
    seeds = [s for s, _, _ in runs]
    dirs = [tmp_path / f"together{k}" for k in range(len(runs))]
    got = train_runs_together(mc, ds64, cfgs, seeds, dirs, [_hook] * len(runs))
    for k, (seed, cfg) in enumerate(zip(seeds, cfgs)):
        ref = train_model(seeded_model(mc, ds64, seed).double(), ds64, cfg, seed, run_dir=tmp_path / f"alone{k}",
                          on_epoch=_hook, progress=False)
        assert len(got[k]) == len(ref.history) == cfg.epochs
        for e, (a, b) in enumerate(zip(ref.history, got[k])):
            assert a.keys() == b.keys(), (k, e, set(a) ^ set(b))
            for key in a:
                _close(a[key], b[key], f"run {k} epoch {e + 1} {key}")
        assert io.is_done(dirs[k]) and io.read_json(dirs[k] / "history.json") == got[k]
        saved = io.load_torch(dirs[k] / "model.pt")
        for name, t in ref.model.state_dict().items():
            if t.is_floating_point():
                # relative to the value's size: running variances reach 1e4 at λ = 10
                assert ((t - saved[name]).abs() / t.abs().clamp(min=1)).max().item() <= TOL, (k, name)
            else:
                assert torch.equal(t, saved[name]), (k, name)
    if norm == "batch":  # the penalty's activity is recorded for the regularized runs only
        assert "extra_loss_share" not in got[0][0] and got[1][0]["extra_loss_share"] > 0


def test_a_run_does_not_depend_on_the_runs_beside_it(ds64):
    """Bitwise: run (5, λ=1) alone and beside three others."""
    mc = ModelConfig(arch="lenet", norm="batch")
    alone = train_runs_together(mc, ds64, [_cfg(1.0, 1.0)], [5], [None], [_hook])
    beside = train_runs_together(mc, ds64, [_cfg(lam, tau) for _, lam, tau in RUNS], [s for s, _, _ in RUNS],
                                 [None] * 4, [_hook] * 4)
    assert alone[0] == beside[1]


def test_recipes_may_differ_only_in_the_regularizer(ds64):
    mc = ModelConfig(arch="lenet", norm="batch")
    with pytest.raises(ValueError, match="may differ only in gs_reg, gs_tau"):
        train_runs_together(mc, ds64, [_cfg(1.0, 1.0), _cfg(1.0, 1.0).model_copy(update={"lr": 0.1})], [0, 1],
                            [None, None], [None, None])
    with pytest.raises(ValueError, match="as many"):
        train_runs_together(mc, ds64, [_cfg(1.0, 1.0)], [0, 1], [None], [None])
