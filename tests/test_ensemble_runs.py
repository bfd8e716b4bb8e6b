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

from digits_data import load64

TOL = 1e-9


@pytest.fixture(scope="module")
def ds64():
    return load64(DataConfig(dataset="digits", label_noise=0.05, seed=0, train_size=240, val_fraction=0.1))


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


def _every_member_sigma(monkeypatch) -> None:
    """The engine before it skipped the unregularized members: σ of every member whenever one is regularized."""
    from bnmem.train.ensemble_grouped import GroupedLeNet

    init = GroupedLeNet.__init__

    def every_member(self, *a, **k):
        init(self, *a, **k)
        self.penalized = None
        self.lam = float(self.lams.max()) if self.kind == "batch" else 0.0

    monkeypatch.setattr(GroupedLeNet, "__init__", every_member)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sigma_of_the_penalized_models_only_changes_no_bit(ds64, tmp_path, monkeypatch, dtype):
    """5 runs (λ = 0 twice, so 3 twins pad the network to 8): the σ rows of the 3 regularized runs alone give
    the same weights, buffers and histories (penalty activity included) as σ of every member."""
    ds = dataclasses.replace(ds64, x_train=ds64.x_train.to(dtype), x_test=ds64.x_test.to(dtype),
                             x_val=ds64.x_val.to(dtype))
    mc = ModelConfig(arch="lenet", norm="batch")
    runs = [*RUNS, (6, 0.0, 1.0)]
    args = ([_cfg(lam, tau) for _, lam, tau in runs], [s for s, _, _ in runs])

    def train(way: str) -> tuple[list, list[dict]]:
        dirs = [io.ensure_dir(tmp_path / way / f"run{k}") for k in range(len(runs))]
        hist = train_runs_together(mc, ds, *args, dirs, [_hook] * len(runs))
        return hist, [torch.load(d / "model.pt") for d in dirs]

    fast = train("penalized only")
    with monkeypatch.context() as m:
        _every_member_sigma(m)
        slow = train("every member")
    assert fast[0] == slow[0]
    assert any(r.get("extra_loss_share") for h in fast[0] for r in h)  # the penalty did act
    for a, b in zip(fast[1], slow[1]):
        assert a.keys() == b.keys() and all(torch.equal(a[n], b[n]) for n in a)


def test_only_regularized_real_members_get_sigma(ds64):
    from bnmem.train.ensemble_grouped import GroupedLeNet

    models = [seeded_model(ModelConfig(arch="lenet", norm="batch"), ds64, s).double() for s in range(8)]
    engine = GroupedLeNet(models, ds64.x_train, ds64.y_train, [0, 1, 0, 2, 0, 1, 2, 3], 1.0, twins=3)
    assert engine.penalized.tolist() == [1, 3]
    assert GroupedLeNet(models[:4], ds64.x_train, ds64.y_train, 1.0).penalized is None  # every member
    none = [seeded_model(ModelConfig(arch="lenet", norm="none"), ds64, s).double() for s in range(4)]
    assert GroupedLeNet(none, ds64.x_train, ds64.y_train, 1.0).lam == 0.0  # no BN: no regularizer


def _replicate(seed: int):
    """Replicate ``seed`` of the setting: another corruption and split of the same images (float64)."""
    return load64(DataConfig(dataset="digits", label_noise=0.05, seed=seed, train_size=240, val_fraction=0.1))


def test_replicates_train_together_each_on_its_own_data(ds64, tmp_path):
    """Runs of two replicates (different training sets) in one network: each as train_model on its own data
    (float64, 1e-9), and bitwise as when it trains beside runs of its own replicate only."""
    other = _replicate(1)
    assert not torch.equal(other.y_train, ds64.y_train) or not torch.equal(other.x_train, ds64.x_train)
    mc, cfg = ModelConfig(arch="lenet", norm="batch"), _cfg(1.0, 1.0)
    data = [ds64, other, ds64, other]
    seeds = [3, 3, 5, 8]
    got = train_runs_together(mc, ds64, [cfg] * 4, seeds, [None] * 4, [_hook] * 4, datasets=data)
    for k, (d, seed) in enumerate(zip(data, seeds)):
        ref = train_model(seeded_model(mc, d, seed).double(), d, cfg, seed, on_epoch=_hook, progress=False).history
        for e, (a, b) in enumerate(zip(ref, got[k])):
            assert a.keys() == b.keys()
            for key in a:
                _close(a[key], b[key], f"run {k} epoch {e + 1} {key}")
    assert got[0] != got[1]  # same seed, other data: another run
    own = train_runs_together(mc, ds64, [cfg] * 2, [3, 5], [None] * 2, [_hook] * 2)
    assert own == [got[0], got[2]]
    with pytest.raises(ValueError, match="datasets"):
        train_runs_together(mc, ds64, [cfg] * 2, [3, 5], [None] * 2, [None] * 2, datasets=[ds64])
    with pytest.raises(ValueError, match="dtype"):
        train_runs_together(mc, ds64, [cfg] * 2, [3, 5], [None] * 2, [None] * 2,
                            datasets=[ds64, load_dataset(DataConfig(dataset="digits", seed=1, train_size=240))])
