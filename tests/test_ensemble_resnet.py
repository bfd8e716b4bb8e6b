"""ResNets through the grouped engine (:class:`bnmem.train.ensemble_grouped_resnet.GroupedResNet`) against the
oracle: each model trained alone by the plain ``train_model``.

float64: every parameter, BN running statistic and eval logit within 1e-9 (the two ways differ only in the
summation order inside the kernels: grouped vs dense convolutions, BN over a [B·H·W, K·C] view), as for the
LeNet engine (tests/test_ensemble.py, whose helpers these tests reuse). The runs-together path
(``train_runs_together``, what the gamma-sigma lens and the shared runs use) is checked with gamma-sigma's own
per-epoch hook (γ/σ statistics and the per-example γ pushes of claim 7) on the trained models: every history
value within 1e-9. float32: a model's result is bitwise the same whichever models share its network.
"""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace

import pytest
import torch

from bnmem.config import DataConfig, ModelConfig, TrainConfig
from bnmem.data import load_dataset
from bnmem.train import seeded_model, train_model
from bnmem.train.ensemble import _max_chunk, grouped_engine, resolve_method, train_models
from bnmem.train.ensemble_grouped import GroupedLeNet
from bnmem.train.ensemble_grouped_resnet import GroupedResNet
from bnmem.train.ensemble_runs import can_train_together, train_runs_together
from test_ensemble import _assert_bitwise, _assert_match, _in_sets, _oracle, _sgd

SEEDS = [3, 5, 8]
# 40, 35 and 48 examples: 2 or 3 full batches of 16 per epoch (the skipped-step masking is exercised).
SIZES = (40, 35, 48)


@pytest.mark.parametrize("norm", ["batch", "none", "group"])
def test_float64_grouped_resnet20_matches_one_by_one(ds64, norm):
    """Two epochs with momentum, weight decay, a cosine schedule and (BN) the γ/σ regularizer on all 19 BN
    layers plus the two projections' norms."""
    mc, cfg, idx = ModelConfig(arch="resnet20", norm=norm), _sgd(), _in_sets(SIZES)
    models = train_models(mc, ds64, cfg, SEEDS, idx, method="grouped", progress=False)
    _assert_match(_oracle(mc, ds64, cfg, SEEDS, idx), models, ds64, 1e-9)


def test_float64_grouped_resnet20_adam(ds64):
    mc, cfg, idx = ModelConfig(arch="resnet20", norm="batch"), _sgd(epochs=1), _in_sets(SIZES)
    cfg = cfg.model_copy(update={"optimizer": "adam", "lr": 1e-3, "norm_weight_decay": 0.0})
    models = train_models(mc, ds64, cfg, SEEDS, idx, method="grouped", progress=False)
    # Adam's eps-sized noise on BN-preceded parameters (tests/test_ensemble.py's docstring): ResNet convs have no
    # bias, so only the running means carry it.
    _assert_match(_oracle(mc, ds64, cfg, SEEDS, idx), models, ds64, 1e-9, loose=("running_mean", "logits"))


@pytest.mark.parametrize("norm", ["batch", "none"])
def test_float32_resnet_result_does_not_depend_on_the_other_models(ds, norm):
    """Networks of 1 (padded to 2), 3 (padded to 4) and 5 (padded to 6) models give the same bits."""
    mc, cfg = ModelConfig(arch="resnet20", norm=norm), _sgd(epochs=1)
    seeds, idx = list(range(5)), _in_sets((40, 35, 48, 33, 44), seed=1)
    five = train_models(mc, ds, cfg, seeds, idx, method="grouped", progress=False)
    three = train_models(mc, ds, cfg, seeds[2:], idx[2:], method="grouped", progress=False)
    _assert_bitwise(five[2:], three)
    one = train_models(mc, ds, cfg, seeds[4:], idx[4:], method="grouped", progress=False)
    _assert_bitwise(five[4:], one)


def test_engine_choice_and_chunks(ds):
    resnet = seeded_model(ModelConfig(arch="resnet20", norm="batch"), ds, 0)
    assert grouped_engine(resnet) is GroupedResNet
    assert grouped_engine(seeded_model(ModelConfig(arch="lenet", norm="batch"), ds, 0)) is GroupedLeNet
    assert grouped_engine(seeded_model(ModelConfig(arch="mlp", norm="batch"), ds, 0)) is None
    # auto keeps the one-by-one loop for ResNets on the CPU (measured no faster grouped); grouped on request
    assert resolve_method("auto", resnet, "cpu") == "sequential" and resolve_method("grouped", resnet) == "grouped"
    # the lenses: ResNets together on accelerators only (on the CPU no faster; one by one keeps their bits)
    assert can_train_together(ModelConfig(arch="resnet20", norm="batch"), ds, device="cuda")
    assert not can_train_together(ModelConfig(arch="resnet20", norm="batch"), ds, device="cpu")
    assert can_train_together(ModelConfig(arch="lenet", norm="batch"), ds, device="cpu")
    assert not can_train_together(ModelConfig(arch="mlp", norm="batch"), ds)
    cpu = torch.device("cpu")
    cfg = TrainConfig(batch_size=64)
    assert _max_chunk(cpu, resnet, (1, 8, 8), cfg, torch.float32, "grouped", GroupedResNet) == 24  # digits: full
    cifar = seeded_model(ModelConfig(arch="resnet20", norm="batch"), SimpleNamespace(input_shape=(3, 32, 32),
                                                                                   num_classes=10), 0)
    chunk = _max_chunk(cpu, cifar, (3, 32, 32), TrainConfig(batch_size=128), torch.float32, "grouped",
                       GroupedResNet)
    assert 2 <= chunk < 24 and chunk % GroupedResNet.multiple == 0  # CIFAR's activations: a few models


@pytest.fixture(scope="module")
def small64():
    ds = load_dataset(DataConfig(dataset="digits", label_noise=0.1, seed=0, train_size=100, val_fraction=0.1))
    # 100 test examples: the trainer's per-epoch test accuracy in float64 ResNet-20 is most of the time otherwise
    return dataclasses.replace(ds, x_train=ds.x_train.double(), x_test=ds.x_test[:100].double(),
                               y_test=ds.y_test[:100], x_val=ds.x_val.double())


@pytest.mark.slow
def test_float64_resnet_runs_together_with_the_gamma_sigma_hook(small64, tmp_path):
    """What the gamma-sigma lens trains on ResNet-20: its seeds together, its hook (γ/σ per layer, the
    outliers' and everyone's push on every γ, the gradient norms) on each run's model at the measured epoch
    (the last of two: float64 convolutions are slow, and the pushes take a batched backward per row)."""
    from bnmem.lenses.gamma_sigma import GammaSigmaConfig, measure_hook

    cfg = GammaSigmaConfig(data=DataConfig(dataset="digits", label_noise=0.1, seed=0, train_size=100,
                                           val_fraction=0.1), arch="resnet20", seeds=[0, 1],
                           push_norm_sample=4, every=2,
                           train=TrainConfig(epochs=2, batch_size=32, lr=0.05, momentum=0.9, weight_decay=5e-4))
    mc = cfg.model("batch")
    got = train_runs_together(mc, small64, [cfg.train] * 2, cfg.seeds, [tmp_path / "a", tmp_path / "b"],
                              [measure_hook(cfg, small64, None, s) for s in cfg.seeds])
    for k, seed in enumerate(cfg.seeds):
        ref = train_model(seeded_model(mc, small64, seed).double(), small64, cfg.train, seed,
                          on_epoch=measure_hook(cfg, small64, None, seed), progress=False).history
        assert got[k][-1]["gamma_push"]["layers"]  # the pushes were measured
        _assert_tree_close(ref, got[k], f"seed {seed}")


def _assert_tree_close(a, b, where: str, tol: float = 1e-9) -> None:
    """Nested records equal, floats within ``tol`` relative to max(1, |value|)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), (where, set(a) ^ set(b))
        for key in a:
            _assert_tree_close(a[key], b[key], f"{where}.{key}", tol)
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_tree_close(x, y, f"{where}[{i}]", tol)
    elif isinstance(a, float) and isinstance(b, float):
        assert math.isclose(a, b, rel_tol=tol, abs_tol=tol), f"{where}: {a} vs {b}"
    else:
        assert a == b, f"{where}: {a} vs {b}"


def test_unsupported_resnets_are_refused(ds):
    net = seeded_model(ModelConfig(arch="resnet20", norm="batch"), ds, 0)
    net.norm1.momentum = None
    assert grouped_engine(net) is None
    with pytest.raises(ValueError, match="ResNets"):
        GroupedResNet([net], ds.x_train, ds.y_train)
